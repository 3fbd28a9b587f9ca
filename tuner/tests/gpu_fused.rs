//! The fused all-reduce + add + RMSNorm (`RankComm::all_reduce_add_rmsnorm`)
//! on loopback worlds of one GPU: every fused kernel and the unfused path,
//! forced, against the f64 host reference (`AddRmsNormCase`: NaN, ±inf,
//! subnormals and signed zeros in inputs, residual and weight), both outputs
//! (the normalised rows and the new residual) poisoned or holding the old
//! residual beforehand, every rank's bits identical; in place over the input;
//! in graphs; its argument checks; a mismatched hidden size; and a stalled
//! peer, after which no word of either output looks like a result.

mod gpu_common;

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaSlice};
use gpu_common::{NEEDS_GPU, SendGraph, Suite, gpu};
use half::{bf16, f16};
use kernels::{Element, Error, Options, RankComm, Select, World};
use policy::{Algo, Collective, DType, Mode};
use tuner::harness::concurrent::for_each_rank;
use tuner::harness::timing::{TimingSpec, poison, unfused_all_reduce, validate};
use tuner::harness::validation::{AddRmsNormCase, SumPath, check_identical};
use tuner::harness::world::measuring;

const FUSED: Collective = Collective::AllReduceAddRmsNorm;
/// 72: rows of 9 packs of bf16 (18 of f32), so that the two-shot kernel's
/// last shards are short or empty (1 and 7 tokens over 4 or 8 ranks: 9 packs
/// over 8 ranks leave ranks 5 to 7 without a shard), which the others, whole
/// multiples of 8 packs, never are.
const HIDDEN: [usize; 4] = [64, 72, 4096, 16384];
const TOKENS: [usize; 3] = [1, 7, 64];

fn loopback(ctx: &Arc<CudaContext>, world: usize) -> Vec<RankComm> {
    World::loopback(ctx.clone(), world, measuring(None, true))
        .unwrap_or_else(|e| panic!("building a loopback world of {world}: {e}"))
}

/// Where a call writes its normalised rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    OutOfPlace,
    /// Over the input (`all_reduce_add_rmsnorm_in_place`).
    InPlace,
}

/// One rank's tensors of a call.
struct Tensors<T> {
    input: CudaSlice<T>,
    residual: CudaSlice<T>,
    weight: CudaSlice<T>,
    output: CudaSlice<T>,
    graph: Option<SendGraph>,
}

fn drv(e: cudarc::driver::DriverError) -> String {
    format!("{e:?}")
}

/// Rank `r`'s tensors of `case`, its output poisoned.
fn stage<T: Element>(
    rank: &RankComm,
    case: &AddRmsNormCase<T>,
    r: usize,
) -> Result<Tensors<T>, String> {
    let stream = rank.stream();
    let input = stream.clone_htod(&case.inputs[r]).map_err(drv)?;
    let residual = stream.clone_htod(&case.residual).map_err(drv)?;
    let weight = stream.clone_htod(&case.weight).map_err(drv)?;
    let mut output = stream
        .alloc_zeros::<T>(case.residual.len().max(1))
        .map_err(drv)?;
    poison(stream, &mut output).map_err(|e| e.to_string())?;
    stream.synchronize().map_err(drv)?;
    Ok(Tensors {
        input,
        residual,
        weight,
        output,
        graph: None,
    })
}

/// Loads `case` into tensors staged before (a graph's replay reads them):
/// its inputs, residual and weight (every case has a weight of its own).
fn restage<T: Element>(
    rank: &RankComm,
    case: &AddRmsNormCase<T>,
    t: &mut Tensors<T>,
) -> Result<(), String> {
    let stream = rank.stream();
    stream
        .memcpy_htod(&case.inputs[rank.rank()], &mut t.input)
        .map_err(drv)?;
    stream
        .memcpy_htod(&case.residual, &mut t.residual)
        .map_err(drv)?;
    stream
        .memcpy_htod(&case.weight, &mut t.weight)
        .map_err(drv)?;
    poison(stream, &mut t.output).map_err(|e| e.to_string())?;
    stream.synchronize().map_err(drv)
}

fn issue<T: Element>(
    rank: &RankComm,
    t: &mut Tensors<T>,
    eps: f32,
    placement: Placement,
    how: Select,
) -> kernels::Result<Algo> {
    let len = t.residual.len();
    let mut residual = t.residual.as_view_mut();
    let weight = t.weight.as_view();
    match placement {
        Placement::OutOfPlace => rank.all_reduce_add_rmsnorm(
            &t.input.as_view(),
            &mut residual,
            &weight,
            eps,
            &mut t.output.slice_mut(..len),
            how,
        ),
        Placement::InPlace => rank.all_reduce_add_rmsnorm_in_place(
            &mut t.input.as_view_mut(),
            &mut residual,
            &weight,
            eps,
            how,
        ),
    }
}

/// What a call left: the normalised rows and the new residual.
fn download<T: Element>(
    rank: &RankComm,
    t: &Tensors<T>,
    placement: Placement,
) -> Result<(Vec<T>, Vec<T>), String> {
    let stream = rank.stream();
    let len = t.residual.len();
    let rows = match placement {
        Placement::OutOfPlace => stream.clone_dtoh(&t.output.slice(..len)),
        Placement::InPlace => stream.clone_dtoh(&t.input),
    }
    .map_err(drv)?;
    let residual = stream.clone_dtoh(&t.residual).map_err(drv)?;
    Ok((rows, residual))
}

/// What a forced `algo` runs for `bytes`: itself, or the unfused path where
/// it declines.
fn expected(rank: &RankComm, algo: Algo, bytes: u64) -> Algo {
    if rank.would_decline(FUSED, algo, bytes).is_some() {
        FUSED.fallback()
    } else {
        algo
    }
}

/// Every rank ran `expect` and holds the same bits, which the f64 reference
/// accepts. `mode`: where the unfused path's all-reduce was picked.
fn judge<T: Element>(
    ranks: &[RankComm],
    case: &AddRmsNormCase<T>,
    expect: Algo,
    mode: Mode,
    results: &[(Algo, Vec<T>, Vec<T>)],
) -> Result<Algo, String> {
    if let Some((r, (ran, _, _))) = results
        .iter()
        .enumerate()
        .find(|(_, (a, _, _))| *a != expect)
    {
        return Err(format!(
            "rank {r} ran {}, not {}",
            ran.name(),
            expect.name()
        ));
    }
    let rows: Vec<&[T]> = results.iter().map(|(_, o, _)| o.as_slice()).collect();
    let residuals: Vec<&[T]> = results.iter().map(|(_, _, r)| r.as_slice()).collect();
    check_identical(&rows).map_err(|e| format!("normalised rows: {e}"))?;
    check_identical(&residuals).map_err(|e| format!("new residuals: {e}"))?;
    let bytes = (case.residual.len() * std::mem::size_of::<T>()) as u64;
    let inner = unfused_all_reduce(&ranks[0], T::DTYPE, mode, bytes);
    case.check(
        SumPath::of(expect, inner, ranks.len()),
        0,
        residuals[0],
        rows[0],
    )?;
    Ok(expect)
}

/// One eager call of `algo` on every rank, three back to back (each on its
/// own tensors, so that they queue while the one before runs), each checked.
fn eager<T: Element>(
    ranks: &mut [RankComm],
    algo: Algo,
    hidden: usize,
    tokens: usize,
    placement: Placement,
    seed: u64,
) -> Result<Algo, String> {
    let world = ranks.len();
    let cases: Vec<AddRmsNormCase<T>> = (0..3)
        .map(|k| AddRmsNormCase::random(world, tokens, hidden, seed + k))
        .collect();
    let bytes = (tokens * hidden * std::mem::size_of::<T>()) as u64;
    let expect = expected(&ranks[0], algo, bytes);
    let staged = ranks
        .iter()
        .enumerate()
        .map(|(r, rank)| cases.iter().map(|c| stage(rank, c, r)).collect())
        .collect::<Result<Vec<Vec<_>>, String>>()?;
    let eps = cases[0].eps;
    let outcomes = for_each_rank(ranks, staged, |rank, mut calls, _| {
        let mut ran = Vec::new();
        for t in &mut calls {
            ran.push(issue(rank, t, eps, placement, Select::Force(algo))?);
        }
        rank.check()?;
        calls
            .iter()
            .zip(ran)
            .map(|(t, a)| {
                let (rows, residual) = download(rank, t, placement).map_err(Error::Verification)?;
                Ok((a, rows, residual))
            })
            .collect::<kernels::Result<Vec<_>>>()
    })
    .map_err(|e| e.to_string())?;
    for (k, case) in cases.iter().enumerate() {
        let results: Vec<_> = outcomes.iter().map(|calls| calls[k].clone()).collect();
        judge(ranks, case, expect, Mode::Eager, &results).map_err(|e| format!("call {k}: {e}"))?;
    }
    Ok(expect)
}

/// `algo` captured into a graph on every rank, replayed once and checked;
/// then the inputs, residual and weight reloaded with other data, the output
/// poisoned again, replayed once more and checked (a replay that used stale
/// pointers would show the first data).
fn graph<T: Element>(
    ranks: &mut [RankComm],
    algo: Algo,
    hidden: usize,
    tokens: usize,
    seed: u64,
) -> Result<Algo, String> {
    let world = ranks.len();
    let first = AddRmsNormCase::<T>::random(world, tokens, hidden, seed);
    let second = AddRmsNormCase::<T>::random(world, tokens, hidden, seed + 1);
    let bytes = (tokens * hidden * std::mem::size_of::<T>()) as u64;
    let expect = expected(&ranks[0], algo, bytes);
    let staged = ranks
        .iter()
        .enumerate()
        .map(|(r, rank)| stage(rank, &first, r))
        .collect::<Result<Vec<_>, String>>()?;
    let eps = first.eps;
    let replay = |rank: &mut RankComm, t: &Tensors<T>| -> kernels::Result<()> {
        let graph = &t.graph.as_ref().expect("captured").0;
        graph.launch()?;
        rank.check()
    };
    let outcomes = for_each_rank(ranks, staged, |rank, mut t, _| {
        let mut ran = None;
        let captured = rank.capture(|r| {
            ran = Some(issue(
                r,
                &mut t,
                eps,
                Placement::OutOfPlace,
                Select::Force(algo),
            )?);
            Ok(())
        })?;
        let ran = ran.expect("the capture issued the call");
        t.graph = Some(SendGraph(captured));
        replay(rank, &t)?;
        let (rows, residual) =
            download(rank, &t, Placement::OutOfPlace).map_err(Error::Verification)?;
        Ok((t, (ran, rows, residual)))
    })
    .map_err(|e| e.to_string())?;
    let (staged, results): (Vec<_>, Vec<_>) = outcomes.into_iter().unzip();
    judge(ranks, &first, expect, Mode::Graph, &results)
        .map_err(|e| format!("first replay: {e}"))?;
    let results = for_each_rank(ranks, staged, |rank, mut t, _| {
        restage(rank, &second, &mut t).map_err(Error::Verification)?;
        replay(rank, &t)?;
        let (rows, residual) =
            download(rank, &t, Placement::OutOfPlace).map_err(Error::Verification)?;
        Ok((expect, rows, residual))
    })
    .map_err(|e| e.to_string())?;
    judge(ranks, &second, expect, Mode::Graph, &results)
        .map_err(|e| format!("replay with new data: {e}"))
}

/// Every fused algorithm and the unfused path, forced, in a loopback world
/// of `world`: bf16, f16 and f32, hidden 64, 72, 4096 and 16384, 1, 7 and 64
/// tokens, eager; graphs at hidden 4096.
fn every_algorithm(world: usize) {
    let ctx = gpu();
    let mut suite = Suite::new(&format!(
        "fused all-reduce + add + RMSNorm, world of {world}"
    ));
    let mut ranks = loopback(&ctx, world);
    let mut seed = 0x0f0_5ed;
    for &algo in FUSED.algos() {
        for dtype in DType::ALL {
            for hidden in HIDDEN {
                for tokens in TOKENS {
                    seed += 10;
                    let label = format!(
                        "world {world} {} {} hidden {hidden} x {tokens} tokens",
                        algo.name(),
                        dtype.name()
                    );
                    let eager = match dtype {
                        DType::Bf16 => eager::<bf16>(
                            &mut ranks,
                            algo,
                            hidden,
                            tokens,
                            Placement::OutOfPlace,
                            seed,
                        ),
                        DType::F16 => eager::<f16>(
                            &mut ranks,
                            algo,
                            hidden,
                            tokens,
                            Placement::OutOfPlace,
                            seed,
                        ),
                        DType::F32 => eager::<f32>(
                            &mut ranks,
                            algo,
                            hidden,
                            tokens,
                            Placement::OutOfPlace,
                            seed,
                        ),
                    };
                    suite.record(&format!("{label} eager"), eager);
                    if hidden == 4096 {
                        let captured = match dtype {
                            DType::Bf16 => {
                                graph::<bf16>(&mut ranks, algo, hidden, tokens, seed + 5)
                            }
                            DType::F16 => graph::<f16>(&mut ranks, algo, hidden, tokens, seed + 5),
                            DType::F32 => graph::<f32>(&mut ranks, algo, hidden, tokens, seed + 5),
                        };
                        suite.record(&format!("{label} graph"), captured);
                    }
                    if ranks.iter().any(|r| r.health().is_err()) {
                        ranks = loopback(&ctx, world);
                    }
                }
            }
        }
        suite.note(&format!("{} done", algo.name()));
    }
    suite.finish();
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_world_of_one_is_add_rmsnorm() {
    every_algorithm(1);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_loopback_world_2_every_algorithm() {
    every_algorithm(2);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_loopback_world_4_every_algorithm() {
    every_algorithm(4);
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_loopback_world_8_every_algorithm() {
    every_algorithm(8);
}

/// Each fused kernel at the most whole rows its capacity takes in a world
/// of 2 (it runs) and at one row more (it declines, and the unfused path
/// runs), bf16 at hidden 4096 and f32 at hidden 16384, both checked.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_capacity_edges() {
    let ctx = gpu();
    let mut suite = Suite::new("fused kernels at their capacity");
    let mut ranks = loopback(&ctx, 2);
    for algo in [Algo::OneShotPush, Algo::TwoShotPush] {
        let cap = ranks[0].capacity(FUSED, algo).max_bytes;
        for (dtype, hidden) in [(DType::Bf16, 4096), (DType::F32, 16384)] {
            let row = (hidden as u64) * dtype.size_bytes();
            let tokens = (cap / row) as usize;
            for (tokens, expect) in [(tokens, algo), (tokens + 1, Algo::Unfused)] {
                let label = format!(
                    "{} {} hidden {hidden} x {tokens} tokens (capacity {cap} bytes)",
                    algo.name(),
                    dtype.name()
                );
                let outcome = match dtype {
                    DType::F32 => {
                        eager::<f32>(&mut ranks, algo, hidden, tokens, Placement::OutOfPlace, 3)
                    }
                    _ => eager::<bf16>(&mut ranks, algo, hidden, tokens, Placement::OutOfPlace, 3),
                }
                .and_then(|ran| {
                    if ran == expect {
                        Ok(ran)
                    } else {
                        Err(format!("{} ran, not {}", ran.name(), expect.name()))
                    }
                });
                suite.record(&label, outcome);
                if ranks.iter().any(|r| r.health().is_err()) {
                    ranks = loopback(&ctx, 2);
                }
            }
        }
    }
    suite.finish();
}

/// In place over the input: every algorithm, worlds of 2 and 4, every dtype,
/// hidden 4096, 7 tokens; the rows end where the partial sums were.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_in_place_over_the_input() {
    let ctx = gpu();
    let mut suite = Suite::new("fused all-reduce + add + RMSNorm in place");
    for world in [2, 4] {
        let mut ranks = loopback(&ctx, world);
        for &algo in FUSED.algos() {
            for dtype in DType::ALL {
                let label = format!("world {world} {} {} in place", algo.name(), dtype.name());
                let outcome = match dtype {
                    DType::Bf16 => eager::<bf16>(&mut ranks, algo, 4096, 7, Placement::InPlace, 77),
                    DType::F16 => eager::<f16>(&mut ranks, algo, 4096, 7, Placement::InPlace, 78),
                    DType::F32 => eager::<f32>(&mut ranks, algo, 4096, 7, Placement::InPlace, 79),
                };
                suite.record(&label, outcome);
                if ranks.iter().any(|r| r.health().is_err()) {
                    ranks = loopback(&ctx, world);
                }
            }
        }
    }
    suite.finish();
}

/// Shapes that do not fit are `Error::Mismatch` before anything runs (a
/// hidden size off the multiple of 8 or out of 64..=16384, lengths that
/// differ or are not whole rows, an epsilon that is not finite and ≥ 0),
/// and leave the rank healthy: a right call on every rank runs after them.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_bad_arguments_are_errors_before_anything_runs() {
    let ctx = gpu();
    let mut suite = Suite::new("fused call argument checks");
    let mut ranks = loopback(&ctx, 2);
    let stream = ranks[0].stream().clone();
    let tensor = |len: usize| stream.alloc_zeros::<bf16>(len).expect("alloc");
    // (what, input, residual, weight, output, eps)
    let bad: [(&str, usize, usize, usize, usize, f32); 8] = [
        (
            "hidden not a multiple of 8",
            2 * 100,
            2 * 100,
            100,
            2 * 100,
            1e-5,
        ),
        ("hidden below 64", 2 * 56, 2 * 56, 56, 2 * 56, 1e-5),
        ("hidden above 16384", 16392, 16392, 16392, 16392, 1e-5),
        (
            "residual of another length",
            2 * 4096,
            4096,
            4096,
            2 * 4096,
            1e-5,
        ),
        (
            "output of another length",
            2 * 4096,
            2 * 4096,
            4096,
            4096,
            1e-5,
        ),
        ("not whole rows", 4096 + 8, 4096 + 8, 4096, 4096 + 8, 1e-5),
        ("eps NaN", 4096, 4096, 4096, 4096, f32::NAN),
        ("eps negative", 4096, 4096, 4096, 4096, -1e-6),
    ];
    for (what, input, residual, weight, output, eps) in bad {
        let (input, mut residual, weight, mut output) = (
            tensor(input),
            tensor(residual),
            tensor(weight),
            tensor(output),
        );
        let refused = ranks[0].all_reduce_add_rmsnorm(
            &input.as_view(),
            &mut residual.as_view_mut(),
            &weight.as_view(),
            eps,
            &mut output.as_view_mut(),
            Select::Auto,
        );
        suite.record(
            what,
            match refused {
                Err(Error::Mismatch(message)) => {
                    eprintln!("   {what}: {message}");
                    ranks[0]
                        .health()
                        .map_err(|e| format!("the rank broke: {e}"))
                }
                other => Err(format!("expected Error::Mismatch, got {other:?}")),
            },
        );
    }
    stream.synchronize().expect("synchronize");
    suite.record(
        "a right call after the refused ones",
        eager::<bf16>(
            &mut ranks,
            Algo::OneShotPush,
            4096,
            2,
            Placement::OutOfPlace,
            5,
        ),
    );
    suite.finish();
}

/// Rank 1 calls 2 tokens of hidden 2048 where the others call 1 of 4096
/// (the same bytes): a fused kernel's handshake makes it an
/// `Error::Mismatch` on every rank, and no rank normalises rows of another
/// shape.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_ranks_with_different_rows_are_a_mismatch() {
    let ctx = gpu();
    let mut suite = Suite::new("fused calls of different rows");
    for algo in [Algo::OneShotPush, Algo::TwoShotPush] {
        let options = Options {
            timeout: Duration::from_millis(200),
            log_declines: false,
            ..measuring(None, true)
        };
        let mut ranks = World::loopback(ctx.clone(), 2, options).expect("world");
        let wide = AddRmsNormCase::<bf16>::random(2, 1, 4096, 9);
        let narrow = AddRmsNormCase::<bf16>::random(2, 2, 2048, 9);
        let staged = ranks
            .iter()
            .enumerate()
            .map(|(r, rank)| stage(rank, if r == 1 { &narrow } else { &wide }, r))
            .collect::<Result<Vec<_>, String>>()
            .expect("staging");
        let outcomes = for_each_rank(&mut ranks, staged, |rank, mut t, _| {
            let ran = issue(
                rank,
                &mut t,
                1e-5,
                Placement::OutOfPlace,
                Select::Force(algo),
            );
            Ok((ran, rank.check()))
        })
        .expect("the ranks' threads");
        let outcome = outcomes
            .iter()
            .enumerate()
            .try_for_each(|(r, (ran, checked))| match (ran, checked) {
                (Err(Error::Mismatch(_)), _) | (Ok(_), Err(Error::Mismatch(_))) => Ok(()),
                other => Err(format!("rank {r}: expected Error::Mismatch, got {other:?}")),
            });
        suite.record(
            &format!("{} hidden 4096 against 2048", algo.name()),
            outcome,
        );
    }
    suite.finish();
}

/// A call whose peer never comes: every other rank's call is issued (`Ok` of
/// the algorithm), its `check()` fails, and every word of both its outputs,
/// the normalised rows (poisoned before) and the residual (the old residual
/// before), is marked (all bits set): none keeps what it held, none looks
/// like a result. For every fused kernel and the unfused path, worlds of 2
/// and 4, 8 tokens of hidden 4096 (several blocks of rows), out of place and
/// in place (the rows over the input, which the kernels read while others
/// mark).
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_stalled_peer_marks_both_outputs() {
    let ctx = gpu();
    let mut suite = Suite::new("a failed fused call marks both outputs");
    for world in [2, 4] {
        for &algo in FUSED.algos() {
            for placement in [Placement::OutOfPlace, Placement::InPlace] {
                suite.record(
                    &format!(
                        "world {world} {} {placement:?} with the last rank absent",
                        algo.name()
                    ),
                    stalled(&ctx, world, algo, placement),
                );
            }
        }
    }
    suite.finish();
}

fn stalled(
    ctx: &Arc<CudaContext>,
    world: usize,
    algo: Algo,
    placement: Placement,
) -> Result<(), String> {
    let options = Options {
        timeout: Duration::from_millis(100),
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = World::loopback(ctx.clone(), world, options).map_err(|e| e.to_string())?;
    let case = AddRmsNormCase::<bf16>::random(world, 8, 4096, 31);
    let staged = ranks
        .iter()
        .enumerate()
        .map(|(r, rank)| stage(rank, &case, r))
        .collect::<Result<Vec<_>, String>>()?;
    let absent = world - 1;
    let outcomes = for_each_rank(&mut ranks, staged, |rank, mut t, _| {
        if rank.rank() == absent {
            return Ok(None);
        }
        let ran = issue(rank, &mut t, case.eps, placement, Select::Force(algo));
        let checked = rank.check();
        rank.stream()
            .synchronize()
            .map_err(|e| Error::Verification(format!("{e:?}")))?;
        let left = download(rank, &t, placement).map_err(Error::Verification)?;
        Ok(Some((ran, checked, left)))
    })
    .map_err(|e| e.to_string())?;
    for (r, outcome) in outcomes.into_iter().enumerate() {
        let Some((ran, checked, (rows, residual))) = outcome else {
            continue;
        };
        match ran {
            Ok(a) if a == algo => {}
            other => {
                return Err(format!(
                    "rank {r}: the call gave {other:?}, not {} issued",
                    algo.name()
                ));
            }
        }
        if checked.is_ok() {
            return Err(format!(
                "rank {r}: check() is Ok although rank {absent} never called"
            ));
        }
        for (what, words) in [("normalised rows", &rows), ("residual", &residual)] {
            let unmarked = words.iter().filter(|v| v.to_bits() != 0xffff).count();
            if unmarked > 0 {
                let kept = words.iter().filter(|v| v.to_bits() == 0x5a5a).count();
                return Err(format!(
                    "rank {r}: {unmarked} of {} words of the {what} not marked ({kept} hold \
                     the poison pattern)",
                    words.len()
                ));
            }
        }
    }
    Ok(())
}

/// The tuner's harness on the fused collective: `validate` (the sweep's and
/// bench's check) passes for every algorithm, and `measure` gives plausible
/// samples in both modes, in a loopback world of 2.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn fused_timing_measure_and_validate() {
    let ctx = gpu();
    let mut suite = Suite::new("the harness on the fused collective");
    let mut ranks = loopback(&ctx, 2);
    let bytes = 8 * 4096 * 2;
    for &algo in FUSED.algos() {
        suite.record(
            &format!("validate {}", algo.name()),
            validate(&mut ranks, FUSED, DType::Bf16, algo, bytes, 4096, 11)
                .map_err(|e| e.to_string()),
        );
        for mode in Mode::ALL {
            let spec = TimingSpec {
                collective: FUSED,
                dtype: DType::Bf16,
                algo,
                bytes,
                mode,
                calls_per_sample: 10,
                samples: 5,
                warmup: 3,
                hidden: 4096,
                unfused_via: None,
            };
            let timed = gpu_common::measure_plausibly(&mut ranks, &spec);
            suite.record(&format!("measure {} {}", algo.name(), mode.name()), timed);
        }
    }
    suite.finish();
}

/// Every GPU test here is ignored for the script that runs them, which runs
/// this suite.
#[test]
fn every_gpu_test_is_ignored_for_the_script_that_runs_it() {
    let script = NEEDS_GPU
        .split_whitespace()
        .find(|word| word.starts_with("scripts/") && word.ends_with(".sh"))
        .unwrap_or_else(|| panic!("NEEDS_GPU names no script: {NEEDS_GPU}"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(script);
    let path = if path.exists() {
        path
    } else {
        std::path::PathBuf::from(script)
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{script}: {e}"));
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("for name in ") && l.contains(" gpu_fused")),
        "{script} does not run gpu_fused"
    );
    let source = include_str!("gpu_fused.rs");
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
    assert!(gpu_tests >= 8, "{gpu_tests} GPU tests found");
}
