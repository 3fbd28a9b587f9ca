//! The shape of a call of the fused all-reduce + add + RMSNorm: `tokens`
//! rows of `hidden` elements, the norm taken over each row. What a call may
//! pass is checked here, on the host, before anything is launched; the
//! kernels rely on it (kernels/cuda/prims.cu, "Rows").

pub use policy::{HIDDEN_MAX, HIDDEN_MIN, HIDDEN_STEP};

/// A fused call's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub tokens: usize,
    pub hidden: usize,
}

/// The rows of a call whose partial sums, residual and output hold `input`,
/// `residual` and `output` elements and whose weight holds `weight` (the
/// hidden size), with the norm's `eps`; or what is wrong, in words.
pub fn rows_of(
    input: usize,
    residual: usize,
    output: usize,
    weight: usize,
    eps: f32,
) -> Result<Rows, String> {
    let hidden = weight;
    if !(HIDDEN_MIN..=HIDDEN_MAX).contains(&hidden) || !hidden.is_multiple_of(HIDDEN_STEP) {
        return Err(format!(
            "the weight has {hidden} elements; the hidden size must be a multiple of \
             {HIDDEN_STEP} in {HIDDEN_MIN}..={HIDDEN_MAX}"
        ));
    }
    if residual != input || output != input {
        return Err(format!(
            "input has {input} elements, residual {residual}, output {output}: they must \
             be the same tokens x hidden"
        ));
    }
    if !input.is_multiple_of(hidden) {
        return Err(format!(
            "input has {input} elements, not a whole number of rows of hidden size {hidden} \
             (tokens x hidden != len)"
        ));
    }
    if !eps.is_finite() || eps < 0.0 {
        return Err(format!("eps is {eps}: it must be finite and not negative"));
    }
    Ok(Rows {
        tokens: input / hidden,
        hidden,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_rows_of_an_allowed_hidden_size_are_taken() {
        assert_eq!(
            rows_of(4 * 4096, 4 * 4096, 4 * 4096, 4096, 1e-5),
            Ok(Rows {
                tokens: 4,
                hidden: 4096
            })
        );
        for hidden in [HIDDEN_MIN, 72, 5120, HIDDEN_MAX] {
            assert_eq!(
                rows_of(hidden, hidden, hidden, hidden, 0.0).map(|r| r.tokens),
                Ok(1)
            );
        }
        // No tokens: nothing to do, but not wrong.
        assert_eq!(rows_of(0, 0, 0, 64, 1e-6).map(|r| r.tokens), Ok(0));
    }

    #[test]
    fn what_is_wrong_is_said() {
        let err = |i, r, o, w, eps| rows_of(i, r, o, w, eps).unwrap_err();
        for hidden in [0, 8, 56, 68, HIDDEN_MAX + 8] {
            assert!(
                err(hidden, hidden, hidden, hidden, 1e-5).contains("hidden size"),
                "{hidden}"
            );
        }
        assert!(err(128, 64, 128, 64, 1e-5).contains("residual 64"));
        assert!(err(128, 128, 192, 64, 1e-5).contains("output 192"));
        assert!(err(96, 96, 96, 64, 1e-5).contains("tokens x hidden != len"));
        for eps in [f32::NAN, f32::INFINITY, -1e-6] {
            assert!(err(64, 64, 64, 64, eps).contains("eps"), "{eps}");
        }
    }
}
