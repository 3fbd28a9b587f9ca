//! Measuring and verifying collectives on the GPUs of a world, for the sweep and
//! `tuner bench`, plus what the platform is.
//!
//! Timing is on the GPU with events, per rank, each rank driven by its own
//! thread; a sample is the per-call time of the slowest rank. In graph mode,
//! `calls_per_sample` forced calls are captured back to back in one graph per
//! rank and each sample times one replay, so launch overhead is what a captured
//! engine pays. In eager mode a sample times `calls_per_sample` launches.
//!
//! Samples run back to back on each stream, an event between consecutive ones,
//! after one host barrier and one untimed sample: the ranks then run in the
//! lockstep their collectives impose, as in an engine's forward pass. A host
//! barrier before every sample would add the threads' wake-up skew to every
//! sample, and the more so the fewer calls a sample holds.
//!
//! A [`TimingCache::measure`] call is one round: warm-up, the untimed sample,
//! the timed ones. What a round stands on — every rank's tensors, its timing
//! events and, in graph mode, the graph it replays — is kept by the cache for
//! the next round at the same size, so the sweep's extra rounds (and the other
//! candidates at that size) cost their warm-up and samples, not a new set-up.
//! The inputs are the same either way (seeded by the size); the fused
//! collective's residual, which each of its calls updates in place, carries
//! on from the round before instead of starting afresh, as it already did
//! from one call of a round to the next.

use std::any::Any;
use std::collections::HashMap;
use std::collections::hash_map::Entry as Slot;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtrMut, result as driver, sys,
};
use half::{bf16, f16};

use kernels::raw::{
    self, DriverContext, PairLink, Reach, arch_of, nccl_version, pair_link, sm_count,
};
use kernels::{Captured, Element, Error, Fallback, Options, RankComm, Result, Select, World};
use policy::{Algo, Arch, Collective, DType, Mode};

use super::concurrent::{RankBarrier, for_each_rank};
use super::validation::{self, AddRmsNormCase, POISON_BYTE, SumPath};

pub use crate::hidden::DEFAULT_HIDDEN;
/// The RMSNorm epsilon of the harness's fused calls.
pub const EPS: f32 = 1e-5;

/// What to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingSpec {
    pub collective: Collective,
    pub dtype: DType,
    /// Forced; a custom algorithm that would decline is an [`Error::Declined`].
    pub algo: Algo,
    /// Output bytes (all-gather: world size x each rank's input), as `policy::Query`.
    pub bytes: u64,
    pub mode: Mode,
    pub calls_per_sample: u32,
    pub samples: u32,
    /// Untimed calls (eager) or replays (graph) before the samples.
    pub warmup: u32,
    /// Elements of a row of [`Collective::AllReduceAddRmsNorm`] (`bytes` is
    /// then whole rows); the other collectives ignore it.
    pub hidden: usize,
    /// With `algo` [`Algo::Unfused`]: the all-reduce its unfused path runs
    /// ([`Select::Unfused`]); `None`, the one the tables pick.
    pub unfused_via: Option<Algo>,
}

impl TimingSpec {
    /// The forced call it times.
    fn call(&self) -> Call {
        Call {
            collective: self.collective,
            algo: self.algo,
            bytes: self.bytes,
            hidden: self.hidden,
            unfused_via: self.unfused_via,
        }
    }
}

/// Microseconds per call for each sample, each the maximum over ranks, on a
/// set-up of its own: for a one-off measurement ([`TimingCache::measure`]
/// for rounds).
pub fn measure(ranks: &mut [RankComm], spec: &TimingSpec) -> Result<Vec<f64>> {
    TimingCache::default().measure(ranks, spec)
}

/// The set-up of the latest size measured on a world, kept for the next
/// round there: every rank's tensors (on the data [`measure`] seeds by the
/// size), a pool of timing events, and the graph of every forced call
/// captured on them. Another size, collective, dtype, row or world drops it
/// all; an error drops it too (what a failed round left in its tensors and
/// graphs is unknown). Its graphs and events belong to the ranks' contexts:
/// keep it with the world it measures and drop it with that world.
#[derive(Default)]
pub struct TimingCache {
    entry: Option<CacheEntry>,
}

/// A set-up and what it was built for.
struct CacheEntry {
    key: SetupKey,
    /// Every rank's `RankSetup` of the key's element type, in rank order.
    ranks: Box<dyn Any + Send>,
}

impl TimingCache {
    /// [`measure`], on the cached set-up where it fits `spec` on `ranks`.
    pub fn measure(&mut self, ranks: &mut [RankComm], spec: &TimingSpec) -> Result<Vec<f64>> {
        let measured = match spec.dtype {
            DType::Bf16 => measure_typed::<bf16>(self, ranks, spec),
            DType::F16 => measure_typed::<f16>(self, ranks, spec),
            DType::F32 => measure_typed::<f32>(self, ranks, spec),
        };
        if measured.is_err() {
            self.entry = None;
        }
        measured
    }

    /// The set-up built for `key`, taken out; any other is dropped.
    fn take<S: 'static>(&mut self, key: &SetupKey) -> Option<Vec<S>> {
        let entry = self.entry.take().filter(|entry| entry.key == *key)?;
        entry.ranks.downcast::<Vec<S>>().ok().map(|ranks| *ranks)
    }

    /// Keeps `ranks`' set-up for the next call of `key`.
    fn keep<S: Send + 'static>(&mut self, key: SetupKey, ranks: Vec<S>) {
        self.entry = Some(CacheEntry {
            key,
            ranks: Box::new(ranks),
        });
    }
}

/// What a round's tensors (and so its graphs) are built for.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SetupKey {
    /// The address of each rank's stream. The cached tensors hold those
    /// streams, so while the entry lives no other world's stream has one.
    world: Vec<usize>,
    collective: Collective,
    dtype: DType,
    bytes: u64,
    /// The fused collective's row; `None` for the others, which have none.
    hidden: Option<usize>,
}

impl SetupKey {
    fn of(spec: &TimingSpec, world: Vec<usize>) -> SetupKey {
        SetupKey {
            world,
            collective: spec.collective,
            dtype: spec.dtype,
            bytes: spec.bytes,
            hidden: (spec.collective == Collective::AllReduceAddRmsNorm).then_some(spec.hidden),
        }
    }
}

/// Which of a set-up's graphs a graph-mode round replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct GraphKey {
    algo: Algo,
    unfused_via: Option<Algo>,
    calls_per_sample: u32,
}

impl GraphKey {
    /// `None` in eager mode, which replays no graph.
    fn of(spec: &TimingSpec) -> Option<GraphKey> {
        (spec.mode == Mode::Graph).then_some(GraphKey {
            algo: spec.algo,
            unfused_via: spec.unfused_via,
            calls_per_sample: spec.calls_per_sample,
        })
    }
}

/// The address of every rank's stream, which names the world of a set-up.
fn stream_addresses(ranks: &[RankComm]) -> Vec<usize> {
    ranks
        .iter()
        .map(|rank| Arc::as_ptr(rank.stream()) as usize)
        .collect()
}

/// Runs one forced call on fresh random data (with NaN, ±inf, subnormals and
/// signed zeros), outputs poisoned beforehand, and checks every rank's output
/// against an f64 host reference and (except for multi-GPU NCCL, which does not
/// promise it) that all ranks hold the same bits. `hidden`: the row of a
/// fused all-reduce + add + RMSNorm (its new residual is checked too).
pub fn validate(
    ranks: &mut [RankComm],
    collective: Collective,
    dtype: DType,
    algo: Algo,
    bytes: u64,
    hidden: usize,
    seed: u64,
) -> Result<()> {
    let call = Call {
        collective,
        algo,
        bytes,
        hidden,
        unfused_via: None,
    };
    validate_call(ranks, dtype, call, seed)
}

/// [`validate`] of the call `spec` times (its unfused path's all-reduce too).
pub fn validate_spec(ranks: &mut [RankComm], spec: &TimingSpec, seed: u64) -> Result<()> {
    validate_call(ranks, spec.dtype, spec.call(), seed)
}

fn validate_call(ranks: &mut [RankComm], dtype: DType, call: Call, seed: u64) -> Result<()> {
    match dtype {
        DType::Bf16 => validate_typed::<bf16>(ranks, call, seed),
        DType::F16 => validate_typed::<f16>(ranks, call, seed),
        DType::F32 => validate_typed::<f32>(ranks, call, seed),
    }
}

/// One forced call the harness makes.
#[derive(Clone, Copy, Debug)]
struct Call {
    collective: Collective,
    algo: Algo,
    /// Output bytes.
    bytes: u64,
    /// The fused collective's row (elements).
    hidden: usize,
    /// See [`TimingSpec::unfused_via`].
    unfused_via: Option<Algo>,
}

impl Call {
    /// How the call is issued: `algo` forced, or the unfused path with the
    /// all-reduce it names.
    fn select(&self) -> Select {
        match self.unfused_via {
            Some(all_reduce) => Select::Unfused(all_reduce),
            None => Select::Force(self.algo),
        }
    }
}

/// A fault injected on purpose, to test that the tools recover from a broken
/// world: every rank but the last issues one forced call, and the last never
/// does, like a peer whose host stalled. The others' kernels wait for it until
/// the world's timeout, so the world breaks; the result is the error the
/// first rank's `check()` reports (for a custom kernel, its timeout). The call
/// is `spec`'s; its timing fields are not used.
pub fn stall_last_rank(ranks: &mut [RankComm], spec: &TimingSpec) -> Result<()> {
    match spec.dtype {
        DType::Bf16 => stall_typed::<bf16>(ranks, spec.call()),
        DType::F16 => stall_typed::<f16>(ranks, spec.call()),
        DType::F32 => stall_typed::<f32>(ranks, spec.call()),
    }
}

fn stall_typed<T: Element>(ranks: &mut [RankComm], call: Call) -> Result<()> {
    ensure_runs::<T>(ranks, call)?;
    let tensors = call_tensors::<T>(ranks, call, 7)?.0;
    let stalled = ranks.len() - 1;
    let results = for_each_rank(ranks, tensors, |rank, mut t, _| {
        if rank.rank() == stalled {
            return Ok(Ok(()));
        }
        call_once(rank, call.collective, &mut t, call.select())?;
        Ok(rank.check())
    })?;
    results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}

/// Element counts of one rank's input and output for a call of `bytes`.
pub fn message_lengths(
    collective: Collective,
    dtype: DType,
    world: usize,
    bytes: u64,
) -> Result<(usize, usize)> {
    let element = dtype.size_bytes();
    // One element from every rank.
    let unit = collective.output_size(world as u64, element);
    if bytes == 0 || !bytes.is_multiple_of(unit) {
        return Err(Error::Mismatch(format!(
            "{bytes} bytes is not a whole number of {} elements{}",
            dtype.name(),
            if collective == Collective::AllGather {
                format!(" per rank over {world} ranks")
            } else {
                String::new()
            }
        )));
    }
    let per_rank = collective.per_rank_size(world as u64, bytes);
    Ok(((per_rank / element) as usize, (bytes / element) as usize))
}

/// The tokens (rows of `hidden` elements) of a fused call of `bytes`.
pub fn fused_tokens(dtype: DType, bytes: u64, hidden: usize) -> Result<usize> {
    let row = hidden as u64 * dtype.size_bytes();
    if row == 0 || bytes == 0 || !bytes.is_multiple_of(row) {
        return Err(Error::Mismatch(format!(
            "{bytes} bytes is not a whole number of rows of {hidden} {} elements",
            dtype.name()
        )));
    }
    Ok((bytes / row) as usize)
}

/// Every rank of the world is given, and the world takes `call` of `T`s.
fn ensure_runs<T: Element>(ranks: &[RankComm], call: Call) -> Result<()> {
    let first = ranks
        .first()
        .ok_or_else(|| Error::Mismatch("no ranks to run on".into()))?;
    if ranks.len() != first.world_size() {
        return Err(Error::Mismatch(format!(
            "{} ranks given of a world of {}: timing drives every rank",
            ranks.len(),
            first.world_size()
        )));
    }
    match first.would_decline(call.collective, call.algo, call.bytes) {
        None => Ok(()),
        Some(reason) => Err(Error::Declined {
            collective: call.collective,
            algo: call.algo,
            dtype: T::DTYPE,
            bytes: call.bytes,
            reason: reason.to_string(),
        }),
    }
}

/// One rank's tensors for a timed or verified call.
struct Tensors<T> {
    input: CudaSlice<T>,
    output: CudaSlice<T>,
    /// The fused collective's residual and weight.
    norm: Option<(CudaSlice<T>, CudaSlice<T>)>,
}

/// Every rank's tensors for `call`, on data from `seed`, outputs poisoned;
/// the data on the host, and for the fused collective the whole case.
#[allow(clippy::type_complexity)]
fn call_tensors<T: Element>(
    ranks: &[RankComm],
    call: Call,
    seed: u64,
) -> Result<(Vec<Tensors<T>>, Vec<Vec<T>>, Option<AddRmsNormCase<T>>)> {
    let world = ranks.len();
    if call.collective == Collective::AllReduceAddRmsNorm {
        let tokens = fused_tokens(T::DTYPE, call.bytes, call.hidden)?;
        let case = AddRmsNormCase::<T>::random(world, tokens, call.hidden, seed);
        let tensors = ranks
            .iter()
            .zip(&case.inputs)
            .map(|(rank, input)| {
                let mut t = prepare(rank, input, input.len())?;
                let stream = rank.stream();
                t.norm = Some((
                    upload(stream, &case.residual)?,
                    upload(stream, &case.weight)?,
                ));
                Ok(t)
            })
            .collect::<Result<Vec<_>>>()?;
        let inputs = case.inputs.clone();
        return Ok((tensors, inputs, Some(case)));
    }
    let (in_len, out_len) = message_lengths(call.collective, T::DTYPE, world, call.bytes)?;
    let inputs = validation::random_inputs::<T>(world, in_len, seed);
    let tensors = ranks
        .iter()
        .zip(&inputs)
        .map(|(rank, input)| prepare(rank, input, out_len))
        .collect::<Result<Vec<_>>>()?;
    Ok((tensors, inputs, None))
}

fn upload<T: Element>(stream: &Arc<CudaStream>, data: &[T]) -> Result<CudaSlice<T>> {
    let mut slice = alloc_untracked::<T>(stream, data.len())?;
    stream
        .memcpy_htod(data, &mut slice)
        .during("uploading a tensor")?;
    Ok(slice)
}

/// Allocates without cudarc's event tracking: these tensors are captured into
/// graphs, where cudarc's cross-stream events must not be recorded or waited.
fn alloc_untracked<T: Element>(stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<T>> {
    let ctx = stream.context();
    let tracking = ctx.is_event_tracking();
    // SAFETY: slices allocated meanwhile are only used on `stream` by this module,
    // which orders their uses itself; tracking is restored right after.
    unsafe { ctx.disable_event_tracking() };
    let slice = stream.alloc_zeros::<T>(len);
    if tracking {
        // SAFETY: restores the caller's setting.
        unsafe { ctx.enable_event_tracking() };
    }
    slice.during("allocating a tensor")
}

/// Overwrites `slice` with [`POISON_BYTE`] on `stream`.
pub fn poison<T: Element>(stream: &Arc<CudaStream>, slice: &mut CudaSlice<T>) -> Result<()> {
    let bytes = slice.num_bytes();
    let (ptr, _writing) = slice.device_ptr_mut(stream);
    // SAFETY: the range is the live allocation behind `slice`.
    unsafe { driver::memset_d8_async(ptr, POISON_BYTE, bytes, stream.cu_stream()) }
        .during("poisoning an output")
}

fn prepare<T: Element>(rank: &RankComm, inputs: &[T], out_len: usize) -> Result<Tensors<T>> {
    let stream = rank.stream();
    let input = upload(stream, inputs)?;
    let mut output = alloc_untracked::<T>(stream, out_len)?;
    poison(stream, &mut output)?;
    Ok(Tensors {
        input,
        output,
        norm: None,
    })
}

fn call_once<T: Element>(
    rank: &RankComm,
    collective: Collective,
    t: &mut Tensors<T>,
    how: Select,
) -> Result<Algo> {
    let input = t.input.as_view();
    let mut output = t.output.as_view_mut();
    match (collective, &mut t.norm) {
        (Collective::AllReduce, _) => rank.all_reduce(&input, &mut output, how),
        (Collective::AllGather, _) => rank.all_gather(&input, &mut output, how),
        (Collective::AllReduceAddRmsNorm, Some((residual, weight))) => rank.all_reduce_add_rmsnorm(
            &input,
            &mut residual.as_view_mut(),
            &weight.as_view(),
            EPS,
            &mut output,
            how,
        ),
        (Collective::AllReduceAddRmsNorm, None) => Err(Error::Mismatch(
            "a fused call needs a residual and a weight".into(),
        )),
    }
}

/// `n` forced calls, one after another.
fn call_n<T: Element>(
    rank: &RankComm,
    collective: Collective,
    t: &mut Tensors<T>,
    how: Select,
    n: u32,
) -> Result<()> {
    (0..n).try_for_each(|_| call_once(rank, collective, t, how).map(drop))
}

/// One rank's part of a cached set-up.
struct RankSetup<T> {
    /// Declared first, so graphs are destroyed before the tensors they use.
    graphs: HashMap<GraphKey, RankGraph>,
    /// Sample i is the time between marks i and i + 1 (more may be pooled).
    marks: Vec<CudaEvent>,
    tensors: Tensors<T>,
}

/// A graph kept between rounds. A CUDA graph is not tied to a thread (a
/// replay binds its context first); it only must not be used concurrently,
/// and each is used by its rank's thread alone, one round at a time.
struct RankGraph(Captured);
// SAFETY: see above.
unsafe impl Send for RankGraph {}

impl<T> RankSetup<T> {
    fn new(tensors: Tensors<T>) -> RankSetup<T> {
        RankSetup {
            graphs: HashMap::new(),
            marks: Vec::new(),
            tensors,
        }
    }

    /// Grows the pool to at least `count` timing events, created on `ctx`.
    fn pool_marks(&mut self, ctx: &Arc<CudaContext>, count: usize) -> Result<()> {
        while self.marks.len() < count {
            let mark = ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .during("creating a timing event")?;
            self.marks.push(mark);
        }
        Ok(())
    }
}

fn measure_typed<T: Element>(
    cache: &mut TimingCache,
    ranks: &mut [RankComm],
    spec: &TimingSpec,
) -> Result<Vec<f64>> {
    if spec.samples == 0 || spec.calls_per_sample == 0 {
        return Err(Error::Mismatch(
            "samples and calls_per_sample must be at least 1".into(),
        ));
    }
    ensure_runs::<T>(ranks, spec.call())?;
    let key = SetupKey::of(spec, stream_addresses(ranks));
    let setups = match cache.take::<RankSetup<T>>(&key) {
        Some(setups) => setups,
        None => call_tensors::<T>(ranks, spec.call(), spec.bytes ^ 0x5eed)?
            .0
            .into_iter()
            .map(RankSetup::new)
            .collect(),
    };
    let timed = for_each_rank(ranks, setups, |rank, mut setup, barrier| {
        let samples = time_round(rank, &mut setup, spec, barrier)?;
        Ok((samples, setup))
    })?;
    let (per_rank, setups): (Vec<Vec<f64>>, Vec<_>) = timed.into_iter().unzip();
    cache.keep(key, setups);
    Ok((0..spec.samples as usize)
        .map(|s| per_rank.iter().map(|r| r[s]).fold(f64::MIN, f64::max))
        .collect())
}

/// One rank's round on `setup`: warm-up, the host barrier, one untimed
/// sample, then `spec.samples` timed ones, in µs per call. In graph mode it
/// replays the graph of `spec`'s call, captured on first use.
fn time_round<T: Element>(
    rank: &RankComm,
    setup: &mut RankSetup<T>,
    spec: &TimingSpec,
    barrier: &RankBarrier,
) -> Result<Vec<f64>> {
    let stream = rank.stream().clone();
    let how = spec.call().select();
    let calls = spec.calls_per_sample;
    setup.pool_marks(stream.context(), spec.samples as usize + 1)?;
    let RankSetup {
        graphs,
        marks,
        tensors,
    } = setup;
    let marks = &marks[..=spec.samples as usize];
    let graph = match GraphKey::of(spec) {
        None => {
            call_n(rank, spec.collective, tensors, how, spec.warmup)?;
            None
        }
        Some(key) => {
            let graph = match graphs.entry(key) {
                Slot::Occupied(kept) => &kept.into_mut().0,
                Slot::Vacant(slot) => {
                    let graph =
                        rank.capture(|r| call_n(r, spec.collective, tensors, how, calls))?;
                    graph.upload()?;
                    &slot.insert(RankGraph(graph)).0
                }
            };
            for _ in 0..spec.warmup.max(1) {
                graph.launch()?;
            }
            Some(graph)
        }
    };
    // A sample: one replay of the graph, or as many eager calls.
    let mut sample = || match graph {
        Some(graph) => graph.launch(),
        None => call_n(rank, spec.collective, tensors, how, calls),
    };
    rank.check()?;
    barrier.wait(rank.rank())?;
    // One untimed sample absorbs the skew of the threads' start.
    sample()?;
    marks[0]
        .record(&stream)
        .during("recording a timing event")?;
    for mark in &marks[1..] {
        sample()?;
        mark.record(&stream).during("recording a timing event")?;
    }
    let mut samples = Vec::with_capacity(spec.samples as usize);
    for pair in marks.windows(2) {
        let ms = pair[0]
            .elapsed_ms(&pair[1])
            .during("reading a timing event")?;
        samples.push(ms as f64 * 1e3 / calls as f64);
    }
    rank.check()?;
    Ok(samples)
}

fn validate_typed<T: Element>(ranks: &mut [RankComm], call: Call, seed: u64) -> Result<()> {
    let Call {
        collective, bytes, ..
    } = call;
    ensure_runs::<T>(ranks, call)?;
    let world = ranks.len();
    let (tensors, inputs, case) = call_tensors::<T>(ranks, call, seed)?;
    let fallback = ranks[0].fallback_kind();
    // What the unfused path's all-reduce is for this size (its Lamport rule
    // shapes the sums).
    let inner = match call.unfused_via {
        Some(all_reduce)
            if ranks[0]
                .would_decline(Collective::AllReduce, all_reduce, bytes)
                .is_none() =>
        {
            all_reduce
        }
        Some(_) => Algo::Nccl,
        None => unfused_all_reduce(&ranks[0], T::DTYPE, Mode::Eager, bytes),
    };
    let results = for_each_rank(ranks, tensors, |rank, mut t, _| {
        let ran = call_once(rank, collective, &mut t, call.select())?;
        rank.check()?;
        let stream = rank.stream();
        let output = stream
            .clone_dtoh(&t.output)
            .during("downloading an output")?;
        let residual = match &t.norm {
            Some((residual, _)) => stream
                .clone_dtoh(residual)
                .during("downloading a residual")?,
            None => Vec::new(),
        };
        Ok((ran, output, residual))
    })?;
    let describe = |rank: usize, ran: Algo, problem: String| {
        Error::Verification(format!(
            "rank {rank}: {} {} of {bytes} bytes of {} over {world} ranks: {problem}",
            ran.name(),
            collective.name(),
            T::DTYPE.name()
        ))
    };
    let ran = results[0].0;
    if results.iter().any(|(r, _, _)| *r != ran) {
        return Err(describe(0, ran, "ranks ran different algorithms".into()));
    }
    // NCCL across GPUs (on a window too) sums in its own order and does not
    // promise identical bits on every rank: each rank is checked on its own.
    // Every other result (custom kernels, the unfused path's kernel on sums
    // of ours) must be bitwise identical on every rank, so checking rank 0
    // suffices.
    let nccl_sums = match case {
        Some(_) => ran == Algo::Unfused && !inner.is_kernel(),
        None => !ran.is_kernel(),
    };
    let nccl_across_gpus = nccl_sums && fallback == Fallback::Nccl && world > 1;
    if !nccl_across_gpus {
        let outputs: Vec<&[T]> = results.iter().map(|(_, o, _)| o.as_slice()).collect();
        let residuals: Vec<&[T]> = results.iter().map(|(_, _, r)| r.as_slice()).collect();
        validation::check_identical(&outputs)
            .and_then(|()| validation::check_identical(&residuals))
            .map_err(|problem| describe(0, ran, problem))?;
    }
    let path = SumPath::of(ran, inner, world);
    // NCCL's partial sums are rounded once per hop.
    let (extra, ranks_to_check) = if nccl_across_gpus {
        (world - 1, world)
    } else {
        (0, 1)
    };
    for (rank, (_, output, residual)) in results.iter().enumerate().take(ranks_to_check) {
        match &case {
            Some(case) => case.check(path, extra, residual, output),
            None => validation::check_result(collective, ran, nccl_across_gpus, &inputs, output),
        }
        .map_err(|problem| describe(rank, ran, problem))?;
    }
    Ok(())
}

/// The all-reduce the unfused path of a fused call of `bytes` in `mode`
/// runs on `rank`: the all-reduce table's pick, or the fallback where it
/// declines (in a loopback world the reference, which [`Algo::Nccl`] stands
/// for here).
pub fn unfused_all_reduce(rank: &RankComm, dtype: DType, mode: Mode, bytes: u64) -> Algo {
    let picked = rank.policy_choice(Collective::AllReduce, dtype, mode, bytes);
    match rank.would_decline(Collective::AllReduce, picked, bytes) {
        None => picked,
        Some(_) => Algo::Nccl,
    }
}

/// What a GPU is and which software stack (driver, CUDA, NVRTC,
/// NCCL) runs it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GpuStack {
    #[serde(rename = "gpu")]
    pub gpu_name: String,
    pub arch: Arch,
    pub sm_count: u32,
    /// The kernel driver, e.g. "580.95.05" (from /proc/driver/nvidia/version).
    #[serde(rename = "driver")]
    pub driver_version: String,
    /// The CUDA version the driver supports, e.g. "13.0".
    #[serde(rename = "cuda")]
    pub cuda_version: String,
    #[serde(rename = "nvrtc")]
    pub nvrtc_version: Option<String>,
    #[serde(rename = "nccl")]
    pub nccl_version: Option<String>,
}

pub fn gpu_stack(ctx: &Arc<CudaContext>) -> Result<GpuStack> {
    raw::require_driver()?;
    let cuda = raw::driver_cuda_version()?;
    Ok(GpuStack {
        gpu_name: ctx.name().during("querying the GPU name")?,
        arch: arch_of(ctx)?,
        sm_count: sm_count(ctx)?,
        driver_version: kernel_driver_version().unwrap_or_else(|| "unknown".into()),
        cuda_version: format!("{}.{}", cuda / 1000, (cuda % 1000) / 10),
        nvrtc_version: nvrtc_version(),
        nccl_version: nccl_version(),
    })
}

fn kernel_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    text.split_whitespace()
        .find(|word| {
            word.split('.').count() >= 2
                && word
                    .split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
}

fn nvrtc_version() -> Option<String> {
    raw::require_nvrtc().ok()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    let result = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (result == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then(|| format!("{major}.{minor}"))
}

/// One GPU and how it reaches the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub arch: Arch,
    /// `(peer ordinal, link)` for every other GPU.
    pub links: Vec<(usize, PairLink)>,
}

impl DeviceInfo {
    /// How this GPU reaches `peer` (a GPU it has no entry for: not visible).
    pub fn reach_to(&self, peer: usize) -> Reach {
        self.links
            .iter()
            .find(|(p, _)| *p == peer)
            .map_or(Reach::NotVisible, |(_, l)| l.reach())
    }
}

/// Every visible GPU and the pairwise links between them.
pub fn discover() -> Result<Vec<DeviceInfo>> {
    let count = kernels::visible_gpus()?;
    let contexts = (0..count)
        .map(kernels::open_device)
        .collect::<Result<Vec<_>>>()?;
    let mut devices = Vec::with_capacity(count);
    for (i, ctx) in contexts.iter().enumerate() {
        let mut links = Vec::new();
        for (j, other) in contexts.iter().enumerate() {
            if i != j {
                links.push((j, pair_link(ctx.cu_device(), other.cu_device())?));
            }
        }
        devices.push(DeviceInfo {
            ordinal: i,
            name: ctx.name().during("querying the GPU name")?,
            arch: arch_of(ctx)?,
            links,
        });
    }
    Ok(devices)
}

/// Builds a world from a description: `Some(n)` ranks on GPU 0 (loopback), or
/// one rank on each of `devices`.
pub fn build_world(
    loopback_ranks: Option<usize>,
    devices: &[usize],
    options: Options,
) -> Result<Vec<RankComm>> {
    raw::require_driver()?;
    match loopback_ranks {
        Some(n) => {
            let ctx = kernels::open_device(devices.first().copied().unwrap_or(0))?;
            World::loopback(ctx, n, options)
        }
        None => {
            let streams = devices
                .iter()
                .map(|&d| {
                    kernels::open_device(d)?
                        .new_stream()
                        .during("opening a GPU stream")
                })
                .collect::<Result<Vec<_>>>()?;
            World::devices(streams, options)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_lengths_follow_the_output_size_convention() {
        assert_eq!(
            message_lengths(Collective::AllReduce, DType::Bf16, 4, 64).unwrap(),
            (32, 32)
        );
        assert_eq!(
            message_lengths(Collective::AllGather, DType::Bf16, 4, 64).unwrap(),
            (8, 32)
        );
        assert!(message_lengths(Collective::AllGather, DType::F32, 4, 24).is_err());
        assert!(message_lengths(Collective::AllReduce, DType::F32, 2, 6).is_err());
        assert!(message_lengths(Collective::AllReduce, DType::F32, 2, 0).is_err());
    }

    const SPEC: TimingSpec = TimingSpec {
        collective: Collective::AllReduce,
        dtype: DType::Bf16,
        algo: Algo::OneShotPush,
        bytes: 65_536,
        mode: Mode::Graph,
        calls_per_sample: 8,
        samples: 25,
        warmup: 2,
        hidden: 4096,
        unfused_via: None,
    };
    const FUSED: TimingSpec = TimingSpec {
        collective: Collective::AllReduceAddRmsNorm,
        algo: Algo::Unfused,
        ..SPEC
    };
    const WORLD: [usize; 2] = [0x1000, 0x2000];

    fn key(spec: &TimingSpec) -> SetupKey {
        SetupKey::of(spec, WORLD.to_vec())
    }

    /// A cache holding a (stand-in) set-up of `spec` on `WORLD`.
    fn cached(spec: &TimingSpec) -> TimingCache {
        let mut cache = TimingCache::default();
        cache.keep(key(spec), vec![1u8, 2]);
        cache
    }

    /// Another algorithm, mode, warm-up or sample count at the same size
    /// times on the same tensors and events.
    #[test]
    fn every_call_at_the_same_size_reuses_the_set_up() {
        let reusing = [
            SPEC,
            TimingSpec {
                algo: Algo::TwoShotPull,
                ..SPEC
            },
            TimingSpec {
                mode: Mode::Eager,
                ..SPEC
            },
            TimingSpec {
                samples: 100,
                warmup: 0,
                calls_per_sample: 1,
                ..SPEC
            },
            // The row is the fused collective's alone.
            TimingSpec {
                hidden: 8192,
                ..SPEC
            },
        ];
        for spec in reusing {
            let mut cache = cached(&SPEC);
            assert_eq!(cache.take::<u8>(&key(&spec)), Some(vec![1, 2]), "{spec:?}");
            // Taken out for the round, kept again only after it.
            assert_eq!(cache.take::<u8>(&key(&SPEC)), None);
        }
    }

    /// Another size, collective, dtype, row or world needs other tensors:
    /// the old set-up, graphs and all, is dropped, not kept beside the new.
    #[test]
    fn anything_else_drops_the_set_up() {
        let others = [
            (
                SPEC,
                key(&TimingSpec {
                    bytes: 131_072,
                    ..SPEC
                }),
            ),
            (SPEC, key(&FUSED)),
            (
                SPEC,
                key(&TimingSpec {
                    dtype: DType::F32,
                    ..SPEC
                }),
            ),
            (
                FUSED,
                key(&TimingSpec {
                    hidden: 8192,
                    ..FUSED
                }),
            ),
            (SPEC, SetupKey::of(&SPEC, vec![0x1000, 0x3000])),
            (SPEC, SetupKey::of(&SPEC, vec![0x1000])),
        ];
        for (kept, other) in others {
            let mut cache = cached(&kept);
            assert_eq!(cache.take::<u8>(&other), None, "{other:?}");
            assert_eq!(cache.take::<u8>(&key(&kept)), None, "{other:?}");
        }
        // A set-up of another element type is not this one.
        assert_eq!(cached(&SPEC).take::<u16>(&key(&SPEC)), None);
    }

    /// A failed call drops the set-up: what it left in the tensors and
    /// graphs is unknown.
    #[test]
    fn an_error_drops_the_set_up() {
        let mut cache = cached(&SPEC);
        let no_samples = TimingSpec { samples: 0, ..SPEC };
        assert!(cache.measure(&mut [], &no_samples).is_err());
        assert!(cache.entry.is_none());
    }

    /// In graph mode a set-up keeps a graph per forced call; eager rounds
    /// replay none.
    #[test]
    fn graphs_are_kept_per_forced_call() {
        let graph = GraphKey::of(&SPEC).expect("graph mode");
        assert_eq!(
            GraphKey::of(&TimingSpec {
                mode: Mode::Eager,
                ..SPEC
            }),
            None
        );
        let same = TimingSpec {
            samples: 3,
            warmup: 9,
            ..SPEC
        };
        assert_eq!(GraphKey::of(&same), Some(graph));
        let others = [
            TimingSpec {
                algo: Algo::OneShotPull,
                ..SPEC
            },
            TimingSpec {
                calls_per_sample: 4,
                ..SPEC
            },
            FUSED,
            TimingSpec {
                unfused_via: Some(Algo::OneShotPull),
                ..FUSED
            },
        ];
        let mut seen = vec![graph];
        for spec in others {
            let other = GraphKey::of(&spec).expect("graph mode");
            assert!(!seen.contains(&other), "{spec:?}");
            seen.push(other);
        }
    }
}
