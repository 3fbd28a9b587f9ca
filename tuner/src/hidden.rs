//! Whether the fused all-reduce + add + RMSNorm's crossovers move with the
//! hidden size. Its tables are keyed by bytes, as vLLM and FlashInfer key
//! them; a sweep at several hidden sizes (`tuner sweep --hidden 4096,2048,…`)
//! fits the first and measures the others, and here the first hidden size's
//! bands are judged on each other one's measurements: when they cost more
//! than the margin over the fastest measured algorithm at some size, the
//! crossovers move by more than the noise allows for, and the report (the
//! sweep's log, and the fused tables' notes: [`note`]) says where; otherwise
//! the first's table holds there too. A crossing between two
//! algorithms that are within the margin of each other around it can sit
//! anywhere in that range at no cost, so where the edges land is reported but
//! does not decide.

use crate::evidence::KeyEvidence;
use crate::fit::KeyFit;
use crate::format;

/// The hidden size (elements of a row) of the fused all-reduce + add +
/// RMSNorm calls the tuner makes unless told otherwise: a Llama-8B's.
pub const DEFAULT_HIDDEN: usize = 4096;

/// Refuses a hidden size (`--hidden`) the fused kernels do not take.
pub fn check(hidden: usize) -> Result<(), String> {
    let (low, high, step) = (policy::HIDDEN_MIN, policy::HIDDEN_MAX, policy::HIDDEN_STEP);
    if (low..=high).contains(&hidden) && hidden.is_multiple_of(step) {
        Ok(())
    } else {
        Err(format!(
            "--hidden {hidden}: a row is a multiple of {step} elements in {low}..={high}"
        ))
    }
}

/// One key's crossovers at another hidden size, against the first's.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub hidden: usize,
    /// The first hidden size's bands cost more than the margin here somewhere.
    pub moved: bool,
    /// What the first hidden size's bands cost here, at worst (a fraction),
    /// and where; `None` where no size had the band's algorithm measured.
    pub worst: Option<(f64, u64)>,
    /// The other hidden size's crossovers, in words.
    pub crossovers: String,
}

impl Comparison {
    /// What the first hidden size's bands cost here, as both the log and the
    /// note say it: where they move, how much and where (`6.20% at 256KiB`);
    /// where they hold, the bound (`at most 1.20%`). `None`: not judged.
    fn cost(&self) -> Option<String> {
        self.worst.map(|(cost, at)| {
            if self.moved {
                format!("{} at {}", format::percent(cost), format::size(at))
            } else {
                format!("at most {}", format::percent(cost))
            }
        })
    }

    /// The sweep log's verdict on this key at this hidden size.
    pub fn verdict(&self) -> String {
        match self.cost() {
            Some(cost) if self.moved => format!(
                "crossovers MOVE: the first hidden size's bands cost {cost} (the fastest there is faster by more than the margin)"
            ),
            Some(cost) => format!(
                "crossovers do not move beyond the margin (the first hidden size's bands cost {cost} here)"
            ),
            None => "crossovers not judged (no size measured the first's algorithms)".to_string(),
        }
    }

    /// The verdict as a table's note says it, of the table's own bands.
    fn clause(&self) -> String {
        let hidden = self.hidden;
        match self.cost() {
            Some(cost) if self.moved => format!(
                "at hidden {hidden} these bands cost {cost} (the crossovers move beyond the margin)"
            ),
            Some(cost) => format!("at hidden {hidden} these bands cost {cost} (they hold)"),
            None => {
                format!("at hidden {hidden} not judged (no size measured these bands' algorithms)")
            }
        }
    }
}

/// What the note of a fused table fitted at hidden `first` adds once its key
/// was swept again at each of `others`: the hidden size its bytes stand for,
/// and per other size its [`Comparison`] from `comparisons`, or that it could
/// not be judged when it has none (no usable point there to fit).
pub fn note(first: usize, others: &[usize], comparisons: &[Comparison]) -> String {
    let clauses = others.iter().map(|&hidden| {
        comparisons.iter().find(|c| c.hidden == hidden).map_or_else(
            || format!("at hidden {hidden} not judged (no usable point)"),
            Comparison::clause,
        )
    });
    format!(
        "fitted at hidden {first} (bytes = tokens × hidden × element size); {}",
        format::list(clauses)
    )
}

/// The crossovers of `fit`, in words: `a → b between X and Y, …`.
pub fn crossovers(fit: &KeyFit) -> String {
    if fit.edges.is_empty() {
        return format!("no crossover ({} throughout)", fit.bands[0].algo.name());
    }
    format::list(fit.edges.iter().map(|e| {
        format!(
            "{} → {} between {} and {}",
            e.below.name(),
            e.above.name(),
            format::size(e.last_below),
            format::size(e.first_above)
        )
    }))
}

/// `first`'s bands (the key fitted at the first hidden size) judged on
/// `measured`, the same key swept at `hidden` and fitted as `other`: they
/// move when the first's bands cost more than `margin` there somewhere.
pub fn compare(
    first: &KeyFit,
    other: &KeyFit,
    measured: &KeyEvidence,
    hidden: usize,
    margin: f64,
) -> Comparison {
    let worst = crate::plot::regret(measured, &first.bands).map(|r| (r.worst, r.worst_at));
    Comparison {
        hidden,
        moved: worst.is_some_and(|(cost, _)| cost > margin),
        worst,
        crossovers: crossovers(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{PointEvidence, PointOrigin};
    use crate::fit::Edge;
    use policy::{Algo, Band, Collective, DType, Mode, TableKey};

    const KEY: TableKey = TableKey {
        collective: Collective::AllReduceAddRmsNorm,
        world_size: 2,
        dtype: DType::Bf16,
        mode: Mode::Graph,
    };

    /// A fit whose band below switches to the one above after `edge`.
    fn fit(edge: u64) -> KeyFit {
        KeyFit {
            key: KEY,
            bands: vec![
                Band {
                    max: Some(edge),
                    algo: Algo::OneShotPush,
                },
                Band {
                    max: None,
                    algo: Algo::TwoShotPush,
                },
            ],
            sizes: 2,
            min_samples: 25,
            edges: vec![Edge {
                last_below: edge,
                first_above: edge + 16,
                below: Algo::OneShotPush,
                above: Algo::TwoShotPush,
                at_last_below: (None, None),
                at_first_above: (None, None),
            }],
        }
    }

    /// Measurements at two sizes, in µs: `(one_shot_push, two_shot_push)`.
    fn measured(at: [(u64, f64, f64); 2]) -> KeyEvidence {
        let point = |bytes, algo, us: f64| PointEvidence {
            samples_us: vec![us; 5],
            verified: true,
            ..PointEvidence::new(bytes, algo, PointOrigin::Grid)
        };
        KeyEvidence {
            collective: KEY.collective,
            world_size: KEY.world_size,
            dtype: KEY.dtype,
            mode: KEY.mode,
            points: at
                .iter()
                .flat_map(|&(bytes, one, two)| {
                    [
                        point(bytes, Algo::OneShotPush, one),
                        point(bytes, Algo::TwoShotPush, two),
                    ]
                })
                .collect(),
        }
    }

    #[test]
    fn an_edge_between_algorithms_within_the_margin_does_not_move() {
        // The first hidden size's edge at 64 KiB, the other's at 128 KiB:
        // at 96 KiB the two are 1 % apart, less than the margin.
        let m = measured([(96 << 10, 10.1, 10.0), (256 << 10, 30.0, 20.0)]);
        let c = compare(&fit(64 << 10), &fit(128 << 10), &m, 8192, 0.025);
        assert!(!c.moved, "{c:?}");
        assert_eq!(c.worst.map(|w| w.1), Some(96 << 10));
        assert!(
            c.crossovers
                .contains("one_shot_push → two_shot_push between 128KiB")
        );
    }

    #[test]
    fn an_edge_that_costs_more_than_the_margin_moves() {
        // At 96 KiB the first's band (two_shot_push) is 20 % slower.
        let m = measured([(96 << 10, 10.0, 12.0), (256 << 10, 30.0, 20.0)]);
        let c = compare(&fit(64 << 10), &fit(128 << 10), &m, 2048, 0.025);
        assert!(c.moved, "{c:?}");
        let verdict = c.verdict();
        assert!(verdict.contains("cost 20.00% at 96KiB"), "{verdict}");
    }

    #[test]
    fn a_note_says_where_the_bands_hold_and_where_they_move() {
        // At 96 KiB the first's band (two_shot_push) is 1 % slower at 2048,
        // 20 % at 8192.
        let holds = measured([(96 << 10, 10.0, 10.1), (256 << 10, 30.0, 20.0)]);
        let moves = measured([(96 << 10, 10.0, 12.0), (256 << 10, 30.0, 20.0)]);
        let first = fit(64 << 10);
        let at_2048 = compare(&first, &fit(128 << 10), &holds, 2048, 0.025);
        let at_8192 = compare(&first, &fit(128 << 10), &moves, 8192, 0.025);
        assert_eq!(
            note(4096, &[2048, 8192], &[at_2048.clone(), at_8192.clone()]),
            "fitted at hidden 4096 (bytes = tokens × hidden × element size); \
             at hidden 2048 these bands cost at most 1.00% (they hold), \
             at hidden 8192 these bands cost 20.00% at 96KiB (the crossovers move beyond the margin)"
        );
        // The log says the same figures.
        assert!(at_2048.verdict().contains("cost at most 1.00% here"));
        assert!(at_8192.verdict().contains("cost 20.00% at 96KiB"));
    }

    #[test]
    fn a_note_says_which_hidden_sizes_could_not_be_judged() {
        let unmeasured = Comparison {
            hidden: 2048,
            moved: false,
            worst: None,
            crossovers: String::new(),
        };
        assert_eq!(
            note(4096, &[2048, 8192], &[unmeasured]),
            "fitted at hidden 4096 (bytes = tokens × hidden × element size); \
             at hidden 2048 not judged (no size measured these bands' algorithms), \
             at hidden 8192 not judged (no usable point)"
        );
    }
}
