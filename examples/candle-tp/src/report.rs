//! What the ranks report, and the table and CSV made from it: TPOT median and
//! percentiles, tokens/s, prefill time, each back-end's gap above the `none`
//! floor, and the correctness checks (ranks agree, logits against one rank,
//! greedy tokens of `nccl` and `colltune`), for a batch of sequences.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// The back-ends, in the order runs are made by default: `colltune` fuses
/// each all-reduce with the residual add and RMSNorm after it,
/// `colltune-unfused` (the same communicator) runs them as candle ops.
pub const BACKENDS: [&str; 4] = ["none", "nccl", "colltune", "colltune-unfused"];
pub const MODES: [&str; 2] = ["eager", "graph"];

/// How a run's first decode-step logits compare with the one-rank model's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogitDiff {
    pub max_abs: f64,
    /// RMS of the difference over RMS of the reference (the whole batch).
    pub rel_rms: f64,
    /// Both pick the same token, in every sequence.
    pub argmax_same: bool,
}

impl LogitDiff {
    /// `run` and `reference` are `[batch, vocab]` logits, flattened.
    pub fn between(run: &[f32], reference: &[f32], vocab: usize) -> Result<LogitDiff, String> {
        if run.len() != reference.len() || run.is_empty() || !run.len().is_multiple_of(vocab) {
            return Err(format!(
                "logits of {} and {} entries cannot be compared in rows of {vocab}",
                run.len(),
                reference.len()
            ));
        }
        let mut max_abs = 0f64;
        let (mut diff2, mut ref2) = (0f64, 0f64);
        for (&a, &b) in run.iter().zip(reference) {
            let d = (a as f64 - b as f64).abs();
            max_abs = max_abs.max(d);
            diff2 += d * d;
            ref2 += b as f64 * b as f64;
        }
        Ok(LogitDiff {
            max_abs,
            rel_rms: (diff2 / ref2.max(f64::MIN_POSITIVE)).sqrt(),
            argmax_same: run
                .chunks(vocab)
                .zip(reference.chunks(vocab))
                .all(|(a, b)| argmax(a) == argmax(b)),
        })
    }
}

/// The first index of the largest value (the greedy token).
pub fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

/// One back-end in one mode, as one rank saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub backend: String,
    pub mode: String,
    pub prefill_ms: f64,
    /// Host time of each decode step: inputs up, the step, its token back.
    pub step_ms: Vec<f64>,
    /// Each sequence's tokens: the prefill's, then one per decode step.
    pub tokens: Vec<Vec<u32>>,
    /// What colltune's communicator ran (`all_reduce:one_shot_push`, …).
    pub algorithms: Vec<String>,
    /// Rank 0 only: against the one-rank model.
    pub logits: Option<LogitDiff>,
}

/// Everything one rank reports to the launcher.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankReport {
    pub rank: usize,
    pub world: usize,
    /// The model's name (`Config::name`) and shapes (`Config::shape`).
    pub model: String,
    pub shape: String,
    /// Sequences decoded together.
    pub batch: usize,
    pub gpu: String,
    pub weights: String,
    pub runs: Vec<RunRecord>,
    /// Rank 0 only: the one-rank model's greedy tokens, per sequence.
    pub reference_tokens: Option<Vec<Vec<u32>>>,
}

/// Linear interpolation between closest ranks (numpy's default): `p` in 0..=100.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty());
    let pos = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// How many tokens two greedy runs share before they first differ.
pub fn agreeing_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The same for two batches: the least over their sequences (0 when the
/// batches differ in size).
pub fn batch_agreeing_prefix(a: &[Vec<u32>], b: &[Vec<u32>]) -> usize {
    if a.len() != b.len() {
        return 0;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| agreeing_prefix(x, y))
        .min()
        .unwrap_or(0)
}

/// A row of the table and the CSV.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub model: String,
    pub shape: String,
    pub world: usize,
    pub batch: usize,
    pub backend: String,
    pub mode: String,
    pub tpot_median_ms: f64,
    pub tpot_p10_ms: f64,
    pub tpot_p90_ms: f64,
    /// Tokens of every sequence together, per second of decoding.
    pub tokens_per_s: f64,
    pub prefill_ms: f64,
    /// TPOT median above the `none` run of the same mode.
    pub gap_ms: Option<f64>,
    /// Decode steps timed (each gives one token per sequence).
    pub decode_tokens: usize,
    /// Every rank produced the same tokens.
    pub ranks_agree: bool,
    /// `nccl` against `colltune` in the same mode: tokens that agree before
    /// the first difference (the least over the sequences).
    pub tokens_agree_other: Option<usize>,
    /// Against the one-rank model, likewise.
    pub tokens_agree_reference: Option<usize>,
    pub logits: Option<LogitDiff>,
    pub algorithms: String,
}

impl Row {
    /// The gap as a share of the floor.
    pub fn gap_pct(&self, floor_ms: f64) -> Option<f64> {
        self.gap_ms.map(|g| 100.0 * g / floor_ms)
    }
}

/// The verdict of a run's checks.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub failures: Vec<String>,
}

/// Builds the rows from every rank's report (rank order) and checks them.
/// `tolerance` bounds the relative RMS difference of the first-step logits.
pub fn summarise(reports: &[RankReport], tolerance: f64) -> Result<(Vec<Row>, Verdict), String> {
    let first = reports.first().ok_or("no rank reported")?;
    for (i, r) in reports.iter().enumerate() {
        if r.rank != i {
            return Err(format!("report {i} is from rank {}", r.rank));
        }
        if (&r.model, &r.shape, r.batch) != (&first.model, &first.shape, first.batch) {
            return Err(format!(
                "rank {} ran {} ({}) at batch {}, rank 0 {} ({}) at batch {}",
                r.rank, r.model, r.shape, r.batch, first.model, first.shape, first.batch
            ));
        }
        if r.runs.len() != first.runs.len() {
            return Err(format!(
                "rank {} made {} runs, rank 0 made {}",
                r.rank,
                r.runs.len(),
                first.runs.len()
            ));
        }
    }
    let mut failures = Vec::new();
    let mut rows = Vec::new();
    for (i, run) in first.runs.iter().enumerate() {
        if run.step_ms.is_empty() {
            return Err(format!(
                "{} {}: no decode step was timed",
                run.backend, run.mode
            ));
        }
        let mut sorted = run.step_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        let ranks_agree = reports.iter().all(|r| r.runs[i].tokens == run.tokens);
        let real = run.backend != "none";
        if real && !ranks_agree {
            failures.push(format!(
                "{} {}: the ranks produced different tokens",
                run.backend, run.mode
            ));
        }
        if run.tokens.len() != first.batch {
            return Err(format!(
                "{} {}: tokens of {} sequences in a batch of {}",
                run.backend,
                run.mode,
                run.tokens.len(),
                first.batch
            ));
        }
        let tokens_agree_reference = first
            .reference_tokens
            .as_ref()
            .map(|t| batch_agreeing_prefix(&run.tokens, t));
        if real
            && let Some(d) = &run.logits
            && (!d.rel_rms.is_finite() || d.rel_rms > tolerance)
        {
            failures.push(format!(
                "{} {}: first-step logits differ from the one-rank model by {:.4} relative RMS \
                 (tolerance {tolerance})",
                run.backend, run.mode, d.rel_rms
            ));
        }
        rows.push(Row {
            model: first.model.clone(),
            shape: first.shape.clone(),
            world: first.world,
            batch: first.batch,
            backend: run.backend.clone(),
            mode: run.mode.clone(),
            tpot_median_ms: percentile(&sorted, 50.0),
            tpot_p10_ms: percentile(&sorted, 10.0),
            tpot_p90_ms: percentile(&sorted, 90.0),
            tokens_per_s: first.batch as f64 * 1000.0 / mean,
            prefill_ms: run.prefill_ms,
            gap_ms: None,
            decode_tokens: run.step_ms.len(),
            ranks_agree,
            tokens_agree_other: None,
            tokens_agree_reference,
            logits: run.logits.clone(),
            algorithms: run.algorithms.join(" "),
        });
    }
    // Gaps above the floor, and nccl against colltune, within each mode.
    for mode in MODES {
        let floor = rows
            .iter()
            .find(|r| r.mode == mode && r.backend == "none")
            .map(|r| r.tpot_median_ms);
        let tokens = |backend: &str| {
            first
                .runs
                .iter()
                .find(|r| r.mode == mode && r.backend == backend)
                .map(|r| r.tokens.clone())
        };
        let agree = match (tokens("nccl"), tokens("colltune")) {
            (Some(a), Some(b)) => Some(batch_agreeing_prefix(&a, &b)),
            _ => None,
        };
        for row in rows.iter_mut().filter(|r| r.mode == mode) {
            if let Some(f) = floor
                && row.backend != "none"
            {
                row.gap_ms = Some(row.tpot_median_ms - f);
            }
            if row.backend == "nccl" || row.backend == "colltune" {
                row.tokens_agree_other = agree;
            }
        }
    }
    Ok((rows, Verdict { failures }))
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(String::new, |v| format!("{v:.digits$}"))
}

fn floor_of(rows: &[Row], mode: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.mode == mode && r.backend == "none")
        .map(|r| r.tpot_median_ms)
}

pub const CSV_HEADER: &str = "model,shape,world,batch,backend,mode,tpot_median_ms,tpot_p10_ms,\
tpot_p90_ms,tokens_per_s,prefill_ms,gap_vs_none_ms,gap_vs_none_pct,decode_tokens,ranks_agree,\
tokens_agree_nccl_colltune,tokens_agree_reference,logits_rel_rms,logits_max_abs,argmax_same,\
algorithms,build";

/// A CSV field: quoted when it holds a comma, a quote or a line break (a
/// model's name comes from its config and may).
pub(crate) fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn csv(rows: &[Row], build: &str) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for r in rows {
        let floor = floor_of(rows, &r.mode);
        let pct = floor.and_then(|f| r.gap_pct(f));
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:.4},{:.4},{:.4},{:.2},{:.3},{},{},{},{},{},{},{},{},{},{},{}",
            field(&r.model),
            field(&r.shape),
            r.world,
            r.batch,
            r.backend,
            r.mode,
            r.tpot_median_ms,
            r.tpot_p10_ms,
            r.tpot_p90_ms,
            r.tokens_per_s,
            r.prefill_ms,
            opt(r.gap_ms, 4),
            opt(pct, 2),
            r.decode_tokens,
            r.ranks_agree,
            r.tokens_agree_other
                .map_or(String::new(), |n| n.to_string()),
            r.tokens_agree_reference
                .map_or(String::new(), |n| n.to_string()),
            opt(r.logits.as_ref().map(|d| d.rel_rms), 6),
            opt(r.logits.as_ref().map(|d| d.max_abs), 5),
            r.logits
                .as_ref()
                .map_or(String::new(), |d| d.argmax_same.to_string()),
            field(&r.algorithms),
            field(build)
        );
    }
    out
}

pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:<6} {:>10} {:>9} {:>9} {:>9} {:>11} {:>15} {:>8} {:>9} {:>10}",
        "backend",
        "mode",
        "TPOT p50",
        "p10",
        "p90",
        "tok/s",
        "prefill ms",
        "gap over none",
        "ranks",
        "tokens =",
        "logits Δ"
    );
    for r in rows {
        let gap = match (r.gap_ms, floor_of(rows, &r.mode).and_then(|f| r.gap_pct(f))) {
            (Some(g), Some(p)) => format!("{g:+.3} ({p:+.0}%)"),
            _ => String::new(),
        };
        let agree = match (r.tokens_agree_other, r.tokens_agree_reference) {
            (Some(a), Some(b)) => format!("{a}/{b}"),
            (None, Some(b)) => format!("-/{b}"),
            (Some(a), None) => format!("{a}/-"),
            (None, None) => String::new(),
        };
        let logits = r
            .logits
            .as_ref()
            .map_or(String::new(), |d| format!("{:.2e}", d.rel_rms));
        let _ = writeln!(
            out,
            "{:<9} {:<6} {:>10.3} {:>9.3} {:>9.3} {:>9.1} {:>11.2} {:>15} {:>8} {:>9} {:>10}",
            r.backend,
            r.mode,
            r.tpot_median_ms,
            r.tpot_p10_ms,
            r.tpot_p90_ms,
            r.tokens_per_s,
            r.prefill_ms,
            gap,
            if r.ranks_agree { "same" } else { "DIFFER" },
            agree,
            logits
        );
    }
    out.push_str(
        "TPOT in ms (decode steps, host time per step: one token of every sequence); tok/s counts \
         every sequence's tokens; tokens = greedy tokens agreeing with the other back-end / with \
         the one-rank model before the first difference (of prefill + decode tokens, the least \
         over the sequences); logits Δ = relative RMS difference of the first decode step's \
         logits from the one-rank model. `none` replaces every collective with a local copy: \
         wrong results, the floor.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let xs = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(percentile(&xs, 50.0), 3.0);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert_eq!(percentile(&xs, 100.0), 10.0);
        // numpy.percentile([1,2,3,4,10], 90) == 7.6; 10 -> 1.4
        assert!((percentile(&xs, 90.0) - 7.6).abs() < 1e-12);
        assert!((percentile(&xs, 10.0) - 1.4).abs() < 1e-12);
        assert_eq!(percentile(&[5.0], 90.0), 5.0);
        // Even count: the median is the mean of the middle two.
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.5);
    }

    #[test]
    fn logit_differences() {
        let d = LogitDiff::between(&[1.0, 2.0, 4.0], &[1.0, 2.0, 3.0], 3).unwrap();
        assert_eq!(d.max_abs, 1.0);
        assert!((d.rel_rms - (1.0f64 / 14.0).sqrt()).abs() < 1e-12);
        assert!(d.argmax_same);
        let d = LogitDiff::between(&[5.0, 2.0], &[1.0, 2.0], 2).unwrap();
        assert!(!d.argmax_same);
        // A batch: every sequence's greedy token must agree.
        let d = LogitDiff::between(&[1.0, 2.0, 3.0, 1.0], &[1.0, 2.0, 3.0, 4.0], 2).unwrap();
        assert!(!d.argmax_same, "the second row's choice differs");
        let d = LogitDiff::between(&[1.0, 2.0, 3.0, 1.0], &[1.1, 2.0, 3.0, 1.1], 2).unwrap();
        assert!(d.argmax_same);
        assert!(LogitDiff::between(&[1.0], &[1.0, 2.0], 1).is_err());
        assert!(LogitDiff::between(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], 2).is_err());
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(agreeing_prefix(&[1, 2, 3, 4], &[1, 2, 5, 4]), 2);
        assert_eq!(agreeing_prefix(&[1, 2], &[1, 2]), 2);
        let a = vec![vec![1, 2, 3], vec![4, 5, 6]];
        assert_eq!(batch_agreeing_prefix(&a, &a), 3);
        assert_eq!(
            batch_agreeing_prefix(&a, &[vec![1, 2, 3], vec![4, 9, 6]]),
            1
        );
        assert_eq!(batch_agreeing_prefix(&a, &a[..1]), 0);
    }

    /// A run of a batch of two: sequence 0's tokens as given, sequence 1's
    /// fixed (the same in every run).
    fn run(backend: &str, mode: &str, ms: f64, tokens: &[u32], rel: Option<f64>) -> RunRecord {
        RunRecord {
            backend: backend.into(),
            mode: mode.into(),
            prefill_ms: 12.5,
            step_ms: vec![ms, ms * 1.1, ms * 0.9, ms, ms],
            tokens: vec![tokens.to_vec(), vec![3, 3, 3, 3]],
            algorithms: if backend == "colltune" {
                vec!["all_reduce:one_shot_push".into()]
            } else {
                vec![]
            },
            logits: rel.map(|r| LogitDiff {
                max_abs: 0.1,
                rel_rms: r,
                argmax_same: true,
            }),
        }
    }

    fn report(rank: usize, runs: Vec<RunRecord>) -> RankReport {
        RankReport {
            rank,
            world: 2,
            model: "org/Llama, v2".into(),
            shape: "h256 l2 q16 kv8 d16 ff512 v1024".into(),
            batch: 2,
            gpu: "test".into(),
            weights: "seeded".into(),
            runs,
            reference_tokens: (rank == 0).then(|| vec![vec![7, 8, 9, 9], vec![3, 3, 3, 3]]),
        }
    }

    fn runs(colltune_tokens: &[u32], rel: f64) -> Vec<RunRecord> {
        vec![
            run("none", "graph", 2.0, &[1, 1, 1, 1], None),
            run("nccl", "graph", 3.0, &[7, 8, 9, 1], Some(0.01)),
            run("colltune", "graph", 2.5, colltune_tokens, Some(rel)),
        ]
    }

    #[test]
    fn rows_gaps_agreement_and_csv() {
        let reports = vec![
            report(0, runs(&[7, 8, 9, 9], 0.01)),
            report(1, runs(&[7, 8, 9, 9], 0.0)),
        ];
        let (rows, verdict) = summarise(&reports, 0.05).unwrap();
        assert!(verdict.failures.is_empty(), "{:?}", verdict.failures);
        assert_eq!(rows.len(), 3);
        let nccl = &rows[1];
        assert_eq!(nccl.tpot_median_ms, 3.0);
        assert!((nccl.gap_ms.unwrap() - 1.0).abs() < 1e-12);
        assert!((nccl.gap_pct(2.0).unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(nccl.tokens_agree_other, Some(3));
        assert_eq!(nccl.tokens_agree_reference, Some(3));
        assert_eq!(rows[2].tokens_agree_reference, Some(4));
        assert_eq!(rows[0].gap_ms, None);
        // 5 steps with mean ms, two sequences: tokens/s = 2 · 1000 / ms.
        assert!((rows[0].tokens_per_s - 1000.0).abs() < 1e-9);
        assert_eq!(
            (rows[0].batch, rows[0].model.as_str()),
            (2, "org/Llama, v2")
        );

        let text = csv(&rows, "abc123");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with(
            "model,shape,world,batch,backend,mode,tpot_median_ms,tpot_p10_ms,tpot_p90_ms,\
             tokens_per_s,prefill_ms"
        ));
        // The name's comma is quoted: every row has the header's columns.
        let cols = lines[0].split(',').count();
        for l in &lines[1..] {
            assert_eq!(
                l.replace("\"org/Llama, v2\"", "m").split(',').count(),
                cols,
                "{l}"
            );
        }
        assert_eq!(
            lines[3],
            "\"org/Llama, v2\",h256 l2 q16 kv8 d16 ff512 v1024,2,2,colltune,graph,2.5000,2.3500,\
             2.6500,800.00,12.500,0.5000,25.00,5,true,3,4,0.010000,0.10000,true,\
             all_reduce:one_shot_push,abc123"
        );
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        let t = table(&rows);
        assert!(t.contains("+1.000 (+50%)"), "{t}");
        assert!(t.contains("3/3"), "{t}");
    }

    #[test]
    fn disagreeing_ranks_and_far_logits_fail() {
        let reports = vec![
            report(0, runs(&[7, 8, 9, 9], 0.2)),
            report(1, runs(&[7, 8, 2, 2], 0.0)),
        ];
        let (rows, verdict) = summarise(&reports, 0.05).unwrap();
        assert!(!rows[2].ranks_agree);
        assert_eq!(verdict.failures.len(), 2, "{:?}", verdict.failures);
        assert!(verdict.failures[0].contains("different tokens"));
        assert!(verdict.failures[1].contains("0.2000 relative RMS"));
        // `none` may disagree: it is wrong by design.
        assert!(rows[0].ranks_agree);
        // A difference in the second sequence alone is a difference.
        let mut second = reports.clone();
        second[0].runs[1].tokens[1][2] = 4;
        let (rows, verdict) = summarise(&second, 0.05).unwrap();
        assert!(!rows[1].ranks_agree);
        assert!(verdict.failures[0].starts_with("nccl graph: the ranks produced different"));
        assert_eq!(rows[1].tokens_agree_reference, Some(2));
        let mut short = reports.clone();
        short[1].runs.pop();
        assert!(summarise(&short, 0.05).unwrap_err().contains("made 2 runs"));
        let mut other = reports.clone();
        other[1].batch = 1;
        assert!(summarise(&other, 0.05).unwrap_err().contains("at batch 1"));
        let mut missing = reports.clone();
        missing[0].runs[2].tokens.pop();
        assert!(
            summarise(&missing, 0.05)
                .unwrap_err()
                .contains("tokens of 1 sequences in a batch of 2")
        );
        assert!(summarise(&[], 0.05).is_err());
    }
}
