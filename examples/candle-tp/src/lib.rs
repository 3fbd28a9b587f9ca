//! `candle-tp`: tensor-parallel Llama decode on candle, one process per GPU,
//! with the collectives of NCCL or of colltune's `kernels` (chosen by
//! `policy`), eagerly and as CUDA graphs. See README.md beside this crate.
//!
//! The modules below the launcher and the worker are plain host code, tested
//! on the CPU: the model shapes (`config`), the Megatron split (`plan`), the
//! weights (`weights`), the rank model itself on candle's CPU backend
//! (`model`, against a one-rank model), the command line (`cli`) and the
//! report (`report`).

pub mod cli;
pub mod config;
pub mod gpu;
pub mod launch;
pub mod model;
pub mod plan;
pub mod report;
pub mod weights;
