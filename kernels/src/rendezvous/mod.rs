//! Exchanging a few bytes between the processes of a world while it forms (the
//! configuration digests, reachability rows and IPC handles) and when it ends.
//!
//! Two come with the crate:
//! - over NCCL (`Join::Nccl`): an all-gather of the bytes on the NCCL
//!   communicator built from the unique id the engine already shares;
//! - [`FileRendezvous`] (`Join::Files`): a directory all processes of one host
//!   can see, for worlds where NCCL cannot form (several processes on one GPU)
//!   and for tests.
//!
//! Anything else (an engine's own store, MPI) implements [`Rendezvous`].

mod file;
pub(crate) mod nccl;

pub use file::FileRendezvous;

use crate::error::Result;

/// The largest blob a rank may send in one round (the configuration digests
/// and IPC handles are a few kilobytes): a peer's announced length is checked
/// against it before anything is allocated.
pub const MAX_BLOB_BYTES: u64 = 1 << 20;

/// An all-gather of byte blobs between the ranks of a world, bounded in time.
pub trait Rendezvous: Send {
    /// This process's rank, from 0, below [`Rendezvous::world_size`].
    fn rank(&self) -> usize;

    /// Ranks taking part in every exchange.
    fn world_size(&self) -> usize;

    /// Every rank calls this with the same `round` (a short name of letters,
    /// digits, `-` and `_`, used once per world) and its own bytes, and gets every
    /// rank's bytes in rank order, its own included. A rank that does not arrive
    /// within the rendezvous's bound gives [`Error::Timeout`](crate::error::Error::Timeout)
    /// naming it, never a hang.
    fn exchange(&mut self, round: &str, mine: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Where the exchange happens, for messages ("files in /tmp/w", "NCCL").
    fn describe(&self) -> String;
}

/// Round names end up in file names: keep them to a safe alphabet.
pub(crate) fn check_round_name(round: &str) -> Result<()> {
    let ok = !round.is_empty()
        && round.len() <= 64
        && round
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(crate::error::Error::Mismatch(format!(
            "a rendezvous round is named with 1..=64 letters, digits, `-` or `_`, not {round:?}"
        )))
    }
}
