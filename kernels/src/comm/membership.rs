//! How a rank of a world of processes talks to its peers outside kernels:
//! rounds of blobs (digests) while the world forms, and the goodbye round
//! when it is freed. Held by the rank (`rank.rs`) so that freeing can say
//! goodbye; built by `process.rs`.

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::CudaStream;

use crate::error::{Error, Result};
use crate::nccl::NcclComm;
use crate::protocol::digest::Digest;
use crate::rendezvous::Rendezvous;
use crate::rendezvous::nccl::NcclRendezvous;

/// Where a process's rank exchanges blobs with its peers: NCCL's own
/// communicator, or a rendezvous.
pub(super) enum Exchange {
    Nccl,
    Other(Box<dyn Rendezvous>),
}

/// How a rank of a world of processes talks to the others outside kernels.
pub(crate) struct Membership {
    pub(super) exchange: Exchange,
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) timeout: Duration,
}

impl Membership {
    pub(super) fn exchange(
        &mut self,
        nccl: Option<&NcclComm>,
        stream: &Arc<CudaStream>,
        round: &str,
        mine: &[u8],
    ) -> Result<Vec<Vec<u8>>> {
        match (&mut self.exchange, nccl) {
            (Exchange::Other(rendezvous), _) => rendezvous.exchange(round, mine),
            (Exchange::Nccl, Some(comm)) => NcclRendezvous {
                comm,
                stream,
                rank: self.rank,
                world: self.world,
                timeout: self.timeout,
            }
            .exchange(round, mine),
            (Exchange::Nccl, None) => unreachable!("an NCCL membership keeps its communicator"),
        }
    }

    /// One round of digests; a peer's `failed` field becomes this rank's error.
    pub(super) fn round(
        &mut self,
        nccl: Option<&NcclComm>,
        stream: &Arc<CudaStream>,
        round: &str,
        mine: &Digest,
    ) -> Result<Vec<Digest>> {
        let blobs = self.exchange(nccl, stream, round, &mine.encode())?;
        read_round(self.rank, round, &blobs)
    }

    /// `step`'s error, told to the peers in round `next` before it is returned.
    pub(super) fn tell_failure<T>(
        &mut self,
        nccl: Option<&NcclComm>,
        stream: &Arc<CudaStream>,
        next: &str,
        step: Result<T>,
    ) -> Result<T> {
        if let Err(e) = &step {
            let _ = self.exchange(nccl, stream, next, &failure_report(e).encode());
        }
        step
    }

    /// The last round: every peer has drained its stream, so nobody reads this
    /// rank's memory any more.
    pub(crate) fn leave(
        &mut self,
        nccl: Option<&NcclComm>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.exchange(nccl, stream, "goodbye", b"").map(|_| ())
    }
}

/// Every rank's digest of round `round`, as rank `rank` received them; a
/// peer's `failed` report (see [`failure_report`]) becomes this rank's error.
pub(super) fn read_round(rank: usize, round: &str, blobs: &[Vec<u8>]) -> Result<Vec<Digest>> {
    let digests = blobs
        .iter()
        .enumerate()
        .map(|(r, blob)| {
            Digest::decode(blob)
                .map_err(|e| Error::Mismatch(format!("rank {r}'s `{round}` blob: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    for (r, digest) in digests.iter().enumerate() {
        if let (true, Some(why)) = (r != rank, digest.get("failed")) {
            return Err(Error::Unsupported(format!(
                "rank {r} could not join the world: {why}"
            )));
        }
    }
    Ok(digests)
}

/// What a rank that failed sends in the next round instead of its digest.
pub(super) fn failure_report(error: &Error) -> Digest {
    Digest::new().with("failed", error)
}
