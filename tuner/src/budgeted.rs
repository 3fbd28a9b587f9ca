//! The fit under a memory budget, and what it costs against the unbounded
//! fit.
//!
//! A world registers buffers for what its tables select, so the tables of one
//! world size share the budget: per world size, the budgeted fit keeps a
//! subset of the algorithms the unbounded fit chose, each up to one common
//! cap, and fits the keys again within those capacities. Of the subsets, it
//! takes the one whose fitted tables cost the least against the unbounded
//! ones: the sum over every key and measured size of `ln(t_budgeted /
//! t_unbounded)`, with the medians of the algorithms each selects there. For
//! each subset the cap is the largest measured size at which the fitted
//! tables' buffers (what a world registers for them: [`crate::memory`]) fit
//! the budget. Dropping an algorithm can be worth it: at world size 2 on an
//! H200, two_shot_push and two_shot_pull both need their own room for the
//! largest messages, and without two_shot_push the budget takes two_shot_pull
//! twice as far.
//!
//! The fitted tables then need no cap at run time: a world that uses them
//! under the same budget registers what they select, which fits. Run-time
//! capping of the unbounded tables (every capacity lowered to one common
//! cap, `kernels`' rule for tables fitted without a budget) is reported
//! beside it for comparison.

use std::collections::BTreeMap;

use policy::{Algo, Band, Capacity, CapacityEntry, Collective, Link, TableKey};
use serde::Serialize;

use crate::evidence::{Evidence, KeyEvidence};
use crate::fit::{FitSettings, KeyFit, fit_key};
use crate::memory::{Budget, cap_all};
use crate::stats;

/// What the budget did to one world size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorldBudget {
    pub world_size: u32,
    /// GPU bytes per rank of the unbounded fit's buffers.
    pub unbounded_bytes: u64,
    /// Of the budgeted fit's.
    pub bytes: u64,
    /// The algorithms the budgeted fit may choose, and up to which size
    /// (`None`: the unbounded fit fits; every key keeps its bands).
    pub kept: Option<Kept>,
    /// The cap a world would put on the unbounded tables at run time.
    pub runtime_cap: Option<u64>,
}

/// The subset of algorithms a budgeted world keeps, and their common cap.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kept {
    pub algos: Vec<(Collective, Algo)>,
    /// `None` when every kept algorithm keeps its whole capacity.
    pub cap: Option<u64>,
}

/// Fits every key of `keys` (all of one world size `world`), whose unbounded
/// fits are `unbounded`, within `budget`.
pub fn fit_world(
    keys: &[&KeyEvidence],
    unbounded: &[KeyFit],
    capacities: &[CapacityEntry],
    (link, world): (Link, u32),
    budget: &Budget,
    settings: &FitSettings,
) -> (Vec<KeyFit>, WorldBudget) {
    let world_of = WorldKeys {
        keys,
        unbounded,
        capacities,
        link,
        world,
        budget,
        settings,
    };
    let wanted = selected(unbounded, capacities);
    let unbounded_bytes = world_of.bytes(&wanted);
    let runtime_cap = budget.plan(&wanted, link, world).ok().and_then(|p| p.cap);
    let mut report = WorldBudget {
        world_size: world,
        unbounded_bytes,
        bytes: unbounded_bytes,
        kept: None,
        runtime_cap,
    };
    if unbounded_bytes <= budget.bytes {
        return (unbounded.to_vec(), report);
    }
    let pairs: Vec<(Collective, Algo)> = wanted
        .iter()
        .filter(|c| c.capacity.max_bytes > 0)
        .map(|c| (c.collective, c.algo))
        .collect();
    let medians = Medians::of(keys, settings);
    let mut best: Option<Candidate> = None;
    for mask in 0..1u32 << pairs.len() {
        let kept: Vec<(Collective, Algo)> = pairs
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, p)| *p)
            .collect();
        let candidate = world_of.within(kept, &medians);
        // Of two subsets that cost the same, the one that takes less memory.
        if best
            .as_ref()
            .is_none_or(|b| (candidate.cost, candidate.bytes) < (b.cost, b.bytes))
        {
            best = Some(candidate);
        }
    }
    let best = world_of.extended(best.expect("the empty subset is always a candidate"));
    let binds = capacities
        .iter()
        .any(|c| best.algos.contains(&(c.collective, c.algo)) && c.capacity.max_bytes > best.cap);
    report.bytes = best.bytes;
    report.kept = Some(Kept {
        algos: best.algos,
        cap: binds.then_some(best.cap),
    });
    (best.fits, report)
}

/// One world size's keys, and what fitting them within the budget needs.
struct WorldKeys<'a> {
    keys: &'a [&'a KeyEvidence],
    unbounded: &'a [KeyFit],
    capacities: &'a [CapacityEntry],
    link: Link,
    world: u32,
    budget: &'a Budget,
    settings: &'a FitSettings,
}

/// The keys fitted with some algorithms up to a common cap.
struct Candidate {
    algos: Vec<(Collective, Algo)>,
    cap: u64,
    fits: Vec<KeyFit>,
    /// GPU bytes per rank of what the fitted tables select.
    bytes: u64,
    /// Against the unbounded fits ([`cost`]).
    cost: f64,
}

impl WorldKeys<'_> {
    /// GPU bytes per rank a world registers for `caps`; capacities too large
    /// to plan at all fit no budget.
    fn bytes(&self, caps: &[CapacityEntry]) -> u64 {
        (self.budget.model)(caps, self.link, self.world, None).map_or(u64::MAX, |p| p.gpu_bytes)
    }

    /// Every size measured for the world's keys (with repeats).
    fn measured_sizes(&self) -> impl Iterator<Item = u64> {
        self.keys
            .iter()
            .flat_map(|k| k.points.iter().map(|p| p.bytes))
    }

    /// The keys fitted with only `algos`, each up to `cap`.
    fn fitted(&self, algos: &[(Collective, Algo)], cap: u64) -> (Vec<KeyFit>, u64) {
        let allowed: Vec<CapacityEntry> = self
            .capacities
            .iter()
            .filter(|c| algos.contains(&(c.collective, c.algo)))
            .copied()
            .collect();
        let caps = cap_all(&allowed, cap);
        let fits: Vec<KeyFit> = self
            .keys
            .iter()
            .filter_map(|k| fit_key(k, &caps, self.settings))
            .collect();
        let bytes = self.bytes(&selected(&fits, self.capacities));
        (fits, bytes)
    }

    /// The keys fitted with only `algos`, up to the largest measured size
    /// whose fitted tables fit the budget (a cap of 0 keeps nothing but
    /// NCCL, whose footprint is the least a world takes).
    fn within(&self, algos: Vec<(Collective, Algo)>, medians: &Medians) -> Candidate {
        let mut sizes: Vec<u64> = self.measured_sizes().collect();
        sizes.sort_unstable();
        sizes.dedup();
        let (mut lo, mut hi) = (0usize, sizes.len());
        let mut chosen = (0u64, self.fitted(&algos, 0));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            let at = self.fitted(&algos, sizes[mid - 1]);
            if at.1 <= self.budget.bytes {
                chosen = (sizes[mid - 1], at);
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let (cap, (fits, bytes)) = chosen;
        let cost = cost(&fits, self.unbounded, medians);
        Candidate {
            algos,
            cap,
            fits,
            bytes,
            cost,
        }
    }

    /// `best` with the bands its cap cut taken on, between the cap and the
    /// next measured size, as far as the budget goes ([`WorldKeys::extend`]).
    fn extended(&self, best: Candidate) -> Candidate {
        let Some(next) = self.measured_sizes().filter(|&b| b > best.cap).min() else {
            return best;
        };
        let (mut lo, mut hi) = (best.cap / 16, (next - 1) / 16 + 1);
        let mut chosen = best;
        let base = chosen.fits.clone();
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let fits = self.extend(&base, mid * 16);
            let bytes = self.bytes(&selected(&fits, self.capacities));
            if bytes <= self.budget.bytes {
                (chosen.fits, chosen.bytes, chosen.cap) = (fits, bytes, mid * 16);
                lo = mid;
            } else {
                hi = mid;
            }
        }
        chosen
    }

    /// `fits` (fitted within a cap at or below `cap`) with every custom band
    /// that the cap cut short taken up to `cap` (aligned down): a band that ends
    /// at its key's last measured size at or below `cap`, whose algorithm the
    /// unbounded fit also chose at the key's next measured size. Between the two
    /// sizes the unbounded fit has that algorithm, measured at both ends.
    fn extend(&self, fits: &[KeyFit], cap: u64) -> Vec<KeyFit> {
        fits.iter()
            .map(|fit| {
                let mut fit = fit.clone();
                let (Some(key), Some(theirs)) = (
                    self.keys.iter().find(|k| k.key() == fit.key),
                    self.unbounded.iter().find(|u| u.key == fit.key),
                ) else {
                    return fit;
                };
                let sizes = key.points.iter().map(|p| p.bytes);
                let last = sizes.clone().filter(|&b| b <= cap).max();
                let next = sizes.filter(|&b| b > cap).min();
                let align = crate::grid::alignment(self.capacities, fit.key.collective, self.world);
                if let (Some(last), Some(next)) = (last, next) {
                    for band in &mut fit.bands {
                        if band.algo.is_custom()
                            && band.max == Some(last)
                            && band_algo(&theirs.bands, next) == band.algo
                        {
                            band.max = Some(last.max(cap / align * align));
                        }
                    }
                }
                fit
            })
            .collect()
    }
}

/// What tables with these fits select out of `capacities`: each custom
/// algorithm up to the largest size a band selects it for (its capacity at
/// most; an open band reaches it), nothing where no band selects it. The
/// rule `kernels` sizes a world's buffers by.
pub fn selected(fits: &[KeyFit], capacities: &[CapacityEntry]) -> Vec<CapacityEntry> {
    let tables: Vec<(Collective, &[Band])> = fits
        .iter()
        .map(|f| (f.key.collective, f.bands.as_slice()))
        .collect();
    selected_by(&tables, capacities, &policy::Policy::none())
}

/// What `tables` (each with its collective: every table of one world size)
/// select out of `capacities`, with the override `policy`: as [`selected`],
/// and an algorithm the override forces for a collective keeps its whole
/// capacity while the others of that collective get nothing.
pub fn selected_by(
    tables: &[(Collective, &[Band])],
    capacities: &[CapacityEntry],
    policy: &policy::Policy,
) -> Vec<CapacityEntry> {
    capacities
        .iter()
        .map(|entry| {
            let reach = match policy.forced(entry.collective) {
                Some(forced) if forced == entry.algo => u64::MAX,
                Some(_) => 0,
                None => tables
                    .iter()
                    .filter(|(c, _)| *c == entry.collective)
                    .flat_map(|(_, bands)| bands.iter())
                    .filter(|b| b.algo == entry.algo)
                    .map(|b| b.max.unwrap_or(u64::MAX))
                    .max()
                    .unwrap_or(0),
            };
            CapacityEntry {
                capacity: Capacity {
                    max_bytes: entry.capacity.max_bytes.min(reach),
                    align: entry.capacity.align,
                },
                ..*entry
            }
        })
        .collect()
}

/// The median of every usable point (enough samples, no error), by key,
/// size and algorithm.
struct Medians(BTreeMap<(TableKey, u64, Algo), f64>);

impl Medians {
    fn of(keys: &[&KeyEvidence], settings: &FitSettings) -> Medians {
        let mut medians = BTreeMap::new();
        for key in keys {
            for p in &key.points {
                if p.usable() && p.samples_us.len() >= settings.min_samples.max(1) {
                    medians.insert((key.key(), p.bytes, p.algo), stats::median(&p.samples_us));
                }
            }
        }
        Medians(medians)
    }

    fn get(&self, key: TableKey, bytes: u64, algo: Algo) -> Option<f64> {
        self.0.get(&(key, bytes, algo)).copied()
    }

    /// Measured sizes of `key`.
    fn sizes(&self, key: TableKey) -> Vec<u64> {
        let mut sizes: Vec<u64> = self
            .0
            .keys()
            .filter(|(k, ..)| *k == key)
            .map(|(_, b, _)| *b)
            .collect();
        sizes.dedup();
        sizes
    }
}

/// The algorithm `bands` select at `bytes`.
pub fn band_algo(bands: &[Band], bytes: u64) -> Algo {
    bands
        .iter()
        .find(|b| b.max.is_none_or(|max| bytes <= max))
        .map_or(Algo::Nccl, |b| b.algo)
}

/// Per measured size of one key where both choices were measured: the size,
/// the two algorithms, and `t_budgeted / t_unbounded`.
fn ratios(
    key: TableKey,
    choose: impl Fn(u64) -> Algo,
    unbounded: &[Band],
    medians: &Medians,
) -> Vec<(u64, Algo, Algo, f64)> {
    medians
        .sizes(key)
        .into_iter()
        .filter_map(|bytes| {
            let (ours, theirs) = (choose(bytes), band_algo(unbounded, bytes));
            let t = medians.get(key, bytes, ours)? / medians.get(key, bytes, theirs)?;
            Some((bytes, ours, theirs, t))
        })
        .collect()
}

/// `Σ ln(t_budgeted / t_unbounded)` over every key and measured size.
fn cost(fits: &[KeyFit], unbounded: &[KeyFit], medians: &Medians) -> f64 {
    unbounded
        .iter()
        .map(|u| {
            let bands = fits
                .iter()
                .find(|f| f.key == u.key)
                .map_or(&[] as &[Band], |f| &f.bands);
            ratios(u.key, |b| band_algo(bands, b), &u.bands, medians)
                .iter()
                .map(|r| r.3.ln())
                .sum::<f64>()
        })
        .sum()
}

/// How much slower one key's calls are with tables made for a budget than
/// with the unbounded table, by the evidence's medians at its measured sizes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyRegret {
    pub key: TableKey,
    /// Sizes whose choice both tables' algorithms were measured at.
    pub sizes: usize,
    /// Sizes where the budgeted fit chooses another algorithm.
    pub changed: usize,
    /// The mean over those sizes of `t_budgeted / t_unbounded − 1`.
    pub mean: f64,
    /// The largest, and where.
    pub worst: f64,
    pub worst_bytes: u64,
    pub worst_algos: (Algo, Algo),
    /// The same of the unbounded table under the run-time cap (`kernels`'
    /// rule for a table fitted without the budget): larger calls go to NCCL.
    pub capped_mean: f64,
    pub capped_worst: f64,
}

/// The regret of every key of `budgeted` against `unbounded` (the same keys
/// fitted without a budget), and of the unbounded tables capped as a world
/// would cap them.
pub fn regret(
    evidence: &Evidence,
    unbounded: &[KeyFit],
    budgeted: &[KeyFit],
    worlds: &[WorldBudget],
    settings: &FitSettings,
) -> Vec<KeyRegret> {
    let keys: Vec<&KeyEvidence> = evidence.keys.iter().collect();
    let medians = Medians::of(&keys, settings);
    let mut out = Vec::new();
    for u in unbounded {
        let Some(b) = budgeted.iter().find(|b| b.key == u.key) else {
            continue;
        };
        let cap = worlds
            .iter()
            .find(|w| w.world_size == u.key.world_size)
            .and_then(|w| w.runtime_cap);
        let fitted = ratios(
            u.key,
            |bytes| band_algo(&b.bands, bytes),
            &u.bands,
            &medians,
        );
        let capped = ratios(
            u.key,
            |bytes| match band_algo(&u.bands, bytes) {
                algo if algo.is_custom() && cap.is_some_and(|c| bytes > c) => {
                    u.key.collective.fallback()
                }
                algo => algo,
            },
            &u.bands,
            &medians,
        );
        let mean = |r: &[(u64, Algo, Algo, f64)]| {
            r.iter().map(|x| x.3 - 1.0).sum::<f64>() / r.len().max(1) as f64
        };
        let worst = fitted
            .iter()
            .copied()
            .max_by(|a, b| a.3.total_cmp(&b.3))
            .unwrap_or((0, Algo::Nccl, Algo::Nccl, 1.0));
        out.push(KeyRegret {
            key: u.key,
            sizes: fitted.len(),
            changed: fitted.iter().filter(|r| r.1 != r.2).count(),
            mean: mean(&fitted),
            worst: worst.3 - 1.0,
            worst_bytes: worst.0,
            worst_algos: (worst.1, worst.2),
            capped_mean: mean(&capped),
            capped_worst: capped.iter().map(|r| r.3 - 1.0).fold(0.0, f64::max),
        });
    }
    out
}

/// The budget's section of `tuner fit`'s report: per world size what the
/// tables take and what the fit kept, then per key the regret against the
/// unbounded fit, and that of the unbounded tables capped at run time.
pub fn report(budget: u64, worlds: &[WorldBudget], regret: &[KeyRegret]) -> String {
    use std::fmt::Write;
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64);
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let mut out = format!(
        "memory budget {} per rank (GPU memory a world registers for the tables of one world size):\n",
        crate::format::size(budget)
    );
    for world in worlds {
        let _ = write!(
            out,
            "  world size {}: the unbounded tables take {}",
            world.world_size,
            mib(world.unbounded_bytes)
        );
        match &world.kept {
            None => {
                let _ = writeln!(out, ", within the budget: kept as they are");
            }
            Some(kept) => {
                let algos = if kept.algos.is_empty() {
                    "none (NCCL only)".to_string()
                } else {
                    let named = kept
                        .algos
                        .iter()
                        .map(|(c, a)| format!("{} {}", a.name(), c.name()));
                    crate::format::list(named)
                };
                let _ = writeln!(
                    out,
                    "; fitted within it: {}, keeping {algos} {} (capped at run time instead, \
                     every algorithm would stop at {})",
                    mib(world.bytes),
                    kept.cap
                        .map_or("each to its capacity".to_string(), |c| format!(
                            "up to {}",
                            crate::format::size(c)
                        )),
                    world
                        .runtime_cap
                        .map_or("no cap".to_string(), crate::format::size)
                );
            }
        }
    }
    for r in regret {
        let _ = writeln!(
            out,
            "  {}: {} sizes, {} changed; regret mean {}, worst {} at {} ({} for {}); capped at \
             run time: mean {}, worst {}",
            r.key,
            r.sizes,
            r.changed,
            pct(r.mean),
            pct(r.worst),
            crate::format::size(r.worst_bytes),
            r.worst_algos.0.name(),
            r.worst_algos.1.name(),
            pct(r.capped_mean),
            pct(r.capped_worst)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::tests::sample_evidence;
    use crate::evidence::{PointEvidence, PointOrigin};
    use crate::fit::fit;
    use crate::memory::{Planned, tests::four_times_the_largest};
    use policy::{DType, Mode};

    const MIB: u64 = 1 << 20;

    /// Each custom algorithm has a region of its own, as large as its
    /// capacity: dropping one frees its room for the others.
    fn sum_of_capacities(
        capacities: &[CapacityEntry],
        _link: Link,
        _world: u32,
        budget: Option<u64>,
    ) -> Result<Planned, String> {
        let cost = |caps: &[CapacityEntry]| caps.iter().map(|c| c.capacity.max_bytes).sum::<u64>();
        let full = cost(capacities);
        let Some(budget) = budget.filter(|&b| full > b) else {
            return Ok(Planned {
                cap: None,
                gpu_bytes: full,
            });
        };
        let (mut lo, mut hi) = (
            0,
            capacities
                .iter()
                .map(|c| c.capacity.max_bytes)
                .max()
                .unwrap_or(0),
        );
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if cost(&cap_all(capacities, mid)) <= budget {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(Planned {
            cap: Some(lo),
            gpu_bytes: cost(&cap_all(capacities, lo)),
        })
    }

    fn entry(algo: Algo, max_bytes: u64) -> CapacityEntry {
        CapacityEntry {
            collective: Collective::AllReduce,
            algo,
            capacity: Capacity {
                max_bytes,
                align: 16,
            },
        }
    }

    /// Evidence of one all-reduce key of world size 2 at sizes 1..128 MiB
    /// (powers of two), each algorithm's median given by `time(algo, MiB)`.
    fn evidence(
        capacities: Vec<CapacityEntry>,
        time: impl Fn(Algo, u64) -> Option<f64>,
    ) -> Evidence {
        let mut evidence = sample_evidence();
        evidence.platform.capacities = capacities;
        let key = &mut evidence.keys[0];
        key.world_size = 2;
        key.points.clear();
        for mib in [1, 2, 4, 8, 16, 32, 64, 128] {
            for algo in [Algo::Nccl, Algo::OneShotPush, Algo::TwoShotPull] {
                if let Some(t) = time(algo, mib) {
                    key.points.push(PointEvidence {
                        bytes: mib * MIB,
                        algo,
                        origin: PointOrigin::Grid,
                        verified: true,
                        error: None,
                        samples_us: (0..9).map(|i| t * (1.0 + i as f64 * 1e-4)).collect(),
                    });
                }
            }
        }
        evidence
    }

    /// NCCL at 10 µs/MiB + 30 µs; one_shot_push a little faster than
    /// two_shot_pull up to 32 MiB (its capacity); two_shot_pull at half
    /// NCCL's time up to 128 MiB.
    fn timings(algo: Algo, mib: u64) -> Option<f64> {
        let mib = mib as f64;
        match algo {
            Algo::Nccl => Some(30.0 + 10.0 * mib),
            Algo::OneShotPush if mib <= 32.0 => Some(4.0 + 4.9 * mib),
            Algo::TwoShotPull => Some(5.0 + 5.0 * mib),
            _ => None,
        }
    }

    fn settings(budget: u64, model: crate::memory::MemoryModel) -> FitSettings {
        FitSettings {
            memory_budget: Some(Budget {
                bytes: budget,
                model,
            }),
            ..FitSettings::default()
        }
    }

    fn caps() -> Vec<CapacityEntry> {
        vec![
            entry(Algo::OneShotPush, 32 * MIB),
            entry(Algo::TwoShotPull, 128 * MIB),
        ]
    }

    #[test]
    fn tables_within_the_budget_are_kept_as_they_are() {
        let evidence = evidence(caps(), timings);
        let unbounded = fit(&evidence, &FitSettings::default());
        let within = fit(&evidence, &settings(1 << 30, four_times_the_largest));
        assert_eq!(within.keys, unbounded.keys);
        assert_eq!(within.memory_budget, Some(1 << 30));
        assert_eq!(within.worlds.len(), 1);
        assert_eq!(within.worlds[0].kept, None);
        assert_eq!(within.worlds[0].bytes, 4 * 128 * MIB);
        for r in &within.regret {
            assert_eq!((r.changed, r.worst), (0, 0.0), "{r:?}");
        }
    }

    #[test]
    fn a_budgeted_fit_takes_what_fits_up_to_the_budget() {
        let evidence = evidence(caps(), timings);
        // Four times the largest selected size within 100 MiB: 25 MiB,
        // between the measured 16 and 32 MiB.
        let budgeted = fit(&evidence, &settings(100 * MIB, four_times_the_largest));
        let world = &budgeted.worlds[0];
        assert!(world.bytes <= 100 * MIB, "{world:?}");
        assert_eq!(world.unbounded_bytes, 4 * 128 * MIB);
        let kept = world
            .kept
            .as_ref()
            .expect("the unbounded tables do not fit");
        // The bands the cap cut at 16 MiB reach on to the budget's 25 MiB.
        let cap = kept.cap.expect("the cap binds");
        assert_eq!(cap, 25 * MIB);
        let bands = &budgeted.keys[0].bands;
        let top = bands.iter().filter_map(|b| b.max).max().unwrap();
        assert_eq!(top, cap, "{bands:?}");
        assert_eq!(bands.last().unwrap().algo, Algo::Nccl);
        // What it costs: NCCL from 32 MiB on, where the unbounded table
        // has one_shot_push (350 µs for 160.8 µs) and then two_shot_pull.
        let regret = &budgeted.regret[0];
        assert_eq!(regret.worst_algos, (Algo::Nccl, Algo::OneShotPush));
        assert_eq!(regret.worst_bytes, 32 * MIB);
        assert!(
            (regret.worst - (350.0 / 160.8 - 1.0)).abs() < 1e-3,
            "{regret:?}"
        );
        assert_eq!(regret.changed, 3);
        assert!(regret.mean > 0.0);
        // Run-time capping of the unbounded table stops at the same 25 MiB here.
        assert_eq!(world.runtime_cap, Some(25 * MIB));
        // The report says all of it.
        let text = budgeted.report();
        assert!(text.contains("memory budget 100MiB per rank"), "{text}");
        assert!(
            text.contains("world size 2: the unbounded tables take 512.0 MiB"),
            "{text}"
        );
        assert!(text.contains("regret mean"), "{text}");
    }

    /// Where each algorithm needs room of its own, dropping the one that
    /// gains least lets the other go further: one_shot_push is 2 % faster
    /// than two_shot_pull up to 32 MiB, two_shot_pull twice as fast as NCCL
    /// beyond.
    #[test]
    fn dropping_an_algorithm_that_gains_little_frees_its_room() {
        let evidence = evidence(caps(), timings);
        let budgeted = fit(&evidence, &settings(64 * MIB, sum_of_capacities));
        let kept = budgeted.worlds[0].kept.clone().unwrap();
        assert_eq!(kept.algos, vec![(Collective::AllReduce, Algo::TwoShotPull)]);
        let bands = &budgeted.keys[0].bands;
        assert_eq!(
            bands[0],
            Band {
                max: Some(64 * MIB),
                algo: Algo::TwoShotPull
            },
            "{bands:?}"
        );
        // Keeping both would have stopped both at 32 MiB, and cost more.
        let regret = &budgeted.regret[0];
        assert!(regret.mean < regret.capped_mean, "{regret:?}");
    }

    #[test]
    fn evidence_swept_under_a_budget_is_fitted_for_it() {
        let mut evidence = evidence(caps(), timings);
        evidence.settings.memory_budget = Some(64 * MIB);
        // Without a budget of its own the fit records the sweep's.
        let plain = fit(&evidence, &FitSettings::default());
        assert_eq!(plain.memory_budget, Some(64 * MIB));
        assert!(plain.worlds.is_empty());
        // With one, the smaller of the two.
        let both = fit(&evidence, &settings(1 << 30, four_times_the_largest));
        assert_eq!(both.memory_budget, Some(64 * MIB));
        assert!(both.worlds[0].bytes <= 64 * MIB);
    }

    #[test]
    fn selected_capacities_follow_the_bands() {
        let fits = vec![KeyFit {
            key: TableKey {
                collective: Collective::AllReduce,
                world_size: 2,
                dtype: DType::Bf16,
                mode: Mode::Graph,
            },
            bands: vec![
                Band {
                    max: Some(3 * MIB),
                    algo: Algo::OneShotPush,
                },
                Band {
                    max: None,
                    algo: Algo::TwoShotPull,
                },
            ],
            sizes: 2,
            min_samples: 9,
            edges: Vec::new(),
        }];
        let caps = vec![
            entry(Algo::OneShotPush, 32 * MIB),
            entry(Algo::TwoShotPull, 128 * MIB),
            entry(Algo::OneShotPull, 128 * MIB),
        ];
        let selected = selected(&fits, &caps);
        let max: Vec<u64> = selected.iter().map(|c| c.capacity.max_bytes).collect();
        // A closed band, an open one (its capacity), one never selected.
        assert_eq!(max, vec![3 * MIB, 128 * MIB, 0]);
        assert_eq!(band_algo(&fits[0].bands, 3 * MIB), Algo::OneShotPush);
        assert_eq!(band_algo(&fits[0].bands, 3 * MIB + 16), Algo::TwoShotPull);
    }
}
