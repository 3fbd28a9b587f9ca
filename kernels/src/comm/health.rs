//! A rank's health: the first fault it knows of, and the check every call
//! makes before it launches anything.
//!
//! A rank learns of a fault in one of three ways: its kernels record one on
//! the device (a wait past its bound, a peer that made another call, a peer
//! that had failed), which they mirror into pinned host memory
//! ([`crate::protocol::host`]); NCCL reports an asynchronous error; or a host
//! step fails (a launch, a stream that does not drain). Whichever comes first
//! is kept, and from then on every call, replay and `check()` of the rank
//! returns it. The check costs an atomic load of host memory (and, in worlds
//! with NCCL, `ncclCommGetAsyncError`), so it runs before every call.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::memory::MappedHostWords;
use crate::protocol::fault::{DeviceFault, FaultWords};
use crate::protocol::host;

pub(crate) struct Health {
    rank: usize,
    /// The world's device-side wait bound, for [`Error::Timeout`].
    timeout: Duration,
    /// Where this rank's kernels mirror their fault; `None` once given up.
    mirror: Option<MappedHostWords>,
    first: Mutex<Option<Error>>,
    /// Whether `first` holds a fault: the healthy path reads this and the
    /// mirror's error word, and takes no lock.
    known: AtomicBool,
}

impl Health {
    pub(crate) fn new(rank: usize, timeout: Duration, mirror: MappedHostWords) -> Health {
        Health {
            rank,
            timeout,
            mirror: Some(mirror),
            first: Mutex::new(None),
            known: AtomicBool::new(false),
        }
    }

    /// A health without a device mirror: host-side faults only (unit tests).
    #[cfg(test)]
    pub(crate) fn host_only(rank: usize, timeout: Duration) -> Health {
        Health {
            rank,
            timeout,
            mirror: None,
            first: Mutex::new(None),
            known: AtomicBool::new(false),
        }
    }

    /// The device address kernels mirror their fault to.
    pub(crate) fn mirror_ptr(&self) -> u64 {
        self.mirror.as_ref().map_or(0, MappedHostWords::device_ptr)
    }

    /// `Err` with the first fault once one is known, else `Ok`. Reads the
    /// device's mirror, so a fault a kernel recorded is seen here as soon as
    /// it is written (for calls issued after it; calls already queued then
    /// mark their outputs as failed on the device).
    pub(crate) fn check(&self) -> Result<()> {
        if !self.known.load(Ordering::Acquire) && self.mirror_error() == 0 {
            return Ok(());
        }
        if let Some(first) = self.first() {
            // A mismatch replaces a "peer failed" fault on the device (see
            // report_fault_words): follow it.
            if matches!(first, Error::PeerFault { .. })
                && let Some(fault @ Error::Mismatch(_)) = self.device_fault()
            {
                return Err(self.record(fault));
            }
            return Err(first);
        }
        match self.device_fault() {
            Some(fault) => Err(self.record(fault)),
            None => Ok(()),
        }
    }

    /// Whether a fault is known (the device's included).
    pub(crate) fn is_broken(&self) -> bool {
        self.first().is_some() || self.device_fault().is_some()
    }

    fn first(&self) -> Option<Error> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `error` as this rank's fault (a fault the device recorded
    /// meanwhile comes first) and returns the first fault, which every later
    /// call returns too.
    pub(crate) fn fail(&self, error: Error) -> Error {
        if let Some(fault) = self.device_fault() {
            return self.record(fault);
        }
        self.record(error)
    }

    /// Keeps `error` unless a fault is known; a mismatch replaces a failed
    /// peer (the mismatch is the cause).
    fn record(&self, error: Error) -> Error {
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        let replace = matches!(
            (&*first, &error),
            (None, _) | (Some(Error::PeerFault { .. }), Error::Mismatch(_))
        );
        if replace {
            *first = Some(error);
            self.known.store(true, Ordering::Release);
        }
        first.clone().expect("set above")
    }

    /// The mirror's error word (0: no device fault).
    fn mirror_error(&self) -> u32 {
        self.mirror.as_ref().map_or(0, |m| m.load(host::ERROR))
    }

    /// The fault the device mirrored, as an error.
    fn device_fault(&self) -> Option<Error> {
        let mirror = self.mirror.as_ref()?;
        if mirror.load(host::ERROR) == 0 {
            return None;
        }
        let words = FaultWords {
            error: mirror.load(host::ERROR),
            info: mirror.load(host::INFO),
            mine: mirror.load_u64(host::MINE),
            theirs: mirror.load_u64(host::THEIRS),
        };
        DeviceFault::decode(words).map(|fault| fault_error(self.rank, self.timeout, &fault))
    }

    /// Gives the mirror up without freeing it: kernels that may still run
    /// hold its address.
    pub(crate) fn leak_mirror(&mut self) {
        if let Some(mirror) = self.mirror.take() {
            mirror.leak();
        }
    }
}

/// The error a device fault of rank `rank` is reported as.
pub(crate) fn fault_error(rank: usize, timeout: Duration, fault: &DeviceFault) -> Error {
    match fault {
        DeviceFault::Timeout(_) | DeviceFault::Unknown { .. } => Error::Timeout {
            rank,
            peer: fault.peer(),
            during: fault.describe(),
            timeout,
        },
        DeviceFault::PeerFailed(site) => Error::PeerFault {
            rank,
            peer: site.peer,
            during: fault.describe(),
        },
        DeviceFault::Mismatch { site, .. } => {
            let (mine, theirs) = fault.calls().unwrap_or_default();
            Error::Mismatch(format!(
                "rank {rank} and rank {} made different calls in the same call slot (found in \
                 {}): rank {rank} called {mine}, rank {} called {theirs}; every rank must issue \
                 the same sequence of collectives (collective, algorithm, dtype and size); this \
                 world is unusable now: build a new one",
                site.peer,
                fault.describe(),
                site.peer
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::WaitPhase;
    use crate::protocol::fault::FaultSite;
    use crate::protocol::registry::Kernel;
    use crate::protocol::signature::CallSignature;
    use crate::vocab::{Algo, Collective, DType};

    fn site(phase: WaitPhase) -> FaultSite {
        FaultSite {
            kernel: Some(Kernel::Algo(Algo::OneShotPull)),
            phase: Some(phase),
            peer: 1,
            block: 0,
        }
    }

    #[test]
    fn a_mismatch_names_both_ranks_and_both_calls() {
        let call = |dtype| CallSignature {
            kernel: Kernel::Algo(Algo::OneShotPull),
            collective: Collective::AllReduce,
            dtype,
            bytes_per_rank: 4096,
        };
        let fault = DeviceFault::Mismatch {
            site: site(WaitPhase::Handshake),
            mine: call(DType::Bf16).encode(),
            theirs: call(DType::F16).encode(),
        };
        match fault_error(0, Duration::from_secs(1), &fault) {
            Error::Mismatch(what) => {
                assert!(
                    what.contains(
                        "rank 0 called one_shot_pull all_reduce of 4096 bytes per rank in bf16"
                    ),
                    "{what}"
                );
                assert!(
                    what.contains(
                        "rank 1 called one_shot_pull all_reduce of 4096 bytes per rank in f16"
                    ),
                    "{what}"
                );
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[test]
    fn the_first_fault_stays_the_answer() {
        let health = Health::host_only(0, Duration::from_secs(1));
        assert!(health.check().is_ok());
        assert!(!health.is_broken());
        let first = health.fail(Error::Nccl {
            what: "ncclAllReduce".into(),
            code: "ncclSystemError".into(),
        });
        assert!(matches!(first, Error::Nccl { .. }));
        let later = health.fail(Error::Unsupported("a later problem".into()));
        assert!(matches!(later, Error::Nccl { .. }), "{later:?}");
        for _ in 0..3 {
            assert!(matches!(health.check(), Err(Error::Nccl { .. })));
        }
        assert!(health.is_broken());
    }

    #[test]
    fn a_mismatch_replaces_a_failed_peer_as_the_first_fault() {
        let health = Health::host_only(0, Duration::from_secs(1));
        let peer = health.fail(Error::PeerFault {
            rank: 0,
            peer: 1,
            during: "one_shot_pull (barrier 1, block 3)".into(),
        });
        assert!(matches!(peer, Error::PeerFault { .. }));
        let cause = health.fail(Error::Mismatch("rank 0 called x, rank 1 called y".into()));
        assert!(matches!(cause, Error::Mismatch(_)), "{cause:?}");
        assert!(matches!(health.check(), Err(Error::Mismatch(_))));
        // Nothing else replaces it.
        let later = health.fail(Error::PeerFault {
            rank: 0,
            peer: 2,
            during: "x".into(),
        });
        assert!(matches!(later, Error::Mismatch(_)));
    }

    #[test]
    fn timeouts_and_failed_peers_keep_their_kind() {
        let timeout = Duration::from_millis(50);
        match fault_error(2, timeout, &DeviceFault::Timeout(site(WaitPhase::Barrier1))) {
            Error::Timeout {
                rank: 2,
                peer: Some(1),
                during,
                timeout: t,
            } => {
                assert_eq!(during, "one_shot_pull (barrier 1, block 0)");
                assert_eq!(t, timeout);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            fault_error(2, timeout, &DeviceFault::PeerFailed(site(WaitPhase::Data))),
            Error::PeerFault {
                rank: 2,
                peer: 1,
                ..
            }
        ));
    }
}
