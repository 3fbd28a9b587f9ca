//! one_shot_pull: copy in, per-block barrier, read every rank (kernels/cuda/pull.cu).

use cudarc::driver::CudaStream;

use super::{Call, CollArgs, launch};
use crate::error::Result;
use crate::module::{KernelKind, KernelSet};
use crate::protocol::PACK_BYTES;
use crate::protocol::grid::LaunchShape;

/// One thread per 16-byte pack (the message fits one staging half).
pub(crate) fn one_shot_pull(
    kernels: &KernelSet,
    stream: &CudaStream,
    shape: LaunchShape,
    base: &CollArgs,
    call: &Call,
) -> Result<()> {
    let packs = call.bytes_per_rank / PACK_BYTES;
    launch(kernels, KernelKind::Pull, stream, shape, base, call, packs)
}
