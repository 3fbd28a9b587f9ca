#!/usr/bin/env bash
# 2026-12-04 third session, device call 1: the weight loaded before the rows' barrier, and rsqrtf.
set -u
cd "$(dirname "$0")/../.."
tar -xJf .carry/s/bins.tar.xz -C .carry || exit 3
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RUST_BACKTRACE=1
export COLLTUNE_MULTIPROCESS_EXE="$PWD/.carry/bin/multiprocess" COLLTUNE_TUNER_EXE="$PWD/.carry/bin/tuner"
o="$OUT/c1"; mkdir -p "$o/ab"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$o/nvidia-smi.txt" 2>&1
t0=$(date +%s)
AB_VARIANTS=$'late:CT_EXP_WEIGHT_LATE\nearly:\nearly_rsqrt:CT_EXP_RSQRT\nnorm_late:CT_EXP_NORM_WEIGHT_LATE\nlate:CT_EXP_WEIGHT_LATE\nearly:' \
AB_ARGS="--loopback --world 2 --collective all_reduce_add_rmsnorm --hidden 4096 --dtype bf16 --sizes 8KiB..512KiB --step 2 --modes graph --samples 10 --algos unfused,one_shot_push" \
AB_TIMEOUT=40 OUT="$o/ab" scripts/gpu-ab.sh > "$o/ab.log" 2>&1
echo "ab: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$o/times.txt"
tar -czf "$OUT/c1-ab.tgz" -C "$OUT" c1
for s in gpu_faults gpu_fused; do
  t=$(date +%s)
  KERNELS_NVRTC_DEFINES=CT_EXP_RSQRT timeout --signal=KILL 100 .carry/bin/tests/$s --include-ignored --test-threads=1 --nocapture > "$o/$s.log" 2>&1
  echo "$s (CT_EXP_RSQRT): exit $? in $(( $(date +%s) - t )) s, $(grep -E '^test result' "$o/$s.log" | tail -n 1)" | tee -a "$o/times.txt"
  tar -czf "$OUT/c1-all.tgz" -C "$OUT" c1
done
