//! An example engine: it keeps the tables measured on its own GPUs in its own
//! `tuned/` folder, compiles them into `const fn`s with `policy`'s macro, and
//! makes `kernels` dispatch with them.
//!
//! What a real engine copies from here:
//! - `tuned/*.toml`: the engine's tables (`tuner sweep --out tuned/` on its GPUs);
//! - `build.rs`: rebuild when a file is added to `tuned/`;
//! - [`tables`]: `policy::include_tuned!("tuned")`, checked at compile time like
//!   `policy`'s own tables (a gap, an overlap or a violated `[[assert]]` does
//!   not build);
//! - [`init`]: hand the tables to `kernels` once, before the first communicator.

use policy::{Algo, Arch, Collective, DType, Link, Mode, Query};

/// The engine's tables, compiled from `examples/engine/tuned/`: `select`,
/// `capacity`, `table_arch`, `PLATFORMS` and `TABLES`.
pub mod tables {
    policy::include_tuned!("tuned");
}

/// An all-reduce of 24 MiB (a prefill chunk) over 8 H200s, replayed from a
/// CUDA graph.
pub const PREFILL_ALL_REDUCE: Query = Query::new(
    Collective::AllReduce,
    Arch::SM90,
    Link::NvLink,
    8,
    DType::Bf16,
    Mode::Graph,
    24 * 1024 * 1024,
);

/// Chosen by the compiler from the engine's tables: NCCL (the repository's
/// published table would run two-shot pull here).
pub const PREFILL_ALL_REDUCE_ALGO: Algo = tables::select(PREFILL_ALL_REDUCE);

/// Makes every communicator this process builds select from the engine's
/// tables. Call once at start-up, before `kernels::World::…`.
pub fn init() -> Result<(), policy::TablesInUse> {
    policy::use_tables(&tables::TABLES)
}
