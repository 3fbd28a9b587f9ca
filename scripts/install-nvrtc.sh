#!/usr/bin/env bash
# Installs the pinned NVRTC 13.0 wheels from PyPI into .cache/nvrtc, unless they
# are there already. 13.0 is pinned because a newer NVRTC emits PTX that a CUDA
# 13.0 driver may refuse to load. Used by scripts/test.sh and .ci/run; the
# library directory is .cache/nvrtc/nvidia/cu13/lib.
set -euo pipefail
cd "$(dirname "$0")/.."

nvrtc_dir="$PWD/.cache/nvrtc"
if [ ! -e "$nvrtc_dir/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  echo "install-nvrtc.sh: installing the pinned NVRTC 13.0 wheels into $nvrtc_dir"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$nvrtc_dir" "nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-runtime==13.0.*"
fi
