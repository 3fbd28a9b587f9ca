//! The statistics every decision of the tuner rests on: robust location (median),
//! outlier classification (Tukey fences), a seeded bootstrap confidence interval,
//! a significance test for "A is faster than B by more than a margin"
//! (one-sided Mann-Whitney U, normal approximation, computed as statrs does),
//! an equivalence test for "A and B are within x %", distribution-free
//! intervals of a median and of a ratio of medians, and a noise figure.
//!
//! Everything here is deterministic: the bootstrap draws from a ChaCha stream
//! whose seed the caller derives from what is being summarised (see [`seed_for`]),
//! so the same samples always give the same interval, in any order of work.

use policy::Collective;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::statistics::{Data, OrderStatistics};

/// Bootstrap resamples behind every confidence interval: enough for stable 2.5 %
/// and 97.5 % percentiles (about 25 resamples lie beyond each).
pub const BOOTSTRAP_RESAMPLES: usize = 1000;

/// Coverage of the bootstrap intervals of plots (`verify` has its own,
/// `verify::CONFIDENCE`).
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
        TukeyFences::of_sorted(&sorted(samples))
    }

    /// The fences of ascending samples.
    fn of_sorted(sorted: &[f64]) -> TukeyFences {
        let q1 = sorted_quantile(sorted, 0.25);
        let q3 = sorted_quantile(sorted, 0.75);
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

/// A sorted copy (in `f64::total_cmp` order, NaN last).
fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// [`quantile`] of ascending samples, by the same arithmetic as statrs's
/// (which selects the same order statistics in the same order), without the
/// copies and selections statrs makes per call.
fn sorted_quantile(sorted: &[f64], tau: f64) -> f64 {
    let n = sorted.len();
    if !(0.0..=1.0).contains(&tau) || n == 0 {
        return f64::NAN;
    }
    // statrs's minimum and maximum are NaN when any value is.
    let has_nan = sorted.iter().any(|v| v.is_nan());
    let h = (n as f64 + 1.0 / 3.0) * tau + 1.0 / 3.0;
    let hf = h as i64;
    if hf <= 0 || tau == 0.0 {
        return if has_nan { f64::NAN } else { sorted[0] };
    }
    if hf >= n as i64 || tau == 1.0 {
        return if has_nan { f64::NAN } else { sorted[n - 1] };
    }
    let a = sorted[hf as usize - 1];
    let b = sorted[hf as usize];
    a + (h - hf as f64) * (b - a)
}

/// [`median`] of ascending samples.
fn sorted_median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let k = n / 2;
    if n % 2 == 1 {
        sorted[k]
    } else {
        (sorted[k - 1] + sorted[k]) / 2.0
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

/// The distribution-free interval of the median at `confidence` in (0, 1):
/// the order statistics `x(j)` and `x(n+1-j)` with `j` the largest rank such
/// that a Binomial(n, ½) count falls below it with probability at most half of
/// `1 − confidence`. Exact coverage (at least `confidence`) for any continuous
/// distribution and no resampling, so it is cheap enough to follow every
/// round. With too few samples for such a rank, the range.
pub fn median_ci(samples: &[f64], confidence: f64) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let low = median_ci_rank(n, confidence);
    (sorted[low - 1], sorted[n - low])
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
    Kept::of(fast).faster_by_margin(&Kept::of(slow), margin, alpha)
}

/// One set of samples as every comparison starts from it: severe outliers
/// removed ([`without_severe_outliers`]), and the median of what is left.
/// Worth keeping when one set is compared several times.
#[derive(Clone, Debug, PartialEq)]
pub struct Kept {
    /// Ascending (NaN removed: it cannot be ranked).
    pub samples: Vec<f64>,
    /// `NaN` when nothing is left.
    pub median: f64,
}

impl Kept {
    pub fn of(samples: &[f64]) -> Kept {
        let all = sorted(samples);
        if all.iter().any(|v| v.is_nan()) {
            // A NaN makes the rank test refuse, which reads as "not faster".
            return Kept {
                samples: Vec::new(),
                median: f64::NAN,
            };
        }
        let samples: Vec<f64> = if all.len() < 4 {
            all
        } else {
            let fences = TukeyFences::of_sorted(&all);
            all.into_iter()
                .filter(|&s| fences.classify(s) != Outlier::Severe)
                .collect()
        };
        Kept {
            median: sorted_median(&samples),
            samples,
        }
    }

    /// [`faster_by_margin`] of these samples against `slow`.
    pub fn faster_by_margin(&self, slow: &Kept, margin: f64, alpha: f64) -> Comparison {
        if self.samples.is_empty() || slow.samples.is_empty() {
            return Comparison {
                median_ratio: f64::NAN,
                p_value: 1.0,
                faster: false,
            };
        }
        let median_ratio = self.median / slow.median;
        // Scaling by a positive factor keeps the order.
        let inflated: Vec<f64> = self.samples.iter().map(|t| t / (1.0 - margin)).collect();
        let p_value = mann_whitney_less_sorted(&inflated, &slow.samples);
        Comparison {
            median_ratio,
            p_value,
            faster: median_ratio < 1.0 - margin && p_value < alpha,
        }
    }

    /// [`equivalent`] for kept samples.
    pub fn equivalent(&self, other: &Kept, tolerance: f64, alpha: f64) -> bool {
        // A negative margin asks "not slower by more than the tolerance".
        self.faster_by_margin(other, -tolerance, alpha).faster
            && other.faster_by_margin(self, -tolerance, alpha).faster
    }
}

/// The one-sided p-value of the Mann-Whitney U test that `x` is
/// stochastically less than `y`: the normal approximation with the tie and
/// continuity corrections, computed exactly as statrs's `mannwhitneyu`
/// (`AsymptoticInclContinuityCorrection`, `Alternative::Less`) computes it, so
/// every decision made on recorded evidence stays the same, but in O(n log n):
/// statrs first compares every pair of values for NaN, which makes a test on
/// a few hundred samples cost milliseconds. 1 when either side is empty or a
/// value is NaN (statrs's error there).
pub fn mann_whitney_less(x: &[f64], y: &[f64]) -> f64 {
    if x.iter().chain(y).any(|v| v.is_nan()) {
        return 1.0;
    }
    let sorted = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v
    };
    mann_whitney_less_sorted(&sorted(x), &sorted(y))
}

/// [`mann_whitney_less`] of two ascending, NaN-free sets: the ranks come from
/// merging them, in O(n).
fn mann_whitney_less_sorted(x: &[f64], y: &[f64]) -> f64 {
    let (n1, n2) = (x.len(), y.len());
    if n1 == 0 || n2 == 0 {
        return 1.0;
    }
    // Mid-ranks of tied runs; ranks are halves of integers, so their sum is
    // exact in any order.
    let (mut i, mut j) = (0, 0);
    let mut r1 = 0.0;
    let mut tie_term: usize = 0;
    while i < n1 || j < n2 {
        let v = match (x.get(i), y.get(j)) {
            (Some(&a), Some(&b)) => a.min(b),
            (Some(&a), None) => a,
            (None, Some(&b)) => b,
            (None, None) => unreachable!("the loop runs while either has values"),
        };
        // `==`, not the bit pattern: -0 and +0 tie, as in statrs.
        let from_x = x[i..].iter().take_while(|&&a| a == v).count();
        let from_y = y[j..].iter().take_while(|&&b| b == v).count();
        let count = from_x + from_y;
        let rank = (i + j + 1) as f64 + (count as f64 - 1.0) / 2.0;
        r1 += rank * from_x as f64;
        tie_term += count.pow(3) - count;
        i += from_x;
        j += from_y;
    }
    let u1 = r1 - (n1 * (n1 + 1) / 2) as f64;
    let u2 = (n1 * n2) as f64 - u1;
    let mu = ((n1 * n2) as f64) / 2.0;
    let (n1, n2) = (n1 as f64, n2 as f64);
    let n = n1 + n2;
    let s = (n1 * n2 / 12.0 * ((n + 1.0) - tie_term as f64 / (n * (n - 1.0)))).sqrt();
    let z = (u2 - mu - 0.5) / s;
    (1.0 - Normal::default().cdf(z)).clamp(0.0, 1.0)
}

/// Are `a` and `b` equivalent within `tolerance` (a fraction, e.g. 0.03)? Two
/// one-sided tests at level `alpha` (TOST): `a` is significantly less than
/// `1 + tolerance` times `b`, and `b` than `1 + tolerance` times `a`. Equivalence
/// is what has to be shown for a tie: "not significantly different" is also
/// what too few samples give.
pub fn equivalent(a: &[f64], b: &[f64], tolerance: f64, alpha: f64) -> bool {
    Kept::of(a).equivalent(&Kept::of(b), tolerance, alpha)
}

/// The ratio of two medians with a confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioInterval {
    /// `median(a) / median(b)`, severe outliers removed from each.
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

/// `median(a) / median(b)` with an interval at `confidence`: each median's
/// distribution-free interval ([`median_ci`]) in log space, combined by the
/// method of variance estimates recovery (Zou and Donner's MOVER: the distance
/// of each end from the estimate is the root of the squared distances of the
/// two intervals' corresponding ends). Cheap enough to follow every round,
/// and asymmetric where the samples are. `None` when either side is empty.
pub fn median_ratio_interval(a: &[f64], b: &[f64], confidence: f64) -> Option<RatioInterval> {
    let a = without_severe_outliers(a);
    let b = without_severe_outliers(b);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (ma, mb) = (median(&a).ln(), median(&b).ln());
    let (a_low, a_high) = median_ci(&a, confidence);
    let (b_low, b_high) = median_ci(&b, confidence);
    let (a_low, a_high, b_low, b_high) = (a_low.ln(), a_high.ln(), b_low.ln(), b_high.ln());
    let d = ma - mb;
    let below = ((ma - a_low).powi(2) + (b_high - mb).powi(2)).sqrt();
    let above = ((a_high - ma).powi(2) + (mb - b_low).powi(2)).sqrt();
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
    fn median_interval_matches_the_binomial_table() {
        // For n = 25 the classic table gives ranks 8 and 18 (coverage 95.7 %).
        let samples: Vec<f64> = (1..=25).map(f64::from).collect();
        assert_eq!(median_ci(&samples, 0.95), (8.0, 18.0));
        // For n = 100: ranks 40 and 61.
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(median_ci(&samples, 0.95), (40.0, 61.0));
        // Too few samples for 95 %: the whole range.
        assert_eq!(median_ci(&[3.0, 1.0, 2.0], 0.95), (1.0, 3.0));
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
    fn mann_whitney_matches_statrs_exactly() {
        use statrs::stats_tests::Alternative;
        use statrs::stats_tests::mannwhitneyu::{MannWhitneyUMethod, mannwhitneyu};
        let reference = |x: &[f64], y: &[f64]| {
            mannwhitneyu(
                x,
                y,
                MannWhitneyUMethod::AsymptoticInclContinuityCorrection,
                Alternative::Less,
            )
            .map(|(_, p)| p)
            .unwrap_or(1.0)
        };
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for case in 0..300 {
            let (n1, n2) = (rng.random_range(1..60), rng.random_range(1..60));
            let shift = rng.random::<f64>() * 0.2 - 0.1;
            // Rounded to a few steps in some cases, so that ties are common.
            let step = [0.0, 0.01, 0.1][case % 3];
            let draw = |rng: &mut ChaCha8Rng, n: usize, shift: f64| -> Vec<f64> {
                (0..n)
                    .map(|_| {
                        let v: f64 = 10.0 + shift + rng.random::<f64>();
                        if step > 0.0 {
                            (v / step).round() * step
                        } else {
                            v
                        }
                    })
                    .collect()
            };
            let x = draw(&mut rng, n1, shift);
            let y = draw(&mut rng, n2, 0.0);
            assert_eq!(mann_whitney_less(&x, &y), reference(&x, &y), "case {case}");
        }
        let same = [1.0; 5];
        assert_eq!(mann_whitney_less(&same, &same), reference(&same, &same));
        assert_eq!(mann_whitney_less(&[], &same), 1.0);
        assert_eq!(mann_whitney_less(&[f64::NAN], &same), 1.0);
    }

    #[test]
    fn sorted_order_statistics_match_statrs() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for n in 1..80 {
            let samples: Vec<f64> = (0..n)
                .map(|_| (rng.random::<f64>() * 50.0).round())
                .collect();
            let s = sorted(&samples);
            for tau in [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0] {
                let (a, b) = (sorted_quantile(&s, tau), quantile(&samples, tau));
                assert!(
                    a == b || (a.is_nan() && b.is_nan()),
                    "n {n} tau {tau}: {a} {b}"
                );
            }
            assert_eq!(sorted_median(&s), median(&samples));
            let kept = Kept::of(&samples);
            let mut old = without_severe_outliers(&samples);
            old.sort_by(f64::total_cmp);
            assert_eq!(kept.samples, old);
            assert_eq!(kept.median, median(&without_severe_outliers(&samples)));
        }
    }

    #[test]
    fn median_intervals_at_any_confidence() {
        // The exact rank against the normal approximation, for large n.
        for n in [500usize, 2000, 5000] {
            let samples: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            let (low, _) = median_ci(&samples, 0.95);
            let approx = n as f64 / 2.0 - 1.96 * (n as f64).sqrt() / 2.0;
            assert!((low - approx).abs() <= 2.0, "n {n}: {low} vs {approx}");
            let (narrow, _) = median_ci(&samples, 0.5);
            assert!(narrow > low);
        }
    }

    #[test]
    fn equivalence_needs_evidence() {
        let a = noisy(10.0, 0.01, 50, 1);
        let b = noisy(10.05, 0.01, 50, 2);
        assert!(equivalent(&a, &b, 0.03, 0.01), "0.5% apart, 1% noise");
        // The same medians with 20 % noise and few samples: no tie shown.
        let a = noisy(10.0, 0.2, 25, 1);
        let b = noisy(10.05, 0.2, 25, 2);
        assert!(!equivalent(&a, &b, 0.03, 0.01));
        let far = noisy(11.0, 0.01, 50, 3);
        assert!(!equivalent(&noisy(10.0, 0.01, 50, 4), &far, 0.03, 0.01));
    }

    #[test]
    fn ratio_intervals_cover_the_true_ratio() {
        let mut covered = 0;
        for seed in 0..400 {
            let a = noisy(11.0, 0.1, 40, seed);
            let b = noisy(10.0, 0.1, 40, seed + 10_000);
            let r = median_ratio_interval(&a, &b, 0.95).unwrap();
            assert!(r.low <= r.ratio && r.ratio <= r.high);
            if r.low <= 1.1 && 1.1 <= r.high {
                covered += 1;
            }
        }
        // Each median's interval covers at least 95 %: the combination too.
        assert!((370..=400).contains(&covered), "{covered} of 400");
        assert!(median_ratio_interval(&[], &[1.0], 0.95).is_none());
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
        // confidence intervals would no longer reproduce.
        assert_eq!(seed_for(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(seed_for("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(seed_for("all_reduce/8/bf16/graph/4096/nccl"), seed_for("x"));
    }
}
