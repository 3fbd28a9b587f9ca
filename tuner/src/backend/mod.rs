//! Where timings come from. The sweep, `verify` and the tests see only the
//! [`Backend`] trait; `gpu` implements it on real devices through `kernels`,
//! `synthetic` with a seeded latency model for machines without a GPU.

use policy::{Algo, Arch, CapacityEntry, Collective, Link, TableKey};

use crate::grid;
use crate::memory::Budget;

#[cfg(feature = "gpu")]
pub mod gpu;
pub mod synthetic;

/// What a backend measures on, for the evidence's provenance and the TOML's
/// `[platform]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PlatformDesc {
    pub arch: Arch,
    pub link: Link,
    /// Marketing name as the driver reports it, e.g. "NVIDIA H200".
    pub gpu: String,
    /// `gpu` or `synthetic`.
    pub backend: String,
    pub driver: Option<String>,
    pub cuda: Option<String>,
    pub nccl: Option<String>,
    pub host: Option<String>,
    /// What each custom algorithm takes here; NCCL takes everything and is not
    /// listed.
    pub capacities: Vec<CapacityEntry>,
}

/// How much to time one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repetitions {
    /// Timed samples returned.
    pub samples: u32,
    /// Untimed calls (or graph replays) before the first sample.
    pub warmup: u32,
}

/// The outcome of a validation (a check against the reference) that found
/// nothing wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validated {
    /// Every rank's output matched the reference.
    Yes,
    /// Not checked: the size is above the backend's validation limit.
    Skipped,
}

/// A backend could not do what was asked (a wrong result, a CUDA error, a
/// timeout). The message is for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendError(pub String);

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BackendError {}

pub trait Backend {
    fn platform(&self) -> PlatformDesc;

    /// World sizes this backend can form, ascending.
    fn world_sizes(&self) -> Vec<u32>;

    /// The memory budget per rank its worlds are built within (`None`:
    /// unbounded).
    fn memory_budget(&self) -> Option<Budget> {
        None
    }

    /// What each custom algorithm takes in a world of `world_size`: the
    /// platform's capacities, capped as [`Backend::memory_budget`] caps them.
    fn capacities(&self, world_size: u32) -> Vec<CapacityEntry> {
        let platform = self.platform();
        match self.memory_budget() {
            Some(budget) => budget
                .capped(&platform.capacities, platform.link, world_size)
                .unwrap_or_default(),
            None => platform.capacities,
        }
    }

    /// What every measured size of `key` is a multiple of: the kernels'
    /// alignment ([`grid::alignment`]) and, for the fused all-reduce + add +
    /// RMSNorm, whole rows of the hidden size this backend calls it with
    /// ([`Backend::row_bytes`]).
    fn size_step(&self, key: TableKey) -> u64 {
        let align = grid::alignment(
            &self.capacities(key.world_size),
            key.collective,
            key.world_size,
        );
        grid::lcm(align, self.row_bytes(key).max(1))
    }

    /// Makes the fused all-reduce + add + RMSNorm's calls rows of `hidden`
    /// elements from now on. A backend that models bytes alone (synthetic)
    /// has no rows and ignores it.
    fn use_hidden(&mut self, _hidden: usize) {}

    /// The bytes of one row of `key`'s calls: the hidden size times the
    /// element for the fused all-reduce + add + RMSNorm on a backend that
    /// calls kernels; 1 (no rows) otherwise.
    fn row_bytes(&self, _key: TableKey) -> u64 {
        1
    }

    /// Algorithms that can run a `collective` of `bytes` over `world_size`
    /// ranks: the collective's fallback, and every custom algorithm whose capacity in that world
    /// ([`Backend::capacities`]) and alignment accept the size.
    fn candidates(&self, collective: Collective, world_size: u32, bytes: u64) -> Vec<Algo> {
        grid::candidates(&self.capacities(world_size), collective, world_size, bytes)
    }

    /// Runs `algo` once on seeded data and compares every rank's output with a
    /// reference. `Err` says what differed (or why the kernel declined the
    /// size); `Skipped` when the backend does not check sizes this large.
    fn validate(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
    ) -> Result<Validated, BackendError>;

    /// Per-call times in µs (the maximum over ranks), one per sample.
    fn measure(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> Result<Vec<f64>, BackendError>;

    /// Roughly how many seconds of wall time verifying and measuring one point
    /// takes, for the estimate printed before a sweep starts.
    fn estimated_point_seconds(
        &self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> f64;
}
