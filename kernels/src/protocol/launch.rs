//! Launch shapes. Spinning kernels need every block they wait for resident
//! (a block waiting for a peer block that cannot be scheduled never
//! finishes), so block counts are bounded by what the GPUs can hold.
//!
//! How much must be resident at once depends on where the ranks are:
//! - a rank with a GPU of its own waits only for peers on other GPUs, so its
//!   own grid must fit its GPU;
//! - ranks that share a GPU (a loopback world, or processes on one GPU) wait
//!   for each other's blocks on that GPU, so all their grids must fit it at
//!   once; and with programmatic dependent launch each of them may hold a
//!   second grid there too: the next kernel of its stream is scheduled while
//!   the current one still runs, and its blocks sit resident in
//!   `griddepcontrol.wait` (kernels/cuda/prims.cu). Those blocks take the room
//!   that a slower rank's current blocks need to start, so the bound counts
//!   two grids per rank. (A third cannot be resident: a kernel lets the next
//!   one be scheduled only once its own wait is over, i.e. once the kernel
//!   before it has completed.)
//!
//! What one SM holds is the occupancy of the world's heaviest kernel at the
//! block size (`cuOccupancyMaxActiveBlocksPerMultiprocessor`), not one block:
//! a world-size-8 `two_shot_push` block of 512 threads needs more than half an
//! SM's registers, so an SM holds one of them.

use super::{MAX_BLOCKS, MAX_WORLD, max_threads};

/// Threads per block and the most blocks one kernel of one rank may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Threads per block (0: the world launches no kernel).
    pub threads: u32,
    /// Blocks every kernel of one rank launches ([`LaunchShape::grid`]);
    /// blocks a small message leaves without work return at once (0: the
    /// world launches no kernel).
    pub max_blocks: u32,
}

impl LaunchShape {
    /// The shape of a world that launches no kernel (every call runs NCCL).
    pub const NONE: LaunchShape = LaunchShape {
        threads: 0,
        max_blocks: 0,
    };
}

/// Most blocks per rank a world whose ranks share a GPU gets by default: its
/// SMs are divided between the ranks anyway, and these worlds test
/// correctness, not speed.
pub const DEFAULT_SHARED_BLOCKS: u32 = 32;

/// Default threads per block for a world of `world` ranks: the largest block
/// its build allows, 1024 for a world of two and 512 otherwise (the measured
/// choice: docs/results.md, "Launch shape at world size 2").
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

/// What bounds the blocks a rank may launch on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Residency {
    pub placement: Placement,
    /// SMs of the GPU (the smallest of the world's GPUs).
    pub sm_count: u32,
    /// Blocks of the world's heaviest kernel one SM holds at the block size.
    pub blocks_per_sm: u32,
    /// Kernels launch with programmatic dependent launch.
    pub programmatic: bool,
}

impl Residency {
    /// Blocks of the heaviest kernel the GPU holds at once.
    pub fn gpu_blocks(&self) -> u64 {
        self.sm_count as u64 * self.blocks_per_sm as u64
    }

    /// Grids that must fit the GPU together (see the module documentation):
    /// one for a rank alone on its GPU; for ranks sharing one, one per rank,
    /// or two per rank with programmatic launch.
    pub fn grids_resident(&self) -> u64 {
        match self.placement {
            Placement::OwnGpus => 1,
            Placement::Shared { .. } => {
                self.placement.ranks_per_gpu() as u64 * if self.programmatic { 2 } else { 1 }
            }
        }
    }

    /// The most blocks per rank that can never deadlock.
    pub fn max_blocks(&self) -> u64 {
        self.gpu_blocks() / self.grids_resident()
    }

    fn explain(&self) -> String {
        let grids = match self.placement {
            Placement::OwnGpus => "one grid".to_string(),
            Placement::Shared { .. } => format!(
                "{} grids ({} rank(s) on one GPU{})",
                self.grids_resident(),
                self.placement.ranks_per_gpu(),
                if self.programmatic {
                    ", two each under programmatic launch"
                } else {
                    ""
                }
            ),
        };
        format!(
            "{grids} must be resident at once on {} SMs holding {} block(s) each",
            self.sm_count, self.blocks_per_sm
        )
    }
}

/// Checks a block size for a world of `world` ranks: a multiple of 32 within
/// the `__launch_bounds__` of the world's build, which depends on `world`
/// alone, with at least one thread per rank.
pub fn validate_threads(threads: u32, world: usize) -> Result<u32, String> {
    let max = max_threads(world);
    if threads < 32 || threads > max || !threads.is_multiple_of(32) {
        return Err(format!(
            "threads per block must be a multiple of 32 in 32..={max} for a world of {world}, \
             not {threads}"
        ));
    }
    if (threads as usize) < MAX_WORLD {
        return Err("a block needs at least one thread per rank".into());
    }
    Ok(threads)
}

impl LaunchShape {
    /// Checks a requested shape: the block size (`validate_threads`) and
    /// the block count against what can be resident (`Residency`).
    pub fn validate(self, world: usize, residency: &Residency) -> Result<Self, String> {
        validate_threads(self.threads, world)?;
        if self.max_blocks == 0 || self.max_blocks > MAX_BLOCKS {
            return Err(format!(
                "blocks per rank must be in 1..={MAX_BLOCKS}, not {}",
                self.max_blocks
            ));
        }
        let most = residency.max_blocks();
        if self.max_blocks as u64 > most {
            return Err(format!(
                "{} blocks per rank of {} threads cannot all be resident: {}, so at most {most} \
                 block(s) per rank (spinning blocks that are not resident would wait forever)",
                self.max_blocks,
                self.threads,
                residency.explain()
            ));
        }
        Ok(self)
    }

    /// The default block count for blocks of `threads`: on a shared GPU what
    /// can be resident (at most `DEFAULT_SHARED_BLOCKS`); on a GPU of its
    /// own one block per SM (which large messages need to keep enough NVLink
    /// traffic in flight; see [`LaunchShape::grid`]), or fewer if the GPU
    /// holds fewer.
    pub fn default_for(threads: u32, residency: &Residency) -> LaunchShape {
        let most = residency.max_blocks().min(MAX_BLOCKS as u64) as u32;
        let max_blocks = match residency.placement {
            Placement::Shared { .. } => most.min(DEFAULT_SHARED_BLOCKS),
            Placement::OwnGpus => most.min(residency.sm_count),
        };
        LaunchShape {
            threads,
            max_blocks: max_blocks.max(1),
        }
    }

    /// The grid of every kernel of a rank: always `max_blocks` blocks. Each
    /// block keeps its own copy of the rank's call state (see
    /// `protocol::ctrl`), so every kernel of a rank must launch the same
    /// grid; a block that a small message gives no work only updates its state
    /// and returns.
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

    fn h200(placement: Placement, blocks_per_sm: u32, programmatic: bool) -> Residency {
        Residency {
            placement,
            sm_count: 132,
            blocks_per_sm,
            programmatic,
        }
    }

    #[test]
    fn loopback_defaults_fit_with_two_grids_per_rank() {
        for world in [1, 2, 4, 8] {
            for blocks_per_sm in [1, 2] {
                for programmatic in [false, true] {
                    let residency = h200(shared(world), blocks_per_sm, programmatic);
                    let shape = LaunchShape::default_for(default_threads(world), &residency);
                    assert!(
                        shape.validate(world, &residency).is_ok(),
                        "world {world}: {shape:?}"
                    );
                    let grids = world as u64 * if programmatic { 2 } else { 1 };
                    assert!(grids * shape.max_blocks as u64 <= 132 * blocks_per_sm as u64);
                }
            }
        }
    }

    // The shapes that deadlocked on one H200 (two_shot_push, whose world-size
    // 4 and 8 blocks of 512 threads fill an SM each) are exactly the ones
    // refused now, and the ones that ran are allowed.
    #[test]
    fn the_shapes_that_deadlocked_on_one_gpu_are_refused() {
        let shape = |threads, max_blocks| LaunchShape {
            threads,
            max_blocks,
        };
        let w8 = h200(shared(8), 1, true);
        // 16 blocks x 8 ranks x 2 grids > 132: the old default.
        for blocks in [16, 12] {
            let err = shape(512, blocks).validate(8, &w8).unwrap_err();
            assert!(err.contains("cannot all be resident"), "{blocks}: {err}");
        }
        assert!(shape(512, 8).validate(8, &w8).is_ok());
        // Without programmatic launch, 16 blocks fit (it ran).
        assert!(
            shape(512, 16)
                .validate(8, &h200(shared(8), 1, false))
                .is_ok()
        );
        // Blocks of 256 threads: two per SM (it ran).
        assert!(
            shape(256, 16)
                .validate(8, &h200(shared(8), 2, true))
                .is_ok()
        );
        let w4 = h200(shared(4), 1, true);
        let err = shape(512, 32).validate(4, &w4).unwrap_err();
        assert!(err.contains("at most 16 block(s) per rank"), "{err}");
        assert_eq!(LaunchShape::default_for(512, &w4).max_blocks, 16);
        assert_eq!(LaunchShape::default_for(512, &w8).max_blocks, 8);
        let err = shape(512, 16).validate(8, &w8).unwrap_err();
        assert!(
            err.contains("16 grids (8 rank(s) on one GPU, two each under programmatic launch)")
                && err.contains("at most 8 block(s)"),
            "{err}"
        );
    }

    #[test]
    fn devices_use_one_block_per_sm() {
        let residency = h200(OwnGpus, 1, true);
        let shape = LaunchShape::default_for(1024, &residency);
        assert_eq!(shape.max_blocks, 132);
        assert!(shape.validate(2, &residency).is_ok());
        let big = Residency {
            sm_count: 1000,
            ..residency
        };
        assert_eq!(LaunchShape::default_for(512, &big).max_blocks, MAX_BLOCKS);
        // A GPU of its own needs only its own grid resident, programmatic or not.
        assert_eq!(residency.grids_resident(), 1);
    }

    #[test]
    fn too_many_blocks_on_a_shared_gpu_are_refused() {
        let shape = LaunchShape {
            threads: 512,
            max_blocks: 17,
        };
        let err = shape.validate(8, &h200(shared(8), 1, false)).unwrap_err();
        assert!(err.contains("resident"), "{err}");
        assert!(shape.validate(8, &h200(OwnGpus, 1, true)).is_ok());
        // Four processes on two GPUs: two ranks share each GPU.
        let shape = LaunchShape {
            threads: 512,
            max_blocks: 67,
        };
        assert!(
            shape
                .validate(4, &h200(shared(2), 1, false))
                .unwrap_err()
                .contains("2 rank(s)")
        );
    }

    #[test]
    fn odd_thread_counts_are_refused() {
        for threads in [0, 16, 100, 1056, 2048] {
            assert_eq!(
                validate_threads(threads, 2),
                Err(format!(
                    "threads per block must be a multiple of 32 in 32..=1024 for a world of 2, \
                     not {threads}"
                ))
            );
        }
    }

    #[test]
    fn blocks_of_1024_are_for_worlds_of_two_only() {
        for world in [1, 3, 4, 8] {
            let err = validate_threads(1024, world).unwrap_err();
            assert!(err.contains("32..=512"), "{world}: {err}");
            assert_eq!(default_threads(world), 512);
        }
        assert_eq!(validate_threads(1024, 2), Ok(1024));
        assert_eq!(default_threads(2), 1024);
    }

    #[test]
    fn a_shared_world_of_one_keeps_its_32_blocks() {
        // One rank alone on its GPU in a loopback world is placed as shared.
        let residency = h200(shared(1), 1, true);
        assert_eq!(LaunchShape::default_for(512, &residency).max_blocks, 32);
        assert_eq!(
            LaunchShape::default_for(512, &h200(OwnGpus, 1, true)).max_blocks,
            132
        );
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
    fn a_gpu_that_holds_nothing_leaves_no_valid_shape() {
        let residency = h200(shared(8), 0, true);
        assert_eq!(residency.max_blocks(), 0);
        let shape = LaunchShape::default_for(512, &residency);
        let err = shape.validate(8, &residency).unwrap_err();
        assert!(
            err.contains("holding 0 block(s) each, so at most 0 block(s) per rank"),
            "{err}"
        );
    }
}
