//! `fit`: evidence → bands, without a GPU. Deterministic: the same evidence
//! always gives the same bands.
//!
//! Per key, walking the measured sizes upwards:
//!
//! 1. **Opening.** At the first size the baseline is NCCL; another algorithm
//!    opens the band only if it beats NCCL (rule 2), and then the fastest such
//!    one does. Wherever the current algorithm can no longer run (past its
//!    capacity, or it failed verification there) there is no neighbouring band
//!    to prefer on a tie, so the next band goes to the best of the remaining
//!    candidates: the lowest median there, NCCL included but not favoured (a
//!    pull kernel 3 % faster than NCCL after push's capacity gets the band).
//! 2. **Switching.** A challenger replaces the current algorithm at a size only
//!    if it is faster by more than the noise margin (default 4 %), significantly
//!    (one-sided Mann-Whitney on the margin-inflated samples, α = 0.01), and the
//!    challenger's median is still the lower one at the next measured size
//!    where both ran (a lone noise spike reverses there). Anything less is a
//!    tie, and ties keep the neighbouring (smaller-size) band's algorithm.
//! 3. **Edges.** A confirmed switch is moved back over the preceding sizes
//!    where the newcomer's median is already lower, so the edge sits at the
//!    largest measured size where the lower band's algorithm still wins, not
//!    where the margin was first exceeded. Edges are always measured sizes: no
//!    interpolation (bisection during `sweep` puts sizes near each crossover).
//! 4. **Monotone.** No algorithm may own two bands. While one does (A…B…A), the
//!    conflict with the fewest sizes in between is resolved by whichever of
//!    three repairs costs the least summed relative regret over the sizes it
//!    reassigns: give the sizes in between to A; give the first A band to its
//!    right neighbour; give the second A band to its left neighbour. A repair
//!    may only hand sizes to an algorithm that ran there. The open end above
//!    the largest size counts as a band of NCCL (rule 5), so NCCL at small
//!    sizes and a custom kernel at the largest is a conflict too.
//! 5. **Capacity.** Only algorithms that ran (and did not fail verification)
//!    at a size can own it, and every size a custom algorithm ran at is
//!    within its capacity, so a custom band never reaches past capacity. The
//!    last band is open: if the largest size went to a custom algorithm, its
//!    band ends there and NCCL takes everything above (unmeasured sizes fall
//!    to the fallback).

use std::collections::BTreeMap;

use policy::{Algo, Band, CapacityEntry, TableKey};

use crate::evidence::{Evidence, KeyEvidence};
use crate::stats;

/// The knobs of the band rules. The defaults are what the tuner writes notes for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitSettings {
    /// A challenger must be faster by more than this fraction (0.04 = 4 %).
    pub margin: f64,
    /// Significance level of the one-sided test.
    pub alpha: f64,
    /// Points with fewer samples than this are ignored.
    pub min_samples: usize,
}

impl Default for FitSettings {
    fn default() -> Self {
        FitSettings {
            margin: 0.04,
            alpha: 0.01,
            min_samples: 5,
        }
    }
}

/// The bands of one key and what they rest on.
#[derive(Clone, Debug, PartialEq)]
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
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Edge {
    /// The last size of the lower band (the band's `max`).
    pub last_below: u64,
    /// The first measured size of the upper band.
    pub first_above: u64,
    pub below: Algo,
    pub above: Algo,
    /// Medians (µs) of both algorithms at `last_below` and at `first_above`,
    /// where measured.
    pub at_last_below: (Option<f64>, Option<f64>),
    pub at_first_above: (Option<f64>, Option<f64>),
}

/// All keys of an evidence file.
#[derive(Clone, Debug, PartialEq)]
pub struct FitResult {
    pub keys: Vec<KeyFit>,
    /// Keys without a single usable point, and why.
    pub skipped: Vec<(TableKey, String)>,
    pub settings: FitSettings,
}

pub fn fit(evidence: &Evidence, settings: &FitSettings) -> FitResult {
    let capacities = evidence.platform.capacities.clone();
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    let mut ordered: Vec<&KeyEvidence> = evidence.keys.iter().collect();
    ordered.sort_by_key(|k| k.key());
    for key in ordered {
        match fit_key(key, &capacities, settings) {
            Some(fit) => keys.push(fit),
            None => skipped.push((
                key.key(),
                "no verified point with enough samples".to_string(),
            )),
        }
    }
    FitResult {
        keys,
        skipped,
        settings: *settings,
    }
}

/// One measured size: each usable algorithm's samples and median.
struct Column {
    bytes: u64,
    options: BTreeMap<Algo, Measured>,
}

struct Measured {
    /// How many samples were taken (before outliers were removed).
    samples: usize,
    /// The samples as every comparison starts from them.
    kept: stats::Kept,
    median: f64,
}

impl Column {
    fn median(&self, algo: Algo) -> Option<f64> {
        self.options.get(&algo).map(|m| m.median)
    }

    fn has(&self, algo: Algo) -> bool {
        self.options.contains_key(&algo)
    }

    fn best_median(&self) -> f64 {
        self.options
            .values()
            .map(|m| m.median)
            .fold(f64::INFINITY, f64::min)
    }
}

pub fn fit_key(
    key: &KeyEvidence,
    capacities: &[CapacityEntry],
    settings: &FitSettings,
) -> Option<KeyFit> {
    let columns = columns(key, capacities, settings);
    if columns.is_empty() {
        return None;
    }
    let rules = Rules {
        columns: &columns,
        settings,
    };
    let mut owner = rules.greedy();
    rules.make_monotone(&mut owner);
    let bands = bands(&columns, &owner);
    let edges = edges(&columns, &owner);
    let min_samples = columns
        .iter()
        .flat_map(|c| c.options.values().map(|m| m.samples))
        .min()
        .unwrap_or(0);
    Some(KeyFit {
        key: key.key(),
        bands,
        sizes: columns.len(),
        min_samples,
        edges,
    })
}

/// Usable points, grouped by size: not failed, with enough samples, and (for a
/// custom algorithm) accepted by its recorded capacity.
fn columns(key: &KeyEvidence, capacities: &[CapacityEntry], settings: &FitSettings) -> Vec<Column> {
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
    key.by_size()
        .into_iter()
        .filter_map(|(bytes, points)| {
            let options: BTreeMap<Algo, Measured> = points
                .into_iter()
                .filter(|p| p.usable() && p.samples_us.len() >= settings.min_samples.max(1))
                .filter(|p| accepts(p.algo, bytes))
                .map(|p| {
                    let kept = stats::Kept::of(&p.samples_us);
                    let median = kept.median;
                    let samples = p.samples_us.len();
                    (
                        p.algo,
                        Measured {
                            samples,
                            kept,
                            median,
                        },
                    )
                })
                .collect();
            (!options.is_empty()).then_some(Column { bytes, options })
        })
        .collect()
}

struct Rules<'a> {
    columns: &'a [Column],
    settings: &'a FitSettings,
}

impl Rules<'_> {
    /// Whether `challenger` beats `incumbent` at column `i` by the margin,
    /// significantly.
    fn beats(&self, i: usize, challenger: Algo, incumbent: Algo) -> bool {
        let column = &self.columns[i];
        match (
            column.options.get(&challenger),
            column.options.get(&incumbent),
        ) {
            (Some(c), Some(inc)) => {
                c.kept
                    .faster_by_margin(&inc.kept, self.settings.margin, self.settings.alpha)
                    .faster
            }
            _ => false,
        }
    }

    /// The win at `i` is not a lone spike: at the next size where both ran (if
    /// any) the challenger's median is still the lower one. Asking for a second
    /// win by the full margin instead would miss real crossovers where the grid
    /// is coarse (×1.5 steps) and the advantage shrinks again towards the next
    /// crossover; a noise spike, by contrast, reverses at the next size.
    fn confirmed(&self, i: usize, challenger: Algo, incumbent: Algo) -> bool {
        self.columns[i + 1..]
            .iter()
            .find(|c| c.has(challenger) && c.has(incumbent))
            .is_none_or(
                |next| match (next.median(challenger), next.median(incumbent)) {
                    (Some(c), Some(inc)) => c < inc,
                    _ => false,
                },
            )
    }

    /// The fastest algorithm at `i` that beats `incumbent` (rule 2), if any.
    fn challenger(&self, i: usize, incumbent: Algo) -> Option<Algo> {
        let column = &self.columns[i];
        column
            .options
            .iter()
            .filter(|&(&algo, _)| algo != incumbent)
            .filter(|&(&algo, _)| {
                self.beats(i, algo, incumbent) && self.confirmed(i, algo, incumbent)
            })
            .min_by(|a, b| a.1.median.total_cmp(&b.1.median))
            .map(|(&algo, _)| algo)
    }

    /// Rule 1: NCCL unless something beats it (or the fastest, if NCCL did not run).
    fn opening(&self, i: usize) -> Algo {
        let column = &self.columns[i];
        let baseline = if column.has(Algo::Nccl) {
            Algo::Nccl
        } else {
            column
                .options
                .iter()
                .min_by(|a, b| a.1.median.total_cmp(&b.1.median))
                .map(|(&algo, _)| algo)
                .expect("columns are never empty")
        };
        self.challenger(i, baseline).unwrap_or(baseline)
    }

    /// Rule 1 where the current algorithm stopped (its capacity ended, or it
    /// failed here): the lowest median among those that ran. NCCL is not the
    /// baseline here: it would keep the band on a tie, though no band of its
    /// own borders these sizes.
    fn reopening(&self, i: usize) -> Algo {
        self.columns[i]
            .options
            .iter()
            .min_by(|a, b| a.1.median.total_cmp(&b.1.median))
            .map(|(&algo, _)| algo)
            .expect("columns are never empty")
    }

    /// Rules 1–3: one owner per measured size.
    fn greedy(&self) -> Vec<Algo> {
        let mut owner: Vec<Algo> = Vec::with_capacity(self.columns.len());
        let mut band_start = 0;
        for i in 0..self.columns.len() {
            let current = owner.last().copied().filter(|&a| self.columns[i].has(a));
            let Some(current) = current else {
                owner.push(if i == 0 {
                    self.opening(i)
                } else {
                    self.reopening(i)
                });
                band_start = i;
                continue;
            };
            let Some(newcomer) = self.challenger(i, current) else {
                owner.push(current);
                continue;
            };
            // Rule 3: the band edge goes where the medians cross, not where the
            // margin was first exceeded. The current band keeps its first size.
            let mut first = i;
            while first - 1 > band_start {
                let column = &self.columns[first - 1];
                match (column.median(newcomer), column.median(current)) {
                    (Some(n), Some(c)) if n < c => first -= 1,
                    _ => break,
                }
            }
            for slot in &mut owner[first..i] {
                *slot = newcomer;
            }
            owner.push(newcomer);
            band_start = first;
        }
        owner
    }

    /// Rule 4: every algorithm owns one contiguous range of sizes — counting
    /// the open end above the largest size, which always belongs to NCCL.
    fn make_monotone(&self, owner: &mut [Algo]) {
        while let Some((first, second)) = self.closest_conflict(owner) {
            let runs = runs_to_the_open_end(owner);
            let algo = runs[first].algo;
            let between = runs[first + 1].start..runs[second].start;
            let repairs = [
                (between.clone(), algo),
                (runs[first].start..runs[first].end, runs[first + 1].algo),
                (runs[second].start..runs[second].end, runs[second - 1].algo),
            ];
            let best = repairs
                .into_iter()
                .filter_map(|(range, to)| {
                    self.repair_cost(owner, range.clone(), to)
                        .map(|cost| (cost, range, to))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let Some((_, range, to)) = best else {
                // No algorithm that ran everywhere in question: leave it. Only
                // possible when verification failed at scattered sizes.
                break;
            };
            for slot in &mut owner[range] {
                *slot = to;
            }
        }
    }

    /// The pair of runs of one algorithm with the fewest sizes in between.
    fn closest_conflict(&self, owner: &[Algo]) -> Option<(usize, usize)> {
        let runs = runs_to_the_open_end(owner);
        let mut best: Option<(usize, usize, usize)> = None;
        for (first, a) in runs.iter().enumerate() {
            if let Some(offset) = runs[first + 1..].iter().position(|b| b.algo == a.algo) {
                let second = first + 1 + offset;
                let gap = runs[second].start - a.end;
                if best.is_none_or(|(_, _, g)| gap < g) {
                    best = Some((first, second, gap));
                }
            }
        }
        best.map(|(first, second, _)| (first, second))
    }

    /// Summed relative regret of handing `range` to `to`, or `None` if `to`
    /// did not run at one of those sizes (or the range is the open end, which
    /// cannot be handed to anyone).
    fn repair_cost(&self, owner: &[Algo], range: std::ops::Range<usize>, to: Algo) -> Option<f64> {
        let mut cost = 0.0;
        for i in range {
            let column = self.columns.get(i)?;
            let new = column.median(to)?;
            let old = column.median(owner[i]).unwrap_or(new);
            cost += (new - old) / column.best_median();
        }
        Some(cost)
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

/// The runs, plus the open end above the largest size as a run of NCCL
/// (one past the last index) when the largest size went to a custom kernel:
/// NCCL owns it whatever happens, so an earlier NCCL run conflicts with it.
fn runs_to_the_open_end(owner: &[Algo]) -> Vec<Run> {
    let mut all = runs(owner);
    if all.last().is_some_and(|r| r.algo.is_custom()) {
        all.push(Run {
            start: owner.len(),
            end: owner.len() + 1,
            algo: Algo::Nccl,
        });
    }
    all
}

/// Rule 5: runs become bands; the last band is open and belongs to NCCL.
fn bands(columns: &[Column], owner: &[Algo]) -> Vec<Band> {
    let runs = runs(owner);
    let mut bands: Vec<Band> = runs
        .iter()
        .map(|run| Band {
            max: Some(columns[run.end - 1].bytes),
            algo: run.algo,
        })
        .collect();
    let last = bands.last_mut().expect("at least one column");
    if last.algo.is_custom() {
        bands.push(Band {
            max: None,
            algo: Algo::Nccl,
        });
    } else {
        last.max = None;
    }
    bands
}

fn edges(columns: &[Column], owner: &[Algo]) -> Vec<Edge> {
    runs(owner)
        .windows(2)
        .map(|pair| {
            let (low, high) = (&pair[0], &pair[1]);
            let below = &columns[low.end - 1];
            let above = &columns[high.start];
            Edge {
                last_below: below.bytes,
                first_above: above.bytes,
                below: low.algo,
                above: high.algo,
                at_last_below: (below.median(low.algo), below.median(high.algo)),
                at_first_above: (above.median(low.algo), above.median(high.algo)),
            }
        })
        .collect()
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
            let _ = writeln!(out, "  {}", crate::format::bands(&key.bands));
            for edge in &key.edges {
                let _ = writeln!(
                    out,
                    "  {} → {} after {}: {} vs {} there, {} vs {} at {}",
                    edge.below.name(),
                    edge.above.name(),
                    crate::format::size(edge.last_below),
                    crate::format::micros(edge.at_last_below.0),
                    crate::format::micros(edge.at_last_below.1),
                    crate::format::micros(edge.at_first_above.0),
                    crate::format::micros(edge.at_first_above.1),
                    crate::format::size(edge.first_above),
                );
            }
        }
        for (key, why) in &self.skipped {
            let _ = writeln!(out, "{}: skipped ({why})", key);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{PointEvidence, PointOrigin};
    use policy::{Collective, DType, Mode};

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
            .map(|algo| crate::backend::synthetic::capacity(Collective::AllReduce, algo, max_bytes))
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
    fn a_single_point_win_is_not_a_crossover() {
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (32, &[(Nccl, 20.0), (Push, 5.0), (Pull, 4.0)]),
            (48, &[(Nccl, 20.0), (Push, 5.0), (Pull, 5.1)]),
        ];
        assert_eq!(
            bands_of(rows, &all_custom(1 << 20)),
            vec![band(Some(48), Push), band(None, Nccl)]
        );
    }

    #[test]
    fn islands_are_merged_by_least_regret() {
        // Push, then pull clearly wins two sizes, then push again: the pull
        // island costs less to give back to push than the other repairs.
        let rows: &[(u64, &[(Algo, f64)])] = &[
            (16, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (32, &[(Nccl, 20.0), (Push, 6.0), (Pull, 5.0)]),
            (48, &[(Nccl, 20.0), (Push, 6.0), (Pull, 5.0)]),
            (64, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (80, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
            (96, &[(Nccl, 20.0), (Push, 5.0), (Pull, 8.0)]),
        ];
        assert_eq!(
            bands_of(rows, &all_custom(1 << 20)),
            vec![band(Some(96), Push), band(None, Nccl)]
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
        let caps = [crate::backend::synthetic::capacity(
            Collective::AllReduce,
            Push,
            32,
        )];
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
            crate::backend::synthetic::capacity(Collective::AllReduce, Push, 32),
            crate::backend::synthetic::capacity(Collective::AllReduce, Pull, 1 << 20),
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
    fn nccl_first_and_a_custom_kernel_last_is_repaired() {
        // NCCL wins the two smallest sizes, push everything after: with the
        // open end NCCL's, NCCL would own two bands. Giving NCCL's two sizes to
        // push costs less regret than giving push's four to NCCL.
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
            vec![band(Some(96), Push), band(None, Nccl)]
        );
    }

    proptest::proptest! {
        /// Whatever the measurements, the bands are a valid monotone table:
        /// every algorithm owns at most one band, edges increase, the last
        /// band is NCCL's and open, and a custom band never reaches past the
        /// largest size its algorithm ran at.
        #[test]
        fn bands_are_always_monotone(
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
            let mut seen = std::collections::BTreeSet::new();
            proptest::prop_assert!(bands.iter().all(|b| seen.insert(b.algo)), "{bands:?}");
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
                    crate::backend::synthetic::capacity(Collective::AllReduce, algo, max)
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

        /// A valid table whatever the noise: one band per algorithm at most,
        /// increasing edges at measured sizes, NCCL's open band last, and no
        /// custom band past its capacity or past the last size it ran at.
        fn check_valid(case: &Case, bands: &[Band]) -> Result<(), String> {
            let mut seen = std::collections::BTreeSet::new();
            if !bands.iter().all(|b| seen.insert(b.algo)) {
                return Err("an algorithm owns two bands".into());
            }
            if bands.last() != Some(&band(None, Nccl)) {
                return Err("the last band is not NCCL's open band".into());
            }
            let edges: Vec<u64> = bands.iter().filter_map(|b| b.max).collect();
            if edges.len() != bands.len() - 1 || !edges.windows(2).all(|w| w[0] < w[1]) {
                return Err("edges do not increase".into());
            }
            if let Some(e) = edges.iter().find(|e| !case.sizes.contains(e)) {
                return Err(format!("edge {e} is not a measured size"));
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
        /// exactly as fast, the others up to 50 % slower): at any noise up to
        /// 20 %, outliers included, where medians of 25 samples fall several
        /// per cent either side by chance, the margin and the significance
        /// test keep what the table picks within the margin of NCCL's true
        /// time at every size (a tie may go either way; it costs nothing).
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
