//! The terminal side of a long measurement: a progress bar with ETA, and
//! Ctrl-C handling. The first Ctrl-C asks the sweep to stop after the point in
//! flight (it then writes what it measured); a second one exits at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use policy::{Algo, TableKey};

use crate::format;
use crate::observe::Observer;

/// A progress bar on stderr (hidden when stderr is not a terminal) that also
/// reports a Ctrl-C.
pub struct Progress {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    /// The estimate is the synthetic model's latencies, not this run's time.
    modelled: bool,
}

impl Progress {
    /// `stop` is set by [`install_ctrl_c`].
    pub fn new(stop: Arc<AtomicBool>, visible: bool) -> Progress {
        let target = if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} points, ETA {eta}  {msg}",
            )
            .expect("the template is valid")
            .progress_chars("=> "),
        );
        Progress {
            bar,
            stop,
            modelled: false,
        }
    }

    /// For the synthetic backend: its estimate is the modelled GPUs' time,
    /// which the model does not spend, and is printed as that.
    pub fn modelled(self) -> Progress {
        Progress {
            modelled: true,
            ..self
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Observer for Progress {
    fn started(&mut self, points: u64, estimated_seconds: f64) {
        self.bar.set_length(points);
        // Printed even when the bar is hidden: the estimate is for logs too.
        let estimate = format::estimate(estimated_seconds, self.modelled);
        self.bar.suspend(|| {
            eprintln!(
                "tuner: measuring {points} points, {estimate} (Ctrl-C stops and keeps what was measured)"
            )
        });
    }

    fn key_started(&mut self, key: &TableKey) {
        self.bar.set_message(key.to_string());
    }

    fn point_done(&mut self, key: &TableKey, bytes: u64, _algo: Algo) {
        self.bar
            .set_message(format!("{} {}", key, format::size(bytes)));
        self.bar.inc(1);
    }

    fn points_added(&mut self, count: u64) {
        self.bar.inc_length(count);
    }

    fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Makes Ctrl-C set the returned flag; a second Ctrl-C exits with status 130.
/// SIGTERM and SIGHUP count as Ctrl-C too, so a sweep under `timeout` (or a
/// job scheduler's stop) keeps what it measured instead of losing it all.
/// One flag per process, installed by the first call: a process has one
/// handler, so a later phase of the same command (a sweep's other hidden
/// sizes) stops on the same Ctrl-C.
pub fn install_ctrl_c() -> Arc<AtomicBool> {
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    Arc::clone(STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        // Failing to install (another handler exists) only loses the clean stop.
        let _ = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                eprintln!("\ntuner: interrupted twice, exiting without writing");
                std::process::exit(130);
            }
            eprintln!("\ntuner: stopping after the current point (Ctrl-C again to quit at once)");
        });
        stop
    }))
}
