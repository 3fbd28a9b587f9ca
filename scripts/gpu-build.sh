#!/usr/bin/env bash
# Builds the `kernels` test executables and the collective-bench binary on this
# machine (no GPU needed) and copies them into the git-ignored .carry/bin/, from
# where they travel to a GPU machine and run with scripts/gpu-run.sh.
#
#   scripts/gpu-build.sh            # release build, stripped of debug info
#
# Layout produced:
#   .carry/bin/tests/<name>         one executable per test target of `kernels`
#   .carry/bin/collective-bench     the benchmark
#   .carry/bin/multiprocess         the one-process-per-rank example (gpu_processes drives it)
#   .carry/bin/tuner                the tuner (gpu-run.sh runs a sweep + verify + re-fit with it)
set -euo pipefail
cd "$(dirname "$0")/.."

out=.carry/bin
rm -rf "$out"
mkdir -p "$out/tests"

# Test executables: the JSON stream names each one ("executable": "...").
# Only artifacts built with the test harness (the bench binary appears too).
cargo test -p kernels --release --no-run --message-format=json 2>/dev/null \
  | grep -E '"profile":\{[^}]*"test":true\}' \
  | grep -o '"executable":"[^"]*"' \
  | sed -e 's/^"executable":"//' -e 's/"$//' \
  | while read -r exe; do
      base=$(basename "$exe")
      name=${base%-*}                 # strip cargo's hash suffix
      [ "$name" = "kernels" ] && name=kernels_unit
      [ "$name" = "collective_bench" ] && continue   # the bench's own unit tests
      cp "$exe" "$out/tests/$name"
    done

cargo build -p kernels --release --bin collective-bench --example multiprocess
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | sed -e 's/.*:"//' -e 's/"$//')
cp "$target_dir/release/collective-bench" "$out/collective-bench"
cp "$target_dir/release/examples/multiprocess" "$out/multiprocess"
cargo build -p tuner --release --bin tuner
cp "$target_dir/release/tuner" "$out/tuner"

# Keep the carry small: drop debug info (symbols stay for backtraces).
if command -v strip >/dev/null; then
  strip --strip-debug "$out"/tests/* "$out/collective-bench" "$out/multiprocess" "$out/tuner"
fi

ls -l "$out" "$out/tests"
du -sh "$out"
