//! The launcher: places ranks on GPUs, makes the communicators' ids, starts
//! one worker process per rank (this same executable), relays their output
//! with a `[rank N]` prefix into the terminal and a log per rank, stops every
//! worker when one fails or the time bound passes, and turns their reports
//! into the table, the CSV and the verdict.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cli::{self, JoinArg, OutArgs, RunArgs, WorkerArgs};
use crate::gpu;
use crate::report::{self, RankReport};
use crate::tokenizer::TextTokenizer;

/// The environment every worker runs with: never NVLink multicast (NVLS).
pub const WORKER_ENV: [(&str, &str); 3] = [
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
];

/// The commit this binary was built from (set by build.rs).
pub const BUILD: &str = env!("CANDLE_TP_BUILD");

/// A new folder under `parent` that only this user can enter (mode 0700):
/// colltune's file rendezvous keeps CUDA IPC handles in its join folder and
/// refuses one that the group or others can read.
fn fresh_dir(parent: &Path, stem: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let dir = parent.join(format!("{stem}-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create the folder {}: {e}", parent.display()))?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create the folder {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Runs the whole protocol; `Ok(false)` when a correctness check failed.
pub fn run(args: &RunArgs, out: &OutArgs) -> Result<bool, String> {
    let resolved = args.validate()?;
    let cfg = &resolved.cfg;
    let gpus = if args.gpus.is_empty() {
        let n = gpu::device_count()?;
        (0..n).collect::<Vec<_>>()
    } else {
        args.gpus.clone()
    };
    let (place, shared) = cli::placement(args.world, &gpus)?;
    let mut args = args.clone();
    let mut skipped: Vec<(String, String)> = Vec::new();
    if shared && args.backends.iter().any(|b| b == "nccl") {
        args.backends.retain(|b| b != "nccl");
        skipped.push((
            "nccl".into(),
            format!(
                "NCCL refuses two ranks on one GPU ({} ranks on GPUs {:?}); colltune joins \
                 through files instead, and its NCCL-selected calls run the loopback reference",
                args.world, gpus
            ),
        ));
    }
    if args.backends.is_empty() {
        return Err("no back-end left to run".into());
    }
    let log_dir = match &out.log_dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create --log-dir {}: {e}", d.display()))?;
            d.clone()
        }
        None => fresh_dir(&std::env::temp_dir(), "candle-tp")?,
    };
    let nccl_id = if args.backends.iter().any(|b| b == "nccl") {
        Some(gpu::nccl_unique_id()?)
    } else {
        None
    };
    let colltune_join = if args
        .backends
        .iter()
        .any(|b| b == "colltune" || b == "colltune-unfused")
    {
        Some(if shared {
            JoinArg::Files(fresh_dir(&log_dir, "join")?)
        } else {
            JoinArg::Nccl(gpu::colltune_unique_id()?)
        })
    } else {
        None
    };

    println!("candle-tp {BUILD}: {cfg}");
    let lens: Vec<usize> = resolved.prompts.iter().map(Vec::len).collect();
    println!(
        "world {} on GPUs {:?}{}; back-ends {}; modes {}; batch {}, prompts of {:?} tokens{}, {} \
         decode steps (+{} warm-up); logs in {}",
        args.world,
        place,
        if shared { " (shared)" } else { "" },
        args.backends.join(","),
        args.modes.join(","),
        args.batch,
        lens,
        if args.prompt.is_empty() {
            " (seeded)"
        } else {
            ""
        },
        args.decode,
        args.warmup,
        log_dir.display()
    );
    for (b, why) in &skipped {
        println!("skipping {b}: {why}");
    }

    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut workers = Vec::new();
    for (rank, &gpu_index) in place.iter().enumerate() {
        let w = WorkerArgs {
            run: args.clone(),
            rank,
            gpu: gpu_index,
            nccl_id: nccl_id.clone(),
            colltune_join: colltune_join.clone(),
            report: log_dir.join(format!("rank{rank}.json")),
        };
        let _ = std::fs::remove_file(&w.report);
        let log = log_dir.join(format!("rank{rank}.log"));
        let child = spawn(&exe, &w, rank, &log)?;
        workers.push((w, child, log));
    }
    wait_all(&mut workers, Duration::from_secs(out.timeout))?;

    let mut reports = Vec::new();
    for (w, _, log) in &workers {
        let text = std::fs::read_to_string(&w.report).map_err(|e| {
            format!(
                "rank {} wrote no report at {} ({e}); its log: {}",
                w.rank,
                w.report.display(),
                log.display()
            )
        })?;
        let r: RankReport = serde_json::from_str(&text)
            .map_err(|e| format!("rank {}'s report {}: {e}", w.rank, w.report.display()))?;
        reports.push(r);
    }
    if let Some(path) = &out.json {
        let text = serde_json::to_string_pretty(&reports).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let (rows, verdict) = report::summarise(&reports, args.logit_tolerance)?;
    println!();
    println!(
        "{} [{}] over {} rank(s), batch {}, {} ({}; weights: {})",
        cfg.name,
        cfg.shape(),
        args.world,
        args.batch,
        reports[0].gpu,
        BUILD,
        reports[0].weights
    );
    print!("{}", report::table(&rows));
    if let Some(tokenizer) = &resolved.tokenizer {
        print!("{}", texts(tokenizer, &resolved.prompts, &reports[0])?);
    }
    for (b, why) in &skipped {
        println!("{b}: not run: {why}");
    }
    if let Some(path) = &out.csv {
        std::fs::write(path, report::csv(&rows, BUILD))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if verdict.failures.is_empty() {
        println!(
            "checks: PASS (ranks agree; logits within {} of one rank)",
            args.logit_tolerance
        );
        Ok(true)
    } else {
        for f in &verdict.failures {
            println!("check FAILED: {f}");
        }
        Ok(false)
    }
}

/// Each sequence's prompt and what was generated from it, as text: from the
/// first run with real collectives (or the only one).
fn texts(
    tokenizer: &TextTokenizer,
    prompts: &[Vec<u32>],
    rank0: &RankReport,
) -> Result<String, String> {
    let Some(run) = rank0
        .runs
        .iter()
        .find(|r| r.backend != "none")
        .or(rank0.runs.first())
    else {
        return Ok(String::new());
    };
    let mut out = format!(
        "text ({} {}, through {}):\n",
        run.backend,
        run.mode,
        tokenizer.path().display()
    );
    for (b, (prompt, generated)) in prompts.iter().zip(&run.tokens).enumerate() {
        out.push_str(&format!(
            "  [{b}] {:?} → {:?}\n",
            tokenizer.decode(prompt)?,
            tokenizer.decode(generated)?
        ));
    }
    Ok(out)
}

fn spawn(exe: &Path, w: &WorkerArgs, rank: usize, log: &Path) -> Result<Child, String> {
    let mut cmd = Command::new(exe);
    cmd.args(w.to_args())
        .envs(WORKER_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start rank {rank} ({}): {e}", exe.display()))?;
    let file = std::fs::File::create(log)
        .map_err(|e| format!("cannot create the log {}: {e}", log.display()))?;
    let file = Arc::new(Mutex::new(file));
    let relay = |stream: Box<dyn std::io::Read + Send>| {
        let file = file.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut f) = file.lock() {
                    let _ = writeln!(f, "{line}");
                }
                eprintln!("[rank {rank}] {line}");
            }
        })
    };
    if let Some(s) = child.stdout.take() {
        relay(Box::new(s));
    }
    if let Some(s) = child.stderr.take() {
        relay(Box::new(s));
    }
    Ok(child)
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Waits for every worker; the first failure or the time bound stops the rest.
fn wait_all(workers: &mut [(WorkerArgs, Child, PathBuf)], limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    let mut done = vec![false; workers.len()];
    let failure = loop {
        for (i, (w, child, log)) in workers.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) if status.success() => done[i] = true,
                Ok(Some(status)) => {
                    done[i] = true;
                    let msg = format!(
                        "rank {} failed ({status}); the others were stopped. Its log ({}) ends:\n{}",
                        w.rank,
                        log.display(),
                        tail(log, 15)
                    );
                    return stop_rest(workers, &done, msg);
                }
                Ok(None) => {}
                Err(e) => {
                    let msg = format!("cannot wait for rank {}: {e}", w.rank);
                    return stop_rest(workers, &done, msg);
                }
            }
        }
        if done.iter().all(|&d| d) {
            break None;
        }
        if start.elapsed() > limit {
            break Some(format!(
                "the run took longer than --timeout {} s; every worker was stopped",
                limit.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    match failure {
        None => Ok(()),
        Some(msg) => stop_rest(workers, &done, msg),
    }
}

fn stop_rest(
    workers: &mut [(WorkerArgs, Child, PathBuf)],
    done: &[bool],
    msg: String,
) -> Result<(), String> {
    for (i, (_, child, _)) in workers.iter_mut().enumerate() {
        if !done[i] {
            // Our own child, by its handle.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    Err(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_fresh_folder_is_private_to_its_user() {
        let parent = std::env::temp_dir().join(format!("candle-tp-test-{}", std::process::id()));
        let dir = fresh_dir(&parent, "join").unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        std::fs::remove_dir_all(&parent).unwrap();
        assert_eq!(mode, 0o700, "{}", dir.display());
    }

    #[test]
    fn the_texts_are_the_first_real_runs_per_sequence() {
        use crate::report::RunRecord;
        let dir = std::env::temp_dir().join(format!("candle-tp-texts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tokenizer =
            TextTokenizer::open(&crate::tokenizer::tests::write_tiny_bpe(&dir)).unwrap();
        let run = |backend: &str, tokens: Vec<Vec<u32>>| RunRecord {
            backend: backend.into(),
            mode: "graph".into(),
            prefill_ms: 1.0,
            step_ms: vec![1.0],
            tokens,
            algorithms: vec![],
            logits: None,
        };
        let report = RankReport {
            rank: 0,
            world: 2,
            model: "m".into(),
            shape: "s".into(),
            batch: 2,
            gpu: "g".into(),
            weights: "w".into(),
            runs: vec![
                run("none", vec![vec![8], vec![8]]),
                run("colltune", vec![vec![18, 8], vec![13, 99]]),
            ],
            reference_tokens: None,
        };
        let text = texts(&tokenizer, &[vec![19, 12], vec![19, 17]], &report).unwrap();
        assert!(text.starts_with("text (colltune graph, through "), "{text}");
        assert!(
            text.contains("  [0] \"<|begin_of_text|>hello\" → \" world!\"\n"),
            "{text}"
        );
        assert!(
            text.contains("  [1] \"<|begin_of_text|>world\" → \" hello⟨id 99⟩\"\n"),
            "{text}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
