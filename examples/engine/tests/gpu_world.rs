//! The engine on a GPU: its tables handed over, a world built, and each
//! collective one line that names no mode. Two ranks share GPU 0 (a
//! loopback world), where the engine's eager and graph tables pick different
//! algorithms for the same call, so the algorithm a call reports shows which
//! table it read: the eager one when issued plainly, the graph one when
//! issued into a capture.
//!
//! One test in its own binary: which tables a process uses is settled once
//! per process. Run on a machine with an H200 (the engine's loopback table is
//! sm90's), with `NCCL_NVLS_ENABLE=0` as every GPU run of this repository:
//! `scripts/gpu-run.sh`, or
//! `NCCL_NVLS_ENABLE=0 cargo test -p engine-example --test gpu_world -- --ignored`.

use engine_example::{LOOPBACK_BYTES, init};
use kernels::cudarc::driver::CudaSlice;
use kernels::{Algo, Arch, Options, RankComm, Select, World};

/// Per rank: its input (rank + 1 everywhere), and the outputs of the eager
/// and of the captured call.
struct Tensors {
    input: CudaSlice<f32>,
    eager: CudaSlice<f32>,
    graph: CudaSlice<f32>,
}

#[test]
#[ignore = "needs a CUDA GPU (an H200): run scripts/gpu-run.sh on a GPU machine"]
fn one_line_per_collective_and_the_mode_is_found() {
    kernels::raw::require_multicast_off().unwrap_or_else(|e| panic!("{e}"));
    init().expect("the engine's tables, before any world");
    let ctx = kernels::open_device(0).unwrap_or_else(|e| panic!("GPU 0: {e}"));
    let arch = kernels::raw::arch_of(&ctx).expect("GPU 0's architecture");
    assert_eq!(
        arch,
        Arch::SM90,
        "the engine's loopback table is sm90's: this test needs an H100 or H200"
    );
    // SAFETY: no tensor exists yet; each rank orders its work on its own
    // stream, and a capture needs the tracking off (cudarc's rule).
    unsafe { ctx.disable_event_tracking() };
    let ranks = World::loopback(ctx, 2, Options::default()).expect("a loopback world of 2");
    let n = LOOPBACK_BYTES as usize / size_of::<f32>();
    let mut tensors: Vec<Tensors> = ranks
        .iter()
        .map(|rank| {
            let stream = rank.stream();
            Tensors {
                input: stream
                    .clone_htod(&vec![(rank.rank() + 1) as f32; n])
                    .expect("upload"),
                eager: stream.alloc_zeros(n).expect("alloc"),
                graph: stream.alloc_zeros(n).expect("alloc"),
            }
        })
        .collect();

    // Eager: the engine's one line.
    for (rank, t) in ranks.iter().zip(&mut tensors) {
        let ran = rank
            .all_reduce(&t.input.as_view(), &mut t.eager.as_view_mut(), Select::Auto)
            .expect("an eager all-reduce");
        assert_eq!(
            ran,
            Algo::OneShotPull,
            "rank {}: the eager table",
            rank.rank()
        );
    }

    // The same line inside a capture reads the graph table.
    let mut graphs = Vec::new();
    for (rank, t) in ranks.iter().zip(&mut tensors) {
        let mut ran = None;
        let graph = rank
            .capture(|r: &RankComm| {
                ran = Some(r.all_reduce(
                    &t.input.as_view(),
                    &mut t.graph.as_view_mut(),
                    Select::Auto,
                )?);
                Ok(())
            })
            .expect("a captured all-reduce");
        assert_eq!(
            ran,
            Some(Algo::TwoShotPull),
            "rank {}: the graph table",
            rank.rank()
        );
        graphs.push(graph);
    }
    for graph in &graphs {
        graph.launch().expect("a replay");
    }

    for (rank, t) in ranks.iter().zip(&tensors) {
        rank.check().expect("every call finished");
        for (what, output) in [("eager", &t.eager), ("replayed", &t.graph)] {
            let got = rank.stream().clone_dtoh(output).expect("download");
            if let Some(i) = got.iter().position(|&x| x != 3.0) {
                panic!(
                    "rank {}, {what} call: element {i} is {}, not 1 + 2",
                    rank.rank(),
                    got[i]
                );
            }
        }
    }
}
