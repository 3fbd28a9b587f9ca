//! Records the commit this binary is built from, for its reports ("which
//! build it used"): `git describe` of the repository, or `unknown`.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    let described = git(&["describe", "--always", "--dirty", "--abbrev=10"])
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CANDLE_TP_BUILD={described}");
    println!("cargo:rerun-if-changed=build.rs");
    // HEAD names the branch; a commit moves the branch's ref (loose, or in
    // packed-refs), not HEAD, so those are watched too. A worktree keeps its
    // HEAD and index in its own git dir and its refs in the common one.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let dirs = [
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ];
    for dir in dirs.iter().flatten() {
        let files = ["HEAD", "index", "packed-refs"]
            .into_iter()
            .map(String::from)
            .chain(branch.clone());
        for f in files {
            let path = std::path::Path::new(dir).join(f);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
