//! `merge`: new tables replace only their keys in an existing file; every other
//! table, every `[[assert]]` and the capacities stay, and each table keeps
//! saying where it came from.

use tuned_schema::merge::{CapacityChange, merge};
use tuned_schema::validate::parse_document;
use tuned_schema::validate::validate_documents;
use tuned_schema::write::to_toml_string;
use tuned_schema::*;

/// A published sm90 file with all-reduce bf16 graph tables for 2, 4 and 8 ranks
/// and an assertion about world size 8.
const PUBLISHED: &str = r#"schema = 1

[platform]
arch = "sm90"
gpu = "NVIDIA H200"
link = "nvlink"
source = "published"
citation = "SGLang python/sglang/srt/distributed/device_communicators/configs/custom_all_reduce_v2.py"

[[capacity]]
collective = "all_reduce"
algo = "one_shot_push"
max = "8MiB"
align = 16

[[table]]
collective = "all_reduce"
world_size = 2
dtype = "bf16"
mode = "graph"
note = "published ws2"
bands = [
  { max = "4MiB", algo = "one_shot_push" },
  { algo = "nccl" },
]

[[table]]
collective = "all_reduce"
world_size = 4
dtype = "bf16"
mode = "graph"
note = "published ws4"
bands = [
  { max = "1MiB", algo = "one_shot_push" },
  { algo = "nccl" },
]

[[table]]
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
note = "published ws8"
bands = [
  { max = "512KiB", algo = "one_shot_push" },
  { algo = "nccl" },
]

[[assert]]
arch = "sm90"
link = "nvlink"
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
bytes = "4KiB"
algo_in = ["one_shot_push"]
why = "decode-size all-reduces must not pay NCCL's latency floor"
"#;

fn published() -> Document {
    parse_document("sm90-nvlink.toml", PUBLISHED).unwrap()
}

fn key(world_size: u32) -> TableKey {
    TableKey {
        collective: Collective::AllReduce,
        world_size,
        dtype: DType::Bf16,
        mode: Mode::Graph,
    }
}

/// What `tuner fit` builds from a world-size-2 sweep: a measured `[platform]`
/// whose provenance names the evidence, and tables without their own source.
fn measured_ws2(date: &str, push_max: u64) -> Document {
    Document {
        platform: Platform {
            arch: Arch::SM90,
            gpu: "NVIDIA H200".into(),
            link: Link::NvLink,
            source: Source::Measured,
            citation: None,
            provenance: Provenance {
                tuner_version: Some("0.1.0".into()),
                date: Some(date.into()),
                evidence: Some("sm90-nvlink.evidence.json".into()),
                ..Provenance::default()
            },
        },
        capacities: vec![CapacityEntry {
            collective: Collective::AllReduce,
            algo: Algo::OneShotPush,
            capacity: Capacity {
                max_bytes: 8 << 20,
                align: 16,
            },
        }],
        tables: vec![Table {
            key: key(2),
            source: None,
            note: Some("measured ws2".into()),
            bands: vec![
                Band {
                    max: Some(push_max),
                    algo: Algo::OneShotPush,
                },
                Band {
                    max: None,
                    algo: Algo::Nccl,
                },
            ],
        }],
        asserts: vec![],
    }
}

fn table(doc: &Document, world_size: u32) -> &Table {
    doc.tables
        .iter()
        .find(|t| t.key == key(world_size))
        .unwrap()
}

#[test]
fn a_ws2_sweep_replaces_ws2_and_keeps_ws4_ws8_and_the_asserts() {
    let existing = published();
    let merged = merge(&existing, &measured_ws2("2026-11-29", 2 << 20)).unwrap();
    let doc = &merged.document;
    assert_eq!(merged.replaced, vec![key(2)]);
    assert_eq!(merged.kept, vec![key(4), key(8)]);
    assert!(merged.added.is_empty());
    assert!(!merged.platform_replaced);

    // The published rows and the invariant are untouched, and still published.
    assert_eq!(table(doc, 4), table(&existing, 4));
    assert_eq!(table(doc, 8), table(&existing, 8));
    assert_eq!(doc.asserts, existing.asserts);
    assert_eq!(doc.platform, existing.platform);
    assert_eq!(
        doc.origin(table(doc, 8)).citation,
        existing.platform.citation.as_deref()
    );

    // The new ws2 row is in place of the old one and names its measurement.
    assert_eq!(doc.tables[0].key, key(2));
    assert_eq!(doc.tables[0].bands[0].max, Some(2 << 20));
    assert_eq!(
        doc.tables[0].source,
        Some(TableSource::Measured(Measurement {
            evidence: "sm90-nvlink.evidence.json".into(),
            date: "2026-11-29".into(),
            tuner_version: "0.1.0".into(),
        }))
    );
    validate_documents(std::slice::from_ref(doc)).unwrap();
}

#[test]
fn the_merged_file_reads_back_as_written() {
    let merged = merge(&published(), &measured_ws2("2026-11-29", 2 << 20)).unwrap();
    let text = to_toml_string(&merged.document);
    assert!(
        text.contains(
            "mode = \"graph\"\nsource = \"measured\"\nevidence = \"sm90-nvlink.evidence.json\"\ndate = \"2026-11-29\"\ntuner_version = \"0.1.0\"\nnote = \"measured ws2\"\n"
        ),
        "{text}"
    );
    let reread = parse_document("sm90-nvlink.toml", &text).unwrap();
    assert_eq!(reread, merged.document);
}

#[test]
fn merging_the_same_tables_again_changes_nothing() {
    let update = measured_ws2("2026-11-29", 2 << 20);
    let once = merge(&published(), &update).unwrap().document;
    let twice = merge(&once, &update).unwrap().document;
    assert_eq!(to_toml_string(&twice), to_toml_string(&once));
}

#[test]
fn a_full_resweep_gives_the_fresh_file_plus_the_asserts() {
    let mut update = measured_ws2("2026-11-30", 2 << 20);
    for (world_size, max) in [(4, 1 << 20), (8, 256 << 10)] {
        let mut t = update.tables[0].clone();
        t.key = key(world_size);
        t.bands[0].max = Some(max);
        update.tables.push(t);
    }
    let merged = merge(&published(), &update).unwrap();
    assert!(merged.platform_replaced);
    let mut expected = update.clone();
    expected.asserts = published().asserts;
    assert_eq!(merged.document, expected);
}

#[test]
fn a_partial_resweep_of_a_measured_file_keeps_the_old_measurement() {
    let first = {
        let mut doc = measured_ws2("2026-11-01", 2 << 20);
        let mut ws4 = doc.tables[0].clone();
        ws4.key = key(4);
        doc.tables.push(ws4);
        doc
    };
    let mut second = measured_ws2("2026-11-29", 1 << 20);
    second.platform.provenance.evidence = Some("sm90-nvlink.2026-11-29.evidence.json".into());
    let merged = merge(&first, &second).unwrap();
    let doc = &merged.document;
    assert_eq!(doc.platform, first.platform, "ws4 still relies on it");
    assert_eq!(table(doc, 4).source, None);
    assert_eq!(doc.origin(table(doc, 4)).date, Some("2026-11-01"));
    assert_eq!(doc.origin(table(doc, 2)).date, Some("2026-11-29"));
    assert_eq!(
        doc.origin(table(doc, 2)).evidence,
        Some("sm90-nvlink.2026-11-29.evidence.json")
    );
}

#[test]
fn new_keys_are_appended() {
    let mut update = measured_ws2("2026-11-29", 2 << 20);
    update.tables[0].key.mode = Mode::Eager;
    let merged = merge(&published(), &update).unwrap();
    assert_eq!(merged.added, vec![update.tables[0].key]);
    assert_eq!(merged.document.tables.len(), 4);
    assert_eq!(merged.document.tables[3].key.mode, Mode::Eager);
}

#[test]
fn capacities_the_sweep_measured_with_replace_the_files() {
    let mut update = measured_ws2("2026-11-29", 2 << 20);
    update.capacities[0].capacity.max_bytes = 4 << 20;
    update.capacities.push(CapacityEntry {
        collective: Collective::AllReduce,
        algo: Algo::OneShotPull,
        capacity: Capacity {
            max_bytes: 16 << 20,
            align: 16,
        },
    });
    let merged = merge(&published(), &update).unwrap();
    assert_eq!(merged.document.capacities, update.capacities);
    assert_eq!(
        merged.capacity_changes,
        vec![
            CapacityChange {
                collective: Collective::AllReduce,
                algo: Algo::OneShotPush,
                from: Some(Capacity {
                    max_bytes: 8 << 20,
                    align: 16
                }),
                to: Capacity {
                    max_bytes: 4 << 20,
                    align: 16
                },
            },
            CapacityChange {
                collective: Collective::AllReduce,
                algo: Algo::OneShotPull,
                from: None,
                to: Capacity {
                    max_bytes: 16 << 20,
                    align: 16
                },
            },
        ]
    );
    // Kept tables are still checked against the new capacities.
    validate_documents(std::slice::from_ref(&merged.document)).unwrap();
    let mut smaller = update.clone();
    smaller.capacities[0].capacity.max_bytes = 256 << 10;
    smaller.tables[0].bands[0].max = Some(256 << 10);
    let merged = merge(&published(), &smaller).unwrap();
    let errors = validate_documents(std::slice::from_ref(&merged.document)).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.message.starts_with("over capacity")),
        "{errors:?}"
    );
}

#[test]
fn another_platform_is_refused() {
    let mut update = measured_ws2("2026-11-29", 2 << 20);
    update.platform.arch = Arch::SM80;
    let error = merge(&published(), &update).unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot merge tables for sm80 nvlink into a file for sm90 nvlink"
    );
}

#[test]
fn a_measurement_that_names_no_evidence_cannot_be_merged_beside_other_sources() {
    let mut update = measured_ws2("2026-11-29", 2 << 20);
    update.platform.provenance.evidence = None;
    let error = merge(&published(), &update).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("cannot name the source of the new all_reduce ws2 bf16 graph table"),
        "{error}"
    );
}
