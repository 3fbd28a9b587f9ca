//! The binary end to end, on this machine (no GPU needed): the commands that
//! work without one, the synthetic backend through sweep → verify → plot, and
//! the one-line refusal of GPU commands where no GPU can be used.

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

/// Without a usable GPU, `sweep`, `verify` and `bench` say so in one line and
/// fail. On a machine with GPUs the child is shown none (`CUDA_VISIBLE_DEVICES=-1`
/// hides every device from the driver), so this runs everywhere.
#[test]
fn gpu_commands_refuse_in_one_line_without_a_gpu() {
    let dir = common::scratch("no-gpu");
    // Why the tuner finds no GPU here: it has no GPU code, or no driver, or a
    // driver that shows it no device.
    let reasons: &[&str] = if cfg!(not(feature = "gpu")) {
        &["this tuner was built without the `gpu` feature"]
    } else if !driver_present() {
        &["libcuda.so (the NVIDIA driver) could not be loaded"]
    } else {
        &["no GPU: the driver loads but shows this process no GPU (CUDA_VISIBLE_DEVICES=-1)"]
    };
    for args in [
        vec!["sweep", "--out", dir.to_str().unwrap()],
        vec!["verify", "../tuned/sm90-nvlink.toml"],
        vec!["bench", "--sizes", "4KiB"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tuner"))
            .args(&args)
            .env("CUDA_VISIBLE_DEVICES", "-1")
            .output()
            .expect("the tuner binary runs");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        let reason_given = reasons
            .iter()
            .any(|r| stderr.starts_with(&format!("tuner: no CUDA GPU found ({r}")));
        assert!(
            reason_given,
            "{args:?}: expected one of {reasons:?}: {stderr}"
        );
        assert!(
            stderr.contains("`tuner show`, `tuner explain`, `tuner fit`, `tuner plot`"),
            "{stderr}"
        );
    }
    assert!(
        std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_none()),
        "a refused sweep wrote into {}",
        dir.display()
    );
}

#[cfg(feature = "gpu")]
fn driver_present() -> bool {
    kernels::raw::require_driver().is_ok()
}

#[cfg(not(feature = "gpu"))]
fn driver_present() -> bool {
    false
}

/// `verify` reads its file before it looks for a GPU: a wrong path is
/// reported as such on any machine.
#[test]
fn verify_checks_its_file_first() {
    let out = tuner(&["verify", "/nonexistent/sm90-nvlink.toml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("tuner: cannot read /nonexistent/sm90-nvlink.toml"),
        "{stderr}"
    );
}

/// A bad argument to `verify` is an error with one reason, never a FAIL
/// verdict (exit 3) that would blame the table.
#[test]
fn verify_rejects_bad_arguments_before_measuring() {
    for (extra, reason) in [
        (vec!["--samples", "0"], "--samples must be at least 5"),
        (vec!["--alpha", "2"], "--alpha 2 must be in (0, 1)"),
        (
            vec!["--min-bytes", "1MiB", "--max-bytes", "16"],
            "invalid size range",
        ),
        (vec!["--max-worst-regret-pct=-1"], "must be a percentage"),
    ] {
        let mut args = vec!["verify", "tuned/sm90-nvlink.toml", "--synthetic"];
        args.extend(extra.iter().copied());
        let out = tuner(&args);
        let stderr = text(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
}

#[test]
fn synthetic_sweeps_never_default_to_tuned() {
    let out = tuner(&["sweep", "--synthetic", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(text(&out.stderr).contains("--synthetic needs --out"));
    // Checked before any GPU is looked for, so this holds on every machine.
    let out = tuner(&["sweep", "--loopback", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--loopback needs --out"));
    let help = text(&tuner(&["sweep", "--help"]).stdout);
    assert!(
        help.contains("required with --synthetic and --loopback"),
        "{help}"
    );
}

/// Usage errors exit with 2 in every subcommand, whether clap or the tuner
/// finds them; the message is one line naming the flag.
#[test]
fn usage_errors_exit_2_everywhere() {
    for (args, says) in [
        (
            vec!["bench", "--collective", "ring"],
            "expected one of all_reduce, all_gather, all_reduce_add_rmsnorm, or both",
        ),
        (
            vec!["bench", "--dtype", "f64"],
            "expected one of bf16, f16, f32",
        ),
        (vec!["bench", "--sizes", "4KB"], "write KiB"),
        (
            vec!["bench", "--sizes", "16..1MiB", "--step", "1"],
            "--step >= 2",
        ),
        (
            vec!["bench", "--algos", "ring"],
            "expected one of nccl, one_shot_push",
        ),
        (
            vec!["sweep", "--synthetic", "--out", "/tmp/x", "--samples", "2"],
            "--samples must be at least 5",
        ),
        (
            vec!["sweep", "--synthetic", "--out", "/tmp/x", "--hidden", "100"],
            "--hidden 100: a row is a multiple of 8 elements in 64..=16384",
        ),
        (
            vec![
                "sweep",
                "--synthetic",
                "--out",
                "/tmp/x",
                "--hidden",
                "64,64",
            ],
            "--hidden names 64 twice",
        ),
        (
            vec!["bench", "--hidden", "20000"],
            "--hidden 20000: a row is a multiple of 8 elements in 64..=16384",
        ),
        (
            vec![
                "sweep",
                "--synthetic",
                "--out",
                "/tmp/x",
                "--world-sizes",
                "16",
            ],
            "serve 2 to 8",
        ),
        (
            vec![
                "sweep",
                "--synthetic",
                "--out",
                "/tmp/x",
                "--margin-pct",
                "100",
            ],
            "--margin-pct 100 must be in [0, 100)",
        ),
        (
            vec![
                "sweep",
                "--synthetic",
                "--out",
                "/tmp/x",
                "--noise-pct",
                "300",
            ],
            "is not a percentage",
        ),
        (
            vec!["fit", "tuned/x.json", "--min-samples", "0"],
            "--min-samples must be at least 1",
        ),
        (vec!["explain", "--arch", "sm90"], "required"),
        (vec!["show", "--world-size", "0"], "0 is not in 2..=1024"),
        (vec!["plot", "e.json", "-o", "-"], "-o - is not possible"),
    ] {
        let out = tuner(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn show_prints_every_compiled_platform() {
    let out = tuner(&["show"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    for p in policy::PLATFORMS {
        assert!(stdout.contains(p.file), "{stdout}");
    }
    // Filtered: every table of the key, in every file, with its bands in
    // order, and no other table.
    let out = tuner(&["show", "--collective", "all_gather", "--world-size", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let filtered = text(&out.stdout);
    let rows: Vec<&str> = filtered
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("all_reduce ws") || l.starts_with("all_gather ws"))
        .collect();
    let mut expected = Vec::new();
    for p in policy::PLATFORMS {
        for t in p
            .tables
            .iter()
            .filter(|t| t.key.collective == policy::Collective::AllGather && t.key.world_size == 4)
        {
            expected.push((format!("{}", t.key), t.bands));
        }
    }
    assert_eq!(rows.len(), expected.len(), "{filtered}");
    assert!(!expected.is_empty());
    for (row, (key, bands)) in rows.iter().zip(&expected) {
        assert!(row.starts_with(key.as_str()), "{row} is not {key}");
        let algos: Vec<&str> = row[key.len()..]
            .split('|')
            .map(|band| band.split_whitespace().next().unwrap_or(""))
            .collect();
        let want: Vec<&str> = bands.iter().map(|b| b.algo.name()).collect();
        assert_eq!(algos, want, "{row}");
    }
}

#[test]
fn explain_agrees_with_policy() {
    let out = tuner(&[
        "explain",
        "--arch",
        "sm90",
        "--link",
        "nvlink",
        "--collective",
        "all_reduce",
        "--world-size",
        "8",
        "--dtype",
        "bf16",
        "--mode",
        "graph",
        "--bytes",
        "448KiB",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let expected = policy::select(policy::Query::new(
        policy::Collective::AllReduce,
        policy::Arch::SM90,
        policy::Link::NvLink,
        8,
        policy::DType::Bf16,
        policy::Mode::Graph,
        448 * 1024,
    ));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("458752 bytes (448KiB)"), "{stdout}");
    assert!(
        stdout.contains(&format!("selected: {}", expected.name())),
        "{stdout}"
    );
}

#[test]
fn bad_arguments_are_named() {
    let out = tuner(&["explain", "--arch", "sm90", "--link", "infiniband"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    assert!(text(&out.stderr).contains("expected one of nvlink, pcie, loopback"));
    let out = tuner(&["fit", "/nonexistent/e.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("tuner: /nonexistent/e.json: cannot read"));
}

/// The fused collective is swept when named; at a second hidden size its
/// keys are swept again and the first's bands judged on them (the synthetic
/// model is by bytes, so they cost no more than the margin there).
#[test]
fn a_fused_sweep_compares_its_crossovers_across_hidden_sizes() {
    let dir = common::scratch("synthetic-fused");
    let out = tuner(&[
        "sweep",
        "--synthetic",
        "--collectives",
        "all_reduce_add_rmsnorm",
        "--hidden",
        "4096,8192",
        "--world-sizes",
        "2",
        "--dtypes",
        "bf16",
        "--modes",
        "graph",
        "--max-bytes",
        "8MiB",
        "--no-progress",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "all_reduce_add_rmsnorm at other hidden sizes (the tables above: hidden 4096)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("all_reduce_add_rmsnorm ws2 bf16 graph hidden 8192: crossovers do not move beyond the margin (the first hidden size's bands cost at most"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the other hidden sizes measured in "),
        "{stdout}"
    );
    let toml = std::fs::read_to_string(dir.join("sm90-nvlink.toml")).unwrap();
    assert!(toml.contains("algo = \"unfused\""), "{toml}");
    assert!(
        !toml.contains("collective = \"all_reduce\"\n"),
        "only the fused collective: {toml}"
    );
}

/// A synthetic sweep of `collectives` at world size 2 in bf16 (`--hidden
/// 4096,2048`) into `dir`; its standard output.
fn small_sweep(dir: &std::path::Path, collectives: &str, modes: &str) -> String {
    let out = tuner(&[
        "sweep",
        "--synthetic",
        "--collectives",
        collectives,
        "--hidden",
        "4096,2048",
        "--world-sizes",
        "2",
        "--dtypes",
        "bf16",
        "--modes",
        modes,
        "--max-bytes",
        "8MiB",
        "--no-progress",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The files in `dir` whose names end in `suffix`, sorted.
fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    names.sort();
    names
}

/// The fused keys of the evidence at `path` hold what was found at hidden
/// 2048 for bands fitted at 4096: that they hold (the synthetic model is by
/// bytes); no other key has hidden sizes.
fn assert_fused_keys_hold_at_2048(path: &std::path::Path) {
    use tuner::evidence::{Evidence, HiddenFinding};
    let evidence = Evidence::load(path).unwrap();
    for key in &evidence.keys {
        let Some(hidden) = &key.hidden else {
            assert_ne!(key.collective, policy::Collective::AllReduceAddRmsNorm);
            continue;
        };
        assert_eq!(key.collective, policy::Collective::AllReduceAddRmsNorm);
        assert_eq!(hidden.fitted_at, 4096, "{hidden:?}");
        assert!(
            matches!(
                hidden.others[..],
                [HiddenFinding::Holds { hidden: 2048, worst_cost, .. }] if worst_cost <= 0.025
            ),
            "{hidden:?}"
        );
    }
    let noted = evidence.keys.iter().filter(|k| k.hidden.is_some()).count();
    assert!(noted > 0, "no fused key has hidden sizes");
}

/// What the comparison across hidden sizes found is in the fused keys'
/// evidence, and from it in the fused tables' notes, and only in theirs; the
/// file stays canonical and loads, and a re-fit of the evidence reproduces it
/// byte for byte (as scripts/gpu-run.sh requires).
#[test]
fn a_fused_sweep_notes_its_hidden_sizes_in_the_fused_tables() {
    let dir = common::scratch("synthetic-fused-notes");
    let stdout = small_sweep(&dir, "all_reduce,all_reduce_add_rmsnorm", "graph,eager");
    assert!(
        stdout.contains("rewrote ") && stdout.contains("with the other hidden sizes"),
        "{stdout}"
    );
    let path = dir.join("sm90-nvlink.toml");
    let toml = std::fs::read_to_string(&path).unwrap();
    let doc = tuned_schema::validate::parse_document(&path.display().to_string(), &toml)
        .unwrap_or_else(|d| panic!("{d:?}"));
    assert_eq!(
        tuned_schema::write::to_toml_string(&doc),
        toml,
        "written canonically"
    );
    tuned_schema::folder::load_folder(&dir, "tuned").unwrap_or_else(|d| panic!("{d:?}"));
    assert_eq!(doc.tables.len(), 4, "{toml}");
    for table in &doc.tables {
        let note = table.note.as_deref().expect("every table has a note");
        assert!(note.starts_with("measured by tuner v"), "{note}");
        let noted = note.contains("; fitted at hidden 4096 (bytes = tokens × hidden × element size); at hidden 2048 these bands cost at most ");
        let fused = table.key.collective == policy::Collective::AllReduceAddRmsNorm;
        assert_eq!(noted, fused, "{}: {note}", table.key);
        // The synthetic model is by bytes: the bands hold at any hidden size.
        assert_eq!(note.ends_with("(they hold)"), fused, "{note}");
    }
    let evidence = dir.join("sm90-nvlink.evidence.json");
    assert_fused_keys_hold_at_2048(&evidence);
    assert_eq!(
        files_ending(&dir, ".evidence.json"),
        ["sm90-nvlink.evidence.json"],
        "the second write overwrites the first's evidence"
    );
    let refit = tuner(&["fit", evidence.to_str().unwrap(), "-o", "-"]);
    assert!(refit.status.success(), "{}", text(&refit.stderr));
    assert!(
        text(&refit.stdout) == toml,
        "re-fit of the evidence differs from the sweep's TOML:\n{}\nvs\n{toml}",
        text(&refit.stdout)
    );
}

/// Where the file's other tables cite `<stem>.evidence.json`, the sweep's
/// evidence takes a dated name; the second write (with the other hidden
/// sizes) goes into that same file, which its tables cite, and a re-fit of
/// it into the file changes no byte.
#[test]
fn a_fused_sweep_beside_kept_tables_rewrites_the_evidence_it_named() {
    let dir = common::scratch("synthetic-fused-kept");
    small_sweep(&dir, "all_reduce", "graph");
    small_sweep(&dir, "all_reduce_add_rmsnorm", "graph");
    let evidence = files_ending(&dir, ".evidence.json");
    let [dated, undated] = &evidence[..] else {
        panic!("two evidence files: {evidence:?}");
    };
    assert_eq!(undated, "sm90-nvlink.evidence.json");
    assert!(!dated.contains("-2."), "{evidence:?}");
    assert_fused_keys_hold_at_2048(&dir.join(dated));
    let path = dir.join("sm90-nvlink.toml");
    let toml = std::fs::read_to_string(&path).unwrap();
    assert!(
        toml.contains(&format!("evidence = \"{dated}\"")),
        "the fused tables cite {dated}: {toml}"
    );
    assert!(
        toml.contains("at hidden 2048 these bands cost at most "),
        "{toml}"
    );
    let refit = tuner(&[
        "fit",
        dir.join(dated).to_str().unwrap(),
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(refit.status.success(), "{}", text(&refit.stderr));
    assert!(
        std::fs::read_to_string(&path).unwrap() == toml,
        "a re-fit of {dated} changed {}",
        path.display()
    );
}

#[test]
fn synthetic_sweep_verify_and_plot() {
    let dir = common::scratch("synthetic-cli");
    let out_dir = dir.to_str().unwrap();
    let common_args = [
        "--synthetic",
        "--noise-pct",
        "2",
        "--world-sizes",
        "8",
        "--dtypes",
        "bf16",
        "--modes",
        "graph",
        "--max-bytes",
        "8MiB",
        "--no-progress",
    ];
    let mut args = vec!["sweep", "--out", out_dir];
    args.extend(common_args);
    let out = tuner(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("one_shot_push ≤"), "{stdout}");
    assert!(
        stdout.contains(" points, measured in "),
        "the measuring time is recorded: {stdout}"
    );
    assert!(
        text(&out.stderr)
            .contains("of modelled GPU time, which the synthetic model does not spend"),
        "the estimate is printed before starting, as what it is: {}",
        text(&out.stderr)
    );
    let toml = dir.join("sm90-nvlink.toml");
    let evidence = dir.join("sm90-nvlink.evidence.json");
    assert!(toml.exists() && evidence.exists());

    // `fit --out` takes a folder as `sweep --out` does, and re-fitting the
    // evidence into the sweep's own folder reproduces the file.
    let swept = std::fs::read_to_string(&toml).unwrap();
    let out = tuner(&["fit", evidence.to_str().unwrap(), "--out", out_dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&toml).unwrap(), swept);

    let mut args = vec!["verify", toml.to_str().unwrap()];
    args.extend(common_args);
    let out = tuner(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("PASS"), "{stdout}");

    // A deliberately bad table (NCCL everywhere) fails verification with 3
    // (2 is a usage error).
    let bad = std::fs::read_to_string(&toml).unwrap();
    let start = bad.find("bands = [").unwrap();
    let end = start + bad[start..].find(']').unwrap() + 1;
    let nccl_only = format!(
        "{}bands = [\n  {{ algo = \"nccl\" }},\n]{}",
        &bad[..start],
        &bad[end..]
    );
    let bad_path = dir.join("bad").join("sm90-nvlink.toml");
    std::fs::create_dir_all(bad_path.parent().unwrap()).unwrap();
    common::write(&bad_path, &nccl_only);
    let mut args = vec!["verify", bad_path.to_str().unwrap()];
    args.extend(common_args);
    let out = tuner(&args);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("FAIL"));

    let plots = dir.join("plots");
    let out = tuner(&[
        "plot",
        evidence.to_str().unwrap(),
        "--toml",
        toml.to_str().unwrap(),
        "-o",
        plots.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for collective in ["all_reduce", "all_gather"] {
        let svg = std::fs::read_to_string(plots.join(format!("{collective}-ws8-bf16-graph.svg")))
            .unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(
            svg.contains("one_shot_pull") && svg.contains("nccl"),
            "legend names the algorithms"
        );
    }
}

/// SIGTERM (what `timeout` and job schedulers send) stops a sweep like Ctrl-C:
/// after the point in flight, keeping what was measured.
#[cfg(unix)]
#[test]
fn sigterm_keeps_what_a_sweep_measured() {
    let dir = common::scratch("sigterm");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tuner"))
        .args(["sweep", "--synthetic", "--no-progress", "--samples", "2000"])
        .args(["--out", dir.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the tuner binary runs");
    // The plan line comes after the handler is installed; then let some
    // points be measured.
    let mut stderr_pipe = std::io::BufReader::new(child.stderr.take().expect("piped"));
    let mut stderr = String::new();
    while !stderr.contains("tuner: measuring") {
        let mut line = String::new();
        let read = std::io::BufRead::read_line(&mut stderr_pipe, &mut line).expect("stderr");
        assert!(read > 0, "the sweep ended before measuring: {stderr}");
        stderr.push_str(&line);
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    std::io::Read::read_to_string(&mut stderr_pipe, &mut stderr).expect("stderr");
    child.wait().expect("the sweep exits");
    assert!(
        stderr.contains("stopping after the current point"),
        "{stderr}"
    );
    let kept = dir.join("sm90-nvlink.interrupted.evidence.json");
    assert!(kept.exists(), "{stderr}");
}

/// The logger's level is checked before anything runs: a wrong
/// `COLLTUNE_LOG` is a usage error (exit 2) naming the valid levels.
#[test]
fn a_wrong_log_level_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tuner"))
        .arg("show")
        .env("COLLTUNE_LOG", "loud")
        .output()
        .expect("the tuner binary runs");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        "tuner: COLLTUNE_LOG=loud: expected off, error, warn, info or debug"
    );
    let quiet = Command::new(env!("CARGO_BIN_EXE_tuner"))
        .arg("show")
        .env("COLLTUNE_LOG", "off")
        .output()
        .expect("the tuner binary runs");
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet.stderr));
}

/// `fit --memory-budget` fits within what `kernels` registers for the
/// tables, so it needs `kernels` built in: with it, the tables say their
/// budget and the report what it cost; without, one usage error.
#[test]
fn fit_takes_a_memory_budget_where_kernels_is_built_in() {
    let dir = common::scratch("fit-budget");
    let evidence = dir.join("sm90-loopback.evidence.json");
    std::fs::copy(
        "examples/h200-loopback/sm90-loopback.evidence.json",
        &evidence,
    )
    .unwrap();
    let toml = dir.join("sm90-loopback.toml");
    let out = tuner(&[
        "fit",
        evidence.to_str().unwrap(),
        "--memory-budget",
        "8MiB",
        "-o",
        toml.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    if cfg!(feature = "gpu") {
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.contains("memory budget 8MiB per rank"), "{stdout}");
        assert!(
            stdout.contains("world size 2: the unbounded tables take"),
            "{stdout}"
        );
        assert!(stdout.contains("regret mean"), "{stdout}");
        let written = std::fs::read_to_string(&toml).unwrap();
        assert!(
            written.contains(", memory budget 8MiB per rank\""),
            "{written}"
        );
    } else {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with("tuner: --memory-budget needs a tuner built with the `gpu` feature"),
            "{stderr}"
        );
        assert!(!toml.exists());
    }
}
