//! Where a rank's weights come from: a seeded generator (no model hub is
//! reachable), or safetensors files in `transformers`' layout. Both give
//! every element of a full weight one value, whatever the rank, so a rank's
//! part is exactly the slice of the one-rank model's weight.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use half::bf16;

use crate::plan::{Init, Split, WeightSpec};

/// Produces this rank's part of a weight, on the host.
pub trait WeightSource: Sync {
    fn load(&self, spec: &WeightSpec, dtype: DType) -> candle_core::Result<Tensor>;
    /// What the weights are, for the report.
    fn describe(&self) -> String;
}

/// SplitMix64's mixing function: a bijection of 64-bit words whose outputs
/// look independent for consecutive inputs.
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a name: a tensor's stream, independent of generation order.
fn name_key(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Weights from a counter-based generator: element `i` of the full tensor
/// named `n` is a function of `(seed, n, i)` alone.
pub struct Seeded {
    pub seed: u64,
    /// Host threads that generate (the ranks of one machine share its cores).
    pub threads: usize,
}

impl Seeded {
    fn key(&self, name: &str) -> u64 {
        mix64(self.seed ^ name_key(name))
    }

    /// Element `index` (row-major in the full tensor) of a weight.
    pub fn value(key: u64, init: Init, index: u64) -> f32 {
        let bits = mix64(key.wrapping_add(index)) >> 40; // 24 random bits
        let u = bits as f32 / (1u32 << 24) as f32; // [0, 1)
        match init {
            Init::Uniform(a) => a * (2.0 * u - 1.0),
            Init::OnePlus(a) => 1.0 + a * (2.0 * u - 1.0),
        }
    }

    /// This rank's part, row-major, converted by `conv`.
    fn fill<T: Copy + Send + Default>(&self, spec: &WeightSpec, conv: fn(f32) -> T) -> Vec<T> {
        let key = self.key(&spec.name);
        let full_cols = if spec.shape.len() == 2 {
            spec.shape[1]
        } else {
            1
        };
        let local = spec.local_shape();
        let (rows, cols) = if local.len() == 2 {
            (local[0], local[1])
        } else {
            (local[0], 1)
        };
        let (row0, col0) = match &spec.split {
            Split::Whole => (0, 0),
            Split::Rows(r) => (r.start, 0),
            Split::Cols(c) => (0, c.start),
        };
        let mut out = vec![T::default(); rows * cols];
        let threads = self.threads.clamp(1, rows.max(1));
        let per = rows.div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (chunk_i, chunk) in out.chunks_mut(per * cols).enumerate() {
                let first_row = chunk_i * per;
                s.spawn(move || {
                    for (i, row) in chunk.chunks_mut(cols).enumerate() {
                        let full_row = (row0 + first_row + i) as u64;
                        for (j, x) in row.iter_mut().enumerate() {
                            let index = full_row * full_cols as u64 + (col0 + j) as u64;
                            *x = conv(Seeded::value(key, spec.init, index));
                        }
                    }
                });
            }
        });
        out
    }
}

impl WeightSource for Seeded {
    fn load(&self, spec: &WeightSpec, dtype: DType) -> candle_core::Result<Tensor> {
        let shape = spec.local_shape();
        match dtype {
            DType::BF16 => Tensor::from_vec(self.fill(spec, bf16::from_f32), shape, &Device::Cpu),
            DType::F32 => Tensor::from_vec(self.fill(spec, |x| x), shape, &Device::Cpu),
            other => candle_core::bail!("seeded weights in {other:?} are not supported"),
        }
    }

    fn describe(&self) -> String {
        format!("seeded generator (seed {})", self.seed)
    }
}

/// Sequence `sequence`'s prompt: `len` token ids below `vocab`, from the
/// seed; each sequence of a batch has its own.
pub fn prompt_tokens(seed: u64, sequence: usize, len: usize, vocab: usize) -> Vec<u32> {
    let name = if sequence == 0 {
        "prompt".to_string()
    } else {
        format!("prompt.{sequence}")
    };
    let key = mix64(seed ^ name_key(&name));
    (0..len as u64)
        .map(|i| (mix64(key.wrapping_add(i)) % vocab as u64) as u32)
        .collect()
}

/// Safetensors files with `transformers`' tensor names (one file, several, or
/// a folder of them).
pub struct Safetensors {
    files: Vec<PathBuf>,
    tensors: candle_core::safetensors::MmapedSafetensors,
}

impl Safetensors {
    pub fn open(paths: &[PathBuf]) -> Result<Safetensors, String> {
        let mut files = Vec::new();
        for p in paths {
            if p.is_dir() {
                let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                    .map_err(|e| format!("cannot read the folder {}: {e}", p.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|f| f.extension().is_some_and(|x| x == "safetensors"))
                    .collect();
                found.sort();
                if found.is_empty() {
                    return Err(format!("no *.safetensors file in {}", p.display()));
                }
                files.extend(found);
            } else {
                files.push(p.clone());
            }
        }
        if files.is_empty() {
            return Err("no safetensors file given".into());
        }
        // SAFETY: the files are mapped read-only; this program never writes
        // them, and the docs ask that nothing else does while it runs.
        let tensors = unsafe { candle_core::safetensors::MmapedSafetensors::multi(&files) }
            .map_err(|e| format!("cannot read safetensors {}: {e}", show(&files)))?;
        Ok(Safetensors { files, tensors })
    }
}

fn show(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl WeightSource for Safetensors {
    fn load(&self, spec: &WeightSpec, dtype: DType) -> candle_core::Result<Tensor> {
        let full = self.tensors.load(&spec.name, &Device::Cpu).map_err(|e| {
            candle_core::Error::Msg(format!(
                "weight `{}` in {}: {e}",
                spec.name,
                show(&self.files)
            ))
        })?;
        if full.dims() != spec.shape.as_slice() {
            candle_core::bail!(
                "weight `{}` has shape {:?}, the model needs {:?} (do these files belong to \
                 another model's config?)",
                spec.name,
                full.dims(),
                spec.shape
            );
        }
        let part = match &spec.split {
            Split::Whole => full,
            Split::Rows(r) => full.narrow(0, r.start, r.len())?,
            Split::Cols(c) => full.narrow(1, c.start, c.len())?,
        };
        part.to_dtype(dtype)?.contiguous()
    }

    fn describe(&self) -> String {
        format!("safetensors {}", show(&self.files))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::plan::{RankDims, layer_specs};

    #[test]
    fn values_are_uniform_in_their_range_and_differ_between_tensors() {
        let (a, b) = (mix64(1), mix64(2));
        let xs: Vec<f32> = (0..10000)
            .map(|i| Seeded::value(a, Init::Uniform(0.5), i))
            .collect();
        assert!(xs.iter().all(|x| (-0.5..0.5).contains(x)));
        let mean = xs.iter().sum::<f32>() / xs.len() as f32;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / xs.len() as f32;
        assert!(mean.abs() < 0.02, "{mean}");
        // Uniform in [-a, a] has variance a²/3.
        assert!((var - 0.25 / 3.0).abs() < 0.005, "{var}");
        assert_ne!(
            Seeded::value(a, Init::Uniform(1.0), 7),
            Seeded::value(b, Init::Uniform(1.0), 7)
        );
        let g = Seeded::value(a, Init::OnePlus(0.1), 3);
        assert!((0.9..1.1).contains(&g));
    }

    #[test]
    fn a_ranks_part_is_the_slice_of_the_full_weight() {
        let cfg = Config::tiny();
        let source = Seeded {
            seed: 5,
            threads: 3,
        };
        let full_dims = RankDims::new(&cfg, 0, 1).unwrap();
        let full = layer_specs(&cfg, &full_dims, 1);
        for world in [2, 4] {
            for rank in 0..world {
                let dims = RankDims::new(&cfg, rank, world).unwrap();
                let l = layer_specs(&cfg, &dims, 1);
                for (part, whole) in [(&l.qkv[1], &full.qkv[1]), (&l.down, &full.down)] {
                    let p = source.load(part, DType::F32).unwrap();
                    let w = source.load(whole, DType::F32).unwrap();
                    let expect = match &part.split {
                        Split::Rows(r) => w.narrow(0, r.start, r.len()).unwrap(),
                        Split::Cols(c) => w.narrow(1, c.start, c.len()).unwrap(),
                        Split::Whole => w,
                    };
                    let diff = (p - expect).unwrap().abs().unwrap().max_all().unwrap();
                    assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0);
                }
            }
        }
    }

    #[test]
    fn prompt_tokens_are_below_the_vocabulary_and_fixed_by_the_seed() {
        let p = prompt_tokens(3, 0, 128, 1000);
        assert_eq!(p.len(), 128);
        assert!(p.iter().all(|&t| t < 1000));
        assert_eq!(p, prompt_tokens(3, 0, 128, 1000));
        assert_ne!(p, prompt_tokens(4, 0, 128, 1000));
        // Every sequence of a batch has its own prompt.
        let q = prompt_tokens(3, 1, 128, 1000);
        assert!(q.iter().all(|&t| t < 1000));
        assert_ne!(p, q);
        assert_ne!(q, prompt_tokens(3, 2, 128, 1000));
    }
}
