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
