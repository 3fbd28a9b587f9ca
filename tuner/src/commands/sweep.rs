//! `tuner sweep`: measure, fit, write the TOML and its evidence.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::args::{BackendArgs, FitArgs, KeyArgs};
use super::{Error, Exit, write_file};
use crate::backend::Repetitions;
use crate::evidence::{Evidence, HiddenFinding};
use crate::fit::{FitResult, KeyFit, fit};
use crate::format;
use crate::observe::RunStatus;
use crate::progress::{Progress, install_ctrl_c};
use crate::sweep::{SweepSettings, plan, sweep as run_sweep};
use crate::tuned_file::{
    FitReport, WriteFailure, evidence_file_name, file_stem, test_kind, toml_file_name, write_fitted,
};
use crate::tuned_folder::{check_folder, check_test_destination};
use policy::{Collective, TableKey};

#[derive(clap::Args, Clone, Debug)]
pub struct SweepArgs {
    /// Folder for <arch>-<link>.toml and <arch>-<link>.evidence.json
    /// (default: tuned; required with --synthetic and --loopback, whose
    /// tables describe no GPU platform and must never land in tuned/ by
    /// accident)
    #[arg(long, short, value_name = "FOLDER")]
    pub out: Option<PathBuf>,
    /// Write synthetic or loopback tables even into a folder with real
    /// platforms' tables, or one that policy compiles
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// all_reduce_add_rmsnorm's rows: hidden sizes, comma-separated (each a
    /// multiple of 8 in 64..=16384). The tables are fitted at the first; the
    /// fused keys are swept again at each other one, and the log and the
    /// fused tables' notes say whether their crossovers move (the tables are
    /// keyed by bytes)
    #[arg(long, value_delimiter = ',', default_value = "4096,2048,8192")]
    pub hidden: Vec<usize>,
    /// Timed samples per point in the first round (at least 5)
    #[arg(long, default_value_t = 25)]
    pub samples: u32,
    /// Untimed calls before the samples of each point
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// At each size, the fastest candidate and the runner-up get more rounds,
    /// interleaved, while the interval of their ratio holds the margin
    /// (--margin-pct) and is not known to within it either way…
    /// at most this many at a grid point…
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
            margin: self.fit.margin_pct / 100.0,
            max_remeasure_rounds: self.remeasure_rounds,
            max_probe_rounds: self.probe_rounds,
            ..defaults
        }
    }
}

pub fn sweep(args: &SweepArgs, out: &mut dyn Write) -> Result<Exit, Error> {
    let fit_settings = args.fit.settings()?;
    args.keys.check()?;
    // Only a real platform's measurements may land in tuned/ by default: every
    // file there is compiled into `policy`.
    let refused = |why: &str| Err(Error::Usage(why.to_string()));
    let out_dir = match (&args.out, args.backend.synthetic, args.backend.loopback) {
        (Some(dir), _, _) if dir.as_os_str() == "-" => {
            return refused(
                "--out - is not possible: a sweep writes two files (the TOML and its evidence) into a folder",
            );
        }
        (Some(dir), _, _) => dir.clone(),
        (None, false, false) => PathBuf::from("tuned"),
        (None, true, _) => {
            return refused(
                "--synthetic needs --out: synthetic tables must never replace real ones in tuned/",
            );
        }
        (None, false, true) => {
            return refused(
                "--loopback needs --out: a loopback world validates kernels, not a platform, so its table does not belong in tuned/",
            );
        }
    };
    if args.samples < 5 {
        return Err(Error::Usage("--samples must be at least 5".to_string()));
    }
    check_hidden(&args.hidden)?;
    let mut backend = args.backend.open(fit_settings.memory_budget)?;
    backend.use_hidden(args.hidden[0]);
    let settings = args.settings();
    let plan = plan(&*backend, &settings).map_err(Error::Usage)?;
    let platform = backend.platform();
    let (arch, link) = (platform.arch, platform.link);
    let toml_path = out_dir.join(toml_file_name(arch, link));
    // Everything that could stop the results from being written is checked
    // now, before minutes of measuring.
    let synthetic = platform.backend == "synthetic";
    let kind = test_kind(&platform.backend, link).filter(|_| !args.force);
    prepare(&out_dir, &toml_path, (arch, link), kind, !args.dry_run)?;
    // The model's latencies are not spent: the sweep takes a fraction of this.
    let estimate = format::estimate(plan.estimated_seconds, synthetic);
    writeln!(
        out,
        "{} ({} {}, {} backend): {} keys, {} grid points, {estimate}",
        platform.gpu,
        platform.arch,
        platform.link.name(),
        platform.backend,
        plan.keys.len(),
        plan.grid_points,
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
    if synthetic {
        progress = progress.modelled();
    }
    let started = std::time::Instant::now();
    let outcome = run_sweep(&mut *backend, &settings, &crate::today_utc(), &mut progress)
        .map_err(Error::Usage)?;
    progress.finish();
    // The measuring time, so that a run's log records it (goals are set on it).
    let took = format::duration(started.elapsed().as_secs_f64());
    let mut evidence = outcome.evidence;
    if args.backend.synthetic {
        evidence.settings.seed = Some(args.backend.seed);
    }

    let measured: usize = evidence.keys.iter().map(|k| k.points.len()).sum();
    if outcome.status != RunStatus::Complete {
        // Never overwrite the evidence that belongs to an existing TOML with a
        // partial one.
        let partial = keep_evidence(&evidence, &out_dir, "interrupted")?;
        let kept = format!(
            "kept {measured} points measured in {took} in {}; `tuner fit {} -o {}` derives bands from them",
            partial.display(),
            partial.display(),
            toml_path.display()
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
    let evidence_path = out_dir.join(evidence_file_name(arch, link));
    let result = fit(&evidence, &fit_settings);
    for dropped in &result.skipped {
        writeln!(out, "warning: {}", dropped.warning())?;
    }
    let written = match write_fitted(&evidence, &result, &evidence_path, &toml_path, true) {
        Ok(written) => written,
        Err(failure) => return Err(unwritten(failure, &evidence, &out_dir, &toml_path, &took)),
    };
    write!(
        out,
        "{}",
        FitReport::new(&evidence, &result, &toml_path, &written).render()
    )?;
    writeln!(
        out,
        "wrote {} and {} ({measured} points, measured in {took})",
        toml_path.display(),
        written.evidence_path.display()
    )?;
    if settings
        .collectives
        .contains(&Collective::AllReduceAddRmsNorm)
        && args.hidden.len() > 1
    {
        // The tables are written already, so that a second phase that does
        // not finish leaves them (and their evidence) as a sweep at one
        // hidden size would.
        let Some(found) = other_hidden_sizes(&mut *backend, args, &result.keys, out)? else {
            return Ok(Exit::Interrupted);
        };
        record_hidden_sizes(&mut evidence, &args.hidden, &result.keys, &found);
        let (evidence_path, first_hidden) = (&written.evidence_path, args.hidden[0]);
        rewrite_with_hidden_sizes(
            &evidence,
            &result,
            evidence_path,
            &toml_path,
            first_hidden,
            out,
        )?;
    }
    Ok(Exit::Ok)
}

/// `--hidden`: at least one size, each one kernels take, none twice.
fn check_hidden(hidden: &[usize]) -> Result<(), Error> {
    for (i, &h) in hidden.iter().enumerate() {
        crate::hidden::check(h).map_err(Error::Usage)?;
        if hidden[..i].contains(&h) {
            return Err(Error::Usage(format!("--hidden names {h} twice")));
        }
    }
    if hidden.is_empty() {
        return Err(Error::Usage("--hidden needs a size".to_string()));
    }
    Ok(())
}

/// What the fused keys' bands cost at the other hidden sizes, per key, in
/// the order swept.
type Found = BTreeMap<TableKey, Vec<HiddenFinding>>;

/// The fused keys swept again at each other `--hidden` size, fitted, and
/// compared with `first` (the tables, fitted at the first size): whether
/// the crossovers move ([`crate::hidden`]), in the log and returned once
/// every size is compared; `None` when interrupted (the log says so).
fn other_hidden_sizes(
    backend: &mut dyn crate::backend::Backend,
    args: &SweepArgs,
    first: &[KeyFit],
    out: &mut dyn Write,
) -> Result<Option<Found>, Error> {
    let fit_settings = args.fit.settings()?;
    let fused = SweepSettings {
        collectives: vec![Collective::AllReduceAddRmsNorm],
        ..args.settings()
    };
    let mut progress = Progress::new(install_ctrl_c(), !args.no_progress);
    writeln!(
        out,
        "all_reduce_add_rmsnorm at other hidden sizes (the tables above: hidden {}):",
        args.hidden[0]
    )?;
    let unnoted = unnoted(args.hidden[0]);
    let mut found = Found::new();
    let started = std::time::Instant::now();
    for &hidden in &args.hidden[1..] {
        backend.use_hidden(hidden);
        let outcome =
            run_sweep(backend, &fused, &crate::today_utc(), &mut progress).map_err(Error::Usage)?;
        match outcome.status {
            RunStatus::Complete => {}
            RunStatus::Interrupted => {
                writeln!(out, "interrupted at hidden {hidden}; {unnoted}")?;
                return Ok(None);
            }
            RunStatus::Failed(e) => {
                return Err(Error::Failed(format!("at hidden {hidden}: {e}; {unnoted}")));
            }
        }
        let other = fit(&outcome.evidence, &fit_settings);
        for key in &other.keys {
            let Some(base) = first.iter().find(|k| k.key == key.key) else {
                continue;
            };
            let Some(measured) = outcome.evidence.of_key(key.key) else {
                continue;
            };
            let c = crate::hidden::compare(base, key, measured, hidden, fit_settings.margin);
            writeln!(
                out,
                "  {} hidden {hidden}: {}; {}",
                key.key,
                c.verdict(),
                c.crossovers
            )?;
            found.entry(key.key).or_default().push(c.finding);
        }
    }
    progress.finish();
    // Measured apart from the tables' sweep, so that a run's log says what
    // each phase took.
    let took = crate::format::duration(started.elapsed().as_secs_f64());
    let moved = found
        .values()
        .flatten()
        .filter(|f| matches!(f, HiddenFinding::Moves { .. }))
        .count();
    writeln!(
        out,
        "{}",
        if moved == 0 {
            "at equal bytes the hidden size moves no crossover beyond the margin".to_string()
        } else {
            format!(
                "{moved} key(s) cross elsewhere at another hidden size: the tables hold for hidden {} only",
                args.hidden[0]
            )
        }
    )?;
    writeln!(out, "the other hidden sizes measured in {took}")?;
    Ok(Some(found))
}

/// Records in the evidence of each fused key of `first` (the tables, fitted
/// at `hidden[0]`) what `found` has for it at the other `hidden` sizes, or
/// that it had no usable point there ([`crate::hidden::hidden_sizes`]).
fn record_hidden_sizes(evidence: &mut Evidence, hidden: &[usize], first: &[KeyFit], found: &Found) {
    let fused_tables = evidence.keys.iter_mut().filter(|k| {
        k.collective == Collective::AllReduceAddRmsNorm && first.iter().any(|f| f.key == k.key())
    });
    for key in fused_tables {
        let found = found.get(&key.key()).map_or(&[][..], Vec::as_slice);
        key.hidden = Some(crate::hidden::hidden_sizes(hidden[0], &hidden[1..], found));
    }
}

/// Writes `evidence`, now with what the other hidden sizes found, and the
/// tables fitted from it (`result`: the fit is deterministic, and only the
/// fused tables' notes change) over the files the first write wrote
/// (`evidence_path`, `toml_path`), as it wrote them.
fn rewrite_with_hidden_sizes(
    evidence: &Evidence,
    result: &FitResult,
    evidence_path: &Path,
    toml_path: &Path,
    first_hidden: usize,
    out: &mut dyn Write,
) -> Result<(), Error> {
    // The first write chose an evidence name no table it kept cites; those
    // tables are kept again, citing what they cited, so the name is the same
    // and the tables' citation of their evidence still holds.
    let written = write_fitted(evidence, result, evidence_path, toml_path, true)
        .map_err(|failure| Error::Failed(unrewritten(failure, toml_path, first_hidden)))?;
    debug_assert_eq!(written.evidence_path, evidence_path);
    writeln!(
        out,
        "rewrote {} and {} with the other hidden sizes (the fused tables' notes, their keys' evidence)",
        toml_path.display(),
        evidence_path.display()
    )?;
    Ok(())
}

/// Why the second write failed and where that leaves the files: the TOML of
/// the first write, its evidence either so too or with the other hidden sizes
/// already (`tuner fit` of it then writes the notes).
fn unrewritten(failure: WriteFailure, toml_path: &Path, first_hidden: usize) -> String {
    let unnoted = unnoted(first_hidden);
    match failure.evidence_written {
        None => format!("{}; {unnoted}", failure.error),
        Some(evidence) => format!(
            "{}; {unnoted}, though {} has them: `tuner fit {} -o {}` writes them",
            failure.error,
            evidence.display(),
            evidence.display(),
            toml_path.display()
        ),
    }
}

/// Where a sweep stands when its other hidden sizes are not in the notes.
fn unnoted(first_hidden: usize) -> String {
    format!(
        "the tables (hidden {first_hidden}) are written without the other hidden sizes in their notes"
    )
}

/// Checks, before anything is measured, that the tables of `platform` can
/// be written to `toml_path`: `out_dir` is a folder (created now when
/// `create`) this process can write, whose `*.toml` files `policy-macros`
/// could compile with the new one, with no file at the TOML's path that does
/// not parse; and tables of a `test_kind` (synthetic, loopback) are not
/// headed for a folder of real tables ([`check_test_destination`]).
fn prepare(
    out_dir: &Path,
    toml_path: &Path,
    (arch, link): (policy::Arch, policy::Link),
    test_kind: Option<&str>,
    create: bool,
) -> Result<(), Error> {
    if out_dir.exists() && !out_dir.is_dir() {
        return Err(Error::Usage(format!(
            "--out {} is a file; a sweep writes <arch>-<link>.toml and its evidence into a folder",
            out_dir.display()
        )));
    }
    if let Some(kind) = test_kind {
        check_test_destination(kind, toml_path).map_err(Error::Usage)?;
    }
    check_folder(toml_path, arch, link).map_err(Error::Input)?;
    if create {
        std::fs::create_dir_all(out_dir).map_err(|e| {
            Error::Failed(format!("cannot create folder {}: {e}", out_dir.display()))
        })?;
        writable(out_dir, toml_path)?;
    }
    Ok(())
}

/// Whether files can be created in `folder` and an existing TOML replaced.
fn writable(folder: &Path, toml_path: &Path) -> Result<(), Error> {
    let probe = folder.join(format!(".tuner-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| Error::Failed(format!("cannot write into {}: {e}", folder.display())))?;
    if toml_path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(toml_path)
            .map_err(|e| Error::Failed(format!("cannot replace {}: {e}", toml_path.display())))?;
    }
    Ok(())
}

/// Writes the evidence as `<arch>-<link>.<what>.evidence.json` in `out_dir`,
/// or in the system's temporary folder when `out_dir` takes no file.
fn keep_evidence(evidence: &Evidence, out_dir: &Path, what: &str) -> Result<PathBuf, Error> {
    let name = format!(
        "{}.{what}.evidence.json",
        file_stem(evidence.platform.arch, evidence.platform.link)
    );
    let text = evidence.to_json();
    let first = out_dir.join(&name);
    if std::fs::write(&first, &text).is_ok() {
        return Ok(first);
    }
    let fallback = std::env::temp_dir().join(&name);
    write_file(&fallback, &text)?;
    Ok(fallback)
}

/// The error of a complete sweep whose tables could not be written: the
/// reason, and where the measurements are kept with the command that
/// finishes the job.
fn unwritten(
    failure: WriteFailure,
    evidence: &Evidence,
    out_dir: &Path,
    toml_path: &Path,
    took: &str,
) -> Error {
    let kept = match failure.evidence_written {
        Some(path) => Ok(path),
        None => keep_evidence(evidence, out_dir, "unwritten"),
    };
    let message = failure.error;
    match kept {
        Ok(path) => Error::Failed(format!(
            "{message}\nthe measurements (taken in {took}) are kept in {}; once the problem is fixed, `tuner fit {} -o {}` writes the tables",
            path.display(),
            path.display(),
            toml_path.display()
        )),
        Err(e) => Error::Failed(format!(
            "{message}\nand the measurements could not be kept either: {e}"
        )),
    }
}
