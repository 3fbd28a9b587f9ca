#!/usr/bin/env bash
# A/B of kernel variants on a GPU machine: runs `tuner bench` once per variant,
# each variant a set of NVRTC defines (CT_EXP_* switches that an experiment adds
# to kernels/cuda/*.cu; none is left in the sources now), passed in
# KERNELS_NVRTC_DEFINES, NCCL timed in the same process every time. One CSV per
# variant lands in $OUT (or ./gpu-logs) as ab-<n>.csv, with ab-variants.txt
# naming them.
#
#   AB_VARIANTS=$'base:\nunroll8:CT_EXP_UNROLL_W2=8' \
#   AB_ARGS="--devices 0,1 --collective all_reduce --sizes 4MiB,8MiB,16MiB" scripts/gpu-ab.sh
#
# A variant named `name=PATH` runs the tuner at PATH instead of .carry/bin's
# (an A/B of two builds: their CUDA sources travel inside the binaries), e.g.
#   AB_VARIANTS=$'before=.carry/prev/tuner:\nafter:\nbefore=.carry/prev/tuner:\nafter:'
# (ABAB, so that a drift of the machine shows as a difference between the two
# runs of one build).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.carry/bin
out="${OUT:-./gpu-logs}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${AB_VARIANTS:?name:defines lines, one variant per line}"
: "${AB_ARGS:?the arguments of the benchmark}"
status=0
n=0
: > "$out/ab-variants.txt"
while IFS= read -r line; do
  [ -z "$line" ] && continue
  name=${line%%:*}
  defines=${line#*:}
  tuner="$bin/tuner"
  case "$name" in
    *=*) tuner=${name#*=}; name=${name%%=*} ;;
  esac
  echo "=== $n $name ($tuner): ${defines:-(no defines)}" | tee -a "$out/ab-variants.txt"
  # shellcheck disable=SC2086
  KERNELS_NVRTC_DEFINES="$defines" timeout --signal=KILL "${AB_TIMEOUT:-120}" \
    "$tuner" bench $AB_ARGS --csv "$out/ab-$n.csv" > "$out/ab-$n.log" 2>&1 || status=1
  grep -E 'FAILED|failed|error' "$out/ab-$n.log" | head -n 5
  n=$((n + 1))
done <<< "$AB_VARIANTS"
exit $status
