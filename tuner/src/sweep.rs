//! `sweep`: measure every candidate algorithm of every key over the size grid,
//! spend more samples where the choice at a size is close, and probe between
//! grid points wherever the fastest algorithm changes, recording every sample
//! as evidence.
//!
//! Extra rounds at a size (`candidates::settle`) go to the fastest candidate
//! and the runner-up while the choice between them is open: the interval of
//! their ratio straddles `1 − margin` and one of its ends lies farther than
//! the margin from the estimate. Once both ends are within the margin, a call
//! the fit makes on the estimate costs at most about twice the margin
//! wherever in the interval the truth lies (a tie called at the margin, the
//! truth at the interval's end): the bound an interval no wider than the
//! margin gives, for about a quarter of the samples, so more rounds would
//! only split ties the fit gives away anyway.
//!
//! Probing: between two neighbouring measured sizes whose fastest algorithms
//! differ (by the medians), the geometric midpoint is measured and settled
//! like any size, and each half is probed again, until the two sizes are
//! within `bisect_resolution` of each other, the two algorithms are within
//! the margin of each other at both ends by the interval of their ratio (then
//! any edge between them costs less than that), or the bracket's
//! `max_bisect_steps` probes are spent: enough to bring one crossing between
//! grid points to the resolution. A third algorithm that wins at a probe
//! gets its own edges the same way, within the same probes.
//!
//! Every rank agrees on every choice by construction: one process drives all
//! ranks, a sample is the maximum over ranks, and the choice is made once from
//! those samples and written to one file that every rank compiles in.

use std::collections::BTreeMap;

use policy::{Algo, Collective, DType, Mode, TableKey};

use crate::backend::{Backend, Repetitions};
use crate::candidates::{self, Column, Effort};
use crate::evidence::{
    EVIDENCE_VERSION, Evidence, KeyEvidence, MeasuredPlatform, PointOrigin, SettingsRecord,
};
use crate::grid;
use crate::observe::{Observer, RunStatus};
use crate::stats;

/// Extra rounds an open choice may get at a grid point, by default.
pub const DEFAULT_REMEASURE_ROUNDS: u32 = 16;

/// Extra rounds an open choice may get at a probe, by default.
pub const DEFAULT_PROBE_ROUNDS: u32 = 16;

/// Coverage of the intervals that say where to measure more. They decide no
/// band (`fit` picks by the estimates), only where more samples go: 90 %
/// spends them where the choice is close rather than on every size the noise
/// leaves a few per cent uncertain, and settles a close choice often enough
/// that a wrong estimate there seldom costs more than the verify limit.
pub const CONFIDENCE: f64 = 0.9;

/// What to sweep and how hard.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSettings {
    pub collectives: Vec<Collective>,
    /// Empty: every world size the backend can form.
    pub world_sizes: Vec<u32>,
    pub dtypes: Vec<DType>,
    pub modes: Vec<Mode>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub reps: Repetitions,
    /// The fit's margin: at a size, the fastest candidate and the runner-up
    /// get more rounds while the interval of their ratio holds `1 − margin`
    /// and is not known to within the margin either way…
    pub margin: f64,
    /// …at this coverage…
    pub confidence: f64,
    /// …up to this many extra rounds of `reps.samples` at a grid point…
    pub max_remeasure_rounds: u32,
    /// Stop probing when the bracketing sizes are within this fraction…
    pub bisect_resolution: f64,
    /// At most this many probes between two grid points.
    pub max_bisect_steps: u32,
    /// …and up to this many at a probe.
    pub max_probe_rounds: u32,
}

impl Default for SweepSettings {
    /// Sized for a budget of a few minutes per world size (GUIDE.md,
    /// "Budget"): on a quiet machine nearly every choice is settled by the
    /// first round, and the extra rounds go to the few sizes where two
    /// candidates are within a few percent.
    fn default() -> Self {
        SweepSettings {
            // The fused all-reduce + add + RMSNorm when asked for: its unfused
            // candidate runs the all-reduce the all-reduce tables in use pick,
            // so it is swept once those tables are the machine's.
            collectives: vec![Collective::AllReduce, Collective::AllGather],
            world_sizes: Vec::new(),
            dtypes: DType::ALL.to_vec(),
            modes: Mode::ALL.to_vec(),
            min_bytes: 16,
            max_bytes: 256 << 20,
            reps: Repetitions {
                samples: 25,
                warmup: 5,
            },
            margin: crate::fit::DEFAULT_MARGIN,
            confidence: CONFIDENCE,
            max_remeasure_rounds: DEFAULT_REMEASURE_ROUNDS,
            bisect_resolution: 0.02,
            // 2^5 halvings bring a grid step (at most × 1.5) to 2 %.
            max_bisect_steps: 5,
            max_probe_rounds: DEFAULT_PROBE_ROUNDS,
        }
    }
}

impl SweepSettings {
    /// How hard to work on each point.
    pub fn effort(&self) -> Effort {
        Effort {
            reps: self.reps,
            margin: self.margin,
            resolution: self.margin,
            confidence: self.confidence,
            max_remeasure_rounds: self.max_remeasure_rounds,
            max_probe_rounds: self.max_probe_rounds,
        }
    }
}

/// The keys and grid a sweep will measure, and what that should cost.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPlan {
    pub keys: Vec<KeyPlan>,
    /// (size, algorithm) points on the grids, before re-measures and bisection.
    pub grid_points: u64,
    pub estimated_seconds: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct KeyPlan {
    pub key: TableKey,
    pub align: u64,
    pub sizes: Vec<u64>,
}

/// The evidence a sweep gathered, complete or not.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepOutcome {
    pub evidence: Evidence,
    pub status: RunStatus,
}

/// Lists keys and sizes, and estimates the time, without measuring anything.
pub fn plan(backend: &dyn Backend, settings: &SweepSettings) -> Result<SweepPlan, String> {
    let available = backend.world_sizes();
    let world_sizes = if settings.world_sizes.is_empty() {
        available.clone()
    } else {
        if let Some(missing) = settings.world_sizes.iter().find(|w| !available.contains(w)) {
            return Err(format!(
                "world size {missing} is not available here (available: {})",
                crate::format::list(&available)
            ));
        }
        settings.world_sizes.clone()
    };
    if world_sizes.is_empty() {
        return Err("no world size to measure".to_string());
    }
    if settings.min_bytes == 0 || settings.min_bytes > settings.max_bytes {
        return Err(format!(
            "invalid size range {}…{} bytes",
            settings.min_bytes, settings.max_bytes
        ));
    }
    let mut keys = Vec::new();
    let mut cost = (0, 0.0);
    // World size outermost: a GPU backend builds one world at a time.
    for &world_size in &world_sizes {
        // What the world takes: under a memory budget, the capped capacities.
        let capacities = backend.capacities(world_size);
        for &collective in &settings.collectives {
            for &dtype in &settings.dtypes {
                for &mode in &settings.modes {
                    let key = TableKey {
                        collective,
                        world_size,
                        dtype,
                        mode,
                    };
                    let align = backend.size_step(key);
                    let sizes = key_sizes(&capacities, key, align, settings);
                    let grid = sizes.iter().copied();
                    candidates::add_first_look_cost(&mut cost, backend, key, grid, settings.reps);
                    keys.push(KeyPlan { key, align, sizes });
                }
            }
        }
    }
    // Bisection and re-measures add roughly a fifth on real hardware.
    Ok(SweepPlan {
        keys,
        grid_points: cost.0,
        estimated_seconds: cost.1 * 1.2,
    })
}

/// The grid of one key, plus the capacity of each custom algorithm in its
/// world inside the range (aligned down), so a band can reach exactly as far
/// as its kernel can.
fn key_sizes(
    capacities: &[policy::CapacityEntry],
    key: TableKey,
    align: u64,
    settings: &SweepSettings,
) -> Vec<u64> {
    let mut sizes = grid::sweep_sizes(settings.min_bytes, settings.max_bytes, align);
    for entry in capacities {
        if entry.collective == key.collective && entry.algo.is_custom() {
            let limit = entry.capacity.max_bytes / align * align;
            if limit >= settings.min_bytes && limit <= settings.max_bytes && limit > 0 {
                sizes.push(limit);
            }
        }
    }
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Runs the sweep. Stops cleanly, keeping every sample measured so far, when
/// the observer asks to or a measurement fails.
pub fn sweep(
    backend: &mut dyn Backend,
    settings: &SweepSettings,
    date: &str,
    observer: &mut dyn Observer,
) -> Result<SweepOutcome, String> {
    let plan = plan(backend, settings)?;
    observer.started(plan.grid_points, plan.estimated_seconds);
    let platform = backend.platform();
    let mut evidence = Evidence {
        evidence_version: EVIDENCE_VERSION,
        platform: MeasuredPlatform {
            arch: platform.arch,
            link: platform.link,
            gpu: platform.gpu,
            backend: platform.backend,
            driver: platform.driver,
            cuda: platform.cuda,
            nccl: platform.nccl,
            host: platform.host,
            tuner_version: env!("CARGO_PKG_VERSION").to_string(),
            date: date.to_string(),
            capacities: platform.capacities.clone(),
        },
        settings: SettingsRecord {
            min_bytes: settings.min_bytes,
            max_bytes: settings.max_bytes,
            samples: settings.reps.samples,
            warmup: settings.reps.warmup,
            remeasure_threshold: settings.margin,
            max_remeasure_rounds: settings.max_remeasure_rounds,
            bisect_resolution: settings.bisect_resolution,
            max_probe_rounds: settings.max_probe_rounds,
            seed: None,
            memory_budget: backend.memory_budget().map(|b| b.bytes),
        },
        complete: false,
        keys: Vec::new(),
    };
    let mut status = RunStatus::Complete;
    for key_plan in &plan.keys {
        observer.key_started(&key_plan.key);
        let mut run = KeyRun {
            backend: &mut *backend,
            settings,
            key: key_plan.key,
            columns: BTreeMap::new(),
        };
        let result = run.measure_key(key_plan, observer);
        let columns = std::mem::take(&mut run.columns);
        let mut key_evidence = KeyEvidence::new(key_plan.key);
        key_evidence.points = columns
            .into_values()
            .flat_map(BTreeMap::into_values)
            .collect();
        if !key_evidence.points.is_empty() {
            evidence.keys.push(key_evidence);
        }
        if let Err(stop) = result {
            status = stop;
            break;
        }
    }
    evidence.complete = status == RunStatus::Complete;
    Ok(SweepOutcome { evidence, status })
}

/// The measuring of one key.
struct KeyRun<'a> {
    backend: &'a mut dyn Backend,
    settings: &'a SweepSettings,
    key: TableKey,
    columns: BTreeMap<u64, Column>,
}

impl KeyRun<'_> {
    /// The grid, then the probes; `Err` says why the key stopped short.
    fn measure_key(
        &mut self,
        plan: &KeyPlan,
        observer: &mut dyn Observer,
    ) -> Result<(), RunStatus> {
        for &bytes in &plan.sizes {
            self.measure_size(bytes, PointOrigin::Grid, observer)?;
        }
        for pair in plan.sizes.windows(2) {
            let mut budget = self.settings.max_bisect_steps;
            self.probe(pair[0], pair[1], plan.align, &mut budget, observer)?;
        }
        Ok(())
    }

    /// Verifies and measures every candidate at `bytes`, then settles the
    /// close choices there.
    fn measure_size(
        &mut self,
        bytes: u64,
        origin: PointOrigin,
        observer: &mut dyn Observer,
    ) -> Result<(), RunStatus> {
        let (backend, key, effort) = (&mut *self.backend, self.key, self.settings.effort());
        let column = self.columns.entry(bytes).or_default();
        candidates::first_look(backend, key, (bytes, origin), &effort, column, observer)?;
        if observer.should_stop() {
            return Err(RunStatus::Interrupted);
        }
        let rounds = match origin {
            PointOrigin::Grid => self.settings.max_remeasure_rounds,
            PointOrigin::Bisect => self.settings.max_probe_rounds,
        };
        candidates::settle(backend, key, column, rounds, &effort)
            .map(|_| ())
            .map_err(|(algo, e)| RunStatus::failed(key, algo, bytes, &e))
    }

    /// The two algorithms to probe between: the fastest at `low` and the
    /// fastest at `high`, when they differ, both ran at both sizes, and the
    /// interval of their ratio does not lie within the margin at both (then
    /// every edge between the two sizes costs less).
    fn winner_changes(&self, low: u64, high: u64) -> Option<(Algo, Algo)> {
        let (at_low, at_high) = (self.columns.get(&low)?, self.columns.get(&high)?);
        let below = candidates::fastest(at_low)?;
        let above = candidates::fastest(at_high)?;
        if below == above {
            return None;
        }
        let both_run = |c: &Column| {
            let m = candidates::medians(c);
            m.contains_key(&below) && m.contains_key(&above)
        };
        if !both_run(at_low) || !both_run(at_high) {
            return None;
        }
        let margin = self.settings.margin;
        let tie = |c: &Column| {
            let (b, a) = (&c[&below].samples_us, &c[&above].samples_us);
            stats::ratio(b, a, self.settings.confidence)
                .is_some_and(|r| r.low >= 1.0 - margin && r.high <= 1.0 / (1.0 - margin))
        };
        (!(tie(at_low) && tie(at_high))).then_some((below, above))
    }

    /// Probes the geometric midpoint of `low` and `high` while the fastest
    /// algorithm changes between them (see [`KeyRun::winner_changes`]), then
    /// each half, depth first, until the bracket is within the resolution or
    /// `budget` probes are spent.
    fn probe(
        &mut self,
        low: u64,
        high: u64,
        align: u64,
        budget: &mut u32,
        observer: &mut dyn Observer,
    ) -> Result<(), RunStatus> {
        if *budget == 0 || high as f64 / low as f64 - 1.0 <= self.settings.bisect_resolution {
            return Ok(());
        }
        if self.winner_changes(low, high).is_none() {
            return Ok(());
        }
        let Some(mid) = grid::midpoint(low, high, align) else {
            return Ok(());
        };
        *budget -= 1;
        let count = self
            .backend
            .candidates(self.key.collective, self.key.world_size, mid)
            .len();
        observer.points_added(count as u64);
        self.measure_size(mid, PointOrigin::Bisect, observer)?;
        self.probe(low, mid, align, budget, observer)?;
        self.probe(mid, high, align, budget, observer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::synthetic::{SyntheticBackend, SyntheticConfig};
    use crate::observe::Quiet;

    fn small_settings() -> SweepSettings {
        SweepSettings {
            collectives: vec![Collective::AllReduce],
            world_sizes: vec![8],
            dtypes: vec![DType::Bf16],
            modes: vec![Mode::Graph],
            min_bytes: 16,
            max_bytes: 16 << 20,
            ..SweepSettings::default()
        }
    }

    #[test]
    fn plan_counts_candidates_and_refuses_absent_world_sizes() {
        let backend = SyntheticBackend::new(SyntheticConfig::planted(0.02, 1));
        let plan = plan(&backend, &small_settings()).unwrap();
        assert_eq!(plan.keys.len(), 1);
        // 16 B … 16 MiB: 21 powers of two, 20 midpoints less 24 B → 40 sizes;
        // 8 MiB (push's capacity) is a power of two already.
        assert_eq!(plan.keys[0].sizes.len(), 40);
        assert!(plan.grid_points > 3 * 40);
        let mut settings = small_settings();
        settings.world_sizes = vec![16];
        let err = super::plan(&backend, &settings).unwrap_err();
        assert!(err.contains("world size 16 is not available"), "{err}");
    }

    #[test]
    fn capacities_join_the_grid() {
        let mut config = SyntheticConfig::planted(0.02, 1);
        config.capacities[0].capacity.max_bytes = 100_000;
        let backend = SyntheticBackend::new(config);
        let plan = plan(&backend, &small_settings()).unwrap();
        assert!(
            plan.keys[0].sizes.contains(&100_000),
            "push's capacity is a grid point"
        );
    }

    /// Under a memory budget the sweep measures what the world takes: no
    /// custom point past the capped capacities, each cap a grid point, and
    /// the budget in the evidence.
    #[test]
    fn a_budget_caps_what_the_sweep_measures() {
        let budget = crate::memory::Budget {
            bytes: 8 << 20,
            model: crate::memory::tests::four_times_the_largest,
        };
        let config = SyntheticConfig::planted(0.02, 1);
        let largest = config
            .capacities
            .iter()
            .map(|c| c.capacity.max_bytes)
            .max()
            .unwrap();
        assert!(4 * largest > 8 << 20, "the budget must bind");
        let mut backend = SyntheticBackend::new(config).within(Some(budget));
        let planned = plan(&backend, &small_settings()).unwrap();
        assert!(
            planned.keys[0].sizes.contains(&(2 << 20)),
            "the cap is a grid point"
        );
        let outcome = sweep(&mut backend, &small_settings(), "2026-01-01", &mut Quiet).unwrap();
        assert_eq!(outcome.status, RunStatus::Complete);
        assert_eq!(outcome.evidence.settings.memory_budget, Some(8 << 20));
        let key = &outcome.evidence.keys[0];
        assert!(key.points.iter().all(|p| p.error.is_none()));
        let custom_top = key
            .points
            .iter()
            .filter(|p| p.algo.is_custom())
            .map(|p| p.bytes)
            .max()
            .unwrap();
        assert_eq!(custom_top, 2 << 20);
        assert!(
            key.points.iter().any(|p| p.bytes > 2 << 20),
            "NCCL above the cap"
        );
        // The recorded capacities are the platform's: the budget says the rest.
        assert_eq!(
            outcome.evidence.platform.capacities,
            SyntheticConfig::planted(0.02, 1).capacities
        );
    }

    #[test]
    fn bisection_adds_points_near_each_crossover() {
        let mut backend = SyntheticBackend::new(SyntheticConfig::nominal(0.01, 5));
        let outcome = sweep(&mut backend, &small_settings(), "2026-01-01", &mut Quiet).unwrap();
        assert_eq!(outcome.status, RunStatus::Complete);
        assert!(outcome.evidence.complete);
        let key = &outcome.evidence.keys[0];
        let probes: Vec<u64> = key
            .points
            .iter()
            .filter(|p| p.origin == PointOrigin::Bisect)
            .map(|p| p.bytes)
            .collect();
        for planted in [32 * 1024, 256 * 1024, 4 << 20] {
            let near = probes
                .iter()
                .filter(|&&b| (b as f64 / planted as f64 - 1.0).abs() < 0.1)
                .count();
            assert!(near >= 2, "few probes near {planted}: {probes:?}");
        }
    }

    #[test]
    fn stopping_keeps_what_was_measured() {
        struct StopAfter(usize);
        impl Observer for StopAfter {
            fn point_done(&mut self, _: &TableKey, _: u64, _: Algo) {
                self.0 = self.0.saturating_sub(1);
            }
            fn should_stop(&self) -> bool {
                self.0 == 0
            }
        }
        let mut backend = SyntheticBackend::new(SyntheticConfig::planted(0.02, 1));
        let outcome = sweep(
            &mut backend,
            &small_settings(),
            "2026-01-01",
            &mut StopAfter(10),
        )
        .unwrap();
        assert_eq!(outcome.status, RunStatus::Interrupted);
        assert!(!outcome.evidence.complete);
        assert_eq!(outcome.evidence.keys[0].points.len(), 10);
    }

    #[test]
    fn failed_verification_is_recorded_not_timed() {
        let mut config = SyntheticConfig::planted(0.02, 1);
        config
            .broken
            .push((Collective::AllReduce, Algo::OneShotPull));
        let mut backend = SyntheticBackend::new(config);
        let outcome = sweep(&mut backend, &small_settings(), "2026-01-01", &mut Quiet).unwrap();
        let pulls: Vec<_> = outcome.evidence.keys[0]
            .points
            .iter()
            .filter(|p| p.algo == Algo::OneShotPull)
            .collect();
        assert!(!pulls.is_empty());
        assert!(
            pulls
                .iter()
                .all(|p| !p.verified && p.samples_us.is_empty() && p.error.is_some())
        );
    }

    #[test]
    fn samples_go_where_the_choice_is_close() {
        let mut backend = SyntheticBackend::new(SyntheticConfig::nominal(0.2, 1));
        let mut settings = small_settings();
        // Push and pull cross at 32 KiB; two-shot and NCCL are two and six
        // times slower there.
        settings.min_bytes = 16 * 1024;
        settings.max_bytes = 64 * 1024;
        let outcome = sweep(&mut backend, &settings, "2026-01-01", &mut Quiet).unwrap();
        let reps = settings.reps.samples as usize;
        let points = &outcome.evidence.keys[0].points;
        for p in points {
            if matches!(p.algo, Algo::Nccl | Algo::TwoShotPull) {
                assert_eq!(p.samples_us.len(), reps, "{} {:?}", p.bytes, p.algo);
            }
        }
        let near = |algo| {
            points
                .iter()
                .any(|p| p.algo == algo && p.bytes == 32 * 1024 && p.samples_us.len() > reps)
        };
        assert!(near(Algo::OneShotPush) && near(Algo::OneShotPull));
        let most = settings.max_remeasure_rounds.max(settings.max_probe_rounds) as usize + 1;
        assert!(points.iter().all(|p| p.samples_us.len() <= most * reps));
    }

    /// Two algorithms cross between two grid points, 6 % apart at both,
    /// which 20 % noise leaves undecided at both in three rounds: the change
    /// of winner alone is probed.
    #[test]
    fn a_change_of_winner_is_probed_even_when_undecided() {
        let mut config = SyntheticConfig::nominal(0.2, 2);
        let models = &mut config.models;
        models.retain(|&(c, a), _| c != Collective::AllReduce || a == Algo::Nccl);
        let nccl = crate::backend::synthetic::LatencyModel {
            alpha_us: 10.0,
            bytes_per_us: 100.0,
            step: None,
            knee_bytes: None,
        };
        // Push is 6 % slower at 1 KiB and meets NCCL at 1254 B, half-way
        // to 1.5 KiB (where it is 6 % faster).
        let at = 1254.0;
        let (t1, t_at) = (1.06 * nccl.time_us(1024), nccl.time_us(at as u64));
        let per_byte = (t_at - t1) / (at - 1024.0);
        let push = crate::backend::synthetic::LatencyModel {
            alpha_us: t_at - per_byte * at,
            bytes_per_us: 1.0 / per_byte,
            step: None,
            knee_bytes: None,
        };
        models.insert((Collective::AllReduce, Algo::Nccl), nccl);
        models.insert((Collective::AllReduce, Algo::OneShotPush), push);
        let mut backend = SyntheticBackend::new(config);
        let mut settings = small_settings();
        settings.min_bytes = 1024;
        settings.max_bytes = 1536;
        let outcome = sweep(&mut backend, &settings, "2026-01-01", &mut Quiet).unwrap();
        let points = &outcome.evidence.keys[0].points;
        let three_rounds = 3 * settings.reps.samples as usize;
        let samples = |bytes, algo| {
            let p = points.iter().find(|p| p.bytes == bytes && p.algo == algo);
            let s = &p.unwrap().samples_us;
            s[..three_rounds.min(s.len())].to_vec()
        };
        for bytes in [1024, 1536] {
            let (n, p) = (
                samples(bytes, Algo::Nccl),
                samples(bytes, Algo::OneShotPush),
            );
            let r = stats::ratio(&n, &p, 0.95).unwrap();
            assert!(
                r.low < 1.0 && 1.0 < r.high,
                "decided at {bytes} ({r:?}): not the case meant"
            );
        }
        let probes: Vec<u64> = points
            .iter()
            .filter(|p| p.origin == PointOrigin::Bisect)
            .map(|p| p.bytes)
            .collect();
        assert!(
            probes.iter().any(|&b| (b as f64 / at - 1.0).abs() < 0.05),
            "no probe near {at}: {probes:?}"
        );
    }
}
