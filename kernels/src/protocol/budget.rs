//! How much memory a world registers per rank ([`Footprint`]), and how a
//! memory budget bounds it ([`plan`]).
//!
//! A budget lowers every capacity of the world to one common cap, the largest
//! whose buffers fit: calls up to the cap run exactly as the tables say, and a
//! call past it declines to the fallback as any call past a capacity does.
//! The footprint only grows with the cap (every region is the largest
//! footprint of the calls the capacities let through it), so the cap is found
//! by bisection.
//!
//! Why one cap for all: the runtime knows only the tables, not what the
//! algorithms gain over NCCL, and "every call up to C runs as the tables say"
//! is a promise that holds whatever the tables are. A table fitted for a
//! budget (`tuner fit --memory-budget`) spends it by the measurements
//! instead, and needs no cap at run time.

use std::fmt;

use super::PACK_BYTES;
use super::layout::{BufferPlan, Capacities};
use super::{ctrl, host};
use crate::window::window_size;

/// What a world registers for each rank besides its control block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registers {
    /// Ranks in the world (the push region holds a slot for each).
    pub world: usize,
    /// The custom kernels can run: push and staging regions sized from the
    /// capacities (otherwise none).
    pub kernels: bool,
    /// Calls NCCL would run go to the loopback reference collective, which
    /// stages through at least 1 MiB per half (`REFERENCE_MIN_HALF_BYTES`).
    pub reference: bool,
    /// The world has NCCL: `nccl_symmetric`'s capacity becomes an NCCL window
    /// of that size (in whole granules).
    pub window: bool,
}

/// One rank's memory by purpose, in bytes: what a world allocates for it
/// when it is built (the engine's own windows, `RankComm::alloc_window`,
/// are the engine's and not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Footprint {
    /// The sentinel-armed push region (three buffers of one slot per rank).
    pub push: u64,
    /// The staging region (two halves).
    pub staging: u64,
    /// The control block (counters, barrier flags, the error word).
    pub control: u64,
    /// The NCCL window `nccl_symmetric` copies through (0: none).
    pub nccl_window: u64,
    /// Pinned host memory the kernels mirror faults into (not GPU memory).
    pub host_mirror: u64,
}

impl Footprint {
    /// GPU memory in all: what a memory budget bounds.
    pub fn gpu(&self) -> u64 {
        self.push
            .saturating_add(self.staging)
            .saturating_add(self.control)
            .saturating_add(self.nccl_window)
    }

    /// The footprint of `plan`'s buffers and a window of `window` bytes.
    pub fn of(plan: &BufferPlan, window: u64) -> Option<Footprint> {
        Some(Footprint {
            push: plan.push_region_bytes()?,
            staging: plan.staging_region_bytes()?,
            control: ctrl::BYTES as u64,
            nccl_window: window,
            host_mirror: host::BYTES as u64,
        })
    }
}

/// One line: the GPU total, then each part.
impl fmt::Display for Footprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of GPU memory per rank (push {}, staging {}, control {}, NCCL window {}) and {} \
             of pinned host memory",
            approx(self.gpu()),
            approx(self.push),
            approx(self.staging),
            approx(self.control),
            if self.nccl_window == 0 {
                "none".to_string()
            } else {
                approx(self.nccl_window)
            },
            approx(self.host_mirror)
        )
    }
}

/// `bytes` in the largest binary unit under which it is at least 1, with one
/// decimal (`24.1 KiB`, `256.0 MiB`); whole bytes below 1 KiB.
pub fn approx(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.1} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

/// A world's buffers: the capacities it keeps, the buffers they need and
/// what that costs per rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// What each (collective, algorithm) pair takes in this world: the
    /// capacities asked for, lowered to the cap.
    pub caps: Capacities,
    pub plan: BufferPlan,
    /// Bytes of the NCCL window each rank asks for (whole granules; 0: none).
    pub window_bytes: u64,
    /// The cap the budget put on every capacity; `None` when everything
    /// asked for fits.
    pub cap: Option<u64>,
    /// Per rank, with the window as planned (the world's vote may still
    /// decline it).
    pub footprint: Footprint,
}

impl MemoryPlan {
    /// Whether the footprint is within `budget` (`None`: unbounded). Only a
    /// budget below what a world needs whatever its capacities (its control
    /// block, the reference collective's staging) is not.
    pub fn within(&self, budget: Option<u64>) -> bool {
        budget.is_none_or(|b| self.footprint.gpu() <= b)
    }
}

/// The buffers of a world that registers `registers` and asks for `wanted`,
/// within `budget` bytes of GPU memory per rank (`None`: unbounded). Under a
/// budget that `wanted` exceeds, every capacity is lowered to the largest
/// common cap (a multiple of 16 bytes) whose buffers fit; a budget below even
/// a cap of 0 gets a cap of 0 (see [`MemoryPlan::within`]). Never an error
/// under a budget; without one, an error when `wanted` is too large to plan
/// (see [`BufferPlan::new`]).
pub fn plan(
    wanted: &Capacities,
    registers: Registers,
    budget: Option<u64>,
) -> Result<MemoryPlan, String> {
    let uncapped = plan_for(wanted, registers, None);
    let Some(budget) = budget else {
        return uncapped;
    };
    if let Ok(plan) = uncapped
        && plan.footprint.gpu() <= budget
    {
        return Ok(plan);
    }
    let fits = |packs: u64| {
        plan_for(&wanted.capped(packs * PACK_BYTES), registers, None)
            .is_ok_and(|p| p.footprint.gpu() <= budget)
    };
    // `lo` fits (or is 0), `hi` does not: a cap of `hi` packs is at least
    // every capacity, which is `wanted` itself.
    let (mut lo, mut hi) = (0u64, wanted.largest().div_ceil(PACK_BYTES));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let cap = lo * PACK_BYTES;
    plan_for(&wanted.capped(cap), registers, Some(cap))
}

/// The buffers `caps` need, as they are.
fn plan_for(
    caps: &Capacities,
    registers: Registers,
    cap: Option<u64>,
) -> Result<MemoryPlan, String> {
    let plan = if registers.kernels {
        BufferPlan::new(caps, registers.world, registers.reference)?
    } else {
        BufferPlan {
            world: registers.world,
            slot_bytes: 0,
            staging_half_bytes: 0,
        }
    };
    let window_bytes = if registers.window {
        window_size(caps.window_bytes())
    } else {
        0
    };
    let footprint = Footprint::of(&plan, window_bytes).ok_or_else(|| {
        format!(
            "the registered buffers of a world of {} would exceed 2^64 bytes",
            registers.world
        )
    })?;
    Ok(MemoryPlan {
        caps: *caps,
        plan,
        window_bytes,
        cap,
        footprint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::decline::{CallShape, Decline, WorldOffer, decline};
    use crate::protocol::layout::{REFERENCE_MIN_HALF_BYTES, capacity_pairs};
    use crate::vocab::{Algo, AlgoKind, Capacity, Collective};

    const MIB: u64 = 1 << 20;

    /// The sm90 platform capacities (tuned/sm90-nvlink.toml) with a 64 MiB
    /// NCCL window.
    fn sm90() -> Capacities {
        Capacities::from_fn(|collective, algo| Capacity {
            max_bytes: match (collective, algo) {
                (Collective::AllReduce, Algo::OneShotPush | Algo::TwoShotPush) => 32 * MIB,
                (Collective::AllReduce, Algo::OneShotPull | Algo::TwoShotPull) => 128 * MIB,
                (Collective::AllGather, Algo::OneShotPush) => 8 * MIB,
                (Collective::AllGather, Algo::OneShotPull) => 16 * MIB,
                (_, Algo::NcclSymmetric) => 64 * MIB,
                _ => 0,
            },
            align: 16,
        })
    }

    fn world(world: usize) -> Registers {
        Registers {
            world,
            kernels: true,
            reference: false,
            window: true,
        }
    }

    #[test]
    fn unbounded_plans_every_capacity() {
        let planned = plan(&sm90(), world(2), None).unwrap();
        assert_eq!(planned.cap, None);
        assert_eq!(planned.caps, sm90());
        // Push: 3 buffers x 2 slots of 32 MiB; staging: two halves, each a
        // scatter and a gather area of two_shot_pull's 128 MiB.
        assert_eq!(planned.footprint.push, 192 * MIB);
        assert_eq!(planned.footprint.staging, 512 * MIB);
        assert_eq!(planned.footprint.nccl_window, 64 * MIB);
        assert_eq!(
            planned.footprint.control,
            crate::protocol::ctrl::BYTES as u64
        );
        assert_eq!(planned.footprint.host_mirror, 64);
        assert_eq!(
            planned.footprint.gpu(),
            768 * MIB + crate::protocol::ctrl::BYTES as u64
        );
        assert!(planned.within(None));
        // A budget it fits leaves it alone.
        assert_eq!(plan(&sm90(), world(2), Some(1 << 30)).unwrap(), planned);
    }

    /// Under a budget: the plan fits, a cap one pack larger would not, and a
    /// larger budget never gets a smaller cap.
    #[test]
    fn a_budget_gets_the_largest_common_cap_that_fits() {
        for w in [2, 3, 4, 8] {
            let mut last_cap = 0;
            for budget_mib in [8, 16, 48, 64, 100, 128, 256, 512] {
                let budget = budget_mib * MIB;
                let planned = plan(&sm90(), world(w), Some(budget)).unwrap();
                let cap = planned
                    .cap
                    .expect("every budget here is below the full plan");
                assert!(planned.footprint.gpu() <= budget, "{w}, {budget_mib} MiB");
                assert!(planned.within(Some(budget)));
                assert_eq!(cap % 16, 0);
                assert_eq!(planned.caps, sm90().capped(cap));
                let larger = plan(&sm90().capped(cap + 16), world(w), None).unwrap();
                assert!(
                    larger.footprint.gpu() > budget,
                    "world {w}, {budget_mib} MiB: a cap of {} would fit too",
                    cap + 16
                );
                assert!(
                    cap >= last_cap,
                    "world {w}: the cap shrank as the budget grew"
                );
                last_cap = cap;
            }
        }
        // W = 2 at 64 MiB by hand: push 6 C, staging 4 C (two_shot_pull),
        // window C rounded up to 2 MiB granules, and the control block.
        let planned = plan(&sm90(), world(2), Some(64 * MIB)).unwrap();
        let cap = planned.cap.unwrap();
        assert!(cap > 5 * MIB && cap < 6 * MIB, "{cap}");
    }

    #[test]
    fn a_budget_below_what_a_world_needs_anyway_caps_everything_at_zero() {
        let loopback = Registers {
            world: 4,
            kernels: true,
            reference: true,
            window: false,
        };
        let planned = plan(&sm90(), loopback, Some(MIB)).unwrap();
        assert_eq!(planned.cap, Some(0));
        assert_eq!(planned.caps.largest(), 0);
        // The reference collective's staging stays: calls run on it.
        assert_eq!(planned.plan.staging_half_bytes, REFERENCE_MIN_HALF_BYTES);
        assert!(!planned.within(Some(MIB)));
        // Even a budget of nothing plans, never fails.
        assert!(plan(&sm90(), world(8), Some(0)).is_ok());
    }

    #[test]
    fn only_what_a_world_registers_counts() {
        // No NCCL (a loopback world of several ranks): no window to pay for.
        let no_window = Registers {
            window: false,
            ..world(2)
        };
        assert_eq!(plan(&sm90(), no_window, None).unwrap().window_bytes, 0);
        // No peer access: no regions either, only the control block and
        // the window.
        let no_kernels = Registers {
            kernels: false,
            ..world(2)
        };
        let planned = plan(&sm90(), no_kernels, Some(32 * MIB)).unwrap();
        assert_eq!(planned.footprint.push + planned.footprint.staging, 0);
        assert!(planned.footprint.nccl_window <= 32 * MIB);
        assert!(planned.footprint.nccl_window > 0);
        // A window is planned in whole granules.
        let odd = sm90().with(&sm90().capped(3 * MIB), |_, a| a.kind() == AlgoKind::Window);
        assert_eq!(plan(&odd, world(2), None).unwrap().window_bytes, 4 * MIB);
        // Nothing asked for a window: none.
        let none = sm90().with(&sm90().capped(0), |_, a| a.kind() == AlgoKind::Window);
        assert_eq!(plan(&none, world(2), None).unwrap().window_bytes, 0);
    }

    /// A call past a capacity the budget lowered declines as any call past a
    /// capacity does, and every call up to it fits the buffers planned.
    #[test]
    fn calls_past_a_capped_capacity_decline_and_the_rest_fit() {
        for w in [2usize, 4, 8] {
            let planned = plan(&sm90(), world(w), Some(64 * MIB)).unwrap();
            let offer = WorldOffer {
                caps: &planned.caps,
                plan: &planned.plan,
                peer_access: true,
                window_bytes: planned.window_bytes,
            };
            for (collective, algo) in capacity_pairs() {
                let cap = planned.caps.of(collective, algo).max_bytes;
                if cap == 0 {
                    continue;
                }
                let step = collective.output_size(w as u64, 16);
                let largest = cap / step * step;
                if largest > 0 {
                    let call = CallShape::new(collective, algo, w, largest);
                    assert_eq!(decline(&call, &offer), None, "{w} {collective:?} {algo:?}");
                }
                let past = CallShape::new(collective, algo, w, largest + step);
                assert_eq!(
                    decline(&past, &offer),
                    Some(Decline::OverCapacity),
                    "{w} {collective:?} {algo:?}"
                );
            }
        }
    }

    #[test]
    fn a_footprint_is_one_line() {
        let planned = plan(&sm90(), world(8), Some(256 * MIB)).unwrap();
        let line = planned.footprint.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with("25"), "{line}");
        assert!(line.contains(" of GPU memory per rank (push "), "{line}");
        assert!(line.ends_with("and 64 B of pinned host memory"), "{line}");
        assert_eq!(approx(0), "0 B");
        assert_eq!(approx(1023), "1023 B");
        assert_eq!(approx(24_704), "24.1 KiB");
        assert_eq!(approx(256 << 20), "256.0 MiB");
        assert_eq!(approx(3 << 30), "3.0 GiB");
        let none = Footprint::default();
        assert!(none.to_string().contains("NCCL window none"), "{none}");
    }
}
