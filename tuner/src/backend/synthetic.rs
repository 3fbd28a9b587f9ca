//! A measurement backend without a GPU, for tests and demonstrations: every
//! algorithm follows a latency model `t(bytes) = alpha + bytes / bandwidth` (plus
//! an optional step past a cache size), and samples carry multiplicative
//! log-normal noise of a chosen coefficient of variation, from a seeded ChaCha
//! stream (same seed and same calls → same samples).
//!
//! The noise is median-preserving (`t × exp(σ z)`), so the median of many
//! samples converges on the model and the planted crossovers, which
//! [`SyntheticBackend::crossover`] computes exactly, are where the medians cross.

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use statrs::distribution::{ContinuousCDF, Normal};
use tuned_schema::{Algo, Arch, Capacity, CapacityEntry, Collective, Link, Mode, TableKey};

use super::{Backend, BackendError, PlatformDesc, Repetitions, Validated};

/// The latency of one algorithm as a function of the message size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyModel {
    /// Fixed cost per call, µs.
    pub alpha_us: f64,
    /// Bytes moved per µs once the call is under way.
    pub bytes_per_us: f64,
    /// Extra µs per call for messages above a size (a cache or buffer spilling).
    pub step: Option<(u64, f64)>,
}

impl LatencyModel {
    pub fn time_us(&self, bytes: u64) -> f64 {
        let step = match self.step {
            Some((above, extra)) if bytes > above => extra,
            _ => 0.0,
        };
        self.alpha_us + bytes as f64 / self.bytes_per_us + step
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
            },
        ));
    }
    lines
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
    /// Added to every algorithm's latency in eager mode (a launch costs more
    /// than a graph replay); the same for all, so crossovers do not move.
    pub eager_overhead_us: f64,
    /// Coefficient of variation of the multiplicative noise (0.05 = 5 %).
    pub noise_cv: f64,
    /// Fraction of samples that are glitches three times too slow.
    pub outlier_rate: f64,
    /// Algorithms whose results are wrong: `verify` fails for them.
    pub broken: Vec<(Collective, Algo)>,
    pub seed: u64,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

impl SyntheticConfig {
    /// An H200-like platform with planted crossovers (see [`planted_lines`]) and the
    /// default capacities, at the given noise level.
    pub fn planted(noise_cv: f64, seed: u64) -> SyntheticConfig {
        let start = LatencyModel {
            alpha_us: 3.0,
            bytes_per_us: 4000.0,
            step: None,
        };
        let mut models = BTreeMap::new();
        for collective in Collective::ALL {
            let (first, steps) = planted_crossovers(collective);
            for (algo, model) in planted_lines((first, start), steps, 4.0) {
                models.insert((collective, algo), model);
            }
        }
        // Only the planted algorithms are offered (and declared).
        let capacities = default_capacities()
            .into_iter()
            .filter(|entry| models.contains_key(&(entry.collective, entry.algo)))
            .collect();
        SyntheticConfig {
            arch: Arch::SM90,
            link: Link::NvLink,
            world_sizes: vec![2, 4, 8],
            capacities,
            models,
            eager_overhead_us: 4.0,
            noise_cv,
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
        };
        let mut config = SyntheticConfig::planted(noise_cv, seed);
        for model in config.models.values_mut() {
            *model = same;
        }
        config
    }
}

/// The planted sequence per collective: the first algorithm, then each next one
/// with the size from which it is fastest.
pub fn planted_crossovers(collective: Collective) -> (Algo, &'static [(Algo, u64)]) {
    match collective {
        Collective::AllReduce => (Algo::OneShotPush, PLANTED_ALL_REDUCE),
        Collective::AllGather => (Algo::OneShotPush, PLANTED_ALL_GATHER),
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

/// The capacities `kernels` assumes when a platform file declares none.
pub fn default_capacities() -> Vec<CapacityEntry> {
    let mut entries = Vec::new();
    for collective in Collective::ALL {
        for &algo in collective.algos() {
            if algo.is_custom() {
                entries.push(CapacityEntry {
                    collective,
                    algo,
                    capacity: tuned_schema::default_capacity(collective, algo),
                });
            }
        }
    }
    entries
}

/// The seeded model-based backend.
pub struct SyntheticBackend {
    config: SyntheticConfig,
    rng: ChaCha8Rng,
    standard_normal: Normal,
}

impl SyntheticBackend {
    pub fn new(config: SyntheticConfig) -> SyntheticBackend {
        SyntheticBackend {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            standard_normal: Normal::standard(),
        }
    }

    pub fn config(&self) -> &SyntheticConfig {
        &self.config
    }

    /// The noiseless latency of `algo` for `key` at `bytes`.
    pub fn model_time_us(&self, key: TableKey, algo: Algo, bytes: u64) -> Option<f64> {
        let model = self.config.models.get(&(key.collective, algo))?;
        let overhead = match key.mode {
            Mode::Graph => 0.0,
            Mode::Eager => self.config.eager_overhead_us,
        };
        Some(model.time_us(bytes) + overhead)
    }

    /// The exact size at which `faster_above` becomes faster than
    /// `faster_below` (where their lines cross), if they cross at a positive size.
    pub fn crossover(
        &self,
        collective: Collective,
        faster_below: Algo,
        faster_above: Algo,
    ) -> Option<f64> {
        let a = self.config.models.get(&(collective, faster_below))?;
        let b = self.config.models.get(&(collective, faster_above))?;
        let per_byte_gap = 1.0 / a.bytes_per_us - 1.0 / b.bytes_per_us;
        let at = (b.alpha_us - a.alpha_us) / per_byte_gap;
        (per_byte_gap > 0.0 && at > 0.0).then_some(at)
    }

    fn noise_factor(&mut self) -> f64 {
        // Log-normal with the requested CV: σ² = ln(1 + CV²); median 1.
        let sigma = (1.0 + self.config.noise_cv.powi(2)).ln().sqrt();
        // Map a uniform draw in (0, 1) through the normal quantile function.
        let uniform = self.rng.random::<f64>().clamp(1e-12, 1.0 - 1e-12);
        let z = self.standard_normal.inverse_cdf(uniform);
        let glitch = if self.config.outlier_rate > 0.0
            && self.rng.random::<f64>() < self.config.outlier_rate
        {
            3.0
        } else {
            1.0
        };
        (sigma * z).exp() * glitch
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

    fn candidates(&self, collective: Collective, world_size: u32, bytes: u64) -> Vec<Algo> {
        crate::grid::candidates(&self.config.capacities, collective, world_size, bytes)
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

/// A capacity entry, for building synthetic platforms in tests.
pub fn capacity(collective: Collective, algo: Algo, max_bytes: u64) -> CapacityEntry {
    CapacityEntry {
        collective,
        algo,
        capacity: Capacity {
            max_bytes,
            align: tuned_schema::DEFAULT_ALIGN,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuned_schema::DType;

    fn key(collective: Collective) -> TableKey {
        TableKey {
            collective,
            world_size: 8,
            dtype: DType::Bf16,
            mode: Mode::Graph,
        }
    }

    #[test]
    fn planted_crossovers_are_exact() {
        let backend = SyntheticBackend::new(SyntheticConfig::planted(0.0, 1));
        let (first, steps) = planted_crossovers(Collective::AllReduce);
        let mut below = first;
        for &(above, at) in steps {
            let x = backend
                .crossover(Collective::AllReduce, below, above)
                .unwrap();
            assert!(
                (x - at as f64).abs() < 1e-6 * at as f64,
                "{below:?}→{above:?} at {x}, planted {at}"
            );
            below = above;
        }
    }

    #[test]
    fn the_lower_envelope_follows_the_planted_order() {
        let backend = SyntheticBackend::new(SyntheticConfig::planted(0.0, 1));
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
        let mut b = SyntheticBackend::new(SyntheticConfig::planted(0.1, 9));
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
