//! Counter arithmetic of the protocols, as the kernels do it on the device. The
//! host never runs these during a call (replays need no host work); they exist
//! to state the rules once, to test them, and to drive the model checker.

use super::{DEAL_MAX_BYTES, DEAL_MIN_BYTES, DEAL_WORLD, PUSH_BUFFERS};

/// Push buffer used by the call after one that used `phase`.
pub const fn next_push_phase(phase: u32) -> u32 {
    (phase + 1) % PUSH_BUFFERS as u32
}

/// Push buffer a call in `phase` re-arms: the previous call's, i.e. the one two
/// ahead (mod 3), the only one no peer can be writing into.
pub const fn rearm_phase(phase: u32) -> u32 {
    (phase + 2) % PUSH_BUFFERS as u32
}

/// Staging half of the `use_count`-th use. Counters wrap at 2^64, an even
/// number, so halves keep alternating across the wrap.
pub const fn staging_half(use_count: u64) -> u64 {
    use_count & 1
}

/// Whether a barrier flag holding `flag` satisfies a wait for `target`. Counters
/// only increase (64-bit, so in practice they never wrap); they are compared by
/// signed distance, which also holds across the wrap.
pub const fn flag_reached(flag: u64, target: u64) -> bool {
    (flag.wrapping_sub(target) as i64) >= 0
}

/// Chunks a pull-family kernel moves `units` in, `chunk_units` at a time.
pub const fn chunks(units: u64, chunk_units: u64) -> u64 {
    units.div_ceil(chunk_units)
}

/// Packs per shard of the two-shot algorithm (the last shards may be short or
/// empty, which the kernel skips).
pub const fn shard_packs(packs: u64, world: u64) -> u64 {
    packs.div_ceil(world)
}

/// The packs of shard `s`: `start..end`.
pub const fn shard_range(packs: u64, world: u64, s: u64) -> (u64, u64) {
    let len = shard_packs(packs, world);
    let start = if s * len < packs { s * len } else { packs };
    let end = if (s + 1) * len < packs {
        (s + 1) * len
    } else {
        packs
    };
    (start, end)
}

/// Whether a custom kernel (the reference kernels never do) deals its warps to blocks in turn for a call of `bytes` per rank in a world
/// of `world` (prims.cu, `deals_warps`).
pub const fn deals_warps(world: usize, bytes: u64) -> bool {
    world == DEAL_WORLD && bytes >= DEAL_MIN_BYTES && bytes < DEAL_MAX_BYTES
}

/// The number of thread `thread` of block `block` in a grid of `blocks` x
/// `threads` (prims.cu, `first_unit`): block by block, or, `dealt`, warp w of
/// block b is warp w x blocks + b. Unit j of a call belongs to the thread
/// numbered j mod (blocks x threads).
pub const fn thread_number(block: u32, thread: u32, blocks: u32, threads: u32, dealt: bool) -> u64 {
    if dealt {
        ((thread / 32) as u64 * blocks as u64 + block as u64) * 32 + (thread % 32) as u64
    } else {
        block as u64 * threads as u64 + thread as u64
    }
}

/// The lowest thread number of block `block` (prims.cu, `block_has_work`: the
/// block has work when this is below the call's units).
pub const fn lowest_number(block: u32, threads: u32, dealt: bool) -> u64 {
    if dealt {
        block as u64 * 32
    } else {
        block as u64 * threads as u64
    }
}

/// The block that owns unit `j` of a chunk (or shard) in a grid of `blocks` x
/// `threads`, numbered as [`thread_number`] says.
pub const fn owner_block(j: u64, blocks: u32, threads: u32, dealt: bool) -> u32 {
    let number = j % (blocks as u64 * threads as u64);
    if dealt {
        ((number / 32) % blocks as u64) as u32
    } else {
        (number / threads as u64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_phases_cycle_through_three_buffers() {
        let mut phase = 0;
        let mut seen = Vec::new();
        for _ in 0..6 {
            seen.push(phase);
            // The buffer re-armed is never the current one nor the next one.
            assert_ne!(rearm_phase(phase), phase);
            assert_ne!(rearm_phase(phase), next_push_phase(phase));
            // It is the previous call's buffer.
            assert_eq!(next_push_phase(rearm_phase(phase)), phase);
            phase = next_push_phase(phase);
        }
        assert_eq!(seen, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn staging_halves_alternate_across_the_wrap() {
        let mut u = u64::MAX - 3;
        for _ in 0..8 {
            assert_ne!(staging_half(u), staging_half(u.wrapping_add(1)));
            u = u.wrapping_add(1);
        }
    }

    #[test]
    fn flags_compare_across_the_wrap() {
        assert!(flag_reached(5, 5));
        assert!(flag_reached(6, 5));
        assert!(!flag_reached(4, 5));
        assert!(!flag_reached(0, 1));
        // A peer that already signalled the next barrier satisfies this one.
        assert!(flag_reached(u64::MAX.wrapping_add(2), u64::MAX));
        assert!(flag_reached(1, u64::MAX));
        assert!(!flag_reached(u64::MAX, 1));
        // A per-block flag left behind by 2^31 + 1 calls (a block the grid of
        // those calls did not use) is still "not arrived": the 32-bit counters
        // of earlier versions read it as arrived.
        let stale = 7u64;
        let target = stale + (1u64 << 31) + 1;
        assert!(!flag_reached(stale, target));
        assert!((stale as u32).wrapping_sub(target as u32) as i32 >= 0);
    }

    #[test]
    fn chunks_cover_every_unit_once() {
        for units in [1u64, 2, 15, 16, 17, 1000] {
            for chunk in [1u64, 3, 16, 4096] {
                let n = chunks(units, chunk);
                let covered: u64 = (0..n).map(|c| (units - c * chunk).min(chunk)).sum();
                assert_eq!(covered, units);
                assert!(n * chunk >= units && (n - 1) * chunk < units);
            }
        }
    }

    #[test]
    fn shards_partition_any_number_of_packs() {
        for world in 1..=8u64 {
            for packs in 1..=70u64 {
                let mut next = 0;
                for s in 0..world {
                    let (start, end) = shard_range(packs, world, s);
                    assert!(start <= end);
                    assert_eq!(start, next.min(packs), "packs={packs} world={world} s={s}");
                    next = end;
                }
                assert_eq!(next, packs);
            }
        }
    }

    #[test]
    fn the_owner_of_a_unit_is_the_same_in_every_chunk_and_shard() {
        // Units at the same index of different chunks/shards share their owner,
        // which is what lets the pull kernels synchronise block by block.
        let (blocks, threads) = (3u32, 4u32);
        for j in 0..50u64 {
            let b = owner_block(j, blocks, threads, false);
            assert!(b < blocks);
            assert_eq!(b, owner_block(j + 12 * 7, blocks, threads, false));
        }
        assert_eq!(owner_block(0, blocks, threads, false), 0);
        assert_eq!(owner_block(4, blocks, threads, false), 1);
        assert_eq!(owner_block(11, blocks, threads, false), 2);
        assert_eq!(owner_block(12, blocks, threads, false), 0);
        // Dealt: 32 consecutive units per warp, warps to blocks in turn.
        let (blocks, threads) = (3u32, 64u32);
        assert_eq!(owner_block(31, blocks, threads, true), 0);
        assert_eq!(owner_block(32, blocks, threads, true), 1);
        assert_eq!(owner_block(95, blocks, threads, true), 2);
        assert_eq!(owner_block(96, blocks, threads, true), 0);
        assert_eq!(owner_block(96 + 192 * 5, blocks, threads, true), 0);
    }

    /// Every (block, thread) of the grid, numbered.
    fn numbers(blocks: u32, threads: u32, dealt: bool) -> Vec<(u64, u32)> {
        let mut all = Vec::new();
        for block in 0..blocks {
            for thread in 0..threads {
                all.push((thread_number(block, thread, blocks, threads, dealt), block));
            }
        }
        all
    }

    #[test]
    fn both_numberings_number_every_thread_once() {
        for (blocks, threads) in [
            (1, 32),
            (3, 64),
            (7, 96),
            (132, 1024),
            (132, 512),
            (32, 1024),
        ] {
            for dealt in [false, true] {
                let mut seen: Vec<u64> = numbers(blocks, threads, dealt)
                    .iter()
                    .map(|n| n.0)
                    .collect();
                seen.sort_unstable();
                let expected: Vec<u64> = (0..blocks as u64 * threads as u64).collect();
                assert_eq!(seen, expected, "{blocks} x {threads}, dealt {dealt}");
            }
        }
    }

    #[test]
    fn owner_block_and_lowest_number_agree_with_the_numbering() {
        for (blocks, threads) in [(3, 64), (5, 96), (132, 1024)] {
            for dealt in [false, true] {
                let all = numbers(blocks, threads, dealt);
                for &(number, block) in &all {
                    assert_eq!(owner_block(number, blocks, threads, dealt), block);
                }
                for block in 0..blocks {
                    let lowest = all.iter().filter(|n| n.1 == block).map(|n| n.0).min();
                    assert_eq!(lowest, Some(lowest_number(block, threads, dealt)));
                }
            }
        }
    }

    #[test]
    fn a_warp_takes_32_consecutive_units_in_both_numberings() {
        let (blocks, threads) = (5u32, 128u32);
        for dealt in [false, true] {
            for block in 0..blocks {
                for warp in 0..threads / 32 {
                    let first = thread_number(block, warp * 32, blocks, threads, dealt);
                    assert_eq!(first % 32, 0);
                    for lane in 0..32 {
                        let n = thread_number(block, warp * 32 + lane, blocks, threads, dealt);
                        assert_eq!(n, first + lane as u64);
                    }
                }
            }
        }
    }

    #[test]
    fn only_the_world_of_two_deals_and_only_between_the_bounds() {
        assert!(!deals_warps(2, DEAL_MIN_BYTES - 16));
        assert!(deals_warps(2, DEAL_MIN_BYTES));
        assert!(deals_warps(2, DEAL_MAX_BYTES - 16));
        assert!(!deals_warps(2, DEAL_MAX_BYTES));
        for world in [1, 3, 4, 8] {
            assert!(!deals_warps(world, 64 * 1024), "{world}");
        }
    }
}
