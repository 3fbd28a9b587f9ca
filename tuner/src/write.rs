//! Bands + evidence → a `tuned/*.toml` [`Document`], checked exactly as the
//! proc-macro checks it, and written in `tuned_schema`'s canonical form.
//!
//! Nothing here reads a clock: every date and version in the document comes
//! from the evidence, so fitting the same evidence always gives the same bytes.

use std::path::{Path, PathBuf};

use policy::{Arch, Link};
use tuned_schema::merge::Merged;
use tuned_schema::validate::parse_document;
use tuned_schema::validate::validate_documents;
use tuned_schema::write::to_toml_string;
use tuned_schema::{Assertion, Diagnostic, Document, Platform, Provenance, Source, Table};

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
        capacities: platform.capacities.clone(),
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

/// How a table was measured, for the reviewer reading the TOML.
fn table_note(key: &KeyFit, settings: &FitSettings, tuner_version: &str) -> String {
    format!(
        "measured by tuner v{tuner_version}: {} sizes, at least {} samples/point, noise margin {}%",
        key.sizes,
        key.min_samples,
        (settings.margin * 1000.0).round() / 10.0
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
/// with the other tuned files there (its assertions may name them). The
/// folder's other `*.toml` files must be tuned files for other platforms (see
/// [`check_folder`]): the macro compiles every one of them.
pub fn check_in_folder(doc: &Document, folder: &Path, replacing: &Path) -> Result<(), String> {
    let mut docs = vec![doc.clone()];
    for sibling in siblings(folder, replacing) {
        docs.push(sibling.usable_for(doc.platform.arch, doc.platform.link)?);
    }
    validate_documents(&docs).map_err(|d| diagnostics_text(&d))
}

/// What stands in the way of writing `<arch>-<link>` tables to `toml_path`,
/// checked before a sweep measures anything and before `fit` writes: the
/// folder must be one `policy-macros` could compile with the new file in it
/// (every other `*.toml` parses and is for another platform), and a file
/// already at `toml_path` must parse, since the new tables are merged into
/// it. Returns that file, if there is one.
pub fn check_folder(toml_path: &Path, arch: Arch, link: Link) -> Result<Option<Document>, String> {
    let folder = folder_of(toml_path);
    if folder.is_file() {
        return Err(format!(
            "{} is a file, not a folder: the tables go into <arch>-<link>.toml inside a folder",
            folder.display()
        ));
    }
    for sibling in siblings(folder, toml_path) {
        sibling.usable_for(arch, link)?;
    }
    existing_document(toml_path).map_err(|d| {
        format!(
            "cannot merge into {}, which does not parse (fix or move it first):{}",
            toml_path.display(),
            diagnostics_text(&d)
        )
    })
}

/// The folder a TOML path is in (`.` for a bare file name).
pub fn folder_of(toml_path: &Path) -> &Path {
    toml_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Tables that describe no GPU platform: `synthetic` (the seeded latency
/// model's) or `loopback` (every rank on one GPU). `None` for a real sweep.
pub fn test_kind(evidence: &Evidence) -> Option<&'static str> {
    if source_of(evidence) == Source::Synthetic {
        Some("synthetic")
    } else if evidence.platform.link == Link::Loopback {
        Some("loopback")
    } else {
        None
    }
}

/// Refuses to put test tables (`kind`: [`test_kind`]) where they could be
/// taken for a platform's: into the folder `policy` compiles, into a crate's
/// `tuned/` folder (what `include_tuned!("tuned")` reads), or into a folder
/// that holds measured or published tables of a real platform (the file they
/// would merge into, or one compiled beside them). `--force` overrides it.
pub fn check_test_destination(kind: &str, toml_path: &Path) -> Result<(), String> {
    let folder = folder_of(toml_path);
    let refuse = |why: String| {
        Err(format!(
            "refusing to write {kind} tables into {}: {why}; they describe no GPU platform. Choose another folder, or pass --force",
            folder.display()
        ))
    };
    if is_policy_folder(folder) {
        return refuse(
            "policy compiles every *.toml there into the tables engines run".to_string(),
        );
    }
    if folder.file_name().is_some_and(|n| n == "tuned")
        && folder
            .parent()
            .is_some_and(|p| p.join("Cargo.toml").is_file())
    {
        return refuse(format!(
            "it is the tuned/ folder of the crate in {}, which include_tuned!(\"tuned\") compiles",
            folder
                .parent()
                .map_or(String::new(), |p| p.display().to_string())
        ));
    }
    let real: Vec<String> = toml_paths(folder)
        .into_iter()
        .filter(|path| {
            existing_document(path)
                .ok()
                .flatten()
                .is_some_and(|doc| holds_real_tables(&doc))
        })
        .map(|path| path.display().to_string())
        .collect();
    if !real.is_empty() {
        return refuse(format!(
            "{} {} measured or published tables of a real platform",
            real.join(", "),
            if real.len() == 1 { "holds" } else { "hold" }
        ));
    }
    Ok(())
}

/// True when `doc` answers queries of a real link with tables that are not
/// synthetic (a file with no table still selects NCCL for its platform).
fn holds_real_tables(doc: &Document) -> bool {
    if doc.platform.link == Link::Loopback {
        return false;
    }
    if doc.tables.is_empty() {
        return doc.platform.source != Source::Synthetic;
    }
    doc.tables
        .iter()
        .any(|t| doc.origin(t).source != Source::Synthetic)
}

/// The repository's `tuned/` (and `policy/tuned`, its link), when this tuner
/// was built from a checkout that still exists.
fn is_policy_folder(folder: &Path) -> bool {
    let Ok(folder) = folder.canonicalize() else {
        return false;
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    [manifest.join("../tuned"), manifest.join("../policy/tuned")]
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .any(|p| p == folder)
}

/// Another `*.toml` of the folder.
struct Sibling {
    path: PathBuf,
    parsed: Result<Document, Vec<Diagnostic>>,
}

impl Sibling {
    /// The document, if the folder can hold it beside a file for `(arch, link)`.
    fn usable_for(self, arch: Arch, link: Link) -> Result<Document, String> {
        let doc = self.parsed.map_err(|d| {
            format!(
                "{} does not parse, and policy-macros compiles every *.toml of a folder, so the folder would not build; fix or move it:{}",
                self.path.display(),
                diagnostics_text(&d)
            )
        })?;
        if (doc.platform.arch, doc.platform.link) == (arch, link) {
            return Err(format!(
                "{} also defines {arch} {}; policy-macros refuses two files for one platform in one folder (merge them, or move one)",
                self.path.display(),
                link.name()
            ));
        }
        Ok(doc)
    }
}

/// The other `*.toml` files of `folder`, parsed or not.
fn siblings(folder: &Path, replacing: &Path) -> Vec<Sibling> {
    toml_paths(folder)
        .into_iter()
        .filter(|path| !same_file(path, replacing))
        .filter_map(|path| match existing_document(&path) {
            Ok(Some(doc)) => Some(Sibling {
                path,
                parsed: Ok(doc),
            }),
            // Gone since the folder was listed.
            Ok(None) => None,
            Err(d) => Some(Sibling {
                path,
                parsed: Err(d),
            }),
        })
        .collect()
}

/// The `*.toml` files directly in `folder` (the ones the macro reads), sorted.
fn toml_paths(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    paths.sort();
    paths
}

/// Diagnostics as indented lines under a message.
fn diagnostics_text(list: &[Diagnostic]) -> String {
    list.iter().map(|d| format!("\n  {d}")).collect()
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
