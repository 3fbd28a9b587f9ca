//! Rebuild `policy` when a table file is added, removed or edited. (Edits of
//! files that exist are also tracked through the `include_bytes!` the macro
//! emits; a directory here makes Cargo notice new files too.)

fn main() {
    println!("cargo:rerun-if-changed=../tuned");
    println!("cargo:rerun-if-changed=build.rs");
}
