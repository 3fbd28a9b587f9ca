//! One rank: form the world, run the decode loop (or the matrix), report.
//!
//! Lines on stdout that the launcher reads start with a tag: `JOINED`, `LEFT`,
//! `CASE`, `SUMMARY`, `ERROR`. Everything else is for people.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cudarc::driver::CudaSlice;
use half::{bf16, f16};
use kernels::raw::fnv1a;
use kernels::{
    Element, Error, Fallback, FileRendezvous, Join, NcclId, Options, ProcessSpec, RankComm,
    Rendezvous, Select, World,
};
use policy::{Algo, Collective, DType};
use tuner::harness::timing::poison;
use tuner::harness::validation::{check_result, le_bytes, random_inputs};

use crate::{Cli, KillMode, Mismatch, code, env, watch};

/// Why a worker stops, and the exit code that says so.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e {
            Error::Timeout { .. } => code::TIMEOUT,
            Error::Mismatch(_) => code::MISMATCH,
            _ => code::ERROR,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

impl From<cudarc::driver::DriverError> for Failure {
    fn from(e: cudarc::driver::DriverError) -> Failure {
        Failure::error(format!("CUDA driver: {e:?}"))
    }
}

impl Failure {
    /// A failure that is neither a timeout nor a mismatch.
    pub fn error(message: impl Into<String>) -> Failure {
        Failure {
            code: code::ERROR,
            message: message.into(),
        }
    }

    /// `e`, with where it happened (`call 3`) before its message.
    pub fn at(place: impl std::fmt::Display, e: Error) -> Failure {
        Failure {
            message: format!("{place}: {e}"),
            ..Failure::from(e)
        }
    }
}

/// Where this worker sits, from the launcher's environment.
pub struct Place {
    pub rank: usize,
    pub world: usize,
    pub device: usize,
    pub dir: PathBuf,
    pub join: String,
}

fn place() -> Result<Place, Failure> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| Failure::error(format!("the launcher did not set {name}")))
    };
    let number = |name: &str| {
        var(name)?
            .parse::<usize>()
            .map_err(|e| Failure::error(format!("{name}: {e}")))
    };
    Ok(Place {
        rank: number(env::RANK)?,
        world: number(env::WORLD_SIZE)?,
        device: number(env::DEVICE)?,
        dir: PathBuf::from(var(env::DIR)?),
        join: var(env::JOIN)?,
    })
}

pub fn run(cli: &Cli) -> u8 {
    // The library's notes (how the world formed, declines) on standard
    // error, which the launcher passes through.
    if let Err(why) = tuner::logging::init() {
        eprintln!("multiprocess: {why}");
    }
    let place = match place() {
        Ok(place) => place,
        Err(f) => {
            println!("ERROR rank=? kind=error {}", f.message);
            return f.code;
        }
    };
    let options = options_of(cli);
    // A watched step waits at most for a drain (`drain_timeout`) behind kernels
    // that each give up after `timeout`; anything far past that has no bound.
    let stuck = options.drain_timeout + options.timeout * 2 + Duration::from_secs(5);
    watch::init(place.rank, stuck, Duration::from_millis(cli.exit_bound_ms));
    watch::idle("forming the world");
    let mut comm = match form(cli, &place) {
        Ok((comm, joined)) => {
            println!(
                "JOINED rank={} world={} gpu={} link={:?} fallback={:?} blocks={} window={} \
                 join_ms={} pid={}",
                place.rank,
                place.world,
                place.device,
                comm.link(),
                comm.fallback_kind(),
                comm.launch_shape().max_blocks,
                comm.window_bytes(),
                joined.as_millis(),
                std::process::id()
            );
            comm
        }
        Err(f) => {
            watch::report(&f);
            watch::note("exiting");
            watch::idle("process exit");
            return f.code;
        }
    };
    let outcome = if cli.matrix {
        watch::idle("the matrix");
        crate::matrix::run(&mut comm, cli)
    } else {
        // The soak, or the decode loop, of `--dtype`'s elements.
        fn typed<T: Element>(comm: &mut RankComm, cli: &Cli) -> Result<u8, Failure> {
            if cli.soak {
                crate::soak::run::<T>(comm, cli)
            } else {
                decode_loop::<T>(comm, cli)
            }
        }
        match dtype_of(cli) {
            Ok(DType::Bf16) => typed::<bf16>(&mut comm, cli),
            Ok(DType::F16) => typed::<f16>(&mut comm, cli),
            Ok(DType::F32) => typed::<f32>(&mut comm, cli),
            Err(f) => Err(f),
        }
    };
    // The error is reported before anything is dropped (the soak and the
    // decode loop report where they see it), so that a teardown that takes
    // long cannot hide it, and the exit watchdog bounds what follows.
    let code = match outcome {
        Ok(code) => code,
        Err(f) => {
            watch::report(&f);
            f.code
        }
    };
    let failed = watch::reported();
    if failed {
        watch::note("dropping the communicator");
    }
    // A healthy drop is bounded by the library (drain, goodbye, NCCL
    // finalisation: a minute or more), not by this watchdog.
    watch::idle("dropping the communicator");
    drop(comm);
    if failed {
        watch::note("dropped; exiting");
    }
    watch::idle("process exit");
    code
}

pub fn dtype_of(cli: &Cli) -> Result<DType, Failure> {
    DType::from_name(&cli.dtype)
        .ok_or_else(|| Failure::error(format!("--dtype {}: expected bf16, f16 or f32", cli.dtype)))
}

/// Forms this rank of the world; also how long `World::process` took.
fn form(cli: &Cli, place: &Place) -> Result<(RankComm, Duration), Failure> {
    let ctx = kernels::open_device(place.device)?;
    // SAFETY: no slice exists yet; graphs need event tracking off.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    // Compiled (and cached in this process) before joining, so that the
    // time to join is the time the world takes to form.
    kernels::raw::compile_for(
        kernels::raw::arch_of(&ctx)?,
        place.world,
        &options_of(cli).kernel_cache,
    )?;
    let join = match place.join.as_str() {
        "files" => Join::Files(place.dir.join("world")),
        _ => Join::Nccl(share_nccl_id(place)?),
    };
    let mut dtype = dtype_of(cli)?;
    if cli.mismatch == Some(Mismatch::Dtype) && place.rank == 1 {
        dtype = if dtype == DType::F16 {
            DType::Bf16
        } else {
            DType::F16
        };
    }
    let options = options_of(cli);
    let mut spec = ProcessSpec::new(place.rank, place.world, join).with_dtype(dtype);
    if cli.fail_window_alloc == Some(place.rank) {
        spec = spec.with_failing_window_allocation();
    }
    if cli.split_hosts {
        spec = spec.with_host_identity(&format!("host-{}", place.rank));
    }
    let started = Instant::now();
    let comm = World::process(stream, spec, options)?;
    Ok((comm, started.elapsed()))
}

/// The world's options from the flags (the same on every rank).
pub fn options_of(cli: &Cli) -> Options {
    // Every algorithm may be forced (`--algo`, the matrix): buffers for each.
    let defaults = tuner::harness::world::measuring(None, true);
    let timeout = cli
        .timeout_ms
        .map_or(defaults.timeout, Duration::from_millis);
    // Outside the soak every call is checked at once, so the drain covers one
    // call: the device timeout bounds it too. The soak's drains cover
    // `--sync-every` replays and keep the default unless told.
    let drain_timeout = match (cli.drain_timeout_ms, cli.timeout_ms, cli.soak) {
        (Some(ms), _, _) => Duration::from_millis(ms),
        (None, Some(_), false) => timeout,
        _ => defaults.drain_timeout,
    };
    Options {
        timeout,
        drain_timeout,
        // Far enough below the wrap that forming the world and the first
        // replays run before it, close enough that the replays cross it.
        sequence_start: if cli.near_wrap {
            u64::MAX - cli.wrap_margin
        } else {
            defaults.sequence_start
        },
        ..defaults
    }
}

/// Rank 0 creates the NCCL unique id and hands it to the others through a file,
/// the way engines share it (any channel will do).
fn share_nccl_id(place: &Place) -> Result<NcclId, Failure> {
    let mut files = FileRendezvous::new(
        place.dir.join("bootstrap"),
        place.rank,
        place.world,
        Duration::from_secs(60),
    )?;
    let mine = if place.rank == 0 {
        NcclId::new()?.0.to_vec()
    } else {
        Vec::new()
    };
    let blobs = files.exchange("nccl-id", &mine)?;
    let bytes: [u8; 128] = blobs[0]
        .as_slice()
        .try_into()
        .map_err(|_| Failure::error("rank 0 shared an NCCL id that is not 128 bytes"))?;
    Ok(NcclId(bytes))
}

/// `policy` (for the mode each call is issued in) or a forced algorithm.
pub fn selection(cli: &Cli) -> Result<Select, Failure> {
    if cli.algo == "policy" {
        return Ok(Select::Auto);
    }
    Algo::from_name(&cli.algo)
        .map(Select::Force)
        .ok_or_else(|| {
            Failure::error(format!(
                "--algo {}: expected policy or an algorithm name",
                cli.algo
            ))
        })
}

/// Leaves the world on purpose before call `call` (the killed-peer test).
pub fn leave(rank: usize, call: usize, mode: KillMode) -> ! {
    // Stalling is the point here: not a step the watchdog should end.
    watch::idle("left the world on purpose");
    println!("LEFT rank={rank} before_call={call} mode={mode:?}");
    let _ = std::io::stdout().flush();
    match mode {
        // Like a crash: no goodbye, no destructor.
        KillMode::Exit => std::process::exit(0),
        // Alive but silent; the launcher kills it once the others are done.
        KillMode::Stall => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
    }
}

/// Hidden sizes of common models x decode batch sizes: 8 KiB to 256 KiB of bf16.
const HIDDEN: [usize; 3] = [4096, 5120, 8192];
const BATCH: [usize; 3] = [1, 4, 16];

/// Whether `ran` promises the same bits on every rank (multi-GPU NCCL, on a
/// window or not, does not).
pub fn exact(comm: &RankComm, ran: Algo) -> bool {
    !(!ran.is_kernel() && comm.fallback_kind() == Fallback::Nccl && comm.world_size() > 1)
}

/// One forced or policy-chosen all-reduce or all-gather of `input` into
/// `output` (the fused all-reduce + add + RMSNorm has its own suite,
/// gpu_fused.rs).
pub fn issue<T: Element>(
    comm: &RankComm,
    collective: Collective,
    input: &CudaSlice<T>,
    output: &mut CudaSlice<T>,
    how: Select,
) -> kernels::Result<Algo> {
    let (input, mut output) = (input.as_view(), output.as_view_mut());
    match collective {
        Collective::AllReduce => comm.all_reduce(&input, &mut output, how),
        Collective::AllGather => comm.all_gather(&input, &mut output, how),
        Collective::AllReduceAddRmsNorm => Err(Error::Unsupported(
            "this example makes no fused all_reduce_add_rmsnorm calls".into(),
        )),
    }
}

/// `result` of a `collective` that `ran`, checked against the host reference.
pub fn check<T: Element>(
    comm: &RankComm,
    collective: Collective,
    ran: Algo,
    inputs: &[Vec<T>],
    result: &[T],
) -> Result<(), String> {
    check_result(collective, ran, !exact(comm, ran), inputs, result)
}

/// `one_shot_pull:2,nccl:1`: how many calls each algorithm ran.
pub fn algo_counts(ran: &[Algo]) -> String {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for algo in ran {
        *counts.entry(algo.name()).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(a, n)| format!("{a}:{n}")).collect();
    counts.join(",")
}

/// The `CASE` line of a result that matched the host reference: the launcher
/// compares its hash across ranks where `ran` promises identical bits.
pub fn print_case(comm: &RankComm, id: &str, ran: Algo, hash: u64) {
    let exact = exact(comm, ran) as u8;
    println!(
        "CASE {id} ran={} exact={exact} hash={hash:016x}",
        ran.name()
    );
}

/// FNV-1a of a result's bits.
pub fn hash_of<T: Element>(values: &[T]) -> u64 {
    fnv1a(&le_bytes(values))
}

fn decode_loop<T: Element>(comm: &mut RankComm, cli: &Cli) -> Result<u8, Failure> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let how = selection(cli)?;
    let stream = comm.stream().clone();
    let kill_at = cli.kill_after.unwrap_or(cli.iters / 2);
    let mut wrong = 0usize;
    let mut first_wrong = None;
    let mut hash = 0u64;
    let mut algos = Vec::with_capacity(cli.iters);
    let mut busy = Duration::ZERO;
    for call in 0..cli.iters {
        if cli.kill_rank == Some(rank) && call == kill_at {
            leave(rank, call, cli.kill_mode);
        }
        let n = cli
            .elements
            .unwrap_or(HIDDEN[call % HIDDEN.len()] * BATCH[(call / HIDDEN.len()) % BATCH.len()]);
        watch::busy("writing a call's input");
        let inputs = random_inputs::<T>(world, n, call as u64);
        let input = stream.clone_htod(&inputs[rank])?;
        let mut output = stream.alloc_zeros::<T>(n)?;
        poison(&stream, &mut output)?;
        let start = Instant::now();
        // The first call may set up NCCL's connections (bounded by the join
        // timeout, a minute): not a step for the watchdog's short bound.
        if call == 0 {
            watch::idle("the first all_reduce");
        } else {
            watch::busy("all_reduce");
        }
        let outcome =
            issue(comm, Collective::AllReduce, &input, &mut output, how).and_then(|ran| {
                watch::busy("check after a call");
                comm.check().map(|()| ran)
            });
        let ran = match outcome {
            Ok(ran) => ran,
            Err(e) => {
                let failure = Failure::at(format!("call {call}"), e);
                watch::report(&failure);
                // Fail fast: a rank that knows of a fault refuses its next
                // call at once and launches nothing.
                watch::busy("the call after the fault");
                let again = Instant::now();
                let next = issue(comm, Collective::AllReduce, &input, &mut output, how);
                println!(
                    "FAILFAST rank={rank} next_call={} after_us={}",
                    if next.is_err() { "refused" } else { "ran" },
                    again.elapsed().as_micros()
                );
                return Err(failure);
            }
        };
        busy += start.elapsed();
        watch::busy("reading a call's output");
        let result = stream.clone_dtoh(&output)?;
        watch::idle("checking against the host reference");
        if let Err(e) = check(comm, Collective::AllReduce, ran, &inputs, &result) {
            wrong += 1;
            first_wrong.get_or_insert(format!("call {call} ({}): {e}", ran.name()));
        }
        hash = hash.rotate_left(7) ^ hash_of(&result);
        algos.push(ran);
    }
    println!(
        "SUMMARY rank={rank} world={world} calls={} wrong={wrong} exact={} hash={hash:016x} \
         ms_per_call={:.3} algos={}",
        cli.iters,
        algos.iter().all(|&ran| exact(comm, ran)) as u8,
        busy.as_secs_f64() * 1e3 / cli.iters.max(1) as f64,
        algo_counts(&algos)
    );
    if let Some(first) = first_wrong {
        println!("rank {rank}: first wrong result: {first}");
        return Ok(code::WRONG);
    }
    Ok(code::OK)
}
