//! `fire-lm eval`: every run scored on its own held-out text at each length, one table, and
//! `eval.json` with the log-perplexity chart beside it. Runs trained on different text are
//! refused together: their nats per token would share a table without being comparable.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use fire_accelerated::attention::AttentionPath;
use fire_accelerated::data::Corpus;
use fire_accelerated::eval::{self, EvalConfig, Report};
use fire_accelerated::plot::{self, Chart, Series};
use fire_accelerated::tokenizer::Tokenizer;
use fire_accelerated::train::checkpoint::{self, load_model};

use crate::{device, DeviceArg};

#[derive(Args, Debug)]
pub(crate) struct EvalArgs {
    /// Run (or checkpoint) directories.
    #[arg(required = true)]
    pub(crate) runs: Vec<PathBuf>,
    /// Lengths (default: 1, 2, 4 and 8 times the first run's training length).
    #[arg(long, value_delimiter = ',')]
    pub(crate) lengths: Vec<usize>,
    /// Spans of the longest length; shorter lengths cut the same spans into more windows.
    #[arg(long, default_value_t = 16)]
    pub(crate) max_windows: usize,
    /// Query-chunk size (default: the training length).
    #[arg(long)]
    pub(crate) chunk: Option<usize>,
    #[arg(long, default_value_t = 4)]
    pub(crate) batch: usize,
    /// `fused` (the tiled kernel with on-the-fly bias, used where the encoding is additive and
    /// the device can run it; RoPE falls back) or `materialised` (the chunked candle path).
    #[arg(long, value_enum, default_value_t = AttentionPath::Fused)]
    pub(crate) attention: AttentionPath,
    /// The same-text view: at lengths above P, also report the loss of positions < P and
    /// >= P of the same windows (P is usually the training length).
    #[arg(long, value_name = "P")]
    pub(crate) split_at: Option<usize>,
    /// Where to write eval.json and log-ppl.{svg,png} (default: the first run).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) device: DeviceArg,
}

fn label(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

pub(crate) fn run_eval(a: &EvalArgs) -> Result<Vec<Report>> {
    // Refused, not adjusted: a 0 here is a typo, and quietly evaluating something else would
    // report numbers for settings nobody asked for.
    if a.max_windows == 0 {
        bail!("--max-windows must be at least 1 (the spans of the longest length), got 0");
    }
    if a.batch == 0 {
        bail!("--batch must be at least 1, got 0");
    }
    if a.chunk == Some(0) {
        bail!("--chunk must be at least 1, got 0");
    }
    if a.split_at == Some(0) {
        bail!(
            "--split-at must be at least 1 (P splits each window into positions < P and >= P), \
             got 0"
        );
    }
    let dev = device(&a.device)?;
    let mut reports = Vec::new();
    let mut lengths = a.lengths.clone();
    // The held-out text each run is scored on: its corpus, split and tokenizer.
    let mut first_text = None;
    for run in &a.runs {
        let (model, loaded) = load_model(run, &dev)
            .with_context(|| format!("cannot evaluate the run {}", run.display()))?;
        let t = &loaded.state.train;
        let text = (t.corpus.clone(), t.held_out, t.tokenizer.clone());
        match &first_text {
            None => first_text = Some((run, text)),
            // Side by side, nats per token over different tokens (another tokenizer, corpus or
            // held-out share) would read as a comparison that it is not.
            Some((first, want)) if *want != text => {
                let name = |p: &Option<PathBuf>, none: &str| {
                    p.as_ref()
                        .map_or(none.to_owned(), |p| p.display().to_string())
                };
                let mut differ = Vec::new();
                if want.0 != text.0 {
                    let (a, b) = (name(&want.0, "embedded"), name(&text.0, "embedded"));
                    differ.push(format!("corpus {a} vs {b}"));
                }
                if want.1 != text.1 {
                    differ.push(format!("held-out share {} vs {}", want.1, text.1));
                }
                if want.2 != text.2 {
                    let (a, b) = (name(&want.2, "bytes"), name(&text.2, "bytes"));
                    differ.push(format!("tokenizer {a} vs {b}"));
                }
                bail!(
                    "{} and {} were trained on different text ({}): their losses per token are \
                     over different held-out tokens and cannot share a table; evaluate them one \
                     at a time",
                    first.display(),
                    run.display(),
                    differ.join(", ")
                );
            }
            Some(_) => {}
        }
        if lengths.is_empty() {
            lengths = [1, 2, 4, 8].iter().map(|k| k * t.seq_len).collect();
        }
        let tokenizer = Tokenizer::load(t.tokenizer.as_deref())?;
        let corpus = Corpus::load_with(t.corpus.as_deref(), &tokenizer)?;
        let split = corpus.split(t.held_out)?;
        let cfg = EvalConfig {
            lengths: lengths.clone(),
            max_windows: a.max_windows,
            chunk: a.chunk.unwrap_or(t.seq_len),
            batch: a.batch,
            attention: a.attention,
            split_at: a.split_at,
        };
        let results = eval::evaluate(&model, &split.eval, &cfg)?;
        reports.push(Report {
            label: label(run),
            encoding: model.cfg.encoding.name().into(),
            train_len: t.seq_len,
            step: loaded.state.step,
            results,
        });
    }
    print!("{}", eval::table(&reports));
    let out = a.out.clone().unwrap_or_else(|| a.runs[0].clone());
    write_reports(&reports, &out)?;
    Ok(reports)
}

fn write_reports(reports: &[Report], out: &Path) -> Result<()> {
    std::fs::create_dir_all(out)?;
    checkpoint::write_atomic(&out.join("eval.json"), &serde_json::to_vec_pretty(reports)?)?;
    let chart = Chart {
        title: "Log-perplexity vs evaluation length".into(),
        x_label: "evaluation length (tokens, log scale)".into(),
        y_label: "log perplexity (nats/token)".into(),
        log_x: true,
        series: reports
            .iter()
            .map(|r| Series {
                label: format!("{} ({})", r.label, r.encoding),
                points: r
                    .results
                    .iter()
                    .map(|x| (x.length as f64, x.log_ppl))
                    .collect(),
            })
            .collect(),
    };
    plot::save(&chart, &out.join("log-ppl"))?;
    println!("wrote {}/eval.json and log-ppl.{{svg,png}}", out.display());
    Ok(())
}
