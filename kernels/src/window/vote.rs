//! Whether the ranks of a world register an NCCL window: every rank says what
//! it can do before any rank registers, and every rank reads the same
//! decision off the same votes.
//!
//! Registering is a collective. A rank that cannot register (an NCCL older
//! than 2.27, `ncclMemAlloc` out of memory, windows switched off in its
//! environment) would leave its peers waiting in `ncclCommWindowRegister`
//! until their call bound, and the world would fail instead of declining
//! `nccl_symmetric`. So a rank first allocates its window, then votes
//! ([`Offer::vote`]: its NCCL version, the bytes it asks for, whether it
//! holds them ready), and registers only if every rank voted yes for the
//! same window ([`decide`], [`agree`]); otherwise it frees its memory, and no
//! rank ever enters the collective.

use crate::error::{Error, Result};
use crate::protocol::digest::{Digest, check_agreement};

/// The fields of a vote every rank must have equal for a window to be
/// registered: NCCL's version (symmetric kernels of different versions
/// need not agree on a window's layout) and the bytes asked for (NCCL
/// needs the same size on every rank).
const SHARED: [&str; 2] = ["window_nccl", "window_bytes"];

/// What one rank can do: its vote, and the memory it would register.
#[derive(Debug)]
pub(crate) struct Offer<M> {
    /// NCCL's version ("2.28.3"), `None` without NCCL.
    pub(crate) nccl: Option<String>,
    /// The bytes the rank asks for.
    pub(crate) bytes: u64,
    /// The memory, allocated and ready to register, or why the rank has none.
    pub(crate) memory: std::result::Result<M, String>,
}

impl<M> Offer<M> {
    /// The rank's vote, as it is sent to every peer.
    pub(crate) fn vote(&self) -> Digest {
        let ready = match &self.memory {
            Ok(_) => "yes".to_string(),
            Err(why) => format!("no: {why}"),
        };
        Digest::new()
            .with("window_nccl", self.nccl.as_deref().unwrap_or("none"))
            .with("window_bytes", self.bytes)
            .with("window_ready", ready)
    }
}

/// What every rank decides from the same votes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every rank holds the same window ready: every rank registers.
    Register,
    /// A rank cannot have a window (the lowest such rank, and why): no rank
    /// registers.
    Refused(String),
    /// Every rank could, but they would register different windows (the
    /// first difference, from rank 0's side): no rank registers.
    Differ(String),
}

/// The decision every rank takes from `votes` (every rank's, in rank order).
/// It depends on the votes alone, never on who reads them, so every rank of
/// a world comes to the same one.
pub(crate) fn decide(votes: &[Digest]) -> Outcome {
    if votes.is_empty() {
        return Outcome::Refused("no rank voted on a window".into());
    }
    for (rank, vote) in votes.iter().enumerate() {
        match vote.get("window_ready") {
            Some("yes") => {}
            Some(said) => {
                return Outcome::Refused(format!(
                    "rank {rank} cannot register an NCCL window: {}",
                    said.strip_prefix("no: ").unwrap_or(said)
                ));
            }
            None => return Outcome::Refused(format!("rank {rank} sent no window vote")),
        }
    }
    match check_agreement(0, votes, &SHARED) {
        Ok(()) => Outcome::Register,
        Err(why) => Outcome::Differ(why),
    }
}

/// One rank's window step: sends its vote (`exchange`: one round of the
/// world, which gives back every rank's vote in rank order), then registers
/// its memory (`register`) only if [`decide`] says every rank does;
/// otherwise the memory is dropped, that is freed, unregistered. Returns the
/// outcome (the same on every rank) and the registered window.
///
/// An error of the round is this rank's error (its memory freed). So is an
/// error of the registration: every rank voted yes, so its peers are in the
/// collective, and the world cannot decline any more.
pub(crate) fn agree<M, W>(
    offer: Offer<M>,
    exchange: impl FnOnce(&Digest) -> Result<Vec<Digest>>,
    register: impl FnOnce(M) -> Result<W>,
) -> Result<(Outcome, Option<W>)> {
    let votes = exchange(&offer.vote())?;
    let outcome = decide(&votes);
    match (outcome, offer.memory) {
        (Outcome::Register, Ok(memory)) => Ok((Outcome::Register, Some(register(memory)?))),
        (Outcome::Register, Err(why)) => Err(Error::Mismatch(format!(
            "the window round says every rank is ready, but this rank voted no ({why}): the \
             rendezvous gave back another vote in its place"
        ))),
        (outcome, _unregistered) => Ok((outcome, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    const MIB: u64 = 1 << 20;

    fn ready(nccl: &str, bytes: u64) -> Digest {
        Offer {
            nccl: Some(nccl.into()),
            bytes,
            memory: Ok(()),
        }
        .vote()
    }

    fn not_ready(why: &str) -> Digest {
        Offer::<()> {
            nccl: Some("2.28.3".into()),
            bytes: 64 * MIB,
            memory: Err(why.into()),
        }
        .vote()
    }

    #[test]
    fn every_rank_ready_with_the_same_window_registers() {
        let votes = vec![ready("2.28.3", 64 * MIB); 4];
        assert_eq!(decide(&votes), Outcome::Register);
        assert_eq!(decide(&votes[..1]), Outcome::Register, "a world of one");
    }

    #[test]
    fn one_rank_that_cannot_makes_every_rank_decline_naming_it() {
        let oom = "ncclMemAlloc of 67108864 bytes failed: ncclUnhandledCudaError";
        let mut votes = vec![ready("2.28.3", 64 * MIB); 3];
        votes[1] = not_ready(oom);
        let expected = Outcome::Refused(format!("rank 1 cannot register an NCCL window: {oom}"));
        assert_eq!(decide(&votes), expected);
        // The lowest rank that cannot is named, whatever else differs.
        votes[2] = not_ready("the loaded NCCL has no ncclMemAlloc");
        votes[0] = ready("2.27.3", 2 * MIB);
        assert_eq!(decide(&votes), expected);
        // A peer that sent no vote at all cannot either.
        votes[0] = Digest::new().with("rank", 0);
        assert_eq!(
            decide(&votes),
            Outcome::Refused("rank 0 sent no window vote".into())
        );
        assert!(matches!(decide(&[]), Outcome::Refused(_)));
    }

    #[test]
    fn ranks_that_would_register_different_windows_register_none() {
        let mut votes = vec![ready("2.28.3", 64 * MIB); 3];
        votes[2] = ready("2.27.7", 64 * MIB);
        assert_eq!(
            decide(&votes),
            Outcome::Differ(
                "rank 2 and rank 0 disagree on window_nccl: rank 2 has 2.27.7, rank 0 has 2.28.3"
                    .into()
            )
        );
        votes[2] = ready("2.28.3", 66 * MIB);
        assert_eq!(
            decide(&votes),
            Outcome::Differ(format!(
                "rank 2 and rank 0 disagree on window_bytes: rank 2 has {}, rank 0 has {}",
                66 * MIB,
                64 * MIB
            ))
        );
    }

    /// Memory that counts how often it was freed.
    struct Tracked(Arc<AtomicUsize>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_round_that_fails_frees_the_memory_and_is_the_ranks_error() {
        let freed = Arc::new(AtomicUsize::new(0));
        let offer = Offer {
            nccl: Some("2.28.3".into()),
            bytes: 64 * MIB,
            memory: Ok(Tracked(freed.clone())),
        };
        let outcome = agree(
            offer,
            |_| {
                Err(Error::Timeout {
                    rank: 0,
                    peer: Some(1),
                    during: "the rendezvous `window`".into(),
                    timeout: Duration::from_millis(10),
                })
            },
            |_memory: Tracked| -> Result<()> { panic!("registered without a round") },
        );
        assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_registration_that_fails_after_a_yes_is_the_ranks_error() {
        let offer = Offer {
            nccl: Some("2.28.3".into()),
            bytes: 64 * MIB,
            memory: Ok(()),
        };
        let outcome = agree(
            offer,
            |mine| Ok(vec![mine.clone(), mine.clone()]),
            |()| -> Result<()> {
                Err(Error::Nccl {
                    what: "ncclCommWindowRegister".into(),
                    code: "ncclSystemError".into(),
                })
            },
        );
        assert!(matches!(outcome, Err(Error::Nccl { .. })), "{outcome:?}");
    }

    #[test]
    fn a_round_that_gives_back_another_vote_in_this_ranks_place_is_refused() {
        let offer = Offer::<()> {
            nccl: Some("2.28.3".into()),
            bytes: 64 * MIB,
            memory: Err("no memory".into()),
        };
        let forged = ready("2.28.3", 64 * MIB);
        let outcome = agree(
            offer,
            |_| Ok(vec![forged.clone(), forged.clone()]),
            |()| -> Result<()> { panic!("registered without memory") },
        );
        assert!(matches!(outcome, Err(Error::Mismatch(_))), "{outcome:?}");
    }
}
