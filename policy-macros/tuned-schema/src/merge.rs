//! Merging newly fitted tables into an existing file for the same platform.
//!
//! A sweep measures the world sizes its machine can form; the file it lands in
//! may hold tables it could not measure (published ones, or an earlier sweep on
//! a bigger machine). Replacing the whole file would drop those, and their
//! queries would fall to NCCL. So a merge replaces exactly the tables whose
//! key (collective, world size, dtype, mode) the update has, and keeps the rest.
//!
//! The rules, each chosen so a reviewer's diff shows only what was measured:
//!
//! - **Tables**: a table of the update replaces the existing table with its key
//!   in place; keys the file did not have are appended in the update's order;
//!   every other table is kept byte for byte.
//! - **Sources**: a kept table that names no source of its own still takes the
//!   file's `[platform]` source, so `[platform]` (source, citation, provenance,
//!   gpu) stays as it was and each new table names its own source. Only when no
//!   kept table relies on `[platform]` does the update's `[platform]` replace it
//!   (a full re-sweep gives the same file as a fresh one). A new table whose
//!   source equals the file's default is written without one.
//! - **Capacities**: an entry the update declares replaces the file's entry for
//!   the same (collective, algorithm): the new bands were fitted under the
//!   buffers the sweep actually had, and `kernels` sizes its buffers from the
//!   file. Entries the update does not declare are kept. Every change is
//!   reported; kept tables are then validated against the new capacities with
//!   the rest of the file, so a kept band a smaller buffer cannot take is an error.
//! - **Assertions**: every `[[assert]]` of the file is kept, and the update's
//!   are added unless the file has them already.

use core::fmt;

use crate::document::{CapacityEntry, Measurement};
use crate::document::{Document, Platform, Source, Table, TableSource};
use crate::vocab::{Algo, Capacity, Collective, TableKey};

/// The merged document and what the merge did, for the caller to report.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Merged {
    /// The merged file's content, not validated here: kept bands may not fit
    /// the update's capacities, so validate it before writing it.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub document: Document,
    /// Keys of existing tables the update replaced.
    pub replaced: Vec<TableKey>,
    /// Keys the update added.
    pub added: Vec<TableKey>,
    /// Keys of existing tables kept unchanged.
    pub kept: Vec<TableKey>,
    /// Every capacity the update declares differently from the file, in the
    /// update's order.
    pub capacity_changes: Vec<CapacityChange>,
    /// Whether `[platform]` is the update's (no kept table relied on the old one).
    pub platform_replaced: bool,
}

/// A capacity the update declares differently from the file (or that the file lacked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CapacityChange {
    /// The collective whose capacity changed.
    pub collective: Collective,
    /// The custom algorithm whose capacity changed.
    pub algo: Algo,
    /// `None`: the file declared none.
    pub from: Option<Capacity>,
    /// The update's capacity, which the merged file declares.
    pub to: Capacity,
}

/// Why two documents cannot be merged (different platforms, or a new table
/// whose source cannot be named), as a sentence for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeError(pub String);

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MergeError {}

/// `existing` with `update`'s tables in place of its own (see the module docs).
pub fn merge(existing: &Document, update: &Document) -> Result<Merged, MergeError> {
    let (old, new) = (&existing.platform, &update.platform);
    if (old.arch, old.link) != (new.arch, new.link) {
        return Err(MergeError(format!(
            "cannot merge tables for {} {} into a file for {} {}",
            new.arch,
            new.link.name(),
            old.arch,
            old.link.name()
        )));
    }
    let updated = |key: TableKey| update.tables.iter().find(|t| t.key == key);
    let relies_on_platform = existing
        .tables
        .iter()
        .any(|t| t.source.is_none() && updated(t.key).is_none());
    let platform = if relies_on_platform { old } else { new };
    let resolve = |table: &Table| with_own_source(table, new, platform);

    let (mut tables, mut replaced, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    for table in &existing.tables {
        match updated(table.key) {
            Some(fresh) => {
                tables.push(resolve(fresh)?);
                replaced.push(table.key);
            }
            None => {
                tables.push(table.clone());
                kept.push(table.key);
            }
        }
    }
    let mut added = Vec::new();
    for fresh in &update.tables {
        if !existing.tables.iter().any(|t| t.key == fresh.key) {
            tables.push(resolve(fresh)?);
            added.push(fresh.key);
        }
    }
    let (capacities, capacity_changes) = merge_capacities(&existing.capacities, &update.capacities);
    let mut asserts = existing.asserts.clone();
    for assertion in &update.asserts {
        if !asserts.contains(assertion) {
            asserts.push(assertion.clone());
        }
    }
    Ok(Merged {
        document: Document {
            platform: platform.clone(),
            capacities,
            tables,
            asserts,
        },
        replaced,
        added,
        kept,
        capacity_changes,
        platform_replaced: !relies_on_platform,
    })
}

/// `table` (from a document whose `[platform]` is `from`) as it must be
/// written under `into`: with its own source unless `into`'s default says the same.
fn with_own_source(table: &Table, from: &Platform, into: &Platform) -> Result<Table, MergeError> {
    if table.source.is_some() {
        return Ok(table.clone());
    }
    let own = default_source(from).ok_or_else(|| {
        MergeError(format!(
            "cannot name the source of the new {} table: its file's [platform] is {} but does not say {}",
            table.key,
            from.source.name(),
            match from.source {
                Source::Measured | Source::Synthetic => "its evidence, date and tuner_version",
                Source::Published => "its citation",
            }
        ))
    })?;
    let source = (default_source(into).as_ref() != Some(&own)).then_some(own);
    Ok(Table {
        source,
        ..table.clone()
    })
}

/// `[platform]`'s default as a table's own source, if it says enough to be one.
pub fn default_source(platform: &Platform) -> Option<TableSource> {
    let origin = platform.default_origin();
    match platform.source {
        Source::Published => Some(TableSource::Published {
            citation: origin.citation?.to_string(),
        }),
        source => TableSource::with_measurement(
            source,
            Measurement {
                evidence: origin.evidence?.to_string(),
                date: origin.date?.to_string(),
                tuner_version: origin.tuner_version?.to_string(),
            },
        ),
    }
}

/// The file's entries with the update's in their place (or appended), and the changes.
fn merge_capacities(
    existing: &[CapacityEntry],
    update: &[CapacityEntry],
) -> (Vec<CapacityEntry>, Vec<CapacityChange>) {
    let mut merged = existing.to_vec();
    let mut changes = Vec::new();
    for entry in update {
        let same =
            |c: &&mut CapacityEntry| c.collective == entry.collective && c.algo == entry.algo;
        let from = match merged.iter_mut().find(same) {
            Some(old) if old.capacity == entry.capacity => continue,
            Some(old) => Some(std::mem::replace(&mut old.capacity, entry.capacity)),
            None => {
                merged.push(*entry);
                None
            }
        };
        changes.push(CapacityChange {
            collective: entry.collective,
            algo: entry.algo,
            from,
            to: entry.capacity,
        });
    }
    (merged, changes)
}
