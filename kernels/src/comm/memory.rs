//! A world's memory: from its options and the tables in use to the buffers
//! it registers (`protocol::budget`), said once in the log, and what each
//! rank reports ([`RankComm::memory`]).

use super::options::{BufferSizing, Options};
use super::rank::RankComm;
use crate::error::{Error, Result};
use crate::protocol::budget::{self, Footprint, MemoryPlan, Registers, approx};
use crate::protocol::layout::Capacities;
use crate::selection::{self, Selector};
use crate::vocab::{AlgoKind, Arch, Link};

/// The capacities a world of `world` ranks on `(arch, link)` sizes its
/// buffers for, before any budget: the platform's as `options.buffers` says,
/// with the platform's NCCL window where `options.nccl_window` asks for it.
/// Every input is the same on every rank of a world: its tables and
/// override (`hello` round), its options (their effect, the capacities, is
/// compared in the `layout` round), its platform and size.
pub(crate) fn wanted(
    selector: &Selector,
    arch: Arch,
    link: Link,
    world: usize,
    options: &Options,
) -> Capacities {
    let platform = Capacities::from_fn(|c, a| selection::capacity(arch, link, c, a));
    let selected = selector.selected(&platform, arch, link, world);
    Capacities::from_fn(|collective, algo| {
        let window = algo.kind() == AlgoKind::Window;
        let from = match options.buffers {
            _ if window && options.nccl_window => &platform,
            BufferSizing::Capacities if !window => &platform,
            _ => &selected,
        };
        from.of(collective, algo)
    })
}

/// The buffers of a world: [`wanted`] within `options.memory_budget`.
pub(crate) fn plan(
    selector: &Selector,
    arch: Arch,
    link: Link,
    registers: Registers,
    options: &Options,
) -> Result<MemoryPlan> {
    let wanted = wanted(selector, arch, link, registers.world, options);
    budget::plan(&wanted, registers, options.memory_budget).map_err(Error::Unsupported)
}

/// [`plan`], for rank `rank` of the world being built: when the budget caps
/// the capacities, or cannot be met at all, rank 0 says so (the other ranks
/// computed the same).
pub(crate) fn plan_world(
    selector: &Selector,
    arch: Arch,
    link: Link,
    registers: Registers,
    options: &Options,
    rank: usize,
) -> Result<MemoryPlan> {
    let wanted = wanted(selector, arch, link, registers.world, options);
    let planned = plan(selector, arch, link, registers, options)?;
    if rank == 0 {
        if let (Some(cap), Some(limit)) = (planned.cap, options.memory_budget) {
            log::info!(
                "colltune: memory budget {} per rank: the custom algorithms take calls up to {} \
                 ({} asked for up to {}); larger calls run {}",
                approx(limit),
                approx(cap),
                match options.buffers {
                    BufferSizing::Tables => "the tables",
                    BufferSizing::Capacities => "the capacities",
                },
                approx(wanted.largest()),
                if registers.reference {
                    "the loopback reference collective"
                } else {
                    "NCCL"
                }
            );
        }
        if !planned.within(options.memory_budget) {
            log::warn!(
                "colltune: memory budget {} per rank is below what this world needs whatever \
                 its capacities ({}): no custom algorithm takes any call",
                approx(options.memory_budget.unwrap_or(0)),
                approx(planned.footprint.gpu())
            );
        }
    }
    Ok(planned)
}

/// Logs a rank's footprint once the world is built (rank 0: every rank of a
/// world registers the same).
pub(crate) fn announce(rank: usize, footprint: &Footprint) {
    if rank == 0 {
        log::info!("colltune: {footprint}");
    }
}

impl RankComm {
    /// This rank's memory by purpose, as its world allocated it: the
    /// registered push and staging regions, the control block, the NCCL
    /// window (0 when the world registered none) and the pinned host mirror.
    /// Every rank of a world has the same. Bounded by
    /// [`Options::memory_budget`] (GPU memory), unless that is below what a
    /// world needs whatever its capacities (a warning says so). Windows
    /// the engine allocates ([`RankComm::alloc_window`]) are not counted.
    pub fn memory(&self) -> Footprint {
        self.res.shared.footprint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::options::DEFAULT_MEMORY_BUDGET;
    use crate::vocab::{Algo, Collective};

    const MIB: u64 = 1 << 20;

    fn nvlink(world: usize) -> Registers {
        Registers {
            world,
            kernels: true,
            reference: false,
            window: true,
        }
    }

    fn window_of(options: &Options) -> u64 {
        let selector = Selector::from_spec("").unwrap();
        let wanted = wanted(&selector, Arch::SM90, Link::NvLink, 2, options);
        wanted
            .of(Collective::AllReduce, Algo::NcclSymmetric)
            .max_bytes
    }

    /// No shipped sm90 table selects nccl_symmetric: no window unless the
    /// options ask for one.
    #[test]
    fn the_nccl_window_only_when_a_table_selects_it_or_the_options_ask() {
        let tables = Options::default();
        assert_eq!(window_of(&tables), 0);
        let selector = Selector::from_spec("").unwrap();
        let planned = plan(&selector, Arch::SM90, Link::NvLink, nvlink(2), &tables).unwrap();
        assert_eq!(planned.window_bytes, 0);
        assert_eq!(planned.footprint.nccl_window, 0);
        let asked = Options {
            nccl_window: true,
            ..Options::default()
        };
        assert_eq!(window_of(&asked), 64 * MIB);
        // Buffers for every kernel still register no window unasked.
        let measuring = Options {
            buffers: BufferSizing::Capacities,
            ..Options::default()
        };
        assert_eq!(window_of(&measuring), 0);
        let measuring_windows = Options {
            nccl_window: true,
            ..measuring
        };
        assert_eq!(window_of(&measuring_windows), 64 * MIB);
        // The override selects it at every size: its capacity, a window.
        let forced = Selector::from_spec("nccl_symmetric").unwrap();
        let wanted = wanted(&forced, Arch::SM90, Link::NvLink, 2, &tables);
        assert_eq!(
            wanted
                .of(Collective::AllGather, Algo::NcclSymmetric)
                .max_bytes,
            64 * MIB
        );
    }

    #[test]
    fn buffers_sized_from_capacities_take_every_algorithm() {
        let selector = Selector::from_spec("").unwrap();
        let measuring = Options {
            buffers: BufferSizing::Capacities,
            memory_budget: None,
            nccl_window: true,
            ..Options::default()
        };
        let platform =
            Capacities::from_fn(|c, a| selection::capacity(Arch::SM90, Link::NvLink, c, a));
        let wanted = wanted(&selector, Arch::SM90, Link::NvLink, 2, &measuring);
        assert_eq!(wanted, platform);
        // A loopback world has no tables: by the tables it keeps nothing.
        let by_tables = super::wanted(
            &selector,
            Arch::SM90,
            Link::Loopback,
            2,
            &Options::default(),
        );
        assert_eq!(by_tables.largest(), 0);
    }

    /// The budgets the footprint table of kernels/GPU.md shows.
    const BUDGETS: [(&str, Option<u64>); 3] = [
        ("none", None),
        ("default (256 MiB)", Some(DEFAULT_MEMORY_BUDGET)),
        ("64 MiB", Some(64 * MIB)),
    ];

    /// The footprint table of kernels/GPU.md, "Memory": a world of one rank
    /// per H200 on NVLink with `policy`'s shipped tables and default options
    /// but the budget.
    fn footprint_table() -> String {
        let selector = Selector::from_spec("").unwrap();
        let mut out = String::from(
            "| world | budget | push | staging | control | NCCL window | GPU per rank | custom calls up to |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for world in [2, 4, 8] {
            for (name, budget) in BUDGETS {
                let options = Options {
                    memory_budget: budget,
                    ..Options::default()
                };
                let planned =
                    plan(&selector, Arch::SM90, Link::NvLink, nvlink(world), &options).unwrap();
                assert!(planned.within(budget));
                let f = planned.footprint;
                let window = if f.nccl_window == 0 {
                    "none".to_string()
                } else {
                    approx(f.nccl_window)
                };
                out.push_str(&format!(
                    "| {world} | {name} | {} | {} | {} | {window} | {} | {} |\n",
                    approx(f.push),
                    approx(f.staging),
                    approx(f.control),
                    approx(f.gpu()),
                    approx(planned.caps.largest()),
                ));
            }
        }
        out
    }

    /// kernels/GPU.md shows what the code computes: the table between its
    /// markers is [`footprint_table`], byte for byte.
    #[test]
    fn gpu_md_shows_the_footprints_the_code_computes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/GPU.md");
        let text = std::fs::read_to_string(path).unwrap();
        let begin = "<!-- footprints: generated by comm::memory::tests::footprint_table -->\n";
        let end = "<!-- end of footprints -->";
        let start = text
            .find(begin)
            .expect("GPU.md has the footprint table's markers")
            + begin.len();
        let stop = start + text[start..].find(end).expect("the end marker");
        let expected = footprint_table();
        assert!(
            text[start..stop] == expected,
            "kernels/GPU.md's footprint table differs from the code's; it should read:\n{expected}"
        );
    }

    /// The target: the shipped H200 tables take at most 256 MiB per
    /// rank by default at world sizes 2, 4 and 8.
    #[test]
    fn the_shipped_h200_tables_take_at_most_256_mib_by_default() {
        let selector = Selector::from_spec("").unwrap();
        for world in [2, 4, 8] {
            let planned = plan(
                &selector,
                Arch::SM90,
                Link::NvLink,
                nvlink(world),
                &Options::default(),
            )
            .unwrap();
            assert!(
                planned.footprint.gpu() <= 256 * MIB,
                "world {world}: {}",
                planned.footprint
            );
        }
    }
}
