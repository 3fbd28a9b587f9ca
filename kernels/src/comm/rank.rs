//! One rank of a world: its stream, its kernels, its view of the registered
//! buffers, NCCL (or the loopback reference) and the policy.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cudarc::driver::{CudaEvent, CudaGraph, CudaStream, sys};

use super::options::{Fallback, Options};
use super::process::Membership;
use super::registration::Registration;
use crate::algorithms::CollArgs;
use crate::drain::{drain_within, wait_within};
use crate::error::{DriverContext, Error, Result};
use crate::module::KernelSet;
use crate::nccl::{Ended, NcclComm};
use crate::protocol::fault::DeviceFault;
use crate::protocol::launch::LaunchShape;
use crate::protocol::layout::Capacities;
use crate::selection::Selector;
use crate::vocab::{Arch, Link};

/// What all ranks of a world share.
pub(crate) struct WorldShared {
    pub(crate) registration: Registration,
    pub(crate) caps: Capacities,
    pub(crate) peer_access: bool,
    pub(crate) fallback: Fallback,
}

/// One rank of a world. Send it to the thread that drives it; calls on one rank
/// must not overlap (they take `&mut self`), and every rank of a world must issue
/// the same sequence of collectives (same collective, size, dtype and selection),
/// as with NCCL.
pub struct RankComm {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) arch: Arch,
    pub(crate) link: Link,
    pub(crate) shape: LaunchShape,
    pub(crate) kernels: Arc<KernelSet>,
    pub(crate) shared: Arc<WorldShared>,
    pub(crate) base_args: CollArgs,
    pub(crate) nccl: Option<NcclComm>,
    pub(crate) selector: Selector,
    pub(crate) options: Options,
    /// A world of processes: how this rank talks to the others (the goodbye).
    pub(crate) membership: Option<Membership>,
    /// Set once `check` reported an error (a device timeout, a stream that did
    /// not drain, an NCCL asynchronous error): the world is out of step for
    /// good, so drop skips the goodbye the peers will not answer and aborts
    /// NCCL instead of finalising it.
    pub(crate) broken: AtomicBool,
}

impl std::fmt::Debug for RankComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankComm")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("arch", &self.arch)
            .field("link", &self.link)
            .field("fallback", &self.shared.fallback)
            .finish_non_exhaustive()
    }
}

impl RankComm {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The stream every call of this rank is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// `Loopback` for a loopback world; `NvLink` or `Pcie` for real devices
    /// (NVLink when every pair has native peer atomics, else PCIe).
    pub fn link(&self) -> Link {
        self.link
    }

    /// What runs NCCL-selected and declined calls. A call run by the fallback
    /// reports [`Algo::Nccl`](policy::Algo::Nccl) in either case.
    pub fn fallback_kind(&self) -> Fallback {
        self.shared.fallback
    }

    /// Threads per block and blocks per kernel this world launches.
    pub fn launch_shape(&self) -> LaunchShape {
        self.shape
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Waits (bounded by `Options::drain_timeout`) until every call issued so far
    /// on this rank has finished, then reports what went wrong on the device:
    /// a peer that did not arrive within `Options::timeout` becomes
    /// [`Error::Timeout`]. Not to be called while the stream is being captured.
    ///
    /// Any error it returns (a device timeout, a stream that did not drain, an
    /// NCCL asynchronous error) breaks the world for good: dropping this rank
    /// then aborts NCCL and waits for no peer.
    pub fn check(&self) -> Result<()> {
        let outcome = self.check_inner();
        if outcome.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
        outcome
    }

    fn check_inner(&self) -> Result<()> {
        self.drain()?;
        let (error, info) = self.shared.registration.error_words(self.rank)?;
        if let Some(fault) = DeviceFault::decode(error, info) {
            return Err(Error::Timeout {
                rank: self.rank,
                peer: fault.peer(),
                during: fault.describe(),
                timeout: self.options.timeout,
            });
        }
        if let Some(nccl) = &self.nccl {
            nccl.async_error()?;
        }
        Ok(())
    }

    /// Waits (bounded by `Options::drain_timeout`, ended early by an NCCL
    /// asynchronous error) until `event`, recorded on this rank's stream, has
    /// completed: what a pipeline of graph replays uses to keep only a few
    /// replays queued without draining the stream. Unlike [`check`](Self::check)
    /// it does not read the device's fault words (a cheap wait per replay); a
    /// later `check()` does. An error breaks the world, as `check()`'s do.
    ///
    /// A pipeline needs it because a launch into a full stream queue blocks in
    /// the driver with no bound: when a kernel waits for a lost peer forever
    /// (an NCCL kernel does), hundreds of queued replays fill the queue and
    /// the next launch never returns, long before the next `check()`.
    pub fn wait_for(&self, event: &CudaEvent) -> Result<()> {
        let outcome = self.wait_bounded(Some(event));
        if outcome.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
        outcome
    }

    /// Waits for the stream with a deadline instead of blocking in the driver,
    /// so a hang the kernels cannot bound still ends in an error. NCCL's
    /// asynchronous errors (a failed peer) end the wait early.
    fn drain(&self) -> Result<()> {
        self.wait_bounded(None)
    }

    /// `event`'s completion, or (`None`) everything issued so far, bounded by
    /// `Options::drain_timeout`.
    fn wait_bounded(&self, event: Option<&CudaEvent>) -> Result<()> {
        let poll = || self.nccl.as_ref().map_or(Ok(()), |n| n.async_error());
        let limit = self.options.drain_timeout;
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

    /// Captures what `calls` issues on this rank's stream into a CUDA graph
    /// (replay it with `CudaGraph::launch`, on this stream). Every algorithm
    /// captures: kernels find their buffers and counters in device memory, so a
    /// replay needs no host work. Tensors used inside should be allocated with
    /// cudarc's event tracking disabled (as cudarc requires for any capture).
    pub fn capture(
        &mut self,
        calls: impl FnOnce(&mut RankComm) -> Result<()>,
    ) -> Result<CudaGraph> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .during("beginning a stream capture")?;
        let issued = calls(self);
        // End the capture even if issuing failed, so the stream stays usable.
        let ended = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .during("ending a stream capture");
        issued?;
        ended?.ok_or_else(|| Error::Unsupported("the capture recorded no work".into()))
    }
}

impl Drop for RankComm {
    /// Bounded, whatever state the world is in (kernels/GPU.md, "Bounded
    /// waits"): a healthy rank drains its stream (`Options::drain_timeout`),
    /// says goodbye (`Options::join_timeout`) and finalises NCCL
    /// (`nccl::TEARDOWN_BOUND`, 10 s); a broken one (or one
    /// whose drain or goodbye failed) aborts NCCL at once, which ends NCCL
    /// kernels still waiting for a peer, and frees its memory only if the
    /// stream then drains within a short bound, else leaks it.
    fn drop(&mut self) {
        let mut broken = self.broken.load(Ordering::Relaxed);
        // A stream that does not drain holds work waiting for a peer that never
        // called: the world is broken.
        if !broken && self.drain().is_err() {
            broken = true;
        }
        // A world of processes frees this rank's memory only once every peer has
        // finished reading it: peers say goodbye after draining their streams.
        // Skipped when broken: the peers will not all answer.
        if !broken
            && let Some(membership) = &mut self.membership
            && let Err(e) = membership.leave(self.nccl.as_ref(), &self.stream)
        {
            eprintln!(
                "colltune: rank {}: no goodbye from every peer ({e}); aborting NCCL and freeing \
                 anyway",
                self.rank
            );
            broken = true;
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
            // end: leak the registered memory rather than wait on it.
            let bound = self.options.timeout * 2 + Duration::from_secs(1);
            let drained =
                !nccl_may_run && matches!(drain_within(&self.stream, bound, || Ok(())), Ok(true));
            if !drained {
                self.shared.registration.wedge();
            }
        }
    }
}
