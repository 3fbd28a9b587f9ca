//! `tuner plot`: a folder with one SVG per key and an index.html that links
//! them, written whole or not at all; bands only of the file that answers the
//! evidence's platform.

mod common;

use common::{exits, stderr, stdout, tuner};

fn evidence_file(dir: &std::path::Path, evidence: &tuner::evidence::Evidence) -> String {
    let path = dir.join("sm90-nvlink.evidence.json");
    common::write(&path, &evidence.to_json());
    path.to_str().unwrap().to_string()
}

/// Files of `dir` and any folder beside it that plot may have left.
fn leftovers(parent: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("plots"))
        .collect()
}

#[test]
fn plot_writes_an_index_that_links_every_figure() {
    let dir = common::scratch("plot-index");
    let evidence = evidence_file(&dir, &common::synthetic_evidence(0.02, 11));
    let plots = dir.join("plots");
    let out = tuner(&["plot", &evidence, "-o", plots.to_str().unwrap()]);
    exits(&out, 0);
    let index = std::fs::read_to_string(plots.join("index.html")).unwrap();
    let svgs: Vec<String> = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    // Two modes of each of the three collectives.
    assert_eq!(svgs.len(), 6, "{svgs:?}");
    for svg in &svgs {
        assert!(
            index.contains(&format!("<img src=\"{svg}\"")),
            "{svg}: {index}"
        );
        let figure = std::fs::read_to_string(plots.join(svg)).unwrap();
        // The open band's legend: the collective's fallback.
        let fallback = if svg.starts_with("all_reduce_add_rmsnorm") {
            "band: unfused"
        } else {
            "band: nccl"
        };
        assert!(
            figure.contains(fallback),
            "the shading has a legend entry: {svg}"
        );
        assert!(figure.contains("≤ "), "band edges are labelled: {svg}");
    }
    for key in ["all_reduce ws8 bf16 graph", "all_gather ws8 bf16 eager"] {
        let line = index
            .lines()
            .find(|l| l.starts_with("<li>") && l.contains(key))
            .unwrap_or_else(|| panic!("no summary for {key}: {index}"));
        assert!(line.contains("bands one_shot_push ≤ "), "{line}");
        assert!(line.contains("crossovers one_shot_push → "), "{line}");
        assert!(line.contains("regret of these bands at "), "{line}");
    }
    assert!(stdout(&out).contains("index.html"), "{}", stdout(&out));

    // Plotting again replaces the earlier plot.
    exits(
        &tuner(&["plot", &evidence, "-o", plots.to_str().unwrap()]),
        0,
    );
    assert!(plots.join("index.html").exists());
    assert_eq!(leftovers(&dir), ["plots"], "no staging folder is left");
}

#[test]
fn plot_shades_only_bands_that_answer_the_evidence() {
    let dir = common::scratch("plot-toml");
    let evidence = evidence_file(&dir, &common::synthetic_evidence(0.02, 12));
    let plots = dir.join("plots");
    let loopback = dir.join("sm90-loopback.toml");
    common::write(
        &loopback,
        &common::PUBLISHED_SM90.replace("link = \"nvlink\"", "link = \"loopback\""),
    );
    let out = tuner(&[
        "plot",
        &evidence,
        "--toml",
        loopback.to_str().unwrap(),
        "-o",
        plots.to_str().unwrap(),
    ]);
    exits(&out, 2);
    assert!(
        stderr(&out).contains("is for sm90 loopback, but the evidence is from sm90 nvlink"),
        "{}",
        stderr(&out)
    );
    let other_arch = dir.join("sm80-nvlink.toml");
    common::write(&other_arch, &common::PUBLISHED_SM90.replace("sm90", "sm80"));
    let out = tuner(&[
        "plot",
        &evidence,
        "--toml",
        other_arch.to_str().unwrap(),
        "-o",
        plots.to_str().unwrap(),
    ]);
    exits(&out, 2);
    assert!(!plots.exists(), "nothing was written");
    // The file for the evidence's own platform is taken.
    let own = dir.join("own.toml");
    common::write(&own, common::PUBLISHED_SM90);
    let out = tuner(&[
        "plot",
        &evidence,
        "--toml",
        own.to_str().unwrap(),
        "-o",
        plots.to_str().unwrap(),
    ]);
    exits(&out, 0);
}

#[test]
fn plot_never_writes_into_a_folder_of_other_files() {
    let dir = common::scratch("plot-foreign");
    let evidence = evidence_file(&dir, &common::synthetic_evidence(0.02, 13));
    let before = common::snapshot(&dir);
    let out = tuner(&["plot", &evidence, "-o", dir.to_str().unwrap()]);
    exits(&out, 2);
    assert!(
        stderr(&out)
            .contains("holds files that are not an earlier plot's (sm90-nvlink.evidence.json)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(common::snapshot(&dir), before, "untouched");
    let tuned = common::repository_tuned();
    let out = tuner(&["plot", &evidence, "-o", tuned.to_str().unwrap()]);
    exits(&out, 2);
}

#[test]
fn plot_without_anything_to_draw_fails_and_leaves_nothing() {
    let dir = common::scratch("plot-nothing");
    let plots = dir.join("plots");
    let mut empty = common::synthetic_evidence(0.02, 14);
    empty.keys.clear();
    let evidence = evidence_file(&dir, &empty);
    let out = tuner(&["plot", &evidence, "-o", plots.to_str().unwrap()]);
    exits(&out, 1);
    assert!(
        stderr(&out).contains("the evidence has no key"),
        "{}",
        stderr(&out)
    );

    let mut unusable = common::synthetic_evidence(0.02, 14);
    for key in &mut unusable.keys {
        for point in &mut key.points {
            point.samples_us.clear();
            point.error = Some("verification failed".to_string());
        }
    }
    let evidence = evidence_file(&dir, &unusable);
    let out = tuner(&["plot", &evidence, "-o", plots.to_str().unwrap()]);
    exits(&out, 1);
    assert!(
        stderr(&out).contains("no key has a usable point"),
        "{}",
        stderr(&out)
    );
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn a_key_without_a_usable_point_is_named_not_dropped() {
    let dir = common::scratch("plot-one-empty");
    let mut evidence = common::synthetic_evidence(0.02, 15);
    let empty = evidence.keys[0].key();
    for point in &mut evidence.keys[0].points {
        point.samples_us.clear();
        point.error = Some("verification failed".to_string());
    }
    let path = evidence_file(&dir, &evidence);
    let plots = dir.join("plots");
    let out = tuner(&["plot", &path, "-o", plots.to_str().unwrap()]);
    exits(&out, 0);
    assert!(
        stderr(&out).contains(&format!("tuner: warning: {empty}: no usable point")),
        "{}",
        stderr(&out)
    );
    let index = std::fs::read_to_string(plots.join("index.html")).unwrap();
    assert!(
        index.contains(&format!("<li>{empty}: no usable point")),
        "{index}"
    );
}
