#!/usr/bin/env bash
# Runs candle-tp (built by examples/candle-tp/build-gpu.sh into .carry/candle/)
# on a GPU machine: every back-end and mode, for each model and world size
# given, and `norm-bench` (colltune's add + RMSNorm against candle's, GPU 0,
# W=1). Writes under $OUT (or ./candle-tp-logs) four files, since a device
# call brings back only a few: candle-tp.csv (every run's rows),
# norm-bench-w1.csv (norm-bench's, its own columns), summary.txt (the console
# output) and candle-tp-logs.tar.gz (each run's CSV, JSON with every step's
# time and tokens, and each rank's log).
#
#   examples/candle-tp/gpu-run.sh                       # self-checks, then both built-in models at W=1 and every W up to the GPU count (2, 4, 8)
#   MODELS=llama-3.2-1b WORLDS="1 2" examples/candle-tp/gpu-run.sh
#   SELF_CHECK_ONLY=1 examples/candle-tp/gpu-run.sh     # seconds: the tiny model and the shipped model folder, W=1 and W=2, and norm-bench
#   MODELS= MODEL_DIRS="/models/Llama-3.2-3B" WORLDS="1 2" examples/candle-tp/gpu-run.sh
#                                                       # model folders (config.json, safetensors, tokenizer.json) instead of built-in shapes
#   EXTRA="--decode 64 --batch 8" examples/candle-tp/gpu-run.sh   # more options for every run (candle-tp run --help)
#
# On a machine with one GPU, W=2 runs two processes on GPU 0: NCCL refuses two
# ranks on one GPU, so there the nccl back-end is skipped and colltune joins
# through files (its timings then say nothing about links).
set -uo pipefail
cd "$(dirname "$0")/../.."

packed=.carry/candle/candle-tp.xz
final="${OUT:-./candle-tp-logs}"
mkdir -p "$final"
out="$(mktemp -d "${TMPDIR:-/tmp}/candle-tp.XXXXXX")"
exec > >(tee "$final/summary.txt") 2>&1
if [ ! -f "$packed" ]; then
  echo "no $packed: run examples/candle-tp/build-gpu.sh on the build machine and carry .carry/candle" >&2
  exit 2
fi
exe="$out/candle-tp"
if command -v xz >/dev/null; then
  xz -dc "$packed" > "$exe"
else
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$packed" "$exe"
fi
chmod +x "$exe"

# Never NVLink multicast (NVLS).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RUST_BACKTRACE=1

# Where this machine keeps the libraries the binary links: PyTorch's CUDA 13
# wheels (cuBLAS, cuRAND, the runtime, NVRTC), NCCL's wheel, the toolkit, the driver.
site=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
dirs=("$site/cu13/lib" "$site/nccl/lib" "$site/cublas/lib" "$site/cuda_runtime/lib"
      "$site/curand/lib" "$site/cuda_nvrtc/lib" /usr/local/cuda/lib64 /usr/local/nvidia/lib64)
path=""
for d in "${dirs[@]}"; do
  [ -d "$d" ] && path="$path${path:+:}$d"
done
export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing=$(ldd "$exe" 2>&1 | awk '/not found/ {print $1}')
if [ -n "$missing" ]; then
  # Look further before giving up: any folder under the Python environment.
  for lib in $missing; do
    found=$(find /opt/torch/.venv /usr/local/cuda* /usr/lib -name "$lib" 2>/dev/null | head -n 1)
    if [ -n "$found" ]; then
      echo "found $lib at $found"
      export LD_LIBRARY_PATH="$(dirname "$found"):$LD_LIBRARY_PATH"
    fi
  done
  missing=$(ldd "$exe" 2>&1 | awk '/not found/ {print $1}')
fi
if [ -n "$missing" ]; then
  echo "missing libraries: $missing" >&2
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
  ldd "$exe" >&2
  exit 2
fi
ldd "$exe" | grep -E 'cuda|cublas|curand|nvrtc|nccl|cudart' > "$out/libraries.txt"
cat "$out/libraries.txt"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } \
  > "$out/nvidia-smi.txt" 2>&1 || true
cat "$out/nvidia-smi.txt"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || gpus=1
status=0
summary=""

run() { # name, then candle-tp arguments
  local name=$1
  shift
  echo "=== $name: candle-tp $*"
  local start
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$exe" "$@" --log-dir "$out/$name" --csv "$out/$name.csv" --json "$out/$name.json" \
    2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || status=1
  summary="$summary\n$name: exit $rc in $(( $(date +%s) - start )) s"
}

bench() { # name, then candle-tp arguments: one process whose CSV has columns of its own
  local name=$1
  shift
  echo "=== $name: candle-tp $*"
  local start
  start=$(date +%s)
  # In a folder of its own: the CSVs directly under $out make candle-tp.csv.
  mkdir -p "$out/$name"
  "$exe" "$@" --csv "$out/$name/$name.csv" 2>&1 | tee "$out/$name/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || status=1
  [ -f "$out/$name/$name.csv" ] && cp "$out/$name/$name.csv" "$final/$name.csv"
  summary="$summary\n$name: exit $rc in $(( $(date +%s) - start )) s"
}

# The shipped model folder: only a config.json, of a shape no built-in model
# has, so seeded weights (README: "Model folders").
fixture=examples/candle-tp/models/llama3-h320-d32
run self-check-w1 self-check --world 1
run model-dir-w1 run --model-dir "$fixture" --world 1
if [ "$gpus" -ge 2 ]; then
  run self-check-w2 self-check --world 2
  run model-dir-w2-batch4 run --model-dir "$fixture" --world 2 --batch 4
else
  # Two processes share GPU 0: colltune only, joined through files.
  run self-check-w2-shared self-check --world 2
  run model-dir-w2-shared-batch4 run --model-dir "$fixture" --world 2 --batch 4
fi

# colltune's add + RMSNorm (its fused call in a world of one rank) against
# candle's add and rms_norm, on GPU 0: seconds.
bench norm-bench-w1 norm-bench --dtype bf16,f16,f32

if [ -z "${SELF_CHECK_ONLY:-}" ]; then
  # MODELS set but empty: no built-in model (MODEL_DIRS only).
  models=${MODELS-"llama-3.2-1b llama-3.1-8b"}
  if [ -z "${WORLDS:-}" ]; then
    WORLDS=1
    for w in 2 4 8; do
      [ "$w" -le "$gpus" ] && WORLDS="$WORLDS $w"
    done
  fi
  for model in $models; do
    for world in $WORLDS; do
      # shellcheck disable=SC2086
      run "$model-w$world" run --model "$model" --world "$world" ${EXTRA:-}
    done
  done
  for dir in ${MODEL_DIRS:-}; do
    for world in $WORLDS; do
      # shellcheck disable=SC2086
      run "$(basename "$dir")-w$world" run --model-dir "$dir" --world "$world" ${EXTRA:-}
    done
  done
fi
# One CSV with every run (the header once).
first=1
for f in "$out"/*.csv; do
  [ -f "$f" ] || continue
  if [ $first -eq 1 ]; then cat "$f"; first=0; else tail -n +2 "$f"; fi
done > "$out/all.csv.tmp"
mv "$out/all.csv.tmp" "$out/candle-tp.csv"

[ -f "$out/candle-tp.csv" ] && cp "$out/candle-tp.csv" "$final/candle-tp.csv"
rm -f "$exe"
tar -czf "$final/candle-tp-logs.tar.gz" -C "$out" .
echo -e "=== summary$summary"
echo "in $final: candle-tp.csv, norm-bench-w1.csv, summary.txt, candle-tp-logs.tar.gz"
exit $status
