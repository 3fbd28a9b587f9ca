//! The custom algorithms, one entry each: everything the host needs to know
//! about an algorithm lives here, and the rest of the crate derives from it
//! (capacities and buffer sizes, the decline rule, the kernel to launch, the
//! fault names, the configuration digest of a world of processes).
//!
//! Adding an algorithm: ARCHITECTURE.md, "Adding an algorithm".
//!
//! Every algorithm launches with the rank's one launch shape
//! ([`LaunchShape::grid`](super::launch::LaunchShape::grid)): each block keeps
//! its own copy of the rank's call state, so all kernels of a rank must use the
//! same grid, and an entry here carries no shape of its own.

use super::PACK_BYTES;
use super::sequence::shard_packs;
use crate::vocab::{Algo, Collective};

/// A kernel the CUDA sources define: a custom algorithm's, or the loopback
/// world's stand-in for NCCL (the reference collective, not an algorithm of
/// the tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    Algo(Algo),
    Reference,
}

/// The reference collective's id in fault words and call signatures (the
/// algorithms' ids are their indices in `Algo::ALL`).
const REFERENCE_ID: u32 = 31;

impl Kernel {
    /// Every kernel: the registry's algorithms, then the reference.
    pub fn all() -> impl Iterator<Item = Kernel> {
        REGISTRY
            .iter()
            .map(|a| Kernel::Algo(a.algo))
            .chain(std::iter::once(Kernel::Reference))
    }

    /// The number a kernel writes into its rank's error word and puts into
    /// its call signature: the algorithm's index in `Algo::ALL` (NCCL, index
    /// 0, has no kernel), or 31 for the reference.
    pub const fn id(self) -> u32 {
        match self {
            Kernel::Algo(algo) => algo as u32,
            Kernel::Reference => REFERENCE_ID,
        }
    }

    /// The kernel a fault word's id names.
    pub fn from_id(id: u32) -> Option<Kernel> {
        Kernel::all().find(|k| k.id() == id)
    }

    /// Its name: the algorithm's (`one_shot_pull`), or `reference`. The CUDA
    /// file is `cuda/<name>.cu` and its entry points `colltune_<name>_…`.
    pub const fn name(self) -> &'static str {
        match self {
            Kernel::Algo(algo) => algo.name(),
            Kernel::Reference => "reference",
        }
    }

    /// The `#define` that carries its id into the CUDA sources:
    /// `CT_KERNEL_<NAME>`.
    pub fn cuda_define(self) -> String {
        format!("CT_KERNEL_{}", self.name().to_ascii_uppercase())
    }

    /// Whether it has kernels for `collective`. The reference stands in for
    /// NCCL, so it has NCCL's: all-reduce and all-gather.
    pub fn serves(self, collective: Collective) -> bool {
        match self {
            Kernel::Algo(algo) => algo.implements(collective),
            Kernel::Reference => Algo::Nccl.implements(collective),
        }
    }

    /// What it is called in an error message.
    pub const fn describe(self) -> &'static str {
        match self {
            Kernel::Algo(algo) => algo.name(),
            Kernel::Reference => "the loopback reference collective",
        }
    }
}

/// The registered buffers a call's data crosses (see [`super::layout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The push region: three buffers of `world` slots, armed with the sentinel.
    Push,
    /// The staging region: two halves, plain data behind barriers.
    Staging,
}

/// One custom algorithm. The collectives it implements are the schema's
/// (`Algo::implements`).
#[derive(Clone, Copy, Debug)]
pub struct CustomAlgorithm {
    pub algo: Algo,
    pub region: Region,
    /// Bytes of its region (per push slot, or per staging half) a call needs,
    /// given the bytes each rank contributes (a multiple of 16) and the world
    /// size. Capacity becomes buffer size through it, and a call that needs
    /// more than the world's buffers hold is declined.
    pub footprint: fn(per_rank: u64, world: usize) -> u64,
    /// What the Lamport form of its data does to results (the numerical
    /// contract's one bit change).
    pub sentinel_rule: SentinelRule,
}

/// How an algorithm's results may differ from the exact rank-order sum (or the
/// exact gather) because its data crosses in Lamport form, where the 32-bit
/// sentinel word means "not arrived yet" and is therefore never sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentinelRule {
    /// Exact: no Lamport data.
    None,
    /// Every input word equal to the sentinel is sent, and used by its own rank,
    /// as 0 (one_shot_push).
    Inputs,
    /// As `Inputs`, and every word of the reduced sum equal to the sentinel is
    /// also sent, and stored by its own rank, as 0 (two_shot_push, which sends
    /// the sums in Lamport form too), so every rank holds the same bits.
    InputsAndSums,
}

/// A whole message per rank.
fn message(per_rank: u64, _world: usize) -> u64 {
    per_rank
}

/// Every custom algorithm.
pub const REGISTRY: [CustomAlgorithm; 4] = [
    CustomAlgorithm {
        algo: Algo::OneShotPush,
        region: Region::Push,
        footprint: message,
        sentinel_rule: SentinelRule::Inputs,
    },
    CustomAlgorithm {
        algo: Algo::OneShotPull,
        region: Region::Staging,
        footprint: message,
        sentinel_rule: SentinelRule::None,
    },
    CustomAlgorithm {
        algo: Algo::TwoShotPull,
        region: Region::Staging,
        footprint: two_shot_half_bytes,
        sentinel_rule: SentinelRule::None,
    },
    CustomAlgorithm {
        algo: Algo::TwoShotPush,
        region: Region::Push,
        footprint: two_shot_push_slot_bytes,
        sentinel_rule: SentinelRule::InputsAndSums,
    },
];

/// The entry of a custom algorithm; `None` for NCCL.
pub fn custom(algo: Algo) -> Option<&'static CustomAlgorithm> {
    REGISTRY.iter().find(|a| a.algo == algo)
}

/// Every (collective, algorithm) pair a custom kernel implements, in registry
/// order, all-reduce first.
pub fn implemented_pairs() -> impl Iterator<Item = (Collective, Algo)> {
    Collective::ALL.into_iter().flat_map(|collective| {
        REGISTRY
            .iter()
            .filter(move |a| a.algo.implements(collective))
            .map(move |a| (collective, a.algo))
    })
}

/// What the Lamport form of `algo`'s data does to its results
/// ([`SentinelRule::None`] for NCCL and the barrier algorithms).
pub fn sentinel_rule(algo: Algo) -> SentinelRule {
    custom(algo).map_or(SentinelRule::None, |a| a.sentinel_rule)
}

/// Bytes of a staging half that a two_shot_pull all-reduce of `bytes` (a
/// multiple of 16) needs in a world of `world` ranks: a scatter area and a
/// gather area, each of `world` shards of `ceil(packs / world)` packs
/// (kernels/cuda/two_shot.cu).
/// Saturates rather than wraps: a need of `u64::MAX` fits no buffer.
pub const fn two_shot_half_bytes(bytes: u64, world: usize) -> u64 {
    let w = if world == 0 { 1 } else { world as u64 };
    shard_packs(bytes / PACK_BYTES, w)
        .saturating_mul(PACK_BYTES)
        .saturating_mul(w)
        .saturating_mul(2)
}

/// Bytes of a push slot that a two_shot_push all-reduce of `bytes` (a multiple
/// of 16) needs in a world of `world` ranks: slot q of rank s receives rank q's
/// copy of shard s, then shard q as reduced by rank q, each of
/// `ceil(packs / world)` packs (kernels/cuda/two_shot_push.cu). A world of one
/// sends nothing.
/// Saturates rather than wraps.
pub const fn two_shot_push_slot_bytes(bytes: u64, world: usize) -> u64 {
    if world <= 1 {
        return 0;
    }
    shard_packs(bytes / PACK_BYTES, world as u64)
        .saturating_mul(PACK_BYTES)
        .saturating_mul(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_algorithm_of_the_schema_has_one_entry() {
        for algo in Algo::ALL {
            let entries = REGISTRY.iter().filter(|e| e.algo == algo).count();
            assert_eq!(entries, algo.is_kernel() as usize, "{}", algo.name());
        }
        for collective in Collective::ALL {
            let custom: Vec<Algo> = collective
                .algos()
                .iter()
                .copied()
                .filter(|a| a.is_kernel())
                .collect();
            let registered: Vec<Algo> = implemented_pairs()
                .filter(|(c, _)| *c == collective)
                .map(|(_, a)| a)
                .collect();
            assert_eq!(custom, registered, "{}", collective.name());
        }
    }

    #[test]
    fn kernels_round_trip_through_their_ids_and_spell_the_schemas_names() {
        let mut seen = std::collections::HashSet::new();
        for kernel in Kernel::all() {
            assert_eq!(Kernel::from_id(kernel.id()), Some(kernel));
            assert!(seen.insert(kernel.id()), "{kernel:?}: id taken");
            // Ids fit the fault word's byte and the signature's five bits.
            assert!(kernel.id() > 0 && kernel.id() < 32, "{kernel:?}");
        }
        assert_eq!(Kernel::from_id(0), None);
        let pull = Kernel::Algo(Algo::OneShotPull);
        assert_eq!(pull.name(), "one_shot_pull");
        assert_eq!(pull.cuda_define(), "CT_KERNEL_ONE_SHOT_PULL");
        assert_eq!(Kernel::Reference.cuda_define(), "CT_KERNEL_REFERENCE");
    }

    #[test]
    fn kernels_serve_what_their_algorithms_implement() {
        assert!(Kernel::Algo(Algo::OneShotPush).serves(Collective::AllGather));
        assert!(!Kernel::Algo(Algo::TwoShotPull).serves(Collective::AllGather));
        assert!(!Kernel::Algo(Algo::TwoShotPush).serves(Collective::AllGather));
        assert!(Kernel::Reference.serves(Collective::AllGather));
        assert!(!Kernel::Reference.serves(Collective::AllReduceAddRmsNorm));
        assert!(Kernel::Algo(Algo::OneShotPush).serves(Collective::AllReduceAddRmsNorm));
        assert!(Kernel::Algo(Algo::TwoShotPush).serves(Collective::AllReduceAddRmsNorm));
        assert!(!Kernel::Algo(Algo::OneShotPull).serves(Collective::AllReduceAddRmsNorm));
        assert_eq!(Kernel::Algo(Algo::TwoShotPull).describe(), "two_shot_pull");
        assert_eq!(
            Kernel::Reference.describe(),
            "the loopback reference collective"
        );
    }

    #[test]
    fn only_the_push_algorithms_follow_the_sentinel_rule() {
        assert_eq!(sentinel_rule(Algo::OneShotPush), SentinelRule::Inputs);
        assert_eq!(
            sentinel_rule(Algo::TwoShotPush),
            SentinelRule::InputsAndSums
        );
        assert_eq!(sentinel_rule(Algo::OneShotPull), SentinelRule::None);
        assert_eq!(sentinel_rule(Algo::TwoShotPull), SentinelRule::None);
        assert_eq!(sentinel_rule(Algo::Nccl), SentinelRule::None);
        for entry in REGISTRY {
            // Lamport data needs the sentinel-armed push region.
            assert_eq!(
                entry.sentinel_rule != SentinelRule::None,
                entry.region == Region::Push,
                "{}",
                entry.algo.name()
            );
        }
    }

    #[test]
    fn two_shot_push_slots_hold_a_shard_copy_and_a_reduced_shard() {
        assert_eq!(two_shot_push_slot_bytes(64, 2), 64);
        // 5 packs over 4 ranks: shards of 2 packs.
        assert_eq!(two_shot_push_slot_bytes(80, 4), 2 * 2 * 16);
        assert_eq!(two_shot_push_slot_bytes(1 << 20, 1), 0);
        for world in 2..=8 {
            for packs in 1..200u64 {
                let need = two_shot_push_slot_bytes(packs * 16, world);
                let shard = packs.div_ceil(world as u64) * 16;
                assert_eq!(need, 2 * shard);
            }
        }
    }

    #[test]
    fn footprints_saturate_instead_of_wrapping() {
        assert_eq!(two_shot_half_bytes(u64::MAX, 8), u64::MAX);
        assert_eq!(two_shot_push_slot_bytes(u64::MAX, 2), u64::MAX);
        assert!(two_shot_half_bytes(1 << 62, 8) >= 1 << 62);
    }

    #[test]
    fn two_shot_halves_hold_both_areas_of_uneven_shards() {
        assert_eq!(two_shot_half_bytes(64, 2), 128);
        // 5 packs over 4 ranks: shards of 2 packs, 8 packs per area.
        assert_eq!(two_shot_half_bytes(80, 4), 2 * 8 * 16);
        assert_eq!(two_shot_half_bytes(0, 3), 0);
        for world in 1..=8 {
            for packs in 1..200u64 {
                let need = two_shot_half_bytes(packs * 16, world);
                assert!(need >= 2 * packs * 16 && need < 2 * (packs + world as u64) * 16);
            }
        }
    }
}
