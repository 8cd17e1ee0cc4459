//! The model: gradients reach every parameter, cached and chunked evaluation equal the plain
//! forward pass, configs round-trip.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use candle_core::{Device, Tensor};
use fire_accelerated::attention::Backend;
use fire_accelerated::config::{Encoding, EncodingConfig, FireConfig, ModelConfig, Threshold};
use fire_accelerated::nn::cross_entropy;
use fire_accelerated::params::ParamStore;
use fire_accelerated::Model;
use fire_vocabulary::SplitMix64;

/// The candle backend in query chunks of `chunk` tokens (`usize::MAX`: one call).
fn candle(chunk: usize) -> Backend {
    Backend::Candle { chunk }
}

fn small(encoding: EncodingConfig) -> ModelConfig {
    ModelConfig {
        d_model: 16,
        n_layers: 2,
        n_heads: 2,
        d_ff: 32,
        ..ModelConfig::tiny(encoding)
    }
}

fn fire(depth: usize) -> FireConfig {
    // A small threshold so that some queries sit below it and some above: both branches of
    // max(i, L) carry gradient.
    FireConfig {
        depth,
        l_init: 4.0,
        ..FireConfig::default()
    }
}

fn all_encodings() -> Vec<EncodingConfig> {
    let mut v: Vec<EncodingConfig> = <Encoding as clap::ValueEnum>::value_variants()
        .iter()
        .map(|e| e.config(4.0))
        .collect();
    v.push(EncodingConfig::Fire(fire(2)));
    v.push(EncodingConfig::FireS(fire(1)));
    v
}

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.below(256) as u32).collect()
}

#[test]
fn gradients_reach_every_trainable_parameter_and_not_init_l() {
    let dev = Device::Cpu;
    for enc in [
        EncodingConfig::Fire(fire(1)),
        EncodingConfig::Fire(fire(2)),
        EncodingConfig::FireS(fire(1)),
        EncodingConfig::KerpleLog,
        EncodingConfig::KerplePower,
        EncodingConfig::T5 {
            num_buckets: 8,
            max_distance: 16,
        },
        EncodingConfig::Rope { theta: 10_000.0 },
    ] {
        let cfg = small(enc.clone());
        let mut store = ParamStore::fresh(&dev, 3);
        let model = Model::new(&cfg, &mut store).unwrap();
        let x = Tensor::from_vec(tokens(2 * 12, 1), (2, 12), &dev).unwrap();
        let y = Tensor::from_vec(tokens(2 * 12, 2), 24, &dev).unwrap();
        let logits = model.forward(&x, &candle(usize::MAX), None).unwrap();
        let loss = cross_entropy(&logits.reshape((24, 256)).unwrap(), &y).unwrap();
        let grads = loss.backward().unwrap();
        for (name, var) in store.trainable() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{}: no gradient for {name}", enc.name()));
            let norm: f32 = g.sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert!(
                norm.is_finite() && norm > 0.0,
                "{}: zero gradient for {name}",
                enc.name()
            );
        }
        let names: Vec<&String> = store.trainable().keys().collect();
        if matches!(enc, EncodingConfig::Fire(_) | EncodingConfig::FireS(_)) {
            assert!(names.iter().any(|n| n.ends_with(".c")), "c is trained");
            assert!(
                names.iter().any(|n| n.ends_with("L_multiplier")),
                "L_multiplier is trained"
            );
            assert!(
                !names.iter().any(|n| n.ends_with("init_L")),
                "init_L is frozen"
            );
            assert!(
                store.state_dict().keys().any(|n| n.ends_with("init_L")),
                "init_L is saved"
            );
        }
    }
}

#[test]
fn fixed_threshold_freezes_l_multiplier() {
    let cfg = small(EncodingConfig::Fire(FireConfig {
        threshold: Threshold::Fixed,
        ..fire(1)
    }));
    let mut store = ParamStore::fresh(&Device::Cpu, 0);
    Model::new(&cfg, &mut store).unwrap();
    assert!(!store.trainable().keys().any(|n| n.contains("L_multiplier")));
    assert!(store
        .state_dict()
        .keys()
        .any(|n| n.contains("L_multiplier")));
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap()
}

#[test]
fn cached_decoding_and_chunked_evaluation_equal_the_full_forward_pass() {
    let dev = Device::Cpu;
    for enc in all_encodings() {
        let cfg = small(enc.clone());
        let mut store = ParamStore::fresh(&dev, 11);
        let model = Model::new(&cfg, &mut store).unwrap();
        let n = 19;
        let toks = tokens(n, 5);
        let x = Tensor::from_vec(toks.clone(), (1, n), &dev).unwrap();
        let full = model.forward(&x, &candle(usize::MAX), None).unwrap();
        // Chunked with a cache, chunks of 4.
        let mut cache = model.new_cache();
        let chunked = model.forward(&x, &candle(4), Some(&mut cache)).unwrap();
        assert!(max_diff(&full, &chunked) < 1e-4, "{}: chunked", enc.name());
        // Without a cache, the candle backend chunks through a fresh one.
        let uncached = model.forward(&x, &candle(4), None).unwrap();
        assert!(
            max_diff(&chunked, &uncached) == 0.0,
            "{}: uncached chunks",
            enc.name()
        );
        // A prompt of 5, then one token at a time: each new query at its own position.
        let mut cache = model.new_cache();
        let mut rows = vec![model
            .forward(&x.narrow(1, 0, 5).unwrap(), &candle(64), Some(&mut cache))
            .unwrap()];
        for t in 5..n {
            rows.push(
                model
                    .forward(&x.narrow(1, t, 1).unwrap(), &candle(1), Some(&mut cache))
                    .unwrap(),
            );
        }
        let decoded = Tensor::cat(&rows, 1).unwrap();
        let d = max_diff(&full, &decoded);
        assert!(d < 1e-4, "{}: cached decoding differs by {d}", enc.name());
        assert_eq!(cache.len(), n);
    }
}

#[test]
fn configs_round_trip_through_yaml_and_json_and_bad_ones_are_rejected() {
    for enc in all_encodings() {
        let cfg = small(enc);
        let yaml = serde_saphyr::to_string(&cfg).unwrap();
        let back: ModelConfig = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, cfg, "{yaml}");
        let json = serde_json::to_string(&cfg).unwrap();
        assert_eq!(serde_json::from_str::<ModelConfig>(&json).unwrap(), cfg);
    }
    let yaml = "vocab_size: 256\nd_model: 64\nn_layers: 2\nn_heads: 4\nd_ff: 128\nencoding:\n  kind: fire\n  depth: 2\n  l_init: 32\n";
    let cfg: ModelConfig = serde_saphyr::from_str(yaml).unwrap();
    match &cfg.encoding {
        EncodingConfig::Fire(f) => {
            assert_eq!((f.depth, f.l_init, f.width, f.c), (2, 32.0, 32, 0.1));
        }
        other => panic!("parsed {other:?}"),
    }
    let bad = ModelConfig {
        n_heads: 3,
        ..cfg.clone()
    };
    assert!(bad.validate().is_err());
    assert!(EncodingConfig::from_name("learned", 1.0).is_err());
    assert!(serde_saphyr::from_str::<ModelConfig>("vocab_size: 256\nd_model: 64\nn_layers: 2\nn_heads: 4\nd_ff: 128\nencoding:\n  kind: fire\n  widht: 3\n").is_err());
}
