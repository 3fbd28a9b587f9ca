//! Which implementation runs each tensor-parallel collective: `const fn` tables
//! generated at compile time from `tuned/*.toml` (see `tuned/README.md`).
//!
//! ```
//! use policy::{Algo, Arch, Collective, DType, Link, Mode, Query};
//!
//! const DECODE_ALL_REDUCE: Query = Query {
//!     collective: Collective::AllReduce,
//!     arch: Arch::SM80,
//!     link: Link::NvLink,
//!     world_size: 8,
//!     dtype: DType::Bf16,
//!     mode: Mode::Graph,
//!     bytes: 448 * 1024,
//! };
//! // Decided by the compiler; also callable at run time.
//! const CHOSEN: Algo = policy::select(DECODE_ALL_REDUCE);
//! assert!(CHOSEN.is_custom());
//! ```
//!
//! # What is generated
//!
//! - [`select`]`(q) -> Algo`: constant-array lookups: the (link, table arch) and
//!   (collective, world size, dtype, mode) give a table index, and the band is
//!   found by counting, without branches, the band edges below `q.bytes`
//!   (≈4 ns per query; a `match` with an `if` chain measured ≈12 ns);
//! - [`table_arch`]`(arch, link)`: which platform file answers a query;
//! - [`capacity`]`(arch, link, collective, algo)`: the buffer size and alignment
//!   a custom algorithm needs there (`kernels` sizes its buffers from this);
//! - [`PLATFORMS`]: the tables as data.
//!
//! Compile-time checks (`const _: () = assert!(…)`) prove for the generated code
//! that every band edge `b` selects the lower band at `b` and the upper at
//! `b + 1`, every size has an algorithm, every custom band fits its capacity and
//! alignment, every `[[assert]]` of the files holds, and queries with no table
//! select NCCL.
//!
//! # Architectures with no table
//!
//! A query's `(arch, link)` is answered by the file with exactly that arch and
//! link; otherwise by the file with the same link and the same major compute
//! capability whose minor is the highest one not above the query's (sm103 uses
//! sm100; sm87 uses sm86, or sm80 when there is no sm86); otherwise by none.
//! With no file, or no table in it for (collective, world size, dtype, mode),
//! [`select`] gives [`Algo::Nccl`] and [`capacity`] gives [`default_capacity`].
//! A different major version is never borrowed: its kernels and crossovers differ
//! too much to guess.
//!
//! # Forcing an algorithm
//!
//! [`Policy::from_env`] reads `COLLTUNE_ALGO` (e.g. `one_shot_pull`, or
//! `all_reduce=two_shot_pull,all_gather=nccl`); [`Policy::select`] applies it
//! before the tables. See [`Policy`] for the syntax; a malformed
//! value is an [`OverrideError`] listing the valid names, never silently ignored.
//!
//! # Byte sizes
//!
//! `Query::bytes` is the size of the collective's OUTPUT: for all-reduce the
//! tensor, for all-gather the gathered tensor (world size × each rank's input).

// The generated code names everything `::policy::…` so that other crates can
// invoke the macro too; this makes those paths resolve inside `policy` itself.
extern crate self as policy;

mod overrides;
mod platforms;

pub use overrides::{OVERRIDE_ENV, OverrideError, Policy};
pub use platforms::{BandInfo, CapacityInfo, PlatformInfo, TableInfo};
pub use tuned_schema::{
    Algo, Arch, Capacity, Collective, DEFAULT_ALIGN, DType, Link, Mode, Query, default_capacity,
};

policy_macros::include_tuned!("../tuned");
