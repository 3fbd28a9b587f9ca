//! The communicator: a world of ranks and the collectives each rank runs.

mod capture;
mod dispatch;
mod health;
mod identity;
mod membership;
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
pub use options::{Fallback, Options, Select};
pub use process::{EngineNccl, Join, ProcessSpec};
pub use rank::RankComm;
pub use setup::{arch_of, sm_count};
pub use symmetric::WindowBuffer;
pub use world::World;
