//! CUDA IPC: exporting a [`DeviceBuffer`] as 64 handle bytes, and mapping a
//! peer process's buffer from its handle ([`PeerMapping`], closed on drop).
//!
//! Only plain `cuMemAlloc` allocations can be exported (cudarc's stream-ordered
//! allocations cannot), which is why the communicator registers [`DeviceBuffer`]s.
//! Handles are opened with lazy peer access, so no context-wide
//! `cuCtxEnablePeerAccess` is needed; a handle of the same GPU opened by another
//! process is allowed too (two processes sharing one GPU).

use std::fmt;
use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::error::{DriverContext, Error, Result};
use crate::ffi;
use crate::memory::DeviceBuffer;

/// The bytes another process needs to map an allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IpcHandle(pub [u8; 64]);

impl IpcHandle {
    /// Lower-case hex, 128 characters (how handles travel in rendezvous blobs).
    pub fn to_hex(self) -> String {
        hex_encode(&self.0)
    }

    pub fn from_hex(text: &str) -> Result<IpcHandle> {
        let bytes = hex_decode(text)
            .filter(|b| b.len() == 64)
            .ok_or_else(|| Error::Mismatch(format!("not a 64-byte IPC handle in hex: {text:?}")))?;
        let mut handle = [0u8; 64];
        handle.copy_from_slice(&bytes);
        Ok(IpcHandle(handle))
    }
}

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcHandle({}…)", &self.to_hex()[..16])
    }
}

impl DeviceBuffer {
    /// The IPC handle of this allocation.
    pub fn ipc_handle(&self) -> Result<IpcHandle> {
        self.context()
            .bind_to_thread()
            .during("binding a context to export a buffer")?;
        ffi::ipc_get_mem_handle(self.ptr()).map(IpcHandle)
    }
}

/// A peer process's buffer mapped into this process's context.
#[derive(Debug)]
pub struct PeerMapping {
    ptr: u64,
    ctx: Arc<CudaContext>,
}

// SAFETY: a device address valid in `ctx` from any thread; every use binds it.
unsafe impl Send for PeerMapping {}
unsafe impl Sync for PeerMapping {}

impl PeerMapping {
    /// Maps `handle` into `ctx`. Fails when the handle comes from this process
    /// (CUDA IPC is between processes) or its GPU cannot be reached.
    pub fn open(ctx: &Arc<CudaContext>, handle: &IpcHandle) -> Result<PeerMapping> {
        ctx.bind_to_thread()
            .during("binding a context to open a peer's buffer")?;
        let ptr = ffi::ipc_open_mem_handle(&handle.0)?;
        Ok(PeerMapping {
            ptr,
            ctx: ctx.clone(),
        })
    }

    /// The address of the peer's buffer in this context.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes the mapping spans (the peer's allocation as the driver maps it).
    pub fn size(&self) -> Result<usize> {
        self.ctx
            .bind_to_thread()
            .during("binding a context to size a peer's buffer")?;
        ffi::mem_allocation_size(self.ptr)
    }

    /// Closes without waiting for the context: for a world whose streams never
    /// drained (a hung peer), where synchronising would hang too.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for PeerMapping {
    fn drop(&mut self) {
        // The owner drained every stream that used the mapping before dropping it.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: opened by `open` in this context; nothing uses it now.
            let _ = unsafe { ffi::ipc_close_mem_handle(self.ptr) };
        }
    }
}

pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

pub(crate) fn hex_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim().as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_through_hex() {
        let mut bytes = [0u8; 64];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 37) as u8;
        }
        let handle = IpcHandle(bytes);
        let text = handle.to_hex();
        assert_eq!(text.len(), 128);
        assert_eq!(IpcHandle::from_hex(&text).unwrap(), handle);
        assert!(IpcHandle::from_hex(&text[..126]).is_err());
        assert!(IpcHandle::from_hex(&text.replace('a', "g")).is_err() || !text.contains('a'));
    }

    #[test]
    fn hex_rejects_odd_lengths_and_non_digits() {
        assert_eq!(hex_decode("0aFF"), Some(vec![0x0a, 0xff]));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
    }
}
