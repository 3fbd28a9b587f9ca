//! Shared harness of the GPU tests: a context or a clear failure without a GPU,
//! one call or a captured graph on every rank (one thread per rank, as NCCL
//! needs), host-reference checks, and a suite that collects failures so one run
//! reports everything that is wrong.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut};
use kernels::{Captured, Element, Fallback, RankComm, Select};
use policy::{Algo, Collective};
use tuner::harness::concurrent::for_each_rank;
use tuner::harness::timing::{TimingSpec, measure, poison};
use tuner::harness::validation::{
    check_all_gather, check_all_reduce_of, check_identical, random_inputs,
};

pub mod skip;

/// The collectives this harness calls: all-reduce and all-gather. The fused
/// all-reduce + add + RMSNorm, with its residual, weight and second output,
/// has its own suite (gpu_fused.rs).
pub const PLAIN_COLLECTIVES: [Collective; 2] = [Collective::AllReduce, Collective::AllGather];

/// What a case of the fused collective gets from this harness.
pub const FUSED_ELSEWHERE: &str = "all_reduce_add_rmsnorm is tested by gpu_fused.rs";

pub const NEEDS_GPU: &str = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine";

/// Says that `test` did not run because it needs `needs` GPUs and `visible`
/// are visible, in the one format `scripts/gpu-run.sh` judges.
pub fn skipped(test: &str, needs: usize, visible: usize) {
    eprintln!("{}", skip::line(test, needs, visible));
}

/// GPU 0's primary context with cudarc's event tracking off (the tests order
/// their work on the ranks' streams themselves, and graphs require it).
/// Panics with a clear message when there is no usable GPU.
pub fn gpu() -> Arc<CudaContext> {
    require_multicast_off();
    if let Err(e) = kernels::raw::require_driver() {
        panic!("{NEEDS_GPU}: {e}");
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => panic!("{NEEDS_GPU}: the driver sees no GPU"),
        Err(e) => panic!("{NEEDS_GPU}: cuInit failed: {e:?}"),
    }
    if let Err(e) = kernels::raw::require_nvrtc() {
        panic!("{e}");
    }
    let ctx = CudaContext::new(0).unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e:?}"));
    // SAFETY: no slice exists yet; the tests synchronise their own streams.
    unsafe { ctx.disable_event_tracking() };
    ctx
}

pub fn device_count() -> usize {
    require_multicast_off();
    CudaContext::device_count().map(|n| n as usize).unwrap_or(0)
}

/// Every GPU test starts here (through [`gpu`] or [`device_count`]): this
/// project's runs never let NCCL use NVLink multicast, and a test binary
/// cannot set `NCCL_NVLS_ENABLE` safely once its harness runs threads, so
/// it refuses to run without it.
pub fn require_multicast_off() {
    if let Err(e) = kernels::raw::require_multicast_off() {
        panic!("{e}");
    }
}

/// A captured graph moved into a rank's thread and back. Graphs are not tied
/// to a thread; they only must not be used concurrently, and each is used by
/// one rank's thread at a time.
pub struct SendGraph(pub Captured);
// SAFETY: see above.
unsafe impl Send for SendGraph {}

/// What one rank holds across the steps of a case.
pub struct RankState<T> {
    pub input: CudaSlice<T>,
    pub output: CudaSlice<T>,
    pub graph: Option<SendGraph>,
    pub ran: Option<Algo>,
    pub result: Vec<T>,
}

/// How a case issues its call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    OutOfPlace,
    InPlace,
}

/// Shape of one case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub collective: Collective,
    pub how: Select,
    /// Elements each rank contributes.
    pub per_rank: usize,
    pub placement: Placement,
    pub seed: u64,
}

impl Case {
    pub fn label<T: Element>(&self, world: usize) -> String {
        format!(
            "world {world} {} {} {:?} {} B/rank {:?}",
            self.collective.name(),
            T::DTYPE.name(),
            self.how,
            self.per_rank * std::mem::size_of::<T>(),
            self.placement
        )
    }
}

fn upload<T: Element>(
    stream: &Arc<CudaStream>,
    data: &[T],
    len: usize,
) -> Result<CudaSlice<T>, String> {
    let mut slice = stream
        .alloc_zeros::<T>(len.max(1))
        .map_err(|e| format!("alloc: {e:?}"))?;
    if !data.is_empty() {
        let mut head = slice.slice_mut(0..data.len());
        stream
            .memcpy_htod(data, &mut head)
            .map_err(|e| format!("upload: {e:?}"))?;
    }
    Ok(slice)
}

/// Allocates a rank's tensors for `case` with `input` as its data; the output
/// (or, in place, the whole buffer but this rank's share) is poisoned.
fn stage<T: Element>(rank: &RankComm, case: &Case, input: &[T]) -> Result<RankState<T>, String> {
    let stream = rank.stream().clone();
    let world = rank.world_size();
    let out_len = case
        .collective
        .output_size(world as u64, case.per_rank as u64) as usize;
    let (input_slice, output) = match (case.placement, case.collective) {
        (Placement::OutOfPlace, _) => {
            let input_slice = upload(&stream, input, case.per_rank)?;
            let mut output = upload::<T>(&stream, &[], out_len)?;
            poison(&stream, &mut output).map_err(|e| e.to_string())?;
            (input_slice, output)
        }
        (Placement::InPlace, Collective::AllReduce) => (
            upload::<T>(&stream, &[], 1)?,
            upload(&stream, input, out_len)?,
        ),
        (Placement::InPlace, Collective::AllGather) => {
            let mut buffer = upload::<T>(&stream, &[], out_len)?;
            poison(&stream, &mut buffer).map_err(|e| e.to_string())?;
            let start = rank.rank() * case.per_rank;
            let mut share = buffer.slice_mut(start..start + case.per_rank);
            stream
                .memcpy_htod(input, &mut share)
                .map_err(|e| format!("upload: {e:?}"))?;
            (upload::<T>(&stream, &[], 1)?, buffer)
        }
        (Placement::InPlace, Collective::AllReduceAddRmsNorm) => {
            return Err(FUSED_ELSEWHERE.into());
        }
    };
    stream.synchronize().map_err(|e| format!("{e:?}"))?;
    Ok(RankState {
        input: input_slice,
        output,
        graph: None,
        ran: None,
        result: Vec::new(),
    })
}

/// Issues the case's call once on `rank`.
pub fn issue<T: Element>(
    rank: &RankComm,
    case: &Case,
    state: &mut RankState<T>,
) -> kernels::Result<Algo> {
    let mut output = state.output.as_view_mut();
    match (case.placement, case.collective) {
        (Placement::OutOfPlace, Collective::AllReduce) => {
            rank.all_reduce(&state.input.as_view(), &mut output, case.how)
        }
        (Placement::OutOfPlace, Collective::AllGather) => {
            rank.all_gather(&state.input.as_view(), &mut output, case.how)
        }
        (Placement::InPlace, Collective::AllReduce) => {
            rank.all_reduce_in_place(&mut output, case.how)
        }
        (Placement::InPlace, Collective::AllGather) => {
            rank.all_gather_in_place(&mut output, case.how)
        }
        (_, Collective::AllReduceAddRmsNorm) => {
            Err(kernels::Error::Unsupported(FUSED_ELSEWHERE.into()))
        }
    }
}

fn download<T: Element>(rank: &RankComm, state: &mut RankState<T>) -> Result<(), String> {
    state.result = rank
        .stream()
        .clone_dtoh(&state.output)
        .map_err(|e| format!("download: {e:?}"))?;
    Ok(())
}

/// Checks every rank's result against the host reference, and bitwise identity
/// across ranks (not promised by multi-GPU NCCL, so skipped there).
pub fn check_results<T: Element>(
    ranks: &[RankComm],
    collective: Collective,
    inputs: &[Vec<T>],
    states: &[RankState<T>],
) -> Result<Algo, String> {
    let ran = states[0].ran.expect("the call ran");
    if let Some(r) = states.iter().position(|s| s.ran != Some(ran)) {
        return Err(format!(
            "rank {r} ran {:?} but rank 0 ran {ran:?}",
            states[r].ran
        ));
    }
    let pushed = ran == Algo::OneShotPush;
    // Multi-GPU NCCL does not promise identical bits on every rank (check each)
    // nor a single rounding (see check_nccl_all_reduce). Everything else must be
    // bitwise identical, so checking rank 0 suffices.
    let real_nccl =
        ran == Algo::Nccl && ranks[0].fallback_kind() == Fallback::Nccl && ranks.len() > 1;
    let check = |r: usize| {
        match collective {
            Collective::AllGather => check_all_gather(inputs, &states[r].result, pushed),
            Collective::AllReduce => check_all_reduce_of(ran, real_nccl, inputs, &states[r].result),
            Collective::AllReduceAddRmsNorm => Err(FUSED_ELSEWHERE.into()),
        }
        .map_err(|e| format!("rank {r} ({}): {e}", ran.name()))
    };
    if real_nccl {
        (0..states.len()).try_for_each(check)?;
    } else {
        let outputs: Vec<&[T]> = states.iter().map(|s| s.result.as_slice()).collect();
        check_identical(&outputs)?;
        check(0)?;
    }
    Ok(ran)
}

fn on_ranks<T: Element>(
    ranks: &mut [RankComm],
    states: Vec<RankState<T>>,
    step: impl Fn(&mut RankComm, &mut RankState<T>) -> Result<(), String> + Sync,
) -> Result<Vec<RankState<T>>, String> {
    for_each_rank(ranks, states, |rank, mut state, _| {
        step(rank, &mut state).map_err(kernels::Error::Verification)?;
        Ok(state)
    })
    .map_err(|e| e.to_string())
}

/// Calls issued back to back for one case: three (so that, under
/// programmatic launch, each rank's next kernel is scheduled while its
/// current one still runs, as in an engine's forward pass), except for an
/// in-place all-reduce, whose sum would change with every call.
pub fn back_to_back(case: &Case) -> usize {
    if case.placement == Placement::InPlace && case.collective == Collective::AllReduce {
        1
    } else {
        3
    }
}

/// The case's call issued [`back_to_back`] times on every rank with no wait in
/// between, then checked. Returns the algorithm that ran.
pub fn eager<T: Element>(ranks: &mut [RankComm], case: &Case) -> Result<Algo, String> {
    let world = ranks.len();
    let inputs = random_inputs::<T>(world, case.per_rank, case.seed);
    let states = ranks
        .iter()
        .zip(&inputs)
        .map(|(rank, input)| stage(rank, case, input))
        .collect::<Result<Vec<_>, _>>()?;
    let calls = back_to_back(case);
    let states = on_ranks(ranks, states, |rank, state| {
        for _ in 0..calls {
            let ran = issue(rank, case, state).map_err(|e| e.to_string())?;
            if state.ran.is_some_and(|first| first != ran) {
                return Err(format!(
                    "the same call ran {first:?} then {ran:?}",
                    first = state.ran
                ));
            }
            state.ran = Some(ran);
        }
        rank.check().map_err(|e| e.to_string())?;
        download(rank, state)
    })?;
    check_results(ranks, case.collective, &inputs, &states)
}

/// Captures the case's call ([`back_to_back`] times, at most twice, so that
/// the graph holds a programmatic edge between two of the custom kernels)
/// per rank, replays the graph `replays` times and checks; then changes the
/// inputs, replays once more and checks again (a replay that used stale
/// buffers would still show the first data).
pub fn graph<T: Element>(
    ranks: &mut [RankComm],
    case: &Case,
    replays: usize,
) -> Result<Algo, String> {
    let world = ranks.len();
    let first = random_inputs::<T>(world, case.per_rank, case.seed);
    let states = ranks
        .iter()
        .zip(&first)
        .map(|(rank, input)| stage(rank, case, input))
        .collect::<Result<Vec<_>, _>>()?;
    let calls = back_to_back(case).min(2);
    let states = on_ranks(ranks, states, |rank, state| {
        let mut ran = None;
        let graph = rank
            .capture(|r| {
                for _ in 0..calls {
                    ran = Some(issue(r, case, state)?);
                }
                Ok(())
            })
            .map_err(|e| format!("capture: {e}"))?;
        state.ran = ran;
        for _ in 0..replays {
            graph.launch().map_err(|e| format!("replay: {e:?}"))?;
        }
        rank.check().map_err(|e| e.to_string())?;
        download(rank, state)?;
        state.graph = Some(SendGraph(graph));
        Ok(())
    })?;
    check_results(ranks, case.collective, &first, &states)
        .map_err(|e| format!("after {replays} replays: {e}"))?;

    let second = random_inputs::<T>(world, case.per_rank, case.seed.wrapping_add(1));
    let states = on_ranks(ranks, states, |rank, state| {
        let stream = rank.stream().clone();
        let input = &second[rank.rank()];
        match (case.placement, case.collective) {
            (Placement::OutOfPlace, _) => {
                stream
                    .memcpy_htod(input, &mut state.input)
                    .map_err(|e| format!("{e:?}"))?;
                poison(&stream, &mut state.output).map_err(|e| e.to_string())?;
            }
            (Placement::InPlace, Collective::AllReduce) => {
                stream
                    .memcpy_htod(input, &mut state.output)
                    .map_err(|e| format!("{e:?}"))?;
            }
            (Placement::InPlace, Collective::AllGather) => {
                poison(&stream, &mut state.output).map_err(|e| e.to_string())?;
                let start = rank.rank() * case.per_rank;
                let mut share = state.output.slice_mut(start..start + case.per_rank);
                stream
                    .memcpy_htod(input, &mut share)
                    .map_err(|e| format!("{e:?}"))?;
            }
            (Placement::InPlace, Collective::AllReduceAddRmsNorm) => {
                return Err(FUSED_ELSEWHERE.into());
            }
        }
        let graph = state.graph.as_ref().expect("captured");
        graph.0.launch().map_err(|e| format!("replay: {e:?}"))?;
        rank.check().map_err(|e| e.to_string())?;
        download(rank, state)
    })?;
    check_results(ranks, case.collective, &second, &states)
        .map_err(|e| format!("replay with new inputs: {e}"))
}

/// Collects failures so one run shows all of them; prints progress.
pub struct Suite {
    name: String,
    started: Instant,
    cases: usize,
    failures: Vec<String>,
}

impl Suite {
    pub fn new(name: &str) -> Suite {
        eprintln!("== {name}");
        Suite {
            name: name.into(),
            started: Instant::now(),
            cases: 0,
            failures: Vec::new(),
        }
    }

    /// Records a case; returns whether it passed.
    pub fn record<R: std::fmt::Debug>(&mut self, label: &str, outcome: Result<R, String>) -> bool {
        self.cases += 1;
        match outcome {
            Ok(_) => true,
            Err(e) => {
                eprintln!("FAIL {label}: {e}");
                self.failures.push(format!("{label}: {e}"));
                false
            }
        }
    }

    pub fn note(&self, line: &str) {
        eprintln!("   {line} [{:.1}s]", self.started.elapsed().as_secs_f64());
    }

    pub fn finish(self) {
        eprintln!(
            "== {}: {} cases, {} failed, {:.1}s",
            self.name,
            self.cases,
            self.failures.len(),
            self.started.elapsed().as_secs_f64()
        );
        if !self.failures.is_empty() {
            panic!(
                "{} of {} cases failed in {}:\n{}",
                self.failures.len(),
                self.cases,
                self.name,
                self.failures.join("\n")
            );
        }
    }
}

/// Writes a byte pattern over a slice (for ad-hoc checks).
pub fn fill_bytes<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    slice: &mut CudaSlice<T>,
    byte: u8,
) {
    let bytes = slice.num_bytes();
    let (ptr, _w) = slice.device_ptr_mut(stream);
    // SAFETY: the range is the live allocation behind `slice`.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, byte, bytes, stream.cu_stream()) }
        .unwrap();
}

/// `measure` of `spec`, judged by [`plausibly`].
pub fn measure_plausibly(ranks: &mut [RankComm], spec: &TimingSpec) -> Result<(), String> {
    plausibly(spec, measure(ranks, spec))
}

/// A measurement of `spec`, printed, and judged plausible: as many samples
/// as asked, each finite, positive and below 10 ms a call.
pub fn plausibly(spec: &TimingSpec, measured: kernels::Result<Vec<f64>>) -> Result<(), String> {
    let us = measured.map_err(|e| e.to_string())?;
    eprintln!(
        "   {} {}: {us:.2?} us/call",
        spec.algo.name(),
        spec.mode.name()
    );
    let plausible = |t: &f64| t.is_finite() && *t > 0.0 && *t < 10_000.0;
    if us.len() == spec.samples as usize && us.iter().all(plausible) {
        Ok(())
    } else {
        Err(format!("implausible samples {us:?}"))
    }
}
