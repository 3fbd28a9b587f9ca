//! One function per subcommand, with its command-line arguments (clap derive).
//! `main.rs` only parses and dispatches; everything a command does is here, so
//! it can be tested without a process.

use std::fmt;

pub(crate) mod args;
mod bench;
mod explain;
mod fit;
mod plot;
mod show;
mod sweep;
mod verify;

pub use args::{BackendArgs, FitArgs, KeyArgs};
pub use bench::{BenchArgs, bench, bench_with_stall};
pub use explain::{ExplainArgs, explain};
pub use fit::{FitCommandArgs, fit};
pub use plot::{PlotArgs, plot};
pub use show::{ShowArgs, show};
pub use sweep::{SweepArgs, sweep};
pub use verify::{VerifyArgs, verify};

/// How a command that ran ended; the process exit status. Together with
/// [`Error::exit_code`] the statuses are: 0 done, 1 an error, 2 a usage error
/// (as clap's own), 3 `verify` judged a table FAIL, 130 interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// `verify`: a key's regret is above its limit. Not 2, which says the
    /// command line was wrong: a script must be able to tell a table that
    /// fails from a typo.
    RegretTooHigh = 3,
    /// `verify`: no key failed, but some could not be told from their limits
    /// at the measured noise.
    Inconclusive = 4,
    /// Ctrl-C: what was measured was written.
    Interrupted = 130,
}

/// Why a command could not do its job. Printed as `tuner: {self}` (one line,
/// plus one indented line per problem of a tuned file); the exit status is
/// [`Error::exit_code`].
#[derive(Debug)]
pub enum Error {
    /// The command line is wrong: a value out of range, flags that do not go
    /// together, a destination the command refuses. Exit status 2, as for the
    /// errors clap finds itself.
    Usage(String),
    /// There is no GPU to measure on; the reason is what failed.
    NoGpu(String),
    /// An input file is wrong (unreadable, does not parse, has nothing usable).
    Input(String),
    /// Measuring or writing failed.
    Failed(String),
}

impl Error {
    /// 2 for usage errors, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoGpu(reason) => write!(
                f,
                "no CUDA GPU found ({reason}); on this machine you can run `tuner show`, `tuner explain`, `tuner fit`, `tuner plot` (or measure the synthetic model with `--synthetic`)"
            ),
            Error::Usage(message) | Error::Input(message) | Error::Failed(message) => {
                f.write_str(message)
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Failed(e.to_string())
    }
}

/// The tables a command's `TABLES` argument names (a tuned file or a folder
/// of them), or without one the tables compiled into policy.
fn table_set(path: Option<&std::path::Path>) -> Result<crate::tables::TableSet, Error> {
    path.map_or(Ok(crate::tables::TableSet::Compiled), |path| {
        crate::tables::TableSet::load(path).map_err(Error::Input)
    })
}

/// The tuned file at `path`, parsed and checked on its own; a file that
/// cannot be read or is not valid is an input error naming it.
fn read_tuned_file(path: &std::path::Path) -> Result<tuned_schema::Document, Error> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Input(format!("cannot read {shown}: {e}")))?;
    tuned_schema::validate::parse_document(&shown, &text).map_err(|d| {
        Error::Input(format!(
            "{shown} is not a valid tuned file:{}",
            crate::format::diagnostics(&d)
        ))
    })
}

/// Writes `text` to `path`, naming the path if that fails.
fn write_file(path: &std::path::Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text)
        .map_err(|e| Error::Failed(format!("cannot write {}: {e}", path.display())))
}
