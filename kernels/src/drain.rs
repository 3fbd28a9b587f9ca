//! Waiting for a stream with a deadline instead of blocking in the driver, so a
//! hang the kernels cannot bound (an NCCL peer that died, a rendezvous whose
//! peer never came) ends in an error.

use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;

use crate::error::{DriverContext, Result};

/// Waits until the work issued on `stream` so far has finished, at most
/// `limit`. Returns `Ok(false)` when the deadline passed first. `poll` runs
/// about every 10 ms while waiting and can end the wait with its error (e.g.
/// NCCL reporting a failed peer). Yields, then sleeps 100 µs between checks.
pub(crate) fn drain_within(
    stream: &CudaStream,
    limit: Duration,
    mut poll: impl FnMut() -> Result<()>,
) -> Result<bool> {
    let done = stream
        .record_event(None)
        .during("recording an event to drain the stream")?;
    let start = Instant::now();
    let mut polled = start;
    loop {
        if done.try_is_complete().during("waiting for the stream")? {
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
