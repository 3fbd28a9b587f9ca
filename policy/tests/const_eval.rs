//! Selection is usable in `const` items: the compiler decides, and a wrong
//! table fails the build of this test.

use policy::{
    Algo, Arch, Capacity, Collective, DType, Link, Mode, Query, TableKey, capacity, select,
    table_arch,
};

const SM80_DECODE: Query = Query {
    key: TableKey {
        collective: Collective::AllReduce,
        world_size: 8,
        dtype: DType::Bf16,
        mode: Mode::Graph,
    },
    arch: Arch::SM80,
    link: Link::NvLink,
    bytes: 448 * 1024,
};

const CHOSEN: Algo = select(SM80_DECODE);
const _: () = assert!(CHOSEN.same_as(Algo::TwoShotPull));

const SM103: Option<Arch> = table_arch(Arch::from_compute_capability(10, 3), Link::NvLink);
const PUSH_ON_SM90: Capacity = capacity(
    Arch::SM90,
    Link::NvLink,
    Collective::AllReduce,
    Algo::OneShotPush,
);

/// A buffer sized at compile time from the tables, as `kernels` may do.
const STAGING_BYTES: usize = PUSH_ON_SM90.max_bytes as usize;

#[test]
fn const_items_hold_the_selection() {
    assert_eq!(CHOSEN, Algo::TwoShotPull);
    assert_eq!(SM103, Some(Arch::SM100));
    assert_eq!(STAGING_BYTES, 32 << 20);
    // The same function at run time agrees with the const evaluation.
    let runtime = std::hint::black_box(SM80_DECODE);
    assert_eq!(select(runtime), CHOSEN);
}
