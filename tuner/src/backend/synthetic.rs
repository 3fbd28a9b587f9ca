//! A measurement backend without a GPU, for tests and demonstrations: every
//! algorithm follows a latency model `t(bytes) = alpha + bytes / bandwidth` (plus
//! an optional step past a cache size), and samples carry multiplicative noise
//! from a seeded ChaCha stream (same seed and same calls → same samples).
//!
//! The noise is median-preserving (`t × exp(σ z)`, `z` Gaussian or, for the
//! heavy-tailed shape, Student-t), so the median of many samples converges on
//! the model and the planted crossovers, which [`SyntheticConfig::planted_steps`]
//! computes exactly, are where the medians cross. An optional drift multiplies
//! every sample by a slow wave over the backend's clock (the samples drawn so
//! far), as a GPU's clocks and temperature move during a run: it moves all
//! algorithms alike, so only measurements taken at different times disagree.

use std::collections::BTreeMap;

use policy::{Algo, Arch, CapacityEntry, Collective, DType, Link, Mode, TableKey};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Backend, BackendError, PlatformDesc, Repetitions, Validated};
use crate::memory::Budget;

/// The latency of one algorithm as a function of the message size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyModel {
    /// Fixed cost per call, µs.
    pub alpha_us: f64,
    /// Bytes moved per µs once the call is under way.
    pub bytes_per_us: f64,
    /// Extra µs per call for messages above a size (a cache or buffer
    /// spilling, a protocol switch).
    pub step: Option<(u64, f64)>,
    /// Bandwidth that saturates: `bytes / (bytes_per_us · (1 − e^(−bytes /
    /// knee)))` instead of `bytes / bytes_per_us` (a pipeline that needs a
    /// few chunks in flight before it runs at full speed).
    pub knee_bytes: Option<f64>,
}

impl LatencyModel {
    pub fn time_us(&self, bytes: u64) -> f64 {
        let step = match self.step {
            Some((above, extra)) if bytes > above => extra,
            _ => 0.0,
        };
        let b = bytes as f64;
        let saturation = self
            .knee_bytes
            .map_or(1.0, |knee| (1.0 - (-b / knee).exp()).max(f64::MIN_POSITIVE));
        self.alpha_us + b / (self.bytes_per_us * saturation) + step
    }
}

/// Lines whose lower envelope switches algorithm exactly at chosen sizes.
///
/// The first algorithm gets `first`; each following algorithm is `gain` times
/// faster per byte than the one before and starts later by exactly what makes
/// the two lines meet at its size. With increasing crossover sizes and gains
/// above 1 the lower envelope is the sequence in order.
pub fn planted_lines(
    first: (Algo, LatencyModel),
    steps: &[(Algo, u64)],
    gain: f64,
) -> Vec<(Algo, LatencyModel)> {
    let mut lines = vec![first];
    for &(algo, at) in steps {
        let previous = lines.last().expect("starts with `first`").1;
        let bytes_per_us = previous.bytes_per_us * gain;
        let at = at as f64;
        let alpha_us = previous.alpha_us + at / previous.bytes_per_us - at / bytes_per_us;
        lines.push((
            algo,
            LatencyModel {
                alpha_us,
                bytes_per_us,
                step: None,
                knee_bytes: None,
            },
        ));
    }
    lines
}

/// The shape of the per-sample noise; its scale is [`SyntheticConfig::noise_cv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoiseShape {
    /// Log-normal: `exp(σ z)`, `z` standard normal, σ² = ln(1 + CV²), so the
    /// coefficient of variation is exactly `noise_cv`.
    LogNormal,
    /// Heavy-tailed: `z` is Student-t with 3 degrees of freedom scaled to unit
    /// variance, with the same σ. Its centre is as wide as the log-normal's
    /// but single samples land far out far more often (a context switch, an
    /// interrupt), which the mean and the standard deviation do not survive.
    HeavyTailed,
}

/// A slow multiplicative wave on every sample, `1 + amplitude · sin(2π n /
/// period + phase)` after `n` samples drawn: clocks and temperature moving
/// during a run. It shifts every algorithm alike, so only measurements taken
/// at different times disagree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drift {
    /// Fraction, e.g. 0.05 for ±5 %.
    pub amplitude: f64,
    /// Samples per cycle.
    pub period_samples: f64,
    /// Radians at the first sample.
    pub phase: f64,
}

/// Everything that defines a synthetic platform.
#[derive(Clone, Debug)]
pub struct SyntheticConfig {
    pub arch: Arch,
    pub link: Link,
    pub world_sizes: Vec<u32>,
    pub capacities: Vec<CapacityEntry>,
    /// Per collective and algorithm. An algorithm without a model is not offered.
    pub models: BTreeMap<(Collective, Algo), LatencyModel>,
    /// Keys with lines of their own (planted crossovers of their own); every
    /// other key uses `models`. Which algorithms are offered is `models`'s
    /// business either way.
    pub key_models: BTreeMap<TableKey, BTreeMap<Algo, LatencyModel>>,
    /// Added to every algorithm's latency in eager mode (a launch costs more
    /// than a graph replay); the same for all, so crossovers do not move.
    pub eager_overhead_us: f64,
    /// Scale of the multiplicative noise, as a coefficient of variation
    /// (0.05 = 5 %; for the heavy-tailed shape, that of the log-normal with
    /// the same σ).
    pub noise_cv: f64,
    pub noise_shape: NoiseShape,
    pub drift: Option<Drift>,
    /// Fraction of samples that are glitches three times too slow.
    pub outlier_rate: f64,
    /// Algorithms whose results are wrong: `verify` fails for them.
    pub broken: Vec<(Collective, Algo)>,
    pub seed: u64,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Per-byte speed-up of each planted algorithm over the one before it.
const PLANTED_GAIN: f64 = 4.0;

/// How far (in octaves, either way) [`SyntheticConfig::planted`] moves each
/// crossover from its nominal size.
pub const PLANTED_SPREAD_OCTAVES: f64 = 0.5;

impl SyntheticConfig {
    /// An H200-like platform with planted crossovers (see [`planted_lines`])
    /// and the default capacities, at the given noise level. Every key (world
    /// size, dtype, mode) has crossovers of its own, each at a seeded random
    /// size within half an octave of its nominal one
    /// ([`planted_crossovers`]): they fall between the sweep's grid points,
    /// as on real hardware, and are exactly known
    /// ([`SyntheticConfig::planted_steps`]).
    pub fn planted(noise_cv: f64, seed: u64) -> SyntheticConfig {
        let mut config = SyntheticConfig::nominal(noise_cv, seed);
        let start = nominal_start();
        let mut positions = ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        // The fused collective draws from a stream of its own, so that the
        // all-reduce and all-gather keys keep the positions they had before
        // it was planted.
        let mut fused_positions = ChaCha8Rng::seed_from_u64(seed ^ 0x2545_f491_4f6c_dd1d);
        for &world_size in &config.world_sizes {
            for collective in Collective::ALL {
                for dtype in DType::ALL {
                    for mode in Mode::ALL {
                        let key = TableKey {
                            collective,
                            world_size,
                            dtype,
                            mode,
                        };
                        let (first, steps) = planted_crossovers(collective);
                        let positions = match collective {
                            Collective::AllReduceAddRmsNorm => &mut fused_positions,
                            Collective::AllReduce | Collective::AllGather => &mut positions,
                        };
                        let moved: Vec<(Algo, u64)> = steps
                            .iter()
                            .map(|&(algo, at)| {
                                let octaves = (positions.random::<f64>() * 2.0 - 1.0)
                                    * PLANTED_SPREAD_OCTAVES;
                                (algo, (at as f64 * octaves.exp2()).round() as u64)
                            })
                            .collect();
                        let lines = planted_lines((first, start), &moved, PLANTED_GAIN);
                        config.key_models.insert(key, lines.into_iter().collect());
                    }
                }
            }
        }
        config
    }

    /// [`SyntheticConfig::planted`] with every crossover at its nominal size
    /// ([`planted_crossovers`]), the same for every key. Those sizes are on
    /// the sweep grid; tests that reshape one collective's lines start here.
    pub fn nominal(noise_cv: f64, seed: u64) -> SyntheticConfig {
        let start = nominal_start();
        let mut models = BTreeMap::new();
        for collective in Collective::ALL {
            let (first, steps) = planted_crossovers(collective);
            for (algo, model) in planted_lines((first, start), steps, PLANTED_GAIN) {
                models.insert((collective, algo), model);
            }
        }
        // Only the planted algorithms are offered (and declared), with the
        // capacities `kernels` assumes when a platform file declares none.
        let capacities = crate::grid::custom_capacities(policy::default_capacity)
            .into_iter()
            .filter(|entry| models.contains_key(&(entry.collective, entry.algo)))
            .collect();
        SyntheticConfig {
            arch: Arch::SM90,
            link: Link::NvLink,
            world_sizes: vec![2, 4, 8],
            capacities,
            models,
            key_models: BTreeMap::new(),
            eager_overhead_us: 4.0,
            noise_cv,
            noise_shape: NoiseShape::LogNormal,
            drift: None,
            outlier_rate: 0.0,
            broken: Vec::new(),
            seed,
        }
    }

    /// Every algorithm identical: any band but one would be noise.
    pub fn pure_noise(noise_cv: f64, seed: u64) -> SyntheticConfig {
        let same = LatencyModel {
            alpha_us: 10.0,
            bytes_per_us: 50_000.0,
            step: None,
            knee_bytes: None,
        };
        let mut config = SyntheticConfig::nominal(noise_cv, seed);
        for model in config.models.values_mut() {
            *model = same;
        }
        config
    }

    /// [`SyntheticConfig::planted`] with the shapes a plain latency and
    /// bandwidth line lacks, drawn per key from the seed: a latency jump in
    /// a middle band's custom algorithm (a buffer switch), NCCL's bandwidth
    /// saturating (`knee_bytes`: NCCL's curve bends, so it can win a middle
    /// range and lose the next to the kernel before it, A, B, A)
    /// with a jump at a protocol switch (below 128 KiB: a jump of NCCL's
    /// nearer its crossovers can hand a range narrower than the grid's step
    /// to another algorithm and back, which no sweep of the grid sees), or
    /// both; and two-shot's all-reduce
    /// capacity at 5 MiB, just above the nominal 4 MiB crossover to NCCL, so
    /// that some keys cross just below it and others are cut by it.
    pub fn shaped(noise_cv: f64, seed: u64) -> SyntheticConfig {
        let mut config = SyntheticConfig::planted(noise_cv, seed);
        for entry in &mut config.capacities {
            if entry.collective == Collective::AllReduce && entry.algo == Algo::TwoShotPull {
                entry.capacity.max_bytes = 5 * MIB;
            }
        }
        let mut shapes = ChaCha8Rng::seed_from_u64(seed ^ 0x5851_f42d_4c95_7f2d);
        let keys: Vec<TableKey> = config.key_models.keys().copied().collect();
        for key in keys {
            let (_, steps) = config.planted_steps(key);
            let models = config.key_models.get_mut(&key).expect("listed above");
            let kind = shapes.random_range(0..4u32);
            if kind & 1 == 1 {
                // A buffer switch: a latency jump of 2–10 % in a middle
                // band's algorithm, which moves its crossovers (a jump too
                // large for the bisection's resolution would cost regret
                // inside its last bracket whatever the fit does).
                let i = shapes.random_range(1..steps.len());
                let jumper = models.get_mut(&steps[i - 1].0).expect("planted");
                let at = steps[i - 1].1 * shapes.random_range(0.3f64..1.5).exp2();
                let extra = jumper.time_us(at as u64) * shapes.random_range(0.02..0.1);
                jumper.step = Some((at as u64, extra));
            }
            if kind & 2 == 2 {
                // NCCL pipelines (the fused collective's unfused path runs an
                // all-reduce): a knee, and a jump where its protocol switches.
                let nccl = models.get_mut(&key.collective.fallback()).expect("planted");
                let knee = (shapes.random_range(64.0f64..1024.0) * 1024.0).round();
                nccl.knee_bytes = Some(knee);
                nccl.bytes_per_us *= shapes.random_range(1.2..2.5);
                let at = (shapes.random_range(16.0f64..128.0) * 1024.0) as u64;
                nccl.step = Some((at, nccl.alpha_us * shapes.random_range(0.05..0.3)));
            }
        }
        config
    }

    /// The model of `algo` for `key`: the key's own, else the collective's.
    pub fn model(&self, key: TableKey, algo: Algo) -> Option<LatencyModel> {
        match self.key_models.get(&key) {
            Some(models) => models.get(&algo).copied(),
            None => self.models.get(&(key.collective, algo)).copied(),
        }
    }

    /// The planted sequence of `key`: its first algorithm, then each next one
    /// with the size (in bytes, not rounded to a size anyone measures) from
    /// which it is fastest. Derived from the lines, so it is exact for
    /// [`SyntheticConfig::planted`] and [`SyntheticConfig::nominal`] alike.
    pub fn planted_steps(&self, key: TableKey) -> (Algo, Vec<(Algo, f64)>) {
        let (first, steps) = planted_crossovers(key.collective);
        let mut below = first;
        let mut out = Vec::new();
        for &(above, _) in steps {
            if let (Some(a), Some(b)) = (self.model(key, below), self.model(key, above)) {
                out.push((above, crossing(&a, &b)));
            }
            below = above;
        }
        (first, out)
    }
}

/// The first planted line: a small fixed cost and a low bandwidth.
fn nominal_start() -> LatencyModel {
    LatencyModel {
        alpha_us: 3.0,
        bytes_per_us: 4000.0,
        step: None,
        knee_bytes: None,
    }
}

/// Where line `b` (the faster per byte) meets line `a`.
fn crossing(a: &LatencyModel, b: &LatencyModel) -> f64 {
    (b.alpha_us - a.alpha_us) / (1.0 / a.bytes_per_us - 1.0 / b.bytes_per_us)
}

/// The nominal planted sequence per collective: the first algorithm, then each
/// next one with the size from which it is fastest.
pub fn planted_crossovers(collective: Collective) -> (Algo, &'static [(Algo, u64)]) {
    match collective {
        Collective::AllReduce => (Algo::OneShotPush, PLANTED_ALL_REDUCE),
        Collective::AllGather => (Algo::OneShotPush, PLANTED_ALL_GATHER),
        Collective::AllReduceAddRmsNorm => (Algo::OneShotPush, PLANTED_FUSED),
    }
}

/// All-reduce: push until 32 KiB, pull until 256 KiB, two-shot until 4 MiB, then NCCL.
pub const PLANTED_ALL_REDUCE: &[(Algo, u64)] = &[
    (Algo::OneShotPull, 32 * KIB),
    (Algo::TwoShotPull, 256 * KIB),
    (Algo::Nccl, 4 * MIB),
];

/// All-gather: push until 12 KiB, pull until 768 KiB, then NCCL.
pub const PLANTED_ALL_GATHER: &[(Algo, u64)] =
    &[(Algo::OneShotPull, 12 * KIB), (Algo::Nccl, 768 * KIB)];

/// The fused all-reduce + add + RMSNorm: one-shot until 128 KiB, two-shot
/// until 2 MiB, then the unfused path.
pub const PLANTED_FUSED: &[(Algo, u64)] =
    &[(Algo::TwoShotPush, 128 * KIB), (Algo::Unfused, 2 * MIB)];

/// The seeded model-based backend.
pub struct SyntheticBackend {
    config: SyntheticConfig,
    rng: ChaCha8Rng,
    /// Samples drawn so far: the clock the drift follows.
    clock: u64,
    /// The budget its modelled worlds are built within.
    memory_budget: Option<Budget>,
}

impl SyntheticBackend {
    pub fn new(config: SyntheticConfig) -> SyntheticBackend {
        SyntheticBackend {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            clock: 0,
            memory_budget: None,
        }
    }

    /// The same backend, whose modelled worlds take their capacities capped
    /// by `budget` (and decline past them, as `kernels`' do).
    pub fn within(mut self, budget: Option<Budget>) -> SyntheticBackend {
        self.memory_budget = budget;
        self
    }

    /// The noiseless latency of `algo` for `key` at `bytes`.
    pub fn model_time_us(&self, key: TableKey, algo: Algo, bytes: u64) -> Option<f64> {
        let model = self.config.model(key, algo)?;
        let overhead = match key.mode {
            Mode::Graph => 0.0,
            Mode::Eager => self.config.eager_overhead_us,
        };
        Some(model.time_us(bytes) + overhead)
    }

    /// A standard normal draw (Box-Muller on two uniforms in (0, 1]).
    fn standard_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.rng.random::<f64>();
        let u2 = self.rng.random::<f64>();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    fn noise_factor(&mut self) -> f64 {
        // σ² = ln(1 + CV²): the log-normal with this σ has the requested CV
        // and median 1.
        let sigma = (1.0 + self.config.noise_cv.powi(2)).ln().sqrt();
        let z = match self.config.noise_shape {
            NoiseShape::LogNormal => self.standard_normal(),
            NoiseShape::HeavyTailed => {
                // Student-t with 3 degrees of freedom (variance 3), scaled to 1.
                let z = self.standard_normal();
                let chi2: f64 = (0..3).map(|_| self.standard_normal().powi(2)).sum();
                z / (chi2 / 3.0).sqrt() / 3f64.sqrt()
            }
        };
        let glitch = if self.config.outlier_rate > 0.0
            && self.rng.random::<f64>() < self.config.outlier_rate
        {
            3.0
        } else {
            1.0
        };
        let drift = match self.config.drift {
            Some(d) => {
                let turn = self.clock as f64 / d.period_samples.max(1.0);
                1.0 + d.amplitude * (std::f64::consts::TAU * turn + d.phase).sin()
            }
            None => 1.0,
        };
        self.clock += 1;
        (sigma * z).exp() * glitch * drift
    }
}

impl Backend for SyntheticBackend {
    fn platform(&self) -> PlatformDesc {
        PlatformDesc {
            arch: self.config.arch,
            link: self.config.link,
            gpu: "synthetic".to_string(),
            backend: "synthetic".to_string(),
            driver: None,
            cuda: None,
            nccl: None,
            host: None,
            capacities: self.config.capacities.clone(),
        }
    }

    fn world_sizes(&self) -> Vec<u32> {
        self.config.world_sizes.clone()
    }

    fn memory_budget(&self) -> Option<Budget> {
        self.memory_budget
    }

    fn candidates(&self, collective: Collective, world_size: u32, bytes: u64) -> Vec<Algo> {
        crate::grid::candidates(&self.capacities(world_size), collective, world_size, bytes)
            .into_iter()
            .filter(|&algo| self.config.models.contains_key(&(collective, algo)))
            .collect()
    }

    fn validate(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
    ) -> Result<Validated, BackendError> {
        let caps = self.capacities(key.world_size);
        if algo.is_custom()
            && !crate::grid::candidates(&caps, key.collective, key.world_size, bytes)
                .contains(&algo)
        {
            return Err(BackendError(format!(
                "{} declined {bytes} bytes: past its capacity in this world",
                algo.name()
            )));
        }
        if self.config.broken.contains(&(key.collective, algo)) {
            return Err(BackendError(format!(
                "{} returned a wrong sum at {bytes} bytes (synthetic fault)",
                algo.name()
            )));
        }
        Ok(Validated::Yes)
    }

    fn measure(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> Result<Vec<f64>, BackendError> {
        let t = self
            .model_time_us(key, algo, bytes)
            .ok_or_else(|| BackendError(format!("no model for {}", algo.name())))?;
        Ok((0..reps.samples).map(|_| t * self.noise_factor()).collect())
    }

    fn estimated_point_seconds(
        &self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> f64 {
        // What the modelled GPU would spend; the simulation itself is instant.
        let t = self.model_time_us(key, algo, bytes).unwrap_or(0.0);
        t * f64::from(reps.samples + reps.warmup) * 1e-6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::DType;

    fn key(collective: Collective) -> TableKey {
        TableKey {
            collective,
            world_size: 8,
            dtype: DType::Bf16,
            mode: Mode::Graph,
        }
    }

    /// The exact size at which `faster_above` becomes faster than
    /// `faster_below` (where the collective's shared lines cross), if they
    /// cross at a positive size.
    fn crossover(
        config: &SyntheticConfig,
        collective: Collective,
        faster_below: Algo,
        faster_above: Algo,
    ) -> Option<f64> {
        let a = config.models.get(&(collective, faster_below))?;
        let b = config.models.get(&(collective, faster_above))?;
        let per_byte_gap = 1.0 / a.bytes_per_us - 1.0 / b.bytes_per_us;
        let at = crossing(a, b);
        (per_byte_gap > 0.0 && at > 0.0).then_some(at)
    }

    #[test]
    fn nominal_crossovers_are_exact() {
        let config = SyntheticConfig::nominal(0.0, 1);
        let (first, steps) = planted_crossovers(Collective::AllReduce);
        let mut below = first;
        for &(above, at) in steps {
            let x = crossover(&config, Collective::AllReduce, below, above).unwrap();
            assert!(
                (x - at as f64).abs() < 1e-6 * at as f64,
                "{below:?}→{above:?} at {x}, planted {at}"
            );
            below = above;
        }
    }

    #[test]
    fn the_lower_envelope_follows_the_planted_order() {
        let backend = SyntheticBackend::new(SyntheticConfig::nominal(0.0, 1));
        let k = key(Collective::AllReduce);
        let fastest = |bytes: u64| {
            Collective::AllReduce
                .algos()
                .iter()
                .copied()
                // An algorithm without a planted model is not offered.
                .filter(|&a| backend.model_time_us(k, a, bytes).is_some())
                .min_by(|&a, &b| {
                    let ta = backend.model_time_us(k, a, bytes).unwrap();
                    let tb = backend.model_time_us(k, b, bytes).unwrap();
                    ta.total_cmp(&tb)
                })
                .unwrap()
        };
        assert_eq!(fastest(16), Algo::OneShotPush);
        assert_eq!(fastest(31 * KIB), Algo::OneShotPush);
        assert_eq!(fastest(33 * KIB), Algo::OneShotPull);
        assert_eq!(fastest(255 * KIB), Algo::OneShotPull);
        assert_eq!(fastest(257 * KIB), Algo::TwoShotPull);
        assert_eq!(fastest(4 * MIB - KIB), Algo::TwoShotPull);
        assert_eq!(fastest(4 * MIB + KIB), Algo::Nccl);
        assert_eq!(fastest(256 * MIB), Algo::Nccl);
    }

    /// The algorithm with the lowest noiseless latency.
    fn fastest(backend: &SyntheticBackend, k: TableKey, bytes: u64) -> Algo {
        k.collective
            .algos()
            .iter()
            .copied()
            .filter_map(|a| backend.model_time_us(k, a, bytes).map(|t| (a, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
            .0
    }

    #[test]
    fn planted_crossovers_are_per_key_seeded_and_exact() {
        let config = SyntheticConfig::planted(0.0, 7);
        let backend = SyntheticBackend::new(config.clone());
        let mut seen = Vec::new();
        for &k in config.key_models.keys() {
            let (first, steps) = config.planted_steps(k);
            let (nominal_first, nominal) = planted_crossovers(k.collective);
            assert_eq!(first, nominal_first);
            assert_eq!(steps.len(), nominal.len());
            let mut below = first;
            for (&(algo, at), &(nominal_algo, nominal_at)) in steps.iter().zip(nominal) {
                assert_eq!(algo, nominal_algo);
                let octaves = (at / nominal_at as f64).log2();
                assert!(octaves.abs() <= PLANTED_SPREAD_OCTAVES + 1e-9, "{k} {at}");
                // Just below the crossover the previous algorithm is fastest,
                // just above this one.
                assert_eq!(fastest(&backend, k, (at * 0.999) as u64), below, "{k}");
                assert_eq!(fastest(&backend, k, (at * 1.001) as u64 + 1), algo, "{k}");
                below = algo;
            }
            seen.push(steps[0].1);
        }
        // 54 keys, each with its own positions.
        assert_eq!(seen.len(), 54);
        seen.sort_by(f64::total_cmp);
        seen.dedup();
        assert!(seen.len() > 45, "positions repeat: {seen:?}");
        let other = SyntheticConfig::planted(0.0, 8);
        assert_ne!(
            config.key_models, other.key_models,
            "another seed, other positions"
        );
    }

    #[test]
    fn heavy_tails_keep_the_median_and_the_centre_but_not_the_extremes() {
        let k = key(Collective::AllReduce);
        let reps = Repetitions {
            samples: 20_000,
            warmup: 0,
        };
        let draw = |shape| {
            let mut config = SyntheticConfig::nominal(0.1, 9);
            config.noise_shape = shape;
            let mut b = SyntheticBackend::new(config);
            let t = b.model_time_us(k, Algo::Nccl, MIB).unwrap();
            let s: Vec<f64> = b
                .measure(k, Algo::Nccl, MIB, reps)
                .unwrap()
                .into_iter()
                .map(|x| x / t)
                .collect();
            s
        };
        let normal = draw(NoiseShape::LogNormal);
        let heavy = draw(NoiseShape::HeavyTailed);
        for s in [&normal, &heavy] {
            assert!((crate::stats::median(s) - 1.0).abs() < 0.01);
        }
        // Beyond 1.5 (four σ of the log-normal) almost nothing of the
        // log-normal, but a visible share of the heavy-tailed samples.
        let far = |s: &[f64]| s.iter().filter(|&&x| x > 1.5).count();
        assert!(far(&normal) <= 2, "{}", far(&normal));
        assert!(far(&heavy) >= 20, "{}", far(&heavy));
    }

    #[test]
    fn drift_moves_every_algorithm_alike_over_time() {
        let k = key(Collective::AllReduce);
        let mut config = SyntheticConfig::nominal(0.0, 3);
        config.drift = Some(Drift {
            amplitude: 0.1,
            period_samples: 400.0,
            phase: 0.0,
        });
        let mut b = SyntheticBackend::new(config);
        let reps = Repetitions {
            samples: 50,
            warmup: 0,
        };
        let t = b.model_time_us(k, Algo::Nccl, MIB).unwrap();
        let rounds: Vec<f64> = (0..8)
            .map(|_| crate::stats::median(&b.measure(k, Algo::Nccl, MIB, reps).unwrap()) / t)
            .collect();
        let (low, high) = rounds
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
        assert!(high - low > 0.1, "one cycle spans ±10%: {rounds:?}");
        assert!(low > 0.89 && high < 1.11, "{rounds:?}");
        // Two algorithms measured in the same instant drift together.
        let push = b.measure(k, Algo::OneShotPush, MIB, reps).unwrap();
        let nccl = b.measure(k, Algo::Nccl, MIB, reps).unwrap();
        let ratio = |s: &[f64], a| crate::stats::median(s) / b.model_time_us(k, a, MIB).unwrap();
        assert!((ratio(&push, Algo::OneShotPush) / ratio(&nccl, Algo::Nccl) - 1.0).abs() < 0.1);
    }

    #[test]
    fn same_seed_same_samples() {
        let reps = Repetitions {
            samples: 20,
            warmup: 0,
        };
        let k = key(Collective::AllGather);
        let draw = |seed| {
            let mut b = SyntheticBackend::new(SyntheticConfig::planted(0.1, seed));
            b.measure(k, Algo::Nccl, 4096, reps).unwrap()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn noise_has_the_requested_spread_and_median() {
        let mut b = SyntheticBackend::new(SyntheticConfig::nominal(0.1, 9));
        let k = key(Collective::AllReduce);
        let samples = b
            .measure(
                k,
                Algo::Nccl,
                MIB,
                Repetitions {
                    samples: 20_000,
                    warmup: 0,
                },
            )
            .unwrap();
        let t = b.model_time_us(k, Algo::Nccl, MIB).unwrap();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let sd =
            (samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / samples.len() as f64).sqrt();
        assert!((crate::stats::median(&samples) / t - 1.0).abs() < 0.01);
        assert!((sd / mean - 0.1).abs() < 0.01, "cv {}", sd / mean);
    }

    #[test]
    fn broken_algorithms_fail_verification() {
        let mut config = SyntheticConfig::planted(0.0, 1);
        config
            .broken
            .push((Collective::AllReduce, Algo::OneShotPull));
        let mut b = SyntheticBackend::new(config);
        let k = key(Collective::AllReduce);
        assert!(b.validate(k, Algo::OneShotPull, 4096).is_err());
        assert!(b.validate(k, Algo::OneShotPush, 4096).is_ok());
    }
}
