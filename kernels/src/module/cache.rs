//! The on-disk cache of compiled kernels. NVRTC takes seconds per build and
//! every process of a world compiles the same builds; a cached image is read
//! in milliseconds.
//!
//! An entry is named by its key, a SHA-256 of everything that decides the
//! compiled image: the whole translation unit (the generated prelude, the
//! world specialisation and any experiment switches included), every NVRTC
//! option (the target among them), the NVRTC version and this crate's
//! version. A change of any of them misses the cache instead of loading a
//! stale image. The file repeats the key and carries a SHA-256 checksum of
//! its contents: an entry that is corrupt, truncated, of another format or
//! made for another key is ignored (the caller logs why) and rebuilt.
//!
//! Writes are atomic: the entry is written to a temporary file of its own in
//! the same folder (mode 0600) and renamed into place, so processes that
//! compile the same build at the same time each publish a whole entry, and a
//! reader never sees half of one. The folder must be a folder of this user
//! that neither the group nor others can write (it is created with mode
//! 0700): anyone who could write it could choose the code our kernels run.
//! Nothing here fails a build: every problem is reported to the caller as a
//! reason to compile instead.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// Where a process keeps compiled kernels between runs
/// ([`Options::kernel_cache`](crate::Options::kernel_cache)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelCache {
    /// `COLLTUNE_CACHE_DIR` when it is set: an absolute folder, or `off` for
    /// no disk cache. Otherwise `$XDG_CACHE_HOME/colltune`, else
    /// `$HOME/.cache/colltune`. An unusable setting (a relative folder) is
    /// logged and the process compiles.
    #[default]
    FromEnv,
    /// This folder (absolute), whatever the environment says.
    Dir(PathBuf),
    /// No disk cache: every process compiles its kernels with NVRTC (once per
    /// process).
    Off,
}

/// The environment variable that chooses the cache folder, or `off`.
pub const CACHE_DIR_ENV: &str = "COLLTUNE_CACHE_DIR";

/// The folder `cache` names, reading the environment through `var`:
/// `Ok(None)` when the disk cache is off, `Err` when the setting cannot be
/// used (the caller logs it and compiles).
pub(crate) fn folder(
    cache: &KernelCache,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<PathBuf>, String> {
    // Empty variables count as unset, as the XDG base directory rules say.
    let set = |name: &str| var(name).filter(|value| !value.is_empty());
    match cache {
        KernelCache::Off => Ok(None),
        KernelCache::Dir(dir) if dir.is_absolute() => Ok(Some(dir.clone())),
        KernelCache::Dir(dir) => Err(format!(
            "the kernel cache folder {} is not absolute",
            dir.display()
        )),
        KernelCache::FromEnv => match set(CACHE_DIR_ENV) {
            Some(value) if value == "off" => Ok(None),
            Some(value) if Path::new(&value).is_absolute() => Ok(Some(PathBuf::from(value))),
            Some(value) => Err(format!(
                "{CACHE_DIR_ENV}={}: expected an absolute folder or `off`",
                value.to_string_lossy()
            )),
            None => {
                // A relative XDG_CACHE_HOME is invalid and ignored (XDG rules).
                let xdg = set("XDG_CACHE_HOME").map(PathBuf::from);
                if let Some(xdg) = xdg.filter(|dir| dir.is_absolute()) {
                    return Ok(Some(xdg.join("colltune")));
                }
                match set("HOME").map(PathBuf::from) {
                    Some(home) if home.is_absolute() => {
                        Ok(Some(home.join(".cache").join("colltune")))
                    }
                    _ => Err(format!(
                        "neither {CACHE_DIR_ENV}, XDG_CACHE_HOME nor HOME names an absolute \
                         folder"
                    )),
                }
            }
        },
    }
}

/// Everything that decides a compiled image.
#[derive(Clone, Debug)]
pub(crate) struct KeyInputs<'a> {
    pub(crate) crate_version: &'a str,
    /// NVRTC's (major, minor).
    pub(crate) nvrtc_version: (i32, i32),
    /// Every option passed to NVRTC, the target architecture among them.
    pub(crate) options: &'a [String],
    /// The whole translation unit.
    pub(crate) source: &'a str,
}

/// The SHA-256 that names an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey([u8; 32]);

impl CacheKey {
    pub(crate) fn new(inputs: &KeyInputs) -> CacheKey {
        let mut hash = Sha256::new();
        // Every field is length-prefixed, so no two different inputs hash
        // the same bytes (("ab", "c") against ("a", "bc")).
        let mut field = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        };
        field(b"colltune kernel cache key 1");
        field(inputs.crate_version.as_bytes());
        field(&inputs.nvrtc_version.0.to_le_bytes());
        field(&inputs.nvrtc_version.1.to_le_bytes());
        field(&(inputs.options.len() as u64).to_le_bytes());
        for option in inputs.options {
            field(option.as_bytes());
        }
        field(inputs.source.as_bytes());
        CacheKey(hash.finalize().into())
    }

    pub(crate) fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What an entry holds: what one compile produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) cubin: Vec<u8>,
    pub(crate) ptx: String,
    pub(crate) log: String,
}

/// The first bytes of every entry.
const MAGIC: &[u8; 16] = b"colltune-kernels";
/// The layout below; another value is another format, ignored.
const FORMAT: u32 = 1;
/// Magic, format, key, three lengths, checksum.
const HEADER_BYTES: usize = 16 + 4 + 32 + 3 * 8 + 32;
/// Where the checksum starts: it covers the header before it and the payload.
const CHECKSUM_AT: usize = HEADER_BYTES - 32;
/// No entry is larger (the CUBIN and PTX of one build are a few MiB).
const MAX_ENTRY_BYTES: u64 = 1 << 30;

/// The file of `entry` under `key`.
pub(crate) fn encode(key: &CacheKey, entry: &Entry) -> Vec<u8> {
    let parts = [
        entry.cubin.as_slice(),
        entry.ptx.as_bytes(),
        entry.log.as_bytes(),
    ];
    let payload: usize = parts.iter().map(|p| p.len()).sum();
    let mut bytes = Vec::with_capacity(HEADER_BYTES + payload);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT.to_le_bytes());
    bytes.extend_from_slice(&key.0);
    for part in parts {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
    }
    let mut checksum = Sha256::new();
    checksum.update(&bytes);
    for part in parts {
        checksum.update(part);
    }
    bytes.extend_from_slice(&checksum.finalize());
    for part in parts {
        bytes.extend_from_slice(part);
    }
    bytes
}

/// The entry in `bytes` if it is whole, of this format and made for `key`;
/// otherwise why it is not used.
pub(crate) fn decode(bytes: &[u8], key: &CacheKey) -> Result<Entry, String> {
    if bytes.len() < HEADER_BYTES {
        return Err(format!(
            "truncated: {} bytes, shorter than its header",
            bytes.len()
        ));
    }
    if &bytes[..16] != MAGIC {
        return Err("not a colltune kernel cache entry".into());
    }
    let format = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(format!("format {format}, this build reads {FORMAT}"));
    }
    if bytes[20..52] != key.0 {
        return Err("made for another key (a foreign entry)".into());
    }
    let length = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let lengths = [length(52), length(60), length(68)];
    let payload = lengths
        .iter()
        .try_fold(0u64, |sum, &len| sum.checked_add(len))
        .filter(|&sum| sum <= MAX_ENTRY_BYTES)
        .ok_or("its header declares an impossible size")?;
    if (bytes.len() - HEADER_BYTES) as u64 != payload {
        return Err(format!(
            "truncated or padded: {} bytes, its header says {}",
            bytes.len(),
            HEADER_BYTES as u64 + payload
        ));
    }
    let mut checksum = Sha256::new();
    checksum.update(&bytes[..CHECKSUM_AT]);
    checksum.update(&bytes[HEADER_BYTES..]);
    if checksum.finalize().as_slice() != &bytes[CHECKSUM_AT..HEADER_BYTES] {
        return Err("its checksum does not match its contents (corrupt)".into());
    }
    let cubin_end = HEADER_BYTES + lengths[0] as usize;
    let ptx_end = cubin_end + lengths[1] as usize;
    let cubin = bytes[HEADER_BYTES..cubin_end].to_vec();
    if !cubin.starts_with(b"\x7fELF") {
        return Err("its image is not an ELF CUBIN".into());
    }
    let text = |range: std::ops::Range<usize>, what: &str| {
        String::from_utf8(bytes[range].to_vec()).map_err(|_| format!("its {what} is not UTF-8"))
    };
    Ok(Entry {
        cubin,
        ptx: text(cubin_end..ptx_end, "PTX")?,
        log: text(ptx_end..bytes.len(), "compiler log")?,
    })
}

/// Whether a folder of owner `owner` and mode `mode` may hold this user's
/// (`user`) cache: it must be this user's, and neither the group nor others
/// may write it.
pub(crate) fn check_owner_and_mode(owner: u32, mode: u32, user: u32) -> Result<(), String> {
    if owner != user {
        return Err(format!(
            "it belongs to user {owner}, not to this user ({user})"
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "its mode {:o} lets the group or others write it (chmod 700 it)",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// A checked cache folder.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// Creates `dir` (and its missing parents) with mode 0700 and checks it:
    /// a folder of this user that neither the group nor others can write.
    pub(crate) fn open(dir: &Path) -> Result<DiskCache, String> {
        let refuse = |why: String| Err(format!("kernel cache folder {}: {why}", dir.display()));
        if !dir.is_absolute() {
            return refuse("not an absolute path".into());
        }
        if let Err(e) = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
        {
            return refuse(format!("cannot create it: {e}"));
        }
        let meta = match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => meta,
            Ok(_) => return refuse("not a folder".into()),
            Err(e) => return refuse(format!("cannot read it: {e}")),
        };
        // SAFETY: geteuid cannot fail and touches no memory.
        let user = unsafe { libc::geteuid() };
        if let Err(why) = check_owner_and_mode(meta.uid(), meta.mode(), user) {
            return refuse(why);
        }
        Ok(DiskCache {
            dir: dir.to_path_buf(),
        })
    }

    /// Where the entry of `key` lives.
    pub(crate) fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.kernels", key.hex()))
    }

    /// The entry of `key`: `Ok(None)` when there is none, `Err` when there is
    /// a file that cannot be used (and why).
    pub(crate) fn load(&self, key: &CacheKey) -> Result<Option<Entry>, String> {
        let path = self.path(key);
        let bytes = match fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: cannot read it: {e}", path.display())),
            Ok(meta) if !meta.is_file() || meta.len() > MAX_ENTRY_BYTES => {
                return Err(format!("{}: not a cache entry", path.display()));
            }
            Ok(_) => {
                fs::read(&path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))?
            }
        };
        decode(&bytes, key)
            .map(Some)
            .map_err(|why| format!("{}: {why}", path.display()))
    }

    /// Publishes `entry` under `key`, atomically; returns its path.
    pub(crate) fn store(&self, key: &CacheKey, entry: &Entry) -> Result<PathBuf, String> {
        static TEMPORARIES: AtomicU64 = AtomicU64::new(0);
        let path = self.path(key);
        // A name no other writer uses: this process and a counter of its own.
        let temporary = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            &key.hex()[..16],
            std::process::id(),
            TEMPORARIES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| file.write_all(&encode(key, entry)))
            .and_then(|()| fs::rename(&temporary, &path));
        match written {
            Ok(()) => Ok(path),
            Err(e) => {
                let _ = fs::remove_file(&temporary);
                Err(format!("{}: cannot write it: {e}", path.display()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(options: &'a [String], source: &'a str) -> KeyInputs<'a> {
        KeyInputs {
            crate_version: "0.1.0",
            nvrtc_version: (13, 0),
            options,
            source,
        }
    }

    fn options() -> Vec<String> {
        vec!["--std=c++17".into(), "--gpu-architecture=sm_90".into()]
    }

    fn entry() -> Entry {
        Entry {
            cubin: b"\x7fELF and the rest of an image".to_vec(),
            ptx: ".entry colltune_x(".into(),
            log: "ptxas info: nothing".into(),
        }
    }

    /// A fresh folder under the system's temporary folder, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            static N: AtomicU64 = AtomicU64::new(0);
            let dir = std::env::temp_dir().join(format!(
                "colltune-cache-test-{name}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_key_is_stable() {
        // The same inputs name the same entry in every process and every
        // build of this crate version: a key that changed by itself would
        // make every process compile.
        let options = options();
        let key = CacheKey::new(&inputs(&options, "source"));
        assert_eq!(key, CacheKey::new(&inputs(&options, "source")));
        assert_eq!(
            key.hex(),
            "56883b6608a12c4affda2db64cedc1f618c3886e4b857a004f264eef32db370f"
        );
    }

    #[test]
    fn every_input_changes_the_key() {
        let options = options();
        let base = inputs(&options, "source");
        let key = CacheKey::new(&base);
        let other_target = vec!["--std=c++17".into(), "--gpu-architecture=sm_100".into()];
        let one_more = {
            let mut o = options.clone();
            o.push("--fmad=false".into());
            o
        };
        let split_differently = vec!["--std=c++17--gpu-architecture".into(), "=sm_90".into()];
        let changed = [
            (
                "crate version",
                KeyInputs {
                    crate_version: "0.1.1",
                    ..base.clone()
                },
            ),
            (
                "NVRTC major",
                KeyInputs {
                    nvrtc_version: (12, 0),
                    ..base.clone()
                },
            ),
            (
                "NVRTC minor",
                KeyInputs {
                    nvrtc_version: (13, 1),
                    ..base.clone()
                },
            ),
            (
                "target",
                KeyInputs {
                    options: &other_target,
                    ..base.clone()
                },
            ),
            (
                "an option",
                KeyInputs {
                    options: &one_more,
                    ..base.clone()
                },
            ),
            (
                "option boundaries",
                KeyInputs {
                    options: &split_differently,
                    ..base.clone()
                },
            ),
            (
                "source",
                KeyInputs {
                    source: "source ",
                    ..base.clone()
                },
            ),
        ];
        for (what, changed) in changed {
            assert_ne!(
                CacheKey::new(&changed),
                key,
                "{what} does not change the key"
            );
        }
    }

    #[test]
    fn an_entry_round_trips() {
        let key = CacheKey::new(&inputs(&options(), "source"));
        assert_eq!(decode(&encode(&key, &entry()), &key), Ok(entry()));
    }

    #[test]
    fn damaged_and_foreign_entries_are_refused_with_a_reason() {
        let key = CacheKey::new(&inputs(&options(), "source"));
        let other = CacheKey::new(&inputs(&options(), "other source"));
        let good = encode(&key, &entry());
        let refused = |bytes: &[u8], why: &str| {
            let err = decode(bytes, &key).expect_err(why);
            assert!(err.contains(why), "expected `{why}`, got `{err}`");
        };
        refused(&good[..HEADER_BYTES - 1], "shorter than its header");
        refused(&good[..good.len() - 1], "truncated or padded");
        refused(&[good.as_slice(), b"x"].concat(), "truncated or padded");
        refused(&encode(&other, &entry()), "another key");
        let mut magic = good.clone();
        magic[0] ^= 1;
        refused(&magic, "not a colltune kernel cache entry");
        let mut format = good.clone();
        format[16] = 2;
        refused(&format, "format 2");
        // Every byte of the payload and of the lengths is covered: flip each.
        for at in (52..CHECKSUM_AT).chain(HEADER_BYTES..good.len()) {
            let mut corrupt = good.clone();
            corrupt[at] ^= 0x40;
            assert!(
                decode(&corrupt, &key).is_err(),
                "byte {at} flipped unnoticed"
            );
        }
        let mut huge = good.clone();
        huge[52..60].copy_from_slice(&u64::MAX.to_le_bytes());
        refused(&huge, "impossible size");
        let not_elf = Entry {
            cubin: b"PTX only".to_vec(),
            ..entry()
        };
        refused(&encode(&key, &not_elf), "not an ELF CUBIN");
    }

    #[test]
    fn the_folder_comes_from_the_options_then_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let none = env(&[]);
        assert_eq!(
            folder(&KernelCache::Off, env(&[(CACHE_DIR_ENV, "/x")])),
            Ok(None)
        );
        assert_eq!(
            folder(
                &KernelCache::Dir("/mine".into()),
                env(&[(CACHE_DIR_ENV, "off")])
            ),
            Ok(Some("/mine".into()))
        );
        assert!(folder(&KernelCache::Dir("relative".into()), none).is_err());
        let from_env = |pairs| folder(&KernelCache::FromEnv, env(pairs));
        assert_eq!(
            from_env(&[
                (CACHE_DIR_ENV, "/c"),
                ("XDG_CACHE_HOME", "/x"),
                ("HOME", "/h")
            ]),
            Ok(Some("/c".into()))
        );
        assert_eq!(
            from_env(&[(CACHE_DIR_ENV, "off"), ("HOME", "/h")]),
            Ok(None)
        );
        let relative = from_env(&[(CACHE_DIR_ENV, "cache"), ("HOME", "/h")]).unwrap_err();
        assert!(relative.contains("COLLTUNE_CACHE_DIR=cache"), "{relative}");
        assert_eq!(
            from_env(&[
                (CACHE_DIR_ENV, ""),
                ("XDG_CACHE_HOME", "/x"),
                ("HOME", "/h")
            ]),
            Ok(Some("/x/colltune".into()))
        );
        assert_eq!(
            from_env(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")]),
            Ok(Some("/h/.cache/colltune".into()))
        );
        assert!(from_env(&[]).is_err());
    }

    #[test]
    fn only_a_folder_of_this_user_that_no_one_else_can_write_is_used() {
        assert_eq!(check_owner_and_mode(1000, 0o40700, 1000), Ok(()));
        assert_eq!(check_owner_and_mode(1000, 0o40755, 1000), Ok(()));
        assert!(
            check_owner_and_mode(1001, 0o40700, 1000)
                .unwrap_err()
                .contains("user 1001")
        );
        for mode in [0o40770, 0o40702, 0o40777] {
            let err = check_owner_and_mode(1000, mode, 1000).unwrap_err();
            assert!(err.contains("group or others"), "{mode:o}: {err}");
        }
    }

    #[test]
    fn a_new_folder_is_private_and_an_open_one_is_refused() {
        let scratch = Scratch::new("mode");
        let dir = scratch.0.join("nested").join("colltune");
        DiskCache::open(&dir).expect("a new folder is created");
        for created in [&dir, &dir.parent().unwrap().to_path_buf()] {
            let mode = fs::metadata(created).unwrap().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", created.display());
        }
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let err = DiskCache::open(&dir).unwrap_err();
        assert!(err.contains("group or others"), "{err}");
        assert!(DiskCache::open(Path::new("relative")).is_err());
    }

    #[test]
    fn entries_are_stored_private_and_read_back() {
        let scratch = Scratch::new("store");
        let cache = DiskCache::open(&scratch.0).unwrap();
        let key = CacheKey::new(&inputs(&options(), "source"));
        assert_eq!(cache.load(&key), Ok(None));
        let path = cache.store(&key, &entry()).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(cache.load(&key), Ok(Some(entry())));
        // Nothing but the entry is left in the folder.
        let names: Vec<_> = fs::read_dir(&scratch.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [path.file_name().unwrap()]);
        // A damaged file is reported, and a store replaces it.
        fs::write(&path, b"garbage").unwrap();
        assert!(
            cache
                .load(&key)
                .unwrap_err()
                .contains("shorter than its header")
        );
        cache.store(&key, &entry()).unwrap();
        assert_eq!(cache.load(&key), Ok(Some(entry())));
    }

    #[test]
    fn writers_racing_on_one_entry_never_show_a_partial_one() {
        let scratch = Scratch::new("race");
        let cache = DiskCache::open(&scratch.0).unwrap();
        let key = CacheKey::new(&inputs(&options(), "source"));
        // Large enough that writing it is not one step of the file system.
        let big = Entry {
            cubin: [b"\x7fELF".as_slice(), &vec![7u8; 1 << 20]].concat(),
            ..entry()
        };
        let writing = AtomicU64::new(2);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..10 {
                        cache.store(&key, &big).unwrap();
                    }
                    writing.fetch_sub(1, Ordering::Relaxed);
                });
            }
            scope.spawn(|| {
                while writing.load(Ordering::Relaxed) > 0 {
                    match cache.load(&key) {
                        Ok(None) => {}
                        Ok(Some(read)) => {
                            assert!(read == big, "a different entry was read");
                        }
                        Err(why) => panic!("a reader saw a partial entry: {why}"),
                    }
                }
            });
        });
        assert_eq!(cache.load(&key), Ok(Some(big)));
        let names: Vec<_> = fs::read_dir(&scratch.0).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary files left behind");
    }
}
