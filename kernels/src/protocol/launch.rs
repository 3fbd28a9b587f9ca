//! Launch shapes. Spinning kernels need every block of every rank resident at
//! once (a block waiting for a peer block that cannot be scheduled never
//! finishes), so block counts are bounded by what the GPUs can hold.

use super::{MAX_BLOCKS, MAX_WORLD, max_threads};

/// Threads per block and the most blocks one kernel of one rank may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    pub threads: u32,
    pub max_blocks: u32,
}

/// Most blocks per rank a loopback world gets by default: its ranks share one
/// GPU, whose SMs are divided between them anyway.
pub const DEFAULT_LOOPBACK_BLOCKS: u32 = 32;
/// Default threads per block for a world of `world` ranks: the largest block
/// its build allows, 1024 for a world of two and 512 otherwise. Measured on
/// 2 x H200 (NVLink), bf16 all-reduce, NCCL in the same run: blocks of 1024
/// threads taking one pack per step beat blocks of 512 taking four, two or
/// one for the fastest algorithm at every size from 2 MiB to 16 MiB
/// (`two_shot_push` 8 MiB 26.8 µs against 29.3, 16 MiB 52.8 against 55.9;
/// blocks of 256 were slower still) and was within 1% of the fastest at
/// 32 MiB; at 1 MiB 512 x 1 was 0.2 µs faster, and at 64 MiB `two_shot_pull`
/// was about 1% slower than with 512 x 4 and 1.6% slower than with 1024 x 2. More warps per SM keep more stores in
/// flight while others wait for their data. Larger worlds keep 512: the
/// world-size-4, -8 and generic builds spill registers at 1024, and the larger
/// block was not measured on 4 or 8 GPUs.
pub const fn default_threads(world: usize) -> u32 {
    max_threads(world)
}

/// How a world's ranks sit on its GPUs, which decides the block count (the
/// block size depends on the world size alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every rank has a GPU of its own.
    OwnGpus,
    /// `ranks_per_gpu` ranks share each GPU (a loopback world, even of one
    /// rank, or a world of processes with more ranks than GPUs): their blocks
    /// must all be resident at once.
    Shared { ranks_per_gpu: usize },
}

impl Placement {
    /// Ranks whose blocks share one GPU's SMs.
    pub fn ranks_per_gpu(self) -> usize {
        match self {
            Placement::OwnGpus => 1,
            Placement::Shared { ranks_per_gpu } => ranks_per_gpu.max(1),
        }
    }
}

impl LaunchShape {
    /// Checks a requested shape for a world of `world` ranks placed as
    /// `placement` says: the block size against the `__launch_bounds__` of the
    /// world's build, which depends on `world` alone, and co-residency, which
    /// depends on the placement alone: ranks per GPU x `max_blocks` blocks
    /// must fit on `sm_count` SMs, one block per SM at least.
    pub fn validate(
        self,
        world: usize,
        placement: Placement,
        sm_count: u32,
    ) -> Result<Self, String> {
        let max = max_threads(world);
        if self.threads < 32 || self.threads > max || !self.threads.is_multiple_of(32) {
            return Err(format!(
                "threads per block must be a multiple of 32 in 32..={max} for a world of \
                 {world}, not {}",
                self.threads
            ));
        }
        if (self.threads as usize) < MAX_WORLD {
            return Err("a block needs at least one thread per rank".into());
        }
        if self.max_blocks == 0 || self.max_blocks > MAX_BLOCKS {
            return Err(format!(
                "blocks per rank must be in 1..={MAX_BLOCKS}, not {}",
                self.max_blocks
            ));
        }
        let sharing = placement.ranks_per_gpu();
        if sharing as u64 * self.max_blocks as u64 > sm_count as u64 {
            return Err(format!(
                "{} blocks per rank x {sharing} rank(s) on one GPU exceed its {sm_count} SMs: \
                 spinning blocks must all be resident at once (choose blocks <= {})",
                self.max_blocks,
                sm_count as usize / sharing
            ));
        }
        Ok(self)
    }

    /// The default shape for a world of `world` ranks placed as `placement`
    /// says: blocks of `default_threads(world)`; on a shared GPU its SMs are
    /// split between the ranks (at most `DEFAULT_LOOPBACK_BLOCKS`, 32, each);
    /// a rank with a GPU of its own uses one block per SM, which large
    /// messages need to keep enough NVLink traffic in flight (see
    /// [`LaunchShape::grid`]).
    pub fn default_for(world: usize, placement: Placement, sm_count: u32) -> LaunchShape {
        let max_blocks = match placement {
            Placement::Shared { .. } => {
                (sm_count / placement.ranks_per_gpu() as u32).min(DEFAULT_LOOPBACK_BLOCKS)
            }
            Placement::OwnGpus => sm_count.min(MAX_BLOCKS),
        };
        LaunchShape {
            threads: default_threads(world),
            max_blocks: max_blocks.max(1),
        }
    }

    /// The grid of every kernel of a rank: always `max_blocks` blocks. Each
    /// block keeps its own copy of the rank's call state (see
    /// `protocol::ctrl`), so every kernel of a rank must launch the same
    /// grid; a block that a small message gives no work only updates its state
    /// and returns. Measured on 2 x H200 (NVLink): one block per SM beat 32
    /// blocks at every size from 256 KiB up and tied below, where only the
    /// first blocks have work.
    pub fn grid(self) -> u32 {
        self.max_blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::world_specialisation;
    use Placement::{OwnGpus, Shared};

    fn shared(n: usize) -> Placement {
        Shared { ranks_per_gpu: n }
    }

    #[test]
    fn h200_loopback_defaults_are_co_resident() {
        for world in [1, 2, 4, 8] {
            let shape = LaunchShape::default_for(world, shared(world), 132);
            assert!(
                shape.validate(world, shared(world), 132).is_ok(),
                "world {world}: {shape:?}"
            );
            assert!(world as u32 * shape.max_blocks <= 132);
        }
        assert_eq!(LaunchShape::default_for(8, shared(8), 132).max_blocks, 16);
        assert_eq!(LaunchShape::default_for(2, shared(2), 132).max_blocks, 32);
    }

    #[test]
    fn devices_use_one_block_per_sm() {
        let shape = LaunchShape::default_for(2, OwnGpus, 132);
        assert_eq!(shape.max_blocks, 132);
        assert!(shape.validate(2, OwnGpus, 132).is_ok());
        assert_eq!(
            LaunchShape::default_for(8, OwnGpus, 1000).max_blocks,
            MAX_BLOCKS
        );
    }

    #[test]
    fn too_many_blocks_on_a_shared_gpu_are_refused() {
        let shape = LaunchShape {
            threads: 512,
            max_blocks: 17,
        };
        let err = shape.validate(8, shared(8), 132).unwrap_err();
        assert!(err.contains("resident"), "{err}");
        assert!(shape.validate(8, OwnGpus, 132).is_ok());
        // Four processes on two GPUs: two ranks share each GPU.
        let shape = LaunchShape {
            threads: 512,
            max_blocks: 67,
        };
        assert!(
            shape
                .validate(4, shared(2), 132)
                .unwrap_err()
                .contains("2 rank(s)")
        );
    }

    #[test]
    fn odd_thread_counts_are_refused() {
        for threads in [0, 16, 100, 1056, 2048] {
            let shape = LaunchShape {
                threads,
                max_blocks: 4,
            };
            assert!(shape.validate(2, OwnGpus, 132).is_err(), "{threads}");
        }
    }

    #[test]
    fn blocks_of_1024_are_for_worlds_of_two_only() {
        let shape = LaunchShape {
            threads: 1024,
            max_blocks: 4,
        };
        for placement in [OwnGpus, shared(2)] {
            assert!(shape.validate(2, placement, 132).is_ok());
        }
        for world in [1, 3, 4, 8] {
            let err = shape.validate(world, OwnGpus, 132).unwrap_err();
            assert!(err.contains("32..=512"), "{world}: {err}");
        }
        for placement in [OwnGpus, shared(2)] {
            assert_eq!(LaunchShape::default_for(2, placement, 132).threads, 1024);
        }
        for world in [1, 3, 4, 8] {
            assert_eq!(LaunchShape::default_for(world, OwnGpus, 132).threads, 512);
        }
    }

    #[test]
    fn the_block_size_follows_the_world_not_the_gpu_sharing() {
        // A world of two processes, one per GPU, runs the world-size-2 build:
        // blocks of 1024 by default, and 1024 is allowed.
        let own_gpus = LaunchShape::default_for(2, OwnGpus, 132);
        assert_eq!(own_gpus.threads, 1024);
        assert!(own_gpus.validate(2, OwnGpus, 132).is_ok());
        // Four processes on two GPUs run the world-size-4 build (bounded at
        // 512), two ranks per GPU.
        let two_per_gpu = LaunchShape::default_for(4, shared(2), 132);
        assert_eq!(two_per_gpu.threads, 512);
        assert_eq!(two_per_gpu.max_blocks, 32);
        assert!(two_per_gpu.validate(4, shared(2), 132).is_ok());
    }

    #[test]
    fn a_loopback_world_of_one_keeps_its_32_blocks() {
        // One rank alone on its GPU in a loopback world is placed as shared:
        // 32 blocks, as before the placement was spelled out.
        assert_eq!(LaunchShape::default_for(1, shared(1), 132).max_blocks, 32);
        assert_eq!(LaunchShape::default_for(1, OwnGpus, 132).max_blocks, 132);
    }

    #[test]
    fn the_limit_checked_is_the_one_the_build_is_compiled_with() {
        // kernel_source bounds a build by max_threads(its CT_WORLD); validate
        // checks max_threads(world). They must agree for every world.
        for world in 1..=MAX_WORLD {
            assert_eq!(
                max_threads(world),
                max_threads(world_specialisation(world) as usize),
                "world {world}"
            );
        }
    }

    #[test]
    fn every_kernel_launches_the_whole_grid() {
        let shape = LaunchShape {
            threads: 512,
            max_blocks: 32,
        };
        assert_eq!(shape.grid(), 32);
    }
}
