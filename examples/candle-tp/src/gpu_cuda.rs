//! The worker: one rank on one GPU, on candle's CUDA backend.
//!
//! Every tensor, every collective and every capture is on the one stream of
//! candle's device (`Device::new_cuda_with_stream`): NCCL's communicator and
//! colltune's `RankComm` are built on it, so their launches sit between
//! candle's kernels exactly as in an engine. cudarc's event tracking is off
//! (one stream orders everything; a capture cannot wait on events recorded
//! outside it).
//!
//! A decode step reads its tokens and positions (one of each per sequence of
//! the batch) from a small device buffer written before each step, and
//! writes its logits and next tokens into buffers allocated before any
//! capture (a tensor allocated inside a capture belongs to the graph and
//! cannot be read after it). In graph mode that step
//! is captured once on candle's stream, with the communicator's launches
//! inside, and replayed for every token.

use std::sync::Arc;
use std::time::Instant;

use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, DType, Device, InplaceOp1, Layout, Shape, Tensor,
};
use colltune_candle::Comm;
use colltune_candle::kernels::cudarc::driver::{CudaGraph, CudaSlice, CudaStream, CudaView, sys};
use colltune_candle::kernels::cudarc::nccl::safe::{Comm as NcclComm, Id, ReduceOp};
use colltune_candle::kernels::{self, Join, NcclId, Options, ProcessSpec, cudarc};
use half::bf16;

use crate::cli::{JoinArg, Resolved, WorkerArgs};
use crate::config::Config;
use crate::model::{Collectives, LocalCopy, RankModel, greedy};
use crate::plan::RankDims;
use crate::prompt::Prefill;
use crate::report::{LogitDiff, RankReport, RunRecord};
use crate::weights::{Safetensors, Seeded, WeightSource};

/// Sets `NCCL_NVLS_ENABLE=0` when it is unset and refuses a process that
/// asks for NVLink multicast (`kernels::raw::keep_multicast_off`).
///
/// # Safety
/// It writes the process environment: no other thread may exist yet.
pub unsafe fn keep_multicast_off() -> Result<(), String> {
    // SAFETY: passed on to the caller.
    unsafe { kernels::raw::keep_multicast_off() }.map_err(|e| e.to_string())
}

pub fn device_count() -> Result<usize, String> {
    cudarc::driver::result::init().map_err(|e| format!("cannot initialise CUDA (cuInit): {e}"))?;
    let n = cudarc::driver::result::device::get_count()
        .map_err(|e| format!("cannot count the GPUs: {e}"))?;
    if n <= 0 {
        return Err("no CUDA GPU is visible".into());
    }
    Ok(n as usize)
}

/// A fresh NCCL unique id for the `nccl` back-end, hex.
pub fn nccl_unique_id() -> Result<String, String> {
    let id = Id::new().map_err(|e| format!("ncclGetUniqueId: {e:?}"))?;
    Ok(NcclId::from_c_chars(id.internal()).to_hex())
}

/// A fresh NCCL unique id for colltune's communicator, hex.
pub fn colltune_unique_id() -> Result<String, String> {
    NcclId::new()
        .map(|id| id.to_hex())
        .map_err(|e| format!("colltune's NCCL id: {e}"))
}

fn cerr(e: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    AllReduce,
    AllGather,
}

/// cudarc's NCCL, called directly (as candle's own multi-process example does).
struct NcclBackend {
    comm: NcclComm,
    world: usize,
}

/// An NCCL collective as a candle op: reads the (contiguous, bf16) input's
/// device memory, allocates the output on the same stream and runs NCCL.
struct NcclOp<'a> {
    kind: Kind,
    on: &'a NcclBackend,
}

impl CustomOp1 for NcclOp<'_> {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::AllReduce => "all-reduce",
            Kind::AllGather => "all-gather",
        }
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("{} runs on CUDA tensors only", self.name())
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let Some((start, end)) = l.contiguous_offsets() else {
            candle_core::bail!("{} needs a contiguous tensor", self.name());
        };
        let src: CudaView<'_, bf16> = s.as_cuda_slice::<bf16>()?.slice(start..end);
        let n = end - start;
        let world = self.on.world;
        let (out_len, shape) = match self.kind {
            Kind::AllReduce => (n, l.shape().clone()),
            Kind::AllGather => (world * n, Shape::from((world, n))),
        };
        let dev = s.device.clone();
        // SAFETY: every element is written by the collective before it is read.
        let mut dst: CudaSlice<bf16> = unsafe { dev.alloc::<bf16>(out_len)? };
        match self.kind {
            Kind::AllReduce => self.on.comm.all_reduce(&src, &mut dst, &ReduceOp::Sum),
            Kind::AllGather => self.on.comm.all_gather(&src, &mut dst),
        }
        .map_err(|e| cerr(format!("NCCL: {e:?}")))?;
        Ok((CudaStorage::wrap_cuda_slice(dst, dev), shape))
    }
}

impl Collectives for NcclBackend {
    fn all_reduce(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let op = NcclOp {
            kind: Kind::AllReduce,
            on: self,
        };
        x.contiguous()?.apply_op1_no_bwd(&op)
    }
    fn all_gather(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let op = NcclOp {
            kind: Kind::AllGather,
            on: self,
        };
        x.contiguous()?.apply_op1_no_bwd(&op)
    }
}

/// colltune's adapter; each call finds its mode (graph while capturing). The
/// all-reduces followed by the residual add and an RMSNorm are one fused
/// call (`all_reduce_add_rmsnorm`).
impl Collectives for Comm {
    fn all_reduce(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Comm::all_reduce(self, x)
    }
    fn all_gather(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Comm::all_gather(self, x)
    }
    fn all_reduce_add_rms_norm(
        &self,
        partial: &Tensor,
        residual: &Tensor,
        weight: &Tensor,
        eps: f32,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        Comm::all_reduce_add_rms_norm(self, partial, residual, weight, eps)
    }
}

/// colltune's all-reduce, then candle's add and `rms_norm`: the fused call's
/// baseline, on the same communicator.
struct Unfused(Arc<Comm>);

impl Collectives for Unfused {
    fn all_reduce(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.0.all_reduce(x)
    }
    fn all_gather(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.0.all_gather(x)
    }
}

enum Backend {
    None(LocalCopy),
    Nccl(NcclBackend),
    Colltune(Arc<Comm>),
    ColltuneUnfused(Unfused),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::None(_) => "none",
            Backend::Nccl(_) => "nccl",
            Backend::Colltune(_) => "colltune",
            Backend::ColltuneUnfused(_) => "colltune-unfused",
        }
    }

    fn comm(&self) -> &dyn Collectives {
        match self {
            Backend::None(c) => c,
            Backend::Nccl(c) => c,
            Backend::Colltune(c) => c.as_ref(),
            Backend::ColltuneUnfused(c) => c,
        }
    }

    /// colltune's communicator, for either colltune back-end.
    fn colltune(&self) -> Option<&Arc<Comm>> {
        match self {
            Backend::Colltune(c) | Backend::ColltuneUnfused(Unfused(c)) => Some(c),
            Backend::None(_) | Backend::Nccl(_) => None,
        }
    }

    /// The algorithms colltune ran since the last call (`collective:algorithm`).
    fn take_algorithms(&self) -> Vec<String> {
        let Some(c) = self.colltune() else {
            return Vec::new();
        };
        let ran = c.take_algorithms().into_iter();
        ran.map(|(c, a)| format!("{}:{}", c.name(), a.name()))
            .collect()
    }

    /// Waits for this back-end's work and surfaces a fault a peer caused.
    fn check(&self, stream: &CudaStream) -> Result<(), String> {
        match self.colltune() {
            Some(c) => c.rank().check().map_err(|e| format!("colltune: {e}")),
            None => stream
                .synchronize()
                .map_err(|e| format!("{}: the stream failed: {e}", self.name())),
        }
    }
}

/// Writes host values into a u32 tensor's device memory, on candle's stream.
struct Upload<'a>(&'a [u32]);

impl InplaceOp1 for Upload<'_> {
    fn name(&self) -> &'static str {
        "upload"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("upload writes CUDA tensors only")
    }

    fn cuda_fwd(&self, s: &mut CudaStorage, l: &Layout) -> candle_core::Result<()> {
        let Some((start, end)) = l.contiguous_offsets() else {
            candle_core::bail!("upload needs a contiguous tensor");
        };
        if end - start != self.0.len() {
            candle_core::bail!("upload of {} values into {}", self.0.len(), end - start);
        }
        let stream = s.device.cuda_stream();
        let slice = s.as_cuda_slice_mut::<u32>()?;
        // Through the stream itself: candle's own upload caches small host
        // arrays by content (for captures), which would keep every step's.
        stream
            .memcpy_htod(self.0, &mut slice.slice_mut(start..end))
            .map_err(cerr)
    }
}

/// Buffers a decode step reads and writes, allocated before any capture.
struct Statics {
    batch: usize,
    /// `[tokens of the batch, then their positions]`.
    inputs: Tensor,
    /// `[batch]` greedy tokens.
    next: Tensor,
    /// `[batch, vocab]`.
    logits: Tensor,
}

impl Statics {
    fn new(model: &RankModel, batch: usize) -> candle_core::Result<Statics> {
        let dev = &model.device;
        Ok(Statics {
            batch,
            inputs: Tensor::zeros(2 * batch, DType::U32, dev)?,
            next: Tensor::zeros(batch, DType::U32, dev)?,
            logits: Tensor::zeros((batch, model.cfg.vocab), model.dtype, dev)?,
        })
    }

    /// Sequence `b` decodes `tokens[b]` at position `starts[b] + step`.
    fn set(&self, tokens: &[u32], starts: &[usize], step: usize) -> candle_core::Result<()> {
        let mut host = tokens.to_vec();
        host.extend(starts.iter().map(|&p| (p + step) as u32));
        self.inputs.inplace_op1(&Upload(&host))
    }

    fn next_tokens(&self) -> candle_core::Result<Vec<u32>> {
        self.next.to_vec1::<u32>()
    }
}

/// One decode step from the static inputs into the static outputs.
fn decode_step(
    model: &RankModel,
    cache: &crate::model::KvCache,
    s: &Statics,
    comm: &dyn Collectives,
) -> candle_core::Result<()> {
    let b = s.batch;
    let tokens = s.inputs.narrow(0, 0, b)?.reshape((b, 1))?;
    let positions = s.inputs.narrow(0, b, b)?.reshape((b, 1))?;
    let logits = model.forward(&tokens, &positions, None, cache, comm)?;
    s.logits.slice_set(&logits, 1, 0)?;
    s.next.slice_set(&greedy(&logits)?, 0, 0)?;
    Ok(())
}

/// What `issue` launches on `stream`, captured (thread-local mode) into a
/// graph, instantiated. `what` names the work in errors.
pub(super) fn capture(
    stream: &Arc<CudaStream>,
    what: &str,
    issue: impl FnOnce() -> candle_core::Result<()>,
) -> Result<CudaGraph, String> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| format!("cuStreamBeginCapture: {e}"))?;
    let issued = issue();
    // End the capture even when issuing failed, so the stream stays usable.
    let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    issued.map_err(|e| format!("issuing {what} into the capture: {e}"))?;
    ended
        .map_err(|e| format!("ending the capture / instantiating the graph: {e}"))?
        .ok_or_else(|| "the capture recorded no work".to_string())
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

struct Outcome {
    record: RunRecord,
    first_step_logits: Vec<f32>,
}

struct Bench<'a> {
    model: &'a RankModel,
    stream: Arc<CudaStream>,
    cuda: candle_core::CudaDevice,
    /// The batch's prompts, padded into one prefill.
    prompts: Prefill,
    decode: usize,
    warmup: usize,
    chatty: bool,
}

impl Bench<'_> {
    /// The batch's prompts through the model; each sequence's first token.
    fn prefill(
        &self,
        cache: &crate::model::KvCache,
        comm: &dyn Collectives,
        inputs: &[Tensor; 3],
    ) -> candle_core::Result<Vec<u32>> {
        let [tokens, positions, rows] = inputs;
        let logits = self
            .model
            .forward(tokens, positions, Some(rows), cache, comm)?;
        greedy(&logits)?.to_vec1::<u32>()
    }

    fn run(&self, backend: &Backend, mode: &str) -> Result<Outcome, String> {
        let what = format!("{} {mode}", backend.name());
        let e = |err: candle_core::Error| format!("{what}: {err}");
        let model = self.model;
        let comm = backend.comm();
        let dev = &model.device;
        // candle uploads small kernel parameters (shapes, strides); with this
        // cache they are uploaded once and a capture finds them on the device.
        let _param_cache = self.cuda.enable_cuda_graph_htod_cache();
        let p = &self.prompts;
        let cache = model.new_cache(p.batch).map_err(e)?;
        let statics = Statics::new(model, p.batch).map_err(e)?;
        let inputs = [
            Tensor::from_vec(p.tokens.clone(), (p.batch, p.len), dev).map_err(e)?,
            Tensor::from_vec(p.positions.clone(), (p.batch, p.len), dev).map_err(e)?,
            Tensor::new(p.last_rows.as_slice(), dev).map_err(e)?,
        ];

        let started = Instant::now();
        let mut next = self.prefill(&cache, comm, &inputs).map_err(e)?;
        for i in 0..self.warmup.max(1) {
            statics.set(&next, &p.lens, i).map_err(e)?;
            decode_step(model, &cache, &statics, comm).map_err(e)?;
            next = statics.next_tokens().map_err(e)?;
        }
        backend.check(&self.stream)?;
        if self.chatty {
            println!("{what}: warmed up in {:.0} ms", ms(started));
        }
        let graph = if mode == "graph" {
            let t = Instant::now();
            let g = capture(&self.stream, "the decode step", || {
                decode_step(model, &cache, &statics, comm)
            })
            .map_err(|err| format!("{what}: {err}"))?;
            g.upload()
                .map_err(|err| format!("{what}: uploading the graph: {err}"))?;
            if self.chatty {
                println!("{what}: captured one decode step in {:.1} ms", ms(t));
            }
            Some(g)
        } else {
            None
        };
        backend.take_algorithms();

        let t = Instant::now();
        let mut next = self.prefill(&cache, comm, &inputs).map_err(e)?;
        let prefill_ms = ms(t);
        let mut tokens: Vec<Vec<u32>> = next.iter().map(|&t| vec![t]).collect();
        let mut step_ms = Vec::with_capacity(self.decode);
        let mut first = Vec::new();
        for i in 0..self.decode {
            let t = Instant::now();
            statics.set(&next, &p.lens, i).map_err(e)?;
            match &graph {
                Some(g) => g
                    .launch()
                    .map_err(|err| format!("{what}: replaying the graph: {err}"))?,
                None => decode_step(model, &cache, &statics, comm).map_err(e)?,
            }
            next = statics.next_tokens().map_err(e)?;
            step_ms.push(ms(t));
            if i == 0 {
                first = statics
                    .logits
                    .to_dtype(DType::F32)
                    .and_then(|l| l.flatten_all())
                    .and_then(|l| l.to_vec1::<f32>())
                    .map_err(e)?;
            }
            for (seq, &t) in tokens.iter_mut().zip(&next) {
                seq.push(t);
            }
        }
        backend.check(&self.stream)?;
        drop(graph);
        let mut sorted = step_ms.clone();
        sorted.sort_by(f64::total_cmp);
        if self.chatty {
            println!(
                "{what}: prefill {prefill_ms:.2} ms, TPOT median {:.3} ms over {} steps",
                crate::report::percentile(&sorted, 50.0),
                step_ms.len()
            );
        }
        Ok(Outcome {
            record: RunRecord {
                backend: backend.name().into(),
                mode: mode.into(),
                prefill_ms,
                step_ms,
                tokens,
                algorithms: backend.take_algorithms(),
                logits: None,
            },
            first_step_logits: first,
        })
    }
}

/// This process's rank of colltune's world, on `device`'s stream.
fn colltune_comm(
    w: &WorkerArgs,
    device: &Device,
    rank: usize,
    world: usize,
) -> Result<Comm, String> {
    let join = match w
        .colltune_join
        .as_ref()
        .ok_or("colltune needs --colltune-join")?
    {
        JoinArg::Nccl(hex) => {
            Join::Nccl(NcclId::from_hex(hex).map_err(|e| format!("--colltune-join: {e}"))?)
        }
        JoinArg::Files(dir) => Join::Files(dir.clone()),
    };
    let spec = ProcessSpec::new(rank, world, join).with_dtype(kernels::DType::Bf16);
    let comm = Comm::process(device, spec, Options::default()).map_err(|e| e.to_string())?;
    println!("rank {rank}: colltune {:?}", comm.rank());
    Ok(comm)
}

fn weight_source(w: &WorkerArgs, r: &Resolved) -> Result<Box<dyn WeightSource>, String> {
    if r.weights.is_empty() {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        Ok(Box::new(Seeded {
            seed: w.run.seed,
            threads: (cores / w.run.world).max(1),
        }))
    } else {
        Ok(Box::new(Safetensors::open(&r.weights)?))
    }
}

fn load_model(
    w: &WorkerArgs,
    cfg: &Config,
    source: &dyn WeightSource,
    dims: RankDims,
    device: &Device,
    max_positions: usize,
) -> Result<RankModel, String> {
    let t = Instant::now();
    let layers = cfg.layers;
    let mut progress = |l: usize| {
        if w.rank == 0 && (l + 1).is_multiple_of((layers / 4).max(1)) {
            println!("  layer {}/{layers} loaded", l + 1);
        }
    };
    let model = RankModel::load(
        cfg,
        dims,
        source,
        DType::BF16,
        device,
        max_positions,
        &mut progress,
    )
    .map_err(|e| format!("loading the model: {e}"))?;
    println!(
        "rank {}/{}: {} of {} loaded in {:.1} s ({})",
        dims.rank,
        dims.world,
        if dims.world == 1 { "all" } else { "its part" },
        cfg.name,
        t.elapsed().as_secs_f64(),
        source.describe()
    );
    Ok(model)
}

/// GPU `gpu` as candle's device with a stream of its own, cudarc's event
/// tracking off, and the GPU's name: what a process that issues everything on
/// that one stream works with.
pub(super) fn open_gpu(
    gpu: usize,
) -> Result<(Device, candle_core::CudaDevice, Arc<CudaStream>, String), String> {
    let device =
        Device::new_cuda_with_stream(gpu).map_err(|e| format!("cannot open GPU {gpu}: {e}"))?;
    let cuda = device.as_cuda_device().map_err(|e| e.to_string())?.clone();
    // SAFETY: the caller issues everything on the one stream of `device`, so
    // stream order alone orders every use; no tensor exists yet.
    unsafe { cuda.disable_event_tracking() };
    let stream = cuda.cuda_stream();
    let gpu_name = stream
        .context()
        .name()
        .unwrap_or_else(|_| "unknown GPU".into());
    Ok((device, cuda, stream, gpu_name))
}

pub fn worker(w: &WorkerArgs) -> Result<(), String> {
    let resolved = w.run.validate()?;
    let cfg = &resolved.cfg;
    let (rank, world) = (w.rank, w.run.world);
    let dims = RankDims::new(cfg, rank, world)?;
    let (device, cuda, stream, gpu_name) = open_gpu(w.gpu)?;
    println!("rank {rank}/{world}: GPU {} ({gpu_name})", w.gpu);

    // The communicators, in the same order on every rank (each is collective).
    let mut backends = Vec::new();
    for name in &w.run.backends {
        let t = Instant::now();
        let b = match name.as_str() {
            "none" => Backend::None(LocalCopy { rank, world }),
            "nccl" => {
                let hex = w
                    .nccl_id
                    .as_deref()
                    .ok_or("the nccl back-end needs --nccl-id")?;
                let id = NcclId::from_hex(hex).map_err(|e| format!("--nccl-id: {e}"))?;
                let id = Id::uninit(id.0.map(|b| b as std::ffi::c_char));
                let comm = NcclComm::from_rank(stream.clone(), rank, world, id)
                    .map_err(|e| format!("NCCL communicator (ncclCommInitRank): {e:?}"))?;
                Backend::Nccl(NcclBackend { comm, world })
            }
            // Both colltune back-ends run on one communicator (one join).
            "colltune" | "colltune-unfused" => {
                let comm = match backends.iter().find_map(Backend::colltune) {
                    Some(comm) => Arc::clone(comm),
                    None => Arc::new(colltune_comm(w, &device, rank, world)?),
                };
                match name.as_str() {
                    "colltune" => Backend::Colltune(comm),
                    _ => Backend::ColltuneUnfused(Unfused(comm)),
                }
            }
            other => return Err(format!("unknown back-end `{other}`")),
        };
        if name != "none" {
            println!(
                "rank {rank}: {name} communicator ready in {:.2} s",
                t.elapsed().as_secs_f64()
            );
        }
        backends.push(b);
    }

    let source = weight_source(w, &resolved)?;
    let prefill = Prefill::new(&resolved.prompts)?;
    let max_positions = prefill.len + w.run.warmup.max(1).max(w.run.decode) + 1;
    let model = load_model(w, cfg, source.as_ref(), dims, &device, max_positions)?;
    let bench = Bench {
        model: &model,
        stream: stream.clone(),
        cuda: cuda.clone(),
        prompts: prefill.clone(),
        decode: w.run.decode,
        warmup: w.run.warmup,
        chatty: rank == 0,
    };
    let mut outcomes = Vec::new();
    for mode in &w.run.modes {
        for b in &backends {
            outcomes.push(bench.run(b, mode)?);
        }
    }
    println!("rank {rank}: all runs done");
    // Every rank leaves its communicators together (colltune's say goodbye).
    drop(bench);
    drop(backends);

    let mut reference_tokens = None;
    if rank == 0 && !w.run.no_reference {
        let whole = if world == 1 {
            model
        } else {
            drop(model);
            println!("rank 0: loading the one-rank reference model");
            let dims = RankDims::new(cfg, 0, 1)?;
            load_model(w, cfg, source.as_ref(), dims, &device, max_positions)?
        };
        let bench = Bench {
            model: &whole,
            stream: stream.clone(),
            cuda: cuda.clone(),
            prompts: prefill.clone(),
            decode: w.run.decode,
            warmup: 1,
            chatty: false,
        };
        let reference = bench.run(&Backend::None(LocalCopy { rank: 0, world: 1 }), "eager")?;
        for o in &mut outcomes {
            o.record.logits = Some(LogitDiff::between(
                &o.first_step_logits,
                &reference.first_step_logits,
                cfg.vocab,
            )?);
        }
        println!("rank 0: reference run done");
        reference_tokens = Some(reference.record.tokens);
    }

    let report = RankReport {
        rank,
        world,
        model: cfg.name.clone(),
        shape: cfg.shape(),
        batch: prefill.batch,
        gpu: gpu_name,
        weights: source.describe(),
        runs: outcomes.into_iter().map(|o| o.record).collect(),
        reference_tokens,
    };
    let text = serde_json::to_string(&report).map_err(|e| e.to_string())?;
    std::fs::write(&w.report, text)
        .map_err(|e| format!("cannot write the report {}: {e}", w.report.display()))?;
    Ok(())
}
