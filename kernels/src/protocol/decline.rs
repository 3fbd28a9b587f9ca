//! When a custom kernel refuses a call, which then runs on NCCL (or, in a
//! loopback world, on the reference collective).
//!
//! Every input of the rule is the same on every rank of a world (collective,
//! algorithm, world size, message size, the platform's capacities, the world's
//! buffers and peer access), so all ranks decline together: a rank that ran the
//! custom kernel while a peer fell back would wait for it forever. Tensor pointers
//! are deliberately not an input: the kernels handle any element alignment.

use std::fmt;

use super::PACK_BYTES;
use super::layout::{BufferPlan, Capacities};
use super::registry::{self, CustomAlgorithm, Region};
use crate::vocab::{Algo, AlgoKind, Collective};

/// Why a custom algorithm declined a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decline {
    /// The algorithm does not implement this collective (two-shot all-gather).
    NotImplemented,
    /// More bytes than the platform's capacity for the algorithm.
    OverCapacity,
    /// Not a multiple of the alignment (16 bytes; for all-gather, per share).
    Misaligned,
    /// The world's GPUs cannot reach each other's memory.
    NoPeerAccess,
    /// Larger than the registered buffers (a capacity/plan inconsistency; never
    /// expected, but checked, not assumed).
    BufferTooSmall,
    /// The world has no NCCL window: no NCCL (a loopback world of several
    /// ranks), an NCCL older than 2.27, or a registration NCCL refused.
    NoWindow,
}

impl Decline {
    pub fn describe(self) -> &'static str {
        match self {
            Decline::NotImplemented => "the algorithm does not implement this collective",
            Decline::OverCapacity => "the message is larger than the algorithm's capacity",
            Decline::Misaligned => "the message is not a multiple of 16 bytes (per rank)",
            Decline::NoPeerAccess => "the GPUs have no peer access to each other",
            Decline::BufferTooSmall => "the message does not fit the registered buffers",
            Decline::NoWindow => "this world has no NCCL symmetric window",
        }
    }
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// One call as the decline rule sees it, and as the launch then uses it: its
/// per-rank size and registry entry are worked out once, here.
#[derive(Clone, Copy, Debug)]
pub struct CallShape {
    pub collective: Collective,
    pub algo: Algo,
    pub world: usize,
    /// Output bytes (all-gather: world x share), as in `policy::Query`.
    pub bytes: u64,
    /// Bytes each rank contributes: the message for all-reduce, one share for
    /// all-gather.
    pub bytes_per_rank: u64,
    /// The algorithm's registry entry (`None` for NCCL).
    pub custom: Option<&'static CustomAlgorithm>,
}

impl CallShape {
    pub fn new(collective: Collective, algo: Algo, world: usize, bytes: u64) -> CallShape {
        CallShape {
            collective,
            algo,
            world,
            bytes,
            bytes_per_rank: collective.per_rank_size(world as u64, bytes),
            custom: registry::custom(algo),
        }
    }
}

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

/// `None` if `call.algo` takes the call, else why not. Plain NCCL never
/// declines. Empty messages never reach this rule (nothing runs).
pub fn decline(call: &CallShape, world: &WorldOffer) -> Option<Decline> {
    match call.algo.kind() {
        AlgoKind::Library => return None,
        AlgoKind::Window | AlgoKind::Kernel => {}
    }
    if !call.algo.implements(call.collective) {
        return Some(Decline::NotImplemented);
    }
    let Some(custom) = call.custom else {
        // NCCL on the window: the whole output lies in it.
        return over_capacity(call, world.caps)
            .or((call.bytes > world.window_bytes).then_some(Decline::NoWindow));
    };
    if !world.peer_access {
        return Some(Decline::NoPeerAccess);
    }
    if let Some(refused) = over_capacity(call, world.caps) {
        return Some(refused);
    }
    let plan = world.plan;
    // Whatever a table says, the kernels move whole 16-byte packs per rank.
    let per_rank = call.bytes_per_rank;
    if call.collective == Collective::AllGather && !call.bytes.is_multiple_of(call.world as u64)
        || per_rank == 0
        || !per_rank.is_multiple_of(PACK_BYTES)
    {
        return Some(Decline::Misaligned);
    }
    let need = (custom.footprint)(per_rank, call.world);
    let room = match custom.region {
        Region::Push => plan.slot_bytes,
        Region::Staging => plan.staging_half_bytes,
    };
    if need > room {
        return Some(Decline::BufferTooSmall);
    }
    None
}

/// The platform's capacity for the call's algorithm refuses it.
fn over_capacity(call: &CallShape, caps: &Capacities) -> Option<Decline> {
    let capacity = caps.of(call.collective, call.algo);
    if capacity.accepts_message(call.collective, call.world as u32, call.bytes) {
        None
    } else if call.bytes > capacity.max_bytes {
        Some(Decline::OverCapacity)
    } else {
        Some(Decline::Misaligned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::Capacity;

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

    fn check(collective: Collective, algo: Algo, world: usize, bytes: u64) -> Option<Decline> {
        let caps = defaults();
        let plan = BufferPlan::new(&caps, world, false).unwrap();
        let call = CallShape::new(collective, algo, world, bytes);
        decline(&call, &offer(&caps, &plan, true))
    }

    use Algo::*;
    use Collective::*;

    #[test]
    fn nccl_on_the_window_takes_what_fits_it_and_needs_one() {
        // Within the window, any rank count and any element count.
        assert_eq!(check(AllReduce, NcclSymmetric, 2, 16), None);
        assert_eq!(check(AllReduce, NcclSymmetric, 3, 64 * MIB), None);
        assert_eq!(check(AllGather, NcclSymmetric, 8, 8 * 16), None);
        // Past the capacity.
        assert_eq!(
            check(AllReduce, NcclSymmetric, 2, 64 * MIB + 16),
            Some(Decline::OverCapacity)
        );
        assert_eq!(
            check(AllReduce, NcclSymmetric, 2, 24),
            Some(Decline::Misaligned)
        );
        let caps = defaults();
        let plan = BufferPlan::new(&caps, 2, false).unwrap();
        let call = CallShape::new(AllReduce, NcclSymmetric, 2, 4096);
        // Peer access is NCCL's business, not the window's.
        assert_eq!(decline(&call, &offer(&caps, &plan, false)), None);
        // A world without a window (no NCCL, NCCL before 2.27), or one
        // smaller than the call (a capacity the window was not sized for).
        for window_bytes in [0, 2048] {
            let world = WorldOffer {
                window_bytes,
                ..offer(&caps, &plan, true)
            };
            assert_eq!(decline(&call, &world), Some(Decline::NoWindow));
        }
    }

    #[test]
    fn nccl_takes_everything() {
        assert_eq!(check(AllReduce, Nccl, 2, 3), None);
        assert_eq!(check(AllGather, Nccl, 8, u64::MAX / 2), None);
    }

    #[test]
    fn sizes_within_capacity_are_taken() {
        assert_eq!(check(AllReduce, OneShotPush, 8, 16), None);
        assert_eq!(check(AllReduce, OneShotPush, 8, 8 * MIB), None);
        assert_eq!(check(AllReduce, OneShotPull, 2, 16 * MIB), None);
        assert_eq!(check(AllReduce, TwoShotPull, 8, 64 * MIB), None);
        assert_eq!(check(AllReduce, TwoShotPull, 3, 16 * 37), None);
        assert_eq!(check(AllGather, OneShotPush, 8, 8 * 16), None);
        assert_eq!(check(AllGather, OneShotPull, 4, 16 * MIB), None);
    }

    #[test]
    fn over_capacity_is_declined() {
        assert_eq!(
            check(AllReduce, OneShotPush, 8, 8 * MIB + 16),
            Some(Decline::OverCapacity)
        );
        assert_eq!(
            check(AllReduce, TwoShotPull, 2, 128 * MIB),
            Some(Decline::OverCapacity)
        );
        assert_eq!(
            check(AllGather, OneShotPush, 2, 16 * MIB),
            Some(Decline::OverCapacity)
        );
    }

    #[test]
    fn misaligned_sizes_are_declined() {
        assert_eq!(
            check(AllReduce, OneShotPush, 2, 24),
            Some(Decline::Misaligned)
        );
        assert_eq!(
            check(AllReduce, OneShotPull, 2, 2),
            Some(Decline::Misaligned)
        );
        // 64 bytes over 8 ranks: 8-byte shares.
        assert_eq!(
            check(AllGather, OneShotPull, 8, 64),
            Some(Decline::Misaligned)
        );
        // Not divisible by the world at all.
        assert_eq!(
            check(AllGather, OneShotPush, 3, 16 * 4),
            Some(Decline::Misaligned)
        );
    }

    #[test]
    fn two_shot_all_gather_is_not_implemented() {
        assert_eq!(
            check(AllGather, TwoShotPull, 2, 64),
            Some(Decline::NotImplemented)
        );
        assert_eq!(
            check(AllGather, TwoShotPush, 2, 64),
            Some(Decline::NotImplemented)
        );
    }

    #[test]
    fn two_shot_push_takes_its_capacity_and_declines_the_rest() {
        for world in [2, 3, 4, 8] {
            assert_eq!(check(AllReduce, TwoShotPush, world, 16), None, "{world}");
            assert_eq!(check(AllReduce, TwoShotPush, world, 8 * MIB), None);
            assert_eq!(
                check(AllReduce, TwoShotPush, world, 8 * MIB + 16),
                Some(Decline::OverCapacity)
            );
            assert_eq!(
                check(AllReduce, TwoShotPush, world, 40),
                Some(Decline::Misaligned)
            );
        }
    }

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
                let step = match collective {
                    AllReduce => PACK_BYTES,
                    AllGather => PACK_BYTES * world as u64,
                };
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
    fn no_peer_access_declines_every_custom_algorithm() {
        let caps = defaults();
        let plan = BufferPlan::new(&caps, 2, false).unwrap();
        for algo in [OneShotPush, OneShotPull, TwoShotPull, TwoShotPush] {
            let call = CallShape::new(AllReduce, algo, 2, 64);
            assert_eq!(
                decline(&call, &offer(&caps, &plan, false)),
                Some(Decline::NoPeerAccess)
            );
        }
    }

    #[test]
    fn a_table_alignment_below_16_still_needs_whole_packs() {
        let caps = Capacities::from_fn(|collective, algo| Capacity {
            max_bytes: defaults().of(collective, algo).max_bytes,
            align: if (collective, algo) == (AllReduce, OneShotPull) {
                8
            } else {
                16
            },
        });
        let plan = BufferPlan::new(&caps, 2, false).unwrap();
        let call = CallShape::new(AllReduce, OneShotPull, 2, 24);
        assert_eq!(
            decline(&call, &offer(&caps, &plan, true)),
            Some(Decline::Misaligned)
        );
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
