//! The line a GPU test prints when this machine has too few GPUs for it.
//! `scripts/gpu-skips.sh` reads it, and `scripts/gpu-run.sh` fails a run in
//! which a test was skipped that the machine could have run.

/// `SKIPPED <test>: needs <needs> GPUs, <visible> visible`.
pub fn line(test: &str, needs: usize, visible: usize) -> String {
    format!("SKIPPED {test}: needs {needs} GPUs, {visible} visible")
}
