//! The tuner turns hardware into a policy: it measures every candidate
//! collective algorithm on the user's GPUs ([`sweep`]), derives size bands from
//! the evidence with statistics ([`fit`]), writes them as a `tuned/*.toml` file
//! ([`write`]), and checks a file against fresh measurements ([`verify`]).
//!
//! The binary (`src/main.rs`) only parses the command line; every command is a
//! function of [`commands`].

pub mod backend;
mod clock;
pub mod commands;
pub mod evidence;
pub mod explain;
pub mod fit;
pub mod format;
pub mod grid;
#[cfg(feature = "gpu")]
pub mod harness;
mod json_layout;
pub mod measure;
pub mod named;
pub mod observe;
pub mod plot;
mod progress;
pub mod show;
pub mod stats;
pub mod sweep;
pub mod verify;
pub mod write;

pub use clock::today_utc;
