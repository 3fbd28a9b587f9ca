//! `tuner bench`: per algorithm and size, µs per call (median, p10, p90) and
//! bus bandwidth, with NCCL (or, in a loopback world, its stand-in) side by side.
//!
//! ```text
//! tuner bench --loopback --world 8 --collective all_reduce --dtype bf16 \
//!     --sizes 16B..256MiB --modes graph,eager --csv out.csv --json out.json
//! ```
//!
//! The fused all-reduce + add + RMSNorm (`--collective all_reduce_add_rmsnorm`,
//! rows of `--hidden` elements, sizes that are not whole rows skipped) is timed
//! the same way, its fused kernels against its unfused path (the all-reduce the
//! all-reduce table picks, then the add + RMSNorm kernel), which takes NCCL's
//! place as the baseline of its rows:
//!
//! ```text
//! tuner bench --loopback --world 2 --collective all_reduce_add_rmsnorm \
//!     --hidden 4096 --sizes 8KiB..1MiB --step 2 --modes graph
//! ```
//!
//! Bus bandwidth follows nccl-tests: all-reduce (and the fused collective)
//! S/t·2(W−1)/W, all-gather S/t·(W−1)/W, S the output bytes. Every timed configuration is first verified
//! against a host reference (up to `--verify-max` bytes). The CSV's columns are
//! those of the files under `kernels/bench/`.

#![cfg_attr(not(feature = "gpu"), allow(dead_code))]

use std::io::Write;

use policy::{Algo, Collective, DType, Mode};
use serde::Serialize;
use tuned_schema::size::{format_size, parse_size};

use super::args::{algo, bytes, collective, dtype, mode};
use super::{Error, Exit};

#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Ranks of a loopback world (all on one GPU); default 8 without --devices.
    #[arg(long)]
    world: Option<usize>,
    /// Run a loopback world on one GPU (the default when fewer than 2 GPUs are visible).
    #[arg(long, conflicts_with = "devices")]
    loopback: bool,
    /// GPUs of a devices world, e.g. 0,1,2,3 (default: every visible GPU when >= 2).
    #[arg(long, value_delimiter = ',')]
    devices: Option<Vec<usize>>,
    /// all_reduce, all_gather, both (those two) or all_reduce_add_rmsnorm.
    #[arg(long, default_value = "both", value_parser = collectives)]
    collective: Collectives,
    /// Elements of a row of all_reduce_add_rmsnorm (a multiple of 8 in
    /// 64..=16384); its sizes are whole rows of it.
    #[arg(long, default_value_t = crate::hidden::DEFAULT_HIDDEN)]
    hidden: usize,
    /// Comma-separated dtypes: bf16, f16, f32.
    #[arg(long, value_delimiter = ',', default_value = "bf16", value_parser = dtype)]
    dtype: Vec<DType>,
    /// Sizes (output bytes): a list like 16,4KiB,1MiB or a range 16B..256MiB.
    #[arg(long, default_value = "16B..256MiB")]
    sizes: String,
    /// Factor between sizes of a range (at least 2).
    #[arg(long, default_value_t = 4)]
    step: u64,
    /// Comma-separated modes: graph, eager.
    #[arg(long, value_delimiter = ',', default_value = "graph,eager", value_parser = mode)]
    modes: Vec<Mode>,
    /// Comma-separated algorithms: nccl, one_shot_push, one_shot_pull,
    /// two_shot_pull, two_shot_push, nccl_symmetric (default: all of the
    /// collective's, both NCCL variants included).
    #[arg(long, value_delimiter = ',', value_parser = algo)]
    algos: Option<Vec<Algo>>,
    /// Timed calls per sample (default: 20, fewer for large messages).
    #[arg(long)]
    calls: Option<u32>,
    /// Timed samples per configuration.
    #[arg(long, default_value_t = 15)]
    samples: u32,
    /// Untimed calls before the samples of each configuration.
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Most blocks per rank per kernel (default: one per SM on devices; the
    /// SMs shared out, at most 32, on a loopback world).
    #[arg(long)]
    blocks: Option<u32>,
    /// Threads per block (multiple of 32; at most and by default 1024 in a
    /// world of two, 512 otherwise).
    #[arg(long)]
    threads: Option<u32>,
    /// Launch the custom kernels without programmatic dependent launch (for
    /// comparison; see `Options::programmatic_launch`).
    #[arg(long)]
    no_programmatic_launch: bool,
    /// Device-side timeout of a wait, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Verify configurations up to this many output bytes before timing them.
    #[arg(long, default_value = "64MiB", value_parser = bytes, value_name = "SIZE")]
    verify_max: u64,
    /// Write the rows as CSV (the columns of kernels/bench/*.csv); `-` for
    /// standard output, instead of the table
    #[arg(long, value_name = "FILE")]
    csv: Option<std::path::PathBuf>,
    /// Write the rows and the platform as JSON; `-` for standard output,
    /// instead of the table
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
}

/// `--collective`: one collective, or both of NCCL's.
#[derive(Clone, Debug)]
struct Collectives(Vec<Collective>);

fn collectives(text: &str) -> Result<Collectives, String> {
    if text == "both" {
        return Ok(Collectives(vec![
            Collective::AllReduce,
            Collective::AllGather,
        ]));
    }
    collective(text)
        .map(|c| Collectives(vec![c]))
        .map_err(|e| format!("{e}, or both"))
}

impl BenchArgs {
    /// The sizes to time, once every argument is checked (before any GPU is
    /// looked for).
    fn sizes(&self) -> Result<Vec<u64>, String> {
        let sizes = parse_sizes(&self.sizes, self.step).map_err(|e| format!("--sizes: {e}"))?;
        if sizes.is_empty() {
            return Err(format!("--sizes {} names no size", self.sizes));
        }
        if self.samples == 0 {
            return Err("--samples must be at least 1".to_string());
        }
        crate::hidden::check(self.hidden)?;
        if [&self.csv, &self.json]
            .iter()
            .all(|p| p.as_deref() == Some(std::path::Path::new("-")))
        {
            return Err(
                "--csv - and --json - both ask for standard output; give one a file".into(),
            );
        }
        if let Some(algos) = &self.algos {
            let runs = |c: &Collective| algos.iter().any(|a| a.implements(*c));
            if !self.collective.0.iter().any(runs) {
                return Err("no algorithm of --algos implements the --collective chosen".into());
            }
        }
        Ok(sizes)
    }
}

/// One row of the report: a configuration and what came of it. Its console
/// line, its CSV line and its JSON object (`Serialize`) all come from it.
#[derive(Clone, Serialize)]
struct Row {
    collective: Collective,
    dtype: DType,
    mode: Mode,
    bytes: u64,
    algo: Algo,
    /// The fused collective's unfused path with this all-reduce forced
    /// (`None`: the one the tables pick).
    #[serde(skip_serializing_if = "Option::is_none")]
    unfused_via: Option<Algo>,
    #[serde(flatten)]
    outcome: Outcome,
}

#[derive(Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Outcome {
    #[serde(rename = "ok")]
    Timed(Timing),
    Declined {
        reason: String,
    },
    Failed {
        error: String,
    },
}

/// A timed configuration: µs per call, bandwidths, and how it compares.
#[derive(Clone, Serialize)]
struct Timing {
    median_us: f64,
    p10_us: f64,
    p90_us: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    /// Checked against the host reference before timing.
    verified: bool,
    /// The faster of NCCL's two variants (plain and on a symmetric window),
    /// then plain NCCL alone, over this row's median: `None` without them.
    /// For the fused collective the first is its unfused path (the baseline
    /// that is not a kernel of its own), the second `None`.
    vs_nccl: Option<f64>,
    vs_plain_nccl: Option<f64>,
}

impl Row {
    fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }

    /// The algorithm's name, with the unfused path's forced all-reduce:
    /// `unfused+one_shot_push`.
    fn label(&self) -> String {
        match self.unfused_via {
            Some(all_reduce) => format!("{}+{}", self.algo.name(), all_reduce.name()),
            None => self.algo.name().to_string(),
        }
    }

    /// The console line.
    fn line(&self) -> String {
        let head = format!(
            "{:<10} {:<4} {:<5} {:>8} {:<14}",
            self.collective.name(),
            self.dtype.name(),
            self.mode.name(),
            format_size(self.bytes),
            self.label()
        );
        match &self.outcome {
            Outcome::Timed(t) => {
                let ratio = |r: Option<f64>| r.map_or_else(|| "-".into(), |r| format!("{r:.2}x"));
                format!(
                    "{head} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>8} {:>8}",
                    t.median_us,
                    t.p10_us,
                    t.p90_us,
                    t.busbw_gbps,
                    ratio(t.vs_nccl),
                    ratio(t.vs_plain_nccl)
                )
            }
            Outcome::Declined { reason } => format!("{head} declined: {reason}"),
            Outcome::Failed { error } => format!("{head} FAILED: {error}"),
        }
    }

    /// The CSV line ([`CSV_HEADER`]'s columns) in a world of `world` ranks
    /// of `kind` (`loopback` or `devices`).
    fn csv_line(&self, world: usize, kind: &str) -> String {
        let prefix = format!(
            "{},{},{},{world},{kind},{},{}",
            self.collective.name(),
            self.dtype.name(),
            self.mode.name(),
            self.bytes,
            self.label()
        );
        match &self.outcome {
            Outcome::Timed(t) => {
                let ratio = |r: Option<f64>| r.map(|r| format!("{r:.3}")).unwrap_or_default();
                format!(
                    "{prefix},ok,{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{}",
                    t.median_us,
                    t.p10_us,
                    t.p90_us,
                    t.algbw_gbps,
                    t.busbw_gbps,
                    t.verified,
                    ratio(t.vs_nccl),
                    ratio(t.vs_plain_nccl)
                )
            }
            Outcome::Declined { .. } => format!("{prefix},declined,,,,,,,,"),
            Outcome::Failed { .. } => format!("{prefix},failed,,,,,,,,"),
        }
    }
}

/// The CSV's columns: those of the files under `kernels/bench/`.
const CSV_HEADER: &str = "collective,dtype,mode,world,world_kind,bytes,algo,status,median_us,p10_us,p90_us,algbw_gbps,busbw_gbps,verified,vs_nccl,vs_plain_nccl";

/// A list like `16,4KiB,1MiB` or a range `16B..256MiB` of sizes `step` apart
/// (a factor); each size is spelled as in `tuned/*.toml`.
fn parse_sizes(text: &str, step: u64) -> Result<Vec<u64>, String> {
    if let Some((low, high)) = text.split_once("..") {
        let (mut size, high) = (parse_size(low)?, parse_size(high)?);
        if size == 0 || step < 2 {
            return Err("a size range needs a start above 0 and --step >= 2".into());
        }
        let mut sizes = Vec::new();
        while size <= high {
            sizes.push(size);
            // The last size of a range near u64::MAX ends the range, not a wrap.
            match size.checked_mul(step) {
                Some(next) => size = next,
                None => break,
            }
        }
        Ok(sizes)
    } else {
        text.split(',').map(parse_size).collect()
    }
}

fn default_calls(bytes: u64) -> u32 {
    (((64u64 << 20) / bytes.max(1)).clamp(1, 20)) as u32
}

/// Times every configuration the arguments describe and prints one row each;
/// fails (after writing the CSV and JSON) if any configuration failed.
pub fn bench(args: &BenchArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    run(args, None, out)
}

/// [`bench()`] with a fault injected, to test recovery (the command line cannot
/// ask for it): for `stall` (an algorithm and a size) the last rank never
/// issues its call, so the others time out and the world breaks; that
/// configuration is reported failed, and the bench builds a new world and
/// goes on.
pub fn bench_with_stall(
    args: &BenchArgs,
    stall: (Algo, u64),
    out: &mut dyn Write,
) -> Result<Exit, Error> {
    run(args, Some(stall), out)
}

/// `stall`: the configuration whose last rank stalls ([`bench_with_stall`]).
fn run(args: &BenchArgs, stall: Option<(Algo, u64)>, out: &mut dyn Write) -> Result<Exit, Error> {
    let sizes = args.sizes().map_err(Error::Usage)?;
    gpu::run(args, &sizes, stall, out)?;
    Ok(Exit::Ok)
}

/// Writes `text` to `path`, or to `out` when the path is `-`.
fn write_rows(path: &std::path::Path, text: &str, out: &mut dyn Write) -> Result<(), Error> {
    if path == std::path::Path::new("-") {
        out.write_all(text.as_bytes())?;
        Ok(())
    } else {
        super::write_file(path, text)
    }
}

/// `row` compared with the faster of NCCL's two variants (plain and on a
/// symmetric window) and with plain NCCL among `rows` of its configuration
/// (collective, dtype, mode, size) and itself. Both are timed before the
/// kernels, so a kernel's console line has them; the CSV and JSON compare
/// every row again with all rows, NCCL's own included.
fn compare(row: &mut Row, rows: &[Row]) {
    let Outcome::Timed(timing) = &mut row.outcome else {
        return;
    };
    let median = timing.median_us;
    let fastest = |counts: fn(Algo) -> bool| {
        rows.iter()
            .filter(|r| {
                counts(r.algo)
                    && (r.collective, r.dtype, r.mode, r.bytes)
                        == (row.collective, row.dtype, row.mode, row.bytes)
            })
            .filter_map(|r| match &r.outcome {
                Outcome::Timed(t) => Some(t.median_us),
                _ => None,
            })
            .chain(counts(row.algo).then_some(median))
            .min_by(f64::total_cmp)
            .map(|baseline| baseline / median)
    };
    timing.vs_nccl = fastest(|a| !a.is_kernel());
    timing.vs_plain_nccl = fastest(|a| a == Algo::Nccl);
}

/// The order a configuration's algorithms are timed in: NCCL's variants
/// first, so every kernel's line can show its ratio to both.
fn timing_order(mut algos: Vec<Algo>) -> Vec<Algo> {
    algos.sort_by_key(|a| a.is_kernel());
    algos
}

fn csv(rows: &[Row], world: usize, kind: &str) -> String {
    let lines = rows.iter().map(|r| r.csv_line(world, kind));
    std::iter::once(CSV_HEADER.to_string())
        .chain(lines)
        .map(|line| line + "\n")
        .collect()
}

#[cfg(not(feature = "gpu"))]
mod gpu {
    use super::super::Error;

    pub(super) fn run(
        _: &super::BenchArgs,
        _: &[u64],
        _: Option<(policy::Algo, u64)>,
        _: &mut dyn std::io::Write,
    ) -> Result<(), Error> {
        Err(Error::NoGpu(
            "this tuner was built without the `gpu` feature".to_string(),
        ))
    }
}

#[cfg(feature = "gpu")]
mod gpu {
    use std::fmt::Write as _;
    use std::io::Write;

    use kernels::{Error, Fallback, Options, RankComm};
    use policy::{Algo, Collective, Link};
    use serde::Serialize;

    use super::super::Error as CommandError;
    use super::{BenchArgs, Outcome, Row, Timing, compare, csv, default_calls, write_rows};
    use crate::harness::timing::{
        GpuStack, TimingSpec, gpu_stack, measure, stall_last_rank, unfused_all_reduce,
        validate_spec,
    };
    use crate::harness::world::WorldKeeper;
    use crate::stats::{self, algbw_gbps, busbw_gbps};

    pub(super) fn run(
        cli: &BenchArgs,
        sizes: &[u64],
        stall: Option<(Algo, u64)>,
        out: &mut dyn Write,
    ) -> Result<(), CommandError> {
        // The runtime's own wording for a missing driver or GPU.
        kernels::open_device(0).map_err(|e| CommandError::NoGpu(e.to_string()))?;
        let gpus = kernels::visible_gpus()
            .map_err(|e| CommandError::NoGpu(format!("the driver lists no usable GPU: {e}")))?;
        measure_all(cli, sizes, stall, gpus, out)
    }

    fn measure_all(
        cli: &BenchArgs,
        sizes: &[u64],
        stall: Option<(Algo, u64)>,
        gpus: usize,
        out: &mut dyn Write,
    ) -> Result<(), CommandError> {
        let runtime = |e: Error| CommandError::Failed(e.to_string());
        let (collectives, dtypes, modes) = (&cli.collective.0, &cli.dtype, &cli.modes);
        // With --csv - or --json -, standard output carries that alone.
        let to_stdout = [&cli.csv, &cli.json]
            .iter()
            .any(|p| p.as_deref() == Some(std::path::Path::new("-")));
        let mut sink = std::io::sink();
        let table: &mut dyn Write = if to_stdout { &mut sink } else { &mut *out };
        let devices: Vec<usize> = match (&cli.devices, cli.loopback) {
            (Some(list), _) => list.clone(),
            (None, false) if gpus >= 2 => (0..gpus.min(8)).collect(),
            _ => Vec::new(),
        };
        let loopback = devices.is_empty().then(|| cli.world.unwrap_or(8));
        let options = Options {
            timeout: std::time::Duration::from_millis(cli.timeout_ms),
            blocks: cli.blocks,
            threads: cli.threads,
            programmatic_launch: !cli.no_programmatic_launch,
            log_declines: false,
            ..crate::harness::world::measuring(None, true)
        };
        let mut keeper = WorldKeeper::new(loopback, &devices, options).map_err(runtime)?;
        let ranks = keeper.ranks().map_err(runtime)?;
        let world = ranks.len();
        let ctx = ranks[0].stream().context().clone();
        let info = gpu_stack(&ctx).map_err(runtime)?;
        let fused = collectives
            .contains(&Collective::AllReduceAddRmsNorm)
            .then_some(cli.hidden);
        write!(table, "{}", header(&info, ranks, loopback.is_some(), fused))?;
        let described = World::of(ranks);

        let mut rows = Vec::new();
        for &collective in collectives {
            let chosen = cli.algos.as_deref().unwrap_or(collective.algos());
            let algos = chosen.iter().copied().filter(|a| a.implements(collective));
            let algos = super::timing_order(algos.collect());
            for &dtype in dtypes {
                for &mode in modes {
                    for &bytes in sizes {
                        let unit = match collective {
                            Collective::AllReduceAddRmsNorm => {
                                cli.hidden as u64 * dtype.size_bytes()
                            }
                            _ => collective.output_size(world as u64, dtype.size_bytes()),
                        };
                        if bytes % unit != 0 {
                            continue;
                        }
                        // The unfused path as the tables pick it, then
                        // with every other all-reduce, so that the fused
                        // kernels are compared with the best of them.
                        let runs = algos.iter().flat_map(|&algo| {
                            let vias: Vec<Option<Algo>> = if algo == Algo::Unfused {
                                std::iter::once(None)
                                    .chain(Collective::AllReduce.algos().iter().map(|&a| Some(a)))
                                    .collect()
                            } else {
                                vec![None]
                            };
                            vias.into_iter().map(move |via| (algo, via))
                        });
                        for (algo, unfused_via) in runs {
                            let spec = TimingSpec {
                                collective,
                                dtype,
                                algo,
                                bytes,
                                mode,
                                calls_per_sample: cli.calls.unwrap_or_else(|| default_calls(bytes)),
                                samples: cli.samples,
                                warmup: cli.warmup,
                                hidden: cli.hidden,
                                unfused_via,
                            };
                            let stalled = stall == Some((algo, bytes)) && unfused_via.is_none();
                            let outcome = match keeper.ranks() {
                                Ok(ranks) => bench_one(ranks, &spec, cli.verify_max, stalled),
                                Err(e) => Outcome::Failed {
                                    error: format!("building a world: {e}"),
                                },
                            };
                            let mut row = Row {
                                collective,
                                dtype,
                                mode,
                                bytes,
                                algo,
                                unfused_via,
                                outcome,
                            };
                            compare(&mut row, &rows);
                            writeln!(table, "{}", row.line())?;
                            if algo == Algo::Unfused
                                && unfused_via.is_none()
                                && let Ok(ranks) = keeper.ranks()
                            {
                                let inner = unfused_all_reduce(&ranks[0], dtype, mode, bytes);
                                writeln!(
                                    table,
                                    "{:>44} = {} all_reduce, then add_rmsnorm",
                                    "unfused",
                                    inner.name()
                                )?;
                            }
                            // One failure stays one failure: a world it broke
                            // is given up and the next row builds a new one.
                            if row.failed() && keeper.recover() {
                                writeln!(
                                    table,
                                    "note: that configuration broke the world; building a new one"
                                )?;
                            }
                            rows.push(row);
                        }
                    }
                }
            }
        }
        if keeper.rebuilt() > 0 {
            writeln!(
                table,
                "note: the world was built again {} time(s) after a configuration broke it",
                keeper.rebuilt()
            )?;
        }
        let (nccl_calls, in_progress) = kernels::raw::nccl_call_stats();
        if nccl_calls > 0 {
            writeln!(
                table,
                "NCCL: {in_progress} of {nccl_calls} collectives answered ncclInProgress (each \
                 then waited for NCCL's own thread)"
            )?;
        }
        let all = rows.clone();
        for row in &mut rows {
            compare(row, &all);
        }
        if let Some(path) = &cli.csv {
            let kind = if loopback.is_some() {
                "loopback"
            } else {
                "devices"
            };
            write_rows(path, &csv(&rows, world, kind), out)?;
        }
        if let Some(path) = &cli.json {
            let document = Document {
                platform: &info,
                world: described,
                results: &rows,
            };
            write_rows(path, &crate::format::json(&document), out)?;
        }
        let failed = rows.iter().filter(|r| r.failed()).count();
        if failed > 0 {
            return Err(CommandError::Failed(format!(
                "{failed} configuration(s) failed"
            )));
        }
        Ok(())
    }

    /// Verifies `spec`'s configuration (up to `verify_max` bytes) and times
    /// it, or (`stalled`) injects a stall of its last rank.
    fn bench_one(
        ranks: &mut [RankComm],
        spec: &TimingSpec,
        verify_max: u64,
        stalled: bool,
    ) -> Outcome {
        let &TimingSpec {
            collective,
            algo,
            bytes,
            ..
        } = spec;
        let failed = |error: String| Outcome::Failed { error };
        let declined = match spec.unfused_via {
            Some(all_reduce) => ranks[0].would_decline(Collective::AllReduce, all_reduce, bytes),
            None => ranks[0].would_decline(collective, algo, bytes),
        };
        if let Some(reason) = declined {
            return Outcome::Declined {
                reason: reason.to_string(),
            };
        }
        if stalled {
            return failed(match stall_last_rank(ranks, spec) {
                Err(e) => format!("injected stall of the last rank: {e}"),
                Ok(()) => {
                    "injected stall of the last rank: the others did not notice (no error)".into()
                }
            });
        }
        let verified = bytes <= verify_max;
        if verified && let Err(e) = validate_spec(ranks, spec, bytes) {
            return failed(e.to_string());
        }
        match measure(ranks, spec) {
            Ok(mut micros) => {
                micros.sort_by(f64::total_cmp);
                let median = stats::quantile(&micros, 0.5);
                Outcome::Timed(Timing {
                    median_us: median,
                    p10_us: stats::quantile(&micros, 0.1),
                    p90_us: stats::quantile(&micros, 0.9),
                    algbw_gbps: algbw_gbps(bytes, median),
                    busbw_gbps: busbw_gbps(collective, ranks.len() as u32, bytes, median),
                    verified,
                    vs_nccl: None,
                    vs_plain_nccl: None,
                })
            }
            Err(Error::Declined { reason, .. }) => Outcome::Declined { reason },
            Err(e) => failed(e.to_string()),
        }
    }

    /// The lines above the rows: the platform, the world, the baseline, the columns.
    /// `fused`: the hidden size of the fused collective's rows, when it is
    /// timed.
    fn header(info: &GpuStack, ranks: &[RankComm], loopback: bool, fused: Option<usize>) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "GPU: {} ({}, {} SMs), driver {}, CUDA {}, NVRTC {}, NCCL {}",
            info.gpu_name,
            info.arch,
            info.sm_count,
            info.driver_version,
            info.cuda_version,
            info.nvrtc_version.as_deref().unwrap_or("-"),
            info.nccl_version.as_deref().unwrap_or("not installed")
        );
        let shape = ranks[0].launch_shape();
        let (per_sm, heaviest) = ranks[0].blocks_per_sm();
        if loopback {
            let _ = writeln!(
                text,
                "world: loopback, {} ranks on one GPU ({} blocks x {} threads per rank; an SM \
                 holds {per_sm} block(s) of the heaviest kernel, {heaviest}; programmatic launch \
                 {})",
                ranks.len(),
                shape.max_blocks,
                shape.threads,
                if ranks[0].programmatic_launch() {
                    "on: two grids per rank resident at once"
                } else {
                    "off"
                }
            );
        } else {
            let _ = writeln!(
                text,
                "world: {} GPUs, link {} ({} blocks x {} threads per rank)",
                ranks.len(),
                ranks[0].link().name(),
                shape.max_blocks,
                shape.threads
            );
        }
        let _ = writeln!(
            text,
            "memory: {} (buffers for every algorithm at its capacity, no budget)",
            ranks[0].memory()
        );
        let _ = match ranks[0].fallback_kind() {
            Fallback::Nccl => writeln!(text, "baseline: nccl = NCCL"),
            Fallback::LoopbackReference => writeln!(
                text,
                "loopback: NCCL unavailable (it refuses two ranks on one GPU), baseline = loopback \
             reference collective; timings validate correctness, not NVLink speed"
            ),
        };
        let _ = writeln!(
            text,
            "{:<10} {:<4} {:<5} {:>8} {:<14} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
            "collective",
            "type",
            "mode",
            "bytes",
            "algo",
            "median_us",
            "p10_us",
            "p90_us",
            "busbw_GBs",
            "vs_nccl",
            "vs_plain"
        );
        let _ = writeln!(
            text,
            "vs_nccl: the faster of plain NCCL and NCCL on its symmetric window (nccl_symmetric) \
             over this row; vs_plain: plain NCCL over this row"
        );
        if let Some(hidden) = fused {
            let _ = writeln!(
                text,
                "all_reduce_add_rmsnorm: rows of {hidden} elements (bytes: tokens x {hidden} x the \
                 element size); its vs_nccl is the fastest unfused path (an all-reduce, then the \
                 add + RMSNorm kernel, timed as one call: `unfused` with the all-reduce the tables \
                 pick for the size, `unfused+<algo>` with that all-reduce forced) over this row"
            );
        }
        text
    }

    /// `--json`: the platform, the world, and every row.
    #[derive(Serialize)]
    struct Document<'a> {
        platform: &'a GpuStack,
        world: World,
        results: &'a [Row],
    }

    /// The world a bench ran on (taken while the first world is there: a
    /// rebuilt one is the same).
    #[derive(Serialize)]
    struct World {
        size: usize,
        link: Link,
        /// `nccl`, or `loopback_reference` where NCCL cannot run.
        baseline: &'static str,
        threads: u32,
        blocks: u32,
        programmatic_launch: bool,
    }

    impl World {
        fn of(ranks: &[RankComm]) -> World {
            let rank = &ranks[0];
            World {
                size: ranks.len(),
                link: rank.link(),
                baseline: match rank.fallback_kind() {
                    Fallback::Nccl => "nccl",
                    Fallback::LoopbackReference => "loopback_reference",
                },
                threads: rank.launch_shape().threads,
                blocks: rank.launch_shape().max_blocks,
                programmatic_launch: rank.programmatic_launch(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{self, algbw_gbps, busbw_gbps};

    #[test]
    fn sizes_parse_as_lists_and_ranges() {
        assert_eq!(
            parse_sizes("16,4KiB,1MiB", 4).unwrap(),
            vec![16, 4096, 1 << 20]
        );
        assert_eq!(parse_sizes("16B..256", 4).unwrap(), vec![16, 64, 256]);
        assert_eq!(parse_sizes("16B..256MiB", 4).unwrap().len(), 13);
        assert!(parse_sizes("16XB", 4).is_err());
    }

    #[test]
    fn huge_sizes_are_errors_and_ranges_end_instead_of_wrapping() {
        assert!(parse_sizes("99999999999GiB", 4).is_err());
        let sizes = parse_sizes("1..18446744073709551615", 2).unwrap();
        assert_eq!(sizes.len(), 64);
        assert_eq!(*sizes.last().unwrap(), 1 << 63);
    }

    fn row(algo: Algo, outcome: Outcome) -> Row {
        Row {
            collective: Collective::AllReduce,
            dtype: DType::Bf16,
            mode: Mode::Graph,
            bytes: 4096,
            algo,
            unfused_via: None,
            outcome,
        }
    }

    fn timed(median_us: f64) -> Outcome {
        Outcome::Timed(Timing {
            median_us,
            p10_us: median_us * 0.9,
            p90_us: median_us * 1.1,
            algbw_gbps: algbw_gbps(4096, median_us),
            busbw_gbps: busbw_gbps(Collective::AllReduce, 2, 4096, median_us),
            verified: true,
            vs_nccl: None,
            vs_plain_nccl: None,
        })
    }

    /// One row gives its console line, its CSV line and its JSON object,
    /// compared with the NCCL variants timed before it.
    #[test]
    fn a_row_is_one_line_of_each_report() {
        let mut rows: Vec<Row> = Vec::new();
        for (algo, median) in [(Algo::Nccl, 10.0), (Algo::NcclSymmetric, 4.0)] {
            let mut r = row(algo, timed(median));
            compare(&mut r, &rows);
            rows.push(r);
        }
        let mut push = row(Algo::OneShotPush, timed(5.0));
        compare(&mut push, &rows);
        assert!(push.line().ends_with("0.80x    2.00x"), "{}", push.line());
        let csv_line = push.csv_line(2, "loopback");
        assert!(
            csv_line.starts_with("all_reduce,bf16,graph,2,loopback,4096,one_shot_push,ok,5.000,"),
            "{csv_line}"
        );
        assert!(csv_line.ends_with(",true,0.800,2.000"), "{csv_line}");
        assert_eq!(csv_line.split(',').count(), CSV_HEADER.split(',').count());
        let json = serde_json::to_value(&push).unwrap();
        assert_eq!(json["status"], "ok");
        assert_eq!(json["algo"], "one_shot_push");
        assert_eq!(json["median_us"], 5.0);
        assert_eq!(json["vs_plain_nccl"], 2.0);
        // NCCL's own row, timed first, is its own baseline on the console;
        // the record compares it with the window variant timed after it.
        assert!(
            rows[0].line().ends_with("1.00x    1.00x"),
            "{}",
            rows[0].line()
        );
        let all = rows.clone();
        compare(&mut rows[0], &all);
        assert!(rows[0].csv_line(2, "loopback").ends_with(",0.400,1.000"));

        let declined = row(
            Algo::TwoShotPull,
            Outcome::Declined {
                reason: "too large".into(),
            },
        );
        assert!(
            declined
                .line()
                .ends_with("two_shot_pull  declined: too large")
        );
        let csv_line = declined.csv_line(2, "loopback");
        assert!(csv_line.ends_with(",two_shot_pull,declined,,,,,,,,"));
        assert_eq!(csv_line.split(',').count(), CSV_HEADER.split(',').count());
        let json = serde_json::to_value(&declined).unwrap();
        assert_eq!(
            (&json["status"], &json["reason"]),
            (&"declined".into(), &"too large".into())
        );
        let failed = row(
            Algo::OneShotPull,
            Outcome::Failed {
                error: "timed out".into(),
            },
        );
        assert!(failed.failed() && failed.line().ends_with("FAILED: timed out"));
        assert_eq!(serde_json::to_value(&failed).unwrap()["error"], "timed out");
    }

    /// A fused kernel is compared with the fastest unfused path, the
    /// tables' pick or one with its all-reduce forced, which is named.
    #[test]
    fn a_fused_kernel_is_compared_with_the_fastest_unfused_path() {
        let fused = |algo, via, median| Row {
            collective: Collective::AllReduceAddRmsNorm,
            unfused_via: via,
            ..row(algo, timed(median))
        };
        let mut rows: Vec<Row> = Vec::new();
        for r in [
            fused(Algo::Unfused, None, 8.0),
            fused(Algo::Unfused, Some(Algo::OneShotPush), 6.0),
            fused(Algo::Unfused, Some(Algo::TwoShotPull), 9.0),
        ] {
            let mut r = r;
            compare(&mut r, &rows);
            rows.push(r);
        }
        let mut kernel = fused(Algo::OneShotPush, None, 4.8);
        compare(&mut kernel, &rows);
        assert!(kernel.line().contains("1.25x"), "{}", kernel.line());
        let forced = &rows[1];
        assert!(
            forced.line().contains(" unfused+one_shot_push "),
            "{}",
            forced.line()
        );
        assert!(
            forced
                .csv_line(2, "loopback")
                .contains(",unfused+one_shot_push,ok,")
        );
        let json = serde_json::to_value(forced).unwrap();
        assert_eq!(
            (&json["algo"], &json["unfused_via"]),
            (&"unfused".into(), &"one_shot_push".into())
        );
        assert!(
            serde_json::to_value(&rows[0])
                .unwrap()
                .get("unfused_via")
                .is_none()
        );
    }

    #[test]
    fn rows_take_the_stats_quantiles() {
        // p10/p90/median of a row are crate::stats::quantile (Hyndman-Fan type 8).
        let s = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(stats::quantile(&s, 0.5), 3.0);
        assert!(stats::quantile(&s, 0.1) < 1.4 && stats::quantile(&s, 0.1) >= 1.0);
        assert_eq!(format_size(1 << 20), "1MiB");
    }
}
