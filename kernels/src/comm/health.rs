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
//!
//! A fault only the host knows of (the last two ways) is also written into
//! the rank's error word on the device ([`DeviceWord`]), unless the device
//! recorded one first: the rank's queued kernels then mark their outputs as
//! failed instead of waiting, and its peers' waits stop with a failed peer
//! instead of running into their timeout (one fault ends every wait).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudarc::driver::CudaContext;

use crate::error::{Error, Result};
use crate::memory::{MappedHostWords, WordWriter};
use crate::protocol::fault::{DeviceFault, FaultWords};
use crate::protocol::host;

/// A rank's error word in its control block (device memory), and the writer
/// that puts a host-side fault there without waiting behind the rank's own
/// stream (which may hold a kernel that never ends).
pub(crate) struct DeviceWord {
    ctx: Arc<CudaContext>,
    /// Device address of `protocol::ctrl::ERROR` of this rank.
    addr: u64,
    /// Created with the first write: a healthy rank has no extra stream.
    writer: Mutex<Option<WordWriter>>,
}

impl DeviceWord {
    pub(crate) fn new(ctx: Arc<CudaContext>, addr: u64) -> DeviceWord {
        DeviceWord {
            ctx,
            addr,
            writer: Mutex::new(None),
        }
    }

    fn write(&self, value: u32) -> Result<()> {
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if writer.is_none() {
            *writer = Some(WordWriter::new(&self.ctx)?);
        }
        writer
            .as_ref()
            .expect("created above")
            .write(self.addr, value)
    }

    /// Whether the writes queued so far have landed (polled for at most
    /// `limit`): the control block may be freed only after them.
    fn settled_within(&self, limit: Duration) -> bool {
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        writer.as_ref().is_none_or(|w| w.settled_within(limit))
    }
}

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
    /// Where a host-side fault is written for the device (`None`: a rank
    /// whose kernels never run, or a unit test).
    device: Option<DeviceWord>,
}

impl Health {
    pub(crate) fn new(
        rank: usize,
        timeout: Duration,
        mirror: MappedHostWords,
        device: Option<DeviceWord>,
    ) -> Health {
        Health {
            rank,
            timeout,
            mirror: Some(mirror),
            first: Mutex::new(None),
            known: AtomicBool::new(false),
            device,
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
            device: None,
        }
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
                return Err(self.record(fault).0);
            }
            return Err(first);
        }
        match self.device_fault() {
            Some(fault) => Err(self.record(fault).0),
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
    /// call returns too. When `error` is the first, it is also written into
    /// the rank's error word on the device (see the module's documentation).
    pub(crate) fn fail(&self, error: Error) -> Error {
        if let Some(fault) = self.device_fault() {
            return self.record(fault).0;
        }
        let (first, was_first) = self.record(error);
        if was_first {
            self.publish();
        }
        first
    }

    /// Keeps `error` unless a fault is known; a mismatch replaces a failed
    /// peer (the mismatch is the cause). Returns the first fault, and whether
    /// `error` is the first this rank knows of.
    fn record(&self, error: Error) -> (Error, bool) {
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        let was_first = first.is_none();
        let replace = matches!(
            (&*first, &error),
            (None, _) | (Some(Error::PeerFault { .. }), Error::Mismatch(_))
        );
        if replace {
            *first = Some(error);
            self.known.store(true, Ordering::Release);
        }
        (first.clone().expect("set above"), was_first)
    }

    /// Writes a host-side fault into the rank's error word on the device,
    /// unless the device has recorded one (first fault wins). The device
    /// records with a compare-and-swap and this is a plain write, so a fault
    /// a kernel records in the microseconds between the mirror's read and
    /// the write's landing is overwritten on the device (not on the host,
    /// whose mirror keeps it): the word stays non-zero either way, which is
    /// all that its readers act on.
    fn publish(&self) {
        let Some(device) = &self.device else {
            return;
        };
        if self.mirror_error() != 0 {
            return;
        }
        if let Err(e) = device.write(crate::protocol::FAULT_HOST) {
            // The host still refuses every later call; only the peers' early
            // stop is lost (they run into their own timeouts).
            log::warn!(
                "colltune: rank {}: could not write its fault for the device ({e}); its peers \
                 will time out instead",
                self.rank
            );
        }
    }

    /// Whether the host-side fault written for the device (if any) has
    /// landed, polled for at most `limit`: the control block may be freed
    /// only after it.
    pub(crate) fn device_write_settled(&self, limit: Duration) -> bool {
        self.device
            .as_ref()
            .is_none_or(|device| device.settled_within(limit))
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
        // The host keeps a fault it found itself; its word is never decoded here.
        DeviceFault::Timeout(_) | DeviceFault::Host | DeviceFault::Unknown { .. } => {
            Error::Timeout {
                rank,
                peer: fault.peer(),
                during: fault.describe(),
                timeout,
            }
        }
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
            hidden: 0,
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
