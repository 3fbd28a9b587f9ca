//! `nccl_symmetric`: NCCL on symmetric windows, and the engine's windows.
//!
//! A world registers one window per rank when it is built (never during a
//! capture: registering is a collective NCCL cannot record), and only when
//! every rank said beforehand that it can (`window::vote`): the NCCL that
//! runs there, the bytes it asks for, and its `ncclMemAlloc` of them done.
//! One rank that cannot makes every rank decline `nccl_symmetric`.
//!
//! Symmetric kernels read a peer's buffer at the same offset of the peer's
//! window, so every rank must run NCCL on the same window at the same offset.
//! Where a call runs is therefore decided from the call alone, never from
//! where its tensors happen to lie:
//! - an ordinary call (`all_reduce`, `all_reduce_in_place`, …) always copies
//!   its input into the rank's own window, runs NCCL there (all-reduce at
//!   offset 0; all-gather in place with this rank's share at `rank × share`)
//!   and copies the result out, on every rank, wherever its tensors lie
//!   (in an engine window too);
//! - a window call ([`RankComm::all_reduce_window`],
//!   [`RankComm::all_gather_window`]) runs in place on the first `len`
//!   elements of the engine's window `index` (allocation order). The index
//!   is part of the call's signature ([`Placement`]), like its size.
//!
//! So ranks that make the same calls (the contract of every collective, and
//! of NCCL itself) run NCCL on the same windows by construction. What is
//! checked where: a custom kernel, and the loopback reference collective
//! that stands in for NCCL in a loopback world, compare signatures in their
//! handshake, so ranks that make a window call on different windows, or a
//! window call against an ordinary one, get [`Error::Mismatch`] naming both
//! calls. NCCL across GPUs compares nothing: ranks that place one call
//! differently there run NCCL on different windows and NCCL cannot tell,
//! exactly as with ranks that pass different sizes; checking it would cost
//! an exchange per call, which is not done. Engines test their calls in a
//! loopback world, where the reference catches it.
//!
//! NCCL itself also decides by address: a plain NCCL call (`Algo::Nccl`, or
//! a call a custom kernel declined) on tensors that lie in an NCCL window
//! is, for NCCL, a call on that window, and NCCL requires every rank to
//! place it alike (`NCCL_WIN_COLL_SYMMETRIC`). Ordinary calls on window
//! memory are therefore symmetric only if the engine places them alike on
//! every rank, and nothing checks that (their signature says
//! [`Placement::Anywhere`]): use window memory through window calls.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

use super::capture::Lifeline;
use super::options::Select;
use super::rank::RankComm;
use crate::algorithms::Call;
use crate::element::Element;
use crate::error::{DriverContext, Error, Result};
use crate::nccl::NcclComm;
use crate::protocol::digest::Digest;
use crate::protocol::signature::Placement;
use crate::vocab::{Algo, Collective};
use crate::window::vote::{self, Offer, Outcome};
use crate::window::{Window, WindowMemory, switched_off, window_size};

/// What this rank can offer for a window of `bytes`: NCCL's window entry
/// points, windows not switched off in its environment, and the memory
/// itself, allocated now (freed again unless every rank votes yes).
/// `fail_allocation` (a test's [`ProcessSpec`](super::ProcessSpec) asking
/// for it) makes `ncclMemAlloc` ask for more than the GPU has, so that it
/// fails as on an exhausted GPU.
pub(crate) fn offer(
    ctx: &Arc<CudaContext>,
    bytes: u64,
    fail_allocation: bool,
) -> Offer<WindowMemory> {
    let memory = crate::window::api()
        .map(|_| ())
        .and_then(|()| switched_off(|name| std::env::var(name).ok()))
        .and_then(|()| {
            if bytes == 0 {
                Err("nccl_symmetric has no capacity on this platform".into())
            } else {
                Ok(())
            }
        })
        .and_then(|()| {
            let ask = if fail_allocation {
                more_than_the_gpu_has(ctx).map_err(|e| e.to_string())?
            } else {
                bytes
            };
            WindowMemory::alloc(ctx, ask).map_err(|e| {
                let injected = if fail_allocation {
                    " (more than the GPU has: a failure the test asked for)"
                } else {
                    ""
                };
                format!("{e}{injected}")
            })
        });
    Offer {
        nccl: crate::nccl::nccl_version(),
        bytes: window_size(bytes),
        memory,
    }
}

/// Twice the GPU's memory: what no `ncclMemAlloc` can give.
fn more_than_the_gpu_has(ctx: &Arc<CudaContext>) -> Result<u64> {
    ctx.bind_to_thread()
        .map_err(|e| Error::driver("binding the rank's context", e))?;
    let (_, total) = cudarc::driver::result::mem_get_info()
        .map_err(|e| Error::driver("asking for the GPU's memory", e))?;
    Ok((total as u64).saturating_mul(2))
}

/// Registers a window of `bytes` for every rank of a single-process world
/// (`ranks`, all together from this thread), once every rank has its memory
/// ready ([`offer`], decided as a world of processes decides). `(windows,
/// bytes)`; a world where some rank cannot have one gets none (`bytes` 0),
/// says why once in the log, and its `nccl_symmetric` calls decline to plain
/// NCCL. A registration that fails once begun is an error: NCCL was aborted.
pub(crate) fn register_rank_windows(
    ranks: &[(&NcclComm, &Arc<CudaContext>)],
    bytes: u64,
) -> Result<(Vec<Option<Window>>, u64)> {
    let none = || (ranks.iter().map(|_| None).collect(), 0);
    if ranks.is_empty() {
        return Ok(none());
    }
    let offers: Vec<Offer<WindowMemory>> = ranks
        .iter()
        .map(|(_, ctx)| offer(ctx, bytes, false))
        .collect();
    let votes: Vec<Digest> = offers.iter().map(Offer::vote).collect();
    match vote::decide(&votes) {
        Outcome::Register => {
            let memory = offers
                .into_iter()
                .map(|o| o.memory.map_err(Error::Unsupported))
                .collect::<Result<Vec<_>>>()?;
            let windows = NcclComm::register_windows(ranks, memory)?;
            let bytes = windows[0].memory.bytes;
            Ok((windows.into_iter().map(Some).collect(), bytes))
        }
        Outcome::Refused(why) | Outcome::Differ(why) => {
            log::info!(
                "colltune: no NCCL symmetric window ({why}); nccl_symmetric declines to plain NCCL"
            );
            Ok(none())
        }
    }
}

/// Where NCCL runs a call on windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// On the call's own tensors (a window call).
    InPlace,
    /// Through the rank's staging window at `base`: the input is copied to
    /// `slot`, NCCL runs in place on `base`, the output is copied out.
    Staged { base: u64, slot: u64 },
}

/// The route of a call placed `placement`, on rank `rank` whose staging
/// window starts at `staging`. It takes no tensor address: where a call's
/// tensors lie cannot make one rank run in place and another through its
/// window.
fn route(
    placement: Placement,
    collective: Collective,
    rank: usize,
    share: u64,
    staging: u64,
) -> Route {
    match placement {
        Placement::Window(_) => Route::InPlace,
        Placement::Anywhere => Route::Staged {
            base: staging,
            slot: match collective {
                Collective::AllReduce | Collective::AllReduceAddRmsNorm => staging,
                Collective::AllGather => staging + rank as u64 * share,
            },
        },
    }
}

impl RankComm {
    /// Runs `call` with NCCL on windows: in place for a window call, else
    /// through the rank's own window (see the module documentation).
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
        let run = |send: u64, recv: u64| match call.collective {
            Collective::AllReduce => nccl.all_reduce(send, recv, count, call.dtype, stream),
            Collective::AllGather => nccl.all_gather(send, recv, count, call.dtype, stream),
            // The decline rule never sends it here (NCCL has no such call).
            Collective::AllReduceAddRmsNorm => Err(Error::Unsupported(
                "NCCL on a window has no all_reduce_add_rmsnorm".into(),
            )),
        };
        match route(
            call.placement,
            call.collective,
            self.rank,
            share,
            staging.memory.ptr,
        ) {
            Route::InPlace => run(call.input, call.output),
            Route::Staged { base, slot } => {
                copy(stream, slot, call.input, share)?;
                run(slot, base)?;
                copy(stream, call.output, base, output_bytes)
            }
        }
    }

    /// The bytes of this rank's NCCL window, the same on every rank (0: the
    /// world has none, and `nccl_symmetric` declines to plain NCCL).
    pub fn window_bytes(&self) -> u64 {
        self.res.shared.window_bytes
    }

    /// `len` elements of `T` in a new window of this rank, for window calls
    /// ([`RankComm::all_reduce_window`], [`RankComm::all_gather_window`]),
    /// which `nccl_symmetric` runs in place, saving the copies through the
    /// rank's own window.
    ///
    /// In a world with NCCL windows ([`RankComm::window_bytes`] > 0) it is
    /// NCCL symmetric memory (`ncclMemAlloc`, registered by every rank
    /// together). Elsewhere (a loopback world of several ranks, a world
    /// joined through files, an NCCL without windows, a world that declined
    /// them, one that asked for none: no table in use selects
    /// `nccl_symmetric` and [`Options::nccl_window`](super::Options::nccl_window)
    /// is off) it is plain device memory and nothing is registered, so engine
    /// code is the same in every world, and so is the answer on every rank.
    ///
    /// Every rank calls this with the same `len` and `T`, in the same order:
    /// a window's index (its place in that order) is part of the identity of
    /// every window call on it. In a world of processes with NCCL windows
    /// the ranks check it: each allocates, then every rank says whether it
    /// could and what it asks for in a round of their own, and registers only
    /// if all could and asked alike; otherwise every rank gets the same error
    /// ([`Error::Unsupported`] naming the rank that could not,
    /// [`Error::Mismatch`] naming the sizes) and nothing is registered. In a
    /// single-process world each rank's thread registers its own (at the
    /// same time, as with every NCCL call there). Never while a stream is
    /// being captured. A window lives as long as its rank: dropping the
    /// buffer frees nothing before then. Allocate windows once, at start-up.
    ///
    /// ```no_run
    /// # fn demo(rank: &kernels::RankComm, batch: usize) -> kernels::Result<()> {
    /// use kernels::{Algo, Select};
    ///
    /// // Activations for the largest batch, all-reduced in place.
    /// let mut hidden = rank.alloc_window::<half::bf16>(4096 * 64)?;
    /// // … a layer writes the first 4096 x batch elements …
    /// rank.all_reduce_window(&mut hidden, 4096 * batch, Select::Force(Algo::NcclSymmetric))?;
    /// // Or let the tables decide: a table that picks nccl_symmetric runs in place too.
    /// rank.all_reduce_window(&mut hidden, 4096 * batch, Select::Auto)?;
    /// # Ok(()) }
    /// ```
    pub fn alloc_window<T: Element>(&self, len: usize) -> Result<WindowBuffer<T>> {
        let _turn = self.turn("alloc_window")?;
        self.known_fault()?;
        let stream = self.res.stream.clone();
        if crate::drain::capturing(&stream)? {
            return Err(Error::Unsupported(
                "alloc_window during a stream capture: registering an NCCL window is a \
                 collective a graph cannot hold; allocate windows before capturing"
                    .into(),
            ));
        }
        let bytes = (len as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::Mismatch(format!("a window of {len} elements")))?;
        let ctx = stream.context().clone();
        let index = self
            .res
            .windows
            .engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        let index = u32::try_from(index)
            .map_err(|_| Error::Unsupported(format!("a window numbered {index}")))?;
        let window = if self.window_bytes() > 0 {
            self.nccl_window(&ctx, index, bytes)?
        } else {
            Window {
                memory: WindowMemory::plain(&ctx, bytes)?,
            }
        };
        let ptr = window.memory.ptr;
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
            .during("clearing a new window")?;
        Ok(WindowBuffer {
            slice: ManuallyDrop::new(slice),
            ptr,
            index,
            _rank: self.lifeline(),
        })
    }

    /// An NCCL window of `bytes`, the engine's window `index`, registered
    /// with every peer's.
    fn nccl_window(&self, ctx: &Arc<CudaContext>, index: u32, bytes: u64) -> Result<Window> {
        let nccl = self.res.nccl_comm().ok_or_else(|| {
            Error::Unsupported("a world with an NCCL window has no NCCL communicator".into())
        })?;
        let register = |memory: WindowMemory| {
            NcclComm::register_windows(&[(nccl, ctx)], vec![memory])
                .map(|mut windows| windows.pop().expect("one window per rank"))
        };
        let mut membership = self
            .res
            .membership
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(membership) = membership.as_mut() else {
            // A single-process world: every rank's thread registers its own.
            // Peers wait for a rank whose allocation failed until their call
            // bound; a registration that failed breaks the world.
            let memory = WindowMemory::alloc(ctx, bytes)?;
            return register(memory).map_err(|e| self.res.health.fail(e));
        };
        let offer = Offer {
            nccl: crate::nccl::nccl_version(),
            bytes,
            memory: WindowMemory::alloc(ctx, bytes).map_err(|e| e.to_string()),
        };
        let round = format!("window-{index}");
        let stream = &self.res.stream;
        // A round or a registration that failed leaves peers behind: the
        // world is broken.
        let (outcome, window) = vote::agree(
            offer,
            |mine| membership.round(Some(nccl), stream, &round, mine),
            register,
        )
        .map_err(|e| self.res.health.fail(e))?;
        match (outcome, window) {
            (Outcome::Register, Some(window)) => Ok(window),
            (Outcome::Refused(why), _) => Err(Error::Unsupported(format!("window {index}: {why}"))),
            (Outcome::Differ(why), _) => Err(Error::Mismatch(format!(
                "window {index} (every rank allocates the same windows in the same order): {why}"
            ))),
            (Outcome::Register, None) => unreachable!("agree registers what every rank agreed"),
        }
    }

    /// All-reduce in place of the first `len` elements of `window`, a window
    /// of this rank: with `nccl_symmetric`, NCCL runs on the window itself,
    /// no copy. Every rank passes its window of the same index (allocation
    /// order) and the same `len`: the index is part of the call (see the
    /// module documentation), and a custom kernel or the loopback reference
    /// that runs it refuses ranks that differ with [`Error::Mismatch`].
    /// Otherwise as [`RankComm::all_reduce_in_place`].
    pub fn all_reduce_window<T: Element>(
        &self,
        window: &mut WindowBuffer<T>,
        len: usize,
        how: Select,
    ) -> Result<Algo> {
        let _turn = self.turn("all_reduce_window")?;
        let placement = self.placement_of(window, len, "all_reduce_window")?;
        self.reduce_in_place(&mut window.slice.slice_mut(..len), how, placement)
    }

    /// All-gather in place into the first `len` elements of `window`, a
    /// window of this rank, whose share already sits at its place (elements
    /// `rank × len / world ..`), as [`RankComm::all_gather_in_place`]; the
    /// window's index is part of the call, as for
    /// [`RankComm::all_reduce_window`].
    pub fn all_gather_window<T: Element>(
        &self,
        window: &mut WindowBuffer<T>,
        len: usize,
        how: Select,
    ) -> Result<Algo> {
        let what = "all_gather_window";
        let _turn = self.turn(what)?;
        let placement = self.placement_of(window, len, what)?;
        self.gather_in_place(&mut window.slice.slice_mut(..len), how, placement, what)
    }

    /// The placement of a window call on the first `len` elements of
    /// `window`, which must be one of this rank's windows.
    fn placement_of<T>(
        &self,
        window: &WindowBuffer<T>,
        len: usize,
        what: &str,
    ) -> Result<Placement> {
        if len > window.slice.len() {
            return Err(Error::Mismatch(format!(
                "{what} on rank {} of {len} elements of a window of {}",
                self.rank,
                window.slice.len()
            )));
        }
        let bytes = (window.slice.len() * std::mem::size_of::<T>()) as u64;
        let [ours] = self.res.windows.engine_holds([(window.ptr, bytes)]);
        if !ours {
            return Err(Error::Mismatch(format!(
                "{what} on rank {} with a window of another rank",
                self.rank
            )));
        }
        Ok(Placement::Window(window.index))
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

/// Elements of `T` in a window of one rank ([`RankComm::alloc_window`]):
/// NCCL symmetric memory where the world has NCCL windows, plain device
/// memory elsewhere. Use it as a [`CudaSlice`] (views, uploads, kernels);
/// window calls on it ([`RankComm::all_reduce_window`],
/// [`RankComm::all_gather_window`]) run `nccl_symmetric` in place. Any
/// other collective on it is an ordinary call (through the rank's own
/// window, for `nccl_symmetric`). It keeps its rank's resources alive; its
/// memory goes when the rank ends.
pub struct WindowBuffer<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    /// Its device address.
    ptr: u64,
    /// Its place in its rank's allocation order.
    index: u32,
    _rank: Lifeline,
}

impl<T> WindowBuffer<T> {
    /// Its place in its rank's allocation order (0 for the first): the
    /// window every window call on it names.
    pub fn index(&self) -> u32 {
        self.index
    }
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
        write!(
            f,
            "WindowBuffer(window {}, {} elements)",
            self.index,
            self.slice.len()
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_nccl_runs_a_call_depends_on_the_call_alone() {
        // Every rank's staging window starts elsewhere, and its tensors lie
        // anywhere (in an engine window or not): `route` never sees them. An
        // ordinary call runs through the staging window at the same offset
        // on every rank, a window call in place on every rank.
        let share = 4096;
        let staging = [0x7f00_0000_0000u64, 0x7e00_0020_0000, 0x7d00_0040_0000];
        for collective in Collective::ALL {
            for (rank, &base) in staging.iter().enumerate() {
                let Route::Staged { base: at, slot } =
                    route(Placement::Anywhere, collective, rank, share, base)
                else {
                    panic!("an ordinary call ran in place");
                };
                assert_eq!(at, base);
                let expected = match collective {
                    Collective::AllReduce | Collective::AllReduceAddRmsNorm => 0,
                    Collective::AllGather => rank as u64 * share,
                };
                assert_eq!(slot - base, expected, "{collective:?} rank {rank}");
                for index in [0, 3] {
                    assert_eq!(
                        route(Placement::Window(index), collective, rank, share, base),
                        Route::InPlace
                    );
                }
            }
        }
    }
}
