//! `fit` on recorded evidence is deterministic: the same evidence gives a
//! byte-identical TOML, whichever way it is run and however the evidence
//! happens to be ordered.

mod common;

use std::process::Command;

use tuned_schema::write::to_toml_string;
use tuner::evidence::Evidence;
use tuner::fit::{FitSettings, fit};
use tuner::tuned_file::build_document;

fn toml_of(evidence: &Evidence) -> String {
    let result = fit(evidence, &FitSettings::default());
    to_toml_string(&build_document(
        evidence,
        &result,
        Some("x.evidence.json"),
        Vec::new(),
    ))
}

#[test]
fn same_evidence_same_bytes() {
    let evidence = common::synthetic_evidence(0.05, 7);
    let first = toml_of(&evidence);
    assert_eq!(first, toml_of(&evidence));
    // Through the file format: what a reviewer re-fits is what the sweep fitted.
    let reloaded = Evidence::from_json("x.evidence.json", &evidence.to_json()).unwrap();
    assert_eq!(reloaded, evidence);
    assert_eq!(toml_of(&reloaded), first);
}

#[test]
fn the_order_of_points_and_keys_does_not_matter() {
    let evidence = common::synthetic_evidence(0.05, 8);
    let mut shuffled = evidence.clone();
    shuffled.keys.reverse();
    for key in &mut shuffled.keys {
        key.points.reverse();
        // A fixed interleaving too, not just a reversal.
        let (even, odd): (Vec<_>, Vec<_>) = key
            .points
            .drain(..)
            .enumerate()
            .partition(|(i, _)| i % 2 == 0);
        key.points = odd.into_iter().chain(even).map(|(_, p)| p).collect();
    }
    assert_eq!(toml_of(&shuffled), toml_of(&evidence));
}

#[test]
fn the_binary_writes_identical_files() {
    let dir = common::scratch("determinism");
    let evidence_path = dir.join("sm90-nvlink.evidence.json");
    common::write(
        &evidence_path,
        &common::synthetic_evidence(0.03, 9).to_json(),
    );
    let run = |out: &str| {
        let status = Command::new(env!("CARGO_BIN_EXE_tuner"))
            .args([
                "fit",
                evidence_path.to_str().unwrap(),
                "-o",
                dir.join(out).to_str().unwrap(),
            ])
            .output()
            .expect("tuner runs");
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        std::fs::read(dir.join(out)).unwrap()
    };
    // Two folders: one folder holds one file per platform.
    let a = run("a/sm90-nvlink.toml");
    let b = run("b/sm90-nvlink.toml");
    assert_eq!(a, b);
    let text = String::from_utf8(a).unwrap();
    assert!(
        text.contains("date = \"2026-11-29\""),
        "dates come from the evidence: {text}"
    );
}
