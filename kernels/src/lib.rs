//! Custom tensor-parallel collectives (all-reduce, all-gather) compiled at run
//! time with NVRTC, NCCL through cudarc, and one communicator that runs whatever
//! `policy` selects.
//!
//! This crate is the runtime an engine links; measuring (timing, validation
//! against a host reference, the benchmark) lives in the `tuner` crate.
//!
//! Its public face is small: [`World`] builds the ranks of a world (all ranks
//! of a single-process world, or this process's rank of a world of processes:
//! [`World::process`] with a [`ProcessSpec`] and a [`Join`]), [`RankComm`] runs
//! collectives on [`Element`] tensors, chosen by `policy` or forced
//! ([`Select`]), configured by [`Options`], failing with [`Error`].
//! [`RankComm::capture`] returns a [`Captured`] graph, which keeps the rank's
//! resources alive ([`Lifeline`]).
//!
//! Once a rank knows of a fault (a peer that did not arrive, ranks that made
//! different calls, an NCCL error), every later call returns that first fault
//! and launches nothing, and kernels already queued mark their outputs as
//! failed (all bits set) rather than leave stale values: no call returns `Ok`
//! with an output it did not compute after the fault was known.
//!
//! Inside, bottom to top (the shape of cudarc's `sys` → `result` → `safe`),
//! all private:
//! - `ffi`: library presence checks and raw driver calls; `memory`: plain
//!   device allocations; `ipc`: exporting them to and mapping them from other
//!   processes; `peer`: peer access and link detection; `rendezvous`:
//!   exchanging bytes between the processes of a world (NCCL or files);
//! - `module`: the CUDA sources (`kernels/cuda/*.cu`), compiled once per
//!   process, architecture and world size (`CT_WORLD`) and kept on disk
//!   between processes ([`KernelCache`]); `protocol`: pure host
//!   logic (the algorithm registry, buffer layout, counters, decline rules,
//!   launch shapes), unit-tested on the CPU;
//! - `algorithms`: the one launch of a collective kernel (its argument block,
//!   one grid per rank); `nccl`: NCCL;
//! - `comm`: [`World`] and [`RankComm`].
//!
//! Adding an algorithm: ARCHITECTURE.md, "Adding an algorithm".
//!
//! [`raw`] re-exports the few lower pieces the tuner's harness and the GPU
//! tests need (library checks, device and link queries, the NVRTC build).
//!
//! The vocabulary an engine speaks is re-exported here ([`Algo`], [`Mode`],
//! [`DType`], [`Query`], …, and the tables in use: [`use_tables`],
//! [`tables_in_use`]), so `colltune-kernels` is the one dependency an engine
//! needs to run collectives; they are `policy`'s own types, also reachable
//! as [`kernels::policy`](crate::policy). An engine that compiles tables of
//! its own with `include_tuned!` depends on `colltune-policy` too: the
//! macro's code names `::policy`.
//!
//! ```no_run
//! use kernels::{Options, Select, World};
//!
//! # fn main() -> kernels::Result<()> {
//! // Checks the driver and the GPU first: without them, one error that says
//! // which is missing.
//! let ctx = kernels::open_device(0)?;
//! // Two ranks on one GPU (a loopback world); `World::devices` takes one
//! // stream per GPU instead.
//! let ranks = World::loopback(ctx, 2, Options::default())?;
//! let mut tensors = Vec::new();
//! for rank in &ranks {
//!     let input = rank.stream().clone_htod(&[1.0f32; 1024]).expect("upload");
//!     let output = rank.stream().alloc_zeros::<f32>(1024).expect("alloc");
//!     tensors.push((input, output));
//! }
//! // Every rank issues the same call; `policy` picks the algorithm, from the
//! // eager tables here and from the graph tables inside a capture.
//! for (rank, (input, output)) in ranks.iter().zip(&mut tensors) {
//!     let ran = rank.all_reduce(&input.as_view(), &mut output.as_view_mut(), Select::Auto)?;
//!     println!("rank {} ran {}", rank.rank(), ran.name());
//! }
//! for rank in &ranks {
//!     rank.check()?; // waits, and turns a peer that never came into Error::Timeout
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod algorithms;
mod comm;
mod device;
mod drain;
mod element;
mod error;
mod ffi;
mod ipc;
mod memory;
mod module;
mod nccl;
mod peer;
mod protocol;
pub mod raw;
mod rendezvous;
mod selection;
mod vocab;
mod window;

pub use comm::{
    BufferSizing, Captured, DEFAULT_MEMORY_BUDGET, EngineNccl, Fallback, Join, Lifeline, Options,
    ProcessSpec, RankComm, Select, WindowBuffer, World,
};
/// The cudarc this crate was built with (0.19), so that an engine names the
/// same `CudaStream`, `CudaView` and NCCL types that [`RankComm`] takes. Which
/// loading mode and CUDA and NCCL versions it binds is the final binary's
/// choice: see this crate's features and the repository's docs/engine.md.
pub use cudarc;
pub use device::{open_device, visible_gpus};
pub use element::Element;
pub use error::{Error, Result};
pub use module::{KernelCache, KernelOrigin, KernelStartup};
pub use nccl::NcclId;
/// `colltune-policy`, whole: what the re-exports below leave out (the
/// built-in tables' `const fn`s, the override, the tables as data).
pub use policy;
/// The vocabulary of a call and of the tables (`policy`'s own types), and the
/// tables in use: what an engine names to run collectives, from this one
/// dependency.
pub use policy::{
    Algo, AlgoKind, Arch, Capacity, Collective, DType, Link, Mode, Query, TableKey, Tables,
    TablesInUse, tables_in_use, use_tables,
};
pub use protocol::budget::Footprint;
pub use protocol::decline::Decline;
pub use protocol::rows::{HIDDEN_MAX, HIDDEN_MIN, HIDDEN_STEP};
pub use rendezvous::{FileRendezvous, Rendezvous};
pub use selection::table_choice;
