//! NCCL through cudarc's binding (its `result`/`sys` layers: the safe `Comm`
//! hides the raw communicator, which in-place all-gather and async-error checks
//! need, and panics when dropped after a failure).

use std::cell::Cell;
use std::ffi::CStr;
use std::fmt;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::sys;

use crate::error::{Error, Result};
use crate::ffi;
use crate::vocab::DType;

/// One rank's NCCL communicator.
#[derive(Debug)]
pub(crate) struct NcclComm {
    comm: sys::ncclComm_t,
    /// Abort instead of destroying on drop: set when work on the communicator
    /// never finished (a dead peer), where `ncclCommDestroy` would wait forever.
    abort_on_drop: bool,
    /// Set by [`NcclComm::abort_now`]: the communicator is gone, every later
    /// call is an error and drop does nothing.
    aborted: Cell<bool>,
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
        Ok(comms
            .into_iter()
            .map(|comm| NcclComm {
                comm,
                abort_on_drop: false,
                aborted: Cell::new(false),
            })
            .collect())
    }

    /// Rank `rank` of a world of `world` processes that share `id`
    /// (`ncclCommInitRank`) on `ctx`'s device. NCCL blocks until every rank has
    /// joined, so the call runs on a helper thread and gives up after `timeout`
    /// with [`Error::Timeout`]; the helper is then left blocked in NCCL (the
    /// process is expected to report the error and exit).
    pub(crate) fn init_rank(
        ctx: &Arc<CudaContext>,
        world: usize,
        rank: usize,
        id: &NcclId,
        timeout: Duration,
    ) -> Result<NcclComm> {
        ffi::require_nccl()?;
        struct Raw(sys::ncclComm_t);
        // SAFETY: the pointer is only handed over, never used concurrently.
        unsafe impl Send for Raw {}
        let (send, receive) = mpsc::channel::<Result<Raw>>();
        let ctx = ctx.clone();
        let raw_id = sys::ncclUniqueId {
            internal: id.0.map(|b| b as std::ffi::c_char),
        };
        std::thread::Builder::new()
            .name("colltune-nccl-init".into())
            .spawn(move || {
                // NCCL picks the device from the thread's current context.
                let result = ctx
                    .bind_to_thread()
                    .map_err(|e| Error::driver("binding the context for ncclCommInitRank", e))
                    .and_then(|()| {
                        let mut comm = std::ptr::null_mut();
                        // SAFETY: writes one communicator.
                        check("ncclCommInitRank", unsafe {
                            sys::ncclCommInitRank(&mut comm, world as i32, raw_id, rank as i32)
                        })?;
                        Ok(Raw(comm))
                    });
                // Nobody listens any more after a timeout; the communicator leaks.
                let _ = send.send(result);
            })
            .map_err(|e| Error::Unsupported(format!("spawning the NCCL init thread: {e}")))?;
        match receive.recv_timeout(timeout) {
            Ok(result) => result.map(|raw| NcclComm {
                comm: raw.0,
                abort_on_drop: false,
                aborted: Cell::new(false),
            }),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::Timeout {
                rank,
                peer: None,
                during: format!(
                    "ncclCommInitRank (waiting for all {world} ranks to join with the same NCCL \
                     unique id)"
                ),
                timeout,
            }),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Error::Unsupported(
                "the NCCL init thread ended without an answer".into(),
            )),
        }
    }

    /// The communicator, unless it was aborted.
    fn live(&self, what: &str) -> Result<sys::ncclComm_t> {
        if self.aborted.get() {
            Err(Error::Unsupported(format!(
                "{what} on an NCCL communicator that was aborted (a peer never called)"
            )))
        } else {
            Ok(self.comm)
        }
    }

    /// Aborts the communicator at once (`ncclCommAbort`), which also ends its
    /// kernels that wait for a peer. For a rendezvous all-gather that never
    /// finished: dropping the communicator (`ncclCommDestroy` flushes pending
    /// work) or anything that synchronises the stream or context would
    /// otherwise wait for the missing peer forever. Idempotent.
    pub(crate) fn abort_now(&self) {
        if !self.aborted.replace(true) {
            // SAFETY: created by ncclCommInitAll/InitRank, not yet released;
            // `aborted` keeps every later use (and drop) away from it.
            let _ = unsafe { sys::ncclCommAbort(self.comm) };
        }
    }

    /// All-gather of `count` bytes per rank (the rendezvous over NCCL).
    pub(crate) fn all_gather_bytes(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let comm = self.live("ncclAllGather")?;
        // SAFETY: `send` holds `count` bytes and `recv` world x count, on this
        // communicator's device; the stream belongs to that device.
        check("ncclAllGather", unsafe {
            sys::ncclAllGather(
                send as *const _,
                recv as *mut _,
                count,
                sys::ncclDataType_t::ncclUint8,
                comm,
                stream.cu_stream() as _,
            )
        })
    }

    /// Makes drop abort the communicator (see `abort_on_drop`).
    pub(crate) fn abort_on_drop(&mut self) {
        self.abort_on_drop = true;
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
        let comm = self.live("ncclAllReduce")?;
        // SAFETY: the caller passes live device buffers of `count` elements on
        // this communicator's device; the stream belongs to that device.
        check("ncclAllReduce", unsafe {
            sys::ncclAllReduce(
                send as *const _,
                recv as *mut _,
                count,
                nccl_dtype(dtype),
                sys::ncclRedOp_t::ncclSum,
                comm,
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
        let comm = self.live("ncclAllGather")?;
        // SAFETY: as for all_reduce; `recv` holds world x count elements.
        check("ncclAllGather", unsafe {
            sys::ncclAllGather(
                send as *const _,
                recv as *mut _,
                count,
                nccl_dtype(dtype),
                comm,
                stream.cu_stream() as _,
            )
        })
    }

    /// An error NCCL detected asynchronously (e.g. a failed peer), if any.
    pub(crate) fn async_error(&self) -> Result<()> {
        let comm = self.live("ncclCommGetAsyncError")?;
        let mut code = sys::ncclResult_t::ncclSuccess;
        // SAFETY: writes one result code.
        check("ncclCommGetAsyncError", unsafe {
            sys::ncclCommGetAsyncError(comm, &mut code)
        })?;
        match code {
            sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
            other => Err(nccl_error("an earlier NCCL operation", other)),
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if self.aborted.get() {
            return;
        }
        // The owner drained its stream (or set abort_on_drop because it could
        // not); neither call can fail usefully here.
        // SAFETY: created by ncclCommInitAll/InitRank and released only here.
        let _ = unsafe {
            if self.abort_on_drop {
                sys::ncclCommAbort(self.comm)
            } else {
                sys::ncclCommDestroy(self.comm)
            }
        };
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

/// NCCL's unique id: 128 bytes that one process creates ([`NcclId::new`]) and
/// hands to every process of the world (engines already share it, e.g. through
/// a file or their launcher). `cudarc::nccl::Id::internal()` converts with
/// [`NcclId::from_c_chars`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NcclId(pub [u8; 128]);

impl NcclId {
    /// A fresh id (`ncclGetUniqueId`). NCCL's bootstrap root runs in the calling
    /// process, which must stay alive until every rank has joined.
    pub fn new() -> Result<NcclId> {
        ffi::require_nccl()?;
        let mut raw = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes one id.
        check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut raw) })?;
        Ok(Self::from_c_chars(&raw.internal))
    }

    pub fn from_c_chars(raw: &[std::ffi::c_char; 128]) -> NcclId {
        NcclId(raw.map(|c| c as u8))
    }

    /// 256 lower-case hex digits (for environment variables and files).
    pub fn to_hex(&self) -> String {
        crate::ipc::hex_encode(&self.0)
    }

    pub fn from_hex(text: &str) -> Result<NcclId> {
        let bytes = crate::ipc::hex_decode(text)
            .filter(|b| b.len() == 128)
            .ok_or_else(|| {
                Error::Mismatch("an NCCL unique id is 256 hex digits (128 bytes)".into())
            })?;
        let mut id = [0u8; 128];
        id.copy_from_slice(&bytes);
        Ok(NcclId(id))
    }
}

impl fmt::Debug for NcclId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NcclId({}…)", &self.to_hex()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aborted_communicator_refuses_calls_and_is_not_released_again() {
        // What a rendezvous round that timed out leaves behind: no NCCL call may
        // touch the handle again (NCCL is not even loaded here), drop included.
        let comm = NcclComm {
            comm: std::ptr::null_mut(),
            abort_on_drop: false,
            aborted: Cell::new(true),
        };
        comm.abort_now();
        let err = comm.async_error().unwrap_err().to_string();
        assert!(err.contains("aborted"), "{err}");
        drop(comm);
    }

    #[test]
    fn ids_round_trip_through_hex() {
        let mut bytes = [0u8; 128];
        bytes[0] = 2;
        bytes[127] = 0xfe;
        let id = NcclId(bytes);
        assert_eq!(NcclId::from_hex(&id.to_hex()).unwrap(), id);
        assert!(NcclId::from_hex("00").is_err());
    }
}
