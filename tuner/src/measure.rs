//! Measuring one size: verify each candidate, time it, re-measure while its
//! median is too uncertain, and settle close calls between two contenders.
//! Shared by `sweep` (grid points and bisection probes) and `verify`
//! (held-out sizes).

use std::collections::BTreeMap;

use tuned_schema::{Algo, TableKey};

use crate::backend::{Backend, BackendError, Repetitions, Validated};
use crate::evidence::{Origin, PointEvidence};
use crate::stats;

/// Every algorithm measured at one size.
pub type Column = BTreeMap<Algo, PointEvidence>;

/// How hard to work on each point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Effort {
    pub reps: Repetitions,
    /// Re-measure while the median's relative CI half-width exceeds this…
    pub remeasure_threshold: f64,
    /// …at most this many extra rounds.
    pub max_remeasure_rounds: u32,
    /// Extra rounds for two contenders that are not significantly apart.
    pub max_probe_rounds: u32,
    /// Significance level of "one contender is faster".
    pub alpha: f64,
}

/// Verifies `algo` at `bytes`, then times it. A wrong result (or a declined
/// size) gives a point with that error and no samples — not a failure of the
/// run: the candidate is simply out at this size. A failure while timing is
/// returned with the point as far as it got.
pub fn measure_point(
    backend: &mut dyn Backend,
    key: TableKey,
    bytes: u64,
    algo: Algo,
    origin: Origin,
    effort: &Effort,
) -> Result<PointEvidence, (PointEvidence, BackendError)> {
    let mut point = PointEvidence {
        bytes,
        algo,
        origin,
        verified: false,
        error: None,
        samples_us: Vec::new(),
    };
    match backend.validate(key, algo, bytes) {
        Ok(Validated::Yes) => point.verified = true,
        Ok(Validated::Skipped) => {}
        Err(e) => {
            point.error = Some(e.0);
            return Ok(point);
        }
    }
    for round in 0..=effort.max_remeasure_rounds {
        if let Err(e) = add_samples(backend, key, &mut point, effort.reps) {
            point.error = Some(e.0.clone());
            return Err((point, e));
        }
        if round == effort.max_remeasure_rounds
            || stats::relative_spread(&point.samples_us) <= effort.remeasure_threshold
        {
            break;
        }
    }
    Ok(point)
}

/// Appends one round of samples to a point.
pub fn add_samples(
    backend: &mut dyn Backend,
    key: TableKey,
    point: &mut PointEvidence,
    reps: Repetitions,
) -> Result<(), BackendError> {
    let samples = backend.measure(key, point.algo, point.bytes, reps)?;
    point
        .samples_us
        .extend(samples.into_iter().map(round_to_ns));
    Ok(())
}

/// Near a crossover two contenders are close, and a verdict between them is
/// noise unless it rests on enough samples: add rounds to both until one is
/// significantly faster or the rounds run out (then the medians decide).
pub fn settle(
    backend: &mut dyn Backend,
    key: TableKey,
    column: &mut Column,
    contenders: (Algo, Algo),
    effort: &Effort,
) -> Result<(), BackendError> {
    let (a, b) = contenders;
    for _ in 0..effort.max_probe_rounds {
        let (Some(pa), Some(pb)) = (column.get(&a), column.get(&b)) else {
            return Ok(());
        };
        if pa.samples_us.is_empty() || pb.samples_us.is_empty() {
            return Ok(());
        }
        let apart = stats::faster_by_margin(&pa.samples_us, &pb.samples_us, 0.0, effort.alpha)
            .faster
            || stats::faster_by_margin(&pb.samples_us, &pa.samples_us, 0.0, effort.alpha).faster;
        if apart {
            return Ok(());
        }
        for algo in [a, b] {
            if let Some(point) = column.get_mut(&algo) {
                add_samples(backend, key, point, effort.reps)?;
            }
        }
    }
    Ok(())
}

/// Median (severe outliers removed) of every usable algorithm.
pub fn medians(column: &Column) -> BTreeMap<Algo, f64> {
    column
        .iter()
        .filter(|(_, p)| p.usable())
        .map(|(&algo, p)| {
            (
                algo,
                stats::median(&stats::without_severe_outliers(&p.samples_us)),
            )
        })
        .collect()
}

/// The algorithm with the lowest median, if any ran.
pub fn fastest(column: &Column) -> Option<Algo> {
    medians(column)
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(algo, _)| algo)
}

/// 1 ns resolution is far below what events resolve (~0.5 µs) and keeps the
/// evidence file short.
fn round_to_ns(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}
