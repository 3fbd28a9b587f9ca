//! Worlds of processes (`World::process`), driven through the `multiprocess`
//! example: its launcher starts one process per rank, checks every result
//! against the host reference, compares the ranks' bits, and judges the
//! requested failures. Found through `COLLTUNE_MULTIPROCESS_EXE` (set by
//! scripts/gpu-run.sh) or next to this test in the target directory
//! (`cargo build --release --example multiprocess`).
//!
//! Two processes on one GPU are time-sliced (about 2.2 ms per exchange was seen
//! on an H200): iteration counts are small, timeouts far above that.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{NEEDS_GPU, device_count};

fn launcher() -> PathBuf {
    if let Some(path) = std::env::var_os("COLLTUNE_MULTIPROCESS_EXE") {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/gpu_processes-<hash> -> target/<profile>/examples/multiprocess
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe.parent().and_then(|d| d.parent()).expect("a target dir");
    let candidate = profile.join("examples").join("multiprocess");
    assert!(
        candidate.exists(),
        "no {}: build it with `cargo build --release -p kernels --example multiprocess` or set \
         COLLTUNE_MULTIPROCESS_EXE",
        candidate.display()
    );
    candidate
}

/// Runs the launcher; returns whether it passed and everything it printed.
fn launch(args: &[&str]) -> (bool, String) {
    eprintln!("== multiprocess {}", args.join(" "));
    // A bound per launch, so one hang is reported on its own.
    let output = Command::new(launcher())
        .args(args)
        .args(["--deadline-s", "90"])
        .env_remove("COLLTUNE_MP_WORKER")
        .output()
        .expect("running the multiprocess launcher");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for line in text.lines().filter(|l| !l.starts_with("CASE ")) {
        eprintln!("   {line}");
    }
    (output.status.success(), text)
}

fn require_gpu() {
    assert!(device_count() > 0, "{NEEDS_GPU}: no GPU visible");
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn processes_sharing_one_gpu_run_every_algorithm() {
    require_gpu();
    let (ok, text) = launch(&["--world-size", "2", "--gpus", "shared", "--matrix"]);
    assert!(ok, "the matrix failed:\n{text}");
    assert!(text.contains("compared bit for bit"), "{text}");
    assert!(
        text.contains("fallback=LoopbackReference"),
        "one GPU has no NCCL: {text}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn three_processes_on_one_gpu_run_decode_all_reduces() {
    require_gpu();
    let (ok, text) = launch(&["--world-size", "3", "--gpus", "shared", "--iters", "60"]);
    assert!(ok, "{text}");
    assert!(text.contains("all ranks agree"), "{text}");
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_peer_that_dies_times_out_on_the_survivors() {
    require_gpu();
    // Both ways of leaving run, whatever the first one does.
    let mut failures = Vec::new();
    for mode in ["exit", "stall"] {
        let (ok, text) = launch(&[
            "--world-size",
            "2",
            "--gpus",
            "shared",
            "--iters",
            "40",
            "--kill-rank",
            "1",
            "--kill-after",
            "20",
            "--kill-mode",
            mode,
            "--timeout-ms",
            "500",
        ]);
        if !(ok && text.contains("expected outcome") && text.contains("kind=timeout")) {
            failures.push(format!("kill mode {mode}:\n{text}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_mismatched_configuration_is_refused_at_construction() {
    require_gpu();
    let (ok, text) = launch(&[
        "--world-size",
        "2",
        "--gpus",
        "shared",
        "--mismatch",
        "dtype",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("rank 1 has f16, rank 0 has bf16"), "{text}");
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn a_world_of_one_process_joins_through_nccl() {
    // The NCCL join path (unique id shared through a file, NCCL init bounded,
    // rounds as NCCL all-gathers, goodbye over NCCL) on a single GPU.
    require_gpu();
    let one = [
        "--world-size",
        "1",
        "--gpus",
        "one-per-gpu",
        "--join",
        "nccl",
    ];
    let (ok, text) = launch(&[&one[..], &["--matrix", "--replays", "3"]].concat());
    assert!(ok, "{text}");
    assert!(text.contains("fallback=Nccl"), "{text}");
    let (ok, text) = launch(&[&one[..], &["--iters", "50"]].concat());
    assert!(ok, "{text}");
}

#[test]
#[ignore = "needs a CUDA GPU: run scripts/gpu-run.sh on a GPU machine"]
fn one_process_per_gpu_against_nccl() {
    require_gpu();
    let gpus = device_count();
    if gpus < 2 {
        eprintln!("SKIPPED one_process_per_gpu_against_nccl: {gpus} GPU visible, needs 2");
        return;
    }
    let world = gpus.min(8).to_string();
    let (ok, text) = launch(&["--world-size", &world, "--gpus", "one-per-gpu", "--matrix"]);
    assert!(ok, "{text}");
    assert!(text.contains("fallback=Nccl"), "{text}");
    let (ok, text) = launch(&[
        "--world-size",
        &world,
        "--gpus",
        "one-per-gpu",
        "--iters",
        "300",
    ]);
    assert!(ok, "{text}");
}
