//! A plain interpreter of a set of documents: the reference meaning of the tables.
//!
//! The generated `const fn`s in `policy` must agree with these functions for
//! every query (property tests check it). Everything here is written for
//! obviousness, not speed: linear scans over the documents and explicit band
//! intervals.
//!
//! # Which file answers a query (the rule for architectures with no table)
//!
//! For a query's `(arch, link)`:
//! 1. the file with exactly that arch and link;
//! 2. otherwise the file with the same link and the same major compute
//!    capability whose minor is the highest one not above the query's minor
//!    (sm103 uses sm100; sm87 uses sm86, or sm80 when there is no sm86);
//! 3. otherwise none.
//!
//! No file, or no table in it for `(collective, world_size, dtype, mode)`,
//! selects the collective's fallback ([`Collective::fallback`]: NCCL, or the
//! unfused path of the fused all-reduce + add + RMSNorm).

use crate::document::{Band, Document, Table};
use crate::vocab::{Algo, Arch, Capacity, Collective, Link, Query, default_capacity};

/// The arch of the file that answers queries for `(arch, link)`, per the rule above.
pub fn table_arch(docs: &[Document], arch: Arch, link: Link) -> Option<Arch> {
    platform_for(docs, arch, link).map(|doc| doc.platform.arch)
}

/// The file that answers queries for `(arch, link)`, per the rule above.
pub fn platform_for(docs: &[Document], arch: Arch, link: Link) -> Option<&Document> {
    let same_link = || docs.iter().filter(move |d| d.platform.link == link);
    let answering = arch.answered_by(same_link().map(|d| d.platform.arch))?;
    same_link().find(|d| d.platform.arch == answering)
}

/// The table that answers `q`, if any.
pub fn table_for(docs: &[Document], q: Query) -> Option<&Table> {
    platform_for(docs, q.arch, q.link)?
        .tables
        .iter()
        .find(|t| t.key == q.key())
}

/// The algorithm for `q`: the band of its table that contains `q.bytes`, else
/// the collective's fallback.
pub fn select(docs: &[Document], q: Query) -> Algo {
    let fallback = q.key.collective.fallback();
    match table_for(docs, q) {
        Some(table) => bands_containing(&table.bands, q.bytes)
            .next()
            .map_or(fallback, |band| band.algo),
        None => fallback,
    }
}

/// The inclusive byte range each band covers: band i covers
/// `previous max + 1 ..= max` (the first band starts at 0; the open band ends at `u64::MAX`).
pub fn band_ranges(bands: &[Band]) -> Vec<(u64, u64, Algo)> {
    let mut ranges = Vec::with_capacity(bands.len());
    let mut low = 0u64;
    for band in bands {
        let high = band.max.unwrap_or(u64::MAX);
        ranges.push((low, high, band.algo));
        low = high.saturating_add(1);
    }
    ranges
}

/// Every band whose range contains `bytes`. For valid bands this is exactly one.
pub fn bands_containing(bands: &[Band], bytes: u64) -> impl Iterator<Item = &Band> {
    band_ranges(bands)
        .into_iter()
        .zip(bands)
        .filter(move |((low, high, _), _)| *low <= bytes && bytes <= *high)
        .map(|(_, band)| band)
}

/// The capacity of `algo` for `collective` on `(arch, link)`: what the answering
/// file declares, else [`default_capacity`]. NCCL and algorithms that do not
/// implement the collective always get the default.
pub fn capacity(
    docs: &[Document],
    arch: Arch,
    link: Link,
    collective: Collective,
    algo: Algo,
) -> Capacity {
    if !algo.is_custom() || !algo.implements(collective) {
        return default_capacity(collective, algo);
    }
    platform_for(docs, arch, link)
        .and_then(|doc| {
            doc.capacities
                .iter()
                .find(|c| c.collective == collective && c.algo == algo)
        })
        .map_or(default_capacity(collective, algo), |c| c.capacity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{CapacityEntry, Platform, Provenance, Source};
    use crate::vocab::{DType, Mode, TableKey};

    fn doc(arch: Arch, link: Link, tables: Vec<Table>) -> Document {
        Document {
            platform: Platform {
                arch,
                gpu: "test".into(),
                link,
                source: Source::Measured,
                citation: None,
                provenance: Provenance::default(),
            },
            capacities: vec![CapacityEntry {
                collective: Collective::AllReduce,
                algo: Algo::OneShotPush,
                capacity: Capacity {
                    max_bytes: 4096,
                    align: 16,
                },
            }],
            tables,
            asserts: vec![],
        }
    }

    fn table(bands: Vec<Band>) -> Table {
        Table {
            key: TableKey {
                collective: Collective::AllReduce,
                world_size: 8,
                dtype: DType::Bf16,
                mode: Mode::Graph,
            },
            source: None,
            note: None,
            bands,
        }
    }

    fn query(arch: Arch, link: Link, bytes: u64) -> Query {
        Query::new(
            Collective::AllReduce,
            arch,
            link,
            8,
            DType::Bf16,
            Mode::Graph,
            bytes,
        )
    }

    const fn sm(major: u8, minor: u8) -> Arch {
        Arch::from_compute_capability(major, minor)
    }

    #[test]
    fn arch_fallback_takes_highest_minor_not_above() {
        let docs = [
            doc(sm(8, 0), Link::NvLink, vec![]),
            doc(sm(8, 6), Link::NvLink, vec![]),
            doc(sm(10, 0), Link::NvLink, vec![]),
            doc(sm(9, 0), Link::Pcie, vec![]),
        ];
        assert_eq!(table_arch(&docs, sm(8, 0), Link::NvLink), Some(sm(8, 0)));
        assert_eq!(table_arch(&docs, sm(8, 5), Link::NvLink), Some(sm(8, 0)));
        assert_eq!(table_arch(&docs, sm(8, 7), Link::NvLink), Some(sm(8, 6)));
        assert_eq!(table_arch(&docs, sm(10, 3), Link::NvLink), Some(sm(10, 0)));
        assert_eq!(table_arch(&docs, sm(9, 0), Link::NvLink), None);
        assert_eq!(table_arch(&docs, sm(9, 0), Link::Pcie), Some(sm(9, 0)));
        assert_eq!(table_arch(&docs, sm(12, 0), Link::NvLink), None);
        assert_eq!(table_arch(&docs, sm(7, 5), Link::NvLink), None);
    }

    #[test]
    fn selects_the_band_containing_the_size() {
        let bands = vec![
            Band {
                max: Some(1024),
                algo: Algo::OneShotPush,
            },
            Band {
                max: Some(4096),
                algo: Algo::OneShotPull,
            },
            Band {
                max: None,
                algo: Algo::Nccl,
            },
        ];
        let docs = [doc(sm(9, 0), Link::NvLink, vec![table(bands)])];
        let at = |bytes| select(&docs, query(sm(9, 0), Link::NvLink, bytes));
        assert_eq!(at(0), Algo::OneShotPush);
        assert_eq!(at(1024), Algo::OneShotPush);
        assert_eq!(at(1025), Algo::OneShotPull);
        assert_eq!(at(4096), Algo::OneShotPull);
        assert_eq!(at(4097), Algo::Nccl);
        assert_eq!(at(u64::MAX), Algo::Nccl);
        // Same arch, other link: no file.
        assert_eq!(select(&docs, query(sm(9, 0), Link::Pcie, 16)), Algo::Nccl);
        // No table for world size 4.
        let mut q = query(sm(9, 0), Link::NvLink, 16);
        q.key.world_size = 4;
        assert_eq!(select(&docs, q), Algo::Nccl);
        // The fused collective has no table here: its fallback, the unfused path.
        let mut q = query(sm(9, 0), Link::NvLink, 16);
        q.key.collective = Collective::AllReduceAddRmsNorm;
        assert_eq!(select(&docs, q), Algo::Unfused);
        assert_eq!(
            select(
                &docs,
                Query {
                    link: Link::Pcie,
                    ..q
                }
            ),
            Algo::Unfused
        );
    }

    #[test]
    fn capacity_falls_back_to_defaults() {
        let docs = [doc(sm(9, 0), Link::NvLink, vec![])];
        let ar = Collective::AllReduce;
        let declared = capacity(&docs, sm(9, 0), Link::NvLink, ar, Algo::OneShotPush);
        assert_eq!(declared.max_bytes, 4096);
        let undeclared = capacity(&docs, sm(9, 0), Link::NvLink, ar, Algo::TwoShotPull);
        assert_eq!(undeclared, default_capacity(ar, Algo::TwoShotPull));
        let no_file = capacity(&docs, sm(8, 0), Link::NvLink, ar, Algo::OneShotPush);
        assert_eq!(no_file, default_capacity(ar, Algo::OneShotPush));
        let nccl = capacity(&docs, sm(9, 0), Link::NvLink, ar, Algo::Nccl);
        assert_eq!(nccl.max_bytes, u64::MAX);
    }
}
