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
use policy::{Algo, Collective, DType};

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
    let mut bytes = le_bytes(data);
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

/// The bytes of `data` as they lie in device memory (little-endian).
pub fn le_bytes<T: Element>(data: &[T]) -> Vec<u8> {
    let size = std::mem::size_of::<T>();
    data.iter()
        .flat_map(|x| x.to_bits().to_le_bytes().into_iter().take(size))
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

/// The check of an all-reduce's or an all-gather's `output` that `ran`
/// produced: [`check_all_reduce_of`] (`nccl_across_gpus` as there), or
/// [`check_all_gather`] with `ran`'s sentinel substitution.
pub fn check_result<T: Element>(
    collective: Collective,
    ran: Algo,
    nccl_across_gpus: bool,
    inputs: &[Vec<T>],
    output: &[T],
) -> Result<(), String> {
    match collective {
        Collective::AllReduce => check_all_reduce_of(ran, nccl_across_gpus, inputs, output),
        Collective::AllGather => {
            check_all_gather(inputs, output, sentinel_rule(ran) != SentinelRule::None)
        }
        Collective::AllReduceAddRmsNorm => {
            Err("a fused call is checked against its AddRmsNormCase".into())
        }
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
    let inputs = substituted(inputs, rule);
    let len = output.len();
    if inputs.iter().any(|x| x.len() != len) {
        return Err("inputs and output differ in length".into());
    }
    if inputs.is_empty() || inputs.len() > MAX_WORLD {
        return Err(format!("{} ranks: expected 1..={MAX_WORLD}", inputs.len()));
    }
    let sums_substituted = rule == SentinelRule::InputsAndSums && T::DTYPE.size_bytes() == 2;
    let mut failures = Failures::default();
    let mut buffer = [0f64; MAX_WORLD];
    let column = &mut buffer[..inputs.len()];
    for i in 0..len {
        for (slot, input) in column.iter_mut().zip(&inputs) {
            *slot = input[i].to_f64();
        }
        let got = output[i].to_f64();
        // -0.0 only when every input is -0.0, unless the sums are sent as
        // Lamport data and this -0.0 completes a sentinel word: (+0.0, -0.0)
        // at an even index of a 16-bit type, which every rank then holds as
        // (+0.0, +0.0).
        let word_zeroed = sums_substituted && i % 2 == 1 && output[i - 1].to_bits() == 0;
        let zero_ok = |negative: bool| got.is_sign_negative() == (negative && !word_zeroed);
        if !sum_matches::<T>(column, got, extra_roundings, zero_ok) {
            failures.add(|| {
                format!(
                    "[{i}] inputs {column:?} -> expected {:e}, got {got:e} (bits {:#x})",
                    exact_sum(column),
                    output[i].to_bits()
                )
            });
        }
    }
    failures.into_result::<T>(len)
}

/// Every rank's inputs as the algorithm's Lamport data delivers them (see
/// the module docs).
fn substituted<T: Element>(inputs: &[Vec<T>], rule: SentinelRule) -> Vec<Vec<T>> {
    match rule {
        SentinelRule::None => inputs.to_vec(),
        _ => inputs.iter().map(|x| sentinel_substituted(x)).collect(),
    }
}

/// The exact sum of `column`, in order (rank order, then the residual).
fn exact_sum(column: &[f64]) -> f64 {
    column[1..].iter().fold(column[0], |acc, v| acc + v)
}

/// Whether `got` is the sum of `column` as kernels that sum in f32 and round
/// once to `T` give it, with `extra_roundings` roundings of partial sums on
/// top: NaN for a NaN sum, the infinity the sum rounds to, a zero when every
/// addend is one (`zero_ok` judges its sign, given whether every addend is
/// -0.0), anything else within the summation's and the roundings' error.
fn sum_matches<T: Element>(
    column: &[f64],
    got: f64,
    extra_roundings: usize,
    zero_ok: impl FnOnce(bool) -> bool,
) -> bool {
    if column.iter().all(|v| *v == 0.0) {
        return got == 0.0 && zero_ok(column.iter().all(|v| v.is_sign_negative()));
    }
    let exact = exact_sum(column);
    let (rel, abs) = output_slack(T::DTYPE);
    let magnitude: f64 = column.iter().map(|v| v.abs()).sum();
    let tolerance = column.len() as f64 * 2f64.powi(-24) * magnitude
        + rel * exact.abs()
        + extra_roundings as f64 * (rel * magnitude + abs)
        + 2.0 * abs;
    close::<T>(exact, got, tolerance)
}

/// Whether `got` is `expected` as `T` holds it: NaN for NaN, exactly the
/// infinity `expected` is or rounds to, anything else within `tolerance`.
fn close<T: Element>(expected: f64, got: f64, tolerance: f64) -> bool {
    let rounded = T::from_f64(expected).to_f64();
    if expected.is_nan() {
        got.is_nan()
    } else if expected.is_infinite() || rounded.is_infinite() {
        got == rounded
    } else {
        got.is_finite() && (got - expected).abs() <= tolerance
    }
}

/// How a fused all-reduce + add + RMSNorm formed its sums `x = Σ input +
/// residual`, as far as the reference needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumPath {
    /// A fused kernel: inputs (after `rule`'s substitution) and the residual
    /// summed in f32, rounded once; with [`SentinelRule::InputsAndSums`] the
    /// words of `x` equal to the sentinel are stored as 0.
    Fused(SentinelRule),
    /// The unfused path: an all-reduce whose Lamport data follows `rule`
    /// (its sums rounded to the dtype), then the residual added in f32 and
    /// rounded again.
    Unfused(SentinelRule),
}

impl SumPath {
    /// The path of a call that `ran` in a world of `world` ranks, where the
    /// unfused path's all-reduce is `inner`. A world of one runs no
    /// all-reduce, whatever `inner` says: its unfused path adds the input
    /// itself, rounded once and with no Lamport data, as a fused kernel with
    /// no sentinel rule does.
    pub fn of(ran: Algo, inner: Algo, world: usize) -> SumPath {
        match ran {
            Algo::Unfused if world == 1 => SumPath::Fused(SentinelRule::None),
            Algo::Unfused => SumPath::Unfused(sentinel_rule(inner)),
            _ => SumPath::Fused(sentinel_rule(ran)),
        }
    }

    fn rule(self) -> SentinelRule {
        match self {
            SumPath::Fused(rule) | SumPath::Unfused(rule) => rule,
        }
    }
}

/// The f32 arithmetic of a row's norm, relative: its squares summed in f32 by
/// a tree no deeper than 64 additions for 16384 elements (each at most 2^-24
/// off), then the division (rounded), the reciprocal square root (`rsqrtf`,
/// at most 2 units in the last place: 2^-22) and two products (rounded);
/// 2^-17 bounds them all with room.
const NORM_F32_SLACK: f64 = 1.0 / (1u64 << 17) as f64;

/// Half the smallest f32 subnormal: how far the kernels' first product of an
/// output element, x × scale in f32, can be off where it falls below f32's
/// normal range (there its error is absolute, not relative), before the
/// weight multiplies that error.
const F32_HALF_SUBNORMAL: f64 = f32::from_bits(1) as f64 / 2.0;

/// How far an output element (x × scale × weight, in f32, rounded to the
/// dtype) may be from its f64 reference `expected`: the dtype's rounding and
/// the norm's f32 arithmetic relative to it (`NORM_F32_SLACK`), two of the
/// dtype's smallest subnormals, and the first product's subnormal rounding
/// times the weight. The last one was missing, and a sweep's check of the
/// unfused path failed on it once (x two f32 subnormal units, scale 0.253,
/// weight 3.93: x × scale rounds from 0.51 to 1 unit, the weight makes it 4,
/// the reference is 1.99).
fn norm_tolerance(dtype: DType, expected: f64, weight: f64) -> f64 {
    let (rel, abs) = output_slack(dtype);
    (rel + NORM_F32_SLACK) * expected.abs() + 2.0 * abs + weight.abs() * F32_HALF_SUBNORMAL
}

/// A fused all-reduce + add + RMSNorm's data for `inputs.len()` ranks and its
/// f64 reference.
#[derive(Clone, Debug)]
pub struct AddRmsNormCase<T> {
    /// Every rank's partial sums, `tokens × hidden`.
    pub inputs: Vec<Vec<T>>,
    /// The residual every rank passes (`tokens × hidden`).
    pub residual: Vec<T>,
    /// The norm's weight (`hidden`).
    pub weight: Vec<T>,
    pub hidden: usize,
    pub eps: f32,
}

impl<T: Element> AddRmsNormCase<T> {
    /// Deterministic data ([`random_inputs`]'s values and special values for
    /// inputs, residual and weight). A NaN or an infinity in a row makes the
    /// whole row's norm NaN or zero, so only every third row (1, 4, 7, …)
    /// keeps them in its inputs and residual; in the others they become 0.75.
    /// Subnormals and signed zeros stay everywhere, as do the weight's NaNs.
    pub fn random(world: usize, tokens: usize, hidden: usize, seed: u64) -> AddRmsNormCase<T> {
        let len = tokens * hidden;
        let mut data = random_inputs::<T>(world + 1, len, seed);
        for row_data in &mut data {
            for (row, values) in row_data.chunks_mut(hidden.max(1)).enumerate() {
                if row % 3 != 1 {
                    for v in values.iter_mut().filter(|v| !v.to_f64().is_finite()) {
                        *v = T::from_f64(0.75);
                    }
                }
            }
        }
        let residual = data.pop().expect("world + 1 tensors");
        // An infinite weight makes `x · scale · w` NaN where f32 rounds a tiny
        // `x · scale` to 0 and f64 does not: the weight keeps its NaN,
        // subnormals and signed zeros, its infinities become 0.75.
        let weight = random_inputs::<T>(1, hidden, seed ^ 0x3e1_9b7)
            .pop()
            .expect("one tensor")
            .into_iter()
            .map(|w| {
                if w.to_f64().is_infinite() {
                    T::from_f64(0.75)
                } else {
                    w
                }
            })
            .collect();
        AddRmsNormCase {
            inputs: data,
            residual,
            weight,
            hidden,
            eps: 1e-5,
        }
    }

    /// Checks one rank's new residual (`x`) and output against the f64
    /// reference: `x` against the exact sum of the inputs (substituted as
    /// `path` says) and the old residual, within the all-reduce's tolerance
    /// (plus `extra_roundings` roundings of the sums, for NCCL's); the output
    /// against `x · w / sqrt(mean(x²) + eps)` computed in f64 from the `x` the
    /// kernel stored (the norm is taken of the rounded sum), within one unit
    /// in the last place of the dtype and `NORM_F32_SLACK` (2^-17). NaN must be
    /// NaN, an infinity the same infinity.
    pub fn check(
        &self,
        path: SumPath,
        extra_roundings: usize,
        x: &[T],
        output: &[T],
    ) -> Result<(), String> {
        let len = self.residual.len();
        if x.len() != len || output.len() != len || self.inputs.iter().any(|i| i.len() != len) {
            return Err(format!(
                "lengths differ: residual {}, new residual {}, output {}",
                len,
                x.len(),
                output.len()
            ));
        }
        if self.hidden == 0 || !len.is_multiple_of(self.hidden) || self.weight.len() != self.hidden
        {
            return Err("the case's rows do not fit its hidden size".into());
        }
        self.check_sums(path, extra_roundings, x)
            .map_err(|e| format!("new residual: {e}"))?;
        self.check_norm(x, output)
            .map_err(|e| format!("output: {e}"))
    }

    fn check_sums(&self, path: SumPath, extra_roundings: usize, x: &[T]) -> Result<(), String> {
        let inputs = substituted(&self.inputs, path.rule());
        let unfused = matches!(path, SumPath::Unfused(_));
        let sums_substituted =
            path.rule() == SentinelRule::InputsAndSums && T::DTYPE.size_bytes() == 2;
        let extra = extra_roundings + usize::from(unfused);
        let mut failures = Failures::default();
        for i in 0..x.len() {
            let column: Vec<f64> = inputs
                .iter()
                .map(|input| input[i].to_f64())
                .chain([self.residual[i].to_f64()])
                .collect();
            let got = x[i].to_f64();
            // A sentinel word (+0.0, -0.0) of sums is stored as (+0.0, +0.0):
            // of x itself (a fused kernel), or of the all-reduce's sums
            // before the residual's -0.0 is added (the unfused path).
            let word_zeroed = || {
                sums_substituted
                    && i % 2 == 1
                    && if unfused {
                        inputs
                            .iter()
                            .map(|input| input[i - 1].to_f64())
                            .sum::<f64>()
                            == 0.0
                    } else {
                        x[i - 1].to_bits() == 0
                    }
            };
            let zero_ok =
                |negative: bool| got.is_sign_negative() == negative || (negative && word_zeroed());
            if !sum_matches::<T>(&column, got, extra, zero_ok) {
                failures.add(|| {
                    format!(
                        "[{i}] inputs and residual {column:?} -> expected {:e}, got {got:e} \
                         (bits {:#x})",
                        exact_sum(&column),
                        x[i].to_bits()
                    )
                });
            }
        }
        failures.into_result::<T>(x.len())
    }

    fn check_norm(&self, x: &[T], output: &[T]) -> Result<(), String> {
        let mut failures = Failures::default();
        for (row, (xs, outs)) in x
            .chunks_exact(self.hidden)
            .zip(output.chunks_exact(self.hidden))
            .enumerate()
        {
            let squares: f64 = xs.iter().map(|v| v.to_f64() * v.to_f64()).sum();
            let scale = 1.0 / (squares / self.hidden as f64 + f64::from(self.eps)).sqrt();
            for (k, ((xv, w), got)) in xs.iter().zip(&self.weight).zip(outs).enumerate() {
                let expected = xv.to_f64() * scale * w.to_f64();
                let got = got.to_f64();
                let tolerance = norm_tolerance(T::DTYPE, expected, w.to_f64());
                if !close::<T>(expected, got, tolerance) {
                    failures.add(|| {
                        format!(
                            "[row {row}, {k}] x {:e}, weight {:e}, row scale {scale:e} -> \
                             expected {expected:e}, got {got:e}",
                            xv.to_f64(),
                            w.to_f64()
                        )
                    });
                }
            }
        }
        failures.into_result::<T>(output.len())
    }
}

/// The wrong elements of a check: how many, and the first few in words.
#[derive(Default)]
struct Failures {
    count: usize,
    first: Vec<String>,
}

impl Failures {
    fn add(&mut self, describe: impl FnOnce() -> String) {
        self.count += 1;
        if self.first.len() < 5 {
            self.first.push(describe());
        }
    }

    fn into_result<T: Element>(self, len: usize) -> Result<(), String> {
        if self.count == 0 {
            Ok(())
        } else {
            Err(format!(
                "{} of {len} {} elements wrong; first: {}",
                self.count,
                T::DTYPE.name(),
                self.first.join("; ")
            ))
        }
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
        let bad: Vec<usize> = (0..expected.len())
            .filter(|&j| expected[j].to_bits() != output[offset + j].to_bits())
            .collect();
        if let Some(&j) = bad.first() {
            return Err(format!(
                "{} elements of rank {rank}'s share wrong; first at share index {j} (output \
                 index {}): expected bits {:#x}, got {:#x}",
                bad.len(),
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

    /// The kernels' arithmetic of one f32 output element.
    fn kernel_output(x: f32, scale: f32, weight: f32) -> f32 {
        x * scale * weight
    }

    #[test]
    fn an_output_whose_first_product_is_subnormal_is_within_the_bound() {
        // The element a sweep's check flagged (row 240, element 109 of a
        // 6 MiB f32 eager call): x = 2 subnormal units, its row's scale and
        // weight as the check reported them.
        let (x, scale, weight) = (2.0 * f32::from_bits(1), 0.253_320_45_f32, 3.932_389_3_f32);
        let got = f64::from(kernel_output(x, scale, weight));
        let expected = f64::from(x) * f64::from(scale) * f64::from(weight);
        assert_eq!(
            got,
            4.0 * f64::from(f32::from_bits(1)),
            "the kernels' rounding"
        );
        let error = (got - expected).abs();
        let (rel, abs) = output_slack(DType::F32);
        let without_weight_term = (rel + NORM_F32_SLACK) * expected.abs() + 2.0 * abs;
        assert!(
            error > without_weight_term,
            "the old bound missed it: {error:e}"
        );
        assert!(error <= norm_tolerance(DType::F32, expected, f64::from(weight)));
        // And every x of a few subnormal units, scales and weights over their
        // ranges: the kernels' f32 result stays within the bound.
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        for _ in 0..100_000 {
            let x = f32::from_bits(rng.random_range(1..64u32))
                * if rng.random_bool(0.5) { 1.0 } else { -1.0 };
            let scale = rng.random_range(0.01f32..8.0);
            let weight = rng.random_range(-16f32..16.0);
            let got = f64::from(kernel_output(x, scale, weight));
            let expected = f64::from(x) * f64::from(scale) * f64::from(weight);
            assert!(
                (got - expected).abs() <= norm_tolerance(DType::F32, expected, f64::from(weight)),
                "x {x:e} scale {scale} weight {weight}: {got:e} against {expected:e}"
            );
        }
    }

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

    /// What a fused kernel computes, on the host in f32 as the kernels do
    /// (sums in rank order then the residual, rounded once; the norm of the
    /// rounded sums, each output rounded once): `(x, output)`.
    fn fused_model<T: Element>(case: &AddRmsNormCase<T>, rule: SentinelRule) -> (Vec<T>, Vec<T>) {
        let inputs = substituted(&case.inputs, rule);
        let mut x: Vec<T> = (0..case.residual.len())
            .map(|i| {
                let sum = inputs[1..]
                    .iter()
                    .fold(inputs[0][i].to_f64() as f32, |acc, v| {
                        acc + v[i].to_f64() as f32
                    });
                T::from_f64(f64::from(sum + case.residual[i].to_f64() as f32))
            })
            .collect();
        if rule == SentinelRule::InputsAndSums {
            x = sentinel_substituted(&x);
        }
        let mut output = Vec::with_capacity(x.len());
        for row in x.chunks_exact(case.hidden) {
            let squares: f32 = row.iter().map(|v| (v.to_f64() as f32).powi(2)).sum();
            // The kernels' rsqrtf is at most 2 units in the last place off
            // the rounded 1 / sqrt: the model takes that worst case, where
            // it is finite and not 0 (rsqrtf(+inf) is +0, of NaN NaN).
            let exact = 1.0 / (squares / case.hidden as f32 + case.eps).sqrt();
            let scale = if exact.is_normal() {
                exact.next_up().next_up()
            } else {
                exact
            };
            for (v, w) in row.iter().zip(&case.weight) {
                let out = v.to_f64() as f32 * scale * w.to_f64() as f32;
                output.push(T::from_f64(f64::from(out)));
            }
        }
        (x, output)
    }

    #[test]
    fn fused_cases_keep_special_values_to_every_third_row() {
        let case = AddRmsNormCase::<bf16>::random(2, 6, 256, 3);
        let special = |row: usize| {
            case.inputs
                .iter()
                .chain([&case.residual])
                .any(|t| t[row * 256..(row + 1) * 256].iter().any(|v| !v.is_finite()))
        };
        assert!(special(1) || special(4), "rows 1 and 4 carry NaN or inf");
        for row in [0, 2, 3, 5] {
            assert!(!special(row), "row {row}");
        }
        assert_eq!(case.weight.len(), 256);
        assert!(case.inputs.iter().all(|i| i.len() == 6 * 256));
    }

    #[test]
    fn the_fused_reference_accepts_the_kernels_arithmetic_in_every_dtype() {
        fn accepts<T: Element>() {
            for (world, rule) in [
                (1, SentinelRule::Inputs),
                (2, SentinelRule::Inputs),
                (4, SentinelRule::InputsAndSums),
                (8, SentinelRule::InputsAndSums),
            ] {
                let case = AddRmsNormCase::<T>::random(world, 7, 64, world as u64);
                let (x, output) = fused_model(&case, rule);
                case.check(SumPath::Fused(rule), 0, &x, &output)
                    .unwrap_or_else(|e| panic!("{} world {world}: {e}", T::DTYPE.name()));
            }
        }
        accepts::<bf16>();
        accepts::<half::f16>();
        accepts::<f32>();
    }

    #[test]
    fn the_fused_reference_rejects_wrong_sums_norms_and_special_values() {
        let case = AddRmsNormCase::<bf16>::random(2, 4, 64, 17);
        let (x, output) = fused_model(&case, SentinelRule::Inputs);
        let check =
            |x: &[bf16], out: &[bf16]| case.check(SumPath::Fused(SentinelRule::Inputs), 0, x, out);
        assert!(check(&x, &output).is_ok());
        // A finite element of row 0 off by a few units: in x, in the output.
        let i = (0..64)
            .find(|&i| x[i].to_f64().abs() > 1.0)
            .expect("a large element");
        let mut off = x.clone();
        off[i] = bf16::from_f64(x[i].to_f64() * 1.05);
        assert!(check(&off, &output).unwrap_err().contains("new residual"));
        let mut off = output.clone();
        off[i] = bf16::from_f64(output[i].to_f64() * 1.05);
        assert!(check(&x, &off).unwrap_err().contains("output"));
        // The norm without the weight, or with another epsilon's scale.
        let unweighted: Vec<bf16> = x
            .chunks_exact(64)
            .flat_map(|row| {
                let squares: f64 = row.iter().map(|v| v.to_f64() * v.to_f64()).sum();
                let scale = 1.0 / (squares / 64.0 + 1e-5).sqrt();
                row.iter().map(move |v| bf16::from_f64(v.to_f64() * scale))
            })
            .collect();
        assert!(check(&x, &unweighted).is_err());
        // The residual's old value, and the poison, are no result.
        assert!(check(&case.residual, &output).is_err());
        let poisoned = vec![bf16::from_bits(0x5a5a); x.len()];
        assert!(check(&x, &poisoned).is_err());
        // A NaN where the reference is finite.
        let mut nan = output.clone();
        nan[i] = bf16::from_f64(f64::NAN);
        assert!(check(&x, &nan).is_err());
    }

    #[test]
    fn a_world_of_one_has_no_lamport_data_whatever_all_reduce_is_forced() {
        // The bf16 pair (+0.0, -0.0) is the sentinel word. A world of one's
        // unfused path runs no all-reduce, so nothing replaces it: with a
        // residual of -0.0, x keeps its -0.0 (-0.0 + -0.0), which a
        // one_shot_push all-reduce would have made +0.0 (+0.0 + -0.0).
        let mut input = vec![bf16::from_f64(1.0); 64];
        input[2] = bf16::from_bits(0x0000);
        input[3] = bf16::from_bits(0x8000);
        let mut residual = vec![bf16::from_f64(0.0); 64];
        residual[3] = bf16::from_bits(0x8000);
        let case = AddRmsNormCase {
            inputs: vec![input],
            residual,
            weight: vec![bf16::from_f64(1.0); 64],
            hidden: 64,
            eps: 1e-5,
        };
        let (x, output) = fused_model(&case, SentinelRule::None);
        assert_eq!(x[3].to_bits(), 0x8000, "the kernel's x keeps -0.0");
        for forced in [Algo::OneShotPush, Algo::TwoShotPush, Algo::Nccl] {
            let path = SumPath::of(Algo::Unfused, forced, 1);
            assert_eq!(path, SumPath::Fused(SentinelRule::None), "{forced:?}");
            case.check(path, 0, &x, &output)
                .unwrap_or_else(|e| panic!("forced {forced:?}: {e}"));
        }
        // In a world of two the forced all-reduce's rule holds.
        assert_eq!(
            SumPath::of(Algo::Unfused, Algo::OneShotPush, 2),
            SumPath::Unfused(SentinelRule::Inputs)
        );
        assert!(
            case.check(SumPath::Unfused(SentinelRule::Inputs), 0, &x, &output)
                .unwrap_err()
                .contains("got -0e0")
        );
    }

    #[test]
    fn the_unfused_path_may_round_its_sums_twice() {
        // 1 + 2^-8 rounds to 1 in bf16 (the all-reduce's sum), then + 2^-8
        // rounds to 1 again, where the single rounding of 1 + 2^-7 gives
        // 1.0078125: one unit apart, accepted; four units apart is not.
        let case = AddRmsNormCase {
            inputs: vec![
                vec![bf16::from_f64(1.0); 64],
                vec![bf16::from_f64(2f64.powi(-8)); 64],
            ],
            residual: vec![bf16::from_f64(2f64.powi(-8)); 64],
            weight: vec![bf16::from_f64(1.0); 64],
            hidden: 64,
            eps: 1e-5,
        };
        let twice = vec![bf16::from_f64(1.0); 64];
        let output = vec![bf16::from_f64(1.0); 64];
        let tolerant = case.check(SumPath::Unfused(SentinelRule::None), 0, &twice, &output);
        assert!(tolerant.is_ok(), "{tolerant:?}");
        let far = vec![bf16::from_f64(1.03125); 64];
        assert!(
            case.check(SumPath::Unfused(SentinelRule::None), 0, &far, &output)
                .is_err()
        );
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
