//! The tuner turns hardware into a policy, and is where everything that
//! measures GPUs lives: it times every candidate collective algorithm on the
//! user's GPUs ([`sweep`]), derives size bands from the evidence with
//! statistics ([`fit`]), writes them as a `tuned/*.toml` file
//! ([`tuned_file`]), judges a file's regret against fresh measurements
//! ([`verify`]), and benchmarks the algorithms against NCCL (`tuner bench`).
//!
//! Layers, bottom to top:
//! - [`harness`] (feature `gpu`): timing with CUDA events, validation against
//!   an f64 host reference and one thread per rank, all through the public
//!   communicator of `kernels` (plus `kernels::raw` for device queries);
//! - [`backend`]: where timings come from, behind one trait: `gpu` (the
//!   harness) or `synthetic` (a seeded latency model, for machines without a
//!   GPU and for the tests);
//! - [`grid`], [`candidates`], [`sweep`]: which sizes to time, how often, and
//!   the resulting [`evidence`];
//! - [`stats`], [`fit`], [`tuned_file`], [`tuned_folder`], [`verify`]: bands
//!   from evidence, the TOML (through `tuned_schema`) merged into the file
//!   and folder it goes to, and the regret judgement; [`memory`] and
//!   [`budgeted`]: a memory budget per rank as `kernels` applies it, and the
//!   fit within one with what it costs;
//! - [`tables`] (the compiled tables or tuned files, answered by one set of
//!   rules), [`show`], [`explain`], [`plot`], [`format`](mod@format): reading
//!   tables and evidence;
//! - [`commands`]: one function per subcommand (its arguments, its output);
//!   the binary (`src/main.rs`) only parses the command line and calls them.
//!
//! Every report is one type that renders the console text and derives
//! `Serialize` for `--json` (the vocabulary serialises by name, through
//! `tuned_schema`'s `serde` feature).
//!
//! Without a GPU, a recorded sweep can be re-fitted into its table:
//!
//! ```
//! use std::path::Path;
//!
//! let path = Path::new("examples/h200-loopback/sm90-loopback.evidence.json");
//! let evidence = tuner::evidence::Evidence::load(path).unwrap();
//! let result = tuner::fit::fit(&evidence, &tuner::fit::FitSettings::default());
//! let doc = tuner::tuned_file::build_document(&evidence, &result, None, Vec::new());
//! let toml = tuned_schema::write::to_toml_string(&doc);
//! assert!(toml.contains("[[table]]"));
//! ```

pub mod backend;
pub mod budgeted;
pub mod candidates;
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
pub mod hidden;
mod json_layout;
pub mod logging;
pub mod memory;
pub mod observe;
pub mod plot;
mod progress;
pub mod show;
pub mod stats;
pub mod sweep;
pub mod tables;
pub mod tuned_file;
pub mod tuned_folder;
pub mod verify;

pub use clock::today_utc;

/// Keeps NVLink multicast off in the tuner's process (`NCCL_NVLS_ENABLE=0`,
/// `kernels::raw::keep_multicast_off`): it can take a shared host's GPUs out
/// of service. Without the `gpu` feature the tuner runs no NCCL, so there is
/// nothing to keep off.
///
/// # Safety
/// Called first thing in `main`, before any thread exists (it may write the
/// environment).
pub unsafe fn keep_multicast_off() -> Result<(), String> {
    #[cfg(feature = "gpu")]
    {
        // SAFETY: the caller's promise.
        unsafe { kernels::raw::keep_multicast_off() }.map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "gpu"))]
    {
        Ok(())
    }
}
