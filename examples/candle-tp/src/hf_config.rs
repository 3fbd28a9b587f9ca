//! A model folder's `config.json`, as `transformers` writes it, read into a
//! [`Config`]: any model with Llama's blocks (RMSNorm, RoPE, grouped-query
//! attention without biases, SwiGLU MLP). Accepted: `LlamaForCausalLM`
//! (`model_type` `llama`: Llama 2, 3, 3.1, 3.2 and their derivatives) and
//! `MistralForCausalLM` (`mistral`) without a sliding window. Fields that
//! `transformers` defaults take its defaults for that architecture; the
//! shapes (`hidden_size`, `num_hidden_layers`, `num_attention_heads`,
//! `intermediate_size`, `vocab_size`) are required. Anything else that would
//! change the computation (biases, another activation, another RoPE scaling,
//! a sliding window) is refused, naming the field.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::config::{Config, Llama3Scaling};

/// The architectures whose blocks are the model's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Mistral,
}

impl Arch {
    const ALL: [Arch; 2] = [Arch::Llama, Arch::Mistral];

    fn class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Mistral => "MistralForCausalLM",
        }
    }

    fn model_type(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Mistral => "mistral",
        }
    }

    /// `transformers`' default for `num_key_value_heads`.
    fn default_kv_heads(self, heads: usize) -> usize {
        match self {
            Arch::Llama => heads,
            Arch::Mistral => 8,
        }
    }

    fn known() -> String {
        Arch::ALL
            .iter()
            .map(|a| format!("{} (model_type {})", a.class(), a.model_type()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5,
/// which keeps `rope_theta` in it).
#[derive(Deserialize, Default)]
struct RawRope {
    rope_type: Option<String>,
    /// The older spelling of `rope_type`.
    #[serde(rename = "type")]
    legacy_type: Option<String>,
    rope_theta: Option<f64>,
    factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    original_max_position_embeddings: Option<usize>,
    partial_rotary_factor: Option<f64>,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "_name_or_path")]
    name_or_path: Option<String>,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    intermediate_size: usize,
    vocab_size: usize,
    rope_theta: Option<f64>,
    rope_scaling: Option<RawRope>,
    rope_parameters: Option<RawRope>,
    rms_norm_eps: Option<f64>,
    tie_word_embeddings: Option<bool>,
    hidden_act: Option<String>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
}

/// Reads `file` (a `config.json`); `folder_name` names the model when the
/// config has no `_name_or_path`.
pub fn read(file: &Path, folder_name: &str) -> Result<Config, String> {
    let at = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {at}: {e}"))?;
    parse(&text, &at, folder_name)
}

/// Parses the text of a `config.json`; `at` names it in every message.
pub fn parse(text: &str, at: &str, folder_name: &str) -> Result<Config, String> {
    let err = |msg: String| format!("{at}: {msg}");
    let value: Value = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
    let arch = arch(&value).map_err(err)?;
    // The sliding window is told apart by presence (Mistral defaults it to
    // 4096) and by null, which serde's Option would merge.
    if arch == Arch::Mistral {
        match value.get("sliding_window") {
            Some(Value::Null) => {}
            None => {
                return Err(err(
                    "sliding_window is absent, and MistralForCausalLM then attends through a \
                     window of 4096 tokens; candle-tp runs full attention only (sliding_window: \
                     null)"
                        .into(),
                ));
            }
            Some(w) => {
                return Err(err(format!(
                    "sliding_window = {w}: candle-tp runs full attention only (sliding_window: \
                     null)"
                )));
            }
        }
    }
    let raw: Raw = serde_json::from_value(value).map_err(|e| err(e.to_string()))?;

    for (field, n) in [
        ("hidden_size", raw.hidden_size),
        ("num_hidden_layers", raw.num_hidden_layers),
        ("num_attention_heads", raw.num_attention_heads),
        ("intermediate_size", raw.intermediate_size),
        ("vocab_size", raw.vocab_size),
    ] {
        if n == 0 {
            return Err(err(format!("{field} = 0")));
        }
    }
    let heads = raw.num_attention_heads;
    let kv_heads = raw
        .num_key_value_heads
        .unwrap_or_else(|| arch.default_kv_heads(heads));
    if kv_heads == 0 {
        return Err(err("num_key_value_heads = 0".into()));
    }
    let head_dim = match raw.head_dim {
        Some(0) => return Err(err("head_dim = 0".into())),
        Some(d) => d,
        None if raw.hidden_size.is_multiple_of(heads) => raw.hidden_size / heads,
        None => {
            return Err(err(format!(
                "hidden_size = {} is not divisible by num_attention_heads = {heads}, and no \
                 head_dim is given",
                raw.hidden_size
            )));
        }
    };
    if let Some(act) = raw.hidden_act.as_deref()
        && act != "silu"
    {
        return Err(err(format!(
            "hidden_act = \"{act}\": the MLP is SwiGLU (silu) only"
        )));
    }
    for (field, on) in [
        ("attention_bias", raw.attention_bias),
        ("mlp_bias", raw.mlp_bias),
    ] {
        if on == Some(true) {
            return Err(err(format!(
                "{field} = true: candle-tp's projections have no biases"
            )));
        }
    }
    let rms_eps = raw.rms_norm_eps.unwrap_or(1e-6);
    if !(rms_eps.is_finite() && rms_eps > 0.0) {
        return Err(err(format!("rms_norm_eps = {rms_eps} is not positive")));
    }
    let (rope_theta, rope_scaling) = rope(&raw).map_err(err)?;
    let name = match raw.name_or_path.as_deref().map(str::trim) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => folder_name.to_string(),
    };
    Ok(Config {
        name,
        origin: at.to_string(),
        hidden: raw.hidden_size,
        layers: raw.num_hidden_layers,
        heads,
        kv_heads,
        head_dim,
        intermediate: raw.intermediate_size,
        vocab: raw.vocab_size,
        rope_theta,
        rope_scaling,
        rms_eps,
        tie_embeddings: raw.tie_word_embeddings.unwrap_or(false),
    })
}

/// Which architecture `architectures` and `model_type` name; where both are
/// given they must agree.
fn arch(value: &Value) -> Result<Arch, String> {
    let model_type = match value.get("model_type") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(
            Arch::ALL
                .into_iter()
                .find(|a| a.model_type() == t)
                .ok_or_else(|| {
                    format!(
                        "model_type = \"{t}\" is not a Llama-architecture model candle-tp runs \
                         (known: {})",
                        Arch::known()
                    )
                })?,
        ),
        Some(other) => return Err(format!("model_type = {other} is not a string")),
    };
    let classes = match value.get("architectures") {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => {
            let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
            let found: Vec<Arch> = Arch::ALL
                .into_iter()
                .filter(|a| names.contains(&a.class()))
                .collect();
            match found.as_slice() {
                [one] => Some(*one),
                _ => {
                    return Err(format!(
                        "architectures = {} names {} (known: {})",
                        Value::Array(list.clone()),
                        if found.is_empty() {
                            "no architecture candle-tp runs"
                        } else {
                            "more than one architecture"
                        },
                        Arch::known()
                    ));
                }
            }
        }
        Some(other) => return Err(format!("architectures = {other} is not a list")),
    };
    match (classes, model_type) {
        (Some(a), Some(t)) if a != t => Err(format!(
            "architectures names {} but model_type is \"{}\"",
            a.class(),
            t.model_type()
        )),
        (Some(a), _) | (None, Some(a)) => Ok(a),
        (None, None) => Err(format!(
            "neither architectures nor model_type says what model this is (known: {})",
            Arch::known()
        )),
    }
}

/// RoPE's base and scaling: from `rope_parameters` when the config has it
/// (transformers 5), else from `rope_theta` and `rope_scaling`.
fn rope(raw: &Raw) -> Result<(f64, Option<Llama3Scaling>), String> {
    let (field, params, theta) = match &raw.rope_parameters {
        Some(p) => {
            let theta = p.rope_theta.ok_or(
                "rope_parameters has no rope_theta (one set of parameters for every layer is \
                 all candle-tp reads)",
            )?;
            if let Some(top) = raw.rope_theta
                && top != theta
            {
                return Err(format!(
                    "rope_theta = {top} disagrees with rope_parameters.rope_theta = {theta}"
                ));
            }
            ("rope_parameters", Some(p), theta)
        }
        None => (
            "rope_scaling",
            raw.rope_scaling.as_ref(),
            raw.rope_theta.unwrap_or(10000.0),
        ),
    };
    if !(theta.is_finite() && theta > 0.0) {
        return Err(format!("rope_theta = {theta} is not positive"));
    }
    let Some(p) = params else {
        return Ok((theta, None));
    };
    if let Some(f) = p.partial_rotary_factor
        && f != 1.0
    {
        return Err(format!(
            "{field}.partial_rotary_factor = {f}: RoPE turns whole heads only"
        ));
    }
    let kind = match (p.rope_type.as_deref(), p.legacy_type.as_deref()) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!(
                "{field}.rope_type = \"{a}\" disagrees with {field}.type = \"{b}\""
            ));
        }
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => "default",
    };
    match kind {
        "default" => Ok((theta, None)),
        "llama3" => {
            let need = |name: &str, v: Option<f64>| -> Result<f64, String> {
                match v {
                    Some(x) if x.is_finite() && x > 0.0 => Ok(x),
                    Some(x) => Err(format!("{field}.{name} = {x} is not positive")),
                    None => Err(format!("{field} is llama3 but has no {name}")),
                }
            };
            let s = Llama3Scaling {
                factor: need("factor", p.factor)?,
                low_freq_factor: need("low_freq_factor", p.low_freq_factor)?,
                high_freq_factor: need("high_freq_factor", p.high_freq_factor)?,
                original_max_positions: match p.original_max_position_embeddings {
                    Some(n) if n > 0 => n,
                    Some(_) => {
                        return Err(format!("{field}.original_max_position_embeddings = 0"));
                    }
                    None => {
                        return Err(format!(
                            "{field} is llama3 but has no original_max_position_embeddings"
                        ));
                    }
                },
            };
            if s.high_freq_factor <= s.low_freq_factor {
                return Err(format!(
                    "{field}.high_freq_factor = {} is not above low_freq_factor = {}",
                    s.high_freq_factor, s.low_freq_factor
                ));
            }
            Ok((theta, Some(s)))
        }
        other => Err(format!(
            "{field}.rope_type = \"{other}\" is not supported (supported: default, llama3)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rope_inv_freq;

    /// Llama-3.2-3B's config.json as published (its head_dim is explicit).
    const LLAMA_3_2_3B: &str = r#"{
      "architectures": ["LlamaForCausalLM"],
      "attention_bias": false,
      "attention_dropout": 0.0,
      "bos_token_id": 128000,
      "eos_token_id": [128001, 128008, 128009],
      "head_dim": 128,
      "hidden_act": "silu",
      "hidden_size": 3072,
      "initializer_range": 0.02,
      "intermediate_size": 8192,
      "max_position_embeddings": 131072,
      "mlp_bias": false,
      "model_type": "llama",
      "num_attention_heads": 24,
      "num_hidden_layers": 28,
      "num_key_value_heads": 8,
      "pretraining_tp": 1,
      "rms_norm_eps": 1e-05,
      "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3"
      },
      "rope_theta": 500000.0,
      "tie_word_embeddings": true,
      "torch_dtype": "bfloat16",
      "transformers_version": "4.45.0.dev0",
      "use_cache": true,
      "vocab_size": 128256
    }"#;

    fn with(base: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
        let mut v: Value = serde_json::from_str(base).unwrap();
        edit(v.as_object_mut().unwrap());
        v.to_string()
    }

    fn parse_err(text: &str) -> String {
        parse(text, "m/config.json", "m").unwrap_err()
    }

    #[test]
    fn a_published_llama_config_reads_as_its_shapes() {
        let cfg = parse(LLAMA_3_2_3B, "x/config.json", "Llama-3.2-3B").unwrap();
        assert_eq!(cfg.name, "Llama-3.2-3B");
        assert_eq!(cfg.origin, "x/config.json");
        assert_eq!(
            (
                cfg.hidden,
                cfg.layers,
                cfg.heads,
                cfg.kv_heads,
                cfg.head_dim
            ),
            (3072, 28, 24, 8, 128)
        );
        assert_eq!((cfg.intermediate, cfg.vocab), (8192, 128256));
        assert_eq!((cfg.rope_theta, cfg.rms_eps), (500000.0, 1e-5));
        assert!(cfg.tie_embeddings);
        assert_eq!(
            cfg.rope_scaling,
            Some(Llama3Scaling {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_positions: 8192,
            })
        );
        // 3.21B parameters, as published.
        let b = cfg.parameters() as f64 / 1e9;
        assert!((b - 3.213).abs() < 0.01, "{b}");
        // Over 2 and 8 ranks; not over 3 (8 key/value heads).
        cfg.check_split(2).unwrap();
        cfg.check_split(8).unwrap();
        assert_eq!(
            cfg.check_split(3).unwrap_err(),
            "x/config.json: num_key_value_heads = 8 is not divisible by the world size 3"
        );
        // The built-in shapes are what their configs say.
        let one_b = with(LLAMA_3_2_3B, |m| {
            for (k, v) in [
                ("hidden_size", 2048),
                ("num_hidden_layers", 16),
                ("num_attention_heads", 32),
                ("head_dim", 64),
            ] {
                m.insert(k.into(), v.into());
            }
        });
        let read = parse(&one_b, "c", "llama-3.2-1b").unwrap();
        let built_in = Config::llama_3_2_1b();
        assert_eq!(
            Config {
                origin: built_in.origin.clone(),
                ..read
            },
            built_in
        );
    }

    #[test]
    fn transformers_defaults_fill_what_the_config_leaves_out() {
        let bare = r#"{"model_type": "llama", "hidden_size": 96, "num_hidden_layers": 2,
            "num_attention_heads": 6, "intermediate_size": 256, "vocab_size": 500}"#;
        let cfg = parse(bare, "d/config.json", "d").unwrap();
        assert_eq!(cfg.name, "d");
        assert_eq!(cfg.kv_heads, 6); // Llama: one key/value head per query head
        assert_eq!(cfg.head_dim, 16); // hidden / heads
        assert_eq!(cfg.rope_theta, 10000.0);
        assert_eq!(cfg.rope_scaling, None);
        assert_eq!(cfg.rms_eps, 1e-6);
        assert!(!cfg.tie_embeddings);
        // Nulls are defaults too; a blank _name_or_path leaves the folder's name.
        let nulls = with(bare, |m| {
            for k in [
                "rope_scaling",
                "head_dim",
                "num_key_value_heads",
                "architectures",
            ] {
                m.insert(k.into(), Value::Null);
            }
            m.insert("_name_or_path".into(), "".into());
        });
        assert_eq!(parse(&nulls, "d/config.json", "d").unwrap(), cfg);
        let named = with(bare, |m| {
            m.insert("_name_or_path".into(), "org/Some-Llama".into());
        });
        assert_eq!(parse(&named, "c", "d").unwrap().name, "org/Some-Llama");
        // Architecture alone is enough.
        let by_class = with(bare, |m| {
            m.remove("model_type");
            m.insert(
                "architectures".into(),
                serde_json::json!(["LlamaForCausalLM"]),
            );
        });
        assert_eq!(parse(&by_class, "d/config.json", "d").unwrap(), cfg);
    }

    #[test]
    fn mistral_without_a_sliding_window_is_a_llama() {
        let mistral = r#"{"architectures": ["MistralForCausalLM"], "model_type": "mistral",
            "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 32,
            "head_dim": 128, "intermediate_size": 14336, "vocab_size": 131072,
            "rope_theta": 1000000.0, "sliding_window": null}"#;
        let cfg = parse(mistral, "n/config.json", "n").unwrap();
        // Mistral's defaults: 8 key/value heads, eps 1e-6; head_dim as given
        // (32 × 128 is not the hidden size).
        assert_eq!((cfg.kv_heads, cfg.head_dim, cfg.rms_eps), (8, 128, 1e-6));
        assert_eq!(cfg.rope_theta, 1e6);
        let windowed = with(mistral, |m| {
            m.insert("sliding_window".into(), 4096.into());
        });
        assert!(parse_err(&windowed).contains("sliding_window = 4096"));
        let absent = with(mistral, |m| {
            m.remove("sliding_window");
        });
        assert!(parse_err(&absent).contains("sliding_window is absent"));
    }

    #[test]
    fn configs_it_cannot_serve_are_one_error_naming_the_field() {
        let cases: Vec<(String, &str)> = vec![
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert(
                        "architectures".into(),
                        serde_json::json!(["Qwen2ForCausalLM"]),
                    );
                    m.remove("model_type");
                }),
                "m/config.json: architectures = [\"Qwen2ForCausalLM\"] names no architecture",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("model_type".into(), "gemma".into());
                }),
                "m/config.json: model_type = \"gemma\" is not a Llama-architecture model",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("model_type".into(), "mistral".into());
                }),
                "architectures names LlamaForCausalLM but model_type is \"mistral\"",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.remove("model_type");
                    m.remove("architectures");
                }),
                "neither architectures nor model_type",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.remove("hidden_size");
                }),
                "m/config.json: missing field `hidden_size`",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("vocab_size".into(), "many".into());
                }),
                "m/config.json: invalid type: string \"many\", expected usize",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("num_hidden_layers".into(), 0.into());
                }),
                "num_hidden_layers = 0",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.remove("head_dim");
                    m.insert("hidden_size".into(), 3001.into());
                }),
                "hidden_size = 3001 is not divisible by num_attention_heads = 24, and no head_dim",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("hidden_act".into(), "gelu".into());
                }),
                "hidden_act = \"gelu\"",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("attention_bias".into(), true.into());
                }),
                "attention_bias = true",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("mlp_bias".into(), true.into());
                }),
                "mlp_bias = true",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert(
                        "rope_scaling".into(),
                        serde_json::json!({"type": "linear", "factor": 2.0}),
                    );
                }),
                "rope_scaling.rope_type = \"linear\" is not supported",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m["rope_scaling"]
                        .as_object_mut()
                        .unwrap()
                        .remove("low_freq_factor");
                }),
                "rope_scaling is llama3 but has no low_freq_factor",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m["rope_scaling"]["high_freq_factor"] = 1.0.into();
                }),
                "rope_scaling.high_freq_factor = 1 is not above low_freq_factor = 1",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m["rope_scaling"]["type"] = "dynamic".into();
                }),
                "rope_scaling.rope_type = \"llama3\" disagrees with rope_scaling.type = \"dynamic\"",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert(
                        "rope_parameters".into(),
                        serde_json::json!({"rope_type": "default", "rope_theta": 10000.0}),
                    );
                }),
                "rope_theta = 500000 disagrees with rope_parameters.rope_theta = 10000",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.remove("rope_theta");
                    m.insert(
                        "rope_parameters".into(),
                        serde_json::json!({"full_attention": {"rope_theta": 1e6}}),
                    );
                }),
                "rope_parameters has no rope_theta",
            ),
            (
                with(LLAMA_3_2_3B, |m| {
                    m.insert("rms_norm_eps".into(), (-1.0).into());
                }),
                "rms_norm_eps = -1 is not positive",
            ),
            ("{ not json".into(), "m/config.json: key must be a string"),
        ];
        for (text, want) in cases {
            let err = parse_err(&text);
            assert!(err.contains(want), "{err}\n  does not contain\n{want}");
            assert!(err.starts_with("m/config.json: "), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        // The split is refused with the field, from the config's file.
        let six = with(LLAMA_3_2_3B, |m| {
            m.insert("num_key_value_heads".into(), 6.into());
        });
        let cfg = parse(&six, "m/config.json", "m").unwrap();
        assert_eq!(
            cfg.check_split(4).unwrap_err(),
            "m/config.json: num_key_value_heads = 6 is not divisible by the world size 4"
        );
    }

    #[test]
    fn transformers_5_keeps_rope_in_rope_parameters() {
        let v5 = with(LLAMA_3_2_3B, |m| {
            let mut scaling = m.remove("rope_scaling").unwrap();
            scaling["rope_theta"] = m.remove("rope_theta").unwrap();
            m.insert("rope_parameters".into(), scaling);
        });
        let a = parse(LLAMA_3_2_3B, "c", "n").unwrap();
        assert_eq!(parse(&v5, "c", "n").unwrap(), a);
        // Its theta is read from there, not defaulted: the trap of reading
        // only the top-level field is a 50-fold wrong base.
        let plain = with(LLAMA_3_2_3B, |m| {
            m.remove("rope_scaling");
            m.remove("rope_theta");
            m.insert(
                "rope_parameters".into(),
                serde_json::json!({"rope_type": "default", "rope_theta": 500000.0}),
            );
        });
        let cfg = parse(&plain, "c", "n").unwrap();
        assert_eq!((cfg.rope_theta, cfg.rope_scaling), (500000.0, None));
    }

    /// Llama 3's scaling as `transformers` defines it, step by step in f64,
    /// written apart from `rope_inv_freq`: each frequency's wavelength picks
    /// one of three regimes; in the middle one the frequency moves linearly
    /// (in `original / wavelength`) from `f / factor` up to `f`.
    fn expected_llama3(
        head_dim: usize,
        theta: f64,
        factor: f64,
        low: f64,
        high: f64,
        original: f64,
    ) -> Vec<f64> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < head_dim {
            let f = theta.powf(-(i as f64) / head_dim as f64);
            let wavelength = std::f64::consts::TAU / f;
            let ratio = original / wavelength; // periods within the original context
            out.push(if ratio > high {
                f
            } else if ratio < low {
                f / factor
            } else {
                let t = (ratio - low) / (high - low);
                f / factor + t * (f - f / factor)
            });
            i += 2;
        }
        out
    }

    #[test]
    fn llama3_rope_scaling_from_a_config_changes_the_frequencies_as_transformers_does() {
        // head_dim 16, θ = 10000 and an original context of 64 put the eight
        // frequencies in all three regimes: 1 (kept), 0.316 and 0.1 (between
        // the cuts: 64 / wavelength = 3.2 and 1.02), the rest (divided by 4).
        let text = r#"{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "vocab_size": 64, "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}"#;
        let cfg = parse(text, "c", "n").unwrap();
        let got = rope_inv_freq(&cfg);
        let want = expected_llama3(16, 10000.0, 4.0, 1.0, 4.0, 64.0);
        assert_eq!(got.len(), 8);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-15 * w, "frequency {i}: {g} against {w}");
        }
        // Figures from transformers' formula (Python, f64), for the regimes:
        // kept, the two smoothed ones, then divided by the factor.
        let published = [
            1.0,
            0.25464790894703254,
            0.025464790894703257,
            0.007905694150420948,
        ];
        for (i, p) in published.iter().enumerate() {
            assert!((got[i] - p).abs() <= 1e-14 * p, "frequency {i}: {}", got[i]);
        }
        // Without the scaling the same config keeps every frequency.
        let plain = parse(
            &with(text, |m| {
                m.remove("rope_scaling");
            }),
            "c",
            "n",
        )
        .unwrap();
        let unscaled = rope_inv_freq(&plain);
        assert_eq!(unscaled[0], got[0]);
        assert!((unscaled[1] - 0.31622776601683794).abs() < 1e-15);
        assert!(got[1] < unscaled[1] && got[3] < unscaled[3]);
    }
}
