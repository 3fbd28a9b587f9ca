//! The statistics every decision of the tuner rests on: robust location (median),
//! outlier classification (Tukey fences), a seeded bootstrap confidence interval,
//! and a significance test for "A is faster than B by more than a margin"
//! (one-sided Mann-Whitney U, normal approximation, from statrs).
//!
//! Everything here is deterministic: the bootstrap draws from a ChaCha stream
//! whose seed the caller derives from what is being summarised (see [`seed_for`]),
//! so the same samples always give the same interval, in any order of work.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use statrs::distribution::{Binomial, DiscreteCDF};
use statrs::statistics::{Data, OrderStatistics};
use statrs::stats_tests::Alternative;
use statrs::stats_tests::mannwhitneyu::{MannWhitneyUMethod, mannwhitneyu};
use tuned_schema::Collective;

/// Bootstrap resamples behind every confidence interval: enough for stable 2.5 %
/// and 97.5 % percentiles (about 25 resamples lie beyond each).
pub const BOOTSTRAP_RESAMPLES: usize = 1000;

/// Coverage of every confidence interval the tuner reports.
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
        Collective::AllReduce => 2.0 * (w - 1.0) / w,
        Collective::AllGather => (w - 1.0) / w,
    };
    algbw_gbps(bytes, micros) * factor
}

/// Tukey's fences: values beyond the inner fences (1.5 IQR outside the
/// quartiles) are mild outliers, beyond the outer fences (3 IQR) severe ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TukeyFences {
    pub inner_low: f64,
    pub inner_high: f64,
    pub outer_low: f64,
    pub outer_high: f64,
}

impl TukeyFences {
    pub fn of(samples: &[f64]) -> TukeyFences {
        let q1 = quantile(samples, 0.25);
        let q3 = quantile(samples, 0.75);
        let iqr = q3 - q1;
        TukeyFences {
            inner_low: q1 - 1.5 * iqr,
            inner_high: q3 + 1.5 * iqr,
            outer_low: q1 - 3.0 * iqr,
            outer_high: q3 + 3.0 * iqr,
        }
    }

    pub fn classify(&self, value: f64) -> Outlier {
        if value < self.outer_low || value > self.outer_high {
            Outlier::Severe
        } else if value < self.inner_low || value > self.inner_high {
            Outlier::Mild
        } else {
            Outlier::None
        }
    }
}

/// Where one sample sits with respect to [`TukeyFences`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outlier {
    None,
    Mild,
    Severe,
}

/// How many samples of a set fall in each outlier class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutlierCounts {
    pub mild: usize,
    pub severe: usize,
}

/// What the tuner knows about one set of timing samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Samples the figures below were computed from (severe outliers removed).
    pub kept: usize,
    pub outliers: OutlierCounts,
    pub median: f64,
    /// Seeded bootstrap interval of the median at [`CONFIDENCE`].
    pub ci_low: f64,
    pub ci_high: f64,
}

impl Summary {
    /// Half the CI's width relative to the median: the spread criterion for
    /// re-measuring a point.
    pub fn relative_half_width(&self) -> f64 {
        (self.ci_high - self.ci_low) / 2.0 / self.median
    }
}

/// The samples with severe outliers removed. Severe outliers on a GPU are
/// glitches (a preempted context, a clock change, a page fault in the first
/// replay) that say nothing about the algorithm; mild ones are kept, since the
/// median is robust to them and they are part of the real distribution.
pub fn without_severe_outliers(samples: &[f64]) -> Vec<f64> {
    if samples.len() < 4 {
        return samples.to_vec();
    }
    let fences = TukeyFences::of(samples);
    samples
        .iter()
        .copied()
        .filter(|&s| fences.classify(s) != Outlier::Severe)
        .collect()
}

/// Counts of mild and severe outliers in `samples`.
pub fn count_outliers(samples: &[f64]) -> OutlierCounts {
    if samples.len() < 4 {
        return OutlierCounts::default();
    }
    let fences = TukeyFences::of(samples);
    let mut counts = OutlierCounts::default();
    for &s in samples {
        match fences.classify(s) {
            Outlier::None => {}
            Outlier::Mild => counts.mild += 1,
            Outlier::Severe => counts.severe += 1,
        }
    }
    counts
}

/// Percentile bootstrap interval of the median at [`CONFIDENCE`], drawn from a
/// ChaCha8 stream seeded with `seed`. `(NaN, NaN)` for an empty slice.
pub fn bootstrap_median_ci(samples: &[f64], seed: u64) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = samples.len();
    let mut resample = vec![0.0; n];
    let mut medians = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for slot in resample.iter_mut() {
            *slot = samples[rng.random_range(0..n)];
        }
        medians.push(Data::new(&mut resample[..]).median());
    }
    let tail = (1.0 - CONFIDENCE) / 2.0;
    let mut medians = Data::new(medians);
    (medians.quantile(tail), medians.quantile(1.0 - tail))
}

/// The distribution-free 95 % interval of the median: the order statistics
/// `x(j)` and `x(n+1-j)` with `j` the largest rank such that a Binomial(n, ½)
/// count falls below it with probability at most 2.5 %. Exact coverage (at least
/// 95 %) for any continuous distribution and no resampling, so the sweep can
/// afford it after every round to decide whether a point needs more samples.
/// With fewer than 6 samples no such rank exists and the range is returned.
pub fn order_statistic_median_ci(samples: &[f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let tail = (1.0 - CONFIDENCE) / 2.0;
    let count = Binomial::new(0.5, n as u64).expect("p = 0.5 is a valid probability");
    // P(count ≤ j - 1) ≤ tail, largest such j ≥ 1 (1-based rank).
    let mut j = 0;
    while j < n / 2 && count.cdf(j as u64) <= tail {
        j += 1;
    }
    let low = j.max(1);
    (sorted[low - 1], sorted[n - low])
}

/// How wide a point's samples leave its median: the half-width of
/// [`order_statistic_median_ci`] relative to the median, after removing severe
/// outliers. The sweep re-measures a point while this exceeds its threshold.
pub fn relative_spread(samples: &[f64]) -> f64 {
    let kept = without_severe_outliers(samples);
    let (low, high) = order_statistic_median_ci(&kept);
    (high - low) / 2.0 / median(&kept)
}

/// Median, bootstrap CI and outlier counts of one point's samples.
pub fn summarize(samples: &[f64], seed: u64) -> Summary {
    let kept = without_severe_outliers(samples);
    let (ci_low, ci_high) = bootstrap_median_ci(&kept, seed);
    Summary {
        kept: kept.len(),
        outliers: count_outliers(samples),
        median: median(&kept),
        ci_low,
        ci_high,
    }
}

/// The outcome of asking whether one algorithm is faster than another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// `median(fast) / median(slow)`: below `1 - margin` means "faster by more
    /// than the margin".
    pub median_ratio: f64,
    /// One-sided p-value of "fast × 1/(1 - margin) is still stochastically
    /// smaller than slow".
    pub p_value: f64,
    /// Both conditions hold: the medians differ by more than the margin and the
    /// test rejects "not faster by the margin" at the requested level.
    pub faster: bool,
}

/// Is `fast` faster than `slow` by more than `margin` (a fraction, e.g. 0.04),
/// significantly at level `alpha`?
///
/// Testing the margin itself, not just a difference, is what keeps noise from
/// calling crossovers: `fast`'s samples are inflated by `1 / (1 - margin)` before
/// the one-sided Mann-Whitney test, so the test only passes when `fast` would
/// still win after losing the margin. Severe outliers are removed first.
pub fn faster_by_margin(fast: &[f64], slow: &[f64], margin: f64, alpha: f64) -> Comparison {
    let fast = without_severe_outliers(fast);
    let slow = without_severe_outliers(slow);
    if fast.is_empty() || slow.is_empty() {
        return Comparison {
            median_ratio: f64::NAN,
            p_value: 1.0,
            faster: false,
        };
    }
    let median_ratio = median(&fast) / median(&slow);
    let inflated: Vec<f64> = fast.iter().map(|t| t / (1.0 - margin)).collect();
    let p_value = mannwhitneyu(
        &inflated,
        &slow,
        MannWhitneyUMethod::AsymptoticInclContinuityCorrection,
        Alternative::Less,
    )
    .map(|(_, p)| p)
    .unwrap_or(1.0);
    Comparison {
        median_ratio,
        p_value,
        faster: median_ratio < 1.0 - margin && p_value < alpha,
    }
}

/// A stable 64-bit seed for the bootstrap of one named thing (FNV-1a of its
/// name), so intervals do not depend on the order in which points are summarised.
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
    fn tukey_fences_classify_outliers() {
        // Quartiles 2 and 4 with statrs's type-8 estimator on 1..=5 are about
        // 1.67 and 4.33; IQR ≈ 2.67; outer high fence ≈ 12.3.
        let mut samples = vec![1.0, 2.0, 3.0, 4.0, 5.0];
        let fences = TukeyFences::of(&samples);
        assert_eq!(fences.classify(3.0), Outlier::None);
        assert_eq!(fences.classify(10.0), Outlier::Mild);
        assert_eq!(fences.classify(100.0), Outlier::Severe);
        samples.push(100.0);
        assert_eq!(count_outliers(&samples).severe, 1);
        assert_eq!(without_severe_outliers(&samples).len(), 5);
    }

    #[test]
    fn bootstrap_ci_is_seeded_and_covers_the_median() {
        let samples = noisy(10.0, 0.05, 40, 7);
        let a = bootstrap_median_ci(&samples, 1);
        let b = bootstrap_median_ci(&samples, 1);
        let c = bootstrap_median_ci(&samples, 2);
        assert_eq!(a, b, "same seed, same interval");
        assert_ne!(a, c, "another seed draws other resamples");
        let m = median(&samples);
        assert!(a.0 <= m && m <= a.1, "{a:?} should contain {m}");
        assert!(
            a.1 - a.0 < 0.1 * m,
            "5% noise, 40 samples: a narrow interval"
        );
    }

    #[test]
    fn order_statistic_interval_matches_the_binomial_table() {
        // For n = 25 the classic table gives ranks 8 and 18 (coverage 95.7 %).
        let samples: Vec<f64> = (1..=25).map(f64::from).collect();
        assert_eq!(order_statistic_median_ci(&samples), (8.0, 18.0));
        // For n = 100: ranks 40 and 61.
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(order_statistic_median_ci(&samples), (40.0, 61.0));
        // Too few samples for 95 %: the whole range.
        assert_eq!(order_statistic_median_ci(&[3.0, 1.0, 2.0]), (1.0, 3.0));
    }

    #[test]
    fn spread_shrinks_with_more_samples() {
        let few = relative_spread(&noisy(10.0, 0.05, 25, 1));
        let many = relative_spread(&noisy(10.0, 0.05, 400, 1));
        assert!(many < few / 2.0, "{few} → {many}");
    }

    #[test]
    fn a_clear_margin_is_significant() {
        let fast = noisy(9.0, 0.02, 30, 1);
        let slow = noisy(10.0, 0.02, 30, 2);
        let c = faster_by_margin(&fast, &slow, 0.04, 0.01);
        assert!(c.faster, "{c:?}");
        assert!(c.p_value < 1e-6);
    }

    #[test]
    fn a_difference_inside_the_margin_is_not_a_win() {
        // 2% faster, tight noise: a real difference, but below a 4% margin.
        let fast = noisy(9.8, 0.005, 60, 3);
        let slow = noisy(10.0, 0.005, 60, 4);
        assert!(!faster_by_margin(&fast, &slow, 0.04, 0.01).faster);
        assert!(faster_by_margin(&fast, &slow, 0.0, 0.01).faster);
    }

    #[test]
    fn identical_distributions_are_not_significant() {
        let mut wins = 0;
        for seed in 0..200 {
            let a = noisy(10.0, 0.1, 25, seed);
            let b = noisy(10.0, 0.1, 25, seed + 1000);
            if faster_by_margin(&a, &b, 0.04, 0.01).faster {
                wins += 1;
            }
        }
        // Testing the margin makes a false call far rarer than alpha.
        assert!(wins <= 1, "{wins} false calls out of 200");
    }

    #[test]
    fn seeds_are_stable() {
        // FNV-1a reference values: these must never change, or recorded
        // confidence intervals would no longer reproduce.
        assert_eq!(seed_for(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(seed_for("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(seed_for("all_reduce/8/bf16/graph/4096/nccl"), seed_for("x"));
    }
}
