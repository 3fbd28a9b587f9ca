//! `tuner plot`: latency and bus-bandwidth figures from evidence.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::args::FitArgs;
use super::{Error, Exit, read_tuned_file};
use crate::evidence::Evidence;
use crate::fit::fit;
use crate::plot::{INDEX, plot_evidence};
use crate::tuned_file::file_stem;

#[derive(clap::Args, Clone, Debug)]
pub struct PlotArgs {
    /// The evidence file a sweep wrote
    pub evidence: PathBuf,
    /// Shade the bands of this tuned file, which must be the one that answers
    /// the evidence's platform (default: fit the evidence and shade what
    /// `tuner fit` would write)
    #[arg(long, value_name = "FILE")]
    pub toml: Option<PathBuf>,
    /// Folder for the SVG files and index.html (default:
    /// <arch>-<link>.plots beside the evidence); an existing folder must hold
    /// only an earlier plot's files, which are replaced
    #[arg(long, short, value_name = "FOLDER")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub fit: FitArgs,
}

pub fn plot(args: &PlotArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    if args.out.as_deref() == Some(Path::new("-")) {
        return Err(Error::Usage(
            "-o - is not possible: plot writes a folder of figures (SVG files and index.html)"
                .to_string(),
        ));
    }
    let settings = args.fit.settings()?;
    let evidence = Evidence::load(&args.evidence).map_err(Error::Input)?;
    if evidence.keys.is_empty() {
        return Err(Error::Input(format!(
            "{}: the evidence has no key, so there is nothing to plot",
            args.evidence.display()
        )));
    }
    let bands: BTreeMap<_, _> = match &args.toml {
        Some(path) => toml_bands(path, &evidence)?,
        None => fit(&evidence, &settings)
            .keys
            .into_iter()
            .map(|k| (k.key, k.bands))
            .collect(),
    };
    let folder = args.out.clone().unwrap_or_else(|| {
        args.evidence.with_file_name(format!(
            "{}.plots",
            file_stem(evidence.platform.arch, evidence.platform.link)
        ))
    });
    check_destination(&folder)?;
    let staging = beside(&folder, "partial");
    std::fs::create_dir_all(&staging)
        .map_err(|e| Error::Failed(format!("cannot create {}: {e}", staging.display())))?;
    let summaries = match plot_evidence(&evidence, &bands, &staging) {
        Ok(s) if s.iter().any(|k| k.file.is_some()) => s,
        Ok(_) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(Error::Input(format!(
                "{}: no key has a usable point (every one failed or has no samples), so there is nothing to plot",
                args.evidence.display()
            )));
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(Error::Failed(format!("{e}; nothing was written")));
        }
    };
    replace_folder(&staging, &folder)?;
    for s in &summaries {
        match &s.file {
            Some(file) => writeln!(out, "wrote {}", folder.join(file).display())?,
            None => eprintln!("tuner: warning: {}: {}", s.key, s.line()),
        }
    }
    writeln!(
        out,
        "wrote {} (links every figure, one line per key)",
        folder.join(INDEX).display()
    )?;
    Ok(Exit::Ok)
}

/// The bands of the tuned file at `path`, which must answer the evidence's
/// platform: shading NVLink bands over loopback data says nothing true.
fn toml_bands(
    path: &Path,
    evidence: &Evidence,
) -> Result<BTreeMap<policy::TableKey, Vec<policy::Band>>, Error> {
    let doc = read_tuned_file(path)?;
    let (want, have) = (&evidence.platform, &doc.platform);
    let answers = have.link == want.link && want.arch.answered_by([have.arch]) == Some(have.arch);
    if !answers {
        return Err(Error::Usage(format!(
            "--toml {} is for {} {}, but the evidence is from {} {}: its bands do not answer that platform",
            path.display(),
            have.arch,
            have.link.name(),
            want.arch,
            want.link.name()
        )));
    }
    Ok(doc.tables.into_iter().map(|t| (t.key, t.bands)).collect())
}

/// A plot folder may be new, or hold an earlier plot (SVG files and
/// index.html), which it replaces; anything else is refused before a
/// figure is drawn, so no one's files are replaced by figures.
fn check_destination(folder: &Path) -> Result<(), Error> {
    if !folder.exists() {
        return Ok(());
    }
    if !folder.is_dir() {
        return Err(Error::Usage(format!(
            "-o {} is a file; plot writes a folder of figures",
            folder.display()
        )));
    }
    let entries = std::fs::read_dir(folder)
        .map_err(|e| Error::Failed(format!("cannot read {}: {e}", folder.display())))?;
    let foreign: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let figure = (name.ends_with(".svg") || name == INDEX) && e.path().is_file();
            (!figure).then_some(name)
        })
        .collect();
    if foreign.is_empty() {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "-o {} holds files that are not an earlier plot's ({}); plot replaces its folder, so choose an empty or new one",
            folder.display(),
            foreign.join(", ")
        )))
    }
}

/// `.<folder's name>.<what>-<pid>` beside `folder`: where a plot is drawn
/// (`partial`) before it takes `folder`'s place, and where the earlier plot
/// waits meanwhile (`old`).
fn beside(folder: &Path, what: &str) -> PathBuf {
    let name = folder
        .file_name()
        .map_or("plots".into(), |n| n.to_string_lossy());
    folder.with_file_name(format!(".{name}.{what}-{}", std::process::id()))
}

/// Puts the finished `staging` folder at `folder`, replacing an earlier plot.
fn replace_folder(staging: &Path, folder: &Path) -> Result<(), Error> {
    let failed = |what: &str, e: std::io::Error| {
        let _ = std::fs::remove_dir_all(staging);
        Error::Failed(format!("cannot {what} {}: {e}", folder.display()))
    };
    if folder.exists() {
        let old = beside(folder, "old");
        std::fs::rename(folder, &old).map_err(|e| failed("move aside", e))?;
        if let Err(e) = std::fs::rename(staging, folder) {
            let _ = std::fs::rename(&old, folder);
            return Err(failed("replace", e));
        }
        let _ = std::fs::remove_dir_all(&old);
        return Ok(());
    }
    std::fs::rename(staging, folder).map_err(|e| failed("create", e))
}
