#!/usr/bin/env bash
# Proves that the crates an engine depends on (colltune-tuned-schema,
# colltune-policy-macros, colltune-policy, colltune-kernels; their libraries are
# tuned_schema, policy_macros, policy and kernels) work as published, with
# nothing from this repository:
#
# 1. `cargo package` them (no verify: step 3 is the build) and show what ships;
# 2. check that the packaged policy carries exactly the repository's
#    tuned/*.toml, byte for byte, and kernels its CUDA sources;
# 3. extract the .crate files into a temporary folder outside the repository and
#    build and test a small engine there, with `[patch.crates-io]` pointing at
#    the extracted crates: it uses policy's built-in tables, compiles a tuned/
#    folder of its own with `policy::include_tuned!`, and hands it to kernels;
# 4. check, with `cargo metadata`, that no path of that build leads back here;
# 5. `cargo publish --dry-run` of all five packages (the four and colltune-tuner),
#    which packages each one and builds it from its package. None of them is on
#    crates.io yet and each depends on the ones before it, so they are given to
#    one command: Cargo then verifies each against its siblings' packages (a
#    temporary local registry, as when they are published together in this
#    order) and everything else against crates.io. This step needs the
#    network (the registry's index); PACKAGE_CHECK_NO_PUBLISH=1 skips it.
#
# Crates.io dependencies come from the repository's Cargo.lock (same versions)
# and are taken from Cargo's cache (--offline): CI has already fetched them
# with `cargo fetch` below. CI runs this (.ci/run); it takes about a minute
# and a half on 2 cores, most of it compiling the dependencies afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
crates=(colltune-tuned-schema colltune-policy-macros colltune-policy colltune-kernels)
version="$(cargo metadata --format-version 1 --no-deps --offline |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "colltune-policy"))')"

work="$(mktemp -d "${TMPDIR:-/tmp}/colltune-package-check.XXXXXX")"
# PACKAGE_CHECK_KEEP=1 keeps the folder, to look at the packages and the build.
if [ -n "${PACKAGE_CHECK_KEEP:-}" ]; then
  echo "package-check: keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi
case "$work/" in
  "$repo"/*) echo "package-check: the temporary folder $work is inside the repository; set TMPDIR elsewhere" >&2; exit 1 ;;
esac

# Where the engine's build compiles: a temporary folder, or
# PACKAGE_CHECK_TARGET (CI keeps it between runs, so the crates.io
# dependencies are compiled once per machine, not once per run; the packaged
# crates are path dependencies there, rebuilt whenever they change). The
# publish check always compiles afresh: it sees our crates as registry
# packages of an unchanged version, which Cargo never rebuilds.
build_targets="${PACKAGE_CHECK_TARGET:-$work}"

fail() {
  echo "package-check: $*" >&2
  exit 1
}

# Cargo's cache must hold every crates.io dependency before the offline build.
cargo fetch --locked --quiet

echo "== cargo package (${crates[*]})"
# --allow-dirty: a developer's uncommitted work must not stop the check; CI's
# clone is clean anyway. What gets packaged is checked below either way.
package_args=()
for crate in "${crates[@]}"; do package_args+=(-p "$crate"); done
cargo package --no-verify --allow-dirty --offline --quiet \
  --target-dir "$work/package-target" "${package_args[@]}"

mkdir "$work/crates"
for crate in "${crates[@]}"; do
  file="$work/package-target/package/$crate-$version.crate"
  [ -f "$file" ] || fail "cargo package wrote no $file"
  tar -xzf "$file" -C "$work/crates"
  echo "-- $crate-$version.crate: $(tar -tzf "$file" | wc -l) files, $(du -k "$file" | cut -f1) KiB"
done
policy_dir="$work/crates/colltune-policy-$version"
kernels_dir="$work/crates/colltune-kernels-$version"
echo "-- policy ships:"
(cd "$policy_dir" && find . -type f ! -path './tests/*' | sort | sed 's|^\./|   |')

echo "== the packaged tables are the repository's"
# Same set of *.toml files, same bytes; and plain files, not a link to follow.
[ -d "$policy_dir/tuned" ] && [ ! -L "$policy_dir/tuned" ] || fail "policy's package has no tuned/ folder"
expected="$(cd tuned && ls -1 -- *.toml)"
shipped="$(cd "$policy_dir/tuned" && ls -1 -- *.toml)"
[ "$expected" = "$shipped" ] || fail "policy ships tuned/ files [$shipped], the repository has [$expected]"
for file in $expected; do
  cmp -s "tuned/$file" "$policy_dir/tuned/$file" || fail "policy's tuned/$file differs from the repository's"
done
echo "-- $(echo "$expected" | wc -l) files identical: $(echo $expected)"
for file in kernels/cuda/*.cu; do
  cmp -s "$file" "$kernels_dir/cuda/$(basename "$file")" || fail "kernels' package lacks or changed cuda/$(basename "$file")"
done
echo "-- kernels carries its $(ls kernels/cuda/*.cu | wc -l) CUDA sources"

echo "== build and test an engine against the extracted crates, in $work"
engine="$work/engine"
mkdir -p "$engine/src" "$engine/tests" "$engine/tuned"
# The engine's own table: the workspace example's, which differs from tuned/.
cp examples/engine/tuned/*.toml "$engine/tuned/"
cp Cargo.lock "$engine/Cargo.lock"
{
  cat <<EOF
[package]
name = "packaged-engine"
version = "0.0.0"
edition = "2024"
publish = false

# As an engine writes them: the packages' names; the code says policy:: and kernels::.
[dependencies]
colltune-policy = "=$version"
colltune-kernels = "=$version"

[patch.crates-io]
EOF
  for crate in "${crates[@]}"; do
    echo "$crate = { path = \"../crates/$crate-$version\" }"
  done
} >"$engine/Cargo.toml"
cat >"$engine/build.rs" <<'EOF'
fn main() {
    println!("cargo:rerun-if-changed=tuned");
}
EOF
cat >"$engine/src/lib.rs" <<'EOF'
pub mod tables {
    policy::include_tuned!("tuned");
}
EOF
# The repository's file names, as policy::PLATFORMS must list them.
names="$(for file in $expected; do printf '"tuned/%s", ' "$file"; done)"
cat >"$engine/tests/packaged.rs" <<EOF
use packaged_engine::tables;
use policy::{Algo, Arch, Collective, DType, Link, Mode, Query};

// 24 MiB over 8 H200s: published two-shot pull in tuned/, NCCL in the engine's.
const LARGE: Query = Query::new(
    Collective::AllReduce,
    Arch::SM90,
    Link::NvLink,
    8,
    DType::Bf16,
    Mode::Graph,
    24 * 1024 * 1024,
);
// Both table sets answer in const context, and differently.
const BUILT_IN: Algo = policy::select(LARGE);
const ENGINE: Algo = tables::select(LARGE);
const _: () = assert!(!BUILT_IN.same_as(ENGINE));

#[test]
fn policy_carries_the_repository_tables() {
    let files: Vec<&str> = policy::PLATFORMS.iter().map(|p| p.file).collect();
    assert_eq!(files, [$names]);
}

#[test]
fn kernels_dispatch_with_the_engine_tables() {
    policy::use_tables(&tables::TABLES).unwrap();
    assert_eq!(kernels::table_choice(LARGE), ENGINE);
}
EOF
(
  cd "$engine"
  # Nothing from the environment may point the build back at the repository.
  unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR RUSTFLAGS
  if cargo test --offline --target-dir "$build_targets/target" >"$work/test.log" 2>&1; then
    grep -E '^test (result|[a-z_]+ \.\.\.)' "$work/test.log"
  else
    cat "$work/test.log" >&2
    exit 1
  fi
) || fail "the engine built from the packaged crates did not build or pass"

echo "== no path of that build leads into $repo"
metadata="$(cd "$engine" && cargo metadata --format-version 1 --offline)"
if grep -qF "\"$repo/" <<<"$metadata"; then
  fail "the isolated build refers to the repository: $(grep -oF "$repo/[^\"]*" <<<"$metadata" | sort -u | head -3)"
fi
if [ -z "${PACKAGE_CHECK_NO_PUBLISH:-}" ]; then
  echo "== cargo publish --dry-run (${crates[*]} colltune-tuner)"
  publish_args=()
  for crate in "${crates[@]}" colltune-tuner; do publish_args+=(-p "$crate"); done
  if ! cargo publish --dry-run --locked --allow-dirty --target-dir "$work/publish-target" \
    "${publish_args[@]}" >"$work/publish.log" 2>&1; then
    cat "$work/publish.log" >&2
    fail "cargo publish --dry-run failed"
  fi
  grep -E '^ *(Packaging|Verifying)' "$work/publish.log" | sed 's/^ */   /'
  echo "-- dry run: each package built from its .crate; nothing was uploaded"
fi
echo "package-check: ok (${crates[*]} $version build from their .crate files alone)"
