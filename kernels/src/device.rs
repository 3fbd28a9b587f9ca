//! Opening a GPU: the first call an engine makes, and the one place that says
//! what a machine without a usable GPU lacks.

use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, sys};

use crate::error::{DriverContext, Error, Result};
use crate::ffi;

/// The primary context of GPU `ordinal` (the one NCCL and the other
/// libraries of an engine use), after checking that the driver loads and that
/// the GPU exists. Without a driver or without that GPU it returns one error
/// that says which is missing ([`Error::MissingLibrary`] or
/// [`Error::Unsupported`]), before any other CUDA call.
pub fn open_device(ordinal: usize) -> Result<Arc<CudaContext>> {
    ffi::require_driver()?;
    let visible = visible_gpus()?;
    if ordinal >= visible {
        return Err(Error::Unsupported(no_such_gpu(ordinal, visible)));
    }
    CudaContext::new(ordinal).during("opening a GPU")
}

/// GPUs the driver shows this process (0 when it shows none).
pub fn visible_gpus() -> Result<usize> {
    ffi::require_driver()?;
    match CudaContext::device_count() {
        Ok(n) => Ok(n.max(0) as usize),
        Err(DriverError(sys::cudaError_enum::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        Err(e) => Err(Error::driver("counting GPUs", e)),
    }
}

/// The one wording of "that GPU is not there".
fn no_such_gpu(ordinal: usize, visible: usize) -> String {
    let shown = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!(" (CUDA_VISIBLE_DEVICES={v})"),
        Err(_) => String::new(),
    };
    match visible {
        0 => format!("no GPU: the driver loads but shows this process no GPU{shown}"),
        n => format!("no GPU {ordinal}: the driver shows this process {n} GPU(s), 0..{n}{shown}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_gpu_is_named() {
        let none = no_such_gpu(0, 0);
        assert!(
            none.starts_with("no GPU: the driver loads but shows this process no GPU"),
            "{none}"
        );
        let third = no_such_gpu(2, 2);
        assert!(
            third.starts_with("no GPU 2: the driver shows this process 2 GPU(s), 0..2"),
            "{third}"
        );
    }

    #[test]
    fn without_a_driver_opening_says_the_driver_is_missing() {
        if ffi::require_driver().is_ok() {
            // This machine has a driver: opening either works or names the GPU.
            match open_device(usize::MAX) {
                Err(Error::Unsupported(m)) => assert!(m.starts_with("no GPU"), "{m}"),
                other => panic!("a GPU usize::MAX opened: {other:?}"),
            }
            return;
        }
        match open_device(0) {
            Err(Error::MissingLibrary { lib, .. }) => assert!(lib.contains("libcuda.so"), "{lib}"),
            other => panic!("expected the missing driver, got {other:?}"),
        }
    }
}
