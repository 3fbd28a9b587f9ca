//! Where a worker's time goes, and two watchdogs that keep it from hanging.
//!
//! - Progress lines: `+12.345s what` (seconds since the worker started), printed
//!   on the error path (`error seen`, `dropping`, `dropped`, `exiting`) so that
//!   a GPU log shows which step took the time.
//! - The worker names the step it is in ([`busy`] for steps that must end
//!   within a bound, [`idle`] for the others). A watched step that outlives
//!   its bound means a wait somewhere below has none: the watchdog prints an
//!   `ERROR … kind=error watchdog: …` line naming the step and ends the process
//!   with the error status, so the run fails at once and says where, instead
//!   of hanging until the launcher's deadline.
//! - Once an error has been reported ([`report`]), the worker has
//!   `--exit-bound-ms` to tear down and exit. Past it the watchdog prints the
//!   step it is stuck in and ends the process with the failure's status via
//!   `_exit`: a driver or NCCL call that cannot be bounded (a free or a context
//!   teardown behind a kernel that still waits for the lost peer) must not
//!   keep a survivor alive. `_exit` skips `atexit` handlers, where CUDA's own
//!   teardown could wait for that kernel too; the memory and the kernel go
//!   with the process.

use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::code;
use crate::worker::Failure;

unsafe extern "C" {
    /// POSIX `_exit`: ends the process without running `atexit` handlers.
    fn _exit(status: std::ffi::c_int) -> !;
}

/// The step the worker's main thread is in.
struct Step {
    name: &'static str,
    since: Instant,
    /// Whether the stuck-step watchdog applies.
    watched: bool,
}

struct Watch {
    start: Instant,
    rank: usize,
    /// How long a watched step may take.
    stuck_bound: Duration,
    /// How long teardown may take after an error was reported.
    exit_bound: Duration,
    step: Mutex<Step>,
    /// When the error was reported (the exit watchdog is armed).
    reported_at: Mutex<Option<Instant>>,
    reported: AtomicBool,
    exit_code: AtomicU8,
}

static WATCH: OnceLock<Watch> = OnceLock::new();

/// Starts the clock and the watchdog thread. Later calls do nothing.
pub fn init(rank: usize, stuck_bound: Duration, exit_bound: Duration) {
    let fresh = WATCH
        .set(Watch {
            start: Instant::now(),
            rank,
            stuck_bound,
            exit_bound,
            step: Mutex::new(Step {
                name: "starting",
                since: Instant::now(),
                watched: false,
            }),
            reported_at: Mutex::new(None),
            reported: AtomicBool::new(false),
            exit_code: AtomicU8::new(code::ERROR),
        })
        .is_ok();
    if fresh {
        // A detached thread: it ends with the process.
        let _ = std::thread::Builder::new()
            .name("colltune-watchdog".into())
            .spawn(watchdog);
    }
}

fn stamp(w: &Watch) -> String {
    format!("+{:.3}s", w.start.elapsed().as_secs_f64())
}

/// Prints `+12.345s what`.
pub fn note(what: impl std::fmt::Display) {
    if let Some(w) = WATCH.get() {
        println!("{} {what}", stamp(w));
        let _ = std::io::stdout().flush();
    }
}

fn enter(name: &'static str, watched: bool) {
    if let Some(w) = WATCH.get()
        && let Ok(mut step) = w.step.lock()
    {
        *step = Step {
            name,
            since: Instant::now(),
            watched,
        };
    }
}

/// Enters a step that must end within the stuck bound (a launch, a bounded
/// wait); its clock starts now, also when it is the step the worker was in.
pub fn busy(name: &'static str) {
    enter(name, true);
}

/// Enters a step with no bound of its own here (forming the world, host-side
/// checks, a wait the library bounds by minutes).
pub fn idle(name: &'static str) {
    enter(name, false);
}

/// Whether an error was already reported (its `ERROR` line printed).
pub fn reported() -> bool {
    WATCH
        .get()
        .is_some_and(|w| w.reported.load(Ordering::Relaxed))
}

/// Reports a failure at once: the progress line, then the `ERROR` line the
/// launcher reads, then arms the exit watchdog. Only the first report prints.
pub fn report(f: &Failure) {
    let kind = match f.code {
        code::TIMEOUT => "timeout",
        code::MISMATCH => "mismatch",
        _ => "error",
    };
    let Some(w) = WATCH.get() else {
        println!("ERROR rank=? kind={kind} {}", f.message);
        return;
    };
    if w.reported.swap(true, Ordering::Relaxed) {
        return;
    }
    w.exit_code.store(f.code, Ordering::Relaxed);
    note("error seen");
    println!("ERROR rank={} kind={kind} {}", w.rank, f.message);
    let _ = std::io::stdout().flush();
    if let Ok(mut at) = w.reported_at.lock() {
        *at = Some(Instant::now());
    }
}

/// Prints a last line and ends the process without teardown.
fn end_now(line: String, status: u8) -> ! {
    // Straight to file descriptor 1, not through `std::io::stdout()`: its lock
    // may be held by the stuck main thread (a write into a full pipe), and the
    // exit must not wait for it. Every earlier line was flushed at its newline.
    // SAFETY: fd 1 stays open; ManuallyDrop keeps this handle from closing it.
    let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    let _ = out.write_all(format!("{line}\n").as_bytes());
    // SAFETY: `_exit` takes any status and never returns.
    unsafe { _exit(status.into()) }
}

fn watchdog() {
    let Some(w) = WATCH.get() else { return };
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let (name, since, watched) = match w.step.lock() {
            Ok(step) => (step.name, step.since, step.watched),
            Err(_) => continue,
        };
        let reported_at = w.reported_at.lock().ok().and_then(|at| *at);
        if let Some(at) = reported_at {
            if at.elapsed() > w.exit_bound {
                let status = w.exit_code.load(Ordering::Relaxed);
                end_now(
                    format!(
                        "{} exit watchdog: still in `{name}` {:.3}s after the error was \
                         reported (bound {:?}); _exit({status})",
                        stamp(w),
                        at.elapsed().as_secs_f64(),
                        w.exit_bound
                    ),
                    status,
                );
            }
            continue;
        }
        if watched && since.elapsed() > w.stuck_bound {
            end_now(
                format!(
                    "ERROR rank={} kind=error watchdog: the worker has been in `{name}` for \
                     {:.3}s, past its bound of {:?}: a wait without a bound ({} after start)",
                    w.rank,
                    since.elapsed().as_secs_f64(),
                    w.stuck_bound,
                    stamp(w)
                ),
                code::ERROR,
            );
        }
    }
}
