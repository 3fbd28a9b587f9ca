//! What a collective on a candle tensor settles before any GPU work: which
//! element type it moves, which elements of the storage it covers, and the
//! shape it makes. Plain host code, tested on candle's CPU backend.

use std::ops::Range;

use candle_core::{DType, Layout, Result, Shape, bail};

/// The collectives this crate runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    AllReduce,
    AllGather,
    /// The all-reduce with the residual add and the RMSNorm after it.
    AddRmsNorm,
}

impl Kind {
    /// As colltune names it (`kernels::Collective::name`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::AllGather => "all_gather",
            Kind::AddRmsNorm => "all_reduce_add_rmsnorm",
        }
    }
}

/// The element types colltune's collectives take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    Bf16,
    F16,
    F32,
}

/// The element type of a tensor of `dtype`; any other dtype is refused,
/// naming the call.
pub fn element(kind: Kind, dtype: DType) -> Result<Element> {
    match dtype {
        DType::BF16 => Ok(Element::Bf16),
        DType::F16 => Ok(Element::F16),
        DType::F32 => Ok(Element::F32),
        other => bail!(
            "colltune {}: a tensor of {other:?}; colltune's collectives take bf16, f16 and f32",
            kind.name()
        ),
    }
}

/// The elements of its storage that a tensor laid out as `layout` covers.
/// The collectives read and write whole contiguous ranges: a tensor with
/// gaps or repeats (a transpose, a broadcast) is refused here, and the
/// out-of-place calls make it contiguous first.
pub fn span(kind: Kind, layout: &Layout) -> Result<Range<usize>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(start..end),
        None => bail!(
            "colltune {}: a tensor of shape {:?} with strides {:?} is not contiguous",
            kind.name(),
            layout.dims(),
            layout.stride()
        ),
    }
}

/// The output's shape for an input of `shape` in a world of `world` ranks:
/// the input's for an all-reduce; for an all-gather, the ranks' inputs
/// stacked along the first dimension in rank order (`[d0, d1, …]` gives
/// `[world × d0, d1, …]`, a scalar `[world]`), as NCCL lays them out.
///
/// The fused all-reduce + add + RMSNorm makes two tensors of the input's
/// shape, stacked: `[2, d0, d1, …]` (the normalised rows, then the new
/// residual).
pub fn output_shape(kind: Kind, shape: &Shape, world: usize) -> Shape {
    match kind {
        Kind::AllReduce => shape.clone(),
        Kind::AddRmsNorm => {
            let mut dims = vec![2];
            dims.extend_from_slice(shape.dims());
            Shape::from(dims)
        }
        Kind::AllGather => {
            let mut dims = shape.dims().to_vec();
            match dims.first_mut() {
                Some(first) => *first *= world,
                None => dims.push(world),
            }
            Shape::from(dims)
        }
    }
}

/// An in-place all-gather's buffer: the ranks' shares are whole rows, so its
/// first dimension must split into `world` equal parts (rank `r`'s share is
/// rows `r × d0 / world ..`).
pub fn gather_rows(shape: &Shape, world: usize) -> Result<()> {
    match shape.dims().first() {
        Some(&rows) if rows % world == 0 => Ok(()),
        _ => bail!(
            "colltune all_gather in place: a buffer of shape {:?} does not split into {world} \
             shares along its first dimension",
            shape.dims()
        ),
    }
}

/// The fused all-reduce + add + RMSNorm's tensors: the partial sums and the
/// residual of one shape, rows along the last dimension, the weight of one
/// row, all of one dtype. Returns the hidden size (colltune checks the rest:
/// a multiple of 8 in 64..=16384).
pub fn norm_shapes(
    partial: (&Shape, DType),
    residual: (&Shape, DType),
    weight: (&Shape, DType),
) -> Result<usize> {
    let name = Kind::AddRmsNorm.name();
    if partial.1 != residual.1 || partial.1 != weight.1 {
        bail!(
            "colltune {name}: partial sums of {:?}, residual of {:?}, weight of {:?}; they must \
             be of one dtype",
            partial.1,
            residual.1,
            weight.1
        );
    }
    if partial.0 != residual.0 {
        bail!(
            "colltune {name}: partial sums of shape {:?} but a residual of shape {:?}",
            partial.0.dims(),
            residual.0.dims()
        );
    }
    let Some(&hidden) = partial.0.dims().last() else {
        bail!("colltune {name}: a scalar has no rows");
    };
    if weight.0.dims() != [hidden] {
        bail!(
            "colltune {name}: rows of {hidden} elements but a weight of shape {:?}",
            weight.0.dims()
        );
    }
    Ok(hidden)
}

/// The refusal of a tensor on the CPU.
pub fn on_cpu(kind: Kind) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "colltune {}: the tensor is on the CPU; colltune's collectives run on CUDA tensors",
        kind.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn bf16_f16_and_f32_map_and_every_other_dtype_is_refused_by_name() {
        assert_eq!(
            element(Kind::AllReduce, DType::BF16).unwrap(),
            Element::Bf16
        );
        assert_eq!(element(Kind::AllReduce, DType::F16).unwrap(), Element::F16);
        assert_eq!(element(Kind::AllGather, DType::F32).unwrap(), Element::F32);
        for dtype in [DType::U8, DType::U32, DType::I64, DType::F64] {
            let refused = element(Kind::AllGather, dtype).unwrap_err().to_string();
            assert!(
                refused.contains("all_gather") && refused.contains(&format!("{dtype:?}")),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_contiguous_view_covers_its_own_range_and_a_transpose_is_refused() -> Result<()> {
        let x = Tensor::zeros((4, 6), DType::F32, &Device::Cpu)?;
        assert_eq!(span(Kind::AllReduce, x.layout())?, 0..24);
        // Rows 1 and 2: contiguous, at an offset into the storage.
        let rows = x.narrow(0, 1, 2)?;
        assert_eq!(span(Kind::AllReduce, rows.layout())?, 6..18);
        let t = x.t()?;
        let refused = span(Kind::AllReduce, t.layout()).unwrap_err().to_string();
        assert!(refused.contains("not contiguous"), "{refused}");
        // What the out-of-place calls do first.
        assert_eq!(span(Kind::AllReduce, t.contiguous()?.layout())?, 0..24);
        Ok(())
    }

    #[test]
    fn an_all_gather_stacks_the_ranks_along_the_first_dimension() {
        let shape = |dims: &[usize]| Shape::from(dims.to_vec());
        assert_eq!(
            output_shape(Kind::AllGather, &shape(&[1, 320]), 4),
            shape(&[4, 320])
        );
        assert_eq!(
            output_shape(Kind::AllGather, &shape(&[3, 2, 5]), 2),
            shape(&[6, 2, 5])
        );
        assert_eq!(output_shape(Kind::AllGather, &shape(&[]), 8), shape(&[8]));
        assert_eq!(
            output_shape(Kind::AllReduce, &shape(&[3, 2, 5]), 2),
            shape(&[3, 2, 5])
        );
        // Every element of every rank's input, once.
        let input = shape(&[3, 2, 5]);
        for world in 1..=8 {
            let gathered = output_shape(Kind::AllGather, &input, world);
            assert_eq!(gathered.elem_count(), world * input.elem_count());
        }
    }

    #[test]
    fn the_fused_call_stacks_its_two_outputs_and_checks_its_shapes() {
        let shape = |dims: &[usize]| Shape::from(dims.to_vec());
        assert_eq!(
            output_shape(Kind::AddRmsNorm, &shape(&[3, 64]), 4),
            shape(&[2, 3, 64])
        );
        let bf16 = DType::BF16;
        let rows = shape(&[3, 64]);
        let ok = norm_shapes((&rows, bf16), (&rows, bf16), (&shape(&[64]), bf16));
        assert_eq!(ok.unwrap(), 64);
        let refusals = [
            norm_shapes(
                (&rows, bf16),
                (&shape(&[3, 72]), bf16),
                (&shape(&[64]), bf16),
            ),
            norm_shapes((&rows, bf16), (&rows, bf16), (&shape(&[72]), bf16)),
            norm_shapes((&rows, bf16), (&rows, bf16), (&shape(&[1, 64]), bf16)),
            norm_shapes((&rows, bf16), (&rows, DType::F32), (&shape(&[64]), bf16)),
            norm_shapes(
                (&shape(&[]), bf16),
                (&shape(&[]), bf16),
                (&shape(&[1]), bf16),
            ),
        ];
        for refused in refusals {
            let message = refused.unwrap_err().to_string();
            assert!(message.contains("all_reduce_add_rmsnorm"), "{message}");
        }
    }

    #[test]
    fn an_in_place_gather_needs_whole_rows_per_rank() {
        assert!(gather_rows(&Shape::from((8, 3)), 4).is_ok());
        assert!(gather_rows(&Shape::from((8, 3)), 8).is_ok());
        let refused = gather_rows(&Shape::from((6, 3)), 4)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("4 shares"), "{refused}");
        assert!(gather_rows(&Shape::from(()), 2).is_err());
    }
}
