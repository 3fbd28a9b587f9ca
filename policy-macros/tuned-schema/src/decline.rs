//! When an algorithm other than a collective's fallback refuses a call, which
//! then runs on the fallback (NCCL, or in a loopback world the reference
//! collective; for the fused all-reduce + add + RMSNorm the unfused path,
//! [`Collective::fallback`]): the rule `kernels` applies to every call and
//! `tuner explain` to a query.
//!
//! Every input of the rule is the same on every rank of a world (collective,
//! algorithm, world size, message size, the platform's capacities, what the
//! world offers), so all ranks decline together: a rank that ran the custom
//! kernel while a peer fell back would wait for it forever. Tensor pointers
//! are deliberately not an input: the kernels handle any element alignment.

use core::fmt;

use crate::vocab::{Algo, AlgoKind, Capacity, Collective, PACK_BYTES};

/// Why an algorithm declined a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
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
    /// The reason as one lower-case sentence for logs and `tuner explain`
    /// (also what `Display` writes).
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

/// One call as the decline rule sees it, and as a launch then uses it: its
/// per-rank size is worked out once, here.
#[derive(Clone, Copy, Debug)]
pub struct CallShape {
    /// The collective called.
    pub collective: Collective,
    /// The algorithm asked to take the call.
    pub algo: Algo,
    /// Ranks in the world.
    pub world: usize,
    /// Output bytes (all-gather: world x share), as in [`Query`](crate::Query).
    pub bytes: u64,
    /// Bytes each rank contributes: the message for all-reduce, one share for
    /// all-gather.
    pub bytes_per_rank: u64,
}

impl CallShape {
    /// The call of `collective` by `algo` over `world` ranks with an output of
    /// `bytes`; `bytes_per_rank` follows ([`Collective::per_rank_size`]).
    pub const fn new(collective: Collective, algo: Algo, world: usize, bytes: u64) -> CallShape {
        CallShape {
            collective,
            algo,
            world,
            bytes,
            bytes_per_rank: collective.per_rank_size(world as u64, bytes),
        }
    }
}

/// What a world offers the algorithms that need more than plain NCCL.
pub trait Offer {
    /// The platform's capacity for `algo` on `collective`.
    fn capacity(&self, collective: Collective, algo: Algo) -> Capacity;
    /// Whether the world's GPUs reach each other's memory (every kernel needs it).
    fn peer_access(&self) -> bool;
    /// Bytes of the world's NCCL window (0: none).
    fn window_bytes(&self) -> u64;
    /// Whether the world's registered buffers hold what `call`, a kernel's
    /// call of whole packs within its capacity, needs of them.
    fn buffers_hold(&self, call: &CallShape) -> bool;
}

/// `None` if `call.algo` takes the call, else why not. A collective's
/// fallback (plain NCCL, the unfused composite) never declines a call of its
/// collective. Empty messages never reach this rule (nothing runs).
pub fn decline(call: &CallShape, world: &impl Offer) -> Option<Decline> {
    if !call.algo.implements(call.collective) {
        return Some(Decline::NotImplemented);
    }
    let kernel = match call.algo.kind() {
        AlgoKind::Library | AlgoKind::Composite => return None,
        AlgoKind::Window => false,
        AlgoKind::Kernel => true,
    };
    if !kernel {
        // NCCL on the window: the whole output lies in it.
        return over_capacity(call, world)
            .or((call.bytes > world.window_bytes()).then_some(Decline::NoWindow));
    }
    if !world.peer_access() {
        return Some(Decline::NoPeerAccess);
    }
    if let Some(refused) = over_capacity(call, world) {
        return Some(refused);
    }
    // Whatever a table says, the kernels move whole 16-byte packs per rank.
    let per_rank = call.bytes_per_rank;
    if call.collective == Collective::AllGather && !call.bytes.is_multiple_of(call.world as u64)
        || per_rank == 0
        || !per_rank.is_multiple_of(PACK_BYTES)
    {
        return Some(Decline::Misaligned);
    }
    (!world.buffers_hold(call)).then_some(Decline::BufferTooSmall)
}

/// The platform's capacity for the call's algorithm refuses it.
fn over_capacity(call: &CallShape, world: &impl Offer) -> Option<Decline> {
    let capacity = world.capacity(call.collective, call.algo);
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
    use crate::vocab::default_capacity;

    const MIB: u64 = 1 << 20;

    /// A world with every default capacity, a window of 64 MiB and buffers
    /// that hold every call (how much they hold is `kernels`' to test).
    struct World {
        peer_access: bool,
        window_bytes: u64,
        align: Option<u64>,
    }

    impl Offer for World {
        fn capacity(&self, collective: Collective, algo: Algo) -> Capacity {
            let capacity = default_capacity(collective, algo);
            Capacity {
                align: self.align.unwrap_or(capacity.align),
                ..capacity
            }
        }
        fn peer_access(&self) -> bool {
            self.peer_access
        }
        fn window_bytes(&self) -> u64 {
            self.window_bytes
        }
        fn buffers_hold(&self, _: &CallShape) -> bool {
            true
        }
    }

    const WORLD: World = World {
        peer_access: true,
        window_bytes: 64 * MIB,
        align: None,
    };

    fn check(collective: Collective, algo: Algo, world: usize, bytes: u64) -> Option<Decline> {
        decline(&CallShape::new(collective, algo, world, bytes), &WORLD)
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
        let call = CallShape::new(AllReduce, NcclSymmetric, 2, 4096);
        // Peer access is NCCL's business, not the window's.
        let no_peers = World {
            peer_access: false,
            ..WORLD
        };
        assert_eq!(decline(&call, &no_peers), None);
        // A world without a window (no NCCL, NCCL before 2.27), or one
        // smaller than the call (a capacity the window was not sized for).
        for window_bytes in [0, 2048] {
            let world = World {
                window_bytes,
                ..WORLD
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
    fn the_fused_collective_runs_on_the_push_kernels_or_unfused() {
        let fused = AllReduceAddRmsNorm;
        assert_eq!(check(fused, Unfused, 8, 3), None);
        assert_eq!(check(fused, Unfused, 2, u64::MAX / 2), None);
        for algo in [OneShotPush, TwoShotPush] {
            assert_eq!(check(fused, algo, 2, 8192), None, "{algo:?}");
            assert_eq!(check(fused, algo, 8, 8 * MIB), None, "{algo:?}");
            assert_eq!(
                check(fused, algo, 8, 8 * MIB + 16),
                Some(Decline::OverCapacity)
            );
        }
        for algo in [OneShotPull, TwoShotPull, NcclSymmetric] {
            assert_eq!(
                check(fused, algo, 2, 8192),
                Some(Decline::NotImplemented),
                "{algo:?}"
            );
        }
        // Neither fallback runs the other's collective.
        assert_eq!(
            check(AllReduce, Unfused, 2, 8192),
            Some(Decline::NotImplemented)
        );
        assert_eq!(check(fused, Nccl, 2, 8192), Some(Decline::NotImplemented));
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

    #[test]
    fn no_peer_access_declines_every_custom_kernel() {
        let world = World {
            peer_access: false,
            ..WORLD
        };
        for algo in Algo::ALL.into_iter().filter(|a| a.is_kernel()) {
            let call = CallShape::new(AllReduce, algo, 2, 64);
            assert_eq!(decline(&call, &world), Some(Decline::NoPeerAccess));
        }
    }

    #[test]
    fn a_table_alignment_below_16_still_needs_whole_packs() {
        let world = World {
            align: Some(8),
            ..WORLD
        };
        for algo in [OneShotPull, NcclSymmetric] {
            let call = CallShape::new(AllReduce, algo, 2, 24);
            let expected = algo.is_kernel().then_some(Decline::Misaligned);
            assert_eq!(decline(&call, &world), expected, "{algo:?}");
        }
    }

    #[test]
    fn buffers_that_do_not_hold_a_call_decline_it() {
        struct Small;
        impl Offer for Small {
            fn capacity(&self, collective: Collective, algo: Algo) -> Capacity {
                default_capacity(collective, algo)
            }
            fn peer_access(&self) -> bool {
                true
            }
            fn window_bytes(&self) -> u64 {
                64 * MIB
            }
            fn buffers_hold(&self, call: &CallShape) -> bool {
                call.bytes_per_rank <= 32
            }
        }
        let at = |bytes| decline(&CallShape::new(AllReduce, OneShotPush, 2, bytes), &Small);
        assert_eq!(at(32), None);
        assert_eq!(at(48), Some(Decline::BufferTooSmall));
    }
}
