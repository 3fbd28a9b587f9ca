//! The Megatron split of a Llama model over `world` ranks: which part of each
//! full weight a rank holds. Pure index arithmetic, tested against a one-rank
//! model in `model`'s tests.
//!
//! Weights are stored as `transformers` names and lays them out: a linear
//! layer's weight is `[out, in]`. Column-parallel layers (the query, key and
//! value projections, gate and up) split `out`, so each rank computes whole
//! heads and a slice of the MLP; row-parallel layers (the attention output and
//! down projections) split `in`, so each rank's product is a partial sum that
//! an all-reduce completes. The output projection splits the vocabulary; an
//! all-gather assembles the logits. Norms and the embedding are replicated.

use std::ops::Range;

use crate::config::Config;

/// Which part of a full weight a rank holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Split {
    /// The whole tensor.
    Whole,
    /// These rows (the first dimension) of a matrix.
    Rows(Range<usize>),
    /// These columns (the second dimension) of a matrix.
    Cols(Range<usize>),
}

/// How a weight's values start out when generated from a seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Uniform in `[-a, a]`.
    Uniform(f32),
    /// `1 + ` uniform in `[-a, a]` (norm gains).
    OnePlus(f32),
}

/// One weight of the full model and this rank's part of it.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightSpec {
    /// The `transformers` name (`model.layers.3.mlp.down_proj.weight`).
    pub name: String,
    /// The full tensor's shape: `[n]` or `[rows, cols]`.
    pub shape: Vec<usize>,
    pub split: Split,
    pub init: Init,
}

impl WeightSpec {
    /// The shape of this rank's part.
    pub fn local_shape(&self) -> Vec<usize> {
        match &self.split {
            Split::Whole => self.shape.clone(),
            Split::Rows(r) => vec![r.len(), self.shape[1]],
            Split::Cols(c) => vec![self.shape[0], c.len()],
        }
    }
}

/// The `rank`-th of `world` equal parts of `0..n` (`n` divides).
pub fn part(n: usize, rank: usize, world: usize) -> Range<usize> {
    let each = n / world;
    rank * each..(rank + 1) * each
}

/// What one rank computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankDims {
    pub rank: usize,
    pub world: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
}

impl RankDims {
    pub fn new(cfg: &Config, rank: usize, world: usize) -> Result<RankDims, String> {
        cfg.check_split(world)?;
        if rank >= world {
            return Err(format!("rank {rank} is not in a world of {world}"));
        }
        Ok(RankDims {
            rank,
            world,
            heads: cfg.heads / world,
            kv_heads: cfg.kv_heads / world,
            head_dim: cfg.head_dim,
            intermediate: cfg.intermediate / world,
            vocab: cfg.vocab / world,
        })
    }

    /// Width of the fused query/key/value projection's output.
    pub fn qkv_width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }
}

/// The weights of one layer, in the order the rank fuses them.
pub struct LayerSpecs {
    pub input_norm: WeightSpec,
    /// Query, key, value: fused into one matrix (rows stacked) on the rank.
    pub qkv: [WeightSpec; 3],
    pub o: WeightSpec,
    pub post_norm: WeightSpec,
    /// Gate and up: fused like `qkv`.
    pub gate_up: [WeightSpec; 2],
    pub down: WeightSpec,
}

fn uniform_for(fan_in: usize) -> Init {
    // Variance 1 / fan_in, so activations keep their scale through a layer.
    Init::Uniform((3.0 / fan_in as f32).sqrt())
}

fn spec(name: String, shape: Vec<usize>, split: Split, init: Init) -> WeightSpec {
    WeightSpec {
        name,
        shape,
        split,
        init,
    }
}

pub fn layer_specs(cfg: &Config, dims: &RankDims, layer: usize) -> LayerSpecs {
    let (h, d) = (cfg.hidden, cfg.head_dim);
    let (rank, world) = (dims.rank, dims.world);
    let p = |s: &str| format!("model.layers.{layer}.{s}.weight");
    let q_rows = part(cfg.heads * d, rank, world);
    let kv_rows = part(cfg.kv_heads * d, rank, world);
    let ff_rows = part(cfg.intermediate, rank, world);
    let norm = Init::OnePlus(0.1);
    LayerSpecs {
        input_norm: spec(p("input_layernorm"), vec![h], Split::Whole, norm),
        qkv: [
            spec(
                p("self_attn.q_proj"),
                vec![cfg.heads * d, h],
                Split::Rows(q_rows.clone()),
                uniform_for(h),
            ),
            spec(
                p("self_attn.k_proj"),
                vec![cfg.kv_heads * d, h],
                Split::Rows(kv_rows.clone()),
                uniform_for(h),
            ),
            spec(
                p("self_attn.v_proj"),
                vec![cfg.kv_heads * d, h],
                Split::Rows(kv_rows),
                uniform_for(h),
            ),
        ],
        o: spec(
            p("self_attn.o_proj"),
            vec![h, cfg.heads * d],
            Split::Cols(q_rows),
            uniform_for(cfg.heads * d),
        ),
        post_norm: spec(p("post_attention_layernorm"), vec![h], Split::Whole, norm),
        gate_up: [
            spec(
                p("mlp.gate_proj"),
                vec![cfg.intermediate, h],
                Split::Rows(ff_rows.clone()),
                uniform_for(h),
            ),
            spec(
                p("mlp.up_proj"),
                vec![cfg.intermediate, h],
                Split::Rows(ff_rows.clone()),
                uniform_for(h),
            ),
        ],
        down: spec(
            p("mlp.down_proj"),
            vec![h, cfg.intermediate],
            Split::Cols(ff_rows),
            uniform_for(cfg.intermediate),
        ),
    }
}

pub fn embed_spec(cfg: &Config) -> WeightSpec {
    spec(
        "model.embed_tokens.weight".into(),
        vec![cfg.vocab, cfg.hidden],
        Split::Whole,
        Init::Uniform(1.0),
    )
}

pub fn final_norm_spec(cfg: &Config) -> WeightSpec {
    spec(
        "model.norm.weight".into(),
        vec![cfg.hidden],
        Split::Whole,
        Init::OnePlus(0.1),
    )
}

/// The output projection's rows of this rank's vocabulary. A tied model reads
/// them from the embedding.
pub fn lm_head_spec(cfg: &Config, dims: &RankDims) -> WeightSpec {
    let rows = Split::Rows(part(cfg.vocab, dims.rank, dims.world));
    if cfg.tie_embeddings {
        WeightSpec {
            split: rows,
            ..embed_spec(cfg)
        }
    } else {
        spec(
            "lm_head.weight".into(),
            vec![cfg.vocab, cfg.hidden],
            rows,
            uniform_for(cfg.hidden),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_tile_the_range() {
        let mut covered = vec![];
        for r in 0..4 {
            covered.extend(part(16, r, 4));
        }
        assert_eq!(covered, (0..16).collect::<Vec<_>>());
        assert_eq!(part(128256, 1, 2), 64128..128256);
    }

    #[test]
    fn rank_shapes_of_the_8b_model_over_2_ranks() {
        let cfg = Config::llama_3_1_8b();
        let dims = RankDims::new(&cfg, 1, 2).unwrap();
        assert_eq!((dims.heads, dims.kv_heads, dims.head_dim), (16, 4, 128));
        assert_eq!(dims.qkv_width(), (16 + 8) * 128);
        let l = layer_specs(&cfg, &dims, 7);
        assert_eq!(l.qkv[0].name, "model.layers.7.self_attn.q_proj.weight");
        assert_eq!(l.qkv[0].local_shape(), vec![2048, 4096]);
        assert_eq!(l.qkv[0].split, Split::Rows(2048..4096));
        assert_eq!(l.qkv[1].local_shape(), vec![512, 4096]);
        assert_eq!(l.qkv[2].split, Split::Rows(512..1024));
        assert_eq!(l.o.local_shape(), vec![4096, 2048]);
        assert_eq!(l.o.split, Split::Cols(2048..4096));
        assert_eq!(l.gate_up[1].local_shape(), vec![7168, 4096]);
        assert_eq!(l.down.local_shape(), vec![4096, 7168]);
        assert_eq!(l.down.split, Split::Cols(7168..14336));
        assert_eq!(l.input_norm.local_shape(), vec![4096]);
        let head = lm_head_spec(&cfg, &dims);
        assert_eq!(head.name, "lm_head.weight");
        assert_eq!(head.local_shape(), vec![64128, 4096]);
    }

    #[test]
    fn a_tied_model_reads_its_head_from_the_embedding() {
        let cfg = Config::llama_3_2_1b();
        let dims = RankDims::new(&cfg, 0, 4).unwrap();
        let head = lm_head_spec(&cfg, &dims);
        assert_eq!(head.name, "model.embed_tokens.weight");
        assert_eq!(head.split, Split::Rows(0..32064));
        assert_eq!(head.init, embed_spec(&cfg).init);
    }

    #[test]
    fn query_heads_of_a_rank_use_that_ranks_key_value_heads() {
        // GQA groups consecutive query heads per key/value head; a contiguous
        // split keeps every group on one rank.
        let cfg = Config::llama_3_1_8b();
        let group = cfg.heads / cfg.kv_heads;
        for world in [1, 2, 4, 8] {
            for rank in 0..world {
                let dims = RankDims::new(&cfg, rank, world).unwrap();
                let q_heads = part(cfg.heads, rank, world);
                let kv_heads = part(cfg.kv_heads, rank, world);
                for q in q_heads {
                    assert!(kv_heads.contains(&(q / group)));
                }
                assert_eq!(dims.heads, dims.kv_heads * group);
            }
        }
        assert!(RankDims::new(&cfg, 2, 2).is_err());
    }
}
