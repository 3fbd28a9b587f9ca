//! `tuner show`: the tables compiled into `policy`, or tuned files on disk.

use std::io::Write;
use std::path::PathBuf;

use super::{Error, Exit, table_set};
use crate::show::{ShowFilter, render, to_json};

#[derive(clap::Args, Clone, Debug)]
pub struct ShowArgs {
    /// A tuned file or a folder of them, e.g. a sweep's output (default: the
    /// tables compiled into policy)
    #[arg(value_name = "TABLES")]
    pub tables: Option<PathBuf>,
    #[command(flatten)]
    pub filter: ShowFilter,
    /// Print the platforms and tables as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn show(args: &ShowArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let tables = table_set(args.tables.as_deref())?;
    if args.json {
        write!(
            out,
            "{}",
            crate::format::json(&to_json(&tables, &args.filter))
        )?;
    } else {
        write!(out, "{}", render(&tables, &args.filter))?;
    }
    Ok(Exit::Ok)
}
