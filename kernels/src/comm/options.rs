//! Knobs of a world, and how a call picks its algorithm.

use std::time::Duration;

use crate::module::KernelCache;
use crate::vocab::{Algo, Mode};

/// Configuration of a world, fixed when it is built.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bound on every device-side wait for a peer. A rank whose peer does not
    /// arrive within it records a fault that [`RankComm::check`](super::RankComm::check)
    /// returns as [`Error::Timeout`](crate::error::Error::Timeout), and the world
    /// is unusable from then on. Default 10 s, chosen from the GPU's worst
    /// honest call: the slowest call measured on an H200 takes
    /// 4.9 ms (the loopback reference collective, 16 MiB in a world of 8 ranks
    /// sharing the GPU), and processes that share a GPU are time-sliced at
    /// about 2.2 ms per exchange. What can keep a healthy peer away far longer
    /// is its host: a first call that loads or JIT-compiles the engine's own
    /// modules, a page-in, a descheduled thread. Ten seconds leave those room
    /// (a default below 5 s would not) and still report a dead peer within
    /// seconds. An engine whose ranks can drift further apart raises it; the
    /// error names this field.
    pub timeout: Duration,
    /// Bound on how long [`RankComm::check`](super::RankComm::check) waits for a stream
    /// to drain (catches hangs the kernels cannot bound, e.g. an NCCL peer that
    /// never calls). Default 60 s: a long queue of legitimate work must not trip it.
    pub drain_timeout: Duration,
    /// Blocks per rank per kernel; every kernel of a rank launches exactly this
    /// many (see `LaunchShape::grid`). Default: one per SM on dedicated GPUs
    /// (measured fastest on 2 x H200; a small message leaves most of them
    /// idle at no cost); where ranks share a GPU, as many as can all be
    /// resident at once (at most 32): the GPU's SMs times the blocks of the
    /// heaviest kernel one SM holds, divided by the ranks, and by two more
    /// under programmatic launch (the next kernel of each rank may already be
    /// resident). A request that could not be resident is refused.
    pub blocks: Option<u32>,
    /// Threads per block (multiple of 32; at most 1024 in a world of two,
    /// 512 otherwise, the `__launch_bounds__` of the world's kernels). Default:
    /// that largest block (measured fastest on 2 x H200; see
    /// `protocol::launch::default_threads`).
    pub threads: Option<u32>,
    /// Log the first decline of each kind, and rank 0's note on how the world
    /// was formed, at `info` level through the `log` facade (the engine's
    /// logger decides whether and where they appear). Default true.
    pub log_declines: bool,
    /// A world of processes ([`World::process`](super::World::process)): bound on
    /// each step of forming the world (NCCL init, every rendezvous round) and on
    /// the goodbye when a rank is dropped. In every world it also bounds a
    /// collective that NCCL answers with "in progress" (still connecting to its
    /// peers). A peer that never joins ends in
    /// [`Error::Timeout`](crate::error::Error::Timeout) after it. Default 60 s: processes
    /// start at different times and each compiles the kernels.
    pub join_timeout: Duration,
    /// Where every device-side sequence counter starts (barrier values, push
    /// epochs, staging uses; all 64-bit). Default 0. Tests and soaks start it
    /// just below the wrap point (`u64::MAX - n`) so that calls cross the wrap;
    /// every rank of a world must use the same value (it is part of the
    /// configuration digest of a world of processes).
    pub sequence_start: u64,
    /// Launch the custom kernels with programmatic dependent launch (sm_90 and
    /// later; ignored before). A kernel may then be scheduled while the kernel
    /// before it in the stream is still finishing, and waits on the device
    /// (`griddepcontrol.wait`, its first instruction) until that kernel has
    /// completed and its writes are visible, so the launch latency overlaps the
    /// previous kernel's tail. The ordering seen by the program is unchanged.
    /// Default true.
    pub programmatic_launch: bool,
    /// Create NCCL communicators in blocking mode. For A/B measurements of
    /// NCCL's own cost only: a blocking communicator can wait without a bound
    /// (forming the world, a collective whose peer never calls), which the
    /// default non-blocking mode turns into [`Error::Timeout`](crate::error::Error::Timeout).
    /// Default false.
    pub nccl_blocking: bool,
    /// Where compiled kernels are kept between processes. NVRTC takes
    /// seconds per build; a cached build is read in milliseconds. Default
    /// [`KernelCache::FromEnv`]: `COLLTUNE_CACHE_DIR` (an absolute folder, or
    /// `off`), else `$XDG_CACHE_HOME/colltune`, else `~/.cache/colltune`.
    /// Whatever the setting, a process compiles each build at most once. A
    /// cache that cannot be used (a folder the group or others can write, a
    /// damaged entry) is logged and the kernels are compiled: the cache never
    /// fails a world.
    pub kernel_cache: KernelCache,
    /// What the registered buffers are sized for. Default
    /// [`BufferSizing::Tables`]: only what the tables in use can select in
    /// this world.
    pub buffers: BufferSizing,
    /// GPU memory a world may register per rank (push and staging regions,
    /// control block, NCCL window; `None`: unbounded). When what the buffers
    /// are sized for exceeds it, every capacity is lowered to the largest
    /// common cap that fits, said once in the log; calls past it run NCCL
    /// (the loopback reference in a loopback world), as any call past a
    /// capacity does: never an error, never a wrong result.
    /// [`RankComm::memory`](super::RankComm::memory) says what was
    /// allocated. Default [`DEFAULT_MEMORY_BUDGET`] (256 MiB).
    pub memory_budget: Option<u64>,
    /// Register an NCCL window for `nccl_symmetric` (its platform capacity,
    /// within the budget) even when no table in use selects it, for engines
    /// that force it and for measuring. Where a table selects it the window
    /// is registered anyway (as large as the tables select it). Default false.
    pub nccl_window: bool,
}

/// The default [`Options::memory_budget`]: 256 MiB of GPU memory per rank.
/// The bound issue 30 sets for the shipped H200 tables at world sizes 2, 4
/// and 8, taken whole: a smaller default only sends more calls to NCCL.
/// What it costs each shipped table, and the footprints it gives, are in
/// kernels/GPU.md, "Memory".
pub const DEFAULT_MEMORY_BUDGET: u64 = 256 << 20;

/// What a world sizes its registered buffers for (see
/// [`Options::buffers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BufferSizing {
    /// Each algorithm gets the largest size a band of the tables in use
    /// selects it for in this world (its platform capacity at most; an open
    /// last band reaches it), or every size when `COLLTUNE_ALGO` forces it;
    /// an algorithm no band selects gets no buffer. A forced call
    /// ([`Select::Force`]) of such an algorithm declines. A world whose
    /// platform has no table (a loopback world, an architecture without a
    /// file) selects NCCL for everything and registers only its control
    /// block (and the loopback reference's staging).
    Tables,
    /// Every custom kernel gets its platform capacity, whatever the tables
    /// select: what the tuner and the GPU tests use to run every algorithm
    /// at every size it may take. The NCCL window is registered as with
    /// `Tables` ([`Options::nccl_window`] asks for it): registering one is a
    /// collective of its own, which a world that never uses it need not
    /// hold.
    Capacities,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(60),
            blocks: None,
            threads: None,
            log_declines: true,
            join_timeout: Duration::from_secs(60),
            sequence_start: 0,
            programmatic_launch: true,
            nccl_blocking: false,
            kernel_cache: KernelCache::FromEnv,
            buffers: BufferSizing::Tables,
            memory_budget: Some(DEFAULT_MEMORY_BUDGET),
            nccl_window: false,
        }
    }
}

/// How a call chooses its algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Select {
    /// Ask `policy` (tables plus the `COLLTUNE_ALGO` override) for a call in
    /// the mode it is issued in: the graph tables while the rank's stream is
    /// being captured (by [`RankComm::capture`](super::RankComm::capture) or
    /// by the engine), the eager ones otherwise. The default; it costs one
    /// driver query per call (`cuStreamIsCapturing`), and nothing at all on
    /// a graph's replay.
    #[default]
    Auto,
    /// Ask `policy` for a call in this mode, whatever the stream is doing.
    Policy(Mode),
    /// Run this algorithm (the tuner measures each one this way). A custom
    /// algorithm that cannot take the call still declines to the fallback.
    Force(Algo),
    /// The fused all-reduce + add + RMSNorm's unfused path with this
    /// all-reduce (declining as any all-reduce), then the add + RMSNorm
    /// kernel: `tuner bench` times the unfused path against every all-reduce
    /// this way, not only the one the tables pick. For the other
    /// collectives, the same as `Force(algo)`.
    Unfused(Algo),
}

/// What runs a call whose algorithm is NCCL or that a custom kernel declined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// NCCL itself (worlds of real devices, and a loopback world of one rank).
    Nccl,
    /// A loopback world of several ranks on one GPU, where NCCL refuses to run:
    /// this crate's reference collective (element-wise, chunked through the
    /// staging buffers, f32 sums in rank order). Correct for any size, eager or
    /// captured; its timings say nothing about NCCL.
    LoopbackReference,
}

impl Fallback {
    /// What it is, as a phrase for logs and messages (`NCCL`).
    pub fn describe(self) -> &'static str {
        match self {
            Fallback::Nccl => "NCCL",
            Fallback::LoopbackReference => "the loopback reference collective (NCCL unavailable)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_bound_every_wait() {
        let o = Options::default();
        // A peer's wait is never bounded below 5 s by default: a healthy peer
        // whose host pauses for a second must not end the world.
        assert_eq!(o.timeout, Duration::from_secs(10));
        assert!(o.timeout >= Duration::from_secs(5));
        assert!(o.drain_timeout > o.timeout);
        assert!(o.blocks.is_none() && o.threads.is_none() && o.log_declines);
        assert!(o.join_timeout > o.timeout);
    }

    #[test]
    fn by_default_buffers_follow_the_tables_within_256_mib() {
        let o = Options::default();
        assert_eq!(o.buffers, BufferSizing::Tables);
        assert_eq!(o.memory_budget, Some(256 << 20));
        assert!(!o.nccl_window);
    }
}
