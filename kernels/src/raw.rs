//! The layers under the communicator, for the tuner's measuring harness and
//! the GPU tests; an engine needs none of this.
//!
//! Nothing here is needed to run a collective: [`crate::World`] and
//! [`crate::RankComm`] are the runtime. What the harness needs besides them:
//!
//! - library presence ([`require_driver`], [`require_nvrtc`], [`require_nccl`],
//!   [`nccl_present`]) and versions ([`driver_cuda_version`], [`nccl_version`]);
//! - NVLink multicast kept off in colltune's own programs, never by the
//!   library itself ([`keep_multicast_off`] first thing in their `main`,
//!   [`require_multicast_off`] in the GPU tests, [`NVLS_ENV`],
//!   [`nvls_decision`]);
//! - what a GPU is ([`arch_of`], [`sm_count`]), how two GPUs reach each
//!   other ([`pair_link`], [`PairLink`], [`Reach`]) and which link a world of
//!   them forms ([`world_link`], the rule every world of `kernels` follows);
//! - the wire rules a host reference must mirror ([`MAX_WORLD`],
//!   [`replace_sentinel_words`], and how each algorithm applies it:
//!   [`sentinel_rule`], [`SentinelRule`]) and the launch shape a rank reports
//!   ([`LaunchShape`]);
//! - the NVRTC build of the CUDA sources ([`compile_for`],
//!   [`compile_specialisation`], [`entry_names`], [`world_specialisations`]),
//!   which the compile test checks for every architecture, and its cache
//!   ([`Obtained`], [`nvrtc_compiles`], [`CACHE_DIR_ENV`]);
//! - [`DriverContext`], which names the step a CUDA driver call failed in, and
//!   [`fnv1a`], the hash the world's handshake uses.

pub use crate::comm::{arch_of, sm_count};
pub use crate::error::DriverContext;
pub use crate::ffi::{
    NVLS_ENV, driver_cuda_version, keep_multicast_off, nccl_present, nvls_decision, require_driver,
    require_multicast_off, require_nccl, require_nvrtc,
};
pub use crate::module::{
    CACHE_DIR_ENV, CompiledKernels, Obtained, compile_for, compile_specialisation, entry_names,
    nvrtc_compiles, world_specialisations,
};
pub use crate::nccl::{call_stats as nccl_call_stats, nccl_version};
pub use crate::peer::{PairLink, pair_link};
pub use crate::protocol::digest::fnv1a;
pub use crate::protocol::launch::LaunchShape;
pub use crate::protocol::reach::{Reach, world_link};
pub use crate::protocol::registry::{SentinelRule, sentinel_rule};
pub use crate::protocol::{MAX_WORLD, replace_sentinel_words};
