//! The writer's contract: `parse(write(doc)) == doc`, and the same document always
//! gives the same bytes. Checked on random documents (shape only: the parser does
//! not judge band order, so any document round-trips).

use proptest::collection::vec;
use proptest::prelude::*;
use tuned_schema::parse::parse_file;
use tuned_schema::validate::parse_document;
use tuned_schema::validate::validate_documents;
use tuned_schema::write::to_toml_string;
use tuned_schema::*;

fn arch() -> impl Strategy<Value = Arch> {
    // `smXY` names carry one digit of minor version.
    (1u8..=255, 0u8..=9).prop_map(|(major, minor)| Arch::from_compute_capability(major, minor))
}

fn text() -> impl Strategy<Value = String> {
    // Quotes, backslashes, control characters and non-ASCII must all survive.
    prop_oneof![
        "[a-zA-Z0-9 ._-]{0,24}",
        any::<String>(),
        Just("line1\nline2\t\"quoted\" \\ µs ≤ 5 \u{7f}".to_string()),
    ]
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(text())
}

fn algo() -> impl Strategy<Value = Algo> {
    proptest::sample::select(Algo::ALL.to_vec())
}

fn collective() -> impl Strategy<Value = Collective> {
    proptest::sample::select(Collective::ALL.to_vec())
}

fn provenance() -> impl Strategy<Value = Provenance> {
    (
        (opt_text(), opt_text(), opt_text(), opt_text()),
        (
            opt_text(),
            opt_text(),
            proptest::option::of(0u64..=i64::MAX as u64),
            opt_text(),
        ),
    )
        .prop_map(
            |((tuner_version, date, driver, cuda), (nccl, host, samples, evidence))| Provenance {
                tuner_version,
                date,
                driver,
                cuda,
                nccl,
                host,
                samples,
                evidence,
            },
        )
}

fn platform() -> impl Strategy<Value = Platform> {
    (
        arch(),
        text(),
        proptest::sample::select(Link::ALL.to_vec()),
        proptest::sample::select(Source::ALL.to_vec()),
        opt_text(),
        provenance(),
    )
        .prop_map(|(arch, gpu, link, source, citation, provenance)| Platform {
            arch,
            gpu,
            link,
            source,
            citation,
            provenance,
        })
}

fn capacity() -> impl Strategy<Value = CapacityEntry> {
    (
        collective(),
        algo(),
        any::<u64>(),
        1u64..=u64::from(u32::MAX),
    )
        .prop_map(|(collective, algo, max_bytes, align)| CapacityEntry {
            collective,
            algo,
            capacity: Capacity { max_bytes, align },
        })
}

fn key() -> impl Strategy<Value = TableKey> {
    (
        collective(),
        any::<u32>(),
        proptest::sample::select(DType::ALL.to_vec()),
        proptest::sample::select(Mode::ALL.to_vec()),
    )
        .prop_map(|(collective, world_size, dtype, mode)| TableKey {
            collective,
            world_size,
            dtype,
            mode,
        })
}

/// A table's own source, as the parser accepts it: required texts not blank,
/// dates in ISO form.
fn table_source() -> impl Strategy<Value = TableSource> {
    let date =
        (0u32..=9999, 1u32..=12, 1u32..=31).prop_map(|(y, m, d)| format!("{y:04}-{m:02}-{d:02}"));
    let measured = (
        "[a-z0-9._/-]{1,24}",
        date,
        "[0-9][0-9a-z.+-]{0,9}",
        any::<bool>(),
    )
        .prop_map(|(evidence, date, tuner_version, synthetic)| {
            let measurement = Measurement {
                evidence,
                date,
                tuner_version,
            };
            if synthetic {
                TableSource::Synthetic(measurement)
            } else {
                TableSource::Measured(measurement)
            }
        });
    let published = text().prop_map(|t| TableSource::Published {
        citation: format!("x{t}"),
    });
    prop_oneof![measured, published]
}

fn table() -> impl Strategy<Value = Table> {
    let band =
        (proptest::option::of(any::<u64>()), algo()).prop_map(|(max, algo)| Band { max, algo });
    (
        key(),
        proptest::option::of(table_source()),
        opt_text(),
        vec(band, 0..5),
    )
        .prop_map(|(key, source, note, bands)| Table {
            key,
            source,
            note,
            bands,
        })
}

fn assertion() -> impl Strategy<Value = Assertion> {
    (key(), arch(), any::<u64>(), vec(algo(), 0..4), text()).prop_map(
        |(k, arch, bytes, algo_in, why)| Assertion {
            arch,
            link: Link::NvLink,
            collective: k.collective,
            world_size: k.world_size,
            dtype: k.dtype,
            mode: k.mode,
            bytes,
            algo_in,
            why,
        },
    )
}

fn document() -> impl Strategy<Value = Document> {
    (
        platform(),
        vec(capacity(), 0..3),
        vec(table(), 0..4),
        vec(assertion(), 0..3),
    )
        .prop_map(|(platform, capacities, tables, asserts)| Document {
            platform,
            capacities,
            tables,
            asserts,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn parse_of_write_is_identity(doc in document()) {
        let text = to_toml_string(&doc);
        let parsed = parse_file("x.toml", &text);
        prop_assert!(parsed.is_ok(), "{:?}\n{}", parsed.err(), text);
        prop_assert_eq!(parsed.unwrap().document, doc.clone());
        // Deterministic: writing again gives the same bytes.
        prop_assert_eq!(to_toml_string(&doc), text);
    }
}

/// A small valid document, as the tuner would build one.
fn measured_sm90() -> Document {
    let table = |world_size, bands| Table {
        key: TableKey {
            collective: Collective::AllReduce,
            world_size,
            dtype: DType::Bf16,
            mode: Mode::Graph,
        },
        source: None,
        note: Some("swept 4KiB..64MiB".into()),
        bands,
    };
    Document {
        platform: Platform {
            arch: Arch::SM90,
            gpu: "NVIDIA H200".into(),
            link: Link::NvLink,
            source: Source::Measured,
            citation: None,
            provenance: Provenance {
                tuner_version: Some("0.1.0".into()),
                samples: Some(200),
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
        tables: vec![
            table(
                8,
                vec![
                    Band {
                        max: Some(448 * 1024),
                        algo: Algo::OneShotPush,
                    },
                    Band {
                        max: None,
                        algo: Algo::Nccl,
                    },
                ],
            ),
            table(
                4,
                vec![Band {
                    max: None,
                    algo: Algo::Nccl,
                }],
            ),
        ],
        asserts: vec![],
    }
}

#[test]
fn canonical_text_reads_as_people_write_it() {
    let expected = r#"schema = 1

[platform]
arch = "sm90"
gpu = "NVIDIA H200"
link = "nvlink"
source = "measured"

[platform.provenance]
tuner_version = "0.1.0"
samples = 200

[[capacity]]
collective = "all_reduce"
algo = "one_shot_push"
max = "8MiB"
align = 16

[[table]]
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
note = "swept 4KiB..64MiB"
bands = [
  { max = "448KiB", algo = "one_shot_push" },
  { algo = "nccl" },
]

[[table]]
collective = "all_reduce"
world_size = 4
dtype = "bf16"
mode = "graph"
note = "swept 4KiB..64MiB"
bands = [
  { algo = "nccl" },
]
"#;
    assert_eq!(to_toml_string(&measured_sm90()), expected);
    assert_eq!(
        parse_document("sm90-nvlink.toml", expected).unwrap(),
        measured_sm90()
    );
}

#[test]
fn documents_are_validated_against_their_canonical_text() {
    validate_documents(&[measured_sm90()]).unwrap();

    let mut broken = measured_sm90();
    broken.tables[0].bands[0].max = Some(16 << 20);
    let errors = validate_documents(&[broken]).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].file, "sm90-nvlink.toml");
    assert!(
        errors[0].message.starts_with("over capacity: max = 16MiB"),
        "{}",
        errors[0]
    );
    // Line 26 of the canonical text above is the first band of the first table.
    assert_eq!((errors[0].line, errors[0].col), (26, 11));
}
