//! The worlds the tuner measures on: their options ([`measuring`]), and a
//! world that is built again after it breaks ([`WorldKeeper`]), so that one
//! failed configuration stays one failure: `tuner bench` goes on with a fresh
//! world after a configuration broke the one it ran on (a kernel that timed
//! out, a mismatch), instead of reporting every later configuration as failed.

use kernels::{BufferSizing, Options, RankComm, Result};

use super::timing::build_world;

/// The options of a world that runs every algorithm at every size it may
/// take: buffers for each kernel at its platform capacity, whatever the
/// tables in use select (`BufferSizing::Capacities`), an NCCL window for
/// `nccl_symmetric` when `nccl_window`, all within `budget` bytes of GPU
/// memory per rank (`None`: unbounded). What the sweep, `tuner bench` and
/// the GPU tests that force algorithms build.
pub fn measuring(budget: Option<u64>, nccl_window: bool) -> Options {
    Options {
        buffers: BufferSizing::Capacities,
        memory_budget: budget,
        nccl_window,
        ..Options::default()
    }
}

/// The ranks of one world, rebuilt on demand.
pub struct WorldKeeper {
    loopback: Option<usize>,
    devices: Vec<usize>,
    options: Options,
    ranks: Option<Vec<RankComm>>,
    rebuilt: usize,
}

impl WorldKeeper {
    /// `Some(n)` ranks on GPU `devices[0]` (or 0) as a loopback world, or one
    /// rank on each of `devices`; built now.
    pub fn new(
        loopback: Option<usize>,
        devices: &[usize],
        options: Options,
    ) -> Result<WorldKeeper> {
        let mut keeper = WorldKeeper {
            loopback,
            devices: devices.to_vec(),
            options,
            ranks: None,
            rebuilt: 0,
        };
        keeper.ranks()?;
        Ok(keeper)
    }

    /// The world's ranks, built if the last one was given up.
    pub fn ranks(&mut self) -> Result<&mut [RankComm]> {
        if self.ranks.is_none() {
            self.ranks = Some(build_world(
                self.loopback,
                &self.devices,
                self.options.clone(),
            )?);
        }
        Ok(self.ranks.as_mut().expect("built above").as_mut_slice())
    }

    /// Gives the world up if any rank knows of a fault: every call of such a
    /// world fails, so the next [`WorldKeeper::ranks`] builds a new one.
    /// Returns whether it did. Dropping a broken world is bounded (the ranks
    /// abort NCCL and leak what their kernels may still use).
    pub fn recover(&mut self) -> bool {
        let broken = self
            .ranks
            .as_ref()
            .is_some_and(|ranks| ranks.iter().any(|r| r.health().is_err()));
        if broken {
            self.ranks = None;
            self.rebuilt += 1;
        }
        broken
    }

    /// How many times a broken world was given up.
    pub fn rebuilt(&self) -> usize {
        self.rebuilt
    }
}
