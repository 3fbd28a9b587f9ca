//! The engine's tables decide at compile time, and they are not the
//! repository's: each query below is answered differently by the two.

use engine_example::{LARGE_ALL_REDUCE, LARGE_ALL_REDUCE_ALGO, tables};
use policy::{Algo, Collective, Link, Query};

const fn with(collective: Collective, bytes: u64) -> Query {
    Query {
        collective,
        bytes,
        ..LARGE_ALL_REDUCE
    }
}

const ALL_REDUCE_12MIB: Query = with(Collective::AllReduce, 12 * 1024 * 1024);
const ALL_GATHER_1MIB: Query = with(Collective::AllGather, 1024 * 1024);

// Proven by the compiler: if either table changed so that the two agree, or the
// engine's stopped choosing these algorithms, this file would not build.
const _: () = {
    assert!(LARGE_ALL_REDUCE_ALGO.same_as(Algo::Nccl));
    assert!(policy::select(LARGE_ALL_REDUCE).same_as(Algo::OneShotPull));
    assert!(tables::select(ALL_REDUCE_12MIB).same_as(Algo::Nccl));
    assert!(policy::select(ALL_REDUCE_12MIB).same_as(Algo::OneShotPush));
    assert!(tables::select(ALL_GATHER_1MIB).same_as(Algo::OneShotPush));
    assert!(policy::select(ALL_GATHER_1MIB).same_as(Algo::Nccl));
};

#[test]
fn the_engine_tables_answer_at_run_time_too() {
    for (query, engine, repository) in [
        (LARGE_ALL_REDUCE, Algo::Nccl, Algo::OneShotPull),
        (ALL_REDUCE_12MIB, Algo::Nccl, Algo::OneShotPush),
        (ALL_GATHER_1MIB, Algo::OneShotPush, Algo::Nccl),
    ] {
        // `std::hint::black_box` keeps the query opaque, so these calls run the
        // generated code at run time rather than folding it.
        let query = std::hint::black_box(query);
        assert_eq!(tables::select(query), engine, "{query:?}");
        assert_eq!(tables::TABLES.select(query), engine, "{query:?}");
        assert_eq!(policy::select(query), repository, "{query:?}");
    }
}

#[test]
fn the_engine_tables_are_its_own_files() {
    let platforms = tables::TABLES.platforms();
    assert_eq!(platforms.len(), 1);
    assert_eq!(platforms[0].file, "tuned/sm90-nvlink.toml");
    assert_eq!(tables::TABLES.origin(), "engine-example: tuned");
    // A platform the engine has no file for selects NCCL, whatever `policy` has.
    let pcie = Query {
        link: Link::Pcie,
        ..ALL_GATHER_1MIB
    };
    assert_eq!(tables::select(pcie), Algo::Nccl);
    let a100 = Query {
        arch: policy::Arch::SM80,
        ..ALL_REDUCE_12MIB
    };
    assert_eq!(tables::table_arch(a100.arch, a100.link), None);
    assert_eq!(tables::select(a100), Algo::Nccl);
    assert!(policy::table_arch(a100.arch, a100.link).is_some());
}
