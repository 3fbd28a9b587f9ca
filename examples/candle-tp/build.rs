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
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "index"] {
            let path = std::path::Path::new(&dir).join(f);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
