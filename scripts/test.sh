#!/usr/bin/env bash
# The project's test command (the README's second set-up command; CI runs it too).
# Arguments go to both cargo test runs (CI passes --locked).
#
# Needs no GPU and no CUDA toolkit. It installs the pinned NVRTC 13.0 wheels from
# PyPI into .cache/nvrtc (scripts/install-nvrtc.sh) so that every CUDA kernel is compiled with
# NVRTC for sm_80, sm_90 and sm_100, then runs the whole workspace's tests. GPU tests
# are marked #[ignore] and are listed as ignored; scripts/gpu-run.sh runs them on a
# GPU machine.
#
# Fails when any test fails, and when the counts fall below the committed floor
# (scripts/test-floor.txt, checked by scripts/test-counts.py): a test binary that
# ran no test, fewer tests than its floor, or one the floor does not list. A
# filtered run (`scripts/test.sh some_name`) therefore fails; run `cargo test`
# for a subset. After adding or removing tests on purpose,
# `TEST_FLOOR_WRITE=1 scripts/test.sh` rewrites the floor from a passing run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-nvrtc.sh
nvrtc_dir="$PWD/.cache/nvrtc"
export LD_LIBRARY_PATH="$nvrtc_dir/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# The documents' measured tables, rendered again from the committed CSVs and
# logs: docs and data must not drift apart.
python3 scripts/figures.py --check || status=1
cargo test --workspace --all-targets --no-fail-fast "$@" 2>&1 | tee "$log" || status=1
# Doc tests (not part of --all-targets).
cargo test --workspace --doc --no-fail-fast "$@" 2>&1 | tee -a "$log" || status=1

floor=scripts/test-floor.txt
if [ -n "${TEST_FLOOR_WRITE:-}" ] && [ $status -eq 0 ]; then
  python3 scripts/test-counts.py --write "$log" "$floor" || status=1
else
  python3 scripts/test-counts.py "$log" "$floor" || status=1
fi

# One closing line over every test binary (cargo prints one result line per binary).
awk '/^test result:/ {
       for (i = 1; i <= NF; i++) {
         if ($(i+1) ~ /^passed/) p += $i
         if ($(i+1) ~ /^failed/) f += $i
         if ($(i+1) ~ /^ignored/) g += $i
       }
     }
     END { printf "total: %d passed, %d failed, %d skipped\n", p, f, g }' "$log"
exit $status
