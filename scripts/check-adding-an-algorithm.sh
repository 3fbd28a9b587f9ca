#!/usr/bin/env bash
# Proves what kernels/src/protocol/registry.rs says about adding an algorithm:
# three files change and nothing else. Adds a dummy custom algorithm
# (`dummy_push`, a copy of one_shot_push under another name) exactly that way:
#   1. one line in the schema's table of algorithms (policy-macros/tuned-schema/src/vocab.rs),
#   2. one entry in kernels' registry (kernels/src/protocol/registry.rs),
#   3. its kernels, kernels/cuda/dummy_push.cu;
# checks that git sees exactly those three files changed, then checks the whole
# workspace, runs the schema's and kernels' unit tests and compiles every
# kernel with NVRTC (the new one included), and restores the tree, whatever
# happened. Needs NVRTC: the wheels scripts/test.sh installs into .cache/nvrtc,
# or libnvrtc on the library path.
#
#   scripts/check-adding-an-algorithm.sh
set -euo pipefail
cd "$(dirname "$0")/.."

vocab=policy-macros/tuned-schema/src/vocab.rs
registry=kernels/src/protocol/registry.rs
cuda=kernels/cuda/dummy_push.cu
if [ -n "$(git status --porcelain -- "$vocab" "$registry" "$cuda")" ]; then
  echo "check-adding-an-algorithm: $vocab, $registry or $cuda has uncommitted changes; commit or stash them first" >&2
  exit 2
fi
# Whatever else is already uncommitted is not the algorithm's doing.
dirty_before=$( (git diff --name-only; git ls-files --others --exclude-standard) | sort -u)
restore() {
  git checkout --quiet -- "$vocab" "$registry"
  rm -f "$cuda"
}
trap restore EXIT

# 1. The schema's line, before the table's closing brace.
python3 - "$vocab" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
anchor = "\nalgorithms! {\n"
start = text.index(anchor)
end = text.index("\n}\n", start)
line = '''    /// A copy of one_shot_push under another name (scripts/check-adding-an-algorithm.sh).
    DummyPush = "dummy_push" {
        kind: Kernel,
        collectives: [AllReduce],
        capacity: MIB,
    },'''
open(path, "w").write(text[:end] + "\n" + line + text[end:])
PY

# 2. The registry's entry, after the last one.
python3 - "$registry" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
start = text.index("pub const REGISTRY: [CustomAlgorithm; ")
count_end = text.index("]", start)
count = int(text[start + len("pub const REGISTRY: [CustomAlgorithm; "):count_end])
text = text[:start] + f"pub const REGISTRY: [CustomAlgorithm; {count + 1}]" + text[count_end + 1:]
end = text.index("\n];\n", start)
entry = '''
    CustomAlgorithm {
        algo: Algo::DummyPush,
        region: Region::Push,
        footprint: message,
        sentinel_rule: SentinelRule::Inputs,
    },'''
open(path, "w").write(text[:end] + entry + text[end:])
PY

# 3. Its kernels: one_shot_push's, renamed.
sed -e 's/one_shot_push/dummy_push/g' \
    -e 's/ONE_SHOT_PUSH/DUMMY_PUSH/g' \
    -e '/colltune_dummy_push_all_gather/d' \
    kernels/cuda/one_shot_push.cu > "$cuda"

changed=$( (git diff --name-only; git ls-files --others --exclude-standard) | sort -u |
  comm -23 - <(printf '%s\n' "$dirty_before" | sed '/^$/d'))
expected=$(printf '%s\n' "$cuda" "$registry" "$vocab" | sort -u)
if [ "$changed" != "$expected" ]; then
  echo "check-adding-an-algorithm: adding an algorithm changed other files than the three:" >&2
  echo "$changed" >&2
  exit 1
fi
echo "check-adding-an-algorithm: dummy_push added in exactly three files:"
echo "$changed" | sed 's/^/  /'

nvrtc_lib="$PWD/.cache/nvrtc/nvidia/cu13/lib"
if [ -d "$nvrtc_lib" ]; then
  export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cargo check --locked --quiet --workspace --all-targets
cargo test --locked --quiet -p colltune-tuned-schema --lib
cargo test --locked --quiet -p colltune-kernels --lib
cargo test --locked --quiet -p colltune-kernels --test nvrtc_compile
echo "check-adding-an-algorithm: the workspace builds, and its tests and every kernel's NVRTC compile pass with dummy_push"
