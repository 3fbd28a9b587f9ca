//! The soak: one decode-shaped CUDA graph, captured once and replayed many
//! times, checked in windows.
//!
//! The graph holds every call a decode step makes (all-reduces of 8 KiB to
//! 2 MiB and all-gathers, as the policy picks them in graph mode) plus one call
//! forced to each algorithm the policy did not pick, NCCL included, so that
//! every algorithm runs in every replay. Replays are the only host work in the
//! loop besides an event recorded after each: at most `--in-flight` replays
//! are queued, the oldest waited for (`RankComm::wait_for`, bounded) before the
//! next launch. A launch into a full stream queue blocks in the driver with no
//! bound, and an NCCL kernel waiting for a lost peer never frees the queue: a
//! survivor that queued hundreds of replays between two checks hung in
//! `CudaGraph::launch` (issue 9's graph-replay kill). Every `--sync-every`
//! replays the rank calls `check()`, which reads the device's fault words and
//! turns a device-side timeout into an error promptly.
//!
//! Every `--check-every` replays is a window: before it, new inputs are written
//! into the captured input buffers and the outputs are poisoned; after it, each
//! output is compared with the f64 host reference here and printed as a
//! `CASE soak/w<k>/<call>` line with its hash, which the launcher compares
//! across ranks bit for bit (where the algorithm promises identical bits).
//! The rank's `SUMMARY` line carries replays, seconds and failures; the launcher
//! prints one machine-readable `soak:` line for the run.

use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaSlice};
use kernels::{Element, RankComm, Select};
use policy::{Algo, Collective, Mode};
use tuner::harness::timing::poison;
use tuner::harness::validation::random_inputs;

use crate::worker::{Failure, algo_counts, check, hash_of, issue, leave, print_case};
use crate::{Cli, code, watch};

/// One collective of the captured graph.
struct Call {
    collective: Collective,
    how: Select,
    /// Elements each rank contributes.
    n: usize,
    label: String,
}

/// Output sizes (bytes) of the policy's all-reduces: decode activations of
/// common hidden sizes and batches, 8 KiB to 2 MiB.
const POLICY_ALL_REDUCE: [u64; 5] = [8 << 10, 32 << 10, 128 << 10, 512 << 10, 2 << 20];
/// Bytes each rank contributes to the policy's all-gathers.
const POLICY_ALL_GATHER: [u64; 2] = [4 << 10, 64 << 10];
/// Output sizes tried, largest first, for a call forced to an algorithm the
/// policy did not pick (the first its capacity accepts).
const FORCED: [u64; 5] = [64 << 10, 32 << 10, 16 << 10, 4 << 10, 1 << 10];

/// The calls of the graph for this world: the policy's decode calls, then one
/// call forced to each algorithm the policy did not pick.
fn plan<T: Element>(comm: &RankComm) -> Vec<Call> {
    let world = comm.world_size() as u64;
    let world_size = world as u32;
    let size = std::mem::size_of::<T>() as u64;
    let dtype = T::DTYPE;
    let mut calls = Vec::new();
    let mut picked: Vec<(Collective, Algo)> = Vec::new();
    let mut push = |collective: Collective, how: Select, out_bytes: u64, tag: &str| {
        let per_rank = collective.per_rank_size(world, out_bytes);
        calls.push(Call {
            collective,
            how,
            n: (per_rank / size) as usize,
            label: format!("{}-{}-{}B", collective.name(), tag, out_bytes),
        });
    };
    let all_reduces = POLICY_ALL_REDUCE.map(|bytes| (Collective::AllReduce, bytes));
    let all_gathers = POLICY_ALL_GATHER.map(|per_rank| (Collective::AllGather, per_rank * world));
    for (collective, bytes) in all_reduces.into_iter().chain(all_gathers) {
        let choice = comm.policy_choice(collective, dtype, Mode::Graph, bytes);
        picked.push((collective, choice));
        push(collective, Select::Policy(Mode::Graph), bytes, "policy");
    }
    // The fused all-reduce + add + RMSNorm has its own suite (gpu_fused.rs).
    for collective in [Collective::AllReduce, Collective::AllGather] {
        for &algo in collective.algos() {
            if picked.contains(&(collective, algo)) {
                continue;
            }
            let capacity = comm.capacity(collective, algo);
            let fits = |bytes| {
                !algo.is_custom() || capacity.accepts_message(collective, world_size, bytes)
            };
            let bytes = FORCED
                .iter()
                .map(|b| b - b % (world * 16))
                .find(|&b| b > 0 && fits(b));
            if let Some(bytes) = bytes {
                push(collective, Select::Force(algo), bytes, algo.name());
            } else if comm.rank() == 0 {
                println!(
                    "soak: {} {} takes none of the sizes tried; it is not in the graph",
                    collective.name(),
                    algo.name()
                );
            }
        }
    }
    calls
}

/// What one rank holds for one call.
struct Buffers<T> {
    input: CudaSlice<T>,
    output: CudaSlice<T>,
}

fn seed_of(window: usize, call: usize) -> u64 {
    0x50a4_0000 + (window as u64) * 1000 + call as u64
}

/// Runs the soak on this rank; the exit code says whether every window was
/// right here (identity across ranks is the launcher's check).
pub fn run<T: Element>(comm: &mut RankComm, cli: &Cli) -> Result<u8, Failure> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let stream = comm.stream().clone();
    let total = cli.soak_replays;
    let window = cli.check_every.clamp(1, total.max(1));
    let sync = cli.sync_every.clamp(1, window);
    let calls = plan::<T>(comm);
    let wall = Instant::now();

    let mut buffers = Vec::with_capacity(calls.len());
    for call in &calls {
        let out_len = call.collective.output_size(world as u64, call.n as u64) as usize;
        buffers.push(Buffers {
            input: stream.alloc_zeros::<T>(call.n)?,
            output: stream.alloc_zeros::<T>(out_len)?,
        });
    }

    // Captured once: the kernels copy inputs into registered buffers and keep
    // their counters in device memory, so replays need no host work.
    let mut ran = Vec::with_capacity(calls.len());
    let graph = comm.capture(|c| {
        for (call, b) in calls.iter().zip(buffers.iter_mut()) {
            ran.push(issue(
                c,
                call.collective,
                &b.input,
                &mut b.output,
                call.how,
            )?);
        }
        Ok(())
    })?;
    let algos = algo_counts(&ran);
    println!(
        "SOAK rank={rank} calls={} algos={} replays={total} check_every={window} sync_every={sync} \
         in_flight={}",
        calls.len(),
        algos,
        cli.in_flight.max(1)
    );

    let replayed = replay(comm, cli, &stream, &graph, &calls, &mut buffers, &ran);
    if replayed.is_err() {
        watch::note("dropping the graph and the buffers");
        watch::busy("dropping the graph and the buffers");
    }
    // The graph refers to NCCL's communicator: release it first, so that
    // NCCL's teardown does not wait for it. Neither drop waits for the stream:
    // the graph is freed once its replays end, the buffers are freed in
    // stream order (`cuMemFreeAsync`), and the queue has room for both.
    drop(graph);
    drop(buffers);
    let Replayed {
        done,
        windows,
        failures,
        first_failure,
        replay_time,
    } = replayed?;
    println!(
        "SUMMARY rank={rank} world={world} replays={done} windows={windows} failures={failures} \
         seconds={:.3} replays_per_s={:.1} wall_s={:.3} algos={}",
        replay_time.as_secs_f64(),
        done as f64 / replay_time.as_secs_f64().max(1e-9),
        wall.elapsed().as_secs_f64(),
        algos
    );
    if let Some(first) = first_failure {
        println!("rank {rank}: first failure: {first}");
        return Ok(code::WRONG);
    }
    Ok(code::OK)
}

/// What the replays found.
struct Replayed {
    done: usize,
    windows: usize,
    failures: usize,
    first_failure: Option<String>,
    replay_time: Duration,
}

/// A failure at replay `at`, reported at once (the `ERROR` line, then the
/// exit watchdog), before anything is dropped.
fn failed_at(at: usize, e: kernels::Error) -> Failure {
    let failure = Failure::at(format!("replay {at}"), e);
    watch::report(&failure);
    failure
}

/// A CUDA driver error at replay `at`, reported at once.
fn driver_failed_at(at: usize, what: &str, e: cudarc::driver::DriverError) -> Failure {
    let failure = Failure::error(format!("replay {at}: {what}: CUDA driver: {e:?}"));
    watch::report(&failure);
    failure
}

/// Replays the graph in windows, checking each against the host reference.
fn replay<T: Element>(
    comm: &mut RankComm,
    cli: &Cli,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    graph: &kernels::Captured,
    calls: &[Call],
    buffers: &mut [Buffers<T>],
    ran: &[Algo],
) -> Result<Replayed, Failure> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let total = cli.soak_replays;
    let window = cli.check_every.clamp(1, total.max(1));
    let sync = cli.sync_every.clamp(1, window);
    let kill_at = cli.kill_after.unwrap_or(total / 2);
    // One event per queued replay, reused round the ring: slot r % depth
    // marks the end of replay r, and replay r + depth is launched only once
    // it has completed. A slot never recorded counts as complete.
    let depth = cli.in_flight.max(1);
    let ctx = stream.context();
    let ring: Vec<CudaEvent> = (0..depth)
        .map(|_| ctx.new_event(None))
        .collect::<Result<_, _>>()?;
    let mut failures = 0usize;
    let mut first_failure = None;
    let mut replay_time = Duration::ZERO;
    let mut done = 0usize;
    let mut windows = 0usize;
    while done < total {
        let this_window = window.min(total - done);
        // New inputs for this window (in place: the graph holds the
        // addresses), poisoned outputs so that an unwritten element shows.
        watch::busy("writing a window's inputs");
        let mut inputs = Vec::with_capacity(calls.len());
        for (k, (call, b)) in calls.iter().zip(buffers.iter_mut()).enumerate() {
            let all = random_inputs::<T>(world, call.n, seed_of(windows, k));
            stream.memcpy_htod(&all[rank], &mut b.input)?;
            poison(stream, &mut b.output)?;
            inputs.push(all);
        }
        watch::busy("check before a window");
        comm.check().map_err(|e| failed_at(done, e))?;

        let start = Instant::now();
        for i in 0..this_window {
            let r = done + i;
            if cli.kill_rank == Some(rank) && r == kill_at {
                leave(rank, r, cli.kill_mode);
            }
            let slot = &ring[r % depth];
            watch::busy("waiting for the replay `--in-flight` before");
            comm.wait_for(slot).map_err(|e| failed_at(r, e))?;
            watch::busy("Captured::launch");
            graph.launch().map_err(|e| failed_at(r, e))?;
            watch::busy("recording a replay's event");
            slot.record(stream)
                .map_err(|e| driver_failed_at(r, "recording a replay's event", e))?;
            if (i + 1) % sync == 0 {
                watch::busy("check every --sync-every replays");
                comm.check().map_err(|e| failed_at(r, e))?;
            }
        }
        watch::busy("check at the end of a window");
        comm.check().map_err(|e| failed_at(done + this_window, e))?;
        replay_time += start.elapsed();
        done += this_window;

        for (k, ((call, b), algo)) in calls.iter().zip(buffers.iter()).zip(ran).enumerate() {
            watch::busy("reading a window's outputs");
            let result = stream.clone_dtoh(&b.output)?;
            watch::idle("checking a window against the host reference");
            let verdict = check(comm, call.collective, *algo, &inputs[k], &result);
            let id = format!("soak/w{windows}/{}", call.label);
            match verdict {
                Ok(()) => print_case(comm, &id, *algo, hash_of(&result)),
                Err(why) => {
                    failures += 1;
                    first_failure.get_or_insert(format!("{id} after {done} replays: {why}"));
                    println!(
                        "CASE {id} FAIL after {done} replays ({}): {why}",
                        algo.name()
                    );
                }
            }
        }
        windows += 1;
        println!(
            "SOAK rank={rank} window={windows} replays={done} failures={failures} \
             replays_per_s={:.0}",
            done as f64 / replay_time.as_secs_f64().max(1e-9)
        );
    }
    watch::idle("soak done");
    Ok(Replayed {
        done,
        windows,
        failures,
        first_failure,
        replay_time,
    })
}
