//! The shipped tables (`tuned/`), through the generated functions.

mod common;

use common::{documents, query};
use policy::{
    Algo, Arch, Capacity, Collective, DType, Link, Mode, PLATFORMS, Query, TableKey, capacity,
    default_capacity, select, table_arch,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
const AR: Collective = Collective::AllReduce;
const AG: Collective = Collective::AllGather;

#[test]
fn sm80_world_size_8_runs_a_custom_kernel_at_448_kib() {
    for mode in Mode::ALL {
        let q = query(AR, Arch::SM80, 8, DType::Bf16, mode, 448 * KIB);
        assert_eq!(select(q), Algo::TwoShotPull, "{mode:?}");
    }
}

#[test]
fn sm80_follows_the_vllm_rules() {
    let at = |ws, bytes| select(query(AR, Arch::SM80, ws, DType::F16, Mode::Eager, bytes));
    assert_eq!(at(2, 8 * MIB), Algo::OneShotPull);
    assert_eq!(at(2, 8 * MIB + 1), Algo::Nccl);
    assert_eq!(at(4, 512 * KIB - 16), Algo::OneShotPull);
    assert_eq!(at(4, 512 * KIB), Algo::TwoShotPull);
    assert_eq!(at(8, 256 * KIB - 16), Algo::OneShotPull);
    assert_eq!(at(8, 256 * KIB), Algo::TwoShotPull);
    assert_eq!(at(8, 8 * MIB + 16), Algo::Nccl);
    // vLLM never runs all-gather on a custom kernel.
    let gather = query(AG, Arch::SM80, 8, DType::Bf16, Mode::Graph, 16 * KIB);
    assert_eq!(select(gather), Algo::Nccl);
}

#[test]
fn sm90_graph_and_eager_differ_where_sglang_says() {
    // World size 8 on sm90 is still the published SGLang table.
    let at = |mode, ws, bytes| select(query(AR, Arch::SM90, ws, DType::Bf16, mode, bytes));
    assert_eq!(at(Mode::Graph, 8, 64 * MIB), Algo::Nccl);
    assert_eq!(at(Mode::Eager, 8, 64 * MIB), Algo::TwoShotPull);
}

/// World size 4 on sm90 is measured (4 x H200, NVLink): one-shot push up to
/// about 640 KiB, where the published SGLang graph table switched to two-shot at
/// 384 KiB, and NCCL above about 72 MiB instead of 128 MiB.
#[test]
fn sm90_world_size_4_follows_the_measured_table() {
    let at = |mode, bytes| select(query(AR, Arch::SM90, 4, DType::Bf16, mode, bytes));
    assert_eq!(at(Mode::Graph, 512 * KIB), Algo::OneShotPush);
    assert_eq!(at(Mode::Graph, 4 * MIB), Algo::TwoShotPull);
    assert_eq!(at(Mode::Graph, 100 * MIB), Algo::Nccl);
    assert_eq!(at(Mode::Eager, 512 * KIB), Algo::OneShotPush);
    let gather = |bytes| select(query(AG, Arch::SM90, 4, DType::Bf16, Mode::Graph, bytes));
    assert_eq!(gather(MIB), Algo::OneShotPush);
    assert_eq!(gather(8 * MIB), Algo::OneShotPull);
    assert_eq!(gather(32 * MIB), Algo::Nccl);
    for table in policy::PLATFORMS
        .iter()
        .filter(|p| p.arch == Arch::SM90)
        .flat_map(|p| p.tables.iter())
        .filter(|t| t.key.world_size == 4 && t.key.collective != Collective::AllReduceAddRmsNorm)
    {
        assert_eq!(table.source, "measured", "{}", table.key);
    }
}

/// World size 2 on sm90 is measured (2 x H200, NVLink): the store-based
/// two-shot beats NCCL and one-shot pull up to its 128 MiB capacity, where the
/// published SGLang table had one-shot pull.
#[test]
fn sm90_world_size_2_follows_the_measured_table() {
    let at = |mode, bytes| select(query(AR, Arch::SM90, 2, DType::Bf16, mode, bytes));
    assert_eq!(at(Mode::Graph, 4 * KIB), Algo::OneShotPush);
    assert_eq!(at(Mode::Graph, 100 * MIB), Algo::TwoShotPull);
    assert_eq!(at(Mode::Graph, 128 * MIB + 16), Algo::Nccl);
    let table = policy::PLATFORMS
        .iter()
        .find(|p| p.arch == Arch::SM90)
        .and_then(|p| p.table(query(AR, Arch::SM90, 2, DType::Bf16, Mode::Graph, 0).key()))
        .expect("an sm90 world-size-2 table");
    assert_eq!(table.source, "measured");
}

#[test]
fn sm100_small_all_gather_is_custom_at_world_size_4_graph_only() {
    let at = |ws, mode, bytes| select(query(AG, Arch::SM100, ws, DType::Bf16, mode, bytes));
    assert_eq!(at(4, Mode::Graph, 4 * 96 * KIB), Algo::OneShotPush);
    assert_eq!(at(4, Mode::Graph, 4 * 96 * KIB + 1), Algo::Nccl);
    assert_eq!(at(4, Mode::Eager, 4 * KIB), Algo::Nccl);
    assert_eq!(at(8, Mode::Graph, 4 * KIB), Algo::Nccl);
}

#[test]
fn newer_minor_versions_borrow_their_major_table() {
    let sm103 = Arch::from_compute_capability(10, 3);
    assert_eq!(table_arch(sm103, Link::NvLink), Some(Arch::SM100));
    assert_eq!(
        table_arch(Arch::from_compute_capability(8, 6), Link::NvLink),
        Some(Arch::SM80)
    );
    let q = query(AR, sm103, 8, DType::Bf16, Mode::Graph, 4 * KIB);
    assert_eq!(
        select(q),
        select(Query {
            arch: Arch::SM100,
            ..q
        })
    );
}

#[test]
fn no_table_selects_nccl() {
    // No file for sm75, none for PCIe, and no table for world size 3.
    let sm75 = Arch::from_compute_capability(7, 5);
    assert_eq!(table_arch(sm75, Link::NvLink), None);
    assert_eq!(
        select(query(AR, sm75, 8, DType::Bf16, Mode::Graph, 4 * KIB)),
        Algo::Nccl
    );
    let pcie = Query {
        link: Link::Pcie,
        ..query(AR, Arch::SM90, 8, DType::Bf16, Mode::Graph, 4 * KIB)
    };
    assert_eq!(table_arch(Arch::SM90, Link::Pcie), None);
    assert_eq!(select(pcie), Algo::Nccl);
    assert_eq!(
        select(query(AR, Arch::SM90, 3, DType::Bf16, Mode::Graph, 4 * KIB)),
        Algo::Nccl
    );
    // A major version is never borrowed from another one.
    let sm120 = Arch::from_compute_capability(12, 0);
    assert_eq!(
        select(query(AR, sm120, 8, DType::Bf16, Mode::Graph, 4 * KIB)),
        Algo::Nccl
    );
}

#[test]
fn capacities_come_from_the_platform_file_or_the_defaults() {
    let sm90 = capacity(Arch::SM90, Link::NvLink, AR, Algo::OneShotPush);
    assert_eq!(
        sm90,
        Capacity {
            max_bytes: 32 * MIB,
            align: 16
        }
    );
    let sm80_pull = capacity(Arch::SM80, Link::NvLink, AR, Algo::OneShotPull);
    assert_eq!(sm80_pull.max_bytes, 8 * MIB);
    // sm80's file declares no push capacity: the default applies.
    let sm80_push = capacity(Arch::SM80, Link::NvLink, AR, Algo::OneShotPush);
    assert_eq!(sm80_push, default_capacity(AR, Algo::OneShotPush));
    // No file at all.
    let pcie = capacity(Arch::SM90, Link::Pcie, AR, Algo::TwoShotPull);
    assert_eq!(pcie, default_capacity(AR, Algo::TwoShotPull));
    assert_eq!(
        capacity(Arch::SM90, Link::NvLink, AR, Algo::Nccl).max_bytes,
        u64::MAX
    );
    assert!(!capacity(Arch::SM90, Link::NvLink, AG, Algo::TwoShotPull).accepts(16));
}

#[test]
fn every_custom_band_fits_its_capacity_at_its_upper_edge() {
    for platform in PLATFORMS {
        for table in platform.tables {
            for band in table.bands.iter().filter(|b| b.algo.is_custom()) {
                let max = band.max.expect("custom bands are bounded");
                let k = table.key;
                let cap = capacity(platform.arch, platform.link, k.collective, band.algo);
                assert!(
                    cap.accepts_message(k.collective, k.world_size, max),
                    "{} {table:?}",
                    platform.file
                );
            }
        }
    }
}

#[test]
fn platforms_mirror_the_files() {
    let docs = documents("tuned");
    assert_eq!(PLATFORMS.len(), docs.len());
    for (info, doc) in PLATFORMS.iter().zip(&docs) {
        assert_eq!(
            (info.arch, info.link),
            (doc.platform.arch, doc.platform.link)
        );
        assert_eq!(info.gpu, doc.platform.gpu);
        assert_eq!(info.source, doc.platform.source.name());
        assert_eq!(info.citation, doc.platform.citation.as_deref());
        assert_eq!(info.file, format!("tuned/{}", doc.file_name()));
        assert_eq!(info.capacities.len(), doc.capacities.len());
        assert_eq!(info.tables.len(), doc.tables.len());
        for (t, d) in info.tables.iter().zip(&doc.tables) {
            assert_eq!(t.key, d.key);
            assert_eq!(t.note, d.note.as_deref());
            let bands: Vec<_> = t.bands.iter().map(|b| (b.max, b.algo)).collect();
            let expected: Vec<_> = d.bands.iter().map(|b| (b.max, b.algo)).collect();
            assert_eq!(bands, expected);
        }
    }
}

#[test]
fn the_published_files_cover_every_key() {
    // 3 platforms × 3 collectives × world sizes 2/4/8 × 3 dtypes × 2 modes.
    assert_eq!(PLATFORMS.len(), 3);
    for platform in PLATFORMS {
        assert_eq!(platform.source, "published");
        assert!(platform.citation.is_some());
        for collective in Collective::ALL {
            for ws in [2, 4, 8] {
                for dtype in DType::ALL {
                    for mode in Mode::ALL {
                        let key = TableKey {
                            collective,
                            world_size: ws,
                            dtype,
                            mode,
                        };
                        let table = platform.table(key);
                        assert!(
                            table.is_some_and(|t| t.note.is_some()),
                            "{} {collective:?} {ws} {dtype:?} {mode:?}",
                            platform.file
                        );
                    }
                }
            }
        }
        assert_eq!(platform.tables.len(), 54);
    }
}

#[test]
fn the_fused_rows_answer_as_published() {
    let at = |arch: Arch, ws: u32, dtype: DType, mode: Mode, bytes: u64| {
        select(Query::new(
            Collective::AllReduceAddRmsNorm,
            arch,
            Link::NvLink,
            ws,
            dtype,
            mode,
            bytes,
        ))
    };
    for dtype in DType::ALL {
        for mode in Mode::ALL {
            // sm90: vLLM's one-shot thresholds, TP8 lowered below 256 KB.
            assert_eq!(at(Arch::SM90, 2, dtype, mode, 32 * MIB), Algo::OneShotPush);
            assert_eq!(at(Arch::SM90, 2, dtype, mode, 32 * MIB + 16), Algo::Unfused);
            assert_eq!(at(Arch::SM90, 4, dtype, mode, 2 * MIB), Algo::OneShotPush);
            assert_eq!(at(Arch::SM90, 4, dtype, mode, 2 * MIB + 16), Algo::Unfused);
            assert_eq!(at(Arch::SM90, 8, dtype, mode, 128 * KIB), Algo::OneShotPush);
            assert_eq!(at(Arch::SM90, 8, dtype, mode, 256 * KIB), Algo::Unfused);
            // sm100 TP4: one-shot, then two-shot, then unfused.
            assert_eq!(at(Arch::SM100, 4, dtype, mode, 4 * MIB), Algo::OneShotPush);
            assert_eq!(
                at(Arch::SM100, 4, dtype, mode, 4 * MIB + 16),
                Algo::TwoShotPush
            );
            assert_eq!(
                at(Arch::SM100, 4, dtype, mode, 16 * MIB + 16),
                Algo::Unfused
            );
            // sm80 has no published threshold.
            assert_eq!(at(Arch::SM80, 8, dtype, mode, 16), Algo::Unfused);
        }
    }
    // A world with no table, and an unknown platform: the fallback.
    assert_eq!(
        at(Arch::SM90, 3, DType::Bf16, Mode::Graph, 16),
        Algo::Unfused
    );
    assert_eq!(
        at(
            Arch::from_compute_capability(7, 0),
            8,
            DType::Bf16,
            Mode::Graph,
            16
        ),
        Algo::Unfused
    );
}
