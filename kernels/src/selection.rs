//! The one place that talks to `policy`: which algorithm a call runs
//! ([`Selector::select`]), the platform's capacities ([`capacity`]) and which
//! of them a world's calls can select ([`Selector::selected`]).

use crate::error::{Error, Result};
use crate::protocol::layout::Capacities;

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

    /// What of `platform` (the capacities on `(arch, link)`) the calls of a
    /// world of `world` ranks can select: the tables that answer `(arch,
    /// link)` (the arch fallback as `select` applies it), those of the
    /// world's size, and the override ([`Capacities::selected`]).
    pub(crate) fn selected(
        &self,
        platform: &Capacities,
        arch: Arch,
        link: Link,
        world: usize,
    ) -> Capacities {
        let answering = self.tables.table_arch(arch, link);
        let tables = self
            .tables
            .platforms()
            .iter()
            .filter(|p| Some(p.arch) == answering && p.link == link)
            .flat_map(|p| p.tables)
            .filter(|t| t.key.world_size as usize == world)
            .map(|t| (t.key.collective, t.bands));
        Capacities::selected(platform, tables, |c| self.policy.forced(c))
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

    fn platform(arch: Arch, link: Link) -> Capacities {
        Capacities::from_fn(|c, a| capacity(arch, link, c, a))
    }

    /// What a world's calls can select, from the shipped tables: for every
    /// size of every table of the world's size, the algorithm selected takes
    /// the size, and at the largest size a pair is kept for, some table
    /// selects it.
    #[test]
    fn a_world_keeps_exactly_what_its_tables_select() {
        let plain = Selector::from_spec("").unwrap();
        let tables = policy::tables_in_use();
        for world in [2u32, 4, 8] {
            let selected = plain.selected(
                &platform(Arch::SM90, Link::NvLink),
                Arch::SM90,
                Link::NvLink,
                world as usize,
            );
            let file = tables
                .platforms()
                .iter()
                .find(|p| p.arch == Arch::SM90 && p.link == Link::NvLink)
                .unwrap();
            for table in file.tables.iter().filter(|t| t.key.world_size == world) {
                for band in table.bands.iter().filter(|b| b.algo.is_custom()) {
                    let top = band.max.expect("the shipped custom bands are closed");
                    let q = table.key.query(Arch::SM90, Link::NvLink, top);
                    assert_eq!(tables.select(q), band.algo);
                    let cap = selected.of(table.key.collective, band.algo);
                    assert!(cap.max_bytes >= top, "{:?} {:?}", table.key, band.algo);
                }
            }
            for (collective, algo) in crate::protocol::layout::capacity_pairs() {
                let kept = selected.of(collective, algo).max_bytes;
                if kept == 0 {
                    continue;
                }
                let somewhere = file.tables.iter().any(|t| {
                    t.key.world_size == world
                        && t.key.collective == collective
                        && tables.select(t.key.query(Arch::SM90, Link::NvLink, kept)) == algo
                });
                assert!(somewhere, "world {world}: {algo:?} kept up to {kept} bytes");
            }
        }
        let ws2 = plain.selected(
            &platform(Arch::SM90, Link::NvLink),
            Arch::SM90,
            Link::NvLink,
            2,
        );
        // W = 2: one_shot_push up to its widest band (f32 graph), two_shot_pull
        // to 128 MiB; no table there selects one_shot_pull for all-reduce, nor
        // nccl_symmetric anywhere.
        assert_eq!(
            ws2.of(Collective::AllReduce, Algo::OneShotPush).max_bytes,
            7_099_776
        );
        assert_eq!(
            ws2.of(Collective::AllReduce, Algo::TwoShotPull).max_bytes,
            128 << 20
        );
        assert_eq!(
            ws2.of(Collective::AllReduce, Algo::OneShotPull).max_bytes,
            0
        );
        assert_eq!(
            ws2.of(Collective::AllReduce, Algo::NcclSymmetric).max_bytes,
            0
        );
        assert_eq!(
            ws2.of(Collective::AllGather, Algo::NcclSymmetric).max_bytes,
            0
        );
    }

    #[test]
    fn the_arch_fallback_and_missing_tables_decide_as_select_does() {
        let plain = Selector::from_spec("").unwrap();
        let of = |arch: Arch, link: Link, world: usize| {
            plain.selected(&platform(arch, link), arch, link, world)
        };
        // An sm9x without a file of its own borrows sm90's tables, as select does.
        let sm95 = Arch::from_compute_capability(9, 5);
        assert_eq!(
            policy::tables_in_use().table_arch(sm95, Link::NvLink),
            Some(Arch::SM90)
        );
        assert_eq!(of(sm95, Link::NvLink, 4), of(Arch::SM90, Link::NvLink, 4));
        assert!(of(sm95, Link::NvLink, 4).largest() > 0);
        // No file for the link, no table for the size, another major: NCCL
        // everywhere, so nothing is kept.
        assert_eq!(of(Arch::SM90, Link::Loopback, 2).largest(), 0);
        assert_eq!(of(Arch::SM90, Link::Pcie, 2).largest(), 0);
        assert_eq!(of(Arch::SM90, Link::NvLink, 3).largest(), 0);
        assert_eq!(
            of(Arch::from_compute_capability(7, 0), Link::NvLink, 2).largest(),
            0
        );
    }

    #[test]
    fn an_override_keeps_its_algorithm_at_its_platform_capacity() {
        let forced = Selector::from_spec("all_reduce=one_shot_pull").unwrap();
        let platform = platform(Arch::SM90, Link::NvLink);
        let selected = forced.selected(&platform, Arch::SM90, Link::NvLink, 2);
        assert_eq!(
            selected.of(Collective::AllReduce, Algo::OneShotPull),
            platform.of(Collective::AllReduce, Algo::OneShotPull)
        );
        assert_eq!(
            selected
                .of(Collective::AllReduce, Algo::TwoShotPull)
                .max_bytes,
            0
        );
        // All-gather still follows the table.
        assert_eq!(
            selected
                .of(Collective::AllGather, Algo::OneShotPull)
                .max_bytes,
            16 << 20
        );
    }
}
