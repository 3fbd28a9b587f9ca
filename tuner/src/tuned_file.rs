//! Bands + evidence → a `tuned/*.toml` [`Document`], merged into the file
//! already there, checked exactly as the proc-macro checks it
//! ([`tuned_folder`](crate::tuned_folder)), written in `tuned_schema`'s
//! canonical form beside its evidence, and reported.
//!
//! Nothing here reads a clock: every date and version in the document comes
//! from the evidence, so fitting the same evidence always gives the same bytes.

use std::path::{Component, Path, PathBuf};

use policy::{Arch, Link, TableKey};
use serde::Serialize;
use tuned_schema::merge::{Merged, merge};
use tuned_schema::size::format_size;
use tuned_schema::validate::parse_document;
use tuned_schema::write::to_toml_string;
use tuned_schema::{Assertion, Diagnostic, Document, Platform, Provenance, Source, Table};

use crate::evidence::{Evidence, FailedChecks};
use crate::fit::{FitResult, KeyFit};
use crate::tuned_folder::{check_folder, check_in_folder, folder_of};

/// `sm90-nvlink`: the stem of a platform's TOML and evidence files.
pub fn file_stem(arch: Arch, link: Link) -> String {
    format!("{arch}-{}", link.name())
}

/// `sm90-nvlink.toml`, the name the proc-macro expects in `tuned/`.
pub fn toml_file_name(arch: Arch, link: Link) -> String {
    format!("{}.toml", file_stem(arch, link))
}

/// `sm90-nvlink.evidence.json`, beside the TOML.
pub fn evidence_file_name(arch: Arch, link: Link) -> String {
    format!("{}.evidence.json", file_stem(arch, link))
}

/// The document for `fit`'s bands. `evidence_file` is the evidence's path
/// relative to the TOML (recorded in the provenance); `asserts` are carried
/// over from the file being replaced, since hand-written invariants must
/// survive every re-tune.
pub fn build_document(
    evidence: &Evidence,
    fit: &FitResult,
    evidence_file: Option<&str>,
    asserts: Vec<Assertion>,
) -> Document {
    let platform = &evidence.platform;
    let samples = fit.keys.iter().map(|k| k.min_samples as u64).min();
    Document {
        platform: Platform {
            arch: platform.arch,
            gpu: platform.gpu.clone(),
            link: platform.link,
            source: source_of(evidence),
            citation: None,
            provenance: Provenance {
                tuner_version: Some(platform.tuner_version.clone()),
                date: Some(platform.date.clone()),
                driver: platform.driver.clone(),
                cuda: platform.cuda.clone(),
                nccl: platform.nccl.clone(),
                host: platform.host.clone(),
                samples,
                evidence: evidence_file.map(str::to_string),
            },
        },
        // What the measured collectives' kernels took: a file says what its
        // tables were measured with, not what a collective it has no table
        // for would take.
        capacities: platform
            .capacities
            .iter()
            .filter(|c| evidence.keys.iter().any(|k| k.collective == c.collective))
            .cloned()
            .collect(),
        tables: fit
            .keys
            .iter()
            .map(|key| Table {
                key: key.key,
                // The file's `[platform]` names the measurement; a merge into a
                // file with other sources makes it explicit (`tuned_schema::merge`).
                source: None,
                note: Some(table_note(evidence, key, fit)),
                bands: key.bands.clone(),
            })
            .collect(),
        asserts,
    }
}

/// `synthetic` for the seeded latency model's evidence, else `measured`
/// (a loopback world is measured too; its link says what it is).
pub fn source_of(evidence: &Evidence) -> Source {
    // The name the synthetic backend records (evidence `platform.backend`).
    if evidence.platform.backend == "synthetic" {
        Source::Synthetic
    } else {
        Source::Measured
    }
}

/// How a table was measured, for the reviewer reading the TOML: with the
/// memory budget per rank it was fitted for, if any, and, for a fused key
/// swept at several hidden sizes, what its evidence found at the others.
fn table_note(evidence: &Evidence, key: &KeyFit, fit: &FitResult) -> String {
    let budget = fit.memory_budget.map_or(String::new(), |b| {
        format!(", memory budget {} per rank", format_size(b))
    });
    let hidden = evidence
        .of_key(key.key)
        .and_then(|k| k.hidden.as_ref())
        .map_or(String::new(), |sizes| {
            format!("; {}", crate::hidden::note(sizes))
        });
    format!(
        "measured by tuner v{}: {} sizes, at least {} samples/point, noise margin {}%{budget}{hidden}",
        evidence.platform.tuner_version,
        key.sizes,
        key.min_samples,
        (fit.settings.margin * 1000.0).round() / 10.0
    )
}

/// The file at `path`, if there is one: a fit merges into it (its other
/// tables, its `[[assert]]`s and its capacities must survive a re-tune). A file
/// that is there but does not parse is an error, not a silent loss of its tables.
pub fn existing_document(path: &Path) -> Result<Option<Document>, Vec<Diagnostic>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_document(&path.display().to_string(), &text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(vec![Diagnostic::whole(
            &path.display().to_string(),
            format!("cannot read: {e}"),
        )]),
    }
}

/// What a merge did, in a few lines for the person who will review the diff.
pub fn merge_summary(merged: &Merged, path: &str) -> String {
    use std::fmt::Write as _;
    let doc = &merged.document;
    let mut out = format!(
        "merged into {path}: replaced {} table(s), added {}, kept {}; kept {} [[assert]](s)\n",
        merged.replaced.len(),
        merged.added.len(),
        merged.kept.len(),
        doc.asserts.len()
    );
    if !merged.kept.is_empty() {
        let _ = writeln!(out, "  kept: {}", crate::format::list(&merged.kept));
    }
    if !merged.platform_replaced {
        let _ = writeln!(
            out,
            "  [platform] kept ({}): the kept tables take their source from it; the new ones name their own",
            doc.platform.source.name()
        );
    }
    for change in &merged.capacity_changes {
        let from = change
            .from
            .map_or("none".to_string(), |c| capacity_text(c.max_bytes, c.align));
        let _ = writeln!(
            out,
            "  capacity {} {}: {from} → {} (what the sweep measured with)",
            change.collective.name(),
            change.algo.name(),
            capacity_text(change.to.max_bytes, change.to.align)
        );
    }
    out
}

fn capacity_text(max_bytes: u64, align: u64) -> String {
    format!("{}, align {align}", crate::format::exact_size(max_bytes))
}

/// Tables that describe no GPU platform: `synthetic` (the seeded latency
/// model's, from the backend so named) or `loopback` (every rank on one GPU).
/// `None` for a real sweep.
pub fn test_kind(backend: &str, link: Link) -> Option<&'static str> {
    if backend == "synthetic" {
        Some("synthetic")
    } else if link == Link::Loopback {
        Some("loopback")
    } else {
        None
    }
}

/// What [`write_fitted`] wrote.
pub struct Written {
    /// Where the evidence is (or, with `write_evidence`, was written).
    pub evidence_path: PathBuf,
    /// What the merge did, when there was a file to merge into.
    pub merged: Option<Merged>,
}

/// Why [`write_fitted`] wrote no TOML.
#[derive(Debug)]
pub struct WriteFailure {
    pub error: String,
    /// The evidence, when it was written before the TOML failed.
    pub evidence_written: Option<PathBuf>,
}

impl From<String> for WriteFailure {
    fn from(error: String) -> Self {
        WriteFailure {
            error,
            evidence_written: None,
        }
    }
}

/// Why a fit has no table to write: no key of the evidence at `path` has a
/// usable point.
pub fn no_usable_key(path: &Path, result: &FitResult) -> String {
    format!(
        "{}: no key has a usable point (a verified point with at least {} samples), so there is no table to write",
        path.display(),
        result.settings.min_samples
    )
}

/// Merges the fitted tables into the file at `toml_path` if there is one
/// (replacing only the keys the evidence has: `tuned_schema::merge`), checks
/// the result as the proc-macro would (with the other files in its folder), and
/// only then writes the evidence (when `write_evidence`; `fit` reads it from
/// there already) and the TOML. A document the macro would refuse is never
/// written.
///
/// With `write_evidence`, `evidence_path` is the preferred name: if tables the
/// merge keeps cite that file, the new evidence gets a dated name instead
/// ([`evidence_name`]), so no table ever points at evidence it was not fitted from.
pub fn write_fitted(
    evidence: &Evidence,
    result: &FitResult,
    evidence_path: &Path,
    toml_path: &Path,
    write_evidence: bool,
) -> Result<Written, WriteFailure> {
    if result.keys.is_empty() {
        return Err(no_usable_key(evidence_path, result).into());
    }
    let existing = check_folder(toml_path, evidence.platform.arch, evidence.platform.link)?;
    let evidence_path = if write_evidence {
        let measured: Vec<TableKey> = result.keys.iter().map(|k| k.key).collect();
        evidence_name(
            evidence_path,
            toml_path,
            existing.as_ref(),
            &measured,
            &evidence.platform.date,
        )
    } else {
        evidence_path.to_path_buf()
    };
    let reference = relative_reference(toml_path, &evidence_path);
    let fresh = build_document(evidence, result, Some(&reference), Vec::new());
    let (doc, merged) = match existing {
        None => (fresh, None),
        Some(existing) => {
            let merged =
                merge(&existing, &fresh).map_err(|e| format!("{}: {e}", toml_path.display()))?;
            (merged.document.clone(), Some(merged))
        }
    };
    let text = checked_toml(&doc, toml_path)?;
    let folder = folder_of(toml_path);
    std::fs::create_dir_all(folder)
        .map_err(|e| format!("cannot create folder {}: {e}", folder.display()))?;
    if write_evidence {
        write_text(&evidence_path, &evidence.to_json())?;
    }
    write_text(toml_path, &text).map_err(|error| WriteFailure {
        error,
        evidence_written: write_evidence.then(|| evidence_path.clone()),
    })?;
    Ok(Written {
        evidence_path,
        merged,
    })
}

/// `doc` in canonical form, once it passed every check the proc-macro runs
/// on it as the file at `toml_path` beside the others of its folder: a
/// document the macro would refuse is never written.
fn checked_toml(doc: &Document, toml_path: &Path) -> Result<String, String> {
    check_in_folder(doc, folder_of(toml_path), toml_path).map_err(|problems| {
        format!(
            "the tables would not compile into policy, so {} was not written:{problems}",
            toml_path.display()
        )
    })?;
    Ok(to_toml_string(doc))
}

fn write_text(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The evidence file for a sweep whose tables go into `toml_path`: `preferred`
/// unless a table the merge keeps cites it (it holds that table's evidence),
/// else `<stem>.<date>.evidence.json`, `<stem>.<date>-2.evidence.json`, … —
/// the first name no kept table cites.
pub fn evidence_name(
    preferred: &Path,
    toml_path: &Path,
    existing: Option<&Document>,
    measured: &[TableKey],
    date: &str,
) -> PathBuf {
    let Some(existing) = existing else {
        return preferred.to_path_buf();
    };
    let cited: Vec<&str> = existing
        .tables
        .iter()
        .filter(|t| !measured.contains(&t.key))
        .filter_map(|t| existing.origin(t).evidence)
        .collect();
    let free = |path: &Path| !cited.contains(&relative_reference(toml_path, path).as_str());
    if free(preferred) {
        return preferred.to_path_buf();
    }
    let name = preferred
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".evidence.json").unwrap_or(&name);
    (1u32..)
        .map(|n| {
            let suffix = if n == 1 {
                String::new()
            } else {
                format!("-{n}")
            };
            preferred.with_file_name(format!("{stem}.{date}{suffix}.evidence.json"))
        })
        .find(|path| free(path))
        .expect("only finitely many names are cited")
}

/// The evidence's path relative to the TOML's folder, with `/` separators, as
/// the provenance records it. Both paths are made absolute from the working
/// directory and resolved (through symbolic links where the path exists), so
/// the answer does not depend on where the tuner runs or how the paths were
/// spelled (`x.json`, `./x.json`, `../tuned/x.json`).
pub fn relative_reference(toml_path: &Path, evidence_path: &Path) -> String {
    let from = resolved(folder_of(toml_path));
    let to = resolved(evidence_path);
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// `path` absolute, without `.` or `..`, its longest existing ancestor
/// canonicalized (the rest need not exist yet).
fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut clean = PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other),
        }
    }
    let mut existing = clean.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            return rest.iter().rev().fold(canonical, |p, part| p.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return clean,
        }
    }
}

/// What a fit wrote, as `fit` and `sweep` print it ([`FitReport::render`])
/// and as `fit --json` writes it.
#[derive(Serialize)]
pub struct FitReport<'a> {
    pub evidence: String,
    pub toml: String,
    pub platform: FittedPlatform<'a>,
    #[serde(flatten)]
    pub fit: &'a FitResult,
    pub merge: Option<&'a Merged>,
    pub failed_checks: Vec<FailedChecks>,
}

/// The platform of a [`FitReport`].
#[derive(Serialize)]
pub struct FittedPlatform<'a> {
    pub arch: Arch,
    pub link: Link,
    pub gpu: &'a str,
}

impl<'a> FitReport<'a> {
    pub fn new(
        evidence: &'a Evidence,
        fit: &'a FitResult,
        toml_path: &'a Path,
        written: &'a Written,
    ) -> FitReport<'a> {
        FitReport {
            evidence: written.evidence_path.display().to_string(),
            toml: toml_path.display().to_string(),
            platform: FittedPlatform {
                arch: evidence.platform.arch,
                link: evidence.platform.link,
                gpu: &evidence.platform.gpu,
            },
            fit,
            merge: written.merged.as_ref(),
            failed_checks: evidence.failed_checks(),
        }
    }

    /// The fit's bands and edges per key, what the merge did, and a warning
    /// per algorithm whose checks failed.
    pub fn render(&self) -> String {
        let mut out = self.fit.report();
        if let Some(merged) = self.merge {
            out.push_str(&merge_summary(merged, &self.toml));
        }
        for failed in &self.failed_checks {
            out.push_str(&failed.warning());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_follow_the_platform() {
        assert_eq!(toml_file_name(Arch::SM90, Link::NvLink), "sm90-nvlink.toml");
        assert_eq!(
            evidence_file_name(Arch::from_compute_capability(10, 3), Link::Loopback),
            "sm103-loopback.evidence.json"
        );
    }

    #[test]
    fn evidence_is_named_relative_to_the_toml() {
        assert_eq!(
            relative_reference(
                Path::new("/a/tuned/x.toml"),
                Path::new("/a/tuned/x.evidence.json")
            ),
            "x.evidence.json"
        );
        assert_eq!(
            relative_reference(
                Path::new("/a/tuned/x.toml"),
                Path::new("/a/runs/x.evidence.json")
            ),
            "../runs/x.evidence.json"
        );
        // Bare names and dotted paths are relative to the working directory.
        assert_eq!(
            relative_reference(Path::new("x.toml"), Path::new("x.evidence.json")),
            "x.evidence.json"
        );
        assert_eq!(
            relative_reference(
                Path::new("./out/x.toml"),
                Path::new("out/../out/./x.evidence.json")
            ),
            "x.evidence.json"
        );
        assert_eq!(
            relative_reference(Path::new("out/x.toml"), Path::new("x.evidence.json")),
            "../x.evidence.json"
        );
    }
}
