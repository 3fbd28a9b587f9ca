//! The tables as plain data (`PLATFORMS`), for `tuner show`, logs and people.
//! Selection never reads these: the generated `select` indexes constant arrays
//! that `include_tuned!` lays out from the same files, and `table_arch` is a
//! generated `match` over minor ranges.

use crate::{Arch, Band, CapacityEntry, Link, TableKey};

/// One `tuned/*.toml` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlatformInfo {
    pub arch: Arch,
    pub link: Link,
    /// Marketing name, e.g. "NVIDIA H200".
    pub gpu: &'static str,
    /// `measured` or `published`.
    pub source: &'static str,
    pub citation: Option<&'static str>,
    /// The file, as named to the macro (e.g. `../tuned/sm90-nvlink.toml`).
    pub file: &'static str,
    /// The file's `[[capacity]]` entries.
    pub capacities: &'static [CapacityEntry],
    pub tables: &'static [TableInfo],
}

/// One `[[table]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TableInfo {
    /// `(collective, world size, dtype, mode)`: which queries this table answers.
    pub key: TableKey,
    /// `measured` or `published`: where this table's figures come from — its
    /// own `source`, or the file's when it names none (`source_inherited`).
    pub source: &'static str,
    /// True when the table names no source of its own and takes the file's.
    pub source_inherited: bool,
    /// Published: where the figures were read.
    pub citation: Option<&'static str>,
    /// Measured: the evidence file (relative to the TOML), the sweep's ISO date
    /// and the tuner version, where the file says them.
    pub evidence: Option<&'static str>,
    pub date: Option<&'static str>,
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
