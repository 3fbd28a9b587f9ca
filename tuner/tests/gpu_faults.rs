//! GPU tests of what a fault leaves behind (issue 29: items 3, 4, 5 and 8):
//! a communicator polled while it is aborted, waits that return only once the
//! rank's stream is at rest, eager calls behind a wait that never ends, and a
//! fault only the host knows of reaching the peers.
//!
//! The one-GPU tests run loopback worlds, whose NCCL stand-in (the reference
//! kernel) waits with a device-side bound; where a test needs a wait with no
//! bound, as NCCL's on a lost peer, it sets that bound to an hour. The tests
//! named `…_across_gpus` run real NCCL on two GPUs and print `SKIPPED` with
//! fewer. Every test runs under a watchdog that ends the process, naming the
//! test, if it hangs. The tests of items 3 and 4 run under
//! `compute-sanitizer --tool memcheck` too (kernels/GPU.md says how).

mod gpu_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, sys};
use gpu_common::{device_count, fill_bytes, gpu, skipped};
use half::bf16;
use kernels::{Error, Options, RankComm, Select, World};
use policy::Algo;
use tuner::harness::concurrent::for_each_rank;
use tuner::harness::world::measuring;

/// Ends the process if the test it guards has not finished within its
/// limit: a wait without a bound must fail the run, not hold the GPU.
struct Watchdog {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn watchdog(test: &'static str, limit: Duration) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let seen = done.clone();
    let thread = std::thread::spawn(move || {
        let start = Instant::now();
        while !seen.load(Ordering::SeqCst) {
            if start.elapsed() > limit {
                eprintln!(
                    "FAIL {test}: still running after {limit:?}, a wait without a bound; the \
                     watchdog ends the process"
                );
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    Watchdog {
        done,
        thread: Some(thread),
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn driver(e: cudarc::driver::DriverError) -> String {
    format!("{e:?}")
}

/// A stream of the test's own, standing for the engine's: tensors allocated
/// on it are freed in its order, not after the rank's queued work (event
/// tracking is off, as captures require), which is what makes freeing them
/// after a failed `check()` dangerous unless `check()` waited.
fn engine_stream(ctx: &Arc<CudaContext>) -> Arc<CudaStream> {
    ctx.new_stream().expect("a stream for the engine's tensors")
}

/// Whether `stream` has nothing left to run (`cuStreamQuery`, no waiting).
fn at_rest(stream: &CudaStream) -> Result<bool, String> {
    // SAFETY: queries a live stream.
    match unsafe { sys::cuStreamQuery(stream.cu_stream()) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => Err(format!("cuStreamQuery: {other:?}")),
    }
}

/// Waits at most `limit` for `stream` to have nothing left to run.
fn rests_within(stream: &CudaStream, limit: Duration) -> Result<bool, String> {
    let start = Instant::now();
    while !at_rest(stream)? {
        if start.elapsed() > limit {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(true)
}

/// The output's bytes, copied on `stream` (not ordered after the rank's).
fn bytes_of(
    stream: &Arc<CudaStream>,
    out: &CudaSlice<bf16>,
    len: usize,
) -> Result<Vec<u8>, String> {
    let mut host = vec![bf16::ZERO; len];
    stream
        .memcpy_dtoh(&out.slice(0..len), &mut host)
        .map_err(driver)?;
    stream.synchronize().map_err(driver)?;
    Ok(host
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect())
}

fn all_marked(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0xff)
}

fn loopback(ctx: &Arc<CudaContext>, world: usize, options: Options) -> Vec<RankComm> {
    World::loopback(ctx.clone(), world, options)
        .unwrap_or_else(|e| panic!("building a loopback world of {world}: {e}"))
}

/// `count` bf16 outputs of `n` elements on `stream`, poisoned with 0x5a.
fn outputs(stream: &Arc<CudaStream>, count: usize, n: usize) -> Vec<CudaSlice<bf16>> {
    (0..count)
        .map(|_| {
            let mut out = stream.alloc_zeros::<bf16>(n).expect("an output");
            fill_bytes(stream, &mut out, 0x5a);
            out
        })
        .collect()
}

fn ones(stream: &Arc<CudaStream>, n: usize) -> CudaSlice<bf16> {
    stream
        .clone_htod(&vec![bf16::from_f32(1.0); n])
        .expect("an input")
}

/// How a test waits for the rank after its fault is known.
#[derive(Clone, Copy, Debug)]
enum Wait {
    Check,
    WaitFor,
}

/// Item 4 on one GPU: rank 0 queues `[NCCL's stand-in, one_shot_push] × 100`
/// while rank 1 never calls; once rank 0's host knows of the fault, a
/// `check()` (or `wait_for()`) must return the fault only when its stream is
/// at rest: every queued custom call has marked its output as failed, so the
/// engine may free those tensors (which it then does, on a stream of its
/// own, before dropping the world; compute-sanitizer must see no access to
/// freed memory).
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_failed_wait_returns_only_once_the_stream_is_at_rest() {
    let _watch = watchdog(
        "a_failed_wait_returns_only_once_the_stream_is_at_rest",
        Duration::from_secs(120),
    );
    let ctx = gpu();
    let mut failures = Vec::new();
    for wait in [Wait::Check, Wait::WaitFor] {
        if let Err(e) = queued_behind_a_fault(&ctx, wait) {
            eprintln!("FAIL {wait:?}: {e}");
            failures.push(format!("{wait:?}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn queued_behind_a_fault(ctx: &Arc<CudaContext>, wait: Wait) -> Result<(), String> {
    let timeout = Duration::from_millis(200);
    let options = Options {
        timeout,
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = loopback(ctx, 2, options);
    let engine = engine_stream(ctx);
    let n = 128 * 1024; // 256 KiB of bf16 per call
    let pairs = 100;
    let input = ones(ranks[0].stream(), n);
    let mut outs = outputs(&engine, 2 * pairs, n);
    engine.synchronize().map_err(driver)?;
    ranks[0].stream().synchronize().map_err(driver)?;
    let rank = &mut ranks[0];
    for (k, out) in outs.iter_mut().enumerate() {
        let how = if k % 2 == 0 {
            Select::Force(Algo::Nccl) // the reference kernel, in a loopback world
        } else {
            Select::Force(Algo::OneShotPush)
        };
        if let Err(e) = rank.all_reduce(&input.as_view(), &mut out.as_view_mut(), how) {
            return Err(format!("call {k} was refused before the fault: {e}"));
        }
    }
    let after_calls = rank.stream().record_event(None).map_err(driver)?;
    // The host learns of the fault from the mirror (the first call times out).
    let start = Instant::now();
    while rank.health().is_ok() {
        if start.elapsed() > Duration::from_secs(5) {
            return Err("no fault known 5 s after a 200 ms timeout".into());
        }
        std::hint::spin_loop();
    }
    let waited = match wait {
        Wait::Check => rank.check(),
        Wait::WaitFor => rank.wait_for(&after_calls),
    };
    // Nothing may run any more: the stream is at rest, the last call marked.
    let rested = at_rest(rank.stream())?;
    let last = bytes_of(&engine, outs.last().expect("outputs"), 8)?;
    match &waited {
        Err(Error::Timeout { peer: Some(1), .. }) => {}
        other => return Err(format!("expected a timeout naming rank 1, got {other:?}")),
    }
    if !rested {
        return Err(format!(
            "{wait:?} returned {waited:?} while the stream still had work queued"
        ));
    }
    if !all_marked(&last) {
        return Err(format!(
            "{wait:?} returned before the last queued call marked its output: {last:02x?}"
        ));
    }
    for (k, out) in outs.iter().enumerate().skip(1) {
        let bytes = bytes_of(&engine, out, n)?;
        if !all_marked(&bytes) {
            let marked = bytes.chunks(2).filter(|p| p == &[0xff, 0xff]).count();
            return Err(format!(
                "call {k}, queued behind the fault: {marked} of {n} elements marked as failed"
            ));
        }
    }
    eprintln!(
        "   {wait:?}: {waited:?} after {:?}, stream at rest, {} outputs marked",
        start.elapsed(),
        2 * pairs - 1
    );
    // The engine frees the tensors, then the world goes.
    drop(outs);
    engine.synchronize().map_err(driver)?;
    drop(ranks);
    Ok(())
}

/// Item 4, the drop: a rank whose stream holds work it cannot end (a stream
/// wait on a word only the test writes, standing for an NCCL kernel that no
/// abort ends) is dropped; the drop must be bounded and must give up, not
/// free, what that work touches: the loaded kernels, the control block, the
/// fault mirror. When the test then releases the stream, the queued kernel
/// runs: on a failed rank, so it marks its output, and nothing it touches may
/// have been freed or unloaded.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_rank_dropped_with_work_it_cannot_end_keeps_what_that_work_uses() {
    let _watch = watchdog(
        "a_rank_dropped_with_work_it_cannot_end_keeps_what_that_work_uses",
        Duration::from_secs(120),
    );
    let ctx = gpu();
    let options = Options {
        timeout: Duration::from_millis(100),
        drain_timeout: Duration::from_millis(300),
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = loopback(&ctx, 2, options);
    let side = engine_stream(&ctx);
    // The gate is plain device memory (cuMemAlloc): stream memory operations
    // refuse stream-ordered allocations like cudarc's.
    ctx.bind_to_thread().expect("GPU 0's context");
    // SAFETY: 4 bytes of device memory, zeroed before any stream waits on
    // them, freed at the end of the test once every stream has drained.
    let gate_ptr = unsafe {
        let ptr = cudarc::driver::result::malloc_sync(4).expect("a gate word");
        cudarc::driver::result::memset_d8_sync(ptr, 0, 4).expect("the gate is zero");
        ptr
    };
    let n = 8 * 1024;
    let inputs: Vec<_> = ranks.iter().map(|r| ones(r.stream(), n)).collect();
    let mut outs: Vec<_> = ranks
        .iter()
        .map(|_| outputs(&side, 1, n).pop().expect("an output"))
        .collect();
    side.synchronize().expect("outputs poisoned");
    for rank in &ranks {
        rank.stream().synchronize().expect("inputs");
    }
    let held = ranks[0].stream().clone();
    // SAFETY: a live device word; the stream waits until it is at least 1.
    unsafe {
        sys::cuStreamWaitValue32_v2(
            held.cu_stream(),
            gate_ptr,
            1,
            sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
        )
    }
    .result()
    .expect("cuStreamWaitValue32");
    let how = Select::Force(Algo::OneShotPush);
    for (r, rank) in ranks.iter_mut().enumerate() {
        rank.all_reduce(&inputs[r].as_view(), &mut outs[r].as_view_mut(), how)
            .expect("issued");
    }
    // Rank 1 times out waiting for rank 0, whose kernel cannot start.
    let one = ranks[1].check();
    assert!(
        matches!(one, Err(Error::Timeout { peer: Some(0), .. })),
        "rank 1: {one:?}"
    );
    let start = Instant::now();
    drop(ranks);
    let took = start.elapsed();
    eprintln!("   dropping the world with rank 0's stream held took {took:?}");
    assert!(took < Duration::from_secs(10), "the drop took {took:?}");
    // Release the stream: rank 0's kernel runs now.
    // SAFETY: a live device word, written in `side`'s order.
    unsafe {
        sys::cuStreamWriteValue32_v2(
            side.cu_stream(),
            gate_ptr,
            1,
            sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
        )
    }
    .result()
    .expect("cuStreamWriteValue32");
    let rested = rests_within(&held, Duration::from_secs(10));
    assert_eq!(
        rested,
        Ok(true),
        "rank 0's queued kernel, released after the drop, did not complete cleanly"
    );
    let bytes = bytes_of(&side, &outs[0], n).expect("rank 0's output");
    assert!(
        all_marked(&bytes),
        "the kernel of a rank dropped after a fault computed instead of marking its output"
    );
    drop(outs);
    side.synchronize().expect("the test's stream");
    // SAFETY: every stream that waited on or wrote the gate has drained.
    unsafe { cudarc::driver::result::free_sync(gate_ptr) }.expect("freeing the gate");
}

/// Item 5 on one GPU: rank 1 stops calling after one healthy call; rank 0
/// issues an NCCL call (the stand-in, whose wait for rank 1 is bounded here
/// by an hour: a wait that does not end, as NCCL's on a lost peer) and then
/// 10 000 eager custom calls without `check()`. Once its in-flight bound is
/// reached a call must end in `Error::Timeout` within `drain_timeout`,
/// instead of a launch blocking in the driver when the stream's queue is
/// full; `check()` then returns with the stream at rest (the fault, written
/// for the device, ends the waiting kernel).
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn eager_calls_behind_a_wait_that_never_ends_time_out() {
    let _watch = watchdog(
        "eager_calls_behind_a_wait_that_never_ends_time_out",
        Duration::from_secs(60),
    );
    let ctx = gpu();
    let drain = Duration::from_secs(2);
    let options = Options {
        timeout: Duration::from_secs(3600),
        drain_timeout: drain,
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = loopback(&ctx, 2, options);
    let outcome = stalled_after_an_nccl_call(&mut ranks, drain);
    let start = Instant::now();
    drop(ranks);
    eprintln!("   dropping the world took {:?}", start.elapsed());
    outcome.unwrap_or_else(|e| panic!("{e}"));
}

/// Both ranks make one healthy call, then rank 1 stops; rank 0 makes an NCCL
/// call and 10 000 eager custom calls. The first error must be a timeout
/// within `drain` (and a few seconds), and `check()` must then return at
/// once with the stream at rest.
fn stalled_after_an_nccl_call(ranks: &mut [RankComm], drain: Duration) -> Result<(), String> {
    let n = 2048; // 4 KiB of bf16
    let streams: Vec<_> = ranks.iter().map(|r| r.stream().clone()).collect();
    let inputs: Vec<_> = streams.iter().map(|s| ones(s, n)).collect();
    let outs: Vec<_> = streams
        .iter()
        .map(|s| s.alloc_zeros::<bf16>(n).expect("an output"))
        .collect();
    let mut outs = for_each_rank(ranks, outs, |rank, mut out, _| {
        rank.all_reduce(
            &inputs[rank.rank()].as_view(),
            &mut out.as_view_mut(),
            Select::Force(Algo::Nccl),
        )?;
        rank.check()?;
        Ok(out)
    })
    .map_err(|e| format!("the healthy call: {e}"))?;
    let rank = &mut ranks[0];
    rank.all_reduce(
        &inputs[0].as_view(),
        &mut outs[0].as_view_mut(),
        Select::Force(Algo::Nccl),
    )
    .map_err(|e| format!("the NCCL call: {e}"))?;
    let start = Instant::now();
    let mut issued = 0;
    let mut first_error = None;
    for _ in 0..10_000 {
        match rank.all_reduce(
            &inputs[0].as_view(),
            &mut outs[0].as_view_mut(),
            Select::Force(Algo::OneShotPush),
        ) {
            Ok(_) => issued += 1,
            Err(e) => {
                first_error = Some(e);
                break;
            }
        }
    }
    let took = start.elapsed();
    eprintln!("   {issued} eager calls queued, then {first_error:?} after {took:?}");
    match first_error {
        Some(Error::Timeout { rank: 0, .. }) if took < drain + Duration::from_secs(3) => {}
        other => {
            return Err(format!(
                "expected Error::Timeout within {drain:?} and 3 s, got {other:?} after {took:?} \
                 ({issued} calls queued)"
            ));
        }
    }
    let checked = Instant::now();
    let check = rank.check();
    let check_took = checked.elapsed();
    if !matches!(check, Err(Error::Timeout { rank: 0, .. })) {
        return Err(format!("check() after the timeout gave {check:?}"));
    }
    if check_took > Duration::from_secs(3) || !at_rest(rank.stream())? {
        return Err(format!(
            "check() took {check_took:?} and left the stream {} (the fault, written for the \
             device, must end the waiting kernel)",
            if at_rest(rank.stream())? {
                "at rest"
            } else {
                "busy"
            }
        ));
    }
    Ok(())
}

/// Item 8 on one GPU: a fault only rank 0's host knows (its `check()` saw
/// its stream not drain within `drain_timeout`) must reach rank 1: rank 1's
/// next wait for rank 0 stops at once with `Error::PeerFault` naming rank 0,
/// instead of running into its own 10 s timeout.
#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_fault_only_the_host_knows_ends_the_peers_waits() {
    let _watch = watchdog(
        "a_fault_only_the_host_knows_ends_the_peers_waits",
        Duration::from_secs(60),
    );
    let ctx = gpu();
    let timeout = Duration::from_secs(10);
    let options = Options {
        timeout,
        drain_timeout: Duration::from_millis(300),
        log_declines: false,
        ..measuring(None, true)
    };
    let ranks = loopback(&ctx, 2, options);
    let n = 8 * 1024;
    let inputs: Vec<_> = ranks.iter().map(|r| ones(r.stream(), n)).collect();
    let mut outs: Vec<_> = ranks.iter().map(|r| outputs(r.stream(), 2, n)).collect();
    for rank in &ranks {
        rank.stream().synchronize().expect("tensors");
    }
    let how = Select::Force(Algo::OneShotPull);
    // Rank 0 calls alone; its host gives up on the stream after 300 ms.
    ranks[0]
        .all_reduce(&inputs[0].as_view(), &mut outs[0][0].as_view_mut(), how)
        .expect("rank 0's call");
    let start = Instant::now();
    let zero = ranks[0].check();
    let zero_took = start.elapsed();
    eprintln!("   rank 0: {zero:?} after {zero_took:?}");
    assert!(
        matches!(
            zero,
            Err(Error::Timeout {
                rank: 0,
                peer: None,
                ..
            })
        ),
        "rank 0 expected the host-side timeout, got {zero:?}"
    );
    let zero_rested = at_rest(ranks[0].stream());
    // Rank 1 makes that call and the next one, which rank 0 never makes.
    let start = Instant::now();
    let [first, second] = &mut outs[1][..] else {
        unreachable!("two outputs")
    };
    let one = ranks[1]
        .all_reduce(&inputs[1].as_view(), &mut first.as_view_mut(), how)
        .and_then(|_| ranks[1].all_reduce(&inputs[1].as_view(), &mut second.as_view_mut(), how))
        .and_then(|_| ranks[1].check());
    let one_took = start.elapsed();
    eprintln!("   rank 1: {one:?} after {one_took:?}");
    assert!(
        matches!(
            one,
            Err(Error::PeerFault {
                rank: 1,
                peer: 0,
                ..
            })
        ),
        "rank 1 expected a failed peer (rank 0), got {one:?} after {one_took:?}"
    );
    assert!(
        one_took < Duration::from_secs(2),
        "rank 1 stopped after {one_took:?}, not at once (its timeout is {timeout:?})"
    );
    assert!(
        zero_took < Duration::from_secs(3) && zero_rested == Ok(true),
        "rank 0's check() took {zero_took:?} and left its stream at rest: {zero_rested:?}"
    );
    drop(outs);
    drop(ranks);
}

/// Two streams of one GPU each, with event tracking off.
fn two_gpu_streams() -> Vec<Arc<CudaStream>> {
    (0..2)
        .map(|d| {
            let ctx = CudaContext::new(d).expect("opening a GPU");
            // SAFETY: no slices exist on this context yet.
            unsafe { ctx.disable_event_tracking() };
            ctx.new_stream().expect("a stream")
        })
        .collect()
}

fn enough_gpus(test: &str) -> bool {
    let count = device_count();
    if count < 2 {
        skipped(test, 2, count);
        return false;
    }
    true
}

/// Item 3 across GPUs, with real NCCL: a world of two whose rank 1 never
/// makes its first call, so rank 0's NCCL call stays in progress (NCCL
/// connects to its peer) or its kernel waits; a short call bound and drain
/// bound make rank 0 abort its communicator, while a second thread polls
/// rank 0's health through a `Lifeline` the whole time. No poll may reach a
/// freed communicator: run it under compute-sanitizer.
#[test]
#[ignore = "needs 2 CUDA GPUs: run scripts/gpu-run.sh on a GPU machine"]
fn health_polled_while_nccl_is_aborted_across_gpus() {
    let test = "health_polled_while_nccl_is_aborted_across_gpus";
    let _watch = watchdog(
        "health_polled_while_nccl_is_aborted_across_gpus",
        Duration::from_secs(120),
    );
    let _ctx = gpu();
    if !enough_gpus(test) {
        return;
    }
    let options = Options {
        timeout: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(1),
        // The bound on an NCCL call still connecting to its peers.
        join_timeout: Duration::from_secs(1),
        log_declines: false,
        ..measuring(None, true)
    };
    let ranks = World::devices(two_gpu_streams(), options).expect("a world of two GPUs");
    let lifeline = ranks[0].lifeline();
    let stop = Arc::new(AtomicBool::new(false));
    let (live, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let poller = {
        let (stop, live, failed) = (stop.clone(), live.clone(), failed.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match lifeline.health() {
                    Ok(()) => live.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    let n = 2048;
    let stream = ranks[0].stream().clone();
    let input = ones(&stream, n);
    let mut out = stream.alloc_zeros::<bf16>(n).expect("an output");
    let start = Instant::now();
    let outcome = ranks[0]
        .all_reduce(
            &input.as_view(),
            &mut out.as_view_mut(),
            Select::Force(Algo::Nccl),
        )
        .and_then(|_| ranks[0].check());
    let took = start.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    poller.join().expect("the polling thread");
    let (live, failed) = (live.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("   rank 0: {outcome:?} after {took:?}; {live} polls healthy, {failed} failed");
    assert!(
        matches!(outcome, Err(Error::Timeout { rank: 0, .. })),
        "{outcome:?}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(live > 0 && failed > 0, "live {live}, failed {failed}");
    drop(out);
    drop(input);
    let start = Instant::now();
    drop(ranks);
    assert!(start.elapsed() < Duration::from_secs(30));
}

/// Item 4 across GPUs, with real NCCL: rank 0 queues `[NCCL, one_shot_push]
/// × 32` after a healthy call while rank 1 stops calling. NCCL's kernel
/// waits for rank 1 for ever; `check()` must abort NCCL and return only once
/// the stream is at rest, every custom call behind NCCL having marked its
/// output; then the outputs and the world are dropped (compute-sanitizer
/// must see no access to freed memory).
#[test]
#[ignore = "needs 2 CUDA GPUs: run scripts/gpu-run.sh on a GPU machine"]
fn a_failed_check_aborts_nccl_and_waits_for_the_stream_across_gpus() {
    let test = "a_failed_check_aborts_nccl_and_waits_for_the_stream_across_gpus";
    let _watch = watchdog(
        "a_failed_check_aborts_nccl_and_waits_for_the_stream_across_gpus",
        Duration::from_secs(120),
    );
    let _ctx = gpu();
    if !enough_gpus(test) {
        return;
    }
    let options = Options {
        timeout: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(2),
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = World::devices(two_gpu_streams(), options).expect("a world of two GPUs");
    let n = 128 * 1024;
    let streams: Vec<_> = ranks.iter().map(|r| r.stream().clone()).collect();
    let inputs: Vec<_> = streams.iter().map(|s| ones(s, n)).collect();
    let warm = for_each_rank(&mut ranks, vec![0usize, 1], |rank, r, _| {
        let mut out = streams[r].alloc_zeros::<bf16>(n).expect("an output");
        rank.all_reduce(
            &inputs[r].as_view(),
            &mut out.as_view_mut(),
            Select::Force(Algo::Nccl),
        )?;
        rank.check()
    });
    warm.expect("the healthy call");
    let engine = engine_stream(streams[0].context());
    let mut outs = outputs(&engine, 64, n);
    engine.synchronize().expect("outputs");
    let rank = &mut ranks[0];
    for (k, out) in outs.iter_mut().enumerate() {
        let algo = if k % 2 == 0 {
            Algo::Nccl
        } else {
            Algo::OneShotPush
        };
        rank.all_reduce(
            &inputs[0].as_view(),
            &mut out.as_view_mut(),
            Select::Force(algo),
        )
        .unwrap_or_else(|e| panic!("call {k}: {e}"));
    }
    let start = Instant::now();
    let check = rank.check();
    let took = start.elapsed();
    let rested = at_rest(rank.stream());
    eprintln!("   rank 0: {check:?} after {took:?}, at rest: {rested:?}");
    assert!(
        matches!(check, Err(Error::Timeout { rank: 0, .. })),
        "{check:?}"
    );
    assert_eq!(rested, Ok(true), "check() returned with work still queued");
    for (k, out) in outs.iter().enumerate().filter(|(k, _)| k % 2 == 1) {
        let bytes = bytes_of(&engine, out, n).expect("an output");
        assert!(
            all_marked(&bytes),
            "custom call {k} did not mark its output"
        );
    }
    drop(outs);
    engine.synchronize().expect("the engine's stream");
    let start = Instant::now();
    drop(ranks);
    assert!(start.elapsed() < Duration::from_secs(30));
}

/// Item 5 across GPUs, with real NCCL: after a healthy call, rank 1 stops;
/// rank 0 makes an NCCL call (its kernel waits for rank 1 for ever) and
/// 10 000 eager custom calls without `check()`: a call must end in
/// `Error::Timeout` within `drain_timeout`, never block in the driver.
#[test]
#[ignore = "needs 2 CUDA GPUs: run scripts/gpu-run.sh on a GPU machine"]
fn eager_calls_behind_a_hung_nccl_call_time_out_across_gpus() {
    let test = "eager_calls_behind_a_hung_nccl_call_time_out_across_gpus";
    let _watch = watchdog(
        "eager_calls_behind_a_hung_nccl_call_time_out_across_gpus",
        Duration::from_secs(120),
    );
    let _ctx = gpu();
    if !enough_gpus(test) {
        return;
    }
    let drain = Duration::from_secs(2);
    let options = Options {
        timeout: Duration::from_millis(500),
        drain_timeout: drain,
        log_declines: false,
        ..measuring(None, true)
    };
    let mut ranks = World::devices(two_gpu_streams(), options).expect("a world of two GPUs");
    let outcome = stalled_after_an_nccl_call(&mut ranks, drain);
    let start = Instant::now();
    drop(ranks);
    eprintln!("   dropping the world took {:?}", start.elapsed());
    outcome.unwrap_or_else(|e| panic!("{e}"));
}
