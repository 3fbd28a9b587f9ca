//! `tuner plot`: latency and bus-bandwidth figures from evidence.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use super::args::FitArgs;
use super::{Error, Exit, diagnostics};
use crate::evidence::Evidence;
use crate::fit::fit;
use crate::plot::plot_evidence;
use crate::write::file_stem;

#[derive(clap::Args, Clone, Debug)]
pub struct PlotArgs {
    /// The evidence file a sweep wrote
    pub evidence: PathBuf,
    /// Shade the bands of this tuned file (default: fit the evidence and shade
    /// what `tuner fit` would write)
    #[arg(long)]
    pub toml: Option<PathBuf>,
    /// Folder for the SVG files (default: <arch>-<link>.plots beside the evidence)
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub fit: FitArgs,
}

pub fn plot(args: &PlotArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let evidence = Evidence::load(&args.evidence).map_err(|e| Error::Input(e.to_string()))?;
    let bands: BTreeMap<_, _> = match &args.toml {
        Some(path) => {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Input(format!("cannot read {shown}: {e}")))?;
            let doc = tuned_schema::parse::parse_document(&shown, &text).map_err(|d| {
                Error::Input(diagnostics(
                    &format!("{shown} is not a valid tuned file:"),
                    &d,
                ))
            })?;
            doc.tables.into_iter().map(|t| (t.key, t.bands)).collect()
        }
        None => fit(&evidence, &args.fit.settings()?)
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
    let written = plot_evidence(&evidence, &bands, &folder).map_err(Error::Failed)?;
    for path in written {
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(Exit::Ok)
}
