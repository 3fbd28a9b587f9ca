//! A rendezvous through a directory that every process of the world can see
//! (one host). Each rank writes its blob for a round to a temporary file and
//! renames it to `<round>.rank<r>` (a rename is atomic, so a reader sees the
//! whole blob or nothing), then polls for everyone else's file until a bound.
//!
//! The directory must be fresh for each world (a launcher creates one, e.g.
//! under `$TMPDIR`, and removes it afterwards): files of an earlier world would
//! be read as this one's. A rank that finds a file of its own rank already there
//! refuses to start, which catches a reused directory and two processes
//! claiming one rank.
//!
//! The directory is private. The blobs carry CUDA IPC handles, and any process
//! that reads a handle can map that GPU memory: read the engine's activations
//! or corrupt them. So the directory is created with mode 0700 and every file
//! with 0600, and an existing directory is refused when it is a symbolic link
//! (someone else could point it anywhere), is not owned by this user, or grants
//! any access to group or others.

use std::fs::{DirBuilder, Metadata, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Rendezvous, check_round_name};
use crate::error::{Error, Result};

const MAGIC: &str = "colltune-rendezvous 1";

/// See the module documentation.
#[derive(Debug)]
pub struct FileRendezvous {
    dir: PathBuf,
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
        make_private_dir(&dir, effective_uid())?;
        let suffix = format!(".rank{rank}");
        let entries = std::fs::read_dir(&dir).map_err(|e| io_error("listing", &dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
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
            rank,
            world: world_size,
            timeout,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, round: &str, rank: usize) -> PathBuf {
        self.dir.join(format!("{round}.rank{rank}"))
    }

    fn publish(&self, round: &str, mine: &[u8]) -> Result<()> {
        let tmp = self.dir.join(format!(
            ".{round}.rank{}.{}.tmp",
            self.rank,
            std::process::id()
        ));
        let mut blob = format!("{MAGIC} world={} rank={}\n", self.world, self.rank).into_bytes();
        blob.extend_from_slice(mine);
        // 0600 from the start (not chmod after writing: the handles would be
        // readable in between), and never through a file someone planted:
        // create_new refuses an existing path, a symbolic link included.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_error("creating", &tmp, e))?;
        file.write_all(&blob)
            .map_err(|e| io_error("writing", &tmp, e))?;
        drop(file);
        let path = self.path(round, self.rank);
        std::fs::rename(&tmp, &path).map_err(|e| io_error("renaming into", &path, e))
    }

    /// Rank `from`'s blob, `None` while it is not there yet.
    fn read(&self, round: &str, from: usize) -> Result<Option<Vec<u8>>> {
        let path = self.path(round, from);
        let blob = match std::fs::read(&path) {
            Ok(blob) => blob,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("reading", &path, e)),
        };
        let newline = blob.iter().position(|&b| b == b'\n').unwrap_or(blob.len());
        let header = String::from_utf8_lossy(&blob[..newline]).into_owned();
        let expected = format!("{MAGIC} world={} rank={from}", self.world);
        if header != expected {
            return Err(Error::Mismatch(format!(
                "{} says `{header}` but rank {} expected `{expected}`: the processes disagree \
                 on the world size, or the file is not from this world",
                path.display(),
                self.rank
            )));
        }
        Ok(Some(blob[(newline + 1).min(blob.len())..].to_vec()))
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
    unsafe extern "C" {
        // POSIX; libc is always linked on Unix. Cannot fail.
        safe fn geteuid() -> u32;
    }
    geteuid()
}

/// Creates `dir` (mode 0700) unless it exists, then requires it to be private
/// to `uid` (see [`check_private`]). Parents that do not exist are created with
/// mode 0700 too.
fn make_private_dir(dir: &Path, uid: u32) -> Result<()> {
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        // Another rank may have created it first; checked below like any other.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error("creating", dir, e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| io_error("inspecting", dir, e))?;
    check_private(dir, &meta, uid)
}

/// Refuses a rendezvous directory others could read or swap: a symbolic link,
/// not a directory, owned by another user, or with any group/other permission.
fn check_private(dir: &Path, meta: &Metadata, uid: u32) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::Unsupported(format!(
            "rendezvous: refusing {}: {why}. It will hold CUDA IPC handles, which let any process \
             that reads them map this GPU memory; use a fresh directory that only this user can \
             access (mode 0700)",
            dir.display()
        )))
    };
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return refuse("it is not a directory".into());
    }
    if meta.uid() != uid {
        return refuse(format!(
            "it is owned by uid {}, not by this user (uid {uid})",
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return refuse(format!(
            "it is accessible to {} (mode {mode:04o})",
            match (mode & 0o070 != 0, mode & 0o007 != 0) {
                (true, true) => "its group and others",
                (true, false) => "its group",
                _ => "others",
            }
        ));
    }
    Ok(())
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Unsupported(format!("rendezvous: {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut b = FileRendezvous::new(&dir, 1, 3, Duration::from_secs(5)).unwrap();
        b.publish("hello", b"b").unwrap();
        match a.exchange("hello", b"a") {
            Err(Error::Mismatch(m)) => assert!(m.contains("world=3"), "{m}"),
            other => panic!("expected a mismatch, got {other:?}"),
        }
        let _ = b.exchange("never", b"");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reused_directory_is_refused() {
        let dir = fresh_dir("reused");
        let mut first = FileRendezvous::new(&dir, 1, 2, Duration::from_millis(10)).unwrap();
        let _ = first.exchange("hello", b"x");
        let err = FileRendezvous::new(&dir, 1, 2, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("fresh directory"), "{err}");
        // Other ranks are not affected by rank 1's files.
        assert!(FileRendezvous::new(&dir, 0, 2, Duration::from_secs(1)).is_ok());
        assert!(FileRendezvous::new(&dir, 2, 2, Duration::from_secs(1)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
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
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let target = fresh_dir("link-target");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = fresh_dir("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = FileRendezvous::new(&link, 0, 2, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // Nothing was written through the link.
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&target);
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        // Creating a directory owned by someone else needs root; the check is
        // the same with this user's directory and another uid.
        let dir = fresh_dir("owner");
        make_private_dir(&dir, effective_uid()).unwrap();
        let other = effective_uid().wrapping_add(1);
        let err = make_private_dir(&dir, other).unwrap_err().to_string();
        assert!(
            err.contains("owned by uid") && err.contains("not by this user"),
            "{err}"
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
            let err = FileRendezvous::new(&dir, 0, 2, Duration::from_secs(1))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("accessible to {who} (mode {mode:04o})")),
                "{mode:o}: {err}"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_refused() {
        let path = fresh_dir("file");
        std::fs::write(&path, b"x").unwrap();
        let err = FileRendezvous::new(&path, 0, 2, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn round_names_are_checked() {
        let dir = fresh_dir("names");
        let mut r = FileRendezvous::new(&dir, 0, 1, Duration::from_secs(1)).unwrap();
        assert!(r.exchange("../escape", b"").is_err());
        assert!(r.exchange("", b"").is_err());
        assert_eq!(r.exchange("ok_1", b"me").unwrap(), vec![b"me".to_vec()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
