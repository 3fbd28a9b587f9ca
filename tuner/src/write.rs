//! Bands + evidence → a `tuned/*.toml` [`Document`], checked exactly as the
//! proc-macro checks it, and written in `tuned_schema`'s canonical form.
//!
//! Nothing here reads a clock: every date and version in the document comes
//! from the evidence, so fitting the same evidence always gives the same bytes.

use std::path::{Path, PathBuf};

use tuned_schema::merge::Merged;
use tuned_schema::parse::parse_document;
use tuned_schema::validate::validate_documents;
use tuned_schema::write::to_toml_string;
use tuned_schema::{
    Arch, Assertion, Diagnostic, Document, Link, Platform, Provenance, Source, Table,
};

use crate::evidence::Evidence;
use crate::fit::{FitResult, FitSettings, KeyFit};

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
            source: Source::Measured,
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
        capacities: platform.capacity_entries(),
        tables: fit
            .keys
            .iter()
            .map(|key| Table {
                key: key.key,
                // The file's `[platform]` names the measurement; a merge into a
                // file with other sources makes it explicit (`tuned_schema::merge`).
                source: None,
                note: Some(table_note(key, &fit.settings, &platform.tuner_version)),
                bands: key.bands.clone(),
            })
            .collect(),
        asserts,
    }
}

/// How a table was measured, for the reviewer reading the TOML.
fn table_note(key: &KeyFit, settings: &FitSettings, tuner_version: &str) -> String {
    format!(
        "measured by tuner v{tuner_version}: {} sizes, at least {} samples/point, noise margin {}%, alpha {}",
        key.sizes,
        key.min_samples,
        (settings.margin * 1000.0).round() / 10.0,
        settings.alpha
    )
}

/// The canonical text of `doc`.
pub fn render(doc: &Document) -> String {
    to_toml_string(doc)
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
pub fn merge_summary(merged: &Merged, path: &Path) -> String {
    use std::fmt::Write as _;
    let doc = &merged.document;
    let mut out = format!(
        "merged into {}: replaced {} table(s), added {}, kept {}; kept {} [[assert]](s)\n",
        path.display(),
        merged.replaced.len(),
        merged.added.len(),
        merged.kept.len(),
        doc.asserts.len()
    );
    if !merged.kept.is_empty() {
        let kept: Vec<String> = merged.kept.iter().map(|k| k.to_string()).collect();
        let _ = writeln!(out, "  kept: {}", kept.join(", "));
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

/// Runs every check the proc-macro runs on `doc` as it would sit in `folder`,
/// with the other tuned files there (its assertions may name them). Files in
/// `folder` that are not tuned files (they do not parse) are left out, and so
/// are other files for the same platform — the macro would refuse the pair, so
/// their names come back as a warning for the caller to print.
pub fn check_in_folder(
    doc: &Document,
    folder: &Path,
    replacing: &Path,
) -> Result<Vec<String>, Vec<Diagnostic>> {
    let mut docs = vec![doc.clone()];
    let mut same_platform = Vec::new();
    for (path, sibling) in sibling_documents(folder, replacing) {
        if (sibling.platform.arch, sibling.platform.link) == (doc.platform.arch, doc.platform.link)
        {
            same_platform.push(format!(
                "{} also defines {} {}; policy-macros refuses two files for one platform in one folder",
                path.display(),
                doc.platform.arch,
                doc.platform.link.name()
            ));
        } else {
            docs.push(sibling);
        }
    }
    validate_documents(&docs).map(|()| same_platform)
}

fn sibling_documents(folder: &Path, replacing: &Path) -> Vec<(PathBuf, Document)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| !same_file(p, replacing))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let doc = parse_document(&p.display().to_string(), &text).ok()?;
            Some((p, doc))
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
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
}
