//! Rebuild `policy` when a table file is added, removed or edited. (Edits of
//! files that exist are also tracked through the `include_bytes!` the macro
//! emits; a directory here makes Cargo notice new files too.)
//!
//! `tuned` is a symbolic link to the repository's `tuned/` in a checkout, and a
//! plain folder in the published package; Cargo scans either.

use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=tuned");
    println!("cargo::rerun-if-changed=build.rs");
    let tuned = Path::new("tuned");
    if tuned.is_dir() {
        return;
    }
    // A checkout made without symbolic links (git on Windows by default) turns
    // the link into a small text file; say so here, where the cause is known,
    // rather than as a puzzling "not a directory" from the macro.
    let found = match std::fs::symlink_metadata(tuned) {
        Ok(meta) if meta.is_file() => {
            "a plain file (a symbolic link checked out without link support?)"
        }
        Ok(_) => "a link that leads to no folder",
        Err(_) => "missing",
    };
    // Cargo prints this as the build's error and fails it (a build script
    // has no logger; this is how it reports).
    println!(
        "cargo::error=policy/tuned is {found}. It holds the selection tables: in the colltune \
         repository a symbolic link to ../tuned (clone with links enabled: \
         `git clone -c core.symlinks=true`), in the published crate a folder."
    );
}
