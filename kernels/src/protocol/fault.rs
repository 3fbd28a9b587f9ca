//! Decoding of the fault a rank's kernels record (kernels/cuda/common.cu,
//! `report_fault`), from the words they mirror into host memory
//! ([`super::host`]).
//!
//! Error word: kind in bits 0..8 ([`FAULT_TIMEOUT`], [`FAULT_MISMATCH`],
//! [`FAULT_PEER_FAILED`]), kernel in 8..16 ([`Kernel`] ids), wait
//! phase in 16..24 ([`WaitPhase`]). Info word: the peer in bits 0..8, the
//! block in 8..32. A mismatch adds both call signatures
//! ([`super::signature`]).

use super::registry::Kernel;
use super::signature;
use super::{FAULT_HOST, FAULT_MISMATCH, FAULT_PEER_FAILED, FAULT_TIMEOUT, WaitPhase};

/// The words a fault leaves (see [`super::host`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultWords {
    pub error: u32,
    pub info: u32,
    pub mine: u64,
    pub theirs: u64,
}

/// Where a kernel was when it recorded its fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultSite {
    pub kernel: Option<Kernel>,
    pub phase: Option<WaitPhase>,
    pub peer: usize,
    pub block: u32,
}

/// A fault recorded on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceFault {
    /// A wait for `site.peer` passed the world's timeout.
    Timeout(FaultSite),
    /// `site.peer` made another call in this slot: `mine` and `theirs` are
    /// the two signatures.
    Mismatch {
        site: FaultSite,
        mine: u64,
        theirs: u64,
    },
    /// `site.peer`, which this rank was waiting for, had failed first.
    PeerFailed(FaultSite),
    /// The rank's host found a fault and wrote it for the peers
    /// ([`FAULT_HOST`]); the host reports it itself.
    Host,
    /// A word this version never writes (memory corruption, or a mismatch
    /// between host and device code).
    Unknown { error: u32, info: u32 },
}

impl DeviceFault {
    /// `None` when the rank is healthy (`error == 0`).
    pub fn decode(words: FaultWords) -> Option<DeviceFault> {
        let FaultWords {
            error,
            info,
            mine,
            theirs,
        } = words;
        if error == 0 {
            return None;
        }
        let phase_id = (error >> 16) & 0xff;
        let site = FaultSite {
            kernel: Kernel::from_id((error >> 8) & 0xff),
            phase: WaitPhase::ALL.into_iter().find(|p| *p as u32 == phase_id),
            peer: (info & 0xff) as usize,
            block: info >> 8,
        };
        Some(match error & 0xff {
            FAULT_TIMEOUT => DeviceFault::Timeout(site),
            FAULT_MISMATCH => DeviceFault::Mismatch { site, mine, theirs },
            FAULT_PEER_FAILED => DeviceFault::PeerFailed(site),
            FAULT_HOST => DeviceFault::Host,
            _ => DeviceFault::Unknown { error, info },
        })
    }

    /// "one_shot_pull (barrier 1, block 3)" and the like.
    pub fn describe(&self) -> String {
        match self {
            DeviceFault::Timeout(site)
            | DeviceFault::PeerFailed(site)
            | DeviceFault::Mismatch { site, .. } => site.describe(),
            DeviceFault::Host => "a fault this rank's host found".into(),
            DeviceFault::Unknown { error, info } => {
                format!("an unknown device fault (error word {error:#x}, info {info:#x})")
            }
        }
    }

    pub fn peer(&self) -> Option<usize> {
        match self {
            DeviceFault::Timeout(site)
            | DeviceFault::PeerFailed(site)
            | DeviceFault::Mismatch { site, .. } => Some(site.peer),
            DeviceFault::Host | DeviceFault::Unknown { .. } => None,
        }
    }

    /// The two calls of a mismatch, as a person reads them.
    pub fn calls(&self) -> Option<(String, String)> {
        match self {
            DeviceFault::Mismatch { mine, theirs, .. } => {
                Some((signature::describe(*mine), signature::describe(*theirs)))
            }
            _ => None,
        }
    }
}

impl FaultSite {
    fn describe(&self) -> String {
        let kernel = self.kernel.map_or("an unknown kernel", Kernel::describe);
        let phase = match self.phase {
            Some(WaitPhase::Data) => "waiting for pushed data",
            Some(WaitPhase::Barrier1) => "barrier 1",
            Some(WaitPhase::Barrier2) => "barrier 2",
            Some(WaitPhase::Handshake) => "the call handshake",
            None => "an unknown wait",
        };
        format!("{kernel} ({phase}, block {})", self.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::signature::CallSignature;
    use crate::vocab::{Algo, Collective, DType};

    fn words(error: u32, info: u32) -> FaultWords {
        FaultWords {
            error,
            info,
            ..FaultWords::default()
        }
    }

    #[test]
    fn healthy_ranks_have_no_fault() {
        assert_eq!(DeviceFault::decode(words(0, 123)), None);
    }

    #[test]
    fn timeouts_decode_as_the_kernels_encode_them() {
        // report_timeout(a, CT_KERNEL_TWO_SHOT, CT_PHASE_BARRIER_2, peer 5) in block 7
        let fault =
            DeviceFault::decode(words(FAULT_TIMEOUT | (3 << 8) | (2 << 16), 5 | (7 << 8))).unwrap();
        let site = FaultSite {
            kernel: Some(Kernel::Algo(Algo::TwoShotPull)),
            phase: Some(WaitPhase::Barrier2),
            peer: 5,
            block: 7,
        };
        assert_eq!(fault, DeviceFault::Timeout(site));
        assert_eq!(fault.describe(), "two_shot_pull (barrier 2, block 7)");
        assert_eq!(fault.peer(), Some(5));
        assert_eq!(fault.calls(), None);
    }

    #[test]
    fn a_mismatch_names_both_calls() {
        let call = |bytes_per_rank| CallSignature {
            kernel: Kernel::Algo(Algo::OneShotPush),
            collective: Collective::AllReduce,
            dtype: DType::Bf16,
            bytes_per_rank,
            hidden: 0,
        };
        let fault = DeviceFault::decode(FaultWords {
            error: FAULT_MISMATCH | (1 << 8) | (3 << 16),
            info: 1,
            mine: call(4096).encode(),
            theirs: call(8192).encode(),
        })
        .unwrap();
        assert!(matches!(fault, DeviceFault::Mismatch { .. }));
        assert_eq!(
            fault.describe(),
            "one_shot_push (the call handshake, block 0)"
        );
        let (mine, theirs) = fault.calls().unwrap();
        assert!(mine.contains("4096 bytes"), "{mine}");
        assert!(theirs.contains("8192 bytes"), "{theirs}");
    }

    #[test]
    fn a_failed_peer_is_its_own_kind() {
        let fault =
            DeviceFault::decode(words(FAULT_PEER_FAILED | (2 << 8) | (1 << 16), 3)).unwrap();
        assert!(matches!(
            fault,
            DeviceFault::PeerFailed(FaultSite { peer: 3, .. })
        ));
        assert_eq!(fault.describe(), "one_shot_pull (barrier 1, block 0)");
    }

    #[test]
    fn unknown_words_are_reported_verbatim() {
        let fault = DeviceFault::decode(words(0x42, 9)).unwrap();
        assert!(fault.describe().contains("0x42"));
        assert_eq!(fault.peer(), None);
    }

    #[test]
    fn a_fault_the_host_wrote_decodes_as_the_hosts() {
        let fault = DeviceFault::decode(words(FAULT_HOST, 0)).unwrap();
        assert_eq!(fault, DeviceFault::Host);
        assert_eq!(fault.peer(), None);
        assert_eq!(fault.describe(), "a fault this rank's host found");
    }
}
