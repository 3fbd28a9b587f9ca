//! The one estimate every decision of the tuner rests on: the ratio of two
//! medians with a distribution-free interval ([`ratio`]). `fit` picks by the
//! estimates; `sweep` and `verify` measure more where the interval leaves a
//! choice open; plots draw each median's interval. Also the figures reports
//! print: quantiles, bandwidths and a noise figure.
//!
//! Nothing here draws random numbers: the same samples always give the same
//! interval, in any order of work.

use policy::Collective;
use statrs::statistics::{Data, OrderStatistics};

/// Coverage of the intervals plots draw (`sweep` and `verify` have their
/// own, `sweep::CONFIDENCE` and `verify::CONFIDENCE`).
pub const CONFIDENCE: f64 = 0.95;

/// The median of `samples` (mean of the two middle values for an even count).
/// `NaN` for an empty slice.
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    Data::new(samples.to_vec()).median()
}

/// The `tau` quantile with statrs's estimator (Hyndman-Fan type 8, which is
/// median-unbiased whatever the distribution). `NaN` for an empty slice.
pub fn quantile(samples: &[f64], tau: f64) -> f64 {
    Data::new(samples.to_vec()).quantile(tau)
}

/// Algorithm bandwidth in GB/s: `bytes` of output in `micros` µs (bytes per
/// µs is MB/s).
pub fn algbw_gbps(bytes: u64, micros: f64) -> f64 {
    bytes as f64 / micros / 1e3
}

/// nccl-tests' bus bandwidth in GB/s for `bytes` of output in `micros` µs over
/// `world_size` ranks: all-reduce S/t·2(W−1)/W, all-gather S/t·(W−1)/W.
pub fn busbw_gbps(collective: Collective, world_size: u32, bytes: u64, micros: f64) -> f64 {
    let w = f64::from(world_size);
    let factor = match collective {
        // The fused collective moves what its all-reduce moves.
        Collective::AllReduce | Collective::AllReduceAddRmsNorm => 2.0 * (w - 1.0) / w,
        Collective::AllGather => (w - 1.0) / w,
    };
    algbw_gbps(bytes, micros) * factor
}

/// A median with its distribution-free interval at some confidence: the
/// order statistics `x(j)` and `x(n+1-j)` with `j` the largest rank such
/// that a Binomial(n, ½) count falls below it with probability at most half of
/// `1 − confidence`. Exact coverage (at least `confidence`) for any continuous
/// distribution and no resampling, so it is cheap enough to follow every
/// round; glitches far out move neither end. With too few samples for such a
/// rank, the range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MedianInterval {
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

/// The median of `samples` with its interval at `confidence` in (0, 1);
/// `None` for no samples or a NaN among them.
pub fn median_interval(samples: &[f64], confidence: f64) -> Option<MedianInterval> {
    if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let low = median_ci_rank(n, confidence);
    Some(MedianInterval {
        median: (sorted[(n - 1) / 2] + sorted[n / 2]) / 2.0,
        low: sorted[low - 1],
        high: sorted[n - low],
    })
}

/// The 1-based rank `j` of the lower end of the median's interval over `n`
/// samples: the largest `j ≤ n/2` with P(Binomial(n, ½) ≤ j − 1) ≤ (1 −
/// confidence) / 2, and at least 1. The binomial probabilities are summed
/// in log space (exact for any `n`; `0.5^n` alone underflows past 1074).
fn median_ci_rank(n: usize, confidence: f64) -> usize {
    let tail = (1.0 - confidence) / 2.0;
    let nf = n as f64;
    let mut log_pmf = nf * 0.5f64.ln();
    let mut cdf = 0.0;
    let mut j = 0;
    while j < n / 2 {
        // P(count ≤ j), from P(count = j).
        cdf += log_pmf.exp();
        if cdf > tail {
            break;
        }
        log_pmf += ((nf - j as f64) / (j as f64 + 1.0)).ln();
        j += 1;
    }
    j.max(1)
}

/// The ratio of two medians with a confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioInterval {
    /// `median(a) / median(b)`.
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

/// `median(a) / median(b)` with an interval at `confidence`: each median's
/// interval ([`median_interval`]) in log space, combined by the method of
/// variance estimates recovery (Zou and Donner's MOVER: the distance of each
/// end from the estimate is the root of the squared distances of the two
/// intervals' corresponding ends). Asymmetric where the samples are. `None`
/// when either side has no samples.
pub fn ratio(a: &[f64], b: &[f64], confidence: f64) -> Option<RatioInterval> {
    let (a, b) = (
        median_interval(a, confidence)?,
        median_interval(b, confidence)?,
    );
    let (ma, mb) = (a.median.ln(), b.median.ln());
    let d = ma - mb;
    let below = ((ma - a.low.ln()).powi(2) + (b.high.ln() - mb).powi(2)).sqrt();
    let above = ((a.high.ln() - ma).powi(2) + (mb - b.low.ln()).powi(2)).sqrt();
    Some(RatioInterval {
        ratio: d.exp(),
        low: (d - below).exp(),
        high: (d + above).exp(),
    })
}

/// The spread of single samples relative to their typical value: the
/// interquartile range of the log samples over 1.349 (the IQR of a standard
/// normal), so log-normal noise of coefficient of variation c reads about c
/// for small c. Robust to glitches, which a standard deviation is not. `NaN`
/// for fewer than 4 samples.
pub fn relative_noise(samples: &[f64]) -> f64 {
    if samples.len() < 4 || samples.iter().any(|&s| s <= 0.0) {
        return f64::NAN;
    }
    let logs: Vec<f64> = samples.iter().map(|s| s.ln()).collect();
    (quantile(&logs, 0.75) - quantile(&logs, 0.25)) / 1.349
}

/// A stable 64-bit seed for the data of one named thing (FNV-1a of its
/// name), so inputs do not depend on the order in which points are measured.
/// Written out rather than taken from `std::hash`, whose output may change
/// between Rust releases.
pub fn seed_for(name: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    name.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn bus_bandwidth_follows_nccl_tests() {
        // 8 ranks, 1 MB in 10 µs: algbw 100 GB/s; all-reduce ×1.75, all-gather ×0.875.
        let ar = busbw_gbps(Collective::AllReduce, 8, 1_000_000, 10.0);
        let ag = busbw_gbps(Collective::AllGather, 8, 1_000_000, 10.0);
        assert!((ar - 175.0).abs() < 1e-9);
        assert!((ag - 87.5).abs() < 1e-9);
    }

    #[test]
    fn algorithm_and_bus_bandwidth_of_the_bench() {
        // 1 GB in 1000 µs over 8 ranks: algbw 1000 GB/s.
        assert!((algbw_gbps(1_000_000_000, 1000.0) - 1000.0).abs() < 1e-9);
        let busbw = busbw_gbps(Collective::AllReduce, 8, 1_000_000_000, 1000.0);
        assert!((busbw - 1750.0).abs() < 1e-9);
        let busbw = busbw_gbps(Collective::AllGather, 4, 1_000_000_000, 1000.0);
        assert!((busbw - 750.0).abs() < 1e-9);
    }

    /// Deterministic pseudo-samples around `centre` with relative spread `cv`.
    fn noisy(centre: f64, cv: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| centre * (1.0 + cv * (rng.random::<f64>() * 2.0 - 1.0) * 1.7))
            .collect()
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn median_interval_matches_the_binomial_table() {
        // For n = 25 the classic table gives ranks 8 and 18 (coverage 95.7 %).
        let ends = |samples: &[f64]| {
            let m = median_interval(samples, 0.95).unwrap();
            (m.low, m.high)
        };
        let samples: Vec<f64> = (1..=25).map(f64::from).collect();
        assert_eq!(ends(&samples), (8.0, 18.0));
        // For n = 100: ranks 40 and 61.
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(ends(&samples), (40.0, 61.0));
        assert_eq!(median_interval(&samples, 0.95).unwrap().median, 50.5);
        // Too few samples for 95 %: the whole range.
        assert_eq!(ends(&[3.0, 1.0, 2.0]), (1.0, 3.0));
        assert_eq!(median_interval(&[], 0.95), None);
        assert_eq!(median_interval(&[1.0, f64::NAN], 0.95), None);
    }

    #[test]
    fn median_intervals_at_any_confidence() {
        // The exact rank against the normal approximation, for large n.
        for n in [500usize, 2000, 5000] {
            let samples: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            let low = median_interval(&samples, 0.95).unwrap().low;
            let approx = n as f64 / 2.0 - 1.96 * (n as f64).sqrt() / 2.0;
            assert!((low - approx).abs() <= 2.0, "n {n}: {low} vs {approx}");
            let narrow = median_interval(&samples, 0.5).unwrap().low;
            assert!(narrow > low);
        }
    }

    #[test]
    fn ratio_intervals_cover_the_true_ratio() {
        let mut covered = 0;
        for seed in 0..400 {
            let a = noisy(11.0, 0.1, 40, seed);
            let b = noisy(10.0, 0.1, 40, seed + 10_000);
            let r = ratio(&a, &b, 0.95).unwrap();
            assert!(r.low <= r.ratio && r.ratio <= r.high);
            if r.low <= 1.1 && 1.1 <= r.high {
                covered += 1;
            }
        }
        // Each median's interval covers at least 95 %: the combination too.
        assert!((370..=400).contains(&covered), "{covered} of 400");
        assert!(ratio(&[], &[1.0], 0.95).is_none());
    }

    #[test]
    fn relative_noise_reads_the_coefficient_of_variation() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for cv in [0.01, 0.05, 0.2] {
            let sigma = (1.0f64 + cv * cv).ln().sqrt();
            let samples: Vec<f64> = (0..4000)
                .map(|_| {
                    // Box-Muller.
                    let (u1, u2): (f64, f64) = (1.0 - rng.random::<f64>(), rng.random());
                    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                    (sigma * z).exp()
                })
                .collect();
            let read = relative_noise(&samples);
            assert!((read / cv - 1.0).abs() < 0.1, "cv {cv}: read {read}");
        }
        assert!(relative_noise(&[1.0, 2.0]).is_nan());
    }

    #[test]
    fn seeds_are_stable() {
        // FNV-1a reference values: these must never change, or recorded
        // inputs would no longer reproduce.
        assert_eq!(seed_for(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(seed_for("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(seed_for("all_reduce/8/bf16/graph/4096/nccl"), seed_for("x"));
    }
}
