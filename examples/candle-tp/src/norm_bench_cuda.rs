//! `norm-bench` on a GPU: colltune's add + RMSNorm in a world of one rank
//! against candle's, on candle's one stream, eager and captured.
//!
//! As in the worker, every tensor, colltune's rank and every capture are on
//! the stream of candle's device, cudarc's event tracking is off, and
//! candle's parameter cache is on, so that a capture finds the small
//! parameters the warm-up uploaded. The rank joins through NCCL as `run
//! --world 1` does, so what its tables pick here is what the model's
//! `colltune` back-end runs at W=1.
//!
//! A sample is `calls` calls back to back between two CUDA events (in graph
//! mode: one replay of a graph holding the `calls` calls, since a graph of
//! one call would time its launch more than the call); the samples are
//! queued without a host wait between them, so the events time the GPU (and
//! in eager mode the host's issuing too, when it is the slower: that is the
//! eager call's cost). Each sample's time over `calls` is one per-call time.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::ops::rms_norm;
use colltune_candle::Comm;
use colltune_candle::kernels::cudarc::driver::{CudaEvent, CudaStream, DriverError, sys};
use colltune_candle::kernels::{Join, NcclId, Options, ProcessSpec};

use super::imp::{capture, open_gpu};
use crate::launch::BUILD;
use crate::norm_bench::{self, Check, Diff, Dtype, Impl, Mode, NormBenchArgs, Row, Setting, Stats};

/// One case's inputs, on the device.
struct Case {
    partial: Tensor,
    residual: Tensor,
    weight: Tensor,
    eps: f32,
}

impl Case {
    fn new(
        a: &NormBenchArgs,
        dtype: Dtype,
        tokens: usize,
        dev: &Device,
    ) -> candle_core::Result<Case> {
        let [p, r, w] = norm_bench::inputs(a.seed, tokens, a.hidden);
        let up = |v: Vec<f32>, shape: &[usize]| {
            Tensor::from_vec(v, shape, &Device::Cpu)?
                .to_dtype(dtype.candle())?
                .to_device(dev)
        };
        Ok(Case {
            partial: up(p, &[tokens, a.hidden])?,
            residual: up(r, &[tokens, a.hidden])?,
            weight: up(w, &[a.hidden])?,
            eps: a.eps,
        })
    }

    /// `(rows, new residual)` by `imp`.
    fn run(&self, imp: Impl, comm: &Comm) -> candle_core::Result<(Tensor, Tensor)> {
        match imp {
            Impl::Colltune => {
                comm.all_reduce_add_rms_norm(&self.partial, &self.residual, &self.weight, self.eps)
            }
            // Exactly what the model's unfused path runs after its
            // all-reduce (model.rs, `Collectives::all_reduce_add_rms_norm`).
            Impl::Candle => {
                let x = (&self.residual + &self.partial)?;
                Ok((rms_norm(&x, &self.weight, self.eps)?, x))
            }
        }
    }

    /// `calls` calls by `imp`, their results dropped (freed on the stream)
    /// as the model drops its intermediates.
    fn run_n(&self, imp: Impl, comm: &Comm, calls: usize) -> candle_core::Result<()> {
        for _ in 0..calls {
            self.run(imp, comm)?;
        }
        Ok(())
    }
}

fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

/// `imp`'s rows and new residual in `mode`, on the host. In graph mode the
/// call is captured with copies of its outputs into tensors allocated before
/// the capture (a graph's own allocations cannot be read after it).
fn outputs(
    case: &Case,
    imp: Impl,
    comm: &Comm,
    mode: Mode,
    stream: &Arc<CudaStream>,
) -> Result<[Vec<f32>; 2], String> {
    let e = |err: candle_core::Error| format!("{} {}: {err}", imp.name(), mode.name());
    // The graph is kept until its outputs are read.
    let (rows, x, _graph) = match mode {
        Mode::Eager => {
            let (rows, x) = case.run(imp, comm).map_err(e)?;
            (rows, x, None)
        }
        Mode::Graph => {
            let rows = case.partial.zeros_like().map_err(e)?;
            let x = case.partial.zeros_like().map_err(e)?;
            let graph = capture(stream, "the checked call", || {
                let (r, n) = case.run(imp, comm)?;
                rows.slice_set(&r, 0, 0)?;
                x.slice_set(&n, 0, 0)
            })?;
            graph
                .launch()
                .map_err(|err| format!("replaying the checked call: {err}"))?;
            (rows, x, Some(graph))
        }
    };
    Ok([values(&rows).map_err(e)?, values(&x).map_err(e)?])
}

/// colltune's outputs against candle's, in `mode`.
fn check(
    case: &Case,
    comm: &Comm,
    mode: Mode,
    dtype: Dtype,
    stream: &Arc<CudaStream>,
) -> Result<Check, String> {
    let [rows, x] = outputs(case, Impl::Colltune, comm, mode, stream)?;
    let [want_rows, want_x] = outputs(case, Impl::Candle, comm, mode, stream)?;
    Ok(Check {
        rows: Diff::between(&rows, &want_rows)?,
        residual: Diff::between(&x, &want_x)?,
        tolerance: dtype.tolerance(),
    })
}

/// Per-call times (µs) of `samples` samples after `warmup` untimed ones.
fn timed(
    stream: &Arc<CudaStream>,
    (warmup, samples, calls): (usize, usize, usize),
    mut sample: impl FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    let de = |err: DriverError| format!("CUDA event: {err}");
    for _ in 0..warmup {
        sample()?;
    }
    // Timing events (cudarc's default disables timing), made before the
    // first is recorded.
    let ctx = stream.context();
    let event = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
    let events: Vec<(CudaEvent, CudaEvent)> = (0..samples)
        .map(|_| Ok((event()?, event()?)))
        .collect::<Result<_, _>>()
        .map_err(de)?;
    stream.synchronize().map_err(de)?;
    for (start, end) in &events {
        start.record(stream).map_err(de)?;
        sample()?;
        end.record(stream).map_err(de)?;
    }
    // `elapsed_ms` waits for both events.
    events
        .iter()
        .map(|(start, end)| {
            start
                .elapsed_ms(end)
                .map(|ms| f64::from(ms) * 1e3 / calls as f64)
        })
        .collect::<Result<_, _>>()
        .map_err(de)
}

/// The GPU's memory bandwidth: a `mib` MiB device-to-device copy's read +
/// write bytes over its median time (10 copies, after 2).
fn copy_bandwidth(stream: &Arc<CudaStream>, mib: usize) -> Result<f64, String> {
    let bytes = mib << 20;
    let err = |e: DriverError| format!("the {mib} MiB copy: {e}");
    let src = stream.alloc_zeros::<u8>(bytes).map_err(err)?;
    // SAFETY: only written (by the copies), never read.
    let mut dst = unsafe { stream.alloc::<u8>(bytes) }.map_err(err)?;
    let times = timed(stream, (2, 10, 1), || {
        stream.memcpy_dtod(&src, &mut dst).map_err(err)
    })?;
    Ok(norm_bench::gbps(2 * bytes as u64, Stats::of(&times).median))
}

/// Times both implementations in one mode, dtype and token count.
fn bench_case(
    a: &NormBenchArgs,
    case: &Case,
    comm: &Comm,
    (mode, dtype, tokens): (Mode, Dtype, usize),
    stream: &Arc<CudaStream>,
) -> Result<[Row; 2], String> {
    let what = format!("{} {} tokens {tokens}", mode.name(), dtype.name());
    let e = |err: candle_core::Error| format!("{what}: {err}");
    // Eager calls first: candle's kernels are loaded and its parameters
    // uploaded (cached for a capture), colltune's call is set up.
    for imp in [Impl::Colltune, Impl::Candle] {
        case.run_n(imp, comm, 2).map_err(e)?;
    }
    comm.take_algorithms();
    let checked = check(case, comm, mode, dtype, stream).map_err(|err| format!("{what}: {err}"))?;
    let time = |imp: Impl| -> Result<Row, String> {
        let counts = (a.warmup, a.samples, a.calls);
        let times = match mode {
            Mode::Eager => timed(stream, counts, || case.run_n(imp, comm, a.calls).map_err(e))?,
            Mode::Graph => {
                let graph = capture(stream, "the timed calls", || case.run_n(imp, comm, a.calls))
                    .map_err(|err| format!("{what}: {err}"))?;
                graph
                    .upload()
                    .map_err(|err| format!("{what}: uploading the graph: {err}"))?;
                timed(stream, counts, || {
                    graph
                        .launch()
                        .map_err(|err| format!("{what}: replaying the graph: {err}"))
                })?
            }
        };
        let algorithms = match imp {
            Impl::Colltune => {
                // Surfaces a fault of the timed calls; then what they ran
                // (the check's call and the timed ones, in this mode).
                comm.rank()
                    .check()
                    .map_err(|err| format!("{what}: colltune: {err}"))?;
                let ran = comm.take_algorithms().into_iter();
                ran.map(|(c, a)| format!("{}:{}", c.name(), a.name()))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            Impl::Candle => String::new(),
        };
        Ok(Row {
            mode,
            dtype,
            hidden: a.hidden,
            tokens,
            imp,
            samples: a.samples,
            calls: a.calls,
            stats: Stats::of(&times),
            check: (imp == Impl::Colltune).then_some(checked),
            algorithms,
        })
    };
    Ok([time(Impl::Colltune)?, time(Impl::Candle)?])
}

pub fn norm_bench(a: &NormBenchArgs) -> Result<bool, String> {
    a.validate()?;
    let (device, cuda, stream, gpu_name) = open_gpu(a.gpu)?;
    let id = NcclId::new().map_err(|e| format!("colltune's NCCL id: {e}"))?;
    let comm = Comm::process(
        &device,
        ProcessSpec::new(0, 1, Join::Nccl(id)),
        Options::default(),
    )
    .map_err(|e| e.to_string())?;
    println!(
        "candle-tp {BUILD} norm-bench: GPU {} ({gpu_name}), colltune {:?}",
        a.gpu,
        comm.rank()
    );
    let copy_gbps = copy_bandwidth(&stream, a.copy_mib)?;
    println!(
        "memory bandwidth: {copy_gbps:.0} GB/s ({} MiB device-to-device copy, read + write bytes, \
         median of 10)",
        a.copy_mib
    );
    println!(
        "hidden {}, eps {:e}; {} samples of {} calls each (+{} warm-up) per case",
        a.hidden, a.eps, a.samples, a.calls, a.warmup
    );

    let mut rows = Vec::new();
    for &dtype in &a.dtype {
        for &tokens in &a.tokens {
            let case = Case::new(a, dtype, tokens, &device)
                .map_err(|e| format!("{} tokens {tokens}: the inputs: {e}", dtype.name()))?;
            // As in `run`: candle's parameter cache on for every case.
            let _param_cache = cuda.enable_cuda_graph_htod_cache();
            for &mode in &a.modes {
                rows.extend(bench_case(a, &case, &comm, (mode, dtype, tokens), &stream)?);
            }
        }
    }

    let setting = Setting {
        gpu: gpu_name,
        copy_gbps,
        build: BUILD.into(),
    };
    println!();
    print!("{}", norm_bench::table(&rows, &setting));
    if let Some(path) = &a.csv {
        std::fs::write(path, norm_bench::csv(&rows, &setting))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let failed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.check.is_some_and(|c| !c.passed()))
        .collect();
    for r in &failed {
        let c = r.check.expect("a checked row");
        println!(
            "check FAILED: {} {} tokens {}: colltune's rows / new residual differ from candle's \
             by up to {:.3e} / {:.3e} (|Δ| / (|candle| + 1) up to {:.3e} / {:.3e}, bound {:e})",
            r.mode.name(),
            r.dtype.name(),
            r.tokens,
            c.rows.max_abs,
            c.residual.max_abs,
            c.rows.worst,
            c.residual.worst,
            c.tolerance
        );
    }
    if failed.is_empty() {
        println!("checks: PASS (colltune's rows and new residual within a few ULP of candle's)");
    }
    Ok(failed.is_empty())
}
