//! The rules a set of parsed files must follow, each broken rule reported at the
//! line:col where it is broken.
//!
//! Per file ([`check_file`]; [`parse_document`] parses and checks one file): a published file has a citation; capacities are for
//! custom algorithms that implement their collective, with `max` a positive multiple
//! of `align`; tables have `2 ≤ world_size ≤ 1024`, algorithms that implement the
//! collective, positive strictly increasing band maxima ending with exactly one open
//! band, and every custom band within its declared capacity and alignment; no two
//! tables (or capacities) share a key.
//!
//! Across files ([`validate`]): one file per platform; every `[[assert]]` names a
//! platform some file defines, and holds.

use std::collections::BTreeMap;

use crate::diagnostic::{Diagnostic, Pos};
use crate::document::{Assertion, Band, Document, Source, Table};
use crate::interpret;
use crate::parse::{ParsedFile, TablePos, parse_file};
use crate::size::format_size;
use crate::vocab::{Algo, Arch, Capacity, Collective, Link, Query};
use crate::write::to_toml_string;

/// The largest world size a table or assertion may name. Generated code indexes
/// an array by world size, so an absurd value (a typo) would bloat the build.
pub const MAX_WORLD_SIZE: u32 = 1024;

/// Checks a set of files together: each file on its own, then the rules across files.
pub fn validate(files: &[ParsedFile]) -> Result<(), Vec<Diagnostic>> {
    let mut diagnostics: Vec<Diagnostic> = files.iter().flat_map(check_file).collect();
    diagnostics.extend(check_one_file_per_platform(files));
    // Assertions run the interpreter, which needs tables that passed the checks above.
    if diagnostics.is_empty() {
        diagnostics.extend(check_assertions(files));
    }
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(diagnostics)
    }
}

/// Validates documents that have no source file (e.g. built by the tuner before it
/// writes them): each is written canonically and checked as if it were the file
/// `<arch>-<link>.toml`, so positions refer to that canonical text.
pub fn validate_documents(docs: &[Document]) -> Result<(), Vec<Diagnostic>> {
    let mut files = Vec::new();
    let mut diagnostics = Vec::new();
    for doc in docs {
        match parse_file(&doc.file_name(), &to_toml_string(doc)) {
            Ok(file) => files.push(file),
            Err(errors) => diagnostics.extend(errors),
        }
    }
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    validate(&files)
}

/// Parses and validates one file on its own (everything but the checks that need
/// the other files: duplicate platforms and `[[assert]]`s naming other platforms).
pub fn parse_document(path: &str, text: &str) -> Result<Document, Vec<Diagnostic>> {
    let file = parse_file(path, text)?;
    let diagnostics = check_file(&file);
    if diagnostics.is_empty() {
        Ok(file.document)
    } else {
        Err(diagnostics)
    }
}

/// The rules that concern one file alone.
pub fn check_file(file: &ParsedFile) -> Vec<Diagnostic> {
    let mut out = Report {
        file: &file.path,
        diagnostics: Vec::new(),
    };
    check_platform(&mut out, file);
    check_capacities(&mut out, file);
    check_tables(&mut out, file);
    for (assertion, pos) in file.document.asserts.iter().zip(&file.positions.asserts) {
        check_assertion_shape(&mut out, assertion, pos);
    }
    out.diagnostics.sort();
    out.diagnostics
}

struct Report<'f> {
    file: &'f str,
    diagnostics: Vec<Diagnostic>,
}

impl Report<'_> {
    fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.diagnostics
            .push(Diagnostic::at(self.file, pos, message));
    }
}

fn location(file: &str, pos: Pos) -> String {
    format!("{file}:{pos}")
}

fn check_platform(out: &mut Report<'_>, file: &ParsedFile) {
    let platform = &file.document.platform;
    let has_citation = platform
        .citation
        .as_deref()
        .is_some_and(|c| !c.trim().is_empty());
    if platform.source == Source::Published && !has_citation {
        out.error(
            file.positions.platform,
            "source = \"published\" requires a non-empty `citation` naming where the figures come from",
        );
    }
}

fn check_capacities(out: &mut Report<'_>, file: &ParsedFile) {
    let mut first_seen: BTreeMap<(Collective, Algo), Pos> = BTreeMap::new();
    for (entry, pos) in file
        .document
        .capacities
        .iter()
        .zip(&file.positions.capacities)
    {
        let (collective, algo, cap) = (entry.collective, entry.algo, entry.capacity);
        if !algo.is_custom() {
            out.error(
                pos.algo,
                format!(
                    "[[capacity]] for {}: it takes any size; capacities are for the custom algorithms",
                    algo.name()
                ),
            );
        } else if !algo.implements(collective) {
            out.error(pos.algo, does_not_implement(algo, collective));
        }
        if cap.max_bytes == 0 {
            out.error(pos.max, "capacity `max` must be greater than 0");
        } else if cap.max_bytes > Capacity::MAX_BYTES {
            out.error(
                pos.max,
                format!(
                    "capacity `max` {} is above the largest the kernels' buffers are planned \
                     for, {}",
                    format_size(cap.max_bytes),
                    format_size(Capacity::MAX_BYTES)
                ),
            );
        }
        if cap.align == 0 {
            out.error(pos.align, "capacity `align` must be greater than 0");
        } else if cap.max_bytes % cap.align != 0 {
            out.error(
                pos.max,
                format!(
                    "capacity `max` {} is not a multiple of its `align` {}",
                    format_size(cap.max_bytes),
                    cap.align
                ),
            );
        }
        if let Some(first) = first_seen.get(&(collective, algo)) {
            out.error(
                pos.entry,
                format!(
                    "duplicate [[capacity]] for ({}, {}); first declared at {}",
                    collective.name(),
                    algo.name(),
                    location(out.file, *first)
                ),
            );
        } else {
            first_seen.insert((collective, algo), pos.entry);
        }
    }
}

fn check_tables(out: &mut Report<'_>, file: &ParsedFile) {
    let mut first_seen = BTreeMap::new();
    for (table, pos) in file.document.tables.iter().zip(&file.positions.tables) {
        check_world_size(out, table.key.world_size, pos.world_size);
        if let Some(first) = first_seen.get(&table.key) {
            out.error(
                pos.entry,
                format!(
                    "duplicate table for ({}); first defined at {}",
                    describe_key(table),
                    location(out.file, *first)
                ),
            );
        } else {
            first_seen.insert(table.key, pos.entry);
        }
        check_bands(out, file, table, pos);
    }
}

fn check_world_size(out: &mut Report<'_>, world_size: u32, pos: Pos) {
    if world_size < 2 {
        out.error(
            pos,
            format!("world_size must be at least 2, found {world_size}"),
        );
    } else if world_size > MAX_WORLD_SIZE {
        out.error(
            pos,
            format!("world_size must be at most {MAX_WORLD_SIZE}, found {world_size}"),
        );
    }
}

/// `all_reduce, world_size 8, bf16, graph`
fn describe_key(table: &Table) -> String {
    let k = table.key;
    format!(
        "{}, world_size {}, {}, {}",
        k.collective.name(),
        k.world_size,
        k.dtype.name(),
        k.mode.name()
    )
}

fn check_bands(out: &mut Report<'_>, file: &ParsedFile, table: &Table, pos: &TablePos) {
    let collective = table.key.collective;
    let Some(last) = table.bands.len().checked_sub(1) else {
        out.error(
            pos.bands_value,
            format!(
                "`bands` is empty: every size needs an algorithm; end with an open band such as {{ algo = \"{}\" }}",
                collective.fallback().name()
            ),
        );
        return;
    };
    let mut previous_max: Option<u64> = None;
    for (i, (band, band_pos)) in table.bands.iter().zip(&pos.bands).enumerate() {
        let max_pos = band_pos.max.unwrap_or(band_pos.band);
        if !band.algo.implements(collective) {
            out.error(band_pos.algo, does_not_implement(band.algo, collective));
        }
        match band.max {
            None if i != last => out.error(
                band_pos.band,
                "bands overlap: this band has no `max`, so it covers every larger size, but bands follow it; only the last band may be open",
            ),
            Some(0) => out.error(max_pos, "band `max` must be greater than 0"),
            Some(max) if i == last => out.error(
                max_pos,
                format!(
                    "gap: the last band ends at max = {}, so larger sizes have no algorithm; end with an open band such as {{ algo = \"{}\" }}",
                    format_size(max),
                    collective.fallback().name()
                ),
            ),
            _ => {}
        }
        if let (Some(prev), Some(max)) = (previous_max, band.max)
            && max <= prev
        {
            out.error(
                max_pos,
                format!(
                    "bands overlap: max = {} is not greater than the previous band's max = {}; maxima must be strictly increasing",
                    format_size(max),
                    format_size(prev)
                ),
            );
        }
        previous_max = band.max.or(previous_max);
        if band.algo.is_custom() && band.algo.implements(collective) {
            check_band_capacity(out, file, table, band, band_pos.algo, max_pos);
        }
    }
}

/// A custom band must fit the buffers the platform declares for its algorithm.
fn check_band_capacity(
    out: &mut Report<'_>,
    file: &ParsedFile,
    table: &Table,
    band: &Band,
    algo_pos: Pos,
    max_pos: Pos,
) {
    let collective = table.key.collective;
    let algo = band.algo;
    let declared = file
        .document
        .capacities
        .iter()
        .zip(&file.positions.capacities)
        .find(|(c, _)| c.collective == collective && c.algo == algo);
    let Some((entry, entry_pos)) = declared else {
        out.error(
            algo_pos,
            format!(
                "band uses {} for {} but the file has no [[capacity]] with collective = \"{}\", algo = \"{}\"",
                algo.name(),
                collective.name(),
                collective.name(),
                algo.name()
            ),
        );
        return;
    };
    let cap: Capacity = entry.capacity;
    let declared_at = location(out.file, entry_pos.entry);
    let Some(max) = band.max else {
        out.error(
            algo_pos,
            format!(
                "over capacity: the open last band uses {}, which takes at most {} ({} capacity declared at {}); the open band must be {}",
                algo.name(),
                format_size(cap.max_bytes),
                collective.name(),
                declared_at,
                collective.fallback().name()
            ),
        );
        return;
    };
    if max > cap.max_bytes {
        out.error(
            max_pos,
            format!(
                "over capacity: max = {} is larger than the capacity of {} for {}, {} (declared at {})",
                format_size(max),
                algo.name(),
                collective.name(),
                format_size(cap.max_bytes),
                declared_at
            ),
        );
    }
    if cap.align == 0 {
        return; // reported with the capacity itself
    }
    let step = match collective {
        Collective::AllReduce | Collective::AllReduceAddRmsNorm => cap.align,
        Collective::AllGather => cap.align.saturating_mul(u64::from(table.key.world_size)),
    };
    if max % step != 0 {
        let why = match collective {
            Collective::AllReduce | Collective::AllReduceAddRmsNorm => format!(
                "the alignment of {} (declared at {declared_at})",
                algo.name()
            ),
            Collective::AllGather => format!(
                "align {} × world_size {}: each rank's share must be aligned for {} (declared at {declared_at})",
                cap.align,
                table.key.world_size,
                algo.name()
            ),
        };
        out.error(
            max_pos,
            format!(
                "misaligned: max = {} ({max} bytes) is not a multiple of {step}, {why}",
                format_size(max)
            ),
        );
    }
}

fn does_not_implement(algo: Algo, collective: Collective) -> String {
    let valid: Vec<&str> = collective.algos().iter().map(|a| a.name()).collect();
    format!(
        "{} does not implement {}; {} algorithms: {}",
        algo.name(),
        collective.name(),
        collective.name(),
        valid.join(", ")
    )
}

fn check_assertion_shape(out: &mut Report<'_>, a: &Assertion, pos: &crate::parse::AssertPos) {
    check_world_size(out, a.world_size, pos.world_size);
    if a.bytes == 0 {
        out.error(pos.bytes, "`bytes` must be greater than 0");
    }
    if a.algo_in.is_empty() {
        out.error(
            pos.entry,
            "`algo_in` is empty: no selection could satisfy it",
        );
    }
    for (algo, algo_pos) in a.algo_in.iter().zip(&pos.algo_in) {
        if !algo.implements(a.collective) {
            out.error(*algo_pos, does_not_implement(*algo, a.collective));
        }
    }
    if a.why.trim().is_empty() {
        out.error(
            pos.entry,
            "`why` is empty: say why this invariant must hold",
        );
    }
}

fn check_one_file_per_platform(files: &[ParsedFile]) -> Vec<Diagnostic> {
    let mut first_seen: BTreeMap<(Arch, Link), (&str, Pos)> = BTreeMap::new();
    let mut diagnostics = Vec::new();
    for file in files {
        let p = &file.document.platform;
        let here = file.positions.platform;
        match first_seen.get(&(p.arch, p.link)) {
            Some(&(first_file, first_pos)) => diagnostics.push(Diagnostic::at(
                &file.path,
                here,
                format!(
                    "duplicate platform: {} {} is already defined at {}; keep one file per (arch, link)",
                    p.arch,
                    p.link.name(),
                    location(first_file, first_pos)
                ),
            )),
            None => {
                first_seen.insert((p.arch, p.link), (&file.path, here));
            }
        }
    }
    diagnostics
}

fn check_assertions(files: &[ParsedFile]) -> Vec<Diagnostic> {
    let docs: Vec<Document> = files.iter().map(|f| f.document.clone()).collect();
    let mut diagnostics = Vec::new();
    for file in files {
        for (a, pos) in file.document.asserts.iter().zip(&file.positions.asserts) {
            let defined = docs
                .iter()
                .any(|d| d.platform.arch == a.arch && d.platform.link == a.link);
            if !defined {
                diagnostics.push(Diagnostic::at(
                    &file.path,
                    pos.entry,
                    format!(
                        "[[assert]] names platform {} {}, which no file defines",
                        a.arch,
                        a.link.name()
                    ),
                ));
                continue;
            }
            let selected = interpret::select(&docs, assertion_query(a));
            if !a.algo_in.contains(&selected) {
                let expected: Vec<&str> = a.algo_in.iter().map(|x| x.name()).collect();
                diagnostics.push(Diagnostic::at(
                    &file.path,
                    pos.entry,
                    format!(
                        "assertion violated: {} {} on {} {} at world_size {}, {}, {} selects {}, expected one of: {} (why: {})",
                        a.collective.name(),
                        format_size(a.bytes),
                        a.arch,
                        a.link.name(),
                        a.world_size,
                        a.dtype.name(),
                        a.mode.name(),
                        selected.name(),
                        expected.join(", "),
                        a.why
                    ),
                ));
            }
        }
    }
    diagnostics
}

/// The query an assertion is about.
pub fn assertion_query(a: &Assertion) -> Query {
    Query::new(
        a.collective,
        a.arch,
        a.link,
        a.world_size,
        a.dtype,
        a.mode,
        a.bytes,
    )
}
