#!/usr/bin/env bash
# Builds the GPU test executables, the tuner (whose `tuner bench` is the
# benchmark) and the one-process-per-rank example on this machine (no GPU
# needed) and copies them into the git-ignored .carry/bin/, from where they
# travel to a GPU machine and run with scripts/gpu-run.sh.
#
#   scripts/gpu-build.sh            # release build, stripped of debug info
#
# Layout produced:
#   .carry/bin/tests/<name>         every test target of `kernels` (the runtime's
#                                   unit tests as kernels_unit, nvrtc_compile) and
#                                   the GPU suites of `tuner` (gpu_loopback, gpu_fused,
#                                   gpu_devices, gpu_processes, gpu_windows, gpu_faults) and
#                                   examples/engine's gpu_world
#   .carry/bin/multiprocess         the one-process-per-rank example (gpu_processes drives it)
#   .carry/bin/tuner                the tuner: `tuner bench`, and the sweep + verify + re-fit
#   .carry/bin/startup              how long a World takes to build (kernels/examples/startup.rs,
#                                   kernels/GPU.md "Start-up")
#
#   scripts/gpu-build.sh candle     # instead: the candle engine example
#                                   # (examples/candle-tp/build-gpu.sh, into .carry/candle/)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "candle" ]; then
  exec examples/candle-tp/build-gpu.sh
fi

out=.carry/bin
rm -rf "$out"
mkdir -p "$out/tests"

# Test executables: the JSON stream names each one ("executable": "...").
# Only artifacts built with the test harness.
test_executables() {
  cargo test --release --no-run --message-format=json "$@" 2>/dev/null \
    | grep -E '"profile":\{[^}]*"test":true\}' \
    | grep -o '"executable":"[^"]*"' \
    | sed -e 's/^"executable":"//' -e 's/"$//'
}
{
  test_executables -p colltune-kernels
  test_executables -p colltune-tuner --test gpu_loopback --test gpu_fused --test gpu_devices \
    --test gpu_processes --test gpu_windows --test gpu_faults
  test_executables -p engine-example --test gpu_world
} | while read -r exe; do
      base=$(basename "$exe")
      name=${base%-*}                 # strip cargo's hash suffix
      [ "$name" = "kernels" ] && name=kernels_unit
      cp "$exe" "$out/tests/$name"
    done

cargo build -p colltune-tuner --release --bin tuner --example multiprocess
cargo build -p colltune-kernels --release --example startup
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | sed -e 's/.*:"//' -e 's/"$//')
cp "$target_dir/release/tuner" "$out/tuner"
cp "$target_dir/release/examples/multiprocess" "$out/multiprocess"
cp "$target_dir/release/examples/startup" "$out/startup"

# Keep the carry small: drop debug info (symbols stay for backtraces).
if command -v strip >/dev/null; then
  strip --strip-debug "$out"/tests/* "$out/multiprocess" "$out/tuner" "$out/startup"
fi

for name in kernels_unit nvrtc_compile gpu_loopback gpu_devices gpu_processes gpu_windows gpu_faults gpu_world; do
  [ -x "$out/tests/$name" ] || { echo "gpu-build: no $out/tests/$name was built" >&2; exit 1; }
done
ls -l "$out" "$out/tests"
du -sh "$out"
