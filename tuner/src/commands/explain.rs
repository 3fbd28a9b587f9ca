//! `tuner explain`: what runs one call, and why.

use std::io::Write;
use std::path::PathBuf;

use policy::{Arch, Collective, DType, Link, Mode, Query};

use super::args::{arch, bytes, collective, dtype, link, mode};
use super::{Error, Exit, table_set};
use crate::explain::{Explanation, Forced, WorldMemory};

#[derive(clap::Args, Clone, Debug)]
pub struct ExplainArgs {
    /// A tuned file or a folder of them, e.g. a sweep's output (default: the
    /// tables compiled into policy)
    #[arg(value_name = "TABLES")]
    pub tables: Option<PathBuf>,
    /// GPU architecture: sm<major><minor>, e.g. sm80, sm90, sm100, sm103
    #[arg(long, value_parser = arch)]
    pub arch: Arch,
    /// Interconnect: nvlink, pcie or loopback
    #[arg(long, value_parser = link)]
    pub link: Link,
    /// all_reduce or all_gather
    #[arg(long, value_parser = collective)]
    pub collective: Collective,
    /// Ranks of the world, at least 1 (the custom kernels serve 2 to 8; any
    /// other size runs NCCL, and explain says why)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub world_size: u32,
    /// Element type: bf16, f16 or f32
    #[arg(long, value_parser = dtype)]
    pub dtype: DType,
    /// graph (replayed from a CUDA graph) or eager
    #[arg(long, value_parser = mode)]
    pub mode: Mode,
    /// Output bytes of the call (all-gather: the gathered tensor), e.g. 448KiB
    #[arg(long, value_parser = bytes, value_name = "SIZE")]
    pub bytes: u64,
    /// Print the explanation as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn explain(args: &ExplainArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let tables = table_set(args.tables.as_deref())?;
    let query = Query::new(
        args.collective,
        args.arch,
        args.link,
        args.world_size,
        args.dtype,
        args.mode,
        args.bytes,
    );
    // Engines honour COLLTUNE_ALGO; an invalid value stops them at start-up.
    let value = std::env::var(policy::OVERRIDE_ENV).ok();
    let policy = match &value {
        None => policy::Policy::none(),
        Some(value) => policy::Policy::from_spec(value).map_err(|e| {
            Error::Input(format!(
                "{}={value} is set but invalid, so engines would not start: {e}",
                policy::OVERRIDE_ENV
            ))
        })?,
    };
    let forced = value
        .zip(policy.forced(query.key.collective))
        .map(|(value, algo)| Forced { value, algo });
    // A world with kernels' default options: buffers for what the tables
    // select, within the default budget.
    let memory = crate::memory::runtime_default().map(|budget| WorldMemory { budget, policy });
    let explanation = Explanation::new(&tables, query, forced, memory.as_ref());
    if args.json {
        write!(out, "{}", crate::format::json(&explanation))?;
    } else {
        write!(out, "{}", explanation.render())?;
    }
    Ok(Exit::Ok)
}
