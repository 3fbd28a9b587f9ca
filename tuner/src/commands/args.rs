//! Arguments several commands share, and parsers for the vocabulary, sizes and
//! percentages on the command line.

use policy::{Algo, Arch, Collective, DType, Link, Mode};

use super::Error;
use crate::backend::Backend;
use crate::backend::synthetic::{SyntheticBackend, SyntheticConfig};
use crate::explain::MAX_WORLD;
use crate::fit::FitSettings;
use crate::memory::Budget;

/// Where measurements come from.
#[derive(clap::Args, Clone, Debug)]
pub struct BackendArgs {
    /// Run every rank on GPU 0 (a loopback world): validates kernels and
    /// protocols, not NVLink timing; the file is for link "loopback"
    #[arg(long)]
    pub loopback: bool,
    /// Measure the seeded synthetic latency model instead of GPUs (demos and
    /// tests; needs no GPU)
    #[arg(long, conflicts_with = "loopback")]
    pub synthetic: bool,
    /// Noise of the synthetic model, as a coefficient of variation in percent
    #[arg(long, default_value_t = 3.0, value_name = "PCT")]
    pub noise_pct: f64,
    /// Seed of the synthetic model
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Check results against the host reference up to this size; larger
    /// messages are timed unchecked (the check costs seconds per size there)
    #[arg(long, default_value = "64MiB", value_parser = bytes, value_name = "SIZE")]
    pub verify_max_bytes: u64,
}

impl BackendArgs {
    /// The backend, whose worlds are built within `memory_budget` (`None`:
    /// unbounded).
    pub fn open(&self, memory_budget: Option<Budget>) -> Result<Box<dyn Backend>, Error> {
        if self.synthetic {
            if !(0.0..=100.0).contains(&self.noise_pct) {
                return Err(Error::Usage(format!(
                    "--noise-pct {} is not a percentage",
                    self.noise_pct
                )));
            }
            let config = SyntheticConfig::planted(self.noise_pct / 100.0, self.seed);
            return Ok(Box::new(
                SyntheticBackend::new(config).within(memory_budget),
            ));
        }
        open_gpu(
            self.loopback,
            self.verify_max_bytes,
            memory_budget.map(|b| b.bytes),
        )
    }
}

#[cfg(feature = "gpu")]
fn open_gpu(
    loopback: bool,
    verify_max_bytes: u64,
    memory_budget: Option<u64>,
) -> Result<Box<dyn Backend>, Error> {
    crate::backend::gpu::GpuBackend::open(loopback, verify_max_bytes, memory_budget)
        .map(|b| Box::new(b) as Box<dyn Backend>)
        .map_err(|e| match e {
            crate::backend::gpu::OpenError::NoGpu(reason) => Error::NoGpu(reason),
            crate::backend::gpu::OpenError::Other(message) => Error::Failed(message),
        })
}

#[cfg(not(feature = "gpu"))]
fn open_gpu(
    _loopback: bool,
    _verify_max_bytes: u64,
    _memory_budget: Option<u64>,
) -> Result<Box<dyn Backend>, Error> {
    Err(Error::NoGpu(
        "this tuner was built without the `gpu` feature".to_string(),
    ))
}

/// The band rules' knobs.
#[derive(clap::Args, Clone, Debug)]
pub struct FitArgs {
    /// Two medians within this many percent of each other are a tie, which
    /// the band below keeps; a sweep measures more wherever the interval of
    /// the fastest candidate's ratio to another holds the margin
    #[arg(long, default_value_t = crate::fit::DEFAULT_MARGIN * 100.0, value_name = "PCT")]
    pub margin_pct: f64,
    /// Ignore points with fewer samples than this (at least 1)
    #[arg(long, default_value_t = 5)]
    pub min_samples: usize,
    /// GPU memory per rank the tables of one world size may make a world
    /// register, e.g. 64MiB (default: unbounded). `sweep` measures worlds
    /// built within it; `fit` fits each world size's keys within it, keeping
    /// the algorithms and the cap that cost the least against the unbounded
    /// fit, and reports that cost per key
    #[arg(long, value_parser = bytes, value_name = "SIZE")]
    pub memory_budget: Option<u64>,
}

impl FitArgs {
    pub fn settings(&self) -> Result<FitSettings, Error> {
        if !(0.0..100.0).contains(&self.margin_pct) {
            return Err(Error::Usage(format!(
                "--margin-pct {} must be in [0, 100)",
                self.margin_pct
            )));
        }
        if self.min_samples == 0 {
            return Err(Error::Usage("--min-samples must be at least 1".to_string()));
        }
        let memory_budget = match (self.memory_budget, crate::memory::model()) {
            (None, _) => None,
            (Some(bytes), Some(model)) => Some(Budget { bytes, model }),
            (Some(_), None) => {
                return Err(Error::Usage(
                    "--memory-budget needs a tuner built with the `gpu` feature: what a world \
                     registers for its capacities is `kernels`' rule"
                        .to_string(),
                ));
            }
        };
        Ok(FitSettings {
            margin: self.margin_pct / 100.0,
            min_samples: self.min_samples,
            memory_budget,
        })
    }
}

/// Which keys to measure. Empty lists mean "all".
#[derive(clap::Args, Clone, Debug)]
pub struct KeyArgs {
    /// Collectives: all_reduce, all_gather, all_reduce_add_rmsnorm,
    /// comma-separated (default: all_reduce and all_gather; `verify`: every
    /// collective of the file)
    #[arg(long, value_delimiter = ',', value_parser = collective)]
    pub collectives: Vec<Collective>,
    /// World sizes, 2 to 8, comma-separated, e.g. 2,4,8 (default: every size
    /// this machine can form)
    #[arg(long, value_delimiter = ',', value_parser = world_size)]
    pub world_sizes: Vec<u32>,
    /// Element types: bf16, f16, f32, comma-separated (default: all three)
    #[arg(long, value_delimiter = ',', value_parser = dtype)]
    pub dtypes: Vec<DType>,
    /// Modes: graph, eager, comma-separated (default: both)
    #[arg(long, value_delimiter = ',', value_parser = mode)]
    pub modes: Vec<Mode>,
    /// Smallest message (output bytes), e.g. 16 or 4KiB
    #[arg(long, default_value = "16", value_parser = bytes, value_name = "SIZE")]
    pub min_bytes: u64,
    /// Largest message (output bytes), e.g. 256MiB
    #[arg(long, default_value = "256MiB", value_parser = bytes, value_name = "SIZE")]
    pub max_bytes: u64,
}

impl KeyArgs {
    /// What clap cannot check one value at a time: no list names a value twice
    /// (a sweep would measure it twice and then refuse the duplicate table),
    /// and the size range is not empty.
    pub fn check(&self) -> Result<(), Error> {
        twice("--collectives", &self.collectives, |c| c.name().to_string())?;
        twice("--world-sizes", &self.world_sizes, u32::to_string)?;
        twice("--dtypes", &self.dtypes, |d| d.name().to_string())?;
        twice("--modes", &self.modes, |m| m.name().to_string())?;
        if self.min_bytes == 0 || self.min_bytes > self.max_bytes {
            return Err(Error::Usage(format!(
                "invalid size range: --min-bytes {} must be above 0 and at most --max-bytes {}",
                self.min_bytes, self.max_bytes
            )));
        }
        Ok(())
    }
}

fn twice<T: PartialEq>(flag: &str, values: &[T], name: fn(&T) -> String) -> Result<(), Error> {
    for (i, value) in values.iter().enumerate() {
        if values[..i].contains(value) {
            return Err(Error::Usage(format!("{flag} names {} twice", name(value))));
        }
    }
    Ok(())
}

/// The value of `all` spelled `text`, or the list of their spellings.
fn one_of<T: Copy>(text: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|&v| name(v) == text)
        .ok_or_else(|| {
            let names = crate::format::list(all.iter().map(|&v| name(v)));
            format!("expected one of {names}")
        })
}

pub fn collective(text: &str) -> Result<Collective, String> {
    one_of(text, &Collective::ALL, Collective::name)
}

pub fn dtype(text: &str) -> Result<DType, String> {
    one_of(text, &DType::ALL, DType::name)
}

pub fn mode(text: &str) -> Result<Mode, String> {
    one_of(text, &Mode::ALL, Mode::name)
}

pub fn link(text: &str) -> Result<Link, String> {
    one_of(text, &Link::ALL, Link::name)
}

pub fn arch(text: &str) -> Result<Arch, String> {
    Arch::from_name(text).ok_or_else(|| "expected sm<major><minor>, e.g. sm90 or sm103".to_string())
}

pub fn algo(text: &str) -> Result<Algo, String> {
    one_of(text, &Algo::ALL, Algo::name)
}

/// A world size the custom kernels serve: 2 to `MAX_WORLD` ranks.
pub fn world_size(text: &str) -> Result<u32, String> {
    let n: u32 = text
        .parse()
        .map_err(|_| format!("expected a number of ranks, 2 to {MAX_WORLD}"))?;
    if (2..=MAX_WORLD).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "a world of {n} ranks cannot be measured: the custom kernels serve 2 to {MAX_WORLD}"
        ))
    }
}

/// A size such as `448KiB`, `2MiB` or `4096`.
pub fn bytes(text: &str) -> Result<u64, String> {
    tuned_schema::size::parse_size(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_name_the_choices() {
        assert_eq!(collective("all_gather"), Ok(Collective::AllGather));
        assert_eq!(
            collective("ring").unwrap_err(),
            "expected one of all_reduce, all_gather, all_reduce_add_rmsnorm"
        );
        assert_eq!(bytes("448KiB"), Ok(448 * 1024));
        assert!(bytes("4KB").unwrap_err().contains("KiB"));
        assert_eq!(arch("sm90"), Ok(Arch::SM90));
        assert_eq!(link("loopback"), Ok(Link::Loopback));
        assert_eq!(world_size("8"), Ok(8));
        assert!(world_size("1").unwrap_err().contains("serve 2 to 8"));
        assert!(world_size("x").unwrap_err().contains("number of ranks"));
    }

    #[test]
    fn key_lists_name_each_value_once() {
        let keys = KeyArgs {
            collectives: vec![Collective::AllReduce],
            world_sizes: vec![2, 4],
            dtypes: vec![],
            modes: vec![],
            min_bytes: 16,
            max_bytes: 1024,
        };
        assert!(keys.check().is_ok());
        let twice = KeyArgs {
            world_sizes: vec![2, 2],
            ..keys.clone()
        };
        assert_eq!(
            twice.check().unwrap_err().to_string(),
            "--world-sizes names 2 twice"
        );
        let empty = KeyArgs {
            min_bytes: 2048,
            ..keys
        };
        assert!(
            empty
                .check()
                .unwrap_err()
                .to_string()
                .contains("invalid size range")
        );
    }
}
