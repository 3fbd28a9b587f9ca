//! A rendezvous through a directory that every process of the world can see
//! (one host). Each rank writes its blob for a round to a temporary file and
//! publishes it as `<round>.rank<r>` without replacing anything (a hard link,
//! which fails if the name exists), then polls for everyone else's file until
//! a bound.
//!
//! The directory must be fresh for each world (a launcher creates one, e.g.
//! under `$TMPDIR`, and removes it afterwards): files of an earlier world would
//! be read as this one's. A rank that finds a file of its own rank already
//! there refuses to start, which catches a reused directory; two processes
//! that claim one rank at the same time both pass that check, but only one
//! can publish its file, and the other fails.
//!
//! The directory is private. The blobs carry CUDA IPC handles, and any process
//! that reads a handle can map that GPU memory: read the engine's activations
//! or corrupt them. So the directory is created with mode 0700 and every file
//! with 0600, and an existing directory is refused when it is a symbolic link
//! (someone else could point it anywhere), is not owned by this user, or grants
//! any access to group or others.
//!
//! Everything goes through handles, not paths: the directory is opened once
//! (`O_DIRECTORY | O_NOFOLLOW`) and checked on that handle, and every file is
//! created, linked and opened relative to it (`openat`, `linkat`) with
//! `O_NOFOLLOW`. A directory swapped in at the same path after the check, or a
//! symbolic link planted as a file, is never used. Peers' files are opened
//! with `O_NONBLOCK` and read only when they are regular files of this user
//! within a size cap, so a FIFO or a device planted as a peer's file cannot
//! block the bounded exchange.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Rendezvous, check_round_name};
use crate::error::{Error, Result};

const MAGIC: &str = "colltune-rendezvous 1";

/// The largest file a peer may publish: the largest blob and its header line.
pub const MAX_FILE_BYTES: u64 = super::MAX_BLOB_BYTES + 256;

/// See the module documentation.
#[derive(Debug)]
pub struct FileRendezvous {
    dir: PathBuf,
    /// The directory, opened once and checked: every file operation is
    /// relative to it.
    handle: OwnedFd,
    uid: u32,
    rank: usize,
    world: usize,
    timeout: Duration,
}

impl FileRendezvous {
    /// Rank `rank` of `world_size` in `dir` (created if missing); every exchange
    /// waits at most `timeout` for the others.
    pub fn new(
        dir: impl Into<PathBuf>,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> Result<FileRendezvous> {
        let dir = dir.into();
        if rank >= world_size {
            return Err(Error::Mismatch(format!(
                "rank {rank} is not below the world size {world_size}"
            )));
        }
        let uid = effective_uid();
        let handle = open_private_dir(&dir, uid)?;
        let suffix = format!(".rank{rank}");
        for name in entry_names(&handle, &dir)? {
            if !name.starts_with('.') && name.ends_with(&suffix) {
                return Err(Error::Mismatch(format!(
                    "{} already holds {name}: the directory belongs to an earlier world, or \
                     another process joined as rank {rank} (use a fresh directory per world)",
                    dir.display()
                )));
            }
        }
        Ok(FileRendezvous {
            dir,
            handle,
            uid,
            rank,
            world: world_size,
            timeout,
        })
    }

    /// The directory the exchange happens in, as given to
    /// [`FileRendezvous::new`].
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn name(round: &str, rank: usize) -> String {
        format!("{round}.rank{rank}")
    }

    fn publish(&self, round: &str, mine: &[u8]) -> Result<()> {
        // Unique per publication, so that two claims of one rank (even from
        // one process) never share a temporary file.
        static PUBLISHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let serial = PUBLISHED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = format!(
            ".{round}.rank{}.{}.{serial}.tmp",
            self.rank,
            std::process::id()
        );
        let mut blob = format!("{MAGIC} world={} rank={}\n", self.world, self.rank).into_bytes();
        blob.extend_from_slice(mine);
        if blob.len() as u64 > MAX_FILE_BYTES {
            return Err(Error::Unsupported(format!(
                "rendezvous: a `{round}` blob of {} bytes is above the {MAX_FILE_BYTES}-byte cap",
                mine.len()
            )));
        }
        // 0600 from the start (not chmod after writing: the handles would be
        // readable in between); O_EXCL | O_NOFOLLOW never opens a file or a
        // link someone planted.
        let mut file = self
            .open_at(
                &tmp,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                0o600,
            )
            .map_err(|e| self.io_error("creating", &tmp, e))?;
        let written = file.write_all(&blob).and_then(|()| file.sync_all());
        drop(file);
        let published = written
            .map_err(|e| self.io_error("writing", &tmp, e))
            .and_then(|()| {
                // A hard link never replaces: the second claim of a rank fails here.
                let name = Self::name(round, self.rank);
                match self.link_at(&tmp, &name) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                        Err(Error::Mismatch(format!(
                            "{} already holds {name}: another process published rank {} of round \
                     `{round}` first (two processes claimed one rank, or the directory belongs \
                     to an earlier world)",
                            self.dir.display(),
                            self.rank
                        )))
                    }
                    Err(e) => Err(self.io_error("publishing", &name, e)),
                }
            });
        let _ = self.unlink_at(&tmp);
        published
    }

    /// Rank `from`'s blob, `None` while it is not there yet.
    fn read(&self, round: &str, from: usize) -> Result<Option<Vec<u8>>> {
        let name = Self::name(round, from);
        let file = match self.open_at(
            &name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(self.refuse(&name, "it is a symbolic link"));
            }
            Err(e) => return Err(self.io_error("opening", &name, e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| self.io_error("inspecting", &name, e))?;
        if !meta.file_type().is_file() {
            return Err(self.refuse(&name, "it is not a regular file"));
        }
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != self.uid {
            return Err(self.refuse(
                &name,
                &format!("it is owned by uid {}, not by this user", meta.uid()),
            ));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(self.refuse(
                &name,
                &format!(
                    "it holds {} bytes, above the size cap of {MAX_FILE_BYTES} bytes",
                    meta.len()
                ),
            ));
        }
        let mut blob = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut blob)
            .map_err(|e| self.io_error("reading", &name, e))?;
        if blob.len() as u64 > MAX_FILE_BYTES {
            return Err(self.refuse(&name, "it grew above the size cap while being read"));
        }
        let newline = blob.iter().position(|&b| b == b'\n').unwrap_or(blob.len());
        let header = String::from_utf8_lossy(&blob[..newline]).into_owned();
        let expected = format!("{MAGIC} world={} rank={from}", self.world);
        if header != expected {
            return Err(Error::Mismatch(format!(
                "{} says `{header}` but rank {} expected `{expected}`: the processes disagree \
                 on the world size, or the file is not from this world",
                self.dir.join(&name).display(),
                self.rank
            )));
        }
        Ok(Some(blob[(newline + 1).min(blob.len())..].to_vec()))
    }

    fn open_at(&self, name: &str, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<File> {
        let name = c_name(name)?;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                self.handle.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened and owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn link_at(&self, from: &str, to: &str) -> std::io::Result<()> {
        let (from, to) = (c_name(from)?, c_name(to)?);
        let dir = self.handle.as_raw_fd();
        // SAFETY: a valid directory descriptor and NUL-terminated names; no
        // AT_SYMLINK_FOLLOW, so a link is never followed.
        if unsafe { libc::linkat(dir, from.as_ptr(), dir, to.as_ptr(), 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn unlink_at(&self, name: &str) -> std::io::Result<()> {
        let name = c_name(name)?;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.handle.as_raw_fd(), name.as_ptr(), 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn refuse(&self, name: &str, why: &str) -> Error {
        Error::Unsupported(format!(
            "rendezvous: refusing {}: {why}; only this world's processes may write there",
            self.dir.join(name).display()
        ))
    }

    fn io_error(&self, what: &str, name: &str, e: std::io::Error) -> Error {
        io_error(what, &self.dir.join(name), e)
    }
}

impl Rendezvous for FileRendezvous {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn exchange(&mut self, round: &str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        check_round_name(round)?;
        self.publish(round, mine)?;
        let mut blobs: Vec<Option<Vec<u8>>> = vec![None; self.world];
        blobs[self.rank] = Some(mine.to_vec());
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        loop {
            for (from, slot) in blobs.iter_mut().enumerate() {
                if slot.is_none() {
                    *slot = self.read(round, from)?;
                }
            }
            let missing: Vec<usize> = (0..self.world).filter(|&r| blobs[r].is_none()).collect();
            if missing.is_empty() {
                return Ok(blobs.into_iter().map(Option::unwrap).collect());
            }
            if start.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    rank: self.rank,
                    peer: Some(missing[0]),
                    during: format!(
                        "the rendezvous `{round}` in {} (rank(s) {missing:?} never arrived)",
                        self.dir.display()
                    ),
                    timeout: self.timeout,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    fn describe(&self) -> String {
        format!("files in {}", self.dir.display())
    }
}

/// This process's effective user id.
fn effective_uid() -> u32 {
    // SAFETY: POSIX, cannot fail.
    unsafe { libc::geteuid() }
}

fn c_name(name: &str) -> std::io::Result<CString> {
    CString::new(name).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))
}

/// Creates `dir` (mode 0700, parents too) unless it exists, opens it without
/// following a symbolic link, and requires the opened directory to be private
/// to `uid` (see [`check_private`]).
fn open_private_dir(dir: &Path, uid: u32) -> Result<OwnedFd> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        // Another rank may have created it first; checked below like any other.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error("creating", dir, e)),
    }
    // For the message only: the open below refuses a link either way, but
    // with O_DIRECTORY Linux reports it as "not a directory".
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(refuse_dir(dir, "it is a symbolic link"));
    }
    let path = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Unsupported(format!("{} holds a NUL byte", dir.display())))?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ELOOP) => refuse_dir(dir, "it is a symbolic link"),
            Some(libc::ENOTDIR) => refuse_dir(dir, "it is not a directory"),
            _ => io_error("opening", dir, e),
        });
    }
    // SAFETY: a descriptor just opened and owned by nobody else.
    let handle = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a stat buffer.
    if unsafe { libc::fstat(handle.as_raw_fd(), &mut stat) } < 0 {
        return Err(io_error("inspecting", dir, std::io::Error::last_os_error()));
    }
    check_private(dir, stat.st_mode, stat.st_uid, uid)?;
    Ok(handle)
}

/// The names in the opened directory `handle`.
fn entry_names(handle: &OwnedFd, dir: &Path) -> Result<Vec<String>> {
    // SAFETY: duplicates a valid descriptor; fdopendir takes the duplicate.
    let dup = unsafe { libc::dup(handle.as_raw_fd()) };
    if dup < 0 {
        return Err(io_error("listing", dir, std::io::Error::last_os_error()));
    }
    // SAFETY: `dup` is a directory descriptor we own; on success the stream owns it.
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        let e = std::io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `dup` is still ours.
        unsafe { libc::close(dup) };
        return Err(io_error("listing", dir, e));
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: a live directory stream.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir returns a NUL-terminated name inside the entry.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: closes the stream (and `dup`) once.
    unsafe { libc::closedir(stream) };
    Ok(names)
}

/// Refuses a rendezvous directory others could read or swap: not a directory,
/// owned by another user, or with any group/other permission.
fn check_private(dir: &Path, mode: libc::mode_t, owner: u32, uid: u32) -> Result<()> {
    if mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(refuse_dir(dir, "it is not a directory"));
    }
    if owner != uid {
        return Err(refuse_dir(
            dir,
            &format!("it is owned by uid {owner}, not by this user (uid {uid})"),
        ));
    }
    let mode = mode & 0o777;
    if mode & 0o077 != 0 {
        return Err(refuse_dir(
            dir,
            &format!(
                "it is accessible to {} (mode {mode:04o})",
                match (mode & 0o070 != 0, mode & 0o007 != 0) {
                    (true, true) => "its group and others",
                    (true, false) => "its group",
                    _ => "others",
                }
            ),
        ));
    }
    Ok(())
}

fn refuse_dir(dir: &Path, why: &str) -> Error {
    Error::Unsupported(format!(
        "rendezvous: refusing {}: {why}. It will hold CUDA IPC handles, which let any process \
         that reads them map this GPU memory; use a fresh directory that only this user can \
         access (mode 0700)",
        dir.display()
    ))
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Unsupported(format!("rendezvous: {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "colltune-rdv-{name}-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn run_world(dir: &Path, world: usize, rounds: usize) -> Vec<Result<Vec<Vec<Vec<u8>>>>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    s.spawn(move || {
                        let mut r = FileRendezvous::new(dir, rank, world, Duration::from_secs(10))?;
                        (0..rounds)
                            .map(|k| {
                                let mine = format!("rank {rank} round {k}").repeat(rank + 1);
                                r.exchange(&format!("round-{k}"), mine.as_bytes())
                            })
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn unsupported(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(Error::Unsupported(what)) => what,
            other => panic!("expected Error::Unsupported, got {other:?}"),
        }
    }

    fn mismatch(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(Error::Mismatch(what)) => what,
            other => panic!("expected Error::Mismatch, got {other:?}"),
        }
    }

    #[test]
    fn every_rank_gets_every_blob_in_rank_order() {
        let dir = fresh_dir("ok");
        let results = run_world(&dir, 3, 4);
        for result in results {
            let rounds = result.unwrap();
            for (k, blobs) in rounds.iter().enumerate() {
                for (rank, blob) in blobs.iter().enumerate() {
                    let expected = format!("rank {rank} round {k}").repeat(rank + 1);
                    assert_eq!(blob, expected.as_bytes());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rank_that_never_comes_is_a_timeout_naming_it() {
        let dir = fresh_dir("timeout");
        let mut r = FileRendezvous::new(&dir, 0, 3, Duration::from_millis(50)).unwrap();
        let started = Instant::now();
        match r.exchange("hello", b"x") {
            Err(Error::Timeout {
                rank, peer, during, ..
            }) => {
                assert_eq!((rank, peer), (0, Some(1)));
                assert!(during.contains("[1, 2] never arrived"), "{during}");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_different_world_size_is_a_mismatch() {
        let dir = fresh_dir("world");
        let mut a = FileRendezvous::new(&dir, 0, 2, Duration::from_secs(5)).unwrap();
        let b = FileRendezvous::new(&dir, 1, 3, Duration::from_secs(5)).unwrap();
        b.publish("hello", b"b").unwrap();
        let what = mismatch(a.exchange("hello", b"a"));
        assert!(what.contains("world=3"), "{what}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reused_directory_is_refused() {
        let dir = fresh_dir("reused");
        let mut first = FileRendezvous::new(&dir, 1, 2, Duration::from_millis(10)).unwrap();
        // Rank 0 never comes; rank 1's file stays behind.
        match first.exchange("hello", b"x") {
            Err(Error::Timeout {
                rank: 1,
                peer: Some(0),
                ..
            }) => {}
            other => panic!("expected a timeout waiting for rank 0, got {other:?}"),
        }
        let what = mismatch(FileRendezvous::new(&dir, 1, 2, Duration::from_secs(1)));
        assert!(what.contains("fresh directory"), "{what}");
        // Other ranks are not affected by rank 1's files.
        assert!(FileRendezvous::new(&dir, 0, 2, Duration::from_secs(1)).is_ok());
        let what = mismatch(FileRendezvous::new(&dir, 2, 2, Duration::from_secs(1)));
        assert!(what.contains("not below the world size"), "{what}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn two_processes_claiming_one_rank_at_once_cannot_both_publish() {
        // Both pass the construction check (no file yet), then race to
        // publish: exactly one succeeds, the other is told why.
        for attempt in 0..20 {
            let dir = fresh_dir(&format!("race{attempt}"));
            let a = FileRendezvous::new(&dir, 1, 2, Duration::from_secs(1)).unwrap();
            let b = FileRendezvous::new(&dir, 1, 2, Duration::from_secs(1)).unwrap();
            let go = std::sync::Barrier::new(2);
            let (ra, rb) = std::thread::scope(|s| {
                let ta = s.spawn(|| {
                    go.wait();
                    a.publish("hello", b"first")
                });
                let tb = s.spawn(|| {
                    go.wait();
                    b.publish("hello", b"second")
                });
                (ta.join().unwrap(), tb.join().unwrap())
            });
            assert!(ra.is_ok() != rb.is_ok(), "{ra:?} / {rb:?}");
            let what = mismatch(if ra.is_err() { ra } else { rb });
            assert!(what.contains("another process published rank 1"), "{what}");
            // The file that stands is whole, and is one of the two.
            let blob = a.read("hello", 1).unwrap().unwrap();
            assert!(blob == b"first" || blob == b"second", "{blob:?}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn the_directory_and_its_files_are_private() {
        let dir = fresh_dir("private");
        let mut r = FileRendezvous::new(&dir, 0, 1, Duration::from_secs(1)).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        r.exchange("hello", b"handles").unwrap();
        let file = dir.join("hello.rank0");
        assert_eq!(mode_of(&file), 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("hello.rank0")]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let target = fresh_dir("link-target");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = fresh_dir("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let what = unsupported(FileRendezvous::new(&link, 0, 2, Duration::from_secs(1)));
        assert!(what.contains("symbolic link"), "{what}");
        // Nothing was written through the link.
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&target);
    }

    #[test]
    fn a_directory_swapped_in_after_the_check_is_never_used() {
        // Rank 0 opened and checked the directory; then someone renames it
        // away and puts a world-writable directory with a forged rank-1 file
        // at the same path. Rank 0 keeps using the directory it checked: it
        // never reads the forged file, and its own file lands in the original.
        let dir = fresh_dir("swap");
        let mut r = FileRendezvous::new(&dir, 0, 2, Duration::from_millis(100)).unwrap();
        let moved = fresh_dir("swap-moved");
        std::fs::rename(&dir, &moved).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(
            dir.join("hello.rank1"),
            format!("{MAGIC} world=2 rank=1\nforged"),
        )
        .unwrap();
        match r.exchange("hello", b"mine") {
            Err(Error::Timeout { peer: Some(1), .. }) => {}
            other => panic!("expected a timeout waiting for rank 1, got {other:?}"),
        }
        assert!(moved.join("hello.rank0").exists());
        assert!(!dir.join("hello.rank0").exists());
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&moved);
    }

    #[test]
    fn a_fifo_planted_as_a_peers_file_is_refused_at_once() {
        let dir = fresh_dir("fifo");
        let mut r = FileRendezvous::new(&dir, 0, 2, Duration::from_millis(200)).unwrap();
        let fifo = CString::new(dir.join("hello.rank1").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        let what = unsupported(r.exchange("hello", b"mine"));
        assert!(what.contains("not a regular file"), "{what}");
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symbolic_link_planted_as_a_peers_file_is_refused() {
        let dir = fresh_dir("peer-link");
        let mut r = FileRendezvous::new(&dir, 0, 2, Duration::from_millis(200)).unwrap();
        let elsewhere = fresh_dir("peer-link-target");
        std::fs::write(&elsewhere, format!("{MAGIC} world=2 rank=1\nx")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("hello.rank1")).unwrap();
        let what = unsupported(r.exchange("hello", b"mine"));
        assert!(what.contains("symbolic link"), "{what}");
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&elsewhere);
    }

    #[test]
    fn a_peers_file_above_the_size_cap_is_refused() {
        let dir = fresh_dir("big");
        let mut r = FileRendezvous::new(&dir, 0, 2, Duration::from_millis(200)).unwrap();
        let mut big = format!("{MAGIC} world=2 rank=1\n").into_bytes();
        big.resize(MAX_FILE_BYTES as usize + 1, b'x');
        std::fs::write(dir.join("hello.rank1"), &big).unwrap();
        let what = unsupported(r.exchange("hello", b"mine"));
        assert!(what.contains("size cap"), "{what}");
        // And this rank will not publish one.
        let what = unsupported(r.exchange("next", &big));
        assert!(what.contains("cap"), "{what}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        // Creating a directory owned by someone else needs root; the check is
        // the same with this user's directory and another uid.
        let dir = fresh_dir("owner");
        open_private_dir(&dir, effective_uid()).unwrap();
        let other = effective_uid().wrapping_add(1);
        let what = unsupported(open_private_dir(&dir, other));
        assert!(
            what.contains("owned by uid") && what.contains("not by this user"),
            "{what}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_group_or_world_accessible_directory_is_refused() {
        for (mode, who) in [
            (0o750, "its group"),
            (0o705, "others"),
            (0o777, "its group and others"),
        ] {
            let dir = fresh_dir(&format!("mode{mode:o}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let what = unsupported(FileRendezvous::new(&dir, 0, 2, Duration::from_secs(1)));
            assert!(
                what.contains(&format!("accessible to {who} (mode {mode:04o})")),
                "{mode:o}: {what}"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_refused() {
        let path = fresh_dir("file");
        std::fs::write(&path, b"x").unwrap();
        let what = unsupported(FileRendezvous::new(&path, 0, 2, Duration::from_secs(1)));
        assert!(what.contains("not a directory"), "{what}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn round_names_are_checked() {
        let dir = fresh_dir("names");
        let mut r = FileRendezvous::new(&dir, 0, 1, Duration::from_secs(1)).unwrap();
        assert!(mismatch(r.exchange("../escape", b"")).contains("round"));
        assert!(mismatch(r.exchange("", b"")).contains("round"));
        assert_eq!(r.exchange("ok_1", b"me").unwrap(), vec![b"me".to_vec()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
