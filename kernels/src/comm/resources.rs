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
use crate::protocol::budget::{Footprint, MemoryPlan};
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
    /// What each algorithm takes in this world: the platform's capacities,
    /// lowered to what the tables select and the memory budget allows.
    pub(crate) caps: Capacities,
    pub(crate) peer_access: bool,
    pub(crate) fallback: Fallback,
    /// Bytes of every rank's NCCL window, the same on all ranks (0: the
    /// world has none, and `nccl_symmetric` declines).
    pub(crate) window_bytes: u64,
    /// Each rank's memory, as allocated (the window as registered).
    pub(crate) footprint: Footprint,
}

impl WorldShared {
    /// A world's shared state once its buffers are registered per
    /// `planned` and its windows are `window_bytes` (0: none).
    pub(crate) fn new(
        registration: Registration,
        planned: &MemoryPlan,
        peer_access: bool,
        fallback: Fallback,
        window_bytes: u64,
    ) -> WorldShared {
        WorldShared {
            registration,
            caps: planned.caps,
            peer_access,
            fallback,
            window_bytes,
            footprint: Footprint {
                nccl_window: window_bytes,
                ..planned.footprint
            },
        }
    }
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
    /// `None` in an NCCL-only world of processes, which loads no kernels.
    pub(crate) kernels: Option<Arc<KernelSet>>,
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
    /// Whether the stream was brought to rest after a fault
    /// ([`RankResources::quiesce`]); `None` until it was tried.
    pub(crate) quiet: Mutex<Option<bool>>,
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
    /// A fault that becomes known meanwhile (the device's, NCCL's
    /// asynchronous errors) ends the wait early with that fault.
    pub(crate) fn wait_bounded(&self, event: Option<&CudaEvent>, limit: Duration) -> Result<()> {
        let poll = || self.known_fault();
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

impl RankResources {
    /// After a fault: returns once nothing this rank queued still runs, so
    /// that a caller told of the fault by a wait (`check()`, `wait_for()`)
    /// may free the tensors of the calls it issued. The fault is on the
    /// device already ([`Health::fail`]), so queued kernels of this rank
    /// mark their outputs and return at once, and a kernel still waiting
    /// stops; NCCL is aborted (`ncclCommAbort`, bounded by
    /// `nccl::ABORT_BOUND`), which ends its kernels waiting for a peer; then
    /// the stream is drained within [`RankResources::rest_bound`].
    ///
    /// Once per rank (later callers get the first answer, waiting for it if
    /// it is being worked out). `false` when the stream did not drain: its
    /// work may still touch the rank's memory and the engine's tensors, so
    /// nothing of the rank is ever freed (drop leaks it) and the failure is
    /// logged.
    pub(crate) fn quiesce(&self) -> bool {
        let mut quiet = self.quiet.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(drained) = *quiet {
            return drained;
        }
        let mut nccl_may_run = false;
        if let Some(nccl) = &self.nccl {
            nccl_may_run = nccl.end(false) == Ended::Abandoned;
        }
        let limit = self.rest_bound();
        let drained =
            !nccl_may_run && matches!(drain_within(&self.stream, limit, || Ok(())), Ok(true));
        if !drained {
            log::error!(
                "colltune: rank {}: its stream did not come to rest within {limit:?} after a \
                 fault ({}); kernels may still write the outputs of calls issued before it, so \
                 keep those tensors (this rank's own memory is never freed)",
                self.rank,
                if nccl_may_run {
                    "ncclCommAbort did not return"
                } else {
                    "a kernel still runs"
                }
            );
            self.shared.registration.wedge();
        }
        *quiet = Some(drained);
        drained
    }

    /// How long a broken rank's stream may take to drain once its fault is
    /// on the device and NCCL is aborted: a kernel still waiting for a peer
    /// stops within `timeout` (at once when it reads the fault), and kernels
    /// queued behind it return at once.
    fn rest_bound(&self) -> Duration {
        self.options.timeout * 2 + Duration::from_secs(1)
    }

    /// Gives up, without freeing, everything the rank's stream may still
    /// touch: registered buffers, the fault mirror, NCCL windows, the loaded
    /// kernels and the stream (with its context) itself. They return to the
    /// driver when the process exits.
    fn leak_everything(&mut self) {
        self.shared.registration.wedge();
        self.health.leak_mirror();
        self.windows.leak();
        // The module must stay loaded under launches still queued, and the
        // stream (and its context) must outlive its work.
        std::mem::forget(self.kernels.clone());
        std::mem::forget(self.stream.clone());
    }
}

/// Bound on the landing of a host-side fault written for the device before
/// the control block may be freed (it has no queue to wait behind: it
/// normally landed microseconds after it was written).
const DEVICE_WRITE_BOUND: Duration = Duration::from_secs(5);

impl Drop for RankResources {
    /// Bounded, whatever state the world is in (kernels/GPU.md, "Bounded
    /// waits" and "Freeing in order"). A healthy rank drains its stream
    /// (`Options::drain_timeout`); in a world of processes it then closes its
    /// mappings of the peers' buffers and says goodbye (`Options::join_timeout`),
    /// so its own exported buffers are freed only once every peer has closed
    /// its mappings of them; then it finalises NCCL (`nccl::TEARDOWN_BOUND`).
    /// A broken rank (or one whose drain or goodbye failed) comes to rest as
    /// [`RankResources::quiesce`] says (NCCL aborted at once, which ends NCCL
    /// kernels still waiting for a peer, then the stream drained within a
    /// short bound), never frees memory it exported (peers' queued kernels
    /// may still store into it), and frees the rest only if its stream, and
    /// every other stream of its context, came to rest: otherwise it leaks
    /// everything its stream may still touch.
    fn drop(&mut self) {
        let mut broken = self.health.is_broken();
        // A stream that does not drain holds work waiting for a peer that never
        // called: the world is broken (and the peers are told, through the
        // device).
        if !broken && let Err(e) = self.wait_bounded(None, self.options.drain_timeout) {
            self.health.fail(e);
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
        let at_rest = if broken {
            self.quiesce()
        } else {
            self.nccl
                .as_ref()
                .is_none_or(|nccl| nccl.end(true) != Ended::Abandoned)
        };
        let written = self.health.device_write_settled(DEVICE_WRITE_BOUND);
        // Freeing waits for every stream of the context: with another rank's
        // stream there stuck, this rank must leak as well, or its drop would
        // never return.
        let context_at_rest = at_rest
            && self
                .shared
                .registration
                .context_at_rest(&self.stream, self.rest_bound());
        if !written || !context_at_rest {
            self.leak_everything();
        }
    }
}
