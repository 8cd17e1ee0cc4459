//! The fused evaluation path equals the materialised candle path: logits and the evaluation
//! log-likelihood agree within f32 tolerance for every additive encoding on tiny random models
//! (FIRE depth 1 and 2, a GeLU f_θ on the direct-evaluation fallback, FIRE-S sharing one plan,
//! FIRE without threshold); rotary encodings have no fused form and keep the candle path.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use candle_core::{Device, Tensor};
use fire_accelerated::config::{Activation, EncodingConfig, FireConfig, ModelConfig, Threshold};
use fire_accelerated::data::Corpus;
use fire_accelerated::eval::{self, EvalConfig};
use fire_accelerated::fused::AttentionPath;
use fire_accelerated::nn::nll_sum;
use fire_accelerated::params::ParamStore;
use fire_accelerated::rng::SplitMix64;
use fire_accelerated::Model;

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

#[test]
fn fused_logits_and_log_likelihood_equal_the_candle_path_for_every_additive_encoding() {
    let (b, n) = (2, 70); // more than one 64-wide tile, and past every threshold
    for (seed, (name, enc)) in additive().into_iter().enumerate() {
        let m = model(&small(enc), 100 + seed as u64);
        let x = tokens(b, n, seed as u64);
        let fused = m
            .fused_encoding(n)
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: no fused form"));
        let a = m.forward_fused(&x, &fused).unwrap();
        let slow = m.forward(&x, None, n).unwrap();
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
        assert!(m.fused_encoding(64).unwrap().is_none(), "{enc}");
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
