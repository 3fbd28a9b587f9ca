//! The one argument every kernel takes, by value. Mirrors `struct CollArgs` in
//! `kernels/cuda/common.cu` field for field.

use cudarc::driver::DeviceRepr;

use crate::protocol::MAX_WORLD;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollArgs {
    /// Each rank's push region (3 buffers x world slots).
    pub push_bufs: [u64; MAX_WORLD],
    /// Each rank's staging region (2 halves).
    pub staging: [u64; MAX_WORLD],
    /// Each rank's control block.
    pub ctrls: [u64; MAX_WORLD],
    pub input: u64,
    pub output: u64,
    /// Bytes each rank contributes (all-gather: one share).
    pub bytes: u64,
    pub slot_bytes: u64,
    pub staging_bytes: u64,
    pub timeout_ns: u64,
    /// What this call is (`protocol::signature`), for the call handshake.
    pub call_sig: u64,
    /// Device address of the rank's fault mirror in pinned host memory.
    pub host_fault: u64,
    /// The fused all-reduce + add + RMSNorm's residual (read, then written
    /// with the new residual); 0 for the other collectives.
    pub residual: u64,
    /// The fused call's RMSNorm weight (`hidden` elements); 0 otherwise.
    pub weight: u64,
    pub rank: u32,
    pub world: u32,
    /// 1 when every tensor of the call (input, output, and for the fused
    /// call residual and weight) is 16-byte aligned.
    pub io_aligned: u32,
    /// Elements of a row of the fused call; 0 otherwise.
    pub hidden: u32,
    /// The fused call's epsilon, an f32's bits.
    pub eps_bits: u32,
    /// Rows of the fused call, and their layout on the blocks
    /// (`protocol::rows::row_launch`): threads per row and rows per block in
    /// one pass. 0 for the other collectives.
    pub rows: u32,
    pub row_group: u32,
    pub row_groups: u32,
}

// SAFETY: plain old data with the C layout the kernels expect.
unsafe impl DeviceRepr for CollArgs {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn layout_matches_the_cuda_struct() {
        // Three pointer tables of 8, ten u64, eight u32: no padding anywhere.
        assert_eq!(size_of::<CollArgs>(), 3 * 8 * 8 + 10 * 8 + 8 * 4);
        assert_eq!(align_of::<CollArgs>(), 8);
        assert_eq!(offset_of!(CollArgs, staging), 64);
        assert_eq!(offset_of!(CollArgs, ctrls), 128);
        assert_eq!(offset_of!(CollArgs, input), 192);
        assert_eq!(offset_of!(CollArgs, timeout_ns), 232);
        assert_eq!(offset_of!(CollArgs, call_sig), 240);
        assert_eq!(offset_of!(CollArgs, host_fault), 248);
        assert_eq!(offset_of!(CollArgs, residual), 256);
        assert_eq!(offset_of!(CollArgs, weight), 264);
        assert_eq!(offset_of!(CollArgs, rank), 272);
        assert_eq!(offset_of!(CollArgs, hidden), 284);
        assert_eq!(offset_of!(CollArgs, eps_bits), 288);
        assert_eq!(offset_of!(CollArgs, rows), 292);
        assert_eq!(offset_of!(CollArgs, row_group), 296);
        assert_eq!(offset_of!(CollArgs, row_groups), 300);
    }
}
