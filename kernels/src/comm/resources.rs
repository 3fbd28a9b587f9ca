//! What a rank's GPU work depends on ([`RankResources`]: stream, kernels,
//! registered buffers, NCCL, health), shared by the rank's handle and every
//! graph captured on it, and freed in order when the last of them goes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudarc::driver::{CudaEvent, CudaStream};

use super::health::Health;
use super::membership::Membership;
use super::options::{Fallback, Options};
use super::registration::Registration;
use crate::drain::{drain_within, wait_within};
use crate::error::{Error, Result};
use crate::module::KernelSet;
use crate::nccl::{Ended, NcclComm};
use crate::protocol::layout::Capacities;
use crate::window::Window;

/// A rank's NCCL windows.
#[derive(Debug, Default)]
pub(crate) struct RankWindows {
    /// The window calls copy through when their tensors lie outside every
    /// window.
    pub(crate) staging: Option<Window>,
    /// Windows the engine allocated, for tensors NCCL reads and writes in
    /// place.
    pub(crate) engine: Mutex<Vec<Window>>,
}

impl RankWindows {
    /// For each `(ptr, len)`, whether it lies inside one of the engine's
    /// windows (one lock for the whole call).
    pub(crate) fn engine_holds<const N: usize>(&self, ranges: [(u64, u64); N]) -> [bool; N] {
        let engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
        ranges.map(|(ptr, len)| engine.iter().any(|w| w.memory.holds(ptr, len)))
    }

    /// Never frees any of them (kernels that will not end may use them).
    fn leak(&mut self) {
        if let Some(window) = self.staging.take() {
            window.memory.leak();
        }
        let engine = std::mem::take(self.engine.get_mut().unwrap_or_else(|p| p.into_inner()));
        for window in engine {
            window.memory.leak();
        }
    }
}

/// What all ranks of a world share.
pub(crate) struct WorldShared {
    pub(crate) registration: Registration,
    pub(crate) caps: Capacities,
    pub(crate) peer_access: bool,
    pub(crate) fallback: Fallback,
    /// Bytes of every rank's NCCL window, the same on all ranks (0: the
    /// world has none, and `nccl_symmetric` declines).
    pub(crate) window_bytes: u64,
}

/// Everything a rank's queued or captured GPU work uses. It lives as long as
/// the [`RankComm`](super::RankComm) or any graph captured on it
/// ([`Captured`](super::Captured), [`Lifeline`](super::Lifeline)):
/// a replay can never reach freed buffers, closed mappings, an unloaded module
/// or a destroyed NCCL communicator. Dropping it ends the rank (bounded; see
/// `Drop`).
pub(crate) struct RankResources {
    pub(crate) rank: usize,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) kernels: Arc<KernelSet>,
    pub(crate) shared: Arc<WorldShared>,
    pub(crate) nccl: Option<NcclComm>,
    /// The NCCL window this rank copies through (`nccl_symmetric`), and the
    /// ones handed out to the engine ([`RankComm::alloc_window`](super::RankComm::alloc_window)).
    /// NCCL releases their registrations when it ends; their memory is freed
    /// after that.
    pub(crate) windows: RankWindows,
    /// A world of processes: how this rank talks to the others (the goodbye).
    pub(crate) membership: Mutex<Option<Membership>>,
    pub(crate) health: Health,
    pub(crate) options: Options,
}

impl RankResources {
    /// The rank's NCCL communicator, where NCCL runs this world's calls.
    pub(crate) fn nccl_comm(&self) -> Option<&NcclComm> {
        match self.shared.fallback {
            Fallback::Nccl => self.nccl.as_ref(),
            Fallback::LoopbackReference => None,
        }
    }

    pub(crate) fn known_fault(&self) -> Result<()> {
        self.health.check()?;
        if let Some(nccl) = &self.nccl
            && let Err(e) = nccl.async_error()
        {
            return Err(self.health.fail(e));
        }
        Ok(())
    }

    /// Waits for the stream with a deadline instead of blocking in the
    /// driver, so a hang the kernels cannot bound still ends in an error.
    /// NCCL's asynchronous errors end the wait early.
    pub(crate) fn wait_bounded(&self, event: Option<&CudaEvent>, limit: Duration) -> Result<()> {
        let poll = || self.nccl.as_ref().map_or(Ok(()), |n| n.async_error());
        let done = match event {
            Some(event) => wait_within(event, limit, poll)?,
            None => drain_within(&self.stream, limit, poll)?,
        };
        if done {
            Ok(())
        } else {
            Err(Error::Timeout {
                rank: self.rank,
                peer: None,
                during: "waiting for the stream to drain (host side; NCCL or other work that \
                         never finished)"
                    .into(),
                timeout: limit,
            })
        }
    }
}

impl Drop for RankResources {
    /// Bounded, whatever state the world is in (kernels/GPU.md, "Bounded
    /// waits" and "Freeing in order"). A healthy rank drains its stream
    /// (`Options::drain_timeout`); in a world of processes it then closes its
    /// mappings of the peers' buffers and says goodbye (`Options::join_timeout`),
    /// so its own exported buffers are freed only once every peer has closed
    /// its mappings of them; then it finalises NCCL (`nccl::TEARDOWN_BOUND`).
    /// A broken rank (or one whose drain or goodbye failed) aborts NCCL at
    /// once, which ends NCCL kernels still waiting for a peer, never frees
    /// memory it exported (peers' queued kernels may still store into it) and
    /// frees the rest only if its stream then drains within a short bound.
    fn drop(&mut self) {
        let mut broken = self.health.is_broken();
        // A stream that does not drain holds work waiting for a peer that never
        // called: the world is broken.
        if !broken && self.wait_bounded(None, self.options.drain_timeout).is_err() {
            broken = true;
        }
        let membership = self
            .membership
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(mut membership) = membership {
            if !broken {
                // Nothing of this rank runs any more: close the peers' buffers,
                // then tell the peers so.
                self.shared.registration.close_peer_mappings();
                if let Err(e) = membership.leave(self.nccl.as_ref(), &self.stream) {
                    log::warn!(
                        "colltune: rank {}: no goodbye from every peer ({e}); keeping this \
                         rank's exported buffers (a peer may still use them) and aborting NCCL",
                        self.rank
                    );
                    broken = true;
                }
            }
            if broken {
                self.shared.registration.keep_exported();
            }
        }
        // NCCL before the memory: aborting it ends its kernels, so the stream
        // can drain; finalising it (healthy) is bounded and aborts when late.
        let mut nccl_may_run = false;
        if let Some(nccl) = self.nccl.take() {
            nccl_may_run = nccl.end(!broken) == Ended::Abandoned;
        }
        if broken {
            // Kernels queued after a fault return at once; one still waiting
            // ends within `timeout`. Anything longer means work that will never
            // end: leak the memory its kernels use rather than wait on it.
            let bound = self.options.timeout * 2 + Duration::from_secs(1);
            let drained =
                !nccl_may_run && matches!(drain_within(&self.stream, bound, || Ok(())), Ok(true));
            if !drained {
                self.shared.registration.wedge();
                self.health.leak_mirror();
                self.windows.leak();
            }
        }
    }
}
