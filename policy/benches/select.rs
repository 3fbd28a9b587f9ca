//! Run-time cost of `policy::select` on varied queries (target: ≤ 5 ns each).
//!
//! The queries cycle through every shipped platform, architectures that fall back
//! to another file or to none, all world sizes, dtypes and modes, and sizes from
//! 16 B to 256 MiB including band edges, so neither the branch predictor nor the
//! optimizer sees one repeated query. `black_box` hides each query's value.
//!
//! `cargo bench -p colltune-policy --bench select -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use policy::{Arch, Collective, DType, Link, Mode, Policy, Query};

/// A power of two, so the index wraps with a mask rather than a division.
const QUERY_COUNT: usize = 4096;

/// A small deterministic generator (xorshift64), so every run measures the same mix.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

fn varied_queries() -> Vec<Query> {
    let archs = [
        Arch::SM80,
        Arch::SM90,
        Arch::SM100,
        Arch::from_compute_capability(8, 6),
        Arch::from_compute_capability(10, 3),
        Arch::from_compute_capability(12, 0),
    ];
    let links = [Link::NvLink, Link::NvLink, Link::NvLink, Link::Pcie];
    let world_sizes = [2, 4, 8, 8];
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    (0..QUERY_COUNT)
        .map(|_| {
            // 16 B × 2^k plus a small aligned offset: lands on and between band edges.
            let bytes = (16u64 << (rng.next() % 24)) + 16 * (rng.next() % 4);
            Query::new(
                rng.pick(&Collective::ALL),
                rng.pick(&archs),
                rng.pick(&links),
                rng.pick(&world_sizes),
                rng.pick(&DType::ALL),
                rng.pick(&Mode::ALL),
                bytes,
            )
        })
        .collect()
}

fn select_benchmarks(c: &mut Criterion) {
    let queries = varied_queries();
    let mut group = c.benchmark_group("select");
    group.throughput(Throughput::Elements(1));

    group.bench_function("varied_query", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & (QUERY_COUNT - 1);
            policy::select(black_box(queries[i]))
        });
    });

    let no_override = Policy::none();
    group.bench_function("policy_without_override", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & (QUERY_COUNT - 1);
            black_box(&no_override).select(black_box(queries[i]))
        });
    });
    group.finish();
}

criterion_group!(benches, select_benchmarks);
criterion_main!(benches);
