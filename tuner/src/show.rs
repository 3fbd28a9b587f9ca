//! `tuner show`: the tables compiled into `policy` (`policy::PLATFORMS`), as a
//! person reads them: per platform its sources, capacities, and per key one
//! line of bands and one line saying where they come from.

use std::fmt::Write;

use policy::{PlatformInfo, TableInfo};
use tuned_schema::{Arch, Collective, DType, Link, Mode};

use crate::format;

/// Which tables to show; `None` shows all.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShowFilter {
    pub arch: Option<Arch>,
    pub link: Option<Link>,
    pub collective: Option<Collective>,
    pub world_size: Option<u32>,
    pub dtype: Option<DType>,
    pub mode: Option<Mode>,
    /// Also print each table's note (how it was measured or where it was read).
    pub notes: bool,
}

impl ShowFilter {
    fn platform(&self, p: &PlatformInfo) -> bool {
        self.arch.is_none_or(|a| a == p.arch) && self.link.is_none_or(|l| l == p.link)
    }

    fn table(&self, t: &TableInfo) -> bool {
        let k = t.key;
        self.collective.is_none_or(|c| c == k.collective)
            && self.world_size.is_none_or(|w| w == k.world_size)
            && self.dtype.is_none_or(|d| d == k.dtype)
            && self.mode.is_none_or(|m| m == k.mode)
    }
}

/// The text of `tuner show` for `platforms` (normally `policy::PLATFORMS`).
pub fn render(platforms: &[PlatformInfo], filter: &ShowFilter) -> String {
    let mut out = String::new();
    let mut shown = 0;
    for platform in platforms.iter().filter(|p| filter.platform(p)) {
        shown += 1;
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
                bands_line(table)
            );
            let _ = writeln!(out, "  {:width$}  source: {}", "", source_short(table));
            if filter.notes
                && let Some(note) = table.note
            {
                let _ = writeln!(out, "  {:width$}  note: {note}", "");
            }
        }
        if tables.is_empty() {
            out.push_str("  (no table matches)\n");
        }
        out.push('\n');
    }
    if shown == 0 {
        out.push_str("no platform file matches; every query selects nccl\n");
    }
    out
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
        _ => counts
            .iter()
            .map(|(source, n)| {
                let tables = if *n == 1 { "table" } else { "tables" };
                format!("{source} ({n} {tables})")
            })
            .collect::<Vec<_>>()
            .join(", "),
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

fn bands_line(t: &TableInfo) -> String {
    t.bands
        .iter()
        .map(|b| match b.max {
            Some(max) => format!("{} ≤ {}", b.algo.name(), format::exact_size(max)),
            None => b.algo.name().to_string(),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuned_schema::{Algo, Band, Capacity, CapacityEntry, TableKey};

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

    #[test]
    fn shows_bands_capacities_and_source() {
        let text = render(&PLATFORMS, &ShowFilter::default());
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
        let text = render(&PLATFORMS, &ShowFilter::default());
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
        let text = render(&PLATFORMS, &filter);
        assert!(text.contains("all_gather ws4 f16 eager"));
        assert!(!text.contains("all_reduce ws8"));
        let none = ShowFilter {
            link: Some(Link::Pcie),
            ..ShowFilter::default()
        };
        assert!(render(&PLATFORMS, &none).contains("no platform file matches"));
    }

    #[test]
    fn shows_the_compiled_tables() {
        // Whatever tuned/ holds, every compiled platform appears.
        let text = render(policy::PLATFORMS, &ShowFilter::default());
        for p in policy::PLATFORMS {
            assert!(text.contains(p.file), "{text}");
        }
    }
}
