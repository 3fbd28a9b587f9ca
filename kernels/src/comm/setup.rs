//! What building a world checks and asks of the devices, shared by the
//! single-process constructors (`world.rs`) and a process's rank
//! (`process.rs`): the world size, the block size and launch shape, and the
//! device's architecture and SM count.

use cudarc::driver::{CudaContext, sys};

use super::options::Options;
use crate::error::{DriverContext, Error, Result};
use crate::module::KernelSet;
use crate::protocol::MAX_WORLD;
use crate::protocol::launch::{
    LaunchShape, Placement, Residency, default_threads, validate_threads,
};
use crate::vocab::Arch;

/// A world of processes has at least one rank; past [`MAX_WORLD`] it forms
/// as an NCCL-only world (`protocol::reach::decide`).
pub(crate) fn check_process_world_size(world_size: usize) -> Result<()> {
    if world_size == 0 {
        return Err(Error::Unsupported("a world of 0 ranks".into()));
    }
    Ok(())
}

/// A single-process world of `world_size` ranks is one the kernels serve
/// (its ranks all map each other's memory, and a loopback world needs the
/// kernels for its reference collective).
pub(crate) fn check_world_size(world_size: usize) -> Result<()> {
    if (1..=MAX_WORLD).contains(&world_size) {
        Ok(())
    } else {
        Err(Error::Unsupported(format!(
            "a world of {world_size} ranks: the kernels serve 1..={MAX_WORLD}"
        )))
    }
}

/// The block size of a world of `world_size` ranks: `options.threads`, or the
/// largest its build allows, checked.
pub(crate) fn block_size(options: &Options, world_size: usize) -> Result<u32> {
    validate_threads(
        options.threads.unwrap_or(default_threads(world_size)),
        world_size,
    )
    .map_err(Error::Unsupported)
}

/// The launch shape of a world of `world_size` ranks placed as `placement`
/// says, once its kernels are loaded (one set per context; their occupancy
/// at the block size bounds what can be resident): the default, or
/// `options.blocks`, checked.
pub(crate) fn launch_shape(
    options: &Options,
    world_size: usize,
    placement: Placement,
    sms: u32,
    kernels: &[&KernelSet],
) -> Result<LaunchShape> {
    let threads = block_size(options, world_size)?;
    let blocks_per_sm = kernels
        .iter()
        .map(|k| k.blocks_per_sm().0)
        .min()
        .unwrap_or(0);
    let residency = Residency {
        placement,
        sm_count: sms,
        blocks_per_sm,
        programmatic: kernels.iter().any(|k| k.programmatic()),
    };
    let default = LaunchShape::default_for(threads, &residency);
    LaunchShape {
        threads,
        max_blocks: options.blocks.unwrap_or(default.max_blocks),
    }
    .validate(world_size, &residency)
    .map_err(|why| {
        let heaviest = kernels.first().map_or("", |k| k.blocks_per_sm().1);
        Error::Unsupported(format!("{why} (the heaviest kernel is {heaviest})"))
    })
}

/// The compute capability of `ctx`'s device as an [`Arch`].
pub fn arch_of(ctx: &CudaContext) -> Result<Arch> {
    let (major, minor) = ctx
        .compute_capability()
        .during("querying the compute capability")?;
    Ok(Arch::from_compute_capability(major as u8, minor as u8))
}

/// Streaming multiprocessors of `ctx`'s device.
pub fn sm_count(ctx: &CudaContext) -> Result<u32> {
    ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map(|n| n as u32)
        .during("querying the SM count")
}
