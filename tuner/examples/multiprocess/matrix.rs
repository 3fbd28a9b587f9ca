//! Every algorithm x dtype x eager/graph x collective on a few sizes, each
//! result checked against the host reference here and printed as a `CASE` line
//! with its hash, so the launcher can require identical bits on every rank.
//!
//! Sizes per rank: one 16-byte pack, an odd multiple of 16 bytes, 64 KiB, and
//! three elements (not a multiple of 16 bytes: custom kernels decline and the
//! fallback runs, which must be right too).

use half::{bf16, f16};
use kernels::{Element, Error, RankComm, Select};
use policy::{Algo, Collective, DType, Mode};
use tuner::harness::timing::poison;
use tuner::harness::validation::random_inputs;

use crate::worker::{Failure, check, hash_of, issue, print_case};
use crate::{Cli, code};

const BYTES_PER_RANK: [usize; 3] = [16, 4112, 65_536];
const ODD_ELEMENTS: usize = 3;

/// Runs the matrix; the exit code says whether every case was right here
/// (identity across ranks is the launcher's check).
pub fn run(comm: &mut RankComm, cli: &Cli) -> Result<u8, Failure> {
    let mut failed = 0;
    let mut cases = 0;
    for collective in [Collective::AllReduce, Collective::AllGather] {
        for &algo in collective.algos() {
            for dtype in DType::ALL {
                // Issued eagerly, or captured into a graph and replayed.
                for mode in [Mode::Eager, Mode::Graph] {
                    let lengths = BYTES_PER_RANK
                        .iter()
                        .map(|b| b / dtype.size_bytes() as usize)
                        .chain([ODD_ELEMENTS]);
                    for (k, n) in lengths.enumerate() {
                        let id = format!(
                            "{}/{}/{}/{}/{}B",
                            collective.name(),
                            algo.name(),
                            dtype.name(),
                            mode.name(),
                            n * dtype.size_bytes() as usize
                        );
                        let seed = (cases * 1000 + k) as u64;
                        let case = Case {
                            collective,
                            how: Select::Force(algo),
                            n,
                            mode,
                            seed,
                            replays: cli.replays,
                        };
                        let outcome = match dtype {
                            DType::Bf16 => run_case::<bf16>(comm, &case),
                            DType::F16 => run_case::<f16>(comm, &case),
                            DType::F32 => run_case::<f32>(comm, &case),
                        };
                        cases += 1;
                        match outcome {
                            Ok((ran, hash)) => print_case(comm, &id, ran, hash),
                            // A device timeout leaves the world out of step: stop.
                            Err(CaseError::Fatal(e)) => return Err(Failure::at(id, e)),
                            Err(CaseError::Wrong(why)) => {
                                failed += 1;
                                println!("CASE {id} FAIL {why}");
                            }
                        }
                    }
                }
            }
        }
    }
    println!(
        "SUMMARY rank={} world={} cases={cases} wrong={failed}",
        comm.rank(),
        comm.world_size()
    );
    Ok(if failed == 0 { code::OK } else { code::WRONG })
}

struct Case {
    collective: Collective,
    how: Select,
    /// Elements each rank contributes.
    n: usize,
    mode: Mode,
    seed: u64,
    replays: usize,
}

enum CaseError {
    /// The world cannot go on (a timeout, a driver error).
    Fatal(Error),
    /// This rank's result is wrong; the world is still in step.
    Wrong(String),
}

impl From<Error> for CaseError {
    fn from(e: Error) -> CaseError {
        CaseError::Fatal(e)
    }
}

impl From<cudarc::driver::DriverError> for CaseError {
    fn from(e: cudarc::driver::DriverError) -> CaseError {
        CaseError::Fatal(Error::Unsupported(format!("CUDA driver: {e:?}")))
    }
}

fn verify<T: Element>(
    comm: &RankComm,
    case: &Case,
    inputs: &[Vec<T>],
    result: &[T],
    ran: Algo,
) -> Result<(), CaseError> {
    check(comm, case.collective, ran, inputs, result)
        .map_err(|e| CaseError::Wrong(format!("{} ran: {e}", ran.name())))
}

/// One case on this rank: the result's hash (both runs, for a graph).
fn run_case<T: Element>(comm: &mut RankComm, case: &Case) -> Result<(Algo, u64), CaseError> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let stream = comm.stream().clone();
    let out_len = case.collective.output_size(world as u64, case.n as u64) as usize;
    let inputs = random_inputs::<T>(world, case.n, case.seed);
    let mut input = stream.clone_htod(&inputs[rank])?;
    let mut output = stream.alloc_zeros::<T>(out_len)?;
    poison(&stream, &mut output)?;
    if case.mode == Mode::Eager {
        let ran = issue(comm, case.collective, &input, &mut output, case.how)?;
        comm.check()?;
        let result = stream.clone_dtoh(&output)?;
        verify(comm, case, &inputs, &result, ran)?;
        return Ok((ran, hash_of(&result)));
    }

    // Captured once, replayed: the kernels copy the inputs into registered
    // buffers, so replays need no host work and see new data in place.
    let mut ran = None;
    let graph = comm.capture(|c| {
        ran = Some(issue(c, case.collective, &input, &mut output, case.how)?);
        Ok(())
    })?;
    let ran = ran.expect("the capture issued the call");
    for _ in 0..case.replays.max(1) {
        graph.launch()?;
    }
    comm.check()?;
    let first = stream.clone_dtoh(&output)?;
    verify(comm, case, &inputs, &first, ran)?;

    let second_inputs = random_inputs::<T>(world, case.n, case.seed.wrapping_add(1));
    stream.memcpy_htod(&second_inputs[rank], &mut input)?;
    poison(&stream, &mut output)?;
    graph.launch()?;
    comm.check()?;
    let second = stream.clone_dtoh(&output)?;
    verify(comm, case, &second_inputs, &second, ran).map_err(|e| match e {
        CaseError::Wrong(why) => CaseError::Wrong(format!("replay on new inputs: {why}")),
        fatal => fatal,
    })?;
    Ok((ran, hash_of(&first).rotate_left(1) ^ hash_of(&second)))
}
