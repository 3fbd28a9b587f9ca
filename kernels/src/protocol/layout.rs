//! How large each rank's registered buffers are, derived once from `policy`'s
//! capacities when a world is built.
//!
//! Per rank:
//! - push region: [`PUSH_BUFFERS`] buffers x `world` slots x `slot_bytes`, shared
//!   by push all-reduce (a slot holds the message) and push all-gather (a slot
//!   holds one rank's share), armed with the sentinel;
//! - staging region: [`STAGING_HALVES`] halves of `staging_half_bytes`, shared by
//!   the pull family (one_shot_pull, two_shot_pull, the loopback reference);
//!   two_shot_pull needs two areas of a whole message per half (see
//!   [`two_shot_half_bytes`]);
//! - a control block of [`ctrl::BYTES`](super::ctrl::BYTES).

use super::sequence::shard_packs;
use super::{PACK_BYTES, PUSH_BUFFERS, STAGING_HALVES};
use crate::vocab::{Algo, Capacity, Collective};

/// The capacities of the custom algorithms on one platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacities {
    pub all_reduce_push: Capacity,
    pub all_reduce_pull: Capacity,
    pub all_reduce_two_shot: Capacity,
    pub all_gather_push: Capacity,
    pub all_gather_pull: Capacity,
}

impl Capacities {
    /// Looks every custom algorithm up with `capacity_of`.
    pub fn from_fn(capacity_of: impl Fn(Collective, Algo) -> Capacity) -> Capacities {
        Capacities {
            all_reduce_push: capacity_of(Collective::AllReduce, Algo::OneShotPush),
            all_reduce_pull: capacity_of(Collective::AllReduce, Algo::OneShotPull),
            all_reduce_two_shot: capacity_of(Collective::AllReduce, Algo::TwoShotPull),
            all_gather_push: capacity_of(Collective::AllGather, Algo::OneShotPush),
            all_gather_pull: capacity_of(Collective::AllGather, Algo::OneShotPull),
        }
    }

    /// The capacity of `algo` for `collective`; NCCL takes anything, and an
    /// algorithm that does not implement the collective takes nothing.
    pub fn of(&self, collective: Collective, algo: Algo) -> Capacity {
        match (collective, algo) {
            (_, Algo::Nccl) => Capacity {
                max_bytes: u64::MAX,
                align: 1,
            },
            (Collective::AllReduce, Algo::OneShotPush) => self.all_reduce_push,
            (Collective::AllReduce, Algo::OneShotPull) => self.all_reduce_pull,
            (Collective::AllReduce, Algo::TwoShotPull) => self.all_reduce_two_shot,
            (Collective::AllGather, Algo::OneShotPush) => self.all_gather_push,
            (Collective::AllGather, Algo::OneShotPull) => self.all_gather_pull,
            (Collective::AllGather, Algo::TwoShotPull) => Capacity {
                max_bytes: 0,
                align: 1,
            },
        }
    }
}

/// Smallest staging half a loopback world gets, whatever the capacities: the
/// loopback reference collective moves any message through it in chunks.
pub const REFERENCE_MIN_HALF_BYTES: u64 = 1 << 20;

/// Sizes of one rank's registered buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferPlan {
    pub world: usize,
    /// Stride between push slots: the largest per-rank push message.
    pub slot_bytes: u64,
    /// Bytes of one staging half: the largest per-rank pull-family message.
    pub staging_half_bytes: u64,
}

impl BufferPlan {
    /// Plans buffers for `world` ranks. `reference` asks for a staging region
    /// even if no pull algorithm has capacity (the loopback reference needs it).
    pub fn new(caps: &Capacities, world: usize, reference: bool) -> Result<BufferPlan, String> {
        let w = world as u64;
        let slot_bytes = round_down(
            caps.all_reduce_push
                .max_bytes
                .max(caps.all_gather_push.max_bytes / w),
        );
        let mut staging_half_bytes = round_down(
            caps.all_reduce_pull
                .max_bytes
                .max(caps.all_gather_pull.max_bytes / w),
        )
        .max(two_shot_half_bytes(
            round_down(caps.all_reduce_two_shot.max_bytes),
            world,
        ));
        if reference {
            staging_half_bytes = staging_half_bytes.max(REFERENCE_MIN_HALF_BYTES);
        }
        // The push kernels record bytes per slot in a 32-bit control word.
        if slot_bytes > u32::MAX as u64 {
            return Err(format!(
                "one_shot_push capacity of {slot_bytes} bytes per rank exceeds the 4 GiB the \
                 kernels track"
            ));
        }
        Ok(BufferPlan {
            world,
            slot_bytes,
            staging_half_bytes,
        })
    }

    /// Bytes of one rank's push region.
    pub fn push_region_bytes(&self) -> u64 {
        PUSH_BUFFERS * self.world as u64 * self.slot_bytes
    }

    /// Bytes of one rank's staging region.
    pub fn staging_region_bytes(&self) -> u64 {
        STAGING_HALVES * self.staging_half_bytes
    }

    /// Byte offset of slot `slot` of push buffer `buffer` within a push region.
    pub fn push_slot_offset(&self, buffer: u32, slot: usize) -> u64 {
        (buffer as u64 * self.world as u64 + slot as u64) * self.slot_bytes
    }
}

/// Bytes of a staging half that a two_shot_pull all-reduce of `bytes` (a
/// multiple of 16) needs in a world of `world` ranks: a scatter area and a
/// gather area, each of `world` shards of `ceil(packs / world)` packs
/// (kernels/cuda/two_shot.cu).
pub const fn two_shot_half_bytes(bytes: u64, world: usize) -> u64 {
    let w = if world == 0 { 1 } else { world as u64 };
    2 * w * shard_packs(bytes / PACK_BYTES, w) * PACK_BYTES
}

/// Rounds down to whole 16-byte packs.
const fn round_down(bytes: u64) -> u64 {
    bytes / PACK_BYTES * PACK_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn caps(push: u64, pull: u64, two_shot: u64, ag_push: u64, ag_pull: u64) -> Capacities {
        let c = |max_bytes| Capacity {
            max_bytes,
            align: 16,
        };
        Capacities {
            all_reduce_push: c(push),
            all_reduce_pull: c(pull),
            all_reduce_two_shot: c(two_shot),
            all_gather_push: c(ag_push),
            all_gather_pull: c(ag_pull),
        }
    }

    #[test]
    fn default_capacities_give_the_documented_buffers() {
        let plan = BufferPlan::new(
            &caps(8 * MIB, 16 * MIB, 64 * MIB, 8 * MIB, 16 * MIB),
            8,
            false,
        )
        .unwrap();
        assert_eq!(plan.slot_bytes, 8 * MIB);
        // Two-shot needs a scatter and a gather area of 64 MiB each.
        assert_eq!(plan.staging_half_bytes, 128 * MIB);
        assert_eq!(plan.push_region_bytes(), 3 * 8 * 8 * MIB);
        assert_eq!(plan.staging_region_bytes(), 256 * MIB);
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

    #[test]
    fn all_gather_shares_are_rounded_to_packs() {
        // 100 bytes over 3 ranks: a share of at most 33 bytes, so 32 usable.
        let plan = BufferPlan::new(&caps(0, 0, 0, 100, 100), 3, false).unwrap();
        assert_eq!(plan.slot_bytes, 32);
        assert_eq!(plan.staging_half_bytes, 32);
    }

    #[test]
    fn slots_never_overlap() {
        let plan = BufferPlan::new(&caps(64, 0, 0, 0, 0), 4, false).unwrap();
        let mut offsets: Vec<u64> = (0..3)
            .flat_map(|b| (0..4).map(move |s| (b, s)))
            .map(|(b, s)| plan.push_slot_offset(b, s))
            .collect();
        offsets.sort();
        for pair in offsets.windows(2) {
            assert_eq!(pair[1] - pair[0], plan.slot_bytes);
        }
        assert_eq!(
            *offsets.last().unwrap() + plan.slot_bytes,
            plan.push_region_bytes()
        );
    }

    #[test]
    fn the_loopback_reference_always_has_staging() {
        let plan = BufferPlan::new(&caps(0, 0, 0, 0, 0), 2, true).unwrap();
        assert_eq!(plan.staging_half_bytes, REFERENCE_MIN_HALF_BYTES);
        let plan = BufferPlan::new(&caps(0, 0, 0, 0, 0), 2, false).unwrap();
        assert_eq!(plan.staging_half_bytes, 0);
    }

    #[test]
    fn oversized_push_capacity_is_refused() {
        assert!(BufferPlan::new(&caps(8 << 30, 0, 0, 0, 0), 2, false).is_err());
    }

    #[test]
    fn capacity_lookup_matches_the_algorithms() {
        let c = caps(1, 2, 3, 4, 5);
        assert_eq!(c.of(Collective::AllReduce, Algo::TwoShotPull).max_bytes, 3);
        assert_eq!(c.of(Collective::AllGather, Algo::OneShotPull).max_bytes, 5);
        assert_eq!(c.of(Collective::AllGather, Algo::TwoShotPull).max_bytes, 0);
        assert!(c.of(Collective::AllGather, Algo::Nccl).accepts(7));
    }
}
