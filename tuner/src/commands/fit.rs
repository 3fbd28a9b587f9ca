//! `tuner fit`: recorded evidence → bands → TOML, without a GPU.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use super::args::FitArgs;
use super::{Error, Exit, diagnostics, write_file};
use crate::evidence::Evidence;
use crate::fit::{FitSettings, fit as fit_bands};
use crate::write::{
    build_document, check_in_folder, existing_document, merge_summary, render, toml_file_name,
};
use tuned_schema::merge::merge;
use tuned_schema::{Document, TableKey};

#[derive(clap::Args, Clone, Debug)]
pub struct FitCommandArgs {
    /// The evidence file a sweep wrote (<arch>-<link>.evidence.json)
    pub evidence: PathBuf,
    /// Where to write the TOML (default: <arch>-<link>.toml beside the
    /// evidence; a folder: <arch>-<link>.toml in it); `-` prints it instead
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub fit: FitArgs,
}

pub fn fit(args: &FitCommandArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let settings = args.fit.settings()?;
    let evidence = Evidence::load(&args.evidence).map_err(|e| Error::Input(e.to_string()))?;
    if !evidence.complete {
        eprintln!(
            "tuner: warning: {} is from an interrupted sweep; the bands cover only what it measured",
            args.evidence.display()
        );
    }
    let to_stdout = args.out.as_deref() == Some(Path::new("-"));
    let file_name = toml_file_name(evidence.platform.arch, evidence.platform.link);
    let toml_path = match &args.out {
        // A folder (`--out tuned/`, as `sweep` takes it): the platform's file in it.
        Some(path) if !to_stdout && path.is_dir() => path.join(&file_name),
        Some(path) if !to_stdout => path.clone(),
        _ => args.evidence.with_file_name(&file_name),
    };
    if to_stdout {
        let result = fit_bands(&evidence, &settings);
        let reference = relative_reference(&toml_path, &args.evidence);
        let doc = build_document(&evidence, &result, Some(&reference), Vec::new());
        tuned_schema::validate::validate_documents(std::slice::from_ref(&doc)).map_err(|d| {
            Error::Failed(diagnostics(
                "the fitted tables would not compile into policy:",
                &d,
            ))
        })?;
        write!(out, "{}", render(&doc))?;
        // The TOML goes to standard output: warnings to standard error.
        for failed in evidence.failed_checks() {
            eprintln!("{}", failed.warning());
        }
        return Ok(Exit::Ok);
    }
    let written = fit_and_write(&evidence, &args.evidence, &toml_path, &settings, false)?;
    write!(out, "{}", written.report)?;
    for failed in evidence.failed_checks() {
        writeln!(out, "{}", failed.warning())?;
    }
    writeln!(out, "wrote {}", toml_path.display())?;
    Ok(Exit::Ok)
}

/// What [`fit_and_write`] wrote.
pub struct Written {
    /// The fit's report, then what the merge did (if there was a file to merge into).
    pub report: String,
    /// Where the evidence is (or, with `write_evidence`, was written).
    pub evidence_path: PathBuf,
}

/// Fits `evidence`, merges the tables into the file at `toml_path` if there is
/// one (replacing only the keys the evidence has: `tuned_schema::merge`), checks
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
    evidence_path: &Path,
    toml_path: &Path,
    settings: &FitSettings,
    write_evidence: bool,
) -> Result<Written, Error> {
    let result = fit_bands(evidence, settings);
    if result.keys.is_empty() {
        return Err(Error::Input(
            "the evidence has no key with a usable point".to_string(),
        ));
    }
    let existing = existing_document(toml_path).map_err(|d| {
        Error::Input(diagnostics(
            "cannot merge into the existing file, which does not parse:",
            &d,
        ))
    })?;
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
    let fresh = build_document(evidence, &result, Some(&reference), Vec::new());
    let mut report = result.report();
    let doc = match existing {
        None => fresh,
        Some(existing) => {
            let merged = merge(&existing, &fresh)
                .map_err(|e| Error::Input(format!("{}: {e}", toml_path.display())))?;
            report.push_str(&merge_summary(&merged, toml_path));
            merged.document
        }
    };
    let folder = toml_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let warnings = check_in_folder(&doc, folder, toml_path).map_err(|d| {
        Error::Failed(diagnostics(
            &format!(
                "the merged tables would not compile into policy, so {} was not written:",
                toml_path.display()
            ),
            &d,
        ))
    })?;
    for warning in warnings {
        eprintln!("tuner: warning: {warning}");
    }
    let text = render(&doc);
    if write_evidence {
        write_file(&evidence_path, &evidence.to_json())?;
    }
    write_file(toml_path, &text)?;
    Ok(Written {
        report,
        evidence_path,
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
/// the provenance records it.
fn relative_reference(toml_path: &Path, evidence_path: &Path) -> String {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let from = absolute(toml_path.parent().unwrap_or(Path::new(".")));
    let to = absolute(evidence_path);
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
    }
}
