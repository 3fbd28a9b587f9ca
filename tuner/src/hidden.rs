//! Whether the fused all-reduce + add + RMSNorm's crossovers move with the
//! hidden size. Its tables are keyed by bytes, as vLLM and FlashInfer key
//! them; a sweep at several hidden sizes (`tuner sweep --hidden 4096,2048,…`)
//! fits each and compares them here: the same algorithms in the same order,
//! with every crossover's bracket (the last measured size of the band below,
//! the first of the band above) overlapping the first hidden size's, is "the
//! crossovers do not move"; anything else moves them by more than the
//! sweep's resolution, and the report says where.

use crate::fit::{Edge, KeyFit};
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
    /// `None`: they do not move; else what differs, in words.
    pub moved: Option<String>,
    /// The other hidden size's crossovers, in words.
    pub crossovers: String,
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

/// `other` (fitted at `hidden`) against `first`, the same key at the first
/// hidden size.
pub fn compare(first: &KeyFit, other: &KeyFit, hidden: usize) -> Comparison {
    let order = |fit: &KeyFit| fit.bands.iter().map(|b| b.algo).collect::<Vec<_>>();
    let moved = if order(first) != order(other) {
        Some(format!(
            "other bands: {} against {}",
            format::bands(&other.bands, format::size),
            format::bands(&first.bands, format::size)
        ))
    } else {
        first
            .edges
            .iter()
            .zip(&other.edges)
            .find(|(a, b)| !overlap(a, b))
            .map(|(a, b)| {
                format!(
                    "{} → {} between {} and {} against {} and {}",
                    a.below.name(),
                    a.above.name(),
                    format::size(b.last_below),
                    format::size(b.first_above),
                    format::size(a.last_below),
                    format::size(a.first_above)
                )
            })
    };
    Comparison {
        hidden,
        moved,
        crossovers: crossovers(other),
    }
}

/// Whether two brackets of one crossover share a size.
fn overlap(a: &Edge, b: &Edge) -> bool {
    a.last_below <= b.first_above && b.last_below <= a.first_above
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{Algo, Band, Collective, DType, Mode, TableKey};

    fn fit(edges: &[(u64, u64)], algos: &[Algo]) -> KeyFit {
        let mut bands: Vec<Band> = edges
            .iter()
            .zip(algos)
            .map(|(&(low, _), &algo)| Band {
                max: Some(low),
                algo,
            })
            .collect();
        bands.push(Band {
            max: None,
            algo: *algos.last().unwrap(),
        });
        KeyFit {
            key: TableKey {
                collective: Collective::AllReduceAddRmsNorm,
                world_size: 2,
                dtype: DType::Bf16,
                mode: Mode::Graph,
            },
            bands,
            sizes: 20,
            min_samples: 25,
            edges: edges
                .iter()
                .zip(algos.windows(2))
                .map(|(&(last_below, first_above), pair)| Edge {
                    last_below,
                    first_above,
                    below: pair[0],
                    above: pair[1],
                    at_last_below: (None, None),
                    at_first_above: (None, None),
                })
                .collect(),
        }
    }

    const ALGOS: [Algo; 3] = [Algo::OneShotPush, Algo::TwoShotPush, Algo::Unfused];

    #[test]
    fn overlapping_brackets_do_not_move() {
        let first = fit(&[(96 << 10, 128 << 10), (1 << 20, 1536 << 10)], &ALGOS);
        let other = fit(&[(112 << 10, 144 << 10), (1280 << 10, 1536 << 10)], &ALGOS);
        let c = compare(&first, &other, 8192);
        assert_eq!(c.moved, None, "{c:?}");
        assert!(c.crossovers.contains("one_shot_push → two_shot_push"));
    }

    #[test]
    fn disjoint_brackets_or_other_bands_move() {
        let first = fit(&[(96 << 10, 128 << 10), (1 << 20, 1536 << 10)], &ALGOS);
        let later = fit(&[(256 << 10, 320 << 10), (1 << 20, 1536 << 10)], &ALGOS);
        let moved = compare(&first, &later, 2048).moved.expect("moved");
        assert!(moved.contains("one_shot_push → two_shot_push"), "{moved}");
        let fewer = fit(
            &[(1 << 20, 1536 << 10)],
            &[Algo::OneShotPush, Algo::Unfused],
        );
        let moved = compare(&first, &fewer, 2048).moved.expect("moved");
        assert!(moved.contains("other bands"), "{moved}");
    }
}
