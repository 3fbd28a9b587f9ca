//! The GPU backend: worlds of real devices (or a loopback world on GPU 0)
//! through `kernels`, timed with CUDA events, verified against a host reference.
//!
//! - The link is what the driver's peer attributes say (`kernels::raw::pair_link`),
//!   read by the rule every world of `kernels` follows (`kernels::raw::world_link`:
//!   NVLink when every pair has native peer atomics, else PCIe); only world
//!   sizes whose GPUs share the machine's link are offered, so one file never
//!   mixes links.
//! - One world is alive at a time (its registered buffers are large); the sweep
//!   orders keys by world size so each is built once.
//! - Verification does not depend on graph or eager mode, so each (collective,
//!   world size, dtype, algorithm, size) is checked once and remembered.
//! - In a loopback world NCCL cannot run (it refuses two ranks on one GPU):
//!   `kernels` runs its reference collective instead, and the backend is named
//!   `gpu-loopback` in the evidence so nobody mistakes those timings for NCCL's.

use std::collections::HashMap;

use crate::harness::timing::{self, DeviceInfo, TimingCache, TimingSpec};
use crate::harness::world::measuring;
use crate::memory::Budget;
use kernels::{Options, RankComm};
use policy::{Algo, CapacityEntry, Collective, DType, Link, TableKey};

use super::{Backend, BackendError, PlatformDesc, Repetitions, Validated};
use crate::stats;

/// The most ranks the kernels serve in one world.
const MAX_WORLD: usize = kernels::raw::MAX_WORLD;

/// Why no GPU backend could be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// No driver or no device: the caller says "no CUDA GPU found (…)".
    NoGpu(String),
    /// There are GPUs, but something else is wrong (a library, the topology).
    Other(String),
}

type CheckKey = (Collective, u32, DType, Algo, u64);

pub struct GpuBackend {
    /// Its link is loopback where every rank is on GPU 0; elsewhere rank r
    /// is on GPU r.
    platform: PlatformDesc,
    world_sizes: Vec<u32>,
    /// The world in use, with what timing keeps on it.
    world: Option<LiveWorld>,
    /// Verification outcomes, shared by graph and eager mode.
    checked: HashMap<CheckKey, Result<(), String>>,
    verify_max_bytes: u64,
    /// Whether worlds register an NCCL window (`nccl_symmetric` is measured).
    windows: bool,
    /// GPU memory per rank the worlds may register (`None`: unbounded).
    memory_budget: Option<u64>,
    /// Elements of a row of the fused all-reduce + add + RMSNorm's calls.
    hidden: usize,
}

/// A world and the timing set-up kept on it: the cache's graphs and events
/// belong to the ranks' contexts, so the two are built and dropped together.
struct LiveWorld {
    size: u32,
    /// Declared before the ranks, so its graphs go before the world.
    timing: TimingCache,
    ranks: Vec<RankComm>,
}

/// Why this machine has no GPU to open, in the runtime's words
/// (`kernels::open_device`): no driver, or a driver that shows no GPU.
pub fn no_gpu_reason() -> String {
    match kernels::open_device(0) {
        Err(e) => e.to_string(),
        Ok(_) => "the driver shows a GPU but it could not be used".to_string(),
    }
}

impl GpuBackend {
    /// Finds the GPUs and their link; checks sizes up to `verify_max_bytes`
    /// against the host reference (larger ones are timed unchecked). Worlds
    /// register at most `memory_budget` bytes of GPU memory per rank (`None`:
    /// unbounded), their capacities capped as `kernels` caps them.
    pub fn open(
        loopback: bool,
        verify_max_bytes: u64,
        memory_budget: Option<u64>,
    ) -> Result<GpuBackend, OpenError> {
        // The runtime's own wording for a missing driver or GPU.
        let context = kernels::open_device(0).map_err(|e| OpenError::NoGpu(e.to_string()))?;
        let devices = timing::discover()
            .map_err(|e| OpenError::NoGpu(format!("the driver lists no usable GPU: {e}")))?;
        let Some(first) = devices.first() else {
            return Err(OpenError::NoGpu(no_gpu_reason()));
        };
        let (link, world_sizes) = if loopback {
            (Link::Loopback, powers_of_two_up_to(MAX_WORLD))
        } else {
            if devices.len() < 2 {
                return Err(OpenError::Other(format!(
                    "only one GPU ({}) is visible and a world needs two; `--loopback` measures a loopback world on it (validates kernels, not link timing)",
                    first.name
                )));
            }
            if let Some(other) = devices.iter().find(|d| d.arch != first.arch) {
                return Err(OpenError::Other(format!(
                    "GPU {} is {} but GPU 0 is {}: a world needs one architecture (restrict CUDA_VISIBLE_DEVICES)",
                    other.ordinal, other.arch, first.arch
                )));
            }
            let count = devices.len().min(MAX_WORLD);
            let link = link_among(&devices, count);
            let sizes = world_sizes_up_to(count)
                .into_iter()
                .filter(|&w| link_among(&devices, w as usize) == link)
                .collect();
            (link, sizes)
        };
        let info = timing::gpu_stack(&context).map_err(|e| OpenError::Other(e.to_string()))?;
        let windows = !loopback && windows_supported(info.nccl_version.as_deref());
        let platform = PlatformDesc {
            arch: first.arch,
            link,
            gpu: first.name.clone(),
            backend: if loopback { "gpu-loopback" } else { "gpu" }.to_string(),
            driver: Some(info.driver_version),
            cuda: Some(info.cuda_version),
            nccl: info.nccl_version,
            host: host_name(),
            capacities: capacities(first.arch, link, windows),
        };
        Ok(GpuBackend {
            platform,
            world_sizes,
            world: None,
            checked: HashMap::new(),
            verify_max_bytes,
            windows,
            memory_budget,
            hidden: timing::DEFAULT_HIDDEN,
        })
    }

    /// The world of `world_size`, built on first use. The previous world is
    /// dropped first so two worlds' buffers never coexist.
    fn world(&mut self, world_size: u32) -> Result<&mut LiveWorld, BackendError> {
        if self.world.as_ref().map(|world| world.size) != Some(world_size) {
            self.world = None;
            let options = Options {
                // The tuner asks for every algorithm at every size it takes;
                // a decline is reported per point, not logged.
                log_declines: false,
                ..measuring(self.memory_budget, self.windows)
            };
            let size = world_size as usize;
            let ranks = if self.platform.link == Link::Loopback {
                timing::build_world(Some(size), &[0], options)
            } else {
                timing::build_world(None, &(0..size).collect::<Vec<_>>(), options)
            }
            .map_err(|e| BackendError(format!("building a world of {world_size}: {e}")))?;
            self.check_capacities(&ranks[0], world_size)?;
            self.world = Some(LiveWorld {
                size: world_size,
                timing: TimingCache::default(),
                ranks,
            });
        }
        Ok(self.world.as_mut().expect("built above"))
    }

    /// The sweep picks its candidates from the capacities it expects a world
    /// of `world_size` to have ([`Backend::capacities`]); a world that has
    /// others would decline what the sweep asks, or take what it never asks.
    fn check_capacities(&self, rank: &RankComm, world_size: u32) -> Result<(), BackendError> {
        for expected in self.capacities(world_size) {
            let has = rank.capacity(expected.collective, expected.algo);
            if has.max_bytes != expected.capacity.max_bytes {
                return Err(BackendError(format!(
                    "a world of {world_size} takes {} {} up to {} bytes, but the sweep planned \
                     for {} (the memory budget's cap as the tuner works it out differs from \
                     the world's)",
                    expected.algo.name(),
                    expected.collective.name(),
                    has.max_bytes,
                    expected.capacity.max_bytes
                )));
            }
        }
        Ok(())
    }

    /// After a failure that broke the world (any rank knows of a fault: a
    /// timeout, a mismatch, a failed peer, a driver or NCCL error), every
    /// later call of it fails: drop it, so the next call builds a fresh one
    /// and only the configuration that broke it fails. A wrong result or a
    /// decline leaves the world in step, and it is kept.
    fn forget_world_after(&mut self, error: &kernels::Error) {
        use kernels::Error as E;
        let broken = self
            .world
            .as_ref()
            .is_some_and(|world| world.ranks.iter().any(|r| r.health().is_err()));
        if broken
            || matches!(
                error,
                E::Timeout { .. } | E::Driver { .. } | E::Nccl { .. } | E::PeerFailed { .. }
            )
        {
            self.world = None;
        }
    }
}

impl Backend for GpuBackend {
    fn platform(&self) -> PlatformDesc {
        self.platform.clone()
    }

    fn world_sizes(&self) -> Vec<u32> {
        self.world_sizes.clone()
    }

    fn memory_budget(&self) -> Option<Budget> {
        self.memory_budget.map(|bytes| Budget {
            bytes,
            model: crate::memory::kernels_model,
        })
    }

    fn validate(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
    ) -> Result<Validated, BackendError> {
        if bytes > self.verify_max_bytes {
            return Ok(Validated::Skipped);
        }
        let id = (key.collective, key.world_size, key.dtype, algo, bytes);
        if let Some(outcome) = self.checked.get(&id) {
            return outcome
                .clone()
                .map(|()| Validated::Yes)
                .map_err(BackendError);
        }
        let seed = stats::seed_for(&format!("verify/{}/{bytes}/{}", key, algo.name()));
        let hidden = self.hidden;
        let ranks = &mut self.world(key.world_size)?.ranks;
        let result = timing::validate(ranks, key.collective, key.dtype, algo, bytes, hidden, seed);
        if let Err(e) = &result {
            self.forget_world_after(e);
        }
        let outcome = result.map_err(|e| e.to_string());
        self.checked.insert(id, outcome.clone());
        outcome.map(|()| Validated::Yes).map_err(BackendError)
    }

    fn use_hidden(&mut self, hidden: usize) {
        if hidden != self.hidden {
            self.hidden = hidden;
            // Checked at the other hidden size: those are other calls.
            self.checked
                .retain(|(collective, ..), _| *collective != Collective::AllReduceAddRmsNorm);
        }
    }

    fn row_bytes(&self, key: TableKey) -> u64 {
        match key.collective {
            Collective::AllReduceAddRmsNorm => self.hidden as u64 * key.dtype.size_bytes(),
            Collective::AllReduce | Collective::AllGather => 1,
        }
    }

    fn measure(
        &mut self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> Result<Vec<f64>, BackendError> {
        let spec = TimingSpec {
            collective: key.collective,
            dtype: key.dtype,
            algo,
            bytes,
            mode: key.mode,
            calls_per_sample: calls_per_sample(bytes),
            samples: reps.samples,
            warmup: reps.warmup,
            hidden: self.hidden,
            unfused_via: None,
        };
        let world = self.world(key.world_size)?;
        let result = world.timing.measure(&mut world.ranks, &spec);
        if let Err(e) = &result {
            self.forget_world_after(e);
        }
        result.map_err(|e| BackendError(e.to_string()))
    }

    fn estimated_point_seconds(
        &self,
        key: TableKey,
        algo: Algo,
        bytes: u64,
        reps: Repetitions,
    ) -> f64 {
        let w = f64::from(key.world_size);
        let call_us = rough_call_us(bytes);
        let calls =
            f64::from(calls_per_sample(bytes)) * f64::from(reps.samples + reps.warmup.max(1));
        // A first look takes a size's candidates in this order: the first one's
        // call generates and uploads the inputs, the others' reuse them. Each
        // still captures its own graph; the fixed part is charged whole, as no
        // GPU has timed what the cache leaves of it.
        let builds_inputs = self
            .candidates(key.collective, key.world_size, bytes)
            .first()
            == Some(&algo);
        let inputs = if builds_inputs {
            bytes as f64 * w * 2e-9
        } else {
            0.0
        };
        let setup = 0.004 + inputs;
        // A point is verified once for both modes (so half of it is charged
        // here), with a host reference over every rank's data.
        let verify = if bytes <= self.verify_max_bytes {
            (0.003 + bytes as f64 * w * 4e-9) / 2.0
        } else {
            0.0
        };
        setup + verify + calls * call_us * 1e-6
    }
}

/// A pessimistic per-call latency, for choosing how many calls a sample
/// holds and for the time estimate: 10 µs plus 20 GB/s.
fn rough_call_us(bytes: u64) -> f64 {
    10.0 + bytes as f64 / 20_000.0
}

/// Back-to-back calls per sample (one graph replay in graph mode): enough for
/// about 200 µs per sample, so event resolution (~0.5 µs) and launch jitter
/// vanish in the average, and at least one.
fn calls_per_sample(bytes: u64) -> u32 {
    (200.0 / rough_call_us(bytes)).round().clamp(1.0, 32.0) as u32
}

/// The link GPUs `0..count` form, by `kernels`' rule: NVLink when every pair
/// has it, else PCIe.
fn link_among(devices: &[DeviceInfo], count: usize) -> Link {
    let pairs = devices[..count].iter().flat_map(|d| {
        (0..count)
            .filter(move |&p| p != d.ordinal)
            .map(move |p| d.reach_to(p))
    });
    kernels::raw::world_link(count, 1, pairs)
}

/// 2, 4, 8, … up to `limit`.
fn powers_of_two_up_to(limit: usize) -> Vec<u32> {
    (1..)
        .map(|k| 1u32 << k)
        .take_while(|&w| w as usize <= limit)
        .collect()
}

/// The powers of two up to `count`, and `count` itself (a 6-GPU machine runs
/// worlds of 2, 4 and 6).
fn world_sizes_up_to(count: usize) -> Vec<u32> {
    let mut sizes = powers_of_two_up_to(count);
    if count >= 2 && !sizes.contains(&(count as u32)) {
        sizes.push(count as u32);
    }
    sizes
}

/// Whether NCCL `version` ("2.28.3") has symmetric windows (2.27 and later).
fn windows_supported(version: Option<&str>) -> bool {
    let Some(version) = version else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 27)
}

/// What `policy` (and so `kernels`) gives each custom algorithm here. NCCL
/// on a window is a candidate only where NCCL runs and has windows (never
/// in a loopback world of several ranks, where NCCL refuses to run).
fn capacities(arch: policy::Arch, link: Link, windows: bool) -> Vec<CapacityEntry> {
    let mut entries = crate::grid::custom_capacities(|collective, algo| {
        policy::capacity(arch, link, collective, algo)
    });
    entries.retain(|e| windows || e.algo.kind() != policy::AlgoKind::Window);
    entries
}

fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_need_nccl_2_27() {
        assert!(windows_supported(Some("2.28.3")));
        assert!(windows_supported(Some("2.27.0")));
        assert!(windows_supported(Some("3.0.1")));
        assert!(!windows_supported(Some("2.26.5")));
        assert!(!windows_supported(Some("garbage")));
        assert!(!windows_supported(None));
    }

    #[test]
    fn nccl_on_a_window_is_a_candidate_only_where_windows_run() {
        let has = |windows| {
            capacities(policy::Arch::SM90, Link::NvLink, windows)
                .iter()
                .any(|c| c.algo == Algo::NcclSymmetric)
        };
        assert!(has(true));
        assert!(!has(false));
        // The kernels are candidates either way.
        let kernels = capacities(policy::Arch::SM90, Link::NvLink, false);
        assert!(kernels.iter().any(|c| c.algo == Algo::OneShotPush));
    }

    #[test]
    fn world_sizes_cover_powers_of_two_and_the_machine() {
        assert_eq!(world_sizes_up_to(8), vec![2, 4, 8]);
        assert_eq!(world_sizes_up_to(6), vec![2, 4, 6]);
        assert_eq!(world_sizes_up_to(1), Vec::<u32>::new());
    }

    /// The first look's estimate charges generating and uploading a size's
    /// inputs to its first candidate alone: the others' calls reuse them.
    #[test]
    fn only_a_sizes_first_candidate_is_charged_its_inputs() {
        let platform = PlatformDesc {
            arch: policy::Arch::SM90,
            link: Link::NvLink,
            gpu: "NVIDIA H200".into(),
            backend: "gpu".into(),
            driver: None,
            cuda: None,
            nccl: None,
            host: None,
            capacities: capacities(policy::Arch::SM90, Link::NvLink, false),
        };
        // No GPU is needed: the estimate reads the platform alone.
        let backend = GpuBackend {
            platform,
            world_sizes: vec![8],
            world: None,
            checked: HashMap::new(),
            verify_max_bytes: 1 << 26,
            windows: false,
            memory_budget: None,
            hidden: timing::DEFAULT_HIDDEN,
        };
        let key = TableKey {
            collective: Collective::AllReduce,
            world_size: 8,
            dtype: DType::Bf16,
            mode: policy::Mode::Graph,
        };
        let bytes = 1 << 20;
        let reps = Repetitions {
            samples: 25,
            warmup: 2,
        };
        let candidates = backend.candidates(key.collective, key.world_size, bytes);
        assert!(candidates.len() > 1, "{candidates:?}");
        let estimate = |algo| backend.estimated_point_seconds(key, algo, bytes, reps);
        let inputs = bytes as f64 * 8.0 * 2e-9;
        for other in &candidates[1..] {
            let charged = estimate(candidates[0]) - estimate(*other);
            assert!((charged - inputs).abs() < 1e-12, "{other:?}: {charged}");
        }
    }

    #[test]
    fn samples_hold_about_200_microseconds() {
        assert_eq!(calls_per_sample(16), 20);
        assert_eq!(calls_per_sample(256 << 20), 1);
        assert!(calls_per_sample(1 << 20) < calls_per_sample(4096));
    }

    /// Whatever this machine has, opening says so: no driver (CI, laptops),
    /// no device, one GPU, GPUs of two architectures, or a world of GPUs.
    #[test]
    fn opening_names_what_this_machine_lacks() {
        let opened = GpuBackend::open(false, 1 << 26, None);
        let devices = match kernels::raw::require_driver() {
            Err(_) => None,
            Ok(()) => Some(timing::discover().map_err(|e| e.to_string())),
        };
        match (devices, opened) {
            (None, Err(OpenError::NoGpu(reason))) => assert_eq!(reason, no_gpu_reason()),
            (Some(Err(e)), Err(OpenError::NoGpu(reason))) => {
                assert_eq!(reason, format!("the driver lists no usable GPU: {e}"))
            }
            (Some(Ok(devices)), opened) => match (devices.len(), opened) {
                (0, Err(OpenError::NoGpu(reason))) => assert_eq!(reason, no_gpu_reason()),
                (1, Err(OpenError::Other(why))) => {
                    assert!(why.starts_with("only one GPU ("), "{why}")
                }
                (_, Err(OpenError::Other(why)))
                    if devices.iter().any(|d| d.arch != devices[0].arch) =>
                {
                    assert!(why.contains("a world needs one architecture"), "{why}")
                }
                (n, Ok(backend)) if n >= 2 => {
                    assert_ne!(backend.platform().link, Link::Loopback);
                    assert!(!backend.world_sizes().is_empty());
                    assert_eq!(backend.platform().arch, devices[0].arch);
                }
                (n, other) => panic!("{n} GPU(s) found, but opening gave {:?}", other.err()),
            },
            (devices, other) => panic!(
                "driver present: {}, but opening gave {:?}",
                devices.is_some(),
                other.err()
            ),
        }
    }
}
