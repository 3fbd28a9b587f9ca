//! `tuner show`: the tables compiled into `policy` (`policy::PLATFORMS`), or
//! tuned files on disk, as a person reads them: per platform its sources,
//! capacities, and per key one line of bands and one line saying where they
//! come from. An arch is answered as `policy` answers it: by its own file, or
//! by the one the fallback rule borrows ([`TableSet::platform_for`]).

use std::fmt::Write;

use policy::{Arch, CapacityEntry, Collective, DType, Link, Mode};
use policy::{PlatformInfo, TableInfo};
use serde::Serialize;
use serde_json::{Value, json};

use crate::commands::args;
use crate::format;
use crate::tables::TableSet;

/// Which tables to show; `None` shows all. `tuner show`'s flags, whose help
/// the field docs are.
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
#[allow(
    rustdoc::invalid_html_tags,
    reason = "the docs are the --help text, where sm<major><minor> is literal"
)]
pub struct ShowFilter {
    /// The file that answers this GPU architecture: sm<major><minor>, e.g.
    /// sm80, sm90, sm100, sm103 (its own, or the same major's highest minor
    /// below it)
    #[arg(long, value_parser = args::arch)]
    pub arch: Option<Arch>,
    /// Only files for this interconnect: nvlink, pcie or loopback
    #[arg(long, value_parser = args::link)]
    pub link: Option<Link>,
    /// Only tables of all_reduce or all_gather
    #[arg(long, value_parser = args::collective)]
    pub collective: Option<Collective>,
    /// Only tables for this many ranks, 2 to 1024
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub world_size: Option<u32>,
    /// Only tables of this element type: bf16, f16 or f32
    #[arg(long, value_parser = args::dtype)]
    pub dtype: Option<DType>,
    /// Only tables of this mode: graph or eager
    #[arg(long, value_parser = args::mode)]
    pub mode: Option<Mode>,
    /// Also print each table's note (how it was measured or where it was read)
    #[arg(long)]
    pub notes: bool,
}

impl ShowFilter {
    fn table(&self, t: &TableInfo) -> bool {
        let k = t.key;
        self.collective.is_none_or(|c| c == k.collective)
            && self.world_size.is_none_or(|w| w == k.world_size)
            && self.dtype.is_none_or(|d| d == k.dtype)
            && self.mode.is_none_or(|m| m == k.mode)
    }

    /// The platforms to show, each with the arch it answers for when that is
    /// not its own; `None` when an arch was asked for and no file answers it.
    fn platforms(&self, tables: &TableSet) -> Vec<(&'static PlatformInfo, Option<Arch>)> {
        let links: Vec<Link> = match self.link {
            Some(link) => vec![link],
            None => Link::ALL.to_vec(),
        };
        match self.arch {
            None => tables
                .platforms()
                .iter()
                .filter(|p| links.contains(&p.link))
                .map(|p| (p, None))
                .collect(),
            Some(arch) => links
                .into_iter()
                .filter_map(|link| tables.platform_for(arch, link))
                .map(|p| (p, (p.arch != arch).then_some(arch)))
                .collect(),
        }
    }
}

/// The text of `tuner show` for `tables`.
pub fn render(tables: &TableSet, filter: &ShowFilter) -> String {
    let mut out = format!("tables: {}\n\n", tables.origin());
    let shown = filter.platforms(tables);
    for &(platform, answers) in &shown {
        if let Some(arch) = answers {
            let _ = writeln!(
                out,
                "{arch} {}: no file of its own; {} {} answers it (same major, highest minor not above)",
                platform.link.name(),
                platform.arch,
                platform.link.name()
            );
        }
        let _ = writeln!(
            out,
            "{} {} — {} — {}",
            platform.arch,
            platform.link.name(),
            platform.gpu,
            sources_summary(platform)
        );
        let _ = writeln!(out, "  file: {}", platform.file);
        if let Some(citation) = platform.citation {
            let _ = writeln!(out, "  citation: {citation}");
        }
        for c in platform.capacities {
            let _ = writeln!(
                out,
                "  capacity: {} {} ≤ {}, multiples of {} B",
                c.collective.name(),
                c.algo.name(),
                format::exact_size(c.capacity.max_bytes),
                c.capacity.align
            );
        }
        let tables: Vec<&TableInfo> = platform.tables.iter().filter(|t| filter.table(t)).collect();
        let width = tables
            .iter()
            .map(|t| t.key.to_string().len())
            .max()
            .unwrap_or(0);
        for table in &tables {
            let _ = writeln!(
                out,
                "  {:width$}  {}",
                table.key.to_string(),
                format::bands(table.bands, format::exact_size)
            );
            let _ = writeln!(out, "  {:width$}  source: {}", "", source_short(table));
            if filter.notes
                && let Some(note) = table.note
            {
                let _ = writeln!(out, "  {:width$}  note: {note}", "");
            }
        }
        if tables.is_empty() {
            out.push_str("  (no table matches; such queries select nccl)\n");
        }
        out.push('\n');
    }
    if shown.is_empty() {
        let _ = writeln!(out, "{}", nothing_answers(filter));
    }
    out
}

/// Why nothing was shown, in the words of the fallback rule.
fn nothing_answers(filter: &ShowFilter) -> String {
    let link = filter
        .link
        .map_or("any link".to_string(), |l| l.name().to_string());
    match filter.arch {
        Some(arch) => format!(
            "no file answers {arch} on {link} (nor an earlier sm{}x minor): every query there selects nccl",
            arch.major
        ),
        None => format!("no file for {link}: every query there selects nccl"),
    }
}

/// One platform of `tuner show --json`: the file, the arch it answers for
/// when that is not its own, and the tables the filter keeps.
#[derive(Serialize)]
struct Shown {
    arch: Arch,
    link: Link,
    answers_for: Option<Arch>,
    gpu: &'static str,
    source: &'static str,
    citation: Option<&'static str>,
    file: &'static str,
    capacities: &'static [CapacityEntry],
    tables: Vec<&'static TableInfo>,
}

/// `tuner show --json`: the same platforms and tables, as data.
pub fn to_json(tables: &TableSet, filter: &ShowFilter) -> Value {
    let platforms: Vec<Shown> = filter
        .platforms(tables)
        .into_iter()
        .map(|(p, answers_for)| Shown {
            arch: p.arch,
            link: p.link,
            answers_for,
            gpu: p.gpu,
            source: p.source,
            citation: p.citation,
            file: p.file,
            capacities: p.capacities,
            tables: p.tables.iter().filter(|t| filter.table(t)).collect(),
        })
        .collect();
    json!({
        "tables": tables.origin(),
        "none_answers": platforms.is_empty().then(|| nothing_answers(filter)),
        "platforms": platforms,
    })
}

/// `published`, or for a file that mixes them `published (24 tables), measured (12 tables)`.
fn sources_summary(platform: &PlatformInfo) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for table in platform.tables {
        match counts.iter_mut().find(|(s, _)| *s == table.source) {
            Some((_, n)) => *n += 1,
            None => counts.push((table.source, 1)),
        }
    }
    match counts.as_slice() {
        [] => platform.source.to_string(),
        [(only, _)] => only.to_string(),
        _ => format::list(counts.iter().map(|(source, n)| {
            let tables = if *n == 1 { "table" } else { "tables" };
            format!("{source} ({n} {tables})")
        })),
    }
}

/// Where a table's figures come from, in full: `published: <citation>` or
/// `measured on 2026-11-29 by tuner v0.1.0, evidence sm90-nvlink.evidence.json`.
pub fn source_text(t: &TableInfo) -> String {
    match t.citation {
        Some(citation) => format!("{}: {citation}", t.source),
        None => measured_text(t),
    }
}

/// As [`source_text`], but a citation the file already printed is not repeated.
fn source_short(t: &TableInfo) -> String {
    if t.source_inherited && t.citation.is_some() {
        format!("{} (the file's citation, above)", t.source)
    } else {
        source_text(t)
    }
}

fn measured_text(t: &TableInfo) -> String {
    let mut text = t.source.to_string();
    if let Some(date) = t.date {
        let _ = write!(text, " on {date}");
    }
    if let Some(version) = t.tuner_version {
        let _ = write!(text, " by tuner v{version}");
    }
    if let Some(evidence) = t.evidence {
        let _ = write!(text, ", evidence {evidence}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{Algo, Band, Capacity, TableKey};

    static BANDS: [Band; 2] = [
        Band {
            max: Some(448 * 1024),
            algo: Algo::OneShotPull,
        },
        Band {
            max: None,
            algo: Algo::Nccl,
        },
    ];
    static TABLES: [TableInfo; 2] = [
        TableInfo {
            key: TableKey {
                collective: Collective::AllReduce,
                world_size: 8,
                dtype: DType::Bf16,
                mode: Mode::Graph,
            },
            source: "measured",
            source_inherited: false,
            citation: None,
            evidence: Some("sm90-nvlink.evidence.json"),
            date: Some("2026-11-29"),
            tuner_version: Some("0.1.0"),
            note: Some("measured by hand"),
            bands: &BANDS,
        },
        TableInfo {
            key: TableKey {
                collective: Collective::AllGather,
                world_size: 4,
                dtype: DType::F16,
                mode: Mode::Eager,
            },
            source: "published",
            source_inherited: true,
            citation: Some("somewhere"),
            evidence: None,
            date: None,
            tuner_version: None,
            note: None,
            bands: &BANDS,
        },
    ];
    static CAPACITIES: [CapacityEntry; 1] = [CapacityEntry {
        collective: Collective::AllReduce,
        algo: Algo::OneShotPull,
        capacity: Capacity {
            max_bytes: 1 << 20,
            align: 16,
        },
    }];
    static PLATFORMS: [PlatformInfo; 1] = [PlatformInfo {
        arch: Arch::SM90,
        link: Link::NvLink,
        gpu: "NVIDIA H200",
        source: "published",
        citation: Some("somewhere"),
        file: "../tuned/sm90-nvlink.toml",
        capacities: &CAPACITIES,
        tables: &TABLES,
    }];

    /// The test data as a table set: the documents are what `platforms`
    /// shows (sm90 nvlink, with the tables above).
    fn set() -> TableSet {
        TableSet::Files {
            origin: "test data",
            documents: Vec::leak(vec![document()]),
            platforms: &PLATFORMS,
        }
    }

    fn document() -> tuned_schema::Document {
        use tuned_schema::{Document, Platform, Provenance, Source, Table};
        Document {
            platform: Platform {
                arch: Arch::SM90,
                gpu: "NVIDIA H200".into(),
                link: Link::NvLink,
                source: Source::Published,
                citation: Some("somewhere".into()),
                provenance: Provenance::default(),
            },
            capacities: CAPACITIES.to_vec(),
            tables: TABLES
                .iter()
                .map(|t| Table {
                    key: t.key,
                    source: None,
                    note: None,
                    bands: t.bands.to_vec(),
                })
                .collect(),
            asserts: vec![],
        }
    }

    #[test]
    fn shows_bands_capacities_and_source() {
        let text = render(&set(), &ShowFilter::default());
        assert!(text.contains("sm90 nvlink — NVIDIA H200 — "), "{text}");
        assert!(text.contains("citation: somewhere"));
        assert!(text.contains("capacity: all_reduce one_shot_pull ≤ 1MiB, multiples of 16 B"));
        assert!(
            text.contains("all_reduce ws8 bf16 graph  one_shot_pull ≤ 448KiB | nccl"),
            "{text}"
        );
        assert!(!text.contains("measured by hand"));
    }

    #[test]
    fn every_table_says_where_it_came_from() {
        let text = render(&set(), &ShowFilter::default());
        assert!(
            text.contains(
                "source: measured on 2026-11-29 by tuner v0.1.0, evidence sm90-nvlink.evidence.json"
            ),
            "{text}"
        );
        assert!(
            text.contains("source: published (the file's citation, above)"),
            "{text}"
        );
        assert!(
            text.contains("— NVIDIA H200 — measured (1 table), published (1 table)"),
            "{text}"
        );
    }

    #[test]
    fn filters_narrow_the_tables() {
        let filter = ShowFilter {
            collective: Some(Collective::AllGather),
            notes: true,
            ..ShowFilter::default()
        };
        let text = render(&set(), &filter);
        assert!(text.contains("all_gather ws4 f16 eager"));
        assert!(!text.contains("all_reduce ws8"));
        let none = ShowFilter {
            link: Some(Link::Pcie),
            ..ShowFilter::default()
        };
        assert!(render(&set(), &none).contains("no file for pcie: every query there selects nccl"));
    }

    #[test]
    fn an_arch_is_shown_with_the_file_that_answers_it() {
        let later = ShowFilter {
            arch: Some(Arch::from_compute_capability(9, 5)),
            ..ShowFilter::default()
        };
        let text = render(&set(), &later);
        assert!(
            text.contains("sm95 nvlink: no file of its own; sm90 nvlink answers it"),
            "{text}"
        );
        assert!(text.contains("all_reduce ws8 bf16 graph"), "{text}");
        let other_major = ShowFilter {
            arch: Some(Arch::SM100),
            ..ShowFilter::default()
        };
        assert!(
            render(&set(), &other_major)
                .contains("no file answers sm100 on any link (nor an earlier sm10x minor)"),
        );
        let json = to_json(&set(), &later);
        assert_eq!(json["platforms"][0]["answers_for"], "sm95");
        assert_eq!(json["platforms"][0]["arch"], "sm90");
    }

    #[test]
    fn shows_the_compiled_tables() {
        // Whatever tuned/ holds, every compiled platform appears.
        let text = render(&TableSet::Compiled, &ShowFilter::default());
        for p in policy::PLATFORMS {
            assert!(text.contains(p.file), "{text}");
        }
        // Every arch is answered by the file `policy` answers it from.
        for p in policy::PLATFORMS {
            for minor in [p.arch.minor, p.arch.minor + 3] {
                let arch = Arch::from_compute_capability(p.arch.major, minor);
                let filter = ShowFilter {
                    arch: Some(arch),
                    link: Some(p.link),
                    ..ShowFilter::default()
                };
                let json = to_json(&TableSet::Compiled, &filter);
                let answering = policy::table_arch(arch, p.link).map(Arch::name);
                assert_eq!(json["platforms"][0]["arch"].as_str(), answering.as_deref());
            }
        }
    }
}
