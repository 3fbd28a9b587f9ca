//! Lists the CUDA sources NVRTC compiles (`cuda/*.cu`) for `module.rs`: the
//! shared `common.cu` and `prims.cu` first, then every other file in name
//! order. So adding a kernel is adding its file: nothing names it here.

use std::fmt::Write as _;
use std::path::Path;

const FIRST: [&str; 2] = ["common.cu", "prims.cu"];

fn main() {
    let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("cuda");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".cu") && !FIRST.contains(&name.as_str()))
        .collect();
    names.sort();
    for first in FIRST.iter().rev() {
        assert!(
            dir.join(first).is_file(),
            "kernels/cuda/{first} is missing: every kernel is built on it"
        );
        names.insert(0, first.to_string());
    }
    let mut out = String::from(
        "/// The kernel sources, in compilation order (embedded in the binary).\n\
         pub(crate) const SOURCES: &[(&str, &str)] = &[\n",
    );
    for name in &names {
        let path = dir.join(name);
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    out.push_str("];\n");
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("set by cargo")).join("cuda_sources.rs");
    std::fs::write(&target, out).unwrap_or_else(|e| panic!("writing {}: {e}", target.display()));
}
