//! The one error type of this crate.

use std::fmt;
use std::time::Duration;

use crate::vocab::{Algo, Arch, Collective, DType};

/// Everything that can go wrong in `kernels`, with enough context to act on.
///
/// Cloneable: once a rank has failed, every later call of it returns a clone
/// of its first fault.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// A shared library could not be loaded. `fix` says how to make it loadable.
    MissingLibrary {
        /// The library and what it is, e.g. "libnccl.so.2 (NCCL)".
        lib: &'static str,
        /// What to install, or which path to add to `LD_LIBRARY_PATH`.
        fix: String,
    },
    /// A CUDA driver call failed.
    Driver {
        /// The step that failed, e.g. "recording an event to drain the stream".
        what: String,
        /// The driver's error name, with its description where the driver
        /// gives one, e.g. "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
        code: String,
    },
    /// NVRTC could not compile the kernels for `arch`; `log` is the compiler log.
    Nvrtc {
        /// The architecture compiled for.
        arch: Arch,
        /// The NVRTC call that failed and its result, or what NVRTC's output
        /// lacked.
        message: String,
        /// NVRTC's log (empty when the failure came before compiling).
        log: String,
    },
    /// An NCCL call failed.
    Nccl {
        /// The NCCL call that failed, e.g. "ncclCommWindowRegister".
        what: String,
        /// NCCL's result code, e.g. "ncclSystemError", with its description
        /// where NCCL gives one.
        code: String,
    },
    /// A rank's kernel waited longer than the configured timeout for a peer
    /// (device-side), or its stream did not drain in time (host-side). The
    /// message names the `Options` bound to raise when a healthy peer can be
    /// that late.
    Timeout {
        /// The rank that stopped waiting.
        rank: usize,
        /// The rank it was waiting for, when the device knows it.
        peer: Option<usize>,
        /// Which kernel and where: e.g. "one_shot_pull barrier 1".
        during: String,
        /// The bound that ran out.
        timeout: Duration,
    },
    /// Arguments that do not fit together (lengths, dtypes, devices): reported
    /// before anything is launched.
    Mismatch(String),
    /// A request this build or this machine cannot serve.
    Unsupported(String),
    /// A forced algorithm would decline this call (the tuner asks for this
    /// instead of silently timing the fallback).
    Declined {
        /// The collective called.
        collective: Collective,
        /// The algorithm forced.
        algo: Algo,
        /// The element type of the call.
        dtype: DType,
        /// Bytes of the call's output.
        bytes: u64,
        /// Why it declines ([`Decline::describe`](crate::Decline::describe)).
        reason: String,
    },
    /// `COLLTUNE_ALGO` (or another policy override) is malformed.
    Policy(String),
    /// A result did not match the host reference (the tuner's measuring
    /// harness checks results against one).
    Verification(String),
    /// This rank stopped because another rank of a concurrent run failed first
    /// (that rank's error is the one to read).
    PeerFailed {
        /// The rank that stopped.
        rank: usize,
    },
    /// A kernel of this rank stopped waiting for `peer` because `peer` had
    /// already failed (its own error is the first one).
    PeerFault {
        /// The rank whose kernel stopped.
        rank: usize,
        /// The rank it was waiting for, which failed first.
        peer: usize,
        /// Which kernel and where it was waiting.
        during: String,
    },
    /// A call on a rank while another thread was in a call on the same rank
    /// (a rank's calls must not overlap). It was refused before it did
    /// anything, and breaks nothing; the ranks' sequences of calls now differ
    /// unless the engine makes it again.
    Busy {
        /// The rank whose call was refused.
        rank: usize,
        /// The refused call, e.g. "all_gather".
        call: &'static str,
    },
}

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::MissingLibrary { lib, fix } => write!(f, "{lib} could not be loaded: {fix}"),
            Error::Driver { what, code } => write!(f, "CUDA driver error in {what}: {code}"),
            Error::Nvrtc { arch, message, log } => {
                write!(
                    f,
                    "NVRTC failed to compile the collective kernels for {arch}: {message}"
                )?;
                if !log.trim().is_empty() {
                    write!(f, "\ncompiler log:\n{log}")?;
                }
                Ok(())
            }
            Error::Nccl { what, code } => write!(f, "NCCL error in {what}: {code}"),
            Error::Timeout {
                rank,
                peer,
                during,
                timeout,
            } => {
                write!(f, "rank {rank} timed out after {timeout:?} in {during}")?;
                if let Some(peer) = peer {
                    write!(f, " waiting for rank {peer}")?;
                }
                write!(
                    f,
                    " (a peer never launched the matching call, or ranks issued different \
                     sequences of collectives); this world is unusable now: build a new one. \
                     If a healthy peer can be this late (a first call that loads or compiles \
                     modules, a paused process), build it with a larger bound: \
                     Options::timeout bounds a kernel's wait for a peer, \
                     Options::drain_timeout a wait for a stream, Options::join_timeout forming \
                     a world and NCCL still connecting"
                )
            }
            Error::Mismatch(what) => write!(f, "mismatched arguments: {what}"),
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
            Error::Declined {
                collective,
                algo,
                dtype,
                bytes,
                reason,
            } => write!(
                f,
                "{} declines {} of {bytes} bytes of {}: {reason}",
                algo.name(),
                collective.name(),
                dtype.name()
            ),
            Error::Policy(what) => write!(f, "policy override: {what}"),
            Error::Verification(what) => write!(f, "verification failed: {what}"),
            Error::PeerFailed { rank } => write!(f, "rank {rank} stopped: another rank failed"),
            Error::PeerFault { rank, peer, during } => write!(
                f,
                "rank {rank} stopped in {during}: rank {peer}, which it was waiting for, had \
                 failed first (rank {peer}'s error is the one to read); this world is unusable \
                 now: build a new one"
            ),
            Error::Busy { rank, call } => write!(
                f,
                "{call} on rank {rank} while another thread was in a call on this rank: a \
                 rank's calls must not overlap (drive it from one thread at a time); refused \
                 before it did anything"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    pub(crate) fn driver(what: impl Into<String>, err: cudarc::driver::DriverError) -> Error {
        let name = err
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{:?}", err.0));
        let text = err
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Error::Driver {
            what: what.into(),
            code: if text.is_empty() {
                name
            } else {
                format!("{name} ({text})")
            },
        }
    }
}

/// Adds "what was being done" to driver results.
pub trait DriverContext<T> {
    /// The result, with a driver error turned into [`Error::Driver`] whose
    /// `what` is `what`.
    fn during(self, what: &str) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, cudarc::driver::DriverError> {
    fn during(self, what: &str) -> Result<T> {
        self.map_err(|e| Error::driver(what, e))
    }
}
