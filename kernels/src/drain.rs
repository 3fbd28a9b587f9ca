//! Waiting for a stream with a deadline instead of blocking in the driver, so a
//! hang the kernels cannot bound (an NCCL peer that died, a rendezvous whose
//! peer never came) ends in an error.

use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaStream};

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
