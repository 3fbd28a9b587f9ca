//! A memory budget per rank, as `kernels` applies it to a world: the sweep
//! measures under it, and the fit spends it and reports what that costs
//! against the unbounded tables ([`crate::budgeted`]).
//!
//! How much a world registers for given capacities is `kernels`' to say (its
//! buffer plan, `kernels::raw::memory_plan`): a [`Budget`] carries that rule
//! as a [`MemoryModel`], which the command line takes from `kernels` (the
//! `gpu` feature) and tests may stand in for.

use std::fmt;

use policy::{Algo, Capacity, CapacityEntry, Collective, Link};

/// What a world of `world` ranks on `link` with `capacities` (the custom
/// algorithms it registers buffers for; any other takes nothing) allocates
/// per rank within `budget` bytes (`None`: unbounded): the common cap the
/// budget puts on every capacity (`None`: everything fits) and the GPU bytes
/// it then takes.
pub type MemoryModel = fn(
    capacities: &[CapacityEntry],
    link: Link,
    world: u32,
    budget: Option<u64>,
) -> Result<Planned, String>;

/// A world's memory under a budget ([`MemoryModel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub cap: Option<u64>,
    pub gpu_bytes: u64,
}

/// GPU memory per rank a world may register, and the rule that says what
/// capacities cost.
#[derive(Clone, Copy)]
pub struct Budget {
    pub bytes: u64,
    pub model: MemoryModel,
}

impl Budget {
    /// What a world of `world` on `link` with `capacities` takes within this
    /// budget.
    pub fn plan(
        &self,
        capacities: &[CapacityEntry],
        link: Link,
        world: u32,
    ) -> Result<Planned, String> {
        (self.model)(capacities, link, world, Some(self.bytes))
    }

    /// `capacities` as a world of `world` on `link` keeps them within this
    /// budget: each lowered to the common cap (as they are when they fit).
    pub fn capped(
        &self,
        capacities: &[CapacityEntry],
        link: Link,
        world: u32,
    ) -> Result<Vec<CapacityEntry>, String> {
        let planned = self.plan(capacities, link, world)?;
        Ok(match planned.cap {
            Some(cap) => cap_all(capacities, cap),
            None => capacities.to_vec(),
        })
    }
}

/// Budgets are the same when their bytes are: every model is `kernels`' rule
/// or a test's stand-in for it.
impl PartialEq for Budget {
    fn eq(&self, other: &Budget) -> bool {
        self.bytes == other.bytes
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Budget({} bytes)", self.bytes)
    }
}

/// Every capacity lowered to at most `cap` bytes.
pub fn cap_all(capacities: &[CapacityEntry], cap: u64) -> Vec<CapacityEntry> {
    capacities
        .iter()
        .map(|entry| CapacityEntry {
            capacity: Capacity {
                max_bytes: entry.capacity.max_bytes.min(cap),
                align: entry.capacity.align,
            },
            ..*entry
        })
        .collect()
}

/// The capacity of `algo` for `collective` in `capacities` (nothing when it
/// has no entry).
pub fn capacity_of(capacities: &[CapacityEntry], collective: Collective, algo: Algo) -> Capacity {
    capacities
        .iter()
        .find(|c| c.collective == collective && c.algo == algo)
        .map_or(
            Capacity {
                max_bytes: 0,
                align: 1,
            },
            |c| c.capacity,
        )
}

/// `kernels`' rule: the buffers a world of `world` on `link` plans for
/// `capacities`, as `kernels::World` plans them with buffers sized from the
/// capacities. A loopback world of several ranks has no NCCL (so no window)
/// and stages the reference collective; every other world has NCCL, and
/// the custom kernels are assumed to reach each other (as on the machines a
/// sweep measures).
#[cfg(feature = "gpu")]
pub fn kernels_model(
    capacities: &[CapacityEntry],
    link: Link,
    world: u32,
    budget: Option<u64>,
) -> Result<Planned, String> {
    let shared_gpu = link == Link::Loopback && world > 1;
    let registers = kernels::raw::Registers {
        world: world as usize,
        kernels: true,
        reference: shared_gpu,
        window: !shared_gpu,
    };
    kernels::raw::memory_plan(
        |collective, algo| capacity_of(capacities, collective, algo),
        registers,
        budget,
    )
    .map(|(cap, footprint)| Planned {
        cap,
        gpu_bytes: footprint.gpu(),
    })
}

/// The budget a world built with `kernels`' default options has
/// (`kernels::DEFAULT_MEMORY_BUDGET`), where the tuner was built with
/// `kernels`.
pub fn runtime_default() -> Option<Budget> {
    #[cfg(feature = "gpu")]
    {
        Some(Budget {
            bytes: kernels::DEFAULT_MEMORY_BUDGET,
            model: kernels_model,
        })
    }
    #[cfg(not(feature = "gpu"))]
    {
        None
    }
}

/// The model the command line uses: `kernels`' where the tuner was built
/// with it, else none (a budget then cannot be applied).
pub fn model() -> Option<MemoryModel> {
    #[cfg(feature = "gpu")]
    {
        Some(kernels_model)
    }
    #[cfg(not(feature = "gpu"))]
    {
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in for `kernels`' rule in tests: every capacity costs its
    /// bytes times four (a world of two whose largest call dominates, like
    /// two_shot_pull's staging), summed over the pairs' largest.
    pub(crate) fn four_times_the_largest(
        capacities: &[CapacityEntry],
        _link: Link,
        _world: u32,
        budget: Option<u64>,
    ) -> Result<Planned, String> {
        let cost = |caps: &[CapacityEntry]| {
            4 * caps.iter().map(|c| c.capacity.max_bytes).max().unwrap_or(0)
        };
        let full = cost(capacities);
        match budget {
            Some(b) if full > b => {
                let cap = b / 4 / 16 * 16;
                Ok(Planned {
                    cap: Some(cap),
                    gpu_bytes: cost(&cap_all(capacities, cap)),
                })
            }
            _ => Ok(Planned {
                cap: None,
                gpu_bytes: full,
            }),
        }
    }

    #[test]
    fn a_budget_caps_what_does_not_fit() {
        let caps = vec![CapacityEntry {
            collective: Collective::AllReduce,
            algo: Algo::TwoShotPull,
            capacity: Capacity {
                max_bytes: 128 << 20,
                align: 16,
            },
        }];
        let budget = Budget {
            bytes: 64 << 20,
            model: four_times_the_largest,
        };
        let capped = budget.capped(&caps, Link::NvLink, 2).unwrap();
        assert_eq!(capped[0].capacity.max_bytes, 16 << 20);
        // What the capacities take without a cap: too much as they were, within
        // the budget once capped.
        let fits = |caps: &[CapacityEntry]| {
            (budget.model)(caps, Link::NvLink, 2, None)
                .unwrap()
                .gpu_bytes
                <= budget.bytes
        };
        assert!(!fits(&caps));
        assert!(fits(&capped));
        assert_eq!(
            capacity_of(&capped, Collective::AllReduce, Algo::TwoShotPull).max_bytes,
            16 << 20
        );
        assert_eq!(
            capacity_of(&capped, Collective::AllReduce, Algo::OneShotPush).max_bytes,
            0
        );
    }

    /// The tuner's model is the world's: at W = 2 on NVLink, the sm90
    /// capacities cost what `kernels` plans for them (704 MiB of regions and
    /// its control block, a 64 MiB window when one is asked for).
    #[cfg(feature = "gpu")]
    #[test]
    fn the_kernels_model_plans_as_worlds_do() {
        let entry = |collective, algo, max_bytes| CapacityEntry {
            collective,
            algo,
            capacity: Capacity {
                max_bytes,
                align: 16,
            },
        };
        let sm90 = vec![
            entry(Collective::AllReduce, Algo::OneShotPush, 32 << 20),
            entry(Collective::AllReduce, Algo::OneShotPull, 128 << 20),
            entry(Collective::AllReduce, Algo::TwoShotPull, 128 << 20),
            entry(Collective::AllReduce, Algo::TwoShotPush, 32 << 20),
            entry(Collective::AllGather, Algo::OneShotPush, 8 << 20),
            entry(Collective::AllGather, Algo::OneShotPull, 16 << 20),
        ];
        let full = kernels_model(&sm90, Link::NvLink, 2, None).unwrap();
        assert_eq!(full.cap, None);
        assert_eq!(full.gpu_bytes >> 20, 704);
        let bounded = kernels_model(&sm90, Link::NvLink, 2, Some(256 << 20)).unwrap();
        assert!(bounded.gpu_bytes <= 256 << 20);
        assert!(bounded.cap.is_some());
        // A loopback world of several ranks stages the reference too.
        let loopback = kernels_model(&[], Link::Loopback, 4, None).unwrap();
        assert_eq!(loopback.gpu_bytes >> 20, 2);
    }
}
