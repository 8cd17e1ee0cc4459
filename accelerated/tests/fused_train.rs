//! Training through the fused attention op ([`fire_accelerated::attention::fused_train`])
//! against its slow, obvious twin, the materialised candle path with autograd: the same loss and the same
//! gradient for every trainable parameter (q/k/v/o projections, FIRE's θ, `c` and
//! `L_multiplier`, Kerple's and T5's parameters), within f32 tolerance, for every additive
//! encoding and FIRE's variants. Sequences of 80 tokens cross the kernel's 64-wide tiles, and
//! `L_init = 24` puts queries below, on (i = 24: the ½ tie of [grad.m]) and above the threshold.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

mod common;
use common::{largest, max_abs_diff};

use candle_core::{Device, Tensor};
use fire_accelerated::attention::{AttentionPath, Backend, Purpose};
use fire_accelerated::config::{
    Activation, EncodingConfig, FireConfig, InitScheme, ModelConfig, Threshold, Transform,
};
use fire_accelerated::nn::cross_entropy;
use fire_accelerated::params::ParamStore;
use fire_accelerated::Model;
use fire_vocabulary::SplitMix64;

const N: usize = 80;
const B: usize = 2;

/// A small model. GPT-2's initialisation: under it every checked gradient is well clear of
/// rounding noise (with fan-in projections a final-ReLU FIRE's output bias gradient falls to
/// ~1e-9 at this seed, where both paths are noise and nothing can be compared).
fn small(encoding: EncodingConfig) -> ModelConfig {
    ModelConfig {
        init: InitScheme::Gpt2,
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        d_ff: 64,
        ..ModelConfig::tiny(encoding)
    }
}

fn fire(f: impl FnOnce(&mut FireConfig)) -> FireConfig {
    let mut c = FireConfig {
        l_init: 24.0,
        ..FireConfig::default()
    };
    f(&mut c);
    c
}

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.below(256) as u32).collect()
}

/// `(loss, name → gradient)` through one path; a parameter the loss does not reach (`c`
/// without the log transform) has an all-zero gradient.
fn loss_and_grads(
    model: &Model,
    store: &ParamStore,
    fused: bool,
) -> (f32, Vec<(String, Vec<f32>)>) {
    let dev = Device::Cpu;
    let x = Tensor::from_vec(tokens(B * N, 1), (B, N), &dev).unwrap();
    let y = Tensor::from_vec(tokens(B * N, 2), B * N, &dev).unwrap();
    let backend = if fused {
        // What training chooses for an additive encoding on the CPU.
        let b = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
        assert!(matches!(b, Backend::FusedTrain));
        b
    } else {
        Backend::Candle { chunk: usize::MAX }
    };
    let logits = model.forward(&x, &backend, None).unwrap();
    let loss = cross_entropy(&logits.reshape((B * N, 256)).unwrap(), &y).unwrap();
    let grads = loss.backward().unwrap();
    let mut out = Vec::new();
    for (name, var) in store.trainable() {
        let g = match grads.get(var.as_tensor()) {
            Some(g) => g.flatten_all().unwrap().to_vec1().unwrap(),
            None => vec![0.0; var.as_tensor().elem_count()],
        };
        out.push((name.clone(), g));
    }
    (loss.to_scalar().unwrap(), out)
}

/// Compares the two paths: losses within 1e-5 (relative), every gradient within 1e-4 of its
/// largest entry (the two sum in different orders; measured agreement is ~1e-5). Every
/// parameter must have a gradient of real size, except those named in `zero`, whose
/// gradient vanishes in exact arithmetic and must be rounding noise on both paths: `c` without
/// the log transform, and the output-layer bias of f_θ without a final activation (it adds the
/// same constant to a whole row of logits, which softmax ignores).
fn check(label: &str, enc: EncodingConfig, zero: &[&str]) {
    let cfg = small(enc);
    let mut store = ParamStore::fresh(&Device::Cpu, 7);
    let model = Model::new(&cfg, &mut store).unwrap();
    let (loss_m, grads_m) = loss_and_grads(&model, &store, false);
    let (loss_f, grads_f) = loss_and_grads(&model, &store, true);
    assert!(
        (loss_m - loss_f).abs() <= 1e-5 * loss_m.abs(),
        "{label}: loss {loss_f} fused vs {loss_m} materialised"
    );
    for ((name, gm), (_, gf)) in grads_m.iter().zip(&grads_f) {
        let scale = largest(gm);
        let diff = max_abs_diff(gm, gf);
        assert!(
            diff <= 1e-4 * scale + 1e-9,
            "{label}: {name}: max |Δ| = {diff:e} against max |g| = {scale:e}"
        );
        if zero.iter().any(|z| name.ends_with(z)) {
            assert!(scale < 1e-8, "{label}: {name} should vanish, is {scale:e}");
        } else {
            assert!(
                scale > 1e-8,
                "{label}: {name}: gradient {scale:e} is missing"
            );
        }
    }
}

/// f_θ's output bias for `depth` hidden layers.
const OUT_BIAS_1: &str = "fire.mlp.2.bias";
const OUT_BIAS_2: &str = "fire.mlp.4.bias";

#[test]
fn fire_relu_depth_1_matches_the_materialised_path() {
    check("fire", EncodingConfig::Fire(fire(|_| {})), &[OUT_BIAS_1]);
}

#[test]
fn fire_relu_depth_2_matches_the_materialised_path() {
    check(
        "fire depth 2",
        EncodingConfig::Fire(fire(|c| c.depth = 2)),
        &[OUT_BIAS_2],
    );
}

#[test]
fn fire_gelu_falls_back_to_per_pair_backpropagation_and_matches() {
    check(
        "fire gelu",
        EncodingConfig::Fire(fire(|c| c.activation = Activation::Gelu)),
        &[OUT_BIAS_1],
    );
}

#[test]
fn fire_ablations_match_the_materialised_path() {
    check(
        "fire no-log",
        EncodingConfig::Fire(fire(|c| c.transform = Transform::Identity)),
        &[".c", OUT_BIAS_1],
    );
    check(
        "fire no-threshold",
        EncodingConfig::Fire(fire(|c| c.threshold = Threshold::Disabled)),
        &[OUT_BIAS_1],
    );
    check(
        "fire fixed threshold",
        EncodingConfig::Fire(fire(|c| c.threshold = Threshold::Fixed)),
        &[OUT_BIAS_1],
    );
    check(
        "fire final relu",
        EncodingConfig::Fire(fire(|c| c.final_activation = Some(Activation::Relu))),
        &[],
    );
}

#[test]
fn fire_s_shares_one_module_and_matches() {
    check("fire-s", EncodingConfig::FireS(fire(|_| {})), &[OUT_BIAS_1]);
}

#[test]
fn nope_and_the_distance_only_baselines_match() {
    check("nope", EncodingConfig::Nope, &[]);
    check("alibi", EncodingConfig::Alibi, &[]);
    check("kerple-log", EncodingConfig::KerpleLog, &[]);
    check("kerple-power", EncodingConfig::KerplePower, &[]);
    check(
        "t5",
        EncodingConfig::T5 {
            num_buckets: 8,
            max_distance: 32,
        },
        &[],
    );
    check("sandwich", EncodingConfig::Sandwich, &[]);
}

#[test]
fn rotary_encodings_are_refused_with_a_clear_error() {
    let cfg = small(EncodingConfig::Rope { theta: 10_000.0 });
    let mut store = ParamStore::fresh(&Device::Cpu, 7);
    let model = Model::new(&cfg, &mut store).unwrap();
    let x = Tensor::from_vec(tokens(8, 1), (1, 8), &Device::Cpu).unwrap();
    let err = model
        .forward(&x, &Backend::FusedTrain, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("additive"), "{err}");
    // Training chooses the candle backend for it.
    let chosen = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
    assert!(matches!(chosen, Backend::Candle { .. }));
}

// The Transformer block as one fused op (`fire_accelerated::ops::block`, what training through
// the fused attention runs) against its slow twin, the same block built from candle ops, both
// through the fused attention: the same logits and every gradient (LayerNorms, projections,
// MLP, the encoding's own parameters) for every additive encoding, with and without a position
// offset, both inits, at a batch of 3. (The tests above compare the fused block, which the
// fused backend now uses, with the materialised candle path.)

const B3: usize = 3;

/// `(logits, loss, name → gradient)` of one pass.
type Outcome = (Vec<f32>, f32, Vec<(String, Vec<f32>)>);

/// One pass with the blocks fused or not.
fn run_blocks(model: &mut Model, store: &ParamStore, fused_blocks: bool, start: u64) -> Outcome {
    let dev = Device::Cpu;
    model.set_fused_blocks(fused_blocks);
    let x = Tensor::from_vec(tokens(B3 * N, 11), (B3, N), &dev).unwrap();
    let y = Tensor::from_vec(tokens(B3 * N, 12), B3 * N, &dev).unwrap();
    let backend = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
    assert!(matches!(backend, Backend::FusedTrain));
    let logits = model.forward_at(&x, &backend, start).unwrap();
    let loss = cross_entropy(&logits.reshape((B3 * N, 256)).unwrap(), &y).unwrap();
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

/// Logits within 1e-5 of their largest, the loss within 1e-6 relative, every gradient within
/// 1e-4 of its largest entry (the two sum in different orders; measured ~1e-6) or, for a
/// gradient that is zero in exact arithmetic, 1e-7 of the largest of all, and every
/// block parameter's gradient of real size (so a gradient the op forgot would show).
fn check_blocks(label: &str, encoding: EncodingConfig, init: InitScheme, start: u64) {
    check_blocks_with_ff(label, encoding, init, start, 64);
}

/// [`check_blocks`] with an MLP width of `d_ff` (against `d_model` 32).
fn check_blocks_with_ff(
    label: &str,
    encoding: EncodingConfig,
    init: InitScheme,
    start: u64,
    d_ff: usize,
) {
    let cfg = ModelConfig {
        init,
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        d_ff,
        ..ModelConfig::tiny(encoding)
    };
    let mut store = ParamStore::fresh(&Device::Cpu, 5);
    let mut model = Model::new(&cfg, &mut store).unwrap();
    let (lt, st, gt) = run_blocks(&mut model, &store, false, start);
    let (lf, sf, gf) = run_blocks(&mut model, &store, true, start);
    let d = max_abs_diff(&lt, &lf);
    assert!(d <= 1e-5 * largest(&lt), "{label}: logits differ by {d:e}");
    assert!(
        (st - sf).abs() <= 1e-6 * st.abs(),
        "{label}: loss {sf} vs {st}"
    );
    // A gradient that is zero in exact arithmetic (FIRE's output bias: a constant added to a
    // whole row of logits leaves the softmax as it was) is rounding noise on both sides, of
    // the size of the other gradients' rounding: the floor is relative to the largest of all.
    let overall = gt.iter().map(|(_, g)| largest(g)).fold(0f32, f32::max);
    for ((name, a), (_, b)) in gt.iter().zip(&gf) {
        let scale = largest(a);
        let diff = max_abs_diff(a, b);
        assert!(
            diff <= 1e-4 * scale + 1e-7 * overall,
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

/// Every additive encoding, FIRE and FIRE-S at their defaults.
fn additive_encodings() -> [(&'static str, EncodingConfig); 6] {
    [
        ("nope", EncodingConfig::Nope),
        ("fire", EncodingConfig::Fire(fire(|_| {}))),
        ("fire-s", EncodingConfig::FireS(fire(|_| {}))),
        ("kerple-log", EncodingConfig::KerpleLog),
        ("alibi", EncodingConfig::Alibi),
        (
            "t5",
            EncodingConfig::T5 {
                num_buckets: 8,
                max_distance: 32,
            },
        ),
    ]
}

#[test]
fn fused_blocks_match_candle_blocks_for_every_additive_encoding() {
    for (label, enc) in additive_encodings() {
        check_blocks(label, enc, InitScheme::FanIn, 0);
    }
}

#[test]
fn fused_blocks_match_with_position_offsets_and_gpt2_init() {
    check_blocks(
        "fire +300",
        EncodingConfig::Fire(fire(|_| {})),
        InitScheme::Gpt2,
        300,
    );
    check_blocks(
        "kerple-log +300",
        EncodingConfig::KerpleLog,
        InitScheme::Gpt2,
        300,
    );
}

/// The model hands the block its parameters as rows of `D` where every part divides into them
/// (`d_ff` 64 above) and flattened otherwise: the second way, with `d_ff` 48, against the
/// candle block.
#[test]
fn fused_blocks_match_when_the_mlp_width_is_no_multiple_of_d_model() {
    check_blocks_with_ff(
        "fire, d_ff 48",
        EncodingConfig::Fire(fire(|_| {})),
        InitScheme::FanIn,
        0,
        48,
    );
}

// The training step with its backward pass written out (`Model::fused_step`, what `fire-lm
// train` runs through the fused ops) against candle's autograd over the same fused blocks.

/// `(loss, name → gradient)` of `Model::fused_step` on [`run_blocks`]'s batch.
fn run_step(model: &Model, store: &ParamStore, start: u64) -> (f32, Vec<(String, Vec<f32>)>) {
    let dev = Device::Cpu;
    let x = Tensor::from_vec(tokens(B3 * N, 11), (B3, N), &dev).unwrap();
    let y = Tensor::from_vec(tokens(B3 * N, 12), (B3, N), &dev).unwrap();
    let backend = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
    let step = model.fused_step(&x, &y, &backend, start).unwrap().unwrap();
    let named = store
        .trainable()
        .iter()
        .map(|(name, var)| {
            let g = step.grads.get(var.as_tensor()).map_or_else(
                || vec![0.0; var.as_tensor().elem_count()],
                |g| g.flatten_all().unwrap().to_vec1().unwrap(),
            );
            (name.clone(), g)
        })
        .collect();
    (step.loss, named)
}

/// The loss within 1e-6 relative and every gradient as in [`check_blocks_with_ff`], of the
/// written-out step against autograd, for `cfg` at position offset `start`.
fn check_step(label: &str, cfg: &ModelConfig, start: u64) {
    let mut store = ParamStore::fresh(&Device::Cpu, 5);
    let mut model = Model::new(cfg, &mut store).unwrap();
    let (_, want_loss, want) = run_blocks(&mut model, &store, true, start);
    let (loss, got) = run_step(&model, &store, start);
    assert!(
        (loss - want_loss).abs() <= 1e-6 * want_loss.abs(),
        "{label}: loss {loss} vs {want_loss}"
    );
    let overall = want.iter().map(|(_, g)| largest(g)).fold(0f32, f32::max);
    for ((name, a), (_, b)) in want.iter().zip(&got) {
        let (scale, diff) = (largest(a), max_abs_diff(a, b));
        assert!(
            diff <= 1e-4 * scale + 1e-7 * overall,
            "{label}: {name}: max |Δ| = {diff:e} against max |g| = {scale:e}"
        );
        assert!(
            scale == 0.0 || largest(b) > 0.0,
            "{label}: {name}: gradient missing"
        );
    }
}

#[test]
fn the_written_out_step_matches_autograd_for_every_additive_encoding() {
    for (label, enc) in additive_encodings() {
        for start in [0, 300] {
            let cfg = ModelConfig {
                init: InitScheme::Gpt2,
                d_model: 32,
                n_layers: 2,
                n_heads: 4,
                d_ff: 64,
                ..ModelConfig::tiny(enc.clone())
            };
            check_step(&format!("{label} +{start}"), &cfg, start);
        }
    }
}

#[test]
fn the_written_out_step_matches_autograd_with_an_untied_head_and_flattened_parameters() {
    let cfg = ModelConfig {
        tie_embeddings: false,
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        d_ff: 48,
        ..ModelConfig::tiny(EncodingConfig::Fire(fire(|_| {})))
    };
    check_step("fire, untied, d_ff 48", &cfg, 0);
}

#[test]
fn the_written_out_step_refuses_a_token_outside_the_vocabulary_and_mismatched_targets() {
    let cfg = small(EncodingConfig::Nope);
    let mut store = ParamStore::fresh(&Device::Cpu, 5);
    let model = Model::new(&cfg, &mut store).unwrap();
    let backend = model.backend(AttentionPath::Fused, Purpose::Train).unwrap();
    let dev = Device::Cpu;
    let mut ids = tokens(B * N, 3);
    ids[7] = 256;
    let x = Tensor::from_vec(ids, (B, N), &dev).unwrap();
    let y = Tensor::from_vec(tokens(B * N, 4), (B, N), &dev).unwrap();
    let err = model
        .fused_step(&x, &y, &backend, 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("token 256 outside the vocabulary of 256"),
        "{err}"
    );
    let x = Tensor::from_vec(tokens(B * N, 3), (B, N), &dev).unwrap();
    let y = Tensor::from_vec(tokens(B * N, 4), B * N, &dev).unwrap();
    let err = model
        .fused_step(&x, &y, &backend, 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("targets"), "{err}");
}
