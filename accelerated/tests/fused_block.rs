//! The Transformer block as one fused op ([`fire_accelerated::ops::block`]) against its slow
//! twin, the same block built from candle ops, both through the fused training attention: the
//! same logits and the same gradient for every trainable parameter (LayerNorms, projections,
//! MLP, the encoding's own parameters), for every additive encoding, with and without a
//! position offset, at a length that crosses the attention's 64-wide tiles and a batch of 3.
//! (`tests/fused_train.rs` compares the fused block with the materialised candle path too.)

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use candle_core::{Device, Tensor};
use fire_accelerated::attention::{AttentionPath, Backend, Purpose};
use fire_accelerated::config::{EncodingConfig, FireConfig, InitScheme, ModelConfig};
use fire_accelerated::nn::cross_entropy;
use fire_accelerated::params::ParamStore;
use fire_accelerated::Model;
use fire_vocabulary::SplitMix64;

const B: usize = 3;
const N: usize = 80;

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.below(256) as u32).collect()
}

/// `(logits, loss, name → gradient)` of one pass.
type Outcome = (Vec<f32>, f32, Vec<(String, Vec<f32>)>);

/// One pass with the blocks fused or not.
fn run(model: &mut Model, store: &ParamStore, fused_blocks: bool, start: u64) -> Outcome {
    let dev = Device::Cpu;
    model.set_fused_blocks(fused_blocks);
    let x = Tensor::from_vec(tokens(B * N, 11), (B, N), &dev).unwrap();
    let y = Tensor::from_vec(tokens(B * N, 12), B * N, &dev).unwrap();
    let backend = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
    assert!(matches!(backend, Backend::FusedTrain));
    let logits = model.forward_at(&x, &backend, start).unwrap();
    let loss = cross_entropy(&logits.reshape((B * N, 256)).unwrap(), &y).unwrap();
    let grads = loss.backward().unwrap();
    let named = store
        .trainable()
        .iter()
        .map(|(name, var)| {
            let g = grads.get(var.as_tensor()).map_or_else(
                || vec![0.0; var.as_tensor().elem_count()],
                |g| g.flatten_all().unwrap().to_vec1().unwrap(),
            );
            (name.clone(), g)
        })
        .collect();
    let flat = logits.flatten_all().unwrap().to_vec1().unwrap();
    (flat, loss.to_scalar().unwrap(), named)
}

fn largest(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |a, v| a.max(v.abs()))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// Logits within 1e-5 of their largest, the loss within 1e-6 relative, every gradient within
/// 1e-4 of its largest entry (the two sum in different orders; measured ~1e-6), and every
/// block parameter's gradient of real size (so a gradient the op forgot would show).
fn check(label: &str, encoding: EncodingConfig, init: InitScheme, start: u64) {
    let cfg = ModelConfig {
        init,
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        d_ff: 64,
        ..ModelConfig::tiny(encoding)
    };
    let mut store = ParamStore::fresh(&Device::Cpu, 5);
    let mut model = Model::new(&cfg, &mut store).unwrap();
    let (lt, st, gt) = run(&mut model, &store, false, start);
    let (lf, sf, gf) = run(&mut model, &store, true, start);
    let d = max_diff(&lt, &lf);
    assert!(d <= 1e-5 * largest(&lt), "{label}: logits differ by {d:e}");
    assert!(
        (st - sf).abs() <= 1e-6 * st.abs(),
        "{label}: loss {sf} vs {st}"
    );
    for ((name, a), (_, b)) in gt.iter().zip(&gf) {
        let scale = largest(a);
        let diff = max_diff(a, b);
        assert!(
            diff <= 1e-4 * scale + 1e-9,
            "{label}: {name}: max |Δ| = {diff:e} against max |g| = {scale:e}"
        );
        let block_param = ["ln1.", "ln2.", "_proj.", "mlp.fc"]
            .iter()
            .any(|p| name.contains(p));
        if block_param {
            assert!(
                scale > 1e-6,
                "{label}: {name}: gradient {scale:e} is missing"
            );
        }
    }
}

fn fire() -> FireConfig {
    FireConfig {
        l_init: 24.0,
        ..FireConfig::default()
    }
}

#[test]
fn fused_blocks_match_candle_blocks_for_every_additive_encoding() {
    for (label, enc) in [
        ("nope", EncodingConfig::Nope),
        ("fire", EncodingConfig::Fire(fire())),
        ("fire-s", EncodingConfig::FireS(fire())),
        ("kerple-log", EncodingConfig::KerpleLog),
        ("alibi", EncodingConfig::Alibi),
        (
            "t5",
            EncodingConfig::T5 {
                num_buckets: 8,
                max_distance: 32,
            },
        ),
    ] {
        check(label, enc, InitScheme::FanIn, 0);
    }
}

#[test]
fn fused_blocks_match_with_position_offsets_and_gpt2_init() {
    check(
        "fire +300",
        EncodingConfig::Fire(fire()),
        InitScheme::Gpt2,
        300,
    );
    check(
        "kerple-log +300",
        EncodingConfig::KerpleLog,
        InitScheme::Gpt2,
        300,
    );
}
