//! The rendezvous over NCCL: an all-gather of the blobs' lengths, then of the
//! blobs padded to the longest, on the rank's stream. Waits are bounded: a peer
//! that never calls (or died) ends in a timeout, and NCCL's own asynchronous
//! errors end the wait early.

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::{MAX_BLOB_BYTES, Rendezvous, check_round_name};
use crate::drain::drain_within;
use crate::error::{DriverContext, Error, Result};
use crate::nccl::NcclComm;

/// Borrowed for one exchange: the communicator belongs to the rank.
pub(crate) struct NcclRendezvous<'a> {
    pub(crate) comm: &'a NcclComm,
    pub(crate) stream: &'a Arc<CudaStream>,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) timeout: Duration,
}

// SAFETY: used by the one thread that owns the rank for the duration of a call.
unsafe impl Send for NcclRendezvous<'_> {}

impl NcclRendezvous<'_> {
    /// All-gather of `bytes` (the same length on every rank).
    fn gather(&self, round: &str, bytes: &[u8]) -> Result<Vec<u8>> {
        let stream = self.stream;
        stream
            .context()
            .bind_to_thread()
            .during("binding the rank's context for NCCL")?;
        let send = stream
            .clone_htod(bytes)
            .during("uploading a rendezvous blob")?;
        let mut recv = stream
            .alloc_zeros::<u8>(bytes.len() * self.world)
            .during("allocating a rendezvous buffer")?;
        let issued = {
            let (src, _reading) = send.device_ptr(stream);
            let (dst, _writing) = recv.device_ptr_mut(stream);
            self.comm.all_gather_bytes(src, dst, bytes.len(), stream)
        };
        let drained =
            issued.and_then(|()| drain_within(stream, self.timeout, || self.comm.async_error()));
        if !matches!(drained, Ok(true)) {
            // The all-gather may still wait for a peer that never comes: abort
            // NCCL now (which ends that kernel), or the error path would hang
            // in ncclCommDestroy or in freeing the registered buffers.
            self.comm.abort_now();
            drained?;
            return Err(Error::Timeout {
                rank: self.rank,
                peer: None,
                during: format!("the rendezvous `{round}` over NCCL (a peer never called)"),
                timeout: self.timeout,
            });
        }
        stream
            .clone_dtoh(&recv)
            .during("downloading rendezvous blobs")
    }
}

impl Rendezvous for NcclRendezvous<'_> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn exchange(&mut self, round: &str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        check_round_name(round)?;
        if mine.len() as u64 > MAX_BLOB_BYTES {
            return Err(Error::Unsupported(format!(
                "a rendezvous `{round}` blob of {} bytes is above the {MAX_BLOB_BYTES}-byte cap",
                mine.len()
            )));
        }
        let lengths = self.gather(round, &(mine.len() as u64).to_le_bytes())?;
        let lengths = peer_lengths(&lengths, self.world, round)?;
        let longest = lengths.iter().copied().max().unwrap_or(0).max(1);
        let mut padded = mine.to_vec();
        padded.resize(longest, 0);
        let all = self.gather(round, &padded)?;
        Ok(all
            .chunks_exact(longest)
            .zip(&lengths)
            .map(|(blob, &len)| blob[..len].to_vec())
            .collect())
    }

    fn describe(&self) -> String {
        "NCCL".into()
    }
}

/// The blob lengths every rank announced, checked: one per rank, each within
/// [`MAX_BLOB_BYTES`] (a peer's length decides how much this rank allocates
/// and reads, so it is never trusted as it comes).
fn peer_lengths(gathered: &[u8], world: usize, round: &str) -> Result<Vec<usize>> {
    if gathered.len() != world * 8 {
        return Err(Error::Mismatch(format!(
            "the rendezvous `{round}` gathered {} length bytes from {world} ranks",
            gathered.len()
        )));
    }
    gathered
        .chunks_exact(8)
        .enumerate()
        .map(|(rank, chunk)| {
            let len = u64::from_le_bytes(chunk.try_into().expect("8-byte chunks"));
            if len > MAX_BLOB_BYTES {
                Err(Error::Mismatch(format!(
                    "rank {rank} announced a `{round}` blob of {len} bytes, above the \
                     {MAX_BLOB_BYTES}-byte cap (not a rank of this world, or corrupted)"
                )))
            } else {
                Ok(len as usize)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announce(lengths: &[u64]) -> Vec<u8> {
        lengths.iter().flat_map(|l| l.to_le_bytes()).collect()
    }

    #[test]
    fn peer_lengths_within_the_cap_are_taken() {
        assert_eq!(
            peer_lengths(&announce(&[3, 0, MAX_BLOB_BYTES]), 3, "hello").unwrap(),
            vec![3, 0, MAX_BLOB_BYTES as usize]
        );
    }

    #[test]
    fn a_huge_or_missing_peer_length_is_refused() {
        // A length that would make `longest * world` overflow, or allocate
        // gigabytes, never reaches the allocation.
        for bad in [MAX_BLOB_BYTES + 1, u64::MAX, 1 << 62] {
            match peer_lengths(&announce(&[4, bad]), 2, "layout") {
                Err(Error::Mismatch(what)) => {
                    assert!(what.contains("rank 1 announced"), "{what}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        // One length for two ranks, or three: not this world's all-gather.
        for (lengths, bytes) in [(&[4][..], 8), (&[4, 4, 4][..], 24)] {
            match peer_lengths(&announce(lengths), 2, "layout") {
                Err(Error::Mismatch(what)) => assert_eq!(
                    what,
                    format!("the rendezvous `layout` gathered {bytes} length bytes from 2 ranks")
                ),
                other => panic!("{lengths:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_huge_length_names_the_first_rank_that_announced_one() {
        match peer_lengths(&announce(&[1, MAX_BLOB_BYTES + 1, u64::MAX]), 3, "hello") {
            Err(Error::Mismatch(what)) => assert_eq!(
                what,
                format!(
                    "rank 1 announced a `hello` blob of {} bytes, above the {MAX_BLOB_BYTES}-byte \
                     cap (not a rank of this world, or corrupted)",
                    MAX_BLOB_BYTES + 1
                )
            ),
            other => panic!("{other:?}"),
        }
    }
}
