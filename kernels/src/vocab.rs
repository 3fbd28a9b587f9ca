//! The project's shared vocabulary, as `policy` exports it. Every public signature
//! of this crate uses these types, so engines and the tuner never convert.

pub use policy::{Algo, Arch, Capacity, Collective, DType, Link, Mode, Query};
