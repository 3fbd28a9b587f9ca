//! One process per rank, as engines that shard a model run (candle's
//! multiprocess example, mistral.rs): the launcher starts N copies of this
//! program, each forms its rank with `World::process` and runs a few hundred
//! all-reduces of decode-sized tensors, checking every result against a host
//! reference; the launcher compares the ranks' results bit for bit.
//!
//! ```text
//! cargo run --release -p colltune-tuner --example multiprocess -- --world-size 2 [--iters 300]
//!     [--algo policy|nccl|one_shot_push|one_shot_pull|two_shot_pull] [--dtype bf16]
//!     [--gpus auto|shared|one-per-gpu] [--join auto|nccl|files]
//!     [--matrix] [--kill-rank 1 [--kill-mode exit|stall] [--kill-after N]]
//!     [--mismatch dtype] [--fail-window-alloc R] [--split-hosts] [--timeout-ms MS]
//!     [--drain-timeout-ms MS]
//!     [--deadline-s S]
//!     [--exit-bound-ms 1000]
//!     [--soak [--soak-replays 100000] [--check-every 10000] [--sync-every 500]
//!      [--in-flight 8] [--near-wrap [--wrap-margin 5000]]]
//! ```
//!
//! - `--gpus shared` puts every rank on GPU 0 (processes sharing a GPU, joined
//!   through files: NCCL refuses two ranks on one GPU); `one-per-gpu` gives rank
//!   r GPU r and joins through NCCL with a unique id rank 0 creates and shares
//!   through a file, as engines do. `auto` picks `one-per-gpu` when there are
//!   enough GPUs.
//! - `--matrix` runs every algorithm x dtype x eager/graph x collective on a few
//!   sizes instead of the decode loop.
//! - `--kill-rank R` makes rank R leave before its call `--kill-after` (default:
//!   halfway through) (`exit`: the process ends; `stall`: it stays alive but
//!   never calls again). The survivors must end with `Error::Timeout` (or an
//!   NCCL error naming the lost peer); the launcher reports that as the
//!   expected outcome, with the slowest survivor's time, and exits 0.
//! - `--mismatch dtype` makes rank 1 declare another dtype: every rank must
//!   refuse to form the world, naming the field.
//! - `--fail-window-alloc R` (for the tests of the window vote) makes rank R's
//!   `ncclMemAlloc` of the world's NCCL window fail
//!   (`ProcessSpec::with_failing_window_allocation`): every rank must decline
//!   `nccl_symmetric` and the world form at once. Workers compile their
//!   kernels before joining, so the `join_ms` of their `JOINED` line is the
//!   time the world took to form; `window` is its NCCL window's bytes (0:
//!   none).
//! - `--soak` captures one decode-shaped graph (the policy's calls plus one call
//!   forced to every other algorithm, NCCL included) and replays it
//!   `--soak-replays` times, checking every `--check-every` replays against the
//!   host reference and across ranks (see `soak.rs`). With `--kill-rank`, the
//!   rank leaves in the middle of the replays. `--near-wrap` starts every
//!   sequence counter `--wrap-margin` (5 000) below its wrap point so that the
//!   replays cross it.
//!
//! - Workers print `+12.345s …` progress lines on the error path and end
//!   themselves when a step outlives its bound, or when teardown after an
//!   error takes more than `--exit-bound-ms` (`watch.rs`).
//!
//! Exit status: 0 when everything matched (or the requested failure happened as
//! expected), non-zero otherwise. Workers exit with [`code::TIMEOUT`] after a
//! timeout and [`code::MISMATCH`] when the world refused to form.

mod launcher;
mod matrix;
mod soak;
mod watch;
mod worker;

use std::process::ExitCode;

use clap::{Parser, ValueEnum};

/// Exit codes of a worker.
pub mod code {
    pub const OK: u8 = 0;
    pub const WRONG: u8 = 1;
    pub const TIMEOUT: u8 = 3;
    pub const MISMATCH: u8 = 4;
    pub const ERROR: u8 = 5;
}

/// Environment variables the launcher gives each worker.
pub mod env {
    /// Present (= 1) in workers only.
    pub const WORKER: &str = "COLLTUNE_MP_WORKER";
    pub const RANK: &str = "RANK";
    pub const WORLD_SIZE: &str = "WORLD_SIZE";
    /// The GPU ordinal of this rank.
    pub const DEVICE: &str = "COLLTUNE_MP_DEVICE";
    /// The launcher's scratch directory (rendezvous files).
    pub const DIR: &str = "COLLTUNE_MP_DIR";
    /// `nccl` or `files`.
    pub const JOIN: &str = "COLLTUNE_MP_JOIN";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Gpus {
    Auto,
    Shared,
    OnePerGpu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JoinBy {
    Auto,
    Nccl,
    Files,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KillMode {
    Exit,
    Stall,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mismatch {
    Dtype,
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "multiprocess",
    about = "N processes, one rank each: all-reduces checked against a host reference"
)]
pub struct Cli {
    #[arg(long, default_value_t = 2)]
    pub world_size: usize,
    /// All-reduces per rank in the decode loop.
    #[arg(long, default_value_t = 300)]
    pub iters: usize,
    /// `policy` (the tables) or an algorithm to force.
    #[arg(long, default_value = "policy")]
    pub algo: String,
    /// bf16, f16 or f32 (the decode loop).
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    #[arg(long, value_enum, default_value_t = Gpus::Auto)]
    pub gpus: Gpus,
    #[arg(long = "join", value_enum, default_value_t = JoinBy::Auto)]
    pub join_by: JoinBy,
    /// Every algorithm x dtype x eager/graph x collective instead of the loop.
    #[arg(long)]
    pub matrix: bool,
    /// Graph replays per matrix case.
    #[arg(long, default_value_t = 10)]
    pub replays: usize,
    #[arg(long)]
    pub kill_rank: Option<usize>,
    #[arg(long, value_enum, default_value_t = KillMode::Exit)]
    pub kill_mode: KillMode,
    /// The call before which the killed rank leaves (default: half the iterations).
    #[arg(long)]
    pub kill_after: Option<usize>,
    #[arg(long, value_enum)]
    pub mismatch: Option<Mismatch>,
    /// For tests: rank R's allocation of the world's NCCL window fails.
    #[arg(long, value_name = "R")]
    pub fail_window_alloc: Option<usize>,
    /// For tests: every rank says it runs on a host of its own, so the world
    /// spans "hosts" (an NCCL-only world).
    #[arg(long)]
    pub split_hosts: bool,
    /// Bound on every device-side wait, in ms (default: `Options::default()`).
    /// Outside `--soak` it bounds the host-side drain too (every call is
    /// checked at once, so a drain covers one call), unless
    /// `--drain-timeout-ms` says otherwise.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Bound on `check()`'s wait for the stream to drain, in ms: what ends a
    /// wait on NCCL work whose peer never calls (default: see `--timeout-ms`).
    #[arg(long)]
    pub drain_timeout_ms: Option<u64>,
    /// Replay one captured decode-shaped graph instead of the decode loop.
    #[arg(long)]
    pub soak: bool,
    /// Graph replays of the soak.
    #[arg(long, default_value_t = 100_000)]
    pub soak_replays: usize,
    /// Replays between two checks against the host reference (a window).
    #[arg(long, default_value_t = 10_000)]
    pub check_every: usize,
    /// Replays between two `check()` calls inside a window.
    #[arg(long, default_value_t = 500)]
    pub sync_every: usize,
    /// Start every sequence counter just below its wrap point
    /// (`Options::sequence_start = u64::MAX - --wrap-margin`).
    #[arg(long)]
    pub near_wrap: bool,
    /// How far below `u64::MAX` `--near-wrap` starts the counters. Every
    /// algorithm runs at least once per replay, so a margin below the number
    /// of replays makes every counter cross the wrap.
    #[arg(long, default_value_t = 5_000)]
    pub wrap_margin: u64,
    /// Graph replays the soak keeps queued: before each launch it waits
    /// (bounded) for the replay this many launches back. A launch into a full
    /// stream queue blocks in the driver without a bound.
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
    /// After a worker reported an error, how long it may take to tear down
    /// and exit before its watchdog ends it with `_exit` (see `watch.rs`).
    #[arg(long, default_value_t = 1000)]
    pub exit_bound_ms: u64,
    /// Bound on the whole run, in seconds; the launcher kills what is left.
    #[arg(long, default_value_t = 300)]
    pub deadline_s: u64,
    /// Every call of the decode loop all-reduces this many elements instead of
    /// the decode shapes (e.g. 8388608 bf16 elements = 16 MiB, to profile one
    /// size).
    #[arg(long)]
    pub elements: Option<usize>,
    /// Runs this rank's worker under `--wrap-with` (a profiler on one rank of a
    /// world of processes: the other ranks run unprofiled, so a profiler that
    /// serialises its process's launches cannot stall the collective).
    #[arg(long, requires = "wrap_with")]
    pub wrap_rank: Option<usize>,
    /// The command line that runs the `--wrap-rank` worker, split on
    /// whitespace, e.g. "ncu --clock-control none -k regex:two_shot --launch-count 1".
    #[arg(long, requires = "wrap_rank")]
    pub wrap_with: Option<String>,
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread exists. Workers inherit
    // the launcher's environment and check it again.
    if let Err(why) = unsafe { kernels::raw::keep_multicast_off() } {
        eprintln!("multiprocess: {why}");
        return ExitCode::from(code::ERROR);
    }
    let cli = Cli::parse();
    let code = if std::env::var_os(env::WORKER).is_some() {
        worker::run(&cli)
    } else {
        launcher::run(&cli)
    };
    ExitCode::from(code)
}
