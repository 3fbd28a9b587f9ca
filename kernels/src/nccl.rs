//! NCCL through cudarc's binding (its `result`/`sys` layers: the safe `Comm`
//! hides the raw communicator, which in-place all-gather and async-error checks
//! need, and panics when dropped after a failure).

use std::ffi::CStr;

use cudarc::driver::CudaStream;
use cudarc::nccl::sys;

use crate::error::{Error, Result};
use crate::ffi;
use crate::vocab::DType;

/// One rank's NCCL communicator.
#[derive(Debug)]
pub(crate) struct NcclComm {
    comm: sys::ncclComm_t,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls on
// it are not concurrent; it is owned by exactly one RankComm, which takes
// `&mut self` for every collective.
unsafe impl Send for NcclComm {}

fn nccl_error(what: &str, code: sys::ncclResult_t) -> Error {
    // SAFETY: returns a static string for any code.
    let text = unsafe { sys::ncclGetErrorString(code) };
    let text = if text.is_null() {
        String::new()
    } else {
        // SAFETY: NCCL returns a NUL-terminated static string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    };
    Error::Nccl {
        what: what.into(),
        code: format!("{code:?} ({text})"),
    }
}

fn check(what: &str, code: sys::ncclResult_t) -> Result<()> {
    match code {
        sys::ncclResult_t::ncclSuccess => Ok(()),
        other => Err(nccl_error(what, other)),
    }
}

fn nccl_dtype(dtype: DType) -> sys::ncclDataType_t {
    match dtype {
        DType::Bf16 => sys::ncclDataType_t::ncclBfloat16,
        DType::F16 => sys::ncclDataType_t::ncclFloat16,
        DType::F32 => sys::ncclDataType_t::ncclFloat32,
    }
}

impl NcclComm {
    /// One communicator per device ordinal, ranks in the order given
    /// (`ncclCommInitAll`, single process).
    pub(crate) fn init_all(ordinals: &[i32]) -> Result<Vec<NcclComm>> {
        ffi::require_nccl()?;
        let mut comms = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `comms` has room for one communicator per ordinal.
        check("ncclCommInitAll", unsafe {
            sys::ncclCommInitAll(comms.as_mut_ptr(), ordinals.len() as i32, ordinals.as_ptr())
        })?;
        Ok(comms.into_iter().map(|comm| NcclComm { comm }).collect())
    }

    /// Sum all-reduce of `count` elements (in place when `send == recv`).
    pub(crate) fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller passes live device buffers of `count` elements on
        // this communicator's device; the stream belongs to that device.
        check("ncclAllReduce", unsafe {
            sys::ncclAllReduce(
                send as *const _,
                recv as *mut _,
                count,
                nccl_dtype(dtype),
                sys::ncclRedOp_t::ncclSum,
                self.comm,
                stream.cu_stream() as _,
            )
        })
    }

    /// All-gather of `count` elements per rank (in place when
    /// `send == recv + rank * count`).
    pub(crate) fn all_gather(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: as for all_reduce; `recv` holds world x count elements.
        check("ncclAllGather", unsafe {
            sys::ncclAllGather(
                send as *const _,
                recv as *mut _,
                count,
                nccl_dtype(dtype),
                self.comm,
                stream.cu_stream() as _,
            )
        })
    }

    /// An error NCCL detected asynchronously (e.g. a failed peer), if any.
    pub(crate) fn async_error(&self) -> Result<()> {
        let mut code = sys::ncclResult_t::ncclSuccess;
        // SAFETY: writes one result code.
        check("ncclCommGetAsyncError", unsafe {
            sys::ncclCommGetAsyncError(self.comm, &mut code)
        })?;
        match code {
            sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
            other => Err(nccl_error("an earlier NCCL operation", other)),
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // The owner synchronised its stream; destroying cannot fail usefully here.
        // SAFETY: created by ncclCommInitAll and destroyed only here.
        let _ = unsafe { sys::ncclCommDestroy(self.comm) };
    }
}

/// NCCL's version as "2.28.3", or `None` when NCCL is not installed.
pub fn nccl_version() -> Option<String> {
    if !ffi::nccl_present() {
        return None;
    }
    let mut code = 0;
    // SAFETY: writes one int.
    let result = unsafe { sys::ncclGetVersion(&mut code) };
    if result != sys::ncclResult_t::ncclSuccess {
        return None;
    }
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    Some(format!(
        "{}.{}.{}",
        code / 10000,
        (code / 100) % 100,
        code % 100
    ))
}
