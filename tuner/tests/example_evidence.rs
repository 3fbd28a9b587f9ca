//! The evidence recorded on an H200 (tuner/examples/h200-loopback) re-fits to the
//! TOML committed beside it, byte for byte: real measurements, not a synthetic
//! model, keep `fit` deterministic across releases (or the change shows up here).

use std::path::Path;
use std::process::Command;

#[test]
fn recorded_h200_evidence_refits_to_the_committed_toml() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/h200-loopback");
    let output = Command::new(env!("CARGO_BIN_EXE_tuner"))
        .arg("fit")
        .arg(dir.join("sm90-loopback.evidence.json"))
        .args(["-o", "-"])
        .output()
        .expect("run tuner fit");
    assert!(
        output.status.success(),
        "tuner fit failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let committed = std::fs::read_to_string(dir.join("sm90-loopback.toml")).unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), committed);
}

/// The budget reports committed in `tuner/runs/2026-12-02-memory-budget/` are
/// what `tuner fit --memory-budget` prints for the shipped H200 evidence of
/// world sizes 2 and 4, at 64 MiB and at the runtime's default 256 MiB: the
/// figures kernels/GPU.md quotes are the code's.
#[cfg(feature = "gpu")]
#[test]
fn committed_budget_reports_are_what_the_fit_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let runs = root.join("runs/2026-12-02-memory-budget");
    for (evidence, world) in [
        ("sm90-nvlink.evidence.json", "ws2"),
        ("sm90-nvlink.2026-11-30.evidence.json", "ws4"),
    ] {
        for budget in ["64MiB", "256MiB"] {
            let out = std::env::temp_dir().join(format!(
                "tuner-budget-report-{}-{world}-{budget}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&out);
            std::fs::create_dir_all(&out).unwrap();
            std::fs::copy(root.join("../tuned").join(evidence), out.join(evidence)).unwrap();
            let output = Command::new(env!("CARGO_BIN_EXE_tuner"))
                .arg("fit")
                .arg(out.join(evidence))
                .args(["--memory-budget", budget, "-o"])
                .arg(out.join("sm90-nvlink.toml"))
                .output()
                .expect("run tuner fit");
            assert!(
                output.status.success(),
                "tuner fit failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let printed = String::from_utf8(output.stdout)
                .unwrap()
                .replace(out.to_str().unwrap(), "OUT");
            let name = format!("fit-{world}-{budget}.txt");
            let committed = std::fs::read_to_string(runs.join(&name)).unwrap();
            assert!(
                printed == committed,
                "{name} differs from what the fit prints now:\n{printed}"
            );
            let _ = std::fs::remove_dir_all(&out);
        }
    }
}
