//! Waiting for a stream with a deadline instead of blocking in the driver, so a
//! hang the kernels cannot bound (an NCCL peer that died, a rendezvous whose
//! peer never came) ends in an error; and keeping a rank's eager calls from
//! queuing up behind such a hang until a launch blocks ([`InFlight`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaStream, sys};

use crate::error::{DriverContext, Result};

/// Waits until the work issued on `stream` so far has finished, at most
/// `limit`. Returns `Ok(false)` when the deadline passed first. `poll` runs
/// about every 10 ms while waiting and can end the wait with its error (e.g.
/// NCCL reporting a failed peer).
pub(crate) fn drain_within(
    stream: &CudaStream,
    limit: Duration,
    poll: impl FnMut() -> Result<()>,
) -> Result<bool> {
    let done = stream
        .record_event(None)
        .during("recording an event to drain the stream")?;
    wait_within(&done, limit, poll)
}

/// Waits until `event` (already recorded) has completed, at most `limit`;
/// `Ok(false)` when the deadline passed first. Polls the event instead of
/// `cuEventSynchronize`, which has no deadline. `poll` runs about every 10 ms
/// and can end the wait with its error. Yields for the first millisecond (a
/// replay pipeline waits microseconds), then sleeps 100 µs between checks.
pub(crate) fn wait_within(
    event: &CudaEvent,
    limit: Duration,
    mut poll: impl FnMut() -> Result<()>,
) -> Result<bool> {
    let start = Instant::now();
    let mut polled = start;
    loop {
        if event.try_is_complete().during("waiting for the stream")? {
            return Ok(true);
        }
        let waited = start.elapsed();
        if waited > limit {
            return Ok(false);
        }
        if polled.elapsed() >= Duration::from_millis(10) {
            poll()?;
            polled = Instant::now();
        }
        if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Calls between two marks of [`InFlight`].
const MARK_EVERY: u64 = 32;
/// Marks [`InFlight`] keeps: a call waits for the mark recorded this many
/// marks back.
const MARKS: usize = 8;
/// Eager calls a rank may have queued on its stream and not finished: a call
/// waits for the mark this many calls back, so at most this many plus
/// [`MARK_EVERY`] are ever in flight.
pub(crate) const EAGER_IN_FLIGHT: u64 = MARK_EVERY * MARKS as u64;

/// Bounds how many eager calls of a rank are queued and not finished. A launch
/// into a full stream queue blocks in the driver with no bound, and a kernel
/// that never ends (NCCL waiting for a peer that stopped calling) keeps the
/// queue full: past some thousand launches the next never returns. So every
/// [`MARK_EVERY`]-th call records an event on the stream (a mark) and first
/// waits, bounded, for the mark [`MARKS`] marks back: what was queued
/// [`EAGER_IN_FLIGHT`] calls ago must have finished. A healthy stream is
/// never that far behind, so the wait is a query of a completed event; the
/// other calls cost an increment and a compare.
pub(crate) struct InFlight {
    calls: AtomicU64,
    /// Taken only by the call that records a mark.
    marks: Mutex<Vec<Option<CudaEvent>>>,
}

impl InFlight {
    pub(crate) fn new() -> InFlight {
        InFlight {
            calls: AtomicU64::new(0),
            marks: Mutex::new((0..MARKS).map(|_| None).collect()),
        }
    }

    /// Before an eager call is queued on `stream`. `Ok(false)` when the call
    /// [`EAGER_IN_FLIGHT`] back had not finished within `limit`; `poll`
    /// (about every 10 ms of the wait) ends the wait early with its error.
    #[inline]
    pub(crate) fn before_call(
        &self,
        stream: &CudaStream,
        limit: Duration,
        poll: impl FnMut() -> Result<()>,
    ) -> Result<bool> {
        let calls = self.calls.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if !calls.is_multiple_of(MARK_EVERY) {
            return Ok(true);
        }
        self.mark(calls, stream, limit, poll)
    }

    #[cold]
    fn mark(
        &self,
        calls: u64,
        stream: &CudaStream,
        limit: Duration,
        poll: impl FnMut() -> Result<()>,
    ) -> Result<bool> {
        // A call issued into a capture is recorded, not run, and an event
        // recorded there cannot be waited for: no mark.
        if capturing(stream)? {
            return Ok(true);
        }
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let slot = ((calls / MARK_EVERY) % MARKS as u64) as usize;
        if let Some(oldest) = &marks[slot]
            && !wait_within(oldest, limit, poll)?
        {
            return Ok(false);
        }
        match &marks[slot] {
            Some(mark) => mark.record(stream),
            None => stream.record_event(None).map(|mark| {
                marks[slot] = Some(mark);
            }),
        }
        .during("recording an in-flight mark")?;
        Ok(true)
    }
}

/// Whether `stream` is being captured (or was, and the capture failed):
/// one driver query (`cuStreamIsCapturing`), which CUDA allows during a
/// capture.
pub(crate) fn capturing(stream: &CudaStream) -> Result<bool> {
    if stream.cu_stream().is_null() {
        // A context's legacy default stream, which CUDA never captures.
        return Ok(false);
    }
    // SAFETY: the stream is live (borrowed). No context needs binding: the
    // handle names the stream and its context (cudarc's `capture_status`
    // binds the context first, a second driver call).
    let status = unsafe { cudarc::driver::result::stream::is_capturing(stream.cu_stream()) }
        .during("asking whether the stream is being captured")?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_waits_for_the_one_the_bound_back() {
        // The mark a call waits for was recorded EAGER_IN_FLIGHT calls before
        // it: slot of call c is (c / EVERY) % MARKS, so the same slot comes
        // back every EVERY * MARKS calls.
        let slot = |calls: u64| (calls / MARK_EVERY) % MARKS as u64;
        for c in (MARK_EVERY..10 * EAGER_IN_FLIGHT).step_by(MARK_EVERY as usize) {
            assert_eq!(slot(c), slot(c + EAGER_IN_FLIGHT));
            assert!((1..MARKS as u64).all(|k| slot(c) != slot(c + k * MARK_EVERY)));
        }
        assert_eq!(EAGER_IN_FLIGHT, 256);
    }
}
