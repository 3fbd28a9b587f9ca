//! The project's vocabulary, defined by `tuned-schema` and re-exported by
//! `policy`: the one path engines and the tuner name it by is `policy::…`
//! (`tuned_schema::…` is the same type). This crate's signatures use it.

pub(crate) use policy::{
    Algo, AlgoKind, Arch, Band, Capacity, Collective, DType, Link, Mode, Query,
};
