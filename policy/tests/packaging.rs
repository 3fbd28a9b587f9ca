//! The package carries its tables (`tuned/` inside it), and in the repository
//! that folder is the repository's `tuned/` itself, not a copy that could
//! drift from it. `scripts/package-check.sh` checks the published side: the
//! `.crate` holds exactly the repository's files and builds on its own.

use std::path::Path;

#[test]
fn the_tables_are_inside_the_package() {
    let tuned = Path::new(env!("CARGO_MANIFEST_DIR")).join("tuned");
    assert!(
        tuned.is_dir(),
        "{} is not a folder; in a checkout it is a symbolic link to ../tuned \
         (clone with links enabled: git clone -c core.symlinks=true)",
        tuned.display()
    );
    assert!(tuned.join("sm90-nvlink.toml").is_file());
}

#[test]
fn in_the_repository_the_tables_are_the_repositorys_own() {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repository_tuned = package.join("../tuned");
    if !package.join("../Cargo.toml").is_file() || !repository_tuned.is_dir() {
        // Built from the published package: there is no repository copy.
        return;
    }
    let ours = package.join("tuned").canonicalize().unwrap();
    let theirs = repository_tuned.canonicalize().unwrap();
    assert_eq!(
        ours, theirs,
        "policy/tuned must be a symbolic link to ../tuned (one source of truth), not a copy"
    );
}
