//! `tuner show`: the tables compiled into `policy`.

use std::io::Write;

use tuned_schema::{Arch, Collective, DType, Link, Mode};

use super::args::{arch, collective, dtype, link, mode};
use super::{Error, Exit};
use crate::show::{ShowFilter, render};

#[derive(clap::Args, Clone, Debug)]
pub struct ShowArgs {
    #[arg(long, value_parser = arch)]
    pub arch: Option<Arch>,
    #[arg(long, value_parser = link)]
    pub link: Option<Link>,
    #[arg(long, value_parser = collective)]
    pub collective: Option<Collective>,
    #[arg(long)]
    pub world_size: Option<u32>,
    #[arg(long, value_parser = dtype)]
    pub dtype: Option<DType>,
    #[arg(long, value_parser = mode)]
    pub mode: Option<Mode>,
    /// Also print each table's note (how it was measured or where it was read)
    #[arg(long)]
    pub notes: bool,
}

pub fn show(args: &ShowArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let filter = ShowFilter {
        arch: args.arch,
        link: args.link,
        collective: args.collective,
        world_size: args.world_size,
        dtype: args.dtype,
        mode: args.mode,
        notes: args.notes,
    };
    write!(out, "{}", render(policy::PLATFORMS, &filter))?;
    Ok(Exit::Ok)
}
