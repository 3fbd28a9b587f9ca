//! The buffers a world registers once, when it is built: per rank a control
//! block, a push region armed with the sentinel and a staging region. Kernels
//! address peers' buffers through pointer tables built from these, so CUDA-graph
//! replays never need host work.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use crate::algorithms::CollArgs;
use crate::error::{DriverContext, Result};
use crate::memory::DeviceBuffer;
use crate::protocol::layout::BufferPlan;
use crate::protocol::{SENTINEL, ctrl};

struct RankMemory {
    ctrl: DeviceBuffer,
    push: DeviceBuffer,
    staging: DeviceBuffer,
}

/// Every rank's registered memory; shared by all ranks of a world (each needs
/// its peers' addresses), freed when the last rank is dropped.
pub(crate) struct Registration {
    ranks: Vec<RankMemory>,
    streams: Vec<Arc<CudaStream>>,
    plan: BufferPlan,
}

impl Registration {
    /// Allocates and initialises every rank's buffers on its own device, then
    /// waits until they are ready. `contexts[r]`/`streams[r]` belong to rank r.
    pub(crate) fn new(
        contexts: &[Arc<CudaContext>],
        streams: &[Arc<CudaStream>],
        plan: BufferPlan,
    ) -> Result<Registration> {
        let mut ranks = Vec::with_capacity(contexts.len());
        for (ctx, stream) in contexts.iter().zip(streams) {
            let memory = RankMemory {
                ctrl: DeviceBuffer::alloc(ctx, ctrl::BYTES)?,
                push: DeviceBuffer::alloc(ctx, plan.push_region_bytes() as usize)?,
                staging: DeviceBuffer::alloc(ctx, plan.staging_region_bytes() as usize)?,
            };
            memory.ctrl.fill_words(stream, 0)?;
            memory.push.fill_words(stream, SENTINEL)?;
            memory.staging.fill_words(stream, 0)?;
            ranks.push(memory);
        }
        for stream in streams {
            stream
                .synchronize()
                .during("initialising registered buffers")?;
        }
        Ok(Registration {
            ranks,
            streams: streams.to_vec(),
            plan,
        })
    }

    pub(crate) fn plan(&self) -> &BufferPlan {
        &self.plan
    }

    /// The call-independent kernel arguments of `rank`.
    pub(crate) fn base_args(&self, rank: usize, timeout_ns: u64) -> CollArgs {
        let mut args = CollArgs {
            slot_bytes: self.plan.slot_bytes,
            staging_bytes: self.plan.staging_half_bytes,
            timeout_ns,
            rank: rank as u32,
            world: self.ranks.len() as u32,
            ..CollArgs::default()
        };
        for (r, memory) in self.ranks.iter().enumerate() {
            args.push_bufs[r] = memory.push.ptr();
            args.staging[r] = memory.staging.ptr();
            args.ctrls[r] = memory.ctrl.ptr();
        }
        args
    }

    /// The two error words of `rank`'s control block. Only meaningful once that
    /// rank's stream has drained.
    pub(crate) fn error_words(&self, rank: usize) -> Result<(u32, u32)> {
        let mut words = [0u32; 2];
        self.ranks[rank].ctrl.read_words(ctrl::ERROR, &mut words)?;
        Ok((words[0], words[1]))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Peers' kernels read and write these buffers: let every rank's work end
        // before any of them is freed.
        for stream in &self.streams {
            let _ = stream.synchronize();
        }
    }
}
