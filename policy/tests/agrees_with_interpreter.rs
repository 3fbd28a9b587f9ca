//! The generated `const fn`s agree with the plain interpreter in `tuned-schema`
//! reading the same files, every size of every table maps to exactly one band,
//! and a custom choice always fits the capacity the generated code reports.
//!
//! Two table sets: the shipped `tuned/`, and a fixture that exercises the arch
//! fallback (sm80 and sm86 files), PCIe, three ranks, all-gather bands and the
//! fused all-reduce + add + RMSNorm (whose fallback is the unfused path).
//!
//! Queries are built from the tables themselves: a key that has a table, an
//! architecture that the table's file answers (its own, or one that falls back
//! to it), and a size at or next to one of the table's band edges or of a
//! capacity of the platform, or anywhere. A share of free queries (any key, any
//! platform) covers what has no table. Drawing each field on its own would
//! almost never land on a table, let alone on one of its edges.

mod common;

use std::collections::BTreeSet;
use std::sync::LazyLock;

use common::documents;
use policy::{Algo, Arch, Collective, DType, Link, Mode, Query, TableKey};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use tuned_schema::{Document, interpret};

static SHIPPED_DOCS: LazyLock<Vec<Document>> = LazyLock::new(|| documents("tuned"));
static FIXTURE_DOCS: LazyLock<Vec<Document>> =
    LazyLock::new(|| documents("tests/fixtures/fallback"));

mod fixture {
    policy_macros::include_tuned!("tests/fixtures/fallback");
}

/// One table as the generator aims at it.
#[derive(Clone, Debug)]
struct Target {
    key: TableKey,
    /// The file's own architecture.
    arch: Arch,
    link: Link,
    /// Every architecture of the file's major that this file answers.
    answered: Vec<Arch>,
    /// The table's band edges with their neighbours, and 0, 1, 16 and `u64::MAX`.
    band_sizes: Vec<u64>,
    /// The platform's capacity edges for the key's collective, with their neighbours.
    capacity_sizes: Vec<u64>,
}

impl Target {
    fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.band_sizes.iter().chain(&self.capacity_sizes).copied()
    }
}

/// Every table of `docs`, with what the generator draws for it.
fn targets(docs: &[Document]) -> Vec<Target> {
    let mut targets = Vec::new();
    for doc in docs {
        let (arch, link) = (doc.platform.arch, doc.platform.link);
        let answered: Vec<Arch> = (0..=u8::MAX)
            .map(|minor| Arch::from_compute_capability(arch.major, minor))
            .filter(|&a| interpret::table_arch(docs, a, link) == Some(arch))
            .collect();
        for table in &doc.tables {
            let mut band_sizes = BTreeSet::from([0, 1, 16, u64::MAX]);
            band_sizes.extend(band_edges(&table.bands));
            let capacity_sizes: BTreeSet<u64> = capacity_edges(docs, arch, link, table.key)
                .into_iter()
                .collect();
            targets.push(Target {
                key: table.key,
                arch,
                link,
                answered: answered.clone(),
                band_sizes: band_sizes.into_iter().collect(),
                capacity_sizes: capacity_sizes.into_iter().collect(),
            });
        }
    }
    targets
}

/// Each bounded band's `max` and the sizes either side of it.
fn band_edges(bands: &[tuned_schema::Band]) -> impl Iterator<Item = u64> + '_ {
    bands
        .iter()
        .filter_map(|b| b.max)
        .flat_map(|max| [max.saturating_sub(1), max, max.saturating_add(1)])
}

/// For every custom algorithm of the key's collective on the platform: the
/// capacity and its neighbours (one byte and one alignment either side), and
/// the smallest aligned message (for all-gather, one aligned share per rank)
/// and its neighbours.
fn capacity_edges(docs: &[Document], arch: Arch, link: Link, key: TableKey) -> Vec<u64> {
    let mut sizes = Vec::new();
    for algo in Algo::ALL
        .into_iter()
        .filter(|a| a.is_custom() && a.implements(key.collective))
    {
        let cap = interpret::capacity(docs, arch, link, key.collective, algo);
        let step = match key.collective {
            Collective::AllReduce | Collective::AllReduceAddRmsNorm => cap.align,
            Collective::AllGather => cap.align.saturating_mul(u64::from(key.world_size)),
        };
        let top = cap.max_bytes - cap.max_bytes % step.max(1);
        for size in [cap.max_bytes, top, step] {
            sizes.extend([
                size.saturating_sub(step),
                size.saturating_sub(1),
                size,
                size.saturating_add(1),
                size.saturating_add(step),
            ]);
        }
    }
    sizes
}

fn arch() -> impl Strategy<Value = Arch> {
    prop_oneof![
        // Near the files: exact, same major with other minors, other majors.
        proptest::sample::select(vec![
            (7, 5),
            (8, 0),
            (8, 5),
            (8, 6),
            (8, 9),
            (9, 0),
            (9, 1),
            (10, 0),
            (10, 3),
            (12, 0),
            (0, 0)
        ]),
        (0u8..=12, 0u8..=9),
        (any::<u8>(), any::<u8>()),
    ]
    .prop_map(|(major, minor)| Arch::from_compute_capability(major, minor))
}

/// A query with each field drawn on its own: mostly no table, which must
/// select NCCL and the default capacities.
fn free_query() -> impl Strategy<Value = Query> {
    let bytes = prop_oneof![0u64..(256 << 20), any::<u64>()];
    let world_size = prop_oneof![1u32..=9, any::<u32>()];
    (
        proptest::sample::select(Collective::ALL.to_vec()),
        arch(),
        proptest::sample::select(Link::ALL.to_vec()),
        world_size,
        proptest::sample::select(DType::ALL.to_vec()),
        proptest::sample::select(Mode::ALL.to_vec()),
        bytes,
    )
        .prop_map(|(collective, arch, link, world_size, dtype, mode, bytes)| {
            Query::new(collective, arch, link, world_size, dtype, mode, bytes)
        })
}

/// A query on one of the tables: its key, its file's architecture or one that
/// falls back to it, and a size at an edge (most of the time), below the
/// largest edge, or anywhere.
fn table_query(docs: &[Document]) -> impl Strategy<Value = Query> {
    proptest::sample::select(targets(docs)).prop_flat_map(|t| {
        let top = t.sizes().filter(|&s| s < u64::MAX).max();
        let within = 0..=top.unwrap_or(1 << 30).saturating_mul(2);
        let size = prop_oneof![
            4 => proptest::sample::select(t.band_sizes.clone()),
            2 => proptest::sample::select(t.capacity_sizes.clone()),
            3 => within,
            1 => any::<u64>(),
        ];
        let arch = prop_oneof![Just(t.arch), proptest::sample::select(t.answered.clone()),];
        (Just(t.key), Just(t.link), arch, size)
            .prop_map(|(key, link, arch, bytes)| key.query(arch, link, bytes))
    })
}

fn query(docs: &[Document]) -> impl Strategy<Value = Query> {
    prop_oneof![4 => table_query(docs), 1 => free_query()]
}

/// The generated functions of one table set, so both sets run the same checks.
struct Generated {
    select: fn(Query) -> Algo,
    table_arch: fn(Arch, Link) -> Option<Arch>,
    capacity: fn(Arch, Link, Collective, Algo) -> policy::Capacity,
}

const SHIPPED: Generated = Generated {
    select: policy::select,
    table_arch: policy::table_arch,
    capacity: policy::capacity,
};

const FIXTURE: Generated = Generated {
    select: fixture::select,
    table_arch: fixture::table_arch,
    capacity: fixture::capacity,
};

fn agrees(generated: &Generated, docs: &[Document], q: Query) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        (generated.select)(q),
        interpret::select(docs, q),
        "select({:?})",
        q
    );
    prop_assert_eq!(
        (generated.table_arch)(q.arch, q.link),
        interpret::table_arch(docs, q.arch, q.link)
    );
    for algo in Algo::ALL {
        prop_assert_eq!(
            (generated.capacity)(q.arch, q.link, q.key.collective, algo),
            interpret::capacity(docs, q.arch, q.link, q.key.collective, algo),
            "capacity of {:?} for {:?}",
            algo,
            q
        );
    }
    Ok(())
}

/// Every size of the query's table lies in exactly one band, and the selection is
/// that band's algorithm, one that implements the collective and whose
/// capacity there takes a message this large.
fn total(generated: &Generated, docs: &[Document], q: Query) -> Result<(), TestCaseError> {
    let selected = (generated.select)(q);
    prop_assert!(selected.implements(q.key.collective));
    if let Some(table) = interpret::table_for(docs, q) {
        let containing: Vec<_> = interpret::bands_containing(&table.bands, q.bytes).collect();
        prop_assert_eq!(containing.len(), 1, "{:?} in {:?}", q.bytes, table.bands);
        prop_assert_eq!(containing[0].algo, selected);
    }
    let cap = (generated.capacity)(q.arch, q.link, q.key.collective, selected);
    prop_assert!(
        q.bytes <= cap.max_bytes,
        "{:?} selects {:?}, whose capacity is {} bytes",
        q,
        selected,
        cap.max_bytes
    );
    Ok(())
}

fn check(generated: &Generated, docs: &[Document], q: Query) -> Result<(), TestCaseError> {
    agrees(generated, docs, q)?;
    total(generated, docs, q)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn shipped_tables_agree_with_the_interpreter(q in query(&SHIPPED_DOCS)) {
        check(&SHIPPED, &SHIPPED_DOCS, q)?;
    }

    #[test]
    fn fixture_tables_agree_with_the_interpreter(q in query(&FIXTURE_DOCS)) {
        check(&FIXTURE, &FIXTURE_DOCS, q)?;
    }
}

/// Every edge of every table, at its file's architecture and at the first and
/// last minor of each run of architectures that fall back to it: no sample
/// can miss one.
fn every_edge_agrees(generated: &Generated, docs: &[Document]) -> usize {
    let mut checked = 0;
    for t in targets(docs) {
        let mut archs = vec![t.arch];
        archs.extend(t.answered.first());
        archs.extend(t.answered.last());
        for &arch in &archs {
            for bytes in t.sizes() {
                let q = t.key.query(arch, t.link, bytes);
                check(generated, docs, q).unwrap_or_else(|e| panic!("{e}"));
                checked += 1;
            }
        }
    }
    checked
}

#[test]
fn every_edge_of_the_shipped_tables_agrees() {
    assert!(every_edge_agrees(&SHIPPED, &SHIPPED_DOCS) > 1000);
}

#[test]
fn every_edge_of_the_fixture_tables_agrees() {
    assert!(every_edge_agrees(&FIXTURE, &FIXTURE_DOCS) > 50);
}

/// What a sample of the generator reaches.
#[derive(Debug, Default)]
struct Reach {
    cases: usize,
    on_a_table: usize,
    custom: usize,
    at_a_band_edge: usize,
    at_a_capacity_edge: usize,
    fallback_arch: usize,
    tables: BTreeSet<(Arch, Link, TableKey)>,
}

fn reach(docs: &[Document], generated: &Generated, cases: usize) -> Reach {
    let strategy = query(docs);
    let mut runner = TestRunner::deterministic();
    let mut seen = Reach {
        cases,
        ..Reach::default()
    };
    for _ in 0..cases {
        let q = strategy.new_tree(&mut runner).unwrap().current();
        let Some(table) = interpret::table_for(docs, q) else {
            continue;
        };
        let file_arch = interpret::table_arch(docs, q.arch, q.link).unwrap();
        seen.on_a_table += 1;
        seen.tables.insert((file_arch, q.link, q.key));
        seen.custom += usize::from((generated.select)(q).is_custom());
        seen.fallback_arch += usize::from(file_arch != q.arch);
        seen.at_a_band_edge += usize::from(band_edges(&table.bands).any(|e| e == q.bytes));
        let caps = capacity_edges(docs, file_arch, q.link, q.key);
        seen.at_a_capacity_edge += usize::from(caps.contains(&q.bytes));
    }
    seen
}

fn all_tables(docs: &[Document]) -> BTreeSet<(Arch, Link, TableKey)> {
    docs.iter()
        .flat_map(|d| {
            d.tables
                .iter()
                .map(|t| (d.platform.arch, d.platform.link, t.key))
        })
        .collect()
}

/// The property tests above see what they claim to: a sample as large as
/// theirs lands on a table most of the time, reaches every table, picks
/// custom kernels, and sits on band and capacity edges and on architectures
/// that fall back to a file. (Drawing each field on its own, as this file
/// once did, hit a shipped table in 44 of 2000 cases, 35 of its 108 tables,
/// and a band edge once.)
#[test]
fn the_generator_reaches_every_table_and_its_edges() {
    for (name, docs, generated) in [
        ("shipped", &*SHIPPED_DOCS, &SHIPPED),
        ("fixture", &*FIXTURE_DOCS, &FIXTURE),
    ] {
        let mut seen = reach(docs, generated, 2000);
        let share = |n: usize| n as f64 / seen.cases as f64;
        let missed: Vec<_> = all_tables(docs).difference(&seen.tables).copied().collect();
        assert!(
            missed.is_empty(),
            "{name}: tables never reached: {missed:?}"
        );
        seen.tables.clear();
        assert!(share(seen.on_a_table) > 0.7, "{name}: {seen:?}");
        assert!(share(seen.custom) > 0.15, "{name}: {seen:?}");
        assert!(share(seen.at_a_band_edge) > 0.08, "{name}: {seen:?}");
        assert!(share(seen.at_a_capacity_edge) > 0.15, "{name}: {seen:?}");
        assert!(share(seen.fallback_arch) > 0.25, "{name}: {seen:?}");
    }
}

#[test]
fn fixture_exercises_the_fallback_rule() {
    let nv = Link::NvLink;
    let sm = Arch::from_compute_capability;
    assert_eq!(fixture::table_arch(sm(8, 5), nv), Some(sm(8, 0)));
    assert_eq!(fixture::table_arch(sm(8, 9), nv), Some(sm(8, 6)));
    assert_eq!(fixture::table_arch(sm(9, 0), nv), None);
    assert_eq!(fixture::table_arch(sm(9, 1), Link::Pcie), Some(sm(9, 0)));
    assert_eq!(fixture::PLATFORMS.len(), 3);
}

#[test]
fn fixture_selects_the_fused_bands_and_unfused_elsewhere() {
    let fused = |arch: Arch, world_size, dtype, mode, bytes| {
        fixture::select(Query::new(
            Collective::AllReduceAddRmsNorm,
            arch,
            Link::NvLink,
            world_size,
            dtype,
            mode,
            bytes,
        ))
    };
    let sm89 = Arch::from_compute_capability(8, 9);
    let sm80 = Arch::from_compute_capability(8, 0);
    assert_eq!(
        fused(sm89, 8, DType::Bf16, Mode::Graph, 96 << 10),
        Algo::OneShotPush
    );
    assert_eq!(
        fused(sm89, 8, DType::Bf16, Mode::Graph, (96 << 10) + 1),
        Algo::TwoShotPush
    );
    assert_eq!(
        fused(sm89, 8, DType::Bf16, Mode::Graph, (2 << 20) + 1),
        Algo::Unfused
    );
    assert_eq!(fused(sm89, 2, DType::F16, Mode::Eager, 4096), Algo::Unfused);
    assert_eq!(
        fused(sm89, 2, DType::F16, Mode::Eager, 4112),
        Algo::OneShotPush
    );
    // No table: the key's, the world's, the platform's.
    assert_eq!(fused(sm89, 8, DType::F16, Mode::Graph, 16), Algo::Unfused);
    assert_eq!(fused(sm89, 4, DType::Bf16, Mode::Graph, 16), Algo::Unfused);
    assert_eq!(fused(sm80, 8, DType::Bf16, Mode::Graph, 16), Algo::Unfused);
    // The plain all-reduce of the same key still falls back to NCCL.
    let plain = Query::new(
        Collective::AllReduce,
        sm80,
        Link::NvLink,
        4,
        DType::Bf16,
        Mode::Graph,
        16,
    );
    assert_eq!(fixture::select(plain), Algo::Nccl);
}
