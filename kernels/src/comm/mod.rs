//! The communicator: a world of ranks and the collectives each rank runs.

mod capture;
mod dispatch;
mod health;
mod identity;
mod membership;
mod memory;
mod one_caller;
mod options;
mod process;
mod rank;
mod registration;
mod resources;
mod setup;
mod symmetric;
mod world;

pub use capture::{Captured, Lifeline};
pub use options::{BufferSizing, DEFAULT_MEMORY_BUDGET, Fallback, Options, Select};
pub use process::{EngineNccl, Join, ProcessSpec};
pub use rank::RankComm;
pub use setup::{arch_of, sm_count};

/// A world's memory plan, for `raw::world_memory`.
pub(crate) use memory::plan as plan_memory;
pub use symmetric::WindowBuffer;
pub use world::World;
