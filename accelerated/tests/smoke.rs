//! End-to-end: a tiny model trains on the embedded corpus, its loss falls, it evaluates at four
//! lengths, the plots exist, resume is exact, and sampling runs.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use std::path::Path;

use candle_core::Device;
use fire_accelerated::config::{EncodingConfig, FireConfig, ModelConfig};
use fire_accelerated::data::{ByteTokenizer, Corpus};
use fire_accelerated::eval::{self, EvalConfig, Report};
use fire_accelerated::generate::{generate, SampleConfig};
use fire_accelerated::plot::{self, Chart, Series};
use fire_accelerated::train::checkpoint::load_model;
use fire_accelerated::train::{self, Metrics, Options, TrainConfig};

fn model() -> ModelConfig {
    ModelConfig {
        d_model: 32,
        n_layers: 2,
        n_heads: 2,
        d_ff: 64,
        ..ModelConfig::tiny(EncodingConfig::Fire(FireConfig {
            l_init: 8.0,
            ..FireConfig::default()
        }))
    }
}

fn train_cfg() -> TrainConfig {
    TrainConfig {
        seq_len: 32,
        batch: 8,
        steps: 100,
        warmup: 10,
        lr: 1e-2,
        checkpoint_every: 25,
        log_every: 1,
        ..TrainConfig::default()
    }
}

fn losses(run: &Path) -> Vec<(u64, u32)> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Metrics>(l).unwrap())
        .map(|m| (m.step, m.loss.to_bits()))
        .collect()
}

#[test]
fn tiny_fire_model_trains_evaluates_plots_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Device::Cpu;
    let (m, t) = (model(), train_cfg());

    // Uninterrupted.
    let a = dir.path().join("a");
    let opts = Options {
        run: a.clone(),
        ..Options::default()
    };
    let out = train::train(&m, &t, &opts, &dev).unwrap();
    let first: f32 = out.losses[..10].iter().map(|l| l.1).sum::<f32>() / 10.0;
    let last: f32 = out.losses[90..].iter().map(|l| l.1).sum::<f32>() / 10.0;
    let initial = out.losses[0].1;
    assert!(
        (initial - 256f32.ln()).abs() < 0.3,
        "initial loss {initial}, not near ln 256"
    );
    assert!(
        last < initial - 1.5 && last < first - 1.0,
        "loss fell only from {initial} ({first} over 10 steps) to {last}"
    );

    // Interrupted after 40 steps (the last checkpoint is at 40), then resumed.
    let b = dir.path().join("b");
    let stop = Options {
        run: b.clone(),
        stop_after: Some(40),
        ..Options::default()
    };
    train::train(&m, &t, &stop, &dev).unwrap();
    assert!(train::train(
        &m,
        &t,
        &Options {
            run: b.clone(),
            ..Options::default()
        },
        &dev
    )
    .is_err());
    let resume = Options {
        run: b.clone(),
        resume: true,
        ..Options::default()
    };
    train::train(&m, &t, &resume, &dev).unwrap();
    assert_eq!(losses(&a).len(), 100);
    assert_eq!(losses(&a), losses(&b), "resumed loss curve differs");

    // Evaluation at four lengths on held-out documents, with chunking.
    let (model, loaded) = load_model(&a, &dev).unwrap();
    assert_eq!(loaded.state.step, 100);
    let split = Corpus::embedded().split(t.held_out).unwrap();
    let cfg = EvalConfig {
        lengths: vec![32, 64, 128, 256],
        max_windows: 4,
        chunk: 32,
        batch: 2,
        attention: Default::default(),
        split_at: None,
    };
    let results = eval::evaluate(&model, &split.eval, &cfg).unwrap();
    assert_eq!(results.len(), 4);
    for r in &results {
        assert!(r.log_ppl.is_finite() && r.log_ppl < 5.0, "{r:?}");
        assert_eq!(r.tokens, r.windows * r.length);
        // Every length scores the same tokens: 4 spans of 256.
        assert_eq!(r.tokens, 4 * 256, "{r:?}");
    }
    let report = Report {
        label: "a".into(),
        encoding: "fire".into(),
        train_len: 32,
        step: 100,
        results: results.clone(),
    };
    assert!(eval::table(&[report]).contains("256"));
    let chart = Chart {
        title: "t".into(),
        x_label: "x".into(),
        y_label: "y".into(),
        log_x: true,
        series: vec![Series {
            label: "fire".into(),
            points: results
                .iter()
                .map(|r| (r.length as f64, r.log_ppl))
                .collect(),
        }],
    };
    let stem = dir.path().join("plots/log-ppl");
    plot::save(&chart, &stem).unwrap();
    for ext in ["svg", "png"] {
        let len = std::fs::metadata(stem.with_extension(ext)).unwrap().len();
        assert!(len > 1000, "{ext} plot is {len} bytes");
    }
    let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
    assert!(svg.contains("fire"), "legend text in the SVG");

    // Sampling from the checkpoint.
    let tok = ByteTokenizer;
    let cfg = SampleConfig {
        max_new: 20,
        temperature: 0.8,
        top_k: 20,
        seed: 1,
        chunk: 32,
    };
    let out = generate(&model, &tok.encode("The "), &cfg).unwrap();
    assert_eq!(out.len(), 20);
    assert_eq!(
        out,
        generate(&model, &tok.encode("The "), &cfg).unwrap(),
        "seeded sampling"
    );
}

#[test]
fn the_split_is_by_document_and_eval_documents_are_long_enough() {
    let c = Corpus::embedded();
    assert_eq!(c.documents.len(), 17);
    assert!(c.tokens() > 200_000);
    let s = c.split(0.15).unwrap();
    assert!(!s.eval.is_empty() && !s.train.is_empty());
    for d in &s.eval {
        assert!(!s.train.iter().any(|t| t.name == d.name));
    }
    assert!(
        s.eval.iter().any(|d| d.tokens.len() > 1025),
        "some held-out document is longer than 8 x 128"
    );
    assert_eq!(s.train.len() + s.eval.len(), 17);
}

/// `train::Options::timings_after`: the parts of the steps after the warm-up, the fused
/// block's parts (its attention, products, copies) inside the step's.
#[test]
fn a_timed_run_reports_the_steps_after_the_warm_up_by_part() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Device::Cpu;
    let m = model();
    let t = TrainConfig {
        seq_len: 32,
        batch: 2,
        steps: 5,
        ..train_cfg()
    };
    let opts = Options {
        run: dir.path().join("run"),
        timings_after: Some(2),
        ..Options::default()
    };
    let out = train::train(&m, &t, &opts, &dev).unwrap();
    let (steps, parts) = out.timings.expect("timings asked for");
    assert_eq!(steps, 3);
    let part = |name: &str| {
        parts
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no part {name} in {parts:?}"))
            .clone()
    };
    // Counted over the 3 timed steps only (the warm-up's were reset).
    assert_eq!(part("step").calls, 3);
    assert_eq!(part("step: forward").calls, 3);
    assert_eq!(part("block forward").calls, 3 * 2);
    assert_eq!(part("block backward").calls, 3 * 2);
    assert_eq!(part("block forward: products").calls, 3 * 2 * 4);
    // Nested parts fit inside the parts that hold them.
    assert!(part("block forward").seconds <= part("step: forward").seconds);
    assert!(part("block backward").seconds <= part("step: backward").seconds);
    assert!(part("step: forward").seconds + part("step: backward").seconds <= part("step").seconds);
    // The timers are off again (they are this thread's): an untimed run leaves no trace.
    fire_accelerated::timing::reset();
    let again = Options {
        run: dir.path().join("again"),
        ..Options::default()
    };
    let out = train::train(&m, &t, &again, &dev).unwrap();
    assert!(out.timings.is_none());
    assert!(fire_accelerated::timing::parts().is_empty());
}
