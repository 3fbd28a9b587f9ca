//! Command line: `run` (the launcher), `self-check` (a tiny model, seconds),
//! `norm-bench` (colltune's add + RMSNorm against candle's, one GPU; its
//! arguments are in `norm_bench`), and the hidden `worker` the launcher
//! starts once per rank.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::model_dir::ModelDir;
use crate::report::{BACKENDS, MODES};
use crate::tokenizer::TextTokenizer;
use crate::weights::prompt_tokens;

#[derive(Parser, Debug)]
#[command(
    name = "candle-tp",
    about = "Tensor-parallel Llama decode on candle: NCCL against colltune's collectives",
    long_about = "Tensor-parallel Llama decode on candle, one process per GPU, split as Megatron \
does. Each back-end (`none`: no communication, the floor; `nccl`: cudarc's NCCL; `colltune`: \
kernels::RankComm choosing through policy, each all-reduce fused with the residual add and the \
RMSNorm after it; `colltune-unfused`: the same communicator's all-reduce, then candle's add and \
rms_norm) runs eagerly and as a captured CUDA graph; the report \
gives TPOT (median, p10, p90), tokens/s, prefill time, the gap above `none`, and checks the \
results against a one-rank model. The model is a built-in shape (--model) or any \
Llama-architecture model folder (--model-dir: its config.json, its safetensors weights when it \
has them, else seeded ones, and its tokenizer.json for --prompt TEXT)."
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
    /// colltune's add + RMSNorm against candle's `residual + partial` and
    /// `rms_norm`, on one GPU in a world of one rank: per-call times eager
    /// and in a CUDA graph, bandwidth against the GPU's copy bandwidth, and
    /// the outputs compared. Seconds.
    NormBench(crate::norm_bench::NormBenchArgs),
    /// One rank (started by `run`).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

/// What every rank must agree on; the launcher passes it to each worker.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct RunArgs {
    /// A built-in model shape: llama-3.2-1b, llama-3.1-8b or tiny.
    #[arg(long, default_value = "llama-3.2-1b", conflicts_with = "model_dir")]
    pub model: String,
    /// A model folder: config.json (any Llama-architecture model), its
    /// *.safetensors weights when it has them (else seeded weights), and its
    /// tokenizer.json when it has one.
    #[arg(long)]
    pub model_dir: Option<PathBuf>,
    /// Sequences decoded together (the KV cache, attention and every
    /// collective's message grow with it).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Ranks (processes), one per GPU while there are enough.
    #[arg(long, default_value_t = 2)]
    pub world: usize,
    /// Back-ends to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,nccl,colltune,colltune-unfused"
    )]
    pub backends: Vec<String>,
    /// Modes to run each back-end in.
    #[arg(long, value_delimiter = ',', default_value = "eager,graph")]
    pub modes: Vec<String>,
    /// A prompt's text (needs the model folder's tokenizer.json); once for
    /// every sequence of the batch, or once per sequence. Default: seeded
    /// token ids.
    #[arg(long, allow_hyphen_values = true)]
    pub prompt: Vec<String>,
    /// Tokens of each seeded prompt (prefilled in one step).
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Decode steps timed after the prefill (greedy).
    #[arg(long, default_value_t = 256)]
    pub decode: usize,
    /// Untimed decode steps before each timed run.
    #[arg(long, default_value_t = 16)]
    pub warmup: usize,
    /// Seed of the weights and the seeded prompts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Safetensors files or folders with the model's weights (`transformers`
    /// names); default: the --model-dir's, else seeded weights.
    #[arg(long)]
    pub weights: Vec<PathBuf>,
    /// GPUs to place ranks on, round robin (default: every visible GPU).
    #[arg(long, value_delimiter = ',')]
    pub gpus: Vec<usize>,
    /// Largest relative RMS difference of the first decode step's logits from
    /// the one-rank model that passes (every back-end but none).
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
            model_dir: None,
            batch: 1,
            world,
            backends: BACKENDS.iter().map(|s| s.to_string()).collect(),
            modes: MODES.iter().map(|s| s.to_string()).collect(),
            prompt: vec![],
            prompt_tokens: 16,
            decode: 32,
            warmup: 2,
            seed: 1,
            weights: vec![],
            gpus,
            logit_tolerance: 0.05,
            no_reference: false,
        }
    }

    /// Everything that can be checked before a GPU is touched, and what the
    /// settings come to: the model's shapes, its weights, its tokenizer and
    /// the batch's prompts.
    pub fn validate(&self) -> Result<Resolved, String> {
        let (cfg, dir_weights, tokenizer) = match &self.model_dir {
            Some(dir) => {
                let d = ModelDir::open(dir)?;
                let tokenizer = d
                    .tokenizer
                    .as_deref()
                    .map(TextTokenizer::open)
                    .transpose()?;
                (d.cfg, d.safetensors, tokenizer)
            }
            None => (Config::by_name(&self.model)?, vec![], None),
        };
        cfg.check_split(self.world)?;
        if self.batch == 0 {
            return Err("--batch must be at least 1".into());
        }
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
        if self.prompt_tokens == 0 || self.decode == 0 {
            return Err("--prompt-tokens and --decode must be at least 1".into());
        }
        if self.logit_tolerance.is_nan() || self.logit_tolerance <= 0.0 {
            return Err("--logit-tolerance must be positive".into());
        }
        for w in &self.weights {
            if !w.exists() {
                return Err(format!("--weights {}: no such file or folder", w.display()));
            }
        }
        let prompts = self.prompts(&cfg, tokenizer.as_ref())?;
        Ok(Resolved {
            weights: if self.weights.is_empty() {
                dir_weights
            } else {
                self.weights.clone()
            },
            cfg,
            tokenizer,
            prompts,
        })
    }

    /// One prompt per sequence: the texts' ids, or seeded ids.
    fn prompts(
        &self,
        cfg: &Config,
        tokenizer: Option<&TextTokenizer>,
    ) -> Result<Vec<Vec<u32>>, String> {
        if self.prompt.is_empty() {
            return Ok((0..self.batch)
                .map(|b| prompt_tokens(self.seed, b, self.prompt_tokens, cfg.vocab))
                .collect());
        }
        let Some(tokenizer) = tokenizer else {
            return Err(match &self.model_dir {
                Some(d) => format!(
                    "--prompt needs a tokenizer: {} has no tokenizer.json",
                    d.display()
                ),
                None => "--prompt needs a tokenizer: give --model-dir with a tokenizer.json".into(),
            });
        };
        if self.prompt.len() != 1 && self.prompt.len() != self.batch {
            return Err(format!(
                "{} --prompt texts for a batch of {}: give one (every sequence) or one per \
                 sequence",
                self.prompt.len(),
                self.batch
            ));
        }
        let mut prompts = Vec::with_capacity(self.batch);
        for b in 0..self.batch {
            let text = &self.prompt[b % self.prompt.len()];
            let ids = tokenizer.encode(text)?;
            if ids.is_empty() {
                return Err(format!("--prompt {text:?} gives no token"));
            }
            if let Some(&id) = ids.iter().find(|&&id| id as usize >= cfg.vocab) {
                return Err(format!(
                    "{} gives the token id {id} for --prompt {text:?}, beyond vocab_size = {} of \
                     {}",
                    tokenizer.path().display(),
                    cfg.vocab,
                    cfg.origin
                ));
            }
            prompts.push(ids);
        }
        Ok(prompts)
    }

    /// The arguments that reproduce `self` (for the workers' command lines).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = match &self.model_dir {
            Some(d) => vec!["--model-dir".to_string(), d.display().to_string()],
            None => vec!["--model".to_string(), self.model.clone()],
        };
        for p in &self.prompt {
            // One argument: a text may start with a hyphen.
            a.push(format!("--prompt={p}"));
        }
        a.extend([
            "--batch".into(),
            self.batch.to_string(),
            "--world".into(),
            self.world.to_string(),
            "--backends".into(),
            self.backends.join(","),
            "--modes".into(),
            self.modes.join(","),
            "--prompt-tokens".into(),
            self.prompt_tokens.to_string(),
            "--decode".into(),
            self.decode.to_string(),
            "--warmup".into(),
            self.warmup.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--logit-tolerance".into(),
            self.logit_tolerance.to_string(),
        ]);
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

/// What a run's settings come to (`RunArgs::validate`).
#[derive(Debug)]
pub struct Resolved {
    pub cfg: Config,
    /// Safetensors files or folders; empty: seeded weights.
    pub weights: Vec<PathBuf>,
    pub tokenizer: Option<TextTokenizer>,
    /// One prompt per sequence of the batch.
    pub prompts: Vec<Vec<u32>>,
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
        assert_eq!(run.model_dir, None);
        assert_eq!(
            (run.world, run.batch, run.prompt_tokens, run.decode),
            (2, 1, 128, 256)
        );
        assert!(run.prompt.is_empty());
        assert_eq!(
            run.backends,
            ["none", "nccl", "colltune", "colltune-unfused"]
        );
        assert_eq!(run.modes, ["eager", "graph"]);
        assert!(!run.no_reference && run.gpus.is_empty());
        assert_eq!(out.timeout, 900);
        let r = run.validate().unwrap();
        assert_eq!(r.cfg.name, "llama-3.2-1b");
        assert_eq!(r.prompts.len(), 1);
        assert_eq!(r.prompts[0].len(), 128);
        assert!(r.weights.is_empty() && r.tokenizer.is_none());
    }

    #[test]
    fn a_worker_command_line_parses_back_to_the_same_settings() {
        let worker = WorkerArgs {
            run: RunArgs {
                model: "llama-3.2-1b".into(),
                model_dir: Some("/m/My Llama".into()),
                batch: 3,
                world: 4,
                backends: vec!["colltune".into(), "nccl".into()],
                modes: vec!["graph".into()],
                prompt: vec!["-1 is, \"negative\"".into(), "two\nlines".into()],
                prompt_tokens: 100,
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
            run: RunArgs {
                model: "llama-3.1-8b".into(),
                model_dir: None,
                prompt: vec![],
                ..worker.run.clone()
            },
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
        assert_eq!(
            bad(|a| a.world = 3),
            "built-in model tiny: num_key_value_heads = 8 is not divisible by the world size 3"
        );
        assert!(bad(|a| a.batch = 0).contains("--batch must be at least 1"));
        assert!(
            bad(|a| a.prompt = vec!["hi".into()]).contains("give --model-dir with a tokenizer")
        );
        assert!(bad(|a| a.backends = vec!["mpi".into()]).contains("unknown back-end `mpi`"));
        assert!(bad(|a| a.modes = vec!["graph".into(), "graph".into()]).contains("twice"));
        assert!(bad(|a| a.decode = 0).contains("at least 1"));
        assert!(bad(|a| a.logit_tolerance = f64::NAN).contains("positive"));
        assert!(bad(|a| a.weights = vec!["/no/such/file".into()]).contains("no such file"));
        assert!(parse(&["run", "--world", "two"]).is_err());
        // A built-in shape or a folder, not both.
        assert!(parse(&["run", "--model", "tiny", "--model-dir", "/m"]).is_err());
        let Command::Run { run, .. } = parse(&["run", "--model-dir", "/m"]).unwrap().command else {
            panic!("not run")
        };
        assert_eq!(run.model_dir, Some("/m".into()));
        let err = run.validate().err().unwrap();
        assert!(err.starts_with("--model-dir /m: "), "{err}");
        assert!(parse(&["worker", "--gpu", "0", "--report", "r"]).is_err()); // no --rank
        assert!("mpi:x".parse::<JoinArg>().is_err());
    }

    #[test]
    fn a_model_folder_gives_shapes_weights_tokenizer_and_prompts() {
        let dir = std::env::temp_dir().join(format!("candle-tp-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // 24 query heads over 8 key/value heads of 32 (hidden 640): no
        // built-in shape has it.
        std::fs::write(
            dir.join("config.json"),
            r#"{"architectures": ["LlamaForCausalLM"], "_name_or_path": "test/Llama-640",
                "hidden_size": 640, "num_hidden_layers": 3, "num_attention_heads": 24,
                "num_key_value_heads": 6, "head_dim": 32, "intermediate_size": 1536,
                "vocab_size": 96, "tie_word_embeddings": true}"#,
        )
        .unwrap();
        let mut args = RunArgs::self_check(2, vec![]);
        args.model_dir = Some(dir.clone());
        args.batch = 3;
        let r = args.validate().unwrap();
        assert_eq!(r.cfg.name, "test/Llama-640");
        assert_eq!((r.cfg.hidden, r.cfg.heads, r.cfg.kv_heads), (640, 24, 6));
        assert!(r.weights.is_empty(), "only a config: seeded weights");
        assert_eq!(r.prompts.len(), 3);
        assert!(
            r.prompts
                .iter()
                .all(|p| p.len() == 16 && p.iter().all(|&t| t < 96))
        );
        assert_ne!(r.prompts[0], r.prompts[1]);
        // The world size must divide the key/value heads.
        args.world = 4;
        let err = args.validate().err().unwrap();
        assert_eq!(
            err,
            format!(
                "{}: num_key_value_heads = 6 is not divisible by the world size 4",
                dir.join("config.json").display()
            )
        );
        args.world = 2;

        // Text prompts through the folder's tokenizer.
        args.prompt = vec!["hello world".into()];
        let err = args.validate().err().unwrap();
        assert!(err.contains("has no tokenizer.json"), "{err}");
        crate::tokenizer::tests::write_tiny_bpe(&dir);
        let r = args.validate().unwrap();
        assert!(r.tokenizer.is_some());
        assert_eq!(r.prompts, vec![vec![19, 12, 18]; 3]);
        args.prompt = vec!["hello".into(), "hello world!".into(), "world hello".into()];
        let r = args.validate().unwrap();
        assert_eq!(
            r.prompts,
            vec![vec![19, 12], vec![19, 12, 18, 8], vec![19, 17, 13]]
        );
        args.prompt.pop();
        assert!(
            args.validate()
                .err()
                .unwrap()
                .contains("2 --prompt texts for a batch of 3")
        );
        // Ids the config's vocabulary does not have are refused.
        args.prompt = vec!["hello".into()];
        let small = std::fs::read_to_string(dir.join("config.json"))
            .unwrap()
            .replace("\"vocab_size\": 96", "\"vocab_size\": 16");
        std::fs::write(dir.join("config.json"), small).unwrap();
        let err = args.validate().err().unwrap();
        assert!(
            err.contains("gives the token id 19 for --prompt \"hello\", beyond vocab_size = 16"),
            "{err}"
        );
        // Weights in the folder are used; --weights overrides them.
        args.prompt.clear();
        std::fs::write(dir.join("model.safetensors"), b"").unwrap();
        let r = args.validate().unwrap();
        assert_eq!(r.weights, vec![dir.join("model.safetensors")]);
        args.weights = vec![dir.join("tokenizer.json")];
        assert_eq!(args.validate().unwrap().weights, args.weights);
        std::fs::remove_dir_all(dir).unwrap();
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
