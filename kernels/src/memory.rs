//! Device buffers the communicator registers once: plain `cuMemAlloc`
//! allocations (not cudarc's stream-ordered ones, which CUDA IPC refuses), freed
//! on drop.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, sys};

use crate::error::{DriverContext, Error, Result};
use crate::ffi;

/// One allocation on one device.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: a device pointer is an address valid in its context from any thread;
// every use binds the context first.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Allocates `bytes` (at least one byte) on `ctx`'s device. 256-byte aligned.
    pub fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<DeviceBuffer> {
        ctx.bind_to_thread()
            .during("binding a context to allocate")?;
        let ptr = ffi::mem_alloc(bytes)?;
        Ok(DeviceBuffer {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Fills the buffer with a 32-bit pattern, ordered on `stream`.
    pub fn fill_words(&self, stream: &CudaStream, value: u32) -> Result<()> {
        let words = self.bytes / 4;
        if words == 0 {
            return Ok(());
        }
        self.ctx
            .bind_to_thread()
            .during("binding a context to fill")?;
        // SAFETY: the range is this live allocation; stream belongs to its context.
        unsafe { ffi::memset_u32_async(self.ptr, value, words, stream.cu_stream()) }
    }

    /// Writes `words` from the start of the buffer, synchronously (ordered
    /// after all work on the context's legacy stream; use it before the buffer
    /// is shared).
    pub fn write_words(&self, words: &[u32]) -> Result<()> {
        if words.len() * 4 > self.bytes {
            return Err(Error::Unsupported(format!(
                "{} words do not fit a device buffer of {} bytes",
                words.len(),
                self.bytes
            )));
        }
        self.ctx
            .bind_to_thread()
            .during("binding a context to write")?;
        // SAFETY: the range lies within this live allocation (checked above).
        unsafe { ffi::copy_words_to_device(self.ptr, words) }
    }

    /// Gives the allocation up without freeing it: for a world whose streams
    /// never drained (a hung peer), where the free would wait forever. The
    /// memory returns to the driver when the process exits.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // No `cuCtxSynchronize` here: it waits for every stream of the context
        // (NCCL's, the engine's) without a bound, and a kernel still waiting for
        // a lost peer would hold the drop forever (kernels/GPU.md, "Bounded
        // waits"). The owner ends the work that uses the buffer first: the
        // world's registration drains every stream against a deadline and leaks
        // the buffer instead when one does not drain.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `alloc` in this context; its owner made sure
            // no work uses it any more.
            let _ = unsafe { ffi::mem_free(self.ptr) };
        }
    }
}

/// A few words of pinned host memory mapped into the device address space
/// (`cuMemHostAlloc`, portable and mapped): kernels store into them, and the
/// host reads them as plain memory, without a copy or a synchronisation.
#[derive(Debug)]
pub struct MappedHostWords {
    host: *mut std::ffi::c_void,
    device: u64,
    words: usize,
}

// SAFETY: host memory valid in every context (portable) and from any thread;
// the host only reads it with atomic loads.
unsafe impl Send for MappedHostWords {}
unsafe impl Sync for MappedHostWords {}

impl MappedHostWords {
    /// `words` zeroed 32-bit words (at least `bytes`, a cache line), mapped for
    /// `ctx`'s device.
    pub fn alloc(ctx: &Arc<CudaContext>, words: usize, bytes: usize) -> Result<MappedHostWords> {
        ctx.bind_to_thread()
            .during("binding a context to allocate host memory")?;
        let bytes = bytes.max(words * 4);
        let host = ffi::mem_host_alloc_mapped(bytes)?;
        let device = match ffi::mem_host_device_pointer(host) {
            Ok(device) => device,
            Err(e) => {
                // SAFETY: just allocated, never handed to a kernel.
                let _ = unsafe { ffi::mem_free_host(host) };
                return Err(e);
            }
        };
        Ok(MappedHostWords {
            host,
            device,
            words,
        })
    }

    /// The address kernels store to.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    /// Word `word`, as the device last stored it (acquire: the words the
    /// device stored before it, behind a system fence, are visible after).
    pub fn load(&self, word: usize) -> u32 {
        assert!(word < self.words, "read past mapped host words");
        // SAFETY: in bounds of a live, 4-byte aligned allocation that the host
        // only reads atomically.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.host.cast::<u32>().add(word)) }
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The u64 at words `word` and `word + 1` (little-endian halves).
    pub fn load_u64(&self, word: usize) -> u64 {
        self.load(word) as u64 | (self.load(word + 1) as u64) << 32
    }

    /// Gives the memory up without freeing it: for a rank whose kernels may
    /// still run (they would store into freed memory).
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for MappedHostWords {
    fn drop(&mut self) {
        // The owner drained every stream whose kernels hold the address.
        // SAFETY: allocated by `alloc`, not used by any kernel any more.
        let _ = unsafe { ffi::mem_free_host(self.host) };
    }
}

/// Writes words of device memory from the host without waiting behind any
/// other stream: a stream of its own, created non-blocking (it never waits
/// for the context's legacy stream), whose writes the GPU's front end carries
/// out (`cuStreamWriteValue32`) with no SM involved, so neither a kernel that
/// never ends nor a GPU full of spinning blocks holds a write back. For the
/// one write of a rank's first host-side fault into its error word
/// (`comm::health`).
pub(crate) struct WordWriter {
    ctx: Arc<CudaContext>,
    stream: sys::CUstream,
}

// SAFETY: the stream is used through driver calls, which take any thread once
// its context is bound; its owner serialises them.
unsafe impl Send for WordWriter {}
unsafe impl Sync for WordWriter {}

impl WordWriter {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<WordWriter> {
        ctx.bind_to_thread()
            .during("binding a context for a stream of host writes")?;
        // Not cudarc's `new_stream`, which may synchronise the context (and so
        // wait for a kernel that never ends) when it counts no stream yet.
        let stream = cudarc::driver::result::stream::create(
            cudarc::driver::result::stream::StreamKind::NonBlocking,
        )
        .during("creating a stream for host writes")?;
        Ok(WordWriter {
            ctx: ctx.clone(),
            stream,
        })
    }

    /// Writes `value` into the 32-bit word at device address `addr` (this
    /// context's memory or a peer's mapping of it), ordered only after this
    /// writer's earlier writes. Returns once the write is queued. Where the
    /// driver has stream memory operations turned off, a copy engine writes
    /// it instead (`cuMemcpyHtoDAsync`, which needs no SM either).
    pub(crate) fn write(&self, addr: u64, value: u32) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .during("binding a context for a host write")?;
        // SAFETY: `addr` is a live, 4-byte aligned device word of this context
        // (the caller keeps it alive until `settled_within` says the write has
        // landed); the stream is this writer's own.
        let written = unsafe {
            sys::cuStreamWriteValue32_v2(
                self.stream,
                addr,
                value,
                sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
            )
        };
        if written != sys::CUresult::CUDA_ERROR_NOT_SUPPORTED {
            return written
                .result()
                .during("writing a word of device memory from the host (cuStreamWriteValue32)");
        }
        // SAFETY: as above; the source is pageable, so the driver has copied
        // it to its own staging memory when the call returns.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                addr,
                (&value as *const u32).cast(),
                std::mem::size_of::<u32>(),
                self.stream,
            )
        }
        .result()
        .during("writing a word of device memory from the host (cuMemcpyHtoDAsync)")
    }

    /// Whether every write queued so far has landed, polled for at most
    /// `limit`: memory a write targets may be freed only after this.
    pub(crate) fn settled_within(&self, limit: std::time::Duration) -> bool {
        if self.ctx.bind_to_thread().is_err() {
            return false;
        }
        let start = std::time::Instant::now();
        loop {
            // SAFETY: queries this writer's live stream.
            match unsafe { sys::cuStreamQuery(self.stream) } {
                sys::CUresult::CUDA_SUCCESS => return true,
                sys::CUresult::CUDA_ERROR_NOT_READY if start.elapsed() < limit => {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                _ => return false,
            }
        }
    }
}

impl Drop for WordWriter {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: created by `new`, destroyed once; the driver releases it
            // when its queued writes have completed.
            let _ = unsafe { sys::cuStreamDestroy_v2(self.stream) };
        }
    }
}
