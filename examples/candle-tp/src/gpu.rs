//! Everything that touches a GPU: the launcher's device count and NCCL ids,
//! and the worker (one rank). Built with the `cuda` feature; without it each
//! entry point says so.

#[cfg(feature = "cuda")]
#[path = "gpu_cuda.rs"]
mod imp;

#[cfg(not(feature = "cuda"))]
mod imp {
    use crate::cli::WorkerArgs;

    const NO_CUDA: &str = "this candle-tp was built without the `cuda` feature; build it with \
                           examples/candle-tp/build-gpu.sh (or `cargo build --release`)";

    pub fn device_count() -> Result<usize, String> {
        Err(NO_CUDA.into())
    }

    pub fn nccl_unique_id() -> Result<String, String> {
        Err(NO_CUDA.into())
    }

    pub fn colltune_unique_id() -> Result<String, String> {
        Err(NO_CUDA.into())
    }

    pub fn worker(_: &WorkerArgs) -> Result<(), String> {
        Err(NO_CUDA.into())
    }
}

pub use imp::{colltune_unique_id, device_count, nccl_unique_id, worker};
