//! `candle-tp`: tensor-parallel Llama decode on candle, one process per GPU,
//! with the collectives of NCCL or of colltune's `kernels` (chosen by
//! `policy`), eagerly and as CUDA graphs. See README.md beside this crate.
//!
//! The modules below the launcher and the worker are plain host code, tested
//! on the CPU: the model shapes (`config`, read from a model folder's
//! `config.json` by `hf_config`; the folder itself: `model_dir`), the
//! Megatron split (`plan`), the weights (`weights`), the tokenizer
//! (`tokenizer`), a batch's prompts (`prompt`), the rank model itself on
//! candle's CPU backend (`model`, against a one-rank model), the command line
//! (`cli`) and the report (`report`); and `norm_bench`'s settings, byte
//! counts, statistics and report (its GPU side is in `gpu`).

pub mod cli;
pub mod config;
pub mod gpu;
pub mod hf_config;
pub mod launch;
pub mod model;
pub mod model_dir;
pub mod norm_bench;
pub mod plan;
pub mod prompt;
pub mod report;
pub mod tokenizer;
pub mod weights;
