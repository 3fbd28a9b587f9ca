//! The call signature: what one call of a custom kernel is, in 56 bits, so
//! that block 0 of every rank can check that its peers make the same call in
//! the same slot (kernels/cuda/prims.cu, "Call handshake"), and so that a
//! mismatch can name both calls.
//!
//! Layout (bit 0 lowest):
//!
//! | bits  | field |
//! |-------|-------|
//! | 0..37  | bytes each rank contributes (all-gather: one share), modulo 2^37; for the fused all-reduce + add + RMSNorm its shape instead: tokens modulo 2^26 (bits 0..26) and hidden / 8 - 1 (bits 26..37) |
//! | 37..45 | a window call's window index, modulo 256 ([`Placement`]; 0 otherwise) |
//! | 45     | a window call ([`Placement::Window`]) |
//! | 46..48 | collective (0 all-reduce, 1 all-gather, 2 all-reduce + add + RMSNorm) |
//! | 48..50 | dtype (0 bf16, 1 f16, 2 f32) |
//! | 50..55 | kernel id ([`Kernel::id`]) |
//! | 55     | [`VALID`]: always set, so no signature is 0 (an empty mailbox) |
//!
//! A fused call carries its hidden size, so that ranks whose calls move the
//! same bytes as different rows (2 tokens of 4096, 4 of 2048) fail the
//! handshake instead of normalising different rows.
//!
//! The top byte of a mailbox word holds the call count and is not part of the
//! signature ([`MASK`]).
//!
//! The placement bits make where a call runs part of what it is: a call on
//! the engine's window `i` (`RankComm::all_reduce_window`) is another call
//! than the same collective on ordinary tensors, or on window `j`, so ranks
//! that place their tensors differently fail the handshake with a mismatch
//! instead of running NCCL on different windows where NCCL runs the call.

use std::fmt;

use super::registry::Kernel;
use crate::vocab::{Collective, DType};

/// Set in every signature.
pub const VALID: u64 = 1 << 55;
/// The bits of a mailbox word that are the signature.
pub const MASK: u64 = (1 << 56) - 1;
/// Bytes are exact below this (128 GiB per rank).
pub const BYTES_LIMIT: u64 = 1 << 37;
/// A fused call's tokens are exact below this.
pub const TOKENS_LIMIT: u64 = 1 << TOKENS_BITS;

const TOKENS_BITS: u32 = 26;
/// Where a fused call's hidden size (in units of 8 elements, less one) starts.
const HIDDEN_SHIFT: u32 = TOKENS_BITS;
const HIDDEN_MASK: u64 = (1 << 11) - 1;
const WINDOW_INDEX_SHIFT: u32 = 37;
/// The window index's bits.
const WINDOW_INDEX_MASK: u64 = 0xff;
const WINDOW_CALL: u64 = 1 << 45;
const COLLECTIVE_SHIFT: u32 = 46;
const DTYPE_SHIFT: u32 = 48;
const KERNEL_SHIFT: u32 = 50;
/// The kernel id's bits (registry tests check every id fits).
const KERNEL_MASK: u64 = 31;

/// One call, as its signature describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSignature {
    pub kernel: Kernel,
    pub collective: Collective,
    pub dtype: DType,
    /// Bytes each rank contributes, modulo [`BYTES_LIMIT`] (for the fused
    /// collective: tokens modulo [`TOKENS_LIMIT`], times `hidden` elements).
    pub bytes_per_rank: u64,
    /// Elements of a row of the fused collective (a multiple of 8 in
    /// `8..=16384`); 0 for the others.
    pub hidden: u32,
}

/// Where a call's tensors lie, as far as its identity goes: the bits of a
/// signature that [`CallSignature::encode`] leaves at zero, added by the
/// launch (`algorithms::launch`) from the call's own placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Tensors anywhere in device memory (every call but a window call).
    #[default]
    Anywhere,
    /// In place on the start of the engine's window with this index (its
    /// rank's windows in allocation order; the signature keeps it modulo
    /// 256).
    Window(u32),
}

impl Placement {
    /// The placement's bits of a signature (0 for [`Placement::Anywhere`]).
    pub const fn bits(self) -> u64 {
        match self {
            Placement::Anywhere => 0,
            Placement::Window(index) => {
                WINDOW_CALL | (index as u64 & WINDOW_INDEX_MASK) << WINDOW_INDEX_SHIFT
            }
        }
    }

    /// The placement a signature carries.
    pub const fn of(sig: u64) -> Placement {
        if sig & WINDOW_CALL == 0 {
            Placement::Anywhere
        } else {
            Placement::Window(((sig >> WINDOW_INDEX_SHIFT) & WINDOW_INDEX_MASK) as u32)
        }
    }
}

impl fmt::Display for Placement {
    /// "" or " on window 3".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Anywhere => Ok(()),
            Placement::Window(index) => write!(f, " on window {index}"),
        }
    }
}

const fn dtype_code(dtype: DType) -> u64 {
    match dtype {
        DType::Bf16 => 0,
        DType::F16 => 1,
        DType::F32 => 2,
    }
}

const fn collective_code(collective: Collective) -> u64 {
    match collective {
        Collective::AllReduce => 0,
        Collective::AllGather => 1,
        Collective::AllReduceAddRmsNorm => 2,
    }
}

impl CallSignature {
    /// The 56-bit signature (see the module documentation), placed
    /// [`Placement::Anywhere`]: OR [`Placement::bits`] into it for another.
    pub const fn encode(&self) -> u64 {
        VALID
            | (self.kernel.id() as u64 & KERNEL_MASK) << KERNEL_SHIFT
            | dtype_code(self.dtype) << DTYPE_SHIFT
            | collective_code(self.collective) << COLLECTIVE_SHIFT
            | self.size_bits()
    }

    /// The low bits: the bytes, or a fused call's tokens and hidden size.
    const fn size_bits(&self) -> u64 {
        match self.collective {
            Collective::AllReduce | Collective::AllGather => self.bytes_per_rank % BYTES_LIMIT,
            Collective::AllReduceAddRmsNorm => {
                let hidden = self.hidden as u64;
                let row = if hidden == 0 {
                    1
                } else {
                    hidden * self.dtype.size_bytes()
                };
                let tokens = self.bytes_per_rank / row % TOKENS_LIMIT;
                ((hidden / 8).wrapping_sub(1) & HIDDEN_MASK) << HIDDEN_SHIFT | tokens
            }
        }
    }

    /// The call a signature describes, whatever its [`Placement`]; `None`
    /// for a word no kernel of this version writes.
    pub fn decode(sig: u64) -> Option<CallSignature> {
        if sig & VALID == 0 || sig & !MASK != 0 {
            return None;
        }
        let kernel = Kernel::from_id(((sig >> KERNEL_SHIFT) & KERNEL_MASK) as u32)?;
        let dtype = match (sig >> DTYPE_SHIFT) & 3 {
            0 => DType::Bf16,
            1 => DType::F16,
            2 => DType::F32,
            _ => return None,
        };
        let collective = match (sig >> COLLECTIVE_SHIFT) & 3 {
            0 => Collective::AllReduce,
            1 => Collective::AllGather,
            2 => Collective::AllReduceAddRmsNorm,
            _ => return None,
        };
        let size = sig & (BYTES_LIMIT - 1);
        let (bytes_per_rank, hidden) = match collective {
            Collective::AllReduceAddRmsNorm => {
                let hidden = ((size >> HIDDEN_SHIFT & HIDDEN_MASK) + 1) * 8;
                let tokens = size & (TOKENS_LIMIT - 1);
                (tokens * hidden * dtype.size_bytes(), hidden as u32)
            }
            Collective::AllReduce | Collective::AllGather => (size, 0),
        };
        Some(CallSignature {
            kernel,
            collective,
            dtype,
            bytes_per_rank,
            hidden,
        })
    }
}

impl fmt::Display for CallSignature {
    /// "one_shot_push all_reduce of 4096 bytes per rank in bf16", or
    /// "one_shot_push all_reduce_add_rmsnorm of 2 tokens x 4096 in bf16".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kernel, collective) = (self.kernel.describe(), self.collective.name());
        match self.collective {
            Collective::AllReduceAddRmsNorm => {
                let row = (self.hidden as u64 * self.dtype.size_bytes()).max(1);
                write!(
                    f,
                    "{kernel} {collective} of {} tokens x {} in {}",
                    self.bytes_per_rank / row,
                    self.hidden,
                    self.dtype.name()
                )
            }
            Collective::AllReduce | Collective::AllGather => write!(
                f,
                "{kernel} {collective} of {} bytes per rank in {}",
                self.bytes_per_rank,
                self.dtype.name()
            ),
        }
    }
}

/// A signature word as a person reads it: the call and where it runs, or the
/// raw word when it is not one this version writes.
pub fn describe(sig: u64) -> String {
    match CallSignature::decode(sig) {
        Some(call) => format!("{call}{}", Placement::of(sig)),
        None => format!("an unknown call (signature {sig:#x})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::Algo;

    fn every_call() -> Vec<CallSignature> {
        let mut calls = Vec::new();
        for kernel in Kernel::all() {
            for dtype in DType::ALL {
                for collective in [Collective::AllReduce, Collective::AllGather] {
                    for bytes_per_rank in [16, 4096, 8192, (1 << 36) + 48, BYTES_LIMIT - 16] {
                        calls.push(CallSignature {
                            kernel,
                            collective,
                            dtype,
                            bytes_per_rank,
                            hidden: 0,
                        });
                    }
                }
                for hidden in [64, 72, 2048, 4096, 16384] {
                    for tokens in [1, 2, 64, TOKENS_LIMIT - 1] {
                        calls.push(CallSignature {
                            kernel,
                            collective: Collective::AllReduceAddRmsNorm,
                            dtype,
                            bytes_per_rank: tokens * hidden as u64 * dtype.size_bytes(),
                            hidden,
                        });
                    }
                }
            }
        }
        calls
    }

    #[test]
    fn fused_calls_of_the_same_bytes_in_other_rows_differ() {
        let fused = |tokens: u64, hidden: u32| CallSignature {
            kernel: Kernel::Algo(Algo::OneShotPush),
            collective: Collective::AllReduceAddRmsNorm,
            dtype: DType::Bf16,
            bytes_per_rank: tokens * hidden as u64 * 2,
            hidden,
        };
        assert_ne!(fused(2, 4096).encode(), fused(4, 2048).encode());
        let plain = CallSignature {
            collective: Collective::AllReduce,
            hidden: 0,
            ..fused(2, 4096)
        };
        assert_ne!(fused(2, 4096).encode(), plain.encode());
        assert_eq!(
            fused(2, 4096).to_string(),
            "one_shot_push all_reduce_add_rmsnorm of 2 tokens x 4096 in bf16"
        );
        // Collective code 3 is none.
        assert_eq!(
            CallSignature::decode(VALID | 1 << KERNEL_SHIFT | 3 << COLLECTIVE_SHIFT),
            None
        );
    }

    #[test]
    fn every_call_round_trips_and_is_never_zero() {
        for call in every_call() {
            let sig = call.encode();
            assert_ne!(sig, 0);
            assert_eq!(sig & !MASK, 0, "{call:?}: the top byte is the call count's");
            assert_eq!(CallSignature::decode(sig), Some(call));
        }
    }

    #[test]
    fn different_calls_have_different_signatures() {
        let calls = every_call();
        let mut sigs: Vec<u64> = calls.iter().map(CallSignature::encode).collect();
        sigs.sort_unstable();
        sigs.dedup();
        assert_eq!(sigs.len(), calls.len());
    }

    #[test]
    fn the_sizes_of_the_mismatch_tests_differ() {
        let call = |bytes_per_rank, dtype| CallSignature {
            kernel: Kernel::Algo(Algo::OneShotPush),
            collective: Collective::AllReduce,
            dtype,
            bytes_per_rank,
            hidden: 0,
        };
        assert_ne!(
            call(4096, DType::Bf16).encode(),
            call(8192, DType::Bf16).encode()
        );
        assert_ne!(
            call(4096, DType::Bf16).encode(),
            call(4096, DType::F16).encode()
        );
        assert_eq!(
            call(4096, DType::Bf16).to_string(),
            "one_shot_push all_reduce of 4096 bytes per rank in bf16"
        );
    }

    const PLACEMENTS: [Placement; 5] = [
        Placement::Anywhere,
        Placement::Window(0),
        Placement::Window(1),
        Placement::Window(7),
        Placement::Window(255),
    ];

    #[test]
    fn a_placement_is_part_of_the_call_and_leaves_the_rest_intact() {
        for call in every_call() {
            let plain = call.encode();
            assert_eq!(Placement::of(plain), Placement::Anywhere, "{call:?}");
            for placement in PLACEMENTS {
                let sig = plain | placement.bits();
                assert_eq!(sig & placement.bits(), placement.bits());
                assert_eq!(plain & placement.bits(), 0, "{call:?}: overlapping bits");
                assert_eq!(sig & !MASK, 0, "{call:?}: the top byte is the call count's");
                assert_eq!(Placement::of(sig), placement);
                assert_eq!(CallSignature::decode(sig), Some(call));
            }
        }
    }

    #[test]
    fn ranks_that_place_a_call_differently_make_different_calls() {
        // Every pair of (call, placement) has its own signature, so the
        // handshake tells a window call from an ordinary one, and window 0
        // from window 1, whatever else the calls share.
        let mut sigs = Vec::new();
        for call in every_call() {
            for placement in PLACEMENTS {
                sigs.push(call.encode() | placement.bits());
            }
        }
        let all = sigs.len();
        sigs.sort_unstable();
        sigs.dedup();
        assert_eq!(sigs.len(), all);
        // The index is kept modulo 256, as the bytes are modulo BYTES_LIMIT.
        assert_eq!(Placement::Window(256).bits(), Placement::Window(0).bits());
        assert_ne!(Placement::Window(0).bits(), Placement::Anywhere.bits());
    }

    #[test]
    fn a_window_call_is_described_with_its_window() {
        let call = CallSignature {
            kernel: Kernel::Algo(Algo::OneShotPull),
            collective: Collective::AllGather,
            dtype: DType::F32,
            bytes_per_rank: 4096,
            hidden: 0,
        };
        assert_eq!(
            describe(call.encode() | Placement::Window(3).bits()),
            "one_shot_pull all_gather of 4096 bytes per rank in f32 on window 3"
        );
        assert_eq!(
            describe(call.encode()),
            "one_shot_pull all_gather of 4096 bytes per rank in f32"
        );
    }

    #[test]
    fn words_no_kernel_writes_are_refused() {
        assert_eq!(CallSignature::decode(0), None);
        assert_eq!(CallSignature::decode(VALID | 1 << 56), None);
        // Kernel ids 0 and 30 are no kernels; dtype code 3 is none.
        assert_eq!(CallSignature::decode(VALID), None);
        assert_eq!(CallSignature::decode(VALID | 30 << KERNEL_SHIFT), None);
        assert_eq!(
            CallSignature::decode(VALID | 1 << KERNEL_SHIFT | 3 << DTYPE_SHIFT),
            None
        );
        assert!(describe(0x42).contains("0x42"));
    }
}
