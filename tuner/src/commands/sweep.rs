//! `tuner sweep`: measure, fit, write the TOML and its evidence.

use std::io::Write;
use std::path::PathBuf;

use super::args::{BackendArgs, FitArgs, KeyArgs};
use super::{Error, Exit, write_file};
use crate::backend::Repetitions;
use crate::commands::fit::fit_and_write;
use crate::format;
use crate::observe::RunStatus;
use crate::progress::{Progress, install_ctrl_c};
use crate::sweep::{SweepSettings, plan, sweep as run_sweep};
use crate::write::{evidence_file_name, file_stem, toml_file_name};

#[derive(clap::Args, Clone, Debug)]
pub struct SweepArgs {
    /// Folder for <arch>-<link>.toml and <arch>-<link>.evidence.json
    /// (default: tuned; required with --synthetic, whose tables must never
    /// land in tuned/ by accident)
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// Timed samples per point in the first round
    #[arg(long, default_value_t = 25)]
    pub samples: u32,
    /// Untimed calls before the samples of each point
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// At each size, the fastest candidate and every one that is neither
    /// significantly slower nor shown to be within ±this many percent of it
    /// get more rounds, interleaved…
    #[arg(long, default_value_t = 3.0, value_name = "PCT")]
    pub remeasure_pct: f64,
    /// …at most this many at a grid point…
    #[arg(long, default_value_t = crate::sweep::DEFAULT_REMEASURE_ROUNDS)]
    pub remeasure_rounds: u32,
    /// …and at most this many at a probe between grid points
    #[arg(long, default_value_t = crate::sweep::DEFAULT_PROBE_ROUNDS)]
    pub probe_rounds: u32,
    #[command(flatten)]
    pub fit: FitArgs,
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Print the plan and the estimated time, measure nothing
    #[arg(long)]
    pub dry_run: bool,
    /// No progress bar
    #[arg(long)]
    pub no_progress: bool,
}

/// The chosen values, or all of them when none was chosen.
fn or_all<T: Clone>(chosen: &[T], all: Vec<T>) -> Vec<T> {
    if chosen.is_empty() {
        all
    } else {
        chosen.to_vec()
    }
}

impl SweepArgs {
    fn settings(&self) -> SweepSettings {
        let defaults = SweepSettings::default();
        SweepSettings {
            collectives: or_all(&self.keys.collectives, defaults.collectives),
            world_sizes: self.keys.world_sizes.clone(),
            dtypes: or_all(&self.keys.dtypes, defaults.dtypes),
            modes: or_all(&self.keys.modes, defaults.modes),
            min_bytes: self.keys.min_bytes,
            max_bytes: self.keys.max_bytes,
            reps: Repetitions {
                samples: self.samples,
                warmup: self.warmup,
            },
            remeasure_threshold: self.remeasure_pct / 100.0,
            max_remeasure_rounds: self.remeasure_rounds,
            max_probe_rounds: self.probe_rounds,
            alpha: self.fit.alpha,
            ..defaults
        }
    }
}

pub fn sweep(args: &SweepArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let fit_settings = args.fit.settings()?;
    // Only a real platform's measurements may land in tuned/ by default: every
    // file there is compiled into `policy`.
    let out_dir = match (&args.out, args.backend.synthetic, args.backend.loopback) {
        (Some(dir), _, _) => dir.clone(),
        (None, false, false) => PathBuf::from("tuned"),
        (None, true, _) => {
            return Err(Error::Input(
                "--synthetic needs --out: synthetic tables must never replace real ones in tuned/"
                    .to_string(),
            ));
        }
        (None, false, true) => {
            return Err(Error::Input(
                "--loopback needs --out: a loopback world validates kernels, not a platform, so its table does not belong in tuned/"
                    .to_string(),
            ));
        }
    };
    if args.samples < 5 {
        return Err(Error::Input("--samples must be at least 5".to_string()));
    }
    let mut backend = args.backend.open()?;
    let settings = args.settings();
    let plan = plan(&*backend, &settings).map_err(Error::Input)?;
    let platform = backend.platform();
    writeln!(
        out,
        "{} ({} {}, {} backend): {} keys, {} grid points, estimated {}",
        platform.gpu,
        platform.arch,
        platform.link.name(),
        platform.backend,
        plan.keys.len(),
        plan.grid_points,
        format::duration(plan.estimated_seconds)
    )?;
    if args.dry_run {
        for key in &plan.keys {
            writeln!(
                out,
                "  {}: {} sizes, {} … {}",
                key.key,
                key.sizes.len(),
                format::size(key.sizes[0]),
                format::size(*key.sizes.last().expect("a grid is never empty"))
            )?;
        }
        return Ok(Exit::Ok);
    }

    let stop = install_ctrl_c();
    let mut progress = Progress::new(stop, !args.no_progress);
    let started = std::time::Instant::now();
    let outcome = run_sweep(&mut *backend, &settings, &crate::today_utc(), &mut progress)
        .map_err(Error::Input)?;
    progress.finish();
    // The measuring time, so that a run's log records it (goals are set on it).
    let took = format::duration(started.elapsed().as_secs_f64());
    let mut evidence = outcome.evidence;
    if args.backend.synthetic {
        evidence.settings.seed = Some(args.backend.seed);
    }

    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Error::Failed(format!("cannot create {}: {e}", out_dir.display())))?;
    let (arch, link) = (evidence.platform.arch, evidence.platform.link);
    let measured: usize = evidence.keys.iter().map(|k| k.points.len()).sum();
    if outcome.status != RunStatus::Complete {
        // Never overwrite the evidence that belongs to an existing TOML with a
        // partial one.
        let partial = out_dir.join(format!(
            "{}.interrupted.evidence.json",
            file_stem(arch, link)
        ));
        write_file(&partial, &evidence.to_json())?;
        let kept = format!(
            "kept {measured} points measured in {took} in {}; `tuner fit {} -o FILE` derives bands from them",
            partial.display(),
            partial.display()
        );
        return match outcome.status {
            RunStatus::Interrupted => {
                writeln!(out, "interrupted: {kept}")?;
                Ok(Exit::Interrupted)
            }
            RunStatus::Failed(e) => Err(Error::Failed(format!("{e}; {kept}"))),
            RunStatus::Complete => unreachable!("checked above"),
        };
    }
    let toml_path = out_dir.join(toml_file_name(arch, link));
    let evidence_path = out_dir.join(evidence_file_name(arch, link));
    let written = fit_and_write(&evidence, &evidence_path, &toml_path, &fit_settings, true)?;
    write!(out, "{}", written.report)?;
    for failed in evidence.failed_checks() {
        writeln!(out, "{}", failed.warning())?;
    }
    writeln!(
        out,
        "wrote {} and {} ({measured} points, measured in {took})",
        toml_path.display(),
        written.evidence_path.display()
    )?;
    Ok(Exit::Ok)
}
