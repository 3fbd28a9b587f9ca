//! A backend that answers from a recorded sweep's evidence, so that today's
//! sweep and `verify` can be run on a machine that was measured once: their
//! probing and extra rounds costed, their bands compared, without a GPU.
//!
//! At a measured size a sample is drawn from that point's own samples; between
//! measured sizes the median is interpolated (log-log) and the spread is the
//! nearest point's, so the replay has the real machine's noise. Time follows
//! the GPU backend's cost model (a set-up per timing call, the calls
//! themselves at their median, a check once per size for both modes), scaled
//! so that the recorded sweep's own calls cost the seconds its log reports.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use policy::{Algo, Band, Collective, DType, TableKey};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tuner::backend::{Backend, BackendError, PlatformDesc, Repetitions, Validated};
use tuner::evidence::Evidence;

/// A recorded sweep: its evidence, and what its log says of it. When the
/// evidence file is replaced by a new sweep's, these come from that sweep's
/// log (its last line).
pub struct Recording {
    /// The evidence file, relative to this package's folder.
    pub evidence: &'static str,
    pub date: &'static str,
    pub points: usize,
    /// The measuring time the log reports.
    pub seconds: f64,
}

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
pub struct Recorded {
    pub bytes: u64,
    pub samples: Vec<f64>,
    pub median: f64,
}

pub struct Replay {
    pub evidence: Evidence,
    /// Per key and algorithm, ascending in size.
    pub points: BTreeMap<(TableKey, Algo), Vec<Recorded>>,
    rng: ChaCha8Rng,
    /// Modelled seconds of everything asked so far, unscaled.
    modelled: f64,
    /// Recorded seconds over what the model makes of the recorded sweep.
    scale: f64,
    checked: HashSet<(Collective, u32, DType, Algo, u64)>,
}

impl Replay {
    pub fn new(recording: &Recording, seed: u64) -> Replay {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(recording.evidence);
        let evidence = Evidence::load(&path).unwrap();
        let points: usize = evidence.keys.iter().map(|k| k.points.len()).sum();
        assert!(
            evidence.platform.date == recording.date && points == recording.points,
            "{} is not the sweep of {} ({} points) any more: describe the new sweep's \
             recording from its log",
            recording.evidence,
            recording.date,
            recording.points
        );
        let mut by_algo: BTreeMap<(TableKey, Algo), Vec<Recorded>> = BTreeMap::new();
        for key in &evidence.keys {
            for p in key.points.iter().filter(|p| p.usable()) {
                by_algo
                    .entry((key.key(), p.algo))
                    .or_default()
                    .push(Recorded {
                        bytes: p.bytes,
                        samples: p.samples_us.clone(),
                        median: tuner::stats::median(&p.samples_us),
                    });
            }
        }
        for list in by_algo.values_mut() {
            list.sort_by_key(|p| p.bytes);
        }
        let scale = recording.seconds / recorded_seconds(&evidence);
        Replay {
            evidence,
            points: by_algo,
            rng: ChaCha8Rng::seed_from_u64(seed),
            modelled: 0.0,
            scale,
            checked: HashSet::new(),
        }
    }

    /// The seconds everything asked so far would have taken on the recorded
    /// machine.
    pub fn seconds(&self) -> f64 {
        self.modelled * self.scale
    }

    /// The median at `bytes` (interpolated in log-log between the measured
    /// sizes around it), and the point whose spread the samples take.
    pub fn at(&self, key: TableKey, algo: Algo, bytes: u64) -> Option<(f64, &Recorded)> {
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

    /// The regret of `bands` at every recorded size of `key`, against the
    /// fastest algorithm recorded there (by its recorded median): the
    /// mean and the worst over those sizes. A choice that did not run at
    /// a size (past its capacity) is the collective's fallback there.
    pub fn regret(&self, key: TableKey, bands: &[Band]) -> (f64, f64) {
        let Some(ran) = self.evidence.keys.iter().find(|k| k.key() == key) else {
            return (0.0, 0.0);
        };
        let regrets: Vec<f64> = ran
            .by_size()
            .into_keys()
            .filter_map(|bytes| {
                let recorded = |algo| self.at(key, algo, bytes).filter(|a| a.1.bytes == bytes);
                let best = Algo::ALL
                    .iter()
                    .filter_map(|&algo| recorded(algo).map(|a| a.0))
                    .fold(f64::INFINITY, f64::min);
                let choice = bands
                    .iter()
                    .find(|b| b.max.is_none_or(|m| bytes <= m))?
                    .algo;
                let chosen = recorded(choice).or_else(|| recorded(key.collective.fallback()))?;
                Some(chosen.0 / best - 1.0)
            })
            .collect();
        let worst = regrets.iter().copied().fold(0.0, f64::max);
        let mean = regrets.iter().sum::<f64>() / regrets.len().max(1) as f64;
        (mean, worst)
    }
}

/// What the recorded sweep's calls cost by the model: one timing call per
/// round of `samples`, one check per size for both modes.
fn recorded_seconds(evidence: &Evidence) -> f64 {
    let reps = Repetitions {
        samples: evidence.settings.samples,
        warmup: evidence.settings.warmup,
    };
    let mut seconds = 0.0;
    let mut checked = HashSet::new();
    for key in &evidence.keys {
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
        let mut sizes: Vec<u32> = self.evidence.keys.iter().map(|k| k.world_size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
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
            self.modelled += check_seconds(bytes, key.world_size);
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
        self.modelled += call_seconds(bytes, key.world_size, median, reps);
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
