//! The communicator: a world of ranks and the collectives each rank runs.

mod capture;
mod dispatch;
mod health;
mod identity;
mod options;
mod process;
mod rank;
mod registration;
mod world;

pub use capture::{Captured, Lifeline};
pub use options::{Fallback, Options, Select};
pub use process::{Join, ProcessSpec};
pub use rank::RankComm;
pub use world::World;
pub use world::{arch_of, sm_count};
