//! Measuring and checking collectives on real GPUs, through `kernels`' public
//! communicator: the GPU backend of the sweep, `tuner bench` and the GPU tests
//! all run on it.
//!
//! - [`timing`]: CUDA-event timing of forced calls, one thread per rank, its
//!   set-up kept between rounds at one size ([`timing::TimingCache`]), plus
//!   what the platform is ([`timing::gpu_stack`], [`timing::discover`]);
//! - [`validation`]: inputs sprinkled with special values and the f64 host
//!   reference every result is checked against;
//! - [`concurrent`]: driving every rank of a single-process world at once;
//! - [`world`]: a world built again after it breaks.

pub mod concurrent;
pub mod timing;
pub mod validation;
pub mod world;
