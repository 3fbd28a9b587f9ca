//! The CUDA sources, compiled with NVRTC for the exact architecture of a GPU,
//! kept on disk between processes (`cache`) and in memory for the life of the
//! process, and loaded into each context that runs them.
//!
//! [`compile_for`] is what both the runtime and the CI compile test use: it needs
//! NVRTC but no GPU, and compiles for a real `sm_XX` target so the assembler runs
//! (a PTX-only compile would hide ptxas errors until a GPU loads the module).

mod cache;

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{Ptx, result as nvrtc, sys as nvrtc_sys};

pub use self::cache::KernelCache;
use self::cache::{CacheKey, DiskCache, Entry, KeyInputs};
use crate::error::{DriverContext, Error, Result};
use crate::ffi;
use crate::protocol::cuda_prelude;
use crate::protocol::registry::Kernel;
use crate::vocab::{Arch, Collective, DType};

// `SOURCES`: every `cuda/*.cu`, listed by build.rs (common.cu and prims.cu
// first).
include!(concat!(env!("OUT_DIR"), "/cuda_sources.rs"));

/// Options every compile uses: IEEE behaviour (no flush to zero, no fused
/// multiply-add, exact division), so subnormals and signed zeros survive; and
/// the assembler's warning for registers spilled to local memory, which lands
/// in [`CompiledKernels::log`] (the compile test refuses any spill in the
/// custom kernels of the world-size-2 build and more than 16 bytes in those of
/// the other world-size builds).
const NVRTC_OPTIONS: [&str; 6] = [
    "--std=c++17",
    "--ftz=false",
    "--fmad=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--ptxas-options=--warn-on-spills",
];

/// The world sizes the kernels are specialised for; other sizes (a world of
/// one) run the generic build, `CT_WORLD = 0`.
pub const SPECIALISED_WORLDS: std::ops::RangeInclusive<usize> = 2..=crate::protocol::MAX_WORLD;

/// The `CT_WORLD` a world of `world` ranks is compiled with: the world size
/// when there is a specialisation for it, else 0 (generic).
pub fn world_specialisation(world: usize) -> u32 {
    if SPECIALISED_WORLDS.contains(&world) {
        world as u32
    } else {
        0
    }
}

/// Every `CT_WORLD` there is a build for: the generic one and each specialisation.
pub fn world_specialisations() -> Vec<u32> {
    std::iter::once(0)
        .chain(SPECIALISED_WORLDS.map(|w| w as u32))
        .collect()
}

/// Extra `#define`s for A/B experiments with kernel variants, from the
/// environment variable `KERNELS_NVRTC_DEFINES` (`NAME` or `NAME=VALUE`,
/// whitespace-separated). Only experiment switches are accepted: names that
/// start with [`EXPERIMENT_PREFIX`], which the protocol's own defines never
/// use, so an experiment can never redefine a layout constant (the host and
/// device layouts would then disagree). Empty in normal use. The defines are
/// part of the source, so ranks that differ in them are refused when a world
/// of processes forms (the kernel-source hash in its hello).
fn experiment_defines() -> Result<Vec<(String, String)>> {
    parse_defines(&std::env::var("KERNELS_NVRTC_DEFINES").unwrap_or_default())
}

/// What every experiment switch's name starts with.
pub const EXPERIMENT_PREFIX: &str = "CT_EXP_";

/// `NAME` or `NAME=VALUE` items, whitespace-separated; a bare name is 1. Names
/// must be experiment switches ([`EXPERIMENT_PREFIX`] and then letters,
/// digits or `_`), values plain tokens.
fn parse_defines(text: &str) -> Result<Vec<(String, String)>> {
    let refuse = |item: &str, why: &str| {
        Err(Error::Unsupported(format!(
            "KERNELS_NVRTC_DEFINES: `{item}` {why} (only experiment switches named \
             {EXPERIMENT_PREFIX}*, as NAME or NAME=VALUE)"
        )))
    };
    let mut defines = Vec::new();
    for item in text.split_whitespace() {
        let (name, value) = match item.split_once('=') {
            Some((name, value)) => (name, value),
            None => (item, "1"),
        };
        let tail = name.strip_prefix(EXPERIMENT_PREFIX).unwrap_or("");
        if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return refuse(item, "is not an experiment switch");
        }
        if value.is_empty()
            || !value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-+".contains(&b))
        {
            return refuse(item, "has a value that is not a plain token");
        }
        if defines.iter().any(|(n, _): &(String, String)| n == name) {
            return refuse(item, "names a switch twice");
        }
        defines.push((name.to_string(), value.to_string()));
    }
    Ok(defines)
}

/// The complete translation unit handed to NVRTC for `CT_WORLD = world_spec`,
/// with the experiment switches of `KERNELS_NVRTC_DEFINES`.
pub fn kernel_source(world_spec: u32) -> Result<String> {
    Ok(source_with(world_spec, &experiment_defines()?))
}

fn source_with(world_spec: u32, experiments: &[(String, String)]) -> String {
    let mut source = cuda_prelude();
    source.push_str(&format!(
        "// World-size specialisation (0: generic) and its largest block.\n\
         #define CT_WORLD {world_spec}\n#define CT_MAX_THREADS {}\n",
        crate::protocol::max_threads(world_spec as usize)
    ));
    for (name, value) in experiments {
        source.push_str(&format!("#define {name} {value}\n"));
    }
    for (name, text) in SOURCES {
        source.push_str(&format!("\n// ---- kernels/cuda/{name} ----\n"));
        source.push_str(text);
    }
    source
}

/// The entry point of `kernel` for `collective` on `dtype`, or `None` when the
/// kernel has none for the collective (two-shot all-gather). All-gather
/// moves bits, so it has one entry per kernel.
pub fn entry_name(kernel: Kernel, collective: Collective, dtype: DType) -> Option<String> {
    if !kernel.serves(collective) {
        return None;
    }
    let name = kernel.name();
    Some(match collective {
        Collective::AllReduce => format!("colltune_{name}_all_reduce_{}", dtype.name()),
        Collective::AllGather => format!("colltune_{name}_all_gather"),
        Collective::AllReduceAddRmsNorm => {
            format!("colltune_{name}_all_reduce_add_rmsnorm_{}", dtype.name())
        }
    })
}

/// The add + RMSNorm kernel's entry point for `dtype`.
pub fn add_rmsnorm_entry(dtype: DType) -> String {
    format!("colltune_add_rmsnorm_{}", dtype.name())
}

/// Every entry point the sources must define.
pub fn entry_names() -> Vec<String> {
    let mut names: Vec<String> = DType::ALL.into_iter().map(add_rmsnorm_entry).collect();
    for kernel in Kernel::all() {
        for collective in Collective::ALL {
            for dtype in DType::ALL {
                if let Some(name) = entry_name(kernel, collective, dtype)
                    && !names.contains(&name)
                {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// The output of one NVRTC compile.
#[derive(Debug)]
pub struct CompiledKernels {
    /// The architecture the image was compiled for.
    pub arch: Arch,
    /// The `CT_WORLD` it was compiled with (0: generic).
    pub world_spec: u32,
    /// The real-architecture binary that is loaded.
    pub cubin: Vec<u8>,
    /// The intermediate PTX (kept for inspection and tests).
    pub ptx: String,
    /// NVRTC's log: warnings, among them the assembler's for spilled registers
    /// (`Registers are spilled to local memory in function '…'`); usually empty.
    pub log: String,
}

/// `sm_90` for 9.0, `sm_103` for 10.3: the NVRTC spelling of a real target.
pub fn nvrtc_target(arch: Arch) -> String {
    format!("sm_{}{}", arch.major, arch.minor)
}

/// Every option of the compile for `arch`, its target last.
fn nvrtc_options(arch: Arch) -> Vec<String> {
    NVRTC_OPTIONS
        .iter()
        .map(|option| option.to_string())
        .chain([format!("--gpu-architecture={}", nvrtc_target(arch))])
        .collect()
}

/// How a build's kernels were obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelOrigin {
    /// NVRTC compiled them for this request.
    Compiled,
    /// They were read from the disk cache ([`KernelCache`]).
    DiskCache,
    /// This process had them already (an earlier world, or another rank).
    Process,
    /// None were loaded: a world of processes whose ranks cannot all map
    /// each other's memory (another host, more ranks than the kernels
    /// serve) runs every call with NCCL and compiles nothing.
    NotLoaded,
}

impl KernelOrigin {
    /// One word for logs and CSV columns: `compiled`, `disk`, `process`, `none`.
    pub fn word(self) -> &'static str {
        match self {
            KernelOrigin::Compiled => "compiled",
            KernelOrigin::DiskCache => "disk",
            KernelOrigin::Process => "process",
            KernelOrigin::NotLoaded => "none",
        }
    }

    /// The origin as a phrase for messages ("read from the disk cache").
    pub fn describe(self) -> &'static str {
        match self {
            KernelOrigin::NotLoaded => "not loaded (every call runs NCCL)",
            KernelOrigin::Compiled => "compiled with NVRTC",
            KernelOrigin::DiskCache => "read from the disk cache",
            KernelOrigin::Process => "already in this process",
        }
    }
}

/// A build's kernels, ready to load, and what getting them cost.
#[derive(Clone, Debug)]
pub struct Obtained {
    /// The image: one per process and build, shared by every rank that asks
    /// for it.
    pub kernels: Arc<CompiledKernels>,
    /// Compiled, read from disk or already in this process.
    pub origin: KernelOrigin,
    /// From the request to the kernels in hand: the compile (and writing
    /// the cache entry), or reading the entry, or a lookup in this process;
    /// assembling the source and hashing the key included.
    pub took: Duration,
}

/// What a rank's kernels cost at start-up
/// ([`RankComm::kernel_startup`](crate::RankComm::kernel_startup)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelStartup {
    /// Where the image came from ([`KernelOrigin::NotLoaded`] when none was
    /// needed).
    pub origin: KernelOrigin,
    /// Getting the image (see [`Obtained::took`]).
    pub obtain: Duration,
    /// Loading it into the rank's context and finding its kernels
    /// (`cuModuleLoadData`, one lookup and one occupancy query per kernel).
    pub load: Duration,
}

impl KernelStartup {
    /// A world that loaded no kernels.
    pub fn not_loaded() -> KernelStartup {
        KernelStartup {
            origin: KernelOrigin::NotLoaded,
            obtain: Duration::ZERO,
            load: Duration::ZERO,
        }
    }
}

/// NVRTC compiles this process has run (what a warm cache saves).
pub fn nvrtc_compiles() -> u64 {
    NVRTC_COMPILES.load(Ordering::Relaxed)
}

static NVRTC_COMPILES: AtomicU64 = AtomicU64::new(0);

/// The kernels for `arch` and a world of `world` ranks: from this process's
/// memory, else from the disk cache `cache` names, else compiled with NVRTC
/// (and written to that cache). Needs NVRTC, not a GPU.
pub fn compile_for(arch: Arch, world: usize, cache: &KernelCache) -> Result<Obtained> {
    compile_specialisation(arch, world_specialisation(world), cache)
}

/// The build `CT_WORLD = world_spec` for `arch`, obtained like
/// [`compile_for`].
pub fn compile_specialisation(
    arch: Arch,
    world_spec: u32,
    cache: &KernelCache,
) -> Result<Obtained> {
    type Slot = Arc<Mutex<Option<Arc<CompiledKernels>>>>;
    /// A build and the cache folder it was asked for.
    type Build = (CacheKey, Option<PathBuf>);
    static MEMORY: OnceLock<Mutex<HashMap<Build, Slot>>> = OnceLock::new();
    let start = Instant::now();
    ffi::require_nvrtc()?;
    let source = kernel_source(world_spec)?;
    let options = nvrtc_options(arch);
    let key = CacheKey::new(&KeyInputs {
        crate_version: env!("CARGO_PKG_VERSION"),
        nvrtc_version: nvrtc_version(arch)?,
        options: &options,
        source: &source,
    });
    let folder = cache::folder(cache, |name| std::env::var_os(name)).unwrap_or_else(|why| {
        log::warn!("colltune: {why}; the kernel cache is off and every process compiles");
        None
    });
    // One slot per build and cache folder (a process that names another
    // folder reads that folder): the map's lock is held only to find the
    // slot, the slot's lock while obtaining, so concurrent first calls for
    // one build compile once and a build in hand never waits for another.
    let slot = MEMORY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry((key, folder.clone()))
        .or_default()
        .clone();
    let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let what = format!("kernels for {arch} (CT_WORLD {world_spec})");
    if let Some(hit) = &*slot {
        log::debug!("colltune: {what} already in this process");
        return Ok(Obtained {
            kernels: hit.clone(),
            origin: KernelOrigin::Process,
            took: start.elapsed(),
        });
    }
    let disk = folder
        .map(|dir| DiskCache::open(&dir))
        .transpose()
        .unwrap_or_else(|why| {
            log::warn!("colltune: {why}; the kernel cache is not used and every process compiles");
            None
        });
    let cached = disk.as_ref().and_then(|disk| match disk.load(&key) {
        Ok(found) => found,
        Err(why) => {
            log::info!("colltune: ignoring kernel cache entry {why}; compiling");
            None
        }
    });
    let (kernels, origin) = match cached {
        Some(Entry { cubin, ptx, log }) => {
            let kernels = CompiledKernels {
                arch,
                world_spec,
                cubin,
                ptx,
                log,
            };
            let took = start.elapsed().as_secs_f64();
            log::info!("colltune: {what} read from the kernel cache in {took:.3} s");
            (kernels, KernelOrigin::DiskCache)
        }
        None => {
            let kernels = compile_uncached(arch, world_spec, &source, &options)?;
            let saved = match &disk {
                None => "the disk cache is off".to_string(),
                Some(disk) => {
                    let entry = Entry {
                        cubin: kernels.cubin.clone(),
                        ptx: kernels.ptx.clone(),
                        log: kernels.log.clone(),
                    };
                    match disk.store(&key, &entry) {
                        Ok(path) => format!("cached as {}", path.display()),
                        Err(why) => format!("not cached: {why}"),
                    }
                }
            };
            let took = start.elapsed().as_secs_f64();
            log::info!("colltune: {what} compiled with NVRTC in {took:.3} s; {saved}");
            (kernels, KernelOrigin::Compiled)
        }
    };
    let kernels = Arc::new(kernels);
    *slot = Some(kernels.clone());
    Ok(Obtained {
        kernels,
        origin,
        took: start.elapsed(),
    })
}

/// NVRTC's (major, minor) version.
fn nvrtc_version(arch: Arch) -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; NVRTC is loaded (require_nvrtc).
    unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::Nvrtc {
            arch,
            message: format!("nvrtcVersion: {e:?}"),
            log: String::new(),
        })?;
    Ok((major, minor))
}

/// Destroys an NVRTC program when dropped, whatever happens in between.
struct Program(nvrtc_sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by create_program and destroyed only here.
        let _ = unsafe { nvrtc::destroy_program(self.0) };
    }
}

fn compile_uncached(
    arch: Arch,
    world_spec: u32,
    source: &str,
    options: &[String],
) -> Result<CompiledKernels> {
    NVRTC_COMPILES.fetch_add(1, Ordering::Relaxed);
    let nvrtc_error = |message: String, log: String| Error::Nvrtc { arch, message, log };
    let source = CString::new(source).expect("the kernel sources contain no NUL");
    let prog = Program(
        nvrtc::create_program(&source, Some(c"colltune_collectives.cu"))
            .map_err(|e| nvrtc_error(format!("nvrtcCreateProgram: {e:?}"), String::new()))?,
    );
    let target = options.last().expect("the target is the last option");

    // SAFETY: `prog` is live; options are plain strings.
    let compiled = unsafe { nvrtc::compile_program(prog.0, options) };
    // SAFETY: `prog` is live.
    let log = unsafe { nvrtc::get_program_log(prog.0) }
        .map(|raw| c_chars_to_string(&raw))
        .unwrap_or_default();
    if let Err(e) = compiled {
        return Err(nvrtc_error(
            format!(
                "nvrtcCompileProgram: {e:?} (options: {})",
                options.join(" ")
            ),
            log,
        ));
    }
    if let Some(line) = redefinition_warning(&log) {
        return Err(nvrtc_error(
            format!("a macro was redefined ({line}): host and device layouts could disagree"),
            log,
        ));
    }

    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; NVRTC writes the size, then the image.
    let cubin = unsafe {
        nvrtc_sys::nvrtcGetCUBINSize(prog.0, &mut size)
            .result()
            .map_err(|e| nvrtc_error(format!("nvrtcGetCUBINSize: {e:?}"), log.clone()))?;
        let mut image = vec![0u8; size];
        nvrtc_sys::nvrtcGetCUBIN(prog.0, image.as_mut_ptr().cast())
            .result()
            .map_err(|e| nvrtc_error(format!("nvrtcGetCUBIN: {e:?}"), log.clone()))?;
        image
    };
    if cubin.is_empty() {
        return Err(nvrtc_error(
            format!("no CUBIN for {target}: NVRTC produced only PTX"),
            log,
        ));
    }
    // SAFETY: `prog` compiled successfully.
    let ptx = unsafe { nvrtc::get_ptx(prog.0) }
        .map(|raw| c_chars_to_string(&raw))
        .map_err(|e| nvrtc_error(format!("nvrtcGetPTX: {e:?}"), log.clone()))?;
    Ok(CompiledKernels {
        arch,
        world_spec,
        cubin,
        ptx,
        log,
    })
}

/// The first line of an NVRTC log that warns of a redefined macro: the
/// protocol's constants are defines, and a second definition of one would
/// make the kernels' layout differ from the host's.
fn redefinition_warning(log: &str) -> Option<&str> {
    log.lines()
        .find(|line| line.contains("redefin"))
        .map(str::trim)
}

fn c_chars_to_string(raw: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    CStr::from_bytes_until_nul(&bytes)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned())
}

/// The kernels loaded into one context.
#[derive(Debug)]
pub struct KernelSet {
    functions: HashMap<String, CudaFunction>,
    /// The `CT_WORLD` of the build: launches are for worlds of this size only.
    world_spec: u32,
    /// Launch with programmatic dependent launch (sm_90 and later, when asked).
    programmatic: bool,
    /// Blocks of the heaviest kernel one SM holds at the loaded block size.
    blocks_per_sm: u32,
    /// That kernel, for messages.
    heaviest: String,
    /// What getting and loading them cost.
    startup: KernelStartup,
    _module: Arc<CudaModule>,
}

impl KernelSet {
    /// Loads the obtained kernels into `ctx` and measures how many blocks of
    /// `threads` threads of each kernel one SM holds (at least one, or this
    /// fails). `programmatic_launch` asks for programmatic dependent launch,
    /// which only sm_90 and later have (see
    /// [`Options::programmatic_launch`](crate::Options::programmatic_launch)).
    pub fn load(
        ctx: &Arc<CudaContext>,
        obtained: &Obtained,
        threads: u32,
        programmatic_launch: bool,
    ) -> Result<KernelSet> {
        let start = Instant::now();
        let compiled = &obtained.kernels;
        let module = ctx
            .load_module(Ptx::from_binary(compiled.cubin.clone()))
            .during("loading the collective kernels (cuModuleLoadData)")?;
        let mut functions = HashMap::new();
        let mut heaviest = (u32::MAX, String::new());
        for name in entry_names() {
            let function = module
                .load_function(&name)
                .during(&format!("finding kernel {name}"))?;
            let resident = function
                .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)
                .during("querying kernel occupancy")?;
            if resident == 0 {
                return Err(Error::Unsupported(format!(
                    "kernel {name} cannot run blocks of {threads} threads on this GPU"
                )));
            }
            if (resident as u32) < heaviest.0 {
                heaviest = (resident as u32, name.clone());
            }
            functions.insert(name, function);
        }
        Ok(KernelSet {
            functions,
            world_spec: compiled.world_spec,
            programmatic: programmatic_launch && compiled.arch >= Arch::SM90,
            blocks_per_sm: heaviest.0,
            heaviest: heaviest.1,
            startup: KernelStartup {
                origin: obtained.origin,
                obtain: obtained.took,
                load: start.elapsed(),
            },
            _module: module,
        })
    }

    /// What getting and loading these kernels cost.
    pub fn startup(&self) -> KernelStartup {
        self.startup
    }

    /// Blocks of the heaviest kernel one SM holds at once, and which kernel
    /// that is (what bounds co-residency: `protocol::launch`).
    pub fn blocks_per_sm(&self) -> (u32, &str) {
        (self.blocks_per_sm, &self.heaviest)
    }

    /// Whether launches use programmatic dependent launch.
    pub fn programmatic(&self) -> bool {
        self.programmatic
    }

    /// Whether these kernels were built for a world of `world` ranks.
    pub fn serves_world(&self, world: usize) -> bool {
        self.world_spec == world_specialisation(world)
    }

    /// The function for `kernel`/`collective`/`dtype`.
    pub fn function(
        &self,
        kernel: Kernel,
        collective: Collective,
        dtype: DType,
    ) -> Option<&CudaFunction> {
        entry_name(kernel, collective, dtype).and_then(|name| self.functions.get(&name))
    }

    /// The add + RMSNorm kernel for `dtype`.
    pub fn add_rmsnorm(&self, dtype: DType) -> Option<&CudaFunction> {
        self.functions.get(&add_rmsnorm_entry(dtype))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CUDA file of the add + RMSNorm kernel of the fused collective's
    /// unfused path: a kernel of no algorithm, which communicates nothing.
    const ADD_RMSNORM_FILE: &str = "add_rmsnorm.cu";

    /// Whether `text` defines the kernel `entry` (kernels/cuda/common.cu
    /// has two spellings of a kernel's declaration).
    fn defines_entry(text: &str, entry: &str) -> bool {
        ["CT_KERNEL", "CT_KERNEL_ONE_BLOCK"]
            .iter()
            .any(|macro_name| text.contains(&format!("{macro_name} {entry}(")))
    }

    #[test]
    fn entry_points_spell_the_schemas_names() {
        let names = entry_names();
        // Per kernel: three all-reduces, an all-gather where it gathers and
        // three fused all-reduces where it fuses; and the add + RMSNorm
        // kernel's three.
        let expected: usize = 3 + Kernel::all()
            .map(|k| {
                3 + k.serves(Collective::AllGather) as usize
                    + 3 * k.serves(Collective::AllReduceAddRmsNorm) as usize
            })
            .sum::<usize>();
        assert_eq!(names.len(), expected, "{names:?}");
        assert!(names.contains(&"colltune_two_shot_pull_all_reduce_bf16".to_string()));
        assert!(names.contains(&"colltune_one_shot_pull_all_gather".to_string()));
        assert!(names.contains(&"colltune_two_shot_push_all_reduce_f16".to_string()));
        assert!(names.contains(&"colltune_reference_all_gather".to_string()));
        assert!(!names.iter().any(|n| n.contains("two_shot_pull_all_gather")));
        assert!(!names.iter().any(|n| n.contains("two_shot_push_all_gather")));
        assert!(names.contains(&"colltune_one_shot_push_all_reduce_add_rmsnorm_bf16".to_string()));
        assert!(names.contains(&"colltune_two_shot_push_all_reduce_add_rmsnorm_f32".to_string()));
        assert!(names.contains(&"colltune_add_rmsnorm_f16".to_string()));
        // The loopback reference stands in for NCCL, which has no fused call.
        assert!(!names.iter().any(|n| n.contains("reference_all_reduce_add")));
    }

    #[test]
    fn every_kernel_has_its_own_cuda_file_and_every_file_a_kernel() {
        let files: Vec<&str> = SOURCES.iter().map(|(name, _)| *name).collect();
        assert_eq!(&files[..2], ["common.cu", "prims.cu"]);
        for kernel in Kernel::all() {
            let file = format!("{}.cu", kernel.name());
            let text = SOURCES
                .iter()
                .find(|(name, _)| *name == file)
                .unwrap_or_else(|| panic!("no kernels/cuda/{file}"))
                .1;
            // Its entry points live in its own file.
            for collective in Collective::ALL {
                for dtype in DType::ALL {
                    if let Some(entry) = entry_name(kernel, collective, dtype) {
                        assert!(defines_entry(text, &entry), "{entry} is not in {file}");
                    }
                }
            }
        }
        for file in &files[2..] {
            assert!(
                Kernel::all().any(|k| format!("{}.cu", k.name()) == *file)
                    || *file == ADD_RMSNORM_FILE,
                "kernels/cuda/{file} belongs to no kernel of the registry"
            );
        }
        // The add + RMSNorm kernel's entry points live in its own file.
        let text = SOURCES
            .iter()
            .find(|(name, _)| *name == ADD_RMSNORM_FILE)
            .expect("kernels/cuda/add_rmsnorm.cu")
            .1;
        for dtype in DType::ALL {
            let entry = add_rmsnorm_entry(dtype);
            assert!(defines_entry(text, &entry), "{entry}");
        }
    }

    #[test]
    fn experiment_defines_take_a_name_or_a_name_and_value() {
        assert_eq!(
            parse_defines(" CT_EXP_A  CT_EXP_B=64\n").unwrap(),
            vec![
                ("CT_EXP_A".to_string(), "1".to_string()),
                ("CT_EXP_B".to_string(), "64".to_string())
            ]
        );
        assert!(parse_defines("").unwrap().is_empty());
    }

    #[test]
    fn only_experiment_switches_may_be_defined() {
        // A layout constant would change the device's CollArgs or control
        // block behind the host's back.
        for bad in [
            "CT_MAX_WORLD=4",
            "CT_SENTINEL=0",
            "FOO",
            "CT_EXP_",
            "CT_EXP_A=",
            "CT_EXP_A=1;int",
            "CT_EXP_A CT_EXP_A=2",
            "ct_exp_a",
        ] {
            let err = parse_defines(bad).unwrap_err().to_string();
            assert!(err.contains("KERNELS_NVRTC_DEFINES"), "{bad}: {err}");
        }
        // None of the protocol's own defines is an experiment switch.
        for line in cuda_prelude().lines() {
            if let Some(rest) = line.strip_prefix("#define ") {
                assert!(!rest.starts_with(EXPERIMENT_PREFIX), "{line}");
            }
        }
    }

    #[test]
    fn a_redefinition_warning_is_found() {
        let log = "colltune_collectives.cu(12): warning #47-D: incompatible redefinition of \
                   macro \"CT_MAX_WORLD\"";
        assert!(redefinition_warning(log).unwrap().contains("CT_MAX_WORLD"));
        assert_eq!(redefinition_warning(""), None);
        assert_eq!(
            redefinition_warning("ptxas info: 0 bytes spill stores"),
            None
        );
    }

    #[test]
    fn every_entry_point_is_defined_in_the_sources() {
        let source = source_with(0, &[]);
        for name in entry_names() {
            assert!(
                defines_entry(&source, &name),
                "{name} is not defined in kernels/cuda"
            );
        }
    }

    #[test]
    fn the_sources_need_no_header() {
        assert!(!source_with(0, &[]).contains("#include"));
    }

    #[test]
    fn worlds_of_two_to_eight_are_specialised() {
        assert_eq!(world_specialisation(1), 0);
        for w in 2..=8 {
            assert_eq!(world_specialisation(w), w as u32);
            assert!(source_with(w as u32, &[]).contains(&format!("#define CT_WORLD {w}\n")));
        }
        assert_eq!(world_specialisation(9), 0);
        assert_eq!(world_specialisations(), [0, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn targets_are_real_architectures() {
        assert_eq!(nvrtc_target(Arch::SM90), "sm_90");
        assert_eq!(nvrtc_target(Arch::from_compute_capability(10, 3)), "sm_103");
    }
}
