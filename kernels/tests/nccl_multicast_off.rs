//! NVLink multicast (NVLS) and the process environment.
//!
//! The library leaves the environment alone: whether an engine's NCCL uses
//! NVLS is the engine's choice, and writing the environment of a process
//! whose threads may read it is undefined behaviour. colltune's own runs
//! never use NVLS, which can take a shared host's GPUs out of service: every
//! program of this repository keeps `NCCL_NVLS_ENABLE=0` first thing in
//! `main` (`kernels::raw::keep_multicast_off`), every script that runs them
//! on a GPU machine exports it, and the GPU test binaries refuse to run
//! without it. These tests read the repository's sources to hold that rule
//! for every program and script, present and future.
//!
//! Only `keep_multicast_off_sets_zero_and_refuses_multicast` changes this
//! process's environment; the other tests only read files.

use std::fs;
use std::path::{Path, PathBuf};

use kernels::raw::{NVLS_ENV, keep_multicast_off};

/// The repository (this crate's parent folder).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kernels/ lies in the repository")
        .to_path_buf()
}

/// Every file under `dir` whose name ends with `suffix`, as paths relative
/// to the repository, skipping build outputs and caches.
fn files_ending(suffix: &str) -> Vec<String> {
    fn walk(dir: &Path, suffix: &str, found: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().unwrap().is_dir() {
                let skip = ["target", ".git", ".cache", ".carry", "node_modules"];
                if !skip.contains(&name.as_str()) && !name.starts_with("gpu-logs") {
                    walk(&path, suffix, found);
                }
            } else if name.ends_with(suffix) {
                found.push(path);
            }
        }
    }
    let root = repository();
    let mut found = Vec::new();
    walk(&root, suffix, &mut found);
    let mut relative: Vec<String> = found
        .iter()
        .map(|p| {
            p.strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    relative.sort();
    relative
}

fn read(relative: &str) -> String {
    fs::read_to_string(repository().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The first statement of the function whose signature line starts with
/// `signature` (unindented or indented), skipping blank and comment lines.
fn first_statement<'a>(text: &'a str, signature: &str) -> Option<&'a str> {
    let mut lines = text.lines();
    lines.find(|line| line.trim_start().starts_with(signature))?;
    lines
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with("//"))
}

#[test]
fn the_library_leaves_the_environment_alone() {
    let sources: Vec<String> = files_ending(".rs")
        .into_iter()
        .filter(|path| path.starts_with("kernels/src/"))
        .collect();
    assert!(sources.len() > 20, "kernels/src not found: {sources:?}");
    let mut writes = Vec::new();
    for path in &sources {
        let text = read(path);
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if code.contains("set_var(") || code.contains("remove_var(") {
                writes.push(format!("{path}:{}: {code}", n + 1));
            }
            // The helpers for colltune's own programs exist, but nothing in
            // the library calls them.
            for helper in ["keep_multicast_off(", "require_multicast_off("] {
                if code.contains(helper) && !code.contains("fn ") {
                    panic!("{path}:{}: the library calls {helper}): {code}", n + 1);
                }
            }
        }
    }
    // The one write is keep_multicast_off's own, for programs that call it.
    let ffi = read("kernels/src/ffi.rs");
    let body_start = ffi
        .find("pub unsafe fn keep_multicast_off()")
        .expect("the helper");
    let body = &ffi[body_start..body_start + ffi[body_start..].find("\n}\n").unwrap()];
    assert_eq!(
        writes.len(),
        1,
        "the library writes the environment: {writes:#?}"
    );
    assert!(
        body.contains("std::env::set_var(NVLS_ENV, \"0\")"),
        "{writes:?}"
    );
    // require_nccl (every NCCL entry point) neither reads nor refuses it.
    let require_nccl = &ffi[ffi.find("pub fn require_nccl()").unwrap()..];
    let require_nccl = &require_nccl[..require_nccl.find("\n}\n").unwrap()];
    assert!(!require_nccl.contains("multicast") && !require_nccl.contains("NVLS"));
}

/// Programs that never start an NCCL communicator, or that keep multicast
/// off another way, and why.
fn exempt_program(path: &str) -> Option<&'static str> {
    if path.ends_with("build.rs") {
        return Some("a build script, run by Cargo at compile time");
    }
    if path.starts_with("policy/tests/ui/") {
        return Some("a compile-fail case of the table macro, never run");
    }
    if path == "examples/candle-tp/src/main.rs" {
        return Some("its launcher starts every worker with NCCL_NVLS_ENABLE=0 (checked below)");
    }
    None
}

#[test]
fn every_program_of_ours_keeps_multicast_off_first_thing_in_main() {
    let mut programs = Vec::new();
    for path in files_ending(".rs") {
        let text = read(&path);
        if !text.lines().any(|line| line.starts_with("fn main(")) {
            continue;
        }
        programs.push(path.clone());
        if exempt_program(&path).is_some() {
            continue;
        }
        let first = first_statement(&text, "fn main(").unwrap();
        assert!(
            first.contains("keep_multicast_off()"),
            "{path}: main must start with kernels::raw::keep_multicast_off() (before any \
             thread exists), but starts with `{first}`"
        );
    }
    // The walk found the programs it is about.
    for expected in [
        "tuner/src/main.rs",
        "tuner/examples/multiprocess/main.rs",
        "kernels/examples/startup.rs",
        "examples/candle-tp/src/main.rs",
    ] {
        assert!(
            programs.iter().any(|p| p == expected),
            "{expected} not found: {programs:?}"
        );
    }
}

#[test]
fn candle_tp_starts_its_workers_without_multicast() {
    let launch = read("examples/candle-tp/src/launch.rs");
    assert!(
        launch.contains("(\"NCCL_NVLS_ENABLE\", \"0\")"),
        "candle-tp's WORKER_ENV lost NCCL_NVLS_ENABLE=0"
    );
    assert!(
        launch.contains(".envs(WORKER_ENV)"),
        "candle-tp's workers no longer get WORKER_ENV"
    );
}

#[test]
fn the_gpu_tests_refuse_to_run_with_multicast() {
    let common = read("tuner/tests/gpu_common/mod.rs");
    for entry in ["pub fn gpu(", "pub fn device_count("] {
        let first = first_statement(&common, entry).unwrap();
        assert!(
            first.contains("require_multicast_off()"),
            "gpu_common's {entry}) must check NCCL_NVLS_ENABLE first, starts with `{first}`"
        );
    }
}

/// Scripts that run no program of ours on a GPU, and why.
fn exempt_script(path: &str) -> Option<&'static str> {
    Some(match path {
        "scripts/gpu-build.sh" | "examples/candle-tp/build-gpu.sh" => "builds, runs nothing",
        "scripts/package-check.sh" => "builds and tests the packaged crates; no GPU",
        "scripts/install-nvrtc.sh" => "installs NVRTC",
        "scripts/gpu-skips.sh" => "reads test logs",
        "scripts/test.sh" | "scripts/check-adding-an-algorithm.sh" => {
            "cargo test without a GPU: the GPU tests are ignored there, and refuse to run \
             without NCCL_NVLS_ENABLE=0"
        }
        _ => return None,
    })
}

#[test]
fn every_script_that_runs_our_programs_exports_multicast_off() {
    let scripts = files_ending(".sh");
    assert!(
        scripts.iter().any(|s| s == "scripts/gpu-run.sh"),
        "{scripts:?}"
    );
    for path in scripts {
        if exempt_script(&path).is_some() {
            continue;
        }
        // Unindented: not inside a branch that might not run.
        let exports = read(&path)
            .lines()
            .any(|line| line.starts_with("export NCCL_NVLS_ENABLE=0"));
        assert!(
            exports,
            "{path} must `export NCCL_NVLS_ENABLE=0` before it runs anything"
        );
    }
}

#[test]
fn keep_multicast_off_sets_zero_and_refuses_multicast() {
    // SAFETY: the only test of this binary that touches the environment; the
    // others only read files.
    unsafe { std::env::remove_var(NVLS_ENV) };
    // SAFETY: as above.
    unsafe { keep_multicast_off() }.expect("an unset variable is set, not refused");
    assert_eq!(std::env::var(NVLS_ENV).as_deref(), Ok("0"));
    // SAFETY: as above.
    unsafe { keep_multicast_off() }.expect("0 is accepted");
    assert_eq!(std::env::var(NVLS_ENV).as_deref(), Ok("0"));
    // A process that asks for multicast is refused, by name, and left as it is.
    unsafe { std::env::set_var(NVLS_ENV, "1") };
    // SAFETY: as above.
    let refused = unsafe { keep_multicast_off() }.expect_err("multicast is refused");
    assert!(
        refused
            .to_string()
            .starts_with("unsupported: NCCL_NVLS_ENABLE=1: colltune's own programs"),
        "{refused}"
    );
    assert_eq!(std::env::var(NVLS_ENV).as_deref(), Ok("1"));
    assert!(kernels::raw::require_multicast_off().is_err());
    unsafe { std::env::set_var(NVLS_ENV, "0") };
    assert!(kernels::raw::require_multicast_off().is_ok());
    unsafe { std::env::remove_var(NVLS_ENV) };
    assert!(kernels::raw::require_multicast_off().is_err());
}
