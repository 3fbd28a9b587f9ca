//! Decoding of the two error words a kernel leaves in its rank's control block.
//!
//! Error word: kind in bits 0..8 ([`FAULT_TIMEOUT`]), kernel in 8..16
//! ([`KernelFamily`] ids), wait phase in 16..24 ([`WaitPhase`]). Info word: the peer
//! being waited for in bits 0..8, the block in 8..32.

use super::registry::KernelFamily;
use super::{FAULT_TIMEOUT, WaitPhase};

/// A fault recorded on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceFault {
    Timeout {
        kernel: Option<KernelFamily>,
        phase: Option<WaitPhase>,
        peer: usize,
        block: u32,
    },
    /// A word this version never writes (memory corruption, or a mismatch
    /// between host and device code).
    Unknown { error: u32, info: u32 },
}

impl DeviceFault {
    /// `None` when the rank is healthy (`error == 0`).
    pub fn decode(error: u32, info: u32) -> Option<DeviceFault> {
        if error == 0 {
            return None;
        }
        if error & 0xff != FAULT_TIMEOUT {
            return Some(DeviceFault::Unknown { error, info });
        }
        let kernel = KernelFamily::from_id((error >> 8) & 0xff);
        let phase = match (error >> 16) & 0xff {
            0 => Some(WaitPhase::Data),
            1 => Some(WaitPhase::Barrier1),
            2 => Some(WaitPhase::Barrier2),
            _ => None,
        };
        Some(DeviceFault::Timeout {
            kernel,
            phase,
            peer: (info & 0xff) as usize,
            block: info >> 8,
        })
    }

    /// "one_shot_pull (barrier 1, block 3)" and the like.
    pub fn describe(&self) -> String {
        match self {
            DeviceFault::Timeout {
                kernel,
                phase,
                block,
                ..
            } => {
                let kernel = kernel.map_or("an unknown kernel", KernelFamily::describe);
                let phase = match phase {
                    Some(WaitPhase::Data) => "waiting for pushed data",
                    Some(WaitPhase::Barrier1) => "barrier 1",
                    Some(WaitPhase::Barrier2) => "barrier 2",
                    None => "an unknown wait",
                };
                format!("{kernel} ({phase}, block {block})")
            }
            DeviceFault::Unknown { error, info } => {
                format!("an unknown device fault (error word {error:#x}, info {info:#x})")
            }
        }
    }

    pub fn peer(&self) -> Option<usize> {
        match self {
            DeviceFault::Timeout { peer, .. } => Some(*peer),
            DeviceFault::Unknown { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_ranks_have_no_fault() {
        assert_eq!(DeviceFault::decode(0, 123), None);
    }

    #[test]
    fn timeouts_decode_as_the_kernels_encode_them() {
        // report_timeout(ctrl, CT_KERNEL_TWO_SHOT, CT_PHASE_BARRIER_2, peer 5) in block 7
        let error = FAULT_TIMEOUT | (3 << 8) | (2 << 16);
        let info = 5 | (7 << 8);
        let fault = DeviceFault::decode(error, info).unwrap();
        assert_eq!(
            fault,
            DeviceFault::Timeout {
                kernel: Some(KernelFamily::TwoShot),
                phase: Some(WaitPhase::Barrier2),
                peer: 5,
                block: 7
            }
        );
        assert_eq!(fault.describe(), "two_shot_pull (barrier 2, block 7)");
        assert_eq!(fault.peer(), Some(5));
    }

    #[test]
    fn unknown_words_are_reported_verbatim() {
        let fault = DeviceFault::decode(0x42, 9).unwrap();
        assert!(fault.describe().contains("0x42"));
        assert_eq!(fault.peer(), None);
    }
}
