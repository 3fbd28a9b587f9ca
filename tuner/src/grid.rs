//! Which message sizes get measured: the sweep grid, the midpoints bisection
//! probes, and the held-out sizes `verify` uses (never on the grid).
//!
//! Every size is a multiple of the key's alignment, so every custom kernel whose
//! capacity reaches it can take it: 16 bytes for all-reduce, 16 bytes per rank's
//! share (16·W of output) for all-gather.

use policy::{Algo, Capacity, CapacityEntry, Collective};

/// The size granularity of a key: the least common multiple of the alignments of
/// the custom algorithms that implement `collective`, applied to each rank's
/// share for all-gather.
pub fn alignment(capacities: &[CapacityEntry], collective: Collective, world_size: u32) -> u64 {
    let per_rank = capacities
        .iter()
        .filter(|c| c.collective == collective && c.algo.is_custom())
        .map(|c| c.capacity.align.max(1))
        .fold(policy::DEFAULT_ALIGN, lcm);
    collective.output_size(u64::from(world_size.max(1)), per_rank)
}

/// The sweep grid between `min` and `max` bytes: every power of two and the
/// point half-way to the next one (1.5 × 2^k), each rounded to a multiple of
/// `align`, deduplicated and sorted. Two points per octave keep neighbouring
/// points at most 1.5× apart; bisection refines wherever the winner changes.
pub fn sweep_sizes(min: u64, max: u64, align: u64) -> Vec<u64> {
    sizes_at_fractions(min, max, align, &[(1, 1), (3, 2)])
}

/// Held-out sizes for `verify`: 1.25 × 2^k and 1.75 × 2^k, aligned, with any
/// that land on the sweep grid removed, so a table is judged on sizes it was not
/// fitted on.
pub fn holdout_sizes(min: u64, max: u64, align: u64) -> Vec<u64> {
    let grid = sweep_sizes(min, max, align);
    sizes_at_fractions(min, max, align, &[(5, 4), (7, 4)])
        .into_iter()
        .filter(|s| grid.binary_search(s).is_err())
        .collect()
}

/// The aligned size nearest the geometric mean of `low` and `high`, if one lies
/// strictly between them.
pub fn midpoint(low: u64, high: u64, align: u64) -> Option<u64> {
    let geometric = ((low as f64) * (high as f64)).sqrt();
    let mid = round_to_multiple(geometric as u64, align);
    (mid > low && mid < high).then_some(mid)
}

/// `2^k × numerator / denominator` for every k, aligned, within `[min, max]`.
fn sizes_at_fractions(min: u64, max: u64, align: u64, fractions: &[(u64, u64)]) -> Vec<u64> {
    let align = align.max(1);
    let mut sizes = Vec::new();
    for exponent in 0..63 {
        let power = 1u64 << exponent;
        for &(numerator, denominator) in fractions {
            let Some(raw) = power.checked_mul(numerator).map(|s| s / denominator) else {
                continue;
            };
            let size = round_to_multiple(raw, align);
            if size >= min && size <= max && size > 0 {
                sizes.push(size);
            }
        }
    }
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Nearest multiple of `align`, never below `align` itself.
fn round_to_multiple(value: u64, align: u64) -> u64 {
    (value.saturating_add(align / 2) / align * align).max(align)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The least common multiple of two sizes.
pub fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// The custom algorithms of `capacities` that take a `collective` of `bytes`
/// over `world_size` ranks, after the collective's fallback (NCCL, or the
/// fused collective's unfused path), which takes everything.
pub fn candidates(
    capacities: &[CapacityEntry],
    collective: Collective,
    world_size: u32,
    bytes: u64,
) -> Vec<Algo> {
    let mut algos = vec![collective.fallback()];
    for &algo in collective.algos() {
        let accepted = capacities.iter().any(|c| {
            c.collective == collective
                && c.algo == algo
                && algo.is_custom()
                && c.capacity.accepts_message(collective, world_size, bytes)
        });
        if accepted {
            algos.push(algo);
        }
    }
    algos
}

/// An entry for every custom algorithm of every collective, in the
/// vocabulary's order, with the capacity `capacity` gives it.
pub fn custom_capacities(capacity: impl Fn(Collective, Algo) -> Capacity) -> Vec<CapacityEntry> {
    let mut entries = Vec::new();
    for collective in Collective::ALL {
        for &algo in collective.algos().iter().filter(|a| a.is_custom()) {
            let capacity = capacity(collective, algo);
            entries.push(CapacityEntry {
                collective,
                algo,
                capacity,
            });
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::Capacity;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;

    #[test]
    fn default_grid_has_two_points_per_octave() {
        let grid = sweep_sizes(16, 256 * MIB, 16);
        assert_eq!(grid.first(), Some(&16));
        assert_eq!(grid.last(), Some(&(256 * MIB)));
        // 16 B … 256 MiB is 24 octaves: 25 powers of two and 24 midpoints, of
        // which 24 B rounds up onto 32 B.
        assert_eq!(grid.len(), 48);
        assert!(grid.contains(&48));
        assert!(grid.contains(&(384 * KIB)));
        // Past the first octave (where 24 B rounds onto 32 B) neighbours are
        // at most 1.5× apart.
        assert!(
            grid[1..]
                .windows(2)
                .all(|w| w[1] as f64 / w[0] as f64 <= 1.5 + 1e-9)
        );
        assert!(grid.iter().all(|s| s % 16 == 0));
    }

    #[test]
    fn all_gather_grid_is_aligned_per_rank() {
        let caps = [CapacityEntry {
            collective: Collective::AllGather,
            algo: Algo::OneShotPush,
            capacity: Capacity {
                max_bytes: MIB,
                align: 16,
            },
        }];
        let align = alignment(&caps, Collective::AllGather, 6);
        assert_eq!(align, 96);
        let grid = sweep_sizes(16, MIB, align);
        assert!(grid.iter().all(|s| s % 96 == 0), "{grid:?}");
        assert!(grid.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn holdout_sizes_avoid_the_grid() {
        let grid = sweep_sizes(16, 64 * MIB, 16);
        let held = holdout_sizes(16, 64 * MIB, 16);
        assert!(!held.is_empty());
        assert!(held.iter().all(|s| grid.binary_search(s).is_err()));
        assert!(held.contains(&(5 * KIB)), "1.25 × 4 KiB");
        assert!(held.contains(&(7 * KIB)), "1.75 × 4 KiB");
    }

    #[test]
    fn midpoints_are_aligned_and_strictly_inside() {
        // √(64 KiB × 96 KiB) = 80264.9…, nearest multiple of 16: 80272.
        assert_eq!(midpoint(64 * KIB, 96 * KIB, 16), Some(80_272));
        assert_eq!(midpoint(64 * KIB, 96 * KIB, 16).unwrap() % 16, 0);
        assert_eq!(midpoint(16, 32, 16), None);
        assert_eq!(midpoint(1024, 1040, 16), None);
    }

    #[test]
    fn candidates_follow_capacity() {
        let caps = [
            CapacityEntry {
                collective: Collective::AllReduce,
                algo: Algo::OneShotPush,
                capacity: Capacity {
                    max_bytes: 64 * KIB,
                    align: 16,
                },
            },
            CapacityEntry {
                collective: Collective::AllReduce,
                algo: Algo::TwoShotPull,
                capacity: Capacity {
                    max_bytes: 8 * MIB,
                    align: 16,
                },
            },
        ];
        let small = candidates(&caps, Collective::AllReduce, 8, 4 * KIB);
        assert_eq!(
            small,
            vec![Algo::Nccl, Algo::OneShotPush, Algo::TwoShotPull]
        );
        let large = candidates(&caps, Collective::AllReduce, 8, MIB);
        assert_eq!(large, vec![Algo::Nccl, Algo::TwoShotPull]);
        let odd = candidates(&caps, Collective::AllReduce, 8, 4 * KIB + 8);
        assert_eq!(odd, vec![Algo::Nccl]);
        assert_eq!(
            candidates(&caps, Collective::AllGather, 8, KIB),
            vec![Algo::Nccl]
        );
    }
}
