//! One rank of a world: the handle an engine drives ([`RankComm`]), over the
//! resources its GPU work depends on (`resources.rs`).

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaEvent, CudaStream, sys};

use super::capture::{Captured, Lifeline};
use super::health::{DeviceWord, Health};
use super::membership::Membership;
use super::one_caller::{OneCaller, Turn};
use super::options::{Fallback, Options};
use super::resources::{RankResources, RankWindows, WorldShared};
use crate::algorithms::CollArgs;
use crate::drain::InFlight;
use crate::error::{DriverContext, Error, Result};
use crate::memory::MappedHostWords;
use crate::module::KernelSet;
use crate::nccl::NcclComm;
use crate::protocol::launch::LaunchShape;
use crate::protocol::{ctrl, host};
use crate::selection::Selector;
use crate::vocab::{Arch, Link};
use crate::window::Window;

/// Everything [`RankComm::new`] needs.
pub(crate) struct RankParts {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) arch: Arch,
    pub(crate) link: Link,
    pub(crate) shape: LaunchShape,
    /// `None` in an NCCL-only world of processes, which loads no kernels.
    pub(crate) kernels: Option<Arc<KernelSet>>,
    pub(crate) shared: Arc<WorldShared>,
    pub(crate) nccl: Option<NcclComm>,
    /// The rank's NCCL window, registered with its peers' (`None`: none).
    pub(crate) window: Option<Window>,
    pub(crate) membership: Option<Membership>,
    pub(crate) selector: Selector,
    pub(crate) options: Options,
}

/// One rank of a world. Every rank of a world must issue the same sequence of
/// collectives (same collective, size, dtype and selection), as with NCCL:
/// the custom kernels check that it does, and a rank that does not gets
/// [`Error::Mismatch`] naming both calls.
///
/// Its calls take `&self`, and it is `Send` and `Sync`: an engine may keep it
/// behind a shared reference (an `Arc`, a field of a model its layers borrow)
/// and drive it from whichever thread runs the step. A rank's calls must not
/// overlap, though (they queue work on its one stream, in the order every
/// rank must follow): a call from a second thread while another thread is in
/// a call on the same rank (a collective, [`capture`](RankComm::capture),
/// [`alloc_window`](RankComm::alloc_window), [`check`](RankComm::check),
/// [`wait_for`](RankComm::wait_for)) is refused with [`Error::Busy`] before
/// it does anything. The queries (`rank()`, [`health`](RankComm::health),
/// `policy_choice()`, …) are never refused.
///
/// Once a rank knows of a fault (a peer that did not arrive, a mismatch, an
/// NCCL error, a launch that failed), every later call, replay and
/// [`check`](RankComm::check) returns that first fault and launches nothing;
/// kernels that were already queued mark their outputs as failed (all bits
/// set: a NaN in every dtype) instead of leaving stale values. The world is
/// unusable then: build a new one.
pub struct RankComm {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) arch: Arch,
    pub(crate) link: Link,
    pub(crate) shape: LaunchShape,
    pub(crate) base_args: CollArgs,
    pub(crate) selector: Selector,
    pub(crate) res: Arc<RankResources>,
    /// Bounds the eager calls queued and not finished (`drain::InFlight`).
    pub(crate) in_flight: InFlight,
    /// The thread in a call on this rank, if any (`one_caller.rs`).
    pub(crate) calls: OneCaller,
}

// What the documentation above promises: an engine may share a rank
// between threads. This does not build if a field stops allowing it.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<RankComm>();
};

impl std::fmt::Debug for RankComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankComm")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("arch", &self.arch)
            .field("link", &self.link)
            .field("fallback", &self.res.shared.fallback)
            .finish_non_exhaustive()
    }
}

impl RankComm {
    /// Assembles a rank: its fault mirror in pinned host memory, then the
    /// call-independent kernel arguments.
    pub(crate) fn new(parts: RankParts) -> Result<RankComm> {
        let RankParts {
            rank,
            world_size,
            stream,
            arch,
            link,
            shape,
            kernels,
            shared,
            nccl,
            window,
            membership,
            selector,
            options,
        } = parts;
        let mirror = MappedHostWords::alloc(stream.context(), host::WORDS, host::BYTES)?;
        let timeout_ns = options.timeout.as_nanos().min(u64::MAX as u128) as u64;
        let base_args = shared
            .registration
            .base_args(rank, timeout_ns, mirror.device_ptr());
        // This rank's error word, where a fault only the host finds is
        // written for its kernels and its peers (none without a control
        // block: a world whose custom kernels cannot run).
        let own_ctrl = base_args.ctrls[rank];
        let device = (own_ctrl != 0).then(|| {
            DeviceWord::new(
                stream.context().clone(),
                own_ctrl + (ctrl::ERROR * 4) as u64,
            )
        });
        let health = Health::new(rank, options.timeout, mirror, device);
        Ok(RankComm {
            rank,
            world_size,
            arch,
            link,
            shape,
            base_args,
            selector,
            res: Arc::new(RankResources {
                rank,
                stream,
                kernels,
                shared,
                nccl,
                windows: RankWindows {
                    staging: window,
                    engine: Mutex::default(),
                },
                membership: Mutex::new(membership),
                health,
                options,
                quiet: Mutex::new(None),
            }),
            in_flight: InFlight::new(),
            calls: OneCaller::default(),
        })
    }

    /// This rank's index in its world, from 0.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in this rank's world.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The stream every call of this rank is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.res.stream
    }

    /// The architecture of this rank's GPU: the platform, with
    /// [`RankComm::link`], whose tables choose its algorithms.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// `Loopback` for a world of one rank or of ranks sharing a GPU; else
    /// `NvLink` when every pair of GPUs has native peer atomics, `Pcie`
    /// otherwise ([`raw::world_link`](crate::raw::world_link)).
    pub fn link(&self) -> Link {
        self.link
    }

    /// What runs NCCL-selected and declined calls. A call run by the fallback
    /// reports [`Algo::Nccl`](policy::Algo::Nccl) in either case.
    pub fn fallback_kind(&self) -> Fallback {
        self.res.shared.fallback
    }

    /// Threads per block and blocks per kernel this world launches.
    pub fn launch_shape(&self) -> LaunchShape {
        self.shape
    }

    /// The options the world was built with.
    pub fn options(&self) -> &Options {
        &self.res.options
    }

    /// How many blocks (of this world's block size) of its heaviest kernel one
    /// SM holds, and which kernel that is: with the GPU's SMs, what bounds the
    /// blocks ranks sharing a GPU may launch (`protocol::launch`).
    /// `(0, "")` in a world that loaded no kernels (every call runs NCCL).
    pub fn blocks_per_sm(&self) -> (u32, &str) {
        self.res
            .kernels
            .as_ref()
            .map_or((0, ""), |kernels| kernels.blocks_per_sm())
    }

    /// Whether launches use programmatic dependent launch (asked for in
    /// [`Options::programmatic_launch`] and available: sm_90 and later).
    pub fn programmatic_launch(&self) -> bool {
        self.res
            .kernels
            .as_ref()
            .is_some_and(|kernels| kernels.programmatic())
    }

    /// The first fault this rank knows of, without waiting: what every call
    /// returns from now on. `Ok` when none is known yet (use
    /// [`check`](RankComm::check) to wait for queued work first).
    pub fn health(&self) -> Result<()> {
        self.known_fault()
    }

    /// Waits (bounded by `Options::drain_timeout`) until every call issued so far
    /// on this rank has finished, then reports what went wrong on the device:
    /// a peer that did not arrive within `Options::timeout` becomes
    /// [`Error::Timeout`], a peer that made another call [`Error::Mismatch`],
    /// a peer that had failed first [`Error::PeerFault`]. Not to be called
    /// while the stream is being captured.
    ///
    /// Any error it returns breaks the world for good: every later call
    /// returns it, and dropping this rank aborts NCCL and waits for no peer.
    /// An error is returned only once the rank's stream has come to rest
    /// (bounded; kernels/GPU.md, "Bounded waits"): NCCL aborted, the calls
    /// still queued finished (marking their outputs as failed), so the
    /// tensors of every call issued before may be freed. (In the one case
    /// where the stream does not come to rest within its bound, which is
    /// logged as an error, they must be kept.)
    pub fn check(&self) -> Result<()> {
        let _turn = self.turn("check")?;
        let waited = self
            .known_fault()
            .and_then(|()| self.wait_bounded(None))
            .and_then(|()| self.known_fault());
        self.at_rest(waited)
    }

    /// Waits (bounded by `Options::drain_timeout`, ended early by an NCCL
    /// asynchronous error or any other known fault) until `event`, recorded
    /// on this rank's stream, has completed: what a pipeline of graph
    /// replays uses to keep only a few replays queued without draining the
    /// stream. An error breaks the world, and comes only once the stream has
    /// come to rest, as `check()`'s do.
    ///
    /// A pipeline needs it because a launch into a full stream queue blocks in
    /// the driver with no bound: when a kernel waits for a lost peer forever
    /// (an NCCL kernel does), hundreds of queued replays fill the queue and
    /// the next launch never returns, long before the next `check()`.
    pub fn wait_for(&self, event: &CudaEvent) -> Result<()> {
        let _turn = self.turn("wait_for")?;
        let waited = self
            .known_fault()
            .and_then(|()| self.wait_bounded(Some(event)))
            .and_then(|()| self.known_fault());
        self.at_rest(waited)
    }

    /// What a wait returns: `Ok`, or the rank's first fault once the stream
    /// has come to rest (`RankResources::quiesce`).
    fn at_rest(&self, waited: Result<()>) -> Result<()> {
        let Err(e) = waited else {
            return Ok(());
        };
        let first = self.res.health.fail(e);
        self.res.quiesce();
        Err(first)
    }

    /// This thread's turn for a call of `what` on this rank, or
    /// [`Error::Busy`] while another thread is in a call on it.
    #[inline]
    pub(crate) fn turn(&self, what: &'static str) -> Result<Turn<'_>> {
        self.calls.enter(self.rank, what)
    }

    /// The first fault known to this rank: its own record, the device's
    /// mirror, an NCCL asynchronous error. Cheap enough for every call.
    pub(crate) fn known_fault(&self) -> Result<()> {
        self.res.known_fault()
    }

    /// `event`'s completion, or (`None`) everything issued so far, bounded by
    /// `Options::drain_timeout`; a fault that becomes known meanwhile ends it.
    fn wait_bounded(&self, event: Option<&CudaEvent>) -> Result<()> {
        self.res.wait_bounded(event, self.res.options.drain_timeout)
    }

    /// Captures what `calls` issues on this rank's stream into a CUDA graph
    /// (replay it with [`Captured::launch`]). Every algorithm captures:
    /// kernels find their buffers and counters in device memory, so a replay
    /// needs no host work. The graph keeps this rank's buffers, mappings,
    /// kernels and NCCL alive for as long as it exists, and a replay on a rank
    /// that has failed is refused. Tensors used inside should be allocated
    /// with cudarc's event tracking disabled (as cudarc requires for any
    /// capture).
    ///
    /// `calls` runs on this thread, which keeps its turn on the rank for the
    /// whole capture: its calls on the rank are captured, another thread's
    /// are refused ([`Error::Busy`]). Calls that select by the tables
    /// ([`Select::Auto`](crate::Select::Auto)) use the graph tables there.
    pub fn capture(&self, calls: impl FnOnce(&RankComm) -> Result<()>) -> Result<Captured> {
        let _turn = self.turn("capture")?;
        self.known_fault()?;
        let stream = self.res.stream.clone();
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .during("beginning a stream capture")?;
        let issued = calls(self);
        // End the capture even if issuing failed, so the stream stays usable.
        let ended = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .during("ending a stream capture");
        issued?;
        let graph =
            ended?.ok_or_else(|| Error::Unsupported("the capture recorded no work".into()))?;
        Ok(Captured::new(graph, self.lifeline()))
    }

    /// A handle that keeps this rank's resources alive: an engine that
    /// captures this rank's calls into a graph of its own (capturing its own
    /// stream) stores one with the graph, so that the graph can never replay
    /// into freed memory, whatever is dropped first.
    pub fn lifeline(&self) -> Lifeline {
        Lifeline::new(self.res.clone())
    }
}
