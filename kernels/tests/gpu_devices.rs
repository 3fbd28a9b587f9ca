//! GPU tests across real GPUs (one rank per GPU, single process). With fewer
//! than two GPUs they print why and pass; without any GPU they fail.

mod common;

use std::sync::Arc;

use common::{Case, Placement, Suite, device_count, eager, gpu, graph};
use cudarc::driver::{CudaContext, CudaSlice};
use half::bf16;
use kernels::concurrent::for_each_rank;
use kernels::validation::random_inputs;
use kernels::{Algo, Collective, Element, Fallback, Mode, Options, RankComm, Select, World};

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
    World::devices(streams, Options::default())
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
    let out_len = match collective {
        Collective::AllReduce => per_rank,
        Collective::AllGather => per_rank * world,
    };
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
    for (r, (custom, nccl)) in outputs.iter().enumerate() {
        for (i, (a, b)) in custom.iter().zip(nccl).enumerate() {
            let (a, b) = (a.to_f64(), b.to_f64());
            let same = (a.is_nan() && b.is_nan())
                || a == b
                || (a - b).abs() <= 1e-2 * a.abs().max(b.abs()).max(1e-3);
            if !same {
                return Err(format!(
                    "rank {r} [{i}]: {} gives {a:e}, NCCL {b:e}",
                    algo.name()
                ));
            }
        }
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
    for collective in Collective::ALL {
        let algos = collective.algos();
        for &algo in algos {
            for bytes in SWEEP_BYTES {
                let per_rank = match collective {
                    Collective::AllReduce => bytes / 2,
                    Collective::AllGather => bytes / 2 / count,
                };
                if per_rank == 0 || (per_rank * 2) % 16 != 0 {
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
    for collective in Collective::ALL {
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
        match World::devices(twice, Options::default()) {
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
        eprintln!("SKIPPED: {count} GPU visible; the multi-GPU suite needs at least 2");
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
