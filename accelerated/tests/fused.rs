//! The fused evaluation path equals the materialised candle path: logits and the evaluation
//! log-likelihood agree within f32 tolerance for every additive encoding on tiny random models
//! (FIRE depth 1 and 2, a GeLU f_θ on the direct-evaluation fallback, FIRE-S sharing one plan,
//! FIRE without threshold); rotary encodings have no fused form and keep the candle path.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use candle_core::{Device, Tensor};
use fire_accelerated::attention::{AttentionPath, Backend, Purpose};
use fire_accelerated::config::{Activation, EncodingConfig, FireConfig, ModelConfig, Threshold};
use fire_accelerated::data::Corpus;
use fire_accelerated::eval::{self, EvalConfig};
use fire_accelerated::generate::{generate, generate_with, SampleConfig};
use fire_accelerated::nn::nll_sum;
use fire_accelerated::params::ParamStore;
use fire_accelerated::Model;
use fire_vocabulary::SplitMix64;

fn small(encoding: EncodingConfig) -> ModelConfig {
    ModelConfig {
        d_model: 16,
        n_layers: 2,
        n_heads: 4,
        d_ff: 32,
        ..ModelConfig::tiny(encoding)
    }
}

fn fire(depth: usize) -> FireConfig {
    // A threshold inside the sequence, so both branches of max(i, L) are exercised.
    FireConfig {
        depth,
        l_init: 9.0,
        c: 0.7,
        ..FireConfig::default()
    }
}

fn additive() -> Vec<(String, EncodingConfig)> {
    let mut v: Vec<(String, EncodingConfig)> = [
        "fire",
        "fire-s",
        "nope",
        "alibi",
        "kerple-log",
        "kerple-power",
        "t5",
        "sandwich",
    ]
    .iter()
    .map(|n| (n.to_string(), EncodingConfig::from_name(n, 4.0).unwrap()))
    .collect();
    v.push(("fire depth 1".into(), EncodingConfig::Fire(fire(1))));
    v.push(("fire depth 2".into(), EncodingConfig::Fire(fire(2))));
    v.push(("fire-s depth 2".into(), EncodingConfig::FireS(fire(2))));
    v.push((
        "fire gelu (direct evaluation)".into(),
        EncodingConfig::Fire(FireConfig {
            activation: Activation::Gelu,
            ..fire(1)
        }),
    ));
    v.push((
        "fire no threshold".into(),
        EncodingConfig::Fire(FireConfig {
            threshold: Threshold::Disabled,
            ..fire(1)
        }),
    ));
    v.push((
        "t5 small buckets".into(),
        EncodingConfig::T5 {
            num_buckets: 8,
            max_distance: 20,
        },
    ));
    v
}

fn tokens(b: usize, n: usize, seed: u64) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    let t: Vec<u32> = (0..b * n).map(|_| rng.below(256) as u32).collect();
    Tensor::from_vec(t, (b, n), &Device::Cpu).unwrap()
}

fn model(cfg: &ModelConfig, seed: u64) -> Model {
    let mut store = ParamStore::fresh(&Device::Cpu, seed);
    Model::new(cfg, &mut store).unwrap()
}

/// The backend evaluation chooses for sequences up to `n` tokens under `path`.
fn backend(m: &Model, path: AttentionPath, n: usize) -> Backend {
    let purpose = Purpose::Infer {
        capacity: n,
        chunk: n,
    };
    m.backend(path, purpose).unwrap()
}

/// The candle backend, whole sequences in one call (chunks of `usize::MAX`).
const CANDLE: Backend = Backend::Candle { chunk: usize::MAX };

#[test]
fn fused_logits_and_log_likelihood_equal_the_candle_path_for_every_additive_encoding() {
    let (b, n) = (2, 70); // more than one 64-wide tile, and past every threshold
    for (seed, (name, enc)) in additive().into_iter().enumerate() {
        let m = model(&small(enc), 100 + seed as u64);
        let x = tokens(b, n, seed as u64);
        let fused = backend(&m, AttentionPath::Fused, n);
        assert!(
            matches!(fused, Backend::FusedEval(_)),
            "{name}: no fused form"
        );
        let a = m.forward(&x, &fused, None).unwrap();
        let slow = m.forward(&x, &CANDLE, None).unwrap();
        let diff = (&a - &slow)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(diff < 2e-4, "{name}: logits differ by {diff}");
        let y = tokens(1, b * n, 1000 + seed as u64).flatten_all().unwrap();
        let la = nll_sum(&a.reshape((b * n, ())).unwrap(), &y).unwrap();
        let lb = nll_sum(&slow.reshape((b * n, ())).unwrap(), &y).unwrap();
        assert!(
            (la - lb).abs() <= 1e-5 * lb.abs(),
            "{name}: log-likelihood {la} vs {lb}"
        );
    }
}

#[test]
fn fused_evaluation_equals_materialised_evaluation() {
    let split = Corpus::embedded().split(0.1).unwrap();
    for enc in ["fire", "fire-s", "alibi", "kerple-log"] {
        let m = model(&small(EncodingConfig::from_name(enc, 4.0).unwrap()), 7);
        let cfg = |attention| EvalConfig {
            lengths: vec![32, 96],
            max_windows: 2,
            chunk: 32,
            batch: 2,
            attention,
            split_at: None,
        };
        let f = eval::evaluate(&m, &split.eval, &cfg(AttentionPath::Fused)).unwrap();
        let s = eval::evaluate(&m, &split.eval, &cfg(AttentionPath::Materialised)).unwrap();
        assert_eq!(f.len(), 2);
        for (a, b) in f.iter().zip(&s) {
            assert_eq!((a.length, a.tokens), (b.length, b.tokens));
            assert!(
                (a.log_ppl - b.log_ppl).abs() < 1e-5,
                "{enc} at {}: {} vs {}",
                a.length,
                a.log_ppl,
                b.log_ppl
            );
        }
    }
}

#[test]
fn rotary_encodings_have_no_fused_form_and_paths_parse() {
    for enc in ["rope", "rope-pi"] {
        let m = model(&small(EncodingConfig::from_name(enc, 4.0).unwrap()), 3);
        assert!(
            matches!(
                backend(&m, AttentionPath::Fused, 64),
                Backend::Candle { chunk: 64 }
            ),
            "{enc}"
        );
    }
    assert_eq!(
        "fused".parse::<AttentionPath>().unwrap(),
        AttentionPath::Fused
    );
    assert_eq!(
        "materialised".parse::<AttentionPath>().unwrap(),
        AttentionPath::Materialised
    );
    assert!("flash".parse::<AttentionPath>().is_err());
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn fused_kv_cache_decoding_equals_the_candle_cache_path() {
    // Prompt 20 tokens (past FIRE's threshold 9), then 6 single-token decoding steps: each
    // step's logits match the candle path's (each query normalised at its own position).
    let encs = [
        EncodingConfig::Fire(fire(2)),
        EncodingConfig::FireS(fire(1)),
        EncodingConfig::from_name("kerple-log", 4.0).unwrap(),
        EncodingConfig::from_name("t5", 4.0).unwrap(),
    ];
    for (seed, enc) in encs.into_iter().enumerate() {
        let m = model(&small(enc), 50 + seed as u64);
        let fused = backend(&m, AttentionPath::Fused, 26);
        assert!(matches!(fused, Backend::FusedEval(_)));
        let prompt = tokens(1, 20, seed as u64);
        let mut a = m.new_cache();
        let mut b = m.new_cache();
        let la = m.forward(&prompt, &fused, Some(&mut a)).unwrap();
        let lb = m
            .forward(&prompt, &Backend::Candle { chunk: 7 }, Some(&mut b))
            .unwrap();
        assert!(max_diff(&la, &lb) < 2e-4, "prompt logits, seed {seed}");
        let next = tokens(1, 6, 99 + seed as u64);
        for s in 0..6 {
            let x = next.narrow(1, s, 1).unwrap();
            let la = m.forward(&x, &fused, Some(&mut a)).unwrap();
            let lb = m
                .forward(&x, &Backend::Candle { chunk: 1 }, Some(&mut b))
                .unwrap();
            let d = max_diff(&la, &lb);
            assert!(d < 2e-4, "decoding step {s}, seed {seed}: {d}");
        }
        assert_eq!(a.len(), 26);
        // The whole sequence in one fused call equals the cached steps' last logits.
        let all = Tensor::cat(&[&prompt, &next], 1).unwrap();
        let full = m.forward(&all, &fused, None).unwrap();
        let last = full.narrow(1, 25, 1).unwrap();
        let mut c = m.new_cache();
        let stepped = m
            .forward(&all.narrow(1, 0, 25).unwrap(), &fused, Some(&mut c))
            .unwrap();
        assert_eq!(stepped.dims()[1], 25);
        let one = m
            .forward(&all.narrow(1, 25, 1).unwrap(), &fused, Some(&mut c))
            .unwrap();
        assert!(max_diff(&last, &one) < 2e-4);
    }
    // Greedy generation picks the same tokens on both paths.
    let m = model(&small(EncodingConfig::Fire(fire(1))), 5);
    let cfg = SampleConfig {
        max_new: 12,
        temperature: 0.0,
        top_k: 0,
        seed: 1,
        chunk: 8,
    };
    let prompt: Vec<u32> = (0..10).map(|i| 40 + i).collect();
    let slow = generate(&m, &prompt, &cfg).unwrap();
    let fast = generate_with(&m, &prompt, &cfg, AttentionPath::Fused).unwrap();
    assert_eq!(slow.len(), 12);
    assert_eq!(slow, fast);
}
