//! `fit`: evidence → bands, without a GPU. Deterministic: the same evidence
//! always gives the same bands.
//!
//! Per key, walking the measured sizes upwards, each size goes to the
//! algorithm with the lowest median there, unless the algorithm of the band
//! below is within the margin of it: then that band keeps the size (a tie
//! costs at most the margin, and noise does not split a band). At the first
//! size NCCL is the band below, so a custom kernel opens the table only if it
//! beats NCCL by more than the margin. Only algorithms that ran at a size
//! (within their capacity, and not failing verification) can own it, so a
//! custom band never reaches past its capacity. A stretch of sizes that does
//! not beat the band below by more than the margin on average over its own
//! sizes goes back to it: noise that hands one size to an algorithm does not
//! make a band.
//!
//! When a size changes hands, the sizes just below it where the newcomer's
//! median is already the lower one go to the newcomer too, and the edge sits
//! where the two medians cross between the two measured sizes around it:
//! interpolated in log size from the ratio of the two medians at each. An
//! algorithm may come back after another (a protocol switch, a middle range
//! NCCL wins): it owns one band per stretch it wins by more than the margin.
//!
//! The last band is open: if the largest size went to a custom algorithm, its
//! band ends there and NCCL takes everything above.
//!
//! Under a memory budget per rank, the keys of each world size are fitted
//! again within what the budget lets a world register ([`crate::budgeted`]).

use std::collections::BTreeMap;

use policy::{Algo, Band, CapacityEntry, TableKey};
use serde::Serialize;

use crate::budgeted::{self, KeyRegret, WorldBudget};
use crate::evidence::{Evidence, KeyEvidence};
use crate::memory::Budget;
use crate::stats;

/// The knobs of the band rule. The defaults are what the tuner writes notes for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitSettings {
    /// Two medians within this fraction (0.025 = 2.5 %) of each other are a tie,
    /// which the band below keeps.
    pub margin: f64,
    /// Points with fewer samples than this are ignored.
    pub min_samples: usize,
    /// GPU memory per rank the tables of one world size may make a world
    /// register (`None`: unbounded). Evidence swept under a budget is fitted
    /// within the smaller of the two.
    pub memory_budget: Option<Budget>,
}

/// The margin `fit` and `sweep` use unless told otherwise.
pub const DEFAULT_MARGIN: f64 = 0.025;

impl Default for FitSettings {
    fn default() -> Self {
        FitSettings {
            margin: DEFAULT_MARGIN,
            min_samples: 5,
            memory_budget: None,
        }
    }
}

/// The bands of one key and what they rest on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyFit {
    pub key: TableKey,
    pub bands: Vec<Band>,
    /// Measured sizes the bands were derived from.
    pub sizes: usize,
    /// The fewest samples behind any point used.
    pub min_samples: usize,
    /// Per band edge: the medians on both sides, for reports.
    pub edges: Vec<Edge>,
}

/// Where one band ends and the next begins, with the measurements there.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Edge {
    /// The largest measured size of the lower band.
    pub last_below: u64,
    /// The smallest measured size of the upper band.
    pub first_above: u64,
    pub below: Algo,
    pub above: Algo,
    /// Medians (µs) of both algorithms at `last_below` and at `first_above`,
    /// where measured.
    #[serde(rename = "medians_us_at_last_below")]
    pub at_last_below: (Option<f64>, Option<f64>),
    #[serde(rename = "medians_us_at_first_above")]
    pub at_first_above: (Option<f64>, Option<f64>),
}

/// All keys of an evidence file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FitResult {
    pub keys: Vec<KeyFit>,
    /// Keys without a single usable point.
    #[serde(rename = "dropped")]
    pub skipped: Vec<Dropped>,
    /// The memory budget per rank the tables were fitted for (the sweep's
    /// or the fit's, the smaller; `None`: unbounded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<u64>,
    /// What the fit's budget did to each world size (empty without one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worlds: Vec<WorldBudget>,
    /// Per key, what the budget costs against the unbounded fit (empty
    /// without a budget).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub regret: Vec<KeyRegret>,
    #[serde(skip)]
    pub settings: FitSettings,
}

/// A key of the evidence that gets no table, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Dropped {
    pub key: TableKey,
    pub why: String,
}

impl Dropped {
    /// What having no table means, for a warning.
    pub fn warning(&self) -> String {
        format!(
            "{}: no table ({}); a file merged into keeps its own table for this key, a new file has none (NCCL)",
            self.key, self.why
        )
    }
}

pub fn fit(evidence: &Evidence, settings: &FitSettings) -> FitResult {
    let capacities = &evidence.platform.capacities;
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    let mut ordered: Vec<&KeyEvidence> = evidence.keys.iter().collect();
    ordered.sort_by_key(|k| k.key());
    for key in &ordered {
        match fit_key(key, capacities, settings) {
            Some(fit) => keys.push(fit),
            None => skipped.push(Dropped {
                key: key.key(),
                why: "no verified point with enough samples".to_string(),
            }),
        }
    }
    let swept_within = evidence.settings.memory_budget;
    let memory_budget = match (swept_within, settings.memory_budget) {
        (Some(a), Some(b)) => Some(a.min(b.bytes)),
        (a, b) => a.or(b.map(|b| b.bytes)),
    };
    let mut result = FitResult {
        keys,
        skipped,
        memory_budget,
        worlds: Vec::new(),
        regret: Vec::new(),
        settings: *settings,
    };
    let Some(budget) = settings.memory_budget else {
        // Evidence swept under a budget holds no custom point past what the
        // budget let the world take, so its bands end within it already.
        return result;
    };
    let budget = Budget {
        bytes: memory_budget.unwrap_or(budget.bytes),
        ..budget
    };
    let unbounded = std::mem::take(&mut result.keys);
    let mut world_sizes: Vec<u32> = unbounded.iter().map(|k| k.key.world_size).collect();
    world_sizes.sort_unstable();
    world_sizes.dedup();
    for world in world_sizes {
        let of_world: Vec<&KeyEvidence> = ordered
            .iter()
            .copied()
            .filter(|k| k.world_size == world)
            .collect();
        let fits: Vec<KeyFit> = unbounded
            .iter()
            .filter(|k| k.key.world_size == world)
            .cloned()
            .collect();
        let (fitted, report) = budgeted::fit_world(
            &of_world,
            &fits,
            capacities,
            (evidence.platform.link, world),
            &budget,
            settings,
        );
        result.keys.extend(fitted);
        result.worlds.push(report);
    }
    result.keys.sort_by_key(|k| k.key);
    result.regret = budgeted::regret(evidence, &unbounded, &result.keys, &result.worlds, settings);
    result
}

/// One measured size: the median of each algorithm that can own it.
struct Column {
    bytes: u64,
    medians: BTreeMap<Algo, f64>,
}

impl Column {
    fn median(&self, algo: Algo) -> Option<f64> {
        self.medians.get(&algo).copied()
    }

    /// The algorithm with the lowest median.
    fn best(&self) -> Algo {
        let (&algo, _) = self
            .medians
            .iter()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .expect("columns are never empty");
        algo
    }

    /// Whether `newcomer`'s median is below `owner`'s here.
    fn lower(&self, newcomer: Algo, owner: Algo) -> bool {
        matches!((self.median(newcomer), self.median(owner)), (Some(n), Some(o)) if n < o)
    }
}

pub fn fit_key(
    key: &KeyEvidence,
    capacities: &[CapacityEntry],
    settings: &FitSettings,
) -> Option<KeyFit> {
    let k = key.key();
    let (columns, min_samples) = columns(key, capacities, settings);
    if columns.is_empty() {
        return None;
    }
    let fallback = k.collective.fallback();
    let mut owner = owners(&columns, settings.margin, fallback);
    absorb_noise(&columns, &mut owner, settings.margin, fallback);
    let align = crate::grid::alignment(capacities, k.collective, k.world_size);
    let runs = runs(&owner);
    let mut bands = Vec::new();
    let mut edges = Vec::new();
    for pair in runs.windows(2) {
        let (low, high) = (&columns[pair[0].end - 1], &columns[pair[1].start]);
        let (below, above) = (pair[0].algo, pair[1].algo);
        bands.push(Band {
            max: Some(crossing(low, high, below, above, align)),
            algo: below,
        });
        edges.push(Edge {
            last_below: low.bytes,
            first_above: high.bytes,
            below,
            above,
            at_last_below: (low.median(below), low.median(above)),
            at_first_above: (high.median(below), high.median(above)),
        });
    }
    let last = runs.last().expect("at least one column").algo;
    if last.is_custom() {
        let bytes = columns.last().expect("at least one column").bytes;
        bands.push(Band {
            max: Some(bytes),
            algo: last,
        });
    }
    bands.push(Band {
        max: None,
        algo: if last.is_custom() { fallback } else { last },
    });
    Some(KeyFit {
        key: k,
        bands,
        sizes: columns.len(),
        min_samples,
        edges,
    })
}

/// Usable points, grouped by size: not failed, with enough samples, and (for a
/// custom algorithm) accepted by its recorded capacity. Also the fewest
/// samples behind any of them.
fn columns(
    key: &KeyEvidence,
    capacities: &[CapacityEntry],
    settings: &FitSettings,
) -> (Vec<Column>, usize) {
    let k = key.key();
    let accepts = |algo: Algo, bytes: u64| {
        !algo.is_custom()
            || capacities.iter().any(|c| {
                c.collective == k.collective
                    && c.algo == algo
                    && c.capacity
                        .accepts_message(k.collective, k.world_size, bytes)
            })
    };
    let mut fewest = usize::MAX;
    let columns = key
        .by_size()
        .into_iter()
        .filter_map(|(bytes, points)| {
            let medians: BTreeMap<Algo, f64> = points
                .into_iter()
                .filter(|p| p.usable() && p.samples_us.len() >= settings.min_samples.max(1))
                .filter(|p| accepts(p.algo, bytes))
                .map(|p| {
                    fewest = fewest.min(p.samples_us.len());
                    (p.algo, stats::median(&p.samples_us))
                })
                .collect();
            (!medians.is_empty()).then_some(Column { bytes, medians })
        })
        .collect();
    (columns, fewest)
}

/// One owner per measured size (see the module's rule).
/// `fallback`: the collective's (NCCL, or the fused collective's unfused
/// path), the run below the first size.
fn owners(columns: &[Column], margin: f64, fallback: Algo) -> Vec<Algo> {
    let mut owner: Vec<Algo> = Vec::with_capacity(columns.len());
    for (i, column) in columns.iter().enumerate() {
        let best = column.best();
        let below = owner.last().copied().unwrap_or(fallback);
        let keeps = column
            .median(below)
            .is_some_and(|m| column.medians[&best] >= m * (1.0 - margin));
        if keeps {
            owner.push(below);
            continue;
        }
        owner.push(best);
        // The sizes just below that the newcomer also wins, on the medians.
        let mut j = i;
        while j > 0 && owner[j - 1] == below && columns[j - 1].lower(best, below) {
            j -= 1;
            owner[j] = best;
        }
    }
    owner
}

/// Gives every run that does not beat the run below by more than the margin
/// on average over its own sizes (the geometric mean of the ratio of the two
/// medians, where both ran) to the run below: a band that wins only at the
/// size noise handed it is no band. At the first size the collective's
/// fallback is the run below.
fn absorb_noise(columns: &[Column], owner: &mut [Algo], margin: f64, fallback: Algo) {
    loop {
        let runs = runs(owner);
        let below = std::iter::once(fallback).chain(runs.iter().map(|r| r.algo));
        let weak = runs.iter().zip(below).find(|(run, below)| {
            let ratios: Option<Vec<f64>> = (run.start..run.end)
                .map(|i| Some((columns[i].median(run.algo)? / columns[i].median(*below)?).ln()))
                .collect();
            run.algo != *below
                && ratios
                    .is_some_and(|r| (r.iter().sum::<f64>() / r.len() as f64).exp() > 1.0 - margin)
        });
        let Some((run, below)) = weak else { return };
        owner[run.start..run.end].fill(below);
    }
}

/// Where `above`'s median crosses below `below`'s between the measured sizes
/// `low` and `high`: linear in log size on the log of their ratio, aligned
/// down, at least `low.bytes` and below `high.bytes`. At `low.bytes` when
/// either did not run at both sizes (a capacity or a failure ends the band
/// there).
fn crossing(low: &Column, high: &Column, below: Algo, above: Algo, align: u64) -> u64 {
    let log_ratio = |c: &Column| Some((c.median(below)? / c.median(above)?).ln());
    let (Some(r0), Some(r1)) = (log_ratio(low), log_ratio(high)) else {
        return low.bytes;
    };
    let t = if r1 > r0 {
        (-r0 / (r1 - r0)).clamp(0.0, 1.0)
    } else {
        0.5
    };
    let (l0, l1) = ((low.bytes as f64).ln(), (high.bytes as f64).ln());
    let at = (l0 + t * (l1 - l0)).exp().round() as u64 / align.max(1) * align.max(1);
    if at < high.bytes {
        at.max(low.bytes)
    } else {
        low.bytes
    }
}

/// A maximal range of consecutive sizes with one owner.
struct Run {
    start: usize,
    end: usize,
    algo: Algo,
}

fn runs(owner: &[Algo]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (i, &algo) in owner.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if run.algo == algo => run.end = i + 1,
            _ => runs.push(Run {
                start: i,
                end: i + 1,
                algo,
            }),
        }
    }
    runs
}

impl FitResult {
    /// A human summary: per key its bands and the medians at each edge.
    pub fn report(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for key in &self.keys {
            let _ = writeln!(
                out,
                "{}: {} sizes, ≥{} samples/point",
                key.key, key.sizes, key.min_samples
            );
            let _ = writeln!(
                out,
                "  {}",
                crate::format::bands(&key.bands, crate::format::size)
            );
            for edge in &key.edges {
                let _ = writeln!(
                    out,
                    "  {} → {} between {} ({} vs {}) and {} ({} vs {})",
                    edge.below.name(),
                    edge.above.name(),
                    crate::format::size(edge.last_below),
                    crate::format::micros(edge.at_last_below.0),
                    crate::format::micros(edge.at_last_below.1),
                    crate::format::size(edge.first_above),
                    crate::format::micros(edge.at_first_above.0),
                    crate::format::micros(edge.at_first_above.1),
                );
            }
        }
        for dropped in &self.skipped {
            let _ = writeln!(out, "{}: skipped ({})", dropped.key, dropped.why);
        }
        if let (Some(budget), false) = (self.memory_budget, self.worlds.is_empty()) {
            out.push_str(&budgeted::report(budget, &self.worlds, &self.regret));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{PointEvidence, PointOrigin};
    use policy::{Capacity, Collective, DType, Mode};

    /// A capacity entry of the default alignment.
    fn capacity(collective: Collective, algo: Algo, max_bytes: u64) -> CapacityEntry {
        CapacityEntry {
            collective,
            algo,
            capacity: Capacity {
                max_bytes,
                align: policy::DEFAULT_ALIGN,
            },
        }
    }

    /// Evidence for one all-reduce key from exact medians: each algorithm's
    /// samples are its median ± a tiny deterministic jitter.
    fn key_from(rows: &[(u64, &[(Algo, f64)])]) -> KeyEvidence {
        let mut key = KeyEvidence::new(TableKey {
            collective: Collective::AllReduce,
            world_size: 8,
            dtype: DType::Bf16,
            mode: Mode::Graph,
        });
        for &(bytes, algos) in rows {
            for &(algo, median) in algos {
                let samples_us = (0..21)
                    .map(|i| median * (1.0 + (i as f64 - 10.0) * 1e-4))
                    .collect();
                key.points.push(grid_point(bytes, algo, samples_us));
            }
        }
        key
    }

    /// A verified grid point with these samples.
    fn grid_point(bytes: u64, algo: Algo, samples_us: Vec<f64>) -> PointEvidence {
        PointEvidence {
            bytes,
            algo,
            origin: PointOrigin::Grid,
            verified: true,
            error: None,
            samples_us,
        }
    }

    fn all_custom(max_bytes: u64) -> Vec<CapacityEntry> {
        [Algo::OneShotPush, Algo::OneShotPull, Algo::TwoShotPull]
            .into_iter()
            .map(|algo| capacity(Collective::AllReduce, algo, max_bytes))
            .collect()
    }

    fn bands_of(rows: &[(u64, &[(Algo, f64)])], capacities: &[CapacityEntry]) -> Vec<Band> {
        fit_key(&key_from(rows), capacities, &FitSettings::default())
            .unwrap()
            .bands
    }

    use Algo::{Nccl, OneShotPull as Pull, OneShotPush as Push};

    fn band(max: Option<u64>, algo: Algo) -> Band {
        Band { max, algo }
    }

    #[test]
    fn ties_with_nccl_open_with_nccl() {
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 10.0), (Push, 9.9)]),
            (32, &[(Nccl, 10.0), (Push, 9.9)]),
        ];
        assert_eq!(bands_of(rows, &all_custom(1 << 20)), vec![band(None, Nccl)]);
    }

    #[test]
    fn the_edge_sits_where_medians_cross_not_where_the_margin_is_passed() {
        // Pull overtakes push between 64 and 80 but by more than 4 % only from 112.
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (64, &[(Nccl, 20.0), (Push, 9.0), (Pull, 9.1)]),
            (80, &[(Nccl, 20.0), (Push, 9.5), (Pull, 9.4)]),
            (96, &[(Nccl, 20.0), (Push, 10.0), (Pull, 9.8)]),
            (112, &[(Nccl, 20.0), (Push, 11.0), (Pull, 10.0)]),
            (128, &[(Nccl, 20.0), (Push, 12.0), (Pull, 10.2)]),
        ];
        let bands = bands_of(rows, &all_custom(1 << 20));
        assert_eq!(
            bands,
            vec![
                band(Some(64), Push),
                band(Some(128), Pull),
                band(None, Nccl)
            ]
        );
    }

    #[test]
    fn an_algorithm_wins_back_a_range_by_more_than_the_margin() {
        // Push, then pull by 17 % at two sizes, then push again: three
        // bands, the edges between the measured sizes around each crossing.
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (32, &[(Nccl, 20.0), (Push, 6.0), (Pull, 5.0)]),
            (48, &[(Nccl, 20.0), (Push, 6.0), (Pull, 5.0)]),
            (64, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
        ];
        assert_eq!(
            bands_of(rows, &all_custom(1 << 20)),
            vec![
                band(Some(16), Push),
                band(Some(48), Pull),
                band(Some(64), Push),
                band(None, Nccl)
            ]
        );
    }

    #[test]
    fn a_stretch_that_does_not_win_on_average_goes_back_to_the_band_below() {
        // Pull beats push by 4 % at 32, then ties it (the band below keeps
        // ties) up to 96: 1 % on average, no band. Where it wins by 4 %
        // at every size of its stretch, it is one.
        let rows = |pull_after: f64| -> Vec<(u64, Vec<(Algo, f64)>)> {
            [16, 32, 48, 64, 96]
                .into_iter()
                .map(|bytes| {
                    let pull = match bytes {
                        16 => 8.0,
                        32 => 4.8,
                        _ => pull_after,
                    };
                    (bytes, vec![(Nccl, 20.0), (Push, 5.0), (Pull, pull)])
                })
                .collect()
        };
        let fitted = |rows: Vec<(u64, Vec<(Algo, f64)>)>| {
            let rows: Vec<(u64, &[(Algo, f64)])> =
                rows.iter().map(|(b, r)| (*b, r.as_slice())).collect();
            bands_of(&rows, &all_custom(1 << 20))
        };
        assert_eq!(
            fitted(rows(5.0)),
            vec![band(Some(96), Push), band(None, Nccl)]
        );
        assert_eq!(
            fitted(rows(4.8)),
            vec![band(Some(16), Push), band(Some(96), Pull), band(None, Nccl)]
        );
    }

    #[test]
    fn a_win_within_the_margin_stays_with_the_band_below() {
        // Pull is 1.5 % faster at 32: a tie, which push's band keeps.
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (32, &[(Nccl, 20.0), (Push, 5.0), (Pull, 4.925)]),
            (48, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
        ];
        assert_eq!(
            bands_of(rows, &all_custom(1 << 20)),
            vec![band(Some(48), Push), band(None, Nccl)]
        );
    }

    #[test]
    fn the_edge_is_interpolated_between_measured_sizes() {
        // Push and NCCL meet where the ratio of their medians crosses 1:
        // ln(10/20) at 1 KiB and ln(40/20) at 4 KiB, half-way in log size.
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (1024, &[(Nccl, 20.0), (Push, 10.0)]),
            (4096, &[(Nccl, 20.0), (Push, 40.0)]),
        ];
        assert_eq!(
            bands_of(rows, &all_custom(1 << 20)),
            vec![band(Some(2048), Push), band(None, Nccl)]
        );
    }

    #[test]
    fn custom_bands_stop_at_capacity() {
        // Push would win everywhere, but takes at most 32 bytes.
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0)]),
            (32, &[(Nccl, 20.0), (Push, 5.0)]),
            (48, &[(Nccl, 20.0), (Push, 5.0)]),
        ];
        let caps = [capacity(Collective::AllReduce, Push, 32)];
        assert_eq!(
            bands_of(rows, &caps),
            vec![band(Some(32), Push), band(None, Nccl)]
        );
    }

    #[test]
    fn after_a_capacity_the_fastest_remaining_candidate_opens_the_band() {
        // Push takes at most 32 bytes; above it pull is 3 % faster than NCCL,
        // within the margin, so NCCL must not keep the sizes as a "tie".
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (32, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (48, &[(Nccl, 20.0), (Pull, 19.4)]),
            (64, &[(Nccl, 20.0), (Pull, 19.4)]),
            (80, &[(Nccl, 20.0), (Pull, 30.0)]),
        ];
        let caps = [
            capacity(Collective::AllReduce, Push, 32),
            capacity(Collective::AllReduce, Pull, 1 << 20),
        ];
        assert_eq!(
            bands_of(rows, &caps),
            vec![band(Some(32), Push), band(Some(64), Pull), band(None, Nccl)]
        );
    }

    #[test]
    fn points_that_failed_verification_are_never_chosen() {
        let mut key = key_from(&[
            (16, &[(Nccl, 20.0), (Push, 5.0)]),
            (32, &[(Nccl, 20.0), (Push, 5.0)]),
        ]);
        for p in &mut key.points {
            if p.algo == Push {
                p.verified = false;
                p.error = Some("wrong sum".into());
            }
        }
        let fit = fit_key(&key, &all_custom(1 << 20), &FitSettings::default()).unwrap();
        assert_eq!(fit.bands, vec![band(None, Nccl)]);
    }

    #[test]
    fn nccl_first_and_a_custom_kernel_last_gives_nccl_two_bands() {
        // NCCL wins the two smallest sizes, push everything after, and the
        // open end is NCCL's.
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 5.0), (Push, 6.0)]),
            (32, &[(Nccl, 5.0), (Push, 6.0)]),
            (48, &[(Nccl, 20.0), (Push, 6.0)]),
            (64, &[(Nccl, 20.0), (Push, 6.0)]),
            (80, &[(Nccl, 20.0), (Push, 6.0)]),
            (96, &[(Nccl, 20.0), (Push, 6.0)]),
        ];
        assert_eq!(
            bands_of(rows, &all_custom(1 << 20)),
            vec![band(Some(32), Nccl), band(Some(96), Push), band(None, Nccl)]
        );
    }

    proptest::proptest! {
        /// Whatever the measurements, the bands are a valid table: edges
        /// increase, neighbouring bands differ, the last band is NCCL's and
        /// open, and a custom band never reaches past the largest size its
        /// algorithm ran at.
        #[test]
        fn bands_are_always_a_valid_table(
            medians in proptest::collection::vec(proptest::collection::vec(1.0f64..50.0, 4), 1..14),
            reach in proptest::collection::vec(0usize..14, 3),
        ) {
            let algos = [Nccl, Push, Pull, Algo::TwoShotPull];
            let mut key = key_from(&[]);
            for (i, row) in medians.iter().enumerate() {
                let bytes = 16 * (i as u64 + 1);
                for (a, &median) in algos.iter().zip(row) {
                    // Each custom algorithm runs up to its own reach.
                    let runs = !a.is_custom() || i < reach[*a as usize - 1];
                    if runs {
                        key.points.extend(key_from(&[(bytes, &[(*a, median)])]).points);
                    }
                }
            }
            let fit = fit_key(&key, &all_custom(1 << 20), &FitSettings::default()).unwrap();
            let bands = &fit.bands;
            proptest::prop_assert!(bands.windows(2).all(|w| w[0].algo != w[1].algo), "{bands:?}");
            proptest::prop_assert_eq!(bands.last().copied(), Some(band(None, Nccl)));
            let edges: Vec<u64> = bands.iter().filter_map(|b| b.max).collect();
            proptest::prop_assert_eq!(edges.len(), bands.len() - 1);
            proptest::prop_assert!(edges.windows(2).all(|w| w[0] < w[1]));
            for b in bands.iter().filter(|b| b.algo.is_custom()) {
                let last_run = 16 * reach[b.algo as usize - 1] as u64;
                proptest::prop_assert!(b.max.unwrap() <= last_run, "{bands:?} reach {reach:?}");
            }
        }
    }

    #[test]
    fn a_custom_last_band_is_closed_and_nccl_takes_the_rest() {
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0)]),
            (32, &[(Nccl, 20.0), (Push, 5.0)]),
        ];
        assert_eq!(
            bands_of(rows, &all_custom(1 << 20)),
            vec![band(Some(32), Push), band(None, Nccl)]
        );
    }

    /// The fit on evidence shaped like a real sweep's: the sweep grid from
    /// 16 B to 256 MiB (or a window of it), every custom algorithm of the
    /// all-reduce with a capacity drawn from the grid, latency-plus-bandwidth
    /// timings whose crossovers fall anywhere, and 25 samples per point with
    /// multiplicative noise from 0.1 % to 20 % and occasional 1.5–3× outliers.
    /// Seeded and deterministic (ChaCha), so a failure names its case.
    mod realistic {
        use super::*;
        use rand::{RngExt, SeedableRng};
        use rand_chacha::ChaCha8Rng;

        const CUSTOM: [Algo; 4] = [
            Algo::OneShotPush,
            Algo::OneShotPull,
            Algo::TwoShotPull,
            Algo::TwoShotPush,
        ];
        const CASES: u64 = 300;
        const SAMPLES: usize = 25;

        /// Per-call time (µs) of one algorithm: latency plus bytes over bandwidth.
        #[derive(Clone, Copy, Debug)]
        struct Model {
            latency_us: f64,
            gb_per_s: f64,
        }

        impl Model {
            fn at(&self, bytes: u64) -> f64 {
                self.latency_us + bytes as f64 / (self.gb_per_s * 1e3)
            }
        }

        struct Case {
            sizes: Vec<u64>,
            capacities: Vec<CapacityEntry>,
            models: Vec<(Algo, Model)>,
            /// Relative spread (σ of the log) of one sample.
            noise: f64,
            /// Chance that a sample is an outlier (1.5–3× its value).
            outliers: f64,
            /// Custom algorithms also have points past their capacity (as an
            /// evidence file recorded with larger capacities would): `fit`
            /// must not use them.
            past_capacity: bool,
        }

        fn normal(rng: &mut ChaCha8Rng) -> f64 {
            // Box-Muller: enough for noise, no extra crate.
            let u1: f64 = rng.random_range(f64::EPSILON..1.0);
            let u2: f64 = rng.random_range(0.0..1.0);
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        }

        fn draw(rng: &mut ChaCha8Rng) -> Case {
            let grid = crate::grid::sweep_sizes(16, 256 << 20, 16);
            let start = rng.random_range(0..grid.len() - 4);
            let end = rng.random_range(start + 4..=grid.len());
            let sizes = grid[start..end].to_vec();
            let capacities = CUSTOM
                .iter()
                .map(|&algo| {
                    let max = grid[rng.random_range(0..grid.len())];
                    capacity(Collective::AllReduce, algo, max)
                })
                .collect();
            let mut models = vec![(
                Algo::Nccl,
                Model {
                    latency_us: rng.random_range(5.0..40.0),
                    gb_per_s: rng.random_range(100.0..400.0),
                },
            )];
            for &algo in &CUSTOM {
                models.push((
                    algo,
                    Model {
                        latency_us: rng.random_range(1.5..30.0),
                        gb_per_s: rng.random_range(30.0..500.0),
                    },
                ));
            }
            let noise = [0.001, 0.01, 0.05, 0.2][rng.random_range(0..4)];
            Case {
                sizes,
                capacities,
                models,
                noise,
                outliers: if rng.random_bool(0.5) { 0.02 } else { 0.0 },
                past_capacity: rng.random_bool(0.5),
            }
        }

        fn capacity_of(case: &Case, algo: Algo) -> u64 {
            case.capacities
                .iter()
                .find(|c| c.algo == algo)
                .map_or(u64::MAX, |c| c.capacity.max_bytes)
        }

        fn evidence(case: &Case, rng: &mut ChaCha8Rng) -> KeyEvidence {
            let mut key = key_from(&[]);
            for &bytes in &case.sizes {
                for &(algo, model) in &case.models {
                    if algo.is_custom() && bytes > capacity_of(case, algo) && !case.past_capacity {
                        continue;
                    }
                    let samples_us = (0..SAMPLES)
                        .map(|_| {
                            let t = model.at(bytes) * (case.noise * normal(rng)).exp();
                            if rng.random_bool(case.outliers) {
                                t * rng.random_range(1.5..3.0)
                            } else {
                                t
                            }
                        })
                        .collect();
                    key.points.push(grid_point(bytes, algo, samples_us));
                }
            }
            key
        }

        /// A valid table whatever the noise: neighbouring bands differ,
        /// edges increase, NCCL's open band is last, and no custom band
        /// reaches past its capacity.
        fn check_valid(case: &Case, bands: &[Band]) -> Result<(), String> {
            if !bands.windows(2).all(|w| w[0].algo != w[1].algo) {
                return Err("two neighbouring bands of one algorithm".into());
            }
            if bands.last() != Some(&band(None, Nccl)) {
                return Err("the last band is not NCCL's open band".into());
            }
            let edges: Vec<u64> = bands.iter().filter_map(|b| b.max).collect();
            if edges.len() != bands.len() - 1 || !edges.windows(2).all(|w| w[0] < w[1]) {
                return Err("edges do not increase".into());
            }
            for b in bands.iter().filter(|b| b.algo.is_custom()) {
                let cap = capacity_of(case, b.algo);
                if b.max.unwrap() > cap {
                    return Err(format!(
                        "{} reaches {} past its capacity {cap}",
                        b.algo.name(),
                        b.max.unwrap()
                    ));
                }
            }
            Ok(())
        }

        fn run(
            case_check: impl Fn(&Case, &[Band]) -> Result<(), String>,
            shape: impl Fn(&mut Case, &mut ChaCha8Rng),
        ) {
            for seed in 0..CASES {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let mut case = draw(&mut rng);
                shape(&mut case, &mut rng);
                let key = evidence(&case, &mut rng);
                let Some(fit) = fit_key(&key, &case.capacities, &FitSettings::default()) else {
                    panic!("seed {seed}: no fit");
                };
                if let Err(why) =
                    check_valid(&case, &fit.bands).and_then(|()| case_check(&case, &fit.bands))
                {
                    panic!(
                        "seed {seed}: {why}\nbands {:?}\nsizes {}..={} noise {} outliers {} past capacity {}\ncapacities {:?}",
                        fit.bands,
                        case.sizes[0],
                        case.sizes[case.sizes.len() - 1],
                        case.noise,
                        case.outliers,
                        case.past_capacity,
                        case.capacities
                            .iter()
                            .map(|c| (c.algo.name(), c.capacity.max_bytes))
                            .collect::<Vec<_>>()
                    );
                }
            }
        }

        #[test]
        fn tables_are_valid_at_real_sizes_capacities_and_noise() {
            run(|_, _| Ok(()), |_, _| {});
        }

        /// Custom algorithms no faster than NCCL anywhere (half of them
        /// exactly as fast, the others up to 50 % slower): at noise up to
        /// 1 %, where the medians of 25 samples are within a fraction of a
        /// per cent, the margin keeps what the table picks within the margin
        /// of NCCL's true time at every size. (Higher noise is the sweep's to
        /// settle: `tests/noise_regret.rs`.)
        #[test]
        fn noise_costs_no_more_than_the_margin_when_nothing_beats_nccl() {
            run(
                |case, bands| {
                    let margin = FitSettings::default().margin;
                    for &bytes in &case.sizes {
                        let chosen = bands
                            .iter()
                            .find(|b| b.max.is_none_or(|m| bytes <= m))
                            .unwrap()
                            .algo;
                        let time = |algo: Algo| {
                            case.models
                                .iter()
                                .find(|(a, _)| *a == algo)
                                .unwrap()
                                .1
                                .at(bytes)
                        };
                        let regret = time(chosen) / time(Nccl) - 1.0;
                        if regret > margin {
                            return Err(format!(
                                "at {bytes} B the table picks {}, {:.1} % slower than NCCL",
                                chosen.name(),
                                regret * 100.0
                            ));
                        }
                    }
                    Ok(())
                },
                |case, rng| {
                    case.noise = case.noise.min(0.01);
                    let nccl = case.models[0].1;
                    for (_, m) in case.models.iter_mut().skip(1) {
                        let slower = if rng.random_bool(0.5) {
                            1.0
                        } else {
                            rng.random_range(1.0..1.5)
                        };
                        *m = Model {
                            latency_us: nccl.latency_us * slower,
                            gb_per_s: nccl.gb_per_s / slower,
                        };
                    }
                },
            );
        }

        /// One custom algorithm 25 % faster than every other everywhere: it
        /// owns the sizes from the first up to the largest within its
        /// capacity, even when the evidence has points past the capacity and
        /// whatever the capacities of the others are.
        #[test]
        fn a_clear_winner_owns_exactly_the_sizes_its_capacity_allows() {
            run(
                |case, bands| {
                    let winner = case.models[1].0;
                    let cap = capacity_of(case, winner);
                    let reach = case.sizes.iter().copied().filter(|&s| s <= cap).max();
                    match (reach, bands.first()) {
                        (None, Some(first)) if first.algo == winner => Err(format!(
                            "{} got a band but no size fits its capacity",
                            winner.name()
                        )),
                        (None, _) => Ok(()),
                        (Some(last), Some(first))
                            if first.algo == winner && first.max == Some(last) =>
                        {
                            Ok(())
                        }
                        (Some(last), _) => Err(format!(
                            "{} should own the sizes up to {last}",
                            winner.name()
                        )),
                    }
                },
                |case, _| {
                    case.noise = case.noise.min(0.05);
                    let fastest_other = |bytes: u64| {
                        case.models
                            .iter()
                            .skip(2)
                            .chain(std::iter::once(&case.models[0]))
                            .map(|(_, m)| m.at(bytes))
                            .fold(f64::INFINITY, f64::min)
                    };
                    // The winner's time at each size, below every other by 25 %:
                    // a latency/bandwidth model under the lower envelope.
                    let min_ratio = case
                        .sizes
                        .iter()
                        .map(|&b| fastest_other(b) / case.models[1].1.at(b))
                        .fold(f64::INFINITY, f64::min);
                    let speedup = 1.25 / min_ratio;
                    if speedup > 1.0 {
                        let m = &mut case.models[1].1;
                        m.latency_us /= speedup;
                        m.gb_per_s *= speedup;
                    }
                },
            );
        }
    }
}
