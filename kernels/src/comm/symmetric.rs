//! `nccl_symmetric`: NCCL on symmetric windows. A world registers one window
//! per rank when it is built (never during a capture: registering is a
//! collective NCCL cannot record); a call whose tensors lie in windows the
//! engine allocated ([`RankComm::alloc_window`]) runs NCCL on them in place,
//! any other call copies its input into the rank's own window, runs NCCL
//! there and copies the result out. Symmetric kernels read a peer's buffer at
//! the same offset of the peer's window, so every rank must pass window
//! tensors at the same offsets, or none (as with NCCL itself).

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

use super::capture::Lifeline;
use super::rank::RankComm;
use crate::algorithms::Call;
use crate::element::Element;
use crate::error::{DriverContext, Error, Result};
use crate::nccl::NcclComm;
use crate::vocab::Collective;
use crate::window::{Window, WindowMemory};

/// Registers a window of `bytes` for every rank of `ranks` (all of a
/// single-process world together, or this process's one rank while every
/// peer does the same). `(windows, bytes)` on success; a world whose NCCL
/// cannot register windows gets none (`bytes` 0) and says so once in the
/// log, and its `nccl_symmetric` calls then decline to plain NCCL.
pub(crate) fn register_rank_windows(
    ranks: &[(&NcclComm, &Arc<CudaContext>)],
    bytes: u64,
) -> (Vec<Option<Window>>, u64) {
    let none = || (ranks.iter().map(|_| None).collect(), 0);
    if bytes == 0 || ranks.is_empty() {
        return none();
    }
    let registered = ranks
        .iter()
        .map(|(_, ctx)| WindowMemory::alloc(ctx, bytes))
        .collect::<Result<Vec<_>>>()
        .and_then(|memory| NcclComm::register_windows(ranks, memory));
    match registered {
        Ok(windows) => {
            let bytes = windows[0].memory.bytes;
            (windows.into_iter().map(Some).collect(), bytes)
        }
        Err(e) => {
            log::info!(
                "colltune: no NCCL symmetric window ({e}); nccl_symmetric declines to plain NCCL"
            );
            none()
        }
    }
}

impl RankComm {
    /// Runs `call` with NCCL on windows: in place when its tensors lie in
    /// the engine's windows, else through the rank's own window.
    pub(super) fn run_on_window(&self, call: &Call) -> Result<()> {
        let nccl = self
            .res
            .nccl_comm()
            .ok_or_else(|| Error::Unsupported("this world has no NCCL communicator".into()))?;
        let staging = self
            .res
            .windows
            .staging
            .as_ref()
            .ok_or_else(|| Error::Unsupported("this rank has no NCCL window".into()))?;
        let stream = &self.res.stream;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| Error::driver("binding the rank's context for NCCL", e))?;
        let element = call.dtype.size_bytes();
        let count = (call.bytes_per_rank / element) as usize;
        let share = call.bytes_per_rank;
        let output_bytes = call.collective.output_size(self.world_size as u64, share);
        let [input_in, output_in] = self
            .res
            .windows
            .engine_holds([(call.input, share), (call.output, output_bytes)]);
        // Where this rank's contribution sits for an in-place call on `base`.
        let own_slot = |base: u64| match call.collective {
            Collective::AllReduce => base,
            Collective::AllGather => base + self.rank as u64 * share,
        };
        let run = |send: u64, recv: u64| match call.collective {
            Collective::AllReduce => nccl.all_reduce(send, recv, count, call.dtype, stream),
            Collective::AllGather => nccl.all_gather(send, recv, count, call.dtype, stream),
        };
        if output_in {
            if input_in {
                return run(call.input, call.output);
            }
            let slot = own_slot(call.output);
            copy(stream, slot, call.input, share)?;
            return run(slot, call.output);
        }
        let base = staging.memory.ptr;
        let slot = own_slot(base);
        copy(stream, slot, call.input, share)?;
        run(slot, base)?;
        copy(stream, call.output, base, output_bytes)
    }

    /// `len` elements of `T` in a new NCCL symmetric window of this rank,
    /// for tensors that `nccl_symmetric` then reads and writes in place,
    /// saving the copies through the rank's own window.
    ///
    /// Registering a window is a collective: every rank calls this with the
    /// same `len`, in the same order (in a single-process world, each from
    /// its own thread at the same time, as with every NCCL call there), and
    /// never while a stream is being captured. A window lives as long as
    /// its rank: NCCL releases it when the rank ends, so dropping the buffer
    /// frees nothing before then. Allocate windows once, at start-up.
    ///
    /// Fails with [`Error::Unsupported`] in a world without NCCL (a loopback
    /// world of several ranks) or with an NCCL that has no windows (before
    /// 2.27).
    ///
    /// ```no_run
    /// # fn demo(rank: &mut kernels::RankComm) -> kernels::Result<()> {
    /// use kernels::Select;
    /// use policy::{Algo, Mode};
    ///
    /// // Activations that all-reduce in place on the window, no copy.
    /// let mut hidden = rank.alloc_window::<half::bf16>(4096)?;
    /// rank.all_reduce_in_place(&mut hidden.as_view_mut(), Select::Force(Algo::NcclSymmetric))?;
    /// // Or let the tables decide: a table that picks nccl_symmetric runs in place too.
    /// rank.all_reduce_in_place(&mut hidden.as_view_mut(), Select::Policy(Mode::Graph))?;
    /// # Ok(()) }
    /// ```
    pub fn alloc_window<T: Element>(&mut self, len: usize) -> Result<WindowBuffer<T>> {
        self.known_fault()?;
        let stream = self.res.stream.clone();
        if stream
            .capture_status()
            .during("asking whether the stream is capturing")?
            != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        {
            return Err(Error::Unsupported(
                "alloc_window during a stream capture: registering an NCCL window is a \
                 collective a graph cannot hold; allocate windows before capturing"
                    .into(),
            ));
        }
        let nccl = self.res.nccl_comm().ok_or_else(|| {
            Error::Unsupported(
                "alloc_window in a world without NCCL (a loopback world of several ranks)".into(),
            )
        })?;
        let bytes = (len as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::Mismatch(format!("a window of {len} elements")))?;
        let ctx = stream.context().clone();
        let memory = WindowMemory::alloc(&ctx, bytes)?;
        let ptr = memory.ptr;
        let window = NcclComm::register_windows(&[(nccl, &ctx)], vec![memory])
            .map_err(|e| self.res.health.fail(e))?
            .pop()
            .expect("one window per rank");
        self.res
            .windows
            .engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(window);
        // SAFETY: `ptr` is a live allocation of at least `len` elements of `T`
        // on this stream's device, owned by the rank's resources, which the
        // buffer keeps alive; the buffer never frees it (see Drop).
        let mut slice = unsafe { stream.upgrade_device_ptr::<T>(ptr, len) };
        stream
            .memset_zeros(&mut slice)
            .during("clearing a new NCCL window")?;
        Ok(WindowBuffer {
            slice: ManuallyDrop::new(slice),
            _rank: self.lifeline(),
        })
    }
}

/// Copies `bytes` from `src` to `dst` on `stream` (nothing when they are
/// the same place).
fn copy(stream: &CudaStream, dst: u64, src: u64, bytes: u64) -> Result<()> {
    if dst == src || bytes == 0 {
        return Ok(());
    }
    // SAFETY: the caller passes live device ranges of `bytes` on this
    // stream's device that do not overlap.
    unsafe {
        cudarc::driver::result::memcpy_dtod_async(dst, src, bytes as usize, stream.cu_stream())
    }
    .during("copying a call's tensor through the NCCL window")
}

/// Elements of `T` in an NCCL symmetric window of one rank
/// ([`RankComm::alloc_window`]). Use it as a [`CudaSlice`] (views,
/// uploads, kernels); collectives on it with `nccl_symmetric` run in place.
/// It keeps its rank's resources alive; its memory goes when the rank ends.
pub struct WindowBuffer<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    _rank: Lifeline,
}

impl<T> Deref for WindowBuffer<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for WindowBuffer<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> std::fmt::Debug for WindowBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WindowBuffer({} elements)", self.slice.len())
    }
}

impl<T> Drop for WindowBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the slice is not used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        // The rank frees the memory after NCCL has ended, not cudarc.
        let _ = slice.leak();
    }
}
