//! The call signature: what one call of a custom kernel is, in 56 bits, so
//! that block 0 of every rank can check that its peers make the same call in
//! the same slot (kernels/cuda/prims.cu, "Call handshake"), and so that a
//! mismatch can name both calls.
//!
//! Layout (bit 0 lowest):
//!
//! | bits  | field |
//! |-------|-------|
//! | 0..49  | bytes each rank contributes (all-gather: one share), modulo 2^49 |
//! | 49     | collective (0 all-reduce, 1 all-gather) |
//! | 50..52 | dtype (0 bf16, 1 f16, 2 f32) |
//! | 52..55 | kernel family id ([`KernelFamily::id`]) |
//! | 55     | [`VALID`]: always set, so no signature is 0 (an empty mailbox) |
//!
//! The top byte of a mailbox word holds the call count and is not part of the
//! signature ([`MASK`]).

use std::fmt;

use super::registry::KernelFamily;
use crate::vocab::{Collective, DType};

/// Set in every signature.
pub const VALID: u64 = 1 << 55;
/// The bits of a mailbox word that are the signature.
pub const MASK: u64 = (1 << 56) - 1;
/// Bytes are exact below this (512 TiB per rank).
pub const BYTES_LIMIT: u64 = 1 << 49;

const COLLECTIVE_SHIFT: u32 = 49;
const DTYPE_SHIFT: u32 = 50;
const FAMILY_SHIFT: u32 = 52;

// Every family id fits its three bits.
const _: () = {
    let mut i = 0;
    while i < KernelFamily::ALL.len() {
        assert!(KernelFamily::ALL[i].id() > 0 && KernelFamily::ALL[i].id() < 8);
        i += 1;
    }
};

/// One call, as its signature describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSignature {
    pub family: KernelFamily,
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
            | (self.family.id() as u64) << FAMILY_SHIFT
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
        let family = KernelFamily::from_id(((sig >> FAMILY_SHIFT) & 7) as u32)?;
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
            family,
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
            self.family.describe(),
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

    fn every_call() -> Vec<CallSignature> {
        let mut calls = Vec::new();
        for family in KernelFamily::ALL {
            for collective in Collective::ALL {
                for dtype in DType::ALL {
                    for bytes_per_rank in [16, 4096, 8192, (1 << 40) + 48, BYTES_LIMIT - 16] {
                        calls.push(CallSignature {
                            family,
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
            family: KernelFamily::Push,
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
        // Family id 0 and 7 are not families; dtype code 3 is none.
        assert_eq!(CallSignature::decode(VALID), None);
        assert_eq!(CallSignature::decode(VALID | 7 << FAMILY_SHIFT), None);
        assert_eq!(
            CallSignature::decode(VALID | 1 << FAMILY_SHIFT | 3 << DTYPE_SHIFT),
            None
        );
        assert!(describe(0x42).contains("0x42"));
    }
}
