//! `tuner explain`: what runs one call, and why — which file answers the
//! (arch, link), which table, which band, what `policy::select` returns, and
//! whether the kernel takes the call or declines it to NCCL.
//!
//! The answer is the tables' selection ([`TableSet::select`], for the compiled
//! tables exactly `policy::select`) followed by `kernels`' decline rule
//! ([`policy::decline`]) on the world the tables promise: the same two steps
//! `kernels::RankComm` takes for every call. That world registers buffers for
//! what its tables select within a memory budget ([`WorldMemory`]: a world
//! with `kernels`' default options), which can lower every capacity to a
//! common cap.

use std::fmt::Write;

use policy::decline::{CallShape, Offer, decline};
use policy::{Algo, Arch, Capacity, Collective, Link, Query};
use serde::Serialize;

use crate::budgeted::selected_by;
use crate::format;
use crate::memory::Budget;
use crate::show::source_text;
use crate::tables::TableSet;

/// The most ranks of a world that `kernels` builds (`kernels::raw::MAX_WORLD`;
/// the tuner builds without `kernels` when its `gpu` feature is off, and a
/// test holds the two equal when it is on).
pub const MAX_WORLD: u32 = 8;

/// A world as the tables promise it to `kernels`' decline rule: the
/// platform's capacity for the chosen algorithm, peer access, and a window and
/// registered buffers sized from the capacities. Whether the GPUs reach each
/// other and NCCL registers a window only the GPUs can tell.
struct Promised(Capacity);

impl Offer for Promised {
    fn capacity(&self, _: Collective, _: Algo) -> Capacity {
        self.0
    }

    fn peer_access(&self) -> bool {
        true
    }

    fn window_bytes(&self) -> u64 {
        self.0.max_bytes
    }

    fn buffers_hold(&self, _: &CallShape) -> bool {
        true
    }
}

/// The memory budget of the world a query runs in, and the override its
/// engine honours (both collectives' choices share the budget).
#[derive(Clone, Copy, Debug)]
pub struct WorldMemory {
    pub budget: Budget,
    pub policy: policy::Policy,
}

impl WorldMemory {
    /// The cap the budget puts on every capacity of a world of
    /// `query`'s size on its platform, sized by `tables` as `kernels` sizes
    /// it (what the tables at that size select, with the override); `None`
    /// when what they select fits.
    pub fn cap(&self, tables: &TableSet, query: Query) -> Option<u64> {
        let (arch, link, world) = (query.arch, query.link, query.key.world_size);
        let capacities = crate::grid::custom_capacities(|collective, algo| {
            tables.capacity(arch, link, collective, algo)
        });
        let bands: Vec<(Collective, &[policy::Band])> = tables
            .platform_for(arch, link)
            .map(|p| p.tables)
            .unwrap_or_default()
            .iter()
            .filter(|t| t.key.world_size == world)
            .map(|t| (t.key.collective, t.bands))
            .collect();
        let wanted = selected_by(&bands, &capacities, &self.policy);
        self.budget.plan(&wanted, link, world).ok()?.cap
    }
}

/// Everything `explain` found out about one query: the text of `tuner
/// explain` ([`Explanation::render`]) and its JSON (`Serialize`).
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub query: Query,
    /// Where the tables come from ([`TableSet::origin`]).
    pub tables: String,
    /// The file that answers the (arch, link), if any.
    pub file: Option<File>,
    /// The table for the query's key in that file.
    pub table: Option<&'static policy::TableInfo>,
    /// The band holding the size.
    pub band: Option<BandOf>,
    /// What the tables select (for the compiled tables: `policy::select`).
    pub selected: Algo,
    /// `COLLTUNE_ALGO`, when it forces an algorithm for this collective.
    #[serde(rename = "override")]
    pub forced: Option<Forced>,
    /// The chosen custom algorithm's capacity on the platform.
    pub capacity: Option<Capacity>,
    /// The memory budget per rank of the world explained (`None`: not
    /// known, the tuner was built without `kernels`)…
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<u64>,
    /// …and the cap it puts on every capacity there (`None`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_cap: Option<u64>,
    /// What runs, and why.
    #[serde(rename = "because")]
    pub reason: String,
    pub runs: Algo,
}

/// The file that answers a query.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct File {
    /// As named to the macro (or loaded from disk).
    pub path: &'static str,
    pub arch: Arch,
    pub link: Link,
    pub gpu: &'static str,
    /// True when the file is another arch's, borrowed by the fallback rule.
    pub borrowed: bool,
}

/// The band holding a query's size: the `index`-th of `count`, its first and
/// last byte, its algorithm.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BandOf {
    pub index: usize,
    pub count: usize,
    pub first_byte: u64,
    pub last_byte: u64,
    pub algo: Algo,
}

/// An override (`COLLTUNE_ALGO`'s value) and the algorithm it forces.
#[derive(Clone, Debug, Serialize)]
pub struct Forced {
    pub value: String,
    pub algo: Algo,
}

impl Explanation {
    /// Works out what runs `query` with `tables`, and why. `forced` is an
    /// override engines honour (`COLLTUNE_ALGO`), with its text; `memory`
    /// the world's budget (`None`: not applied).
    pub fn new(
        tables: &TableSet,
        query: Query,
        forced: Option<Forced>,
        memory: Option<&WorldMemory>,
    ) -> Explanation {
        let key = query.key();
        let platform = tables.platform_for(query.arch, query.link);
        let table = platform.and_then(|p| p.table(key));
        let band = table.and_then(|t| {
            let ranges = tuned_schema::interpret::band_ranges(t.bands);
            let within = |&(low, high, _): &(u64, u64, Algo)| (low..=high).contains(&query.bytes);
            let index = ranges.iter().position(within)?;
            let (first_byte, last_byte, algo) = ranges[index];
            Some(BandOf {
                index,
                count: t.bands.len(),
                first_byte,
                last_byte,
                algo,
            })
        });
        let selected = tables.select(query);
        let chosen = forced.as_ref().map_or(selected, |f| f.algo);
        let world = key.world_size;
        let capacity = (chosen.is_custom() && chosen.implements(key.collective))
            .then(|| tables.capacity(query.arch, query.link, key.collective, chosen));
        let memory_cap = memory.and_then(|m| m.cap(tables, query));
        // NCCL, or the fused all-reduce + add + RMSNorm's unfused path.
        let fallback = key.collective.fallback();
        let fallback_name = fallback.name();
        let falls_back = |why: String| (fallback, why);
        let (runs, reason) = if query.bytes == 0 {
            falls_back(format!(
                "a 0-byte call moves nothing: every rank returns at once, runs no kernel and \
                 reports {fallback_name}"
            ))
        } else if world < 2 {
            falls_back(format!(
                "a world of {world} rank has no peer to exchange with, and tables are for 2 ranks or more"
            ))
        } else if world > MAX_WORLD {
            falls_back(format!(
                "kernels builds worlds of at most {MAX_WORLD} ranks; an engine of {world} ranks calls NCCL itself"
            ))
        } else if !chosen.is_custom() {
            let why = match (&forced, table) {
                (Some(f), _) => format!("{} forces {}", override_text(&f.value), chosen.name()),
                (None, Some(_)) => format!("the table selects {}", chosen.name()),
                (None, None) => format!("a query with no table selects {fallback_name}"),
            };
            (chosen, why)
        } else {
            let capacity =
                capacity.unwrap_or_else(|| policy::default_capacity(key.collective, chosen));
            let call = CallShape::new(key.collective, chosen, world as usize, query.bytes);
            let within = Capacity {
                max_bytes: capacity.max_bytes.min(memory_cap.unwrap_or(u64::MAX)),
                ..capacity
            };
            match (
                decline(&call, &Promised(capacity)),
                decline(&call, &Promised(within)),
            ) {
                (None, None) => (chosen, format!("{} takes the call", chosen.name())),
                (None, Some(_)) => falls_back(format!(
                    "{} declines it at run time: the memory budget of {} per rank caps \
                     every capacity of this world at {}, so {fallback_name} runs",
                    chosen.name(),
                    format::size(memory.map_or(0, |m| m.budget.bytes)),
                    format::exact_size(within.max_bytes)
                )),
                (Some(why), _) => falls_back(format!(
                    "{} declines it at run time ({}), so {fallback_name} runs",
                    chosen.name(),
                    why.describe()
                )),
            }
        };
        Explanation {
            query,
            tables: tables.origin(),
            file: platform.map(|p| File {
                path: p.file,
                arch: p.arch,
                link: p.link,
                gpu: p.gpu,
                borrowed: p.arch != query.arch,
            }),
            table,
            band,
            selected,
            forced,
            capacity,
            memory_budget: memory.map(|m| m.budget.bytes),
            memory_cap,
            runs,
            reason,
        }
    }

    /// The text `tuner explain` prints; its last line is `runs: <algo>`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let q = self.query;
        let key = q.key();
        let _ = writeln!(
            out,
            "query: {} on {} {}, {} bytes ({})",
            key,
            q.arch,
            q.link.name(),
            q.bytes,
            format::size(q.bytes)
        );
        let _ = writeln!(out, "tables: {}", self.tables);
        match self.file {
            None => {
                let _ = writeln!(
                    out,
                    "file: none for {} {} (nor for an earlier sm{}x minor on this link)",
                    q.arch,
                    q.link.name(),
                    q.arch.major
                );
            }
            Some(file) => {
                let _ = writeln!(
                    out,
                    "file: {} ({} {}, {})",
                    file.path,
                    file.arch,
                    file.link.name(),
                    file.gpu
                );
                if file.borrowed {
                    let _ = writeln!(
                        out,
                        "      {} has no file of its own; {} answers (same major, highest minor not above)",
                        q.arch, file.arch
                    );
                }
                match self.table {
                    None => {
                        let _ = writeln!(out, "table: none for {key} in this file");
                    }
                    Some(table) => {
                        let _ = writeln!(out, "table: {key}");
                        // The table's own source, or the file's when it names none.
                        let _ = writeln!(out, "source: {}", source_text(table));
                        if let Some(note) = table.note {
                            let _ = writeln!(out, "note: {note}");
                        }
                    }
                }
            }
        }
        if let Some(band) = self.band {
            let _ = writeln!(
                out,
                "band {} of {}: {} → {}",
                band.index + 1,
                band.count,
                band_range(band.first_byte, band.last_byte),
                band.algo.name()
            );
        }
        let _ = writeln!(out, "selected: {} (policy::select)", self.selected.name());
        if let Some(forced) = &self.forced {
            let _ = writeln!(
                out,
                "override: {} is set; engines that honour it run {} instead",
                override_text(&forced.value),
                forced.algo.name()
            );
        }
        if let Some(capacity) = self.capacity {
            let chosen = self.forced.as_ref().map_or(self.selected, |f| f.algo);
            let _ = writeln!(
                out,
                "capacity: {} takes ≤ {}, multiples of {} B{}",
                chosen.name(),
                format::exact_size(capacity.max_bytes),
                capacity.align,
                if key.collective == Collective::AllGather {
                    " per rank"
                } else {
                    ""
                }
            );
        }
        match (self.memory_budget, self.memory_cap) {
            (Some(budget), Some(cap)) => {
                let _ = writeln!(
                    out,
                    "memory: within {} per rank (kernels' default budget), this world's \
                     buffers hold calls up to {}",
                    format::size(budget),
                    format::exact_size(cap)
                );
            }
            (Some(budget), None) => {
                let _ = writeln!(
                    out,
                    "memory: what this world's tables select fits {} per rank (kernels' \
                     default budget)",
                    format::size(budget)
                );
            }
            (None, _) => {
                let _ = writeln!(
                    out,
                    "memory: not worked out (this tuner was built without kernels); a memory \
                     budget may send larger calls to nccl"
                );
            }
        }
        if self.runs.is_kernel() && q.link == policy::Link::Pcie {
            let _ = writeln!(
                out,
                "note: over PCIe the kernels also decline when the GPUs have no peer access to each other, which only the GPUs can tell"
            );
        }
        let _ = writeln!(out, "because: {}", self.reason);
        let _ = writeln!(out, "runs: {}", self.runs.name());
        out
    }
}

fn override_text(spec: &str) -> String {
    format!("{}={spec}", policy::OVERRIDE_ENV)
}

/// `bytes ≤ 512KiB` for the first band (it starts at 0), `128KiB < bytes ≤
/// 32MiB` for one after it, `32MiB < bytes` for the open band.
fn band_range(low: u64, high: u64) -> String {
    let upper = (high != u64::MAX).then(|| format::exact_size(high));
    match (low, upper) {
        (0, Some(upper)) => format!("bytes ≤ {upper}"),
        (0, None) => "every size".to_string(),
        (low, Some(upper)) => format!("{} < bytes ≤ {upper}", format::exact_size(low - 1)),
        (low, None) => format!("{} < bytes", format::exact_size(low - 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{Arch, DType, Link, Mode};
    use proptest::prelude::*;

    /// The explanation of `query` against the compiled tables, as text, for a
    /// world with `kernels`' default options where the tuner knows them.
    fn explain(query: Query) -> String {
        let memory = crate::memory::runtime_default().map(|budget| WorldMemory {
            budget,
            policy: policy::Policy::none(),
        });
        Explanation::new(&TableSet::Compiled, query, None, memory.as_ref()).render()
    }

    fn sm(major: u8, minor: u8) -> Arch {
        Arch::from_compute_capability(major, minor)
    }

    /// An all-reduce of bf16 in graph mode.
    fn all_reduce(arch: Arch, link: Link, world_size: u32, bytes: u64) -> Query {
        Query::new(
            Collective::AllReduce,
            arch,
            link,
            world_size,
            DType::Bf16,
            Mode::Graph,
            bytes,
        )
    }

    #[cfg(feature = "gpu")]
    #[test]
    fn max_world_is_the_kernels_bound() {
        assert_eq!(MAX_WORLD as usize, kernels::raw::MAX_WORLD);
    }

    /// The last line of an explanation.
    fn runs(text: &str) -> &str {
        text.lines()
            .last()
            .and_then(|l| l.strip_prefix("runs: "))
            .unwrap_or_else(|| panic!("no `runs:` line last: {text}"))
    }

    /// The cap `kernels` puts on every capacity of a world with its default
    /// options where `q` runs (`kernels::raw::world_memory`: the world's own
    /// plan, not the tuner's rendering of it); none known without `kernels`.
    fn world_cap(q: Query) -> Option<u64> {
        #[cfg(feature = "gpu")]
        {
            let options = kernels::Options::default();
            let world = q.key.world_size as usize;
            kernels::raw::world_memory(q.arch, q.link, world, &options)
                .expect("a plan")
                .0
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = q;
            None
        }
    }

    /// What a `kernels::RankComm` runs for `q` with the compiled tables,
    /// written out step by step from kernels' dispatch: nothing for 0 bytes;
    /// no world outside 2..=8 ranks; else `policy::select`, and NCCL where the
    /// custom kernel declines (past its capacity, which the default memory
    /// budget may have lowered).
    fn oracle(q: Query) -> Algo {
        let w = q.key.world_size;
        let fallback = q.key.collective.fallback();
        if q.bytes == 0 || !(2..=8).contains(&w) {
            return fallback;
        }
        let algo = policy::select(q);
        if !algo.is_custom() {
            return algo;
        }
        let c = q.key.collective;
        let cap = policy::capacity(q.arch, q.link, c, algo);
        let share = c.per_rank_size(u64::from(w), q.bytes);
        let fits = algo.implements(c)
            && cap.accepts_message(c, w, q.bytes)
            && world_cap(q).is_none_or(|limit| q.bytes <= limit)
            && share > 0
            && share.is_multiple_of(16)
            && (c != Collective::AllGather || q.bytes.is_multiple_of(u64::from(w)));
        if fits { algo } else { fallback }
    }

    fn query() -> impl Strategy<Value = Query> {
        let archs: Vec<Arch> = policy::PLATFORMS
            .iter()
            .flat_map(|p| [0, 3, 9].map(|minor| sm(p.arch.major, minor)))
            .chain([sm(7, 5), sm(12, 0)])
            .collect();
        let edges: Vec<u64> = policy::PLATFORMS
            .iter()
            .flat_map(|p| p.tables.iter().flat_map(|t| t.bands))
            .filter_map(|b| b.max)
            .chain(
                policy::PLATFORMS
                    .iter()
                    .flat_map(|p| p.capacities)
                    .map(|c| c.capacity.max_bytes),
            )
            .flat_map(|m| [m - 16, m - 1, m, m + 1, m + 16])
            .chain([0, 1, 15, 16, 17, 24, 32, 48, 64])
            .collect();
        (
            proptest::sample::select(archs),
            proptest::sample::select(Link::ALL.to_vec()),
            proptest::sample::select(Collective::ALL.to_vec()),
            prop_oneof![1u32..=10, Just(1000)],
            proptest::sample::select(DType::ALL.to_vec()),
            proptest::sample::select(Mode::ALL.to_vec()),
            prop_oneof![
                proptest::sample::select(edges),
                (0u64..1 << 20).prop_map(|b| b * 16),
                any::<u64>()
            ],
        )
            .prop_map(|(arch, link, c, w, d, m, bytes)| Query::new(c, arch, link, w, d, m, bytes))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// explain's final line is policy::select followed by kernels' decline rule.
        #[test]
        fn the_last_line_is_what_the_kernels_run(q in query()) {
            let text = explain(q);
            prop_assert_eq!(runs(&text), oracle(q).name(), "{}", text);
            let selected = format!("selected: {} (policy::select)", policy::select(q).name());
            prop_assert!(text.contains(&selected), "{}", text);
        }
    }

    #[test]
    fn every_band_edge_is_explained_as_policy_selects() {
        for p in policy::PLATFORMS {
            for t in p.tables {
                for b in t.bands {
                    let bytes = b.max.unwrap_or(1 << 40);
                    let q = t.key.query(p.arch, p.link, bytes);
                    let text = explain(q);
                    assert!(text.contains(p.file), "{text}");
                    assert!(
                        text.contains(&format!("\nsource: {}", t.source)),
                        "every table says where it came from: {text}"
                    );
                    assert!(text.contains(&format!("→ {}", b.algo.name())), "{text}");
                    assert_eq!(runs(&text), oracle(q).name(), "{text}");
                }
            }
        }
    }

    /// At world size 2 the H200 tables select two_shot_pull up to 128 MiB,
    /// which a world with the default budget does not take past 25.6 MiB.
    #[cfg(feature = "gpu")]
    #[test]
    fn a_call_past_what_the_memory_budget_holds_runs_nccl() {
        let text = explain(all_reduce(Arch::SM90, Link::NvLink, 2, 64 << 20));
        assert!(text.contains("selected: two_shot_pull"), "{text}");
        assert!(
            text.contains("memory: within 256MiB per rank (kernels' default budget), this world's buffers hold calls up to 25.60MiB"),
            "{text}"
        );
        assert!(
            text.contains("two_shot_pull declines it at run time: the memory budget of 256MiB per rank caps every capacity of this world at 25.60MiB"),
            "{text}"
        );
        assert_eq!(runs(&text), "nccl");
        // Below the cap the table's choice runs.
        let text = explain(all_reduce(Arch::SM90, Link::NvLink, 2, 16 << 20));
        assert_eq!(runs(&text), "two_shot_push", "{text}");
    }

    #[test]
    fn a_zero_byte_query_claims_no_lower_bound_and_runs_nothing() {
        let q = all_reduce(Arch::SM90, Link::NvLink, 8, 0);
        let text = explain(q);
        assert!(text.contains("band 1 of "), "{text}");
        assert!(text.contains(": bytes ≤ "), "{text}");
        assert!(!text.contains("0 < bytes"), "{text}");
        assert!(text.contains("a 0-byte call moves nothing"), "{text}");
        assert_eq!(runs(&text), "nccl");
    }

    #[test]
    fn a_size_the_kernel_declines_runs_nccl() {
        // 17 bytes: inside the first (custom) band of sm90 ws8 graph, but not
        // a multiple of 16.
        let q = all_reduce(Arch::SM90, Link::NvLink, 8, 17);
        let text = explain(q);
        let selected = policy::select(q);
        assert!(selected.is_custom(), "{text}");
        assert!(
            text.contains(&format!(
                "because: {} declines it at run time (the message is not a multiple of 16 bytes (per rank)), so nccl runs",
                selected.name()
            )),
            "{text}"
        );
        assert_eq!(runs(&text), "nccl");
    }

    #[test]
    fn world_sizes_outside_the_kernels_range_say_why() {
        for (w, why) in [(1, "no peer to exchange with"), (16, "at most 8 ranks")] {
            let q = all_reduce(Arch::SM90, Link::NvLink, w, 4096);
            let text = explain(q);
            assert!(text.contains(why), "{text}");
            assert_eq!(runs(&text), "nccl");
        }
    }

    #[test]
    fn no_file_means_nccl() {
        let q = all_reduce(sm(7, 5), Link::Pcie, 8, 4096);
        let text = explain(q);
        assert!(text.contains("file: none for sm75 pcie"), "{text}");
        assert!(text.contains("because: a query with no table selects nccl"));
        assert!(text.ends_with("runs: nccl\n"));
    }

    #[test]
    fn the_file_line_names_no_source_the_table_contradicts() {
        for p in policy::PLATFORMS {
            let Some(t) = p.tables.first() else { continue };
            let text = explain(t.key.query(p.arch, p.link, 4096));
            let file_line = text.lines().find(|l| l.starts_with("file: ")).unwrap();
            assert!(
                !file_line.contains("published") && !file_line.contains("measured"),
                "{file_line}"
            );
        }
    }

    #[test]
    fn a_missing_table_means_nccl() {
        let Some(p) = policy::PLATFORMS.first() else {
            return;
        };
        let q = all_reduce(p.arch, p.link, 7, 4096);
        let text = explain(q);
        assert!(
            text.contains("table: none for all_reduce ws7 bf16 graph"),
            "{text}"
        );
        assert!(text.ends_with("runs: nccl\n"));
    }
}
