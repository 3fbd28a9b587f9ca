//! two_shot_pull: reduce-scatter then all-gather (kernels/cuda/two_shot.cu).

use cudarc::driver::CudaStream;

use super::{Call, CollArgs, launch};
use crate::error::Result;
use crate::module::{KernelKind, KernelSet};
use crate::protocol::PACK_BYTES;
use crate::protocol::grid::LaunchShape;
use crate::protocol::sequence::shard_packs;

/// One thread per pack of a shard: each rank reduces 1/W of the message.
pub(crate) fn two_shot_pull(
    kernels: &KernelSet,
    stream: &CudaStream,
    shape: LaunchShape,
    base: &CollArgs,
    call: &Call,
) -> Result<()> {
    let packs = call.bytes_per_rank / PACK_BYTES;
    let shard = shard_packs(packs, base.world as u64);
    launch(
        kernels,
        KernelKind::TwoShot,
        stream,
        shape,
        base,
        call,
        shard,
    )
}
