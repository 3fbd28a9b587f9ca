//! The bottom layer: whether the CUDA libraries can be loaded, the few raw
//! driver calls cudarc's safe API lacks (plain allocations, 32-bit memsets, peer
//! access, P2P attributes), and how colltune's own programs keep NCCL off
//! NVLink multicast ([`NVLS_ENV`]). cudarc loads libraries lazily and panics when one is
//! missing, so every entry point of this crate checks presence first and turns
//! absence into [`Error::MissingLibrary`] with a fix.

use cudarc::driver::sys;

use crate::error::{DriverContext, Error, Result};

const CUDA_LIB_FIX: &str = "set LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH";

/// Whether each library can be used. Loaded at run time (the default
/// `dynamic-loading` feature), it is looked for; linked (an engine that turned
/// the feature off, as one on candle does), the dynamic loader found it before
/// the program started.
#[cfg(feature = "dynamic-loading")]
mod presence {
    pub fn driver() -> bool {
        // SAFETY: only tries to dlopen the library; no symbol is called.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }
    pub fn nvrtc() -> bool {
        // SAFETY: as above.
        unsafe { cudarc::nvrtc::sys::is_culib_present() }
    }
    pub fn nccl() -> bool {
        // SAFETY: as above.
        unsafe { cudarc::nccl::sys::is_culib_present() }
    }
}
#[cfg(not(feature = "dynamic-loading"))]
mod presence {
    pub fn driver() -> bool {
        true
    }
    pub fn nvrtc() -> bool {
        true
    }
    pub fn nccl() -> bool {
        true
    }
}

/// The CUDA driver (`libcuda.so`), needed for everything that touches a GPU.
pub fn require_driver() -> Result<()> {
    if presence::driver() {
        Ok(())
    } else {
        Err(Error::MissingLibrary {
            lib: "libcuda.so (the NVIDIA driver)",
            fix: "this machine needs an NVIDIA GPU and its driver: install the driver, or \
                  add the directory holding libcuda.so.1 to LD_LIBRARY_PATH"
                .into(),
        })
    }
}

/// NVRTC (`libnvrtc.so.13`), needed to compile the kernels.
pub fn require_nvrtc() -> Result<()> {
    if presence::nvrtc() {
        Ok(())
    } else {
        Err(Error::MissingLibrary {
            lib: "libnvrtc.so (NVRTC, the CUDA runtime compiler)",
            fix: format!(
                "{CUDA_LIB_FIX}, or `pip install nvidia-cuda-nvrtc==13.0.*` and add its \
                 nvidia/cu13/lib directory to LD_LIBRARY_PATH"
            ),
        })
    }
}

/// NCCL (`libnccl.so.2`), needed by worlds that run NCCL.
pub fn require_nccl() -> Result<()> {
    if presence::nccl() {
        Ok(())
    } else {
        Err(Error::MissingLibrary {
            lib: "libnccl.so.2 (NCCL)",
            fix: "install NCCL 2.x (e.g. the libnccl2 package or `pip install nvidia-nccl-cu13`) \
                  and add the directory holding libnccl.so.2 to LD_LIBRARY_PATH"
                .into(),
        })
    }
}

/// Whether NCCL can be loaded, for reporting.
pub fn nccl_present() -> bool {
    presence::nccl()
}

/// `cuMemAlloc`: a plain allocation (not stream-ordered), as CUDA IPC needs.
/// The caller's context must be current.
pub(crate) fn mem_alloc(bytes: usize) -> Result<sys::CUdeviceptr> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: writes one pointer into `ptr`.
    unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) }
        .result()
        .during("cuMemAlloc")?;
    Ok(ptr)
}

/// `cuMemFree`. The caller's context must be current and no work may use `ptr`.
pub(crate) unsafe fn mem_free(ptr: sys::CUdeviceptr) -> Result<()> {
    // SAFETY: the caller guarantees `ptr` came from `mem_alloc` and is idle.
    unsafe { sys::cuMemFree_v2(ptr) }
        .result()
        .during("cuMemFree")
}

/// Fills `words` 32-bit words at `ptr` with `value`, ordered on `stream`.
pub(crate) unsafe fn memset_u32_async(
    ptr: sys::CUdeviceptr,
    value: u32,
    words: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: the caller guarantees the range is a live allocation.
    unsafe { sys::cuMemsetD32Async(ptr, value, words, stream) }
        .result()
        .during("cuMemsetD32Async")
}

/// Copies `words` to device memory at `dst`, synchronously.
///
/// # Safety
/// `dst` must be a live allocation of at least `words.len()` words in the
/// current context.
pub(crate) unsafe fn copy_words_to_device(dst: sys::CUdeviceptr, words: &[u32]) -> Result<()> {
    // SAFETY: the caller guarantees `dst` holds `words.len()` words.
    unsafe { sys::cuMemcpyHtoD_v2(dst, words.as_ptr().cast(), std::mem::size_of_val(words)) }
        .result()
        .during("cuMemcpyHtoD")
}

/// Whether `device` can map `peer`'s memory.
pub(crate) fn can_access_peer(device: sys::CUdevice, peer: sys::CUdevice) -> Result<bool> {
    let mut can = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, device, peer) }
        .result()
        .during("cuDeviceCanAccessPeer")?;
    Ok(can != 0)
}

/// Lets the current context access `peer_ctx`'s allocations. Enabling twice is
/// not an error.
pub(crate) fn enable_peer_access(peer_ctx: sys::CUcontext) -> Result<()> {
    // SAFETY: `peer_ctx` is a live context (held by its CudaContext).
    match unsafe { sys::cuCtxEnablePeerAccess(peer_ctx, 0) } {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            Ok(())
        }
        other => other.result().during("cuCtxEnablePeerAccess"),
    }
}

/// A P2P attribute between two devices.
pub(crate) fn p2p_attribute(
    attribute: sys::CUdevice_P2PAttribute,
    src: sys::CUdevice,
    dst: sys::CUdevice,
) -> Result<i32> {
    let mut value = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDeviceGetP2PAttribute(&mut value, attribute, src, dst) }
        .result()
        .during("cuDeviceGetP2PAttribute")?;
    Ok(value)
}

/// The CUDA version the driver supports, e.g. 13000 for 13.0.
pub fn driver_cuda_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .during("cuDriverGetVersion")?;
    Ok(version)
}

/// `cuIpcGetMemHandle`: the 64 bytes another process needs to map the
/// allocation at `ptr` (which must come from plain `cuMemAlloc`). The caller's
/// context must be current.
pub(crate) fn ipc_get_mem_handle(ptr: sys::CUdeviceptr) -> Result<[u8; 64]> {
    let mut handle = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: writes one handle.
    unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) }
        .result()
        .during("cuIpcGetMemHandle")?;
    Ok(handle.reserved.map(|c| c as u8))
}

/// `cuIpcOpenMemHandle` with lazy peer access: maps another process's
/// allocation into the current context. Close it with [`ipc_close_mem_handle`].
pub(crate) fn ipc_open_mem_handle(handle: &[u8; 64]) -> Result<sys::CUdeviceptr> {
    let raw = sys::CUipcMemHandle {
        reserved: handle.map(|b| b as std::ffi::c_char),
    };
    let mut ptr: sys::CUdeviceptr = 0;
    let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
    // SAFETY: writes one pointer; the handle is plain bytes the driver validates.
    unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, raw, flags) }
        .result()
        .during("cuIpcOpenMemHandle")?;
    Ok(ptr)
}

/// `cuIpcCloseMemHandle`. The caller's context must be current and no work may
/// use `ptr` any more.
pub(crate) unsafe fn ipc_close_mem_handle(ptr: sys::CUdeviceptr) -> Result<()> {
    // SAFETY: the caller guarantees `ptr` came from `ipc_open_mem_handle`.
    unsafe { sys::cuIpcCloseMemHandle(ptr) }
        .result()
        .during("cuIpcCloseMemHandle")
}

/// The PCI bus id of `device`, e.g. "0000:19:00.0".
pub(crate) fn pci_bus_id(device: sys::CUdevice) -> Result<String> {
    let mut raw = [0 as std::ffi::c_char; 32];
    // SAFETY: writes at most `raw.len()` bytes, NUL-terminated.
    unsafe { sys::cuDeviceGetPCIBusId(raw.as_mut_ptr(), raw.len() as i32, device) }
        .result()
        .during("cuDeviceGetPCIBusId")?;
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The device with PCI bus id `bus_id` as this process sees it, or `None` when
/// it is not visible here (e.g. hidden by `CUDA_VISIBLE_DEVICES`).
pub(crate) fn device_by_pci_bus_id(bus_id: &str) -> Option<sys::CUdevice> {
    let text = std::ffi::CString::new(bus_id).ok()?;
    let mut device: sys::CUdevice = 0;
    // SAFETY: reads a NUL-terminated string, writes one device.
    let result = unsafe { sys::cuDeviceGetByPCIBusId(&mut device, text.as_ptr()) };
    (result == sys::CUresult::CUDA_SUCCESS).then_some(device)
}

/// `cuMemHostAlloc`, portable (every context may use it) and mapped into the
/// device address space: pinned host memory kernels can write. Zeroed. The
/// caller's context must be current. Free it with [`mem_free_host`].
pub(crate) fn mem_host_alloc_mapped(bytes: usize) -> Result<*mut std::ffi::c_void> {
    let mut ptr: *mut std::ffi::c_void = std::ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    // SAFETY: writes one pointer into `ptr`.
    unsafe { sys::cuMemHostAlloc(&mut ptr, bytes.max(1), flags) }
        .result()
        .during("cuMemHostAlloc")?;
    // SAFETY: the allocation is `bytes.max(1)` bytes long and exclusively ours.
    unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes.max(1)) };
    Ok(ptr)
}

/// The device address of mapped pinned memory from [`mem_host_alloc_mapped`].
pub(crate) fn mem_host_device_pointer(ptr: *mut std::ffi::c_void) -> Result<sys::CUdeviceptr> {
    let mut device: sys::CUdeviceptr = 0;
    // SAFETY: writes one pointer; `ptr` is mapped pinned memory.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, ptr, 0) }
        .result()
        .during("cuMemHostGetDevicePointer")?;
    Ok(device)
}

/// `cuMemFreeHost`. No kernel may write the memory any more.
pub(crate) unsafe fn mem_free_host(ptr: *mut std::ffi::c_void) -> Result<()> {
    // SAFETY: the caller guarantees `ptr` came from `mem_host_alloc_mapped`
    // and that nothing uses it.
    unsafe { sys::cuMemFreeHost(ptr) }
        .result()
        .during("cuMemFreeHost")
}

/// The size of the allocation (or IPC mapping) that starts at `ptr`. The
/// caller's context must be current.
pub(crate) fn mem_allocation_size(ptr: sys::CUdeviceptr) -> Result<usize> {
    let mut base: sys::CUdeviceptr = 0;
    let mut size = 0usize;
    // SAFETY: writes a base and a size.
    unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }
        .result()
        .during("cuMemGetAddressRange")?;
    if base != ptr {
        return Err(Error::Unsupported(format!(
            "address {ptr:#x} is not the start of an allocation (it starts at {base:#x})"
        )));
    }
    Ok(size)
}

/// The variable NCCL reads, once per process at its first initialisation, to
/// decide whether it may use NVLink multicast (NVLS).
///
/// This crate neither reads nor writes it: whether the engine's NCCL uses
/// NVLS is the engine's choice, and writing the environment of a process
/// whose other threads may read it is undefined behaviour. colltune's own
/// programs keep it at 0 ([`keep_multicast_off`]), because on the shared
/// machines this project runs on, NVLS can take a host's GPUs out of service.
pub const NVLS_ENV: &str = "NCCL_NVLS_ENABLE";

/// What colltune's own programs do with `NCCL_NVLS_ENABLE` as found:
/// `Ok(true)` to set it to 0, `Ok(false)` when it already is, an error when it
/// asks for multicast.
pub fn nvls_decision(current: Option<&str>) -> Result<bool> {
    match current.map(str::trim) {
        None => Ok(true),
        Some("0") => Ok(false),
        Some(other) => Err(Error::Unsupported(format!(
            "{NVLS_ENV}={other}: colltune's own programs never let NCCL use NVLink multicast \
             (NVLS), which can take a shared host's GPUs out of service; unset {NVLS_ENV} or \
             set it to 0"
        ))),
    }
}

/// For colltune's own programs (the tuner, the examples), first thing in
/// `main`: sets `NCCL_NVLS_ENABLE=0` when it is unset, so that no NCCL
/// communicator of the process uses NVLink multicast, and refuses a process
/// that asked for multicast. The library never calls it.
///
/// # Safety
///
/// It writes the process environment: no other thread may exist yet (call
/// it before anything starts one).
pub unsafe fn keep_multicast_off() -> Result<()> {
    if nvls_decision(std::env::var(NVLS_ENV).ok().as_deref())? {
        // SAFETY: the caller guarantees this is the process's only thread.
        unsafe { std::env::set_var(NVLS_ENV, "0") };
    }
    Ok(())
}

/// For colltune's GPU test binaries, whose harness starts threads before any
/// test runs (so they cannot write the environment): an error unless
/// `NCCL_NVLS_ENABLE=0` (`scripts/gpu-run.sh` sets it).
pub fn require_multicast_off() -> Result<()> {
    match nvls_decision(std::env::var(NVLS_ENV).ok().as_deref())? {
        false => Ok(()),
        true => Err(Error::Unsupported(format!(
            "{NVLS_ENV} is unset: colltune's GPU tests run with {NVLS_ENV}=0 (never NVLink \
             multicast); run them through scripts/gpu-run.sh or set it"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_programs_set_an_unset_nvls_to_zero_and_refuse_multicast() {
        assert!(nvls_decision(None).unwrap());
        assert!(!nvls_decision(Some("0")).unwrap());
        assert!(!nvls_decision(Some(" 0 ")).unwrap());
        for asked in ["1", "2", "", "yes"] {
            let refused = nvls_decision(Some(asked)).unwrap_err().to_string();
            assert!(
                refused.starts_with(&format!("unsupported: NCCL_NVLS_ENABLE={asked}: ")),
                "{refused}"
            );
            assert!(refused.contains("set it to 0"), "{refused}");
        }
    }
}
