//! One rank's part of a Llama decoder on candle: RMSNorm, RoPE (with Llama 3's
//! scaling), grouped-query attention over a KV cache, SwiGLU MLP; split as
//! Megatron does (see `plan`), with an all-reduce after the attention output
//! and down projections, each with the residual add and the RMSNorm that
//! follow it (`Collectives::all_reduce_add_rms_norm`, which a back-end may
//! run as one fused call), and an all-gather of the vocabulary-split logits.
//!
//! Every shape of a decode step is fixed, and everything that changes between
//! steps (the token, its position) is read from device tensors, so a step can
//! be captured into a CUDA graph once and replayed: the cache has a fixed
//! length, new keys and values are scattered to the position, and attention
//! covers the whole cache under a mask row picked by the position.

use candle_core::{D, DType, Device, Result, Tensor};
use candle_nn::ops::{rms_norm, silu, softmax_last_dim};
use candle_nn::rotary_emb::rope;

use crate::config::{Config, rope_inv_freq};
use crate::plan::{self, RankDims, WeightSpec};
use crate::weights::WeightSource;

/// The collectives a rank's forward pass calls.
pub trait Collectives {
    /// Sums `x` over the ranks (every rank passes the same shape).
    fn all_reduce(&self, x: &Tensor) -> Result<Tensor>;
    /// `x` is `[1, n]`; returns `[world, n]`, the ranks' parts stacked in
    /// rank order (as NCCL and colltune lay them out).
    fn all_gather(&self, x: &Tensor) -> Result<Tensor>;
    /// `x = residual + Σ partial` and its RMSNorm with `weight`: returns
    /// `(rms_norm(x), x)`. By default the all-reduce, then candle's add and
    /// `rms_norm`; a back-end with a fused call overrides it.
    fn all_reduce_add_rms_norm(
        &self,
        partial: &Tensor,
        residual: &Tensor,
        weight: &Tensor,
        eps: f32,
    ) -> Result<(Tensor, Tensor)> {
        let x = (residual + self.all_reduce(partial)?)?;
        Ok((rms_norm(&x, weight, eps)?, x))
    }
}

/// The `none` back-end: no communication. The all-reduce is a local copy and
/// the all-gather places this rank's part and leaves the rest zero, so the
/// results are wrong for more than one rank; the time is the floor under any
/// real collective. For one rank it is exact.
pub struct LocalCopy {
    pub rank: usize,
    pub world: usize,
}

impl Collectives for LocalCopy {
    fn all_reduce(&self, x: &Tensor) -> Result<Tensor> {
        x.copy()
    }

    fn all_gather(&self, x: &Tensor) -> Result<Tensor> {
        let n = x.dim(1)?;
        if self.world == 1 {
            return x.copy();
        }
        let out = Tensor::zeros((self.world, n), x.dtype(), x.device())?;
        out.slice_set(&x.contiguous()?, 0, self.rank)?;
        Ok(out)
    }
}

struct Layer {
    input_norm: Tensor,
    /// `[qkv_width, hidden]`: this rank's query, key and value rows, stacked.
    qkv: Tensor,
    /// `[hidden, heads * head_dim]`: this rank's columns.
    o: Tensor,
    post_norm: Tensor,
    /// `[2 * intermediate, hidden]`: this rank's gate rows, then its up rows.
    gate_up: Tensor,
    /// `[hidden, intermediate]`: this rank's columns.
    down: Tensor,
}

pub struct RankModel {
    pub cfg: Config,
    pub dims: RankDims,
    pub dtype: DType,
    pub device: Device,
    /// Positions the cache holds (prompt plus decoded tokens).
    pub max_positions: usize,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
    /// `[max_positions, head_dim / 2]`, in the model's dtype.
    cos: Tensor,
    sin: Tensor,
    /// `[max_positions, max_positions]` f32: row `p` is 0 up to `p`, -inf after.
    mask: Tensor,
}

/// Keys and values of every layer: `[batch, kv_heads, max_positions, head_dim]`.
pub struct KvCache {
    batch: usize,
    k: Vec<Tensor>,
    v: Vec<Tensor>,
}

fn load_fused(
    source: &dyn WeightSource,
    specs: &[&WeightSpec],
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let parts = specs
        .iter()
        .map(|s| source.load(s, dtype))
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&parts, 0)?.to_device(device)
}

fn load_one(
    source: &dyn WeightSource,
    spec: &WeightSpec,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    source.load(spec, dtype)?.to_device(device)
}

impl RankModel {
    /// Loads this rank's weights onto `device`; `progress(layer)` is called as
    /// each layer arrives.
    pub fn load(
        cfg: &Config,
        dims: RankDims,
        source: &dyn WeightSource,
        dtype: DType,
        device: &Device,
        max_positions: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<RankModel> {
        let embed = load_one(source, &plan::embed_spec(cfg), dtype, device)?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let s = plan::layer_specs(cfg, &dims, l);
            layers.push(Layer {
                input_norm: load_one(source, &s.input_norm, dtype, device)?,
                qkv: load_fused(source, &[&s.qkv[0], &s.qkv[1], &s.qkv[2]], dtype, device)?,
                o: load_one(source, &s.o, dtype, device)?,
                post_norm: load_one(source, &s.post_norm, dtype, device)?,
                gate_up: load_fused(source, &[&s.gate_up[0], &s.gate_up[1]], dtype, device)?,
                down: load_one(source, &s.down, dtype, device)?,
            });
            progress(l);
        }
        let norm = load_one(source, &plan::final_norm_spec(cfg), dtype, device)?;
        let lm_head = load_one(source, &plan::lm_head_spec(cfg, &dims), dtype, device)?;

        let inv_freq = rope_inv_freq(cfg);
        let half = inv_freq.len();
        let mut angles = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            angles.extend(inv_freq.iter().map(|f| p as f64 * f));
        }
        let table = |f: fn(f64) -> f64| -> Result<Tensor> {
            let v: Vec<f32> = angles.iter().map(|&a| f(a) as f32).collect();
            Tensor::from_vec(v, (max_positions, half), &Device::Cpu)?
                .to_dtype(dtype)?
                .to_device(device)
        };
        let cos = table(f64::cos)?;
        let sin = table(f64::sin)?;
        let mut mask = vec![0f32; max_positions * max_positions];
        for p in 0..max_positions {
            for k in p + 1..max_positions {
                mask[p * max_positions + k] = f32::NEG_INFINITY;
            }
        }
        let mask = Tensor::from_vec(mask, (max_positions, max_positions), &Device::Cpu)?
            .to_device(device)?;
        Ok(RankModel {
            cfg: cfg.clone(),
            dims,
            dtype,
            device: device.clone(),
            max_positions,
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            mask,
        })
    }

    /// A zeroed cache for `batch` sequences (zero, not uninitialised: masked
    /// entries are multiplied by zero probabilities, which must not meet a NaN).
    pub fn new_cache(&self, batch: usize) -> Result<KvCache> {
        let shape = (
            batch,
            self.dims.kv_heads,
            self.max_positions,
            self.dims.head_dim,
        );
        let mut k = Vec::with_capacity(self.layers.len());
        let mut v = Vec::with_capacity(self.layers.len());
        for _ in &self.layers {
            k.push(Tensor::zeros(shape, self.dtype, &self.device)?);
            v.push(Tensor::zeros(shape, self.dtype, &self.device)?);
        }
        Ok(KvCache { batch, k, v })
    }

    /// Runs `tokens` (u32 `[batch, t]`) at `positions` (u32 `[batch, t]`,
    /// below `max_positions`) through the model, writing their keys and
    /// values into `cache`, and returns `[batch, vocab]` logits, gathered:
    /// of the flattened `[batch * t]` rows `rows` (u32 `[batch]`), or of each
    /// sequence's last entry when `rows` is `None`.
    pub fn forward(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        rows: Option<&Tensor>,
        cache: &KvCache,
        comm: &dyn Collectives,
    ) -> Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        if b != cache.batch {
            candle_core::bail!("{b} sequences against a cache of {}", cache.batch);
        }
        let RankDims {
            heads: hq,
            kv_heads: hk,
            head_dim: d,
            intermediate: il,
            ..
        } = self.dims;
        let group = hq / hk;
        let max = self.max_positions;
        let eps = self.cfg.rms_eps as f32;
        let scale = 1.0 / (d as f64).sqrt();

        let flat = positions.flatten_all()?;
        let mut x = self.embed.index_select(&tokens.flatten_all()?, 0)?; // [b * t, hidden]
        let cos = self.cos.index_select(&flat, 0)?.reshape((b, t, d / 2))?;
        let sin = self.sin.index_select(&flat, 0)?.reshape((b, t, d / 2))?;
        // Each sequence's rows of the mask, broadcast over heads and groups.
        let mask = self
            .mask
            .index_select(&flat, 0)?
            .reshape((b, 1, 1, t, max))?;
        // Where this step's keys and values go in the cache.
        let slot = positions
            .reshape((b, 1, t, 1))?
            .broadcast_as((b, hk, t, d))?
            .contiguous()?;
        let heads = |m: &Tensor, from: usize, n: usize| -> Result<Tensor> {
            m.narrow(1, from * d, n * d)?
                .reshape((b, t, n, d))?
                .transpose(1, 2)?
                .contiguous() // [b, n, t, d]
        };
        // The first layer's input norm follows no all-reduce; every other norm
        // follows one, with the residual add: the attention output's (the
        // post-attention norm), the down projection's (the next layer's input
        // norm, or the final norm after the last layer).
        let mut h = match self.layers.first() {
            Some(first) => rms_norm(&x, &first.input_norm, eps)?,
            None => rms_norm(&x, &self.norm, eps)?,
        };
        for (l, layer) in self.layers.iter().enumerate() {
            let qkv = h.matmul(&layer.qkv.t()?)?; // [b * t, qkv_width]
            let q = rope(&heads(&qkv, 0, hq)?, &cos, &sin)?;
            let k = rope(&heads(&qkv, hq, hk)?, &cos, &sin)?;
            let v = heads(&qkv, hq + hk, hk)?;
            cache.k[l].scatter_set(&slot, &k, 2)?;
            cache.v[l].scatter_set(&slot, &v, 2)?;
            // Query heads grouped by their key/value head: [b, hk, group * t, d].
            let q = q.reshape((b, hk, group * t, d))?;
            let scores = q
                .matmul(&cache.k[l].t()?)?
                .to_dtype(DType::F32)?
                .affine(scale, 0.0)?
                .reshape((b, hk, group, t, max))?
                .broadcast_add(&mask)?;
            let probs = softmax_last_dim(&scores)?.to_dtype(self.dtype)?.reshape((
                b,
                hk,
                group * t,
                max,
            ))?;
            let attn = probs
                .matmul(&cache.v[l])? // [b, hk, group * t, d]
                .reshape((b, hq, t, d))?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b * t, hq * d))?;
            let o = attn.matmul(&layer.o.t()?)?;
            let (post, after_attention) =
                comm.all_reduce_add_rms_norm(&o, &x, &layer.post_norm, eps)?;
            x = after_attention;
            let gate_up = post.matmul(&layer.gate_up.t()?)?; // [b * t, 2 * il]
            let act = (silu(&gate_up.narrow(1, 0, il)?)? * gate_up.narrow(1, il, il)?)?;
            let down = act.matmul(&layer.down.t()?)?;
            let next_norm = self.layers.get(l + 1).map_or(&self.norm, |n| &n.input_norm);
            (h, x) = comm.all_reduce_add_rms_norm(&down, &x, next_norm, eps)?;
        }
        // `h` holds every row normalised by the final norm (a row's norm is
        // its own, so picking rows after it is picking them before it).
        let last = match rows {
            Some(r) => h.index_select(r, 0)?,
            None if t == 1 => h,
            None => h
                .reshape((b, t, ()))?
                .narrow(1, t - 1, 1)?
                .squeeze(1)?
                .contiguous()?,
        };
        let logits = last.matmul(&self.lm_head.t()?)?; // [b, vocab / world]
        gather_vocab(&logits, comm, self.dims.world)
    }
}

/// Gathers `[b, n]` vocabulary parts into `[b, world * n]` logits with one
/// all-gather of the whole batch: the collective concatenates the ranks'
/// `[b * n]` messages, and each sequence's row is then its parts in rank order.
fn gather_vocab(logits: &Tensor, comm: &dyn Collectives, world: usize) -> Result<Tensor> {
    let (b, n) = logits.dims2()?;
    let gathered = comm.all_gather(&logits.reshape((1, b * n))?)?;
    if gathered.dims() != [world, b * n] {
        candle_core::bail!(
            "an all-gather of [1, {}] over {world} ranks gave {:?}, not [{world}, {}]",
            b * n,
            gathered.dims(),
            b * n
        );
    }
    if world == 1 {
        return gathered.reshape((b, n));
    }
    gathered
        .reshape((world, b, n))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((b, world * n))
}

/// The greedy choice of each sequence: the first index of its largest
/// logit, as u32 `[batch]`.
pub fn greedy(logits: &Tensor) -> Result<Tensor> {
    logits.argmax(D::Minus1)
}

#[cfg(test)]
pub mod tests {
    use std::sync::{Arc, Barrier, Mutex};

    use super::*;
    use crate::prompt::Prefill;
    use crate::weights::Seeded;

    /// Ranks in threads of one process, on the CPU: sums and concatenations
    /// in rank order, identical on every rank.
    pub struct ThreadGroup {
        rank: usize,
        world: usize,
        barrier: Arc<Barrier>,
        slots: Arc<Mutex<Vec<Vec<f32>>>>,
    }

    impl ThreadGroup {
        pub fn new(world: usize) -> Vec<ThreadGroup> {
            let barrier = Arc::new(Barrier::new(world));
            let slots = Arc::new(Mutex::new(vec![Vec::new(); world]));
            (0..world)
                .map(|rank| ThreadGroup {
                    rank,
                    world,
                    barrier: barrier.clone(),
                    slots: slots.clone(),
                })
                .collect()
        }

        fn exchange(&self, x: &Tensor) -> Result<Vec<Vec<f32>>> {
            let mine = x.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            self.slots.lock().unwrap()[self.rank] = mine;
            self.barrier.wait();
            let all = self.slots.lock().unwrap().clone();
            // Nobody overwrites a slot before every rank has read them all.
            self.barrier.wait();
            Ok(all)
        }
    }

    impl Collectives for ThreadGroup {
        fn all_reduce(&self, x: &Tensor) -> Result<Tensor> {
            let all = self.exchange(x)?;
            let mut sum = vec![0f32; all[0].len()];
            for part in &all {
                for (s, v) in sum.iter_mut().zip(part) {
                    *s += v;
                }
            }
            Tensor::from_vec(sum, x.shape(), x.device())?.to_dtype(x.dtype())
        }

        fn all_gather(&self, x: &Tensor) -> Result<Tensor> {
            let all = self.exchange(x)?;
            let n = all[0].len();
            let cat: Vec<f32> = all.concat();
            assert_eq!(cat.len(), n * self.world);
            Tensor::from_vec(cat, (self.world, n), x.device())?.to_dtype(x.dtype())
        }
    }

    pub struct Decoded {
        /// Each sequence's tokens: the prefill's, then one per decode step.
        pub tokens: Vec<Vec<u32>>,
        /// The logits of the first decode step (the one after the prompt's),
        /// `[batch, vocab]` flattened.
        pub first_step_logits: Vec<f32>,
    }

    fn row_tokens(logits: &Tensor) -> Vec<u32> {
        greedy(logits).unwrap().to_vec1::<u32>().unwrap()
    }

    /// Prefill `prompts` (one per sequence, of any lengths), then `steps`
    /// greedy decode steps of the whole batch, on the CPU.
    pub fn decode(
        model: &RankModel,
        comm: &dyn Collectives,
        prompts: &[Vec<u32>],
        steps: usize,
    ) -> Decoded {
        let p = Prefill::new(prompts).unwrap();
        let b = p.batch;
        let cache = model.new_cache(b).unwrap();
        let dev = &model.device;
        let logits = model
            .forward(
                &Tensor::from_vec(p.tokens.clone(), (b, p.len), dev).unwrap(),
                &Tensor::from_vec(p.positions.clone(), (b, p.len), dev).unwrap(),
                Some(&Tensor::new(p.last_rows.as_slice(), dev).unwrap()),
                &cache,
                comm,
            )
            .unwrap();
        let mut next = row_tokens(&logits);
        let mut tokens: Vec<Vec<u32>> = next.iter().map(|&t| vec![t]).collect();
        let mut first = Vec::new();
        for i in 0..steps {
            let pos: Vec<u32> = p.lens.iter().map(|&l| (l + i) as u32).collect();
            let logits = model
                .forward(
                    &Tensor::from_vec(next.clone(), (b, 1), dev).unwrap(),
                    &Tensor::from_vec(pos, (b, 1), dev).unwrap(),
                    None,
                    &cache,
                    comm,
                )
                .unwrap();
            if i == 0 {
                first = logits
                    .to_dtype(DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap();
            }
            next = row_tokens(&logits);
            for (seq, &t) in tokens.iter_mut().zip(&next) {
                seq.push(t);
            }
        }
        Decoded {
            tokens,
            first_step_logits: first,
        }
    }

    pub fn cpu_model(
        cfg: &Config,
        rank: usize,
        world: usize,
        dtype: DType,
        max: usize,
    ) -> RankModel {
        let source = Seeded {
            seed: 11,
            threads: 2,
        };
        let dims = RankDims::new(cfg, rank, world).unwrap();
        RankModel::load(cfg, dims, &source, dtype, &Device::Cpu, max, &mut |_| {}).unwrap()
    }

    /// Runs a world of `world` ranks in threads; returns each rank's result.
    pub fn run_world(
        cfg: &Config,
        world: usize,
        dtype: DType,
        prompts: &[Vec<u32>],
        steps: usize,
    ) -> Vec<Decoded> {
        let longest = prompts.iter().map(Vec::len).max().unwrap();
        let max = longest + steps + 1;
        let comms = ThreadGroup::new(world);
        std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .enumerate()
                .map(|(rank, comm)| {
                    s.spawn(move || {
                        let model = cpu_model(cfg, rank, world, dtype, max);
                        decode(&model, &comm, prompts, steps)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    #[test]
    fn two_and_four_ranks_compute_what_one_rank_computes() {
        let cfg = Config::tiny();
        let prompt = crate::weights::prompt_tokens(1, 0, 12, cfg.vocab);
        let steps = 6;
        let prompts = [prompt];
        let reference = run_world(&cfg, 1, DType::F32, &prompts, steps).remove(0);
        assert_eq!(reference.tokens[0].len(), steps + 1);
        assert_eq!(reference.first_step_logits.len(), cfg.vocab);
        for world in [2, 4] {
            let ranks = run_world(&cfg, world, DType::F32, &prompts, steps);
            for (rank, r) in ranks.iter().enumerate() {
                assert_eq!(r.tokens, reference.tokens, "world {world} rank {rank}");
                let diff = max_rel_diff(&r.first_step_logits, &reference.first_step_logits);
                assert!(
                    diff < 1e-4,
                    "world {world} rank {rank}: relative diff {diff}"
                );
            }
        }
    }

    #[test]
    fn without_communication_the_ranks_go_wrong() {
        // The `none` floor is not a model: with two ranks each sees half of
        // every sum, and its logits are zero outside its vocabulary part.
        let cfg = Config::tiny();
        let prompt = [crate::weights::prompt_tokens(2, 0, 8, cfg.vocab)];
        let reference = run_world(&cfg, 1, DType::F32, &prompt, 1).remove(0);
        let model = cpu_model(&cfg, 1, 2, DType::F32, 10);
        let wrong = decode(&model, &LocalCopy { rank: 1, world: 2 }, &prompt, 1);
        let logits = &wrong.first_step_logits;
        assert!(logits[..cfg.vocab / 2].iter().all(|&x| x == 0.0));
        assert!(max_rel_diff(logits, &reference.first_step_logits) > 0.01);
        // One rank of one is exact.
        let model = cpu_model(&cfg, 0, 1, DType::F32, 10);
        let alone = decode(&model, &LocalCopy { rank: 0, world: 1 }, &prompt, 1);
        assert_eq!(alone.tokens, reference.tokens);
    }

    /// A back-end with its own fused all-reduce + add + RMSNorm (here, the
    /// same arithmetic), counting which calls the model makes.
    struct Fusing {
        inner: LocalCopy,
        plain: std::cell::Cell<usize>,
        fused: std::cell::Cell<usize>,
    }

    impl Collectives for Fusing {
        fn all_reduce(&self, x: &Tensor) -> Result<Tensor> {
            self.plain.set(self.plain.get() + 1);
            self.inner.all_reduce(x)
        }

        fn all_gather(&self, x: &Tensor) -> Result<Tensor> {
            self.inner.all_gather(x)
        }

        fn all_reduce_add_rms_norm(
            &self,
            partial: &Tensor,
            residual: &Tensor,
            weight: &Tensor,
            eps: f32,
        ) -> Result<(Tensor, Tensor)> {
            self.fused.set(self.fused.get() + 1);
            self.inner
                .all_reduce_add_rms_norm(partial, residual, weight, eps)
        }
    }

    #[test]
    fn every_all_reduce_goes_through_the_fused_call_with_its_norm() {
        // Two per layer: the attention output's (then the post-attention
        // norm) and the down projection's (then the next layer's input norm,
        // or the final norm); no all-reduce on its own.
        let cfg = Config::tiny();
        let prompt = [crate::weights::prompt_tokens(3, 0, 6, cfg.vocab)];
        let model = cpu_model(&cfg, 0, 1, DType::F32, 10);
        let comm = Fusing {
            inner: LocalCopy { rank: 0, world: 1 },
            plain: Default::default(),
            fused: Default::default(),
        };
        let fused = decode(&model, &comm, &prompt, 1);
        // The prefill and one decode step.
        assert_eq!(comm.fused.get(), 2 * 2 * cfg.layers);
        assert_eq!(comm.plain.get(), 0);
        let plain = decode(&model, &LocalCopy { rank: 0, world: 1 }, &prompt, 1);
        assert_eq!(fused.tokens, plain.tokens);
        assert_eq!(fused.first_step_logits, plain.first_step_logits);
    }

    /// A back-end whose all-gather lays the parts out in one row.
    struct OneRow(LocalCopy);

    impl Collectives for OneRow {
        fn all_reduce(&self, x: &Tensor) -> Result<Tensor> {
            self.0.all_reduce(x)
        }

        fn all_gather(&self, x: &Tensor) -> Result<Tensor> {
            self.0.all_gather(x)?.reshape((1, ()))
        }
    }

    #[test]
    fn an_all_gather_of_another_shape_is_an_error() {
        let cfg = Config::tiny();
        let model = cpu_model(&cfg, 1, 2, DType::F32, 10);
        let cache = model.new_cache(1).unwrap();
        let dev = &model.device;
        let tokens = Tensor::new(&[[3u32]], dev).unwrap();
        let positions = Tensor::new(&[[0u32]], dev).unwrap();
        let comm = OneRow(LocalCopy { rank: 1, world: 2 });
        let refused = model
            .forward(&tokens, &positions, None, &cache, &comm)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("not [2, "), "{refused}");
        // The same model with the contract's layout runs.
        let comm = LocalCopy { rank: 1, world: 2 };
        model
            .forward(&tokens, &positions, None, &cache, &comm)
            .unwrap();
    }

    #[test]
    fn bf16_ranks_stay_close_to_the_one_rank_model() {
        let cfg = Config::tiny();
        let prompt = [crate::weights::prompt_tokens(3, 0, 10, cfg.vocab)];
        let reference = run_world(&cfg, 1, DType::BF16, &prompt, 2).remove(0);
        let two = run_world(&cfg, 2, DType::BF16, &prompt, 2);
        let diff = max_rel_diff(&two[0].first_step_logits, &reference.first_step_logits);
        // bf16 keeps 8 bits; the split changes where partial sums are rounded.
        assert!(diff < 0.05, "relative diff {diff}");
        assert_eq!(two[0].tokens, two[1].tokens);
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("candle-tp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn safetensors_weights_give_the_seeded_model() {
        use crate::weights::Safetensors;
        let cfg = Config::tiny();
        let seeded = Seeded {
            seed: 11,
            threads: 2,
        };
        let whole = RankDims::new(&cfg, 0, 1).unwrap();
        let mut specs = vec![
            plan::embed_spec(&cfg),
            plan::final_norm_spec(&cfg),
            plan::lm_head_spec(&cfg, &whole),
        ];
        for l in 0..cfg.layers {
            let s = plan::layer_specs(&cfg, &whole, l);
            specs.extend([s.input_norm, s.o, s.post_norm, s.down]);
            specs.extend(s.qkv);
            specs.extend(s.gate_up);
        }
        let tensors: std::collections::HashMap<String, Tensor> = specs
            .iter()
            .map(|s| (s.name.clone(), seeded.load(s, DType::F32).unwrap()))
            .collect();
        let dir = temp_dir("safetensors");
        candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();

        // A folder of files, as `transformers` saves them.
        let file = Safetensors::open(std::slice::from_ref(&dir)).unwrap();
        for world in [1, 2] {
            for rank in 0..world {
                let dims = RankDims::new(&cfg, rank, world).unwrap();
                let l = plan::layer_specs(&cfg, &dims, 1);
                for spec in [
                    &l.qkv[2],
                    &l.o,
                    &l.input_norm,
                    &plan::lm_head_spec(&cfg, &dims),
                ] {
                    let a = file.load(spec, DType::F32).unwrap();
                    let b = seeded.load(spec, DType::F32).unwrap();
                    assert_eq!(a.dims(), spec.local_shape().as_slice());
                    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
                    assert_eq!(d.to_scalar::<f32>().unwrap(), 0.0, "{}", spec.name);
                }
            }
        }
        let prompt = [crate::weights::prompt_tokens(4, 0, 6, cfg.vocab)];
        let from_file = RankModel::load(
            &cfg,
            whole,
            &file,
            DType::F32,
            &Device::Cpu,
            10,
            &mut |_| {},
        )
        .unwrap();
        let comm = LocalCopy { rank: 0, world: 1 };
        let a = decode(&from_file, &comm, &prompt, 3);
        let b = decode(&cpu_model(&cfg, 0, 1, DType::F32, 10), &comm, &prompt, 3);
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(a.first_step_logits, b.first_step_logits);

        // Files of another model are refused by name and shape.
        let small = Config {
            hidden: 128,
            ..cfg.clone()
        };
        let err = RankModel::load(
            &small,
            RankDims::new(&small, 0, 1).unwrap(),
            &file,
            DType::F32,
            &Device::Cpu,
            10,
            &mut |_| {},
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("has shape [1024, 256], the model needs [1024, 128]"),
            "{err}"
        );
        let tied = Config::llama_3_2_1b();
        let dims = RankDims::new(&tied, 0, 2).unwrap();
        let err = file
            .load(&plan::layer_specs(&tied, &dims, 15).qkv[0], DType::F32)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("model.layers.15.self_attn.q_proj.weight"),
            "{err}"
        );
        assert!(Safetensors::open(&[dir.join("nothing")]).is_err());
        let empty = temp_dir("empty");
        let err = Safetensors::open(std::slice::from_ref(&empty))
            .err()
            .unwrap();
        assert!(err.contains("no *.safetensors"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(empty).unwrap();
    }

    #[test]
    fn a_batch_of_ragged_prompts_splits_like_one_rank_and_like_each_alone() {
        let cfg = Config::tiny();
        let prompts: Vec<Vec<u32>> = [12, 7, 10]
            .iter()
            .enumerate()
            .map(|(b, &len)| crate::weights::prompt_tokens(5, b, len, cfg.vocab))
            .collect();
        let steps = 5;
        let reference = run_world(&cfg, 1, DType::F32, &prompts, steps).remove(0);
        assert_eq!(reference.tokens.len(), 3);
        assert_eq!(reference.first_step_logits.len(), 3 * cfg.vocab);
        // The sequences are different problems: a batch that mixed them up
        // could not pass the comparison with each alone.
        assert_ne!(reference.tokens[0], reference.tokens[1]);
        for (b, prompt) in prompts.iter().enumerate() {
            let alone =
                run_world(&cfg, 1, DType::F32, std::slice::from_ref(prompt), steps).remove(0);
            assert_eq!(alone.tokens[0], reference.tokens[b], "sequence {b}");
            let row = &reference.first_step_logits[b * cfg.vocab..(b + 1) * cfg.vocab];
            let diff = max_rel_diff(row, &alone.first_step_logits);
            assert!(diff < 1e-4, "sequence {b}: relative diff {diff}");
        }
        for world in [2, 4] {
            for (rank, r) in run_world(&cfg, world, DType::F32, &prompts, steps)
                .iter()
                .enumerate()
            {
                assert_eq!(r.tokens, reference.tokens, "world {world} rank {rank}");
                let diff = max_rel_diff(&r.first_step_logits, &reference.first_step_logits);
                assert!(diff < 1e-4, "world {world} rank {rank}: {diff}");
            }
        }
    }

    #[test]
    fn the_shipped_model_folder_splits_like_one_rank() {
        // The folder the GPU acceptance run uses: a shape not built in (head
        // dimension 32 × 16 heads ≠ hidden 320, tied embeddings, Llama 3's
        // RoPE scaling), only a config.json, so seeded weights.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/llama3-h320-d32");
        let folder = crate::model_dir::ModelDir::open(&dir).unwrap();
        assert!(folder.safetensors.is_empty() && folder.tokenizer.is_none());
        let cfg = folder.cfg;
        assert_eq!(cfg.name, "llama3-h320-d32");
        assert_eq!(cfg.shape(), "h320 l4 q16 kv8 d32 ff1280 v8192 tied");
        assert!(cfg.rope_scaling.is_some());
        for world in [1, 2, 4, 8] {
            cfg.check_split(world).unwrap();
        }
        let prompts: Vec<Vec<u32>> = (0..2)
            .map(|b| crate::weights::prompt_tokens(1, b, 9, cfg.vocab))
            .collect();
        let reference = run_world(&cfg, 1, DType::F32, &prompts, 3).remove(0);
        for r in run_world(&cfg, 2, DType::F32, &prompts, 3) {
            assert_eq!(r.tokens, reference.tokens);
            let diff = max_rel_diff(&r.first_step_logits, &reference.first_step_logits);
            assert!(diff < 1e-4, "{diff}");
        }
    }

    #[test]
    fn the_cache_masks_positions_not_yet_written() {
        // Decoding token by token must give what a prefill of the same tokens
        // gives for its last position: masked slots do not leak in.
        let cfg = Config::tiny();
        let model = cpu_model(&cfg, 0, 1, DType::F32, 16);
        let comm = LocalCopy { rank: 0, world: 1 };
        let tokens = crate::weights::prompt_tokens(9, 0, 5, cfg.vocab);
        let dev = Device::Cpu;
        let all = model
            .forward(
                &Tensor::new(tokens.as_slice(), &dev)
                    .unwrap()
                    .unsqueeze(0)
                    .unwrap(),
                &Tensor::new(&[[0u32, 1, 2, 3, 4]], &dev).unwrap(),
                None,
                &model.new_cache(1).unwrap(),
                &comm,
            )
            .unwrap();
        let cache = model.new_cache(1).unwrap();
        let mut last = None;
        for (p, &tok) in tokens.iter().enumerate() {
            last = Some(
                model
                    .forward(
                        &Tensor::new(&[[tok]], &dev).unwrap(),
                        &Tensor::new(&[[p as u32]], &dev).unwrap(),
                        None,
                        &cache,
                        &comm,
                    )
                    .unwrap(),
            );
        }
        let a: Vec<f32> = all.flatten_all().unwrap().to_vec1().unwrap();
        let b: Vec<f32> = last.unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert!(max_rel_diff(&b, &a) < 1e-5);
    }
}
