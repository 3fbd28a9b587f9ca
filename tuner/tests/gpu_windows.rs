//! Window calls (`RankComm::alloc_window`, `all_reduce_window`,
//! `all_gather_window`): where NCCL on a window runs a call is decided by the
//! call, never by where a rank's tensors lie, and the window a call names is
//! part of its signature, so ranks that name different windows, or make a
//! window call against an ordinary one, get `Error::Mismatch`.
//!
//! A loopback world of several ranks has no NCCL, so its windows are plain
//! memory and `nccl_symmetric` declines to the reference collective, which
//! stands in for NCCL and compares signatures in its handshake: that is
//! where a rank that places a call differently is caught on one GPU. A
//! world of one has real NCCL and NCCL windows, where window calls run in
//! place. Across GPUs (2 or more) window calls run NCCL's symmetric kernels;
//! there a custom kernel's handshake still catches a misplaced call, NCCL's
//! own cannot (kernels/GPU.md, "Window calls").
//!
//! Every test is ignored by default; `scripts/gpu-run.sh` runs them.

mod gpu_common;

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::CudaContext;
use gpu_common::{Suite, device_count, gpu, skipped};
use half::bf16;
use kernels::{Error, Options, RankComm, Select, WindowBuffer, World};
use policy::{Algo, Collective};
use tuner::harness::concurrent::for_each_rank;
use tuner::harness::validation::{check_all_gather, check_all_reduce_of, random_inputs};
use tuner::harness::world::measuring;

/// bf16 elements each rank contributes: 8 KiB, which every algorithm takes.
const N: usize = 4096;

fn options() -> Options {
    Options {
        timeout: Duration::from_secs(1),
        log_declines: false,
        ..measuring(None, true)
    }
}

fn loopback(ctx: &Arc<CudaContext>, world: usize) -> Result<Vec<RankComm>, String> {
    World::loopback(ctx.clone(), world, options()).map_err(|e| format!("world of {world}: {e}"))
}

/// Two more windows per rank (numbered alike on every rank), each large
/// enough for an all-gather of `N` elements per rank.
fn two_windows(ranks: &mut [RankComm]) -> Result<Vec<[WindowBuffer<bf16>; 2]>, String> {
    let world = ranks.len();
    let states = vec![(); world];
    let windows = for_each_rank(ranks, states, |rank, (), _| {
        Ok([
            rank.alloc_window::<bf16>(world * N)?,
            rank.alloc_window::<bf16>(world * N)?,
        ])
    })
    .map_err(|e| format!("alloc_window: {e}"))?;
    // Windows are numbered in allocation order, alike on every rank.
    let first = windows[0][0].index();
    for (r, [a, b]) in windows.iter().enumerate() {
        if (a.index(), b.index()) != (first, first + 1) {
            return Err(format!(
                "rank {r}'s windows are numbered {} and {}, rank 0's {first} and {}",
                a.index(),
                b.index(),
                first + 1
            ));
        }
    }
    Ok(windows)
}

/// What a call does on one rank.
#[derive(Clone, Copy, Debug)]
enum Issue {
    /// A window call on the first (0) or second (1) of the rank's two
    /// windows: windows 0 and 1 in a fresh world, which `misplaced` uses.
    Window(usize),
    /// An ordinary in-place call on a view of the rank's window 0.
    Ordinary,
}

/// What a call gave one rank: what ran (or the error), and the window it
/// used afterwards (empty after an error).
type Outcome = (kernels::Result<Algo>, Vec<bf16>);

/// One in-place `collective` of `algo` on every rank, rank r issuing
/// `issue(r)`, after each rank wrote its input into its windows (at its
/// share's place for an all-gather); then `check()`. Every rank's outcome
/// and its window 0 or 1 (whichever it used) afterwards.
fn call_on_every_rank(
    ranks: &mut [RankComm],
    windows: Vec<[WindowBuffer<bf16>; 2]>,
    collective: Collective,
    algo: Algo,
    inputs: &Arc<Vec<Vec<bf16>>>,
    issue: impl Fn(usize) -> Issue + Sync,
) -> Result<Vec<Outcome>, String> {
    let world = ranks.len();
    let len = collective.output_size(world as u64, N as u64) as usize;
    for_each_rank(ranks, windows, |rank, mut windows, _| {
        let r = rank.rank();
        let stream = rank.stream().clone();
        let at = match collective {
            Collective::AllReduce => 0,
            Collective::AllGather => r * N,
            Collective::AllReduceAddRmsNorm => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
        };
        let drv = |e: cudarc::driver::DriverError| Error::Verification(format!("{e:?}"));
        for window in windows.iter_mut() {
            let mut share = window.slice_mut(at..at + N);
            stream.memcpy_htod(&inputs[r], &mut share).map_err(drv)?;
        }
        stream.synchronize().map_err(drv)?;
        let how = Select::Force(algo);
        let (used, ran) = match (issue(r), collective) {
            (Issue::Window(i), Collective::AllReduce) => {
                (i, rank.all_reduce_window(&mut windows[i], len, how))
            }
            (Issue::Window(i), Collective::AllGather) => {
                (i, rank.all_gather_window(&mut windows[i], len, how))
            }
            (Issue::Ordinary, Collective::AllReduce) => (
                0,
                rank.all_reduce_in_place(&mut windows[0].slice_mut(..len), how),
            ),
            (Issue::Ordinary, Collective::AllGather) => (
                0,
                rank.all_gather_in_place(&mut windows[0].slice_mut(..len), how),
            ),
            (_, Collective::AllReduceAddRmsNorm) => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
        };
        let ran = ran.and_then(|ran| rank.check().map(|()| ran));
        let result = match &ran {
            Ok(_) => stream
                .clone_dtoh(&windows[used].slice(..len))
                .map_err(drv)?,
            Err(_) => Vec::new(),
        };
        Ok((ran, result))
    })
    .map_err(|e| e.to_string())
}

/// The algorithm a forced `algo` runs in `rank`'s world: itself, or the
/// world's fallback where it declines.
fn expected(rank: &RankComm, collective: Collective, algo: Algo) -> Algo {
    let bytes = collective.output_size(rank.world_size() as u64, 2 * N as u64);
    if rank.would_decline(collective, algo, bytes).is_some() {
        Algo::Nccl
    } else {
        algo
    }
}

/// Every rank makes the same window call: each must run `expected` and
/// give the host reference (NCCL across GPUs to its own contract).
fn same_window_everywhere(
    ranks: &mut [RankComm],
    collective: Collective,
    algo: Algo,
    seed: u64,
) -> Result<(), String> {
    let world = ranks.len();
    let expect = expected(&ranks[0], collective, algo);
    let across_gpus = ranks[0].fallback_kind() == kernels::Fallback::Nccl && world > 1;
    let inputs = Arc::new(random_inputs::<bf16>(world, N, seed));
    let windows = two_windows(ranks)?;
    let outcomes = call_on_every_rank(ranks, windows, collective, algo, &inputs, |_| {
        Issue::Window(0)
    })?;
    for (r, (ran, result)) in outcomes.into_iter().enumerate() {
        let ran = ran.map_err(|e| format!("rank {r}: {e}"))?;
        if ran != expect {
            return Err(format!(
                "rank {r} ran {}, not {}",
                ran.name(),
                expect.name()
            ));
        }
        match collective {
            Collective::AllReduce => {
                check_all_reduce_of(ran, across_gpus && !ran.is_kernel(), &inputs, &result)
            }
            Collective::AllGather => check_all_gather(&inputs, &result, ran == Algo::OneShotPush),
            Collective::AllReduceAddRmsNorm => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
        }
        .map_err(|e| format!("rank {r} ({}): {e}", ran.name()))?;
    }
    Ok(())
}

/// Rank 1 issues `odd`, every other rank a window call on window 0: every
/// rank must get `Error::Mismatch` naming both calls. A window call is
/// described with its window ("… in bf16 on window 0"), an ordinary one
/// without ("… in bf16," or "… in bf16;" in the message).
fn misplaced(
    ranks: &mut [RankComm],
    collective: Collective,
    algo: Algo,
    odd: Issue,
) -> Result<(), String> {
    let world = ranks.len();
    let inputs = Arc::new(random_inputs::<bf16>(world, N, 0x3a11));
    let windows = two_windows(ranks)?;
    let outcomes = call_on_every_rank(ranks, windows, collective, algo, &inputs, |r| {
        if r == 1 { odd } else { Issue::Window(0) }
    })?;
    let names_both = |what: &str| match odd {
        Issue::Window(i) => {
            what.contains("in bf16 on window 0") && what.contains(&format!("in bf16 on window {i}"))
        }
        Issue::Ordinary => {
            what.contains("in bf16 on window 0")
                && (what.contains("in bf16,") || what.contains("in bf16;"))
        }
    };
    for (r, (ran, _)) in outcomes.into_iter().enumerate() {
        match ran {
            Err(Error::Mismatch(what)) if names_both(&what) => {
                if r == 0 {
                    eprintln!("   rank 0: {what}");
                }
            }
            other => {
                return Err(format!(
                    "rank {r}: expected Error::Mismatch naming both calls, got {other:?}"
                ));
            }
        }
    }
    Ok(())
}

/// Window calls in loopback worlds of 2 and 4 ranks (no NCCL: plain-memory
/// windows, `nccl_symmetric` declined to the reference): every algorithm of
/// both collectives on the same window of every rank is right; a rank that
/// names window 1 where the others name window 0, or makes an ordinary call
/// on its window where the others make a window call, fails every rank with
/// `Error::Mismatch` naming both, through the reference (what stands in for
/// `nccl_symmetric` here) and through a custom kernel.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn window_calls_in_a_loopback_world_name_their_window_in_the_handshake() {
    let ctx = gpu();
    let mut suite = Suite::new("window calls, loopback");
    for world in [2, 4] {
        for collective in gpu_common::PLAIN_COLLECTIVES {
            for (i, &algo) in collective.algos().iter().enumerate() {
                let label = format!("world {world} {} {}", collective.name(), algo.name());
                let outcome = loopback(&ctx, world).and_then(|mut ranks| {
                    if let Some(r) = ranks.iter().position(|r| r.window_bytes() != 0) {
                        return Err(format!("rank {r} of a loopback world has an NCCL window"));
                    }
                    same_window_everywhere(&mut ranks, collective, algo, 0x3a00 + i as u64)
                });
                suite.record(&format!("{label}: the same window"), outcome);
            }
            for algo in [Algo::NcclSymmetric, Algo::OneShotPush] {
                let label = format!("world {world} {} {}", collective.name(), algo.name());
                suite.record(
                    &format!("{label}: window 1 against window 0"),
                    loopback(&ctx, world).and_then(|mut ranks| {
                        misplaced(&mut ranks, collective, algo, Issue::Window(1))
                    }),
                );
                suite.record(
                    &format!("{label}: an ordinary call against a window call"),
                    loopback(&ctx, world).and_then(|mut ranks| {
                        misplaced(&mut ranks, collective, algo, Issue::Ordinary)
                    }),
                );
            }
        }
        suite.note(&format!("world {world} done"));
    }
    suite.finish();
}

/// A world of one has real NCCL and an NCCL window: window calls run
/// `nccl_symmetric` in place (all-reduce, all-gather, captured in a graph),
/// ordinary calls on a window's memory run it through the rank's own window,
/// both against the host reference; a window of another rank and a length
/// past the window are refused with `Error::Mismatch`.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn window_calls_in_a_world_of_one_run_nccl_symmetric_in_place() {
    let ctx = gpu();
    let mut suite = Suite::new("window calls, world of one");
    let mut ranks = loopback(&ctx, 1).expect("a world of one");
    assert!(
        ranks[0].window_bytes() > 0,
        "a world of one has no NCCL window (NCCL {:?}; windows need 2.27 or later)",
        kernels::raw::nccl_version()
    );
    for collective in gpu_common::PLAIN_COLLECTIVES {
        for issue in [Issue::Window(0), Issue::Window(1), Issue::Ordinary] {
            suite.record(
                &format!("{} {issue:?}", collective.name()),
                world_of_one_call(&mut ranks, collective, issue),
            );
        }
    }
    suite.record("captured", captured_window_call(&mut ranks[0]));
    let mut other = loopback(&ctx, 1).expect("a second world of one");
    suite.record("refusals", refusals(&mut ranks[0], &mut other[0]));
    suite.finish();
}

fn world_of_one_call(
    ranks: &mut [RankComm],
    collective: Collective,
    issue: Issue,
) -> Result<(), String> {
    let inputs = Arc::new(random_inputs::<bf16>(1, N, 0x3b00));
    let windows = two_windows(ranks)?;
    let outcomes = call_on_every_rank(
        ranks,
        windows,
        collective,
        Algo::NcclSymmetric,
        &inputs,
        |_| issue,
    )?;
    let (ran, result) = outcomes.into_iter().next().expect("one rank");
    let ran = ran.map_err(|e| e.to_string())?;
    if ran != Algo::NcclSymmetric {
        return Err(format!("{} ran, not nccl_symmetric", ran.name()));
    }
    match collective {
        Collective::AllReduce => check_all_reduce_of(ran, false, &inputs, &result),
        Collective::AllGather => check_all_gather(&inputs, &result, false),
        Collective::AllReduceAddRmsNorm => unreachable!("{}", gpu_common::FUSED_ELSEWHERE),
    }
}

/// A window call captured into a graph and replayed on a new input.
fn captured_window_call(rank: &mut RankComm) -> Result<(), String> {
    let err = |e: Error| e.to_string();
    let drv = |e: cudarc::driver::DriverError| format!("{e:?}");
    let stream = rank.stream().clone();
    let mut window = rank.alloc_window::<bf16>(N).map_err(err)?;
    let how = Select::Force(Algo::NcclSymmetric);
    let graph = rank
        .capture(|r| {
            let ran = r.all_reduce_window(&mut window, N, how)?;
            assert_eq!(ran, Algo::NcclSymmetric, "captured");
            Ok(())
        })
        .map_err(err)?;
    let inputs = random_inputs::<bf16>(1, N, 0x3c00);
    stream.memcpy_htod(&inputs[0], &mut *window).map_err(drv)?;
    graph.launch().map_err(err)?;
    rank.check().map_err(err)?;
    let got = stream.clone_dtoh(&*window).map_err(drv)?;
    check_all_reduce_of(Algo::NcclSymmetric, false, &inputs, &got)
}

/// A window of another rank and a length past the window are refused before
/// anything runs.
fn refusals(rank: &mut RankComm, other: &mut RankComm) -> Result<(), String> {
    let err = |e: Error| e.to_string();
    let how = Select::Force(Algo::NcclSymmetric);
    let mut theirs = other.alloc_window::<bf16>(N).map_err(err)?;
    match rank.all_reduce_window(&mut theirs, N, how) {
        Err(Error::Mismatch(why)) if why.contains("another rank") => {}
        other => return Err(format!("another rank's window: {other:?}")),
    }
    let mut ours = rank.alloc_window::<bf16>(N).map_err(err)?;
    match rank.all_reduce_window(&mut ours, N + 1, how) {
        Err(Error::Mismatch(why)) if why.contains("of a window of") => {}
        other => return Err(format!("past the window: {other:?}")),
    }
    // Refused calls leave the rank healthy.
    rank.check().map_err(err)
}

/// One rank per GPU (2 or more): window calls run NCCL's symmetric kernels
/// in place and ordinary calls through each rank's window, both right
/// (to NCCL's contract); a custom kernel's handshake refuses ranks that name
/// different windows.
#[test]
#[ignore = "needs 2 CUDA GPUs: run scripts/gpu-run.sh on a GPU machine"]
fn window_calls_across_gpus_run_nccl_symmetric_in_place() {
    let gpus = device_count();
    if gpus < 2 {
        skipped(
            "window_calls_across_gpus_run_nccl_symmetric_in_place",
            2,
            gpus,
        );
        return;
    }
    let mut suite = Suite::new("window calls, across GPUs");
    let world = gpus.min(8);
    let devices = || -> Result<Vec<RankComm>, String> {
        let streams = (0..world)
            .map(|d| {
                let ctx = CudaContext::new(d).map_err(|e| format!("{e:?}"))?;
                // SAFETY: no slices exist on this context yet.
                unsafe { ctx.disable_event_tracking() };
                ctx.new_stream().map_err(|e| format!("{e:?}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        World::devices(streams, options()).map_err(|e| e.to_string())
    };
    let mut ranks = devices().expect("a world of one rank per GPU");
    assert!(
        ranks.iter().all(|r| r.window_bytes() > 0),
        "no NCCL window across GPUs (NCCL {:?}; windows need 2.27 or later)",
        kernels::raw::nccl_version()
    );
    for collective in gpu_common::PLAIN_COLLECTIVES {
        suite.record(
            &format!("{} nccl_symmetric on window 0", collective.name()),
            same_window_everywhere(&mut ranks, collective, Algo::NcclSymmetric, 0x3d00),
        );
    }
    suite.record(
        "one_shot_push: window 1 against window 0",
        devices().and_then(|mut ranks| {
            misplaced(
                &mut ranks,
                Collective::AllReduce,
                Algo::OneShotPush,
                Issue::Window(1),
            )
        }),
    );
    suite.finish();
}
