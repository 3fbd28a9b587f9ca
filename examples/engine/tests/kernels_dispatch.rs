//! After `init`, `kernels` selects and sizes buffers with the engine's tables.
//!
//! One test in its own binary: which tables a process uses is settled once per
//! process, so no other test may ask `kernels` first.

use engine_example::{PREFILL_ALL_REDUCE, init, tables};
use policy::{Algo, Collective};

#[test]
fn kernels_dispatch_with_the_engine_tables() {
    // Before the hand-over `kernels` would answer from `policy`'s own tables;
    // asking it here would settle those, so compare with `policy` directly.
    assert_eq!(policy::select(PREFILL_ALL_REDUCE), Algo::TwoShotPull);

    init().expect("first hand-over");
    init().expect("handing over the same tables again is harmless");
    assert_eq!(kernels::table_choice(PREFILL_ALL_REDUCE), Algo::Nccl);
    let in_use = policy::tables_in_use();
    assert_eq!(in_use.origin(), "engine-example: tuned");
    // The engine's buffers, which `kernels` sizes from the tables in use: 6 MiB
    // for one-shot push, a size the repository's files do not declare.
    let (arch, link) = (PREFILL_ALL_REDUCE.arch, PREFILL_ALL_REDUCE.link);
    let push = (Collective::AllReduce, Algo::OneShotPush);
    let engine_cap = tables::capacity(arch, link, push.0, push.1);
    assert_eq!(engine_cap.max_bytes, 6 * 1024 * 1024);
    assert_eq!(in_use.capacity(arch, link, push.0, push.1), engine_cap);
    assert_ne!(policy::capacity(arch, link, push.0, push.1), engine_cap);

    // Other tables cannot take over any more, and the error says whose are in use.
    let error = policy::use_tables(&policy::TABLES).unwrap_err();
    assert_eq!(error.in_use(), "engine-example: tuned");
    assert!(
        error.to_string().contains("colltune-policy: tuned"),
        "{error}"
    );
    assert_eq!(kernels::table_choice(PREFILL_ALL_REDUCE), Algo::Nccl);
}
