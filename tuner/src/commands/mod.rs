//! One function per subcommand, with its command-line arguments (clap derive).
//! `main.rs` only parses and dispatches; everything a command does is here, so
//! it can be tested without a process.

use std::fmt;

mod args;
mod bench;
mod explain;
mod fit;
mod plot;
mod show;
mod sweep;
mod verify;

pub use args::{BackendArgs, FitArgs, KeyArgs};
pub use bench::{BenchArgs, bench};
pub use explain::{ExplainArgs, explain};
pub use fit::{FitCommandArgs, fit};
pub use plot::{PlotArgs, plot};
pub use show::{ShowArgs, show};
pub use sweep::{SweepArgs, sweep};
pub use verify::{VerifyArgs, verify};

/// How a command that ran ended; the process exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// `verify`: a key's regret is above its limit.
    RegretTooHigh = 2,
    /// `verify`: no key failed, but some could not be told from their limits
    /// at the measured noise.
    Inconclusive = 3,
    /// Ctrl-C: what was measured was written.
    Interrupted = 130,
}

/// Why a command could not do its job. Printed as one line: `tuner: {self}`;
/// the exit status is 1.
#[derive(Debug)]
pub enum Error {
    /// There is no GPU to measure on; the reason is what failed.
    NoGpu(String),
    /// An argument or input file is wrong.
    Input(String),
    /// Measuring or writing failed.
    Failed(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoGpu(reason) => write!(
                f,
                "no CUDA GPU found ({reason}); on this machine you can run `tuner show`, `tuner explain`, `tuner fit`, `tuner plot` (or measure the synthetic model with `--synthetic`)"
            ),
            Error::Input(message) | Error::Failed(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Failed(e.to_string())
    }
}

/// Diagnostics from `tuned_schema` as one message, one per line.
fn diagnostics(intro: &str, list: &[tuned_schema::Diagnostic]) -> String {
    let mut message = intro.to_string();
    for d in list {
        message.push_str("\n  ");
        message.push_str(&d.to_string());
    }
    message
}

/// Writes `text` to `path`, naming the path if that fails.
fn write_file(path: &std::path::Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text)
        .map_err(|e| Error::Failed(format!("cannot write {}: {e}", path.display())))
}
