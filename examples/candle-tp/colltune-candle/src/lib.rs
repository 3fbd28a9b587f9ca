//! colltune's collectives on candle tensors.
//!
//! [`Comm`] wraps a rank of colltune's world (`kernels::RankComm`) built on
//! the stream of candle's CUDA device, and takes candle tensors: an engine's
//! collective is one line, on candle's stream, choosing its algorithm from
//! the tables for the mode it is issued in (graph while candle's stream is
//! being captured, eager otherwise), from any thread that holds a `&Comm`.
//!
//! ```ignore
//! use colltune_candle::Comm;
//! use colltune_candle::kernels::{DType, Join, Options, ProcessSpec};
//!
//! let device = candle_core::Device::new_cuda_with_stream(gpu)?;
//! let spec = ProcessSpec::new(rank, world, Join::Nccl(id)).with_dtype(DType::Bf16);
//! let comm = Comm::process(&device, spec, Options::default())?;
//! // … in the model:
//! let hidden = comm.all_reduce(&partial)?;   // [b, h] summed over the ranks
//! let logits = comm.all_gather(&shard)?;     // [1, v / world] → [world, v / world]
//! ```
//!
//! Tensors of bf16, f16 and f32 are taken; other dtypes, CPU tensors and
//! tensors of another stream are refused with an error naming the call. The
//! out-of-place calls make a tensor contiguous first; the in-place ones need
//! it contiguous. Without the `cuda` feature the crate holds only those
//! checks (tested on candle's CPU backend).

// Without CUDA the checks and the ops are built for their tests only.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod host;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod op;

#[cfg(feature = "cuda")]
mod comm;

#[cfg(feature = "cuda")]
pub use comm::Comm;
/// colltune's runtime, so that an engine on candle needs this one crate
/// (and cudarc's features, which the final binary names).
#[cfg(feature = "cuda")]
pub use kernels;
