//! The decline rule is the vocabulary's ([`policy::decline`]), so `tuner
//! explain` applies the one the runtime does; here is what a world offers it:
//! the platform's capacities, the registered buffers and peer access of the
//! custom kernels, and the NCCL window.

pub use policy::decline::{CallShape, Decline, decline};

use super::layout::{BufferPlan, Capacities};
use super::registry::{self, Region};
use crate::vocab::{Algo, Capacity, Collective};

/// What a world offers the algorithms that need more than NCCL: its
/// registered buffers and whether its GPUs reach each other's memory (the
/// custom kernels), and the bytes of its NCCL window (0: none).
#[derive(Clone, Copy, Debug)]
pub struct WorldOffer<'a> {
    pub caps: &'a Capacities,
    pub plan: &'a BufferPlan,
    pub peer_access: bool,
    pub window_bytes: u64,
}

impl policy::decline::Offer for WorldOffer<'_> {
    fn capacity(&self, collective: Collective, algo: Algo) -> Capacity {
        self.caps.of(collective, algo)
    }

    fn peer_access(&self) -> bool {
        self.peer_access
    }

    fn window_bytes(&self) -> u64 {
        self.window_bytes
    }

    /// The call's registry entry says which region it crosses and how many
    /// bytes of it the call needs.
    fn buffers_hold(&self, call: &CallShape) -> bool {
        let Some(custom) = registry::custom(call.algo) else {
            return false;
        };
        let room = match custom.region {
            Region::Push => self.plan.slot_bytes,
            Region::Staging => self.plan.staging_half_bytes,
        };
        (custom.footprint)(call.bytes_per_rank, call.world) <= room
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::PACK_BYTES;

    const MIB: u64 = 1 << 20;

    fn defaults() -> Capacities {
        Capacities::from_fn(|collective, algo| {
            let max_bytes = match (collective, algo) {
                (_, Algo::OneShotPush) => 8 * MIB,
                (_, Algo::OneShotPull) => 16 * MIB,
                (Collective::AllReduce, Algo::TwoShotPull) => 64 * MIB,
                (Collective::AllReduce, Algo::TwoShotPush) => 8 * MIB,
                (_, Algo::NcclSymmetric) => 64 * MIB,
                _ => 0,
            };
            Capacity {
                max_bytes,
                align: 16,
            }
        })
    }

    /// A world with a window of 64 MiB.
    fn offer<'a>(caps: &'a Capacities, plan: &'a BufferPlan, peer_access: bool) -> WorldOffer<'a> {
        WorldOffer {
            caps,
            plan,
            peer_access,
            window_bytes: 64 * MIB,
        }
    }

    use Algo::*;
    use Collective::*;

    /// One call on `plan`'s buffers, with every capacity at its default.
    fn on(plan: BufferPlan, algo: Algo, collective: Collective, bytes: u64) -> Option<Decline> {
        let call = CallShape::new(collective, algo, plan.world, bytes);
        decline(&call, &offer(&defaults(), &plan, true))
    }

    #[test]
    fn two_shot_push_needs_a_shard_and_its_sum_per_push_slot() {
        // 256 bytes over 4 ranks: shards of 4 packs (64 bytes), and a slot
        // holds a copy of one shard and then its sum.
        let plan = BufferPlan {
            world: 4,
            slot_bytes: 128,
            staging_half_bytes: 0,
        };
        assert_eq!(on(plan, TwoShotPush, AllReduce, 256), None);
        // One-shot push sends the whole message into a slot: it does not fit.
        assert_eq!(
            on(plan, OneShotPush, AllReduce, 256),
            Some(Decline::BufferTooSmall)
        );
        let smaller = BufferPlan {
            slot_bytes: 127,
            ..plan
        };
        assert_eq!(
            on(smaller, TwoShotPush, AllReduce, 256),
            Some(Decline::BufferTooSmall)
        );
        // An uneven split rounds the shard up: 272 bytes are 17 packs, 5 per shard.
        assert_eq!(
            on(plan, TwoShotPush, AllReduce, 272),
            Some(Decline::BufferTooSmall)
        );
        let rounded = BufferPlan {
            slot_bytes: 160,
            ..plan
        };
        assert_eq!(on(rounded, TwoShotPush, AllReduce, 272), None);
    }

    #[test]
    fn the_staging_region_declines_what_does_not_fit_a_half() {
        let plan = BufferPlan {
            world: 4,
            slot_bytes: 1 << 20,
            staging_half_bytes: 512,
        };
        // One-shot pull stages the whole message (all-gather: one share).
        assert_eq!(on(plan, OneShotPull, AllReduce, 512), None);
        assert_eq!(
            on(plan, OneShotPull, AllReduce, 528),
            Some(Decline::BufferTooSmall)
        );
        assert_eq!(on(plan, OneShotPull, AllGather, 4 * 512), None);
        assert_eq!(
            on(plan, OneShotPull, AllGather, 4 * 528),
            Some(Decline::BufferTooSmall)
        );
        // Two-shot pull needs a scatter and a gather area of 4 shards each:
        // 256 bytes (shards of 4 packs, 64 bytes) need 2 x 4 x 64 = 512, and
        // 272 bytes (17 packs, rounded up to 5 per shard) need 640.
        assert_eq!(on(plan, TwoShotPull, AllReduce, 256), None);
        assert_eq!(
            on(plan, TwoShotPull, AllReduce, 272),
            Some(Decline::BufferTooSmall)
        );
        // The push region's size is no part of it, and the other way round.
        let no_push = BufferPlan {
            slot_bytes: 0,
            ..plan
        };
        assert_eq!(on(no_push, OneShotPull, AllReduce, 512), None);
        assert_eq!(
            on(no_push, OneShotPush, AllReduce, 16),
            Some(Decline::BufferTooSmall)
        );
        let no_staging = BufferPlan {
            staging_half_bytes: 0,
            ..plan
        };
        assert_eq!(on(no_staging, OneShotPush, AllReduce, 512), None);
        assert_eq!(
            on(no_staging, TwoShotPull, AllReduce, 64),
            Some(Decline::BufferTooSmall)
        );
    }

    /// The buffers planned from the capacities take every call the
    /// capacities let through, up to the largest aligned one, in every world.
    #[test]
    fn planned_buffers_take_every_call_the_capacities_allow() {
        let caps = defaults();
        for world in 1..=8usize {
            let plan = BufferPlan::new(&caps, world, false).unwrap();
            for (collective, algo) in registry::implemented_pairs() {
                let cap = caps.of(collective, algo);
                if cap.max_bytes == 0 {
                    // No capacity, so no call to take (an algorithm these
                    // test capacities do not know, such as one just added).
                    continue;
                }
                let step = collective.output_size(world as u64, PACK_BYTES);
                let largest = cap.max_bytes - cap.max_bytes % step;
                for bytes in [step, largest / 2 - (largest / 2) % step, largest] {
                    let call = CallShape::new(collective, algo, world, bytes);
                    assert_eq!(
                        decline(&call, &offer(&caps, &plan, true)),
                        None,
                        "{world} ranks, {collective:?} {algo:?} of {bytes} bytes on {plan:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn buffers_smaller_than_the_capacity_decline() {
        let caps = defaults();
        let mut plan = BufferPlan::new(&caps, 2, false).unwrap();
        plan.slot_bytes = 32;
        let call = CallShape::new(AllReduce, OneShotPush, 2, 48);
        assert_eq!(
            decline(&call, &offer(&caps, &plan, true)),
            Some(Decline::BufferTooSmall)
        );
    }
}
