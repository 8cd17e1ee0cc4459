//! `fire-lm`: train, evaluate, inspect and sample decoder-only LMs with FIRE and its rivals.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use fire_accelerated::attention::AttentionPath;
use fire_accelerated::config::{Encoding, EncodingConfig, FireConfig, InitScheme, ModelConfig};
use fire_accelerated::encodings::Grid;
use fire_accelerated::generate::{generate_with, SampleConfig};
use fire_accelerated::plot::{self, Chart, Series};
use fire_accelerated::tokenizer::Tokenizer;
use fire_accelerated::train::checkpoint::{self, load_model, ResumeFrom};
use fire_accelerated::train::{self, Options, TrainConfig};

/// `fire-lm bench`: the kernels and the end-to-end model side by side.
#[path = "fire-lm/bench.rs"]
mod bench;
/// `fire-lm eval`: the runs' held-out loss by evaluation length, the table and the chart.
#[path = "fire-lm/evaluation.rs"]
mod evaluation;
/// `fire-lm verify` and the wording of checkpoint and divergence errors.
#[path = "fire-lm/faults.rs"]
mod faults;
/// Sizes refused before anything is allocated: the machine's memory, exact positions.
#[path = "fire-lm/limits.rs"]
mod limits;
/// The allocator set to keep the memory each training step frees for the next.
#[path = "fire-lm/malloc.rs"]
mod malloc;
/// `--resume`: the flags that would be ignored, said rather than dropped.
#[path = "fire-lm/resume.rs"]
mod resume;
/// candle's thread pool set not to spin long beside rayon's.
#[path = "fire-lm/threads.rs"]
mod threads;

#[derive(Parser, Debug)]
#[command(
    name = "fire-lm",
    version,
    about = "Decoder-only LMs with FIRE (arXiv:2310.04418) and baseline position encodings"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train a model (or resume one with --resume).
    Train(Box<TrainArgs>),
    /// Perplexity at several lengths for one or more runs; table, JSON and plot.
    Eval(evaluation::EvalArgs),
    /// Plot the learned FIRE bias per layer and head for one query position; export parameters.
    Bias(BiasArgs),
    /// Sample text from a checkpoint.
    Generate(GenerateArgs),
    /// Check every checkpoint of a run against its manifest (sizes, SHA-256, finite weights).
    Verify(faults::VerifyArgs),
    /// Side-by-side speed: the fused kernels' table and end-to-end eval tokens/s, as ratios.
    Bench(bench::BenchArgs),
    /// Train and evaluate a tiny FIRE model on the embedded corpus (a couple of minutes on CPU).
    Demo(DemoArgs),
}

/// Where the model runs.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum DeviceKind {
    /// The CPU.
    Cpu,
    /// CUDA device 0 (needs the `cuda` feature).
    Cuda,
}

#[derive(Args, Debug, Clone)]
struct DeviceArg {
    /// Where the model runs.
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    device: DeviceKind,
}

fn device(arg: &DeviceArg) -> Result<Device> {
    match arg.device {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Cuda => Device::new_cuda(0).context(if cfg!(feature = "cuda") {
            "CUDA device 0: is an NVIDIA GPU with its driver present?"
        } else {
            "CUDA device 0: this binary was built without `--features cuda`"
        }),
    }
}

/// The name clap parses back to `value`.
fn arg_name(value: impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

#[derive(Args, Debug)]
struct TrainArgs {
    /// Run directory.
    #[arg(long)]
    run: PathBuf,
    /// Continue the run in --run from its latest checkpoint.
    #[arg(long)]
    resume: bool,
    /// Continue from this checkpoint of --run instead of `latest` (implies --resume):
    /// `step-N` or `verified` (the newest whose files match their manifest). Newer checkpoints
    /// are moved to checkpoints/superseded/, not deleted.
    #[arg(long, value_name = "step-N|verified")]
    resume_from: Option<ResumeFrom>,
    /// Checkpoints to keep, the newest K (at least 1); older ones are what a damaged newest
    /// checkpoint falls back to.
    #[arg(long, value_name = "K", default_value_t = train::KEEP_CHECKPOINTS)]
    keep_checkpoints: usize,
    /// Skip up to N consecutive steps whose loss or gradient norm is not finite (no update)
    /// before stopping as diverged; 0 (the default) stops at the first.
    #[arg(long, value_name = "N", default_value_t = 0)]
    skip_nonfinite: u64,
    /// After training, print where the steps after the first W went (to stderr, a markdown
    /// table): seconds per step for each part — the step's phases (batch, forward, loss,
    /// backward, clipping, AdamW, the finite check) and, through the fused block, its products,
    /// attention, head-layout copies, bias + GeLU and LayerNorms; checkpoints apart.
    #[arg(long, value_name = "W")]
    timings: Option<u64>,
    /// Model config (YAML or JSON); otherwise built from the model flags below (--encoding
    /// to --d-ff), which are then refused rather than silently ignored.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Training config (YAML or JSON); flags below override it.
    #[arg(long)]
    train_config: Option<PathBuf>,
    /// Positional encoding.
    #[arg(long, conflicts_with = "config", value_enum, default_value_t = Encoding::Fire)]
    encoding: Encoding,
    /// RoPE-PI's scale (target length / training length).
    #[arg(long, conflicts_with = "config", default_value_t = 8.0)]
    rope_pi_scale: f64,
    /// FIRE's frozen initial threshold init_L (Appendix E: 512).
    #[arg(long, conflicts_with = "config")]
    fire_l_init: Option<f64>,
    /// FIRE's MLP depth (1: Appendix E; 2: the paper's experiments).
    #[arg(long, conflicts_with = "config")]
    fire_depth: Option<usize>,
    /// How the projections start: fan-in (PyTorch's nn.Linear default) or gpt2 (N(0, 0.02²),
    /// residual outputs scaled by 1/√(2·layers)).
    #[arg(long, conflicts_with = "config", value_enum, default_value_t = InitScheme::FanIn)]
    init: InitScheme,
    #[arg(long, conflicts_with = "config", default_value_t = 64)]
    d_model: usize,
    #[arg(long, conflicts_with = "config", default_value_t = 2)]
    layers: usize,
    #[arg(long, conflicts_with = "config", default_value_t = 4)]
    heads: usize,
    #[arg(long, conflicts_with = "config", default_value_t = 256)]
    d_ff: usize,
    #[arg(long)]
    seq_len: Option<usize>,
    #[arg(long)]
    batch: Option<usize>,
    #[arg(long)]
    steps: Option<u64>,
    #[arg(long)]
    warmup: Option<u64>,
    #[arg(long)]
    lr: Option<f64>,
    #[arg(long)]
    seed: Option<u64>,
    /// Corpus directory (default: the embedded Python tutorial).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// A Hugging Face tokenizer.json (default: bytes); the model's vocabulary takes its size.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    #[arg(long)]
    checkpoint_every: Option<u64>,
    /// Stop after this many steps in total, as if killed (for testing --resume).
    #[arg(long)]
    stop_after: Option<u64>,
    /// Record the run for an independent replay (accelerated/benches/torch_twin.py): the
    /// initial weights as DIR/init.safetensors and every step's batch as DIR/batches.u32.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Attention of training: fused (the fused op with a backward pass, no [B, H, N, N]
    /// tensor; where the encoding is additive and the device the CPU) or materialised.
    #[arg(long, value_enum)]
    attention: Option<AttentionPath>,
    #[command(flatten)]
    device: DeviceArg,
}

fn model_config(a: &TrainArgs) -> Result<ModelConfig> {
    if let Some(p) = &a.config {
        return Ok(ModelConfig::load(p)?);
    }
    let mut encoding = a.encoding.config(a.rope_pi_scale);
    if let EncodingConfig::Fire(f) | EncodingConfig::FireS(f) = &mut encoding {
        *f = FireConfig {
            l_init: a.fire_l_init.unwrap_or(f.l_init),
            depth: a.fire_depth.unwrap_or(f.depth),
            ..f.clone()
        };
    }
    let vocab_size = match &a.tokenizer {
        Some(p) => Tokenizer::load(Some(p))?.vocab_size(),
        None => ModelConfig::tiny(encoding.clone()).vocab_size,
    };
    let cfg = ModelConfig {
        init: a.init,
        d_model: a.d_model,
        n_layers: a.layers,
        n_heads: a.heads,
        d_ff: a.d_ff,
        vocab_size,
        ..ModelConfig::tiny(encoding)
    };
    cfg.validate()?;
    Ok(cfg)
}

fn train_config(a: &TrainArgs) -> Result<TrainConfig> {
    let mut t = match &a.train_config {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
            if p.extension().is_some_and(|e| e == "json") {
                serde_json::from_str(&text)?
            } else {
                serde_saphyr::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
            }
        }
        None => TrainConfig::default(),
    };
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = a.$f.clone() { t.$f = v; } )* };
    }
    set!(seq_len, batch, steps, warmup, lr, seed, checkpoint_every);
    if a.corpus.is_some() {
        t.corpus = a.corpus.clone();
    }
    if a.tokenizer.is_some() {
        t.tokenizer = a.tokenizer.clone();
    }
    if let Some(p) = a.attention {
        t.attention = p;
    }
    Ok(t)
}

/// `given`: the ids of the flags set on the command line (not by default), for
/// [`resume::conflicts`].
fn run_train(a: &TrainArgs, given: &[String]) -> Result<()> {
    let dev = device(&a.device)?;
    let (m, t) = (model_config(a)?, train_config(a)?);
    faults::check_train_config(&t)?;
    if a.resume || a.resume_from.is_some() {
        resume::conflicts(a, given, &m, &t)?;
    } else {
        limits::check_memory(
            limits::train_bytes(&m, &t),
            &format!(
                "training {} layers of d_model {} and d_ff {} over a vocabulary of {} at batch \
                 {} × seq_len {}",
                m.n_layers, m.d_model, m.d_ff, m.vocab_size, t.batch, t.seq_len
            ),
        )?;
    }
    if t.attention == AttentionPath::Fused && dev.is_cpu() {
        // Still before any candle op or thread of ours.
        threads::single_threaded_candle_ops();
    }
    if a.keep_checkpoints == 0 {
        bail!("--keep-checkpoints must be at least 1 (the newest checkpoint is always kept)");
    }
    let opts = Options {
        run: a.run.clone(),
        resume: a.resume,
        resume_from: a.resume_from.clone(),
        stop_after: a.stop_after,
        record: a.record.clone(),
        progress: !a.quiet,
        keep_checkpoints: a.keep_checkpoints,
        skip_nonfinite: a.skip_nonfinite,
        storage: None,
        on_note: Some(|note| eprintln!("note: {note}")),
        timings_after: a.timings,
    };
    let out =
        threads::with_rayon_awake(|| train::train(&m, &t, &opts, &dev)).map_err(faults::explain)?;
    match (&out.timings, a.timings) {
        (Some((steps, parts)), _) => eprintln!(
            "where the {steps} steps after the first {} went:\n\n{}",
            a.timings.unwrap_or(0),
            fire_accelerated::timing::table(parts, *steps, "step")
        ),
        (None, Some(w)) => eprintln!("note: --timings {w}: no step ran after the first {w}"),
        (None, None) => {}
    }
    if out.losses.is_empty() {
        // Only a resumed run (or --stop-after at or before its checkpoint) trains no step;
        // "trained 0 steps to loss NaN" would read as a failure of training. Nothing failed:
        // said, with success (a script resuming until done ends on it).
        let done = out
            .checkpoint
            .file_name()
            .and_then(|n| n.to_str()?.strip_prefix("step-")?.parse::<u64>().ok());
        let total = resume::train_config_of(&a.run).map(|t| t.steps);
        match (done, total) {
            (Some(n), Some(total)) if n >= total => println!(
                "{} is already complete at step {n} of {total}; nothing to train",
                a.run.display()
            ),
            _ => println!(
                "trained no step: the run is at {} (--stop-after {})",
                out.checkpoint.display(),
                a.stop_after
                    .map_or_else(|| "unset".into(), |s| s.to_string())
            ),
        }
        return Ok(());
    }
    let last = out.losses.last().map_or(f32::NAN, |l| l.1);
    println!(
        "trained {} steps to loss {last:.4} at {:.0} tokens/s; checkpoint {}",
        out.losses.len(),
        out.tokens_per_s,
        out.checkpoint.display()
    );
    Ok(())
}

#[derive(Args, Debug)]
struct BiasArgs {
    /// Run (or checkpoint) directory of a FIRE or FIRE-S model.
    run: PathBuf,
    /// Query position (0-based); keys 0..=query.
    #[arg(long, default_value_t = 128)]
    query: u64,
    /// Output directory (default: the run).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn run_bias(a: &BiasArgs) -> Result<()> {
    limits::check_bias_query(a.query, &a.run)?;
    let dev = Device::Cpu;
    let (model, _) = load_model(&a.run, &dev)?;
    let fire = matches!(model.cfg.encoding.kind(), Encoding::Fire | Encoding::FireS);
    let modules = model.encoding.modules();
    if !fire || modules.is_empty() {
        bail!(
            "{} uses {}, not FIRE",
            a.run.display(),
            model.encoding.name()
        );
    }
    let heads = model.cfg.n_heads as u128;
    let need = (u128::from(a.query) + 1)
        * (limits::BIAS_BYTES_PER_KEY + heads * limits::BIAS_BYTES_PER_HEAD_KEY);
    limits::check_memory(need, &format!("--query {}", a.query))?;
    let out = a.out.clone().unwrap_or_else(|| a.run.clone());
    std::fs::create_dir_all(&out)?;
    let keys: Vec<u64> = (0..=a.query).collect();
    let grid = Grid::new(&[a.query], &keys, &dev)?;
    let mut export = serde_json::Map::new();
    for (l, m) in modules.iter().enumerate() {
        let b = m.bias_tensor(&grid)?.squeeze(1)?.to_vec2::<f32>()?;
        let chart = Chart {
            title: format!("Learned FIRE bias, layer {l}, query position {}", a.query),
            x_label: "key position j".into(),
            y_label: "bias b(i, j)".into(),
            log_x: false,
            series: b
                .iter()
                .enumerate()
                .map(|(h, row)| Series {
                    label: format!("head {h}"),
                    points: keys
                        .iter()
                        .zip(row)
                        .map(|(&j, &v)| (j as f64, f64::from(v)))
                        .collect(),
                })
                .collect(),
        };
        plot::save(&chart, &out.join(format!("fire-bias-layer{l}")))?;
        let mut params = serde_json::Map::new();
        for (name, t) in m.state_dict() {
            let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
            params.insert(name, serde_json::json!({ "shape": t.dims(), "data": v }));
        }
        export.insert(format!("layer{l}"), serde_json::Value::Object(params));
    }
    checkpoint::write_atomic(
        &out.join("fire-params.json"),
        &serde_json::to_vec_pretty(&export)?,
    )?;
    println!(
        "wrote {} bias plots and fire-params.json to {}",
        modules.len(),
        out.display()
    );
    Ok(())
}

#[derive(Args, Debug)]
struct GenerateArgs {
    /// Run (or checkpoint) directory.
    run: PathBuf,
    #[arg(long, default_value = "The ")]
    prompt: String,
    #[arg(long, default_value_t = 200)]
    max_new: usize,
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `fused` (additive encodings: the fused kernel, one decoding step per token) or
    /// `materialised` (the candle cache path).
    #[arg(long, value_enum, default_value_t = AttentionPath::Fused)]
    attention: AttentionPath,
    #[command(flatten)]
    device: DeviceArg,
}

fn run_generate(a: &GenerateArgs) -> Result<()> {
    let dev = device(&a.device)?;
    let (model, loaded) = load_model(&a.run, &dev)?;
    let tok = Tokenizer::load(loaded.state.train.tokenizer.as_deref())?;
    // The key/value cache of every layer holds every position (f32 keys and values), and the
    // output one u32 per new token: refused up front rather than aborting in the allocator.
    let m = &model.cfg;
    let per_token = 4 + 2 * 4 * (m.n_layers as u128) * (m.d_model as u128);
    limits::check_memory(
        (a.prompt.len() as u128 + a.max_new as u128) * per_token,
        &format!("--max-new {}", a.max_new),
    )?;
    let cfg = SampleConfig {
        max_new: a.max_new,
        temperature: a.temperature,
        top_k: a.top_k,
        seed: a.seed,
        chunk: loaded.state.train.seq_len,
    };
    let out = generate_with(&model, &tok.encode(&a.prompt)?, &cfg, a.attention)?;
    println!("{}{}", a.prompt, tok.decode(&out)?);
    Ok(())
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Output directory.
    #[arg(long, default_value = "runs/demo")]
    out: PathBuf,
    /// Encodings to train and compare.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Encoding::Fire, Encoding::Nope])]
    encodings: Vec<Encoding>,
    #[arg(long, default_value_t = 300)]
    steps: u64,
    #[arg(long, default_value_t = 64)]
    seq_len: usize,
    #[command(flatten)]
    device: DeviceArg,
}

fn run_demo(a: &DemoArgs) -> Result<()> {
    let mut runs = Vec::new();
    for enc in &a.encodings {
        let run = a.out.join(enc.name());
        if run.join("latest").exists() {
            println!("{} exists; reusing it", run.display());
        } else {
            let cli = Cli::try_parse_from([
                "fire-lm",
                "train",
                "--run",
                &run.display().to_string(),
                "--encoding",
                enc.name(),
                "--fire-l-init",
                &(a.seq_len / 4).max(1).to_string(),
                "--rope-pi-scale",
                "8",
                "--seq-len",
                &a.seq_len.to_string(),
                "--steps",
                &a.steps.to_string(),
                "--warmup",
                &(a.steps / 10).to_string(),
                "--device",
                &arg_name(a.device.device),
            ])?;
            let Command::Train(args) = cli.command else {
                bail!("internal: demo built a non-train command");
            };
            println!(
                "training {enc} for {} steps at length {}",
                a.steps, a.seq_len
            );
            run_train(&args, &[])?;
        }
        runs.push(run);
    }
    evaluation::run_eval(&evaluation::EvalArgs {
        runs,
        lengths: Vec::new(),
        max_windows: 16,
        chunk: None,
        batch: 4,
        attention: AttentionPath::Fused,
        split_at: None,
        out: Some(a.out.clone()),
        device: a.device.clone(),
    })?;
    Ok(())
}

fn main() -> Result<()> {
    // Before any thread exists (rayon's pool starts with the first parallel call). Where the
    // allocator is not glibc's this does nothing, and only speed is at stake.
    malloc::keep_freed_memory();
    threads::quiet_candle_pool();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The train flags set on the command line, told apart from their defaults.
    let given: Vec<String> = matches
        .subcommand_matches("train")
        .map(|m| {
            m.ids()
                .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                .map(|id| id.as_str().to_owned())
                .collect()
        })
        .unwrap_or_default();
    match cli.command {
        Command::Train(a) => run_train(&a, &given),
        Command::Eval(a) => evaluation::run_eval(&a).map(|_| ()),
        Command::Bias(a) => run_bias(&a),
        Command::Generate(a) => run_generate(&a),
        Command::Verify(a) => faults::run_verify(&a),
        Command::Demo(a) => run_demo(&a),
        Command::Bench(a) => bench::run_bench(&a),
    }
}
