//! `tuner verify`: re-measure held-out sizes (spread over the range, and on
//! both sides of every band edge) and judge the regret of a tuned file's
//! choices: PASS, FAIL or INCONCLUSIVE.

use std::io::Write;
use std::path::PathBuf;

use super::args::{BackendArgs, KeyArgs};
use super::{Error, Exit, read_tuned_file};
use crate::backend::Repetitions;
use crate::candidates::Effort;
use crate::progress::{Progress, install_ctrl_c};
use crate::verify::{Verdict, VerifySettings, verify as run_verify};

#[derive(clap::Args, Clone, Debug)]
pub struct VerifyArgs {
    /// The tuned file to judge, e.g. tuned/sm90-nvlink.toml
    pub toml: PathBuf,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// Timed samples per point in the first round
    #[arg(long, default_value_t = 25)]
    pub samples: u32,
    /// Untimed calls before the samples of each point
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// At most this many interleaved rounds (of --samples each) of the chosen
    /// algorithm and its rival per size, at least 4 (or this many, if fewer);
    /// fewer than the most once the regret's interval is clear of the limits;
    /// 2 or more
    #[arg(long, default_value_t = VerifySettings::default().max_rounds)]
    pub rounds: u32,
    /// The limit on a key's median regret over its spread sizes, in percent:
    /// FAIL when the regret's whole interval is above it, PASS when at or
    /// below, INCONCLUSIVE when it straddles it
    #[arg(long, default_value_t = 1.0, value_name = "PCT")]
    pub max_median_regret_pct: f64,
    /// The limit on a key's worst regret at any size, in percent, judged the
    /// same way
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub max_worst_regret_pct: f64,
    /// One minus the coverage of every interval verify uses (each size's
    /// regret, and the rounds that find the fastest candidate other than the
    /// file's choice, its rival), in (0, 1)
    #[arg(long, default_value_t = 1.0 - crate::verify::CONFIDENCE)]
    pub alpha: f64,
    /// Print the report as JSON (regrets and noise as fractions, times in
    /// µs, sizes in bytes) instead of text
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub backend: BackendArgs,
    /// No progress bar
    #[arg(long)]
    pub no_progress: bool,
}

/// The same input rules as `sweep` and `fit`, so a typo is an input error
/// rather than a verdict of FAIL.
fn check_arguments(args: &VerifyArgs) -> Result<(), Error> {
    if args.samples < 5 {
        return Err(Error::Input("--samples must be at least 5".to_string()));
    }
    if args.rounds < 2 {
        return Err(Error::Input(
            "--rounds must be at least 2 (an interval needs two interleaved rounds)".to_string(),
        ));
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        return Err(Error::Input(format!(
            "--alpha {} must be in (0, 1)",
            args.alpha
        )));
    }
    for (flag, pct) in [
        ("--max-median-regret-pct", args.max_median_regret_pct),
        ("--max-worst-regret-pct", args.max_worst_regret_pct),
    ] {
        if !(pct >= 0.0 && pct.is_finite()) {
            return Err(Error::Input(format!(
                "{flag} {pct} must be a percentage of 0 or more"
            )));
        }
    }
    Ok(())
}

pub fn verify(args: &VerifyArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    args.keys.check()?;
    check_arguments(args)?;
    // The file next: a bad path or a malformed file is reported as such on
    // any machine, with or without a GPU.
    let doc = read_tuned_file(&args.toml)?;
    // Then the GPU: without one nothing else matters, and the user is told so
    // in one line.
    let mut backend = args.backend.open(None)?;
    let defaults = VerifySettings::default();
    let settings = VerifySettings {
        world_sizes: args.keys.world_sizes.clone(),
        collectives: args.keys.collectives.clone(),
        dtypes: args.keys.dtypes.clone(),
        modes: args.keys.modes.clone(),
        min_bytes: args.keys.min_bytes,
        max_bytes: args.keys.max_bytes,
        effort: Effort {
            reps: Repetitions {
                samples: args.samples,
                warmup: args.warmup,
            },
            confidence: 1.0 - args.alpha,
            ..defaults.effort
        },
        max_rounds: args.rounds,
        max_median_regret: args.max_median_regret_pct / 100.0,
        max_worst_regret: args.max_worst_regret_pct / 100.0,
        ..defaults
    };
    let stop = install_ctrl_c();
    let mut progress = Progress::new(stop, !args.no_progress && !args.json);
    let report = run_verify(&mut *backend, &doc, &settings, &mut progress).map_err(Error::Input)?;
    progress.finish();
    if args.json {
        write!(out, "{}", report.to_json())?;
    } else {
        write!(out, "{}", report.render())?;
    }
    match (&report.status, report.verdict()) {
        (crate::observe::RunStatus::Interrupted, _) => Ok(Exit::Interrupted),
        (crate::observe::RunStatus::Failed(e), _) => Err(Error::Failed(e.clone())),
        (_, None) => Err(Error::Input(format!(
            "nothing to judge in {}: {}",
            args.toml.display(),
            report
                .nothing_judged
                .as_deref()
                .unwrap_or("no table was measured")
        ))),
        (_, Some(Verdict::Pass)) => Ok(Exit::Ok),
        (_, Some(Verdict::Fail)) => Ok(Exit::RegretTooHigh),
        (_, Some(Verdict::Inconclusive)) => Ok(Exit::Inconclusive),
    }
}
