//! What the tuner writes is what `policy-macros` accepts: the written folder is
//! loaded with `tuned_schema::folder::load_folder` — the parse and validation
//! the proc-macro itself runs (the macro is a thin shell over it) — and the
//! plain interpreter selects, at every band edge and one byte past it, exactly
//! the bands that were fitted. (Compiling a crate around the macro in a test
//! would check the same code path at many times the cost.)

mod common;

use tuned_schema::folder::load_folder;
use tuned_schema::interpret;
use tuned_schema::write::to_toml_string;
use tuner::commands::{self, Exit, FitArgs, FitCommandArgs};
use tuner::fit::{FitSettings, fit};
use tuner::tuned_file::{build_document, toml_file_name};

fn fit_args(evidence: &std::path::Path, out: &std::path::Path) -> FitCommandArgs {
    FitCommandArgs {
        evidence: evidence.to_path_buf(),
        out: Some(out.to_path_buf()),
        // The synthetic model's tables, in a scratch folder of their own.
        force: false,
        json: false,
        fit: FitArgs {
            margin_pct: tuner::fit::DEFAULT_MARGIN * 100.0,
            min_samples: 5,
            memory_budget: None,
        },
    }
}

#[test]
fn written_files_load_validate_and_select_the_fitted_bands() {
    let evidence = common::synthetic_evidence(0.03, 21);
    let result = fit(&evidence, &FitSettings::default());
    let doc = build_document(
        &evidence,
        &result,
        Some("sm90-nvlink.evidence.json"),
        Vec::new(),
    );
    let dir = common::scratch("round-trip");
    common::write(
        &dir.join(toml_file_name(doc.platform.arch, doc.platform.link)),
        &to_toml_string(&doc),
    );

    let loaded = load_folder(&dir, "tuned").unwrap_or_else(|d| panic!("{d:?}"));
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].parsed.document, doc, "parse(write(doc)) == doc");

    let docs = [loaded[0].parsed.document.clone()];
    for key in &result.keys {
        let query = |bytes| key.key.query(doc.platform.arch, doc.platform.link, bytes);
        for pair in key.bands.windows(2) {
            let edge = pair[0].max.expect("inner bands are closed");
            assert_eq!(interpret::select(&docs, query(edge)), pair[0].algo);
            assert_eq!(interpret::select(&docs, query(edge + 1)), pair[1].algo);
        }
        assert_eq!(
            interpret::select(&docs, query(1 << 40)),
            key.key.collective.fallback()
        );
    }
}

#[test]
fn hand_written_asserts_survive_a_refit() {
    let dir = common::scratch("asserts");
    let evidence = common::synthetic_evidence(0.03, 22);
    let evidence_path = dir.join("sm90-nvlink.evidence.json");
    common::write(&evidence_path, &evidence.to_json());
    let toml_path = dir.join("sm90-nvlink.toml");

    // A first fit, then a reviewer adds an invariant by hand.
    let mut out = Vec::new();
    assert_eq!(
        commands::fit(&fit_args(&evidence_path, &toml_path), &mut out).unwrap(),
        Exit::Ok
    );
    let holds = "\n[[assert]]\narch = \"sm90\"\nlink = \"nvlink\"\ncollective = \"all_reduce\"\nworld_size = 8\ndtype = \"bf16\"\nmode = \"graph\"\nbytes = \"4KiB\"\nalgo_in = [\"one_shot_push\"]\nwhy = \"decode all-reduces must stay on the push kernel\"\n";
    let text = std::fs::read_to_string(&toml_path).unwrap() + holds;
    common::write(&toml_path, &text);

    // A re-fit keeps it.
    assert_eq!(
        commands::fit(&fit_args(&evidence_path, &toml_path), &mut out).unwrap(),
        Exit::Ok
    );
    let refitted = std::fs::read_to_string(&toml_path).unwrap();
    assert!(
        refitted.contains("decode all-reduces must stay on the push kernel"),
        "{refitted}"
    );

    // An invariant the new bands break: the re-fit is refused and the file is
    // left as it was.
    let broken = refitted.replace("algo_in = [\"one_shot_push\"]", "algo_in = [\"nccl\"]");
    common::write(&toml_path, &broken);
    let err = commands::fit(&fit_args(&evidence_path, &toml_path), &mut out).unwrap_err();
    assert!(err.to_string().contains("assertion violated"), "{err}");
    assert_eq!(std::fs::read_to_string(&toml_path).unwrap(), broken);
}
