//! one_shot_push: Lamport-style, no barrier (kernels/cuda/push.cu).

use cudarc::driver::CudaStream;

use super::{Call, CollArgs, launch};
use crate::error::Result;
use crate::module::{KernelKind, KernelSet};
use crate::protocol::PACK_BYTES;
use crate::protocol::grid::LaunchShape;

/// One thread per 16-byte pack of this rank's data.
pub(crate) fn one_shot_push(
    kernels: &KernelSet,
    stream: &CudaStream,
    shape: LaunchShape,
    base: &CollArgs,
    call: &Call,
) -> Result<()> {
    let packs = call.bytes_per_rank / PACK_BYTES;
    launch(kernels, KernelKind::Push, stream, shape, base, call, packs)
}
