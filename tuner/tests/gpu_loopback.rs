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
use gpu_common::{Case, NEEDS_GPU, Placement, Suite, eager, gpu, graph};
use half::{bf16, f16};
use kernels::{Element, Error, Fallback, Options, RankComm, Select, World};
use policy::{Algo, Collective, DType, Mode};
use tuner::harness::timing::{TimingSpec, measure, validate};

const MIB: usize = 1 << 20;
/// Bytes each rank contributes in the size sweep: powers of two and odd
/// multiples of 16 bytes, from one pack to 2 MiB (all-gather stops where the
/// gathered output would exceed a capacity: those sizes belong to the decline
/// tests).
const SWEEP_BYTES: [usize; 8] = [16, 48, 592, 4096, 65_552, 262_144, MIB, 2 * MIB + 48];
const GRAPH_BYTES: usize = 65_552;
const GRAPH_REPLAYS: usize = 1000;

fn loopback(ctx: &Arc<CudaContext>, world: usize) -> Vec<RankComm> {
    World::loopback(ctx.clone(), world, Options::default())
        .unwrap_or_else(|e| panic!("building a loopback world of {world}: {e}"))
}

/// Runs `case` in `mode`, requiring that `expect` ran; rebuilds the world after
/// a timeout (the world is unusable then) so later cases still run.
fn run<T: Element>(
    suite: &mut Suite,
    ctx: &Arc<CudaContext>,
    ranks: &mut Vec<RankComm>,
    case: Case,
    mode: Mode,
    expect: Algo,
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
                GRAPH_REPLAYS
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
    let failed_with_timeout = matches!(&outcome, Err(e) if e.contains("timed out"));
    suite.record(&label, outcome);
    if failed_with_timeout {
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

fn sweep<T: Element>(
    suite: &mut Suite,
    ctx: &Arc<CudaContext>,
    ranks: &mut Vec<RankComm>,
    collective: Collective,
    sizes: &[usize],
) {
    let size = std::mem::size_of::<T>();
    let world = ranks.len();
    for (i, &bytes) in sizes.iter().enumerate() {
        let out = output_bytes(collective, world, bytes);
        // Gathered outputs above every capacity are the decline tests' business.
        if collective == Collective::AllGather
            && expected(ranks, collective, Algo::OneShotPull, out) != Algo::OneShotPull
        {
            continue;
        }
        for &algo in collective.algos() {
            let case = Case {
                collective,
                how: Select::Force(algo),
                per_rank: bytes / size,
                placement: Placement::OutOfPlace,
                seed: (i as u64) << 8 | algo as u64,
            };
            let expect = expected(ranks, collective, algo, out);
            run::<T>(suite, ctx, ranks, case, Mode::Eager, expect);
        }
    }
    for &algo in collective.algos() {
        let case = Case {
            collective,
            how: Select::Force(algo),
            per_rank: GRAPH_BYTES / size,
            placement: Placement::OutOfPlace,
            seed: 0xA000 | algo as u64,
        };
        let expect = expected(
            ranks,
            collective,
            algo,
            output_bytes(collective, world, GRAPH_BYTES),
        );
        run::<T>(suite, ctx, ranks, case, Mode::Graph, expect);
    }
    suite.note(&format!("{} {} done", collective.name(), T::DTYPE.name()));
}

fn collective_suite(world: usize, collective: Collective) {
    let ctx = gpu();
    let mut suite = Suite::new(&format!("loopback world {world}: {}", collective.name()));
    let mut ranks = loopback(&ctx, world);
    assert_eq!(ranks[0].fallback_kind(), Fallback::LoopbackReference);
    sweep::<bf16>(&mut suite, &ctx, &mut ranks, collective, &SWEEP_BYTES);
    sweep::<f16>(&mut suite, &ctx, &mut ranks, collective, &SWEEP_BYTES);
    sweep::<f32>(&mut suite, &ctx, &mut ranks, collective, &SWEEP_BYTES);
    suite.finish();
}

/// World sizes that are not powers of two: uneven two-shot shards, odd slot
/// counts, odd block splits of the SMs.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_odd_world_sizes() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback odd world sizes");
    for world in [3, 5, 6, 7] {
        let mut ranks = loopback(&ctx, world);
        for collective in Collective::ALL {
            sweep::<bf16>(
                &mut suite,
                &ctx,
                &mut ranks,
                collective,
                &[16, 48, 592, 65_552, 2 * MIB + 48],
            );
            sweep::<f32>(
                &mut suite,
                &ctx,
                &mut ranks,
                collective,
                &[16, 4096, 262_144],
            );
        }
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_all_reduce_world_2() {
    collective_suite(2, Collective::AllReduce);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_all_reduce_world_4() {
    collective_suite(4, Collective::AllReduce);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_all_reduce_world_8() {
    collective_suite(8, Collective::AllReduce);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_all_gather_world_2() {
    collective_suite(2, Collective::AllGather);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_all_gather_world_4() {
    collective_suite(4, Collective::AllGather);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_all_gather_world_8() {
    collective_suite(8, Collective::AllGather);
}

/// In place, eager and captured, for every algorithm.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn loopback_in_place() {
    let ctx = gpu();
    let mut suite = Suite::new("loopback in place");
    for world in [2, 8] {
        let mut ranks = loopback(&ctx, world);
        for collective in Collective::ALL {
            for &algo in collective.algos() {
                for bytes in [4096, 65_552] {
                    for mode in [Mode::Eager, Mode::Graph] {
                        let case = Case {
                            collective,
                            how: Select::Force(algo),
                            per_rank: bytes / 2,
                            placement: Placement::InPlace,
                            seed: 0xB000 | algo as u64,
                        };
                        run::<bf16>(&mut suite, &ctx, &mut ranks, case, mode, algo);
                        let case = Case {
                            per_rank: bytes / 4,
                            ..case
                        };
                        run::<f32>(&mut suite, &ctx, &mut ranks, case, mode, algo);
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
            run::<bf16>(&mut suite, &ctx, &mut ranks, case, Mode::Eager, algo);
        }
        suite.note(&format!("world {world} done"));
    }
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
                        run::<bf16>(&mut suite, &ctx, &mut ranks, case, mode, Algo::Nccl)
                    }
                    DType::F16 => run::<f16>(&mut suite, &ctx, &mut ranks, case, mode, Algo::Nccl),
                    DType::F32 => run::<f32>(&mut suite, &ctx, &mut ranks, case, mode, Algo::Nccl),
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
    for collective in Collective::ALL {
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
                    run::<bf16>(&mut suite, &ctx, &mut ranks, case, Mode::Eager, algo);
                    let case = Case {
                        per_rank: bytes / 4,
                        ..case
                    };
                    run::<f32>(&mut suite, &ctx, &mut ranks, case, Mode::Graph, algo);
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
    run::<f16>(&mut suite, &ctx, &mut ranks, case, Mode::Eager, Algo::Nccl);
    suite.finish();
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
            ..Options::default()
        };
        let mut ranks = World::loopback(ctx.clone(), 2, options).expect("world");
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

/// `Select::Policy` asks the policy; `COLLTUNE_ALGO` overrides it, and a bad
/// value is an error when the world is built.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn policy_selection_and_override() {
    let ctx = gpu();
    let mut suite = Suite::new("policy");
    let mut ranks = loopback(&ctx, 2);
    for mode in [Mode::Eager, Mode::Graph] {
        let case = Case {
            collective: Collective::AllReduce,
            how: Select::Policy(mode),
            per_rank: 2048,
            placement: Placement::OutOfPlace,
            seed: 9,
        };
        let expected = ranks[0].policy_choice(Collective::AllReduce, DType::Bf16, mode, 4096);
        let expected = match ranks[0].would_decline(Collective::AllReduce, expected, 4096) {
            None => expected,
            Some(_) => Algo::Nccl,
        };
        run::<bf16>(&mut suite, &ctx, &mut ranks, case, mode, expected);
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
            };
            let timed = measure(&mut ranks, &spec)
                .map_err(|e| e.to_string())
                .and_then(|us| {
                    eprintln!("   {} {}: {us:.2?} us/call", algo.name(), mode.name());
                    if us.len() == 5
                        && us
                            .iter()
                            .all(|t| t.is_finite() && *t > 0.0 && *t < 10_000.0)
                    {
                        Ok(())
                    } else {
                        Err(format!("implausible samples {us:?}"))
                    }
                });
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

#[test]
fn the_gpu_message_names_the_script() {
    assert!(NEEDS_GPU.contains("scripts/gpu-run.sh"));
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
