//! The world-size-2 sweep on 2 x H200, replayed: a backend that answers from
//! the committed evidence of the 2026-12-01 sweep
//! (`tuned/sm90-nvlink.evidence.json`: 2449 points measured in 2m 21s, per
//! `tuner/runs/2026-12-01-h200-x2/sweep-ws2-final.log`; see `RECORDED_*`
//! below when that file is replaced) runs today's sweep
//! and `verify`, so their probing and extra rounds can be costed, and their
//! bands compared, without a GPU.
//!
//! At a measured size a sample is drawn from that point's own samples; between
//! measured sizes the median is interpolated (log-log) and the spread is the
//! nearest point's, so the replay has the real machine's noise, eager NCCL's
//! 20 % included. Time follows the GPU backend's cost model (a set-up per
//! timing call, the calls themselves at their median, a check once per size
//! for both modes), scaled so that the recorded sweep's own calls cost the
//! 141 s its log reports.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use policy::{Algo, Band, Collective, DType, TableKey};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tuner::backend::{Backend, BackendError, PlatformDesc, Repetitions, Validated};
use tuner::evidence::Evidence;
use tuner::fit::{FitSettings, fit};
use tuner::observe::{Quiet, RunStatus};
use tuner::sweep::{SweepSettings, sweep};
use tuner::verify::{Verdict, VerifySettings, verify};

const EVIDENCE: &str = "../tuned/sm90-nvlink.evidence.json";
const TABLE: &str = "../tuned/sm90-nvlink.toml";

/// The recorded sweep behind `EVIDENCE`: its date, its points, and the
/// measuring time its log reports. When the evidence is replaced by a new
/// sweep, these come from that sweep's log (its last line).
const RECORDED_DATE: &str = "2026-12-01";
const RECORDED_POINTS: usize = 2449;
const RECORDED_SECONDS: f64 = 141.0;

/// The GPU backend's costs (`backend/gpu.rs`): inputs generated and uploaded
/// for every timing call, and a host check once per size and algorithm.
fn setup_seconds(bytes: u64, world_size: u32) -> f64 {
    0.004 + bytes as f64 * f64::from(world_size) * 2e-9
}

fn check_seconds(bytes: u64, world_size: u32) -> f64 {
    if bytes <= 64 << 20 {
        0.003 + bytes as f64 * f64::from(world_size) * 4e-9
    } else {
        0.0
    }
}

/// Calls per sample, as the GPU backend chooses them.
fn calls_per_sample(bytes: u64) -> f64 {
    (200.0 / (10.0 + bytes as f64 / 20_000.0))
        .round()
        .clamp(1.0, 32.0)
}

/// One timing call: the set-up, warm-up, one untimed round and the samples.
fn call_seconds(bytes: u64, world_size: u32, median_us: f64, reps: Repetitions) -> f64 {
    let calls = calls_per_sample(bytes) * f64::from(reps.samples + reps.warmup.max(1) + 1);
    setup_seconds(bytes, world_size) + calls * median_us * 1e-6
}

/// One measured point of the evidence.
struct Recorded {
    bytes: u64,
    samples: Vec<f64>,
    median: f64,
}

struct Replay {
    evidence: Evidence,
    /// Per key and algorithm, ascending in size.
    points: BTreeMap<(TableKey, Algo), Vec<Recorded>>,
    rng: ChaCha8Rng,
    /// Modelled seconds of everything asked so far.
    seconds: f64,
    checked: HashSet<(Collective, u32, DType, Algo, u64)>,
}

impl Replay {
    fn new(seed: u64) -> Replay {
        let evidence = Evidence::load(Path::new(EVIDENCE)).unwrap();
        let points: usize = evidence.keys.iter().map(|k| k.points.len()).sum();
        assert!(
            evidence.platform.date == RECORDED_DATE && points == RECORDED_POINTS,
            "{EVIDENCE} is not the sweep of {RECORDED_DATE} ({RECORDED_POINTS} points) any more: \
             set RECORDED_DATE, RECORDED_POINTS and RECORDED_SECONDS from the new sweep's log"
        );
        let mut points: BTreeMap<(TableKey, Algo), Vec<Recorded>> = BTreeMap::new();
        for key in &evidence.keys {
            for p in key.points.iter().filter(|p| p.usable()) {
                points
                    .entry((key.key(), p.algo))
                    .or_default()
                    .push(Recorded {
                        bytes: p.bytes,
                        samples: p.samples_us.clone(),
                        median: tuner::stats::median(&p.samples_us),
                    });
            }
        }
        for list in points.values_mut() {
            list.sort_by_key(|p| p.bytes);
        }
        Replay {
            evidence,
            points,
            rng: ChaCha8Rng::seed_from_u64(seed),
            seconds: 0.0,
            checked: HashSet::new(),
        }
    }

    /// The median at `bytes` (interpolated in log-log between the measured
    /// sizes around it), and the point whose spread the samples take.
    fn at(&self, key: TableKey, algo: Algo, bytes: u64) -> Option<(f64, &Recorded)> {
        let list = self.points.get(&(key, algo))?;
        let above = list.iter().position(|p| p.bytes >= bytes)?;
        let hi = &list[above];
        if hi.bytes == bytes || above == 0 {
            return Some((hi.median, hi));
        }
        let lo = &list[above - 1];
        let ln = |b: u64| (b as f64).ln();
        let w = (ln(bytes) - ln(lo.bytes)) / (ln(hi.bytes) - ln(lo.bytes));
        let median = (lo.median.ln() * (1.0 - w) + hi.median.ln() * w).exp();
        Some((median, if w < 0.5 { lo } else { hi }))
    }

    /// What the recorded sweep's calls cost by the same model: one timing
    /// call per round of `samples`, one check per size for both modes.
    fn recorded_seconds(&self) -> f64 {
        let reps = Repetitions {
            samples: self.evidence.settings.samples,
            warmup: self.evidence.settings.warmup,
        };
        let mut seconds = 0.0;
        let mut checked = HashSet::new();
        for key in &self.evidence.keys {
            let k = key.key();
            for p in &key.points {
                if checked.insert((k.collective, k.world_size, k.dtype, p.algo, p.bytes)) {
                    seconds += check_seconds(p.bytes, k.world_size);
                }
                if p.samples_us.is_empty() {
                    continue;
                }
                let rounds = p.samples_us.len().div_ceil(reps.samples as usize);
                let median = tuner::stats::median(&p.samples_us);
                seconds += rounds as f64 * call_seconds(p.bytes, k.world_size, median, reps);
            }
        }
        seconds
    }
}

impl Backend for Replay {
    fn platform(&self) -> PlatformDesc {
        let p = &self.evidence.platform;
        PlatformDesc {
            arch: p.arch,
            link: p.link,
            gpu: p.gpu.clone(),
            backend: "replay".to_string(),
            driver: None,
            cuda: None,
            nccl: None,
            host: None,
            capacities: p.capacities.clone(),
        }
    }

    fn world_sizes(&self) -> Vec<u32> {
        vec![2]
    }

    fn validate(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
    ) -> Result<Validated, BackendError> {
        if self
            .checked
            .insert((key.collective, key.world_size, key.dtype, algo, bytes))
        {
            self.seconds += check_seconds(bytes, key.world_size);
        }
        match self.at(key, algo, bytes) {
            Some(_) => Ok(Validated::Yes),
            None => Err(BackendError(format!(
                "{} was not measured at or above {bytes} bytes",
                algo.name()
            ))),
        }
    }

    fn measure(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> Result<Vec<f64>, BackendError> {
        let (median, source) = self
            .at(key, algo, bytes)
            .ok_or_else(|| BackendError(format!("{} not in the evidence", algo.name())))?;
        // The source point's spread around its median, at this median.
        let spread: Vec<f64> = source.samples.iter().map(|s| s / source.median).collect();
        self.seconds += call_seconds(bytes, key.world_size, median, reps);
        Ok((0..reps.samples)
            .map(|_| median * spread[self.rng.random_range(0..spread.len())])
            .collect())
    }

    fn estimated_point_seconds(
        &self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> f64 {
        let median = self.at(key, algo, bytes).map_or(10.0, |a| a.0);
        call_seconds(bytes, key.world_size, median, reps)
    }
}

fn committed() -> tuned_schema::Document {
    let text = std::fs::read_to_string(TABLE).unwrap();
    tuned_schema::validate::parse_document(TABLE, &text).unwrap()
}

/// Over the recorded sizes where the two tables choose differently and both
/// choices ran: the mean of `ln(t_replayed / t_committed)` (negative is a
/// gain) and how many such sizes there are.
fn difference(
    replay: &Replay,
    key: TableKey,
    committed: &[Band],
    replayed: &[Band],
) -> (f64, usize) {
    let choice = |bands: &[Band], bytes: u64| {
        bands
            .iter()
            .find(|b| b.max.is_none_or(|m| bytes <= m))
            .unwrap()
            .algo
    };
    let logs: Vec<f64> = replay.points[&(key, Algo::Nccl)]
        .iter()
        .map(|p| p.bytes)
        .filter_map(|s| {
            let (old, new) = (choice(committed, s), choice(replayed, s));
            (old != new).then_some(())?;
            Some((replay.at(key, new, s)?.0 / replay.at(key, old, s)?.0).ln())
        })
        .collect();
    let mean = logs.iter().sum::<f64>() / logs.len().max(1) as f64;
    (mean.exp() - 1.0, logs.len())
}

/// Today's sweep of world size 2 costs less than 3 minutes on the machine
/// the evidence was recorded on, and finds tables as good as the committed
/// one: where the two choose differently (the algorithms there are within a
/// few percent and alternate), the replayed choice costs less than 2 % on
/// average either way.
#[test]
fn the_world_size_2_sweep_stays_within_three_minutes_and_finds_the_same_bands() {
    let mut replay = Replay::new(1);
    let scale = RECORDED_SECONDS / replay.recorded_seconds();
    let settings = SweepSettings {
        world_sizes: vec![2],
        ..SweepSettings::default()
    };
    let outcome = sweep(&mut replay, &settings, "2026-12-01", &mut Quiet).unwrap();
    assert_eq!(outcome.status, RunStatus::Complete);
    let points = outcome.evidence.keys.iter().flat_map(|k| &k.points);
    let samples: usize = points.clone().map(|p| p.samples_us.len()).sum();
    let seconds = replay.seconds * scale;
    println!(
        "replayed world-size-2 sweep: {} points, {samples} samples, about {seconds:.0} s (recorded: {RECORDED_POINTS} points in {RECORDED_SECONDS} s)",
        points.count()
    );
    let result = fit(&outcome.evidence, &FitSettings::default());
    let doc = committed();
    for fitted in &result.keys {
        let before = &doc
            .tables
            .iter()
            .find(|t| t.key == fitted.key)
            .unwrap()
            .bands;
        let (mean, sizes) = difference(&replay, fitted.key, before, &fitted.bands);
        println!("{}", fitted.key);
        println!("  committed {}", tuner::format::bands(before));
        println!("  replayed  {}", tuner::format::bands(&fitted.bands));
        println!(
            "  {sizes} recorded sizes choose differently, at {:+.2}% on average",
            mean * 100.0
        );
        assert!(mean.abs() <= 0.02, "{}: {:+.2}%", fitted.key, mean * 100.0);
    }
    assert!(seconds < 180.0, "{seconds:.0} s");
}

/// `verify` of the committed table, with its edge sizes and interleaved
/// rounds, on the same replay: it passes (the replayed machine is the one the
/// table was fitted on) and says how long it would take.
#[test]
fn verify_of_the_committed_table_passes_on_the_replay() {
    let mut replay = Replay::new(2);
    let scale = RECORDED_SECONDS / replay.recorded_seconds();
    // The replay holds the recorded all-reduce and all-gather measurements.
    let settings = VerifySettings {
        world_sizes: vec![2],
        collectives: vec![Collective::AllReduce, Collective::AllGather],
        ..VerifySettings::default()
    };
    let report = verify(&mut replay, &committed(), &settings, &mut Quiet).unwrap();
    print!("{}", report.render());
    println!("about {:.0} s", replay.seconds * scale);
    assert_eq!(report.keys.len(), 12);
    assert_eq!(report.verdict(), Some(Verdict::Pass), "{}", report.render());
    assert!(report.keys.iter().all(|k| k.edges.sizes >= 8));
}
