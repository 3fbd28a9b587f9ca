#!/usr/bin/env bash
# Runs what scripts/gpu-build.sh put in .carry/bin/ on a GPU machine: every test
# executable with the GPU tests included, then the benchmark (`tuner bench`),
# then a tuner sweep + verify + re-fit. Logs go to $OUT
# (or ./gpu-logs). Exits non-zero if anything failed.
#
#   scripts/gpu-run.sh                  # everything (a few minutes on one H200)
#   scripts/gpu-run.sh timeout          # only tests whose name contains "timeout"
#   BENCH_ARGS="--world 4" scripts/gpu-run.sh
#   SKIP_TESTS=1 scripts/gpu-run.sh     # only the bench and the tuner
#   SKIP_BENCH=1 scripts/gpu-run.sh
#   FUSED_BENCH_ARGS="--world 4 ..."   # the fused collective's bench (default: world 2, hidden 4096)
#   EXE_TIMEOUT=120 scripts/gpu-run.sh  # bound per test executable, seconds (default 600)
#
# The summary lists every test that printed SKIPPED (a multi-GPU test on a
# machine with fewer GPUs), so a run never hides what it did not do, and the
# run fails when a test was skipped that this machine could have run (it has
# as many GPUs as the test needs, per `nvidia-smi -L`; see scripts/gpu-skips.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

bin=.carry/bin
out="${OUT:-./gpu-logs}"
mkdir -p "$out"
filter="${1:-}"

export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# Never NVLink multicast (NVLS) in this project.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RUST_BACKTRACE=1
# gpu_processes drives the one-process-per-rank example, gpu_loopback the tuner.
export COLLTUNE_MULTIPROCESS_EXE="$PWD/$bin/multiprocess"
export COLLTUNE_TUNER_EXE="$PWD/$bin/tuner"

if [ ! -d "$bin/tests" ]; then
  echo "no $bin/tests: run scripts/gpu-build.sh on the build machine and carry .carry/bin" >&2
  exit 2
fi

{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } \
  > "$out/nvidia-smi.txt" 2>&1 || true
cat "$out/nvidia-smi.txt"
# The machine's GPUs, whatever CUDA_VISIBLE_DEVICES lets the tests see.
machine_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || machine_gpus=unknown

status=0
summary=""
ran_logs=()
# Fast CPU and compile checks first, then the GPU suites.
for name in kernels_unit nvrtc_compile gpu_processes gpu_loopback gpu_fused gpu_windows gpu_faults gpu_devices gpu_world; do
  [ -n "${SKIP_TESTS:-}" ] && break
  exe="$bin/tests/$name"
  [ -x "$exe" ] || { status=1; summary="$summary\n$name: MISSING from $bin/tests"; continue; }
  echo "=== $name"
  start=$(date +%s)
  # A per-executable bound, so one hang cannot eat the whole run.
  timeout --signal=KILL "${EXE_TIMEOUT:-600}" "$exe" --include-ignored --test-threads=1 --nocapture ${filter:+"$filter"} \
    > "$out/$name.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  grep -E '^(test |FAIL|   |== |SKIPPED)|test result|panicked' "$out/$name.log" | tail -n 60
  [ $rc -eq 0 ] || status=1
  summary="$summary\n$name: exit $rc in ${took}s, $(grep -E '^test result' "$out/$name.log" | tail -n 1)"
  ran_logs+=("$out/$name.log")
done

if [ -z "${SKIP_BENCH:-}" ] && [ -z "$filter" ]; then
  echo "=== tuner bench"
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout --signal=KILL 240 "$bin/tuner" bench \
    ${BENCH_ARGS:---loopback --world 8 --collective both --dtype bf16 --sizes 16B..64MiB --step 16 --modes graph,eager --samples 10} \
    --csv "$out/bench.csv" --json "$out/bench.json" > "$out/bench.log" 2>&1
  rc=$?
  cat "$out/bench.log"
  [ $rc -eq 0 ] || status=1
  summary="$summary\ntuner bench: exit $rc in $(( $(date +%s) - start ))s"
fi

# The fused all-reduce + add + RMSNorm against its unfused path (the
# all-reduce the all-reduce table picks, then the add + RMSNorm kernel), side
# by side: 1 to 64 tokens of hidden 4096 in bf16.
if [ -z "${SKIP_BENCH:-}" ] && [ -z "$filter" ]; then
  echo "=== tuner bench (all_reduce_add_rmsnorm)"
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout --signal=KILL 240 "$bin/tuner" bench \
    ${FUSED_BENCH_ARGS:---loopback --world 2 --collective all_reduce_add_rmsnorm --hidden 4096 --dtype bf16 --sizes 8KiB..512KiB --step 2 --modes graph,eager --samples 10} \
    --csv "$out/bench-fused.csv" --json "$out/bench-fused.json" > "$out/bench-fused.log" 2>&1
  rc=$?
  cat "$out/bench-fused.log"
  [ $rc -eq 0 ] || status=1
  summary="$summary\ntuner bench (fused): exit $rc in $(( $(date +%s) - start ))s"
fi

# The tuner end to end: sweep (measure + fit + write), verify on held-out sizes,
# and a re-fit of the recorded evidence that must reproduce the TOML byte for byte.
# Every collective, the fused one at its default hidden sizes (fitted at the
# first, compared at the others).
# On one GPU this is a loopback world (link = "loopback"), written under $out only.
if [ -z "${SKIP_TUNER:-}" ] && [ -z "$filter" ] && [ -x "$bin/tuner" ]; then
  echo "=== tuner sweep + verify + re-fit"
  start=$(date +%s)
  # shellcheck disable=SC2086
  tuner_keys=${TUNER_ARGS:---loopback --world-sizes 2 --max-bytes 16MiB --collectives all_reduce,all_gather,all_reduce_add_rmsnorm}
  rc=0
  # shellcheck disable=SC2086
  timeout --signal=KILL 420 "$bin/tuner" sweep $tuner_keys --no-progress --out "$out/tuned" \
    > "$out/tuner-sweep.log" 2>&1 || rc=$?
  tail -n 40 "$out/tuner-sweep.log"
  toml=$(ls "$out"/tuned/*.toml 2>/dev/null | head -n 1)
  if [ $rc -eq 0 ] && [ -n "$toml" ]; then
    vrc=0
    # shellcheck disable=SC2086
    timeout --signal=KILL 300 "$bin/tuner" verify "$toml" $tuner_keys --no-progress \
      > "$out/tuner-verify.log" 2>&1 || vrc=$?
    cat "$out/tuner-verify.log"
    # A loopback world's timings say nothing about a link (all ranks share one
    # GPU, and eager calls from its rank threads jitter by tenths of a µs):
    # there, verify's verdict (FAIL, exit 3, or INCONCLUSIVE, exit 4) is reported, not a failure of
    # the run; the run checks that sweep, verify and re-fit work end to end.
    case " $tuner_keys " in
      *" --loopback "*)
        if [ $vrc -eq 3 ] || [ $vrc -eq 4 ]; then
          echo "verify verdict on a loopback world (informational, not link timing): exit $vrc ($([ $vrc -eq 3 ] && echo FAIL || echo INCONCLUSIVE))"
          vrc=0
        fi ;;
    esac
    [ $vrc -eq 0 ] || rc=$vrc
    if "$bin/tuner" fit "${toml%.toml}.evidence.json" -o - 2>/dev/null | cmp -s - "$toml"; then
      echo "re-fit of the evidence reproduces $(basename "$toml") byte for byte"
    else
      echo "FAIL: re-fit of the evidence differs from $(basename "$toml")"; rc=1
    fi
  fi
  [ $rc -eq 0 ] || status=1
  summary="$summary\ntuner: exit $rc in $(( $(date +%s) - start ))s"
fi

echo -e "=== summary$summary"
if [ ${#ran_logs[@]} -gt 0 ]; then
  skips=$(scripts/gpu-skips.sh "$machine_gpus" "${ran_logs[@]}")
  skips_rc=$?
  if [ -n "$skips" ]; then
    echo "skipped GPU tests (this machine has $machine_gpus GPU(s)):"
    echo "$skips"
  fi
  if [ $skips_rc -ne 0 ]; then
    echo "FAIL: a GPU test was skipped that this machine could have run, or cannot be judged"
    status=1
  fi
fi
echo "logs in $out"
exit $status
