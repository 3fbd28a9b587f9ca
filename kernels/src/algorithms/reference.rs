//! The loopback reference collective: the stand-in for NCCL in a loopback world
//! of more than one rank (NCCL refuses two ranks on one GPU). Element granular
//! and chunked through the staging halves, so it takes any size; device-ordered,
//! so it works eagerly, from one thread or many, and inside CUDA graphs.

use cudarc::driver::CudaStream;

use super::{Call, CollArgs, launch};
use crate::error::Result;
use crate::module::{KernelKind, KernelSet};
use crate::protocol::grid::LaunchShape;
use crate::vocab::Collective;

/// One thread per element of a chunk (all-gather: per 16-bit unit).
pub(crate) fn reference(
    kernels: &KernelSet,
    stream: &CudaStream,
    shape: LaunchShape,
    base: &CollArgs,
    call: &Call,
) -> Result<()> {
    let unit = match call.collective {
        Collective::AllReduce => call.dtype.size_bytes(),
        Collective::AllGather => 2,
    };
    let units = (call.bytes_per_rank / unit).min(base.staging_bytes / unit);
    launch(
        kernels,
        KernelKind::Reference,
        stream,
        shape,
        base,
        call,
        units,
    )
}
