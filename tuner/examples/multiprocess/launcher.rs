//! Starts the workers, relays what they say, bounds the run, and judges it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaContext;

use crate::{Cli, Gpus, JoinBy, code, env};

/// A line from a worker, with when it arrived.
struct Line {
    rank: usize,
    text: String,
    at: Instant,
}

pub fn run(cli: &Cli) -> u8 {
    match launch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("multiprocess: {e}");
            code::ERROR
        }
    }
}

fn launch(cli: &Cli) -> Result<u8, String> {
    let world = cli.world_size;
    if world == 0 || world > kernels::raw::MAX_WORLD {
        return Err(format!(
            "--world-size {world}: 1..={}",
            kernels::raw::MAX_WORLD
        ));
    }
    rank_of(world, "--kill-rank", cli.kill_rank)?;
    rank_of(world, "--fail-window-alloc", cli.fail_window_alloc)?;
    check_profiling_flags(cli, world)?;
    kernels::raw::require_driver().map_err(|e| e.to_string())?;
    let gpus = CudaContext::device_count().map_err(|e| format!("counting GPUs: {e:?}"))? as usize;
    if gpus == 0 {
        return Err("no GPU is visible".into());
    }
    let one_per_gpu = match cli.gpus {
        Gpus::Auto => gpus >= world && world > 1,
        Gpus::Shared => false,
        Gpus::OnePerGpu if gpus < world => {
            return Err(format!(
                "--gpus one-per-gpu needs {world} GPUs, {gpus} visible"
            ));
        }
        Gpus::OnePerGpu => true,
    };
    let join = match cli.join_by {
        JoinBy::Auto if one_per_gpu && kernels::raw::nccl_present() => "nccl",
        JoinBy::Auto | JoinBy::Files => "files",
        JoinBy::Nccl => "nccl",
    };
    let dir = scratch_dir();
    // Private: the rendezvous files under it carry CUDA IPC handles.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    println!(
        "multiprocess: world of {world} process(es) on {} (join: {join}); {}",
        if one_per_gpu {
            format!("{world} GPU(s), one each")
        } else {
            "GPU 0, shared".to_string()
        },
        if cli.matrix {
            "every algorithm x dtype x eager/graph".to_string()
        } else if cli.soak {
            format!(
                "soak: one captured graph replayed {} times, checked every {}{}",
                cli.soak_replays,
                cli.check_every,
                if cli.near_wrap {
                    format!(
                        ", sequence counters started {} below their wrap",
                        cli.wrap_margin
                    )
                } else {
                    String::new()
                }
            )
        } else {
            format!(
                "{} all-reduces of {} per rank, algo {}",
                cli.iters, cli.dtype, cli.algo
            )
        }
    );
    let outcome = supervise(cli, world, one_per_gpu, join, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

/// The launcher's scratch directory for one run.
fn scratch_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("colltune-mp-{}-{nanos}", std::process::id()))
}

fn supervise(
    cli: &Cli,
    world: usize,
    one_per_gpu: bool,
    join: &str,
    dir: &Path,
) -> Result<u8, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (send, receive) = mpsc::channel::<Line>();
    let started = Instant::now();
    let mut children: Vec<Option<Child>> = Vec::with_capacity(world);
    for rank in 0..world {
        let mut child = worker_command(&exe, &args, wrapper_for(cli, rank))
            .env(env::WORKER, "1")
            .env(env::RANK, rank.to_string())
            .env(env::WORLD_SIZE, world.to_string())
            .env(env::DEVICE, if one_per_gpu { rank } else { 0 }.to_string())
            .env(env::DIR, dir)
            .env(env::JOIN, join)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting rank {rank}: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let send = send.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = send.send(Line {
                    rank,
                    text,
                    at: Instant::now(),
                });
            }
        });
        children.push(Some(child));
    }
    drop(send);

    let deadline = started + Duration::from_secs(cli.deadline_s);
    let mut exits: Vec<Option<(i32, Instant)>> = vec![None; world];
    let mut lines: Vec<Line> = Vec::new();
    let mut left_at: Option<Instant> = None;
    loop {
        while let Ok(line) = receive.try_recv() {
            // CASE lines are many: only failures are shown.
            if !line.text.starts_with("CASE ") || line.text.contains(" FAIL ") {
                println!("[rank {}] {}", line.rank, line.text);
            }
            if line.text.starts_with("LEFT ") {
                left_at = Some(line.at);
            }
            lines.push(line);
        }
        for (rank, slot) in children.iter_mut().enumerate() {
            if let Some(child) = slot
                && let Ok(Some(status)) = child.try_wait()
            {
                exits[rank] = Some((status.code().unwrap_or(-1), Instant::now()));
                *slot = None;
            }
        }
        let survivors_done = (0..world)
            .filter(|&r| Some(r) != cli.kill_rank)
            .all(|r| exits[r].is_some());
        if survivors_done && let Some(k) = cli.kill_rank {
            // A stalled rank never ends by itself.
            if let Some(child) = children[k].as_mut() {
                let _ = child.kill();
                let _ = child.wait();
                children[k] = None;
                exits[k].get_or_insert((-9, Instant::now()));
            }
        }
        if exits.iter().all(Option::is_some) {
            break;
        }
        if Instant::now() > deadline {
            for (rank, slot) in children.iter_mut().enumerate() {
                if let Some(child) = slot.as_mut() {
                    eprintln!("multiprocess: rank {rank} still running at the deadline: killed");
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            return Ok(code::ERROR);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The readers end with the workers' stdout.
    std::thread::sleep(Duration::from_millis(50));
    lines.extend(receive.try_iter());
    let elapsed = started.elapsed();
    let codes: Vec<i32> = exits.iter().map(|e| e.expect("exited").0).collect();
    let verdict = if let Some(killed) = cli.kill_rank {
        judge_kill(cli, killed, &exits, left_at, &lines)
    } else if cli.mismatch.is_some() {
        let mismatch = (code::MISMATCH, "mismatch");
        let what = "the dtype in their error";
        judge_refusal(&codes, &lines, mismatch, &["disagree on dtype"], what).map(|()| {
            "expected outcome: every rank refused the world, naming dtype and both values".into()
        })
    } else if cli.split_hosts && join == "files" {
        // Custom kernels cannot cross hosts, and only NCCL could run the calls.
        let words = ["through another host", "has no NCCL"];
        let what = "the other host and the missing NCCL";
        judge_refusal(&codes, &lines, (code::ERROR, "error"), &words, what).map(|()| {
            "expected outcome: every rank refused a world across hosts without NCCL".into()
        })
    } else {
        judge_results(cli, &codes, &lines)
    };
    if cli.soak && cli.kill_rank.is_none() {
        println!("{}", soak_line(cli, &lines, verdict.is_ok(), elapsed));
    }
    println!(
        "multiprocess: {} in {:.1}s (exit codes {codes:?})",
        match &verdict {
            Ok(what) => format!("PASS: {what}"),
            Err(what) => format!("FAIL: {what}"),
        },
        elapsed.as_secs_f64()
    );
    Ok(if verdict.is_ok() {
        code::OK
    } else {
        code::WRONG
    })
}

/// Every rank exited 0, and every result that promises identical bits has the
/// same hash on every rank.
fn judge_results(cli: &Cli, codes: &[i32], lines: &[Line]) -> Result<String, String> {
    if let Some(r) = codes.iter().position(|&c| c != 0) {
        return Err(format!("rank {r} exited with {}", codes[r]));
    }
    // key -> rank -> (ran, exact, hash)
    let mut results: BTreeMap<&str, BTreeMap<usize, (&str, &str, &str)>> = BTreeMap::new();
    for line in lines {
        let (key, rest) = if let Some(rest) = line.text.strip_prefix("CASE ") {
            rest.split_once(' ').unwrap_or((rest, ""))
        } else if let Some(rest) = line.text.strip_prefix("SUMMARY ") {
            ("summary", rest)
        } else {
            continue;
        };
        let ran = field(rest, "ran").or_else(|| field(rest, "algos"));
        let exact = field(rest, "exact").unwrap_or("1");
        let hash = field(rest, "hash").unwrap_or_default();
        results
            .entry(key)
            .or_default()
            .insert(line.rank, (ran.unwrap_or_default(), exact, hash));
    }
    let world = codes.len();
    let mut compared = 0;
    for (key, per_rank) in &results {
        if per_rank.len() != world {
            return Err(format!(
                "{key}: reported by {} of {world} ranks",
                per_rank.len()
            ));
        }
        let first = &per_rank[&0];
        for (rank, other) in per_rank {
            if other.0 != first.0 {
                return Err(format!(
                    "{key}: rank {rank} ran {}, rank 0 ran {}",
                    other.0, first.0
                ));
            }
            if first.1 == "1" && other.2 != first.2 {
                return Err(format!(
                    "{key}: rank {rank}'s result differs from rank 0's (hash {} vs {})",
                    other.2, first.2
                ));
            }
        }
        compared += (*key != "summary" && first.1 == "1") as usize;
    }
    Ok(if cli.matrix {
        format!(
            "{} cases on every rank, {compared} compared bit for bit across ranks",
            results.len().saturating_sub(1)
        )
    } else if cli.soak {
        format!(
            "{} replays per rank; {} window results on every rank, {compared} compared bit for \
             bit across ranks",
            cli.soak_replays,
            results.len().saturating_sub(1)
        )
    } else {
        format!("{} all-reduces per rank, all ranks agree", cli.iters)
    })
}

/// The value of `name=value` among a line's words.
fn field<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

/// The soak's one machine-readable line: total replays per rank, the slowest
/// rank's replay time and rate, failures (wrong windows on any rank, plus one
/// if the ranks disagree or a rank failed), and the launcher's wall time.
fn soak_line(cli: &Cli, lines: &[Line], passed: bool, wall: Duration) -> String {
    let number = |text: &str, name: &str| -> Option<f64> { field(text, name)?.parse().ok() };
    let summaries: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.text.strip_prefix("SUMMARY "))
        .collect();
    let replays = summaries
        .iter()
        .filter_map(|s| number(s, "replays"))
        .fold(f64::INFINITY, f64::min);
    let seconds = summaries
        .iter()
        .filter_map(|s| number(s, "seconds"))
        .fold(0.0, f64::max);
    let mut failures: f64 = summaries.iter().filter_map(|s| number(s, "failures")).sum();
    let complete = summaries.len() == cli.world_size && replays.is_finite();
    if !passed || !complete {
        failures += 1.0;
    }
    let replays = if replays.is_finite() { replays } else { 0.0 };
    format!(
        "soak: replays={replays:.0} seconds={seconds:.3} replays_per_s={:.1} failures={failures:.0} \
         wall_s={:.1} world={} near_wrap={}",
        if seconds > 0.0 {
            replays / seconds
        } else {
            0.0
        },
        wall.as_secs_f64(),
        cli.world_size,
        cli.near_wrap as u8
    )
}

/// The killed rank left; every survivor reported an error (a timeout, or an
/// NCCL error naming the lost peer) within the bound.
fn judge_kill(
    cli: &Cli,
    killed: usize,
    exits: &[Option<(i32, Instant)>],
    left_at: Option<Instant>,
    lines: &[Line],
) -> Result<String, String> {
    let left_at = left_at.ok_or_else(|| format!("rank {killed} never reported leaving"))?;
    let timeout = Duration::from_millis(cli.timeout_ms.unwrap_or(1000));
    // The device wait, plus process teardown and time-slicing on a shared GPU.
    let bound = timeout + Duration::from_secs(20);
    let mut slowest = Duration::ZERO;
    let mut slowest_report = Duration::ZERO;
    for (rank, exit) in exits.iter().enumerate() {
        if rank == killed {
            continue;
        }
        let (code, at) = exit.expect("exited");
        // NCCL may notice a dead peer first (its proxy's connection closes):
        // an NCCL error is the right report then, too.
        let nccl_saw_it = code == code::ERROR as i32
            && lines
                .iter()
                .any(|l| l.rank == rank && l.text.starts_with("ERROR ") && l.text.contains("NCCL"));
        if code != code::TIMEOUT as i32 && !nccl_saw_it {
            return Err(format!(
                "survivor rank {rank} exited with {code}, not the timeout code {}",
                code::TIMEOUT
            ));
        }
        let took = at.saturating_duration_since(left_at);
        if took > bound {
            return Err(format!(
                "survivor rank {rank} took {took:?} (bound {bound:?})"
            ));
        }
        slowest = slowest.max(took);
        // When the error was printed, apart from the exit: the difference is
        // teardown (the worker's `+…s` lines break it down).
        if let Some(line) = lines
            .iter()
            .find(|l| l.rank == rank && l.text.starts_with("ERROR "))
        {
            slowest_report = slowest_report.max(line.at.saturating_duration_since(left_at));
        }
    }
    Ok(format!(
        "expected outcome: rank {killed} left ({:?}); every survivor reported Error::Timeout and \
         exited within {:.2}s (error reported within {:.2}s)",
        cli.kill_mode,
        slowest.as_secs_f64(),
        slowest_report.as_secs_f64()
    ))
}

/// Every rank refused the world: exited with `code` (the `code_name` code)
/// and said so in an `ERROR` line holding every one of `words`, which name
/// `what` the refusal was about.
fn judge_refusal(
    codes: &[i32],
    lines: &[Line],
    (code, code_name): (u8, &str),
    words: &[&str],
    what: &str,
) -> Result<(), String> {
    if let Some(r) = codes.iter().position(|&c| c != code as i32) {
        return Err(format!(
            "rank {r} exited with {}, not the {code_name} code {code}",
            codes[r]
        ));
    }
    let named = lines
        .iter()
        .filter(|l| l.text.starts_with("ERROR ") && words.iter().all(|w| l.text.contains(w)))
        .count();
    if named != codes.len() {
        return Err(format!("{named} of {} ranks named {what}", codes.len()));
    }
    Ok(())
}

/// Most elements `--elements` takes: 512 MiB of bf16 per rank, already more
/// than the host reference can check quickly.
const MAX_ELEMENTS: usize = 1 << 28;

/// Refuses `--elements` and `--wrap-*` values that could not run as meant.
fn check_profiling_flags(cli: &Cli, world: usize) -> Result<(), String> {
    if let Some(n) = cli.elements.filter(|&n| n == 0 || n > MAX_ELEMENTS) {
        return Err(format!("--elements {n}: 1..={MAX_ELEMENTS}"));
    }
    rank_of(world, "--wrap-rank", cli.wrap_rank)?;
    if cli
        .wrap_with
        .as_deref()
        .is_some_and(|w| w.trim().is_empty())
    {
        return Err("--wrap-with is empty: give the command that runs the worker".into());
    }
    Ok(())
}

/// Refuses a `flag` naming a rank the world does not have.
fn rank_of(world: usize, flag: &str, rank: Option<usize>) -> Result<(), String> {
    match rank {
        Some(r) if r >= world => Err(format!("{flag} {r} is not a rank of a world of {world}")),
        _ => Ok(()),
    }
}

/// The command line `--wrap-with` gives for `rank`, if it is the `--wrap-rank`.
fn wrapper_for(cli: &Cli, rank: usize) -> Option<Vec<String>> {
    match (&cli.wrap_with, cli.wrap_rank) {
        (Some(wrapper), Some(wrapped)) if wrapped == rank => {
            Some(wrapper.split_whitespace().map(str::to_string).collect())
        }
        _ => None,
    }
}

/// A worker: this program with the launcher's arguments, or, under a wrapper
/// (a profiler), the wrapper's command line followed by both. The environment
/// set on it reaches the worker through the wrapper.
fn worker_command(exe: &Path, args: &[String], wrapper: Option<Vec<String>>) -> Command {
    match wrapper {
        Some(wrapper) if !wrapper.is_empty() => {
            let mut command = Command::new(&wrapper[0]);
            command.args(&wrapper[1..]).arg(exe).args(args);
            command
        }
        _ => {
            let mut command = Command::new(exe);
            command.args(args);
            command
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(command: &Command) -> Vec<String> {
        std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_wrapped_worker_runs_under_its_wrapper() {
        let exe = Path::new("/bin/multiprocess");
        let args = vec!["--world-size".to_string(), "2".to_string()];
        let plain = worker_command(exe, &args, None);
        assert_eq!(parts(&plain), ["/bin/multiprocess", "--world-size", "2"]);
        let wrapped = worker_command(
            exe,
            &args,
            Some(vec!["ncu".into(), "--launch-count".into(), "1".into()]),
        );
        assert_eq!(
            parts(&wrapped),
            [
                "ncu",
                "--launch-count",
                "1",
                "/bin/multiprocess",
                "--world-size",
                "2"
            ]
        );
    }

    #[test]
    fn only_the_wrap_rank_is_wrapped() {
        use clap::Parser;
        let cli = Cli::parse_from([
            "multiprocess",
            "--wrap-rank",
            "1",
            "--wrap-with",
            "ncu  -k regex:two_shot",
        ]);
        assert_eq!(wrapper_for(&cli, 0), None);
        assert_eq!(
            wrapper_for(&cli, 1),
            Some(vec![
                "ncu".to_string(),
                "-k".to_string(),
                "regex:two_shot".to_string()
            ])
        );
        // Either flag alone is refused.
        assert!(Cli::try_parse_from(["multiprocess", "--wrap-rank", "0"]).is_err());
    }

    #[test]
    fn profiling_flags_that_cannot_run_are_refused() {
        use clap::Parser;
        let check = |args: &[&str]| {
            let cli = Cli::parse_from(std::iter::once("multiprocess").chain(args.iter().copied()));
            check_profiling_flags(&cli, 2)
        };
        assert!(check(&[]).is_ok());
        assert!(
            check(&[
                "--elements",
                "8388608",
                "--wrap-rank",
                "1",
                "--wrap-with",
                "ncu"
            ])
            .is_ok()
        );
        assert_eq!(
            check(&["--elements", "0"]).unwrap_err(),
            format!("--elements 0: 1..={MAX_ELEMENTS}")
        );
        assert!(check(&["--elements", "268435457"]).is_err());
        assert_eq!(
            check(&["--wrap-rank", "2", "--wrap-with", "ncu"]).unwrap_err(),
            "--wrap-rank 2 is not a rank of a world of 2"
        );
        assert!(check(&["--wrap-rank", "0", "--wrap-with", "  "]).is_err());
    }
}
