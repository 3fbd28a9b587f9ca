//! The validated, typed content of one `tuned/*.toml` file.
//!
//! This is the ONE definition of schema version 1 in code: the tuner builds a
//! [`Document`] and writes it with `write`; the proc-macro parses a file into the same
//! type (with positions for errors) and generates code from it. `tuned/README.md`
//! documents the same thing for people.

use crate::vocab::{Algo, Arch, Capacity, Collective, DType, Link, Mode};

/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// One platform file: an (arch, link) pair, its capacities, tables and invariants.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub platform: Platform,
    /// Per custom algorithm: the largest message and the alignment it takes here.
    pub capacities: Vec<CapacityEntry>,
    pub tables: Vec<Table>,
    pub asserts: Vec<Assertion>,
}

impl Document {
    /// The conventional file name of this platform: `sm90-nvlink.toml`.
    pub fn file_name(&self) -> String {
        format!("{}-{}.toml", self.platform.arch, self.platform.link.name())
    }
}

/// Where a file's figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Measured by `tuner sweep` on this platform; provenance says when and how.
    Measured,
    /// Taken from a published source; `citation` says which.
    Published,
}

impl Source {
    pub const fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Published => "published",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [Source::Measured, Source::Published]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Platform {
    pub arch: Arch,
    /// Marketing name as the driver reports it, e.g. "NVIDIA H200".
    pub gpu: String,
    pub link: Link,
    pub source: Source,
    /// Required when `source` is `Published`.
    pub citation: Option<String>,
    pub provenance: Provenance,
}

/// How and when the figures were obtained. Every field is optional so that
/// published files can leave out what the source does not say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Provenance {
    pub tuner_version: Option<String>,
    /// ISO date, e.g. "2026-11-29".
    pub date: Option<String>,
    pub driver: Option<String>,
    pub cuda: Option<String>,
    pub nccl: Option<String>,
    pub host: Option<String>,
    /// Timed samples per (size, algorithm) point.
    pub samples: Option<u64>,
    /// Path of the evidence file, relative to this TOML file.
    pub evidence: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapacityEntry {
    pub collective: Collective,
    pub algo: Algo,
    pub capacity: Capacity,
}

/// What a table is selected by, within one platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableKey {
    pub collective: Collective,
    pub world_size: u32,
    pub dtype: DType,
    pub mode: Mode,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub key: TableKey,
    /// Free text: how this row was measured or where it was read.
    pub note: Option<String>,
    /// Strictly increasing inclusive upper bounds; the last band has `max: None`.
    pub bands: Vec<Band>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Band {
    /// Inclusive upper bound in bytes; `None` for the open last band.
    pub max: Option<u64>,
    pub algo: Algo,
}

/// A hand-written invariant that every re-tune must keep.
#[derive(Clone, Debug, PartialEq)]
pub struct Assertion {
    pub arch: Arch,
    pub link: Link,
    pub collective: Collective,
    pub world_size: u32,
    pub dtype: DType,
    pub mode: Mode,
    pub bytes: u64,
    /// The selection at `bytes` must be one of these.
    pub algo_in: Vec<Algo>,
    pub why: String,
}
