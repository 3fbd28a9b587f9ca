//! `Policy::from_env` reads COLLTUNE_ALGO. This binary holds the only test that
//! sets the variable, so no other test can observe it.

use policy::{Algo, Arch, Collective, DType, Link, Mode, OVERRIDE_ENV, Policy, Query};

fn query(collective: Collective, bytes: u64) -> Query {
    Query::new(
        collective,
        Arch::SM80,
        Link::NvLink,
        8,
        DType::Bf16,
        Mode::Graph,
        bytes,
    )
}

fn all_gather(bytes: u64) -> Query {
    query(Collective::AllGather, bytes)
}

#[test]
fn environment_variable_forces_and_refuses() {
    // SAFETY: this is the only test in this binary, so no other thread reads the
    // environment while it is changed.
    unsafe { std::env::remove_var(OVERRIDE_ENV) };
    assert_eq!(Policy::from_env(), Ok(Policy::none()));

    unsafe { std::env::set_var(OVERRIDE_ENV, "all_gather=one_shot_pull") };
    let policy = Policy::from_env().unwrap();
    assert_eq!(policy.select(all_gather(4096)), Algo::OneShotPull);
    assert_eq!(
        policy.select(query(Collective::AllReduce, 448 * 1024)),
        Algo::TwoShotPull
    );

    unsafe { std::env::set_var(OVERRIDE_ENV, "one_shot_pul") };
    let error = Policy::from_env().unwrap_err().to_string();
    assert!(
        error.starts_with(
            "invalid COLLTUNE_ALGO value \"one_shot_pul\": unknown algorithm `one_shot_pul`."
        ),
        "{error}"
    );
    unsafe { std::env::remove_var(OVERRIDE_ENV) };
}
