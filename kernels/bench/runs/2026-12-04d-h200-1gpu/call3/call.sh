#!/usr/bin/env bash
# 2026-12-04 fourth session, device call 3: the lanes' warp (A/B against HEAD's tuner, trace), the fused
# suites on it, gpu-run.sh's benches, candle-tp at W=1.
set -u
cd "$(dirname "$0")/../.."
rm -rf .carry/bin && tar -xJf .carry/s/bins2.tar.xz -C .carry || exit 3
mkdir -p .carry/head .carry/exp
xz -dc .carry/s/head-tuner.xz > .carry/head/tuner && xz -dc .carry/s/exp2-tuner.xz > .carry/exp/tuner && chmod +x .carry/head/tuner .carry/exp/tuner || exit 3
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RUST_BACKTRACE=1
export COLLTUNE_MULTIPROCESS_EXE="$PWD/.carry/bin/multiprocess" COLLTUNE_TUNER_EXE="$PWD/.carry/bin/tuner"
o="$OUT/c3"; mkdir -p "$o/ab" "$o/ab-eager" "$o/trace"
pack() { tar -czf "$OUT/c3.tgz" -C "$OUT" c3; }
t0=$(date +%s)
F="--collective all_reduce_add_rmsnorm --hidden 4096 --dtype bf16"
AB_VARIANTS=$'head=.carry/head/tuner:\nlanes=.carry/bin/tuner:\nhead=.carry/head/tuner:\nlanes=.carry/bin/tuner:\nhead=.carry/head/tuner:\nlanes=.carry/bin/tuner:' \
AB_ARGS="--loopback --world 2 $F --modes graph --sizes 8KiB..512KiB --step 2 --samples 15 --algos unfused,one_shot_push,two_shot_push" \
AB_TIMEOUT=60 OUT="$o/ab" scripts/gpu-ab.sh > "$o/ab.log" 2>&1
echo "ab graph: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$o/times.txt"; pack
t=$(date +%s)
KERNELS_NVRTC_DEFINES=CT_EXP_TRACE timeout --signal=KILL 60 .carry/exp/tuner bench --loopback --world 2 $F --modes graph \
  --sizes 8KiB,64KiB,512KiB --samples 5 --algos unfused,one_shot_push --csv "$o/trace/t-lanes.csv" > "$o/trace/t-lanes.log" 2>&1
echo "trace: exit $? in $(( $(date +%s) - t )) s" | tee -a "$o/times.txt"; pack
t=$(date +%s)
AB_VARIANTS=$'head=.carry/head/tuner:\nlanes=.carry/bin/tuner:\nhead=.carry/head/tuner:\nlanes=.carry/bin/tuner:' \
AB_ARGS="--loopback --world 2 $F --modes eager --sizes 8KiB..512KiB --step 2 --samples 15 --algos unfused,one_shot_push" \
AB_TIMEOUT=60 OUT="$o/ab-eager" scripts/gpu-ab.sh > "$o/ab-eager.log" 2>&1
echo "ab eager: exit $? in $(( $(date +%s) - t )) s" | tee -a "$o/times.txt"; pack
for s in gpu_faults gpu_fused; do
  t=$(date +%s)
  timeout --signal=KILL 140 .carry/bin/tests/$s --include-ignored --test-threads=1 --nocapture > "$o/$s.log" 2>&1
  echo "$s: exit $? in $(( $(date +%s) - t )) s, $(grep -E '^test result' "$o/$s.log" | tail -n 1)" | tee -a "$o/times.txt"
  pack
done
t=$(date +%s)
SKIP_TESTS=1 SKIP_TUNER=1 OUT="$o/run" timeout --signal=KILL 90 scripts/gpu-run.sh > "$o/gpu-run-bench.log" 2>&1
echo "gpu-run.sh benches: exit $? in $(( $(date +%s) - t )) s" | tee -a "$o/times.txt"; pack
t=$(date +%s)
MODELS="llama-3.2-1b llama-3.1-8b" WORLDS=1 OUT="$o/candle" timeout --signal=KILL "${CANDLE_BOUND:-200}" examples/candle-tp/gpu-run.sh > "$o/candle.log" 2>&1
echo "candle-tp: exit $? in $(( $(date +%s) - t )) s" | tee -a "$o/times.txt"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$o/times.txt"
pack
