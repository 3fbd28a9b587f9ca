//! How long building a `World` takes, and what its kernels cost: the
//! start-up figures of kernels/GPU.md ("Start-up").
//!
//! ```text
//! startup one                  a world of one on GPU 0 (NCCL's init included)
//! startup loopback W           a loopback world of W ranks on GPU 0
//! startup processes W          W processes sharing GPU 0, joined through files
//!     [--cache-dir DIR|off]    the kernel cache (default: Options' default,
//!                              COLLTUNE_CACHE_DIR, else ~/.cache/colltune)
//!     [--builds N]             worlds built one after the other in each process (default 1)
//! ```
//!
//! Prints one line per rank and build, e.g.
//! `STARTUP loopback world=2 rank=0 build=1 world_ms=412.3 kernels=disk obtain_ms=35.1 load_ms=61.0 rest_ms=316.2`:
//! `world_ms` is the constructor's whole time, `kernels` how the kernels
//! were obtained (`compiled` with NVRTC, read from the `disk` cache, or
//! already in the `process`), `obtain_ms` what getting them took, `load_ms`
//! loading them into the context, `rest_ms` everything else (buffers, IPC,
//! the rendezvous; NCCL's init in a world of one). A cold cache is an empty
//! or new `--cache-dir`.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use kernels::{Join, KernelCache, KernelOrigin, Options, ProcessSpec, RankComm, World};

/// What a worker of `startup processes` gets from its launcher.
const RANK_ENV: &str = "COLLTUNE_STARTUP_RANK";
const DIR_ENV: &str = "COLLTUNE_STARTUP_DIR";

/// Bound on a world of processes forming and every worker exiting.
const DEADLINE: Duration = Duration::from_secs(180);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    One,
    Loopback,
    Processes,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::One => "one",
            Kind::Loopback => "loopback",
            Kind::Processes => "processes",
        }
    }
}

struct Args {
    kind: Kind,
    world: usize,
    cache: KernelCache,
    builds: usize,
    /// The arguments as given, for the workers.
    raw: Vec<String>,
}

const USAGE: &str = "usage: startup one|loopback W|processes W [--cache-dir DIR|off] [--builds N]";

fn parse(raw: Vec<String>) -> Result<Args, String> {
    let mut words = raw.iter().map(String::as_str);
    let (kind, world) = match words.next() {
        Some("one") => (Kind::One, 1),
        Some(kind @ ("loopback" | "processes")) => {
            let world = words
                .next()
                .and_then(|w| w.parse::<usize>().ok())
                .filter(|&w| w >= 1)
                .ok_or_else(|| format!("{kind} needs a world size\n{USAGE}"))?;
            let kind = if kind == "loopback" {
                Kind::Loopback
            } else {
                Kind::Processes
            };
            (kind, world)
        }
        _ => return Err(USAGE.into()),
    };
    let mut cache = KernelCache::FromEnv;
    let mut builds = 1;
    while let Some(flag) = words.next() {
        let value = words
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag {
            "--cache-dir" if value == "off" => cache = KernelCache::Off,
            "--cache-dir" => cache = KernelCache::Dir(PathBuf::from(value)),
            "--builds" => {
                builds = value
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| format!("--builds {value}: expected a count\n{USAGE}"))?
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(Args {
        kind,
        world,
        cache,
        builds,
        raw,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The line of one rank of one build.
fn report(args: &Args, build: usize, took: Duration, rank: &RankComm) {
    let kernels = rank.kernel_startup();
    let rest = took.saturating_sub(kernels.obtain + kernels.load);
    println!(
        "STARTUP {} world={} rank={} build={build} world_ms={:.1} kernels={} obtain_ms={:.1} \
         load_ms={:.1} rest_ms={:.1}",
        args.kind.name(),
        args.world,
        rank.rank(),
        ms(took),
        KernelOrigin::word(kernels.origin),
        ms(kernels.obtain),
        ms(kernels.load),
        ms(rest),
    );
}

fn options(args: &Args) -> Options {
    Options {
        kernel_cache: args.cache.clone(),
        ..Options::default()
    }
}

/// `one` and `loopback`: every rank in this process.
fn single_process(args: &Args) -> Result<(), String> {
    let ctx = kernels::open_device(0).map_err(|e| e.to_string())?;
    for build in 1..=args.builds {
        let start = Instant::now();
        let ranks =
            World::loopback(ctx.clone(), args.world, options(args)).map_err(|e| e.to_string())?;
        let took = start.elapsed();
        for rank in &ranks {
            report(args, build, took, rank);
        }
    }
    Ok(())
}

/// A worker of `processes`: this process's rank.
fn worker(args: &Args, rank: usize, dir: PathBuf) -> Result<(), String> {
    let ctx = kernels::open_device(0).map_err(|e| e.to_string())?;
    for build in 1..=args.builds {
        // A fresh rendezvous folder per world.
        let join = Join::Files(dir.join(format!("build-{build}")));
        let stream = ctx.new_stream().map_err(|e| format!("{e:?}"))?;
        let spec = ProcessSpec::new(rank, args.world, join);
        let start = Instant::now();
        let comm = World::process(stream, spec, options(args)).map_err(|e| e.to_string())?;
        report(args, build, start.elapsed(), &comm);
    }
    Ok(())
}

/// `processes`: starts one worker per rank and waits for them, bounded.
fn launcher(args: &Args) -> Result<(), String> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("colltune-startup-{}-{stamp}", std::process::id()));
    // Private, as the file rendezvous requires of the folders it uses.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut workers: Vec<Child> = Vec::new();
    for rank in 0..args.world {
        let child = Command::new(&exe)
            .args(&args.raw)
            .env(RANK_ENV, rank.to_string())
            .env(DIR_ENV, &dir)
            .spawn()
            .map_err(|e| format!("starting rank {rank}: {e}"))?;
        workers.push(child);
    }
    let deadline = Instant::now() + DEADLINE;
    let mut failed = Vec::new();
    for (rank, child) in workers.iter_mut().enumerate() {
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        failed.push(format!("rank {rank}: {status}"));
                    }
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    failed.push(format!(
                        "rank {rank}: still running after {DEADLINE:?}, killed"
                    ));
                    break;
                }
                Err(e) => {
                    failed.push(format!("rank {rank}: {e}"));
                    break;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread exists.
    if let Err(why) = unsafe { kernels::raw::keep_multicast_off() } {
        eprintln!("startup: {why}");
        return ExitCode::from(2);
    }
    let args = match parse(std::env::args().skip(1).collect()) {
        Ok(args) => args,
        Err(why) => {
            eprintln!("startup: {why}");
            return ExitCode::from(2);
        }
    };
    let rank = std::env::var(RANK_ENV).ok().and_then(|r| r.parse().ok());
    let result = match (args.kind, rank, std::env::var_os(DIR_ENV)) {
        (Kind::Processes, Some(rank), Some(dir)) => worker(&args, rank, dir.into()),
        (Kind::Processes, _, _) => launcher(&args),
        _ => single_process(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("startup: {why}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn the_three_worlds_and_their_sizes() {
        let one = args("one").unwrap();
        assert_eq!((one.kind, one.world, one.builds), (Kind::One, 1, 1));
        assert_eq!(one.cache, KernelCache::FromEnv);
        let loopback = args("loopback 4").unwrap();
        assert_eq!((loopback.kind, loopback.world), (Kind::Loopback, 4));
        let processes = args("processes 2 --builds 3").unwrap();
        assert_eq!(
            (processes.kind, processes.world, processes.builds),
            (Kind::Processes, 2, 3)
        );
        // The workers get the launcher's arguments as they were given.
        assert_eq!(processes.raw, ["processes", "2", "--builds", "3"]);
    }

    #[test]
    fn the_cache_folder_or_none() {
        assert_eq!(
            args("one --cache-dir /tmp/k").unwrap().cache,
            KernelCache::Dir("/tmp/k".into())
        );
        assert_eq!(args("one --cache-dir off").unwrap().cache, KernelCache::Off);
    }

    #[test]
    fn bad_command_lines_are_refused_with_the_usage() {
        for bad in [
            "",
            "two",
            "loopback",
            "loopback 0",
            "processes x",
            "one --builds 0",
            "one --cache-dir",
            "one --colour red",
        ] {
            let err = args(bad)
                .err()
                .unwrap_or_else(|| panic!("`{bad}` was accepted"));
            assert!(err.contains("usage: startup"), "`{bad}`: {err}");
        }
    }
}
