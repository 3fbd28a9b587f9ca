//! [`Comm`]: a rank of colltune's world, on candle tensors.

use std::sync::Mutex;

use candle_core::{CudaDevice, Device, Result, Tensor};
use kernels::{Algo, Collective, Element, Options, ProcessSpec, RankComm, Select, World};

use crate::host::Kind;
use crate::op::cuda::Call;
use crate::op::{AddRmsNorm, InPlace, Launch, OutOfPlace};

/// One rank of colltune's world, taking candle tensors: every call is one
/// line, issued on candle's CUDA stream, and picks its algorithm from the
/// tables for the mode it is issued in (the graph tables while candle's
/// stream is being captured, the eager ones otherwise: `Select::Auto`).
///
/// Every rank makes the same calls in the same order, with tensors of the
/// same shape and dtype (bf16, f16 or f32), as with NCCL. Calls take
/// `&self` and `Comm` is `Sync`; one rank's calls must not overlap (a call
/// from a second thread while one is in progress is refused, see
/// `kernels::Error::Busy`).
pub struct Comm {
    rank: RankComm,
    how: Select,
    /// Each (collective, algorithm) run since [`Comm::take_algorithms`].
    ran: Mutex<Vec<(Collective, Algo)>>,
}

impl Comm {
    /// This process's rank of a world of processes, on `device`'s stream
    /// (a CUDA device of candle, e.g. `Device::new_cuda_with_stream(gpu)`),
    /// where every tensor of the device is ordered.
    pub fn process(device: &Device, spec: ProcessSpec, options: Options) -> Result<Comm> {
        let stream = device.as_cuda_device()?.cuda_stream();
        let rank = World::process(stream, spec, options)
            .map_err(|e| candle_core::Error::Msg(format!("colltune World::process: {e}")))?;
        Ok(Comm::new(rank))
    }

    /// Wraps `rank`, built on the stream of the candle device its tensors
    /// live on (a tensor of another stream is refused).
    pub fn new(rank: RankComm) -> Comm {
        Comm {
            rank,
            how: Select::Auto,
            ran: Mutex::new(Vec::new()),
        }
    }

    /// The same rank, choosing by `how` instead of `Select::Auto` (to force
    /// an algorithm or a mode).
    pub fn with_select(self, how: Select) -> Comm {
        Comm { how, ..self }
    }

    /// The rank: its `check()`, `health()`, `lifeline()` for graphs the
    /// engine captures itself, and the calls on cudarc buffers.
    pub fn rank(&self) -> &RankComm {
        &self.rank
    }

    /// Sums `x` over the ranks into a new tensor of `x`'s shape (`x` is made
    /// contiguous first if it is not).
    pub fn all_reduce(&self, x: &Tensor) -> Result<Tensor> {
        let op = OutOfPlace {
            kind: Kind::AllReduce,
            on: self,
        };
        x.contiguous()?.apply_op1_no_bwd(&op)
    }

    /// Every rank's `x`, stacked along the first dimension in rank order:
    /// `[d0, d1, …]` gives `[world × d0, d1, …]` (a scalar gives `[world]`).
    pub fn all_gather(&self, x: &Tensor) -> Result<Tensor> {
        let op = OutOfPlace {
            kind: Kind::AllGather,
            on: self,
        };
        x.contiguous()?.apply_op1_no_bwd(&op)
    }

    /// The all-reduce of a row-parallel projection fused with the residual
    /// add and the RMSNorm after it: `x = Σ_ranks partial + residual`, then
    /// `x / sqrt(mean(x²) + eps) · weight` per row (the last dimension;
    /// `weight` has one row's elements, a multiple of 8 from 64 to 16384).
    /// Returns `(normalised, x)`, two tensors of `partial`'s shape; the
    /// tensors passed in are left as they were. colltune's tables pick a fused
    /// kernel or the unfused path (the all-reduce its table picks, then its
    /// add + RMSNorm kernel), as for any collective.
    pub fn all_reduce_add_rms_norm(
        &self,
        partial: &Tensor,
        residual: &Tensor,
        weight: &Tensor,
        eps: f32,
    ) -> Result<(Tensor, Tensor)> {
        let op = AddRmsNorm { eps, on: self };
        let both = partial.contiguous()?.apply_op3_no_bwd(
            &residual.contiguous()?,
            &weight.contiguous()?,
            &op,
        )?;
        Ok((both.get(0)?, both.get(1)?))
    }

    /// Sums `x` over the ranks in place. `x` must be contiguous.
    pub fn all_reduce_in_place(&self, x: &Tensor) -> Result<()> {
        x.inplace_op1(&InPlace {
            kind: Kind::AllReduce,
            on: self,
        })
    }

    /// Gathers in place: `x`'s first dimension splits into one share per
    /// rank, and this rank's share already holds its part (rows `rank × d0 /
    /// world ..`). `x` must be contiguous.
    pub fn all_gather_in_place(&self, x: &Tensor) -> Result<()> {
        x.inplace_op1(&InPlace {
            kind: Kind::AllGather,
            on: self,
        })
    }

    /// Each (collective, algorithm) that ran since the last call of this
    /// (in the order first run); a declined custom algorithm shows as NCCL.
    pub fn take_algorithms(&self) -> Vec<(Collective, Algo)> {
        std::mem::take(&mut *self.ran.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn record(&self, collective: Collective, algo: Algo) {
        let mut ran = self.ran.lock().unwrap_or_else(|p| p.into_inner());
        if !ran.contains(&(collective, algo)) {
            ran.push((collective, algo));
        }
    }
}

impl Launch for Comm {
    fn world(&self) -> usize {
        self.rank.world_size()
    }

    fn same_stream(&self, kind: Kind, device: &CudaDevice) -> Result<()> {
        if device.cuda_stream().cu_stream() == self.rank.stream().cu_stream() {
            return Ok(());
        }
        candle_core::bail!(
            "colltune {} on rank {}: the tensor's device orders its work on another stream than \
             the rank's; build the rank on the device's stream (Comm::process, or \
             World::process(device.cuda_stream(), …))",
            kind.name(),
            self.rank.rank()
        )
    }

    fn launch<T: Element>(&self, kind: Kind, call: Call<'_, T>) -> Result<()> {
        let (rank, how) = (&self.rank, self.how);
        let ran = match (kind, call) {
            (Kind::AllReduce, Call::OutOfPlace { input, mut output }) => {
                rank.all_reduce(&input, &mut output, how)
            }
            (Kind::AllGather, Call::OutOfPlace { input, mut output }) => {
                rank.all_gather(&input, &mut output, how)
            }
            (Kind::AllReduce, Call::InPlace(mut buffer)) => {
                rank.all_reduce_in_place(&mut buffer, how)
            }
            (Kind::AllGather, Call::InPlace(mut buffer)) => {
                rank.all_gather_in_place(&mut buffer, how)
            }
            (
                Kind::AddRmsNorm,
                Call::AddRmsNorm {
                    input,
                    mut residual,
                    weight,
                    eps,
                    mut output,
                },
            ) => rank.all_reduce_add_rmsnorm(&input, &mut residual, &weight, eps, &mut output, how),
            (kind, _) => candle_core::bail!(
                "colltune {} on rank {}: called with another collective's tensors",
                kind.name(),
                rank.rank()
            ),
        };
        let algo = ran.map_err(|e| {
            candle_core::Error::Msg(format!(
                "colltune {} on rank {}: {e}",
                kind.name(),
                rank.rank()
            ))
        })?;
        let collective = match kind {
            Kind::AllReduce => Collective::AllReduce,
            Kind::AllGather => Collective::AllGather,
            Kind::AddRmsNorm => Collective::AllReduceAddRmsNorm,
        };
        self.record(collective, algo);
        Ok(())
    }
}
