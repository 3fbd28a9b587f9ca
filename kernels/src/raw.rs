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
//!   [`require_multicast_off`] in the GPU tests, [`NVLS_ENV`]);
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
//!   ([`Obtained`], [`nvrtc_compiles`]);
//! - [`DriverContext`], which names the step a CUDA driver call failed in, and
//!   [`fnv1a`], the hash the world's handshake uses;
//! - the memory a world registers for given capacities and how a budget caps
//!   them ([`memory_plan`], [`Registers`]), which the tuner's sweep and fit
//!   apply as worlds do.

pub use crate::comm::{arch_of, sm_count};
pub use crate::error::DriverContext;
pub use crate::ffi::{
    NVLS_ENV, driver_cuda_version, keep_multicast_off, nccl_present, require_driver,
    require_multicast_off, require_nccl, require_nvrtc,
};
pub use crate::module::{
    CompiledKernels, Obtained, compile_for, compile_specialisation, entry_names, nvrtc_compiles,
    world_specialisations,
};
pub use crate::nccl::{call_stats as nccl_call_stats, nccl_version};
pub use crate::peer::{PairLink, pair_link};
pub use crate::protocol::budget::Registers;
pub use crate::protocol::digest::fnv1a;
pub use crate::protocol::launch::LaunchShape;
pub use crate::protocol::reach::{Reach, world_link};
pub use crate::protocol::registry::{SentinelRule, sentinel_rule};
pub use crate::protocol::{MAX_WORLD, replace_sentinel_words};

/// What a world that registers `registers` and asks for `capacity_of(c, a)`
/// for each custom (collective, algorithm) pair allocates per rank within
/// `budget` (`None`: unbounded), as [`World`](crate::World)s plan it: the
/// common cap the budget puts on every capacity (`None`: none needed) and
/// the footprint. An error only without a budget, for capacities too large
/// to plan.
pub fn memory_plan(
    capacity_of: impl Fn(policy::Collective, policy::Algo) -> policy::Capacity,
    registers: Registers,
    budget: Option<u64>,
) -> Result<(Option<u64>, crate::protocol::budget::Footprint), String> {
    let caps = crate::protocol::layout::Capacities::from_fn(capacity_of);
    crate::protocol::budget::plan(&caps, registers, budget).map(|p| (p.cap, p.footprint))
}

/// What a world of `world` ranks on `(arch, link)` built with `options`
/// plans per rank, from the tables in use and the `COLLTUNE_ALGO` override
/// as the world reads them: the cap its memory budget puts on every
/// capacity (`None`: none) and its footprint (the NCCL window as planned). A
/// loopback world as [`World::loopback`](crate::World::loopback) builds it,
/// any other as [`World::devices`](crate::World::devices) builds one whose
/// GPUs reach each other.
pub fn world_memory(
    arch: policy::Arch,
    link: policy::Link,
    world: usize,
    options: &crate::Options,
) -> crate::Result<(Option<u64>, crate::protocol::budget::Footprint)> {
    let selector = crate::selection::Selector::from_env()?;
    let loopback = link == policy::Link::Loopback;
    let registers = Registers {
        world,
        kernels: true,
        reference: loopback && world > 1,
        window: !loopback || world == 1,
    };
    crate::comm::plan_memory(&selector, arch, link, registers, options)
        .map(|p| (p.cap, p.footprint))
}
