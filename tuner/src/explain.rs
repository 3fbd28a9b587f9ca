//! `tuner explain`: which algorithm `policy::select` picks for one query, and
//! why — which file answers the (arch, link), which table, which band — or which
//! rule made it NCCL (no file, no table, a size the kernel would decline).

use std::fmt::Write;

use policy::PlatformInfo;
use tuned_schema::{Algo, Query, interpret};

use crate::format;
use crate::show::source_text;

/// The explanation of `query` against the compiled tables.
pub fn explain(query: Query) -> String {
    explain_with(
        query,
        policy::PLATFORMS,
        policy::table_arch(query.arch, query.link),
        policy::select(query),
    )
}

/// The explanation given the platform data, the file `policy` answers from and
/// its selection (separate so the reasoning is testable on any data).
pub fn explain_with(
    query: Query,
    platforms: &[PlatformInfo],
    table_arch: Option<tuned_schema::Arch>,
    selected: Algo,
) -> String {
    let mut out = String::new();
    let key = query.key();
    let _ = writeln!(
        out,
        "query: {} on {} {}, {} bytes ({})",
        key,
        query.arch,
        query.link.name(),
        query.bytes,
        format::size(query.bytes)
    );
    let platform = table_arch.and_then(|arch| {
        platforms
            .iter()
            .find(|p| p.arch == arch && p.link == query.link)
    });
    let Some(platform) = platform else {
        let _ = writeln!(
            out,
            "file: none for {} {} (nor for an earlier sm{}x minor on this link)",
            query.arch,
            query.link.name(),
            query.arch.major
        );
        let _ = writeln!(out, "rule: a query with no table selects nccl");
        let _ = writeln!(out, "selected: {}", selected.name());
        return out;
    };
    let _ = writeln!(
        out,
        "file: {} ({} {}, {}, {})",
        platform.file,
        platform.arch,
        platform.link.name(),
        platform.gpu,
        platform.source
    );
    if platform.arch != query.arch {
        let _ = writeln!(
            out,
            "      {} has no file of its own; {} answers (same major, highest minor not above)",
            query.arch, platform.arch
        );
    }
    let Some(table) = platform.table(key) else {
        let _ = writeln!(out, "table: none for {} in this file", key);
        let _ = writeln!(out, "rule: a query with no table selects nccl");
        let _ = writeln!(out, "selected: {}", selected.name());
        return out;
    };
    let _ = writeln!(out, "table: {}", key);
    // The table's own source, or the file's when it names none.
    let _ = writeln!(out, "source: {}", source_text(table));
    if let Some(note) = table.note {
        let _ = writeln!(out, "note: {note}");
    }
    let ranges = interpret::band_ranges(table.bands);
    if let Some(index) = ranges
        .iter()
        .position(|&(low, high, _)| low <= query.bytes && query.bytes <= high)
    {
        let (low, high, algo) = ranges[index];
        let lower = if low == 0 {
            "0".to_string()
        } else {
            format::exact_size(low - 1)
        };
        let upper = if high == u64::MAX {
            "∞".to_string()
        } else {
            format::exact_size(high)
        };
        let _ = writeln!(
            out,
            "band {} of {}: {lower} < bytes ≤ {upper} → {}",
            index + 1,
            ranges.len(),
            algo.name()
        );
        if algo.is_custom() {
            explain_capacity(&mut out, platform, query, algo);
        }
    }
    let _ = writeln!(out, "selected: {}", selected.name());
    out
}

/// Whether the kernel takes the size; if not, it declines at run time and NCCL
/// runs (the compiled tables never put a band past capacity, but alignment is
/// checked per call).
fn explain_capacity(out: &mut String, platform: &PlatformInfo, query: Query, algo: Algo) {
    let capacity = platform
        .capacities
        .iter()
        .find(|c| c.collective == query.key.collective && c.algo == algo)
        .map_or_else(
            || tuned_schema::default_capacity(query.key.collective, algo),
            |c| c.capacity,
        );
    let fits = capacity.accepts_message(query.key.collective, query.key.world_size, query.bytes);
    let _ = writeln!(
        out,
        "capacity: {} takes ≤ {}, multiples of {} B{}: {}",
        algo.name(),
        format::exact_size(capacity.max_bytes),
        capacity.align,
        if query.key.collective == tuned_schema::Collective::AllGather {
            " per rank"
        } else {
            ""
        },
        if fits {
            "this size fits".to_string()
        } else {
            "this size does not fit, so the kernel declines it at run time and nccl runs"
                .to_string()
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuned_schema::{Arch, Collective, DType, Link, Mode};

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
                    assert!(
                        text.ends_with(&format!("selected: {}\n", policy::select(q).name())),
                        "{text}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_file_means_nccl() {
        let q = Query::new(
            Collective::AllReduce,
            Arch::from_compute_capability(7, 5),
            Link::Pcie,
            8,
            DType::Bf16,
            Mode::Graph,
            4096,
        );
        let text = explain(q);
        assert!(text.contains("file: none for sm75 pcie"), "{text}");
        assert!(text.contains("rule: a query with no table selects nccl"));
        assert!(text.ends_with("selected: nccl\n"));
    }

    #[test]
    fn a_missing_table_means_nccl() {
        let Some(p) = policy::PLATFORMS.first() else {
            return;
        };
        let q = Query::new(
            Collective::AllReduce,
            p.arch,
            p.link,
            7,
            DType::Bf16,
            Mode::Graph,
            4096,
        );
        let text = explain(q);
        assert!(
            text.contains("table: none for all_reduce ws7 bf16 graph"),
            "{text}"
        );
        assert!(text.ends_with("selected: nccl\n"));
    }
}
