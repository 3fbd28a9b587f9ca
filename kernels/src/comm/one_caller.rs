//! One caller at a time on a rank. A rank's calls take `&self`, so a
//! `RankComm` can be shared between threads, but its collectives must not
//! overlap: each one queues work on the rank's one stream, and every rank of
//! a world must issue the same calls in the same order. Every call that
//! issues work takes a [`Turn`] for its duration; a call from a second thread
//! while one is in progress is refused ([`Error::Busy`]) before it does
//! anything, instead of interleaving with the first.
//!
//! The thread that holds the turn may call again from inside its call: the
//! closure of [`RankComm::capture`](super::RankComm::capture) issues the
//! rank's calls into the capture it holds the turn for.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// No thread is in a call.
const FREE: usize = 0;

/// Who is in a call on a rank: [`FREE`], or the thread's [`token`].
#[derive(Debug, Default)]
pub(crate) struct OneCaller {
    owner: AtomicUsize,
}

/// A call's turn; ends when dropped.
#[must_use = "the turn ends when it is dropped"]
pub(crate) struct Turn<'a> {
    /// `None` for a call made from inside the same thread's call, which
    /// ends nothing.
    held: Option<&'a AtomicUsize>,
}

impl OneCaller {
    /// The turn for a call of `what` on rank `rank`, or [`Error::Busy`] when
    /// another thread is in a call on it.
    #[inline]
    pub(crate) fn enter(&self, rank: usize, what: &'static str) -> Result<Turn<'_>> {
        let me = token();
        match self
            .owner
            .compare_exchange(FREE, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(Turn {
                held: Some(&self.owner),
            }),
            Err(owner) if owner == me => Ok(Turn { held: None }),
            Err(_) => Err(Error::Busy { rank, call: what }),
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.held {
            owner.store(FREE, Ordering::Release);
        }
    }
}

/// This thread's token: the address of a thread-local, distinct for every
/// live thread and never [`FREE`]. A thread ends its turns before it exits
/// (a turn is dropped on its own thread, panics included), so a token that a
/// later thread reuses is never still an owner.
fn token() -> usize {
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    TOKEN.with(|t| std::ptr::from_ref(t).addr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_thread_is_refused_while_a_call_is_in_progress() {
        let calls = OneCaller::default();
        let turn = calls.enter(3, "all_reduce").expect("the first call");
        std::thread::scope(|s| {
            let refused = s
                .spawn(|| calls.enter(3, "all_gather").map(drop))
                .join()
                .expect("the other thread");
            match refused {
                Err(Error::Busy { rank: 3, call }) => assert_eq!(call, "all_gather"),
                other => panic!("expected Busy, got {other:?}"),
            }
        });
        drop(turn);
        // The turn is over: the other thread may call now.
        std::thread::scope(|s| {
            s.spawn(|| calls.enter(3, "all_gather").map(drop))
                .join()
                .expect("the other thread")
                .expect("a call after the first ended");
        });
    }

    #[test]
    fn the_caller_may_call_from_inside_its_call_and_keeps_its_turn() {
        let calls = OneCaller::default();
        let outer = calls.enter(0, "capture").expect("the capture");
        let inner = calls.enter(0, "all_reduce").expect("a call inside it");
        drop(inner);
        // The inner call ended nothing: another thread is still refused.
        std::thread::scope(|s| {
            let refused = s.spawn(|| calls.enter(0, "all_reduce").map(drop)).join();
            assert!(matches!(refused, Ok(Err(Error::Busy { .. }))));
        });
        drop(outer);
        std::thread::scope(|s| {
            let allowed = s.spawn(|| calls.enter(0, "all_reduce").map(drop)).join();
            assert!(matches!(allowed, Ok(Ok(()))));
        });
    }

    #[test]
    fn a_panic_in_a_call_ends_its_turn() {
        let calls = OneCaller::default();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _turn = calls.enter(1, "all_reduce").expect("the call");
            panic!("a call that panics");
        }));
        assert!(unwound.is_err());
        std::thread::scope(|s| {
            let allowed = s.spawn(|| calls.enter(1, "all_reduce").map(drop)).join();
            assert!(matches!(allowed, Ok(Ok(()))));
        });
    }

    #[test]
    fn threads_have_distinct_tokens() {
        let mine = token();
        assert_ne!(mine, FREE);
        assert_eq!(mine, token());
        let theirs = std::thread::spawn(token).join().expect("the other thread");
        assert_ne!(mine, theirs);
    }
}
