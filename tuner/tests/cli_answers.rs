//! `show` and `explain` give one answer: the file that answers an arch, the
//! band that holds a size, what runs the call; for the compiled tables and for
//! files on disk alike, as text and as JSON. And the messages and help texts
//! a user meets on the way.

mod common;

use common::{exits, quick_sweep, stderr, stdout, tuner};
use serde_json::Value;

fn explain_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "explain",
        "--link",
        "nvlink",
        "--collective",
        "all_reduce",
        "--dtype",
        "bf16",
        "--mode",
        "graph",
    ];
    args.extend_from_slice(extra);
    args
}

/// `explain` of an all-reduce of bf16 in graph mode over NVLink, which must succeed.
fn explained(arch: &str, world_size: &str, bytes: &str, extra: &[&str]) -> String {
    let mut args = vec!["--arch", arch, "--world-size", world_size, "--bytes", bytes];
    args.extend_from_slice(extra);
    let out = tuner(&explain_args(&args));
    exits(&out, 0);
    stdout(&out)
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(out)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

#[test]
fn show_and_explain_answer_a_later_minor_from_the_same_file() {
    for (arch, answering) in [("sm103", "sm100"), ("sm95", "sm90")] {
        let out = tuner(&["show", "--arch", arch, "--link", "nvlink"]);
        exits(&out, 0);
        let text = stdout(&out);
        assert!(
            text.contains(&format!(
                "{arch} nvlink: no file of its own; {answering} nvlink answers it"
            )),
            "{text}"
        );
        assert!(!text.contains("every query selects nccl"), "{text}");
        let out = tuner(&explain_args(&[
            "--arch",
            arch,
            "--world-size",
            "8",
            "--bytes",
            "4KiB",
        ]));
        exits(&out, 0);
        let text = stdout(&out);
        assert!(
            text.contains(&format!("tuned/{answering}-nvlink.toml")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{arch} has no file of its own; {answering} answers"
            )),
            "{text}"
        );
    }
    // Another major is never borrowed, and both commands say so.
    let out = tuner(&["show", "--arch", "sm120"]);
    exits(&out, 0);
    assert!(
        stdout(&out).contains("no file answers sm120 on any link (nor an earlier sm12x minor)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn explain_ends_with_what_runs() {
    // 0 bytes: the band line claims no lower bound, and nothing runs.
    let text = explained("sm103", "8", "0", &[]);
    assert!(!text.contains("0 < bytes"), "{text}");
    assert!(text.contains("band 1 of 3: bytes ≤ "), "{text}");
    assert!(text.ends_with("runs: nccl\n"), "{text}");

    // 17 bytes: the band's kernel declines it, and the last line says nccl.
    let text = explained("sm90", "8", "17", &[]);
    assert!(
        text.contains(
            "declines it at run time (the message is not a multiple of 16 bytes (per rank))"
        ),
        "{text}"
    );
    assert!(text.ends_with("runs: nccl\n"), "{text}");

    // A size that fits: the custom kernel runs, as policy selects.
    let text = explained("sm90", "8", "4KiB", &[]);
    let selected = policy::select(policy::Query::new(
        policy::Collective::AllReduce,
        policy::Arch::SM90,
        policy::Link::NvLink,
        8,
        policy::DType::Bf16,
        policy::Mode::Graph,
        4096,
    ));
    assert!(selected.is_custom());
    assert!(
        text.ends_with(&format!("runs: {}\n", selected.name())),
        "{text}"
    );
    // The file line does not claim a source; the table's source line does.
    let file_line = text.lines().find(|l| l.starts_with("file: ")).unwrap();
    assert!(!file_line.contains("published"), "{file_line}");
}

#[test]
fn explain_validates_world_sizes() {
    let out = tuner(&explain_args(&[
        "--arch",
        "sm90",
        "--world-size",
        "0",
        "--bytes",
        "4KiB",
    ]));
    exits(&out, 2);
    assert!(stderr(&out).contains("--world-size"), "{}", stderr(&out));
    for (ws, why) in [
        ("1", "no peer to exchange with"),
        ("1000", "at most 8 ranks"),
    ] {
        let out = tuner(&explain_args(&[
            "--arch",
            "sm90",
            "--world-size",
            ws,
            "--bytes",
            "4KiB",
        ]));
        exits(&out, 0);
        let text = stdout(&out);
        assert!(text.contains(why), "{text}");
        assert!(text.ends_with("runs: nccl\n"), "{text}");
    }
}

/// `explain` of sm90 ws8 bf16 graph 4 KiB with `COLLTUNE_ALGO` set to `value`.
fn explain_overridden(value: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tuner"))
        .args(explain_args(&[
            "--arch",
            "sm90",
            "--world-size",
            "8",
            "--bytes",
            "4KiB",
        ]))
        .env(policy::OVERRIDE_ENV, value)
        .output()
        .expect("the tuner binary runs")
}

#[test]
fn an_override_is_part_of_the_answer() {
    let out = explain_overridden("all_reduce=nccl");
    exits(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains("override: COLLTUNE_ALGO=all_reduce=nccl is set"),
        "{text}"
    );
    assert!(text.ends_with("runs: nccl\n"), "{text}");
    let out = explain_overridden("ring");
    exits(&out, 1);
    assert!(
        stderr(&out).contains("is set but invalid"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn show_and_explain_read_a_sweeps_output() {
    let dir = common::scratch("answers-files");
    exits(&tuner(&quick_sweep(dir.to_str().unwrap())), 0);
    let file = dir.join("sm90-nvlink.toml");
    for tables in [dir.to_str().unwrap(), file.to_str().unwrap()] {
        let out = tuner(&["show", tables]);
        exits(&out, 0);
        let text = stdout(&out);
        assert!(
            text.starts_with(&format!("tables: read from {tables}\n")),
            "{text}"
        );
        assert!(text.contains("all_reduce ws2 bf16 graph"), "{text}");
        assert!(text.contains("source: synthetic on "), "{text}");
        let out = tuner(&[
            "explain",
            tables,
            "--arch",
            "sm90",
            "--link",
            "nvlink",
            "--collective",
            "all_reduce",
            "--world-size",
            "2",
            "--dtype",
            "bf16",
            "--mode",
            "graph",
            "--bytes",
            "4KiB",
        ]);
        exits(&out, 0);
        let text = stdout(&out);
        assert!(text.contains("table: all_reduce ws2 bf16 graph"), "{text}");
        assert!(text.contains("source: synthetic"), "{text}");
        // The planted model's push band holds 4 KiB.
        assert!(text.ends_with("runs: one_shot_push\n"), "{text}");
    }
    // A file that would not compile is refused with its problems.
    let broken = dir.join("broken.toml");
    common::write(&broken, "schema = 1\n");
    let out = tuner(&["show", broken.to_str().unwrap()]);
    exits(&out, 1);
    assert!(
        stderr(&out).contains("would not compile into policy"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn show_explain_and_fit_speak_json() {
    let out = tuner(&["show", "--arch", "sm103", "--json"]);
    exits(&out, 0);
    let v = json(&out);
    assert_eq!(v["tables"], "compiled into policy");
    assert_eq!(v["platforms"][0]["arch"], "sm100");
    assert_eq!(v["platforms"][0]["answers_for"], "sm103");
    assert!(v["platforms"][0]["tables"][0]["bands"].is_array());

    let out = tuner(&explain_args(&[
        "--arch",
        "sm90",
        "--world-size",
        "8",
        "--bytes",
        "17",
        "--json",
    ]));
    exits(&out, 0);
    let v = json(&out);
    assert_eq!(v["query"]["bytes"], 17);
    assert_eq!(v["query"]["key"]["name"], "all_reduce ws8 bf16 graph");
    assert_eq!(v["runs"], "nccl");
    assert!(
        v["selected"].as_str().unwrap().starts_with("one_shot"),
        "{v}"
    );
    assert_eq!(v["band"]["index"], 0);
    assert_eq!(v["file"]["path"], "tuned/sm90-nvlink.toml");

    let dir = common::scratch("answers-fit-json");
    let evidence = dir.join("sm90-nvlink.evidence.json");
    common::write(&evidence, &common::synthetic_evidence(0.02, 7).to_json());
    let out = tuner(&["fit", evidence.to_str().unwrap(), "--json"]);
    exits(&out, 0);
    let v = json(&out);
    assert_eq!(
        v["toml"],
        dir.join("sm90-nvlink.toml").display().to_string()
    );
    let keys = v["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 6, "{v}");
    // Each collective's open band is its fallback: NCCL, or the fused
    // collective's unfused path.
    for key in keys {
        let fallback = match key["key"]["collective"].as_str().unwrap() {
            "all_reduce_add_rmsnorm" => "unfused",
            _ => "nccl",
        };
        assert_eq!(
            key["bands"].as_array().unwrap().last().unwrap()["algo"],
            fallback,
            "{key}"
        );
    }
    assert!(keys[0]["edges"][0]["first_above"].is_u64(), "{v}");
    assert!(v["dropped"].as_array().unwrap().is_empty());
    assert!(v["merge"].is_null(), "a new file: {v}");
    // Fitted again into the file it wrote: the merge is reported.
    let v = json(&tuner(&["fit", evidence.to_str().unwrap(), "--json"]));
    assert_eq!(v["merge"]["replaced"].as_array().unwrap().len(), 6, "{v}");
}

#[test]
fn sizes_say_what_is_wrong_with_them() {
    for (bytes, says) in [
        ("-5", "cannot be negative"),
        ("99999999999GiB", "is too large"),
        ("4KB", "write KiB"),
    ] {
        let flag = format!("--bytes={bytes}");
        let out = tuner(&explain_args(&[
            "--arch",
            "sm90",
            "--world-size",
            "8",
            &flag,
        ]));
        exits(&out, 2);
        assert!(stderr(&out).contains(says), "{bytes}: {}", stderr(&out));
    }
}

#[test]
fn evidence_errors_name_no_internal_type() {
    let dir = common::scratch("answers-evidence");
    let path = dir.join("e.json");
    common::write(&path, "[]");
    let out = tuner(&["fit", path.to_str().unwrap()]);
    exits(&out, 1);
    let message = stderr(&out);
    assert!(
        message.contains("expected a JSON object with `evidence_version`, found an array"),
        "{message}"
    );
    assert!(
        !message.contains("VersionOnly") && !message.contains("struct"),
        "{message}"
    );
}

/// Every option of show and explain says what it takes: its help line has
/// text, and where the values are a fixed set, the set.
#[test]
fn every_flag_has_help_that_lists_its_values() {
    for command in ["show", "explain", "sweep", "fit", "plot", "bench"] {
        let out = tuner(&[command, "--help"]);
        exits(&out, 0);
        let help = stdout(&out);
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if !(trimmed.starts_with("--")
                || trimmed.starts_with("-o")
                || trimmed.starts_with("-h"))
            {
                continue;
            }
            // clap puts the help after the flag, or on the next line when long.
            let same_line = trimmed.split("  ").filter(|s| !s.trim().is_empty()).count() > 1;
            let next_line = lines
                .get(i + 1)
                .is_some_and(|next| next.starts_with("          ") && !next.trim().is_empty());
            assert!(
                same_line || next_line,
                "{command}: `{trimmed}` has no help:\n{help}"
            );
        }
    }
    let explain = stdout(&tuner(&["explain", "--help"]));
    for values in [
        "nvlink, pcie or loopback",
        "all_reduce or all_gather",
        "bf16, f16 or f32",
        "graph",
        "sm90",
    ] {
        assert!(
            explain.contains(values),
            "explain --help lacks {values}:\n{explain}"
        );
    }
    let show = stdout(&tuner(&["show", "--help"]));
    for values in ["nvlink, pcie or loopback", "2 to 1024", "bf16, f16 or f32"] {
        assert!(show.contains(values), "show --help lacks {values}:\n{show}");
    }
}
