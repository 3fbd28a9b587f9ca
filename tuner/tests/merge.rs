//! `tuner sweep --out DIR` and `tuner fit` merge into the platform file already
//! in DIR: a world-size-2 sweep replaces the world-size-2 tables of a file with
//! published 2/4/8 rows, keeps the 4/8 rows and every `[[assert]]`, and each
//! table still says where it came from. Re-fitting the same evidence into the
//! merged file gives the same bytes.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use policy::{Collective, DType, Mode, TableKey};
use tuned_schema::validate::parse_document;
use tuned_schema::{Document, Source, Table, TableSource};

fn tuner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tuner"))
        .args(args)
        .output()
        .expect("tuner runs")
}

fn ok(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A synthetic sweep of world size 2, bf16, graph (both collectives) into `dir`.
fn sweep_ws2(dir: &Path, seed: &str) -> String {
    sweep(dir, "2", seed)
}

fn sweep(dir: &Path, world_sizes: &str, seed: &str) -> String {
    ok(tuner(&[
        "sweep",
        "--synthetic",
        "--seed",
        seed,
        "--noise-pct",
        "2",
        "--world-sizes",
        world_sizes,
        "--dtypes",
        "bf16",
        "--modes",
        "graph",
        "--max-bytes",
        "16MiB",
        "--no-progress",
        "--force",
        "--out",
        dir.to_str().unwrap(),
    ]))
}

/// One published table: push up to `push_max`, then NCCL.
fn published_table(collective: &str, world_size: u32, push_max: &str) -> String {
    format!(
        r#"
[[table]]
collective = "{collective}"
world_size = {world_size}
dtype = "bf16"
mode = "graph"
note = "published {collective} ws{world_size}"
bands = [
  {{ max = "{push_max}", algo = "one_shot_push" }},
  {{ algo = "nccl" }},
]
"#
    )
}

/// A published sm90 nvlink file with rows for 2, 4 and 8 ranks, the synthetic
/// backend's capacities, and one invariant about world size 8.
fn published_file() -> String {
    let mut text = r#"schema = 1

[platform]
arch = "sm90"
gpu = "synthetic"
link = "nvlink"
source = "published"
citation = "SGLang python/sglang/srt/distributed/device_communicators/configs/custom_all_reduce_v2.py"

[[capacity]]
collective = "all_reduce"
algo = "one_shot_push"
max = "8MiB"
align = 16

[[capacity]]
collective = "all_reduce"
algo = "one_shot_pull"
max = "16MiB"
align = 16

[[capacity]]
collective = "all_reduce"
algo = "two_shot_pull"
max = "64MiB"
align = 16

[[capacity]]
collective = "all_gather"
algo = "one_shot_push"
max = "8MiB"
align = 16

[[capacity]]
collective = "all_gather"
algo = "one_shot_pull"
max = "16MiB"
align = 16
"#
    .to_string();
    for collective in ["all_reduce", "all_gather"] {
        for (ws, max) in [(2, "1MiB"), (4, "512KiB"), (8, "256KiB")] {
            text.push_str(&published_table(collective, ws, max));
        }
    }
    text.push_str(
        r#"
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
"#,
    );
    text
}

fn read(path: &Path) -> Document {
    let text = std::fs::read_to_string(path).unwrap();
    parse_document(&path.display().to_string(), &text).unwrap()
}

fn key(collective: Collective, world_size: u32) -> TableKey {
    TableKey {
        collective,
        world_size,
        dtype: DType::Bf16,
        mode: Mode::Graph,
    }
}

fn table(doc: &Document, key: TableKey) -> &Table {
    doc.tables.iter().find(|t| t.key == key).expect("table")
}

#[test]
fn a_ws2_sweep_replaces_only_the_ws2_rows_of_a_published_file() {
    let dir = common::scratch("merge-published");
    let toml = dir.join("sm90-nvlink.toml");
    common::write(&toml, &published_file());
    let before = read(&toml);

    let stdout = sweep_ws2(&dir, "3");
    assert!(
        stdout.contains("replaced 2 table(s), added 0, kept 4; kept 1 [[assert]](s)"),
        "{stdout}"
    );
    let after = read(&toml);

    assert_eq!(after.platform, before.platform, "kept tables rely on it");
    assert_eq!(
        after.capacities, before.capacities,
        "the sweep measured with these"
    );
    assert_eq!(after.asserts, before.asserts);
    assert_eq!(after.tables.len(), 6);
    for collective in [Collective::AllReduce, Collective::AllGather] {
        for ws in [4, 8] {
            let k = key(collective, ws);
            assert_eq!(
                table(&after, k),
                table(&before, k),
                "{k:?} is kept as it was"
            );
            assert_eq!(after.origin(table(&after, k)).source, Source::Published);
        }
        let ws2 = table(&after, key(collective, 2));
        assert_ne!(ws2, table(&before, key(collective, 2)), "replaced");
        let Some(TableSource::Synthetic(m)) = &ws2.source else {
            panic!("a synthetic table in a published file names its source: {ws2:?}");
        };
        assert_eq!(m.evidence, "sm90-nvlink.evidence.json");
        assert!(dir.join(&m.evidence).exists());
        assert_eq!(m.tuner_version, env!("CARGO_PKG_VERSION"));
    }
    // The order of the file is kept: a reviewer's diff shows only the ws2 rows.
    let keys = |d: &Document| d.tables.iter().map(|t| t.key).collect::<Vec<_>>();
    assert_eq!(keys(&after), keys(&before));
}

#[test]
fn refitting_the_evidence_into_the_merged_file_is_byte_identical() {
    let dir = common::scratch("merge-refit");
    let toml = dir.join("sm90-nvlink.toml");
    common::write(&toml, &published_file());
    sweep_ws2(&dir, "4");
    let merged = std::fs::read(&toml).unwrap();
    let evidence = dir.join("sm90-nvlink.evidence.json");
    let stdout = ok(tuner(&["fit", evidence.to_str().unwrap(), "--force"]));
    assert!(stdout.contains("replaced 2 table(s)"), "{stdout}");
    assert_eq!(std::fs::read(&toml).unwrap(), merged);
}

#[test]
fn a_partial_resweep_of_a_measured_file_gets_its_own_evidence() {
    let dir = common::scratch("merge-measured");
    let toml = dir.join("sm90-nvlink.toml");
    sweep(&dir, "2,4", "5");
    let first_evidence = std::fs::read(dir.join("sm90-nvlink.evidence.json")).unwrap();
    let first = read(&toml);
    assert!(
        first.tables.iter().all(|t| t.source.is_none()),
        "a fresh file"
    );

    let stdout = sweep_ws2(&dir, "6");
    let after = read(&toml);
    // ws4 still rests on the first sweep's evidence, which is untouched.
    assert_eq!(
        std::fs::read(dir.join("sm90-nvlink.evidence.json")).unwrap(),
        first_evidence
    );
    for collective in [Collective::AllReduce, Collective::AllGather] {
        let ws4 = key(collective, 4);
        assert_eq!(table(&after, ws4), table(&first, ws4));
        assert_eq!(
            after.origin(table(&after, ws4)).evidence,
            Some("sm90-nvlink.evidence.json")
        );
        let ws2 = after.origin(table(&after, key(collective, 2)));
        let evidence = ws2.evidence.expect("measured tables name their evidence");
        assert!(
            evidence.starts_with("sm90-nvlink.") && evidence != "sm90-nvlink.evidence.json",
            "{evidence}"
        );
        assert!(dir.join(evidence).exists(), "{stdout}");
        assert!(stdout.contains(evidence), "{stdout}");
    }
}

#[test]
fn a_file_for_another_platform_is_not_merged_into() {
    let dir = common::scratch("merge-other");
    let toml = dir.join("sm90-nvlink.toml");
    let other = published_file().replace("arch = \"sm90\"", "arch = \"sm80\"");
    common::write(&toml, &other);
    let evidence = dir.join("e.evidence.json");
    common::write(&evidence, &common::synthetic_evidence(0.02, 1).to_json());
    let out = tuner(&[
        "fit",
        evidence.to_str().unwrap(),
        "--force",
        "-o",
        toml.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot merge tables for sm90 nvlink into a file for sm80 nvlink"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&toml).unwrap(), other, "untouched");
}
