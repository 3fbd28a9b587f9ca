#!/usr/bin/env bash
# 2026-12-04 fourth session, device call 4: the lanes' warp A/B again (more runs), and gpu_processes on it.
set -u
cd "$(dirname "$0")/../.."
rm -rf .carry/bin && tar -xJf .carry/s/bins2.tar.xz -C .carry || exit 3
mkdir -p .carry/head && xz -dc .carry/s/head-tuner.xz > .carry/head/tuner && chmod +x .carry/head/tuner || exit 3
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RUST_BACKTRACE=1
export COLLTUNE_MULTIPROCESS_EXE="$PWD/.carry/bin/multiprocess" COLLTUNE_TUNER_EXE="$PWD/.carry/bin/tuner"
o="$OUT/c4"; mkdir -p "$o/ab"
pack() { tar -czf "$OUT/c4.tgz" -C "$OUT" c4; }
t0=$(date +%s)
AB_VARIANTS=$'lanes=.carry/bin/tuner:\nhead=.carry/head/tuner:\nlanes=.carry/bin/tuner:\nhead=.carry/head/tuner:\nlanes=.carry/bin/tuner:\nhead=.carry/head/tuner:' \
AB_ARGS="--loopback --world 2 --collective all_reduce_add_rmsnorm --hidden 4096 --dtype bf16 --modes graph --sizes 8KiB..512KiB --step 2 --samples 15 --algos unfused,one_shot_push" \
AB_TIMEOUT=60 OUT="$o/ab" scripts/gpu-ab.sh > "$o/ab.log" 2>&1
echo "ab graph: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$o/times.txt"; pack
t=$(date +%s)
timeout --signal=KILL 150 .carry/bin/tests/gpu_processes --include-ignored --test-threads=1 --nocapture > "$o/gpu_processes.log" 2>&1
echo "gpu_processes: exit $? in $(( $(date +%s) - t )) s, $(grep -E '^test result' "$o/gpu_processes.log" | tail -n 1)" | tee -a "$o/times.txt"
pack
