//! `tuner`: measure collective crossovers on this machine's GPUs and write
//! `tuned/*.toml`; re-fit, verify, plot, show and explain tables; bench the
//! algorithms against NCCL. See GUIDE.md.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tuner::commands::{self, Exit};

#[derive(Parser)]
#[command(
    name = "tuner",
    version,
    about = "Picks the fastest collective algorithm per message size from measurements"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure every candidate on this machine's GPUs, fit bands, write the TOML and its evidence
    Sweep(commands::SweepArgs),
    /// Derive bands from recorded evidence (no GPU needed)
    Fit(commands::FitCommandArgs),
    /// Re-measure held-out sizes and report the regret of a tuned file's choices
    Verify(commands::VerifyArgs),
    /// Latency and bus-bandwidth figures (SVG) per key, with the bands shaded, and an index.html
    Plot(commands::PlotArgs),
    /// Print the tables compiled into `policy`, or those of tuned files
    Show(commands::ShowArgs),
    /// Print what runs one call, and why: the file, table and band `policy` selects from, and whether the kernel takes the size
    Explain(commands::ExplainArgs),
    /// Time every algorithm against NCCL per size (a table, CSV and JSON); needs GPUs
    Bench(commands::BenchArgs),
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread exists.
    if let Err(why) = unsafe { tuner::keep_multicast_off() } {
        eprintln!("tuner: {why}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    if let Err(why) = tuner::logging::init() {
        eprintln!("tuner: {why}");
        return ExitCode::from(2);
    }
    let mut out = std::io::stdout().lock();
    let result = match &cli.command {
        Command::Sweep(args) => commands::sweep(args, &mut out),
        Command::Fit(args) => commands::fit(args, &mut out),
        // The key lists' own checks (a value named twice, an empty size
        // range), as sweep makes them.
        Command::Verify(args) => commands::verify(args, &mut out),
        Command::Plot(args) => commands::plot(args, &mut out),
        Command::Show(args) => commands::show(args, &mut out),
        Command::Explain(args) => commands::explain(args, &mut out),
        Command::Bench(args) => commands::bench(args, &mut out),
    };
    match result {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(exit) => ExitCode::from(exit as u8),
        Err(error) => {
            eprintln!("tuner: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
