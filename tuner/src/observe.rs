//! Watching a long measurement (a sweep or a verification) while it runs: the
//! progress bar and Ctrl-C implement [`Observer`]; tests use [`Quiet`].

use policy::{Algo, TableKey};

/// Follows a sweep or a verification as it runs (progress bar, Ctrl-C).
pub trait Observer {
    /// About `points` (size, algorithm) points will be measured, taking about
    /// `estimated_seconds`.
    fn started(&mut self, _points: u64, _estimated_seconds: f64) {}
    fn key_started(&mut self, _key: &TableKey) {}
    /// One (size, algorithm) point was verified and measured (or refused).
    fn point_done(&mut self, _key: &TableKey, _bytes: u64, _algo: Algo) {}
    /// Bisection added this many points to the work.
    fn points_added(&mut self, _count: u64) {}
    /// Polled between points: true stops the sweep cleanly.
    fn should_stop(&self) -> bool {
        false
    }
}

/// An observer that watches nothing.
pub struct Quiet;

impl Observer for Quiet {}

/// How a sweep or a verification ended.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Complete,
    /// Stopped by the observer (Ctrl-C).
    Interrupted,
    /// Stopped by a backend error while measuring.
    Failed(String),
}

impl RunStatus {
    /// Stopped because measuring `algo` at `bytes` for `key` failed.
    pub fn failed(key: TableKey, algo: Algo, bytes: u64, error: &impl std::fmt::Display) -> Self {
        RunStatus::Failed(format!("{key} {} at {bytes} bytes: {error}", algo.name()))
    }
}
