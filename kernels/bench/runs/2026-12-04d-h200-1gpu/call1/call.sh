#!/usr/bin/env bash
# 2026-12-04 fourth session, device call 1: traces, A/Bs of experiment switches, short suites of HEAD.
set -u
cd "$(dirname "$0")/../.."
tar -xJf .carry/s/bins.tar.xz -C .carry || exit 3
mkdir -p .carry/exp && xz -dc .carry/s/exp-tuner.xz > .carry/exp/tuner && chmod +x .carry/exp/tuner || exit 3
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RUST_BACKTRACE=1
export COLLTUNE_MULTIPROCESS_EXE="$PWD/.carry/bin/multiprocess" COLLTUNE_TUNER_EXE="$PWD/.carry/bin/tuner"
o="$OUT/c1"; mkdir -p "$o/trace" "$o/ab" "$o/ab1"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv; } > "$o/nvidia-smi.txt" 2>&1
pack() { tar -czf "$OUT/c1.tgz" -C "$OUT" c1; }
t0=$(date +%s)
F="--collective all_reduce_add_rmsnorm --hidden 4096 --dtype bf16 --modes graph"
n=0
for v in "2:CT_EXP_TRACE" "1:CT_EXP_TRACE" "2:CT_EXP_TRACE CT_EXP_FUSED_WEIGHT_EARLY" "2:CT_EXP_TRACE CT_EXP_CTRL_GPU" "1:CT_EXP_TRACE CT_EXP_CTRL_GPU" "2:CT_EXP_TRACE CT_EXP_EARLY_INPUT" "2:CT_EXP_TRACE CT_EXP_EARLY_INPUT CT_EXP_EARLY_RESIDUAL"; do
  w=${v%%:*}; d=${v#*:}
  echo "=== trace-$n world $w: $d" >> "$o/trace/variants.txt"
  KERNELS_NVRTC_DEFINES="$d" timeout --signal=KILL 60 .carry/exp/tuner bench --loopback --world $w $F \
    --sizes 8KiB,64KiB,512KiB --samples 5 --algos unfused,one_shot_push --csv "$o/trace/t-$n.csv" > "$o/trace/t-$n.log" 2>&1
  echo "trace-$n: exit $?" >> "$o/trace/variants.txt"
  n=$((n + 1))
done
echo "traces: $(( $(date +%s) - t0 )) s" | tee -a "$o/times.txt"; pack
t=$(date +%s)
AB_VARIANTS=$'base=.carry/exp/tuner:\nctrl_gpu=.carry/exp/tuner:CT_EXP_CTRL_GPU\npoll2_150=.carry/exp/tuner:CT_EXP_POLL2=150\nweight_early=.carry/exp/tuner:CT_EXP_FUSED_WEIGHT_EARLY\nearly_input=.carry/exp/tuner:CT_EXP_EARLY_INPUT\nearly_in_res=.carry/exp/tuner:CT_EXP_EARLY_INPUT CT_EXP_EARLY_RESIDUAL\npoll2_300=.carry/exp/tuner:CT_EXP_POLL2=300\nbase=.carry/exp/tuner:\nctrl_gpu=.carry/exp/tuner:CT_EXP_CTRL_GPU\nearly_input=.carry/exp/tuner:CT_EXP_EARLY_INPUT\npoll2_150=.carry/exp/tuner:CT_EXP_POLL2=150' \
AB_ARGS="--loopback --world 2 $F --sizes 8KiB..512KiB --step 2 --samples 15 --algos unfused,one_shot_push" \
AB_TIMEOUT=60 OUT="$o/ab" scripts/gpu-ab.sh > "$o/ab.log" 2>&1
echo "ab w2: exit $? in $(( $(date +%s) - t )) s" | tee -a "$o/times.txt"
t=$(date +%s)
AB_VARIANTS=$'base=.carry/exp/tuner:\nctrl_gpu=.carry/exp/tuner:CT_EXP_CTRL_GPU\nbase=.carry/exp/tuner:\nctrl_gpu=.carry/exp/tuner:CT_EXP_CTRL_GPU' \
AB_ARGS="--loopback --world 1 $F --sizes 8KiB..512KiB --step 2 --samples 15 --algos unfused,one_shot_push" \
AB_TIMEOUT=60 OUT="$o/ab1" scripts/gpu-ab.sh > "$o/ab1.log" 2>&1
echo "ab w1: exit $? in $(( $(date +%s) - t )) s" | tee -a "$o/times.txt"
t=$(date +%s)
.carry/exp/tuner bench --loopback --world 2 --collective all_reduce --dtype bf16 --sizes 8KiB..512KiB --step 2 --modes graph --samples 15 --algos one_shot_push,nccl --csv "$o/ar-w2.csv" > "$o/ar-w2.log" 2>&1
KERNELS_NVRTC_DEFINES="CT_EXP_POLL2=150" .carry/exp/tuner bench --loopback --world 2 --collective all_reduce --dtype bf16 --sizes 8KiB..512KiB --step 2 --modes graph --samples 15 --algos one_shot_push,nccl --csv "$o/ar-w2-poll2.csv" > "$o/ar-w2-poll2.log" 2>&1
echo "ar w2: $(( $(date +%s) - t )) s" | tee -a "$o/times.txt"
pack
for s in kernels_unit gpu_fused gpu_faults gpu_windows gpu_world gpu_devices gpu_processes nvrtc_compile; do
  t=$(date +%s)
  timeout --signal=KILL 150 .carry/bin/tests/$s --include-ignored --test-threads=1 --nocapture > "$o/$s.log" 2>&1
  echo "$s: exit $? in $(( $(date +%s) - t )) s, $(grep -E '^test result' "$o/$s.log" | tail -n 1)" | tee -a "$o/times.txt"
  pack
done
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$o/times.txt"
pack
