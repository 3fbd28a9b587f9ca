//! `tuner fit`: recorded evidence → bands → TOML, without a GPU.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use super::args::FitArgs;
use super::{Error, Exit, diagnostics, write_file};
use crate::evidence::Evidence;
use crate::fit::{FitResult, fit as fit_bands};
use crate::format;
use crate::write::{
    build_document, check_folder, check_in_folder, folder_of, merge_summary, render, test_kind,
    toml_file_name,
};
use policy::TableKey;
use tuned_schema::Document;
use tuned_schema::merge::{Merged, merge};

#[derive(clap::Args, Clone, Debug)]
pub struct FitCommandArgs {
    /// The evidence file a sweep wrote (<arch>-<link>.evidence.json)
    pub evidence: PathBuf,
    /// Where to write the TOML: a file, or a folder (an existing one, or a
    /// path ending in /) for <arch>-<link>.toml in it; `-` prints it on
    /// standard output and writes nothing (default: <arch>-<link>.toml beside
    /// the evidence)
    #[arg(long, short, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Write synthetic or loopback tables even into a folder with real
    /// platforms' tables, or one that policy compiles
    #[arg(long)]
    pub force: bool,
    /// Print the report as JSON (keys, bands, edges, dropped keys, what the
    /// merge did) instead of text; not with `-o -`, whose standard output is
    /// the TOML
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub fit: FitArgs,
}

/// Where `fit` puts the TOML.
enum Target {
    Stdout,
    File(PathBuf),
}

impl FitCommandArgs {
    fn target(&self, evidence: &Evidence) -> Result<Target, Error> {
        let file_name = toml_file_name(evidence.platform.arch, evidence.platform.link);
        let Some(out) = &self.out else {
            return Ok(Target::File(self.evidence.with_file_name(&file_name)));
        };
        if out.as_os_str() == "-" {
            return Ok(Target::Stdout);
        }
        let text = out.to_string_lossy();
        let names_folder = text.ends_with('/') || text.ends_with(std::path::MAIN_SEPARATOR);
        if names_folder {
            let folder = Path::new(text.trim_end_matches(['/', std::path::MAIN_SEPARATOR]));
            if folder.is_file() {
                return Err(Error::Usage(format!(
                    "-o {text} names a folder, but {} is a file",
                    folder.display()
                )));
            }
            return Ok(Target::File(out.join(&file_name)));
        }
        if out.is_dir() {
            // A folder (`--out tuned`, as `sweep` takes it): the platform's file in it.
            return Ok(Target::File(out.join(&file_name)));
        }
        Ok(Target::File(out.clone()))
    }
}

pub fn fit(args: &FitCommandArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let settings = args.fit.settings()?;
    let evidence = Evidence::load(&args.evidence).map_err(|e| Error::Input(e.to_string()))?;
    let target = args.target(&evidence)?;
    if args.json && matches!(target, Target::Stdout) {
        return Err(Error::Usage(
            "--json and -o - both want standard output (the report, the TOML); write the TOML to a file".to_string(),
        ));
    }
    if !evidence.complete {
        eprintln!(
            "tuner: warning: {} is from an interrupted sweep; the bands cover only what it measured",
            args.evidence.display()
        );
    }
    let result = fit_bands(&evidence, &settings);
    for line in dropped_keys(&result) {
        eprintln!("tuner: warning: {line}");
    }
    if result.keys.is_empty() {
        return Err(no_usable_key(&args.evidence, &result));
    }
    let toml_path = match target {
        Target::Stdout => {
            // Beside the evidence, as without -o: where the printed file
            // would name its evidence from.
            let beside = args.evidence.with_file_name(toml_file_name(
                evidence.platform.arch,
                evidence.platform.link,
            ));
            let reference = relative_reference(&beside, &args.evidence);
            let doc = build_document(&evidence, &result, Some(&reference), Vec::new());
            tuned_schema::validate::validate_documents(std::slice::from_ref(&doc)).map_err(
                |d| {
                    Error::Failed(diagnostics(
                        "the fitted tables would not compile into policy:",
                        &d,
                    ))
                },
            )?;
            write!(out, "{}", render(&doc))?;
            // The TOML goes to standard output: warnings to standard error.
            for failed in evidence.failed_checks() {
                eprintln!("tuner: {}", failed.warning());
            }
            return Ok(Exit::Ok);
        }
        Target::File(path) => path,
    };
    if let Some(kind) = test_kind(&evidence)
        && !args.force
    {
        crate::write::check_test_destination(kind, &toml_path).map_err(Error::Usage)?;
    }
    let written = fit_and_write(&evidence, &result, &args.evidence, &toml_path, false)
        .map_err(|f| f.error)?;
    if args.json {
        let report = json_report(&evidence, &result, &toml_path, &written);
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        )?;
        return Ok(Exit::Ok);
    }
    write!(out, "{}", written.report)?;
    for failed in evidence.failed_checks() {
        writeln!(out, "{}", failed.warning())?;
    }
    writeln!(out, "wrote {}", toml_path.display())?;
    Ok(Exit::Ok)
}

/// One line per key of the evidence that gets no table, and what that means.
pub fn dropped_keys(result: &FitResult) -> Vec<String> {
    result
        .skipped
        .iter()
        .map(|(key, why)| {
            format!("{key}: no table ({why}); a file merged into keeps its own table for this key, a new file has none (NCCL)")
        })
        .collect()
}

fn no_usable_key(path: &Path, result: &FitResult) -> Error {
    Error::Input(format!(
        "{}: no key has a usable point (a verified point with at least {} samples), so there is no table to write",
        path.display(),
        result.settings.min_samples
    ))
}

/// What [`fit_and_write`] wrote.
pub struct Written {
    /// The fit's report, then what the merge did (if there was a file to merge into).
    pub report: String,
    /// Where the evidence is (or, with `write_evidence`, was written).
    pub evidence_path: PathBuf,
    /// What the merge did, when there was a file to merge into.
    pub merged: Option<Merged>,
}

/// Why [`fit_and_write`] wrote no TOML.
#[derive(Debug)]
pub struct WriteFailure {
    pub error: Error,
    /// The evidence, when it was written before the TOML failed.
    pub evidence_written: Option<PathBuf>,
}

impl From<Error> for WriteFailure {
    fn from(error: Error) -> Self {
        WriteFailure {
            error,
            evidence_written: None,
        }
    }
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
pub fn fit_and_write(
    evidence: &Evidence,
    result: &FitResult,
    evidence_path: &Path,
    toml_path: &Path,
    write_evidence: bool,
) -> Result<Written, WriteFailure> {
    if result.keys.is_empty() {
        return Err(no_usable_key(evidence_path, result).into());
    }
    let existing = check_folder(toml_path, evidence.platform.arch, evidence.platform.link)
        .map_err(Error::Input)?;
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
    let mut report = result.report();
    let (doc, merged) = match existing {
        None => (fresh, None),
        Some(existing) => {
            let merged = merge(&existing, &fresh)
                .map_err(|e| Error::Input(format!("{}: {e}", toml_path.display())))?;
            report.push_str(&merge_summary(&merged, toml_path));
            (merged.document.clone(), Some(merged))
        }
    };
    let folder = folder_of(toml_path);
    check_in_folder(&doc, folder, toml_path).map_err(|problems| {
        Error::Failed(format!(
            "the tables would not compile into policy, so {} was not written:{problems}",
            toml_path.display()
        ))
    })?;
    let text = render(&doc);
    std::fs::create_dir_all(folder)
        .map_err(|e| Error::Failed(format!("cannot create folder {}: {e}", folder.display())))?;
    if write_evidence {
        write_file(&evidence_path, &evidence.to_json())?;
    }
    write_file(toml_path, &text).map_err(|error| WriteFailure {
        error,
        evidence_written: write_evidence.then(|| evidence_path.clone()),
    })?;
    Ok(Written {
        report,
        evidence_path,
        merged,
    })
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

/// `fit --json`: what the text report says, as data.
fn json_report(
    evidence: &Evidence,
    result: &FitResult,
    toml_path: &Path,
    written: &Written,
) -> Value {
    let keys: Vec<Value> = result
        .keys
        .iter()
        .map(|k| {
            let edges: Vec<Value> = k
                .edges
                .iter()
                .map(|e| {
                    json!({
                        "below": e.below.name(),
                        "above": e.above.name(),
                        "last_below": e.last_below,
                        "first_above": e.first_above,
                        "medians_us_at_last_below": [e.at_last_below.0, e.at_last_below.1],
                        "medians_us_at_first_above": [e.at_first_above.0, e.at_first_above.1],
                    })
                })
                .collect();
            json!({
                "key": format::key_json(&k.key),
                "sizes": k.sizes,
                "min_samples": k.min_samples,
                "bands": format::bands_json(&k.bands),
                "edges": edges,
            })
        })
        .collect();
    let dropped: Vec<Value> = result
        .skipped
        .iter()
        .map(|(key, why)| json!({"key": format::key_json(key), "why": why}))
        .collect();
    let merge = written.merged.as_ref().map(|m| {
        let list = |keys: &[TableKey]| keys.iter().map(format::key_json).collect::<Vec<_>>();
        json!({
            "replaced": list(&m.replaced),
            "added": list(&m.added),
            "kept": list(&m.kept),
            "platform_replaced": m.platform_replaced,
            "capacity_changes": m.capacity_changes.iter().map(|c| json!({
                "collective": c.collective.name(),
                "algo": c.algo.name(),
                "from": c.from.map(|f| json!({"max_bytes": f.max_bytes, "align": f.align})),
                "to": {"max_bytes": c.to.max_bytes, "align": c.to.align},
            })).collect::<Vec<_>>(),
        })
    });
    let failed: Vec<Value> = evidence
        .failed_checks()
        .iter()
        .map(|f| {
            json!({
                "key": f.key,
                "algo": f.algo.name(),
                "sizes": f.sizes,
                "first_bytes": f.first_bytes,
                "first_error": f.first_error,
            })
        })
        .collect();
    json!({
        "evidence": written.evidence_path.display().to_string(),
        "toml": toml_path.display().to_string(),
        "platform": {
            "arch": evidence.platform.arch.name(),
            "link": evidence.platform.link.name(),
            "gpu": evidence.platform.gpu,
        },
        "keys": keys,
        "dropped": dropped,
        "merge": merge,
        "failed_checks": failed,
    })
}

#[cfg(test)]
mod tests {
    use super::relative_reference;
    use std::path::Path;

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
