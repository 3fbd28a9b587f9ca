//! `tuner explain`: the selection for one query, and why.

use std::io::Write;

use tuned_schema::{Arch, Collective, DType, Link, Mode, Query};

use super::args::{arch, bytes, collective, dtype, link, mode};
use super::{Error, Exit};

#[derive(clap::Args, Clone, Debug)]
pub struct ExplainArgs {
    #[arg(long, value_parser = arch)]
    pub arch: Arch,
    #[arg(long, value_parser = link)]
    pub link: Link,
    #[arg(long, value_parser = collective)]
    pub collective: Collective,
    #[arg(long)]
    pub world_size: u32,
    #[arg(long, value_parser = dtype)]
    pub dtype: DType,
    #[arg(long, value_parser = mode)]
    pub mode: Mode,
    /// Output bytes of the call (all-gather: the gathered tensor), e.g. 448KiB
    #[arg(long, value_parser = bytes)]
    pub bytes: u64,
}

pub fn explain(args: &ExplainArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let query = Query::new(
        args.collective,
        args.arch,
        args.link,
        args.world_size,
        args.dtype,
        args.mode,
        args.bytes,
    );
    write!(out, "{}", crate::explain::explain(query))?;
    if let Ok(value) = std::env::var(policy::OVERRIDE_ENV) {
        match policy::Policy::from_spec(&value) {
            Ok(forced) => {
                if let Some(algo) = forced.forced(query.key.collective) {
                    writeln!(
                        out,
                        "note: {}={value} is set; engines that honour it run {} instead",
                        policy::OVERRIDE_ENV,
                        algo.name()
                    )?;
                }
            }
            Err(e) => writeln!(
                out,
                "note: {}={value} is set but invalid: {e}",
                policy::OVERRIDE_ENV
            )?,
        }
    }
    Ok(Exit::Ok)
}
