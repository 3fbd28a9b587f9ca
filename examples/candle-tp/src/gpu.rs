//! Everything that touches a GPU: the launcher's device count and NCCL ids,
//! the worker (one rank), and `norm-bench`. Built with the `cuda` feature;
//! without it each entry point says so.

#[cfg(feature = "cuda")]
#[path = "gpu_cuda.rs"]
mod imp;

#[cfg(feature = "cuda")]
#[path = "norm_bench_cuda.rs"]
mod norm_bench_imp;

#[cfg(not(feature = "cuda"))]
mod imp {
    use crate::cli::WorkerArgs;
    use crate::norm_bench::NormBenchArgs;

    const NO_CUDA: &str = "this candle-tp was built without the `cuda` feature; build it with \
                           examples/candle-tp/build-gpu.sh (or `cargo build --release`)";

    /// # Safety
    /// As the `cuda` build's: no other thread may exist yet (this one does
    /// nothing).
    pub unsafe fn keep_multicast_off() -> Result<(), String> {
        Ok(())
    }

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

    pub fn norm_bench(_: &NormBenchArgs) -> Result<bool, String> {
        Err(NO_CUDA.into())
    }
}

#[cfg(not(feature = "cuda"))]
pub use imp::norm_bench;
pub use imp::{colltune_unique_id, device_count, keep_multicast_off, nccl_unique_id, worker};
#[cfg(feature = "cuda")]
pub use norm_bench_imp::norm_bench;
