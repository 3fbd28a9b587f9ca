#!/usr/bin/env bash
# Builds candle-tp with candle's CUDA backend on a machine with no GPU and no
# CUDA toolkit, and puts the binary, compressed, in .carry/candle/candle-tp.xz
# (git-ignored; about 6 MB), from where it travels to a GPU machine;
# examples/candle-tp/gpu-run.sh runs it there.
#
#   examples/candle-tp/build-gpu.sh        # or: scripts/gpu-build.sh candle
#   examples/candle-tp/build-gpu.sh --check
#       # CI: only `cargo clippy --release -D warnings` with candle's CUDA
#       # backend (kernels and candle built together; no link)
#
# 1. nvcc from pinned PyPI wheels (candle-kernels compiles its CUDA sources
#    with it): CUDA 13.0.88, with nvvm and crt pinned to 13.0 too (a newer
#    nvvm writes PTX that the 13.0 ptxas refuses).
# 2. candle links the CUDA libraries (cudarc's `dynamic-linking`), and so does
#    this binary: cuBLAS, cuBLASLt, cuRAND, NVRTC, the runtime, NCCL and the
#    driver. None is here, so the binary is linked twice: once against empty
#    stand-ins with the real sonames, leaving CUDA symbols unresolved; then
#    against stand-ins that define exactly the symbols it uses. Its NEEDED
#    entries are then the real libraries (libcuda.so.1, libcublas.so.13, …),
#    which the GPU machine provides.
set -euo pipefail
cd "$(dirname "$0")"
example="$PWD"
repo="$(cd ../.. && pwd)"

wheels="$repo/.cache/cuda-build"
if [ ! -x "$wheels/nvidia/cu13/bin/nvcc" ]; then
  echo "build-gpu: installing the pinned nvcc 13.0 wheels into $wheels"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$wheels" "nvidia-cuda-nvcc==13.0.88" "nvidia-nvvm==13.0.*" \
    "nvidia-cuda-crt==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"
fi
export PATH="$wheels/nvidia/cu13/bin:$PATH"
export CUDA_ROOT="$wheels/nvidia/cu13"
# Hopper (H100, H200): candle's PTX is built for it, and its static kernels.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"

if [ "${1:-}" = "--check" ]; then
  exec cargo clippy --release --locked --all-targets -- -D warnings
fi

stubs="$repo/.cache/cuda-stubs"
# soname, and the symbols that belong to it (by prefix, in this order).
libs=(
  "libnccl.so.2:^nccl"
  "libnvrtc.so.13:^nvrtc"
  "libcublasLt.so.13:^cublasLt"
  "libcublas.so.13:^cublas"
  "libcurand.so.10:^curand"
  "libcudart.so.13:^(cuda|__cuda)"
  "libcuda.so.1:^cu[A-Z]"
)

# Stand-ins for every library, defining the symbols listed in $stubs/<soname>.syms.
make_stubs() {
  for entry in "${libs[@]}"; do
    soname="${entry%%:*}"
    base="${soname%%.so*}"
    c="$stubs/$soname.c"
    : > "$c"
    if [ -s "$stubs/$soname.syms" ]; then
      sed 's/.*/void &(void) {}/' "$stubs/$soname.syms" >> "$c"
    fi
    cc -shared -fPIC -o "$stubs/$soname" -Wl,-soname,"$soname" "$c"
    ln -sf "$soname" "$stubs/$base.so"
  done
}

rm -rf "$stubs"
mkdir -p "$stubs"
make_stubs

cargo_rustc() {
  cargo rustc --release --locked --bin candle-tp -- -L "native=$stubs" "$@"
}

echo "build-gpu: building candle-tp (the first build compiles candle's CUDA kernels: minutes)"
start=$(date +%s)
# First link: the CUDA symbols stay unresolved.
cargo_rustc -C link-arg=-Wl,--unresolved-symbols=ignore-all
# Cargo's target folder: CARGO_TARGET_DIR when set (CI keeps one between
# runs; a worktree may share another checkout's compiled candle), else ./target.
exe="${CARGO_TARGET_DIR:-$example/target}/release/candle-tp"
undefined="$(nm -D --undefined-only "$exe" | awk '{print $NF}' | sed 's/@.*//' | sort -u)"
claimed=""
for entry in "${libs[@]}"; do
  soname="${entry%%:*}"
  pattern="${entry#*:}"
  printf '%s\n' "$undefined" | grep -E "$pattern" | grep -vxF -f <(printf '%s\n' "$claimed" | sed '/^$/d') \
    > "$stubs/$soname.syms" || true
  claimed="$claimed"$'\n'"$(cat "$stubs/$soname.syms")"
  echo "build-gpu: $soname: $(wc -l < "$stubs/$soname.syms") symbols"
done
make_stubs
# Second link: every CUDA symbol resolves to its library. The flags differ
# from the first link's, so cargo relinks (only this crate's binary).
cargo_rustc -C link-arg=-Wl,--no-undefined
echo "build-gpu: built in $(( $(date +%s) - start )) s"

needed="$(readelf -d "$exe" | awk '/NEEDED/ {gsub(/[\[\]]/, "", $NF); print $NF}')"
for entry in "${libs[@]}"; do
  soname="${entry%%:*}"
  if [ -s "$stubs/$soname.syms" ] && ! grep -qxF "$soname" <<<"$needed"; then
    echo "build-gpu: the binary does not list $soname as NEEDED" >&2
    exit 1
  fi
done

carry="$repo/.carry/candle"
rm -rf "$carry"
mkdir -p "$carry"
cp "$exe" "$carry/candle-tp"
# Keep the carry small: no debug info (symbol names stay, for backtraces),
# and compressed (most of the binary is candle's kernels, which xz shrinks
# about eightfold); gpu-run.sh unpacks it.
strip --strip-debug "$carry/candle-tp"
echo "build-gpu: NEEDED:" $needed
echo "build-gpu: $(du -h "$carry/candle-tp" | cut -f1) binary; compressing"
xz -T0 -6 -f "$carry/candle-tp"
ls -l "$carry"
du -sh "$carry"
