//! The tuner turns hardware into a policy, and is where everything that
//! measures GPUs lives: it times every candidate collective algorithm on the
//! user's GPUs ([`sweep`]), derives size bands from the evidence with
//! statistics ([`fit`]), writes them as a `tuned/*.toml` file
//! ([`write`](mod@write)), judges a file's regret against fresh measurements
//! ([`verify`]), and benchmarks the algorithms against NCCL (`tuner bench`).
//!
//! Layers, bottom to top:
//! - [`harness`] (feature `gpu`): timing with CUDA events, validation against
//!   an f64 host reference and one thread per rank, all through the public
//!   communicator of `kernels` (plus `kernels::raw` for device queries);
//! - [`backend`]: where timings come from, behind one trait: `gpu` (the
//!   harness) or `synthetic` (a seeded latency model, for machines without a
//!   GPU and for the tests);
//! - [`grid`], [`measure`], [`sweep`]: which sizes to time, how often, and the
//!   resulting [`evidence`];
//! - [`stats`], [`fit`], [`write`](mod@write), [`verify`]: bands from evidence, the
//!   TOML (through `tuned_schema`), and the regret judgement;
//! - [`tables`] (the compiled tables or tuned files, answered by one set of
//!   rules), [`show`], [`explain`], [`plot`], [`format`](mod@format): reading
//!   tables and evidence;
//! - [`commands`]: one function per subcommand; the binary (`src/main.rs`)
//!   only parses the command line and calls them.
//!
//! Without a GPU, a recorded sweep can be re-fitted into its table:
//!
//! ```
//! use std::path::Path;
//!
//! let path = Path::new("examples/h200-loopback/sm90-loopback.evidence.json");
//! let evidence = tuner::evidence::Evidence::load(path).unwrap();
//! let result = tuner::fit::fit(&evidence, &tuner::fit::FitSettings::default());
//! let doc = tuner::write::build_document(&evidence, &result, None, Vec::new());
//! let toml = tuner::write::render(&doc);
//! assert!(toml.contains("[[table]]"));
//! ```

pub mod backend;
mod clock;
#[allow(
    rustdoc::invalid_html_tags,
    reason = "the arguments' doc comments are the --help text, where <arch>-<link> is literal"
)]
pub mod commands;
pub mod evidence;
pub mod explain;
pub mod fit;
pub mod format;
pub mod grid;
#[cfg(feature = "gpu")]
pub mod harness;
mod json_layout;
pub mod logging;
pub mod measure;
pub mod named;
pub mod observe;
pub mod plot;
mod progress;
pub mod show;
pub mod stats;
pub mod sweep;
pub mod tables;
pub mod verify;
pub mod write;

pub use clock::today_utc;
