//! The prompts of a batch, prefilled together in one forward pass.
//!
//! Prompts of different lengths are padded at their end to the longest one.
//! A padding entry sits at the positions after its sequence's last token, so
//! causal attention keeps it out of every real token's result, and the
//! cache slots it fills are either masked or overwritten: decoding sequence
//! `b` starts at its own length, and each step writes its slot before it
//! attends. The prefill's logits are taken from each sequence's last real
//! token.

/// One prefill of `batch` sequences of `len` entries each, row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prefill {
    pub batch: usize,
    pub len: usize,
    /// `[batch * len]` token ids (padding repeats the sequence's last token).
    pub tokens: Vec<u32>,
    /// `[batch * len]` positions: `0..len` for every sequence.
    pub positions: Vec<u32>,
    /// `[batch]` rows of the flattened `[batch * len]` whose logits are the
    /// prefill's: each sequence's last real token.
    pub last_rows: Vec<u32>,
    /// Each sequence's length: where its decoding starts.
    pub lens: Vec<usize>,
}

impl Prefill {
    pub fn new(prompts: &[Vec<u32>]) -> Result<Prefill, String> {
        if prompts.is_empty() {
            return Err("a batch needs at least one prompt".into());
        }
        if let Some(b) = prompts.iter().position(Vec::is_empty) {
            return Err(format!("prompt {b} has no token"));
        }
        let batch = prompts.len();
        let len = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let mut tokens = Vec::with_capacity(batch * len);
        let mut positions = Vec::with_capacity(batch * len);
        let mut last_rows = Vec::with_capacity(batch);
        for (b, p) in prompts.iter().enumerate() {
            let pad = *p.last().expect("not empty");
            tokens.extend(
                p.iter()
                    .copied()
                    .chain(std::iter::repeat_n(pad, len - p.len())),
            );
            positions.extend(0..len as u32);
            last_rows.push((b * len + p.len() - 1) as u32);
        }
        Ok(Prefill {
            batch,
            len,
            tokens,
            positions,
            last_rows,
            lens: prompts.iter().map(Vec::len).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ragged_prompts_pad_at_their_end() {
        let p = Prefill::new(&[vec![5, 6, 7], vec![9], vec![1, 2]]).unwrap();
        assert_eq!((p.batch, p.len), (3, 3));
        assert_eq!(p.tokens, [5, 6, 7, 9, 9, 9, 1, 2, 2]);
        assert_eq!(p.positions, [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert_eq!(p.last_rows, [2, 3, 7]);
        assert_eq!(p.lens, [3, 1, 2]);
        let one = Prefill::new(&[vec![4, 4]]).unwrap();
        assert_eq!((one.tokens, one.last_rows), (vec![4, 4], vec![1]));
        assert!(Prefill::new(&[]).is_err());
        assert!(
            Prefill::new(&[vec![1], vec![]])
                .unwrap_err()
                .contains("prompt 1")
        );
    }
}
