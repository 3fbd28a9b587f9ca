//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tuned_schema::{Collective, DType, Mode};
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
