//! NCCL through cudarc's binding (its `result`/`sys` layers: the safe `Comm`
//! hides the raw communicator, which in-place all-gather and async-error checks
//! need, and panics when dropped after a failure).
//!
//! Every communicator is created **non-blocking** (`ncclConfig_t::blocking = 0`)
//! so that no NCCL call can wait without a bound: initialisation, a collective
//! that sets up connections, and finalisation return `ncclInProgress` at once,
//! and this module polls `ncclCommGetAsyncError` against a deadline, aborting
//! the communicator (`ncclCommAbort`) when the deadline passes. Teardown runs on
//! a helper thread that the dropping thread waits for with a deadline as well,
//! because `ncclCommDestroy` joins NCCL's proxy thread, which waits until every
//! peer has closed its connections: a peer that is alive but silent would hold
//! it forever.
//!
//! One lock owns the raw communicator ([`Guarded`]): every NCCL call on it is
//! made under the lock, and ending it takes the handle out under the same
//! lock. So a thread that polls the communicator's health (a graph's
//! [`Lifeline`](crate::Lifeline)) can never call into a communicator that the
//! rank's thread is aborting, and no two threads ever call NCCL on one
//! communicator at once (NCCL forbids it).

use std::ffi::{CStr, c_int};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::sys;

use crate::error::{Error, Result};
use crate::ffi;
use crate::vocab::DType;

/// Bound on a collective that NCCL answers with `ncclInProgress` (it is
/// connecting to its peers, which must issue the same call) unless the owner
/// sets another ([`NcclComm::set_call_bound`]). Matches
/// `Options::drain_timeout`'s default.
pub(crate) const DEFAULT_CALL_BOUND: Duration = Duration::from_secs(60);

/// Bound on a healthy teardown (`ncclCommFinalize` until it completes, then
/// `ncclCommDestroy`; `ncclCommDestroy` alone in a single-process world). Past
/// it the communicator is aborted (or, if NCCL does not return, left behind).
/// Peers of a world of processes have just said goodbye when it starts, so it
/// is normally a few milliseconds.
pub(crate) const TEARDOWN_BOUND: Duration = Duration::from_secs(10);

/// Bound on `ncclCommAbort` itself. It waits for no peer, but it joins NCCL's
/// own threads; if it still has not returned after this, the helper thread is
/// left behind (and the caller must leak memory NCCL kernels could touch).
pub(crate) const ABORT_BOUND: Duration = Duration::from_secs(10);

/// Bound on forming the communicators of a single-process world
/// ([`NcclComm::init_all`]): all ranks are created by this call, so it only
/// waits for NCCL's own set-up.
const INIT_ALL_BOUND: Duration = Duration::from_secs(60);

/// A raw handle and whether it may still be used, behind one lock. Every use
/// runs under the lock ([`Guarded::with_live`]), and [`Guarded::take`] ends
/// the handle's life under the same lock: a use that has started finishes
/// before the handle can be freed, and no use starts after. "Is it still
/// live?" and "use it" are one step.
#[derive(Debug)]
struct Guarded<H> {
    state: Mutex<HandleState<H>>,
}

#[derive(Debug)]
enum HandleState<H> {
    Live(H),
    /// Taken out to be released or aborted; `abandoned` when the teardown
    /// did not return within its bound (a helper thread still holds it).
    Gone {
        abandoned: bool,
    },
}

impl<H: Copy> HandleState<H> {
    fn live(&self) -> Option<H> {
        match self {
            HandleState::Live(handle) => Some(*handle),
            HandleState::Gone { .. } => None,
        }
    }
}

impl<H: Copy> Guarded<H> {
    fn new(handle: H) -> Guarded<H> {
        Guarded {
            state: Mutex::new(HandleState::Live(handle)),
        }
    }

    /// The state, locked. A panic inside a use cannot leave the handle
    /// half-released (the state only changes in `take`), so a poisoned lock
    /// is taken as it is.
    fn lock(&self) -> MutexGuard<'_, HandleState<H>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `use_it` on the handle under the lock; `None` once it is gone.
    fn with_live<T>(&self, use_it: impl FnOnce(H) -> T) -> Option<T> {
        self.lock().live().map(use_it)
    }

    /// Takes the handle out (once): the caller releases it. Waits for a use
    /// in progress on another thread to finish.
    fn take(&self) -> Option<H> {
        let mut state = self.lock();
        let handle = state.live();
        if handle.is_some() {
            *state = HandleState::Gone { abandoned: false };
        }
        handle
    }

    /// Records that the release of the taken handle did not return in time.
    fn mark_abandoned(&self) {
        *self.lock() = HandleState::Gone { abandoned: true };
    }

    /// `None` while live; `Some(abandoned)` once taken.
    fn ended(&self) -> Option<bool> {
        match &*self.lock() {
            HandleState::Live(_) => None,
            HandleState::Gone { abandoned } => Some(*abandoned),
        }
    }
}

/// One rank's NCCL communicator.
#[derive(Debug)]
pub(crate) struct NcclComm {
    /// The raw communicator; gone once it was aborted or released, after
    /// which every call is an error and drop does nothing.
    handle: Guarded<sys::ncclComm_t>,
    /// Abort instead of finalising on drop: the world is broken (a peer that
    /// never called, a timeout, a mismatch), so nothing may wait for peers.
    abort_on_drop: bool,
    /// Bound on a collective answered with `ncclInProgress`.
    call_bound: Duration,
    /// This communicator's rank, for errors.
    rank: usize,
    /// One of several communicators of this process formed together
    /// ([`NcclComm::init_all`]): a healthy teardown destroys without an
    /// explicit finalize (see [`Way::Destroy`]).
    local_group: bool,
    /// The engine's communicator ([`NcclComm::borrow`]): a healthy end
    /// hands it back untouched; a broken world still aborts it (only an
    /// abort ends NCCL kernels waiting for a peer that will never come).
    borrowed: bool,
}

// SAFETY: the raw communicator is only ever used under `handle`'s lock, by one
// thread at a time (what NCCL requires of a communicator), and is taken out of
// it under the same lock before it is released; a helper thread that releases
// it is its only user from then on.
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

/// A raw communicator handed to a helper thread (teardown). Only one thread
/// uses it at a time: it was taken out of the owner's lock first.
struct Raw(sys::ncclComm_t);
// SAFETY: see above.
unsafe impl Send for Raw {}

impl Raw {
    /// Taking the whole wrapper makes a closure capture it (and its `Send`),
    /// not its raw pointer field.
    fn get(self) -> sys::ncclComm_t {
        self.0
    }
}

fn nccl_error(what: &str, code: sys::ncclResult_t) -> Error {
    // SAFETY: returns a static string for any code.
    let text = unsafe { sys::ncclGetErrorString(code) };
    let text = if text.is_null() {
        String::new()
    } else {
        // SAFETY: NCCL returns a NUL-terminated static string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    };
    Error::Nccl {
        what: what.into(),
        code: format!("{code:?} ({text})"),
    }
}

fn check(what: &str, code: sys::ncclResult_t) -> Result<()> {
    match code {
        sys::ncclResult_t::ncclSuccess => Ok(()),
        other => Err(nccl_error(what, other)),
    }
}

fn nccl_dtype(dtype: DType) -> sys::ncclDataType_t {
    match dtype {
        DType::Bf16 => sys::ncclDataType_t::ncclBfloat16,
        DType::F16 => sys::ncclDataType_t::ncclFloat16,
        DType::F32 => sys::ncclDataType_t::ncclFloat32,
    }
}

/// What `NCCL_CONFIG_INITIALIZER` gives (every field "undefined", so NCCL picks
/// its defaults and honours its environment variables), except `blocking`
/// (0 unless an A/B measurement asks for blocking communicators).
/// `size` and `version` describe the struct of the headers cudarc was generated
/// from (2.28); an older NCCL copies the prefix it knows, a newer one fills the
/// fields it added with defaults.
fn config(blocking: bool) -> sys::ncclConfig_t {
    const UNDEF_INT: c_int = c_int::MIN;
    sys::ncclConfig_t {
        size: std::mem::size_of::<sys::ncclConfig_t>(),
        magic: 0xcafe_beef,
        // NCCL_VERSION(2, 28, 0): major * 10000 + minor * 100 + patch.
        version: 22_800,
        blocking: blocking as c_int,
        cgaClusterSize: UNDEF_INT,
        minCTAs: UNDEF_INT,
        maxCTAs: UNDEF_INT,
        netName: std::ptr::null(),
        splitShare: UNDEF_INT,
        trafficClass: UNDEF_INT,
        commName: std::ptr::null(),
        collnetEnable: UNDEF_INT,
        CTAPolicy: UNDEF_INT,
        shrinkShare: UNDEF_INT,
        nvlsCTAs: UNDEF_INT,
        nChannelsPerNetPeer: UNDEF_INT,
        nvlinkCentricSched: UNDEF_INT,
    }
}

/// What polling a non-blocking communicator found.
#[derive(Debug, PartialEq, Eq)]
enum Settled {
    Done,
    /// Still `ncclInProgress` when the deadline passed.
    Late,
}

/// How a wait for a communicator to leave `ncclInProgress` paces its polls.
/// It spins first: a collective that a non-blocking communicator hands to
/// NCCL's own thread is usually enqueued within microseconds, and a first
/// sleep (the scheduler rounds even 20 µs up to tens of µs) would put that
/// much into every such call. Then it yields, then sleeps with a growing
/// pause, so a long wait (peers still connecting, a lost peer) costs no CPU.
/// Every wait still ends at its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pace {
    Spin,
    Yield,
    Sleep(Duration),
}

/// Spin this long before yielding.
const SPIN_FOR: Duration = Duration::from_micros(200);
/// Yield this long before sleeping.
const YIELD_FOR: Duration = Duration::from_millis(5);
/// The first and the longest sleep between polls.
const FIRST_SLEEP: Duration = Duration::from_micros(50);
const LONGEST_SLEEP: Duration = Duration::from_millis(1);

/// How to wait before the next poll, `waited` into the wait, after sleeping
/// `last` (the previous pace).
fn pace(waited: Duration, last: Pace) -> Pace {
    if waited < SPIN_FOR {
        Pace::Spin
    } else if waited < YIELD_FOR {
        Pace::Yield
    } else {
        match last {
            Pace::Sleep(pause) => Pace::Sleep((pause * 2).min(LONGEST_SLEEP)),
            _ => Pace::Sleep(FIRST_SLEEP),
        }
    }
}

/// NCCL collectives issued, and how many of them NCCL answered with
/// `ncclInProgress` (which makes the call wait in [`settle`]): what the bench
/// reports, so that the cost of an eager NCCL call can be traced to it.
static CALLS: AtomicU64 = AtomicU64::new(0);
static IN_PROGRESS: AtomicU64 = AtomicU64::new(0);

/// (collectives issued, of them answered with `ncclInProgress`) so far in
/// this process.
pub fn call_stats() -> (u64, u64) {
    (
        CALLS.load(Ordering::Relaxed),
        IN_PROGRESS.load(Ordering::Relaxed),
    )
}

/// The state of a communicator NCCL has not released (`ncclCommGetAsyncError`).
///
/// # Safety
/// `comm` is a live communicator that no other thread uses during the call.
unsafe fn async_state(comm: sys::ncclComm_t) -> Result<sys::ncclResult_t> {
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: as the caller promises; writes one result code.
    check("ncclCommGetAsyncError", unsafe {
        sys::ncclCommGetAsyncError(comm, &mut state)
    })?;
    Ok(state)
}

/// Polls a communicator's state (`state`, one `ncclCommGetAsyncError`) until
/// it leaves `ncclInProgress` or `deadline` passes, paced by [`pace`]. An
/// error NCCL reports (its own or a peer's) ends the wait with that error.
fn settle(
    what: &str,
    deadline: Instant,
    mut state: impl FnMut() -> Result<sys::ncclResult_t>,
) -> Result<Settled> {
    let start = Instant::now();
    let mut last = Pace::Spin;
    loop {
        match state()? {
            sys::ncclResult_t::ncclSuccess => return Ok(Settled::Done),
            sys::ncclResult_t::ncclInProgress => {}
            other => return Err(nccl_error(what, other)),
        }
        if Instant::now() >= deadline {
            return Ok(Settled::Late);
        }
        last = pace(start.elapsed(), last);
        match last {
            Pace::Spin => std::hint::spin_loop(),
            Pace::Yield => std::thread::yield_now(),
            Pace::Sleep(pause) => std::thread::sleep(pause),
        }
    }
}

/// Runs `job` on a helper thread and waits for it at most `bound`. `None`: the
/// thread did not finish in time and is left behind (it ends with the process),
/// or no thread could be started.
fn bounded<T: Send + 'static>(
    name: &str,
    bound: Duration,
    job: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (send, receive) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // Nobody listens any more after the deadline.
            let _ = send.send(job());
        });
    // No thread (the system refused one): the job never ran; the caller treats
    // it like a job past its deadline (leak rather than wait).
    spawned.ok()?;
    receive.recv_timeout(bound).ok()
}

/// How a communicator ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Finalised and destroyed: every peer took part.
    Released,
    /// Aborted (a broken world, or a teardown past its bound): its kernels
    /// have ended, its resources are freed.
    Aborted,
    /// NCCL did not return within [`ABORT_BOUND`]: a helper thread still holds
    /// it and NCCL kernels may still run, so memory they could touch must leak.
    Abandoned,
}

/// How a communicator is torn down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// A rank of a world of processes: `ncclCommFinalize` polled against the
    /// bound (it completes with the peers, which are dropping too after their
    /// goodbye), then `ncclCommDestroy`, which only frees local resources.
    Finalize,
    /// A rank of a single-process world: `ncclCommDestroy` alone. NCCL defers
    /// the shared teardown of a process's communicators to the last of them
    /// to be destroyed, so ranks dropped one after the other on one thread
    /// never wait for each other (an explicit finalize could: it synchronises
    /// with the other ranks). Bounded by the helper thread's wait.
    Destroy,
    /// A broken world: `ncclCommAbort`, which waits for no peer.
    Abort,
}

/// Tears `comm` down on a helper thread the way `way` says; a finalize that
/// fails or runs past `bound` becomes an abort. Waits at most
/// `bound + ABORT_BOUND`.
fn teardown(comm: sys::ncclComm_t, way: Way, bound: Duration) -> Ended {
    let raw = Raw(comm);
    let ended = bounded("colltune-nccl-teardown", bound + ABORT_BOUND, move || {
        let comm = raw.get();
        if way == Way::Destroy {
            // SAFETY: a live communicator, used by this thread only from here
            // on, released only here.
            let _ = unsafe { sys::ncclCommDestroy(comm) };
            return Ended::Released;
        }
        if way == Way::Finalize {
            let deadline = Instant::now() + bound;
            // SAFETY: a live communicator, used by this thread only from here on.
            let finalized = match unsafe { sys::ncclCommFinalize(comm) } {
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => {
                    // SAFETY: this thread is the communicator's only user.
                    let state = || unsafe { async_state(comm) };
                    matches!(
                        settle("ncclCommFinalize", deadline, state),
                        Ok(Settled::Done)
                    )
                }
                _ => false,
            };
            if finalized {
                // After a complete finalize, destroy frees local resources only.
                // SAFETY: finalised above and released only here.
                let _ = unsafe { sys::ncclCommDestroy(comm) };
                return Ended::Released;
            }
        }
        // SAFETY: a live communicator (finalize may have run; abort is valid
        // after it), released only here.
        let _ = unsafe { sys::ncclCommAbort(comm) };
        Ended::Aborted
    });
    ended.unwrap_or(Ended::Abandoned)
}

impl NcclComm {
    fn wrap(comm: sys::ncclComm_t, rank: usize) -> NcclComm {
        NcclComm {
            handle: Guarded::new(comm),
            rank,
            abort_on_drop: false,
            call_bound: DEFAULT_CALL_BOUND,
            local_group: false,
            borrowed: false,
        }
    }

    /// The engine's own communicator, used by this rank for its NCCL calls
    /// and rounds without owning it: checked to be rank `rank` of `world` on
    /// `ctx`'s device. Its healthy end leaves it to the engine.
    ///
    /// # Safety
    /// `comm` is a live NCCL communicator that stays live while this rank (or
    /// a graph captured on it) exists, and that no other thread uses while a
    /// call of this rank runs (NCCL forbids concurrent use of a communicator).
    pub(crate) unsafe fn borrow(
        ctx: &Arc<CudaContext>,
        comm: sys::ncclComm_t,
        rank: usize,
        world: usize,
    ) -> Result<NcclComm> {
        ffi::require_nccl()?;
        if comm.is_null() {
            return Err(Error::Unsupported(
                "the engine's NCCL communicator is null".into(),
            ));
        }
        let (mut count, mut user_rank, mut device) = (0, 0, 0);
        // SAFETY: a live communicator (the caller's promise); each call writes one int.
        unsafe {
            check("ncclCommCount", sys::ncclCommCount(comm, &mut count))?;
            check(
                "ncclCommUserRank",
                sys::ncclCommUserRank(comm, &mut user_rank),
            )?;
            check("ncclCommCuDevice", sys::ncclCommCuDevice(comm, &mut device))?;
        }
        check_borrowed(
            (rank, world, ctx.ordinal()),
            (user_rank as usize, count as usize, device as usize),
        )?;
        let mut borrowed = NcclComm::wrap(comm, rank);
        borrowed.borrowed = true;
        Ok(borrowed)
    }

    /// The raw communicator while it is live: the engine may issue its own
    /// NCCL calls on it between this rank's calls.
    pub(crate) fn raw(&self) -> Option<sys::ncclComm_t> {
        self.handle.with_live(|comm| comm)
    }

    /// One communicator per device ordinal, ranks in the order given (a single
    /// process): `ncclCommInitRankConfig` per device inside one NCCL group,
    /// non-blocking, polled with a bound.
    pub(crate) fn init_all(ordinals: &[i32], blocking: bool) -> Result<Vec<NcclComm>> {
        ffi::require_nccl()?;
        let world = ordinals.len();
        // The primary contexts: NCCL picks each rank's device from the
        // thread's current context (the runtime adopts it).
        let contexts = ordinals
            .iter()
            .map(|&o| {
                usize::try_from(o)
                    .map_err(|_| Error::Mismatch(format!("device ordinal {o}")))
                    .and_then(|o| {
                        CudaContext::new(o).map_err(|e| Error::driver("opening a GPU for NCCL", e))
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes one id.
        check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut id) })?;
        let mut comms = vec![std::ptr::null_mut(); world];
        // SAFETY: opens a group; closed below on every path.
        check("ncclGroupStart", unsafe { sys::ncclGroupStart() })?;
        let mut issued = Ok(());
        for (rank, ctx) in contexts.iter().enumerate() {
            let step = ctx
                .bind_to_thread()
                .map_err(|e| Error::driver("binding a context for NCCL", e))
                .and_then(|()| {
                    let mut config = config(blocking);
                    // SAFETY: writes one communicator; `config` outlives the call
                    // (NCCL copies it).
                    let code = unsafe {
                        sys::ncclCommInitRankConfig(
                            &mut comms[rank],
                            world as c_int,
                            id,
                            rank as c_int,
                            &mut config,
                        )
                    };
                    in_progress_is_ok("ncclCommInitRankConfig", code)
                });
            if let Err(e) = step {
                issued = Err(e);
                break;
            }
        }
        // SAFETY: closes the group opened above.
        let ended = in_progress_is_ok("ncclGroupEnd", unsafe { sys::ncclGroupEnd() });
        let comms: Vec<NcclComm> = comms
            .into_iter()
            .enumerate()
            .filter(|(_, c)| !c.is_null())
            .map(|(rank, c)| {
                let mut comm = NcclComm::wrap(c, rank);
                comm.local_group = true;
                comm
            })
            .collect();
        let formed = issued.and(ended).and_then(|()| {
            if comms.len() != world {
                return Err(Error::Unsupported(format!(
                    "NCCL formed {} of {world} communicators",
                    comms.len()
                )));
            }
            let deadline = Instant::now() + INIT_ALL_BOUND;
            for (rank, comm) in comms.iter().enumerate() {
                if comm.settle("ncclCommInitRankConfig", deadline)? == Settled::Late {
                    return Err(Error::Timeout {
                        rank,
                        peer: None,
                        during: format!("forming NCCL communicators for {world} local GPUs"),
                        timeout: INIT_ALL_BOUND,
                    });
                }
            }
            Ok(())
        });
        match formed {
            Ok(()) => Ok(comms),
            Err(e) => {
                // Half-formed communicators wait for each other: abort them all.
                for mut comm in comms {
                    comm.abort_on_drop();
                }
                Err(e)
            }
        }
    }

    /// Rank `rank` of a world of `world` processes that share `id`
    /// (`ncclCommInitRankConfig`, non-blocking) on `ctx`'s device. Gives up
    /// after `timeout` with [`Error::Timeout`], aborting the half-formed
    /// communicator, so nothing is left waiting for the missing rank.
    pub(crate) fn init_rank(
        ctx: &Arc<CudaContext>,
        world: usize,
        rank: usize,
        id: &NcclId,
        timeout: Duration,
        blocking: bool,
    ) -> Result<NcclComm> {
        let mut comm = NcclComm::start_rank(ctx, world, rank, id, blocking)?;
        match comm.joined(world, timeout) {
            Ok(()) => Ok(comm),
            Err(e) => {
                comm.abort_on_drop();
                Err(e)
            }
        }
    }

    /// Starts forming rank `rank` of `world` (`ncclCommInitRankConfig`,
    /// non-blocking): the communicator it returns may still be joining its
    /// peers ([`NcclComm::joined`] waits for them).
    fn start_rank(
        ctx: &Arc<CudaContext>,
        world: usize,
        rank: usize,
        id: &NcclId,
        blocking: bool,
    ) -> Result<NcclComm> {
        ffi::require_nccl()?;
        // NCCL picks the device from the thread's current context.
        ctx.bind_to_thread()
            .map_err(|e| Error::driver("binding the context for ncclCommInitRankConfig", e))?;
        let raw_id = sys::ncclUniqueId {
            internal: id.0.map(|b| b as std::ffi::c_char),
        };
        let mut comm = std::ptr::null_mut();
        let mut config = config(blocking);
        // SAFETY: writes one communicator; NCCL copies `config`.
        let code = unsafe {
            sys::ncclCommInitRankConfig(
                &mut comm,
                world as c_int,
                raw_id,
                rank as c_int,
                &mut config,
            )
        };
        let started = in_progress_is_ok("ncclCommInitRankConfig", code);
        if comm.is_null() {
            started?;
            return Err(Error::Unsupported(
                "ncclCommInitRankConfig returned no communicator".into(),
            ));
        }
        let mut comm = NcclComm::wrap(comm, rank);
        if let Err(e) = started {
            comm.abort_on_drop();
            return Err(e);
        }
        Ok(comm)
    }

    /// Waits at most `timeout` for every rank of `world` to join; past it the
    /// communicator is aborted (which ends NCCL's wait for the missing rank)
    /// and the answer is [`Error::Timeout`].
    fn joined(&self, world: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        if self.settle("ncclCommInitRankConfig", deadline)? == Settled::Done {
            return Ok(());
        }
        self.abort_now();
        Err(Error::Timeout {
            rank: self.rank,
            peer: None,
            during: format!(
                "ncclCommInitRank (waiting for all {world} ranks to join with the same NCCL \
                 unique id)"
            ),
            timeout,
        })
    }

    /// Bound on a collective that NCCL answers with `ncclInProgress` (a world
    /// sets it to its `Options::drain_timeout`).
    pub(crate) fn set_call_bound(&mut self, bound: Duration) {
        self.call_bound = bound;
    }

    /// Makes one NCCL call on the communicator (under its lock), unless it was
    /// aborted or released.
    fn call(
        &self,
        what: &str,
        nccl: impl FnOnce(sys::ncclComm_t) -> sys::ncclResult_t,
    ) -> Result<sys::ncclResult_t> {
        self.handle.with_live(nccl).ok_or_else(|| gone(what))
    }

    /// The communicator's state (`ncclCommGetAsyncError`).
    fn state(&self) -> Result<sys::ncclResult_t> {
        self.handle
            // SAFETY: live, and used by this thread alone while the lock is held.
            .with_live(|comm| unsafe { async_state(comm) })
            .unwrap_or_else(|| Err(gone("ncclCommGetAsyncError")))
    }

    /// [`settle`] on this communicator: one locked poll at a time, so other
    /// threads may poll it (or abort it) between two polls.
    fn settle(&self, what: &str, deadline: Instant) -> Result<Settled> {
        settle(what, deadline, || self.state())
    }

    /// Aborts the communicator now (`ncclCommAbort`, bounded by
    /// [`ABORT_BOUND`]), which also ends its kernels that wait for a peer. For
    /// a rendezvous all-gather or a collective that never finished, and for a
    /// rank that knows of a fault: dropping the communicator or anything that
    /// synchronises the stream would otherwise wait for the missing peer.
    /// Idempotent. Waits for an NCCL call another thread is making on it.
    pub(crate) fn abort_now(&self) {
        if let Some(comm) = self.handle.take()
            && teardown(comm, Way::Abort, Duration::ZERO) == Ended::Abandoned
        {
            self.handle.mark_abandoned();
        }
    }

    /// Ends the communicator now, bounded: finalise and destroy when `healthy`
    /// (aborting past [`TEARDOWN_BOUND`]), abort otherwise. Idempotent; drop
    /// does the same with `healthy = !abort_on_drop`.
    pub(crate) fn end(&self, healthy: bool) -> Ended {
        let Some(comm) = self.handle.take() else {
            return if self.handle.ended() == Some(true) {
                Ended::Abandoned
            } else {
                Ended::Aborted
            };
        };
        if healthy && self.borrowed {
            // The engine's: it goes on using it.
            return Ended::Released;
        }
        let way = match (healthy, self.local_group) {
            (false, _) => Way::Abort,
            (true, false) => Way::Finalize,
            (true, true) => Way::Destroy,
        };
        let ended = teardown(comm, way, TEARDOWN_BOUND);
        if ended == Ended::Abandoned {
            self.handle.mark_abandoned();
        }
        ended
    }

    /// A collective's return code: `ncclInProgress` (connection set-up with the
    /// peers, non-blocking mode) is waited out against `call_bound`; past it the
    /// communicator is aborted and the call is a timeout.
    fn issued(&self, what: &str, code: sys::ncclResult_t) -> Result<()> {
        CALLS.fetch_add(1, Ordering::Relaxed);
        match code {
            sys::ncclResult_t::ncclSuccess => Ok(()),
            sys::ncclResult_t::ncclInProgress => {
                IN_PROGRESS.fetch_add(1, Ordering::Relaxed);
                match self.settle(what, Instant::now() + self.call_bound)? {
                    Settled::Done => Ok(()),
                    Settled::Late => {
                        self.abort_now();
                        Err(Error::Timeout {
                            rank: self.rank,
                            peer: None,
                            during: format!(
                                "{what} (NCCL was still connecting to its peers; the \
                                 communicator was aborted)"
                            ),
                            timeout: self.call_bound,
                        })
                    }
                }
            }
            other => Err(nccl_error(what, other)),
        }
    }

    /// All-gather of `count` bytes per rank (the rendezvous over NCCL).
    pub(crate) fn all_gather_bytes(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let code = self.call("ncclAllGather", |comm| {
            // SAFETY: `send` holds `count` bytes and `recv` world x count, on
            // this communicator's device; the stream belongs to that device.
            unsafe {
                sys::ncclAllGather(
                    send as *const _,
                    recv as *mut _,
                    count,
                    sys::ncclDataType_t::ncclUint8,
                    comm,
                    stream.cu_stream() as _,
                )
            }
        })?;
        self.issued("ncclAllGather", code)
    }

    /// Makes drop abort the communicator (see `abort_on_drop`).
    pub(crate) fn abort_on_drop(&mut self) {
        self.abort_on_drop = true;
    }

    /// Makes drop finalise the communicator (bounded), the default: for a
    /// world that formed.
    pub(crate) fn finalize_on_drop(&mut self) {
        self.abort_on_drop = false;
    }

    /// Sum all-reduce of `count` elements (in place when `send == recv`).
    pub(crate) fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        stream: &CudaStream,
    ) -> Result<()> {
        let code = self.call("ncclAllReduce", |comm| {
            // SAFETY: the caller passes live device buffers of `count`
            // elements on this communicator's device; the stream belongs to
            // that device.
            unsafe {
                sys::ncclAllReduce(
                    send as *const _,
                    recv as *mut _,
                    count,
                    nccl_dtype(dtype),
                    sys::ncclRedOp_t::ncclSum,
                    comm,
                    stream.cu_stream() as _,
                )
            }
        })?;
        self.issued("ncclAllReduce", code)
    }

    /// All-gather of `count` elements per rank (in place when
    /// `send == recv + rank * count`).
    pub(crate) fn all_gather(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        stream: &CudaStream,
    ) -> Result<()> {
        let code = self.call("ncclAllGather", |comm| {
            // SAFETY: as for all_reduce; `recv` holds world x count elements.
            unsafe {
                sys::ncclAllGather(
                    send as *const _,
                    recv as *mut _,
                    count,
                    nccl_dtype(dtype),
                    comm,
                    stream.cu_stream() as _,
                )
            }
        })?;
        self.issued("ncclAllGather", code)
    }

    /// Registers one window per communicator as a symmetric window
    /// (`ncclCommWindowRegister` with `NCCL_WIN_COLL_SYMMETRIC`), inside one
    /// NCCL group so that one thread can register every rank of a
    /// single-process world; a world of processes passes its one rank, and
    /// every process calls this together. Registration is collective: it is
    /// waited out against each communicator's call bound. Never called while
    /// a stream is being captured (NCCL would have to synchronise), and only
    /// once every rank has said it can (`window::vote`): a rank that does not
    /// register leaves its peers waiting here until their bound.
    ///
    /// An error once registering has begun aborts every communicator of
    /// `ranks` (a registration may still wait for peers inside NCCL). On any
    /// error the memory is leaked, never freed: NCCL may hold some of it
    /// registered until the communicator ends.
    pub(crate) fn register_windows(
        ranks: &[(&NcclComm, &Arc<CudaContext>)],
        memory: Vec<crate::window::WindowMemory>,
    ) -> Result<Vec<crate::window::Window>> {
        match Self::register_in_group(ranks, &memory) {
            // NCCL keeps the registrations (its handles are needed only to
            // deregister, which ending the communicator does).
            Ok(()) => Ok(memory
                .into_iter()
                .map(|memory| crate::window::Window { memory })
                .collect()),
            Err(e) => {
                memory
                    .into_iter()
                    .for_each(crate::window::WindowMemory::leak);
                Err(e)
            }
        }
    }

    fn register_in_group(
        ranks: &[(&NcclComm, &Arc<CudaContext>)],
        memory: &[crate::window::WindowMemory],
    ) -> Result<()> {
        if ranks.len() != memory.len() {
            return Err(Error::Mismatch(format!(
                "{} windows for {} ranks",
                memory.len(),
                ranks.len()
            )));
        }
        let api = crate::window::api().map_err(Error::Unsupported)?;
        let mut handles = vec![std::ptr::null_mut(); ranks.len()];
        let registered = (|| -> Result<()> {
            // Every communicator of the group stays locked until the group is
            // closed: none can be aborted half-way through it.
            let locked: Vec<_> = ranks.iter().map(|(comm, _)| comm.handle.lock()).collect();
            // SAFETY: opens a group; closed below on every path.
            check("ncclGroupStart", unsafe { sys::ncclGroupStart() })?;
            let mut issued = Ok(());
            for (((state, (_, ctx)), area), handle) in
                locked.iter().zip(ranks).zip(memory).zip(&mut handles)
            {
                let step = state
                    .live()
                    .ok_or_else(|| gone("ncclCommWindowRegister"))
                    .and_then(|raw| {
                        ctx.bind_to_thread()
                            .map_err(|e| Error::driver("binding a context for NCCL", e))?;
                        // SAFETY: `area` is live ncclMemAlloc memory of `bytes`
                        // on this communicator's device; NCCL writes one handle;
                        // the communicator is locked.
                        let code = unsafe {
                            (api.register)(
                                raw,
                                area.ptr as *mut _,
                                area.bytes as usize,
                                handle,
                                crate::window::WIN_COLL_SYMMETRIC,
                            )
                        };
                        in_progress_is_ok("ncclCommWindowRegister", code)
                    });
                if let Err(e) = step {
                    issued = Err(e);
                    break;
                }
            }
            // SAFETY: closes the group opened above.
            let ended = in_progress_is_ok("ncclGroupEnd", unsafe { sys::ncclGroupEnd() });
            issued?;
            ended
        })()
        .and_then(|()| {
            for (comm, _) in ranks {
                let deadline = Instant::now() + comm.call_bound;
                if comm.settle("ncclCommWindowRegister", deadline)? == Settled::Late {
                    return Err(Error::Timeout {
                        rank: comm.rank,
                        peer: None,
                        during: "registering NCCL windows (a peer never registered its own; \
                                 the communicator was aborted)"
                            .into(),
                        timeout: comm.call_bound,
                    });
                }
            }
            Ok(())
        });
        if registered.is_err() {
            // A registration that failed or never completed may still wait
            // for peers inside NCCL: abort, so that nothing after it (a
            // rendezvous round, a collective, teardown) waits on it too.
            for (comm, _) in ranks {
                comm.abort_now();
            }
        }
        registered
    }

    /// An error NCCL detected asynchronously (e.g. a failed peer), if any.
    pub(crate) fn async_error(&self) -> Result<()> {
        match self.state()? {
            sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
            other => Err(nccl_error("an earlier NCCL operation", other)),
        }
    }
}

/// Whether an engine's communicator is rank `want.0` of `want.1` ranks on
/// device `want.2`, as NCCL says it is (`got`, in the same order).
fn check_borrowed(want: (usize, usize, usize), got: (usize, usize, usize)) -> Result<()> {
    if want == got {
        return Ok(());
    }
    let (rank, world, device) = want;
    let (their_rank, their_world, their_device) = got;
    Err(Error::Mismatch(format!(
        "the engine's NCCL communicator is rank {their_rank} of {their_world} on GPU \
         {their_device}, not rank {rank} of {world} on GPU {device} as this rank was asked to \
         be"
    )))
}

/// The error of a call on a communicator that was aborted or released.
fn gone(what: &str) -> Error {
    Error::Unsupported(format!(
        "{what} on an NCCL communicator that was aborted (a peer never called, or the rank \
         failed)"
    ))
}

/// Non-blocking NCCL answers `ncclInProgress` for work it finishes on its own
/// thread; that is not an error.
fn in_progress_is_ok(what: &str, code: sys::ncclResult_t) -> Result<()> {
    match code {
        sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
        other => Err(nccl_error(what, other)),
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // Bounded either way: a healthy world finalises (aborting past the
        // bound), a broken one aborts at once.
        let _ = self.end(!self.abort_on_drop);
    }
}

/// NCCL's version as "2.28.3", or `None` when NCCL is not installed.
pub fn nccl_version() -> Option<String> {
    if !ffi::nccl_present() {
        return None;
    }
    let mut code = 0;
    // SAFETY: writes one int.
    let result = unsafe { sys::ncclGetVersion(&mut code) };
    if result != sys::ncclResult_t::ncclSuccess {
        return None;
    }
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    Some(format!(
        "{}.{}.{}",
        code / 10000,
        (code / 100) % 100,
        code % 100
    ))
}

/// NCCL's unique id: 128 bytes that one process creates ([`NcclId::new`]) and
/// hands to every process of the world (engines already share it, e.g. through
/// a file or their launcher). `cudarc::nccl::Id::internal()` converts with
/// [`NcclId::from_c_chars`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NcclId(pub [u8; 128]);

impl NcclId {
    /// A fresh id (`ncclGetUniqueId`). NCCL's bootstrap root runs in the calling
    /// process, which must stay alive until every rank has joined.
    pub fn new() -> Result<NcclId> {
        ffi::require_nccl()?;
        let mut raw = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes one id.
        check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut raw) })?;
        Ok(Self::from_c_chars(&raw.internal))
    }

    /// The id held in NCCL's own `ncclUniqueId` bytes (what
    /// `cudarc::nccl::Id::internal()` returns).
    pub fn from_c_chars(raw: &[std::ffi::c_char; 128]) -> NcclId {
        NcclId(raw.map(|c| c as u8))
    }

    /// 256 lower-case hex digits (for environment variables and files).
    pub fn to_hex(&self) -> String {
        crate::ipc::hex_encode(&self.0)
    }

    /// The id written by [`NcclId::to_hex`] (surrounding whitespace
    /// ignored); [`Error::Mismatch`] for anything but 256 hex digits.
    pub fn from_hex(text: &str) -> Result<NcclId> {
        let bytes = crate::ipc::hex_decode(text)
            .filter(|b| b.len() == 128)
            .ok_or_else(|| {
                Error::Mismatch("an NCCL unique id is 256 hex digits (128 bytes)".into())
            })?;
        let mut id = [0u8; 128];
        id.copy_from_slice(&bytes);
        Ok(NcclId(id))
    }
}

impl fmt::Debug for NcclId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NcclId({}…)", &self.to_hex()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A communicator whose handle was taken out (so never released here:
    /// NCCL is not even loaded), as a rendezvous round that timed out leaves
    /// it.
    fn ended_comm(rank: usize) -> NcclComm {
        let comm = NcclComm::wrap(std::ptr::null_mut(), rank);
        assert_eq!(comm.handle.take(), Some(std::ptr::null_mut()));
        comm
    }

    #[test]
    fn an_aborted_communicator_refuses_calls_and_is_not_released_again() {
        // No NCCL call may touch the handle again, drop included.
        let comm = ended_comm(0);
        comm.abort_now();
        let err = comm.async_error().unwrap_err().to_string();
        assert!(err.contains("aborted"), "{err}");
        let err = comm
            .call("ncclAllGather", |_| {
                unreachable!("a call on a released handle")
            })
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ncclAllGather") && err.contains("aborted"),
            "{err}"
        );
        drop(comm);
    }

    #[test]
    fn ending_an_aborted_communicator_touches_nothing() {
        // Drop after abort_now (or a second end) must not call NCCL again.
        let comm = ended_comm(3);
        assert_eq!(comm.end(true), Ended::Aborted);
        comm.handle.mark_abandoned();
        assert_eq!(comm.end(false), Ended::Abandoned);
    }

    #[test]
    fn a_handle_is_never_released_under_a_use_nor_used_after() {
        // One thread is in the middle of a use (an NCCL call: here 200 ms
        // long) when another takes the handle out to release it. The take
        // must wait for the use, and no use may start after it.
        let guarded = Arc::new(Guarded::new(7u32));
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (started, using) = mpsc::channel();
        let user = {
            let (guarded, freed) = (guarded.clone(), freed.clone());
            std::thread::spawn(move || {
                guarded.with_live(|handle| {
                    started.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(200));
                    // Released while in use?
                    assert!(!freed.load(Ordering::SeqCst), "freed under a use");
                    handle
                })
            })
        };
        using.recv().unwrap();
        let taken = guarded.take();
        freed.store(true, Ordering::SeqCst);
        assert_eq!(taken, Some(7));
        assert_eq!(user.join().expect("the user saw no free"), Some(7));
        assert_eq!(guarded.with_live(|h| h), None);
        assert_eq!(guarded.take(), None, "taken twice");
        assert_eq!(guarded.ended(), Some(false));
    }

    #[test]
    fn pollers_never_see_a_released_handle() {
        // Four threads poll as fast as they can (what graphs' lifelines do)
        // while the owner ends the handle; every poll that ran saw it live,
        // and every poll after the end was refused.
        for _ in 0..20 {
            let guarded = Arc::new(Guarded::new(1u8));
            let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let pollers: Vec<_> = (0..4)
                .map(|_| {
                    let (guarded, freed) = (guarded.clone(), freed.clone());
                    std::thread::spawn(move || {
                        let mut polls = 0u64;
                        while guarded
                            .with_live(|_| assert!(!freed.load(Ordering::SeqCst)))
                            .is_some()
                        {
                            polls += 1;
                        }
                        polls
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(2));
            assert!(guarded.take().is_some());
            freed.store(true, Ordering::SeqCst);
            for poller in pollers {
                poller.join().expect("a poll saw a released handle");
            }
        }
    }

    /// The race of issue 29 item 3 on one GPU, with real NCCL: rank 0 of a
    /// world of two whose peer never joins, so the communicator stays in
    /// progress; a second thread polls its health the whole time (what a
    /// graph's `Lifeline::health` does), while the owner's wait passes its
    /// short bound and aborts it. Run under compute-sanitizer as well.
    #[test]
    #[ignore = "needs a CUDA GPU and NCCL: run scripts/gpu-run.sh on a GPU machine"]
    fn polling_a_communicator_while_its_owner_aborts_it_is_safe() {
        let ctx = CudaContext::new(0).expect("GPU 0");
        let id = NcclId::new().expect("an NCCL unique id");
        let comm =
            Arc::new(NcclComm::start_rank(&ctx, 2, 0, &id, false).expect("ncclCommInitRank"));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let poller = {
            let (comm, stop) = (comm.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut live, mut refused) = (0u64, 0u64);
                while !stop.load(Ordering::SeqCst) {
                    match comm.async_error() {
                        Ok(()) => live += 1,
                        Err(e) => {
                            assert!(e.to_string().contains("aborted"), "{e}");
                            refused += 1;
                        }
                    }
                }
                (live, refused)
            })
        };
        let bound = Duration::from_millis(300);
        let start = Instant::now();
        let joined = comm.joined(2, bound);
        let took = start.elapsed();
        assert!(
            matches!(joined, Err(Error::Timeout { rank: 0, .. })),
            "{joined:?}"
        );
        // NCCL's abort of a communicator still joining may itself wait (for
        // its bootstrap): past ABORT_BOUND the helper is left behind, which
        // is the bound this checks, not NCCL's speed.
        assert!(
            took < bound + ABORT_BOUND + Duration::from_secs(1),
            "{took:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::SeqCst);
        let (live, refused) = poller.join().expect("the poller");
        assert!(live > 0 && refused > 0, "live {live}, refused {refused}");
        assert!(
            matches!(comm.end(false), Ended::Aborted | Ended::Abandoned),
            "a second end of an aborted communicator touches nothing"
        );
        eprintln!("   joined: {joined:?} after {took:?}; {live} polls live, {refused} refused");
    }

    #[test]
    fn the_config_asks_only_for_a_nonblocking_communicator() {
        assert_eq!(config(true).blocking, 1);
        let config = config(false);
        assert_eq!(config.size, std::mem::size_of::<sys::ncclConfig_t>());
        assert_eq!((config.magic, config.version), (0xcafe_beef, 22_800));
        assert_eq!(config.blocking, 0);
        // Everything else is NCCL_CONFIG_UNDEF_*: NCCL's defaults and its
        // environment variables decide.
        for field in [
            config.cgaClusterSize,
            config.minCTAs,
            config.maxCTAs,
            config.splitShare,
            config.trafficClass,
            config.collnetEnable,
            config.CTAPolicy,
            config.shrinkShare,
            config.nvlsCTAs,
            config.nChannelsPerNetPeer,
            config.nvlinkCentricSched,
        ] {
            assert_eq!(field, c_int::MIN);
        }
        assert!(config.netName.is_null() && config.commName.is_null());
    }

    #[test]
    fn waits_spin_then_yield_then_sleep_longer_and_longer() {
        let us = Duration::from_micros;
        assert_eq!(pace(us(0), Pace::Spin), Pace::Spin);
        assert_eq!(pace(us(199), Pace::Spin), Pace::Spin);
        assert_eq!(pace(us(200), Pace::Spin), Pace::Yield);
        assert_eq!(pace(us(4_999), Pace::Yield), Pace::Yield);
        assert_eq!(pace(us(5_000), Pace::Yield), Pace::Sleep(us(50)));
        let mut last = Pace::Sleep(us(50));
        let mut pauses = Vec::new();
        for _ in 0..6 {
            last = pace(us(10_000), last);
            if let Pace::Sleep(p) = last {
                pauses.push(p.as_micros());
            }
        }
        assert_eq!(pauses, [100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn a_helper_past_its_bound_is_left_behind() {
        let start = Instant::now();
        let late = bounded("colltune-test-late", Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(3));
            1
        });
        assert_eq!(late, None);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(
            bounded("colltune-test-quick", Duration::from_secs(5), || 7),
            Some(7)
        );
    }

    #[test]
    fn a_borrowed_communicator_must_be_the_rank_it_is_asked_to_be() {
        assert!(check_borrowed((1, 4, 0), (1, 4, 0)).is_ok());
        for (got, names) in [
            ((2, 4, 0), "rank 2 of 4 on GPU 0"),
            ((1, 8, 0), "rank 1 of 8 on GPU 0"),
            ((1, 4, 3), "rank 1 of 4 on GPU 3"),
        ] {
            let Err(Error::Mismatch(why)) = check_borrowed((1, 4, 0), got) else {
                panic!("{got:?} was accepted");
            };
            assert!(
                why.contains(names) && why.contains("not rank 1 of 4 on GPU 0"),
                "{why}"
            );
        }
    }

    #[test]
    fn ids_round_trip_through_hex() {
        let mut bytes = [0u8; 128];
        bytes[0] = 2;
        bytes[127] = 0xfe;
        let id = NcclId(bytes);
        assert_eq!(NcclId::from_hex(&id.to_hex()).unwrap(), id);
        assert!(NcclId::from_hex("00").is_err());
    }
}
