//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod replay;

use std::path::{Path, PathBuf};

use policy::{Collective, DType, Mode};
use tuner::backend::Repetitions;
use tuner::backend::synthetic::{SyntheticBackend, SyntheticConfig};
use tuner::evidence::Evidence;
use tuner::observe::{Quiet, RunStatus};
use tuner::sweep::{SweepSettings, sweep};

/// A fresh, empty folder under the system's temp dir, unique per test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tuner-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir is writable");
    dir
}

/// A small synthetic sweep: world size 8, bf16, graph and eager, both
/// collectives, 16 B … 16 MiB.
pub fn synthetic_evidence(noise_cv: f64, seed: u64) -> Evidence {
    let settings = SweepSettings {
        collectives: Collective::ALL.to_vec(),
        world_sizes: vec![8],
        dtypes: vec![DType::Bf16],
        modes: vec![Mode::Graph, Mode::Eager],
        min_bytes: 16,
        max_bytes: 16 << 20,
        reps: Repetitions {
            samples: 20,
            warmup: 0,
        },
        ..SweepSettings::default()
    };
    let mut backend = SyntheticBackend::new(SyntheticConfig::planted(noise_cv, seed));
    let outcome = sweep(&mut backend, &settings, "2026-11-29", &mut Quiet).expect("plan is valid");
    assert_eq!(outcome.status, RunStatus::Complete);
    let mut evidence = outcome.evidence;
    evidence.settings.seed = Some(seed);
    evidence
}

pub fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("temp file is writable");
}

/// The tuner binary, run with `args` in the working directory `dir`.
pub fn tuner_in(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tuner"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the tuner binary runs")
}

/// The tuner binary, run with `args` in this package's folder.
pub fn tuner(args: &[&str]) -> std::process::Output {
    tuner_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the exit status, showing both streams when it differs.
pub fn exits(out: &std::process::Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
}

/// The repository's `tuned/`, which `policy` compiles.
pub fn repository_tuned() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tuned")
        .canonicalize()
        .expect("the repository's tuned/ exists")
}

/// Every file of a folder with its bytes, to show that a command left it alone.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .map(|p| {
                    let bytes = std::fs::read(&p).unwrap_or_default();
                    (p, bytes)
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// A quick synthetic sweep's arguments (world size 2, bf16, graph, both
/// collectives, up to 1 MiB: well under a second), into `out`.
pub fn quick_sweep(out: &str) -> Vec<&str> {
    vec![
        "sweep",
        "--synthetic",
        "--noise-pct",
        "2",
        "--world-sizes",
        "2",
        "--dtypes",
        "bf16",
        "--modes",
        "graph",
        "--max-bytes",
        "1MiB",
        "--no-progress",
        "--out",
        out,
    ]
}

/// A published sm90 nvlink file (one all-reduce table), as the shipped files are.
pub const PUBLISHED_SM90: &str = r#"schema = 1

[platform]
arch = "sm90"
gpu = "NVIDIA H200"
link = "nvlink"
source = "published"
citation = "a public engine's thresholds"

[[capacity]]
collective = "all_reduce"
algo = "one_shot_push"
max = "8MiB"
align = 16

[[table]]
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
bands = [
  { max = "256KiB", algo = "one_shot_push" },
  { algo = "nccl" },
]
"#;
