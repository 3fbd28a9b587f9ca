//! GPU tests across real GPUs (one rank per GPU, single process). With fewer
//! than two GPUs they print why and pass; without any GPU they fail.

mod gpu_common;

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice};
use gpu_common::{Case, Placement, Suite, device_count, eager, gpu, graph, skipped};
use half::bf16;
use kernels::{Element, Fallback, Options, RankComm, Select, World};
use policy::{Algo, Collective, Mode};
use tuner::harness::concurrent::for_each_rank;
use tuner::harness::validation::{
    check_all_gather, check_all_reduce, check_nccl_all_reduce, random_inputs,
};
use tuner::harness::world::measuring;

const SWEEP_BYTES: [usize; 5] = [16, 592, 65_552, 1 << 20, 8 << 20];

fn devices_world(count: usize) -> Vec<RankComm> {
    let streams = (0..count)
        .map(|d| {
            let ctx = CudaContext::new(d).expect("opening a GPU");
            // SAFETY: no slices exist on this context yet.
            unsafe { ctx.disable_event_tracking() };
            ctx.new_stream().expect("a stream")
        })
        .collect();
    World::devices(streams, measuring(None, true))
        .unwrap_or_else(|e| panic!("building a world of {count} GPUs: {e}"))
}

/// Runs the same inputs through `algo` and through NCCL and compares them
/// (within the dtype's tolerance: NCCL's summation order is its own).
fn against_nccl<T: Element>(
    ranks: &mut [RankComm],
    collective: Collective,
    algo: Algo,
    per_rank: usize,
) -> Result<(), String> {
    let world = ranks.len();
    let inputs = Arc::new(random_inputs::<T>(world, per_rank, per_rank as u64));
    let out_len = collective.output_size(world as u64, per_rank as u64) as usize;
    let states: Vec<usize> = (0..world).collect();
    let outputs = for_each_rank(ranks, states, |rank, r, _| {
        let stream = rank.stream().clone();
        let map = |e: cudarc::driver::DriverError| kernels::Error::Verification(format!("{e:?}"));
        let input: CudaSlice<T> = stream.clone_htod(&inputs[r]).map_err(map)?;
        let mut custom = stream.alloc_zeros::<T>(out_len).map_err(map)?;
        let mut nccl = stream.alloc_zeros::<T>(out_len).map_err(map)?;
        let run = |rank: &mut RankComm, out: &mut CudaSlice<T>, algo| match collective {
            Collective::AllReduce => rank.all_reduce(
                &input.as_view(),
                &mut out.as_view_mut(),
                Select::Force(algo),
            ),
            Collective::AllGather => rank.all_gather(
                &input.as_view(),
                &mut out.as_view_mut(),
                Select::Force(algo),
            ),
            Collective::AllReduceAddRmsNorm => Err(kernels::Error::Unsupported(
                "all_reduce_add_rmsnorm is tested by gpu_fused.rs".into(),
            )),
        };
        let ran = run(rank, &mut custom, algo)?;
        run(rank, &mut nccl, Algo::Nccl)?;
        rank.check()?;
        if ran != algo {
            return Err(kernels::Error::Verification(format!(
                "{} declined",
                algo.name()
            )));
        }
        Ok((
            stream.clone_dtoh(&custom).map_err(map)?,
            stream.clone_dtoh(&nccl).map_err(map)?,
        ))
    })
    .map_err(|e| e.to_string())?;
    // Both against the f64 reference, each with its own contract: ours rounds
    // once, NCCL rounds every partial sum (check_nccl_all_reduce); a direct
    // comparison would need a tolerance for cancelling sums, which is exactly
    // what the reference check derives from the inputs.
    let rule = kernels::raw::sentinel_rule(algo);
    let pushed = rule != kernels::raw::SentinelRule::None;
    for (r, (custom, nccl)) in outputs.iter().enumerate() {
        let (mine, theirs) = match collective {
            Collective::AllReduce => (
                check_all_reduce(&inputs, custom, rule),
                check_nccl_all_reduce(&inputs, nccl),
            ),
            Collective::AllGather => (
                check_all_gather(&inputs, custom, pushed),
                check_all_gather(&inputs, nccl, false),
            ),
            Collective::AllReduceAddRmsNorm => {
                return Err("all_reduce_add_rmsnorm is tested by gpu_fused.rs".into());
            }
        };
        mine.map_err(|e| format!("rank {r}: {}: {e}", algo.name()))?;
        theirs.map_err(|e| format!("rank {r}: NCCL: {e}"))?;
    }
    Ok(())
}

fn suite_on(count: usize, suite: &mut Suite) {
    let mut ranks = devices_world(count);
    assert_eq!(ranks[0].fallback_kind(), Fallback::Nccl);
    suite.note(&format!(
        "world of {count} GPUs: link {}",
        ranks[0].link().name()
    ));
    for collective in gpu_common::PLAIN_COLLECTIVES {
        let algos = collective.algos();
        for &algo in algos {
            for bytes in SWEEP_BYTES {
                let per_rank = collective.per_rank_size(count as u64, bytes as u64) as usize / 2;
                if per_rank == 0 || !(per_rank * 2).is_multiple_of(16) {
                    continue;
                }
                let case = Case {
                    collective,
                    how: Select::Force(algo),
                    per_rank,
                    placement: Placement::OutOfPlace,
                    seed: bytes as u64,
                };
                let label = format!("{} eager", case.label::<bf16>(count));
                suite.record(&label, eager::<bf16>(&mut ranks, &case));
                if algo.is_custom() {
                    suite.record(
                        &format!("{label} vs NCCL"),
                        against_nccl::<bf16>(&mut ranks, collective, algo, per_rank),
                    );
                }
            }
            let case = Case {
                collective,
                how: Select::Force(algo),
                per_rank: 65_536 / 4,
                placement: Placement::OutOfPlace,
                seed: 77,
            };
            suite.record(
                &format!("{} graph", case.label::<f32>(count)),
                graph::<f32>(&mut ranks, &case, 1000),
            );
            let case = Case {
                placement: Placement::InPlace,
                ..case
            };
            suite.record(
                &format!("{} eager", case.label::<f32>(count)),
                eager::<f32>(&mut ranks, &case),
            );
            suite.note(&format!("{} {} done", collective.name(), algo.name()));
        }
    }
    let case = Case {
        collective: Collective::AllReduce,
        how: Select::Policy(Mode::Graph),
        per_rank: 4096,
        placement: Placement::OutOfPlace,
        seed: 3,
    };
    suite.record("policy selection", eager::<bf16>(&mut ranks, &case));
}

/// The devices constructor on the one GPU every machine has: a world of one
/// rank (peer setup, per-context kernels, NCCL through `World::devices`), and
/// the refusal of two ranks on one GPU.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn devices_world_of_one_gpu() {
    let _ctx = gpu();
    let mut suite = Suite::new("devices world of one GPU");
    let mut ranks = devices_world(1);
    suite.record(
        "fallback is NCCL",
        match ranks[0].fallback_kind() {
            Fallback::Nccl => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    for collective in gpu_common::PLAIN_COLLECTIVES {
        for &algo in collective.algos() {
            let case = Case {
                collective,
                how: Select::Force(algo),
                per_rank: 65_552 / 2,
                placement: Placement::OutOfPlace,
                seed: 11,
            };
            let label = case.label::<bf16>(1);
            suite.record(&format!("{label} eager"), eager::<bf16>(&mut ranks, &case));
            suite.record(
                &format!("{label} graph"),
                graph::<bf16>(&mut ranks, &case, 100),
            );
        }
    }
    drop(ranks);
    let ctx = CudaContext::new(0).expect("GPU 0");
    let twice = vec![ctx.new_stream().unwrap(), ctx.new_stream().unwrap()];
    suite.record(
        "two ranks on one GPU are refused",
        match World::devices(twice, measuring(None, true)) {
            Err(kernels::Error::Mismatch(what)) => {
                eprintln!("   ok: {what}");
                Ok(())
            }
            Err(other) => Err(format!("wrong error: {other}")),
            Ok(_) => Err("accepted".into()),
        },
    );
    suite.finish();
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn devices_suite_against_nccl() {
    let _ctx = gpu();
    let count = device_count();
    if count < 2 {
        skipped("devices_suite_against_nccl", 2, count);
        return;
    }
    let mut suite = Suite::new("devices");
    let mut sizes = vec![2];
    if count >= 4 {
        sizes.push(count.min(8));
    }
    for count in sizes {
        suite_on(count, &mut suite);
    }
    suite.finish();
}

/// What one rank of the stalled-peer test did.
struct StallOutcome {
    error: Option<kernels::Error>,
    took: std::time::Duration,
}

/// A world of two GPUs in which rank 1's thread stops issuing calls: rank 0's
/// next call of `algo` must end in `Error::Timeout` from `check()` within
/// `bound`, and dropping either rank must be bounded too.
fn one_rank_stops_calling(
    algo: Algo,
    options: &Options,
    bound: std::time::Duration,
) -> Result<(), String> {
    use std::time::{Duration, Instant};
    let streams = (0..2)
        .map(|d| {
            let ctx = CudaContext::new(d).expect("opening a GPU");
            // SAFETY: no slices exist on this context yet.
            unsafe { ctx.disable_event_tracking() };
            ctx.new_stream().expect("a stream")
        })
        .collect();
    let mut ranks = World::devices(streams, options.clone()).map_err(|e| e.to_string())?;
    let per_rank = 32 * 1024;
    let inputs = Arc::new(random_inputs::<bf16>(2, per_rank, 9));
    // One healthy call on both ranks first: NCCL has connected, so the
    // stalled call waits inside a kernel, not in NCCL's set-up.
    let warm = for_each_rank(&mut ranks, vec![0usize, 1], |rank, r, _| {
        let stream = rank.stream().clone();
        let map = |e: cudarc::driver::DriverError| kernels::Error::Verification(format!("{e:?}"));
        let input: CudaSlice<bf16> = stream.clone_htod(&inputs[r]).map_err(map)?;
        let mut out = stream.alloc_zeros::<bf16>(per_rank).map_err(map)?;
        rank.all_reduce(
            &input.as_view(),
            &mut out.as_view_mut(),
            Select::Force(algo),
        )?;
        rank.check()
    });
    warm.map_err(|e| format!("{} warm-up: {e}", algo.name()))?;

    let (first, second) = ranks.split_at_mut(1);
    let (zero, one) = (&mut first[0], &mut second[0]);
    let outcomes = std::thread::scope(|s| {
        let issuing = s.spawn(|| {
            let stream = zero.stream().clone();
            let input: CudaSlice<bf16> = stream.clone_htod(&inputs[0]).expect("an input");
            let mut out = stream.alloc_zeros::<bf16>(per_rank).expect("an output");
            let start = Instant::now();
            let error = zero
                .all_reduce(
                    &input.as_view(),
                    &mut out.as_view_mut(),
                    Select::Force(algo),
                )
                .and_then(|_| zero.check())
                .err();
            StallOutcome {
                error,
                took: start.elapsed(),
            }
        });
        // Rank 1's thread stops issuing calls: it returns at once.
        let silent = s.spawn(move || one.rank());
        let _ = silent.join();
        issuing.join().expect("rank 0's thread")
    });
    match &outcomes.error {
        Some(kernels::Error::Timeout { rank: 0, .. }) if outcomes.took <= bound => {
            eprintln!(
                "   ok: {}: rank 0 timed out after {:.2}s: {}",
                algo.name(),
                outcomes.took.as_secs_f64(),
                outcomes
                    .error
                    .as_ref()
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            );
        }
        Some(kernels::Error::Timeout { .. }) => {
            return Err(format!(
                "{}: the timeout came after {:.2}s (bound {bound:?})",
                algo.name(),
                outcomes.took.as_secs_f64()
            ));
        }
        other => {
            return Err(format!(
                "{}: rank 0 expected Error::Timeout, got {other:?}",
                algo.name()
            ));
        }
    }
    // Dropping is bounded: the broken rank aborts NCCL at once; the silent one
    // finalises NCCL within its bound (aborting past it).
    let one = ranks.pop().expect("rank 1");
    let zero = ranks.pop().expect("rank 0");
    for (name, rank, limit) in [
        ("rank 0 (broken)", zero, Duration::from_secs(5)),
        // NCCL's teardown is bounded by 20 s in all (TEARDOWN_BOUND + ABORT_BOUND).
        ("rank 1 (silent)", one, Duration::from_secs(25)),
    ] {
        let start = Instant::now();
        drop(rank);
        let took = start.elapsed();
        if took > limit {
            return Err(format!(
                "{}: dropping {name} took {:.2}s (limit {limit:?})",
                algo.name(),
                took.as_secs_f64()
            ));
        }
        eprintln!(
            "   ok: {}: dropping {name} took {:.2}s",
            algo.name(),
            took.as_secs_f64()
        );
    }
    Ok(())
}

#[test]
#[ignore = "needs 2 CUDA GPUs: run scripts/gpu-run.sh on a GPU machine"]
fn a_rank_that_stops_calling_times_out_its_peer_and_drops_bounded() {
    use std::time::Duration;
    let _ctx = gpu();
    let count = device_count();
    if count < 2 {
        skipped(
            "a_rank_that_stops_calling_times_out_its_peer_and_drops_bounded",
            2,
            count,
        );
        return;
    }
    let options = Options {
        timeout: Duration::from_millis(500),
        // The bound on NCCL work whose peer never calls.
        drain_timeout: Duration::from_secs(2),
        ..measuring(None, true)
    };
    let mut suite = Suite::new("devices world with a silent rank");
    // A custom kernel: the device-side wait ends after `timeout`.
    suite.record(
        "custom kernel (one_shot_pull)",
        one_rank_stops_calling(Algo::OneShotPull, &options, Duration::from_millis(1500)),
    );
    // NCCL: the drain bound ends the wait.
    suite.record(
        "NCCL",
        one_rank_stops_calling(Algo::Nccl, &options, Duration::from_secs(3)),
    );
    suite.finish();
}
