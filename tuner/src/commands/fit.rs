//! `tuner fit`: recorded evidence → bands → TOML, without a GPU.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use super::args::FitArgs;
use super::{Error, Exit, diagnostics, write_file};
use crate::evidence::Evidence;
use crate::fit::{FitSettings, fit as fit_bands};
use crate::write::{build_document, check_in_folder, existing_asserts, render, toml_file_name};

#[derive(clap::Args, Clone, Debug)]
pub struct FitCommandArgs {
    /// The evidence file a sweep wrote (<arch>-<link>.evidence.json)
    pub evidence: PathBuf,
    /// Where to write the TOML (default: <arch>-<link>.toml beside the
    /// evidence); `-` prints it instead
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
    let toml_path = match &args.out {
        Some(path) if !to_stdout => path.clone(),
        _ => args.evidence.with_file_name(toml_file_name(
            evidence.platform.arch,
            evidence.platform.link,
        )),
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
        return Ok(Exit::Ok);
    }
    let report = fit_and_write(&evidence, &args.evidence, &toml_path, &settings, false)?;
    write!(out, "{report}")?;
    writeln!(out, "wrote {}", toml_path.display())?;
    Ok(Exit::Ok)
}

/// Fits `evidence` (returning the report), keeps the `[[assert]]`s of the file being replaced, checks
/// the document as the proc-macro would (with the other files in its folder),
/// and only then writes the evidence (when `write_evidence`; `fit` reads it
/// from there already) and the TOML. A document the macro would refuse is never
/// written.
pub fn fit_and_write(
    evidence: &Evidence,
    evidence_path: &Path,
    toml_path: &Path,
    settings: &FitSettings,
    write_evidence: bool,
) -> Result<String, Error> {
    let result = fit_bands(evidence, settings);
    if result.keys.is_empty() {
        return Err(Error::Input(
            "the evidence has no key with a usable point".to_string(),
        ));
    }
    let asserts = existing_asserts(toml_path).map_err(|d| {
        Error::Input(diagnostics(
            "cannot keep the [[assert]]s of the file being replaced:",
            &d,
        ))
    })?;
    let reference = relative_reference(toml_path, evidence_path);
    let doc = build_document(evidence, &result, Some(&reference), asserts);
    let folder = toml_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let warnings = check_in_folder(&doc, folder, toml_path).map_err(|d| {
        Error::Failed(diagnostics(
            &format!(
                "the fitted tables would not compile into policy, so {} was not written:",
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
        write_file(evidence_path, &evidence.to_json())?;
    }
    write_file(toml_path, &text)?;
    Ok(result.report())
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
