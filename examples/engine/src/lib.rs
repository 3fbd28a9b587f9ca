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
//! - [`init`]: hand the tables to `kernels` once, before the first communicator;
//! - each collective is one line, `rank.all_reduce(&x, &mut y, Select::Auto)`,
//!   which reads the eager table, or the graph table when the call is being
//!   captured (`tests/gpu_world.rs`, on a GPU).
//!
//! The vocabulary comes from `kernels` (the one dependency an engine that
//! runs `policy`'s own tables needs); this engine also depends on `policy`
//! because `include_tuned!`'s code names `::policy`.

use kernels::{Algo, Arch, Collective, DType, Link, Mode, Query};

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

/// The bytes of the all-reduce `tests/gpu_world.rs` makes on two ranks
/// sharing one H200 (a loopback world), where the engine's eager and graph
/// tables differ ([`loopback_all_reduce`]).
pub const LOOPBACK_BYTES: u64 = 64 * 1024;

/// That all-reduce, of f32, issued in `mode`.
pub const fn loopback_all_reduce(mode: Mode) -> Query {
    Query::new(
        Collective::AllReduce,
        Arch::SM90,
        Link::Loopback,
        2,
        DType::F32,
        mode,
        LOOPBACK_BYTES,
    )
}

/// Makes every communicator this process builds select from the engine's
/// tables. Call once at start-up, before `kernels::World::…`.
pub fn init() -> Result<(), kernels::TablesInUse> {
    kernels::use_tables(&tables::TABLES)
}
