//! The tables as plain data (`PLATFORMS`), for `tuner show`, logs and people.
//! Selection never reads these: the generated `select` indexes constant arrays
//! that `include_tuned!` lays out from the same files, and `table_arch` is a
//! generated `match` over minor ranges.

use crate::{Arch, Band, CapacityEntry, Link, TableKey};

/// One `tuned/*.toml` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlatformInfo {
    /// The architecture the file was made for (it also answers later minors
    /// of the same major that have no file: [`Arch::answered_by`]).
    pub arch: Arch,
    /// How the GPUs the file describes reach each other.
    pub link: Link,
    /// Marketing name, e.g. "NVIDIA H200".
    pub gpu: &'static str,
    /// `measured`, `published` or `synthetic`: the source of every table that
    /// names none of its own.
    pub source: &'static str,
    /// Published: where the file's figures were read (project, file or PR).
    pub citation: Option<&'static str>,
    /// The file, as named to the macro (e.g. `../tuned/sm90-nvlink.toml`).
    pub file: &'static str,
    /// The file's `[[capacity]]` entries.
    pub capacities: &'static [CapacityEntry],
    /// The file's `[[table]]`s, in file order.
    pub tables: &'static [TableInfo],
}

/// One `[[table]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TableInfo {
    /// `(collective, world size, dtype, mode)`: which queries this table answers.
    pub key: TableKey,
    /// `measured`, `published` or `synthetic`: where this table's figures come from — its
    /// own `source`, or the file's when it names none (`source_inherited`).
    pub source: &'static str,
    /// True when the table names no source of its own and takes the file's.
    pub source_inherited: bool,
    /// Published: where the figures were read.
    pub citation: Option<&'static str>,
    /// Measured or synthetic: the evidence file (relative to the TOML), where
    /// the file says it.
    pub evidence: Option<&'static str>,
    /// Measured or synthetic: the sweep's ISO date, where the file says it.
    pub date: Option<&'static str>,
    /// Measured or synthetic: the tuner's version, where the file says it.
    pub tuner_version: Option<&'static str>,
    /// How the row was measured or where it was read.
    pub note: Option<&'static str>,
    /// Sizes up to each band's `max` bytes (inclusive) after the previous
    /// band's; the last band is open (`max: None`).
    pub bands: &'static [Band],
}

impl PlatformInfo {
    /// The table for `key` in this file, if any (for a query `q`: `q.key()`).
    pub fn table(&self, key: TableKey) -> Option<&'static TableInfo> {
        self.tables.iter().find(|t| t.key == key)
    }
}
