//! NCCL's symmetric windows (NCCL 2.27 and later): device memory from
//! `ncclMemAlloc`, registered by every rank together with
//! `ncclCommWindowRegister(…, NCCL_WIN_COLL_SYMMETRIC)`, on which NCCL runs its
//! low-latency symmetric kernels.
//!
//! The three entry points are looked up in the NCCL this process loaded, not
//! taken from cudarc's binding: cudarc declares them only for some of its
//! `nccl-0xxxx` features, which are the final binary's choice, and an NCCL
//! older than 2.27 lacks them. Either way a world then simply has no window,
//! and `nccl_symmetric` declines to plain NCCL.
//!
//! Registering is a collective, so no rank registers before every rank has
//! said that it can ([`vote`]).

pub(crate) mod vote;

use std::ffi::{CStr, c_int, c_void};
use std::sync::{Arc, OnceLock};

use cudarc::driver::CudaContext;
use cudarc::nccl::sys;

use crate::error::{Error, Result};

/// `NCCL_WIN_COLL_SYMMETRIC` (nccl.h): the window is at the same offset and
/// of the same size on every rank, so NCCL may run symmetric kernels on it.
pub(crate) const WIN_COLL_SYMMETRIC: c_int = 0x01;

/// The granularity windows are sized in: NCCL maps them in whole pages of
/// the GPU's VMM granularity (2 MiB on current GPUs), so asking for less only
/// rounds up inside NCCL.
pub(crate) const WINDOW_GRANULE: u64 = 2 << 20;

type MemAlloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> sys::ncclResult_t;
type MemFree = unsafe extern "C" fn(*mut c_void) -> sys::ncclResult_t;
type Register = unsafe extern "C" fn(
    sys::ncclComm_t,
    *mut c_void,
    usize,
    *mut *mut c_void,
    c_int,
) -> sys::ncclResult_t;

/// NCCL's window entry points.
pub(crate) struct Api {
    pub(crate) mem_alloc: MemAlloc,
    pub(crate) mem_free: MemFree,
    pub(crate) register: Register,
}

/// The window entry points of the NCCL this process loaded, or why there are
/// none. Looked up once; NCCL must already be loaded (a communicator exists).
pub(crate) fn api() -> std::result::Result<&'static Api, String> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(look_up).as_ref().map_err(Clone::clone)
}

fn look_up() -> std::result::Result<Api, String> {
    let handle = loaded_nccl();
    let find = |name: &CStr| {
        // SAFETY: `handle` is a library handle (or RTLD_DEFAULT) and `name`
        // is NUL-terminated; dlsym only reads them.
        let symbol = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if symbol.is_null() {
            Err(format!(
                "the loaded NCCL has no {} (symmetric windows need NCCL 2.27 or later)",
                name.to_string_lossy()
            ))
        } else {
            Ok(symbol)
        }
    };
    let mem_alloc = find(c"ncclMemAlloc")?;
    let mem_free = find(c"ncclMemFree")?;
    let register = find(c"ncclCommWindowRegister")?;
    // SAFETY: the symbols are NCCL's functions with these C signatures
    // (nccl.h, 2.27 and later).
    unsafe {
        Ok(Api {
            mem_alloc: std::mem::transmute::<*mut c_void, MemAlloc>(mem_alloc),
            mem_free: std::mem::transmute::<*mut c_void, MemFree>(mem_free),
            register: std::mem::transmute::<*mut c_void, Register>(register),
        })
    }
}

/// The library handle of the NCCL already in this process: loaded at run time
/// by cudarc (found again without loading anything, `RTLD_NOLOAD`), or linked
/// into the program (the global namespace).
fn loaded_nccl() -> *mut c_void {
    for name in [c"libnccl.so.2", c"libnccl.so"] {
        // SAFETY: only looks for a library already loaded; loads nothing.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !handle.is_null() {
            return handle;
        }
    }
    libc::RTLD_DEFAULT
}

/// `bytes` rounded up to whole window granules.
pub(crate) fn window_size(bytes: u64) -> u64 {
    bytes
        .div_ceil(WINDOW_GRANULE)
        .saturating_mul(WINDOW_GRANULE)
}

/// Why NCCL in this process would register no symmetric window, from the
/// environment NCCL reads (`var`: `std::env::var`, which after a
/// communicator exists holds NCCL's configuration files too): windows
/// switched off (`NCCL_WIN_ENABLE=0`), or the cuMem allocations they are made
/// of (`NCCL_CUMEM_ENABLE=0`). Such a rank registers only locally and returns
/// at once while its peers wait in the collective registration, so it must
/// say so before anyone registers.
pub(crate) fn switched_off(
    var: impl Fn(&str) -> Option<String>,
) -> std::result::Result<(), String> {
    for (name, what) in [
        ("NCCL_WIN_ENABLE", "NCCL registers no symmetric windows"),
        (
            "NCCL_CUMEM_ENABLE",
            "symmetric windows are cuMem allocations",
        ),
    ] {
        if let Some(value) = var(name)
            && value.trim().parse::<i64>() == Ok(0)
        {
            return Err(format!("{name}={value} in this process ({what})"));
        }
    }
    Ok(())
}

/// Device memory of one rank's window, freed when dropped (after NCCL, which
/// registered it, has ended; see `RankResources`' drop): from `ncclMemAlloc`
/// in a world with NCCL windows, plain device memory elsewhere (an engine's
/// window where nothing is registered, see `RankComm::alloc_window`).
pub(crate) struct WindowMemory {
    pub(crate) ptr: u64,
    pub(crate) bytes: u64,
    ctx: Arc<CudaContext>,
    /// `ncclMemFree`'s NCCL, or `None` for plain memory (`cuMemFree`).
    api: Option<&'static Api>,
}

impl std::fmt::Debug for WindowMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.api.is_some() {
            "ncclMemAlloc"
        } else {
            "plain"
        };
        write!(
            f,
            "WindowMemory({kind}, {:#x}, {} bytes)",
            self.ptr, self.bytes
        )
    }
}

impl WindowMemory {
    /// `bytes` of plain device memory on `ctx`'s GPU (rounded up to
    /// [`WINDOW_GRANULE`] like an NCCL window, so that a window is as large
    /// in every world).
    pub(crate) fn plain(ctx: &Arc<CudaContext>, bytes: u64) -> Result<WindowMemory> {
        let bytes = window_size(bytes);
        let size = usize::try_from(bytes)
            .map_err(|_| Error::Unsupported(format!("a window of {bytes} bytes")))?;
        ctx.bind_to_thread()
            .map_err(|e| Error::driver("binding the rank's context for a window", e))?;
        // SAFETY: allocates on the bound context; freed once, in Drop.
        let ptr = unsafe { cudarc::driver::result::malloc_sync(size) }
            .map_err(|e| Error::driver(format!("allocating a window of {bytes} bytes"), e))?;
        Ok(WindowMemory {
            ptr,
            bytes,
            ctx: ctx.clone(),
            api: None,
        })
    }

    /// `bytes` (rounded up to [`WINDOW_GRANULE`]) from `ncclMemAlloc` on
    /// `ctx`'s GPU.
    pub(crate) fn alloc(ctx: &Arc<CudaContext>, bytes: u64) -> Result<WindowMemory> {
        let api = api().map_err(Error::Unsupported)?;
        let bytes = window_size(bytes);
        let size = usize::try_from(bytes)
            .map_err(|_| Error::Unsupported(format!("a window of {bytes} bytes")))?;
        // ncclMemAlloc allocates on the runtime's current device.
        ctx.bind_to_thread()
            .map_err(|e| Error::driver("binding the rank's context for ncclMemAlloc", e))?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        let code = unsafe { (api.mem_alloc)(&mut ptr, size) };
        if code != sys::ncclResult_t::ncclSuccess || ptr.is_null() {
            return Err(Error::Nccl {
                what: format!("ncclMemAlloc of {bytes} bytes"),
                code: format!("{code:?}"),
            });
        }
        Ok(WindowMemory {
            ptr: ptr as u64,
            bytes,
            ctx: ctx.clone(),
            api: Some(api),
        })
    }

    /// Whether `[ptr, ptr + len)` lies inside this memory.
    pub(crate) fn holds(&self, ptr: u64, len: u64) -> bool {
        ptr >= self.ptr
            && ptr
                .checked_add(len)
                .is_some_and(|end| end <= self.ptr + self.bytes)
    }

    /// Never frees it: kernels that will not end may still use it.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for WindowMemory {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            log::warn!("colltune: could not bind a context to free a window; leaking it");
            return;
        }
        match self.api {
            Some(api) => {
                // SAFETY: `ptr` came from ncclMemAlloc and nothing uses it any more.
                let code = unsafe { (api.mem_free)(self.ptr as *mut c_void) };
                if code != sys::ncclResult_t::ncclSuccess {
                    log::warn!("colltune: ncclMemFree of an NCCL window failed ({code:?})");
                }
            }
            None => {
                // SAFETY: `ptr` came from cuMemAlloc and nothing uses it any more.
                if let Err(e) = unsafe { cudarc::driver::result::free_sync(self.ptr) } {
                    log::warn!("colltune: freeing a window failed ({e:?})");
                }
            }
        }
    }
}

/// A window of a rank: its staging window or one of the engine's. One from
/// `ncclMemAlloc` is registered with NCCL, and its registration is never
/// undone on its own (deregistering is a collective too): NCCL releases it
/// when the communicator ends, and the memory is freed after that.
#[derive(Debug)]
pub(crate) struct Window {
    pub(crate) memory: WindowMemory,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_whole_granules() {
        assert_eq!(window_size(0), 0);
        assert_eq!(window_size(1), WINDOW_GRANULE);
        assert_eq!(window_size(WINDOW_GRANULE), WINDOW_GRANULE);
        assert_eq!(window_size(64 << 20), 64 << 20);
        assert_eq!(window_size((64 << 20) + 1), 66 << 20);
        assert_eq!(window_size(u64::MAX), u64::MAX, "saturates, never wraps");
    }

    #[test]
    fn a_process_with_windows_or_cumem_switched_off_says_so() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(switched_off(env(&[])), Ok(()));
        assert_eq!(switched_off(env(&[("NCCL_WIN_ENABLE", "1")])), Ok(()));
        assert_eq!(
            switched_off(env(&[("NCCL_WIN_ENABLE", "0")])),
            Err("NCCL_WIN_ENABLE=0 in this process (NCCL registers no symmetric windows)".into())
        );
        assert_eq!(
            switched_off(env(&[
                ("NCCL_WIN_ENABLE", "2"),
                ("NCCL_CUMEM_ENABLE", " 0")
            ])),
            Err(
                "NCCL_CUMEM_ENABLE= 0 in this process (symmetric windows are cuMem allocations)"
                    .into()
            )
        );
        // A value NCCL would not read as a number keeps its default (on).
        assert_eq!(switched_off(env(&[("NCCL_WIN_ENABLE", "off")])), Ok(()));
    }
}
