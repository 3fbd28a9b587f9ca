//! `scripts/gpu-skips.sh`, the rule by which `scripts/gpu-run.sh` fails a GPU
//! run that skipped a test the machine could have run, on logs written the
//! way the GPU suites write them (no GPU needed).

mod common;

#[path = "gpu_common/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the script on `logs` (name, content) for a machine of `gpus`:
/// (exit code, stdout, stderr).
fn judge(gpus: &str, logs: &[(&str, String)]) -> (Option<i32>, String, String) {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = common::scratch(&format!(
        "gpu-skips-{}",
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let mut paths = Vec::new();
    for (name, text) in logs {
        let path = dir.join(format!("{name}.log"));
        std::fs::write(&path, text).unwrap();
        paths.push(path);
    }
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-skips.sh"))
        .arg(gpus)
        .args(&paths)
        .output()
        .expect("bash runs");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A log as libtest writes it with `--nocapture`: the test's output follows
/// `test <name> ... ` on the same line.
fn log_of(tests: &[(&str, Option<(usize, usize)>)]) -> String {
    let mut text = format!("\nrunning {} tests\n", tests.len());
    for (name, skipped) in tests {
        match skipped {
            Some((needs, visible)) => {
                text += &format!(
                    "test {name} ... {}\nok\n",
                    skip::line(name, *needs, *visible)
                )
            }
            None => text += &format!("test {name} ... == some output\n   ok: a case\nok\n"),
        }
    }
    text + "\ntest result: ok.\n"
}

fn two_logs() -> Vec<(&'static str, String)> {
    vec![
        (
            "gpu_devices",
            log_of(&[
                ("devices_world_of_one_gpu", None),
                ("devices_suite_against_nccl", Some((2, 1))),
            ]),
        ),
        (
            "gpu_processes",
            log_of(&[
                ("one_process_per_gpu_against_nccl", Some((2, 1))),
                ("processes_sharing_one_gpu_run_every_algorithm", None),
            ]),
        ),
    ]
}

#[test]
fn skips_a_machine_could_not_run_are_listed_and_pass() {
    let (code, stdout, stderr) = judge("1", &two_logs());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "  gpu_devices: devices_suite_against_nccl: needs 2 GPUs, 1 visible; this machine has 1\n  \
         gpu_processes: one_process_per_gpu_against_nccl: needs 2 GPUs, 1 visible; this machine \
         has 1\n"
    );
}

#[test]
fn a_skip_on_a_machine_with_enough_gpus_fails_the_run() {
    // Two GPUs in the machine, one shown to the tests (CUDA_VISIBLE_DEVICES).
    let (code, stdout, _) = judge("2", &two_logs());
    assert_eq!(code, Some(1), "{stdout}");
    for test in [
        "devices_suite_against_nccl",
        "one_process_per_gpu_against_nccl",
    ] {
        assert!(
            stdout.contains(&format!(
                "{test}: needs 2 GPUs, 1 visible; this machine has 2: FAIL (it could have run here)"
            )),
            "{stdout}"
        );
    }
    // One avoidable skip among unavoidable ones is enough.
    let mut logs = two_logs();
    logs.push(("gpu_more", log_of(&[("a_world_of_eight", Some((8, 2)))])));
    let (code, stdout, _) = judge("2", &logs);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("a_world_of_eight: needs 8 GPUs, 2 visible; this machine has 2\n"),
        "{stdout}"
    );
}

#[test]
fn a_skip_that_cannot_be_judged_fails_the_run() {
    // The old free-form line, and a machine whose GPUs could not be counted.
    let old = "test devices_suite_against_nccl ... SKIPPED: 1 GPU visible; the multi-GPU suite \
               needs at least 2\nok\n"
        .to_string();
    let (code, stdout, _) = judge("1", &[("gpu_devices", old)]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("gpu_devices: FAIL (a SKIPPED line in no known form): test devices_suite"),
        "{stdout}"
    );
    let (code, stdout, _) = judge("unknown", &two_logs());
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("this machine has unknown: FAIL (cannot tell whether it could have run"),
        "{stdout}"
    );
}

#[test]
fn a_run_without_skips_passes_silently() {
    let logs = [(
        "gpu_loopback",
        log_of(&[
            ("loopback_in_place", None),
            ("loopback_capacity_sizes", None),
        ]),
    )];
    for gpus in ["0", "1", "8", "unknown"] {
        assert_eq!(judge(gpus, &logs), (Some(0), String::new(), String::new()));
    }
}

#[test]
fn bad_arguments_are_refused() {
    let (code, _, stderr) = judge("two", &two_logs());
    assert_eq!(code, Some(2));
    assert!(stderr.contains("not 'two'"), "{stderr}");
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-skips.sh"))
        .args(["1", "/nonexistent/gpu_devices.log"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent"));
}

/// gpu-run.sh applies the rule to the logs of what it ran, with the machine's
/// GPU count from `nvidia-smi -L`, and fails the run on it.
#[test]
fn gpu_run_applies_the_rule() {
    let script = std::fs::read_to_string(repo().join("scripts/gpu-run.sh")).unwrap();
    assert!(
        script.contains("nvidia-smi -L 2>/dev/null | grep -c '^GPU '"),
        "gpu-run.sh no longer counts the machine's GPUs"
    );
    assert!(
        script.contains("scripts/gpu-skips.sh \"$machine_gpus\" \"${ran_logs[@]}\""),
        "gpu-run.sh no longer judges its skips"
    );
}
