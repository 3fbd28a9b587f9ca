//! The validated, typed content of one `tuned/*.toml` file.
//!
//! This is the ONE definition of schema version 1 in code: the tuner builds a
//! [`Document`] and writes it with `write`; the proc-macro parses a file into the same
//! type (with positions for errors) and generates code from it. `tuned/README.md`
//! documents the same thing for people.

use crate::vocab::{Algo, Arch, Capacity, Collective, DType, Link, Mode, TableKey};

/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// One platform file: an (arch, link) pair, its capacities, tables and invariants.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The file's `[platform]`: which GPUs and link it describes, and where its
    /// figures come from.
    pub platform: Platform,
    /// Per custom algorithm: the largest message and the alignment it takes here.
    pub capacities: Vec<CapacityEntry>,
    /// The `[[table]]`s, in file order: at most one per [`TableKey`].
    pub tables: Vec<Table>,
    /// The `[[assert]]`s, in file order.
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
    /// Made by `tuner sweep --synthetic` from the tuner's seeded latency model:
    /// it exercises the pipeline and describes no GPU. Recorded like a
    /// measurement (evidence, date, tuner version), so the tables can be
    /// re-fitted and checked, but never to be taken for one.
    Synthetic,
}

impl Source {
    /// Every source, in declaration order.
    pub const ALL: [Source; 3] = [Source::Measured, Source::Published, Source::Synthetic];

    /// The spelling in TOML files and reports (`measured`).
    pub const fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Published => "published",
            Source::Synthetic => "synthetic",
        }
    }

    /// The source spelled `name` ([`Source::name`]); `None` for any other text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// True for the sources a sweep writes (measured, synthetic): they name
    /// their evidence, date and tuner version; a published one names a citation.
    pub const fn has_evidence(self) -> bool {
        !matches!(self, Source::Published)
    }
}

/// A file's `[platform]`: the (arch, link) pair it answers for, and the source
/// of every table that names none of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Platform {
    /// The architecture the file was made for; it also answers for later minors
    /// of the same major that have no file ([`Arch::answered_by`]).
    pub arch: Arch,
    /// Marketing name as the driver reports it, e.g. "NVIDIA H200".
    pub gpu: String,
    /// How the GPUs the figures describe reach each other.
    pub link: Link,
    /// The source of every table that names none of its own.
    pub source: Source,
    /// Required when `source` is `Published`.
    pub citation: Option<String>,
    /// `[platform.provenance]`: how and when the figures were obtained.
    pub provenance: Provenance,
}

/// How and when the figures were obtained. Every field is optional so that
/// published files can leave out what the source does not say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Provenance {
    /// Version of the tuner that wrote the file.
    pub tuner_version: Option<String>,
    /// ISO date, e.g. "2026-11-29".
    pub date: Option<String>,
    /// NVIDIA driver version, e.g. "580.65.06".
    pub driver: Option<String>,
    /// CUDA version, e.g. "13.0".
    pub cuda: Option<String>,
    /// NCCL version, e.g. "2.28.3".
    pub nccl: Option<String>,
    /// Name of the machine measured.
    pub host: Option<String>,
    /// Timed samples per (size, algorithm) point.
    pub samples: Option<u64>,
    /// Path of the evidence file, relative to this TOML file.
    pub evidence: Option<String>,
}

/// A `[[capacity]]`: the largest message and the alignment a custom algorithm
/// takes for one collective on this platform. Calls outside it decline to NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        from = "crate::named::FlatCapacity",
        into = "crate::named::FlatCapacity"
    )
)]
pub struct CapacityEntry {
    /// The collective the capacity applies to.
    pub collective: Collective,
    /// A custom algorithm implementing `collective` (never [`Algo::Nccl`]).
    pub algo: Algo,
    /// Largest output in bytes, and the alignment every size must have.
    pub capacity: Capacity,
}

/// A `[[table]]`: for one key on this platform, which algorithm runs at which
/// message size.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The queries this table answers (collective, world size, dtype, mode).
    pub key: TableKey,
    /// Where this table's bands come from, when it says so itself; `None`
    /// takes the file's `[platform]` source (see [`Document::origin`]).
    pub source: Option<TableSource>,
    /// Free text: how this row was measured or where it was read.
    pub note: Option<String>,
    /// Strictly increasing inclusive upper bounds; the last band has `max: None`.
    pub bands: Vec<Band>,
}

/// A table's own source. One file may mix them: a sweep on a 2-GPU machine
/// replaces the world-size-2 tables of a published file and keeps the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableSource {
    /// Measured by `tuner sweep`: which evidence, when, by which tuner.
    Measured(Measurement),
    /// Read from a public source, named by `citation` (project and file, PR or figure).
    Published {
        /// Project and file, pull request or figure the bands were read from.
        citation: String,
    },
    /// Made by `tuner sweep --synthetic` (see [`Source::Synthetic`]).
    Synthetic(Measurement),
}

impl TableSource {
    /// Which of the three sources this is, without its details.
    pub fn source(&self) -> Source {
        match self {
            TableSource::Measured(_) => Source::Measured,
            TableSource::Published { .. } => Source::Published,
            TableSource::Synthetic(_) => Source::Synthetic,
        }
    }

    /// A measured or synthetic source with `measurement` (`source` must not
    /// be published, which has a citation instead).
    pub fn with_measurement(source: Source, measurement: Measurement) -> Option<TableSource> {
        match source {
            Source::Measured => Some(TableSource::Measured(measurement)),
            Source::Synthetic => Some(TableSource::Synthetic(measurement)),
            Source::Published => None,
        }
    }
}

/// What a measured table rests on. All three are required: a measured table
/// that cannot be traced to its evidence is not reviewable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measurement {
    /// Path of the evidence file, relative to the TOML file.
    pub evidence: String,
    /// ISO date of the sweep, `YYYY-MM-DD`.
    pub date: String,
    /// Version of the tuner that ran the sweep.
    pub tuner_version: String,
}

/// Where one table's figures come from once the file's default is applied:
/// the table's own source, or else `[platform]`'s `source`, `citation` and
/// provenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin<'a> {
    /// Measured, published or synthetic.
    pub source: Source,
    /// Published: where the figures were read.
    pub citation: Option<&'a str>,
    /// Measured: the evidence file (relative to the TOML), the sweep's date
    /// and the tuner version, where known (a file-level default may omit them).
    pub evidence: Option<&'a str>,
    /// Measured or synthetic: the sweep's ISO date, where known.
    pub date: Option<&'a str>,
    /// Measured or synthetic: the tuner's version, where known.
    pub tuner_version: Option<&'a str>,
    /// True when the table names no source of its own and takes the file's.
    pub inherited: bool,
}

impl Document {
    /// Where `table`'s figures come from: its own source, else the file's.
    pub fn origin<'a>(&'a self, table: &'a Table) -> Origin<'a> {
        match &table.source {
            Some(own @ (TableSource::Measured(m) | TableSource::Synthetic(m))) => Origin {
                source: own.source(),
                citation: None,
                evidence: Some(&m.evidence),
                date: Some(&m.date),
                tuner_version: Some(&m.tuner_version),
                inherited: false,
            },
            Some(TableSource::Published { citation }) => Origin {
                source: Source::Published,
                citation: Some(citation),
                evidence: None,
                date: None,
                tuner_version: None,
                inherited: false,
            },
            None => self.platform.default_origin(),
        }
    }
}

impl Platform {
    /// The origin of a table that names no source of its own.
    pub fn default_origin(&self) -> Origin<'_> {
        let p = &self.provenance;
        let measured = self.source.has_evidence();
        Origin {
            source: self.source,
            citation: self.citation.as_deref().filter(|_| !measured),
            evidence: p.evidence.as_deref().filter(|_| measured),
            date: p.date.as_deref().filter(|_| measured),
            tuner_version: p.tuner_version.as_deref().filter(|_| measured),
            inherited: true,
        }
    }
}

/// One band of a table: messages up to `max` bytes of output (from just
/// above the previous band's `max`) run `algo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Band {
    /// Inclusive upper bound in bytes; `None` for the open last band.
    pub max: Option<u64>,
    /// The algorithm selected for sizes in this band.
    pub algo: Algo,
}

/// A hand-written invariant that every re-tune must keep.
#[derive(Clone, Debug, PartialEq)]
pub struct Assertion {
    /// The query's architecture (the file's own unless the `[[assert]]` names
    /// another).
    pub arch: Arch,
    /// The query's link (the file's own unless the `[[assert]]` names another).
    pub link: Link,
    /// The query's collective.
    pub collective: Collective,
    /// The query's world size.
    pub world_size: u32,
    /// The query's element type.
    pub dtype: DType,
    /// The query's mode.
    pub mode: Mode,
    /// The query's size: bytes of the collective's output.
    pub bytes: u64,
    /// The selection at `bytes` must be one of these.
    pub algo_in: Vec<Algo>,
    /// Why the invariant must hold, for whoever re-tunes the file.
    pub why: String,
}
