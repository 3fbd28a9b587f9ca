//! GPU tests on ONE GPU: loopback worlds of 1, 2, 4 and 8 ranks.
//!
//! Every test is ignored by default; `scripts/gpu-run.sh` runs them with
//! `--include-ignored --test-threads=1`. Without a GPU they fail with a message
//! saying so. Each test prints a progress line per group of cases and collects
//! failures, so one run shows everything that is wrong.

mod gpu_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaContext;
use gpu_common::{Case, NEEDS_GPU, Placement, SendGraph, Suite, eager, gpu, graph};
use half::{bf16, f16};
use kernels::{Element, Error, Fallback, Options, RankComm, Select, World};
use policy::{Algo, AlgoKind, Collective, DType, Mode};
use tuner::harness::timing::{TimingCache, TimingSpec, measure, validate};
use tuner::harness::world::measuring;

const MIB: usize = 1 << 20;
const GRAPH_BYTES: usize = 65_552;
const GRAPH_REPLAYS: usize = 1000;

fn loopback(ctx: &Arc<CudaContext>, world: usize) -> Vec<RankComm> {
    World::loopback(ctx.clone(), world, measuring(None, true))
        .unwrap_or_else(|e| panic!("building a loopback world of {world}: {e}"))
}

/// Runs `case` in `mode`, requiring that `expect` ran; rebuilds the world after
/// a failure that broke it (every later call would fail) so later cases still
/// run.
fn run<T: Element>(
    suite: &mut Suite,
    ctx: &Arc<CudaContext>,
    ranks: &mut Vec<RankComm>,
    case: Case,
    mode: Mode,
    expect: Algo,
    replays: usize,
) {
    let world = ranks.len();
    let label = format!("{} {}", case.label::<T>(world), mode.name());
    let outcome = match mode {
        Mode::Eager => eager::<T>(ranks, &case),
        Mode::Graph => {
            let replays = if case.placement == Placement::InPlace
                && case.collective == Collective::AllReduce
            {
                1 // in-place sums grow with every replay
            } else {
                replays
            };
            graph::<T>(ranks, &case, replays)
        }
    }
    .and_then(|ran| {
        if ran == expect {
            Ok(ran)
        } else {
            Err(format!(
                "expected {} to run, but {} did",
                expect.name(),
                ran.name()
            ))
        }
    });
    suite.record(&label, outcome);
    if ranks.iter().any(|r| r.health().is_err()) {
        *ranks = loopback(ctx, world);
    }
}

/// What a forced call must run: the algorithm itself, or the fallback where
/// the (unit-tested) decline rule says so.
fn expected(ranks: &[RankComm], collective: Collective, algo: Algo, output_bytes: usize) -> Algo {
    match ranks[0].would_decline(collective, algo, output_bytes as u64) {
        None => algo,
        Some(_) => Algo::Nccl,
    }
}

fn output_bytes(collective: Collective, world: usize, per_rank_bytes: usize) -> usize {
    collective.output_size(world as u64, per_rank_bytes as u64) as usize
}

/// Bytes each rank contributes for the cases of `algo` in this world: one pack,
/// odd sizes, and every size where the number of blocks with work changes
/// (one block, two, half the grid, all of it, more than one step), where the
/// world of two starts and stops dealing warps to blocks, and where the grid
/// is full of dealt warps; then the largest size the algorithm takes. Sizes it
/// declines (not a whole number of packs) are the decline test's business,
/// except for the NCCL stand-in, which takes anything.
fn sizes_for(rank: &RankComm, collective: Collective, algo: Algo) -> Vec<usize> {
    let world = rank.world_size() as u64;
    let shape = rank.launch_shape();
    let (threads, grid) = (shape.threads as u64, shape.max_blocks as u64);
    // A kernel spreads units over its threads: packs of the message, or of
    // one shard for the two-shot algorithms.
    let per_unit = match algo {
        Algo::TwoShotPull | Algo::TwoShotPush => 16 * world,
        _ => 16,
    };
    let units = [
        1,
        3,
        threads - 1,
        threads,
        threads + 1,
        2 * threads + 1,
        (grid / 2).max(1) * threads,
        (grid - 1) * threads + 1,
        grid * threads,
        grid * threads + 1,
        2 * grid * threads + 1,
    ];
    let mut bytes: Vec<u64> = units.iter().map(|u| u * per_unit).collect();
    if rank.world_size() == 2 {
        let (low, high) = (8 << 10, 8 << 20);
        bytes.extend([low - 16, low, low + 16, high - 16, high, high + 16]);
        // Dealt: warp w of block b is warp w * grid + b, 32 units each.
        bytes.extend([32 * grid * per_unit, (32 * grid + 1) * per_unit]);
    }
    if algo == Algo::Nccl {
        // The stand-in is element granular and chunks through the staging
        // halves (at least 1 MiB).
        bytes.extend([48, 592, 2 * MIB as u64 + 48]);
    }
    let capacity = rank.capacity(collective, algo).max_bytes;
    let largest = collective.per_rank_size(world, capacity.min(64 << 20)) / 16 * 16;
    bytes.push(largest);
    bytes.retain(|&b| b > 0 && b <= largest);
    bytes.sort_unstable();
    bytes.dedup();
    bytes.into_iter().map(|b| b as usize).collect()
}

/// Every algorithm of both collectives in a loopback world of `world`, with
/// the default launch shape: bf16 at every size of [`sizes_for`], eager (calls
/// back to back) and captured (a graph of two calls, replayed); f16 and f32 at
/// a few sizes.
fn every_algorithm(world: usize) {
    let ctx = gpu();
    let mut suite = Suite::new(&format!("loopback world {world}: every algorithm"));
    let mut ranks = loopback(&ctx, world);
    assert_eq!(ranks[0].fallback_kind(), Fallback::LoopbackReference);
    let shape = ranks[0].launch_shape();
    suite.note(&format!(
        "{} blocks x {} threads per rank, programmatic launch {}",
        shape.max_blocks,
        shape.threads,
        ranks[0].programmatic_launch()
    ));
    for collective in gpu_common::PLAIN_COLLECTIVES {
        for &algo in collective.algos() {
            if algo.kind() == AlgoKind::Window && ranks[0].fallback_kind() != Fallback::Nccl {
                // No NCCL here, so no window: every size would decline to
                // the reference (world_of_one_runs_nccl_and_every_algorithm
                // runs it).
                continue;
            }
            let sizes = sizes_for(&ranks[0], collective, algo);
            for (i, &bytes) in sizes.iter().enumerate() {
                let out = output_bytes(collective, world, bytes);
                let expect = expected(&ranks, collective, algo, out);
                let case = Case {
                    collective,
                    how: Select::Force(algo),
                    per_rank: bytes / 2,
                    placement: Placement::OutOfPlace,
                    seed: (i as u64) << 8 | algo as u64,
                };
                // Large messages: fewer replays (their host checks dominate).
                let replays = if out > 4 * MIB { 2 } else { 5 };
                run::<bf16>(&mut suite, &ctx, &mut ranks, case, Mode::Eager, expect, 0);
                run::<bf16>(
                    &mut suite,
                    &ctx,
                    &mut ranks,
                    case,
                    Mode::Graph,
                    expect,
                    replays,
                );
            }
            // The other dtypes at one pack, a block's worth plus one, and a
            // full grid plus one.
            let threads = shape.threads as usize;
            let grid = shape.max_blocks as usize;
            for bytes in [16, (threads + 1) * 16, (grid * threads + 1) * 16] {
                let out = output_bytes(collective, world, bytes);
                let expect = expected(&ranks, collective, algo, out);
                let case = Case {
                    collective,
                    how: Select::Force(algo),
                    per_rank: bytes / 2,
                    placement: Placement::OutOfPlace,
                    seed: 0x1000 | bytes as u64,
                };
                for mode in [Mode::Eager, Mode::Graph] {
                    run::<f16>(&mut suite, &ctx, &mut ranks, case, mode, expect, 3);
                    let case = Case {
                        per_rank: bytes / 4,
                        ..case
                    };
                    run::<f32>(&mut suite, &ctx, &mut ranks, case, mode, expect, 3);
                }
            }
            suite.note(&format!(
                "{} {} done ({} sizes)",
                collective.name(),
                algo.name(),
                sizes.len()
            ));
        }
    }
    suite.finish();
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_world_2_every_algorithm() {
    every_algorithm(2);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_world_3_every_algorithm() {
    every_algorithm(3);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_world_4_every_algorithm() {
    every_algorithm(4);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_world_5_every_algorithm() {
    every_algorithm(5);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_world_6_every_algorithm() {
    every_algorithm(6);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_world_7_every_algorithm() {
    every_algorithm(7);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_world_8_every_algorithm() {
    every_algorithm(8);
}

/// Each algorithm captured once and replayed 1000 times (then once more on
/// new inputs), in worlds of 2 and 8.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_long_graph_replays() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback long graph replays");
    for world in [2, 8] {
        let mut ranks = loopback(&ctx, world);
        for collective in gpu_common::PLAIN_COLLECTIVES {
            for &algo in collective.algos() {
                let case = Case {
                    collective,
                    how: Select::Force(algo),
                    per_rank: GRAPH_BYTES / 2,
                    placement: Placement::OutOfPlace,
                    seed: 0xA000 | algo as u64,
                };
                let expect = expected(
                    &ranks,
                    collective,
                    algo,
                    output_bytes(collective, world, GRAPH_BYTES),
                );
                run::<bf16>(
                    &mut suite,
                    &ctx,
                    &mut ranks,
                    case,
                    Mode::Graph,
                    expect,
                    GRAPH_REPLAYS,
                );
            }
        }
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// A requested launch shape whose blocks could not all be resident (the
/// shape that deadlocked: 16 blocks per rank in a world of 8 under
/// programmatic launch) is refused when the world is built, saying why.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_shape_that_cannot_be_resident_is_refused() {
    let ctx = gpu();
    let mut suite = Suite::new("launch shapes");
    let options = Options {
        blocks: Some(16),
        ..measuring(None, true)
    };
    suite.record(
        "world 8, 16 blocks per rank, programmatic launch",
        match World::loopback(ctx.clone(), 8, options) {
            Err(Error::Unsupported(what)) if what.contains("resident") => {
                eprintln!("   ok: {what}");
                Ok(())
            }
            Err(other) => Err(format!("wrong error: {other}")),
            Ok(ranks) => Err(format!(
                "accepted {:?} (kernels hold {} block(s) per SM?)",
                ranks[0].launch_shape(),
                "at least 2"
            )),
        },
    );
    // Without programmatic launch the same blocks fit.
    let options = Options {
        blocks: Some(16),
        programmatic_launch: false,
        ..measuring(None, true)
    };
    suite.record(
        "world 8, 16 blocks per rank, no programmatic launch",
        World::loopback(ctx.clone(), 8, options)
            .map(|_| ())
            .map_err(|e| e.to_string()),
    );
    suite.finish();
}

/// In place, eager and captured, for every algorithm.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_in_place() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback in place");
    for world in [2, 8] {
        let mut ranks = loopback(&ctx, world);
        for collective in gpu_common::PLAIN_COLLECTIVES {
            for &algo in collective.algos() {
                for bytes in [4096, 65_552] {
                    for mode in [Mode::Eager, Mode::Graph] {
                        // NCCL on a window declines here (no NCCL in a loopback world).
                        let expect = expected(
                            &ranks,
                            collective,
                            algo,
                            output_bytes(collective, world, bytes),
                        );
                        let case = Case {
                            collective,
                            how: Select::Force(algo),
                            per_rank: bytes / 2,
                            placement: Placement::InPlace,
                            seed: 0xB000 | algo as u64,
                        };
                        run::<bf16>(
                            &mut suite,
                            &ctx,
                            &mut ranks,
                            case,
                            mode,
                            expect,
                            GRAPH_REPLAYS,
                        );
                        let case = Case {
                            per_rank: bytes / 4,
                            ..case
                        };
                        run::<f32>(
                            &mut suite,
                            &ctx,
                            &mut ranks,
                            case,
                            mode,
                            expect,
                            GRAPH_REPLAYS,
                        );
                    }
                }
            }
        }
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// Each custom algorithm at exactly its capacity (bf16), plus the reference at
/// a large size.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_capacity_sizes() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback capacity sizes");
    for world in [2, 3, 8] {
        let mut ranks = loopback(&ctx, world);
        let cap = |collective, algo| ranks[0].capacity(collective, algo).max_bytes as usize;
        let cases: [(Collective, Algo, usize); 6] = [
            (
                Collective::AllReduce,
                Algo::OneShotPush,
                cap(Collective::AllReduce, Algo::OneShotPush),
            ),
            (
                Collective::AllReduce,
                Algo::OneShotPull,
                cap(Collective::AllReduce, Algo::OneShotPull),
            ),
            (
                Collective::AllReduce,
                Algo::TwoShotPull,
                cap(Collective::AllReduce, Algo::TwoShotPull),
            ),
            (
                Collective::AllGather,
                Algo::OneShotPush,
                cap(Collective::AllGather, Algo::OneShotPush),
            ),
            (
                Collective::AllGather,
                Algo::OneShotPull,
                cap(Collective::AllGather, Algo::OneShotPull),
            ),
            (Collective::AllReduce, Algo::Nccl, 16 * MIB + 48),
        ];
        for (collective, algo, output_bytes) in cases {
            // The largest size the capacity takes: whole packs per rank.
            let per_rank_bytes =
                collective.per_rank_size(world as u64, output_bytes as u64) as usize / 16 * 16;
            let case = Case {
                collective,
                how: Select::Force(algo),
                per_rank: per_rank_bytes / 2,
                placement: Placement::OutOfPlace,
                seed: 0xC000 | algo as u64,
            };
            run::<bf16>(&mut suite, &ctx, &mut ranks, case, Mode::Eager, algo, 0);
        }
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// GPU memory free on `ctx`'s device, in bytes.
fn free_bytes(ctx: &Arc<CudaContext>) -> u64 {
    ctx.bind_to_thread().expect("binding the context");
    cudarc::driver::result::mem_get_info()
        .expect("cuMemGetInfo")
        .0 as u64
}

/// What a world registers, and a memory budget: every rank reports the same
/// footprint, within the budget; a loopback world sized by the tables (which
/// have no loopback platform, so select NCCL everywhere) registers only its
/// control blocks and the reference collective's staging; a world of one
/// registers an NCCL window only when asked; under a budget a forced call at
/// the lowered capacity runs the algorithm and one a pack past it runs the
/// fallback, both correct; and what the budget saves shows in the GPU's
/// free memory.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_memory_budget() {
    let ctx = gpu();
    let mut suite = Suite::new("memory budget");
    let by_tables = World::loopback(ctx.clone(), 4, Options::default()).expect("world");
    let f = by_tables[0].memory();
    suite.note(&format!("world 4 by the tables: {f}"));
    suite.record(
        "by the tables, a loopback world registers the reference's staging only",
        if by_tables.iter().all(|r| r.memory() == f)
            && f.push == 0
            && f.staging == 2 * MIB as u64
            && f.nccl_window == 0
            && by_tables[0]
                .capacity(Collective::AllReduce, Algo::OneShotPush)
                .max_bytes
                == 0
        {
            Ok(())
        } else {
            Err(format!("{f:?}"))
        },
    );
    drop(by_tables);

    // A world of one has NCCL. No shipped table selects nccl_symmetric, so
    // by the tables it registers no window; asked for, it registers one
    // (where NCCL has windows: 2.27 and later), counted in its footprint.
    let one = World::loopback(ctx.clone(), 1, Options::default()).expect("a world of one");
    suite.record(
        "a world of one registers no NCCL window unasked",
        match (one[0].window_bytes(), one[0].memory().nccl_window) {
            (0, 0) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    drop(one);
    let asked = Options {
        nccl_window: true,
        ..Options::default()
    };
    let one = World::loopback(ctx.clone(), 1, asked).expect("a world of one");
    let version = kernels::raw::nccl_version().unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let windows = (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (2, 27);
    let (bytes, counted) = (one[0].window_bytes(), one[0].memory().nccl_window);
    suite.note(&format!(
        "world of one asking for a window (NCCL {version}): {}",
        one[0].memory()
    ));
    suite.record(
        "a world of one asking for a window registers one, and counts it",
        if bytes == counted && (bytes > 0) == windows && bytes <= 64 << 20 {
            Ok(())
        } else {
            Err(format!(
                "window {bytes} bytes, counted {counted}, NCCL {version}"
            ))
        },
    );
    drop(one);

    const BUDGET: u64 = 64 << 20;
    let mut used = Vec::new();
    for budget in [None, Some(BUDGET)] {
        let before = free_bytes(&ctx);
        let mut ranks =
            World::loopback(ctx.clone(), 8, measuring(budget, false)).expect("a world of 8");
        let taken = before.saturating_sub(free_bytes(&ctx));
        let f = ranks[0].memory();
        suite.note(&format!(
            "world 8, budget {budget:?}: {f}; the GPU's free memory fell by {} MiB",
            taken >> 20
        ));
        used.push((taken, f.gpu()));
        suite.record(
            &format!("budget {budget:?}: every rank the same footprint, within the budget"),
            if ranks.iter().all(|r| r.memory() == f) && budget.is_none_or(|b| f.gpu() <= b) {
                Ok(())
            } else {
                Err(format!("{f:?}"))
            },
        );
        suite.record(
            &format!("budget {budget:?}: the GPU gave at least the footprint of every rank"),
            if taken >= 8 * f.gpu() {
                Ok(())
            } else {
                Err(format!("{taken} bytes for 8 x {}", f.gpu()))
            },
        );
        if budget.is_none() {
            continue;
        }
        let cap = ranks[0]
            .capacity(Collective::AllReduce, Algo::TwoShotPull)
            .max_bytes as usize;
        suite.note(&format!("two_shot_pull capped at {cap} bytes"));
        suite.record(
            "the budget lowered two_shot_pull's capacity",
            if cap > 0 && cap < 64 * MIB {
                Ok(())
            } else {
                Err(format!("{cap}"))
            },
        );
        let largest = cap / 16 * 16;
        for (bytes, expect) in [(largest, Algo::TwoShotPull), (largest + 16, Algo::Nccl)] {
            let case = Case {
                collective: Collective::AllReduce,
                how: Select::Force(Algo::TwoShotPull),
                per_rank: bytes / 2,
                placement: Placement::OutOfPlace,
                seed: 0xB00 | bytes as u64,
            };
            run::<bf16>(&mut suite, &ctx, &mut ranks, case, Mode::Eager, expect, 0);
        }
    }
    // What the budget saved per rank, and what it saved on the GPU, agree
    // within what allocation granularity and the driver's own use explain.
    let ((unbounded_taken, unbounded), (bounded_taken, bounded)) = (used[0], used[1]);
    let planned = 8 * (unbounded - bounded);
    let saved = unbounded_taken.saturating_sub(bounded_taken);
    suite.record(
        "the GPU's free memory shows what the budget saved",
        if saved.abs_diff(planned) <= planned / 10 + (64 << 20) {
            Ok(())
        } else {
            Err(format!("saved {saved} bytes, planned {planned}"))
        },
    );
    suite.finish();
}

/// Sizes a custom kernel must decline run on the fallback, correctly.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_declined_calls_fall_back() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback declines");
    for world in [2, 4] {
        let mut ranks = loopback(&ctx, world);
        // (collective, forced algo, elements per rank, dtype) that must decline.
        // One pack over push's capacity, in bf16 elements.
        let over_push = (ranks[0]
            .capacity(Collective::AllReduce, Algo::OneShotPush)
            .max_bytes as usize
            + 16)
            / 2;
        let cases: [(Collective, Algo, usize, DType); 6] = [
            (
                Collective::AllReduce,
                Algo::OneShotPush,
                over_push,
                DType::Bf16,
            ),
            (Collective::AllReduce, Algo::TwoShotPull, 6, DType::F32), // 24 bytes
            (Collective::AllReduce, Algo::OneShotPull, 7, DType::Bf16), // 14 bytes
            (Collective::AllGather, Algo::TwoShotPull, 64, DType::F32), // not implemented
            (Collective::AllGather, Algo::OneShotPush, 4, DType::Bf16), // 8-byte shares
            (Collective::AllGather, Algo::OneShotPull, 3, DType::F16), // 6-byte shares
        ];
        for (collective, algo, per_rank, dtype) in cases {
            for mode in [Mode::Eager, Mode::Graph] {
                let case = Case {
                    collective,
                    how: Select::Force(algo),
                    per_rank,
                    placement: Placement::OutOfPlace,
                    seed: 0xD000 | algo as u64,
                };
                match dtype {
                    DType::Bf16 => {
                        run::<bf16>(&mut suite, &ctx, &mut ranks, case, mode, Algo::Nccl, 10)
                    }
                    DType::F16 => {
                        run::<f16>(&mut suite, &ctx, &mut ranks, case, mode, Algo::Nccl, 10)
                    }
                    DType::F32 => {
                        run::<f32>(&mut suite, &ctx, &mut ranks, case, mode, Algo::Nccl, 10)
                    }
                }
            }
        }
        // The rule itself, as the tuner asks it.
        let decline = ranks[0].would_decline(
            Collective::AllReduce,
            Algo::OneShotPush,
            (over_push * 2) as u64,
        );
        suite.record(
            "would_decline reports over-capacity",
            match decline {
                Some(kernels::Decline::OverCapacity) => Ok(()),
                other => Err(format!("got {other:?}")),
            },
        );
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// A world of one rank has real NCCL (ncclCommInitAll with one device): the
/// NCCL binding and every custom algorithm with W = 1.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn world_of_one_runs_nccl_and_every_algorithm() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback world 1 (real NCCL)");
    let mut ranks = loopback(&ctx, 1);
    assert_eq!(ranks[0].fallback_kind(), Fallback::Nccl);
    for collective in gpu_common::PLAIN_COLLECTIVES {
        for &algo in collective.algos() {
            for bytes in [16, 4096, 65_552] {
                for placement in [Placement::OutOfPlace, Placement::InPlace] {
                    let case = Case {
                        collective,
                        how: Select::Force(algo),
                        per_rank: bytes / 2,
                        placement,
                        seed: 0xE000 | bytes as u64,
                    };
                    run::<bf16>(&mut suite, &ctx, &mut ranks, case, Mode::Eager, algo, 0);
                    let case = Case {
                        per_rank: bytes / 4,
                        ..case
                    };
                    run::<f32>(
                        &mut suite,
                        &ctx,
                        &mut ranks,
                        case,
                        Mode::Graph,
                        algo,
                        GRAPH_REPLAYS,
                    );
                }
            }
        }
    }
    // A declined call runs on NCCL here.
    let case = Case {
        collective: Collective::AllReduce,
        how: Select::Force(Algo::OneShotPush),
        per_rank: 3,
        placement: Placement::OutOfPlace,
        seed: 1,
    };
    run::<f16>(
        &mut suite,
        &ctx,
        &mut ranks,
        case,
        Mode::Eager,
        Algo::Nccl,
        0,
    );
    suite.finish();
}

/// Ordinary calls on tensors in windows from `alloc_window` run
/// `nccl_symmetric` (a world of one has real NCCL) through the rank's own
/// window: every placement of input and output gives the host reference,
/// outside a capture and in one; a loopback world of several ranks (no
/// NCCL) hands out plain-memory windows and has no NCCL window. Window calls
/// are `gpu_windows`'.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn windows_from_alloc_window_run_nccl_symmetric_in_place() {
    let ctx = gpu();
    let mut suite = Suite::new("alloc_window");
    let mut ranks = loopback(&ctx, 1);
    for (i, n) in [8usize, 2048, 1 << 20].into_iter().enumerate() {
        let outcome = window_cases(&mut ranks[0], n, 0x5e00 + i as u64, Algo::NcclSymmetric);
        suite.record(&format!("{n} bf16"), outcome);
    }
    // Past the window (64 MiB by default) the call declines to plain NCCL,
    // and still computes.
    let past = (64 << 20) / 2 + 8;
    suite.record(
        "past the window: plain NCCL",
        window_cases(&mut ranks[0], past, 0x5eff, Algo::Nccl),
    );
    let shared = loopback(&ctx, 2);
    suite.record(
        "a loopback world of 2 has no NCCL window",
        match shared[0].alloc_window::<bf16>(64) {
            Ok(_) if shared[0].window_bytes() == 0 => Ok(()),
            other => Err(format!(
                "{other:?}, window of {} bytes",
                shared[0].window_bytes()
            )),
        },
    );
    suite.finish();
}

/// All-reduce and all-gather of `n` elements forced to `nccl_symmetric`,
/// with input and output in windows, only the output in one, and in place
/// in one; then an all-reduce in place in a window captured into a graph.
/// Every call must report `expect` and match the host reference.
fn window_cases(rank: &mut RankComm, n: usize, seed: u64, expect: Algo) -> Result<(), String> {
    use tuner::harness::timing::poison;
    use tuner::harness::validation::{check_all_gather, check_all_reduce, random_inputs};
    let how = Select::Force(Algo::NcclSymmetric);
    let err = |e: kernels::Error| e.to_string();
    let drv = |e: cudarc::driver::DriverError| e.to_string();
    let ran_expected = |ran: Algo, what: &str| {
        (ran == expect).then_some(()).ok_or(format!(
            "{what}: {} ran, not {}",
            ran.name(),
            expect.name()
        ))
    };
    let stream = rank.stream().clone();
    let inputs = random_inputs::<bf16>(1, n, seed);
    let mut input = rank.alloc_window::<bf16>(n).map_err(err)?;
    let mut output = rank.alloc_window::<bf16>(n).map_err(err)?;
    let plain_input = stream.clone_htod(&inputs[0]).map_err(drv)?;
    stream.memcpy_htod(&inputs[0], &mut *input).map_err(drv)?;
    let reduced = |output: &kernels::WindowBuffer<bf16>, what: &str| -> Result<(), String> {
        let got = stream.clone_dtoh(&**output).map_err(drv)?;
        check_all_reduce(&inputs, &got, kernels::raw::SentinelRule::None)
            .map_err(|e| format!("{what}: {e}"))
    };
    poison(&stream, &mut *output).map_err(err)?;
    let ran = rank
        .all_reduce(&input.as_view(), &mut output.as_view_mut(), how)
        .map_err(err)?;
    rank.check().map_err(err)?;
    ran_expected(ran, "both in windows")?;
    reduced(&output, "both in windows")?;

    poison(&stream, &mut *output).map_err(err)?;
    let ran = rank
        .all_reduce(&plain_input.as_view(), &mut output.as_view_mut(), how)
        .map_err(err)?;
    rank.check().map_err(err)?;
    ran_expected(ran, "output in a window")?;
    reduced(&output, "output in a window")?;

    stream.memcpy_htod(&inputs[0], &mut *output).map_err(drv)?;
    let ran = rank
        .all_reduce_in_place(&mut output.as_view_mut(), how)
        .map_err(err)?;
    rank.check().map_err(err)?;
    ran_expected(ran, "in place in a window")?;
    reduced(&output, "in place in a window")?;

    // All-gather (a world of one: the output is the input).
    poison(&stream, &mut *output).map_err(err)?;
    let ran = rank
        .all_gather(&input.as_view(), &mut output.as_view_mut(), how)
        .map_err(err)?;
    rank.check().map_err(err)?;
    ran_expected(ran, "all_gather")?;
    let got = stream.clone_dtoh(&*output).map_err(drv)?;
    check_all_gather(&inputs, &got, false).map_err(|e| format!("all_gather: {e}"))?;

    // Captured: the window was registered before the capture.
    stream.memcpy_htod(&inputs[0], &mut *output).map_err(drv)?;
    let graph = rank
        .capture(|r| {
            let ran = r.all_reduce_in_place(&mut output.as_view_mut(), how)?;
            assert_eq!(ran, expect, "captured");
            Ok(())
        })
        .map_err(err)?;
    graph.launch().map_err(err)?;
    rank.check().map_err(err)?;
    reduced(&output, "captured, in place in a window")?;

    // Windows cannot be registered inside a capture.
    match rank.capture(|r| r.alloc_window::<bf16>(16).map(|_| ())) {
        Err(Error::Unsupported(why)) if why.contains("capture") => Ok(()),
        Err(other) => Err(format!("alloc_window inside a capture: {other}")),
        Ok(_) => Err("alloc_window inside a capture was allowed".into()),
    }
}

/// A rank that never launches makes its peer's kernel time out within the
/// configured bound; `check()` reports which rank it waited for.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn timeout_when_a_peer_never_launches() {
    let ctx = gpu();
    let mut suite = Suite::new("timeouts");
    let timeout = Duration::from_millis(50);
    let cases = [
        (Collective::AllReduce, Algo::OneShotPush),
        (Collective::AllReduce, Algo::OneShotPull),
        (Collective::AllReduce, Algo::TwoShotPull),
        (Collective::AllGather, Algo::OneShotPush),
        (Collective::AllGather, Algo::OneShotPull),
        (Collective::AllReduce, Algo::Nccl), // the loopback reference
    ];
    for (collective, algo) in cases {
        let options = Options {
            timeout,
            ..measuring(None, true)
        };
        let ranks = World::loopback(ctx.clone(), 2, options).expect("world");
        let stream = ranks[0].stream().clone();
        let input = stream.alloc_zeros::<bf16>(4096).unwrap();
        let out_len = if collective == Collective::AllGather {
            8192
        } else {
            4096
        };
        let mut output = stream.alloc_zeros::<bf16>(out_len).unwrap();
        let started = Instant::now();
        let issued = match collective {
            Collective::AllReduce => ranks[0].all_reduce(
                &input.as_view(),
                &mut output.as_view_mut(),
                Select::Force(algo),
            ),
            Collective::AllGather => ranks[0].all_gather(
                &input.as_view(),
                &mut output.as_view_mut(),
                Select::Force(algo),
            ),
            Collective::AllReduceAddRmsNorm => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
        };
        let label = format!("{} {} with rank 1 absent", collective.name(), algo.name());
        let outcome =
            issued
                .map_err(|e| format!("issuing failed: {e}"))
                .and_then(|_| match ranks[0].check() {
                    Err(
                        err @ Error::Timeout {
                            rank: 0,
                            peer: Some(1),
                            ..
                        },
                    ) => {
                        let waited = started.elapsed();
                        eprintln!("   {label}: {err} (after {waited:?})");
                        if waited > Duration::from_secs(2) {
                            Err(format!("took {waited:?} for a {timeout:?} timeout"))
                        } else {
                            Ok(())
                        }
                    }
                    Err(other) => Err(format!(
                        "expected a timeout waiting for rank 1, got: {other}"
                    )),
                    Ok(()) => Err("check() succeeded although rank 1 never launched".into()),
                });
        let passed = suite.record(&label, outcome);
        if passed {
            // A poisoned rank fails fast: a later call returns at once, and the
            // error stays.
            let again = Instant::now();
            let _ = ranks[0].all_reduce(
                &input.as_view(),
                &mut output.slice_mut(0..4096),
                Select::Force(Algo::OneShotPull),
            );
            let still = ranks[0].check();
            suite.record(
                &format!("{label}: stays failed, fast"),
                match still {
                    Err(Error::Timeout { .. }) if again.elapsed() < Duration::from_millis(500) => {
                        Ok(())
                    }
                    other => Err(format!("got {other:?} after {:?}", again.elapsed())),
                },
            );
        }
    }
    suite.finish();
}

/// Lengths and devices that do not fit are errors before anything launches.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn mismatched_arguments_are_errors_before_launch() {
    let ctx = gpu();
    let mut suite = Suite::new("mismatched arguments");
    let mut ranks = loopback(&ctx, 2);
    let stream = ranks[0].stream().clone();
    let input = stream.alloc_zeros::<f32>(64).unwrap();
    let mut short = stream.alloc_zeros::<f32>(32).unwrap();
    let mut odd = stream.alloc_zeros::<f32>(63).unwrap();
    let how = Select::Force(Algo::OneShotPull);
    let expect_mismatch = |r: kernels::Result<Algo>| match r {
        Err(Error::Mismatch(what)) => {
            eprintln!("   ok: {what}");
            Ok(())
        }
        other => Err(format!("expected a mismatch error, got {other:?}")),
    };
    suite.record(
        "all_reduce lengths",
        expect_mismatch(ranks[0].all_reduce(&input.as_view(), &mut short.as_view_mut(), how)),
    );
    suite.record(
        "all_gather lengths",
        expect_mismatch(ranks[0].all_gather(&input.as_view(), &mut short.as_view_mut(), how)),
    );
    suite.record(
        "all_gather_in_place shares",
        expect_mismatch(ranks[0].all_gather_in_place(&mut odd.as_view_mut(), how)),
    );
    // A tensor from another context (of the same GPU) is a device mismatch.
    let other = CudaContext::new_non_primary(0, 0).expect("a second context");
    // SAFETY: nothing allocated on it yet.
    unsafe { other.disable_event_tracking() };
    let foreign = other.default_stream().alloc_zeros::<f32>(64).unwrap();
    let mut out = stream.alloc_zeros::<f32>(64).unwrap();
    suite.record(
        "foreign input",
        expect_mismatch(ranks[0].all_reduce(&foreign.as_view(), &mut out.as_view_mut(), how)),
    );
    drop(foreign);
    drop(other);
    // Nothing was launched: both ranks are still in step and healthy.
    let case = Case {
        collective: Collective::AllReduce,
        how,
        per_rank: 64,
        placement: Placement::OutOfPlace,
        seed: 5,
    };
    suite.record("a correct call afterwards", eager::<f32>(&mut ranks, &case));
    suite.finish();
}

/// `Select::Policy` asks the policy for its mode, `Select::Auto` for the
/// mode the call is issued in (eager here, graph in a capture);
/// `COLLTUNE_ALGO` overrides both, and a bad value is an error when the
/// world is built. (Which tables `Auto` reads where they differ:
/// examples/engine's `gpu_world` test, whose tables differ by mode.)
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn policy_selection_and_override() {
    let ctx = gpu();
    let mut suite = Suite::new("policy");
    let mut ranks = loopback(&ctx, 2);
    for (how, mode) in [
        (Select::Policy(Mode::Eager), Mode::Eager),
        (Select::Policy(Mode::Graph), Mode::Graph),
        (Select::Auto, Mode::Eager),
        (Select::Auto, Mode::Graph),
    ] {
        let case = Case {
            collective: Collective::AllReduce,
            how,
            per_rank: 2048,
            placement: Placement::OutOfPlace,
            seed: 9,
        };
        let expected = ranks[0].policy_choice(Collective::AllReduce, DType::Bf16, mode, 4096);
        let expected = match ranks[0].would_decline(Collective::AllReduce, expected, 4096) {
            None => expected,
            Some(_) => Algo::Nccl,
        };
        run::<bf16>(&mut suite, &ctx, &mut ranks, case, mode, expected, 10);
    }
    drop(ranks);

    // SAFETY: the tests run on one thread (--test-threads=1); nothing else
    // reads the environment meanwhile.
    unsafe { std::env::set_var("COLLTUNE_ALGO", "one_shot_pull") };
    let built = World::loopback(ctx.clone(), 2, Options::default());
    unsafe { std::env::remove_var("COLLTUNE_ALGO") };
    match built {
        Ok(mut ranks) => {
            let case = Case {
                collective: Collective::AllReduce,
                how: Select::Policy(Mode::Eager),
                per_rank: 2048,
                placement: Placement::OutOfPlace,
                seed: 10,
            };
            run::<bf16>(
                &mut suite,
                &ctx,
                &mut ranks,
                case,
                Mode::Eager,
                Algo::OneShotPull,
                0,
            );
        }
        Err(e) => {
            suite.record::<()>("COLLTUNE_ALGO=one_shot_pull", Err(e.to_string()));
        }
    }

    unsafe { std::env::set_var("COLLTUNE_ALGO", "ring") };
    let built = World::loopback(ctx.clone(), 2, Options::default());
    unsafe { std::env::remove_var("COLLTUNE_ALGO") };
    suite.record(
        "COLLTUNE_ALGO=ring is refused",
        match built {
            Err(Error::Policy(what)) => {
                eprintln!("   ok: {what}");
                Ok(())
            }
            Err(other) => Err(format!("wrong error: {other}")),
            Ok(_) => Err("a bad override was accepted".into()),
        },
    );
    suite.finish();
}

/// The tuner's entry points: verify and measure, eager and graph.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn timing_measure_and_verify() {
    let ctx = gpu();
    let mut suite = Suite::new("timing");
    let mut ranks = loopback(&ctx, 2);
    for algo in [
        Algo::OneShotPush,
        Algo::OneShotPull,
        Algo::TwoShotPull,
        Algo::Nccl,
    ] {
        suite.record(
            &format!("verify {}", algo.name()),
            validate(
                &mut ranks,
                Collective::AllReduce,
                DType::Bf16,
                algo,
                65_536,
                0,
                3,
            )
            .map_err(|e| e.to_string()),
        );
        for mode in [Mode::Eager, Mode::Graph] {
            let spec = TimingSpec {
                collective: Collective::AllReduce,
                dtype: DType::Bf16,
                algo,
                bytes: 65_536,
                mode,
                calls_per_sample: 10,
                samples: 5,
                warmup: 3,
                hidden: 0,
                unfused_via: None,
            };
            let timed = gpu_common::measure_plausibly(&mut ranks, &spec);
            suite.record(&format!("measure {} {}", algo.name(), mode.name()), timed);
        }
    }
    suite.record(
        "verify all_gather one_shot_pull",
        validate(
            &mut ranks,
            Collective::AllGather,
            DType::F16,
            Algo::OneShotPull,
            8192,
            0,
            4,
        )
        .map_err(|e| e.to_string()),
    );
    let declined = TimingSpec {
        collective: Collective::AllReduce,
        dtype: DType::F32,
        algo: Algo::OneShotPush,
        bytes: 64 << 20,
        mode: Mode::Graph,
        calls_per_sample: 1,
        samples: 1,
        warmup: 0,
        hidden: 0,
        unfused_via: None,
    };
    suite.record(
        "measure refuses a declined size",
        match measure(&mut ranks, &declined) {
            Err(Error::Declined { .. }) => Ok(()),
            other => Err(format!("got {other:?}")),
        },
    );
    let info = tuner::harness::timing::gpu_stack(&ctx).map_err(|e| e.to_string());
    if let Ok(info) = &info {
        eprintln!("   platform: {info:?}");
    }
    suite.record("platform_info", info);
    suite.record(
        "discover",
        tuner::harness::timing::discover().map_err(|e| e.to_string()),
    );
    suite.finish();
}

/// Rounds through one timing cache, eagerly and in graphs: the same call
/// twice (the second on the first's tensors, events and graph), again with
/// more samples (more events), another algorithm at that size (its own graph
/// on the same tensors), the first again (its kept graph), another size
/// (everything built anew).
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn timing_rounds_reuse_their_set_up() {
    let ctx = gpu();
    let mut suite = Suite::new("timing rounds");
    let mut ranks = loopback(&ctx, 2);
    let mut cache = TimingCache::default();
    for mode in [Mode::Graph, Mode::Eager] {
        let first = TimingSpec {
            collective: Collective::AllReduce,
            dtype: DType::Bf16,
            algo: Algo::OneShotPush,
            bytes: 65_536,
            mode,
            calls_per_sample: 10,
            samples: 5,
            warmup: 3,
            hidden: 0,
            unfused_via: None,
        };
        let rounds = [
            ("first", first),
            ("again", first),
            (
                "more samples",
                TimingSpec {
                    samples: 9,
                    ..first
                },
            ),
            (
                "another algorithm",
                TimingSpec {
                    algo: Algo::OneShotPull,
                    ..first
                },
            ),
            ("the first again", first),
            (
                "another size",
                TimingSpec {
                    bytes: 131_072,
                    ..first
                },
            ),
        ];
        for (round, spec) in rounds {
            let timed = gpu_common::plausibly(&spec, cache.measure(&mut ranks, &spec));
            suite.record(&format!("{} {round}", mode.name()), timed);
        }
    }
    suite.finish();
}

/// A plain `cargo test` lists this suite's GPU tests as ignored, never as
/// passed: every test here but this one is `#[ignore]`d with a reason that
/// names the script of `NEEDS_GPU`, and that script exists and runs this suite.
#[test]
fn every_gpu_test_is_ignored_for_the_script_that_runs_it() {
    let script = NEEDS_GPU
        .split_whitespace()
        .find(|word| word.starts_with("scripts/") && word.ends_with(".sh"))
        .unwrap_or_else(|| panic!("NEEDS_GPU names no script: {NEEDS_GPU}"));
    // The source tree it was built from, or (a binary carried to a GPU
    // machine, which gpu-run.sh runs from the repository's root) the current
    // directory.
    let built_from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(script);
    let path = if built_from.exists() {
        built_from
    } else {
        std::path::PathBuf::from(script)
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{script}, named by NEEDS_GPU: {e}"));
    let runs_this_suite = text.lines().any(|line| {
        line.trim_start().starts_with("for name in ") && line.contains(" gpu_loopback")
    });
    assert!(runs_this_suite, "{script} does not run gpu_loopback");

    let source = include_str!("gpu_loopback.rs");
    let lines: Vec<&str> = source.lines().map(str::trim).collect();
    let mut gpu_tests = 0;
    for (i, _) in lines.iter().enumerate().filter(|(_, l)| **l == "#[test]") {
        let next = lines.get(i + 1).copied().unwrap_or("");
        if next.starts_with("fn every_gpu_test_is_ignored_for_the_script_that_runs_it(") {
            continue;
        }
        assert!(
            next.starts_with("#[ignore = \"") && next.contains(script),
            "the test at line {} is not ignored for {script}: {next}",
            i + 2
        );
        gpu_tests += 1;
    }
    assert!(gpu_tests >= 20, "{gpu_tests} GPU tests found");
}

/// One call of the pipelined test: its own tensors, checked at the end.
struct Queued<T> {
    collective: Collective,
    algo: Algo,
    input: cudarc::driver::CudaSlice<T>,
    output: cudarc::driver::CudaSlice<T>,
}

/// Many calls of mixed algorithms, sizes and collectives issued back to back
/// with no host synchronisation in between, so ranks drift apart by whole calls
/// (the skew the buffer-rotation rules exist for); checked only at the end.
/// Once with one thread per rank, once with one thread issuing rank by rank
/// (as a single-process engine would).
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_pipelined_mixed_calls() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback pipelined calls");
    const CALLS: usize = 96;
    let plan: Vec<(Collective, Algo, usize)> = (0..CALLS)
        .map(|i| {
            let (collective, algo) = [
                (Collective::AllReduce, Algo::OneShotPush),
                (Collective::AllReduce, Algo::OneShotPull),
                (Collective::AllReduce, Algo::TwoShotPull),
                (Collective::AllGather, Algo::OneShotPush),
                (Collective::AllGather, Algo::OneShotPull),
                (Collective::AllReduce, Algo::Nccl),
                (Collective::AllGather, Algo::Nccl),
            ][i % 7];
            let bytes = [16, 4096, 65_552, 592, 262_144][i % 5];
            (collective, algo, bytes / 2)
        })
        .collect();
    for (world, threaded) in [(4, true), (8, true), (4, false)] {
        let mut ranks = loopback(&ctx, world);
        let inputs: Vec<Vec<Vec<bf16>>> = plan
            .iter()
            .enumerate()
            .map(|(i, &(_, _, n))| {
                tuner::harness::validation::random_inputs::<bf16>(world, n, 0xF000 + i as u64)
            })
            .collect();
        let mut queues: Vec<Vec<Queued<bf16>>> = ranks
            .iter()
            .map(|rank| {
                let stream = rank.stream();
                plan.iter()
                    .zip(&inputs)
                    .map(|(&(collective, algo, n), data)| {
                        let out_len = if collective == Collective::AllGather {
                            n * world
                        } else {
                            n
                        };
                        let mut output = stream.alloc_zeros::<bf16>(out_len).unwrap();
                        tuner::harness::timing::poison(stream, &mut output).unwrap();
                        Queued {
                            collective,
                            algo,
                            input: stream.clone_htod(&data[rank.rank()]).unwrap(),
                            output,
                        }
                    })
                    .collect()
            })
            .collect();
        for rank in &ranks {
            rank.stream().synchronize().unwrap();
        }
        let issue = |rank: &mut RankComm, q: &mut Queued<bf16>| {
            let how = Select::Force(q.algo);
            match q.collective {
                Collective::AllReduce => {
                    rank.all_reduce(&q.input.as_view(), &mut q.output.as_view_mut(), how)
                }
                Collective::AllGather => {
                    rank.all_gather(&q.input.as_view(), &mut q.output.as_view_mut(), how)
                }
                Collective::AllReduceAddRmsNorm => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
            }
        };
        let started = Instant::now();
        let issued: kernels::Result<()> = if threaded {
            tuner::harness::concurrent::for_each_rank(
                &mut ranks,
                queues.iter_mut().collect(),
                |rank, queue, _| {
                    for q in queue.iter_mut() {
                        issue(rank, q)?;
                    }
                    rank.check()
                },
            )
            .map(|_| ())
        } else {
            (|| {
                for call in 0..CALLS {
                    for (rank, queue) in ranks.iter_mut().zip(queues.iter_mut()) {
                        issue(rank, &mut queue[call])?;
                    }
                }
                ranks.iter().try_for_each(|r| r.check())
            })()
        };
        let label = format!(
            "world {world}, {CALLS} calls, {}",
            if threaded {
                "a thread per rank"
            } else {
                "one thread"
            }
        );
        let outcome = issued.map_err(|e| e.to_string()).and_then(|()| {
            for (call, &(collective, algo, _)) in plan.iter().enumerate() {
                let outputs: Vec<Vec<bf16>> = ranks
                    .iter()
                    .zip(&queues)
                    .map(|(rank, queue)| rank.stream().clone_dtoh(&queue[call].output).unwrap())
                    .collect();
                let rule = kernels::raw::sentinel_rule(algo);
                let pushed = rule != kernels::raw::SentinelRule::None;
                tuner::harness::validation::check_identical(&outputs)
                    .and_then(|()| match collective {
                        Collective::AllReduce => tuner::harness::validation::check_all_reduce(
                            &inputs[call],
                            &outputs[0],
                            rule,
                        ),
                        Collective::AllGather => tuner::harness::validation::check_all_gather(
                            &inputs[call],
                            &outputs[0],
                            pushed,
                        ),
                        Collective::AllReduceAddRmsNorm => {
                            unreachable!("{}", gpu_common::FUSED_ELSEWHERE)
                        }
                    })
                    .map_err(|e| {
                        format!("call {call} ({} {}): {e}", collective.name(), algo.name())
                    })?;
            }
            Ok(started.elapsed())
        });
        suite.record(&label, outcome);
    }
    suite.finish();
}

/// One rank's call in the mismatch tests.
#[derive(Clone, Copy, Debug)]
struct Call {
    algo: Algo,
    dtype: DType,
    /// Bytes this rank contributes.
    per_rank: usize,
}

/// Issues `call` on `rank` over raw byte buffers (the ranks of a mismatch
/// test disagree on the dtype, so the buffers have none).
fn issue_raw(
    rank: &mut RankComm,
    collective: Collective,
    call: Call,
    input: &cudarc::driver::CudaSlice<u8>,
    output: &mut cudarc::driver::CudaSlice<u8>,
) -> kernels::Result<Algo> {
    fn typed<T: Element>(
        rank: &mut RankComm,
        collective: Collective,
        call: Call,
        input: &cudarc::driver::CudaSlice<u8>,
        output: &mut cudarc::driver::CudaSlice<u8>,
    ) -> kernels::Result<Algo> {
        let n = call.per_rank / std::mem::size_of::<T>();
        let out_n = collective.output_size(rank.world_size() as u64, n as u64) as usize;
        // SAFETY: the buffers hold at least `call.per_rank` and the output
        // size in bytes (the caller sizes them for the largest call), and
        // every bit pattern is a valid element.
        let (input, mut output) = unsafe {
            (
                input.transmute::<T>(n).expect("input large enough"),
                output
                    .transmute_mut::<T>(out_n)
                    .expect("output large enough"),
            )
        };
        let how = Select::Force(call.algo);
        match collective {
            Collective::AllReduce => rank.all_reduce(&input, &mut output, how),
            Collective::AllGather => rank.all_gather(&input, &mut output, how),
            Collective::AllReduceAddRmsNorm => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
        }
    }
    match call.dtype {
        DType::Bf16 => typed::<bf16>(rank, collective, call, input, output),
        DType::F16 => typed::<f16>(rank, collective, call, input, output),
        DType::F32 => typed::<f32>(rank, collective, call, input, output),
    }
}

/// Rank 1 makes `odd` where every other rank makes `usual`, in the same call
/// slot of a fresh world of `world`: every rank must report
/// `Error::Mismatch` naming both calls (`names` must appear in each message),
/// within the world's timeout, and refuse its next call at once.
fn mismatched(
    ctx: &Arc<CudaContext>,
    world: usize,
    collective: Collective,
    usual: Call,
    odd: Call,
    names: [&str; 2],
) -> Result<(), String> {
    let timeout = Duration::from_secs(1);
    let options = Options {
        timeout,
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks =
        World::loopback(ctx.clone(), world, options).map_err(|e| format!("world: {e}"))?;
    let largest = usual.per_rank.max(odd.per_rank) * world;
    let buffers = ranks
        .iter()
        .map(|rank| {
            let stream = rank.stream();
            let mut input = stream
                .alloc_zeros::<u8>(largest)
                .map_err(|e| format!("{e:?}"))?;
            gpu_common::fill_bytes(stream, &mut input, 0x3c);
            let output = stream
                .alloc_zeros::<u8>(largest)
                .map_err(|e| format!("{e:?}"))?;
            stream.synchronize().map_err(|e| format!("{e:?}"))?;
            Ok((input, output))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let started = Instant::now();
    let outcomes = tuner::harness::concurrent::for_each_rank(
        &mut ranks,
        buffers,
        |rank, (input, mut output), _| {
            let call = if rank.rank() == 1 { odd } else { usual };
            let issued = issue_raw(rank, collective, call, &input, &mut output);
            let checked = issued.and_then(|_| rank.check());
            let waited = started.elapsed();
            // Fail fast: the next call is refused at once, with the same error.
            let again = Instant::now();
            let next = issue_raw(rank, collective, usual, &input, &mut output);
            Ok((checked, waited, next, again.elapsed()))
        },
    )
    .map_err(|e| e.to_string())?;
    for (r, (checked, waited, next, refused_in)) in outcomes.into_iter().enumerate() {
        match checked {
            Err(Error::Mismatch(what)) => {
                if let Some(missing) = names.iter().find(|n| !what.contains(*n)) {
                    return Err(format!(
                        "rank {r}: the mismatch does not name `{missing}`: {what}"
                    ));
                }
                if r == 0 {
                    eprintln!("   rank 0: {what}");
                }
            }
            other => return Err(format!("rank {r}: expected Error::Mismatch, got {other:?}")),
        }
        if waited >= timeout {
            return Err(format!(
                "rank {r}: the mismatch took {waited:?}, not under the {timeout:?} timeout"
            ));
        }
        match next {
            Err(Error::Mismatch(_)) if refused_in < Duration::from_millis(50) => {}
            other => {
                return Err(format!(
                    "rank {r}: the next call gave {other:?} after {refused_in:?}, not the same \
                     mismatch at once"
                ));
            }
        }
    }
    Ok(())
}

/// Ranks that make different calls in the same slot (4 KiB against 8 KiB, and
/// bf16 against f16 at the same byte count, for every custom algorithm and the
/// NCCL stand-in; and two different algorithms) all get `Error::Mismatch`
/// naming both calls, never garbage and never a bare timeout, in worlds of 2
/// to 8.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn mismatched_calls_are_errors_on_every_rank() {
    let ctx = gpu();
    let mut suite = Suite::new("mismatched calls");
    for world in 2..=8 {
        for collective in gpu_common::PLAIN_COLLECTIVES {
            for &algo in collective.algos() {
                let call = |dtype, per_rank| Call {
                    algo,
                    dtype,
                    per_rank,
                };
                let label = format!("world {world} {} {}", collective.name(), algo.name());
                suite.record(
                    &format!("{label}: 4 KiB against 8 KiB"),
                    mismatched(
                        &ctx,
                        world,
                        collective,
                        call(DType::Bf16, 4096),
                        call(DType::Bf16, 8192),
                        ["4096 bytes", "8192 bytes"],
                    ),
                );
                suite.record(
                    &format!("{label}: bf16 against f16"),
                    mismatched(
                        &ctx,
                        world,
                        collective,
                        call(DType::Bf16, 4096),
                        call(DType::F16, 4096),
                        ["in bf16", "in f16"],
                    ),
                );
            }
        }
        let push = Call {
            algo: Algo::OneShotPush,
            dtype: DType::Bf16,
            per_rank: 4096,
        };
        suite.record(
            &format!("world {world}: one_shot_push against one_shot_pull"),
            mismatched(
                &ctx,
                world,
                Collective::AllReduce,
                push,
                Call {
                    algo: Algo::OneShotPull,
                    ..push
                },
                ["one_shot_push", "one_shot_pull"],
            ),
        );
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// The algorithms whose failed calls the marking tests cover in a loopback
/// world: every custom kernel of `collective` and the NCCL stand-in (what
/// `nccl` and `nccl_symmetric` run there).
fn marking_algos(collective: Collective) -> Vec<Algo> {
    collective
        .algos()
        .iter()
        .copied()
        .filter(|a| a.kind() == AlgoKind::Kernel || *a == Algo::Nccl)
        .collect()
}

/// Output of one rank of a marking test: a bf16 buffer of the call's output
/// length plus one guard element on each side, filled with `0x5a5a`, and
/// the view the call writes (at element offset 1 + `offset`, so `offset` 1
/// makes a view that is not 16-byte aligned).
struct Guarded {
    input: cudarc::driver::CudaSlice<bf16>,
    output: cudarc::driver::CudaSlice<bf16>,
    /// Elements of the call's input and of its output.
    n: usize,
    out_n: usize,
    offset: usize,
}

const PATTERN: u16 = 0x5a5a;

impl Guarded {
    fn new(
        rank: &RankComm,
        collective: Collective,
        n: usize,
        offset: usize,
        seed: u64,
    ) -> Result<Guarded, String> {
        let err = |e: cudarc::driver::DriverError| format!("{e:?}");
        let stream = rank.stream();
        let out_n = output_bytes(collective, rank.world_size(), n * 2) / 2;
        // Inputs: ordinary values, different per rank and element.
        let host: Vec<bf16> = (0..n + offset)
            .map(|i| bf16::from_f32(((i as u64 * 7 + seed * 13) % 61) as f32 - 30.0))
            .collect();
        let input = stream.clone_htod(&host).map_err(err)?;
        let mut output = stream
            .alloc_zeros::<bf16>(out_n + offset + 2)
            .map_err(err)?;
        gpu_common::fill_bytes(stream, &mut output, 0x5a);
        stream.synchronize().map_err(err)?;
        Ok(Guarded {
            input,
            output,
            n,
            out_n,
            offset,
        })
    }

    /// Issues the call on this rank's views.
    fn issue(
        &mut self,
        rank: &mut RankComm,
        collective: Collective,
        how: Select,
    ) -> kernels::Result<Algo> {
        let input = self.input.slice(self.offset..self.offset + self.n);
        let start = 1 + self.offset;
        let mut output = self.output.slice_mut(start..start + self.out_n);
        match collective {
            Collective::AllReduce => rank.all_reduce(&input, &mut output, how),
            Collective::AllGather => rank.all_gather(&input, &mut output, how),
            Collective::AllReduceAddRmsNorm => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
        }
    }

    /// Refills the output (view and guards) with the pattern.
    fn refill(&mut self, rank: &RankComm) -> Result<(), String> {
        gpu_common::fill_bytes(rank.stream(), &mut self.output, 0x5a);
        rank.stream().synchronize().map_err(|e| format!("{e:?}"))
    }

    /// Reads the output back: the view's words that are not all-ones (marked),
    /// and whether the guards outside the view still hold the pattern.
    fn unmarked(&self, rank: &RankComm) -> Result<(Vec<u16>, bool), String> {
        let stream = rank.stream();
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        let host: Vec<bf16> = stream
            .clone_dtoh(&self.output)
            .map_err(|e| format!("{e:?}"))?;
        let bits: Vec<u16> = host.iter().map(|v| v.to_bits()).collect();
        let start = 1 + self.offset;
        let view = &bits[start..start + self.out_n];
        let guards_kept = bits[..start]
            .iter()
            .chain(&bits[start + self.out_n..])
            .all(|&b| b == PATTERN);
        Ok((
            view.iter().copied().filter(|&b| b != 0xffff).collect(),
            guards_kept,
        ))
    }
}

/// Says what is wrong with a failed call's output on `rank`: any word of the
/// view that is not marked (how many kept the pattern, how many hold other
/// values), or a guard outside the view that was written.
fn judge_marking(g: &Guarded, rank: &RankComm, what: &str) -> Result<(), String> {
    let (unmarked, guards_kept) = g.unmarked(rank)?;
    let stale = unmarked.iter().filter(|&&b| b == PATTERN).count();
    if !unmarked.is_empty() {
        return Err(format!(
            "{what}: rank {}: {} of {} output elements not marked ({stale} still hold the pattern, {} \
             other values)",
            rank.rank(),
            unmarked.len(),
            g.out_n,
            unmarked.len() - stale
        ));
    }
    if !guards_kept {
        return Err(format!(
            "{what}: rank {}: a word outside the output view was written",
            rank.rank()
        ));
    }
    Ok(())
}

/// One failing call in a fresh loopback world of `world` whose last rank
/// never calls: every other rank's call must fail (`check()` errs) and leave
/// every word of its output view marked (all bits set), none of the pattern
/// the output held before, nothing outside the view written.
fn stalled_call_marks_its_output(
    ctx: &Arc<CudaContext>,
    world: usize,
    collective: Collective,
    algo: Algo,
    offset: usize,
    n: usize,
) -> Result<(), String> {
    let options = Options {
        timeout: Duration::from_millis(100),
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = World::loopback(ctx.clone(), world, options).map_err(|e| e.to_string())?;
    let stalled = world - 1;
    let guarded = ranks
        .iter()
        .enumerate()
        .map(|(r, rank)| Guarded::new(rank, collective, n, offset, r as u64))
        .collect::<Result<Vec<_>, String>>()?;
    let outcomes =
        tuner::harness::concurrent::for_each_rank(&mut ranks, guarded, |rank, mut g, _| {
            if rank.rank() == stalled {
                return Ok((g, Ok(algo), Ok(())));
            }
            let ran = g.issue(rank, collective, Select::Force(algo));
            let checked = rank.check();
            Ok((g, ran, checked))
        })
        .map_err(|e| e.to_string())?;
    for (r, (g, ran, checked)) in outcomes.iter().enumerate().filter(|(r, _)| *r != stalled) {
        match ran {
            Ok(a) if *a == algo => {}
            other => {
                return Err(format!(
                    "rank {r}: the call gave {other:?}, not {} issued",
                    algo.name()
                ));
            }
        }
        if checked.is_ok() {
            return Err(format!(
                "rank {r}: check() is Ok although rank {stalled} never called"
            ));
        }
        judge_marking(g, &ranks[r], "the failed call")?;
    }
    Ok(())
}

/// A call that fails leaves no word of its output looking like a result:
/// for every custom kernel and the NCCL stand-in, both collectives, aligned
/// and unaligned (element offset 1) views, in loopback worlds of 2, 4 and 8
/// whose last rank never calls, every element of the failing call's output
/// is marked (all bits set) and nothing outside the view is written. The
/// message spreads over several blocks and, for the two-shot kernels, over
/// every shard.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_failed_call_marks_every_word_of_its_output() {
    let ctx = gpu();
    let mut suite = Suite::new("a failed call's whole output is marked");
    let n = 32 * 1024 + 8; // 64 KiB + 16 B of bf16 per rank: several blocks, short last shards
    for world in [2, 4, 8] {
        for collective in gpu_common::PLAIN_COLLECTIVES {
            for algo in marking_algos(collective) {
                for offset in [0, 1] {
                    let label = format!(
                        "world {world} {} {} {}",
                        collective.name(),
                        algo.name(),
                        if offset == 0 { "aligned" } else { "unaligned" }
                    );
                    suite.record(
                        &label,
                        stalled_call_marks_its_output(&ctx, world, collective, algo, offset, n),
                    );
                }
            }
        }
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// An engine's NCCL all-reduce of `n` ones (f32) on `comm` in place, on
/// `stream`: Ok with every element equal to `world` ranks' sum.
fn engine_all_reduce(
    comm: kernels::cudarc::nccl::sys::ncclComm_t,
    stream: &Arc<cudarc::driver::CudaStream>,
    world: f32,
) -> Result<(), String> {
    use kernels::cudarc::nccl::{result, sys};
    let n = 1024;
    let mut data = stream
        .clone_htod(&vec![1.0f32; n])
        .map_err(|e| format!("{e:?}"))?;
    {
        let (ptr, _w) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut data, stream);
        // SAFETY: a live communicator of the engine's (this thread is its only
        // user now), an in-place all-reduce of `n` f32 on the stream.
        unsafe {
            result::all_reduce(
                ptr as *const _,
                ptr as *mut _,
                n,
                sys::ncclDataType_t::ncclFloat32,
                sys::ncclRedOp_t::ncclSum,
                comm,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(|e| format!("ncclAllReduce on the engine's communicator: {e:?}"))?;
    }
    let host = stream.clone_dtoh(&data).map_err(|e| format!("{e:?}"))?;
    if host.iter().all(|&v| v == world) {
        Ok(())
    } else {
        Err(format!("the engine's all-reduce gave {:?}", &host[..4]))
    }
}

/// Living beside the engine's NCCL, in a world of one process (one GPU): an
/// engine's own communicator lent with `Join::EngineNccl` runs the rank's
/// NCCL calls and rounds, is the one `nccl_comm()` gives back, and is left to
/// the engine when the world is dropped (its own all-reduce on it still works,
/// and the engine destroys it); a communicator colltune formed is lent out
/// through `nccl_comm()` for the engine's own calls. A communicator of another
/// rank or size is refused by name.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn an_engines_nccl_communicator_is_lent_and_given_back() {
    use kernels::cudarc::nccl::{result, sys};
    use kernels::{EngineNccl, Join, NcclId, ProcessSpec};
    let ctx = gpu();
    let mut suite = Suite::new("the engine's NCCL");
    let stream = ctx.new_stream().expect("a stream");
    let engine_comm = |ranks: i32| {
        ctx.bind_to_thread().expect("GPU 0's context");
        let id = result::get_uniqueid().expect("an NCCL unique id");
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: writes one communicator.
        unsafe { result::comm_init_rank(&mut comm, ranks, id, 0) }.expect("ncclCommInitRank");
        comm
    };
    let comm = engine_comm(1);
    let lent = (|| -> Result<(), String> {
        // SAFETY: live until the test destroys it below; used by this thread only.
        let join = Join::EngineNccl(unsafe { EngineNccl::from_raw(comm) });
        let rank = World::process(
            stream.clone(),
            ProcessSpec::new(0, 1, join),
            Options::default(),
        )
        .map_err(|e| format!("World::process with the engine's communicator: {e}"))?;
        if rank.nccl_comm() != Some(comm) {
            return Err(format!(
                "nccl_comm() gave {:?}, not the engine's {comm:?}",
                rank.nccl_comm()
            ));
        }
        let input = stream
            .clone_htod(&vec![2.0f32; 4096])
            .map_err(|e| format!("{e:?}"))?;
        let mut output = stream
            .alloc_zeros::<f32>(4096)
            .map_err(|e| format!("{e:?}"))?;
        let ran = rank
            .all_reduce(
                &input.as_view(),
                &mut output.as_view_mut(),
                Select::Force(Algo::Nccl),
            )
            .map_err(|e| e.to_string())?;
        rank.check().map_err(|e| e.to_string())?;
        let host = stream.clone_dtoh(&output).map_err(|e| format!("{e:?}"))?;
        if ran != Algo::Nccl || host.iter().any(|&v| v != 2.0) {
            return Err(format!("{} ran, giving {:?}", ran.name(), &host[..4]));
        }
        drop(rank);
        // The engine's communicator is still the engine's.
        engine_all_reduce(comm, &stream, 1.0)
    })();
    suite.record("lent with Join::EngineNccl, given back on drop", lent);
    // SAFETY: the engine's own communicator, no longer used by any rank.
    let destroyed = unsafe { result::comm_destroy(comm) }
        .map(|_| ())
        .map_err(|e| format!("{e:?}"));
    suite.record("the engine destroys its communicator", destroyed);

    let other = engine_comm(1);
    // Rank 0 of 1 lent where rank 0 of 2 is asked for: refused by name.
    let refused = World::process(
        stream.clone(),
        ProcessSpec::new(
            0,
            2,
            Join::EngineNccl(unsafe { EngineNccl::from_raw(other) }),
        ),
        Options::default(),
    );
    suite.record(
        "a communicator of another size is refused",
        match refused {
            Err(Error::Mismatch(why))
                if why.contains("rank 0 of 1") && why.contains("not rank 0 of 2") =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        },
    );
    // SAFETY: as above.
    let _ = unsafe { result::comm_destroy(other) };

    let own = (|| -> Result<(), String> {
        let id = NcclId::new().map_err(|e| e.to_string())?;
        let rank = World::process(
            stream.clone(),
            ProcessSpec::new(0, 1, Join::Nccl(id)),
            Options::default(),
        )
        .map_err(|e| e.to_string())?;
        let comm = rank
            .nccl_comm()
            .ok_or("a world joined through NCCL lends no communicator")?;
        engine_all_reduce(comm, &stream, 1.0)
    })();
    suite.record("colltune's communicator lent out with nccl_comm()", own);
    suite.finish();
}

/// Calls made before the mismatch: past 256, so the handshake's 8-bit call
/// count has wrapped.
const WARM_CALLS: usize = 300;

/// A warm world of `world` makes `WARM_CALLS` agreeing calls of `algo`, then
/// rank 1 calls `odd` where the others call `usual`: every rank must get
/// `Error::Mismatch` naming both calls (`names`), with every word of the
/// mismatched call's output marked on every rank.
fn mismatch_after_wrap(
    ctx: &Arc<CudaContext>,
    world: usize,
    collective: Collective,
    algo: Algo,
    usual: (DType, usize),
    odd: (DType, usize),
    names: [&str; 2],
) -> Result<(), String> {
    let options = Options {
        timeout: Duration::from_secs(1),
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = World::loopback(ctx.clone(), world, options).map_err(|e| e.to_string())?;
    for (_, bytes) in [usual, odd] {
        let out = collective.output_size(world as u64, bytes as u64);
        if let Some(why) = ranks[0].would_decline(collective, algo, out) {
            return Err(format!(
                "{} declines {bytes} bytes per rank ({why:?}): the test must run it",
                algo.name()
            ));
        }
    }
    // Every rank's buffers hold the larger call; a call's views are its own
    // length. bf16 and f16 have the same width, so one element type serves.
    let elems = |(_, bytes): (DType, usize)| bytes / 2;
    let largest = elems(usual).max(elems(odd));
    let states = ranks
        .iter()
        .enumerate()
        .map(|(r, rank)| Guarded::new(rank, collective, largest, 0, r as u64))
        .collect::<Result<Vec<_>, String>>()?;
    let outcomes =
        tuner::harness::concurrent::for_each_rank(&mut ranks, states, |rank, mut g, _| {
            let how = Select::Force(algo);
            let world = rank.world_size() as u64;
            let shaped = |g: &mut Guarded, call: (DType, usize)| {
                g.n = elems(call);
                g.out_n = collective.output_size(world, g.n as u64) as usize;
            };
            shaped(&mut g, usual);
            for _ in 0..WARM_CALLS {
                if let Err(e) = g.issue(rank, collective, how) {
                    return Ok((g, Err(format!("a warm-up call failed: {e}"))));
                }
            }
            if let Err(e) = rank.check() {
                return Ok((g, Err(format!("the warm-up calls failed: {e}"))));
            }
            if let Err(e) = g.refill(rank) {
                return Ok((g, Err(e)));
            }
            let call = if rank.rank() == 1 { odd } else { usual };
            shaped(&mut g, call);
            let issued = match call.0 {
                DType::F16 => {
                    // The same bytes seen as f16: the dtype is what differs.
                    let input = g.input.slice(..g.n);
                    let mut output = g.output.slice_mut(1..1 + g.out_n);
                    // SAFETY: bf16 and f16 have the same size and every bit
                    // pattern is a valid value of either.
                    let (input, mut output) = unsafe {
                        (
                            input.transmute::<f16>(g.n).unwrap(),
                            output.transmute_mut::<f16>(g.out_n).unwrap(),
                        )
                    };
                    match collective {
                        Collective::AllReduce => rank.all_reduce(&input, &mut output, how),
                        Collective::AllGather => rank.all_gather(&input, &mut output, how),
                        Collective::AllReduceAddRmsNorm => {
                            unreachable!("{}", gpu_common::FUSED_ELSEWHERE)
                        }
                    }
                }
                _ => g.issue(rank, collective, how),
            };
            let checked = issued.and_then(|_| rank.check());
            Ok((g, Ok(checked)))
        })
        .map_err(|e| e.to_string())?;
    for (r, (g, outcome)) in outcomes.iter().enumerate() {
        match outcome {
            Err(e) => return Err(format!("rank {r}: {e}")),
            Ok(Err(Error::Mismatch(what))) => {
                if let Some(missing) = names.iter().find(|n| !what.contains(*n)) {
                    return Err(format!(
                        "rank {r}: the mismatch does not name `{missing}`: {what}"
                    ));
                }
            }
            Ok(other) => return Err(format!("rank {r}: expected Error::Mismatch, got {other:?}")),
        }
        judge_marking(g, &ranks[r], "the mismatched call")?;
    }
    Ok(())
}

/// A mismatched call in a warm world (past the handshake's 8-bit wrap) is
/// caught by every block, not only block 0: every rank gets
/// `Error::Mismatch` naming both calls, and no word of the mismatched call's
/// output is left unmarked on any rank, for every custom kernel and the NCCL
/// stand-in, at sizes whose data spreads over many blocks.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_mismatch_after_the_tag_wraps_is_caught_by_every_block() {
    let ctx = gpu();
    let mut suite = Suite::new("mismatch in a warm world");
    for world in [2, 4, 8] {
        for collective in gpu_common::PLAIN_COLLECTIVES {
            for algo in marking_algos(collective) {
                let label = format!("world {world} {} {}", collective.name(), algo.name());
                suite.record(
                    &format!("{label}: bf16 against f16, 256 KiB"),
                    mismatch_after_wrap(
                        &ctx,
                        world,
                        collective,
                        algo,
                        (DType::Bf16, 256 << 10),
                        (DType::F16, 256 << 10),
                        ["in bf16", "in f16"],
                    ),
                );
                suite.record(
                    &format!("{label}: 128 KiB against 256 KiB"),
                    mismatch_after_wrap(
                        &ctx,
                        world,
                        collective,
                        algo,
                        (DType::Bf16, 128 << 10),
                        (DType::Bf16, 256 << 10),
                        ["131072 bytes", "262144 bytes"],
                    ),
                );
            }
        }
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// Whether every 16-bit word of `bytes` has all bits set: the mark of an
/// output a failed call did not compute.
fn all_failed_marks(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0xff)
}

/// A peer that stalls (its host never issues the call) in a world of 2 and of
/// 8: every other rank's `check()` reports the timeout naming it; the call
/// that timed out and the calls already queued behind it leave outputs
/// marked as failed (all bits set), not stale values; every later call, and the replay
/// of a graph captured before, is refused at once and launches nothing; and
/// when the stalled rank calls at last, its kernel stops at once because its
/// peer had failed (`Error::PeerFault`), instead of waiting out the timeout.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_stalled_peer_fails_every_rank_fast_and_nothing_returns_stale_output() {
    let ctx = gpu();
    let mut suite = Suite::new("fail fast");
    for world in [2, 8] {
        suite.record(&format!("world {world}"), stalled_peer(&ctx, world));
    }
    suite.finish();
}

fn stalled_peer(ctx: &Arc<CudaContext>, world: usize) -> Result<(), String> {
    let timeout = Duration::from_millis(100);
    let options = Options {
        timeout,
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = World::loopback(ctx.clone(), world, options).map_err(|e| e.to_string())?;
    let stalled = world - 1;
    let n = 32 * 1024; // 64 KiB of bf16
    let how = Select::Force(Algo::OneShotPush);
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    // Per rank: an input and three outputs, poisoned with 0x5a.
    let mut tensors = Vec::new();
    for rank in &ranks {
        let stream = rank.stream();
        let input = stream
            .clone_htod(&vec![bf16::from_f32(1.0); n])
            .map_err(err)?;
        let mut outputs = Vec::new();
        for _ in 0..3 {
            let mut out = stream.alloc_zeros::<bf16>(n).map_err(err)?;
            gpu_common::fill_bytes(stream, &mut out, 0x5a);
            outputs.push(out);
        }
        stream.synchronize().map_err(err)?;
        tensors.push((input, outputs));
    }
    // A graph captured on rank 0 before anything went wrong.
    let (input0, mut spare) = {
        let stream = ranks[0].stream();
        let input = stream
            .clone_htod(&vec![bf16::from_f32(1.0); n])
            .map_err(err)?;
        let spare = stream.alloc_zeros::<bf16>(n).map_err(err)?;
        (input, spare)
    };
    let graph = ranks[0]
        .capture(|r| {
            r.all_reduce(&input0.as_view(), &mut spare.as_view_mut(), how)
                .map(|_| ())
        })
        .map_err(|e| format!("capture: {e}"))?;

    // Every rank but the stalled one issues three calls back to back.
    let started = Instant::now();
    let checks = tuner::harness::concurrent::for_each_rank(
        &mut ranks,
        tensors.iter_mut().collect(),
        |rank, (input, outputs), _| {
            if rank.rank() == stalled {
                return Ok(Ok(()));
            }
            for out in outputs.iter_mut() {
                rank.all_reduce(&input.as_view(), &mut out.as_view_mut(), how)?;
            }
            Ok(rank.check())
        },
    )
    .map_err(|e| e.to_string())?;
    let waited = started.elapsed();
    for (r, check) in checks.iter().enumerate().filter(|(r, _)| *r != stalled) {
        match check {
            Err(Error::Timeout { peer: Some(p), .. }) if *p == stalled => {}
            other => {
                return Err(format!(
                    "rank {r}: expected a timeout naming rank {stalled}, got {other:?}"
                ));
            }
        }
    }
    if waited > timeout * 10 {
        return Err(format!(
            "the timeouts took {waited:?} for a {timeout:?} bound"
        ));
    }
    // Queued calls behind the one that timed out did not compute: marked.
    let stream0 = ranks[0].stream().clone();
    for (k, out) in tensors[0].1.iter().enumerate() {
        let host: Vec<bf16> = stream0.clone_dtoh(out).map_err(err)?;
        let bytes: Vec<u8> = host
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect();
        let marked = bytes.chunks(2).filter(|p| p == &[0xff, 0xff]).count();
        if !all_failed_marks(&bytes) {
            return Err(format!(
                "call {k} of rank 0: {marked} of {n} elements marked as failed (expected all)"
            ));
        }
    }
    // Every later call is refused at once and launches nothing.
    let (input, outputs) = &mut tensors[0];
    let out = &mut outputs[0];
    gpu_common::fill_bytes(&stream0, out, 0x5a);
    stream0.synchronize().map_err(err)?;
    let again = Instant::now();
    let refused = ranks[0].all_reduce(&input.as_view(), &mut out.as_view_mut(), how);
    let refused_in = again.elapsed();
    if !matches!(refused, Err(Error::Timeout { .. })) || refused_in > Duration::from_millis(5) {
        return Err(format!(
            "the next call gave {refused:?} after {refused_in:?}"
        ));
    }
    stream0.synchronize().map_err(err)?;
    let host: Vec<bf16> = stream0.clone_dtoh(out).map_err(err)?;
    if !host.iter().all(|v| v.to_bits() == 0x5a5a) {
        return Err("a refused call wrote its output".into());
    }
    if ranks[0].health().is_ok() {
        return Err("health() is Ok on a failed rank".into());
    }
    match graph.launch() {
        Err(Error::Timeout { .. }) => {}
        other => return Err(format!("the replay of a graph gave {other:?}")),
    }
    // The stalled rank calls at last. Its first call can complete: its
    // peers pushed their data before they timed out waiting for its own. Its
    // next one waits for peers that failed (their kernels no longer send),
    // and stops at once.
    let (input, outputs) = &mut tensors[stalled];
    let first = ranks[stalled]
        .all_reduce(&input.as_view(), &mut outputs[0].as_view_mut(), how)
        .and_then(|_| ranks[stalled].check());
    if !matches!(first, Ok(()) | Err(Error::PeerFault { .. })) {
        return Err(format!("the late rank's first call gave {first:?}"));
    }
    let late = Instant::now();
    let second = ranks[stalled]
        .all_reduce(&input.as_view(), &mut outputs[1].as_view_mut(), how)
        .and_then(|_| ranks[stalled].check());
    let late_in = late.elapsed();
    match second {
        Err(Error::PeerFault { .. }) if late_in < timeout => {
            eprintln!(
                "   world {world}: the late rank stopped after {late_in:?} (first call: {first:?})"
            );
            Ok(())
        }
        other => Err(format!(
            "the late rank got {other:?} after {late_in:?} (expected PeerFault within {timeout:?})"
        )),
    }
}

/// A rank's calls take `&self` and the rank is shared between threads, but
/// its calls must not overlap: while one thread is inside `capture` on rank
/// 0, another thread's all-reduce on rank 0 is refused with `Error::Busy`
/// and breaks nothing (the capturing thread's own call inside the capture
/// goes through); the graphs then compute the right sum, and once the
/// capture is over the other thread's call on rank 0 runs.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_second_threads_call_is_refused_while_a_rank_is_in_a_call() {
    let ctx = gpu();
    let mut suite = Suite::new("one caller at a time");
    let ranks = loopback(&ctx, 2);
    suite.record("refused during a capture", one_caller_at_a_time(&ranks));
    suite.finish();
}

fn one_caller_at_a_time(ranks: &[RankComm]) -> Result<(), String> {
    use std::sync::mpsc::channel;
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let n = 4096;
    let bound = Duration::from_secs(30);
    // Each rank's input (its rank + 1 everywhere) and two outputs: one for the
    // captured call, one for the eager call afterwards.
    let mut tensors = Vec::new();
    for rank in ranks {
        let stream = rank.stream();
        let input = stream
            .clone_htod(&vec![(rank.rank() + 1) as f32; n])
            .map_err(err)?;
        let captured = stream.alloc_zeros::<f32>(n).map_err(err)?;
        let eager = stream.alloc_zeros::<f32>(n).map_err(err)?;
        tensors.push((input, captured, eager));
    }
    let [(in0, cap0, eager0), (in1, cap1, eager1)] = &mut tensors[..] else {
        unreachable!("two ranks")
    };
    let (in0, in1) = (&*in0, &*in1);
    let (rank0, rank1) = (&ranks[0], &ranks[1]);
    let (inside, entered) = channel();
    let (tried, verdict) = channel();
    let (graph0, refused) = std::thread::scope(|s| {
        let capturing = s.spawn(move || {
            let mut ran = None;
            let graph = rank0.capture(|r| {
                inside.send(()).expect("the main thread waits");
                verdict
                    .recv_timeout(bound)
                    .expect("the other thread's call returned");
                ran = Some(r.all_reduce(&in0.as_view(), &mut cap0.as_view_mut(), Select::Auto)?);
                Ok(())
            });
            graph.map(|g| (SendGraph(g), ran))
        });
        entered
            .recv_timeout(bound)
            .expect("rank 0's thread entered its capture");
        let refused = s
            .spawn(|| rank0.all_reduce(&in0.as_view(), &mut eager0.as_view_mut(), Select::Auto))
            .join()
            .expect("the other thread");
        tried.send(()).expect("the capturing thread waits");
        (capturing.join().expect("the capturing thread"), refused)
    });
    match refused {
        Err(Error::Busy {
            rank: 0,
            call: "all_reduce",
        }) => {}
        other => {
            return Err(format!(
                "expected Error::Busy for rank 0's all_reduce, got {other:?}"
            ));
        }
    }
    let (graph0, ran0) = graph0.map_err(|e| format!("rank 0's capture: {e}"))?;
    if ran0.is_none() {
        return Err("rank 0's call inside its capture did not run".into());
    }
    rank0
        .health()
        .map_err(|e| format!("the refused call broke rank 0: {e}"))?;
    let graph1 = rank1
        .capture(|r| {
            r.all_reduce(&in1.as_view(), &mut cap1.as_view_mut(), Select::Auto)
                .map(drop)
        })
        .map_err(|e| format!("rank 1's capture: {e}"))?;
    graph0
        .0
        .launch()
        .map_err(|e| format!("rank 0's replay: {e}"))?;
    graph1
        .launch()
        .map_err(|e| format!("rank 1's replay: {e}"))?;
    // The capture is over: another thread's call on rank 0 runs now (rank 1
    // makes the matching call from this thread).
    let (other, mine) = std::thread::scope(|s| {
        let other =
            s.spawn(|| rank0.all_reduce(&in0.as_view(), &mut eager0.as_view_mut(), Select::Auto));
        let mine = rank1.all_reduce(&in1.as_view(), &mut eager1.as_view_mut(), Select::Auto);
        (other.join().expect("the other thread"), mine)
    });
    other.map_err(|e| format!("rank 0's call after the capture: {e}"))?;
    mine.map_err(|e| format!("rank 1's call after the capture: {e}"))?;
    for rank in ranks {
        rank.check()
            .map_err(|e| format!("rank {}: {e}", rank.rank()))?;
    }
    for (rank, (_, captured, eager)) in tensors.iter().enumerate() {
        for (what, output) in [("replayed", captured), ("eager", eager)] {
            let got = ranks[rank].stream().clone_dtoh(output).map_err(err)?;
            if let Some(i) = got.iter().position(|&x| x != 3.0) {
                return Err(format!(
                    "rank {rank}, {what} call: element {i} is {}, not 1 + 2",
                    got[i]
                ));
            }
        }
    }
    Ok(())
}

/// A graph captured on a rank keeps the rank's buffers, mappings, kernels and
/// NCCL alive: dropping the whole world and then replaying the graphs (on new
/// inputs) still computes the right sums, in worlds of 2 to 8.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_captured_graph_outlives_its_world() {
    let ctx = gpu();
    let mut suite = Suite::new("graph lifetime");
    for world in 2..=8 {
        suite.record(&format!("world {world}"), outlived(&ctx, world));
    }
    suite.finish();
}

fn outlived(ctx: &Arc<CudaContext>, world: usize) -> Result<(), String> {
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let mut ranks = loopback(ctx, world);
    let n = 8 * 1024;
    let mut held = Vec::new();
    for rank in ranks.iter_mut() {
        let stream = rank.stream().clone();
        let input = stream.alloc_zeros::<bf16>(n).map_err(err)?;
        let mut output = stream.alloc_zeros::<bf16>(n).map_err(err)?;
        let graph = rank
            .capture(|r| {
                for algo in [Algo::OneShotPush, Algo::TwoShotPull] {
                    r.all_reduce(
                        &input.as_view(),
                        &mut output.as_view_mut(),
                        Select::Force(algo),
                    )?;
                }
                Ok(())
            })
            .map_err(|e| format!("capture: {e}"))?;
        held.push((stream, input, output, graph));
    }
    drop(ranks);
    let inputs = tuner::harness::validation::random_inputs::<bf16>(world, n, 0x11fe);
    for ((stream, input, output, _), data) in held.iter_mut().zip(&inputs) {
        stream.memcpy_htod(data, input).map_err(err)?;
        tuner::harness::timing::poison(stream, output).map_err(|e| e.to_string())?;
        stream.synchronize().map_err(err)?;
    }
    for (_, _, _, graph) in &held {
        graph
            .launch()
            .map_err(|e| format!("replay after the world was dropped: {e}"))?;
    }
    let mut outputs = Vec::new();
    for (stream, _, output, graph) in &held {
        stream.synchronize().map_err(err)?;
        graph
            .lifeline()
            .health()
            .map_err(|e| format!("after the replay: {e}"))?;
        outputs.push(stream.clone_dtoh(output).map_err(err)?);
    }
    let views: Vec<&[bf16]> = outputs.iter().map(Vec::as_slice).collect();
    tuner::harness::validation::check_identical(&views)?;
    tuner::harness::validation::check_all_reduce(
        &inputs,
        &outputs[0],
        kernels::raw::SentinelRule::None,
    )?;
    drop(held);
    Ok(())
}

/// `tuner bench` with a fault injected into one configuration (the last rank
/// never issues its call): only that configuration is reported failed; the
/// bench builds a new world and every other configuration is timed.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn one_broken_configuration_stays_one_failure_in_the_bench() {
    use clap::Parser;
    #[derive(Parser)]
    struct Bench {
        #[command(flatten)]
        args: tuner::commands::BenchArgs,
    }
    let _ctx = gpu();
    let bench = Bench::parse_from([
        "bench",
        "--loopback",
        "--world",
        "2",
        "--collective",
        "all_reduce",
        "--algos",
        "one_shot_push,one_shot_pull,nccl",
        "--sizes",
        "4KiB,64KiB",
        "--modes",
        "graph,eager",
        "--samples",
        "3",
        "--timeout-ms",
        "200",
    ]);
    let stall = (Algo::OneShotPush, 4096);
    let mut out = Vec::new();
    let result = tuner::commands::bench_with_stall(&bench.args, stall, &mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    eprintln!("{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains("FAILED")).collect();
    assert_eq!(
        failed.len(),
        2,
        "graph and eager rows of the stalled size:\n{text}"
    );
    assert!(
        failed
            .iter()
            .all(|l| l.contains("one_shot_push") && l.contains("4KiB")),
        "{text}"
    );
    // 2 sizes x 3 algorithms x 2 modes, less the two failed rows.
    let timed = text
        .lines()
        .filter(|l| l.starts_with("all_reduce") && !l.contains("FAILED") && !l.contains("declined"))
        .count();
    assert_eq!(timed, 10, "{text}");
    assert!(text.contains("building a new one"), "{text}");
    assert!(result.is_err(), "a failed configuration must fail the run");
}
