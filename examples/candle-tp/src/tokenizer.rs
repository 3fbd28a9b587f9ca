//! A model folder's `tokenizer.json` (the `tokenizers` crate): a prompt's
//! text to token ids, and generated ids back to text.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

pub struct TextTokenizer {
    path: PathBuf,
    inner: Tokenizer,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TextTokenizer({})", self.path.display())
    }
}

impl TextTokenizer {
    pub fn open(path: &Path) -> Result<TextTokenizer, String> {
        let inner = Tokenizer::from_file(path)
            .map_err(|e| format!("cannot read the tokenizer {}: {e}", path.display()))?;
        Ok(TextTokenizer {
            path: path.to_path_buf(),
            inner,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ids of `text`, with the special tokens the tokenizer's post-processor
    /// adds (Llama's begin-of-text), as the model saw its prompts in training.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let encoding = self.inner.encode(text, true).map_err(|e| {
            format!(
                "the tokenizer {} cannot encode {text:?}: {e}",
                self.path.display()
            )
        })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens included. An id the tokenizer does
    /// not know (seeded weights can pick any id below the config's vocabulary,
    /// which may be larger than the tokenizer's) shows as `⟨id N⟩` where it
    /// stands: `tokenizers` alone would drop it without a trace.
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        let mut text = String::new();
        let mut run: Vec<u32> = Vec::new();
        let flush = |run: &mut Vec<u32>, text: &mut String| -> Result<(), String> {
            if !run.is_empty() {
                let part = self.inner.decode(run, false).map_err(|e| {
                    format!("the tokenizer {} cannot decode: {e}", self.path.display())
                })?;
                text.push_str(&part);
                run.clear();
            }
            Ok(())
        };
        for &id in ids {
            if self.inner.id_to_token(id).is_some() {
                run.push(id);
            } else {
                flush(&mut run, &mut text)?;
                text.push_str(&format!("⟨id {id}⟩"));
            }
        }
        flush(&mut run, &mut text)?;
        Ok(text)
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A byte-level BPE tokenizer in `tokenizer.json`'s format, as Llama 3's
    /// is (byte-level pre-tokenizer and decoder, a begin-of-text token added
    /// by a template), with a vocabulary of 20 tokens: "hello world" and
    /// what it merges from.
    pub const TINY_BPE: &str = r#"{
      "version": "1.0",
      "truncation": null,
      "padding": null,
      "added_tokens": [
        {"id": 19, "content": "<|begin_of_text|>", "single_word": false, "lstrip": false,
         "rstrip": false, "normalized": false, "special": true}
      ],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                        "use_regex": true},
      "post_processor": {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [19],
                                                "tokens": ["<|begin_of_text|>"]}}
      },
      "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                  "use_regex": true},
      "model": {
        "type": "BPE",
        "dropout": null,
        "unk_token": null,
        "continuing_subword_prefix": null,
        "end_of_word_suffix": null,
        "fuse_unk": false,
        "byte_fallback": false,
        "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "!": 8,
                  "he": 9, "ll": 10, "hell": 11, "hello": 12, "Ġhello": 13, "or": 14,
                  "ld": 15, "wor": 16, "world": 17, "Ġworld": 18},
        "merges": ["h e", "l l", "he ll", "hell o", "Ġ hello", "o r", "l d", "w or",
                   "wor ld", "Ġ world"]
      }
    }"#;

    pub fn write_tiny_bpe(dir: &Path) -> PathBuf {
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, TINY_BPE).unwrap();
        path
    }

    #[test]
    fn text_round_trips_through_a_byte_level_bpe() {
        let dir = std::env::temp_dir().join(format!("candle-tp-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = TextTokenizer::open(&write_tiny_bpe(&dir)).unwrap();
        // The template puts the begin-of-text token first; merges make words.
        assert_eq!(t.encode("hello world").unwrap(), vec![19, 12, 18]);
        assert_eq!(t.encode("hello hello!").unwrap(), vec![19, 12, 13, 8]);
        assert_eq!(t.decode(&[12, 18, 13, 8]).unwrap(), "hello world hello!");
        assert_eq!(
            t.decode(&[19, 12, 18]).unwrap(),
            "<|begin_of_text|>hello world"
        );
        // Ids the tokenizer does not have stay visible where they stand.
        assert_eq!(
            t.decode(&[12, 500, 18, 20]).unwrap(),
            "hello⟨id 500⟩ world⟨id 20⟩"
        );
        let err = TextTokenizer::open(&dir.join("none.json")).err().unwrap();
        assert!(err.contains("cannot read the tokenizer"), "{err}");
        std::fs::write(dir.join("bad.json"), "{\"model\": 3}").unwrap();
        assert!(TextTokenizer::open(&dir.join("bad.json")).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
