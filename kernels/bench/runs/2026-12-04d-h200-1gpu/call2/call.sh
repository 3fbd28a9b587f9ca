#!/usr/bin/env bash
# 2026-12-04 fourth session, device call 2: gpu_loopback and the tuner step of scripts/gpu-run.sh (HEAD's binaries).
set -u
cd "$(dirname "$0")/../.."
[ -x .carry/bin/tuner ] || tar -xJf .carry/s/bins.tar.xz -C .carry || exit 3
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RUST_BACKTRACE=1
export COLLTUNE_MULTIPROCESS_EXE="$PWD/.carry/bin/multiprocess" COLLTUNE_TUNER_EXE="$PWD/.carry/bin/tuner"
o="$OUT/c2"; mkdir -p "$o/run"
pack() { tar -czf "$OUT/c2.tgz" -C "$OUT" c2; }
t0=$(date +%s)
SKIP_TESTS=1 SKIP_BENCH=1 OUT="$o/run" timeout --signal=KILL 330 scripts/gpu-run.sh > "$o/gpu-run-tuner.log" 2>&1
echo "gpu-run.sh tuner step: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$o/times.txt"
pack
t=$(date +%s)
timeout --signal=KILL 250 .carry/bin/tests/gpu_loopback --include-ignored --test-threads=1 --nocapture > "$o/gpu_loopback.log" 2>&1
echo "gpu_loopback: exit $? in $(( $(date +%s) - t )) s, $(grep -E '^test result' "$o/gpu_loopback.log" | tail -n 1)" | tee -a "$o/times.txt"
pack
