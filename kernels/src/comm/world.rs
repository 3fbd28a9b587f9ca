//! Building a world: the ranks, their registered buffers, kernels and NCCL.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use super::memory;
use super::options::{Fallback, Options};
use super::rank::{RankComm, RankParts};
use super::registration::Registration;
use super::resources::WorldShared;
use super::setup::{arch_of, block_size, check_world_size, launch_shape, sm_count};
use super::symmetric::register_rank_windows;
use crate::error::{DriverContext, Error, Result};
use crate::ffi;
use crate::module::{self, KernelSet, KernelStartup};
use crate::nccl::NcclComm;
use crate::peer;
use crate::protocol::budget::Registers;
use crate::protocol::launch::{LaunchShape, Placement};
use crate::selection::Selector;
use crate::vocab::{Arch, Link};
use crate::window::Window;

/// Constructors of the ranks of a world: [`World::loopback`] and
/// [`World::devices`] build every rank of a single-process world;
/// [`World::process`] builds this process's rank of a world of processes.
pub struct World;

impl World {
    /// `world_size` ranks on ONE GPU: one stream per rank on `ctx`, every rank's
    /// buffers on that GPU. Exercises the same kernels and protocols as real
    /// devices (validates correctness, never NVLink timing). Blocks per rank are
    /// limited so that all ranks' blocks are resident at once.
    ///
    /// NCCL refuses two ranks on one GPU, so a loopback world of several ranks
    /// runs NCCL-selected and declined calls on the loopback reference collective
    /// ([`Fallback::LoopbackReference`]); a world of one rank has real NCCL.
    pub fn loopback(
        ctx: Arc<CudaContext>,
        world_size: usize,
        options: Options,
    ) -> Result<Vec<RankComm>> {
        ffi::require_driver()?;
        ffi::require_nvrtc()?;
        check_world_size(world_size)?;
        let arch = arch_of(&ctx)?;
        let placement = Placement::Shared {
            ranks_per_gpu: world_size,
        };
        let threads = block_size(&options, world_size)?;
        let link = Link::Loopback;
        let fallback = if world_size == 1 {
            Fallback::Nccl
        } else {
            Fallback::LoopbackReference
        };
        let selector = Selector::from_env()?;
        let planned = memory::plan_world(
            &selector,
            arch,
            link,
            Registers {
                world: world_size,
                kernels: true,
                reference: fallback == Fallback::LoopbackReference,
                window: world_size == 1,
            },
            &options,
            0,
        )?;
        let compiled = module::compile_for(arch, world_size, &options.kernel_cache)?;
        let kernels = Arc::new(KernelSet::load(
            &ctx,
            &compiled,
            threads,
            options.programmatic_launch,
        )?);
        let shape = launch_shape(
            &options,
            world_size,
            placement,
            sm_count(&ctx)?,
            &[kernels.as_ref()],
        )?;
        let streams = (0..world_size)
            .map(|_| ctx.new_stream())
            .collect::<std::result::Result<Vec<_>, _>>()
            .during("creating the ranks' streams")?;
        let contexts = vec![ctx.clone(); world_size];
        let registration =
            Registration::new(&contexts, &streams, planned.plan, options.sequence_start)?;
        let nccl: Vec<Option<NcclComm>> = if world_size == 1 {
            NcclComm::init_all(&[ctx.ordinal() as i32], options.nccl_blocking)?
                .into_iter()
                .map(Some)
                .collect()
        } else {
            (0..world_size).map(|_| None).collect()
        };
        let (windows, window_bytes) = match &nccl[..] {
            [Some(comm)] if planned.window_bytes > 0 => {
                register_rank_windows(&[(comm, &ctx)], planned.window_bytes)?
            }
            _ => ((0..world_size).map(|_| None).collect(), 0),
        };
        let shared = Arc::new(WorldShared::new(
            registration,
            &planned,
            true,
            fallback,
            window_bytes,
        ));
        let kernel_sets = vec![kernels; world_size];
        assemble(
            streams,
            kernel_sets,
            nccl,
            windows,
            shared,
            (arch, link, shape),
            selector,
            options,
        )
    }

    /// One rank per GPU, one stream each (rank r runs on `streams[r]`), all in
    /// this process. Peer access is enabled between every pair; the link is
    /// NVLink when every pair has native peer atomics, else PCIe. Without peer
    /// access every custom algorithm declines and NCCL runs everything. The
    /// streams must belong to the devices' primary contexts (`CudaContext::new`),
    /// which is what NCCL uses.
    ///
    /// NCCL calls of a single-process world must be issued concurrently, one
    /// thread per rank (as `timing` does), or the first collective can block.
    pub fn devices(streams: Vec<Arc<CudaStream>>, options: Options) -> Result<Vec<RankComm>> {
        ffi::require_driver()?;
        ffi::require_nvrtc()?;
        ffi::require_nccl()?;
        let world_size = streams.len();
        check_world_size(world_size)?;
        let contexts: Vec<Arc<CudaContext>> = streams.iter().map(|s| s.context().clone()).collect();
        for (i, a) in contexts.iter().enumerate() {
            for b in &contexts[i + 1..] {
                if a.cu_device() == b.cu_device() {
                    return Err(Error::Mismatch(format!(
                        "two ranks on GPU {}: a devices world has one rank per GPU (use \
                         World::loopback for several ranks on one GPU)",
                        a.ordinal()
                    )));
                }
            }
        }
        let arch = arch_of(&contexts[0])?;
        for ctx in &contexts[1..] {
            let other = arch_of(ctx)?;
            if other != arch {
                return Err(Error::Mismatch(format!(
                    "GPU {} is {other} but GPU {} is {arch}: every rank must select the same \
                     algorithms, so a world needs one architecture",
                    ctx.ordinal(),
                    contexts[0].ordinal()
                )));
            }
        }
        let mut sms = u32::MAX;
        for ctx in &contexts {
            sms = sms.min(sm_count(ctx)?);
        }
        let threads = block_size(&options, world_size)?;
        let topology = peer::connect(&contexts)?;
        // One GPU has no link: `connect` calls that world `Loopback`.
        let link = topology.link;
        let selector = Selector::from_env()?;
        let planned = memory::plan_world(
            &selector,
            arch,
            link,
            Registers {
                world: world_size,
                kernels: topology.peer_access,
                reference: false,
                window: true,
            },
            &options,
            0,
        )?;
        let compiled = module::compile_for(arch, world_size, &options.kernel_cache)?;
        let kernel_sets = contexts
            .iter()
            .map(|ctx| {
                KernelSet::load(ctx, &compiled, threads, options.programmatic_launch).map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;
        let loaded: Vec<&KernelSet> = kernel_sets.iter().map(|k| k.as_ref()).collect();
        let shape = launch_shape(&options, world_size, Placement::OwnGpus, sms, &loaded)?;
        let registration =
            Registration::new(&contexts, &streams, planned.plan, options.sequence_start)?;
        let ordinals: Vec<i32> = contexts.iter().map(|c| c.ordinal() as i32).collect();
        // A collective NCCL answers with "in progress" (still connecting) is
        // bounded like the joining of a world of processes.
        let comms: Vec<NcclComm> = NcclComm::init_all(&ordinals, options.nccl_blocking)?
            .into_iter()
            .map(|mut comm| {
                comm.set_call_bound(options.join_timeout);
                comm
            })
            .collect();
        let ranks: Vec<_> = comms.iter().zip(&contexts).collect();
        let (windows, window_bytes) = if planned.window_bytes > 0 {
            register_rank_windows(&ranks, planned.window_bytes)?
        } else {
            (ranks.iter().map(|_| None).collect(), 0)
        };
        let shared = Arc::new(WorldShared::new(
            registration,
            &planned,
            topology.peer_access,
            Fallback::Nccl,
            window_bytes,
        ));
        assemble(
            streams,
            kernel_sets,
            comms.into_iter().map(Some).collect(),
            windows,
            shared,
            (arch, link, shape),
            selector,
            options,
        )
    }
}

impl World {
    /// This process's rank of a world of processes (one process per GPU, or
    /// several processes sharing a GPU), on `stream`, which must belong to a
    /// primary context (`CudaContext::new`) as NCCL requires. Every process calls
    /// this with its own rank and the same world size and [`Join`](super::Join); it returns
    /// once every rank has joined (bounded by `Options::join_timeout`).
    ///
    /// Custom kernels run when every pair of ranks can map the other's memory
    /// (same host, P2P access or the same GPU); otherwise every call runs NCCL,
    /// said once in the log. A configuration that differs between ranks (world
    /// size, dtype, capacities, policy tables, kernels, launch shape) is an
    /// [`Error::Mismatch`] naming the field and both values. See `kernels/GPU.md`,
    /// "One process per GPU".
    pub fn process(
        stream: Arc<CudaStream>,
        spec: super::ProcessSpec,
        options: Options,
    ) -> Result<RankComm> {
        super::process::build(stream, spec, options)
    }
}

impl RankComm {
    /// What this rank's kernels cost when its world was built: whether they
    /// were compiled with NVRTC, read from the disk cache
    /// ([`Options::kernel_cache`]) or already in this process, and how long
    /// getting and loading them took. The world's constructors log the same
    /// at `info` level.
    pub fn kernel_startup(&self) -> KernelStartup {
        self.res
            .kernels
            .as_ref()
            .map_or(KernelStartup::not_loaded(), |kernels| kernels.startup())
    }
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    streams: Vec<Arc<CudaStream>>,
    kernel_sets: Vec<Arc<KernelSet>>,
    nccl: Vec<Option<NcclComm>>,
    windows: Vec<Option<Window>>,
    shared: Arc<WorldShared>,
    (arch, link, shape): (Arch, Link, LaunchShape),
    selector: Selector,
    options: Options,
) -> Result<Vec<RankComm>> {
    let world_size = streams.len();
    memory::announce(0, &shared.footprint);
    streams
        .into_iter()
        .zip(kernel_sets)
        .zip(nccl)
        .zip(windows)
        .enumerate()
        .map(|(rank, (((stream, kernels), nccl), window))| {
            RankComm::new(RankParts {
                rank,
                world_size,
                stream,
                arch,
                link,
                shape,
                kernels: Some(kernels),
                shared: shared.clone(),
                nccl,
                window,
                membership: None,
                selector,
                options: options.clone(),
            })
        })
        .collect()
}
