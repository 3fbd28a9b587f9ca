//! One rank of a world: its stream, its kernels, its view of the registered
//! buffers, NCCL (or the loopback reference) and the policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaGraph, CudaStream, sys};

use super::options::{Fallback, Options};
use super::registration::Registration;
use crate::algorithms::CollArgs;
use crate::error::{DriverContext, Error, Result};
use crate::module::KernelSet;
use crate::nccl::NcclComm;
use crate::protocol::fault::DeviceFault;
use crate::protocol::grid::LaunchShape;
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
    /// (see [`crate::peer`] for how it is decided).
    pub fn link(&self) -> Link {
        self.link
    }

    /// What runs NCCL-selected and declined calls. A call run by the fallback
    /// reports [`Algo::Nccl`](crate::Algo::Nccl) in either case.
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
    pub fn check(&self) -> Result<()> {
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

    /// Waits for the stream with a deadline instead of blocking in the driver,
    /// so a hang the kernels cannot bound still ends in an error.
    fn drain(&self) -> Result<()> {
        let done = self
            .stream
            .record_event(None)
            .during("recording an event to drain the stream")?;
        let start = Instant::now();
        loop {
            if done.try_is_complete().during("waiting for the stream")? {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited > self.options.drain_timeout {
                return Err(Error::Timeout {
                    rank: self.rank,
                    peer: None,
                    during: "waiting for the stream to drain (host side; NCCL or other work \
                             that never finished)"
                        .into(),
                    timeout: self.options.drain_timeout,
                });
            }
            if waited < Duration::from_millis(1) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
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
    fn drop(&mut self) {
        // NCCL and the registered buffers must not be torn down under running work.
        let _ = self.stream.synchronize();
    }
}
