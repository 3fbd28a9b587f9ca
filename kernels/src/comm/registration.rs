//! The buffers a world registers once, when it is built: per rank a control
//! block, a push region armed with the sentinel and a staging region. Kernels
//! address peers' buffers through pointer tables built from these, so CUDA-graph
//! replays never need host work. The same layout serves every topology: peers in
//! this process address each other's allocations directly, peers in other
//! processes map them with CUDA IPC.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaStream};

use crate::algorithms::CollArgs;
use crate::drain::drain_within;
use crate::error::{DriverContext, Error, Result};
use crate::ipc::{IpcHandle, PeerMapping};
use crate::memory::DeviceBuffer;
use crate::protocol::layout::BufferPlan;
use crate::protocol::{SENTINEL, ctrl};

/// One rank's registered memory, allocated with plain `cuMemAlloc` so that it
/// can be exported to other processes (CUDA IPC) as well as used by peers of
/// this process.
pub(crate) struct RankMemory {
    ctrl: DeviceBuffer,
    push: DeviceBuffer,
    staging: DeviceBuffer,
}

impl RankMemory {
    /// Allocates per `plan` on `ctx`'s device and initialises it: the control
    /// block with its counters at `sequence_start` (written synchronously), the
    /// push region armed with the sentinel and the staging region zeroed
    /// (ordered on `stream`). The caller synchronises `stream` before any peer
    /// may use it.
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        stream: &CudaStream,
        plan: &BufferPlan,
        sequence_start: u64,
    ) -> Result<RankMemory> {
        let [ctrl_bytes, push_bytes, staging_bytes] = region_bytes(plan)?;
        let memory = RankMemory {
            ctrl: DeviceBuffer::alloc(ctx, ctrl_bytes)?,
            push: DeviceBuffer::alloc(ctx, push_bytes)?,
            staging: DeviceBuffer::alloc(ctx, staging_bytes)?,
        };
        memory
            .ctrl
            .write_words(&ctrl::initial_words(sequence_start))?;
        memory.push.fill_words(stream, SENTINEL)?;
        memory.staging.fill_words(stream, 0)?;
        Ok(memory)
    }

    /// The IPC handles of the three buffers: control block, push, staging.
    pub(crate) fn ipc_handles(&self) -> Result<[IpcHandle; 3]> {
        Ok([
            self.ctrl.ipc_handle()?,
            self.push.ipc_handle()?,
            self.staging.ipc_handle()?,
        ])
    }

    fn addresses(&self) -> [u64; 3] {
        [self.ctrl.ptr(), self.push.ptr(), self.staging.ptr()]
    }

    fn leak(self) {
        self.ctrl.leak();
        self.push.leak();
        self.staging.leak();
    }
}

/// A peer process's registered memory, mapped into this process (CUDA IPC).
pub(crate) struct MappedMemory {
    ctrl: PeerMapping,
    push: PeerMapping,
    staging: PeerMapping,
}

impl MappedMemory {
    /// Opens the three handles `RankMemory::ipc_handles` gave in the peer, and
    /// checks that each mapping is at least as large as `plan` says the
    /// peer's buffer is (kernels address it by the plan: a smaller one would
    /// be written out of bounds).
    pub(crate) fn open(
        ctx: &Arc<CudaContext>,
        handles: &[IpcHandle; 3],
        plan: &BufferPlan,
    ) -> Result<MappedMemory> {
        let memory = MappedMemory {
            ctrl: PeerMapping::open(ctx, &handles[0])?,
            push: PeerMapping::open(ctx, &handles[1])?,
            staging: PeerMapping::open(ctx, &handles[2])?,
        };
        let expected = region_bytes(plan)?;
        let mapped = [&memory.ctrl, &memory.push, &memory.staging];
        for ((name, mapping), need) in BUFFER_NAMES.iter().zip(mapped).zip(expected) {
            let size = mapping.size()?;
            if size < need {
                return Err(Error::Mismatch(format!(
                    "the peer's {name} buffer maps {size} bytes, but this world's plan needs \
                     {need}"
                )));
            }
        }
        Ok(memory)
    }

    fn addresses(&self) -> [u64; 3] {
        [self.ctrl.ptr(), self.push.ptr(), self.staging.ptr()]
    }

    fn leak(self) {
        self.ctrl.leak();
        self.push.leak();
        self.staging.leak();
    }
}

/// The three registered buffers of a rank, in the order of their handles.
pub(crate) const BUFFER_NAMES: [&str; 3] = ["ctrl", "push", "staging"];

/// Bytes of a rank's control block, push region and staging region under
/// `plan`, each checked to fit this machine's address space.
fn region_bytes(plan: &BufferPlan) -> Result<[usize; 3]> {
    let fit = |what: &str, bytes: Option<u64>| {
        bytes.and_then(|b| usize::try_from(b).ok()).ok_or_else(|| {
            Error::Unsupported(format!(
                "the {what} region this world's capacities need does not fit the address \
                     space (a capacity is too large)"
            ))
        })
    };
    Ok([
        ctrl::BYTES,
        fit("push", plan.push_region_bytes())?,
        fit("staging", plan.staging_region_bytes())?,
    ])
}

/// Where one rank's buffers come from, as seen by this process.
pub(crate) enum Slot {
    Owned(RankMemory),
    Mapped(MappedMemory),
    /// A world of processes whose custom kernels cannot run: peers' buffers
    /// are never addressed.
    Absent,
}

impl Slot {
    fn addresses(&self) -> [u64; 3] {
        match self {
            Slot::Owned(m) => m.addresses(),
            Slot::Mapped(m) => m.addresses(),
            Slot::Absent => [0; 3],
        }
    }
}

/// Every rank's registered memory as this process sees it; shared by the ranks
/// of a single-process world (each needs its peers' addresses), freed when the
/// last of them is dropped. In a world of processes, this rank's memory is
/// owned and every peer's is mapped.
pub(crate) struct Registration {
    /// Locked only to close mappings or free: kernels use the addresses
    /// taken when the world was built ([`Registration::base_args`]).
    slots: Mutex<Vec<Slot>>,
    streams: Vec<Arc<CudaStream>>,
    plan: BufferPlan,
    /// Set when a stream never drained: drop then leaks instead of waiting.
    wedged: AtomicBool,
    /// Set when peers in other processes may still use this process's own
    /// buffers: drop then leaks them (see [`Registration::keep_exported`]).
    keep_exported: AtomicBool,
}

impl Registration {
    /// Allocates and initialises every rank's buffers on its own device, then
    /// waits until they are ready. `contexts[r]`/`streams[r]` belong to rank r.
    pub(crate) fn new(
        contexts: &[Arc<CudaContext>],
        streams: &[Arc<CudaStream>],
        plan: BufferPlan,
        sequence_start: u64,
    ) -> Result<Registration> {
        let mut slots = Vec::with_capacity(contexts.len());
        for (ctx, stream) in contexts.iter().zip(streams) {
            slots.push(Slot::Owned(RankMemory::new(
                ctx,
                stream,
                &plan,
                sequence_start,
            )?));
        }
        for stream in streams {
            stream
                .synchronize()
                .during("initialising registered buffers")?;
        }
        Ok(Registration::from_slots(slots, streams.to_vec(), plan))
    }

    /// A registration whose buffers are ready: `slots[r]` is rank r's memory,
    /// `streams` every stream of this process that uses them.
    pub(crate) fn from_slots(
        slots: Vec<Slot>,
        streams: Vec<Arc<CudaStream>>,
        plan: BufferPlan,
    ) -> Registration {
        Registration {
            slots: Mutex::new(slots),
            streams,
            plan,
            wedged: AtomicBool::new(false),
            keep_exported: AtomicBool::new(false),
        }
    }

    /// Makes drop leak the memory instead of synchronising and freeing it.
    pub(crate) fn wedge(&self) {
        self.wedged.store(true, Ordering::Relaxed);
    }

    /// Whether every other stream of this process that shares `mine`'s
    /// context came to rest, each within `bound`. Freeing anything in a
    /// context waits for all of that context's work, so a rank whose own
    /// stream drained still must not free anything while another rank's
    /// stream of the same context holds work that may never end (the ranks
    /// of a loopback world share one context). False once the registration
    /// is wedged.
    pub(crate) fn context_at_rest(&self, mine: &CudaStream, bound: Duration) -> bool {
        !self.wedged.load(Ordering::Relaxed)
            && self
                .streams
                .iter()
                .filter(|s| {
                    Arc::ptr_eq(s.context(), mine.context()) && s.cu_stream() != mine.cu_stream()
                })
                .all(|s| matches!(drain_within(s, bound, || Ok(())), Ok(true)))
    }

    /// Makes drop leak this process's own buffers of a world of processes:
    /// a broken world, or one whose goodbye failed, cannot know that every
    /// peer has closed its mappings, and a peer's queued kernels would store
    /// into freed (and maybe reused) memory.
    pub(crate) fn keep_exported(&self) {
        self.keep_exported.store(true, Ordering::Relaxed);
    }

    /// Closes the mappings of peers' buffers (a world of processes). Only once
    /// nothing of this process uses them: its streams have drained.
    pub(crate) fn close_peer_mappings(&self) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for slot in slots.iter_mut() {
            if matches!(slot, Slot::Mapped(_)) {
                // Dropping the mapping closes it.
                *slot = Slot::Absent;
            }
        }
    }

    pub(crate) fn plan(&self) -> &BufferPlan {
        &self.plan
    }

    /// The call-independent kernel arguments of `rank`, whose kernels mirror
    /// their faults to `host_fault`.
    pub(crate) fn base_args(&self, rank: usize, timeout_ns: u64, host_fault: u64) -> CollArgs {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut args = CollArgs {
            slot_bytes: self.plan.slot_bytes,
            staging_bytes: self.plan.staging_half_bytes,
            timeout_ns,
            host_fault,
            rank: rank as u32,
            world: slots.len() as u32,
            ..CollArgs::default()
        };
        // A world of more ranks than the kernels serve runs no kernel: its
        // arguments name none of its ranks' buffers.
        for (r, slot) in slots.iter().enumerate().take(crate::protocol::MAX_WORLD) {
            let [ctrl, push, staging] = slot.addresses();
            args.ctrls[r] = ctrl;
            args.push_bufs[r] = push;
            args.staging[r] = staging;
        }
        args
    }
}

/// Bound on the last wait before the registered memory is freed. Every rank's
/// drop has already drained its stream (or wedged the registration), so this
/// normally returns at once; it guards against work queued since.
const FREE_BOUND: Duration = Duration::from_secs(5);

impl Drop for Registration {
    fn drop(&mut self) {
        // Peers' kernels read and write these buffers: every rank's work must
        // end before any of them is freed (a world of processes also said
        // goodbye). `cuStreamSynchronize` would wait without a bound, so the
        // streams are polled against a deadline; one that does not drain makes
        // this a wedged registration.
        let drained = !self.wedged.load(Ordering::Relaxed)
            && self
                .streams
                .iter()
                .all(|stream| matches!(drain_within(stream, FREE_BOUND, || Ok(())), Ok(true)));
        let keep_exported = self.keep_exported.load(Ordering::Relaxed);
        let slots = self.slots.get_mut().unwrap_or_else(|p| p.into_inner());
        for slot in slots.drain(..) {
            match slot {
                // Some stream never drained: freeing (or closing a mapping)
                // could wait for it forever or pull memory from under a
                // running kernel. Give the memory up; it returns to the driver
                // when the process exits.
                Slot::Owned(m) if !drained || keep_exported => m.leak(),
                Slot::Mapped(m) if !drained => m.leak(),
                other => drop(other),
            }
        }
    }
}
