//! Whether the fused all-reduce + add + RMSNorm's crossovers move with the
//! hidden size. Its tables are keyed by bytes, as vLLM and FlashInfer key
//! them; a sweep at several hidden sizes (`tuner sweep --hidden 4096,2048,…`)
//! fits the first and measures the others, and here the first hidden size's
//! bands are judged on each other one's measurements: when they cost more
//! than the margin over the fastest measured algorithm at some size, the
//! crossovers move by more than the noise allows for, and the report (the
//! sweep's log, and its evidence, from which the fused tables' notes say it:
//! [`note`]) says where; otherwise the first's table holds there too. A
//! crossing between two algorithms that are within the margin of each other
//! around it can sit anywhere in that range at no cost, so where the edges
//! land is reported but does not decide.

use crate::evidence::{HiddenFinding, HiddenSizes, KeyEvidence, Unjudged};
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
    /// What the first hidden size's bands cost here, as the evidence records
    /// it ([`KeyEvidence::hidden`]).
    pub finding: HiddenFinding,
    /// The other hidden size's crossovers, in words.
    pub crossovers: String,
}

impl Comparison {
    /// The sweep log's verdict on this key at this hidden size.
    pub fn verdict(&self) -> String {
        match self.finding {
            HiddenFinding::Moves {
                worst_cost,
                worst_at,
                ..
            } => format!(
                "crossovers MOVE: the first hidden size's bands cost {} (the fastest there is faster by more than the margin)",
                moved_cost(worst_cost, worst_at)
            ),
            HiddenFinding::Holds { worst_cost, .. } => format!(
                "crossovers do not move beyond the margin (the first hidden size's bands cost {} here)",
                held_cost(worst_cost)
            ),
            HiddenFinding::NotJudged { why, .. } => {
                let why = match why {
                    Unjudged::BandsUnmeasured => "no size measured the first's algorithms",
                    Unjudged::NoUsablePoint => "no usable point",
                };
                format!("crossovers not judged ({why})")
            }
        }
    }
}

/// Where bands move, how much and where, as both the log and the note say
/// it: `6.20% at 256KiB`.
fn moved_cost(worst_cost: f64, worst_at: u64) -> String {
    format!(
        "{} at {}",
        format::percent(worst_cost),
        format::size(worst_at)
    )
}

/// Where bands hold, the bound, as both the log and the note say it: `at
/// most 1.20%`.
fn held_cost(worst_cost: f64) -> String {
    format!("at most {}", format::percent(worst_cost))
}

/// A finding as a table's note says it, of the table's own bands.
fn clause(finding: &HiddenFinding) -> String {
    let hidden = finding.hidden();
    match *finding {
        HiddenFinding::Moves {
            worst_cost,
            worst_at,
            ..
        } => format!(
            "at hidden {hidden} these bands cost {} (the crossovers move beyond the margin)",
            moved_cost(worst_cost, worst_at)
        ),
        HiddenFinding::Holds { worst_cost, .. } => format!(
            "at hidden {hidden} these bands cost {} (they hold)",
            held_cost(worst_cost)
        ),
        HiddenFinding::NotJudged { why, .. } => {
            let why = match why {
                Unjudged::BandsUnmeasured => "no size measured these bands' algorithms",
                Unjudged::NoUsablePoint => "no usable point",
            };
            format!("at hidden {hidden} not judged ({why})")
        }
    }
}

/// What the evidence records for a fused key fitted at hidden `fitted_at`
/// once it was swept again at each of `others`: per size its finding from
/// `found`, or, where it has none, that the key had no usable point there.
pub fn hidden_sizes(fitted_at: usize, others: &[usize], found: &[HiddenFinding]) -> HiddenSizes {
    let finding_at = |hidden| {
        found
            .iter()
            .find(|f| f.hidden() == hidden)
            .copied()
            .unwrap_or(HiddenFinding::NotJudged {
                hidden,
                why: Unjudged::NoUsablePoint,
            })
    };
    HiddenSizes {
        fitted_at,
        others: others.iter().map(|&hidden| finding_at(hidden)).collect(),
    }
}

/// What the note of a fused table adds from its key's evidence: the hidden
/// size its bytes stand for, and what its bands cost at each other one.
pub fn note(sizes: &HiddenSizes) -> String {
    format!(
        "fitted at hidden {} (bytes = tokens × hidden × element size); {}",
        sizes.fitted_at,
        format::list(sizes.others.iter().map(clause))
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
    let finding = match crate::plot::regret(measured, &first.bands) {
        None => HiddenFinding::NotJudged {
            hidden,
            why: Unjudged::BandsUnmeasured,
        },
        // Judged on the cost as recorded, so that the evidence agrees with
        // itself.
        Some(regret) => {
            let (worst_cost, worst_at) = (recorded(regret.worst), regret.worst_at);
            if worst_cost > margin {
                HiddenFinding::Moves {
                    hidden,
                    worst_cost,
                    worst_at,
                }
            } else {
                HiddenFinding::Holds {
                    hidden,
                    worst_cost,
                    worst_at,
                }
            }
        }
    };
    Comparison {
        finding,
        crossovers: crossovers(other),
    }
}

/// A cost as the evidence records it, to a millionth (the note shows a
/// hundredth of a percent): a decimal that short reads back from the JSON as
/// exactly this value, so the note a re-fit writes from the evidence says
/// what the sweep's said, to the last digit.
fn recorded(cost: f64) -> f64 {
    (cost * 1e6).round() / 1e6
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
            points: at
                .iter()
                .flat_map(|&(bytes, one, two)| {
                    [
                        point(bytes, Algo::OneShotPush, one),
                        point(bytes, Algo::TwoShotPush, two),
                    ]
                })
                .collect(),
            ..KeyEvidence::new(KEY)
        }
    }

    #[test]
    fn an_edge_between_algorithms_within_the_margin_does_not_move() {
        // The first hidden size's edge at 64 KiB, the other's at 128 KiB:
        // at 96 KiB the two are 1 % apart, less than the margin.
        let m = measured([(96 << 10, 10.1, 10.0), (256 << 10, 30.0, 20.0)]);
        let c = compare(&fit(64 << 10), &fit(128 << 10), &m, 8192, 0.025);
        assert!(
            matches!(c.finding, HiddenFinding::Holds { worst_at, .. } if worst_at == 96 << 10),
            "{c:?}"
        );
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
        assert!(matches!(c.finding, HiddenFinding::Moves { .. }), "{c:?}");
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
        let sizes = hidden_sizes(4096, &[2048, 8192], &[at_2048.finding, at_8192.finding]);
        assert_eq!(
            note(&sizes),
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
        // No size at 2048 had the bands' algorithms usable; 8192 had no
        // usable point at all, so no finding.
        let m = measured([(96 << 10, 10.0, 10.0), (256 << 10, 30.0, 20.0)]);
        let mut unmeasured = KeyFit {
            bands: vec![Band {
                max: None,
                algo: Algo::Unfused,
            }],
            ..fit(64 << 10)
        };
        unmeasured.edges.clear();
        let at_2048 = compare(&unmeasured, &fit(128 << 10), &m, 2048, 0.025);
        assert!(at_2048.verdict().contains("not judged"), "{at_2048:?}");
        let sizes = hidden_sizes(4096, &[2048, 8192], &[at_2048.finding]);
        assert_eq!(
            note(&sizes),
            "fitted at hidden 4096 (bytes = tokens × hidden × element size); \
             at hidden 2048 not judged (no size measured these bands' algorithms), \
             at hidden 8192 not judged (no usable point)"
        );
    }

    #[test]
    fn a_recorded_cost_reads_back_from_json_as_itself() {
        // serde_json (without its float_roundtrip feature) reads about one in
        // eight of these unrounded costs back an ulp off.
        for i in 0..100_000 {
            let cost = recorded((f64::from(i) * 0.618_033_988_75).fract() * 0.3);
            let text = serde_json::to_string(&cost).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(back.to_bits(), cost.to_bits(), "{text}");
        }
    }
}
