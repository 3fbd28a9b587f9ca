//! `candle-tp`: tensor-parallel Llama decode on candle, one process per GPU,
//! with the collectives of NCCL or of colltune's `kernels` (chosen by
//! `policy`), eagerly and as CUDA graphs. See README.md beside this crate.

use candle_tp::cli::{Cli, Command, RunArgs};
use candle_tp::{gpu, launch};
use clap::Parser;

fn main() {
    // `norm-bench` forms an NCCL communicator in this process (`run`'s are
    // in its workers, started with NCCL_NVLS_ENABLE=0): never NVLink
    // multicast here either.
    // SAFETY: the first statement of main; no other thread exists yet.
    if let Err(e) = unsafe { gpu::keep_multicast_off() } {
        eprintln!("candle-tp: error: {e}");
        std::process::exit(1);
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run { run, out } => launch::run(run, out),
        Command::SelfCheck { world, gpus, out } => {
            launch::run(&RunArgs::self_check(*world, gpus.clone()), out)
        }
        Command::NormBench(args) => gpu::norm_bench(args),
        Command::Worker(w) => gpu::worker(w)
            .map(|()| true)
            .map_err(|e| format!("rank {}: {e}", w.rank)),
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(2),
        Err(e) => {
            eprintln!("candle-tp: error: {e}");
            std::process::exit(1);
        }
    }
}
