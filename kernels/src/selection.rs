//! The one place that talks to `policy`: which algorithm a call runs
//! ([`Selector::select`]) and how large the registered buffers are ([`capacity`]).

use crate::error::{Error, Result};

use crate::vocab::{Algo, Arch, Capacity, Collective, Link, Query};

/// The policy of one communicator: the tables in use plus the
/// `COLLTUNE_ALGO` override, read once when the world is built.
///
/// The tables are `policy::tables_in_use()`: `policy`'s own, or those an
/// engine compiled from its own `tuned/` and handed over with
/// `policy::use_tables` before building the world.
#[derive(Clone, Copy)]
pub(crate) struct Selector {
    policy: policy::Policy,
    tables: &'static policy::Tables,
}

impl Selector {
    pub(crate) fn from_env() -> Result<Selector> {
        policy::Policy::from_env()
            .map(Selector::with_override)
            .map_err(|e| Error::Policy(e.to_string()))
    }

    /// The tables plus an override given as text (`COLLTUNE_ALGO`'s syntax).
    #[cfg(test)]
    pub(crate) fn from_spec(spec: &str) -> Result<Selector> {
        policy::Policy::from_spec(spec)
            .map(Selector::with_override)
            .map_err(|e| Error::Policy(e.to_string()))
    }

    fn with_override(policy: policy::Policy) -> Selector {
        Selector {
            policy,
            tables: policy::tables_in_use(),
        }
    }

    /// The override in force, for the configuration every rank must share.
    pub(crate) fn describe(&self) -> String {
        format!("{:?}", self.policy)
    }

    pub(crate) fn select(&self, query: Query) -> Algo {
        self.policy.select_with(self.tables, query)
    }
}

/// How large a message `algo` takes for `collective` on this platform,
/// according to the tables in use.
pub(crate) fn capacity(arch: Arch, link: Link, collective: Collective, algo: Algo) -> Capacity {
    policy::tables_in_use().capacity(arch, link, collective, algo)
}

/// The choice of the tables in use (`policy`'s, or an engine's given to
/// `policy::use_tables`) for `query`, without the override.
pub fn table_choice(query: Query) -> Algo {
    policy::tables_in_use().select(query)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{DType, Mode};

    /// Selection and buffer sizes come from the tables in use (here the built-in
    /// ones: nothing in this binary hands over others), and the override still
    /// wins over them.
    #[test]
    fn answers_come_from_the_tables_in_use() {
        let tables = policy::tables_in_use();
        let query = |bytes| {
            Query::new(
                Collective::AllReduce,
                Arch::SM90,
                Link::NvLink,
                8,
                DType::Bf16,
                Mode::Graph,
                bytes,
            )
        };
        let plain = Selector::from_spec("").unwrap();
        for bytes in [0, 4096, 1 << 20, 64 << 20, u64::MAX] {
            assert_eq!(plain.select(query(bytes)), tables.select(query(bytes)));
            assert_eq!(table_choice(query(bytes)), tables.select(query(bytes)));
        }
        for algo in Collective::AllReduce.algos().iter().copied() {
            assert_eq!(
                capacity(Arch::SM90, Link::NvLink, Collective::AllReduce, algo),
                tables.capacity(Arch::SM90, Link::NvLink, Collective::AllReduce, algo)
            );
        }
        let forced = Selector::from_spec("all_reduce=nccl").unwrap();
        assert_eq!(forced.select(query(4096)), Algo::Nccl);
    }
}
