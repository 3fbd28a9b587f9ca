//! Model shapes: what a Llama-architecture decoder needs to know, from a
//! model folder's `config.json` (`hf_config`) or written in code: the two
//! Llama configurations the benchmark started with, and a tiny one for
//! self-checks and CPU tests.

use std::fmt;

/// Llama 3's frequency-dependent RoPE scaling (`rope_scaling.rope_type = "llama3"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_positions: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The name in reports and CSV files (`llama-3.2-1b`, a config's
    /// `_name_or_path`, or its folder's name).
    pub name: String,
    /// Where the shapes come from, in front of every message about them:
    /// `built-in model tiny`, or the path of a `config.json`.
    pub origin: String,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// Width of one attention head (`hidden / heads` unless the config says).
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub rope_theta: f64,
    pub rope_scaling: Option<Llama3Scaling>,
    pub rms_eps: f64,
    /// The output projection is the embedding (Llama-3.2-1B ties them).
    pub tie_embeddings: bool,
}

/// The model names `--model` accepts.
pub const MODEL_NAMES: [&str; 3] = ["llama-3.2-1b", "llama-3.1-8b", "tiny"];

fn built_in(name: &str) -> (String, String) {
    (name.to_string(), format!("built-in model {name}"))
}

impl Config {
    /// Llama-3.2-1B's shapes (its `config.json`).
    pub fn llama_3_2_1b() -> Config {
        let (name, origin) = built_in("llama-3.2-1b");
        Config {
            name,
            origin,
            hidden: 2048,
            layers: 16,
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
            intermediate: 8192,
            vocab: 128256,
            rope_theta: 500000.0,
            rope_scaling: Some(Llama3Scaling {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_positions: 8192,
            }),
            rms_eps: 1e-5,
            tie_embeddings: true,
        }
    }

    /// Llama-3.1-8B's shapes (its `config.json`).
    pub fn llama_3_1_8b() -> Config {
        let (name, origin) = built_in("llama-3.1-8b");
        Config {
            name,
            origin,
            hidden: 4096,
            layers: 32,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            intermediate: 14336,
            vocab: 128256,
            rope_theta: 500000.0,
            rope_scaling: Some(Llama3Scaling {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_positions: 8192,
            }),
            rms_eps: 1e-5,
            tie_embeddings: false,
        }
    }

    /// Two layers of Llama's structure, small enough for a CPU test or a
    /// first GPU call; splits over 1, 2, 4 or 8 ranks like the real ones.
    pub fn tiny() -> Config {
        let (name, origin) = built_in("tiny");
        Config {
            name,
            origin,
            hidden: 256,
            layers: 2,
            heads: 16,
            kv_heads: 8,
            head_dim: 16,
            intermediate: 512,
            vocab: 1024,
            rope_theta: 10000.0,
            rope_scaling: None,
            rms_eps: 1e-5,
            tie_embeddings: false,
        }
    }

    pub fn by_name(name: &str) -> Result<Config, String> {
        match name {
            "llama-3.2-1b" => Ok(Config::llama_3_2_1b()),
            "llama-3.1-8b" => Ok(Config::llama_3_1_8b()),
            "tiny" => Ok(Config::tiny()),
            other => Err(format!(
                "unknown model `{other}` (known: {}; any other Llama-architecture model: \
                 --model-dir with its config.json)",
                MODEL_NAMES.join(", ")
            )),
        }
    }

    /// Parameters of the whole model (all ranks together).
    pub fn parameters(&self) -> u64 {
        let (h, d) = (self.hidden as u64, self.head_dim as u64);
        let attn = h * (self.heads as u64 * d) * 2 + h * (self.kv_heads as u64 * d) * 2;
        let mlp = 3 * h * self.intermediate as u64;
        let layer = attn + mlp + 2 * h;
        let embed = self.vocab as u64 * h;
        let head = if self.tie_embeddings { 0 } else { embed };
        embed + head + h + layer * self.layers as u64
    }

    /// The shapes in one short line, for the CSV (`h2048 l16 q32 kv8 d64 ff8192 v128256 tied`).
    pub fn shape(&self) -> String {
        format!(
            "h{} l{} q{} kv{} d{} ff{} v{}{}",
            self.hidden,
            self.layers,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.intermediate,
            self.vocab,
            if self.tie_embeddings { " tied" } else { "" }
        )
    }

    /// Whether the Megatron split over `world` ranks exists: every rank needs
    /// whole query and key/value heads, an equal share of the MLP and of the
    /// vocabulary. The messages name `config.json`'s fields.
    pub fn check_split(&self, world: usize) -> Result<(), String> {
        if world == 0 {
            return Err("the world size must be at least 1".into());
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!(
                "{}: head_dim = {} is odd (RoPE turns pairs of a head's dimensions)",
                self.origin, self.head_dim
            ));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "{}: num_attention_heads = {} is not a multiple of num_key_value_heads = {}",
                self.origin, self.heads, self.kv_heads
            ));
        }
        for (field, n) in [
            ("num_key_value_heads", self.kv_heads),
            ("num_attention_heads", self.heads),
            ("intermediate_size", self.intermediate),
            ("vocab_size", self.vocab),
        ] {
            if !n.is_multiple_of(world) {
                return Err(format!(
                    "{}: {field} = {n} is not divisible by the world size {world}",
                    self.origin
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (hidden {}, {} layers, {}/{} heads of {}, intermediate {}, vocab {}{}, {:.2}B \
             parameters; {})",
            self.name,
            self.hidden,
            self.layers,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.intermediate,
            self.vocab,
            if self.tie_embeddings { ", tied" } else { "" },
            self.parameters() as f64 / 1e9,
            self.origin
        )
    }
}

/// RoPE inverse frequencies (`head_dim / 2` of them), with Llama 3's scaling
/// when the configuration has it (as `transformers` computes them).
pub fn rope_inv_freq(cfg: &Config) -> Vec<f64> {
    let d = cfg.head_dim;
    let base: Vec<f64> = (0..d / 2)
        .map(|i| 1.0 / cfg.rope_theta.powf((2 * i) as f64 / d as f64))
        .collect();
    let Some(s) = cfg.rope_scaling else {
        return base;
    };
    let old = s.original_max_positions as f64;
    let low_wavelen = old / s.low_freq_factor;
    let high_wavelen = old / s.high_freq_factor;
    base.into_iter()
        .map(|f| {
            let wavelen = 2.0 * std::f64::consts::PI / f;
            if wavelen < high_wavelen {
                f
            } else if wavelen > low_wavelen {
                f / s.factor
            } else {
                let smooth =
                    (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                (1.0 - smooth) * f / s.factor + smooth * f
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_are_the_published_ones() {
        // Llama-3.2-1B: 1.24B parameters (tied); Llama-3.1-8B: 8.03B.
        let small = Config::llama_3_2_1b().parameters() as f64 / 1e9;
        let big = Config::llama_3_1_8b().parameters() as f64 / 1e9;
        assert!((small - 1.236).abs() < 0.01, "{small}");
        assert!((big - 8.030).abs() < 0.01, "{big}");
    }

    #[test]
    fn the_built_in_models_split_over_1_2_4_and_8_ranks() {
        for name in MODEL_NAMES {
            let cfg = Config::by_name(name).unwrap();
            assert_eq!(cfg.head_dim * cfg.heads, cfg.hidden, "{name}");
            for world in [1, 2, 4, 8] {
                cfg.check_split(world).unwrap();
            }
        }
        let err = Config::llama_3_1_8b().check_split(3).unwrap_err();
        assert_eq!(
            err,
            "built-in model llama-3.1-8b: num_key_value_heads = 8 is not divisible by the world \
             size 3"
        );
        let err = Config::tiny().check_split(16).unwrap_err();
        assert!(err.contains("num_key_value_heads = 8"), "{err}");
        let odd = Config {
            head_dim: 15,
            ..Config::tiny()
        };
        assert!(
            odd.check_split(1)
                .unwrap_err()
                .contains("head_dim = 15 is odd")
        );
        let ungrouped = Config {
            kv_heads: 5,
            ..Config::tiny()
        };
        assert!(
            ungrouped
                .check_split(1)
                .unwrap_err()
                .contains("num_attention_heads = 16 is not a multiple of num_key_value_heads = 5")
        );
        let ff = Config {
            intermediate: 514,
            ..Config::tiny()
        };
        assert!(
            ff.check_split(4)
                .unwrap_err()
                .contains("intermediate_size = 514 is not divisible by the world size 4")
        );
        assert!(Config::by_name("llama-7b").unwrap_err().contains("known:"));
        assert_eq!(
            Config::llama_3_2_1b().shape(),
            "h2048 l16 q32 kv8 d64 ff8192 v128256 tied"
        );
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let cfg = Config::llama_3_1_8b();
        let plain = rope_inv_freq(&Config {
            rope_scaling: None,
            ..cfg.clone()
        });
        let scaled = rope_inv_freq(&cfg);
        assert_eq!(scaled.len(), 64);
        // The first frequency (wavelength 2π) is far above the high cut: unchanged.
        assert_eq!(scaled[0], plain[0]);
        // The last (wavelength ~ 2π·500000^(62/64)) is beyond the low cut: divided by 8.
        assert!((scaled[63] - plain[63] / 8.0).abs() < 1e-15);
        // Scaling only ever lowers a frequency, never below plain / factor.
        for (s, p) in scaled.iter().zip(&plain) {
            assert!(*s <= *p && *s >= p / 8.0 - 1e-18);
        }
    }
}
