//! For random queries, the generated `const fn`s agree with the plain interpreter
//! in `tuned-schema` reading the same files, and every size of every table maps
//! to exactly one band.
//!
//! Two table sets: the shipped `tuned/`, and a fixture that exercises the arch
//! fallback (sm80 and sm86 files), PCIe, three ranks and all-gather bands.

mod common;

use std::sync::LazyLock;

use common::documents;
use policy::{Algo, Arch, Collective, DType, Link, Mode, Query};
use proptest::prelude::*;
use tuned_schema::{Document, interpret};

static SHIPPED_DOCS: LazyLock<Vec<Document>> = LazyLock::new(|| documents("tuned"));
static FIXTURE_DOCS: LazyLock<Vec<Document>> =
    LazyLock::new(|| documents("tests/fixtures/fallback"));

mod fixture {
    policy_macros::include_tuned!("tests/fixtures/fallback");
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

/// Every band edge of every table, and its neighbours: where a bug would hide.
fn edges(docs: &[Document]) -> Vec<u64> {
    let mut edges = vec![0, 1, 16, u64::MAX];
    for table in docs.iter().flat_map(|d| &d.tables) {
        for max in table.bands.iter().filter_map(|b| b.max) {
            edges.extend([max.saturating_sub(1), max, max.saturating_add(1)]);
        }
    }
    edges
}

fn query(docs: &[Document]) -> impl Strategy<Value = Query> {
    let bytes = prop_oneof![
        proptest::sample::select(edges(docs)),
        0u64..(256 << 20),
        any::<u64>()
    ];
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
/// that band's algorithm, one that implements the collective.
fn total(generated: &Generated, docs: &[Document], q: Query) -> Result<(), TestCaseError> {
    let selected = (generated.select)(q);
    prop_assert!(selected.implements(q.key.collective));
    if let Some(table) = interpret::table_for(docs, q) {
        let containing: Vec<_> = interpret::bands_containing(&table.bands, q.bytes).collect();
        prop_assert_eq!(containing.len(), 1, "{:?} in {:?}", q.bytes, table.bands);
        prop_assert_eq!(containing[0].algo, selected);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn shipped_tables_agree_with_the_interpreter(q in query(&SHIPPED_DOCS)) {
        agrees(&SHIPPED, &SHIPPED_DOCS, q)?;
        total(&SHIPPED, &SHIPPED_DOCS, q)?;
    }

    #[test]
    fn fixture_tables_agree_with_the_interpreter(q in query(&FIXTURE_DOCS)) {
        agrees(&FIXTURE, &FIXTURE_DOCS, q)?;
        total(&FIXTURE, &FIXTURE_DOCS, q)?;
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
