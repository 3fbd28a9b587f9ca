//! Measuring one size: verify each candidate and time it once, then spend
//! more rounds where the choice at that size is open: on the fastest
//! candidate and the runner-up, when the interval of their ratio of medians
//! straddles the margin (more samples could still say whether the fastest
//! wins by more than the margin, or the two tie) and is not yet known to
//! within the resolution either way ([`open_contest`] says why the runner-up
//! alone). Shared by `sweep` (grid points and bisection probes) and `verify`
//! (held-out sizes).
//!
//! Rounds of several candidates are interleaved (one round each in turn, the
//! order reversed every round), so a machine whose speed drifts during the
//! measurement shifts them alike.

use std::collections::BTreeMap;

use policy::{Algo, TableKey};

use crate::backend::{Backend, BackendError, Repetitions, Validated};
use crate::evidence::{PointEvidence, PointOrigin};
use crate::observe::{Observer, RunStatus};
use crate::stats;

/// Every algorithm measured at one size.
pub type Column = BTreeMap<Algo, PointEvidence>;

/// How hard to work on each point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Effort {
    pub reps: Repetitions,
    /// The fit's margin: the choice between the fastest candidate and
    /// another is open while the interval of their ratio holds `1 − margin`…
    pub margin: f64,
    /// …and either end of it lies farther than this fraction from the
    /// estimate (closer, the ratio is known well enough whichever side of
    /// the margin it falls)…
    pub resolution: f64,
    /// …at this coverage.
    pub confidence: f64,
    /// Extra rounds an open choice may get at a grid point (or a held-out
    /// size in `verify`)…
    pub max_remeasure_rounds: u32,
    /// …and at a bisection probe, where the contenders are close by design.
    pub max_probe_rounds: u32,
}

/// Verifies `algo` at `bytes`, then times it once (`reps`). A wrong result
/// (or a declined size) gives a point with that error and no samples — not a
/// failure of the run: the candidate is simply out at this size. A failure
/// while timing is returned with the point as far as it got.
pub fn measure_point(
    backend: &mut dyn Backend,
    key: TableKey,
    bytes: u64,
    algo: Algo,
    origin: PointOrigin,
    effort: &Effort,
) -> Result<PointEvidence, (PointEvidence, BackendError)> {
    let mut point = PointEvidence::new(bytes, algo, origin);
    match backend.validate(key, algo, bytes) {
        Ok(Validated::Yes) => point.verified = true,
        Ok(Validated::Skipped) => {}
        Err(e) => {
            point.error = Some(e.0);
            return Ok(point);
        }
    }
    if let Err(e) = add_samples(backend, key, &mut point, effort.reps) {
        point.error = Some(e.0.clone());
        return Err((point, e));
    }
    Ok(point)
}

/// Adds to `cost` (points, seconds) what a first look at each of `sizes` of
/// `key` measures: every candidate once, with `reps`.
pub fn add_first_look_cost(
    cost: &mut (u64, f64),
    backend: &dyn Backend,
    key: TableKey,
    sizes: impl IntoIterator<Item = u64>,
    reps: Repetitions,
) {
    for bytes in sizes {
        for algo in backend.candidates(key.collective, key.world_size, bytes) {
            cost.0 += 1;
            cost.1 += backend.estimated_point_seconds(key, algo, bytes, reps);
        }
    }
}

/// Verifies and times once ([`measure_point`]) every candidate at `bytes`
/// that `column` does not hold yet, adding each point to it (one whose timing
/// failed, as far as it got). Stops when the observer asks to, or at the
/// first failure.
pub fn first_look(
    backend: &mut dyn Backend,
    key: TableKey,
    (bytes, origin): (u64, PointOrigin),
    effort: &Effort,
    column: &mut Column,
    observer: &mut dyn Observer,
) -> Result<(), RunStatus> {
    for algo in backend.candidates(key.collective, key.world_size, bytes) {
        if observer.should_stop() {
            return Err(RunStatus::Interrupted);
        }
        if column.contains_key(&algo) {
            continue;
        }
        let (point, failure) = match measure_point(backend, key, bytes, algo, origin, effort) {
            Ok(point) => (point, None),
            Err((point, e)) => (point, Some(e)),
        };
        column.insert(algo, point);
        if let Some(e) = failure {
            return Err(RunStatus::failed(key, algo, bytes, &e));
        }
        observer.point_done(&key, bytes, algo);
    }
    Ok(())
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

/// One round for each of `algos` in `column`, in the given order on even
/// rounds and reversed on odd ones, so that a drift during the rounds is
/// shared out evenly.
pub fn interleaved_round(
    backend: &mut dyn Backend,
    key: TableKey,
    column: &mut Column,
    algos: &[Algo],
    round: u32,
    reps: Repetitions,
) -> Result<(), (Algo, BackendError)> {
    let mut order = algos.to_vec();
    if round % 2 == 1 {
        order.reverse();
    }
    for algo in order {
        if let Some(point) = column.get_mut(&algo) {
            add_samples(backend, key, point, reps).map_err(|e| (algo, e))?;
        }
    }
    Ok(())
}

/// The two best candidates at a size (by median), when the choice between
/// them is open: the interval of the fastest's median over the runner-up's
/// holds `1 − margin`, and one of its ends lies farther than the resolution
/// from the estimate. `None` when it is not. Only the runner-up is contested:
/// a third candidate within the margin of the fastest can take the size only
/// by a tie with its neighbouring band, which costs at most the margin;
/// refining every such candidate, where three or four are within a few per
/// cent (a loopback world's eager keys), costs a sweep about a fifth more
/// time (docs/results.md, "The sweep's cost").
pub fn open_contest(column: &Column, effort: &Effort) -> Option<Vec<Algo>> {
    let mut by_median: Vec<(Algo, f64)> = medians(column).into_iter().collect();
    by_median.sort_by(|a, b| a.1.total_cmp(&b.1));
    let [(fast, _), (runner_up, _), ..] = by_median[..] else {
        return None;
    };
    let threshold = 1.0 - effort.margin;
    let known = 1.0 + effort.resolution;
    stats::ratio(
        &column[&fast].samples_us,
        &column[&runner_up].samples_us,
        effort.confidence,
    )
    .is_some_and(|r| {
        r.low <= threshold
            && threshold <= r.high
            && (r.ratio / r.low > known || r.high / r.ratio > known)
    })
    .then(|| vec![fast, runner_up])
}

/// Spends up to `max_rounds` extra rounds at one size, interleaved, on the
/// candidates whose choice is still open ([`open_contest`]), until none is.
/// Returns how many rounds it took.
pub fn settle(
    backend: &mut dyn Backend,
    key: TableKey,
    column: &mut Column,
    max_rounds: u32,
    effort: &Effort,
) -> Result<u32, (Algo, BackendError)> {
    for round in 0..max_rounds {
        let Some(open) = open_contest(column, effort) else {
            return Ok(round);
        };
        interleaved_round(backend, key, column, &open, round, effort.reps)?;
    }
    Ok(max_rounds)
}

/// Median of every usable algorithm.
pub fn medians(column: &Column) -> BTreeMap<Algo, f64> {
    column
        .iter()
        .filter(|(_, p)| p.usable())
        .map(|(&algo, p)| (algo, stats::median(&p.samples_us)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::synthetic::{Drift, SyntheticBackend, SyntheticConfig};
    use policy::{Collective, DType, Mode};

    const KEY: TableKey = TableKey {
        collective: Collective::AllReduce,
        world_size: 8,
        dtype: DType::Bf16,
        mode: Mode::Graph,
    };

    fn effort() -> Effort {
        Effort {
            reps: Repetitions {
                samples: 25,
                warmup: 0,
            },
            margin: 0.02,
            resolution: 0.01,
            confidence: 0.95,
            max_remeasure_rounds: 2,
            max_probe_rounds: 3,
        }
    }

    fn empty(algo: Algo) -> PointEvidence {
        PointEvidence {
            bytes: 4096,
            algo,
            origin: PointOrigin::Grid,
            verified: true,
            error: None,
            samples_us: Vec::new(),
        }
    }

    /// Two identical algorithms on a machine that slows down steadily: one
    /// measured after the other looks slower; measured in interleaved rounds,
    /// both see the same machine.
    #[test]
    fn interleaved_rounds_share_a_drift() {
        let config = || {
            let mut config = SyntheticConfig::pure_noise(0.002, 3);
            // A quarter cycle (a steady slow-down of 10 %) over the 8 rounds.
            config.drift = Some(Drift {
                amplitude: 0.1,
                period_samples: 800.0,
                phase: 0.0,
            });
            config
        };
        let (a, b) = (Algo::OneShotPush, Algo::Nccl);
        let ratio = |column: &Column| {
            let m = medians(column);
            m[&a] / m[&b]
        };
        let mut backend = SyntheticBackend::new(config());
        let mut sequential = Column::from([(a, empty(a)), (b, empty(b))]);
        for algo in [a, b] {
            for _ in 0..4 {
                add_samples(
                    &mut backend,
                    KEY,
                    sequential.get_mut(&algo).unwrap(),
                    effort().reps,
                )
                .unwrap();
            }
        }
        let mut backend = SyntheticBackend::new(config());
        let mut interleaved = Column::from([(a, empty(a)), (b, empty(b))]);
        for round in 0..4 {
            interleaved_round(
                &mut backend,
                KEY,
                &mut interleaved,
                &[a, b],
                round,
                effort().reps,
            )
            .unwrap();
        }
        let off = |r: f64| (r - 1.0).abs();
        assert!(off(ratio(&sequential)) > 0.02, "{}", ratio(&sequential));
        assert!(off(ratio(&interleaved)) < 0.01, "{}", ratio(&interleaved));
    }

    /// Rounds go where the choice is open: a clearly slower candidate gets
    /// none, close ones get rounds until the interval of their ratio to the
    /// fastest leaves the margin.
    #[test]
    fn settling_spends_rounds_only_on_open_choices() {
        let mut backend = SyntheticBackend::new(SyntheticConfig::nominal(0.15, 4));
        // At 34 KiB pull is 3.4 % faster than push (they cross at 32 KiB);
        // NCCL is six times slower.
        let bytes = 34 * 1024;
        let mut column = Column::new();
        for algo in backend.candidates(KEY.collective, KEY.world_size, bytes) {
            let point = measure_point(&mut backend, KEY, bytes, algo, PointOrigin::Grid, &effort())
                .unwrap();
            column.insert(algo, point);
        }
        let rounds = settle(&mut backend, KEY, &mut column, 12, &effort()).unwrap();
        assert!(rounds > 0);
        let samples = |algo| column[&algo].samples_us.len();
        assert_eq!(samples(Algo::Nccl), 25, "NCCL is clearly out");
        assert!(samples(Algo::OneShotPull) > 25);
        assert!(samples(Algo::OneShotPush) > 25);
        assert!(open_contest(&column, &effort()).is_none() || rounds == 12);
        assert_eq!(fastest(&column), Some(Algo::OneShotPull));
    }
}
