//! Host-side references for checking collectives: inputs sprinkled with special
//! values, an f64 reference with dtype tolerances, and bitwise comparisons.
//! Used by [`super::timing::validate`] and by the GPU tests.
//!
//! Special values and what is expected of them:
//! - NaN, ±inf, subnormals pass through the sum as IEEE says (a NaN or
//!   `inf + -inf` anywhere in a column gives NaN; any NaN bits are accepted);
//! - a column of zeros sums to -0.0 exactly when every input is -0.0 (checked
//!   bitwise: sums start from rank 0's value, never from +0.0);
//! - the push algorithms send a 32-bit word equal to the sentinel 0x80000000 as
//!   0: f32 -0.0 becomes +0.0, and for bf16/f16 an aligned element pair
//!   (+0.0, -0.0) becomes (+0.0, +0.0). `SentinelRule::Inputs`: the inputs are
//!   substituted (one_shot_push); `SentinelRule::InputsAndSums`: the reduced sums
//!   too (two_shot_push). References apply the same substitution
//!   (`kernels::raw::sentinel_rule` names each algorithm's rule). Every other bit
//!   pattern is delivered unchanged.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use kernels::Element;
use kernels::raw::{MAX_WORLD, SentinelRule, replace_sentinel_words, sentinel_rule};
use policy::{Algo, DType};

/// Byte written over outputs before a run, so an output the kernel never wrote
/// cannot pass for a result: 0x5A5A is 1.5e16 as bf16, 203.25 as f16, and
/// 0x5A5A5A5A is 1.5e16 as f32, far from any expected sum.
pub const POISON_BYTE: u8 = 0x5A;

/// Deterministic inputs for `world` ranks of `len` elements each: values in
/// [-4, 4) at the dtype's precision, about one in 97 replaced by a special
/// value (NaN, ±inf, ±smallest subnormal, ±0), plus fixed columns in the middle:
/// all -0.0, all +0.0, and (for 16-bit types, at an even index) the sentinel
/// pair (+0.0, -0.0) on every rank.
pub fn random_inputs<T: Element>(world: usize, len: usize, seed: u64) -> Vec<Vec<T>> {
    let specials = special_values::<T>();
    // One generator per rank, each on its own thread: large messages are
    // hundreds of millions of elements.
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let specials = &specials;
                scope.spawn(move || rank_inputs::<T>(rank, len, seed, specials))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("input generation panicked"))
            .collect()
    })
}

fn rank_inputs<T: Element>(rank: usize, len: usize, seed: u64, specials: &[T]) -> Vec<T> {
    let mut rng =
        ChaCha8Rng::seed_from_u64(seed ^ (rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut data: Vec<T> = (0..len)
        .map(|_| {
            let r: u32 = rng.random();
            if r.is_multiple_of(97) {
                specials[(r / 97) as usize % specials.len()]
            } else {
                // 24 random bits scaled into [-4, 4); rounding to T keeps T's
                // precision worth of them.
                T::from_f64(((r as i32) >> 8) as f64 * (1.0 / (1u64 << 21) as f64))
            }
        })
        .collect();
    let mid = (len / 2) & !1;
    let zero_columns: [(usize, u32); 4] = match T::DTYPE {
        DType::F32 => [(mid, 0x8000_0000), (mid + 1, 0), (mid + 2, 0), (mid + 3, 0)],
        _ => [
            (mid, 0x8000),
            (mid + 1, 0),
            (mid + 2, 0x0000),
            (mid + 3, 0x8000),
        ],
    };
    for (i, bits) in zero_columns {
        if i < len {
            data[i] = T::from_bits(bits);
        }
    }
    data
}

fn special_values<T: Element>() -> Vec<T> {
    let (nan, inf, min_sub, neg_zero): (u32, u32, u32, u32) = match T::DTYPE {
        DType::Bf16 => (0x7fc0, 0x7f80, 0x0001, 0x8000),
        DType::F16 => (0x7e00, 0x7c00, 0x0001, 0x8000),
        DType::F32 => (0x7fc0_0000, 0x7f80_0000, 0x0000_0001, 0x8000_0000),
    };
    [
        nan,
        inf,
        inf | neg_zero,
        min_sub,
        min_sub | neg_zero,
        neg_zero,
        0,
    ]
    .into_iter()
    .map(T::from_bits)
    .collect()
}

/// `data` with the push algorithms' sentinel substitution applied.
pub fn sentinel_substituted<T: Element>(data: &[T]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let mut bytes: Vec<u8> = data
        .iter()
        .flat_map(|x| x.to_bits().to_le_bytes().into_iter().take(size))
        .collect();
    replace_sentinel_words(&mut bytes);
    bytes
        .chunks_exact(size)
        .map(|c| {
            let mut word = [0u8; 4];
            word[..size].copy_from_slice(c);
            T::from_bits(u32::from_le_bytes(word))
        })
        .collect()
}

/// Relative and absolute slack of an f32 sum rounded to `dtype`: one unit in
/// the last place of the output, plus the smallest subnormal.
fn output_slack(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::Bf16 => (2f64.powi(-7), 2f64.powi(-133)),
        DType::F16 => (2f64.powi(-10), 2f64.powi(-24)),
        DType::F32 => (2f64.powi(-23), 2f64.powi(-149)),
    }
}

/// Checks an all-reduce output against an f64 sum of the inputs in rank order.
/// `rule`: what the algorithm's Lamport data does to results (see the module
/// docs). The colltune kernels sum in f32 and round once, which is what the
/// tolerance allows (see [`check_nccl_all_reduce`] for NCCL's results).
pub fn check_all_reduce<T: Element>(
    inputs: &[Vec<T>],
    output: &[T],
    rule: SentinelRule,
) -> Result<(), String> {
    check_all_reduce_rounded(inputs, output, rule, 0)
}

/// Checks an all-reduce that NCCL ran across several GPUs. NCCL's ring and
/// tree reductions store each partial sum in the output dtype, so a bf16 or
/// f16 result is rounded up to W - 1 more times than ours, which shows most
/// where the inputs cancel; each of those roundings may add one unit in the
/// last place of the largest partial sum, bounded by the sum of the inputs'
/// magnitudes.
pub fn check_nccl_all_reduce<T: Element>(inputs: &[Vec<T>], output: &[T]) -> Result<(), String> {
    check_all_reduce_rounded(
        inputs,
        output,
        SentinelRule::None,
        inputs.len().saturating_sub(1),
    )
}

/// The all-reduce check for a result that `ran` produced: NCCL across several
/// GPUs (`nccl_across_gpus`) is held to [`check_nccl_all_reduce`], everything
/// else (our kernels, the loopback reference, NCCL in a world of one) to
/// [`check_all_reduce`].
pub fn check_all_reduce_of<T: Element>(
    ran: Algo,
    nccl_across_gpus: bool,
    inputs: &[Vec<T>],
    output: &[T],
) -> Result<(), String> {
    if nccl_across_gpus {
        check_nccl_all_reduce(inputs, output)
    } else {
        check_all_reduce(inputs, output, sentinel_rule(ran))
    }
}

/// The all-reduce check with `extra_roundings` roundings of partial sums to
/// the dtype on top of the final one.
fn check_all_reduce_rounded<T: Element>(
    inputs: &[Vec<T>],
    output: &[T],
    rule: SentinelRule,
    extra_roundings: usize,
) -> Result<(), String> {
    let inputs: Vec<Vec<T>> = if rule != SentinelRule::None {
        inputs.iter().map(|x| sentinel_substituted(x)).collect()
    } else {
        inputs.to_vec()
    };
    let len = output.len();
    if inputs.iter().any(|x| x.len() != len) {
        return Err("inputs and output differ in length".into());
    }
    if inputs.is_empty() || inputs.len() > MAX_WORLD {
        return Err(format!("{} ranks: expected 1..={MAX_WORLD}", inputs.len()));
    }
    let world = inputs.len() as f64;
    let (rel, abs) = output_slack(T::DTYPE);
    let mut failures = Vec::new();
    let mut failed = 0usize;
    let mut column = [0f64; MAX_WORLD];
    let world_len = inputs.len();
    for i in 0..len {
        for (slot, input) in column.iter_mut().zip(&inputs) {
            *slot = input[i].to_f64();
        }
        let column = &column[..world_len];
        let got = output[i].to_f64();
        let exact: f64 = column[1..].iter().fold(column[0], |acc, v| acc + v);
        let ok = if exact.is_nan() {
            got.is_nan()
        } else if column.iter().all(|v| *v == 0.0) {
            // Exact, sign included: -0.0 only when every input is -0.0, unless
            // the sums are sent as Lamport data and this -0.0 completes a
            // sentinel word: (+0.0, -0.0) at an even index of a 16-bit type,
            // which every rank then holds as (+0.0, +0.0).
            let mut negative = column.iter().all(|v| v.is_sign_negative());
            if negative
                && rule == SentinelRule::InputsAndSums
                && T::DTYPE.size_bytes() == 2
                && i % 2 == 1
                && output[i - 1].to_bits() == 0
            {
                negative = false;
            }
            got == 0.0 && got.is_sign_negative() == negative
        } else if exact.is_infinite() || T::from_f64(exact).to_f64().is_infinite() {
            got == T::from_f64(exact).to_f64()
        } else {
            let magnitude: f64 = column.iter().map(|v| v.abs()).sum();
            let tolerance = world * 2f64.powi(-24) * magnitude
                + rel * exact.abs()
                + extra_roundings as f64 * (rel * magnitude + abs)
                + 2.0 * abs;
            got.is_finite() && (got - exact).abs() <= tolerance
        };
        if !ok {
            failed += 1;
            if failures.len() < 5 {
                failures.push(format!(
                    "[{i}] inputs {:?} -> expected {exact:e}, got {got:e} (bits {:#x})",
                    column,
                    output[i].to_bits()
                ));
            }
        }
    }
    if failed == 0 {
        Ok(())
    } else {
        Err(format!(
            "{failed} of {len} {} elements wrong; first: {}",
            T::DTYPE.name(),
            failures.join("; ")
        ))
    }
}

/// Checks an all-gather output: the inputs concatenated in rank order, bit for bit.
pub fn check_all_gather<T: Element>(
    inputs: &[Vec<T>],
    output: &[T],
    pushed: bool,
) -> Result<(), String> {
    let len: usize = inputs.iter().map(Vec::len).sum();
    if output.len() != len {
        return Err(format!(
            "output has {} elements, expected {len}",
            output.len()
        ));
    }
    let mut offset = 0;
    for (rank, input) in inputs.iter().enumerate() {
        let expected = if pushed {
            sentinel_substituted(input)
        } else {
            input.clone()
        };
        if let Some(j) =
            (0..expected.len()).find(|&j| expected[j].to_bits() != output[offset + j].to_bits())
        {
            let bad = (0..expected.len())
                .filter(|&j| expected[j].to_bits() != output[offset + j].to_bits())
                .count();
            return Err(format!(
                "{bad} elements of rank {rank}'s share wrong; first at share index {j} (output \
                 index {}): expected bits {:#x}, got {:#x}",
                offset + j,
                expected[j].to_bits(),
                output[offset + j].to_bits()
            ));
        }
        offset += input.len();
    }
    Ok(())
}

/// Checks that every rank's output has the same bits as rank 0's.
pub fn check_identical<T: Element, O: AsRef<[T]>>(outputs: &[O]) -> Result<(), String> {
    let first = outputs[0].as_ref();
    for (rank, other) in outputs.iter().enumerate().skip(1) {
        let other = other.as_ref();
        if other.len() != first.len() {
            return Err(format!(
                "rank {rank}'s output differs in length from rank 0's"
            ));
        }
        if let Some(i) = (0..first.len()).find(|&i| first[i].to_bits() != other[i].to_bits()) {
            return Err(format!(
                "rank {rank}'s output differs from rank 0's at {i}: {:#x} vs {:#x}",
                other[i].to_bits(),
                first[i].to_bits()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn f32s(v: &[f32]) -> Vec<f32> {
        v.to_vec()
    }

    #[test]
    fn inputs_are_deterministic_and_contain_specials() {
        let a = random_inputs::<bf16>(2, 4096, 7);
        let b = random_inputs::<bf16>(2, 4096, 7);
        assert_eq!(
            a[1].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b[1].iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert!(a[0].iter().any(|x| x.is_nan()));
        assert!(a[0].iter().any(|x| x.is_infinite()));
        assert_ne!(a[0][..100], a[1][..100], "ranks get different data");
        // The sentinel pair sits at an even index on every rank.
        let mid = 2048;
        assert_eq!(
            (a[0][mid + 2].to_bits(), a[0][mid + 3].to_bits()),
            (0x0000, 0x8000)
        );
    }

    #[test]
    fn a_correct_sum_passes_and_a_wrong_one_fails() {
        let inputs = vec![
            f32s(&[1.0, -0.0, 0.0, f32::NAN, 3.0]),
            f32s(&[2.0, -0.0, -0.0, 1.0, f32::INFINITY]),
        ];
        let good = f32s(&[3.0, -0.0, 0.0, f32::NAN, f32::INFINITY]);
        assert!(check_all_reduce(&inputs, &good, SentinelRule::None).is_ok());
        let mut wrong_sign = good.clone();
        wrong_sign[1] = 0.0;
        assert!(check_all_reduce(&inputs, &wrong_sign, SentinelRule::None).is_err());
        let mut off = good.clone();
        off[0] = 3.001;
        let err = check_all_reduce(&inputs, &off, SentinelRule::None).unwrap_err();
        assert!(err.contains("[0]"), "{err}");
    }

    #[test]
    fn lamport_sums_turn_a_sentinel_pair_into_positive_zeros() {
        // bf16 pairs: lo columns cancel to +0.0, hi columns are all -0.0, so
        // the sum word is the sentinel (+0.0, -0.0).
        let one = bf16::from_f64(1.0);
        let minus_one = bf16::from_f64(-1.0);
        let nz = bf16::from_f64(-0.0);
        let pz = bf16::from_f64(0.0);
        let inputs = vec![vec![one, nz], vec![minus_one, nz]];
        let substituted = [pz, pz];
        let kept = [pz, nz];
        assert!(check_all_reduce(&inputs, &substituted, SentinelRule::InputsAndSums).is_ok());
        assert!(check_all_reduce(&inputs, &kept, SentinelRule::InputsAndSums).is_err());
        assert!(check_all_reduce(&inputs, &kept, SentinelRule::Inputs).is_ok());
        assert!(check_all_reduce(&inputs, &substituted, SentinelRule::Inputs).is_err());
        // A lo sum that is not +0.0 leaves the hi -0.0 alone.
        let inputs = vec![vec![one, nz], vec![one, nz]];
        let two = bf16::from_f64(2.0);
        assert!(check_all_reduce(&inputs, &[two, nz], SentinelRule::InputsAndSums).is_ok());
        assert!(check_all_reduce(&inputs, &[two, pz], SentinelRule::InputsAndSums).is_err());
    }

    #[test]
    fn pushed_results_follow_the_sentinel_substitution() {
        // Both ranks send f32 -0.0: pushed as +0.0, so the sum is +0.0.
        let inputs = vec![f32s(&[-0.0]), f32s(&[-0.0])];
        assert!(check_all_reduce(&inputs, &[0.0], SentinelRule::Inputs).is_ok());
        assert!(check_all_reduce(&inputs, &[-0.0], SentinelRule::Inputs).is_err());
        assert!(check_all_reduce(&inputs, &[-0.0], SentinelRule::None).is_ok());
        assert!(check_all_gather(&inputs, &[0.0, 0.0], true).is_ok());
        assert!(check_all_gather(&inputs, &[-0.0, -0.0], false).is_ok());
    }

    #[test]
    fn bf16_pairs_substitute_only_the_sentinel_pair() {
        let pair = [bf16::from_bits(0x0000), bf16::from_bits(0x8000)];
        let swapped = [bf16::from_bits(0x8000), bf16::from_bits(0x0000)];
        let out = sentinel_substituted(&pair);
        assert_eq!((out[0].to_bits(), out[1].to_bits()), (0, 0));
        let out = sentinel_substituted(&swapped);
        assert_eq!((out[0].to_bits(), out[1].to_bits()), (0x8000, 0));
    }

    #[test]
    fn identical_outputs_are_bitwise() {
        let a = vec![f32s(&[f32::NAN, 1.0]), f32s(&[f32::NAN, 1.0])];
        assert!(check_identical(&a).is_ok());
        let b = vec![f32s(&[0.0]), f32s(&[-0.0])];
        assert!(check_identical(&b).is_err());
    }

    #[test]
    fn nccl_results_may_carry_one_rounding_per_hop() {
        // Four bf16 ranks whose sum cancels: 3.0 + 1.0 + -3.4375 + 0.0078125.
        let inputs: Vec<Vec<bf16>> = [3.0f32, 1.0, -3.4375, 0.0078125]
            .iter()
            .map(|&v| vec![bf16::from_f32(v)])
            .collect();
        let exact = 0.5703125f32;
        // Two bf16 units in the last place off: out of our kernels' contract,
        // within NCCL's (partial sums of magnitude ~4 rounded on the way).
        let off = vec![bf16::from_f32(exact + 2.0 * 2f32.powi(-8))];
        assert!(check_all_reduce(&inputs, &off, SentinelRule::None).is_err());
        assert!(check_nccl_all_reduce(&inputs, &off).is_ok());
        // Far off is wrong for NCCL too.
        let wrong = vec![bf16::from_f32(exact + 0.25)];
        assert!(check_nccl_all_reduce(&inputs, &wrong).is_err());
    }

    #[test]
    fn tolerance_scales_with_the_dtype() {
        // 1 + 2^-9 is not representable in bf16; both neighbours are accepted.
        let inputs = vec![
            vec![bf16::from_f64(1.0)],
            vec![bf16::from_f64(2f64.powi(-9))],
        ];
        assert!(check_all_reduce(&inputs, &[bf16::from_f64(1.0)], SentinelRule::None).is_ok());
        assert!(
            check_all_reduce(&inputs, &[bf16::from_f64(1.0078125)], SentinelRule::None).is_ok()
        );
        assert!(check_all_reduce(&inputs, &[bf16::from_f64(1.03125)], SentinelRule::None).is_err());
    }
}
