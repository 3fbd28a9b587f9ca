//! The engine's tables decide at compile time, and they are not the
//! repository's: each query below is answered differently by the two.
//!
//! The queries use world size 8, whose rows in the repository's `tuned/` are
//! published figures that a 2-GPU sweep does not replace.

use engine_example::{PREFILL_ALL_REDUCE, PREFILL_ALL_REDUCE_ALGO, loopback_all_reduce, tables};
use kernels::{Algo, Collective, Link, Mode, Query, TableKey};

const fn with(collective: Collective, bytes: u64) -> Query {
    Query {
        key: TableKey {
            collective,
            ..PREFILL_ALL_REDUCE.key
        },
        bytes,
        ..PREFILL_ALL_REDUCE
    }
}

const ALL_REDUCE_96KIB: Query = with(Collective::AllReduce, 96 * 1024);
const ALL_GATHER_512KIB: Query = with(Collective::AllGather, 512 * 1024);

// Proven by the compiler: if either table changed so that the two agree, or the
// engine's stopped choosing these algorithms, this file would not build.
const _: () = {
    assert!(PREFILL_ALL_REDUCE_ALGO.same_as(Algo::Nccl));
    assert!(policy::select(PREFILL_ALL_REDUCE).same_as(Algo::TwoShotPull));
    assert!(tables::select(ALL_REDUCE_96KIB).same_as(Algo::TwoShotPull));
    assert!(policy::select(ALL_REDUCE_96KIB).same_as(Algo::OneShotPush));
    assert!(tables::select(ALL_GATHER_512KIB).same_as(Algo::OneShotPush));
    assert!(policy::select(ALL_GATHER_512KIB).same_as(Algo::Nccl));
    // The GPU test's call: the engine reads another table in each mode, and
    // the repository has none for a loopback world.
    assert!(tables::select(loopback_all_reduce(Mode::Eager)).same_as(Algo::OneShotPull));
    assert!(tables::select(loopback_all_reduce(Mode::Graph)).same_as(Algo::TwoShotPull));
    assert!(policy::select(loopback_all_reduce(Mode::Graph)).same_as(Algo::Nccl));
};

#[test]
fn the_engine_tables_answer_at_run_time_too() {
    for (query, engine, repository) in [
        (PREFILL_ALL_REDUCE, Algo::Nccl, Algo::TwoShotPull),
        (ALL_REDUCE_96KIB, Algo::TwoShotPull, Algo::OneShotPush),
        (ALL_GATHER_512KIB, Algo::OneShotPush, Algo::Nccl),
    ] {
        // `black_box` keeps the query opaque, so these calls run the generated
        // code at run time rather than being folded by the compiler.
        let query = std::hint::black_box(query);
        assert_eq!(tables::select(query), engine, "{query:?}");
        assert_eq!(tables::TABLES.select(query), engine, "{query:?}");
        assert_eq!(policy::select(query), repository, "{query:?}");
    }
}

#[test]
fn the_engine_tables_are_its_own_files() {
    let files: Vec<&str> = tables::TABLES.platforms().iter().map(|p| p.file).collect();
    assert_eq!(
        files,
        ["tuned/sm90-loopback.toml", "tuned/sm90-nvlink.toml"]
    );
    assert_eq!(tables::TABLES.origin(), "engine-example: tuned");
    // Where the engine has no file, every query selects NCCL, even where the
    // repository has one (the engine did not measure there, so nothing is guessed).
    let a100 = Query {
        arch: kernels::Arch::SM80,
        ..ALL_REDUCE_96KIB
    };
    assert_eq!(tables::table_arch(a100.arch, a100.link), None);
    assert_eq!(tables::select(a100), Algo::Nccl);
    assert!(policy::table_arch(a100.arch, a100.link).is_some());
    let pcie = Query {
        link: Link::Pcie,
        ..ALL_GATHER_512KIB
    };
    assert_eq!(tables::select(pcie), Algo::Nccl);
}
