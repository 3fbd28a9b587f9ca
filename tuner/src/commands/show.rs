//! `tuner show`: the tables compiled into `policy`, or tuned files on disk.

use std::io::Write;
use std::path::PathBuf;

use policy::{Arch, Collective, DType, Link, Mode};

use super::args::{arch, collective, dtype, link, mode};
use super::{Error, Exit, table_set};
use crate::show::{ShowFilter, render, to_json};

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
    let tables = table_set(args.tables.as_deref())?;
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
        write!(out, "{}", crate::format::json(&to_json(&tables, &filter)))?;
    } else {
        write!(out, "{}", render(&tables, &filter))?;
    }
    Ok(Exit::Ok)
}
