//! A collective as candle ops: [`OutOfPlace`] (a `CustomOp1`: reads the
//! input's storage, allocates the output on the same device and stream),
//! [`InPlace`] (an `InplaceOp1` on the tensor's own storage) and
//! [`AddRmsNorm`] (a `CustomOp3` on the partial sums, the residual and the
//! weight, whose one new tensor holds both of its outputs). They refuse CPU
//! tensors; on CUDA they check the element type, the layout and the stream,
//! then hand device views to what [`Launch`]es the collective.

use candle_core::{CpuStorage, CustomOp1, CustomOp3, InplaceOp1, Layout, Result, Shape};

use crate::host::{self, Kind};

/// What runs a collective on device memory: a rank (`comm.rs`).
pub trait Launch {
    /// Ranks in the world.
    fn world(&self) -> usize;

    /// Checks that `device` orders its work on the rank's stream.
    #[cfg(feature = "cuda")]
    fn same_stream(&self, kind: Kind, device: &candle_core::CudaDevice) -> Result<()>;

    /// Runs `kind` on `call`, queued on the rank's stream.
    #[cfg(feature = "cuda")]
    fn launch<T: kernels::Element>(&self, kind: Kind, call: cuda::Call<'_, T>) -> Result<()>;
}

/// `kind` from a tensor into a new one.
pub struct OutOfPlace<'a, L> {
    pub kind: Kind,
    pub on: &'a L,
}

/// `kind` in place on a tensor's own storage.
pub struct InPlace<'a, L> {
    pub kind: Kind,
    pub on: &'a L,
}

/// The fused all-reduce + add + RMSNorm on (partial sums, residual, weight):
/// a new tensor `[2, …]` of the partial sums' shape twice, the normalised
/// rows, then the new residual. The residual is copied into the second half
/// first, where the collective updates it, so no tensor candle holds changes.
pub struct AddRmsNorm<'a, L> {
    pub eps: f32,
    pub on: &'a L,
}

impl<L: Launch> CustomOp1 for OutOfPlace<'_, L> {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        Err(host::on_cpu(self.kind))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda::out_of_place(self, s, l)
    }
}

impl<L: Launch> CustomOp3 for AddRmsNorm<'_, L> {
    fn name(&self) -> &'static str {
        Kind::AddRmsNorm.name()
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(host::on_cpu(Kind::AddRmsNorm))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        partial: &candle_core::CudaStorage,
        lp: &Layout,
        residual: &candle_core::CudaStorage,
        lr: &Layout,
        weight: &candle_core::CudaStorage,
        lw: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda::add_rms_norm(self, (partial, lp), (residual, lr), (weight, lw))
    }
}

impl<L: Launch> InplaceOp1 for InPlace<'_, L> {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> Result<()> {
        Err(host::on_cpu(self.kind))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &mut candle_core::CudaStorage, l: &Layout) -> Result<()> {
        cuda::in_place(self, s, l)
    }
}

#[cfg(feature = "cuda")]
pub mod cuda {
    //! The ops' CUDA side: storage to device views, by element type.

    use candle_core::cuda_backend::CudaDType;
    use candle_core::{CudaStorage, Layout, Result, Shape};
    use half::{bf16, f16};
    use kernels::cudarc::driver::{CudaView, CudaViewMut};

    use super::{AddRmsNorm, InPlace, Launch, OutOfPlace};
    use crate::host::{self, Element, Kind};

    /// A collective's device memory.
    pub enum Call<'a, T> {
        OutOfPlace {
            input: CudaView<'a, T>,
            output: CudaViewMut<'a, T>,
        },
        InPlace(CudaViewMut<'a, T>),
        /// The fused all-reduce + add + RMSNorm: `output` gets the rows,
        /// `residual` (holding the old residual) the new one.
        AddRmsNorm {
            input: CudaView<'a, T>,
            residual: CudaViewMut<'a, T>,
            weight: CudaView<'a, T>,
            eps: f32,
            output: CudaViewMut<'a, T>,
        },
    }

    /// One operand: its storage and layout.
    type Operand<'s> = (&'s CudaStorage, &'s Layout);

    pub fn add_rms_norm<L: Launch>(
        op: &AddRmsNorm<'_, L>,
        partial: Operand<'_>,
        residual: Operand<'_>,
        weight: Operand<'_>,
    ) -> Result<(CudaStorage, Shape)> {
        let kind = Kind::AddRmsNorm;
        host::norm_shapes(
            (partial.1.shape(), dtype(partial.0)),
            (residual.1.shape(), dtype(residual.0)),
            (weight.1.shape(), dtype(weight.0)),
        )?;
        let spans = [
            host::span(kind, partial.1)?,
            host::span(kind, residual.1)?,
            host::span(kind, weight.1)?,
        ];
        for (s, _) in [partial, residual, weight] {
            op.on.same_stream(kind, &s.device)?;
        }
        let shape = host::output_shape(kind, partial.1.shape(), op.on.world());
        let storage = match host::element(kind, dtype(partial.0))? {
            Element::Bf16 => typed_norm::<bf16, L>(op, [partial.0, residual.0, weight.0], spans)?,
            Element::F16 => typed_norm::<f16, L>(op, [partial.0, residual.0, weight.0], spans)?,
            Element::F32 => typed_norm::<f32, L>(op, [partial.0, residual.0, weight.0], spans)?,
        };
        Ok((storage, shape))
    }

    fn typed_norm<T, L>(
        op: &AddRmsNorm<'_, L>,
        [partial, residual, weight]: [&CudaStorage; 3],
        [p, r, w]: [std::ops::Range<usize>; 3],
    ) -> Result<CudaStorage>
    where
        T: CudaDType + kernels::Element,
        L: Launch,
    {
        let n = r.len();
        let input = partial.as_cuda_slice::<T>()?.slice(p);
        let old = residual.as_cuda_slice::<T>()?.slice(r);
        let weight = weight.as_cuda_slice::<T>()?.slice(w);
        // SAFETY: the rows half is written by the collective and the residual
        // half by the copy below before anything reads them (a call that
        // fails marks both).
        let mut both = unsafe { partial.device.alloc::<T>(2 * n)? };
        let (output, mut new) = both.split_at_mut(n);
        partial.device.memcpy_dtod(&old, &mut new)?;
        let call = Call::AddRmsNorm {
            input,
            residual: new,
            weight,
            eps: op.eps,
            output,
        };
        op.on.launch(Kind::AddRmsNorm, call)?;
        Ok(CudaStorage::wrap_cuda_slice(both, partial.device.clone()))
    }

    pub fn out_of_place<L: Launch>(
        op: &OutOfPlace<'_, L>,
        s: &CudaStorage,
        l: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let span = host::span(op.kind, l)?;
        let shape = host::output_shape(op.kind, l.shape(), op.on.world());
        op.on.same_stream(op.kind, &s.device)?;
        let n = shape.elem_count();
        let storage = match host::element(op.kind, dtype(s))? {
            Element::Bf16 => typed::<bf16, L>(op, s, span, n)?,
            Element::F16 => typed::<f16, L>(op, s, span, n)?,
            Element::F32 => typed::<f32, L>(op, s, span, n)?,
        };
        Ok((storage, shape))
    }

    fn typed<T, L>(
        op: &OutOfPlace<'_, L>,
        s: &CudaStorage,
        span: std::ops::Range<usize>,
        n: usize,
    ) -> Result<CudaStorage>
    where
        T: CudaDType + kernels::Element,
        L: Launch,
    {
        let input = s.as_cuda_slice::<T>()?.slice(span);
        // SAFETY: the collective writes every element of its output (and a
        // call that fails marks it as failed) before anything reads it.
        let mut output = unsafe { s.device.alloc::<T>(n)? };
        let call = Call::OutOfPlace {
            input,
            output: output.slice_mut(..),
        };
        op.on.launch(op.kind, call)?;
        Ok(CudaStorage::wrap_cuda_slice(output, s.device.clone()))
    }

    pub fn in_place<L: Launch>(op: &InPlace<'_, L>, s: &mut CudaStorage, l: &Layout) -> Result<()> {
        let span = host::span(op.kind, l)?;
        if op.kind == Kind::AllGather {
            host::gather_rows(l.shape(), op.on.world())?;
        }
        op.on.same_stream(op.kind, &s.device)?;
        match host::element(op.kind, dtype(s))? {
            Element::Bf16 => typed_in_place::<bf16, L>(op, s, span),
            Element::F16 => typed_in_place::<f16, L>(op, s, span),
            Element::F32 => typed_in_place::<f32, L>(op, s, span),
        }
    }

    fn typed_in_place<T, L>(
        op: &InPlace<'_, L>,
        s: &mut CudaStorage,
        span: std::ops::Range<usize>,
    ) -> Result<()>
    where
        T: CudaDType + kernels::Element,
        L: Launch,
    {
        let buffer = s.as_cuda_slice_mut::<T>()?.slice_mut(span);
        op.on.launch(op.kind, Call::InPlace(buffer))
    }

    fn dtype(s: &CudaStorage) -> candle_core::DType {
        use candle_core::backend::BackendStorage;
        s.dtype()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Tensor};

    /// A world that launches nothing: CPU tensors are refused before
    /// anything would be.
    struct Nowhere(usize);

    impl Launch for Nowhere {
        fn world(&self) -> usize {
            self.0
        }

        #[cfg(feature = "cuda")]
        fn same_stream(&self, _: Kind, _: &candle_core::CudaDevice) -> Result<()> {
            unreachable!("a CPU tensor never reaches the device checks")
        }

        #[cfg(feature = "cuda")]
        fn launch<T: kernels::Element>(&self, _: Kind, _: cuda::Call<'_, T>) -> Result<()> {
            unreachable!("a CPU tensor is never launched")
        }
    }

    #[test]
    fn a_cpu_tensor_is_refused_by_the_fused_op() -> Result<()> {
        let x = Tensor::ones((2, 64), DType::F32, &Device::Cpu)?;
        let w = Tensor::ones(64, DType::F32, &Device::Cpu)?;
        let on = Nowhere(2);
        let refused = x
            .apply_op3_no_bwd(&x, &w, &AddRmsNorm { eps: 1e-5, on: &on })
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("all_reduce_add_rmsnorm") && refused.contains("on the CPU"),
            "{refused}"
        );
        Ok(())
    }

    #[test]
    fn a_cpu_tensor_is_refused_by_both_ops_naming_the_call() -> Result<()> {
        let x = Tensor::ones((2, 8), DType::F32, &Device::Cpu)?;
        let on = Nowhere(2);
        for kind in [Kind::AllReduce, Kind::AllGather] {
            let refused = x
                .apply_op1_no_bwd(&OutOfPlace { kind, on: &on })
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains(kind.name()) && refused.contains("on the CPU"),
                "{refused}"
            );
            let refused = x
                .inplace_op1(&InPlace { kind, on: &on })
                .unwrap_err()
                .to_string();
            assert!(refused.contains("on the CPU"), "{refused}");
        }
        // Nothing was written.
        assert_eq!(x.sum_all()?.to_scalar::<f32>()?, 16.0);
        Ok(())
    }
}
