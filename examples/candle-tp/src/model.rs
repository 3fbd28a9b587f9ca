//! One rank's part of a Llama decoder on candle: RMSNorm, RoPE (with Llama 3's
//! scaling), grouped-query attention over a KV cache, SwiGLU MLP; split as
//! Megatron does (see `plan`), with an all-reduce after the attention output
//! and down projections and an all-gather of the vocabulary-split logits.
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
    /// `x` is `[1, n]`; returns `[1, world * n]`, the ranks' parts in rank order.
    fn all_gather(&self, x: &Tensor) -> Result<Tensor>;
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
        let out = Tensor::zeros((1, self.world * n), x.dtype(), x.device())?;
        out.slice_set(&x.contiguous()?, 1, self.rank * n)?;
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

/// Keys and values of every layer: `[1, kv_heads, max_positions, head_dim]`.
pub struct KvCache {
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

    /// A zeroed cache (zero, not uninitialised: masked entries are multiplied
    /// by zero probabilities, which must not meet a NaN).
    pub fn new_cache(&self) -> Result<KvCache> {
        let shape = (
            1,
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
        Ok(KvCache { k, v })
    }

    /// Runs `tokens` (u32 `[t]`) at `positions` (u32 `[t]`, below
    /// `max_positions`) through the model, writing their keys and values into
    /// `cache`, and returns the logits of the last one: `[1, vocab]`, gathered.
    pub fn forward(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        cache: &KvCache,
        comm: &dyn Collectives,
    ) -> Result<Tensor> {
        let t = tokens.dim(0)?;
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

        let mut x = self.embed.index_select(tokens, 0)?; // [t, hidden]
        let cos = self.cos.index_select(positions, 0)?; // [t, d/2]
        let sin = self.sin.index_select(positions, 0)?;
        let mask = self.mask.index_select(positions, 0)?; // [t, max]
        // Where this step's keys and values go in the cache.
        let slot = positions
            .reshape((1, 1, t, 1))?
            .broadcast_as((1, hk, t, d))?
            .contiguous()?;
        let heads = |m: &Tensor, from: usize, n: usize| -> Result<Tensor> {
            m.narrow(1, from * d, n * d)?
                .reshape((t, n, d))?
                .transpose(0, 1)?
                .unsqueeze(0)?
                .contiguous() // [1, n, t, d]
        };
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.input_norm, eps)?;
            let qkv = h.matmul(&layer.qkv.t()?)?; // [t, qkv_width]
            let q = rope(&heads(&qkv, 0, hq)?, &cos, &sin)?;
            let k = rope(&heads(&qkv, hq, hk)?, &cos, &sin)?;
            let v = heads(&qkv, hq + hk, hk)?;
            cache.k[l].scatter_set(&slot, &k, 2)?;
            cache.v[l].scatter_set(&slot, &v, 2)?;
            // Query heads grouped by their key/value head: [1, hk, group * t, d].
            let q = q.reshape((1, hk, group * t, d))?;
            let scores = q
                .matmul(&cache.k[l].t()?)?
                .to_dtype(DType::F32)?
                .affine(scale, 0.0)?
                .reshape((1, hk, group, t, max))?
                .broadcast_add(&mask)?;
            let probs = softmax_last_dim(&scores)?.to_dtype(self.dtype)?.reshape((
                1,
                hk,
                group * t,
                max,
            ))?;
            let attn = probs
                .matmul(&cache.v[l])? // [1, hk, group * t, d]
                .reshape((hq, t, d))?
                .transpose(0, 1)?
                .contiguous()?
                .reshape((t, hq * d))?;
            let o = comm.all_reduce(&attn.matmul(&layer.o.t()?)?)?;
            x = (x + o)?;
            let h = rms_norm(&x, &layer.post_norm, eps)?;
            let gate_up = h.matmul(&layer.gate_up.t()?)?; // [t, 2 * il]
            let act = (silu(&gate_up.narrow(1, 0, il)?)? * gate_up.narrow(1, il, il)?)?;
            let down = comm.all_reduce(&act.matmul(&layer.down.t()?)?)?;
            x = (x + down)?;
        }
        let last = x.narrow(0, t - 1, 1)?;
        let h = rms_norm(&last, &self.norm, eps)?;
        let logits = h.matmul(&self.lm_head.t()?)?; // [1, vocab / world]
        comm.all_gather(&logits)
    }
}

/// The greedy choice: the first index of the largest logit, as u32 `[1]`.
pub fn greedy(logits: &Tensor) -> Result<Tensor> {
    logits.argmax(D::Minus1)
}

#[cfg(test)]
pub mod tests {
    use std::sync::{Arc, Barrier, Mutex};

    use super::*;
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
            Tensor::from_vec(cat, (1, n * self.world), x.device())?.to_dtype(x.dtype())
        }
    }

    pub struct Decoded {
        pub tokens: Vec<u32>,
        /// The logits of the first decode step (the one after the prompt's).
        pub first_step_logits: Vec<f32>,
    }

    /// Prefill `prompt`, then `steps` greedy decode steps, on the CPU.
    pub fn decode(
        model: &RankModel,
        comm: &dyn Collectives,
        prompt: &[u32],
        steps: usize,
    ) -> Decoded {
        let cache = model.new_cache().unwrap();
        let dev = &model.device;
        let positions: Vec<u32> = (0..prompt.len() as u32).collect();
        let logits = model
            .forward(
                &Tensor::new(prompt, dev).unwrap(),
                &Tensor::new(positions.as_slice(), dev).unwrap(),
                &cache,
                comm,
            )
            .unwrap();
        let mut token = greedy(&logits).unwrap().to_vec1::<u32>().unwrap()[0];
        let mut tokens = vec![token];
        let mut first = Vec::new();
        for i in 0..steps {
            let pos = (prompt.len() + i) as u32;
            let logits = model
                .forward(
                    &Tensor::new(&[token], dev).unwrap(),
                    &Tensor::new(&[pos], dev).unwrap(),
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
            token = greedy(&logits).unwrap().to_vec1::<u32>().unwrap()[0];
            tokens.push(token);
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
        prompt: &[u32],
        steps: usize,
    ) -> Vec<Decoded> {
        let max = prompt.len() + steps + 1;
        let comms = ThreadGroup::new(world);
        std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .enumerate()
                .map(|(rank, comm)| {
                    s.spawn(move || {
                        let model = cpu_model(cfg, rank, world, dtype, max);
                        decode(&model, &comm, prompt, steps)
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
        let prompt = crate::weights::prompt_tokens(1, 12, cfg.vocab);
        let steps = 6;
        let reference = run_world(&cfg, 1, DType::F32, &prompt, steps).remove(0);
        assert_eq!(reference.tokens.len(), steps + 1);
        assert_eq!(reference.first_step_logits.len(), cfg.vocab);
        for world in [2, 4] {
            let ranks = run_world(&cfg, world, DType::F32, &prompt, steps);
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
        let prompt = crate::weights::prompt_tokens(2, 8, cfg.vocab);
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

    #[test]
    fn bf16_ranks_stay_close_to_the_one_rank_model() {
        let cfg = Config::tiny();
        let prompt = crate::weights::prompt_tokens(3, 10, cfg.vocab);
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
        let prompt = crate::weights::prompt_tokens(4, 6, cfg.vocab);
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
    fn the_cache_masks_positions_not_yet_written() {
        // Decoding token by token must give what a prefill of the same tokens
        // gives for its last position: masked slots do not leak in.
        let cfg = Config::tiny();
        let model = cpu_model(&cfg, 0, 1, DType::F32, 16);
        let comm = LocalCopy { rank: 0, world: 1 };
        let tokens = crate::weights::prompt_tokens(9, 5, cfg.vocab);
        let dev = Device::Cpu;
        let all = model
            .forward(
                &Tensor::new(tokens.as_slice(), &dev).unwrap(),
                &Tensor::new(&[0u32, 1, 2, 3, 4], &dev).unwrap(),
                &model.new_cache().unwrap(),
                &comm,
            )
            .unwrap();
        let cache = model.new_cache().unwrap();
        let mut last = None;
        for (p, &tok) in tokens.iter().enumerate() {
            last = Some(
                model
                    .forward(
                        &Tensor::new(&[tok], &dev).unwrap(),
                        &Tensor::new(&[p as u32], &dev).unwrap(),
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
