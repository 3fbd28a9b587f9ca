//! `tuner show`: the tables compiled into `policy`, or tuned files on disk.

use std::io::Write;
use std::path::PathBuf;

use policy::{Arch, Collective, DType, Link, Mode};

use super::args::{arch, collective, dtype, link, mode};
use super::{Error, Exit};
use crate::show::{ShowFilter, render, to_json};
use crate::tables::TableSet;

#[derive(clap::Args, Clone, Debug)]
pub struct ShowArgs {
    /// A tuned file or a folder of them, e.g. a sweep's output (default: the
    /// tables compiled into policy)
    #[arg(value_name = "TABLES")]
    pub tables: Option<PathBuf>,
    /// The file that answers this GPU architecture: sm<major><minor>, e.g.
    /// sm80, sm90, sm100, sm103 (its own, or the same major's highest minor
    /// below it)
    #[arg(long, value_parser = arch)]
    pub arch: Option<Arch>,
    /// Only files for this interconnect: nvlink, pcie or loopback
    #[arg(long, value_parser = link)]
    pub link: Option<Link>,
    /// Only tables of all_reduce or all_gather
    #[arg(long, value_parser = collective)]
    pub collective: Option<Collective>,
    /// Only tables for this many ranks, 2 to 1024
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub world_size: Option<u32>,
    /// Only tables of this element type: bf16, f16 or f32
    #[arg(long, value_parser = dtype)]
    pub dtype: Option<DType>,
    /// Only tables of this mode: graph or eager
    #[arg(long, value_parser = mode)]
    pub mode: Option<Mode>,
    /// Also print each table's note (how it was measured or where it was read)
    #[arg(long)]
    pub notes: bool,
    /// Print the platforms and tables as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn show(args: &ShowArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let tables = match &args.tables {
        Some(path) => TableSet::load(path).map_err(Error::Input)?,
        None => TableSet::Compiled,
    };
    let filter = ShowFilter {
        arch: args.arch,
        link: args.link,
        collective: args.collective,
        world_size: args.world_size,
        dtype: args.dtype,
        mode: args.mode,
        notes: args.notes,
    };
    if args.json {
        let text = serde_json::to_string_pretty(&to_json(&tables, &filter)).unwrap_or_default();
        writeln!(out, "{text}")?;
    } else {
        write!(out, "{}", render(&tables, &filter))?;
    }
    Ok(Exit::Ok)
}
