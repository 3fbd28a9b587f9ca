//! The disk cache of compiled kernels through the real compile: a warm cache
//! gives back what NVRTC made without running NVRTC, a damaged entry is
//! rebuilt, and a folder others can write is not used. Needs NVRTC, not a
//! GPU (like `nvrtc_compile`; `scripts/test.sh` puts the pinned wheels on
//! the library path).
//!
//! One test in its own binary: it counts this process's NVRTC compiles,
//! which another test compiling meanwhile would change.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use kernels::raw::{compile_specialisation, nvrtc_compiles};
use kernels::{KernelCache, KernelOrigin};
use policy::Arch;

/// A fresh folder under the system's temporary folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("colltune-kernel-cache-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The files in `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
}

/// A folder holding a copy of the one entry of `from`, with `damage` done to
/// its bytes. The memory cache is per folder, so a new folder stands for a
/// new process that finds the entry on disk.
fn copy_entry(from: &Path, to: &Path, damage: impl Fn(&mut Vec<u8>)) -> PathBuf {
    let [entry] = files(from).try_into().expect("one entry");
    fs::create_dir(to).unwrap();
    fs::set_permissions(to, fs::Permissions::from_mode(0o700)).unwrap();
    let mut bytes = fs::read(&entry).unwrap();
    damage(&mut bytes);
    let copy = to.join(entry.file_name().unwrap());
    fs::write(&copy, bytes).unwrap();
    copy
}

#[test]
fn a_warm_cache_skips_nvrtc_and_a_damaged_entry_is_rebuilt() {
    if let Err(e) = kernels::raw::require_nvrtc() {
        panic!("NVRTC is unavailable, so nothing can be cached: {e}");
    }
    let scratch = Scratch::new();
    let cache = |name: &str| KernelCache::Dir(scratch.0.join(name));
    // The generic build for one architecture: the cache does not care which.
    let obtain = |name: &str| {
        let before = nvrtc_compiles();
        let obtained = compile_specialisation(Arch::SM90, 0, &cache(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        (obtained, nvrtc_compiles() - before)
    };

    // Cold: NVRTC compiles, and the entry is written, private.
    let (cold, compiles) = obtain("cold");
    assert_eq!((cold.origin, compiles), (KernelOrigin::Compiled, 1));
    let cold_dir = scratch.0.join("cold");
    let [entry] = files(&cold_dir)
        .try_into()
        .expect("one entry, no temporary file");
    assert_eq!(fs::metadata(&cold_dir).unwrap().mode() & 0o777, 0o700);
    assert_eq!(fs::metadata(&entry).unwrap().mode() & 0o777, 0o600);

    // The same folder again in this process: the kernels it has in memory.
    let (again, compiles) = obtain("cold");
    assert_eq!((again.origin, compiles), (KernelOrigin::Process, 0));
    assert!(std::sync::Arc::ptr_eq(&again.kernels, &cold.kernels));

    // Warm: the entry is read and NVRTC does not run; what comes back is
    // exactly what NVRTC made.
    copy_entry(&cold_dir, &scratch.0.join("warm"), |_| {});
    let (warm, compiles) = obtain("warm");
    assert_eq!((warm.origin, compiles), (KernelOrigin::DiskCache, 0));
    assert_eq!(warm.kernels.cubin, cold.kernels.cubin);
    assert_eq!(warm.kernels.ptx, cold.kernels.ptx);
    assert_eq!(warm.kernels.log, cold.kernels.log);
    assert_eq!(
        (warm.kernels.arch, warm.kernels.world_spec),
        (Arch::SM90, 0)
    );

    // A damaged entry (one byte of the image flipped) is ignored, the build
    // compiled and the entry rewritten whole.
    let damaged = copy_entry(&cold_dir, &scratch.0.join("damaged"), |bytes| {
        let at = bytes.len() / 2;
        bytes[at] ^= 0x10;
    });
    let (rebuilt, compiles) = obtain("damaged");
    assert_eq!((rebuilt.origin, compiles), (KernelOrigin::Compiled, 1));
    assert_eq!(rebuilt.kernels.cubin, cold.kernels.cubin);
    assert_eq!(fs::read(&damaged).unwrap(), fs::read(&entry).unwrap());

    // A folder the group and others can write is not used: the build is
    // compiled and nothing is written there.
    let open = scratch.0.join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let (refused, compiles) = obtain("open");
    assert_eq!((refused.origin, compiles), (KernelOrigin::Compiled, 1));
    assert!(files(&open).is_empty(), "{:?}", files(&open));
}
