//! Rebuild when a file is added to or removed from `tuned/`. Edits of existing
//! files are tracked by the `include_bytes!` that `include_tuned!` emits, but
//! only a build script makes Cargo look at the folder itself.

fn main() {
    println!("cargo:rerun-if-changed=tuned");
    println!("cargo:rerun-if-changed=build.rs");
}
