//! The call signature: what one call of a custom kernel is, in 56 bits, so
//! that block 0 of every rank can check that its peers make the same call in
//! the same slot (kernels/cuda/prims.cu, "Call handshake"), and so that a
//! mismatch can name both calls.
//!
//! Layout (bit 0 lowest):
//!
//! | bits  | field |
//! |-------|-------|
//! | 0..47  | bytes each rank contributes (all-gather: one share), modulo 2^47 |
//! | 47     | collective (0 all-reduce, 1 all-gather) |
//! | 48..50 | dtype (0 bf16, 1 f16, 2 f32) |
//! | 50..55 | kernel id ([`Kernel::id`]) |
//! | 55     | [`VALID`]: always set, so no signature is 0 (an empty mailbox) |
//!
//! The top byte of a mailbox word holds the call count and is not part of the
//! signature ([`MASK`]).

use std::fmt;

use super::registry::Kernel;
use crate::vocab::{Collective, DType};

/// Set in every signature.
pub const VALID: u64 = 1 << 55;
/// The bits of a mailbox word that are the signature.
pub const MASK: u64 = (1 << 56) - 1;
/// Bytes are exact below this (128 TiB per rank).
pub const BYTES_LIMIT: u64 = 1 << 47;

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
    /// The 56-bit signature (see the module documentation).
    pub const fn encode(&self) -> u64 {
        VALID
            | (self.kernel.id() as u64 & KERNEL_MASK) << KERNEL_SHIFT
            | dtype_code(self.dtype) << DTYPE_SHIFT
            | collective_code(self.collective) << COLLECTIVE_SHIFT
            | (self.bytes_per_rank % BYTES_LIMIT)
    }

    /// The call a signature describes; `None` for a word no kernel of this
    /// version writes.
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

/// A signature word as a person reads it: the call, or the raw word when it
/// is not one this version writes.
pub fn describe(sig: u64) -> String {
    match CallSignature::decode(sig) {
        Some(call) => call.to_string(),
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
                    for bytes_per_rank in [16, 4096, 8192, (1 << 40) + 48, BYTES_LIMIT - 16] {
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
