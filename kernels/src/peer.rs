//! Peer access between the GPUs of a single-process world, and what kind of link
//! joins them.
//!
//! Link heuristic: two GPUs are joined by NVLink when the driver reports native
//! atomics between them (`CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`).
//! NVLink (and NVSwitch) peers support native atomics; PCIe peers do not (PCIe
//! atomics are not exposed as peer-native atomics). Which link a world of
//! such pairs forms is [`world_link`]'s rule: `NvLink` only if every pair is;
//! otherwise `Pcie` (and `Loopback` for a world of one GPU).

use std::sync::Arc;

use cudarc::driver::{CudaContext, sys};

use crate::error::{DriverContext, Result};
use crate::ffi;
use crate::protocol::reach::{Reach, world_link};
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
    /// How the first GPU reaches the second, as [`world_link`] reads it: no
    /// access, NVLink (native atomics) or PCIe.
    pub fn reach(&self) -> Reach {
        match (self.access, self.native_atomics) {
            (false, _) => Reach::NoPeerAccess,
            (true, true) => Reach::NvLink,
            (true, false) => Reach::Pcie,
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
/// when all pairs support it, and classifies the link ([`world_link`]).
pub fn connect(contexts: &[Arc<CudaContext>]) -> Result<Topology> {
    let mut pairs = Vec::new();
    for (i, a) in contexts.iter().enumerate() {
        for (j, b) in contexts.iter().enumerate() {
            if i != j {
                pairs.push(pair_link(a.cu_device(), b.cu_device())?.reach());
            }
        }
    }
    let all_access = pairs.iter().all(|r| r.mappable());
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
        link: world_link(contexts.len(), 1, pairs),
    })
}
