//! The custom algorithms, one entry each: everything the host needs to know
//! about an algorithm lives here, and the rest of the crate derives from it
//! (capacities and buffer sizes, the decline rule, the kernel to launch, the
//! fault names, the configuration digest of a world of processes).
//!
//! # Adding an algorithm
//!
//! 1. Its name, if new to the tables, goes into the schema vocabulary
//!    (`tuned_schema::Algo`, with `Collective::algos`), so tuned files and
//!    `policy` can name it.
//! 2. Its kernels go into a `.cu` file under `kernels/cuda/` (listed in
//!    `module::SOURCES`), built from the primitives of `prims.cu`, with entry
//!    points `colltune_<family>_all_reduce_<dtype>` and, if it gathers,
//!    `colltune_<family>_all_gather`. A new family also gets a [`KernelFamily`]
//!    variant (its id is the `CT_KERNEL_*` the kernels report faults with).
//! 3. One [`CustomAlgorithm`] entry in [`REGISTRY`]: the collectives it
//!    implements, the registered region its data crosses, how many bytes of
//!    that region a call needs, and what its Lamport data (if any) does to
//!    results ([`SentinelRule`], which the tuner's result checks follow).
//!
//! Nothing else changes: `tuner sweep` measures every algorithm the vocabulary
//! lists for a collective, and dispatch launches whatever the registry names.
//!
//! Every algorithm launches with the rank's one launch shape
//! ([`LaunchShape::grid`](super::launch::LaunchShape::grid)): each block keeps
//! its own copy of the rank's call state, so all kernels of a rank must use the
//! same grid, and an entry here carries no shape of its own.

use super::PACK_BYTES;
use super::sequence::shard_packs;
use crate::vocab::{Algo, Collective};

/// A family of kernels: the entry points of one algorithm in the CUDA sources,
/// and the number a kernel of the family writes into its rank's error word when
/// a wait times out (`CT_KERNEL_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum KernelFamily {
    Push = 1,
    Pull = 2,
    TwoShot = 3,
    /// The loopback world's stand-in for NCCL (not an algorithm of the tables).
    Reference = 4,
    TwoShotPush = 5,
}

impl KernelFamily {
    pub const ALL: [KernelFamily; 5] = [
        KernelFamily::Push,
        KernelFamily::Pull,
        KernelFamily::TwoShot,
        KernelFamily::Reference,
        KernelFamily::TwoShotPush,
    ];

    /// The id in a fault word.
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The family a fault word's id names.
    pub fn from_id(id: u32) -> Option<KernelFamily> {
        KernelFamily::ALL.into_iter().find(|f| f.id() == id)
    }

    /// The middle of its entry points' names: `colltune_<prefix>_...`.
    pub const fn entry_prefix(self) -> &'static str {
        match self {
            KernelFamily::Push => "push",
            KernelFamily::Pull => "pull",
            KernelFamily::TwoShot => "two_shot",
            KernelFamily::Reference => "reference",
            KernelFamily::TwoShotPush => "two_shot_push",
        }
    }

    /// The `#define` that carries its id into the CUDA sources.
    pub const fn cuda_define(self) -> &'static str {
        match self {
            KernelFamily::Push => "CT_KERNEL_PUSH",
            KernelFamily::Pull => "CT_KERNEL_PULL",
            KernelFamily::TwoShot => "CT_KERNEL_TWO_SHOT",
            KernelFamily::Reference => "CT_KERNEL_REFERENCE",
            KernelFamily::TwoShotPush => "CT_KERNEL_TWO_SHOT_PUSH",
        }
    }

    /// Whether it has kernels for `collective`.
    pub fn serves(self, collective: Collective) -> bool {
        self == KernelFamily::Reference
            || REGISTRY
                .iter()
                .any(|a| a.family == self && a.collectives.contains(&collective))
    }

    /// What it is called in an error message.
    pub fn describe(self) -> &'static str {
        match REGISTRY.iter().find(|a| a.family == self) {
            Some(custom) => custom.algo.name(),
            None => "the loopback reference collective",
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

/// One custom algorithm.
#[derive(Clone, Copy, Debug)]
pub struct CustomAlgorithm {
    pub algo: Algo,
    pub family: KernelFamily,
    pub collectives: &'static [Collective],
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
        family: KernelFamily::Push,
        collectives: &[Collective::AllReduce, Collective::AllGather],
        region: Region::Push,
        footprint: message,
        sentinel_rule: SentinelRule::Inputs,
    },
    CustomAlgorithm {
        algo: Algo::OneShotPull,
        family: KernelFamily::Pull,
        collectives: &[Collective::AllReduce, Collective::AllGather],
        region: Region::Staging,
        footprint: message,
        sentinel_rule: SentinelRule::None,
    },
    CustomAlgorithm {
        algo: Algo::TwoShotPull,
        family: KernelFamily::TwoShot,
        collectives: &[Collective::AllReduce],
        region: Region::Staging,
        footprint: two_shot_half_bytes,
        sentinel_rule: SentinelRule::None,
    },
    CustomAlgorithm {
        algo: Algo::TwoShotPush,
        family: KernelFamily::TwoShotPush,
        collectives: &[Collective::AllReduce],
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
            .filter(move |a| a.collectives.contains(&collective))
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
    fn the_registry_matches_the_schema_vocabulary() {
        for collective in Collective::ALL {
            let custom: Vec<Algo> = collective
                .algos()
                .iter()
                .copied()
                .filter(|a| *a != Algo::Nccl)
                .collect();
            let registered: Vec<Algo> = implemented_pairs()
                .filter(|(c, _)| *c == collective)
                .map(|(_, a)| a)
                .collect();
            assert_eq!(custom, registered, "{}", collective.name());
        }
        for entry in REGISTRY {
            assert!(entry.algo.is_custom());
            for collective in entry.collectives {
                assert!(entry.algo.implements(*collective));
            }
        }
    }

    #[test]
    fn families_are_distinct_and_round_trip_through_their_ids() {
        for family in KernelFamily::ALL {
            assert_eq!(KernelFamily::from_id(family.id()), Some(family));
        }
        assert_eq!(KernelFamily::from_id(0), None);
        let mut seen = std::collections::HashSet::new();
        for entry in REGISTRY {
            assert!(seen.insert(entry.family), "{:?} twice", entry.family);
            assert_ne!(entry.family, KernelFamily::Reference);
        }
    }

    #[test]
    fn families_serve_what_their_algorithms_implement() {
        assert!(KernelFamily::Push.serves(Collective::AllGather));
        assert!(!KernelFamily::TwoShot.serves(Collective::AllGather));
        assert!(!KernelFamily::TwoShotPush.serves(Collective::AllGather));
        assert_eq!(KernelFamily::TwoShotPush.describe(), "two_shot_push");
        assert!(KernelFamily::Reference.serves(Collective::AllGather));
        assert_eq!(KernelFamily::TwoShot.describe(), "two_shot_pull");
        assert_eq!(
            KernelFamily::Reference.describe(),
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
