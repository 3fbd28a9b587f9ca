//! The one place that talks to `policy`: which algorithm a call runs
//! ([`Selector::select`]) and how large the registered buffers are ([`capacity`]).

use crate::error::{Error, Result};

pub(crate) mod vocab {
    pub use policy::{Algo, Arch, Capacity, Collective, DType, Link, Mode, Query};
}

use vocab::{Algo, Arch, Capacity, Collective, Link, Query};

/// The policy of one communicator: the generated tables plus the
/// `COLLTUNE_ALGO` override, read once when the world is built.
pub(crate) struct Selector {
    policy: policy::Policy,
}

impl Selector {
    pub(crate) fn from_env() -> Result<Selector> {
        policy::Policy::from_env()
            .map(|policy| Selector { policy })
            .map_err(|e| Error::Policy(e.to_string()))
    }

    /// The tables plus an override given as text (`COLLTUNE_ALGO`'s syntax).
    #[cfg(test)]
    pub(crate) fn from_spec(spec: &str) -> Result<Selector> {
        policy::Policy::from_spec(spec)
            .map(|policy| Selector { policy })
            .map_err(|e| Error::Policy(e.to_string()))
    }

    /// The override in force, for the configuration every rank must share.
    pub(crate) fn describe(&self) -> String {
        format!("{:?}", self.policy)
    }

    pub(crate) fn select(&self, query: Query) -> Algo {
        self.policy.select(query)
    }
}

/// How large a message `algo` takes for `collective` on this platform.
pub(crate) fn capacity(arch: Arch, link: Link, collective: Collective, algo: Algo) -> Capacity {
    policy::capacity(arch, link, collective, algo)
}

/// The tables' choice for `query`, without the override.
pub fn table_choice(query: Query) -> Algo {
    policy::select(query)
}
