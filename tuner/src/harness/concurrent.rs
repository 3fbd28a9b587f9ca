//! Driving every rank of a single-process world at once, one thread per rank.
//!
//! NCCL needs this: with several GPUs in one process, a collective issued for one
//! rank can block until its peers issue theirs, so issuing ranks one after the
//! other from a single thread can deadlock. The custom kernels do not care, but
//! threads also make eager timing realistic (launch costs overlap).

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use kernels::{Error, RankComm, Result};

/// A reusable barrier for the rank threads that gives up when a rank fails,
/// so one failure never leaves the others waiting forever.
pub struct RankBarrier {
    state: Mutex<State>,
    wake: Condvar,
    parties: usize,
}

struct State {
    arrived: usize,
    generation: u64,
    failed: bool,
}

impl RankBarrier {
    pub fn new(parties: usize) -> RankBarrier {
        RankBarrier {
            state: Mutex::new(State {
                arrived: 0,
                generation: 0,
                failed: false,
            }),
            wake: Condvar::new(),
            parties,
        }
    }

    /// Waits until every party arrived; `Err(PeerFailed)` if one failed.
    pub fn wait(&self, rank: usize) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.failed {
            return Err(Error::PeerFailed { rank });
        }
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.wake.notify_all();
            return Ok(());
        }
        while state.generation == generation && !state.failed {
            state = self
                .wake
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if state.generation != generation {
            Ok(())
        } else {
            Err(Error::PeerFailed { rank })
        }
    }

    /// Releases everyone waiting, now and later.
    pub fn fail(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).failed = true;
        self.wake.notify_all();
    }
}

/// Runs `work(rank, state, barrier)` for every rank on its own thread and
/// returns the results in rank order, or the first error that is not merely a
/// consequence of another rank's failure.
pub fn for_each_rank<S, R, F>(ranks: &mut [RankComm], states: Vec<S>, work: F) -> Result<Vec<R>>
where
    S: Send,
    R: Send,
    F: Fn(&mut RankComm, S, &RankBarrier) -> Result<R> + Sync,
{
    assert_eq!(ranks.len(), states.len(), "one state per rank");
    let barrier = RankBarrier::new(ranks.len());
    let results: Vec<Result<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranks
            .iter_mut()
            .zip(states)
            .map(|(rank, state)| {
                let (work, barrier) = (&work, &barrier);
                scope.spawn(move || {
                    let result = work(rank, state, barrier);
                    if result.is_err() {
                        barrier.fail();
                    }
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut first_peer_failure = None;
    let mut values = Vec::with_capacity(results.len());
    for result in results {
        match result {
            Ok(v) => values.push(v),
            Err(e @ Error::PeerFailed { .. }) => {
                first_peer_failure.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match first_peer_failure {
        Some(e) => Err(e),
        None => Ok(values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn barrier_releases_everyone_each_round() {
        let r = Arc::new(RankBarrier::new(3));
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let r = r.clone();
                std::thread::spawn(move || (0..5).all(|_| r.wait(i).is_ok()))
            })
            .collect();
        assert!(handles.into_iter().all(|h| h.join().unwrap()));
    }

    #[test]
    fn a_failure_releases_the_waiters() {
        let r = Arc::new(RankBarrier::new(2));
        let waiter = {
            let r = r.clone();
            std::thread::spawn(move || r.wait(0))
        };
        std::thread::sleep(Duration::from_millis(20));
        r.fail();
        assert!(matches!(
            waiter.join().unwrap(),
            Err(Error::PeerFailed { rank: 0 })
        ));
        assert!(r.wait(1).is_err());
    }
}
