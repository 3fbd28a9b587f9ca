//! Rebuild `policy` when a table file is added, removed or edited. (Edits of
//! files that exist are also tracked through the `include_bytes!` the macro
//! emits; a directory here makes Cargo notice new files too.)
//!
//! `tuned` is a symbolic link to the repository's `tuned/` in a checkout, and a
//! plain folder in the published package; Cargo scans either.

fn main() {
    println!("cargo:rerun-if-changed=tuned");
    println!("cargo:rerun-if-changed=build.rs");
}
