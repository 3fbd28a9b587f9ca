//! Pure host-side logic of the protocols: constants shared with the CUDA code,
//! buffer layout, counter arithmetic, decline rules, launch shapes and the
//! decoding of device error words. Nothing here touches a GPU, so all of it is
//! unit-tested on the CPU (including a small model checker of the protocols in
//! `model`).
//!
//! The CUDA sources never hard-code these numbers: [`cuda_prelude`] turns them
//! into `#define`s prepended to the sources before NVRTC compiles them.

pub mod budget;
pub mod decline;
pub mod digest;
pub mod fault;
pub mod launch;
// The host mirrors of the CUDA rules: the unit tests and the protocol model
// exercise all of them, the runtime only those it computes on the host.
#[cfg_attr(not(test), allow(dead_code))]
pub mod layout;
pub mod reach;
pub mod registry;
pub mod rows;
#[cfg_attr(not(test), allow(dead_code))]
pub mod sequence;
pub mod signature;

#[cfg(test)]
mod model;

use std::fmt::Write;

/// Largest world the kernels serve (per-rank pointer tables are this long).
pub const MAX_WORLD: usize = 8;
/// Largest grid of one kernel (the barrier flag array has this many rows).
pub const MAX_BLOCKS: u32 = 256;
/// Largest block of the world-size-2 build (its `__launch_bounds__`, which
/// caps registers at 64 per thread; with one pack per thread per step its
/// kernels fit without spilling, which the compile test checks).
pub const MAX_THREADS_WORLD_2: u32 = 1024;
/// Largest block of every other build (`__launch_bounds__`, which caps
/// registers at 128 per thread). At 1024 the `two_shot_push` kernels of the
/// world-size-4 and -8 builds and of the generic build spill to local memory.
pub const MAX_THREADS: u32 = 512;

/// Largest block of the kernels a world of `world` ranks runs: the build's
/// `__launch_bounds__` (`CT_MAX_THREADS`).
pub const fn max_threads(world: usize) -> u32 {
    if world == 2 {
        MAX_THREADS_WORLD_2
    } else {
        MAX_THREADS
    }
}
/// The world size whose build deals warps to blocks (prims.cu, `first_unit`).
pub const DEAL_WORLD: usize = 2;
/// Smallest per-rank message whose threads are dealt warp by warp.
pub const DEAL_MIN_BYTES: u64 = 8 * 1024;
/// Per-rank messages from this size on are numbered block by block again.
pub const DEAL_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// The custom kernels move 16-byte vectors.
pub const PACK_BYTES: u64 = 16;
/// The Lamport "not arrived yet" word: f32 -0.0.
pub const SENTINEL: u32 = 0x8000_0000;
/// Push buffers per rank: the current call, the next one (peers may be one call
/// ahead) and the previous one (being re-armed).
pub const PUSH_BUFFERS: u64 = 3;
/// Staging halves per rank: alternate uses, so no end-of-call barrier is needed.
pub const STAGING_HALVES: u64 = 2;

/// The per-rank control block in device memory, addressed in 32-bit words.
///
/// Every block of a kernel keeps its own copy of the rank's call state (push
/// phase, push bytes used per buffer, pull-family barrier value and staging
/// uses), read when the block starts and rewritten by its thread 0 right away:
/// no block ever waits for another block of its own kernel, and there is no
/// end-of-kernel hand-over. This needs every kernel of a rank to launch the
/// same grid (see [`LaunchShape::grid`](crate::protocol::launch::LaunchShape::grid)): block b then sees every
/// call. The sequence counters and barrier flags are 64-bit, so they never wrap
/// in practice: a per-block flag left behind by calls that gave its block no
/// work cannot read as "arrived" after 2^31 calls, as 32-bit flags could.
pub mod ctrl {
    use super::{MAX_BLOCKS, MAX_WORLD};

    /// 0 while healthy; the first device fault (see [`super::fault`]). Every
    /// kernel of the rank reads it first and, when set, only marks its output
    /// as failed (all-ones bits, a NaN in every dtype) and returns; waiting
    /// kernels stop when they see it set on their rank or on the peer they
    /// wait for. The host reads its copy in host memory ([`super::host`]).
    pub const ERROR: usize = 0;
    /// Peer and block of the first fault.
    pub const ERROR_INFO: usize = 1;
    /// The call handshake's mailbox (u64 each): slot `source` holds rank
    /// `source`'s value for its latest call (call count mod 256 in the top
    /// byte, the call signature below: [`super::signature`]), written by its
    /// block 0 (kernels/cuda/prims.cu).
    pub const MAILBOX: usize = 8;
    /// Per-block call state: `STATE + block * STATE_WORDS`, 32 bytes each
    /// (loaded as two 16-byte vectors), starting on its own 128-byte line.
    pub const STATE: usize = 32;
    /// Words of one block's call state.
    pub const STATE_WORDS: usize = 8;
    /// Within a block's state: the call word, `calls << STATE_CALLS_SHIFT |
    /// phase`: the push buffer of the next push call (0..3) and how many calls
    /// the rank has made (block 0's count is the handshake's).
    pub const STATE_PUSH_PHASE: usize = 0;
    /// Bits of the call word that hold the push phase.
    pub const STATE_PHASE_MASK: u32 = 3;
    /// Where the call count starts in the call word.
    pub const STATE_CALLS_SHIFT: u32 = 2;
    /// Within a block's state: bytes per slot the last push call through each
    /// of the 3 buffers used (3 words).
    pub const STATE_PUSH_USED: usize = 1;
    /// Within a block's state: last barrier value of the pull family (u64).
    pub const STATE_PULL_SEQ: usize = 4;
    /// Within a block's state: staging uses so far (u64; its parity picks the half).
    pub const STATE_PULL_USE: usize = 6;
    /// Barrier flags (u64): flag `block * MAX_WORLD + source_rank` of the array
    /// that starts at this word, written by peers.
    pub const FLAGS: usize = STATE + MAX_BLOCKS as usize * STATE_WORDS;
    /// Barrier flags in the block.
    pub const FLAG_COUNT: usize = MAX_BLOCKS as usize * MAX_WORLD;
    /// Words in the block.
    pub const WORDS: usize = FLAGS + 2 * FLAG_COUNT;
    /// Bytes in the block.
    pub const BYTES: usize = WORDS * 4;

    /// The control block a rank starts with: no error; in every block's state
    /// the push phase `sequence_start % 3` (any phase is a valid start), no push
    /// bytes used, and the 64-bit sequence counters at `sequence_start`; every
    /// barrier flag at `sequence_start` too (tests start them just below the
    /// wrap).
    pub fn initial_words(sequence_start: u64) -> Vec<u32> {
        let mut words = vec![0u32; WORDS];
        let (low, high) = (sequence_start as u32, (sequence_start >> 32) as u32);
        let mut set_u64 = |word: usize| {
            words[word] = low;
            words[word + 1] = high;
        };
        for block in 0..MAX_BLOCKS as usize {
            let state = STATE + block * STATE_WORDS;
            set_u64(state + STATE_PULL_SEQ);
            set_u64(state + STATE_PULL_USE);
        }
        for flag in 0..FLAG_COUNT {
            set_u64(FLAGS + 2 * flag);
        }
        for block in 0..MAX_BLOCKS as usize {
            words[STATE + block * STATE_WORDS + STATE_PUSH_PHASE] = (sequence_start % 3) as u32;
        }
        words
    }
}

/// The words a rank's kernels mirror its first fault into, in pinned host
/// memory (`CollArgs::host_fault`), so the host learns of a fault by reading
/// memory, before every call, without a copy or a synchronisation. Written
/// details first and the error word last, with a system fence between.
pub mod host {
    /// The error word (as [`super::ctrl::ERROR`]); 0 while healthy.
    pub const ERROR: usize = 0;
    /// Peer and block (as [`super::ctrl::ERROR_INFO`]).
    pub const INFO: usize = 1;
    /// A mismatch: this rank's call signature (u64).
    pub const MINE: usize = 2;
    /// A mismatch: the peer's call signature (u64).
    pub const THEIRS: usize = 4;
    /// Words of the mirror.
    pub const WORDS: usize = 6;
    /// Bytes allocated for it (a cache line of its own).
    pub const BYTES: usize = 64;
}

/// Where in a kernel a wait stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WaitPhase {
    /// Polling for Lamport data.
    Data = 0,
    Barrier1 = 1,
    Barrier2 = 2,
    /// Block 0's call handshake.
    Handshake = 3,
}

impl WaitPhase {
    pub const ALL: [WaitPhase; 4] = [
        WaitPhase::Data,
        WaitPhase::Barrier1,
        WaitPhase::Barrier2,
        WaitPhase::Handshake,
    ];
}

/// Fault kind in the low byte of the error word: a wait passed its bound.
pub const FAULT_TIMEOUT: u32 = 1;
/// A peer made another call in the same slot (the handshake saw it).
pub const FAULT_MISMATCH: u32 = 2;
/// The peer a wait was for recorded a fault of its own: it will never send.
pub const FAULT_PEER_FAILED: u32 = 3;
/// A fault the rank's host found (a launch that failed, an NCCL error, a
/// stream that did not drain), written into the rank's error word so that
/// its peers' waits end as they do for a device fault (`comm::health`).
pub const FAULT_HOST: u32 = 4;

/// The `#define`s the CUDA sources are compiled with.
pub fn cuda_prelude() -> String {
    let defines: [(&str, String); 32] = [
        ("CT_MAX_WORLD", MAX_WORLD.to_string()),
        ("CT_DEAL_WORLD", DEAL_WORLD.to_string()),
        ("CT_DEAL_MIN_BYTES", format!("{DEAL_MIN_BYTES}ull")),
        ("CT_DEAL_MAX_BYTES", format!("{DEAL_MAX_BYTES}ull")),
        ("CT_MAX_BLOCKS", MAX_BLOCKS.to_string()),
        ("CT_SENTINEL", format!("{SENTINEL:#010x}u")),
        ("CT_CTRL_ERROR", ctrl::ERROR.to_string()),
        ("CT_CTRL_ERROR_INFO", ctrl::ERROR_INFO.to_string()),
        ("CT_CTRL_MAILBOX", ctrl::MAILBOX.to_string()),
        (
            "CT_STATE_PHASE_MASK",
            format!("{}u", ctrl::STATE_PHASE_MASK),
        ),
        (
            "CT_STATE_CALLS_SHIFT",
            format!("{}u", ctrl::STATE_CALLS_SHIFT),
        ),
        ("CT_HOST_ERROR", host::ERROR.to_string()),
        ("CT_HOST_INFO", host::INFO.to_string()),
        ("CT_HOST_MINE", host::MINE.to_string()),
        ("CT_HOST_THEIRS", host::THEIRS.to_string()),
        ("CT_SIG_VALID", format!("{:#x}ull", signature::VALID)),
        ("CT_SIG_MASK", format!("{:#x}ull", signature::MASK)),
        ("CT_ERR_MISMATCH", format!("{FAULT_MISMATCH}u")),
        ("CT_ERR_PEER_FAILED", format!("{FAULT_PEER_FAILED}u")),
        ("CT_ERR_HOST", format!("{FAULT_HOST}u")),
        ("CT_CTRL_STATE", ctrl::STATE.to_string()),
        ("CT_CTRL_STATE_WORDS", ctrl::STATE_WORDS.to_string()),
        ("CT_STATE_PUSH_PHASE", ctrl::STATE_PUSH_PHASE.to_string()),
        ("CT_STATE_PUSH_USED", ctrl::STATE_PUSH_USED.to_string()),
        ("CT_STATE_PULL_SEQ", ctrl::STATE_PULL_SEQ.to_string()),
        ("CT_STATE_PULL_USE", ctrl::STATE_PULL_USE.to_string()),
        ("CT_CTRL_FLAGS", ctrl::FLAGS.to_string()),
        ("CT_ERR_TIMEOUT", format!("{FAULT_TIMEOUT}u")),
        ("CT_PHASE_DATA", format!("{}u", WaitPhase::Data as u32)),
        (
            "CT_PHASE_BARRIER_1",
            format!("{}u", WaitPhase::Barrier1 as u32),
        ),
        (
            "CT_PHASE_BARRIER_2",
            format!("{}u", WaitPhase::Barrier2 as u32),
        ),
        (
            "CT_PHASE_HANDSHAKE",
            format!("{}u", WaitPhase::Handshake as u32),
        ),
    ];
    let mut out = String::from("// Generated from kernels::protocol; do not edit.\n");
    for (name, value) in defines {
        let _ = writeln!(out, "#define {name} {value}");
    }
    for kernel in registry::Kernel::all() {
        let _ = writeln!(out, "#define {} {}u", kernel.cuda_define(), kernel.id());
    }
    out
}

/// Replaces every 32-bit word equal to `SENTINEL` (0x8000_0000) by 0, as the push kernels do
/// on the way out (the one documented bit change). Host references use this to
/// predict the push algorithms' results. A trailing partial word is left alone.
pub fn replace_sentinel_words(bytes: &mut [u8]) {
    for word in bytes.chunks_exact_mut(4) {
        if u32::from_le_bytes([word[0], word[1], word[2], word[3]]) == SENTINEL {
            word.copy_from_slice(&0u32.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_block_layout() {
        // 64-bit words sit at even word offsets (8-byte aligned); each block's
        // state is 32 bytes on a 16-byte boundary; flags follow the states.
        const {
            assert!(ctrl::STATE.is_multiple_of(32) && ctrl::STATE > ctrl::ERROR_INFO);
            assert!(ctrl::STATE_WORDS * 4 == 32);
            assert!(ctrl::STATE_PUSH_USED + PUSH_BUFFERS as usize <= ctrl::STATE_PULL_SEQ);
            assert!(
                ctrl::STATE_PULL_SEQ.is_multiple_of(2) && ctrl::STATE_PULL_USE.is_multiple_of(2)
            );
            assert!(ctrl::STATE_PULL_USE + 2 <= ctrl::STATE_WORDS);
            assert!(ctrl::FLAGS.is_multiple_of(32));
        };
        assert_eq!(ctrl::BYTES, (32 + 256 * 8 + 2 * 256 * 8) * 4);
    }

    #[test]
    fn initial_control_block_starts_every_counter_at_the_start_value() {
        let start = u64::MAX - 5;
        let words = ctrl::initial_words(start);
        let u64_at = |w: usize| words[w] as u64 | (words[w + 1] as u64) << 32;
        for block in [0, 7, MAX_BLOCKS as usize - 1] {
            let state = ctrl::STATE + block * ctrl::STATE_WORDS;
            assert_eq!(u64_at(state + ctrl::STATE_PULL_SEQ), start);
            assert_eq!(u64_at(state + ctrl::STATE_PULL_USE), start);
            assert!(words[state + ctrl::STATE_PUSH_PHASE] < 3);
            assert_eq!(words[state + ctrl::STATE_PUSH_USED], 0);
        }
        assert_eq!(u64_at(ctrl::FLAGS), start);
        assert_eq!(u64_at(ctrl::FLAGS + 2 * (ctrl::FLAG_COUNT - 1)), start);
        assert_eq!(words[ctrl::ERROR], 0);
        assert!(ctrl::initial_words(0).iter().all(|&w| w == 0));
    }

    #[test]
    fn prelude_defines_every_constant_once() {
        let prelude = cuda_prelude();
        assert!(prelude.contains("#define CT_SENTINEL 0x80000000u"));
        assert!(prelude.contains("#define CT_CTRL_STATE 32"));
        let names: Vec<&str> = prelude
            .lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(names.len(), unique.len());
    }

    #[test]
    fn sentinel_words_become_zero() {
        // f32 -0.0 becomes +0.0; other words, including NaN and -1.0, stay.
        let words: [u32; 4] = [SENTINEL, 0x7fc0_0000, 0xbf80_0000, 0x8000_0001];
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        replace_sentinel_words(&mut bytes);
        let back: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, vec![0, 0x7fc0_0000, 0xbf80_0000, 0x8000_0001]);

        // 16-bit pairs: (+0.0, -0.0) is the sentinel; (-0.0, +0.0) is not.
        let mut halves: Vec<u8> = [0x0000u16, 0x8000, 0x8000, 0x0000]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        replace_sentinel_words(&mut halves);
        assert_eq!(halves, [0, 0, 0, 0, 0x00, 0x80, 0, 0]);
    }
}
