//! The collectives of a rank: check the arguments, pick the algorithm, decline
//! to the collective's fallback when a custom kernel cannot take the call,
//! launch. The fused all-reduce + add + RMSNorm's fallback is itself two calls
//! (the unfused path): the all-reduce its own table picks, then the add +
//! RMSNorm kernel.

use std::collections::HashSet;
use std::sync::Mutex;

use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice};

use super::options::{Fallback, Select};
use super::rank::RankComm;
use crate::algorithms::{self, Call, RowNorm};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::protocol::decline::{CallShape, Decline, WorldOffer, decline};
use crate::protocol::registry::Kernel;
use crate::protocol::rows::rows_of;
use crate::protocol::signature::Placement;
use crate::vocab::{Algo, AlgoKind, Collective, DType, Mode, Query};

impl RankComm {
    /// Sums `input` over all ranks into `output` (same length). Returns the
    /// algorithm that ran: a declined custom algorithm reports `Nccl` (see
    /// [`RankComm::fallback_kind`] for what that means in this world).
    ///
    /// `input` and `output` must not overlap (use
    /// [`RankComm::all_reduce_in_place`] for that). Both may be views at any
    /// element offset. The dtype is `T` on both sides by construction. Every
    /// rank must pass the same `T` and length, as with NCCL: the custom
    /// kernels check it (block 0's handshake), and ranks whose calls differ
    /// get [`Error::Mismatch`](crate::error::Error::Mismatch) naming both calls; NCCL
    /// cannot tell.
    ///
    /// `how` is [`Select::Auto`] unless the engine forces something: the
    /// tables pick for the mode the call is issued in (graph while this
    /// rank's stream is being captured). The same holds for every collective.
    pub fn all_reduce<T: Element>(
        &self,
        input: &CudaView<T>,
        output: &mut CudaViewMut<T>,
        how: Select,
    ) -> Result<Algo> {
        let _turn = self.turn("all_reduce")?;
        if input.len() != output.len() {
            return Err(Error::Mismatch(format!(
                "all_reduce on rank {}: input has {} elements, output {}",
                self.rank,
                input.len(),
                output.len()
            )));
        }
        self.same_device(input.stream().context(), "input")?;
        self.same_device(output.stream().context(), "output")?;
        let bytes = byte_len::<T>(input.len());
        let stream = self.res.stream.clone();
        let (src, _reading) = input.device_ptr(&stream);
        let (dst, _writing) = output.device_ptr_mut(&stream);
        self.run(
            Request::new(Collective::AllReduce, T::DTYPE, bytes, src, dst),
            how,
        )
    }

    /// In-place all-reduce of `buffer`.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buffer: &mut CudaViewMut<T>,
        how: Select,
    ) -> Result<Algo> {
        let _turn = self.turn("all_reduce_in_place")?;
        self.reduce_in_place(buffer, how, Placement::Anywhere)
    }

    /// In-place all-reduce of `buffer`, a call placed `placement`, in the
    /// caller's turn.
    pub(super) fn reduce_in_place<T: Element>(
        &self,
        buffer: &mut CudaViewMut<T>,
        how: Select,
        placement: Placement,
    ) -> Result<Algo> {
        self.same_device(buffer.stream().context(), "buffer")?;
        let bytes = byte_len::<T>(buffer.len());
        let stream = self.res.stream.clone();
        let (ptr, _writing) = buffer.device_ptr_mut(&stream);
        let request = Request::new(Collective::AllReduce, T::DTYPE, bytes, ptr, ptr);
        self.run(request.placed(placement), how)
    }

    /// Gathers every rank's `input` into `output` in rank order
    /// (`output.len() == world_size * input.len()`).
    pub fn all_gather<T: Element>(
        &self,
        input: &CudaView<T>,
        output: &mut CudaViewMut<T>,
        how: Select,
    ) -> Result<Algo> {
        let _turn = self.turn("all_gather")?;
        if output.len() != input.len() * self.world_size {
            return Err(Error::Mismatch(format!(
                "all_gather on rank {}: output has {} elements, expected world size {} x input {}",
                self.rank,
                output.len(),
                self.world_size,
                input.len()
            )));
        }
        self.same_device(input.stream().context(), "input")?;
        self.same_device(output.stream().context(), "output")?;
        let bytes = byte_len::<T>(output.len());
        let stream = self.res.stream.clone();
        let (src, _reading) = input.device_ptr(&stream);
        let (dst, _writing) = output.device_ptr_mut(&stream);
        self.run(
            Request::new(Collective::AllGather, T::DTYPE, bytes, src, dst),
            how,
        )
    }

    /// In-place all-gather: this rank's share already sits at its place in
    /// `buffer` (elements `rank * n .. (rank + 1) * n`, `n = len / world_size`),
    /// as with NCCL.
    pub fn all_gather_in_place<T: Element>(
        &self,
        buffer: &mut CudaViewMut<T>,
        how: Select,
    ) -> Result<Algo> {
        let what = "all_gather_in_place";
        let _turn = self.turn(what)?;
        self.gather_in_place(buffer, how, Placement::Anywhere, what)
    }

    /// In-place all-gather into `buffer`, a call of `what` placed
    /// `placement`, in the caller's turn.
    pub(super) fn gather_in_place<T: Element>(
        &self,
        buffer: &mut CudaViewMut<T>,
        how: Select,
        placement: Placement,
        what: &str,
    ) -> Result<Algo> {
        if !buffer.len().is_multiple_of(self.world_size) {
            return Err(Error::Mismatch(format!(
                "{what} on rank {}: {} elements do not split into {} shares",
                self.rank,
                buffer.len(),
                self.world_size
            )));
        }
        self.same_device(buffer.stream().context(), "buffer")?;
        let bytes = byte_len::<T>(buffer.len());
        let share = Collective::AllGather.per_rank_size(self.world_size as u64, bytes);
        let stream = self.res.stream.clone();
        let (ptr, _writing) = buffer.device_ptr_mut(&stream);
        let src = ptr + self.rank as u64 * share;
        let request = Request::new(Collective::AllGather, T::DTYPE, bytes, src, ptr);
        self.run(request.placed(placement), how)
    }

    /// Sums `input` over all ranks, adds `residual` and normalises each row:
    /// the all-reduce of a row-parallel projection with the residual add and
    /// the RMSNorm that follow it in a decoder, one call. `input` (this rank's
    /// partial sums), `residual` and `output` hold `tokens × hidden` elements,
    /// `weight` the norm's `hidden` (a multiple of [`HIDDEN_STEP`] in
    /// [`HIDDEN_MIN`]`..=`[`HIDDEN_MAX`]). Every rank ends with
    ///
    /// - `residual` ← `x = Σ_ranks input + residual`, and
    /// - `output` ← `x / sqrt(mean(x²) + eps) × weight`, each row's mean
    ///   over its `hidden` elements,
    ///
    /// summed in f32 (ranks in order, then the residual) and rounded once to
    /// `T`; the norm is taken of the rounded `x` (what the residual holds),
    /// in f32, and rounded once. Every rank passes the same residual and
    /// weight, as a tensor-parallel decoder holds them (a rank's result may
    /// use a peer's copy of its rows), and gets the same bits.
    ///
    /// The tables of [`Collective::AllReduceAddRmsNorm`] pick a fused kernel
    /// (`one_shot_push`, `two_shot_push`) or the unfused path
    /// ([`Algo::Unfused`]: the all-reduce the all-reduce table picks for the
    /// size, into `output`, then an add + RMSNorm kernel), which also runs
    /// every call a fused kernel declines. [`Select::Force`] of an algorithm
    /// that has no fused kernel runs the unfused path, whose all-reduce then
    /// comes from the tables of the mode the call is issued in;
    /// [`Select::Unfused`] runs it with the all-reduce it names. In a world
    /// of one the unfused path is the add + RMSNorm kernel alone, on the
    /// input. Returns the algorithm that ran (the unfused path reports
    /// [`Algo::Unfused`]).
    ///
    /// A shape that does not fit (the lengths, `tokens × hidden`, the hidden
    /// size, an `eps` that is not finite and ≥ 0) is [`Error::Mismatch`]
    /// before anything runs (the rank stays usable); the dtype is `T` on every
    /// tensor by construction. A world that loaded no kernels (NCCL-only: see
    /// [`RankComm::kernel_startup`]) has no add + RMSNorm kernel and refuses
    /// the call with [`Error::Unsupported`], also before anything runs.
    /// Ranks whose calls differ get [`Error::Mismatch`] where a fused kernel
    /// runs, as for the other collectives (the hidden size is part of the
    /// call); the unfused path checks what its all-reduce checks. A call that
    /// fails is an error, and a fused kernel leaves no word of `output` or of
    /// `residual` stale: each is the result or marked (all bits set); when
    /// the unfused path's all-reduce is NCCL, its failure is the error but
    /// the outputs hold what the norm made of NCCL's output (kernels/GPU.md,
    /// "The fused all-reduce + add + RMSNorm").
    ///
    /// [`HIDDEN_STEP`]: crate::HIDDEN_STEP
    /// [`HIDDEN_MIN`]: crate::HIDDEN_MIN
    /// [`HIDDEN_MAX`]: crate::HIDDEN_MAX
    pub fn all_reduce_add_rmsnorm<T: Element>(
        &self,
        input: &CudaView<T>,
        residual: &mut CudaViewMut<T>,
        weight: &CudaView<T>,
        eps: f32,
        output: &mut CudaViewMut<T>,
        how: Select,
    ) -> Result<Algo> {
        let what = "all_reduce_add_rmsnorm";
        let _turn = self.turn(what)?;
        let norm = self.norm_args(what, input.len(), residual, weight, eps, output.len())?;
        self.same_device(input.stream().context(), "input")?;
        self.same_device(output.stream().context(), "output")?;
        let bytes = byte_len::<T>(input.len());
        let stream = self.res.stream.clone();
        let (src, _reading) = input.device_ptr(&stream);
        let (weight, _reading_weight) = weight.device_ptr(&stream);
        let (residual, _writing_residual) = residual.device_ptr_mut(&stream);
        let (dst, _writing) = output.device_ptr_mut(&stream);
        let request = Request::new(Collective::AllReduceAddRmsNorm, T::DTYPE, bytes, src, dst);
        self.run(request.with_norm(norm.at(residual, weight)), how)
    }

    /// [`RankComm::all_reduce_add_rmsnorm`] with the output written over the
    /// input: `buffer` holds this rank's partial sums and ends with the
    /// normalised rows (as a decoder that no longer needs the partial sums
    /// calls it).
    pub fn all_reduce_add_rmsnorm_in_place<T: Element>(
        &self,
        buffer: &mut CudaViewMut<T>,
        residual: &mut CudaViewMut<T>,
        weight: &CudaView<T>,
        eps: f32,
        how: Select,
    ) -> Result<Algo> {
        let what = "all_reduce_add_rmsnorm_in_place";
        let _turn = self.turn(what)?;
        let norm = self.norm_args(what, buffer.len(), residual, weight, eps, buffer.len())?;
        self.same_device(buffer.stream().context(), "buffer")?;
        let bytes = byte_len::<T>(buffer.len());
        let stream = self.res.stream.clone();
        let (weight, _reading_weight) = weight.device_ptr(&stream);
        let (residual, _writing_residual) = residual.device_ptr_mut(&stream);
        let (ptr, _writing) = buffer.device_ptr_mut(&stream);
        let request = Request::new(Collective::AllReduceAddRmsNorm, T::DTYPE, bytes, ptr, ptr);
        self.run(request.with_norm(norm.at(residual, weight)), how)
    }

    /// The checks a fused call makes before anything runs: its shape, its
    /// residual's and weight's device, and that this world has the kernels.
    fn norm_args<T: Element>(
        &self,
        what: &str,
        input: usize,
        residual: &CudaViewMut<T>,
        weight: &CudaView<T>,
        eps: f32,
        output: usize,
    ) -> Result<NormShape> {
        let rows = rows_of(input, residual.len(), output, weight.len(), eps)
            .map_err(|why| Error::Mismatch(format!("{what} on rank {}: {why}", self.rank)))?;
        self.same_device(residual.stream().context(), "residual")?;
        self.same_device(weight.stream().context(), "weight")?;
        if self.res.kernels.is_none() {
            return Err(Error::Unsupported(format!(
                "{what} on rank {}: this world loaded no kernels (every call runs NCCL), so it \
                 has no add + RMSNorm kernel",
                self.rank
            )));
        }
        Ok(NormShape {
            hidden: rows.hidden as u32,
            eps,
        })
    }

    /// Whether a forced `algo` would decline a call of `bytes` (output bytes).
    /// `None` when it would run. A collective's fallback never declines its
    /// own collective.
    pub fn would_decline(&self, collective: Collective, algo: Algo, bytes: u64) -> Option<Decline> {
        self.decline(&CallShape::new(collective, algo, self.world_size, bytes))
    }

    fn decline(&self, shape: &CallShape) -> Option<Decline> {
        let shared = &self.res.shared;
        decline(
            shape,
            &WorldOffer {
                caps: &shared.caps,
                plan: shared.registration.plan(),
                peer_access: shared.peer_access,
                window_bytes: shared.window_bytes,
            },
        )
    }

    /// What `algo` takes for `collective` in this world (what the registered
    /// buffers were sized for): its platform capacity from `policy`, lowered
    /// to what the tables in use select here and to what the memory budget
    /// allows (`Options::buffers`, `Options::memory_budget`).
    pub fn capacity(&self, collective: Collective, algo: Algo) -> crate::vocab::Capacity {
        self.res.shared.caps.of(collective, algo)
    }

    /// The algorithm `policy` picks for a call, before declines.
    pub fn policy_choice(
        &self,
        collective: Collective,
        dtype: DType,
        mode: Mode,
        bytes: u64,
    ) -> Algo {
        self.selector
            .select(self.query(collective, dtype, mode, bytes))
    }

    fn query(&self, collective: Collective, dtype: DType, mode: Mode, bytes: u64) -> Query {
        Query::new(
            collective,
            self.arch,
            self.link,
            self.world_size as u32,
            dtype,
            mode,
            bytes,
        )
    }

    fn same_device(&self, ctx: &cudarc::driver::CudaContext, what: &str) -> Result<()> {
        if ctx.cu_ctx() == self.res.stream.context().cu_ctx() {
            Ok(())
        } else {
            Err(Error::Mismatch(format!(
                "rank {} runs in a context of GPU {} but its {what} belongs to another context \
                 (of GPU {})",
                self.rank,
                self.res.stream.context().ordinal(),
                ctx.ordinal()
            )))
        }
    }

    /// Picks, declines, launches, in the caller's turn (every entry point
    /// takes it first, so that a call refused with [`Error::Busy`] has done
    /// nothing, not even recorded a tensor's event on the stream). Refuses at
    /// once on a rank that knows of a fault; a launch that fails breaks the
    /// world (the peers would wait for this rank's part).
    fn run(&self, request: Request, how: Select) -> Result<Algo> {
        self.known_fault()?;
        if request.bytes == 0 {
            // Nothing moves; every rank returns without launching.
            return Ok(request.collective.fallback());
        }
        self.choose(&request, how)
            .and_then(|algo| {
                self.bound_in_flight()?;
                self.issue(algo, &request, how)
            })
            .map_err(|e| self.res.health.fail(e))
    }

    /// The algorithm `how` picks for `request`. [`Select::Auto`] asks
    /// whether the stream is being captured (one driver query); the others
    /// ask nothing.
    fn choose(&self, request: &Request, how: Select) -> Result<Algo> {
        let mode = match how {
            Select::Force(algo) => return Ok(algo),
            Select::Unfused(_) if request.collective == Collective::AllReduceAddRmsNorm => {
                return Ok(Algo::Unfused);
            }
            Select::Unfused(algo) => return Ok(algo),
            Select::Policy(mode) => mode,
            Select::Auto if crate::drain::capturing(&self.res.stream)? => Mode::Graph,
            Select::Auto => Mode::Eager,
        };
        Ok(self.policy_choice(request.collective, request.dtype, mode, request.bytes))
    }

    /// Runs `algo` for `request`, or the collective's fallback where it
    /// declines. `how` is what the call was issued with: the unfused path
    /// picks its all-reduce by it.
    fn issue(&self, algo: Algo, request: &Request, how: Select) -> Result<Algo> {
        let &Request {
            collective,
            dtype,
            bytes,
            placement,
            input,
            output,
            norm,
        } = request;
        // The call's per-rank size and registry entry, worked out once.
        let shape = CallShape::new(collective, algo, self.world_size, bytes);
        let call = Call {
            collective,
            dtype,
            input,
            output,
            bytes_per_rank: shape.bytes_per_rank,
            placement,
            norm,
        };
        let runs = match self.decline(&shape) {
            None => algo,
            Some(reason) => {
                self.log_decline(collective, algo, dtype, bytes, reason);
                collective.fallback()
            }
        };
        match runs.kind() {
            AlgoKind::Kernel => self.launch_custom(runs, &call).map(|()| runs),
            AlgoKind::Window => self.run_on_window(&call).map(|()| runs),
            AlgoKind::Library => self.run_fallback(&call).map(|()| Algo::Nccl),
            AlgoKind::Composite => self.run_unfused(request, how).map(|()| runs),
        }
    }

    /// The fused collective's unfused path: the all-reduce of `request`'s
    /// input into its output, picked by the all-reduce tables of the mode
    /// `how` says (the capture status where it forces an algorithm, which is
    /// the fused call's; the one `Select::Unfused` names), declining as any
    /// all-reduce; then the add + RMSNorm kernel on the sums, in place on the
    /// output. A world of one has nothing to sum: the kernel reads the input.
    fn run_unfused(&self, request: &Request, how: Select) -> Result<()> {
        let Some(norm) = request.norm else {
            return Err(Error::Unsupported(format!(
                "the unfused path runs all_reduce_add_rmsnorm only, not {}",
                request.collective.name()
            )));
        };
        let sums = if self.world_size == 1 {
            request.input
        } else {
            let sum = Request {
                collective: Collective::AllReduce,
                norm: None,
                ..*request
            };
            let how = match how {
                Select::Force(_) => Select::Auto,
                Select::Unfused(all_reduce) => Select::Force(all_reduce),
                chosen => chosen,
            };
            let all_reduce = self.choose(&sum, how)?;
            self.issue(all_reduce, &sum, how)?;
            request.output
        };
        let call = Call {
            collective: request.collective,
            dtype: request.dtype,
            input: sums,
            output: request.output,
            bytes_per_rank: request.bytes,
            placement: request.placement,
            norm: Some(norm),
        };
        algorithms::launch_add_rmsnorm(
            self.kernels()?,
            &self.res.stream,
            self.shape,
            &self.base_args,
            &call,
        )
    }

    /// Before a call is queued: at most `drain::EAGER_IN_FLIGHT` of this
    /// rank's calls may be queued and not finished (`drain::InFlight`). The
    /// wait for the oldest is bounded by `Options::drain_timeout` and ended
    /// early by any fault that becomes known; past the bound the call is a
    /// timeout (a kernel that never ends holds the stream: a launch behind
    /// it could block in the driver for ever).
    fn bound_in_flight(&self) -> Result<()> {
        let res = &self.res;
        let limit = res.options.drain_timeout;
        if self
            .in_flight
            .before_call(&res.stream, limit, || res.known_fault())?
        {
            return Ok(());
        }
        Err(Error::Timeout {
            rank: self.rank,
            peer: None,
            during: format!(
                "waiting for the call {} calls back to finish before queuing another (host \
                 side: NCCL or other work that never finished holds the stream)",
                crate::drain::EAGER_IN_FLIGHT
            ),
            timeout: limit,
        })
    }

    /// The rank's kernels; a world that loaded none (NCCL-only) declines
    /// every custom call before it gets here.
    fn kernels(&self) -> Result<&crate::module::KernelSet> {
        self.res.kernels.as_deref().ok_or_else(|| {
            Error::Unsupported("this world loaded no kernels: every call runs NCCL".into())
        })
    }

    fn launch_custom(&self, algo: Algo, call: &Call) -> Result<()> {
        algorithms::launch(
            self.kernels()?,
            Kernel::Algo(algo),
            &self.res.stream,
            self.shape,
            &self.base_args,
            call,
        )
    }

    fn run_fallback(&self, call: &Call) -> Result<()> {
        let stream = &self.res.stream;
        match (self.res.shared.fallback, &self.res.nccl) {
            (Fallback::Nccl, Some(nccl)) => {
                // NCCL launches through the runtime API on the current device.
                stream
                    .context()
                    .bind_to_thread()
                    .map_err(|e| Error::driver("binding the rank's context for NCCL", e))?;
                let element = call.dtype.size_bytes();
                let count = (call.bytes_per_rank / element) as usize;
                match call.collective {
                    Collective::AllReduce => {
                        nccl.all_reduce(call.input, call.output, count, call.dtype, stream)
                    }
                    Collective::AllGather => {
                        nccl.all_gather(call.input, call.output, count, call.dtype, stream)
                    }
                    // The decline rule never sends it here (NCCL has no such call).
                    Collective::AllReduceAddRmsNorm => Err(Error::Unsupported(
                        "NCCL has no all_reduce_add_rmsnorm".into(),
                    )),
                }
            }
            (Fallback::LoopbackReference, _) => algorithms::launch(
                self.kernels()?,
                Kernel::Reference,
                stream,
                self.shape,
                &self.base_args,
                call,
            ),
            (Fallback::Nccl, None) => Err(Error::Unsupported(
                "this world has no NCCL communicator".into(),
            )),
        }
    }

    /// The first decline of each (collective, algorithm, reason) is printed once
    /// per process; the rest are silent (a decline is expected behaviour).
    fn log_decline(
        &self,
        collective: Collective,
        algo: Algo,
        dtype: DType,
        bytes: u64,
        reason: Decline,
    ) {
        static LOGGED: Mutex<Option<HashSet<(Collective, Algo, Decline)>>> = Mutex::new(None);
        if !self.res.options.log_declines {
            return;
        }
        let mut logged = LOGGED.lock().unwrap_or_else(|p| p.into_inner());
        if logged
            .get_or_insert_with(HashSet::new)
            .insert((collective, algo, reason))
        {
            let instead = match collective.fallback() {
                Algo::Nccl => self.res.shared.fallback.describe(),
                fallback => fallback.name(),
            };
            log::info!(
                "colltune: {} declined {} of {bytes} bytes of {} ({reason}); running {instead} \
                 instead (logged once per kind)",
                algo.name(),
                collective.name(),
                dtype.name(),
            );
        }
    }
}

/// A fused call's row and epsilon, checked.
struct NormShape {
    hidden: u32,
    eps: f32,
}

impl NormShape {
    fn at(&self, residual: u64, weight: u64) -> RowNorm {
        RowNorm {
            residual,
            weight,
            hidden: self.hidden,
            eps: self.eps,
        }
    }
}

/// A call as an entry point checked it, before an algorithm is picked.
struct Request {
    collective: Collective,
    dtype: DType,
    /// The output's bytes.
    bytes: u64,
    /// [`Placement::Anywhere`] but for a window call (`symmetric.rs`).
    placement: Placement,
    input: u64,
    output: u64,
    /// The fused collective's other tensors (`None` for the others).
    norm: Option<RowNorm>,
}

impl Request {
    /// A call placed [`Placement::Anywhere`].
    fn new(collective: Collective, dtype: DType, bytes: u64, input: u64, output: u64) -> Request {
        Request {
            collective,
            dtype,
            bytes,
            placement: Placement::Anywhere,
            input,
            output,
            norm: None,
        }
    }

    /// The same call placed `placement`.
    fn placed(self, placement: Placement) -> Request {
        Request { placement, ..self }
    }

    /// The same call with the fused collective's other tensors.
    fn with_norm(self, norm: RowNorm) -> Request {
        Request {
            norm: Some(norm),
            ..self
        }
    }
}

fn byte_len<T>(len: usize) -> u64 {
    (len * std::mem::size_of::<T>()) as u64
}
