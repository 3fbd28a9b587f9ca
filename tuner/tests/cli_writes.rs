//! Where `sweep` and `fit` may write, and that a sweep never loses what it
//! measured: synthetic and loopback tables stay out of folders of real tables
//! (unless `--force`), every obstacle to writing is found before the first
//! measurement, the evidence survives a write that fails after it, and
//! evidence paths in the TOML are relative to it from any working directory.

mod common;

use common::{PUBLISHED_SM90, exits, quick_sweep, stderr, stdout, tuner, tuner_in};

/// Nothing was measured: the sweep stopped before printing its estimate.
fn measured_nothing(out: &std::process::Output) {
    assert!(
        !stderr(out).contains("tuner: measuring"),
        "the sweep measured before refusing: {}",
        stderr(out)
    );
}

#[test]
fn synthetic_tables_say_so() {
    let dir = common::scratch("writes-synthetic-source");
    let out = tuner(&quick_sweep(dir.to_str().unwrap()));
    exits(&out, 0);
    let toml = std::fs::read_to_string(dir.join("sm90-nvlink.toml")).unwrap();
    assert!(toml.contains("source = \"synthetic\""), "{toml}");
    assert!(toml.contains("gpu = \"synthetic\""), "{toml}");
    assert!(!toml.contains("\"measured\""), "{toml}");
    let shown = tuner(&["show", dir.to_str().unwrap()]);
    exits(&shown, 0);
    assert!(
        stdout(&shown).contains("sm90 nvlink — synthetic — synthetic"),
        "{}",
        stdout(&shown)
    );
}

#[test]
fn synthetic_tables_never_land_in_the_tables_policy_compiles() {
    let tuned = common::repository_tuned();
    let before = common::snapshot(&tuned);
    let out = tuner(&quick_sweep(tuned.to_str().unwrap()));
    exits(&out, 2);
    measured_nothing(&out);
    assert!(
        stderr(&out).contains("refusing to write synthetic tables into"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    // `fit` of synthetic evidence into tuned/ is refused the same way.
    let scratch = common::scratch("writes-fit-into-tuned");
    let evidence = scratch.join("sm90-nvlink.evidence.json");
    common::write(&evidence, &common::synthetic_evidence(0.02, 1).to_json());
    let out = tuner(&[
        "fit",
        evidence.to_str().unwrap(),
        "-o",
        tuned.to_str().unwrap(),
    ]);
    exits(&out, 2);
    assert!(
        stderr(&out).contains("refusing to write synthetic tables"),
        "{}",
        stderr(&out)
    );
    assert_eq!(common::snapshot(&tuned), before, "tuned/ is untouched");
}

#[test]
fn synthetic_tables_stay_out_of_folders_of_real_tables_unless_forced() {
    let dir = common::scratch("writes-real-folder");
    let real = dir.join("sm90-nvlink.toml");
    common::write(&real, PUBLISHED_SM90);
    let out = tuner(&quick_sweep(dir.to_str().unwrap()));
    exits(&out, 2);
    measured_nothing(&out);
    let message = stderr(&out);
    assert!(
        message.contains("sm90-nvlink.toml holds measured or published tables"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&real).unwrap(), PUBLISHED_SM90);

    // A real platform's file for another platform counts as much: the folder
    // is compiled as one.
    let other = common::scratch("writes-real-sibling");
    common::write(
        &other.join("sm80-nvlink.toml"),
        &PUBLISHED_SM90.replace("sm90", "sm80"),
    );
    exits(&tuner(&quick_sweep(other.to_str().unwrap())), 2);

    // --force writes them, merged into the real file, each naming its source.
    let mut forced = quick_sweep(dir.to_str().unwrap());
    forced.push("--force");
    let out = tuner(&forced);
    exits(&out, 0);
    let merged = std::fs::read_to_string(&real).unwrap();
    assert!(merged.contains("source = \"synthetic\""), "{merged}");
    assert!(
        merged.contains("citation = \"a public engine's thresholds\""),
        "{merged}"
    );
}

#[test]
fn synthetic_tables_stay_out_of_a_crates_tuned_folder() {
    let dir = common::scratch("writes-crate");
    common::write(&dir.join("Cargo.toml"), "[package]\nname = \"engine\"\n");
    let tuned = dir.join("tuned");
    let out = tuner(&quick_sweep(tuned.to_str().unwrap()));
    exits(&out, 2);
    assert!(
        stderr(&out).contains("include_tuned!(\"tuned\") compiles"),
        "{}",
        stderr(&out)
    );
    assert!(!tuned.exists(), "nothing was created");
}

#[test]
fn a_sweep_checks_its_destination_before_measuring() {
    let dir = common::scratch("writes-checks");
    // --out names a file.
    let file = dir.join("afile");
    common::write(&file, "x");
    let out = tuner(&quick_sweep(file.to_str().unwrap()));
    exits(&out, 2);
    measured_nothing(&out);
    assert!(stderr(&out).contains("is a file"), "{}", stderr(&out));

    // The file to merge into does not parse.
    let broken = common::scratch("writes-broken");
    common::write(&broken.join("sm90-nvlink.toml"), "schema = 1\n[platform\n");
    let out = tuner(&quick_sweep(broken.to_str().unwrap()));
    exits(&out, 1);
    measured_nothing(&out);
    assert!(
        stderr(&out).contains("cannot merge into") && stderr(&out).contains("does not parse"),
        "{}",
        stderr(&out)
    );

    // Another *.toml of the folder does not parse: the macro would refuse the folder.
    let sibling = common::scratch("writes-broken-sibling");
    common::write(&sibling.join("notes.toml"), "this is [not a tuned file\n");
    let out = tuner(&quick_sweep(sibling.to_str().unwrap()));
    exits(&out, 1);
    measured_nothing(&out);
    assert!(
        stderr(&out).contains("notes.toml does not parse, and policy-macros compiles every *.toml"),
        "{}",
        stderr(&out)
    );
    assert!(!sibling.join("sm90-nvlink.toml").exists());

    // Another file defines the same platform.
    let twin = common::scratch("writes-twin");
    let synthetic_twin = PUBLISHED_SM90
        .replace("source = \"published\"\ncitation = \"a public engine's thresholds\"", "source = \"synthetic\"\n[platform.provenance]\nevidence = \"e.json\"\ndate = \"2026-01-01\"\ntuner_version = \"0.1.0\"");
    common::write(&twin.join("h200.toml"), &synthetic_twin);
    let out = tuner(&quick_sweep(twin.to_str().unwrap()));
    exits(&out, 1);
    measured_nothing(&out);
    assert!(
        stderr(&out).contains("h200.toml also defines sm90 nvlink"),
        "{}",
        stderr(&out)
    );

    // The same key twice.
    for (flag, list, says) in [
        ("--world-sizes", "2,2", "--world-sizes names 2 twice"),
        (
            "--collectives",
            "all_reduce,all_reduce",
            "--collectives names all_reduce twice",
        ),
        ("--dtypes", "bf16,f32,bf16", "--dtypes names bf16 twice"),
    ] {
        let empty = common::scratch("writes-twice");
        let out = tuner(&[
            "sweep",
            "--synthetic",
            flag,
            list,
            "--out",
            empty.to_str().unwrap(),
        ]);
        exits(&out, 2);
        measured_nothing(&out);
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }

    // -o - is refused: a sweep writes two files.
    let out = tuner(&["sweep", "--synthetic", "--out", "-"]);
    exits(&out, 2);
    assert!(
        stderr(&out).contains("--out - is not possible"),
        "{}",
        stderr(&out)
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_folder_that_cannot_be_created_is_found_before_measuring() {
    // Not even root may create folders in /proc.
    let out = tuner(&quick_sweep("/proc/tuner-test-folder"));
    exits(&out, 1);
    measured_nothing(&out);
    assert!(
        stderr(&out).contains("cannot create folder /proc/tuner-test-folder"),
        "{}",
        stderr(&out)
    );
}

/// A synthetic sm90 nvlink file with a world-size-8 table whose push band
/// reaches `push_max`, under a push capacity of 32 MiB.
fn synthetic_file(push_max: &str) -> String {
    format!(
        r#"schema = 1

[platform]
arch = "sm90"
gpu = "synthetic"
link = "nvlink"
source = "synthetic"

[platform.provenance]
evidence = "old.evidence.json"
date = "2026-01-01"
tuner_version = "0.1.0"

[[capacity]]
collective = "all_reduce"
algo = "one_shot_push"
max = "32MiB"
align = 16

[[table]]
collective = "all_reduce"
world_size = 8
dtype = "bf16"
mode = "graph"
bands = [
  {{ max = "{push_max}", algo = "one_shot_push" }},
  {{ algo = "nccl" }},
]
"#
    )
}

/// A write that fails after measuring keeps the evidence and prints the
/// `tuner fit` command that finishes the job. Here the merge does it: the
/// sweep measured with an 8 MiB push capacity, which replaces the file's 32
/// MiB, and the file's kept world-size-8 band reaches 16 MiB.
#[test]
fn a_sweep_whose_tables_cannot_be_written_keeps_its_measurements() {
    let dir = common::scratch("writes-kept");
    let toml = dir.join("sm90-nvlink.toml");
    let before = synthetic_file("16MiB");
    common::write(&toml, &before);

    let out = tuner(&quick_sweep(dir.to_str().unwrap()));
    exits(&out, 1);
    let message = stderr(&out);
    assert!(
        message.contains("tuner: measuring"),
        "it measured: {message}"
    );
    assert!(message.contains("was not written"), "{message}");
    let kept = dir.join("sm90-nvlink.unwritten.evidence.json");
    assert!(kept.exists(), "{message}");
    assert!(
        message.contains(&format!(
            "`tuner fit {} -o {}`",
            kept.display(),
            toml.display()
        )),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&toml).unwrap(), before, "untouched");

    // The printed command finishes the job once the file is fixed.
    common::write(&toml, &synthetic_file("8MiB"));
    let out = tuner(&["fit", kept.to_str().unwrap(), "-o", toml.to_str().unwrap()]);
    exits(&out, 0);
    let written = std::fs::read_to_string(&toml).unwrap();
    assert!(
        written.contains("evidence = \"sm90-nvlink.unwritten.evidence.json\""),
        "{written}"
    );
}

#[test]
fn fit_names_the_evidence_relative_to_the_toml_from_any_working_directory() {
    let dir = common::scratch("writes-relative");
    let tuned = dir.join("tuned");
    std::fs::create_dir_all(&tuned).unwrap();
    common::write(
        &tuned.join("sm90-nvlink.evidence.json"),
        &common::synthetic_evidence(0.02, 3).to_json(),
    );
    let reference = |toml: &str| {
        toml.lines()
            .find(|l| l.starts_with("evidence = "))
            .unwrap_or_else(|| panic!("no evidence line: {toml}"))
            .to_string()
    };

    // From inside tuned/, with a bare file name.
    let out = tuner_in(&tuned, &["fit", "sm90-nvlink.evidence.json"]);
    exits(&out, 0);
    let toml = std::fs::read_to_string(tuned.join("sm90-nvlink.toml")).unwrap();
    assert_eq!(reference(&toml), "evidence = \"sm90-nvlink.evidence.json\"");

    // `-o -` prints the same document.
    let out = tuner_in(&tuned, &["fit", "sm90-nvlink.evidence.json", "-o", "-"]);
    exits(&out, 0);
    assert_eq!(stdout(&out), toml);

    // From the folder above, spelled with `./` and `..`, into another folder.
    let out = tuner_in(
        &dir,
        &[
            "fit",
            "./tuned/../tuned/sm90-nvlink.evidence.json",
            "-o",
            "out/",
        ],
    );
    exits(&out, 0);
    let elsewhere = std::fs::read_to_string(dir.join("out/sm90-nvlink.toml")).unwrap();
    assert_eq!(
        reference(&elsewhere),
        "evidence = \"../tuned/sm90-nvlink.evidence.json\""
    );
}

/// The README's claim: re-fitting the committed evidence reproduces
/// `tuned/sm90-nvlink.toml` byte for byte.
#[test]
fn the_committed_evidence_reproduces_the_committed_table() {
    let tuned = common::repository_tuned();
    let copy = common::scratch("writes-committed");
    for entry in std::fs::read_dir(&tuned).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
        }
    }
    let committed = std::fs::read(tuned.join("sm90-nvlink.toml")).unwrap();
    for evidence in [
        "sm90-nvlink.evidence.json",
        "sm90-nvlink.2026-11-30.evidence.json",
    ] {
        if !copy.join(evidence).exists() {
            continue;
        }
        let out = tuner_in(&copy, &["fit", evidence]);
        exits(&out, 0);
        assert_eq!(
            std::fs::read(copy.join("sm90-nvlink.toml")).unwrap(),
            committed,
            "fit {evidence} changed the table"
        );
    }
}

#[test]
fn fit_warns_about_every_key_it_drops_and_fails_alike_everywhere() {
    let dir = common::scratch("writes-dropped");
    let mut evidence = common::synthetic_evidence(0.02, 4);
    let dropped = evidence.keys[0].key();
    for point in &mut evidence.keys[0].points {
        point.samples_us.clear();
        point.error = Some("verification failed".to_string());
        point.verified = false;
    }
    let path = dir.join("sm90-nvlink.evidence.json");
    common::write(&path, &evidence.to_json());
    let warning = format!("tuner: warning: {dropped}: no table");
    for out_arg in ["-", dir.join("x.toml").to_str().unwrap()] {
        let out = tuner(&["fit", path.to_str().unwrap(), "-o", out_arg]);
        exits(&out, 0);
        assert!(
            stderr(&out).contains(&warning),
            "-o {out_arg}: {}",
            stderr(&out)
        );
    }

    // Nothing usable: the same error whether the TOML is printed or written.
    for out_arg in ["-", dir.join("y.toml").to_str().unwrap()] {
        let out = tuner(&[
            "fit",
            path.to_str().unwrap(),
            "--min-samples",
            "1000",
            "-o",
            out_arg,
        ]);
        exits(&out, 1);
        assert!(stdout(&out).is_empty(), "-o {out_arg}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("no key has a usable point"),
            "-o {out_arg}: {}",
            stderr(&out)
        );
    }
    assert!(!dir.join("y.toml").exists());
}

#[test]
fn fit_out_paths_say_what_is_wrong() {
    let dir = common::scratch("writes-fit-paths");
    let evidence = dir.join("sm90-nvlink.evidence.json");
    common::write(&evidence, &common::synthetic_evidence(0.02, 5).to_json());
    let afile = dir.join("afile");
    common::write(&afile, "x");
    let slash = format!("{}/", afile.display());
    let out = tuner(&["fit", evidence.to_str().unwrap(), "-o", &slash]);
    exits(&out, 2);
    assert!(
        stderr(&out).contains(&format!(
            "-o {slash} names a folder, but {} is a file",
            afile.display()
        )),
        "{}",
        stderr(&out)
    );
    // A folder that does not exist yet, named with a slash, is created.
    let fresh = format!("{}/new/", dir.display());
    exits(
        &tuner(&["fit", evidence.to_str().unwrap(), "-o", &fresh]),
        0,
    );
    assert!(dir.join("new/sm90-nvlink.toml").exists());
    // --json goes to standard output, where -o - puts the TOML.
    let out = tuner(&["fit", evidence.to_str().unwrap(), "-o", "-", "--json"]);
    exits(&out, 2);
}
