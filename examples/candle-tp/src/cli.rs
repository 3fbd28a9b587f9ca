//! Command line: `run` (the launcher), `self-check` (a tiny model, seconds),
//! and the hidden `worker` the launcher starts once per rank.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::report::{BACKENDS, MODES};

#[derive(Parser, Debug)]
#[command(
    name = "candle-tp",
    about = "Tensor-parallel Llama decode on candle: NCCL against colltune's collectives",
    long_about = "Tensor-parallel Llama decode on candle, one process per GPU, split as Megatron \
does. Each back-end (`none`: no communication, the floor; `nccl`: cudarc's NCCL; `colltune`: \
kernels::RankComm choosing through policy) runs eagerly and as a captured CUDA graph; the report \
gives TPOT (median, p10, p90), tokens/s, prefill time, the gap above `none`, and checks the \
results against a one-rank model. Weights come from a seeded generator unless --weights names \
safetensors files."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start one worker per rank, gather their reports, print the table, write CSV.
    Run {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        out: OutArgs,
    },
    /// A quick check of everything on the tiny model: 16 prompt tokens, 32
    /// decode steps, every back-end and mode. Seconds on a GPU.
    SelfCheck {
        #[arg(long, default_value_t = 1)]
        world: usize,
        /// GPUs to place ranks on, round robin (default: every visible GPU).
        #[arg(long, value_delimiter = ',')]
        gpus: Vec<usize>,
        #[command(flatten)]
        out: OutArgs,
    },
    /// One rank (started by `run`).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

/// What every rank must agree on; the launcher passes it to each worker.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct RunArgs {
    /// Model shapes: llama-3.2-1b, llama-3.1-8b or tiny.
    #[arg(long, default_value = "llama-3.2-1b")]
    pub model: String,
    /// Ranks (processes), one per GPU while there are enough.
    #[arg(long, default_value_t = 2)]
    pub world: usize,
    /// Back-ends to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "none,nccl,colltune")]
    pub backends: Vec<String>,
    /// Modes to run each back-end in.
    #[arg(long, value_delimiter = ',', default_value = "eager,graph")]
    pub modes: Vec<String>,
    /// Prompt tokens (prefilled in one step).
    #[arg(long, default_value_t = 128)]
    pub prompt: usize,
    /// Decode steps timed after the prefill (greedy).
    #[arg(long, default_value_t = 256)]
    pub decode: usize,
    /// Untimed decode steps before each timed run.
    #[arg(long, default_value_t = 16)]
    pub warmup: usize,
    /// Seed of the weights and the prompt.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Safetensors files or folders with the model's weights (`transformers`
    /// names); default: seeded weights.
    #[arg(long)]
    pub weights: Vec<PathBuf>,
    /// GPUs to place ranks on, round robin (default: every visible GPU).
    #[arg(long, value_delimiter = ',')]
    pub gpus: Vec<usize>,
    /// Largest relative RMS difference of the first decode step's logits from
    /// the one-rank model that passes (nccl and colltune).
    #[arg(long, default_value_t = 0.05)]
    pub logit_tolerance: f64,
    /// Skip the one-rank reference model (rank 0 loads the whole model after
    /// the timed runs, and compares logits and tokens).
    #[arg(long)]
    pub no_reference: bool,
}

impl RunArgs {
    /// The settings of `self-check`.
    pub fn self_check(world: usize, gpus: Vec<usize>) -> RunArgs {
        RunArgs {
            model: "tiny".into(),
            world,
            backends: BACKENDS.iter().map(|s| s.to_string()).collect(),
            modes: MODES.iter().map(|s| s.to_string()).collect(),
            prompt: 16,
            decode: 32,
            warmup: 2,
            seed: 1,
            weights: vec![],
            gpus,
            logit_tolerance: 0.05,
            no_reference: false,
        }
    }

    pub fn config(&self) -> Result<Config, String> {
        Config::by_name(&self.model)
    }

    /// Everything that can be checked before a GPU is touched.
    pub fn validate(&self) -> Result<Config, String> {
        let cfg = self.config()?;
        cfg.check_split(self.world)?;
        if self.backends.is_empty() || self.modes.is_empty() {
            return Err("--backends and --modes need at least one entry each".into());
        }
        for b in &self.backends {
            if !BACKENDS.contains(&b.as_str()) {
                return Err(format!(
                    "unknown back-end `{b}` (known: {})",
                    BACKENDS.join(", ")
                ));
            }
        }
        for m in &self.modes {
            if !MODES.contains(&m.as_str()) {
                return Err(format!("unknown mode `{m}` (known: {})", MODES.join(", ")));
            }
        }
        for list in [&self.backends, &self.modes] {
            let mut seen = list.clone();
            seen.sort();
            seen.dedup();
            if seen.len() != list.len() {
                return Err(format!("`{}` names an entry twice", list.join(",")));
            }
        }
        if self.prompt == 0 || self.decode == 0 {
            return Err("--prompt and --decode must be at least 1".into());
        }
        if self.logit_tolerance.is_nan() || self.logit_tolerance <= 0.0 {
            return Err("--logit-tolerance must be positive".into());
        }
        for w in &self.weights {
            if !w.exists() {
                return Err(format!("--weights {}: no such file or folder", w.display()));
            }
        }
        Ok(cfg)
    }

    /// The arguments that reproduce `self` (for the workers' command lines).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--model".into(),
            self.model.clone(),
            "--world".into(),
            self.world.to_string(),
            "--backends".into(),
            self.backends.join(","),
            "--modes".into(),
            self.modes.join(","),
            "--prompt".into(),
            self.prompt.to_string(),
            "--decode".into(),
            self.decode.to_string(),
            "--warmup".into(),
            self.warmup.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--logit-tolerance".into(),
            self.logit_tolerance.to_string(),
        ];
        for w in &self.weights {
            a.push("--weights".into());
            a.push(w.display().to_string());
        }
        if !self.gpus.is_empty() {
            a.push("--gpus".into());
            a.push(
                self.gpus
                    .iter()
                    .map(|g| g.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        if self.no_reference {
            a.push("--no-reference".into());
        }
        a
    }
}

/// Where the launcher writes.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct OutArgs {
    /// The CSV file (one row per back-end and mode).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Every rank's raw report (step times, tokens), as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Folder for each rank's log and report (default: a new folder under the
    /// system's temporary folder).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
    /// Bound on the whole run, seconds; the workers are stopped after it.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
}

/// How a worker's colltune communicator joins its world.
#[derive(Clone, Debug, PartialEq)]
pub enum JoinArg {
    /// An NCCL unique id, hex.
    Nccl(String),
    /// A fresh folder the ranks exchange files in (ranks that share a GPU).
    Files(PathBuf),
}

impl std::str::FromStr for JoinArg {
    type Err = String;
    fn from_str(s: &str) -> Result<JoinArg, String> {
        if let Some(hex) = s.strip_prefix("nccl:") {
            Ok(JoinArg::Nccl(hex.into()))
        } else if let Some(dir) = s.strip_prefix("files:") {
            Ok(JoinArg::Files(dir.into()))
        } else {
            Err(format!("`{s}` is neither nccl:HEX nor files:DIR"))
        }
    }
}

impl std::fmt::Display for JoinArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinArg::Nccl(hex) => write!(f, "nccl:{hex}"),
            JoinArg::Files(dir) => write!(f, "files:{}", dir.display()),
        }
    }
}

#[derive(Args, Clone, Debug, PartialEq)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[arg(long)]
    pub rank: usize,
    /// The CUDA device ordinal of this rank.
    #[arg(long)]
    pub gpu: usize,
    /// The NCCL unique id (hex) of the `nccl` back-end's communicator.
    #[arg(long)]
    pub nccl_id: Option<String>,
    /// How colltune's communicator joins: nccl:HEX or files:DIR.
    #[arg(long)]
    pub colltune_join: Option<JoinArg>,
    /// Where this rank writes its report (JSON).
    #[arg(long)]
    pub report: PathBuf,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec!["worker".to_string()];
        a.extend(self.run.to_args());
        a.extend([
            "--rank".into(),
            self.rank.to_string(),
            "--gpu".into(),
            self.gpu.to_string(),
            "--report".into(),
            self.report.display().to_string(),
        ]);
        if let Some(id) = &self.nccl_id {
            a.extend(["--nccl-id".into(), id.clone()]);
        }
        if let Some(j) = &self.colltune_join {
            a.extend(["--colltune-join".into(), j.to_string()]);
        }
        a
    }
}

/// Which GPU each rank uses: round robin over `gpus`. The second value says
/// whether some GPU holds more than one rank.
pub fn placement(world: usize, gpus: &[usize]) -> Result<(Vec<usize>, bool), String> {
    if gpus.is_empty() {
        return Err("no GPU to place ranks on".into());
    }
    let ranks: Vec<usize> = (0..world).map(|r| gpus[r % gpus.len()]).collect();
    let mut distinct = ranks.clone();
    distinct.sort();
    distinct.dedup();
    Ok((ranks.clone(), distinct.len() < ranks.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("candle-tp").chain(args.iter().copied()))
    }

    #[test]
    fn run_defaults_are_the_issue_s_protocol() {
        let Command::Run { run, out } = parse(&["run"]).unwrap().command else {
            panic!("not run")
        };
        assert_eq!(run.model, "llama-3.2-1b");
        assert_eq!((run.world, run.prompt, run.decode), (2, 128, 256));
        assert_eq!(run.backends, ["none", "nccl", "colltune"]);
        assert_eq!(run.modes, ["eager", "graph"]);
        assert!(!run.no_reference && run.gpus.is_empty());
        assert_eq!(out.timeout, 900);
        run.validate().unwrap();
    }

    #[test]
    fn a_worker_command_line_parses_back_to_the_same_settings() {
        let worker = WorkerArgs {
            run: RunArgs {
                model: "llama-3.1-8b".into(),
                world: 4,
                backends: vec!["colltune".into(), "nccl".into()],
                modes: vec!["graph".into()],
                prompt: 100,
                decode: 7,
                warmup: 3,
                seed: 42,
                weights: vec!["/w/a.safetensors".into(), "/w/b".into()],
                gpus: vec![3, 1],
                logit_tolerance: 0.125,
                no_reference: true,
            },
            rank: 2,
            gpu: 3,
            nccl_id: Some("00ff".into()),
            colltune_join: Some(JoinArg::Files("/tmp/j".into())),
            report: "/tmp/r2.json".into(),
        };
        let args = worker.to_args();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let Command::Worker(back) = parse(&refs).unwrap().command else {
            panic!("not a worker")
        };
        assert_eq!(back, worker);
        let plain = WorkerArgs {
            nccl_id: None,
            colltune_join: Some(JoinArg::Nccl("ab".into())),
            ..worker
        };
        let args = plain.to_args();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let Command::Worker(back) = parse(&refs).unwrap().command else {
            panic!("not a worker")
        };
        assert_eq!(back, plain);
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        let ok = RunArgs::self_check(2, vec![]);
        ok.validate().unwrap();
        let bad = |f: fn(&mut RunArgs)| {
            let mut a = ok.clone();
            f(&mut a);
            a.validate().unwrap_err()
        };
        assert!(bad(|a| a.model = "gpt2".into()).contains("unknown model"));
        assert!(bad(|a| a.world = 3).contains("do not split over 3"));
        assert!(bad(|a| a.backends = vec!["mpi".into()]).contains("unknown back-end `mpi`"));
        assert!(bad(|a| a.modes = vec!["graph".into(), "graph".into()]).contains("twice"));
        assert!(bad(|a| a.decode = 0).contains("at least 1"));
        assert!(bad(|a| a.logit_tolerance = f64::NAN).contains("positive"));
        assert!(bad(|a| a.weights = vec!["/no/such/file".into()]).contains("no such file"));
        assert!(parse(&["run", "--world", "two"]).is_err());
        assert!(parse(&["worker", "--gpu", "0", "--report", "r"]).is_err()); // no --rank
        assert!("mpi:x".parse::<JoinArg>().is_err());
    }

    #[test]
    fn ranks_go_round_robin_over_the_gpus() {
        assert_eq!(placement(2, &[0, 1]).unwrap(), (vec![0, 1], false));
        assert_eq!(placement(2, &[0]).unwrap(), (vec![0, 0], true));
        assert_eq!(placement(4, &[2, 3]).unwrap(), (vec![2, 3, 2, 3], true));
        assert_eq!(placement(1, &[5, 6]).unwrap(), (vec![5], false));
        assert!(placement(1, &[]).is_err());
    }
}
