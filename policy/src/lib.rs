//! Which implementation runs each tensor-parallel collective: `const fn` tables
//! generated at compile time from `tuned/*.toml` (see `tuned/README.md`).
//!
//! ```
//! use policy::{Algo, Arch, Collective, DType, Link, Mode, Query, TableKey};
//!
//! // What the call is (the table that answers it), then where and how large.
//! const TP8_ALL_REDUCE: TableKey = TableKey {
//!     collective: Collective::AllReduce,
//!     world_size: 8,
//!     dtype: DType::Bf16,
//!     mode: Mode::Graph,
//! };
//! const DECODE_ALL_REDUCE: Query = TP8_ALL_REDUCE.query(Arch::SM80, Link::NvLink, 448 * 1024);
//! // Decided by the compiler; also callable at run time.
//! const CHOSEN: Algo = policy::select(DECODE_ALL_REDUCE);
//! assert!(CHOSEN.is_custom());
//! ```
//!
//! # What is generated
//!
//! - [`select`]`(q) -> Algo`: constant-array lookups: the (link, table arch)
//!   and the query's [`TableKey`] (`q.key`: collective, world size, dtype, mode) give a
//!   table index, and the band is found by counting, without branches, the
//!   band edges below `q.bytes`, so its cost does not depend on the mix of
//!   queries (the `select` benchmark times it);
//! - [`table_arch`]`(arch, link)`: which platform file answers a query;
//! - [`capacity`]`(arch, link, collective, algo)`: the buffer size and alignment
//!   a custom algorithm needs there (`kernels` sizes its buffers from this);
//! - [`PLATFORMS`]: the tables as data.
//!
//! Compile-time checks (`const _: () = assert!(…)`) prove for the generated code
//! that every band edge `b` selects the lower band at `b` and the upper at
//! `b + 1`, every size has an algorithm, every custom band fits its capacity and
//! alignment, every `[[assert]]` of the files holds, and queries with no table
//! select their collective's fallback.
//!
//! # Architectures with no table
//!
//! A query's `(arch, link)` is answered by the file with exactly that arch and
//! link; otherwise by the file with the same link and the same major compute
//! capability whose minor is the highest one not above the query's (sm103 uses
//! sm100; sm87 uses sm86, or sm80 when there is no sm86); otherwise by none.
//! With no file, or no table in it for (collective, world size, dtype, mode),
//! [`select`] gives the collective's fallback ([`Collective::fallback`]:
//! [`Algo::Nccl`], or [`Algo::Unfused`] for the fused all-reduce + add +
//! RMSNorm) and [`capacity`] gives [`default_capacity`].
//! A different major version is never borrowed: its kernels and crossovers differ
//! too much to guess. The rule is written once, as [`Arch::answered_by`];
//! the generated code and the interpreter are derived from it.
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
//! tensor, for all-gather the gathered tensor (world size × each rank's input),
//! for the fused all-reduce + add + RMSNorm each rank's input (tokens × hidden
//! × element size).
//! [`Collective::output_size`] and [`Collective::per_rank_size`] convert
//! between a rank's input and the output.
//!
//! # Which tables are built in
//!
//! The tables above come from the `tuned/` folder inside this package. In the
//! colltune repository that folder is a symbolic link to the repository's
//! `tuned/`, the one place the tables are edited; `cargo package` follows the
//! link, so the published crate carries the same files as plain files and
//! builds with nothing outside it.
//!
//! # An engine's own tables
//!
//! An engine that measured its own GPUs keeps its `tuned/` folder in its own
//! repository and compiles it with the same macro, into a module of its own
//! crate. It gets the same `const fn`s and the same compile-time checks, and a
//! [`Tables`] value to hand to `kernels`:
//!
//! ```no_run
//! // In the engine's crate, which needs only `policy` as a dependency.
//! use policy::{Algo, Arch, Collective, DType, Link, Mode, Query};
//!
//! pub mod tables {
//!     // Relative to the engine's Cargo.toml. Defines `select`, `capacity`,
//!     // `table_arch`, `PLATFORMS` and `static TABLES: policy::Tables` here.
//!     policy::include_tuned!("tuned");
//! }
//!
//! const DECODE: Query = Query::new(
//!     Collective::AllReduce,
//!     Arch::SM90,
//!     Link::NvLink,
//!     8,
//!     DType::Bf16,
//!     Mode::Graph,
//!     16 * 1024,
//! );
//! // Decided at compile time from the engine's files.
//! const DECODE_ALGO: Algo = tables::select(DECODE);
//!
//! fn main() {
//!     // Once, before the first communicator: `kernels` selects and sizes its
//!     // buffers with these tables from now on (instead of `policy`'s own).
//!     policy::use_tables(&tables::TABLES).expect("no other tables in use yet");
//!     // … kernels::World::devices(…), rank.all_reduce(…) …
//! }
//! ```
//!
//! and a `build.rs` with `println!("cargo:rerun-if-changed=tuned");`, so that
//! adding a file to the folder rebuilds the crate (edits of existing files are
//! tracked without it). [`use_tables`] refuses to switch once a dispatcher has
//! settled on tables ([`tables_in_use`]); the built-in [`select`] and
//! [`capacity`] keep answering from `policy`'s own files. The workspace's
//! `examples/engine` crate is a complete, tested example.

#![warn(missing_docs)]

// The generated code names everything `::policy::…` so that other crates can
// invoke the macro too; this makes those paths resolve inside `policy` itself.
extern crate self as policy;

mod overrides;
mod platforms;
mod tables;

pub use overrides::{OVERRIDE_ENV, OverrideError, Policy};
pub use platforms::{PlatformInfo, TableInfo};
/// Compiles a folder of `*.toml` tables into `select`, `capacity`,
/// `table_arch`, `PLATFORMS` and `TABLES` in the invoking module, with the same
/// checks as `policy`'s own; see [An engine's own tables](crate#an-engines-own-tables).
pub use policy_macros::include_tuned;
pub use tables::{Tables, TablesInUse, tables_in_use, use_tables};
/// When a custom algorithm refuses a call (which then runs on the collective's
/// fallback): the rule `kernels` applies after [`select`].
pub use tuned_schema::decline;
pub use tuned_schema::{
    Algo, AlgoKind, Arch, Band, Capacity, CapacityEntry, Collective, DEFAULT_ALIGN, DType,
    HIDDEN_MAX, HIDDEN_MIN, HIDDEN_STEP, Link, Mode, PACK_BYTES, Query, TableKey, default_capacity,
};

// `tuned` is inside this package so that the published crate carries it; in
// the repository it links to the repository's `tuned/` (see the crate docs).
policy_macros::include_tuned!("tuned");
