//! What the Figure 1 experiment adds to training and evaluation: the replay record
//! (`--record`), randomised position offsets, FIRE started as a Kerple-log through Theorem 3.1's
//! construction, and the same-text split of the evaluation.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

mod common;
use common::{largest, max_abs_diff};

use candle_core::{Device, Tensor};
use fire_accelerated::attention::{AttentionPath, Backend, Purpose};
use fire_accelerated::config::{
    Activation, EncodingConfig, FireConfig, FireInit, InitScheme, ModelConfig, Transform,
};
use fire_accelerated::data::Corpus;
use fire_accelerated::encodings::{kerple, AdditiveModule};
use fire_accelerated::eval::{self, EvalConfig};
use fire_accelerated::nn::cross_entropy;
use fire_accelerated::params::ParamStore;
use fire_accelerated::train::{self, Options, TrainConfig};
use fire_accelerated::Model;
use fire_reference::baselines::KerpleLog;
use fire_vocabulary::SplitMix64;

/// The candle backend, whole sequences in one call.
const CANDLE: Backend = Backend::Candle { chunk: usize::MAX };

fn small(encoding: EncodingConfig) -> ModelConfig {
    ModelConfig {
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        d_ff: 64,
        ..ModelConfig::tiny(encoding)
    }
}

fn kerple_fire(l_init: f64) -> FireConfig {
    FireConfig {
        width: 8,
        l_init,
        transform: Transform::Identity,
        activation: Activation::Symlog,
        init: FireInit::KerpleLog,
        ..FireConfig::default()
    }
}

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.below(256) as u32).collect()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn record_holds_the_initial_weights_and_every_batch_and_survives_resume() {
    let dir = tempfile::tempdir().unwrap();
    let m = small(EncodingConfig::Nope);
    let t = TrainConfig {
        seq_len: 16,
        batch: 2,
        steps: 6,
        warmup: 2,
        checkpoint_every: 3,
        ..TrainConfig::default()
    };
    let per_step = 2 * 2 * 16 * 4;
    // Straight through.
    let (a, rec_a) = (dir.path().join("a"), dir.path().join("a.rec"));
    let opts = Options {
        run: a.clone(),
        record: Some(rec_a.clone()),
        ..Options::default()
    };
    train::train(&m, &t, &opts, &Device::Cpu).unwrap();
    let batches = std::fs::read(rec_a.join("batches.u32")).unwrap();
    assert_eq!(batches.len(), 6 * per_step);
    let init =
        candle_core::safetensors::load(rec_a.join("init.safetensors"), &Device::Cpu).unwrap();
    let mut fresh = ParamStore::fresh(&Device::Cpu, t.seed);
    Model::new(&m, &mut fresh).unwrap();
    for (name, want) in fresh.state_dict() {
        assert_eq!(flat(&init[&name]), flat(&want), "{name}");
    }
    // Stopped after 4 steps (checkpoint at 3), resumed: the record is cut back to 3 steps and
    // continues, byte for byte the same.
    let (b, rec_b) = (dir.path().join("b"), dir.path().join("b.rec"));
    let stop = Options {
        run: b.clone(),
        record: Some(rec_b.clone()),
        stop_after: Some(4),
        ..Options::default()
    };
    train::train(&m, &t, &stop, &Device::Cpu).unwrap();
    assert_eq!(
        std::fs::metadata(rec_b.join("batches.u32")).unwrap().len(),
        4 * per_step as u64
    );
    let resume = Options {
        run: b,
        record: Some(rec_b.clone()),
        resume: true,
        ..Options::default()
    };
    train::train(&m, &t, &resume, &Device::Cpu).unwrap();
    assert_eq!(std::fs::read(rec_b.join("batches.u32")).unwrap(), batches);
    // Targets are the inputs shifted by one (the windows are contiguous).
    let words: Vec<u32> = batches
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let (x, y) = (&words[..32], &words[32..64]);
    assert_eq!(&x[1..16], &y[..15]);
}

#[test]
fn position_offsets_fused_equals_materialised_and_distance_encodings_ignore_them() {
    let dev = Device::Cpu;
    let (b, n, start) = (2, 40, 300);
    let x = Tensor::from_vec(tokens(b * n, 1), (b, n), &dev).unwrap();
    let y = Tensor::from_vec(tokens(b * n, 2), b * n, &dev).unwrap();
    let fire = FireConfig {
        l_init: 24.0,
        ..FireConfig::default()
    };
    for enc in [EncodingConfig::Fire(fire), EncodingConfig::KerpleLog] {
        let cfg = small(enc.clone());
        let mut store = ParamStore::fresh(&dev, 3);
        let model = Model::new(&cfg, &mut store).unwrap();
        let loss = |logits: Tensor| {
            let l = cross_entropy(&logits.reshape((b * n, 256)).unwrap(), &y).unwrap();
            let g = l.backward().unwrap();
            let grads: Vec<(String, Vec<f32>)> = store
                .trainable()
                .iter()
                .map(|(k, v)| (k.clone(), g.get(v.as_tensor()).map_or_else(Vec::new, flat)))
                .collect();
            (l.to_scalar::<f32>().unwrap(), grads)
        };
        let fused = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
        assert!(matches!(fused, Backend::FusedTrain));
        let (lm, gm) = loss(model.forward_at(&x, &CANDLE, start).unwrap());
        let (lf, gf) = loss(model.forward_at(&x, &fused, start).unwrap());
        let (l0, _) = loss(model.forward(&x, &CANDLE, None).unwrap());
        assert!((lm - lf).abs() < 1e-5, "{}: {lm} vs {lf}", enc.name());
        for ((name, a), (_, c)) in gm.iter().zip(&gf) {
            let scale = largest(a);
            let diff = max_abs_diff(a, c);
            // f_θ's output bias has a vanishing gradient (softmax ignores a constant row shift):
            // rounding noise on both paths, hence the absolute floor.
            assert!(diff <= 1e-4 * scale + 1e-7, "{name}: {diff:e} vs {scale:e}");
        }
        if matches!(enc, EncodingConfig::KerpleLog) {
            assert!((lm - l0).abs() < 1e-5, "Kerple moved with the offset");
        } else {
            assert!((lm - l0).abs() > 1e-4, "FIRE ignored the offset");
        }
    }
    // Offsets: reproducible, within range, off when zero.
    let t = TrainConfig {
        position_offset: 1920,
        ..TrainConfig::default()
    };
    let ks: Vec<u64> = (0..200).map(|s| t.position_offset_at(s)).collect();
    assert!(ks.iter().all(|&k| k <= 1920));
    assert!(ks.iter().any(|&k| k > 1500) && ks.iter().any(|&k| k < 400));
    assert_eq!(
        ks,
        (0..200)
            .map(|s| t.position_offset_at(s))
            .collect::<Vec<_>>()
    );
    assert_eq!(TrainConfig::default().position_offset_at(5), 0);
    // The inference kernels take no offset.
    let fused = model_of(EncodingConfig::Alibi)
        .backend(
            AttentionPath::Fused,
            Purpose::Infer {
                capacity: n,
                chunk: n,
            },
        )
        .unwrap();
    let m = model_of(EncodingConfig::Alibi);
    assert!(m.forward_at(&x, &fused, 5).is_err());
}

fn model_of(encoding: EncodingConfig) -> Model {
    Model::new(&small(encoding), &mut ParamStore::fresh(&Device::Cpu, 3)).unwrap()
}

/// Reads the Kerple-log parameters back out of a constructed FIRE's first two layers.
fn kerple_of(model: &Model, p: f64, heads: usize) -> (Vec<f64>, Vec<f64>) {
    let dict: std::collections::HashMap<String, Tensor> = model.encoding.modules()[0]
        .state_dict()
        .into_iter()
        .collect();
    let w1 = flat(&dict["mlp.0.weight"]);
    let w2 = flat(&dict["mlp.2.weight"]);
    let width = w1.len();
    let r2 = (0..heads).map(|h| f64::from(w1[h]) / p).collect();
    let r1 = (0..heads).map(|h| -f64::from(w2[h * width + h])).collect();
    (r1, r2)
}

#[test]
fn fire_started_as_kerple_log_is_that_kerple_log_up_to_the_threshold() {
    let dev = Device::Cpu;
    let p = 64.0;
    let cfg = small(EncodingConfig::Fire(kerple_fire(p)));
    let mut store = ParamStore::fresh(&dev, 11);
    let model = Model::new(&cfg, &mut store).unwrap();
    let (r1, r2) = kerple_of(&model, p, 4);
    assert!(
        r1.iter().all(|&r| (0.0..2.0).contains(&r)) && r2.iter().all(|&r| (0.0..1.0).contains(&r))
    );
    let queries: Vec<u64> = (0..=64).collect();
    let fire = model.encoding.modules()[0];
    let got = fire.bias(&queries, &queries).unwrap();
    // Against our Kerple-log layer with those parameters and against the reference's
    // construction, on the causal triangle up to P.
    let ours = kerple::Kerple::from_params(kerple::Form::Log, &r1, &r2, &dev).unwrap();
    let want = ours.bias(&queries, &queries).unwrap();
    let target = KerpleLog {
        r1: r1.clone(),
        r2: r2.clone(),
    };
    let reference = fire_reference::theorem_3_1::kerple_log(&target, 64).unwrap();
    let refb = fire_reference::evaluate(&reference, &queries, &queries)
        .unwrap()
        .to_row_major();
    let n = queries.len();
    for h in 0..4 {
        for i in 0..n {
            for j in 0..=i {
                let at = (h * n + i) * n + j;
                let scale = refb[at].abs().max(1.0);
                let (g, w) = (f64::from(got[at]), f64::from(want[at]));
                assert!((g - w).abs() <= 2e-6 * scale, "h{h} ({i},{j}): {g} vs {w}");
                assert!(
                    (g - refb[at]).abs() <= 2e-6 * scale,
                    "h{h} ({i},{j}): {g} vs reference"
                );
            }
        }
    }
    // Beyond P the normaliser grows with i ([thm31.beyond]): no longer Kerple.
    let far = fire.bias(&[256], &[0]).unwrap();
    let kfar = ours.bias(&[256], &[0]).unwrap();
    assert!((far[0] - kfar[0]).abs() > 1e-3);
    // The fused kernels run the symlog MLP: eval and training equal the candle path.
    let x = Tensor::from_vec(tokens(2 * 80, 5), (2, 80), &dev).unwrap();
    let slow = flat(&model.forward(&x, &CANDLE, None).unwrap());
    let infer = Purpose::Infer {
        capacity: 80,
        chunk: 80,
    };
    let fused = model.backend(AttentionPath::Fused, infer).unwrap();
    assert!(matches!(fused, Backend::FusedEval(_)));
    let fast = flat(&model.forward(&x, &fused, None).unwrap());
    assert!(max_abs_diff(&slow, &fast) < 1e-4);
    let fused = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
    let train = flat(&model.forward(&x, &fused, None).unwrap());
    assert!(max_abs_diff(&slow, &train) < 1e-4);
    // A configuration that is not the construction is refused with the reason.
    let bad = small(EncodingConfig::Fire(FireConfig {
        transform: Transform::Log,
        ..kerple_fire(p)
    }));
    let err = bad.validate().unwrap_err().to_string();
    assert!(err.contains("transform identity"), "{err}");
    let bad = small(EncodingConfig::Fire(kerple_fire(48.0)));
    assert!(bad.validate().is_err());
}

#[test]
fn the_same_text_split_averages_to_the_whole() {
    let dev = Device::Cpu;
    let cfg = small(EncodingConfig::Alibi);
    let mut store = ParamStore::fresh(&dev, 1);
    let model = Model::new(&cfg, &mut store).unwrap();
    let split = Corpus::embedded().split(0.15).unwrap();
    let ecfg = EvalConfig {
        lengths: vec![32, 128],
        max_windows: 2,
        chunk: 32,
        batch: 2,
        attention: Default::default(),
        split_at: Some(32),
    };
    let res = eval::evaluate(&model, &split.eval, &ecfg).unwrap();
    assert!(
        res[0].log_ppl_before.is_none(),
        "no split at the split length"
    );
    let r = res[1];
    let (before, after) = (r.log_ppl_before.unwrap(), r.log_ppl_after.unwrap());
    let whole = (before * 32.0 + after * 96.0) / 128.0;
    assert!((whole - r.log_ppl).abs() < 1e-9, "{whole} vs {}", r.log_ppl);
    assert!(before.is_finite() && after.is_finite() && (before - after).abs() > 1e-6);
}

#[test]
fn a_model_config_without_init_keeps_the_scheme_it_was_written_for() {
    // Written before `init` existed: GPT-2's scheme, the only one there was, so its seed still
    // gives the same weights.
    let old = r#"{"vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64,
                  "encoding": {"kind": "alibi"}}"#;
    let cfg: ModelConfig = serde_json::from_str(old).unwrap();
    assert_eq!(cfg.init, InitScheme::Gpt2);
    // New configs start fan-in and say so when written.
    let new = small(EncodingConfig::Alibi);
    assert_eq!(new.init, InitScheme::FanIn);
    let text = serde_json::to_string(&new).unwrap();
    assert!(text.contains(r#""init":"fan-in""#), "{text}");
    assert_eq!(serde_json::from_str::<ModelConfig>(&text).unwrap(), new);
    // The schemes differ where they should: GPT-2 scales the residual outputs down.
    let weight = |init: InitScheme, name: &str| {
        let cfg = ModelConfig {
            init,
            ..new.clone()
        };
        let mut store = ParamStore::fresh(&Device::Cpu, 1);
        Model::new(&cfg, &mut store).unwrap();
        let w = flat(&store.state_dict()[name]);
        (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt()
    };
    let name = "layers.0.mlp.fc2.weight";
    let (fan_in, gpt2) = (
        weight(InitScheme::FanIn, name),
        weight(InitScheme::Gpt2, name),
    );
    // U(±1/√64) has std 1/√(3·64) ≈ 0.072; GPT-2's is 0.02/√4 = 0.01.
    assert!(
        (fan_in - 0.072).abs() < 0.01 && (gpt2 - 0.01).abs() < 0.002,
        "{fan_in} {gpt2}"
    );
}
