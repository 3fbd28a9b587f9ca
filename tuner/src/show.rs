//! `tuner show`: the tables compiled into `policy` (`policy::PLATFORMS`), as a
//! person reads them: per platform its source, capacities and one line of bands
//! per key.

use std::fmt::Write;

use policy::{PlatformInfo, TableInfo};
use tuned_schema::{Arch, Band, Collective, DType, Link, Mode};

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
        self.collective.is_none_or(|c| c == t.collective)
            && self.world_size.is_none_or(|w| w == t.world_size)
            && self.dtype.is_none_or(|d| d == t.dtype)
            && self.mode.is_none_or(|m| m == t.mode)
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
            platform.source
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
        let width = tables.iter().map(|t| key_label(t).len()).max().unwrap_or(0);
        for table in &tables {
            let _ = writeln!(out, "  {:width$}  {}", key_label(table), bands_line(table));
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

fn key_label(t: &TableInfo) -> String {
    format!(
        "{} ws{} {} {}",
        t.collective.name(),
        t.world_size,
        t.dtype.name(),
        t.mode.name()
    )
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

/// The bands of a compiled table as schema bands.
pub fn bands_of(t: &TableInfo) -> Vec<Band> {
    t.bands
        .iter()
        .map(|b| Band {
            max: b.max,
            algo: b.algo,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{BandInfo, CapacityInfo};
    use tuned_schema::{Algo, Capacity};

    static BANDS: [BandInfo; 2] = [
        BandInfo {
            max: Some(448 * 1024),
            algo: Algo::OneShotPull,
        },
        BandInfo {
            max: None,
            algo: Algo::Nccl,
        },
    ];
    static TABLES: [TableInfo; 2] = [
        TableInfo {
            collective: Collective::AllReduce,
            world_size: 8,
            dtype: DType::Bf16,
            mode: Mode::Graph,
            note: Some("measured by hand"),
            bands: &BANDS,
        },
        TableInfo {
            collective: Collective::AllGather,
            world_size: 4,
            dtype: DType::F16,
            mode: Mode::Eager,
            note: None,
            bands: &BANDS,
        },
    ];
    static CAPACITIES: [CapacityInfo; 1] = [CapacityInfo {
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
        assert!(
            text.contains("sm90 nvlink — NVIDIA H200 — published"),
            "{text}"
        );
        assert!(text.contains("citation: somewhere"));
        assert!(text.contains("capacity: all_reduce one_shot_pull ≤ 1MiB, multiples of 16 B"));
        assert!(
            text.contains("all_reduce ws8 bf16 graph  one_shot_pull ≤ 448KiB | nccl"),
            "{text}"
        );
        assert!(!text.contains("measured by hand"));
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
