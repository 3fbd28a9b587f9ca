//! Custom tensor-parallel collectives (all-reduce, all-gather) compiled at run
//! time with NVRTC, NCCL through cudarc, and one communicator that runs whatever
//! `policy` selects.
//!
//! Layers, bottom to top (the shape of cudarc's `sys` → `result` → `safe`):
//! - [`ffi`]: library presence checks and raw driver calls; [`memory`]: plain
//!   device allocations; [`ipc`]: exporting them to and mapping them from other
//!   processes; [`peer`]: peer access and link detection; [`rendezvous`]:
//!   exchanging bytes between the processes of a world (NCCL or files);
//! - [`module`]: the CUDA sources (`kernels/cuda/*.cu`), compiled once per
//!   process, architecture and world size (`CT_WORLD`); [`protocol`]: pure host logic (buffer layout,
//!   counters, decline rules, launch shapes), unit-tested on the CPU;
//! - [`algorithms`]: the one launch of a collective kernel (its argument
//!   block, one grid per rank); `nccl`: NCCL;
//! - [`comm`]: [`World`] builds ranks (all ranks of a single-process world, or
//!   this process's rank of a world of processes: [`World::process`]),
//!   [`RankComm`] runs collectives;
//! - [`timing`]: measurement and verification for the tuner and the bench.
//!
//! ```no_run
//! use cudarc::driver::CudaContext;
//! use kernels::{Mode, Options, Select, World};
//!
//! # fn main() -> kernels::Result<()> {
//! let ctx = CudaContext::new(0).expect("a GPU");
//! // Two ranks on one GPU (a loopback world); `World::devices` takes one
//! // stream per GPU instead.
//! let mut ranks = World::loopback(ctx, 2, Options::default())?;
//! let mut tensors = Vec::new();
//! for rank in &ranks {
//!     let input = rank.stream().clone_htod(&[1.0f32; 1024]).expect("upload");
//!     let output = rank.stream().alloc_zeros::<f32>(1024).expect("alloc");
//!     tensors.push((input, output));
//! }
//! // Every rank issues the same call; `policy` picks the algorithm.
//! for (rank, (input, output)) in ranks.iter_mut().zip(&mut tensors) {
//!     let ran = rank.all_reduce(&input.as_view(), &mut output.as_view_mut(), Select::Policy(Mode::Eager))?;
//!     println!("rank {} ran {}", rank.rank(), ran.name());
//! }
//! for rank in &ranks {
//!     rank.check()?; // waits, and turns a peer that never came into Error::Timeout
//! }
//! # Ok(()) }
//! ```

pub mod algorithms;
pub mod comm;
pub mod concurrent;
mod drain;
pub mod element;
pub mod error;
pub mod ffi;
pub mod ipc;
pub mod memory;
pub mod module;
mod nccl;
pub mod peer;
pub mod protocol;
pub mod rendezvous;
mod selection;
pub mod timing;
pub mod validation;
pub mod vocab;

pub use comm::{Fallback, Join, Options, ProcessSpec, RankComm, Select, World};
pub use element::Element;
pub use error::{Error, Result};
pub use nccl::{NcclId, nccl_version};
pub use protocol::decline::Decline;
pub use rendezvous::{FileRendezvous, Rendezvous};
pub use selection::table_choice;
pub use vocab::{Algo, Arch, Capacity, Collective, DType, Link, Mode, Query};
