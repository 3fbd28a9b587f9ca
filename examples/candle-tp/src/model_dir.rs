//! A model folder as `transformers` saves one: `config.json` (required), the
//! weights in `*.safetensors` files (when there are none the weights are
//! seeded), and `tokenizer.json` (optional).

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::hf_config;

pub struct ModelDir {
    pub cfg: Config,
    /// Every `*.safetensors` file of the folder, sorted; empty: seeded weights.
    pub safetensors: Vec<PathBuf>,
    pub tokenizer: Option<PathBuf>,
}

/// A model's weights in another format than safetensors files (or the
/// index of shards that are missing): a folder that has them but no
/// safetensors holds a real model candle-tp cannot read, which seeded
/// weights would silently stand in for. A trainer's other files
/// (`training_args.bin`, `optimizer.pt`) are not weights.
fn other_weights(name: &str) -> bool {
    name.starts_with("pytorch_model")
        || name.starts_with("consolidated.")
        || name.ends_with(".safetensors.index.json")
        || name.ends_with(".gguf")
        || name == "tf_model.h5"
        || name == "flax_model.msgpack"
}

impl ModelDir {
    pub fn open(dir: &Path) -> Result<ModelDir, String> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("--model-dir {}: {e}", dir.display()))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("--model-dir {}: {e}", dir.display()))?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        names.sort();
        let config = dir.join("config.json");
        if !names.iter().any(|n| n == "config.json") {
            return Err(format!(
                "--model-dir {}: no config.json in the folder",
                dir.display()
            ));
        }
        let folder_name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string());
        let cfg = hf_config::read(&config, &folder_name)?;
        let safetensors: Vec<PathBuf> = names
            .iter()
            .filter(|n| n.ends_with(".safetensors"))
            .map(|n| dir.join(n))
            .collect();
        if safetensors.is_empty() {
            let unreadable: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|n| other_weights(n))
                .collect();
            if !unreadable.is_empty() {
                return Err(format!(
                    "--model-dir {}: its weights ({}) are not in *.safetensors files, the only \
                     format candle-tp reads; convert them, or leave only config.json (and \
                     tokenizer.json) for seeded weights",
                    dir.display(),
                    unreadable.join(", ")
                ));
            }
        }
        let tokenizer = names
            .iter()
            .any(|n| n == "tokenizer.json")
            .then(|| dir.join("tokenizer.json"));
        Ok(ModelDir {
            cfg,
            safetensors,
            tokenizer,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("candle-tp-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const CONFIG: &str = r#"{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 64}"#;

    #[test]
    fn a_folder_gives_its_config_weights_and_tokenizer() {
        let dir = fresh("full").join("My-Llama");
        std::fs::create_dir_all(&dir).unwrap();
        assert!(
            ModelDir::open(&dir)
                .err()
                .unwrap()
                .contains("no config.json")
        );
        std::fs::write(dir.join("config.json"), CONFIG).unwrap();
        let only_config = ModelDir::open(&dir).unwrap();
        assert_eq!(only_config.cfg.name, "My-Llama");
        assert!(only_config.cfg.origin.ends_with("My-Llama/config.json"));
        assert!(only_config.safetensors.is_empty() && only_config.tokenizer.is_none());

        // A trainer's files are not weights.
        std::fs::write(dir.join("training_args.bin"), b"x").unwrap();
        assert!(ModelDir::open(&dir).unwrap().safetensors.is_empty());
        // Weights of another format are refused, not replaced by seeded ones;
        // so is the index of shards that are not there.
        std::fs::write(dir.join("pytorch_model.bin"), b"x").unwrap();
        let err = ModelDir::open(&dir).err().unwrap();
        assert!(
            err.contains("(pytorch_model.bin) are not in *.safetensors"),
            "{err}"
        );
        std::fs::remove_file(dir.join("pytorch_model.bin")).unwrap();
        std::fs::write(dir.join("model.safetensors.index.json"), b"{}").unwrap();
        let err = ModelDir::open(&dir).err().unwrap();
        assert!(err.contains("(model.safetensors.index.json)"), "{err}");
        std::fs::write(dir.join("model-00002.safetensors"), b"x").unwrap();
        std::fs::write(dir.join("model-00001.safetensors"), b"x").unwrap();
        std::fs::write(dir.join("tokenizer.json"), b"{}").unwrap();
        let full = ModelDir::open(&dir).unwrap();
        assert_eq!(
            full.safetensors,
            vec![
                dir.join("model-00001.safetensors"),
                dir.join("model-00002.safetensors")
            ]
        );
        assert_eq!(full.tokenizer, Some(dir.join("tokenizer.json")));
        // A broken config is its own error, with the file.
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        let err = ModelDir::open(&dir).err().unwrap();
        assert!(
            err.contains("My-Llama/config.json: neither architectures"),
            "{err}"
        );
        assert!(ModelDir::open(&dir.join("absent")).is_err());
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}
