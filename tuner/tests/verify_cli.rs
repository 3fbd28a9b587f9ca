//! `tuner verify` end to end on the synthetic backend: the verdict's exit
//! status (0 PASS, 3 FAIL, 4 INCONCLUSIVE), `--json`, and a run with nothing
//! to judge, which says why.

mod common;

use std::process::{Command, Output};

fn tuner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tuner"))
        .args(args)
        .output()
        .expect("the tuner binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One all-reduce key, world size 8, up to 1 MiB.
const KEY: [&str; 10] = [
    "--world-sizes",
    "8",
    "--collectives",
    "all_reduce",
    "--dtypes",
    "bf16",
    "--modes",
    "graph",
    "--max-bytes",
    "1MiB",
];

/// A table swept at 2 % noise into a fresh folder; its path.
fn swept(name: &str) -> String {
    let dir = common::scratch(name);
    let mut args = vec!["sweep", "--synthetic", "--noise-pct", "2", "--no-progress"];
    args.extend(KEY);
    args.extend(["--out", dir.to_str().unwrap()]);
    let out = tuner(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    dir.join("sm90-nvlink.toml").to_str().unwrap().to_string()
}

fn verify(toml: &str, noise: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "verify",
        toml,
        "--synthetic",
        "--noise-pct",
        noise,
        "--no-progress",
    ];
    args.extend(KEY);
    args.extend(extra);
    tuner(&args)
}

#[test]
fn the_verdict_is_the_exit_status_and_json_says_the_same() {
    let toml = swept("verify-cli-verdicts");
    let out = verify(&toml, "2", &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("measured noise: "), "{stdout}");
    assert!(
        stdout.contains("all_reduce ws8 bf16 graph: PASS"),
        "{stdout}"
    );
    assert!(stdout.contains(" edge sizes: regret worst "), "{stdout}");
    assert!(stdout.trim_end().ends_with("99% intervals)"), "{stdout}");

    let out = verify(&toml, "2", &["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(json["verdict"], "pass");
    assert_eq!(json["keys"][0]["verdict"], "pass");
    assert!(json["keys"][0]["edges"]["sizes"].as_u64().unwrap() >= 8);
    assert!(json["noise"]["median"].as_f64().unwrap() > 0.01);

    // The same table at 30 % noise with two interleaved rounds: too noisy to
    // tell, which is neither a pass nor a failure.
    let out = verify(&toml, "30", &["--rounds", "2"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{stdout}");
    assert!(stdout.contains("INCONCLUSIVE"), "{stdout}");

    // NCCL everywhere fails.
    let table = std::fs::read_to_string(&toml).unwrap();
    let start = table.find("bands = [").unwrap();
    let end = start + table[start..].find(']').unwrap() + 1;
    let nccl_only = format!(
        "{}bands = [\n  {{ algo = \"nccl\" }},\n]{}",
        &table[..start],
        &table[end..]
    );
    let dir = common::scratch("verify-cli-nccl");
    let bad = dir.join("sm90-nvlink.toml");
    common::write(&bad, &nccl_only);
    let out = verify(bad.to_str().unwrap(), "2", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(": FAIL: worst regret "));
}

#[test]
fn nothing_to_judge_says_why_and_exits_1() {
    // The shipped file has world sizes 2, 4 and 8, all formed by the
    // synthetic platform; none is 3.
    let out = tuner(&[
        "verify",
        "../tuned/sm90-nvlink.toml",
        "--synthetic",
        "--no-progress",
        "--world-sizes",
        "3",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "nothing to judge: no table of the file matches --world-sizes 3 (its tables have world sizes 2, 4, 8)"
        ),
        "{stdout}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("tuner: nothing to judge in ../tuned/sm90-nvlink.toml"));

    let dir = common::scratch("verify-cli-empty");
    let empty = dir.join("sm90-nvlink.toml");
    common::write(
        &empty,
        "schema = 1\n\n[platform]\narch = \"sm90\"\ngpu = \"NVIDIA H200\"\nlink = \"nvlink\"\nsource = \"published\"\ncitation = \"none\"\n",
    );
    let out = tuner(&[
        "verify",
        empty.to_str().unwrap(),
        "--synthetic",
        "--no-progress",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(json["verdict"], "nothing_to_judge");
    assert_eq!(json["nothing_judged"], "the file has no [[table]]");
}
