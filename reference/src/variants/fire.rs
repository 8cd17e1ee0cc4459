//! FIRE's deviations, operator by operator of
//! `b(i, j) = f_θ( ψ(|i − j|) / (ψ(max(i, L)) + ε) )`, `ψ(x) = ln(|c|·x + 1)`, `L = |m·L_init|`.
//!
//! Each function computes what one mistaken reading computes, with everything else correct.
//! spec: [variants.catalogue]

use nalgebra::DVector;

use super::{Deviation, Variant};
use crate::bias::{evaluate, Bias, Pair};
use crate::error::Result;
use crate::fire::transform::{psi, thresholded};
use crate::fire::{Activation, Fire, Transform};
use crate::positions::{as_real, Indexing, Position};

use Deviation::{Fire as PerPair, FireLayout as Layout};

#[rustfmt::skip]
pub(super) const FIRE: &[Variant] = &[
    // The positions.
    v("one-based-positions", "positions start at 1 (the paper's prose) instead of 0; normalising by ψ(max(i + 1, L)) is the same function", "conv.indexing",
      "pos = torch.arange(1, T + 1)", PerPair(one_based)),
    v("positions-as-indices", "uses each position's index in its list instead of the position itself (wrong for gapped, unsorted and KV-cache positions)", "conv.positions",
      "pos = torch.arange(len(positions))", Layout(as_indices)),
    // The distance.
    v("signed-distance", "takes ψ(i − j) without |·|: keys after the query see ln of 1 minus a distance (negative, −∞ or NaN)", "conv.future",
      "rel = pos[:, None] - pos[None, :]  # no .abs()", PerPair(signed_distance)),
    v("reversed-distance", "takes ψ(j − i), key minus query: keys before the query see the negated distance", "conv.distance",
      "rel = pos[None, :] - pos[:, None]", PerPair(reversed_distance)),
    v("future-distance-clamped", "clamps the distance at 0, so keys after the query read f_θ(0) instead of the mirrored distance", "conv.future",
      "rel = (pos[:, None] - pos[None, :]).clamp(min=0)", PerPair(future_clamped)),
    // ψ and c.
    v("psi-identity", "drops the log of ψ where the log transform is configured: x = |i − j| / (max(i, L) + ε)", "fire.psi",
      "x = rel / (torch.max(pos, L) + eps)", PerPair(psi_identity)),
    v("log-without-plus-one", "uses ln(|c|·x) instead of ln(|c|·x + 1)", "fire.psi",
      "torch.log(self.c.abs() * x)", PerPair(log_without_plus_one)),
    v("log-base-2", "uses log₂ in ψ (the ratio cancels the base, ε does not)", "fire.psi",
      "torch.log2(self.c.abs() * x + 1)", PerPair(log_base_2)),
    v("log-base-10", "uses log₁₀ in ψ (the ratio cancels the base, ε does not)", "fire.psi",
      "torch.log10(self.c.abs() * x + 1)", PerPair(log_base_10)),
    v("no-abs-c", "uses ln(c·x + 1) without |c|", "fire.psi",
      "torch.log(self.c * x + 1)", PerPair(no_abs_c)),
    v("no-abs-c-in-distance", "uses ln(c·|i − j| + 1) without |c| in the distance's ψ only, the normaliser keeping |c|: for c < 0 every key sees ln of 1 minus a distance (negative, −∞ or NaN)", "fire.psi",
      "torch.log(self.c * rel.abs() + 1)  # the normaliser takes self.c.abs()", PerPair(no_abs_c_in_distance)),
    v("c-softplus", "uses softplus(c) where |c| is specified", "fire.psi",
      "torch.log(F.softplus(self.c) * x + 1)", PerPair(c_softplus)),
    v("c-exp", "uses exp(c) where |c| is specified", "fire.psi",
      "torch.log(self.c.exp() * x + 1)", PerPair(c_exp)),
    v("c-clamped", "clamps c at 10⁻⁴ from below where |c| is specified", "fire.psi",
      "torch.log(self.c.clamp(min=1e-4) * x + 1)", PerPair(c_clamped)),
    // The threshold.
    v("no-abs-threshold", "uses L = m·L_init without the absolute value", "fire.threshold",
      "L = self.L_multiplier * self.init_L", PerPair(no_abs_threshold)),
    v("multiplier-ignored", "uses L = L_init: the learnable multiplier never enters", "fire.threshold",
      "L = self.init_L", PerPair(multiplier_ignored)),
    // The normaliser's argument.
    v("threshold-ignored", "normalises by ψ(i) + ε, ignoring L", "fire.normalizer",
      "norm = psi(pos) + eps", PerPair(threshold_ignored)),
    v("threshold-as-min", "normalises by ψ(min(i, L)) + ε instead of ψ(max(i, L)) + ε", "fire.normalizer",
      "norm = psi(torch.min(pos, L)) + eps", PerPair(threshold_as_min)),
    v("normalize-by-threshold", "normalises every query by ψ(L) + ε, dropping the max with i", "fire.normalizer",
      "norm = psi(L) + eps", PerPair(by_threshold)),
    v("normalize-by-length", "normalises by the context length instead of the query position", "fire.normalizer",
      "norm = psi(torch.max(seq_len, L)) + eps", PerPair(by_length)),
    v("normalize-by-key", "normalises by the key position, which is also what a transposed bias b(j, i) computes", "fire.normalizer",
      "norm = psi(torch.max(pos[None, :], L)) + eps", PerPair(by_key)),
    v("normalize-by-distance", "normalises by ψ(max(i − j, L)) + ε, the distance in place of the query position (a key after the query, at a negative distance, gets ψ(L))", "fire.normalizer",
      "norm = psi(torch.max(rel, L)) + eps  # rel = pos[:, None] - pos[None, :]", PerPair(by_distance)),
    v("normalize-by-farthest-key", "normalises by ψ(max(n, L)) + ε with n the query's largest causal distance to any key, maxⱼ max(i − j, 0), which is i only where key 0 is present (a sliding window of keys, a KV cache past its oldest keys, shows it); positions renumbered from the first key held (`pos - pos[0]`) compute the same", "fire.normalizer",
      "norm = psi(torch.max(rel.clamp(min=0).amax(-1), L)) + eps", Layout(by_farthest_key)),
    v("normalizer-missing", "feeds ψ(|i − j|) to the MLP without dividing by the normaliser", "fire.input",
      "x = psi(rel)", PerPair(normalizer_missing)),
    // Where ε goes.
    v("eps-missing", "omits ε from the normaliser (or ignores the constructor's ε for a far smaller constant)", "fire.normalizer",
      "x = psi(rel) / psi(torch.max(pos, L))", PerPair(eps_missing)),
    v("eps-inside-log", "adds ε to max(i, L) inside ψ instead of to ψ", "fire.normalizer",
      "norm = psi(torch.max(pos, L) + eps)", PerPair(eps_inside_log)),
    v("eps-on-threshold", "adds ε to L instead of to the normaliser: ψ(max(i, L + ε))", "fire.normalizer",
      "norm = psi(torch.max(pos, L + eps))", PerPair(eps_on_threshold)),
    v("eps-as-floor", "clamps the normaliser at ε instead of adding ε: max(ψ(max(i, L)), ε)", "fire.normalizer",
      "norm = psi(torch.max(pos, L)).clamp(min=eps)", PerPair(eps_as_floor)),
    v("eps-twice", "adds ε to the numerator as well as the normaliser", "fire.input",
      "x = (psi(rel) + eps) / (psi(torch.max(pos, L)) + eps)", PerPair(eps_twice)),
    v("eps-numerator-only", "adds ε to the numerator instead of the normaliser", "fire.input",
      "x = (psi(rel) + eps) / psi(torch.max(pos, L))", PerPair(eps_numerator_only)),
    v("eps-outside-ratio", "adds ε to the ratio instead of to the normaliser", "fire.input",
      "x = psi(rel) / psi(torch.max(pos, L)) + eps", PerPair(eps_outside_ratio)),
    v("eps-everywhere", "adds ε in three places: to the numerator, inside ψ of the normaliser and to it", "fire.input",
      "x = (psi(rel) + eps) / (psi(torch.max(pos, L) + eps) + eps)", PerPair(eps_everywhere)),
    v("eps-inside-psi", "guards both logs with ε inside, ln(|c|·(y + ε) + 1 + ε) for y = |i − j| and max(i, L), and adds none to the normaliser", "fire.normalizer",
      "torch.log((rel.abs() + eps) * c.abs() + 1 + eps) / torch.log(c.abs() * (torch.max(pos, L) + eps) + 1 + eps)", PerPair(eps_inside_psi)),
    // The MLP's input.
    v("difference-of-logs", "feeds ψ(|i−j|) − (ψ(max(i, L)) + ε) instead of their ratio", "fire.input",
      "x = rel_distance - (pos_normalizer + eps)  # '/' typed as '-'", PerPair(difference_of_logs)),
    // The MLP.
    v("no-hidden-activation", "drops σ between the MLP layers", "fire.mlp",
      "nn.Sequential(nn.Linear(1, W), nn.Linear(W, H))  # Flax: nn.Dense(H)(nn.Dense(W)(x))", PerPair(no_hidden_activation)),
    v("final-relu", "applies a ReLU to the MLP output", "fire.mlp",
      "nn.Sequential(nn.Linear(1, W), nn.ReLU(), nn.Linear(W, H), nn.ReLU())  # Flax: nn.relu(nn.Dense(H)(h))", PerPair(final_relu)),
    v("hidden-bias-missing", "builds the hidden layers without biases", "fire.mlp",
      "nn.Linear(1, W, bias=False)  # Flax: nn.Dense(W, use_bias=False)", PerPair(hidden_bias_missing)),
    v("output-bias-missing", "builds the output layer without a bias", "fire.mlp",
      "nn.Linear(W, H, bias=False)  # Flax: nn.Dense(H, use_bias=False)", PerPair(output_bias_missing)),
    v("weights-column-major", "reads each [out, in] weight buffer as column-major", "fire.mlp",
      "w.reshape(in_features, out_features).t()", PerPair(weights_column_major)),
    v("gelu-tanh", "uses the tanh approximation of GeLU where the exact form is specified", "fire.activation",
      "nn.GELU(approximate='tanh')", PerPair(gelu_tanh)),
    v("gelu-for-relu", "uses the exact GeLU where ReLU is specified", "fire.activation",
      "nn.GELU()  # where the module says relu", PerPair(gelu_for_relu)),
    v("gelu-tanh-for-relu", "uses GeLU's tanh approximation (jax.nn.gelu's default) where ReLU is specified", "fire.activation",
      "jax.nn.gelu(h)  # approximate=True by default; torch: nn.GELU(approximate='tanh')", PerPair(gelu_tanh_for_relu)),
    v("relu-for-gelu", "uses ReLU where the exact GeLU is specified", "fire.activation",
      "nn.ReLU()  # where the module says gelu", PerPair(relu_for_gelu)),
    // The heads and the memory layout.
    v("heads-reversed", "emits the heads in reverse order", "conv.layout",
      "bias.flip(0)", PerPair(heads_reversed)),
    v("layout-qkh", "reshapes the MLP's [n, n, H] output over the context's square ([conv.length]) to [H, n, n] instead of permuting it", "conv.layout",
      "mlp(x).reshape(H, n, n)  # x is [n, n, 1]", Layout(layout_qkh)),
    // The layers.
    v("first-module-reused", "every layer uses the first layer's module: one FIRE built and shared where one per layer is specified", "fire.per-layer",
      "self.fire = FIRE(...)  # one module for every layer, where nn.ModuleList([FIRE(...) for _ in range(n_layers)]) was meant", Deviation::ModuleReused),
];

const fn v(
    name: &'static str,
    summary: &'static str,
    violates: &'static str,
    looks_like: &'static str,
    deviation: Deviation,
) -> Variant {
    Variant {
        name,
        summary,
        violates,
        looks_like,
        deviation,
        tolerated: None,
    }
}

fn ij(pair: Pair) -> (f64, f64) {
    (as_real(pair.i), as_real(pair.j))
}

/// ψ of the module's own transform and c.
fn psi_of(fire: &Fire, x: f64) -> f64 {
    psi(fire.transform, fire.c, x)
}

/// max(i, L), or `i` without a threshold.
fn n_of(fire: &Fire, i: f64) -> f64 {
    thresholded(i, fire.threshold_value())
}

/// f_θ(num / den): the shared tail of the deviations of the input.
fn f_of(fire: &Fire, num: f64, den: f64) -> DVector<f64> {
    fire.mlp.eval(num / den)
}

/// f_θ(ψ(|i − j|) / (ψ(arg) + ε)): a deviation of the normaliser's argument.
fn with_normalizer_arg(fire: &Fire, i: f64, j: f64, arg: f64) -> DVector<f64> {
    f_of(
        fire,
        psi_of(fire, (i - j).abs()),
        psi_of(fire, arg) + fire.eps,
    )
}

/// FIRE with `log` in place of ψ where the log transform is configured (the identity stays).
fn with_log(fire: &Fire, p: Pair, log: impl Fn(f64) -> f64) -> DVector<f64> {
    let psi = |x: f64| match fire.transform {
        Transform::Log => log(x),
        Transform::Identity => x,
    };
    let (i, j) = ij(p);
    f_of(fire, psi((i - j).abs()), psi(n_of(fire, i)) + fire.eps)
}

/// FIRE with the distance `d` (possibly signed) in the numerator.
fn with_distance(fire: &Fire, i: f64, d: f64) -> DVector<f64> {
    f_of(
        fire,
        psi_of(fire, d),
        psi_of(fire, n_of(fire, i)) + fire.eps,
    )
}

/// FIRE with its MLP edited.
fn with_mlp(fire: &Fire, p: Pair, edit: impl Fn(&mut crate::fire::Mlp)) -> DVector<f64> {
    let mut f = fire.clone();
    edit(&mut f.mlp);
    let (i, j) = ij(p);
    f.bias_at(i, j)
}

fn one_based(fire: &Fire, p: Pair) -> DVector<f64> {
    let shift = |q| as_real(Indexing::OneBased.apply(q));
    fire.bias_at(shift(p.i), shift(p.j))
}

fn as_indices(fire: &Fire, queries: &[Position], keys: &[Position]) -> Result<Bias> {
    let index = |n: usize| Position::try_from(n).unwrap_or(Position::MAX);
    let q: Vec<Position> = (0..queries.len()).map(index).collect();
    let k: Vec<Position> = (0..keys.len()).map(index).collect();
    evaluate(fire, &q, &k)
}

fn signed_distance(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_distance(fire, i, i - j)
}

fn reversed_distance(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_distance(fire, i, j - i)
}

fn future_clamped(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_distance(fire, i, (i - j).max(0.0))
}

fn psi_identity(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| x)
}

fn log_without_plus_one(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| (fire.c.abs() * x).ln())
}

fn log_base_2(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| (fire.c.abs() * x + 1.0).log2())
}

fn log_base_10(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| (fire.c.abs() * x + 1.0).log10())
}

fn no_abs_c(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| (fire.c * x).ln_1p())
}

/// ψ's `|c|` dropped in the numerator only: `ln(c·|i − j| + 1)`, which for `c < 0` is ln of 1
/// minus a distance, while the normaliser keeps `ln(|c|·max(i, L) + 1)`. Without the log
/// transform `c` never enters. spec: [fire.psi]
fn no_abs_c_in_distance(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let d = (i - j).abs();
    let num = match fire.transform {
        Transform::Log => (fire.c * d).ln_1p(),
        Transform::Identity => d,
    };
    f_of(fire, num, psi_of(fire, n_of(fire, i)) + fire.eps)
}

/// softplus(c) = ln(1 + eᶜ), in the overflow-safe form PyTorch uses.
fn softplus(c: f64) -> f64 {
    c.max(0.0) + (-c.abs()).exp().ln_1p()
}

fn c_softplus(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| (softplus(fire.c) * x).ln_1p())
}

fn c_exp(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| (fire.c.exp() * x).ln_1p())
}

fn c_clamped(fire: &Fire, p: Pair) -> DVector<f64> {
    with_log(fire, p, |x| (fire.c.max(1e-4) * x).ln_1p())
}

fn no_abs_threshold(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let arg = match fire.threshold_value() {
        Some(_) => i.max(fire.l_multiplier * fire.l_init),
        None => i,
    };
    with_normalizer_arg(fire, i, j, arg)
}

fn multiplier_ignored(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let arg = match fire.threshold_value() {
        Some(_) => i.max(fire.l_init),
        None => i,
    };
    with_normalizer_arg(fire, i, j, arg)
}

fn threshold_ignored(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_normalizer_arg(fire, i, j, i)
}

fn threshold_as_min(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let arg = fire.threshold_value().map_or(i, |l| i.min(l));
    with_normalizer_arg(fire, i, j, arg)
}

fn by_threshold(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let arg = fire.threshold_value().unwrap_or(i);
    with_normalizer_arg(fire, i, j, arg)
}

fn by_length(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_normalizer_arg(fire, i, j, n_of(fire, as_real(p.length)))
}

fn by_key(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_normalizer_arg(fire, i, j, n_of(fire, j))
}

/// Appendix E with the signed distance `i − j` where the query position belongs in
/// `torch.max(pos, L)`: its ψ takes `|c·x|`, so the argument is `|max(i − j, L)|`. A key after
/// the query has a negative distance and is normalised by ψ(L) (by ψ(|i − j|) without a
/// threshold), the full square being computed as [conv.future] describes. spec: [fire.normalizer]
fn by_distance(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_normalizer_arg(fire, i, j, n_of(fire, i - j).abs())
}

/// The normaliser's position read off the distance matrix: each query's largest causal
/// distance over the keys it is given, `maxⱼ max(i − j, 0)` — the query position exactly when
/// key 0 is among them, as in a square from 0 (a query before every key gets 0, so ψ(L)).
/// spec: [fire.normalizer]
fn by_farthest_key(fire: &Fire, queries: &[Position], keys: &[Position]) -> Result<Bias> {
    let heads = fire.mlp.heads();
    let rows: Vec<Vec<DVector<f64>>> = queries
        .iter()
        .map(|&q| {
            let far = keys.iter().map(|&k| q.saturating_sub(k)).max().unwrap_or(0);
            let i = as_real(q);
            let arg = n_of(fire, as_real(far));
            keys.iter()
                .map(|&k| with_normalizer_arg(fire, i, as_real(k), arg))
                .collect()
        })
        .collect();
    let heads = (0..heads)
        .map(|h| nalgebra::DMatrix::from_fn(queries.len(), keys.len(), |r, c| rows[r][c][h]))
        .collect();
    Bias::from_heads(heads)
}

fn normalizer_missing(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    fire.mlp.eval(psi_of(fire, (i - j).abs()))
}

fn eps_missing(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    f_of(
        fire,
        psi_of(fire, (i - j).abs()),
        psi_of(fire, n_of(fire, i)),
    )
}

fn eps_inside_log(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let den = psi_of(fire, n_of(fire, i) + fire.eps);
    f_of(fire, psi_of(fire, (i - j).abs()), den)
}

fn eps_on_threshold(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let arg = thresholded(i, fire.threshold_value().map(|l| l + fire.eps));
    f_of(fire, psi_of(fire, (i - j).abs()), psi_of(fire, arg))
}

/// `torch.maximum`: NaN in, NaN out (`f64::max` would drop it).
fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn eps_as_floor(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let den = maximum(psi_of(fire, n_of(fire, i)), fire.eps);
    f_of(fire, psi_of(fire, (i - j).abs()), den)
}

fn eps_twice(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let num = psi_of(fire, (i - j).abs()) + fire.eps;
    f_of(fire, num, psi_of(fire, n_of(fire, i)) + fire.eps)
}

fn eps_numerator_only(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let num = psi_of(fire, (i - j).abs()) + fire.eps;
    f_of(fire, num, psi_of(fire, n_of(fire, i)))
}

fn eps_outside_ratio(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let x = psi_of(fire, (i - j).abs()) / psi_of(fire, n_of(fire, i)) + fire.eps;
    fire.mlp.eval(x)
}

fn eps_everywhere(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let num = psi_of(fire, (i - j).abs()) + fire.eps;
    let den = psi_of(fire, n_of(fire, i) + fire.eps) + fire.eps;
    f_of(fire, num, den)
}

/// ε sprinkled inside both logs for safety (the ReaLLMASIC nanoGPT forks): ψ guarded as
/// ln(|c|·(y + ε) + 1 + ε) in the numerator and the normaliser, and no ε added to the latter.
/// The log transform only (without it there is no log to guard).
fn eps_inside_psi(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let guarded = |y: f64| match fire.transform {
        Transform::Log => (fire.c.abs() * (y + fire.eps) + 1.0 + fire.eps).ln(),
        Transform::Identity => psi_of(fire, y) + fire.eps,
    };
    match fire.transform {
        Transform::Log => f_of(fire, guarded((i - j).abs()), guarded(n_of(fire, i))),
        Transform::Identity => f_of(fire, psi_of(fire, (i - j).abs()), guarded(n_of(fire, i))),
    }
}

/// Appendix E's division of ψ(|i−j|) by the normaliser ψ(max(i, L)) + ε typed as a
/// subtraction: ε is subtracted with it.
fn difference_of_logs(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    fire.mlp
        .eval(psi_of(fire, (i - j).abs()) - (psi_of(fire, n_of(fire, i)) + fire.eps))
}

fn no_hidden_activation(fire: &Fire, p: Pair) -> DVector<f64> {
    with_mlp(fire, p, |m| m.activation = Activation::Identity)
}

fn final_relu(fire: &Fire, p: Pair) -> DVector<f64> {
    with_mlp(fire, p, |m| m.final_activation = Some(Activation::Relu))
}

fn hidden_bias_missing(fire: &Fire, p: Pair) -> DVector<f64> {
    with_mlp(fire, p, |m| {
        let last = m.layers.len() - 1;
        for layer in &mut m.layers[..last] {
            layer.bias.fill(0.0);
        }
    })
}

fn output_bias_missing(fire: &Fire, p: Pair) -> DVector<f64> {
    with_mlp(fire, p, |m| {
        if let Some(layer) = m.layers.last_mut() {
            layer.bias.fill(0.0);
        }
    })
}

fn weights_column_major(fire: &Fire, p: Pair) -> DVector<f64> {
    with_mlp(fire, p, |m| {
        for layer in &mut m.layers {
            let (rows, cols) = layer.weight.shape();
            // nalgebra stores column-major; the row-major buffer PyTorch writes is the transpose's.
            let row_major: Vec<f64> = layer.weight.transpose().iter().copied().collect();
            layer.weight = nalgebra::DMatrix::from_column_slice(rows, cols, &row_major);
        }
    })
}

/// GeLU's tanh approximation, `z/2·(1 + tanh(√(2/π)·(z + 0.044715·z³)))`.
fn tanh_gelu(z: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * z * (1.0 + (k * (z + 0.044_715 * z * z * z)).tanh())
}

/// f_θ with every GeLU (hidden or final) replaced by `gelu`.
fn mlp_with_gelu(fire: &Fire, x: f64, gelu: impl Fn(f64) -> f64) -> DVector<f64> {
    let mlp = &fire.mlp;
    let last = mlp.layers.len() - 1;
    let mut a = DVector::from_element(1, x);
    for (n, layer) in mlp.layers.iter().enumerate() {
        let z = layer.apply(&a);
        let sigma = if n < last {
            Some(mlp.activation)
        } else {
            mlp.final_activation
        };
        a = match sigma {
            Some(Activation::Gelu) => z.map(&gelu),
            Some(s) => z.map(|v| s.apply(v)),
            None => z,
        };
    }
    a
}

fn gelu_tanh(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    mlp_with_gelu(fire, fire.input(i, j), tanh_gelu)
}

fn gelu_for_relu(fire: &Fire, p: Pair) -> DVector<f64> {
    with_mlp(fire, p, |m| {
        if m.activation == Activation::Relu {
            m.activation = Activation::Gelu;
        }
    })
}

/// ReLU hidden layers computed with GeLU's tanh approximation, JAX's default `jax.nn.gelu`.
fn gelu_tanh_for_relu(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    if fire.mlp.activation != Activation::Relu {
        return fire.bias_at(i, j);
    }
    let mut f = fire.clone();
    f.mlp.activation = Activation::Gelu;
    mlp_with_gelu(&f, f.input(i, j), tanh_gelu)
}

fn relu_for_gelu(fire: &Fire, p: Pair) -> DVector<f64> {
    with_mlp(fire, p, |m| {
        if m.activation == Activation::Gelu {
            m.activation = Activation::Relu;
        }
    })
}

fn heads_reversed(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let b = fire.bias_at(i, j);
    let n = b.len();
    DVector::from_fn(n, |h, _| b[n - 1 - h])
}

/// A module that computes the `[n, n, H]` square of the context ([conv.length]) and reshapes
/// it to `[H, n, n]`, then has its requested rows and columns gathered: element `(h, r, c)`
/// is the square's flat element `(h·n + i_r)·n + j_c`, which the MLP wrote for the pair and
/// head that index holds in `[n, n, H]` order.
fn layout_qkh(fire: &Fire, queries: &[Position], keys: &[Position]) -> Result<Bias> {
    // What the correct evaluation checks (the positions, the parameters) still applies.
    crate::positions::validate("query positions", queries)?;
    crate::positions::validate("key positions", keys)?;
    evaluate(
        fire,
        &queries[..queries.len().min(1)],
        &keys[..keys.len().min(1)],
    )?;
    let heads = fire.mlp.heads();
    let n = queries
        .iter()
        .chain(keys)
        .max()
        .map_or(0, |&p| u128::from(p) + 1);
    let h = heads as u128;
    let at = |head: usize, i: Position, j: Position| {
        let flat = (head as u128 * n + u128::from(i)) * n + u128::from(j);
        let (pair, written) = (flat / h, (flat % h) as usize);
        let (a, b) = ((pair / n) as f64, (pair % n) as f64);
        fire.bias_at(a, b)[written]
    };
    let heads = (0..heads)
        .map(|head| {
            nalgebra::DMatrix::from_fn(queries.len(), keys.len(), |r, c| {
                at(head, queries[r], keys[c])
            })
        })
        .collect();
    Bias::from_heads(heads)
}
