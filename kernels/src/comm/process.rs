//! A world of processes: one rank per process, as engines that shard a model
//! run (candle's multiprocess example, mistral.rs), or several processes that
//! share one GPU. Built on the single-process communicator: the same kernels,
//! buffer layout and protocols; peers' buffers are mapped with CUDA IPC.
//!
//! Forming the world takes up to five rounds of a [`Rendezvous`] (or of NCCL
//! all-gathers), each bounded by `Options::join_timeout`:
//! 1. `hello`: identity and configuration; a rank whose protocol, kernels,
//!    world size, architecture, policy tables or override, dtype or launch
//!    request differ is refused, naming the field and both values;
//! 2. `reach`: how each rank reaches each other one, from its driver
//!    ([`crate::protocol::reach`]); all ranks decide the same way;
//! 3. `layout`: the capacities, buffer sizes and launch shape every rank
//!    derived (must agree) and the IPC handles of this rank's buffers;
//! 4. `ready`: whether each rank mapped every peer's buffers. If one could not,
//!    every call runs NCCL (or, without NCCL, construction fails);
//! 5. `window` (with NCCL, and a window the tables select or the options ask
//!    for): whether each rank can have an NCCL window, voted
//!    before any rank registers one (`window::vote`: NCCL version, bytes,
//!    `ncclMemAlloc` done). Every rank registers only if every rank voted yes
//!    for the same window; otherwise every rank frees its memory and
//!    `nccl_symmetric` declines, and the world forms without waiting for a
//!    registration that some rank would never make.
//!
//! A rank that fails between rounds still sends its failure in the next round,
//! so its peers fail at once instead of waiting out the timeout, and aborts
//! its NCCL communicator (`ncclCommAbort`, never a destroy that waits for
//! peers). Dropping a healthy rank drains its stream and says `goodbye` (a
//! last round) before freeing its memory: a peer may still be reading it until
//! then. Every step is bounded (kernels/GPU.md, "Bounded waits").

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use super::identity::{self, Identity};
use super::membership::{Exchange, Membership};
#[cfg(test)]
use super::membership::{failure_report, read_round};
use super::memory;
use super::options::{Fallback, Options};
use super::rank::{RankComm, RankParts};
use super::registration::{BUFFER_NAMES, MappedMemory, RankMemory, Registration, Slot};
use super::resources::WorldShared;
use super::setup::{arch_of, block_size, check_process_world_size, launch_shape};
use super::symmetric;
use crate::error::{DriverContext, Error, Result};
use crate::ffi;
use crate::ipc::IpcHandle;
use crate::module::{self, KernelSet};
use crate::nccl::{NcclComm, NcclId};
use crate::protocol::budget::{MemoryPlan, Registers};
use crate::protocol::digest::{Digest, check_agreement};
use crate::protocol::launch::{LaunchShape, Placement};
use crate::protocol::layout::{BufferPlan, Capacities, capacity_pairs};
use crate::protocol::reach::{self, Decision};
use crate::rendezvous::{FileRendezvous, Rendezvous};
use crate::selection::Selector;
use crate::vocab::{DType, Link};
use crate::window::Window;
use crate::window::vote::{self, Outcome};

/// How the processes of a world find each other.
#[non_exhaustive]
pub enum Join {
    /// The NCCL unique id every process received (see [`NcclId`]). NCCL forms
    /// the communicator that runs NCCL-selected and declined calls, and the
    /// rounds are NCCL all-gathers. NCCL refuses two ranks on one GPU: processes
    /// sharing a GPU join with [`Join::Files`].
    Nccl(NcclId),
    /// A fresh directory every process of one host can see
    /// ([`FileRendezvous`]). No NCCL: NCCL-selected and declined calls run the
    /// loopback reference collective, which needs every pair of ranks mappable.
    Files(PathBuf),
    /// The engine's own exchange. No NCCL, as with `Files`.
    Custom(Box<dyn Rendezvous>),
    /// The engine's own exchange for the rounds, and NCCL formed from the
    /// unique id every process received (through that exchange or any
    /// other): a world that runs NCCL without NCCL carrying its rounds.
    CustomWithNccl(Box<dyn Rendezvous>, NcclId),
    /// The engine's own NCCL communicator, which this rank uses for its
    /// NCCL calls and rounds instead of forming a second one (NCCL's buffers
    /// again, hundreds of MiB at 8 ranks); see [`EngineNccl`].
    EngineNccl(EngineNccl),
}

/// An engine's NCCL communicator lent to a rank ([`Join::EngineNccl`]). The
/// engine keeps it and may go on using it between the rank's calls; a world
/// that ends healthy leaves it untouched, and one that breaks (a fault ends
/// the world for good) aborts it, since only an abort ends NCCL kernels that
/// wait for a peer that will never come. It must be rank `rank` of
/// `world_size` on the rank's GPU (checked), and colltune's bounds on NCCL
/// (GPU.md, "Bounded waits") hold only for a non-blocking communicator
/// (`ncclConfig_t::blocking = 0`): a blocking one's calls return only when
/// NCCL is done.
pub struct EngineNccl(cudarc::nccl::sys::ncclComm_t);

impl EngineNccl {
    /// # Safety
    /// `comm` is a live NCCL communicator that stays live while the rank (and
    /// every graph captured on it) exists, and that no other thread uses
    /// while a call of the rank runs: NCCL forbids concurrent use of one
    /// communicator.
    pub unsafe fn from_raw(comm: cudarc::nccl::sys::ncclComm_t) -> EngineNccl {
        EngineNccl(comm)
    }
}

// SAFETY: a raw handle that the rank uses on one thread at a time (the
// contract of `from_raw`).
unsafe impl Send for EngineNccl {}

/// This process's place in a world of processes.
pub struct ProcessSpec {
    /// This process's rank, from 0, below `world_size`; no two processes of
    /// the world may claim the same one.
    pub rank: usize,
    /// Ranks in the world, one per process; the same in every process.
    pub world_size: usize,
    /// How this process meets the others.
    pub join: Join,
    /// The element type the engine will reduce, checked to be the same on every
    /// rank at construction (`None`: not checked). Calls are not restricted to it.
    pub dtype: Option<DType>,
    /// See [`ProcessSpec::with_failing_window_allocation`].
    fail_window_allocation: bool,
    /// See [`ProcessSpec::with_host_identity`].
    host_identity: Option<String>,
}

impl ProcessSpec {
    /// Rank `rank` of `world_size`, joining through `join`, with no dtype
    /// check.
    pub fn new(rank: usize, world_size: usize, join: Join) -> ProcessSpec {
        ProcessSpec {
            rank,
            world_size,
            join,
            dtype: None,
            fail_window_allocation: false,
            host_identity: None,
        }
    }

    /// For tests: this rank tells its peers it runs on host `name` (instead
    /// of this host's name and boot id), so that processes of one machine
    /// form a world across "hosts": an NCCL-only world.
    #[doc(hidden)]
    pub fn with_host_identity(mut self, name: &str) -> ProcessSpec {
        self.host_identity = Some(name.to_string());
        self
    }

    /// Names the element type the engine will reduce, so that construction
    /// checks every rank names the same ([`ProcessSpec::dtype`]).
    pub fn with_dtype(mut self, dtype: DType) -> ProcessSpec {
        self.dtype = Some(dtype);
        self
    }

    /// For tests of the `window` vote only: this rank's `ncclMemAlloc` of
    /// the world's NCCL window asks for twice its GPU's memory, so that it
    /// fails as on an exhausted GPU, and every rank must decline
    /// `nccl_symmetric` within the round. Not for engines.
    #[doc(hidden)]
    pub fn with_failing_window_allocation(mut self) -> ProcessSpec {
        self.fail_window_allocation = true;
        self
    }
}

/// See [`super::World::process`].
pub(crate) fn build(
    stream: Arc<CudaStream>,
    spec: ProcessSpec,
    options: Options,
) -> Result<RankComm> {
    ffi::require_driver()?;
    ffi::require_nvrtc()?;
    let ProcessSpec {
        rank,
        world_size: world,
        join,
        dtype,
        fail_window_allocation,
        host_identity,
    } = spec;
    check_process_world_size(world)?;
    if rank >= world {
        return Err(Error::Mismatch(format!(
            "rank {rank} is not below the world size {world}"
        )));
    }
    let ctx = stream.context().clone();
    let arch = arch_of(&ctx)?;
    let selector = Selector::from_env()?;
    let (mut nccl, exchange, via) = join_world(&ctx, rank, world, join, &options)?;
    if let Some(comm) = &mut nccl {
        // A collective NCCL answers with `ncclInProgress` is connecting to
        // its peers, a step of forming the world: bounded like the others.
        comm.set_call_bound(options.join_timeout);
        // Until the world is formed, any error (a mismatch, a peer that never
        // came, a failed mapping) breaks it: every early return aborts NCCL
        // instead of finalising it with peers that may never answer.
        comm.abort_on_drop();
    }
    let mut membership = Membership {
        exchange,
        rank,
        world,
        timeout: options.join_timeout,
    };
    let nccl_ref = nccl.as_ref();

    // 1. Who everyone is, and whether they agree on the configuration.
    let mut me = Identity::of(&ctx)?;
    if let Some(name) = host_identity {
        me.pretend_host(&name);
    }
    let kernels_hash = identity::kernels_hash()?;
    let hello = identity::hello(
        rank,
        world,
        arch,
        &selector,
        dtype,
        &options,
        &me,
        &kernels_hash,
    );
    let hellos = membership.round(nccl_ref, &stream, "hello", &hello)?;
    identity::check_hellos(rank, &hello, &hellos)?;

    // 2. How each rank reaches each other one; everyone decides alike.
    let row = identity::reach_row(rank, &ctx, &hellos);
    let row = membership.tell_failure(nccl_ref, &stream, "reach", row)?;
    let rows = membership.round(
        nccl_ref,
        &stream,
        "reach",
        &Digest::new().with("row", reach::encode_row(&row)),
    )?;
    let decision = decide(&hellos, &rows, world)?;

    // What this world runs, and its own buffers.
    let prepared = prepare(
        &ctx,
        &stream,
        arch,
        (rank, world),
        &decision,
        nccl_ref.is_some(),
        &via,
        (&options, &selector),
        &hellos,
    );
    let prepared = membership.tell_failure(nccl_ref, &stream, "layout", prepared)?;
    let Prepared {
        link,
        fallback,
        mut custom,
        planned,
        shape,
        kernels,
        own,
    } = prepared;
    let (caps, plan) = (planned.caps, planned.plan);

    // 3. The layout every rank derived, and the handles of the buffers.
    let mut layout = layout_digest(link, fallback, custom, &caps, &plan, shape);
    if custom {
        let handles = own.ipc_handles();
        let handles = membership.tell_failure(nccl_ref, &stream, "layout", handles)?;
        for (name, handle) in BUFFER_NAMES.iter().zip(handles) {
            layout = layout.with(name, handle.to_hex());
        }
    }
    let layouts = membership.round(nccl_ref, &stream, "layout", &layout)?;
    check_layouts(rank, &layouts)?;

    // 4. Map every peer's buffers, and learn whether everyone could.
    let mut slots = Vec::with_capacity(world);
    let mut unmapped = None;
    let mut own = Some(own);
    for (r, theirs) in layouts.iter().enumerate() {
        if r == rank {
            slots.push(Slot::Owned(own.take().expect("own memory")));
        } else if custom && unmapped.is_none() {
            match peer_handles(theirs).and_then(|h| MappedMemory::open(&ctx, &h, &plan)) {
                Ok(mapped) => slots.push(Slot::Mapped(mapped)),
                Err(e) => {
                    unmapped = Some(format!("rank {rank} could not map rank {r}'s buffers: {e}"));
                    slots.push(Slot::Absent);
                }
            }
        } else {
            slots.push(Slot::Absent);
        }
    }
    let ready = Digest::new().with("mapped", unmapped.as_deref().unwrap_or("ok"));
    let readies = membership.round(nccl_ref, &stream, "ready", &ready)?;
    if let Some(why) = readies
        .iter()
        .filter_map(|d| d.get("mapped"))
        .find(|m| *m != "ok")
    {
        if fallback != Fallback::Nccl {
            return Err(Error::Unsupported(format!(
                "custom kernels cannot run ({why}) and this world, joined through {via}, has \
                 no NCCL"
            )));
        }
        announce(
            rank,
            &options,
            &format!("world of {world} processes ({via}): {why}; every call runs NCCL"),
        );
        custom = false;
        for slot in slots.iter_mut().filter(|s| matches!(s, Slot::Mapped(_))) {
            *slot = Slot::Absent;
        }
    }

    // 5. NCCL's symmetric window: every rank votes before any registers.
    // Whether there is one to vote on follows from the capacities and the
    // fallback, which the `layout` round found equal on every rank.
    let (window, window_bytes) = match (&nccl, fallback) {
        (Some(comm), Fallback::Nccl) if planned.window_bytes > 0 => {
            let offer = symmetric::offer(&ctx, planned.window_bytes, fail_window_allocation);
            let agreed = vote::agree(
                offer,
                |mine| membership.round(Some(comm), &stream, "window", mine),
                |memory| {
                    NcclComm::register_windows(&[(comm, &ctx)], vec![memory])
                        .map(|mut windows| windows.pop().expect("one window per rank"))
                },
            )?;
            match world_window(agreed, |w: &Window| w.memory.bytes) {
                Ok((window, bytes)) => (Some(window), bytes),
                Err(why) => {
                    announce(
                        rank,
                        &options,
                        &format!(
                            "no NCCL symmetric window ({why}); nccl_symmetric declines to plain \
                             NCCL"
                        ),
                    );
                    (None, 0)
                }
            }
        }
        _ => (None, 0),
    };

    let registration = Registration::from_slots(slots, vec![stream.clone()], plan);
    // Formed: from now on, dropping a healthy rank finalises NCCL (bounded).
    if let Some(comm) = &mut nccl {
        comm.finalize_on_drop();
    }
    let shared = Arc::new(WorldShared::new(
        registration,
        &planned,
        custom,
        fallback,
        window_bytes,
    ));
    memory::announce(rank, &shared.footprint);
    RankComm::new(RankParts {
        rank,
        world_size: world,
        stream,
        arch,
        link,
        shape,
        kernels,
        shared,
        nccl,
        window,
        membership: Some(membership),
        selector,
        options,
    })
}

/// The world's window after the `window` round ([`vote::agree`]): the
/// registered window and its bytes, or why every rank declines
/// `nccl_symmetric`.
fn world_window<W>(
    (outcome, window): (Outcome, Option<W>),
    bytes: impl Fn(&W) -> u64,
) -> std::result::Result<(W, u64), String> {
    match (outcome, window) {
        (Outcome::Register, Some(window)) => {
            let bytes = bytes(&window);
            Ok((window, bytes))
        }
        (Outcome::Refused(why) | Outcome::Differ(why), _) => Err(why),
        (Outcome::Register, None) => Err("the window round registered nothing".into()),
    }
}

/// Fields of the `layout` round every rank must have equal: how the world
/// runs, the buffer plan, and the capacity of every (collective, algorithm)
/// pair of the registry, so that no capacity can be left out of the check.
fn layout_fields() -> Vec<String> {
    let mut fields: Vec<String> = [
        "link",
        "fallback",
        "custom",
        "threads",
        "max_blocks",
        "slot_bytes",
        "staging_half_bytes",
    ]
    .iter()
    .map(|f| f.to_string())
    .collect();
    fields.extend(capacity_pairs().map(|(c, a)| capacity_field(c, a)));
    fields
}

/// Refuses a `layout` round in which any rank derived another layout than
/// `rank` (the buffers' IPC handles differ by rank and are not compared).
fn check_layouts(rank: usize, layouts: &[Digest]) -> Result<()> {
    let fields = layout_fields();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    check_agreement(rank, layouts, &fields).map_err(Error::Mismatch)
}

/// The `layout` field of the capacity of `algo` for `collective`.
fn capacity_field(collective: crate::vocab::Collective, algo: crate::vocab::Algo) -> String {
    format!("capacity_{}_{}", collective.name(), algo.name())
}

fn layout_digest(
    link: Link,
    fallback: Fallback,
    custom: bool,
    caps: &Capacities,
    plan: &BufferPlan,
    shape: LaunchShape,
) -> Digest {
    let mut digest = Digest::new()
        .with("link", format!("{link:?}"))
        .with("fallback", format!("{fallback:?}"))
        .with("custom", custom)
        .with("threads", shape.threads)
        .with("max_blocks", shape.max_blocks)
        .with("slot_bytes", plan.slot_bytes)
        .with("staging_half_bytes", plan.staging_half_bytes);
    for (collective, algo) in capacity_pairs() {
        let cap = caps.of(collective, algo);
        digest = digest.with(
            &capacity_field(collective, algo),
            format!("{} bytes, align {}", cap.max_bytes, cap.align),
        );
    }
    digest
}

fn peer_handles(layout: &Digest) -> Result<[IpcHandle; 3]> {
    let get = |name: &str| {
        layout
            .require(name)
            .map_err(Error::Mismatch)
            .and_then(IpcHandle::from_hex)
    };
    Ok([get("ctrl")?, get("push")?, get("staging")?])
}

fn join_world(
    ctx: &Arc<CudaContext>,
    rank: usize,
    world: usize,
    join: Join,
    options: &Options,
) -> Result<(Option<NcclComm>, Exchange, String)> {
    // NCCL formed from a unique id every process received.
    let form = |id: &NcclId| {
        NcclComm::init_rank(
            ctx,
            world,
            rank,
            id,
            options.join_timeout,
            options.nccl_blocking,
        )
        .map_err(|e| match e {
            Error::Nccl { what, code } => Error::Nccl {
                what: format!(
                    "{what} (NCCL refuses two ranks on one GPU: processes that share a \
                         GPU join with Join::Files)"
                ),
                code,
            },
            other => other,
        })
    };
    match join {
        Join::Nccl(id) => Ok((Some(form(&id)?), Exchange::Nccl, "NCCL".into())),
        Join::Files(dir) => {
            let rendezvous = FileRendezvous::new(dir, rank, world, options.join_timeout)?;
            let via = rendezvous.describe();
            Ok((None, Exchange::Other(Box::new(rendezvous)), via))
        }
        Join::Custom(rendezvous) => {
            let via = rendezvous_for(rendezvous.as_ref(), rank, world)?;
            Ok((None, Exchange::Other(rendezvous), via))
        }
        Join::CustomWithNccl(rendezvous, id) => {
            let via = rendezvous_for(rendezvous.as_ref(), rank, world)?;
            Ok((
                Some(form(&id)?),
                Exchange::Other(rendezvous),
                format!("{via} and NCCL"),
            ))
        }
        Join::EngineNccl(EngineNccl(raw)) => {
            // SAFETY: the contract of `EngineNccl::from_raw`.
            let comm = unsafe { NcclComm::borrow(ctx, raw, rank, world) }?;
            Ok((
                Some(comm),
                Exchange::Nccl,
                "the engine's NCCL communicator".into(),
            ))
        }
    }
}

impl RankComm {
    /// This rank's NCCL communicator, for the engine's own NCCL calls beside
    /// colltune's (so that an engine needs no second communicator): the one
    /// colltune formed, or the engine's from [`Join::EngineNccl`]. `None` in a
    /// world without NCCL (a loopback world, one joined without an NCCL id)
    /// and once it was aborted (a fault ended the world). The engine must
    /// not use it while a call of this rank runs on another thread, nor
    /// destroy it: the rank ends the one colltune formed when the rank and
    /// every graph captured on it are gone.
    pub fn nccl_comm(&self) -> Option<cudarc::nccl::sys::ncclComm_t> {
        self.res.nccl_comm()?.raw()
    }
}

/// How a rendezvous names itself, once it is checked to be for `rank` of
/// `world`.
fn rendezvous_for(rendezvous: &dyn Rendezvous, rank: usize, world: usize) -> Result<String> {
    if (rendezvous.rank(), rendezvous.world_size()) != (rank, world) {
        return Err(Error::Mismatch(format!(
            "the rendezvous is for rank {} of {}, the spec for rank {rank} of {world}",
            rendezvous.rank(),
            rendezvous.world_size()
        )));
    }
    Ok(rendezvous.describe())
}

fn decide(hellos: &[Digest], rows: &[Digest], world: usize) -> Result<Decision> {
    let matrix = rows
        .iter()
        .map(|d| reach::decode_row(d.require("row")?, world))
        .collect::<std::result::Result<Vec<_>, String>>()
        .map_err(Error::Mismatch)?;
    let gpus = hellos
        .iter()
        .map(|h| h.require("uuid").map(str::to_string))
        .collect::<std::result::Result<Vec<_>, String>>()
        .map_err(Error::Mismatch)?;
    Ok(reach::decide(&matrix, &gpus))
}

/// What a rank sets up between the `reach` and `layout` rounds.
struct Prepared {
    link: Link,
    fallback: Fallback,
    custom: bool,
    planned: MemoryPlan,
    shape: LaunchShape,
    /// `None` in an NCCL-only world: nothing is compiled or loaded.
    kernels: Option<Arc<KernelSet>>,
    own: RankMemory,
}

#[allow(clippy::too_many_arguments)]
fn prepare(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    arch: crate::vocab::Arch,
    (rank, world): (usize, usize),
    decision: &Decision,
    has_nccl: bool,
    via: &str,
    (options, selector): (&Options, &Selector),
    hellos: &[Digest],
) -> Result<Prepared> {
    let custom = decision.custom.is_ok();
    let fallback = match (has_nccl, &decision.custom) {
        (true, _) => Fallback::Nccl,
        (false, Ok(())) => Fallback::LoopbackReference,
        (false, Err(why)) => {
            return Err(Error::Unsupported(format!(
                "custom kernels cannot run ({why}) and this world, joined through {via}, has no \
                 NCCL: join with an NCCL unique id (Join::Nccl)"
            )));
        }
    };
    match (&decision.custom, fallback) {
        (Err(why), _) => announce(
            rank,
            options,
            &format!(
                "world of {world} processes ({via}): custom kernels cannot run ({why}); every call runs NCCL"
            ),
        ),
        (Ok(()), Fallback::LoopbackReference) => announce(
            rank,
            options,
            &format!(
                "world of {world} processes ({via}): NCCL unavailable ({}), baseline = loopback \
                 reference collective",
                if decision.ranks_per_gpu > 1 {
                    "NCCL refuses two ranks on one GPU"
                } else {
                    "joined without an NCCL unique id"
                }
            ),
        ),
        _ => {}
    }
    let link = decision.link;
    let placement = if decision.ranks_per_gpu > 1 {
        Placement::Shared {
            ranks_per_gpu: decision.ranks_per_gpu,
        }
    } else {
        Placement::OwnGpus
    };
    let planned = memory::plan_world(
        selector,
        arch,
        link,
        Registers {
            world,
            kernels: custom,
            reference: fallback == Fallback::LoopbackReference,
            window: fallback == Fallback::Nccl,
        },
        options,
        rank,
    )?;
    // A world whose every call runs NCCL compiles and loads no kernels: no
    // NVRTC at start-up, and worlds larger than the kernels serve form too.
    let (kernels, shape) = if custom || fallback == Fallback::LoopbackReference {
        let compiled = module::compile_for(arch, world, &options.kernel_cache)?;
        let kernels = Arc::new(KernelSet::load(
            ctx,
            &compiled,
            block_size(options, world)?,
            options.programmatic_launch,
        )?);
        let shape = launch_shape(
            options,
            world,
            placement,
            identity::min_sms(hellos)?,
            &[kernels.as_ref()],
        )?;
        (Some(kernels), shape)
    } else {
        (None, LaunchShape::NONE)
    };
    let own = RankMemory::new(ctx, stream, &planned.plan, options.sequence_start)?;
    stream
        .synchronize()
        .during("initialising registered buffers")?;
    Ok(Prepared {
        link,
        fallback,
        custom,
        planned,
        shape,
        kernels,
        own,
    })
}

/// Said once per world, by rank 0, unless the options silence logging.
fn announce(rank: usize, options: &Options, message: &str) {
    if rank == 0 && options.log_declines {
        log::info!("colltune: {message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::check_round_name;
    use crate::vocab::{Algo, Capacity, Collective};
    use crate::window::vote::Offer;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// A rendezvous whose peers are scripted: every round gives back their
    /// blobs, with this rank's own in its place.
    struct Scripted {
        rank: usize,
        peers: Vec<Vec<u8>>,
    }

    impl Rendezvous for Scripted {
        fn rank(&self) -> usize {
            self.rank
        }

        fn world_size(&self) -> usize {
            self.peers.len()
        }

        fn exchange(&mut self, round: &str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
            check_round_name(round)?;
            let mut all = self.peers.clone();
            all[self.rank] = mine.to_vec();
            Ok(all)
        }

        fn describe(&self) -> String {
            "scripted peers".into()
        }
    }

    /// One round as `Membership::round` runs it over a rendezvous of its own.
    fn round(rendezvous: &mut dyn Rendezvous, name: &str, mine: &Digest) -> Result<Vec<Digest>> {
        let blobs = rendezvous.exchange(name, &mine.encode())?;
        read_round(rendezvous.rank(), name, &blobs)
    }

    /// Rank 0 of a world through its `hello` and `reach` rounds (scripted
    /// peers, every rank's row as it computes it): the world's decision.
    fn decided_through_rounds(
        world: usize,
        host: fn(usize) -> &'static str,
        gpu: fn(usize) -> usize,
    ) -> Decision {
        use super::identity::fixtures::{hello_on, rows};
        let hellos: Vec<Digest> = (0..world)
            .map(|r| hello_on(r, world, host(r), gpu(r)))
            .collect();
        let mut peers = Scripted {
            rank: 0,
            peers: hellos.iter().map(Digest::encode).collect(),
        };
        let heard = round(&mut peers, "hello", &hellos[0]).unwrap();
        identity::check_hellos(0, &hellos[0], &heard).unwrap();
        let rows: Vec<Digest> = rows(&heard)
            .iter()
            .map(|row| Digest::new().with("row", reach::encode_row(row)))
            .collect();
        let mut peers = Scripted {
            rank: 0,
            peers: rows.iter().map(Digest::encode).collect(),
        };
        let rows = round(&mut peers, "reach", &rows[0]).unwrap();
        decide(&heard, &rows, world).unwrap()
    }

    #[test]
    fn two_hosts_of_four_ranks_decide_an_nccl_only_world_in_their_rounds() {
        let decision = decided_through_rounds(8, |r| if r < 4 { "a" } else { "b" }, |r| r % 4);
        let why = decision.custom.unwrap_err();
        assert!(
            why.contains("rank 0 reaches rank 4 through another host"),
            "{why}"
        );
    }

    #[test]
    fn sixteen_ranks_decide_an_nccl_only_world_in_their_rounds() {
        let decision = decided_through_rounds(16, |_| "a", |r| r);
        assert_eq!(
            decision.custom,
            Err("a world of 16 ranks: the custom kernels serve up to 8".to_string())
        );
        // And a world of processes that size is one this crate forms.
        assert!(check_process_world_size(16).is_ok());
        assert!(check_process_world_size(0).is_err());
    }

    /// The layout of a world of `world` with NCCL and custom kernels, where
    /// two_shot_push takes `push_cap` bytes and every other algorithm 1 MiB,
    /// with the IPC handles of rank `rank`.
    fn layout_of(rank: usize, world: usize, push_cap: u64) -> Digest {
        let caps = Capacities::from_fn(|c, a| Capacity {
            max_bytes: match (c, a) {
                (Collective::AllReduce, Algo::TwoShotPush) => push_cap,
                _ => 1 << 20,
            },
            align: 16,
        });
        let plan = BufferPlan::new(&caps, world, false).unwrap();
        let shape = LaunchShape {
            threads: 512,
            max_blocks: 32,
        };
        let mut digest = layout_digest(Link::NvLink, Fallback::Nccl, true, &caps, &plan, shape);
        for name in BUFFER_NAMES {
            digest = digest.with(name, format!("{name}-handle-of-rank-{rank}"));
        }
        digest
    }

    #[test]
    fn a_peers_failure_report_fails_every_other_rank_naming_it() {
        let failure = Error::Unsupported("GPU 1 cannot map GPU 0's memory".into());
        let told = failure_report(&failure).encode();
        let layouts: Vec<Vec<u8>> = (0..3).map(|r| layout_of(r, 3, 1 << 20).encode()).collect();
        for me in [0, 2] {
            let mut peers = layouts.clone();
            peers[1] = told.clone();
            let mut rendezvous = Scripted { rank: me, peers };
            match round(&mut rendezvous, "layout", &layout_of(me, 3, 1 << 20)) {
                Err(Error::Unsupported(why)) => assert_eq!(
                    why,
                    format!("rank 1 could not join the world: {failure}"),
                    "rank {me}"
                ),
                other => panic!("rank {me}: expected rank 1's failure, got {other:?}"),
            }
        }
        // The failed rank's own report is no peer's failure.
        let mut peers = layouts.clone();
        peers[1] = Vec::new();
        let mut rendezvous = Scripted { rank: 1, peers };
        let digests = round(&mut rendezvous, "layout", &failure_report(&failure)).unwrap();
        assert_eq!(digests[1].get("failed"), Some(failure.to_string().as_str()));
        assert_eq!(digests[0], layout_of(0, 3, 1 << 20));
    }

    /// Window memory that counts how often it was freed.
    struct Tracked(Arc<AtomicUsize>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// What one rank saw of the `window` round: the world's window (the
    /// rank that registered it) and bytes or why none, how often its memory
    /// was freed by then, how long the step took.
    type WindowSeen = (
        std::result::Result<(usize, u64), String>,
        usize,
        std::time::Duration,
    );

    /// Step 5 of forming a world of `world` processes, each a thread whose
    /// rounds go through a real file rendezvous as `Membership::round` reads
    /// them; rank `failing`, if any, could not allocate its window.
    /// `registered` counts the registrations.
    fn window_round_of_a_world(
        world: usize,
        failing: Option<usize>,
        registered: &AtomicUsize,
    ) -> Vec<WindowSeen> {
        let dir = std::env::temp_dir().join(format!(
            "colltune-window-round-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        let seen = std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    let dir = &dir;
                    s.spawn(move || {
                        let freed = Arc::new(AtomicUsize::new(0));
                        let offer = Offer {
                            nccl: Some("2.28.3".into()),
                            bytes: 64 << 20,
                            memory: if failing == Some(rank) {
                                Err("ncclMemAlloc of 2 TiB failed: ncclUnhandledCudaError".into())
                            } else {
                                Ok(Tracked(freed.clone()))
                            },
                        };
                        let started = Instant::now();
                        let mut files = FileRendezvous::new(
                            dir,
                            rank,
                            world,
                            std::time::Duration::from_secs(10),
                        )
                        .expect("a rendezvous");
                        let agreed = vote::agree(
                            offer,
                            |mine| round(&mut files, "window", mine),
                            |memory: Tracked| {
                                registered.fetch_add(1, Ordering::SeqCst);
                                // Registered memory lives until NCCL ends.
                                std::mem::forget(memory);
                                Ok(rank)
                            },
                        )
                        .expect("the round");
                        let window = world_window(agreed, |_| 64 << 20);
                        (window, freed.load(Ordering::SeqCst), started.elapsed())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a rank"))
                .collect()
        });
        let _ = std::fs::remove_dir_all(&dir);
        seen
    }

    #[test]
    fn a_window_allocation_failure_on_rank_1_declines_on_every_rank_within_the_round() {
        let registered = AtomicUsize::new(0);
        for (rank, (window, freed, took)) in window_round_of_a_world(3, Some(1), &registered)
            .into_iter()
            .enumerate()
        {
            assert_eq!(
                window,
                Err(
                    "rank 1 cannot register an NCCL window: ncclMemAlloc of 2 TiB failed: \
                     ncclUnhandledCudaError"
                        .into()
                ),
                "rank {rank}"
            );
            // Every rank that allocated has freed its memory again.
            assert_eq!(freed, (rank != 1) as usize, "rank {rank}");
            assert!(
                took < std::time::Duration::from_secs(5),
                "rank {rank}: {took:?}"
            );
        }
        assert_eq!(registered.load(Ordering::SeqCst), 0, "no rank registers");
    }

    #[test]
    fn a_window_every_rank_can_have_is_registered_on_every_rank() {
        let registered = AtomicUsize::new(0);
        for (rank, (window, freed, _)) in window_round_of_a_world(3, None, &registered)
            .into_iter()
            .enumerate()
        {
            assert_eq!(window, Ok((rank, 64 << 20)), "rank {rank}");
            assert_eq!(freed, 0, "rank {rank}: registered memory is kept");
        }
        assert_eq!(registered.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_peers_failure_report_in_the_window_round_is_this_ranks_error() {
        // A peer that failed before the round tells it there; nobody
        // registers, and the memory is freed.
        let freed = Arc::new(AtomicUsize::new(0));
        let failure = Error::Unsupported("rank 1 lost its GPU".into());
        let offer = Offer {
            nccl: Some("2.28.3".into()),
            bytes: 64 << 20,
            memory: Ok(Tracked(freed.clone())),
        };
        let mut rendezvous = Scripted {
            rank: 0,
            peers: vec![Vec::new(), failure_report(&failure).encode()],
        };
        let agreed = vote::agree(
            offer,
            |mine| round(&mut rendezvous, "window", mine),
            |_: Tracked| -> Result<()> { panic!("registered after a peer failed") },
        );
        match agreed {
            Err(Error::Unsupported(why)) => {
                assert!(why.starts_with("rank 1 could not join"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_blob_that_is_no_digest_names_the_rank_and_the_round() {
        let mut rendezvous = Scripted {
            rank: 0,
            peers: vec![Vec::new(), vec![0xff, 0xfe]],
        };
        match round(&mut rendezvous, "hello", &Digest::new().with("rank", 0)) {
            Err(Error::Mismatch(why)) => {
                assert_eq!(why, "rank 1's `hello` blob: a digest is not UTF-8")
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[test]
    fn a_layout_disagreement_is_refused_naming_the_field_and_both_values() {
        // Rank 1's tables give two_shot_push half the capacity. The push
        // slots come out the same (one_shot_push's 1 MiB decides them), but
        // the ranks would decline different calls and one would wait forever.
        let (ours, theirs) = (layout_of(0, 2, 512 << 10), layout_of(1, 2, 256 << 10));
        assert_eq!(ours.get("slot_bytes"), theirs.get("slot_bytes"));
        let mut rendezvous = Scripted {
            rank: 0,
            peers: vec![Vec::new(), theirs.encode()],
        };
        let layouts = round(&mut rendezvous, "layout", &ours).unwrap();
        match check_layouts(0, &layouts) {
            Err(Error::Mismatch(why)) => assert_eq!(
                why,
                "rank 1 and rank 0 disagree on capacity_all_reduce_two_shot_push: rank 1 has \
                 262144 bytes, align 16, rank 0 has 524288 bytes, align 16"
            ),
            other => panic!("expected a layout mismatch, got {other:?}"),
        }
        // Buffers of another size are refused the same way.
        let layouts = vec![layout_of(0, 2, 512 << 10), layout_of(1, 2, 4 << 20)];
        let why = check_layouts(1, &layouts).unwrap_err().to_string();
        assert!(
            why.contains("disagree on slot_bytes: rank 0 has 1048576, rank 1 has 4194304"),
            "{why}"
        );
    }

    /// The layout a rank of a world of `world` on sm90 NVLink sends (without
    /// its handles), planned from the shipped tables as `prepare` plans it.
    fn planned_layout(world: usize, options: &Options) -> Digest {
        let selector = Selector::from_spec("").unwrap();
        let registers = Registers {
            world,
            kernels: true,
            reference: false,
            window: true,
        };
        let planned = memory::plan(
            &selector,
            crate::vocab::Arch::SM90,
            Link::NvLink,
            registers,
            options,
        )
        .unwrap();
        let shape = LaunchShape {
            threads: 512,
            max_blocks: 132,
        };
        layout_digest(
            Link::NvLink,
            Fallback::Nccl,
            true,
            &planned.caps,
            &planned.plan,
            shape,
        )
    }

    #[test]
    fn every_rank_plans_the_same_buffers_and_a_budget_that_differs_is_refused() {
        let options = Options::default();
        for world in [2, 4, 8] {
            let layouts: Vec<Digest> = (0..world)
                .map(|_| planned_layout(world, &options))
                .collect();
            for rank in 0..world {
                check_layouts(rank, &layouts).unwrap();
            }
        }
        // Rank 1 was given a smaller budget: its capacities are capped lower,
        // and the `layout` round says where.
        let smaller = Options {
            memory_budget: Some(64 << 20),
            ..Options::default()
        };
        let layouts = vec![planned_layout(2, &options), planned_layout(2, &smaller)];
        let why = check_layouts(0, &layouts).unwrap_err().to_string();
        let field = why
            .split("rank 1 and rank 0 disagree on ")
            .nth(1)
            .and_then(|rest| rest.split(':').next())
            .unwrap_or_else(|| panic!("{why}"));
        assert!(layout_fields().iter().any(|f| f == field), "{why}");
    }

    #[test]
    fn layouts_that_differ_only_in_their_handles_agree() {
        let mut rendezvous = Scripted {
            rank: 1,
            peers: vec![layout_of(0, 2, 8 << 20).encode(), Vec::new()],
        };
        let layouts = round(&mut rendezvous, "layout", &layout_of(1, 2, 8 << 20)).unwrap();
        assert_ne!(layouts[0].get("ctrl"), layouts[1].get("ctrl"));
        check_layouts(1, &layouts).unwrap();
    }

    #[test]
    fn the_layout_round_compares_every_capacity_of_the_registry() {
        let fields = layout_fields();
        for (collective, algo) in crate::protocol::registry::implemented_pairs() {
            let field = capacity_field(collective, algo);
            assert!(fields.contains(&field), "{field} is not compared");
        }
        // NCCL's window is sized by its capacities too.
        assert!(fields.contains(&"capacity_all_reduce_nccl_symmetric".to_string()));
        assert!(fields.contains(&"capacity_all_gather_nccl_symmetric".to_string()));
        // The one that a hand-kept list once missed.
        assert!(fields.contains(&"capacity_all_reduce_two_shot_push".to_string()));
        // And what the digest writes is what is compared.
        let caps = Capacities::from_fn(|_, _| crate::vocab::Capacity {
            max_bytes: 1 << 20,
            align: 16,
        });
        let plan = BufferPlan::new(&caps, 2, false).unwrap();
        let shape = LaunchShape {
            threads: 1024,
            max_blocks: 132,
        };
        let digest = layout_digest(Link::NvLink, Fallback::Nccl, true, &caps, &plan, shape);
        for field in &fields {
            assert!(
                digest.get(field).is_some(),
                "{field} is compared but never sent"
            );
        }
    }
}
