//! Peer access between the GPUs of a single-process world, and what kind of link
//! joins them.
//!
//! Link heuristic: two GPUs are joined by NVLink when the driver reports native
//! atomics between them (`CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`).
//! NVLink (and NVSwitch) peers support native atomics; PCIe peers do not (PCIe
//! atomics are not exposed as peer-native atomics). A world is `NvLink` only if
//! every pair is; otherwise `Pcie`.

use std::sync::Arc;

use cudarc::driver::{CudaContext, sys};

use crate::error::{DriverContext, Result};
use crate::ffi;
use crate::vocab::Link;

/// How two GPUs reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairLink {
    /// Whether the first can map the second's memory.
    pub access: bool,
    /// Native atomics over the link: our NVLink indicator.
    pub native_atomics: bool,
    /// The driver's relative performance rank of the link (lower is better).
    pub performance_rank: i32,
}

impl PairLink {
    pub fn link(&self) -> Link {
        if self.access && self.native_atomics {
            Link::NvLink
        } else {
            Link::Pcie
        }
    }
}

/// Queries the link from `a` to `b`.
pub fn pair_link(a: sys::CUdevice, b: sys::CUdevice) -> Result<PairLink> {
    use sys::CUdevice_P2PAttribute as Attr;
    let access = ffi::can_access_peer(a, b)?;
    let native_atomics =
        ffi::p2p_attribute(Attr::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, a, b)? != 0;
    let performance_rank =
        ffi::p2p_attribute(Attr::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, a, b)?;
    Ok(PairLink {
        access,
        native_atomics,
        performance_rank,
    })
}

/// The outcome of connecting the GPUs of a world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Every GPU can map every other one's memory (custom kernels need this).
    pub peer_access: bool,
    pub link: Link,
}

/// Enables peer access between every ordered pair of `contexts` (one per GPU)
/// when all pairs support it, and classifies the link.
pub fn connect(contexts: &[Arc<CudaContext>]) -> Result<Topology> {
    let mut all_access = true;
    let mut all_nvlink = true;
    for (i, a) in contexts.iter().enumerate() {
        for (j, b) in contexts.iter().enumerate() {
            if i == j {
                continue;
            }
            let pair = pair_link(a.cu_device(), b.cu_device())?;
            all_access &= pair.access;
            all_nvlink &= pair.link() == Link::NvLink;
        }
    }
    if all_access {
        for (i, a) in contexts.iter().enumerate() {
            a.bind_to_thread()
                .during("binding a context to enable peer access")?;
            for (j, b) in contexts.iter().enumerate() {
                if i != j {
                    ffi::enable_peer_access(b.cu_ctx())?;
                }
            }
        }
    }
    Ok(Topology {
        peer_access: all_access,
        link: if all_access && all_nvlink {
            Link::NvLink
        } else {
            Link::Pcie
        },
    })
}
