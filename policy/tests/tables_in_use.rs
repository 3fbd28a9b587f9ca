//! `Tables` values and the process-wide choice of tables. One test: the choice
//! is settled once per process, so the steps must run in this order.

mod common;

use common::query;
use policy::{Algo, Arch, Collective, DType, Mode, TABLES};

mod fixture {
    policy::include_tuned!("tests/fixtures/fallback");
}

#[test]
fn tables_are_handed_over_once() {
    // The values call the generated functions of their own module.
    let q = query(
        Collective::AllReduce,
        Arch::SM80,
        8,
        DType::Bf16,
        Mode::Graph,
        4096,
    );
    assert_eq!(TABLES.select(q), policy::select(q));
    assert_eq!(fixture::TABLES.select(q), fixture::select(q));
    assert_eq!(TABLES.platforms(), policy::PLATFORMS);
    assert_eq!(fixture::TABLES.platforms(), fixture::PLATFORMS);
    assert_eq!(TABLES.origin(), "colltune-policy: tuned");
    assert_eq!(
        fixture::TABLES.origin(),
        "colltune-policy: tests/fixtures/fallback"
    );
    let sm87 = Arch::from_compute_capability(8, 7);
    assert_eq!(
        fixture::TABLES.table_arch(sm87, q.link),
        fixture::table_arch(sm87, q.link)
    );
    assert_eq!(
        fixture::TABLES.capacity(sm87, q.link, q.key.collective, Algo::OneShotPush),
        fixture::capacity(sm87, q.link, q.key.collective, Algo::OneShotPush)
    );
    assert!(format!("{:?}", fixture::TABLES).contains("tests/fixtures/fallback"));

    // The first hand-over wins, a repeat is harmless, any other is refused and
    // names both table sets.
    policy::use_tables(&fixture::TABLES).unwrap();
    policy::use_tables(&fixture::TABLES).unwrap();
    assert_eq!(policy::tables_in_use().origin(), fixture::TABLES.origin());
    let error = policy::use_tables(&TABLES).unwrap_err();
    assert_eq!(error.in_use(), "colltune-policy: tests/fixtures/fallback");
    let message = error.to_string();
    assert!(message.contains("`colltune-policy: tuned`"), "{message}");
    assert!(message.contains("before any communicator"), "{message}");
    assert_eq!(policy::tables_in_use().origin(), fixture::TABLES.origin());

    // An override still wins over whichever tables are in use.
    let forced = policy::Policy::from_spec("all_reduce=two_shot_pull").unwrap();
    assert_eq!(
        forced.select_with(policy::tables_in_use(), q),
        Algo::TwoShotPull
    );
    let none = policy::Policy::none();
    assert_eq!(none.select_with(&fixture::TABLES, q), fixture::select(q));
}

/// The name the child process is asked to run: this test's own.
const CHILD_TEST: &str = "without_a_hand_over_the_built_in_tables_are_used";

#[test]
fn without_a_hand_over_the_built_in_tables_are_used() {
    // Runs in a child process so that this binary's other test cannot have
    // settled the choice first.
    if std::env::var_os("POLICY_TEST_CHILD").is_some() {
        assert_eq!(policy::tables_in_use().origin(), "colltune-policy: tuned");
        let error = policy::use_tables(&fixture::TABLES).unwrap_err();
        assert_eq!(error.in_use(), "colltune-policy: tuned");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    // Output captured, not inherited: the child's own "test result" line would
    // otherwise be counted as a second run by scripts/test.sh's total.
    let child = std::process::Command::new(exe)
        .args(["--exact", CHILD_TEST, "--test-threads=1"])
        .env("POLICY_TEST_CHILD", "1")
        .output()
        .unwrap();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(child.status.success(), "{output}");
    // A name that matches no test runs nothing and still succeeds: the child
    // must have run exactly this test.
    assert!(
        output.contains(&format!("test {CHILD_TEST} ... ok"))
            && output.contains("test result: ok. 1 passed;"),
        "the child process did not run `{CHILD_TEST}`:\n{output}"
    );
}
