//! `norm-bench`: colltune's add + RMSNorm against candle's, on one GPU.
//!
//! In a world of one rank colltune's fused all-reduce + add + RMSNorm has
//! nothing to reduce, so what is left is the residual add and the norm: the
//! call the model's `colltune` back-end makes
//! (`Comm::all_reduce_add_rms_norm`), against what its other back-ends run
//! after their all-reduce, candle's `residual + partial` then
//! `candle_nn::ops::rms_norm` (`model.rs`, `Collectives`). Both are timed
//! eagerly and captured into a CUDA graph on candle's stream, at each token
//! count; the GPU side is `norm_bench_cuda.rs`.
//!
//! This module is the host side, tested without a GPU: the settings, the
//! bytes a call must move, the statistics, the accuracy check and the report.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::plan::Init;
use crate::report::{field, percentile};
use crate::weights::{Seeded, mix64};

/// An element type both implementations take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    Bf16,
    F16,
    F32,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
            Dtype::F32 => "f32",
        }
    }

    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 | Dtype::F16 => 2,
            Dtype::F32 => 4,
        }
    }

    pub fn candle(self) -> candle_core::DType {
        match self {
            Dtype::Bf16 => candle_core::DType::BF16,
            Dtype::F16 => candle_core::DType::F16,
            Dtype::F32 => candle_core::DType::F32,
        }
    }

    /// The accuracy check's relative bound (see [`Diff::within`]): a few
    /// units in the last place. Both round `x = partial + residual` to the
    /// element type once and normalise it in f32, so they differ only in the
    /// order of the sum of squares and the last rounding (one ULP is 2^-8 to
    /// 2^-7 of the value in bf16, 2^-11 to 2^-10 in f16).
    pub fn tolerance(self) -> f64 {
        match self {
            Dtype::Bf16 => 1e-2,
            Dtype::F16 => 2e-3,
            Dtype::F32 => 1e-5,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Eager,
    /// Each sample's calls captured into one CUDA graph on candle's stream,
    /// which is replayed.
    Graph,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Graph => "graph",
        }
    }
}

/// The two implementations, in the order the report gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    Colltune,
    Candle,
}

impl Impl {
    pub fn name(self) -> &'static str {
        match self {
            Impl::Colltune => "colltune",
            Impl::Candle => "candle",
        }
    }
}

#[derive(Args, Clone, Debug, PartialEq)]
pub struct NormBenchArgs {
    /// Elements of a row (the model's hidden size): a multiple of 8 from 64
    /// to 16384, as colltune's fused call takes.
    #[arg(long, default_value_t = 4096)]
    pub hidden: usize,
    /// Rows (tokens of a decode batch); each count is timed.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    pub tokens: Vec<usize>,
    /// Element types, each timed.
    #[arg(long, value_delimiter = ',', default_value = "bf16")]
    pub dtype: Vec<Dtype>,
    /// Modes, each timed.
    #[arg(long, value_delimiter = ',', default_value = "eager,graph")]
    pub modes: Vec<Mode>,
    /// Timed samples per mode, dtype, token count and implementation.
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// Calls per sample (in graph mode: captured into the one graph each
    /// sample replays); a sample's time over this is one per-call time.
    #[arg(long, default_value_t = 20)]
    pub calls: usize,
    /// Untimed samples before the timed ones.
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// The RMSNorm's epsilon (Llama 3's rms_norm_eps).
    #[arg(long, default_value_t = 1e-5)]
    pub eps: f32,
    /// Seed of the inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// MiB of the device-to-device copy that measures the memory bandwidth.
    #[arg(long, default_value_t = 1024)]
    pub copy_mib: usize,
    /// The CSV file (one row per mode, dtype, token count and implementation).
    #[arg(long)]
    pub csv: Option<PathBuf>,
}

impl NormBenchArgs {
    /// Everything that can be refused before a GPU is touched.
    pub fn validate(&self) -> Result<(), String> {
        if !(64..=16384).contains(&self.hidden) || !self.hidden.is_multiple_of(8) {
            return Err(format!(
                "--hidden {}: colltune's fused call takes a multiple of 8 from 64 to 16384",
                self.hidden
            ));
        }
        if self.tokens.is_empty() || self.dtype.is_empty() || self.modes.is_empty() {
            return Err("--tokens, --dtype and --modes need at least one entry each".into());
        }
        if self.tokens.contains(&0) {
            return Err("--tokens: every count must be at least 1".into());
        }
        if repeats(&self.tokens) || repeats(&self.dtype) || repeats(&self.modes) {
            return Err("--tokens, --dtype and --modes name each entry once".into());
        }
        if self.samples == 0 || self.calls == 0 {
            return Err("--samples and --calls must be at least 1".into());
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err("--eps must be positive".into());
        }
        if self.copy_mib == 0 {
            return Err("--copy-mib must be at least 1".into());
        }
        Ok(())
    }
}

/// Whether some entry of `list` comes twice.
fn repeats<T: PartialEq>(list: &[T]) -> bool {
    list.iter().enumerate().any(|(i, x)| list[..i].contains(x))
}

/// The bytes a call must move: read the partial sums and the residual, write
/// the new residual and the normalised rows (`tokens × hidden` elements
/// each), and read the weight once (`hidden`): `(4 · tokens + 1) · hidden ·
/// element bytes`. What an implementation moves beyond this (both read `x`
/// back for the norm after writing it; colltune's adapter also copies the
/// residual into its output first) is its own cost, so both are measured
/// against this.
pub fn bytes_moved(tokens: usize, hidden: usize, dtype: Dtype) -> u64 {
    (4 * tokens as u64 + 1) * hidden as u64 * dtype.bytes()
}

/// Bytes over microseconds, in GB/s (10^9 bytes per second).
pub fn gbps(bytes: u64, us: f64) -> f64 {
    bytes as f64 / us / 1e3
}

/// The distribution of per-call times, µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
}

impl Stats {
    pub fn of(times: &[f64]) -> Stats {
        let mut sorted = times.to_vec();
        sorted.sort_by(f64::total_cmp);
        Stats {
            median: percentile(&sorted, 50.0),
            p10: percentile(&sorted, 10.0),
            p90: percentile(&sorted, 90.0),
        }
    }
}

/// How far one implementation's output is from the other's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diff {
    pub max_abs: f64,
    /// The largest `|got − want| / (|want| + 1)`: relative for large values,
    /// absolute near zero, where a relative difference means nothing.
    pub worst: f64,
}

impl Diff {
    pub fn between(got: &[f32], want: &[f32]) -> Result<Diff, String> {
        if got.len() != want.len() {
            return Err(format!("{} values against {}", got.len(), want.len()));
        }
        let mut d = Diff {
            max_abs: 0.0,
            worst: 0.0,
        };
        for (&g, &w) in got.iter().zip(want) {
            let abs = (g as f64 - w as f64).abs();
            // A NaN on either side is as far as can be.
            let abs = if abs.is_nan() { f64::INFINITY } else { abs };
            d.max_abs = d.max_abs.max(abs);
            d.worst = d.worst.max(abs / (w.abs() as f64 + 1.0));
        }
        Ok(d)
    }

    pub fn within(&self, tolerance: f64) -> bool {
        self.worst <= tolerance
    }
}

/// colltune's outputs against candle's, in one mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    pub rows: Diff,
    pub residual: Diff,
    pub tolerance: f64,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.rows.within(self.tolerance) && self.residual.within(self.tolerance)
    }
}

/// The inputs of one token count, on the host: `[tokens, hidden]` partial
/// sums and residual uniform in `[-1, 1]`, a weight around 1 (as a trained
/// norm's gains are), from a counter-based generator (fresh for every
/// count and seed, never zeros).
pub fn inputs(seed: u64, tokens: usize, hidden: usize) -> [Vec<f32>; 3] {
    let fill = |what: u64, n: usize, init: Init| {
        let key = mix64(seed ^ mix64(what ^ ((tokens as u64) << 8)));
        (0..n as u64)
            .map(|i| Seeded::value(key, init, i))
            .collect::<Vec<f32>>()
    };
    [
        fill(1, tokens * hidden, Init::Uniform(1.0)),
        fill(2, tokens * hidden, Init::Uniform(1.0)),
        fill(3, hidden, Init::OnePlus(0.5)),
    ]
}

/// One implementation at one mode, dtype and token count.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub mode: Mode,
    pub dtype: Dtype,
    pub hidden: usize,
    pub tokens: usize,
    pub imp: Impl,
    pub samples: usize,
    pub calls: usize,
    pub stats: Stats,
    /// colltune's row: its check against candle; candle's: none.
    pub check: Option<Check>,
    /// colltune's row: the algorithms it ran (`collective:algorithm`).
    pub algorithms: String,
}

impl Row {
    pub fn bytes(&self) -> u64 {
        bytes_moved(self.tokens, self.hidden, self.dtype)
    }

    pub fn gbps(&self) -> f64 {
        gbps(self.bytes(), self.stats.median)
    }

    /// The other implementation's row of the same case, if there is one.
    fn candle_of<'a>(&self, rows: &'a [Row]) -> Option<&'a Row> {
        rows.iter().find(|r| {
            r.imp == Impl::Candle
                && (r.mode, r.dtype, r.hidden, r.tokens)
                    == (self.mode, self.dtype, self.hidden, self.tokens)
        })
    }

    /// This row's median over candle's of the same case (candle's: 1).
    pub fn ratio(&self, rows: &[Row]) -> Option<f64> {
        self.candle_of(rows)
            .map(|c| self.stats.median / c.stats.median)
    }
}

/// What the run measured besides the rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    pub gpu: String,
    /// The device-to-device copy's read + write bytes over its median time.
    pub copy_gbps: f64,
    pub build: String,
}

pub const CSV_HEADER: &str = "mode,dtype,hidden,tokens,impl,samples,calls_per_sample,median_us,\
p10_us,p90_us,bytes,gbps,copy_gbps,pct_of_copy,ratio,max_abs_diff_out,max_abs_diff_residual,\
within_tolerance,algorithms,gpu,build";

pub fn csv(rows: &[Row], s: &Setting) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for r in rows {
        let opt =
            |v: Option<f64>, digits: usize| v.map_or(String::new(), |v| format!("{v:.digits$}"));
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{:.2},{:.1},{:.2},{},{},{},{},{},{},{}",
            r.mode.name(),
            r.dtype.name(),
            r.hidden,
            r.tokens,
            r.imp.name(),
            r.samples,
            r.calls,
            r.stats.median,
            r.stats.p10,
            r.stats.p90,
            r.bytes(),
            r.gbps(),
            s.copy_gbps,
            100.0 * r.gbps() / s.copy_gbps,
            opt(r.ratio(rows), 3),
            opt(r.check.map(|c| c.rows.max_abs), 6),
            opt(r.check.map(|c| c.residual.max_abs), 6),
            r.check.map_or(String::new(), |c| c.passed().to_string()),
            field(&r.algorithms),
            field(&s.gpu),
            field(&s.build)
        );
    }
    out
}

/// One line per mode, dtype and token count: colltune beside candle; then
/// what colltune ran.
pub fn table(rows: &[Row], s: &Setting) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<5} {:<4} {:>6} | {:>25} {:>14} | {:>25} {:>14} | {:>8} | {:>10} {:>9}",
        "mode",
        "type",
        "tokens",
        "colltune µs p50 (p10-p90)",
        "GB/s (% copy)",
        "candle µs p50 (p10-p90)",
        "GB/s (% copy)",
        "c/candle",
        "max|Δ| out",
        "residual"
    );
    let us = |st: &Stats| format!("{:.2} ({:.2}-{:.2})", st.median, st.p10, st.p90);
    let bw = |r: &Row| format!("{:.1} ({:.1}%)", r.gbps(), 100.0 * r.gbps() / s.copy_gbps);
    for c in rows.iter().filter(|r| r.imp == Impl::Colltune) {
        let Some(k) = c.candle_of(rows) else { continue };
        let (dr, dx) = c.check.map_or((String::new(), String::new()), |ch| {
            let mark = if ch.passed() { "" } else { " FAIL" };
            (
                format!("{:.2e}{mark}", ch.rows.max_abs),
                format!("{:.2e}", ch.residual.max_abs),
            )
        });
        let _ = writeln!(
            out,
            "{:<5} {:<4} {:>6} | {:>25} {:>14} | {:>25} {:>14} | {:>8.3} | {:>10} {:>9}",
            c.mode.name(),
            c.dtype.name(),
            c.tokens,
            us(&c.stats),
            bw(c),
            us(&k.stats),
            bw(k),
            c.ratio(rows).unwrap_or(f64::NAN),
            dr,
            dx
        );
    }
    let _ = writeln!(
        out,
        "µs per call (samples of back-to-back calls timed with CUDA events; graph: the calls \
         captured in one graph, replayed); GB/s = (4·tokens + 1)·hidden·element bytes (read \
         partial and residual, write residual and rows, read the weight) over the median; % copy \
         = of the GPU's copy bandwidth here, {:.0} GB/s ({}); c/candle = colltune's median over \
         candle's; max|Δ| = colltune's rows and new residual against candle's.",
        s.copy_gbps, s.gpu
    );
    // What colltune's tables picked, per mode and dtype, and for which sizes.
    let colltune: Vec<&Row> = rows.iter().filter(|r| r.imp == Impl::Colltune).collect();
    let mut seen: Vec<(Mode, Dtype, &str)> = Vec::new();
    for r in &colltune {
        let key = (r.mode, r.dtype, r.algorithms.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let tokens: Vec<String> = colltune
            .iter()
            .filter(|o| (o.mode, o.dtype, o.algorithms.as_str()) == key)
            .map(|o| o.tokens.to_string())
            .collect();
        let _ = writeln!(
            out,
            "colltune {} {}, tokens {}: ran {}",
            r.mode.name(),
            r.dtype.name(),
            tokens.join(","),
            if r.algorithms.is_empty() {
                "(nothing recorded)"
            } else {
                &r.algorithms
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<NormBenchArgs, String> {
        let cli = Cli::try_parse_from(
            ["candle-tp", "norm-bench"]
                .into_iter()
                .chain(args.iter().copied()),
        )
        .map_err(|e| e.to_string())?;
        let Command::NormBench(a) = cli.command else {
            panic!("not norm-bench")
        };
        a.validate()?;
        Ok(a)
    }

    #[test]
    fn the_defaults_are_the_decode_sizes_at_hidden_4096() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.hidden, 4096);
        assert_eq!(a.tokens, [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(a.dtype, [Dtype::Bf16]);
        assert_eq!(a.modes, [Mode::Eager, Mode::Graph]);
        assert_eq!((a.samples, a.calls, a.warmup, a.gpu), (200, 20, 20, 0));
        assert_eq!((a.eps, a.copy_mib, a.csv), (1e-5, 1024, None));
        let a = parse(&[
            "--hidden", "2048", "--tokens", "3,5", "--dtype", "f16,f32", "--modes", "graph",
            "--csv", "x.csv",
        ])
        .unwrap();
        assert_eq!((a.hidden, a.tokens.as_slice()), (2048, &[3, 5][..]));
        assert_eq!(a.dtype, [Dtype::F16, Dtype::F32]);
        assert_eq!(a.modes, [Mode::Graph]);
        assert_eq!(a.csv, Some("x.csv".into()));
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        let err = |args: &[&str]| parse(args).unwrap_err();
        assert!(err(&["--hidden", "4100"]).contains("multiple of 8 from 64 to 16384"));
        assert!(err(&["--hidden", "32"]).contains("multiple of 8"));
        assert!(err(&["--hidden", "16392"]).contains("multiple of 8"));
        assert!(err(&["--tokens", "0,1"]).contains("at least 1"));
        assert!(err(&["--tokens", "1,1"]).contains("each entry once"));
        assert!(err(&["--dtype", "bf16,bf16"]).contains("each entry once"));
        assert!(err(&["--modes", "eager,graph,eager"]).contains("each entry once"));
        assert!(err(&["--dtype", "f64"]).contains("invalid value 'f64'"));
        assert!(err(&["--modes", "lazy"]).contains("invalid value 'lazy'"));
        assert!(err(&["--samples", "0"]).contains("at least 1"));
        assert!(err(&["--calls", "0"]).contains("at least 1"));
        assert!(err(&["--eps", "0"]).contains("positive"));
        assert!(err(&["--copy-mib", "0"]).contains("at least 1"));
        parse(&["--hidden", "64", "--tokens", "1"]).unwrap();
        parse(&["--hidden", "16384"]).unwrap();
    }

    #[test]
    fn a_call_moves_four_rows_of_tokens_and_one_weight() {
        // bf16, hidden 4096, one token: 5 rows of 8 KiB.
        assert_eq!(bytes_moved(1, 4096, Dtype::Bf16), 5 * 8192);
        assert_eq!(bytes_moved(64, 4096, Dtype::Bf16), 257 * 8192);
        assert_eq!(bytes_moved(2, 64, Dtype::F32), 9 * 256);
        assert_eq!(bytes_moved(2, 64, Dtype::F16), 9 * 128);
        // 40960 bytes in 4 µs: 10.24 GB/s.
        assert!((gbps(40960, 4.0) - 10.24).abs() < 1e-12);
    }

    #[test]
    fn statistics_are_the_percentiles_of_the_per_call_times() {
        let times: Vec<f64> = (1..=11).rev().map(f64::from).collect();
        let s = Stats::of(&times);
        assert_eq!((s.median, s.p10, s.p90), (6.0, 2.0, 10.0));
        let s = Stats::of(&[3.0]);
        assert_eq!((s.median, s.p10, s.p90), (3.0, 3.0, 3.0));
    }

    #[test]
    fn differences_are_relative_for_large_values_and_absolute_near_zero() {
        let d = Diff::between(&[1.0, 3.0, 0.001], &[1.0, 3.03, 0.0]).unwrap();
        assert!((d.max_abs - 0.03).abs() < 1e-6, "{d:?}");
        assert!((d.worst - 0.03 / 4.03).abs() < 1e-6, "{d:?}");
        assert!(d.within(Dtype::Bf16.tolerance()) && !d.within(Dtype::F16.tolerance()));
        // One bf16 ULP at 2.5 (2^-6) is within the bound; 2 % off is not.
        let d = Diff::between(&[2.5 + 1.0 / 64.0], &[2.5]).unwrap();
        assert!(d.within(Dtype::Bf16.tolerance()), "{d:?}");
        let d = Diff::between(&[2.55 * 1.02], &[2.55]).unwrap();
        assert!(!d.within(Dtype::Bf16.tolerance()), "{d:?}");
        // NaN never passes.
        let d = Diff::between(&[f32::NAN], &[1.0]).unwrap();
        assert!(d.max_abs.is_infinite() && !d.within(1.0));
        assert!(Diff::between(&[1.0], &[1.0, 2.0]).is_err());
        let zero = Diff::between(&[1.0], &[1.0]).unwrap();
        let bad = Check {
            rows: zero,
            residual: d,
            tolerance: 1e-2,
        };
        assert!(!bad.passed());
        assert!(
            Check {
                residual: zero,
                ..bad
            }
            .passed()
        );
    }

    #[test]
    fn inputs_are_fresh_for_every_token_count_and_never_zero() {
        let [p, r, w] = inputs(1, 2, 64);
        assert_eq!((p.len(), r.len(), w.len()), (128, 128, 64));
        assert!(p.iter().chain(&r).all(|v| v.abs() <= 1.0));
        assert!(w.iter().all(|&v| (0.5..=1.5).contains(&v)));
        assert_ne!(p, r);
        let mean_abs = p.iter().map(|v| v.abs()).sum::<f32>() / p.len() as f32;
        assert!(mean_abs > 0.3, "{mean_abs}");
        // Other counts and seeds draw other values; the same draw repeats.
        assert_ne!(inputs(1, 3, 64)[0][..128], p[..]);
        assert_ne!(inputs(2, 2, 64)[0], p);
        assert_eq!(inputs(1, 2, 64)[0], p);
    }

    fn row(mode: Mode, tokens: usize, imp: Impl, median: f64) -> Row {
        let zero = Diff {
            max_abs: 0.0,
            worst: 0.0,
        };
        Row {
            mode,
            dtype: Dtype::Bf16,
            hidden: 4096,
            tokens,
            imp,
            samples: 200,
            calls: 20,
            stats: Stats {
                median,
                p10: median * 0.9,
                p90: median * 1.2,
            },
            check: (imp == Impl::Colltune).then_some(Check {
                rows: Diff {
                    max_abs: 0.0078125,
                    ..zero
                },
                residual: zero,
                tolerance: 1e-2,
            }),
            algorithms: if imp == Impl::Colltune {
                "all_reduce_add_rmsnorm:unfused".into()
            } else {
                String::new()
            },
        }
    }

    #[test]
    fn csv_and_table_pair_colltune_with_candle() {
        let rows = vec![
            row(Mode::Eager, 1, Impl::Colltune, 8.0),
            row(Mode::Eager, 1, Impl::Candle, 10.0),
            row(Mode::Graph, 1, Impl::Colltune, 2.048),
            row(Mode::Graph, 1, Impl::Candle, 4.096),
        ];
        let s = Setting {
            gpu: "NVIDIA H200, 0".into(),
            copy_gbps: 4000.0,
            build: "abc123".into(),
        };
        let text = csv(&rows, &s);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0], CSV_HEADER);
        let cols = CSV_HEADER.split(',').count();
        for l in &lines[1..] {
            // The GPU's name is quoted: every row has the header's columns.
            assert_eq!(
                l.replace("\"NVIDIA H200, 0\"", "g").split(',').count(),
                cols,
                "{l}"
            );
        }
        // 40960 bytes in 2.048 µs: 20 GB/s, 0.5 % of the copy's 4000.
        assert_eq!(
            lines[3],
            "graph,bf16,4096,1,colltune,200,20,2.048,1.843,2.458,40960,20.00,4000.0,0.50,0.500,\
             0.007812,0.000000,true,all_reduce_add_rmsnorm:unfused,\"NVIDIA H200, 0\",abc123"
        );
        assert_eq!(
            lines[2],
            "eager,bf16,4096,1,candle,200,20,10.000,9.000,12.000,40960,4.10,4000.0,0.10,1.000,,,,,\
             \"NVIDIA H200, 0\",abc123"
        );
        let t = table(&rows, &s);
        let body: Vec<&str> = t.lines().collect();
        assert_eq!(body.len(), 6, "{t}");
        assert!(body[1].starts_with("eager bf16      1 |"), "{t}");
        assert!(
            body[1].contains("8.00 (7.20-9.60)") && body[1].contains("0.800"),
            "{t}"
        );
        assert!(
            body[2].contains("2.05 (1.84-2.46)") && body[2].contains("0.500"),
            "{t}"
        );
        assert!(body[2].contains("7.81e-3") && !t.contains("FAIL"), "{t}");
        assert!(
            body[2].contains("20.0 (0.5%)") && body[2].contains("10.0 (0.2%)"),
            "{t}"
        );
        assert!(body[3].contains("4000 GB/s"), "{t}");
        assert_eq!(
            body[4],
            "colltune eager bf16, tokens 1: ran all_reduce_add_rmsnorm:unfused"
        );
        assert_eq!(
            body[5],
            "colltune graph bf16, tokens 1: ran all_reduce_add_rmsnorm:unfused"
        );
        // A failed check is marked.
        let mut bad = rows.clone();
        bad[0].check.as_mut().unwrap().rows.worst = 0.5;
        assert!(table(&bad, &s).lines().nth(1).unwrap().contains("FAIL"));
        assert!(csv(&bad, &s).lines().nth(1).unwrap().contains(",false,"));
    }
}
