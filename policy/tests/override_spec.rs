//! The override syntax, through `Policy::from_spec`.

use policy::{Algo, Arch, Collective, DType, Link, Mode, Policy, Query, select};

fn q(collective: Collective, bytes: u64) -> Query {
    Query::new(
        collective,
        Arch::SM90,
        Link::NvLink,
        8,
        DType::Bf16,
        Mode::Graph,
        bytes,
    )
}

const AR: Collective = Collective::AllReduce;
const AG: Collective = Collective::AllGather;

#[test]
fn no_override_selects_from_the_tables() {
    let policy = Policy::none();
    assert!(policy.is_none());
    for bytes in [16, 128 * 1024, 1 << 20, 1 << 30] {
        assert_eq!(policy.select(q(AR, bytes)), select(q(AR, bytes)));
    }
    assert_eq!(policy.to_string(), "none");
}

#[test]
fn a_bare_algorithm_forces_every_collective_it_implements() {
    let pull = Policy::from_spec("one_shot_pull").unwrap();
    assert_eq!(pull.select(q(AR, 1 << 30)), Algo::OneShotPull);
    assert_eq!(pull.select(q(AG, 16)), Algo::OneShotPull);

    // two_shot_pull has no all-gather: all-gather keeps its table.
    let two_shot = Policy::from_spec(" two_shot_pull ").unwrap();
    assert_eq!(two_shot.forced(AR), Some(Algo::TwoShotPull));
    assert_eq!(two_shot.forced(AG), None);
    assert_eq!(two_shot.select(q(AG, 16)), select(q(AG, 16)));
    assert_eq!(two_shot.to_string(), "all_reduce=two_shot_pull");

    // one_shot_push has a fused all-reduce + add + RMSNorm too; nccl has not.
    let fused = Collective::AllReduceAddRmsNorm;
    let push = Policy::from_spec("one_shot_push").unwrap();
    assert_eq!(push.forced(fused), Some(Algo::OneShotPush));
    assert_eq!(
        push.to_string(),
        "all_reduce=one_shot_push,all_gather=one_shot_push,all_reduce_add_rmsnorm=one_shot_push"
    );
    let nccl = Policy::from_spec("nccl").unwrap();
    assert_eq!(nccl.forced(fused), None);
    let unfused = Policy::from_spec("all_reduce_add_rmsnorm=unfused").unwrap();
    assert_eq!(unfused.forced(fused), Some(Algo::Unfused));
    assert_eq!(unfused.forced(AR), None);
    assert_eq!(Policy::from_spec(&unfused.to_string()), Ok(unfused));
}

#[test]
fn per_collective_entries_win_over_a_bare_algorithm() {
    let policy = Policy::from_spec("all_reduce=two_shot_pull, all_gather=nccl").unwrap();
    assert_eq!(policy.forced(AR), Some(Algo::TwoShotPull));
    assert_eq!(policy.forced(AG), Some(Algo::Nccl));
    assert_eq!(
        policy.to_string(),
        "all_reduce=two_shot_pull,all_gather=nccl"
    );
    assert_eq!(Policy::from_spec(&policy.to_string()), Ok(policy));

    let mixed = Policy::from_spec("nccl,all_gather=one_shot_push").unwrap();
    assert_eq!(mixed.forced(AR), Some(Algo::Nccl));
    assert_eq!(mixed.forced(AG), Some(Algo::OneShotPush));
}

fn problem(spec: &str) -> String {
    Policy::from_spec(spec).unwrap_err().problem().to_string()
}

#[test]
fn malformed_overrides_are_errors_that_list_valid_names() {
    assert_eq!(problem("ring"), "unknown algorithm `ring`");
    assert_eq!(
        problem("all_scatter=nccl"),
        "unknown collective `all_scatter`"
    );
    assert_eq!(
        problem("all_gather=two_shot_pull"),
        "two_shot_pull does not implement all_gather (its algorithms: nccl, one_shot_push, one_shot_pull, nccl_symmetric)"
    );
    assert_eq!(
        problem("all_reduce=nccl,all_reduce=one_shot_push"),
        "all_reduce is named twice"
    );
    assert!(problem("nccl,one_shot_push").starts_with("two algorithms for every collective"));
    assert!(problem("nccl,").starts_with("an entry is empty"));

    let message = Policy::from_spec("ring").unwrap_err().to_string();
    for name in [
        "nccl",
        "one_shot_push",
        "one_shot_pull",
        "two_shot_pull",
        "all_reduce",
        "all_gather",
    ] {
        assert!(message.contains(name), "{message}");
    }
}
