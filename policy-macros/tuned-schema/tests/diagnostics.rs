//! One test per class of input error: each checks the message and the line:col
//! it points at. The base file below is valid; each test changes one thing.

use tuned_schema::Diagnostic;
use tuned_schema::parse::{ParsedFile, parse_file};
use tuned_schema::validate::parse_document;
use tuned_schema::validate::validate;

/// A valid file whose `[[table]]` bands start on line 21 and whose extra
/// sections (if any) start on line 24 (so a leading blank line puts a header on 25).
fn file_with(bands: &str, extra: &str) -> String {
    format!(
        r#"schema = 1

[platform]
arch = "sm90"
gpu = "NVIDIA H200"
link = "nvlink"
source = "measured"

[[capacity]]
collective = "all_reduce"
algo = "one_shot_push"
max = "1MiB"
align = 16

[[table]]
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
bands = [
{bands}
]
{extra}"#
    )
}

const GOOD_BANDS: &str = r#"  { max = "64KiB", algo = "one_shot_push" },
  { algo = "nccl" },"#;

/// The diagnostics of one file (parse and per-file checks).
fn errors(text: &str) -> Vec<Diagnostic> {
    parse_document("t.toml", text).expect_err("the file should be refused")
}

fn only_error(text: &str) -> Diagnostic {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "expected one error, got {errors:#?}");
    errors.into_iter().next().unwrap()
}

fn at(d: &Diagnostic) -> (u32, u32) {
    (d.line, d.col)
}

#[test]
fn base_file_is_valid() {
    let doc = parse_document("t.toml", &file_with(GOOD_BANDS, "")).unwrap();
    assert_eq!(doc.tables.len(), 1);
    assert_eq!(doc.tables[0].bands.len(), 2);
    assert_eq!(doc.tables[0].bands[0].max, Some(64 * 1024));
}

#[test]
fn syntax_error() {
    let d = only_error(&file_with(
        r#"  { max = "64KiB" algo = "one_shot_push" },
  { algo = "nccl" },"#,
        "",
    ));
    assert_eq!(
        d.message,
        "TOML syntax error: missing comma between key-value pairs, expected `,`"
    );
    assert_eq!(d.file, "t.toml");
    // Column 19 is the `a` of `algo`, where the comma was expected.
    assert_eq!(at(&d), (21, 19));
}

#[test]
fn unknown_algorithm() {
    let d = only_error(&file_with(
        r#"  { max = "64KiB", algo = "ring" },
  { algo = "nccl" },"#,
        "",
    ));
    assert_eq!(
        d.message,
        "unknown algorithm `ring`; expected one of: nccl, one_shot_push, one_shot_pull, two_shot_pull, two_shot_push, nccl_symmetric, unfused"
    );
    assert_eq!(at(&d), (21, 27));
    assert_eq!(
        d.to_string(),
        format!("t.toml:21:27: {}", d.message),
        "Display is file:line:col: message"
    );
}

#[test]
fn wrong_algorithm_for_the_collective() {
    let text = file_with(GOOD_BANDS, "")
        .replace(
            "collective = \"all_reduce\"\nworld_size",
            "collective = \"all_gather\"\nworld_size",
        )
        .replace(
            "{ max = \"64KiB\", algo = \"one_shot_push\" }",
            "{ max = \"64KiB\", algo = \"two_shot_pull\" }",
        );
    let d = only_error(&text);
    assert_eq!(
        d.message,
        "two_shot_pull does not implement all_gather; all_gather algorithms: nccl, one_shot_push, one_shot_pull, nccl_symmetric"
    );
    assert_eq!(at(&d), (21, 27));
}

#[test]
fn overlapping_bands() {
    let d = only_error(&file_with(
        r#"  { max = "64KiB", algo = "one_shot_push" },
  { max = "32KiB", algo = "nccl" },
  { algo = "nccl" },"#,
        "",
    ));
    assert_eq!(
        d.message,
        "bands overlap: max = 32KiB is not greater than the previous band's max = 64KiB; maxima must be strictly increasing"
    );
    assert_eq!(at(&d), (22, 11));
}

#[test]
fn open_band_before_the_last_overlaps_the_rest() {
    let d = only_error(&file_with(
        r#"  { algo = "nccl" },
  { max = "64KiB", algo = "one_shot_push" },
  { algo = "nccl" },"#,
        "",
    ));
    assert!(
        d.message
            .starts_with("bands overlap: this band has no `max`"),
        "{d}"
    );
    assert_eq!(at(&d), (21, 3));
}

#[test]
fn gap_after_the_last_band() {
    let d = only_error(&file_with(
        r#"  { max = "64KiB", algo = "one_shot_push" },
  { max = "1GiB", algo = "nccl" },"#,
        "",
    ));
    assert_eq!(
        d.message,
        "gap: the last band ends at max = 1GiB, so larger sizes have no algorithm; end with an open band such as { algo = \"nccl\" }"
    );
    assert_eq!(at(&d), (22, 11));
}

#[test]
fn empty_bands_leave_every_size_uncovered() {
    let d = only_error(&file_with("", ""));
    assert!(d.message.starts_with("`bands` is empty"), "{d}");
    assert_eq!(at(&d), (20, 9));
}

#[test]
fn over_capacity() {
    let d = only_error(&file_with(
        r#"  { max = "2MiB", algo = "one_shot_push" },
  { algo = "nccl" },"#,
        "",
    ));
    assert_eq!(
        d.message,
        "over capacity: max = 2MiB is larger than the capacity of one_shot_push for all_reduce, 1MiB (declared at t.toml:9:1)"
    );
    assert_eq!(at(&d), (21, 11));
}

#[test]
fn a_capacity_above_one_tebibyte_is_refused_where_it_is_declared() {
    // A capacity of 2^62 once wrapped the kernels' buffer arithmetic.
    let text = file_with(GOOD_BANDS, "").replace("max = \"1MiB\"", "max = 4611686018427387904");
    let d = only_error(&text);
    assert_eq!(
        d.message,
        "capacity `max` 4294967296GiB is above the largest the kernels' buffers are planned for, \
         1024GiB"
    );
    assert_eq!(at(&d), (12, 7));
    // Exactly 1 TiB is allowed.
    let text = file_with(GOOD_BANDS, "").replace("max = \"1MiB\"", "max = \"1024GiB\"");
    assert!(parse_document("t.toml", &text).is_ok());
}

#[test]
fn open_custom_band_is_over_capacity() {
    let d = only_error(&file_with(r#"  { algo = "one_shot_push" },"#, ""));
    assert!(
        d.message
            .starts_with("over capacity: the open last band uses one_shot_push"),
        "{d}"
    );
    assert_eq!(at(&d), (21, 12));
}

#[test]
fn misaligned_all_reduce_band() {
    let d = only_error(&file_with(
        r#"  { max = 1000, algo = "one_shot_push" },
  { algo = "nccl" },"#,
        "",
    ));
    assert_eq!(
        d.message,
        "misaligned: max = 1000B (1000 bytes) is not a multiple of 16, the alignment of one_shot_push (declared at t.toml:9:1)"
    );
    assert_eq!(at(&d), (21, 11));
}

#[test]
fn misaligned_all_gather_band_counts_each_ranks_share() {
    // 64 KiB + 16 is a multiple of 16 but not of 16 × 8 = 128.
    let text = file_with(
        r#"  { max = 65552, algo = "one_shot_push" },
  { algo = "nccl" },"#,
        "",
    )
    .replace("collective = \"all_reduce\"", "collective = \"all_gather\"");
    let d = only_error(&text);
    assert!(
        d.message.starts_with(
            "misaligned: max = 65552B (65552 bytes) is not a multiple of 128, align 16 × world_size 8"
        ),
        "{d}"
    );
    assert_eq!(at(&d), (21, 11));
}

#[test]
fn custom_band_without_capacity() {
    let d = only_error(&file_with(
        r#"  { max = "64KiB", algo = "one_shot_pull" },
  { algo = "nccl" },"#,
        "",
    ));
    assert_eq!(
        d.message,
        "band uses one_shot_pull for all_reduce but the file has no [[capacity]] with collective = \"all_reduce\", algo = \"one_shot_pull\""
    );
    assert_eq!(at(&d), (21, 27));
}

#[test]
fn duplicate_table() {
    let second = r#"
[[table]]
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
bands = [{ algo = "nccl" }]
"#;
    let d = only_error(&file_with(GOOD_BANDS, second));
    assert_eq!(
        d.message,
        "duplicate table for (all_reduce, world_size 8, bf16, graph); first defined at t.toml:15:1"
    );
    assert_eq!(at(&d), (25, 1));
}

#[test]
fn unknown_key() {
    let d = only_error(
        &file_with(GOOD_BANDS, "").replace("mode = \"graph\"", "mode = \"graph\"\nmodes = 2"),
    );
    assert_eq!(
        d.message,
        "unknown key `modes` in [[table]]; expected one of: collective, world_size, dtype, mode, source, citation, evidence, date, tuner_version, note, bands"
    );
    assert_eq!(at(&d), (20, 1));
}

#[test]
fn missing_key() {
    let d = only_error(&file_with(GOOD_BANDS, "").replace("dtype = \"bf16\"\n", ""));
    assert_eq!(d.message, "[[table]] is missing required key `dtype`");
    assert_eq!(at(&d), (15, 1));
}

#[test]
fn wrong_value_type() {
    let d = only_error(&file_with(GOOD_BANDS, "").replace("world_size = 8", "world_size = \"8\""));
    assert_eq!(d.message, "`world_size` must be an integer, found string");
    assert_eq!(at(&d), (17, 14));
}

#[test]
fn bad_size() {
    let d = only_error(&file_with(GOOD_BANDS, "").replace("max = \"1MiB\"", "max = \"1MB\""));
    assert!(
        d.message
            .starts_with("invalid size `1MB`: unknown unit `MB`"),
        "{d}"
    );
    assert_eq!(at(&d), (12, 7));
}

#[test]
fn world_size_below_two() {
    let d = only_error(&file_with(GOOD_BANDS, "").replace("world_size = 8", "world_size = 1"));
    assert_eq!(d.message, "world_size must be at least 2, found 1");
    assert_eq!(at(&d), (17, 14));
}

#[test]
fn world_size_above_the_limit() {
    let d =
        only_error(&file_with(GOOD_BANDS, "").replace("world_size = 8", "world_size = 4000000000"));
    assert_eq!(
        d.message,
        "world_size must be at most 1024, found 4000000000"
    );
    assert_eq!(at(&d), (17, 14));
}

#[test]
fn published_needs_citation() {
    let d = only_error(&file_with(GOOD_BANDS, "").replace("\"measured\"", "\"published\""));
    assert!(
        d.message
            .starts_with("source = \"published\" requires a non-empty `citation`"),
        "{d}"
    );
    assert_eq!(at(&d), (3, 1));
}

#[test]
fn wrong_schema_version() {
    let d = only_error(&file_with(GOOD_BANDS, "").replace("schema = 1", "schema = 2"));
    assert_eq!(
        d.message,
        "unsupported schema version 2; this build reads schema 1"
    );
    assert_eq!(at(&d), (1, 10));
}

#[test]
fn several_errors_are_reported_together_in_order() {
    let text = file_with(
        r#"  { max = "2MiB", algo = "one_shot_push" },
  { max = "1MiB", algo = "nccl" },"#,
        "",
    );
    let found: Vec<(u32, u32)> = errors(&text).iter().map(at).collect();
    // over capacity (21), then overlap and gap (both at 22:11).
    assert_eq!(found, vec![(21, 11), (22, 11), (22, 11)]);
}

fn parsed(path: &str, text: &str) -> ParsedFile {
    parse_file(path, text).unwrap()
}

const ASSERT_128K_CUSTOM: &str = r#"
[[assert]]
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
bytes = "128KiB"
algo_in = ["one_shot_push", "one_shot_pull"]
why = "a custom kernel beats NCCL here"
"#;

#[test]
fn violated_assertion() {
    let file = parsed("t.toml", &file_with(GOOD_BANDS, ASSERT_128K_CUSTOM));
    let errors = validate(&[file]).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        errors[0].message,
        "assertion violated: all_reduce 128KiB on sm90 nvlink at world_size 8, bf16, graph selects nccl, expected one of: one_shot_push, one_shot_pull (why: a custom kernel beats NCCL here)"
    );
    assert_eq!(at(&errors[0]), (25, 1));
}

#[test]
fn assertion_that_holds_passes() {
    let holds = ASSERT_128K_CUSTOM.replace("128KiB", "64KiB");
    let file = parsed("t.toml", &file_with(GOOD_BANDS, &holds));
    validate(&[file]).unwrap();
}

#[test]
fn assertion_about_an_undefined_platform() {
    let other = ASSERT_128K_CUSTOM.replace("[[assert]]", "[[assert]]\narch = \"sm75\"");
    let file = parsed("t.toml", &file_with(GOOD_BANDS, &other));
    let errors = validate(&[file]).unwrap_err();
    assert_eq!(
        errors[0].message,
        "[[assert]] names platform sm75 nvlink, which no file defines"
    );
    assert_eq!(at(&errors[0]), (25, 1));
}

#[test]
fn duplicate_platform_names_both_files() {
    let text = file_with(GOOD_BANDS, "");
    let errors = validate(&[parsed("a.toml", &text), parsed("b.toml", &text)]).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].file, "b.toml");
    assert_eq!(
        errors[0].message,
        "duplicate platform: sm90 nvlink is already defined at a.toml:3:1; keep one file per (arch, link)"
    );
    assert_eq!(at(&errors[0]), (3, 1));
}

/// The base file with `lines` added to its `[[table]]` after `mode` (line 19),
/// so the first added line is line 20.
fn table_with(lines: &str) -> String {
    file_with(GOOD_BANDS, "").replace("mode = \"graph\"\n", &format!("mode = \"graph\"\n{lines}"))
}

#[test]
fn a_table_may_name_its_own_source() {
    let measured = table_with(
        "source = \"measured\"\nevidence = \"sm90-nvlink.evidence.json\"\ndate = \"2026-11-29\"\ntuner_version = \"0.1.0\"\n",
    );
    let doc = parse_document("t.toml", &measured).unwrap();
    let origin = doc.origin(&doc.tables[0]);
    assert_eq!(origin.evidence, Some("sm90-nvlink.evidence.json"));
    assert_eq!(origin.date, Some("2026-11-29"));
    assert!(!origin.inherited);

    let published = table_with("source = \"published\"\ncitation = \"SGLang PR 2904\"\n");
    let doc = parse_document("t.toml", &published).unwrap();
    let origin = doc.origin(&doc.tables[0]);
    assert_eq!(origin.source, tuned_schema::Source::Published);
    assert_eq!(origin.citation, Some("SGLang PR 2904"));
}

#[test]
fn a_table_without_source_takes_the_files() {
    let doc = parse_document("t.toml", &file_with(GOOD_BANDS, "")).unwrap();
    let origin = doc.origin(&doc.tables[0]);
    assert_eq!(origin.source, tuned_schema::Source::Measured);
    assert!(origin.inherited);
}

#[test]
fn measured_table_without_evidence() {
    let d = only_error(&table_with(
        "source = \"measured\"\ndate = \"2026-11-29\"\ntuner_version = \"0.1.0\"\n",
    ));
    assert_eq!(
        d.message,
        "source = \"measured\" requires `evidence`: the evidence file the bands were fitted from, relative to this file"
    );
    assert_eq!(at(&d), (20, 10));
}

#[test]
fn citation_without_source() {
    let d = only_error(&table_with("citation = \"SGLang PR 2904\"\n"));
    assert_eq!(
        d.message,
        "`citation` needs `source = \"published\"` in the same [[table]]; a table without `source` takes the file's source from [platform]"
    );
    assert_eq!(at(&d), (20, 12));
}

#[test]
fn published_table_with_evidence() {
    let d = only_error(&table_with(
        "source = \"published\"\ncitation = \"vLLM PR 24111\"\nevidence = \"x.evidence.json\"\n",
    ));
    assert_eq!(
        d.message,
        "`evidence` is for measured and synthetic tables; a table with source = \"published\" names where its figures come from in `citation`"
    );
    assert_eq!(at(&d), (22, 12));
}

#[test]
fn measured_table_with_citation() {
    let d = only_error(&table_with(
        "source = \"measured\"\ncitation = \"x\"\nevidence = \"e.json\"\ndate = \"2026-11-29\"\ntuner_version = \"0.1.0\"\n",
    ));
    assert_eq!(
        d.message,
        "`citation` is for published tables; a table with source = \"measured\" names its `evidence`"
    );
    assert_eq!(at(&d), (21, 12));
}

#[test]
fn published_table_with_empty_citation() {
    let d = only_error(&table_with("source = \"published\"\ncitation = \"  \"\n"));
    assert_eq!(
        d.message,
        "`citation` is empty; it must name where the figures come from: project and file, PR or figure"
    );
    assert_eq!(at(&d), (21, 12));
}

#[test]
fn measured_table_with_a_date_that_is_not_iso() {
    let d = only_error(&table_with(
        "source = \"measured\"\nevidence = \"e.json\"\ndate = \"29/11/2026\"\ntuner_version = \"0.1.0\"\n",
    ));
    assert_eq!(
        d.message,
        "`date` must be an ISO date such as \"2026-11-29\", found \"29/11/2026\""
    );
    assert_eq!(at(&d), (22, 8));
}

#[test]
fn unknown_table_source() {
    let d = only_error(&table_with("source = \"guessed\"\n"));
    assert_eq!(
        d.message,
        "unknown source `guessed`; expected one of: measured, published, synthetic"
    );
    assert_eq!(at(&d), (20, 10));
}

#[test]
fn a_synthetic_table_names_its_evidence_like_a_measured_one() {
    let synthetic = table_with(
        "source = \"synthetic\"\nevidence = \"e.json\"\ndate = \"2026-11-29\"\ntuner_version = \"0.1.0\"\n",
    );
    let doc = parse_document("t.toml", &synthetic).unwrap();
    let origin = doc.origin(&doc.tables[0]);
    assert_eq!(origin.source, tuned_schema::Source::Synthetic);
    assert_eq!(origin.evidence, Some("e.json"));
    let missing: Vec<String> = errors(&table_with("source = \"synthetic\"\n"))
        .into_iter()
        .map(|d| d.message)
        .collect();
    assert_eq!(missing.len(), 3, "{missing:#?}");
    for key in ["evidence", "date", "tuner_version"] {
        let needed = format!("source = \"synthetic\" requires `{key}`");
        assert!(
            missing.iter().any(|m| m.starts_with(&needed)),
            "{missing:#?}"
        );
    }
}
