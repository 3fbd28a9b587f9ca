//! How large each rank's registered buffers are, derived once from `policy`'s
//! capacities when a world is built.
//!
//! Per rank:
//! - push region: [`PUSH_BUFFERS`] buffers x `world` slots x `slot_bytes`, shared
//!   by the algorithms whose [`registry`] entry names [`Region::Push`] (push
//!   all-reduce: a slot holds the message; push all-gather: one rank's share),
//!   armed with the sentinel;
//! - staging region: [`STAGING_HALVES`] halves of `staging_half_bytes`, shared by
//!   the [`Region::Staging`] algorithms (one_shot_pull, two_shot_pull) and the
//!   loopback reference;
//! - a control block of [`ctrl::BYTES`](super::ctrl::BYTES).
//!
//! Each region is sized by the largest footprint
//! ([`registry::CustomAlgorithm::footprint`]) of the calls the world's
//! capacities allow through it. Those are the platform's capacities lowered to
//! what the tables in use select ([`Capacities::selected`]) and to what the
//! memory budget allows (`protocol::budget`).

use super::registry::{self, Region};
use super::{PACK_BYTES, PUSH_BUFFERS, STAGING_HALVES};
use crate::vocab::{Algo, AlgoKind, Band, Capacity, Collective};

/// The capacities of the custom algorithms on one platform, one per
/// (collective, algorithm) pair of the vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacities {
    by_pair: [[Capacity; Algo::ALL.len()]; Collective::ALL.len()],
}

/// Nothing fits: what an algorithm that does not implement a collective takes.
const NONE: Capacity = Capacity {
    max_bytes: 0,
    align: 1,
};

fn index<T: PartialEq>(all: &[T], item: &T) -> usize {
    all.iter()
        .position(|x| x == item)
        .expect("every vocabulary value is in its ALL list")
}

impl Capacities {
    /// Looks every pair of [`capacity_pairs`] up with `capacity_of`.
    pub fn from_fn(capacity_of: impl Fn(Collective, Algo) -> Capacity) -> Capacities {
        let mut by_pair = [[NONE; Algo::ALL.len()]; Collective::ALL.len()];
        for (collective, algo) in capacity_pairs() {
            by_pair[index(&Collective::ALL, &collective)][index(&Algo::ALL, &algo)] =
                capacity_of(collective, algo);
        }
        Capacities { by_pair }
    }

    /// The capacity of `algo` for `collective`; a collective's fallback (NCCL,
    /// the unfused composite) takes anything, and an algorithm that does not
    /// implement the collective takes nothing.
    pub fn of(&self, collective: Collective, algo: Algo) -> Capacity {
        if !algo.is_custom() {
            return Capacity {
                max_bytes: u64::MAX,
                align: 1,
            };
        }
        self.by_pair[index(&Collective::ALL, &collective)][index(&Algo::ALL, &algo)]
    }

    /// What the tables of one world select out of the platform's capacities
    /// (`platform`): each (collective, algorithm) pair keeps the largest size
    /// any band of `tables` (the bands of every table of the world's size,
    /// each with its collective) selects it for, at most its platform
    /// capacity; an open last band reaches the platform capacity, and a pair
    /// no band selects gets nothing. An algorithm `forced(collective)` names
    /// (the `COLLTUNE_ALGO` override) is selected at every size, so it keeps
    /// its platform capacity and every other algorithm of that collective
    /// gets nothing. Alignments are the platform's.
    pub fn selected<'a>(
        platform: &Capacities,
        tables: impl IntoIterator<Item = (Collective, &'a [Band])>,
        forced: impl Fn(Collective) -> Option<Algo>,
    ) -> Capacities {
        let mut reach = [[0u64; Algo::ALL.len()]; Collective::ALL.len()];
        for (collective, bands) in tables {
            if forced(collective).is_some() {
                continue;
            }
            for band in bands {
                let top = band.max.unwrap_or(u64::MAX);
                let slot =
                    &mut reach[index(&Collective::ALL, &collective)][index(&Algo::ALL, &band.algo)];
                *slot = (*slot).max(top);
            }
        }
        Capacities::from_fn(|collective, algo| {
            let capacity = platform.of(collective, algo);
            let wanted = match forced(collective) {
                Some(chosen) if chosen == algo => capacity.max_bytes,
                Some(_) => 0,
                None => reach[index(&Collective::ALL, &collective)][index(&Algo::ALL, &algo)],
            };
            Capacity {
                max_bytes: capacity.max_bytes.min(wanted),
                align: capacity.align,
            }
        })
    }

    /// The same capacities, `other`'s where `take(collective, algo)` says so.
    pub fn with(&self, other: &Capacities, take: impl Fn(Collective, Algo) -> bool) -> Capacities {
        Capacities::from_fn(|collective, algo| {
            if take(collective, algo) {
                other.of(collective, algo)
            } else {
                self.of(collective, algo)
            }
        })
    }

    /// Every capacity lowered to at most `cap` bytes (alignments kept).
    pub fn capped(&self, cap: u64) -> Capacities {
        Capacities::from_fn(|collective, algo| {
            let capacity = self.of(collective, algo);
            Capacity {
                max_bytes: capacity.max_bytes.min(cap),
                align: capacity.align,
            }
        })
    }

    /// The largest capacity of any pair; 0 when none takes anything.
    pub fn largest(&self) -> u64 {
        capacity_pairs()
            .map(|(collective, algo)| self.of(collective, algo).max_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Bytes of the NCCL window a rank registers: the largest capacity of an
    /// algorithm that runs NCCL on a window ([`AlgoKind::Window`]), over the
    /// collectives (a call's output, all-gather's included, lies in it);
    /// 0 when none has any. Rounded up to whole window granules when
    /// allocated.
    pub fn window_bytes(&self) -> u64 {
        capacity_pairs()
            .filter(|(_, algo)| algo.kind() == AlgoKind::Window)
            .map(|(collective, algo)| self.of(collective, algo).max_bytes)
            .max()
            .unwrap_or(0)
    }
}

/// Every (collective, algorithm) pair that has a capacity: every algorithm
/// but plain NCCL, for each collective it implements, all-reduce first.
pub fn capacity_pairs() -> impl Iterator<Item = (Collective, Algo)> {
    Collective::ALL.into_iter().flat_map(|collective| {
        Algo::ALL
            .into_iter()
            .filter(move |a| a.is_custom() && a.implements(collective))
            .map(move |a| (collective, a))
    })
}

/// Largest capacity buffers are planned for (1 TiB, the schema's
/// `Capacity::MAX_BYTES`): a tuned file cannot declare more, and this guards
/// tables built any other way before any size arithmetic could overflow.
pub const MAX_CAPACITY: u64 = Capacity::MAX_BYTES;

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
        // Each region is as large as the largest call any algorithm may send
        // through it: its capacity per rank, in whole packs, through the
        // algorithm's footprint.
        let mut slot_bytes = 0;
        let mut staging_half_bytes = 0;
        for (collective, algo) in registry::implemented_pairs() {
            let custom = registry::custom(algo).expect("implemented pairs are custom");
            let max_bytes = caps.of(collective, algo).max_bytes;
            if max_bytes > MAX_CAPACITY {
                return Err(format!(
                    "the {} capacity of {} is {max_bytes} bytes, above the {MAX_CAPACITY} bytes \
                     (1 TiB) the kernels' buffers may be planned for",
                    algo.name(),
                    collective.name()
                ));
            }
            let per_rank = round_down(collective.per_rank_size(world as u64, max_bytes));
            let need = (custom.footprint)(per_rank, world);
            let room = match custom.region {
                Region::Push => &mut slot_bytes,
                Region::Staging => &mut staging_half_bytes,
            };
            *room = (*room).max(need);
        }
        if reference {
            staging_half_bytes = staging_half_bytes.max(REFERENCE_MIN_HALF_BYTES);
        }
        // The push kernels record bytes per slot in a 32-bit control word.
        if slot_bytes > u32::MAX as u64 {
            return Err(format!(
                "push slots of {slot_bytes} bytes per rank exceed the 4 GiB the kernels track \
                 (a push algorithm's capacity is too large)"
            ));
        }
        let plan = BufferPlan {
            world,
            slot_bytes,
            staging_half_bytes,
        };
        if plan.push_region_bytes().is_none() || plan.staging_region_bytes().is_none() {
            return Err(format!(
                "the registered buffers of a world of {world} would exceed 2^64 bytes"
            ));
        }
        Ok(plan)
    }

    /// Bytes of one rank's push region; `None` if it does not fit 64 bits.
    pub fn push_region_bytes(&self) -> Option<u64> {
        PUSH_BUFFERS
            .checked_mul(self.world as u64)?
            .checked_mul(self.slot_bytes)
    }

    /// Bytes of one rank's staging region; `None` if it does not fit 64 bits.
    pub fn staging_region_bytes(&self) -> Option<u64> {
        STAGING_HALVES.checked_mul(self.staging_half_bytes)
    }

    /// Byte offset of slot `slot` of push buffer `buffer` within a push region.
    pub fn push_slot_offset(&self, buffer: u32, slot: usize) -> u64 {
        (buffer as u64 * self.world as u64 + slot as u64) * self.slot_bytes
    }
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
        Capacities::from_fn(|collective, algo| {
            let max_bytes = match (collective, algo) {
                (Collective::AllReduce, Algo::OneShotPush) => push,
                (Collective::AllReduce, Algo::OneShotPull) => pull,
                (Collective::AllReduce, Algo::TwoShotPull) => two_shot,
                (Collective::AllGather, Algo::OneShotPush) => ag_push,
                (Collective::AllGather, Algo::OneShotPull) => ag_pull,
                // These plans are about the algorithms above (see
                // two_shot_push_grows_the_push_slots_it_needs for the other):
                // every other one takes nothing.
                _ => 0,
            };
            Capacity {
                max_bytes,
                align: 16,
            }
        })
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
        assert_eq!(plan.push_region_bytes(), Some(3 * 8 * 8 * MIB));
        assert_eq!(plan.staging_region_bytes(), Some(256 * MIB));
    }

    #[test]
    fn two_shot_push_grows_the_push_slots_it_needs() {
        let with = |two_shot_push: u64| {
            Capacities::from_fn(|collective, algo| Capacity {
                max_bytes: match (collective, algo) {
                    (_, Algo::OneShotPush) => 8 * MIB,
                    (Collective::AllReduce, Algo::TwoShotPush) => two_shot_push,
                    _ => 0,
                },
                align: 16,
            })
        };
        // 32 MiB at W = 2: slot q holds a 16 MiB shard copy and a 16 MiB sum.
        let plan = BufferPlan::new(&with(32 * MIB), 2, false).unwrap();
        assert_eq!(plan.slot_bytes, 32 * MIB);
        // At W = 8 it needs a quarter of the message: one_shot_push's 8 MiB rules.
        let plan = BufferPlan::new(&with(32 * MIB), 8, false).unwrap();
        assert_eq!(plan.slot_bytes, 8 * MIB);
        // A world of one sends nothing through the slots.
        let plan = BufferPlan::new(&with(32 * MIB), 1, false).unwrap();
        assert_eq!(plan.slot_bytes, 8 * MIB);
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
            Some(*offsets.last().unwrap() + plan.slot_bytes),
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
    fn capacities_that_would_overflow_are_refused_not_wrapped() {
        // A two_shot_pull capacity of 2^62 once wrapped to a tiny staging
        // region while the decline rule still let calls through.
        for huge in [1u64 << 62, u64::MAX, MAX_CAPACITY + 16] {
            let err = BufferPlan::new(&caps(0, 0, huge, 0, 0), 8, false).unwrap_err();
            assert!(err.contains("capacity"), "{huge}: {err}");
        }
        // The largest capacity allowed plans exactly.
        let plan = BufferPlan::new(&caps(0, 0, MAX_CAPACITY, 0, 0), 2, false).unwrap();
        assert_eq!(plan.staging_half_bytes, 2 * MAX_CAPACITY);
        assert_eq!(plan.staging_region_bytes(), Some(4 * MAX_CAPACITY));
        // A plan built by hand that overflows says so.
        let plan = BufferPlan {
            world: 8,
            slot_bytes: u64::MAX / 4,
            staging_half_bytes: u64::MAX,
        };
        assert_eq!(plan.push_region_bytes(), None);
        assert_eq!(plan.staging_region_bytes(), None);
    }

    fn band(max: Option<u64>, algo: Algo) -> Band {
        Band { max, algo }
    }

    #[test]
    fn a_pair_keeps_what_the_bands_select_it_for() {
        let platform = caps(32 * MIB, 128 * MIB, 128 * MIB, 8 * MIB, 16 * MIB);
        let graph = [
            band(Some(4 * MIB), Algo::OneShotPush),
            band(Some(100 * MIB), Algo::TwoShotPull),
            band(None, Algo::Nccl),
        ];
        // Another table of the same world (eager) reaches further with push.
        let eager = [
            band(Some(6 * MIB + 16), Algo::OneShotPush),
            band(None, Algo::Nccl),
        ];
        // All-gather's last band is open: its platform capacity.
        let gather = [
            band(Some(MIB), Algo::OneShotPush),
            band(None, Algo::OneShotPull),
        ];
        let tables = [
            (Collective::AllReduce, &graph[..]),
            (Collective::AllReduce, &eager[..]),
            (Collective::AllGather, &gather[..]),
        ];
        let selected = Capacities::selected(&platform, tables, |_| None);
        let max = |c, a| selected.of(c, a).max_bytes;
        // A band's edge is the largest size it selects.
        assert_eq!(max(Collective::AllReduce, Algo::OneShotPush), 6 * MIB + 16);
        assert_eq!(max(Collective::AllReduce, Algo::TwoShotPull), 100 * MIB);
        assert_eq!(max(Collective::AllGather, Algo::OneShotPush), MIB);
        assert_eq!(max(Collective::AllGather, Algo::OneShotPull), 16 * MIB);
        // No band selects one_shot_pull for all-reduce: no room for it.
        assert_eq!(max(Collective::AllReduce, Algo::OneShotPull), 0);
        assert_eq!(max(Collective::AllReduce, Algo::NcclSymmetric), 0);
        // Alignments are the platform's; NCCL still takes anything.
        assert_eq!(
            selected.of(Collective::AllReduce, Algo::OneShotPush).align,
            16
        );
        assert!(
            selected
                .of(Collective::AllReduce, Algo::Nccl)
                .accepts(u64::MAX)
        );
        // A band past the platform capacity is held to it.
        let beyond = [band(Some(64 * MIB), Algo::OneShotPush)];
        let held =
            Capacities::selected(&platform, [(Collective::AllGather, &beyond[..])], |_| None);
        assert_eq!(
            held.of(Collective::AllGather, Algo::OneShotPush).max_bytes,
            8 * MIB
        );
        // No tables: nothing is selected but NCCL.
        let none = Capacities::selected(&platform, [], |_| None);
        assert_eq!(none.largest(), 0);
    }

    #[test]
    fn an_override_selects_its_algorithm_at_every_size_and_no_other() {
        let platform = caps(32 * MIB, 128 * MIB, 128 * MIB, 8 * MIB, 16 * MIB);
        let graph = [
            band(Some(4 * MIB), Algo::OneShotPush),
            band(None, Algo::Nccl),
        ];
        let gather = [band(Some(MIB), Algo::OneShotPush), band(None, Algo::Nccl)];
        let tables = [
            (Collective::AllReduce, &graph[..]),
            (Collective::AllGather, &gather[..]),
        ];
        let forced = |c| (c == Collective::AllReduce).then_some(Algo::OneShotPull);
        let selected = Capacities::selected(&platform, tables, forced);
        let max = |c, a| selected.of(c, a).max_bytes;
        assert_eq!(max(Collective::AllReduce, Algo::OneShotPull), 128 * MIB);
        assert_eq!(max(Collective::AllReduce, Algo::OneShotPush), 0);
        // The other collective still follows its table.
        assert_eq!(max(Collective::AllGather, Algo::OneShotPush), MIB);
        // Forcing NCCL leaves the collective no custom capacity at all.
        let nccl = Capacities::selected(&platform, tables, |c| {
            (c == Collective::AllGather).then_some(Algo::Nccl)
        });
        assert_eq!(
            nccl.of(Collective::AllGather, Algo::OneShotPush).max_bytes,
            0
        );
        assert_eq!(
            nccl.of(Collective::AllReduce, Algo::OneShotPush).max_bytes,
            4 * MIB
        );
    }

    #[test]
    fn capping_lowers_every_capacity_and_keeps_alignments() {
        let c = caps(32 * MIB, 2 * MIB, 128 * MIB, 8 * MIB, 0);
        let capped = c.capped(4 * MIB);
        for (collective, algo) in capacity_pairs() {
            let (before, after) = (c.of(collective, algo), capped.of(collective, algo));
            assert_eq!(after.max_bytes, before.max_bytes.min(4 * MIB));
            assert_eq!(after.align, before.align);
        }
        assert_eq!(c.largest(), 128 * MIB);
        assert_eq!(capped.largest(), 4 * MIB);
        let window = c.with(&caps(0, 0, 0, 0, 0), |_, algo| algo == Algo::OneShotPull);
        assert_eq!(
            window
                .of(Collective::AllReduce, Algo::OneShotPull)
                .max_bytes,
            0
        );
        assert_eq!(
            window
                .of(Collective::AllReduce, Algo::OneShotPush)
                .max_bytes,
            32 * MIB
        );
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
