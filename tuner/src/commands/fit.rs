//! `tuner fit`: recorded evidence → bands → TOML, without a GPU.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::args::FitArgs;
use super::{Error, Exit};
use crate::evidence::Evidence;
use crate::fit::fit as fit_bands;
use crate::tuned_file::{
    FitReport, build_document, no_usable_key, relative_reference, test_kind, toml_file_name,
    write_fitted,
};
use crate::tuned_folder::check_test_destination;

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
    /// Standard output, for a file that would be at the path given (where it
    /// names its evidence from).
    Stdout(PathBuf),
    File(PathBuf),
}

impl FitCommandArgs {
    fn target(&self, evidence: &Evidence) -> Result<Target, Error> {
        let file_name = toml_file_name(evidence.platform.arch, evidence.platform.link);
        // Beside the evidence, without -o and (for naming the evidence) with -o -.
        let beside = self.evidence.with_file_name(&file_name);
        let Some(out) = &self.out else {
            return Ok(Target::File(beside));
        };
        if out.as_os_str() == "-" {
            return Ok(Target::Stdout(beside));
        }
        let text = out.to_string_lossy();
        let names_folder = text.ends_with('/') || text.ends_with(std::path::MAIN_SEPARATOR);
        let folder = Path::new(text.trim_end_matches(['/', std::path::MAIN_SEPARATOR]));
        if names_folder && folder.is_file() {
            return Err(Error::Usage(format!(
                "-o {text} names a folder, but {} is a file",
                folder.display()
            )));
        }
        // A folder (`--out tuned`, as `sweep` takes it): the platform's file in it.
        if names_folder || out.is_dir() {
            return Ok(Target::File(out.join(&file_name)));
        }
        Ok(Target::File(out.clone()))
    }
}

pub fn fit(args: &FitCommandArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let settings = args.fit.settings()?;
    let evidence = Evidence::load(&args.evidence).map_err(Error::Input)?;
    let target = args.target(&evidence)?;
    if args.json && matches!(target, Target::Stdout(_)) {
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
    for dropped in &result.skipped {
        eprintln!("tuner: warning: {}", dropped.warning());
    }
    if result.keys.is_empty() {
        return Err(Error::Input(no_usable_key(&args.evidence, &result)));
    }
    let toml_path = match target {
        Target::Stdout(beside) => {
            let reference = relative_reference(&beside, &args.evidence);
            let doc = build_document(&evidence, &result, Some(&reference), Vec::new());
            tuned_schema::validate::validate_documents(std::slice::from_ref(&doc)).map_err(
                |d| {
                    Error::Failed(format!(
                        "the fitted tables would not compile into policy:{}",
                        crate::format::diagnostics(&d)
                    ))
                },
            )?;
            write!(out, "{}", tuned_schema::write::to_toml_string(&doc))?;
            // The TOML goes to standard output: warnings to standard error.
            for failed in evidence.failed_checks() {
                eprintln!("tuner: {}", failed.warning());
            }
            return Ok(Exit::Ok);
        }
        Target::File(path) => path,
    };
    if let Some(kind) = test_kind(&evidence.platform.backend, evidence.platform.link)
        && !args.force
    {
        check_test_destination(kind, &toml_path).map_err(Error::Usage)?;
    }
    let written = write_fitted(&evidence, &result, &args.evidence, &toml_path, false)
        .map_err(|f| Error::Failed(f.error))?;
    let report = FitReport::new(&evidence, &result, &toml_path, &written);
    if args.json {
        write!(out, "{}", crate::format::json(&report))?;
        return Ok(Exit::Ok);
    }
    write!(out, "{}", report.render())?;
    writeln!(out, "wrote {}", toml_path.display())?;
    Ok(Exit::Ok)
}
