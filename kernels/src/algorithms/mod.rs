//! The launch of a collective kernel, and of the add + RMSNorm kernel of the
//! unfused path. It takes device pointers the communicator already checked
//! and fills the per-call fields of [`CollArgs`]; nothing here decides or
//! validates. Every kernel of a rank launches the same grid
//! ([`LaunchShape::grid`]): the kernels size their own work from the message
//! (kernels/cuda/*.cu). Blocks have the rank's size, except for a call with
//! rows, whose blocks have as many threads as its rows need, laid out by
//! [`row_launch`] (the kernels read that layout from their arguments).

pub mod args;

pub use args::CollArgs;

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};

use crate::error::{DriverContext, Error, Result};
use crate::module::KernelSet;
use crate::protocol::PACK_BYTES;
use crate::protocol::launch::LaunchShape;
use crate::protocol::registry::Kernel;
use crate::protocol::rows::row_launch;
use crate::protocol::signature::{CallSignature, Placement};
use crate::vocab::{Algo, Collective, DType};

/// One call, as the launch wrappers see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub collective: Collective,
    pub dtype: DType,
    pub input: u64,
    pub output: u64,
    /// Bytes each rank contributes (all-gather: one share).
    pub bytes_per_rank: u64,
    /// Where the call runs: part of its signature, and where NCCL on a
    /// window runs it (`comm/symmetric.rs`).
    pub placement: Placement,
    /// The fused all-reduce + add + RMSNorm's other tensors; `None` for the
    /// other collectives.
    pub norm: Option<RowNorm>,
}

/// What a call of the fused all-reduce + add + RMSNorm (or of the add +
/// RMSNorm kernel of its unfused path) takes besides input and output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowNorm {
    /// Read, then written with the new residual.
    pub residual: u64,
    /// `hidden` elements.
    pub weight: u64,
    /// Elements of a row.
    pub hidden: u32,
    pub eps: f32,
}

impl Call {
    fn io_aligned(&self) -> bool {
        let norm = self.norm.map_or([0, 0], |n| [n.residual, n.weight]);
        [self.input, self.output]
            .into_iter()
            .chain(norm)
            .all(|ptr| ptr.is_multiple_of(PACK_BYTES))
    }

    /// The per-call fields of the kernels' argument block.
    fn args(&self, base: &CollArgs, call_sig: u64) -> CollArgs {
        let norm = self.norm.unwrap_or(RowNorm {
            residual: 0,
            weight: 0,
            hidden: 0,
            eps: 0.0,
        });
        CollArgs {
            input: self.input,
            output: self.output,
            bytes: self.bytes_per_rank,
            call_sig,
            io_aligned: self.io_aligned() as u32,
            residual: norm.residual,
            weight: norm.weight,
            hidden: norm.hidden,
            eps_bits: norm.eps.to_bits(),
            ..*base
        }
    }
}

/// Launches `kernel` for `call` on `stream`. The call's signature is its
/// shape plus its placement.
pub(crate) fn launch(
    kernels: &KernelSet,
    kernel: Kernel,
    stream: &CudaStream,
    shape: LaunchShape,
    base: &CollArgs,
    call: &Call,
) -> Result<()> {
    if !kernels.serves_world(base.world as usize) {
        return Err(Error::Unsupported(format!(
            "kernels built for another world size launched for a world of {}",
            base.world
        )));
    }
    let function = kernels
        .function(kernel, call.collective, call.dtype)
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "no {} kernel for {}",
                kernel.name(),
                call.collective.name()
            ))
        })?;
    let call_sig = CallSignature {
        kernel,
        collective: call.collective,
        dtype: call.dtype,
        bytes_per_rank: call.bytes_per_rank,
        hidden: call.norm.map_or(0, |n| n.hidden),
    }
    .encode()
        | call.placement.bits();
    // The fused one-shot's handshake lanes get a warp of their own
    // (row_launch): they check their peers' calls before their waits for
    // data, and holding rows they held up the rows' barrier.
    let lanes_warp = kernel == Kernel::Algo(Algo::OneShotPush) && base.world >= 2;
    launch_args(
        kernels,
        function,
        stream,
        shape,
        call,
        &call.args(base, call_sig),
        lanes_warp,
    )
}

/// Launches the add + RMSNorm kernel of the fused collective's unfused path
/// for `call` (its input the all-reduced sums) on `stream`. It waits for
/// nobody and has no call signature: its rank's all-reduce, just before it on
/// the stream, made the handshake. It launches the rank's one grid too, so
/// that what the launch shape bounds (the blocks resident at once) holds with
/// it in the stream.
pub(crate) fn launch_add_rmsnorm(
    kernels: &KernelSet,
    stream: &CudaStream,
    shape: LaunchShape,
    base: &CollArgs,
    call: &Call,
) -> Result<()> {
    let function = kernels.add_rmsnorm(call.dtype).ok_or_else(|| {
        Error::Unsupported(format!("no add + RMSNorm kernel for {}", call.dtype.name()))
    })?;
    launch_args(
        kernels,
        function,
        stream,
        shape,
        call,
        &call.args(base, 0),
        false,
    )
}

/// Launches `function` with `args` on the rank's grid: blocks of the rank's
/// size, or for a call with rows as many threads as its rows need (and a
/// warp for its handshake lanes if `lanes_warp`), and the rows' layout in
/// the arguments ([`row_launch`]).
fn launch_args(
    kernels: &KernelSet,
    function: &cudarc::driver::CudaFunction,
    stream: &CudaStream,
    shape: LaunchShape,
    call: &Call,
    args: &CollArgs,
    lanes_warp: bool,
) -> Result<()> {
    let mut args = *args;
    let threads = match call.norm {
        Some(norm) => {
            let row_bytes = (u64::from(norm.hidden) * call.dtype.size_bytes()).max(1);
            let rows = call.bytes_per_rank / row_bytes;
            let layout = row_launch(
                row_bytes / PACK_BYTES,
                rows,
                shape.grid(),
                shape.threads,
                lanes_warp,
            );
            args.rows = u32::try_from(rows).map_err(|_| {
                Error::Unsupported(format!("{rows} rows in one call: at most {} are", u32::MAX))
            })?;
            args.row_group = layout.group;
            args.row_groups = layout.groups;
            layout.threads
        }
        None => shape.threads,
    };
    let config = LaunchConfig {
        grid_dim: (shape.grid(), 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    if kernels.programmatic() {
        return launch_programmatic(function, stream, config, &args);
    }
    let mut builder = stream.launch_builder(function);
    builder.arg(&args);
    // SAFETY: the kernel takes exactly one CollArgs by value; every pointer in it
    // is a live registered buffer or a tensor the communicator checked, and the
    // grid respects the kernels' launch bounds.
    unsafe { builder.launch(config) }
        .map(|_| ())
        .during("launching a collective kernel")
}

/// Launches with the programmatic-stream-serialisation attribute (programmatic
/// dependent launch, sm_90+): the kernel may start before the previous kernel
/// in the stream has finished, and holds at its first instruction
/// (`griddepcontrol.wait`, kernels/cuda/prims.cu) until that kernel has
/// completed and flushed its writes. cudarc's builder has no launch attributes,
/// so this goes through `cuLaunchKernelEx` directly. Stream capture records it
/// as a programmatic edge of the graph.
fn launch_programmatic(
    function: &cudarc::driver::CudaFunction,
    stream: &CudaStream,
    config: LaunchConfig,
    args: &CollArgs,
) -> Result<()> {
    use cudarc::driver::sys;
    stream
        .context()
        .bind_to_thread()
        .during("binding the rank's context for a launch")?;
    // SAFETY: an all-zero launch attribute is a valid value of the C union.
    let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    let launch = sys::CUlaunchConfig {
        gridDimX: config.grid_dim.0,
        gridDimY: config.grid_dim.1,
        gridDimZ: config.grid_dim.2,
        blockDimX: config.block_dim.0,
        blockDimY: config.block_dim.1,
        blockDimZ: config.block_dim.2,
        sharedMemBytes: config.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attribute,
        numAttrs: 1,
    };
    let mut params = [args as *const CollArgs as *mut std::ffi::c_void];
    // SAFETY: `function` belongs to the context bound above and takes exactly
    // one CollArgs by value, which `params` points to for the duration of the
    // call (the driver copies kernel parameters at launch); every pointer in the
    // arguments is a live registered buffer or a tensor the communicator
    // checked, and the grid respects the kernels' launch bounds.
    unsafe {
        sys::cuLaunchKernelEx(
            &launch,
            function.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .during("launching a collective kernel (cuLaunchKernelEx)")
}
