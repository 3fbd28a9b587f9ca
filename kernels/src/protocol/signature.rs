//! The call signature: what one call of a custom kernel is, in 56 bits, so
//! that block 0 of every rank can check that its peers make the same call in
//! the same slot (kernels/cuda/prims.cu, "Call handshake"), and so that a
//! mismatch can name both calls.
//!
//! Layout (bit 0 lowest):
//!
//! | bits  | field |
//! |-------|-------|
//! | 0..38  | bytes each rank contributes (all-gather: one share), modulo 2^38 |
//! | 38..46 | a window call's window index, modulo 256 ([`Placement`]; 0 otherwise) |
//! | 46     | a window call ([`Placement::Window`]) |
//! | 47     | collective (0 all-reduce, 1 all-gather) |
//! | 48..50 | dtype (0 bf16, 1 f16, 2 f32) |
//! | 50..55 | kernel id ([`Kernel::id`]) |
//! | 55     | [`VALID`]: always set, so no signature is 0 (an empty mailbox) |
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
/// Bytes are exact below this (256 GiB per rank).
pub const BYTES_LIMIT: u64 = 1 << 38;

const WINDOW_INDEX_SHIFT: u32 = 38;
/// The window index's bits.
const WINDOW_INDEX_MASK: u64 = 0xff;
const WINDOW_CALL: u64 = 1 << 46;
const COLLECTIVE_SHIFT: u32 = 47;
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
    /// Bytes each rank contributes, modulo [`BYTES_LIMIT`].
    pub bytes_per_rank: u64,
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
            | (self.bytes_per_rank % BYTES_LIMIT)
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
        let collective = if (sig >> COLLECTIVE_SHIFT) & 1 == 0 {
            Collective::AllReduce
        } else {
            Collective::AllGather
        };
        Some(CallSignature {
            kernel,
            collective,
            dtype,
            bytes_per_rank: sig & (BYTES_LIMIT - 1),
        })
    }
}

impl fmt::Display for CallSignature {
    /// "one_shot_push all_reduce of 4096 bytes per rank in bf16".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} of {} bytes per rank in {}",
            self.kernel.describe(),
            self.collective.name(),
            self.bytes_per_rank,
            self.dtype.name()
        )
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
            for collective in Collective::ALL {
                for dtype in DType::ALL {
                    for bytes_per_rank in [16, 4096, 8192, (1 << 37) + 48, BYTES_LIMIT - 16] {
                        calls.push(CallSignature {
                            kernel,
                            collective,
                            dtype,
                            bytes_per_rank,
                        });
                    }
                }
            }
        }
        calls
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
