//! The rendezvous over NCCL: an all-gather of the blobs' lengths, then of the
//! blobs padded to the longest, on the rank's stream. Waits are bounded: a peer
//! that never calls (or died) ends in a timeout, and NCCL's own asynchronous
//! errors end the wait early.

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::{Rendezvous, check_round_name};
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
        let lengths = self.gather(round, &(mine.len() as u64).to_le_bytes())?;
        let lengths: Vec<usize> = lengths
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as usize)
            .collect();
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
