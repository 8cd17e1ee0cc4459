//! Families `fire/` (the bias at default and random parameters, every depth, GeLU), `fire-s/`
//! (shared and per-layer modules) and `variants/` (the Appendix B ablations).
//! spec: [vec.families]

use fire_reference::fire::{Activation, Threshold, Transform};

use super::common::{default_fire, file, fire_enc, fp, random_fire, range, Draft};
use crate::vectors::flags::Flag;
use crate::vectors::format::{Encoding, PerLayerParams, SharedParams, VectorFile};

const CORE: &[&str] = &[
    "fire.bias",
    "fire.psi",
    "fire.threshold",
    "fire.normalizer",
    "fire.input",
    "fire.mlp",
    "conv.positions",
    "conv.layout",
    "conv.distance",
    "conv.causal",
    "conv.future",
];

/// `fire/`.
pub fn fire() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let d = default_fire(12, 32, 1, 1);
    let default_init = vec![
        Draft::bias(
            "square-8",
            "Appendix E defaults, H=12, W=32: the full 8×8 square, keys after the query included",
            fire_enc(&d),
            range(8),
            range(8),
        )
        .clauses(CORE)
        .clauses(&["fire.defaults", "fire.activation", "fire.params"])
        .flags(&[Flag::DefaultInit, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "causal-rows-600",
            "Appendix E defaults on queries either side of L = 512",
            fire_enc(&d),
            vec![510, 511, 512, 513, 600],
            vec![0, 1, 255, 509, 510, 511, 512, 513, 599, 600],
        )
        .clauses(CORE)
        .clauses(&["fire.defaults"])
        .flags(&[
            Flag::DefaultInit,
            Flag::ThresholdBoundary,
            Flag::FutureKeys,
            Flag::NonContiguous,
        ]),
        Draft::bias(
            "seed-2-square-6",
            "another seed of the default initialisation",
            fire_enc(&default_fire(12, 32, 1, 2)),
            range(6),
            range(6),
        )
        .clauses(CORE)
        .clauses(&["fire.defaults"])
        .flags(&[Flag::DefaultInit, Flag::FutureKeys])
        .profile("bf16"),
    ];
    let mut random = Vec::new();
    for seed in 1..=3u64 {
        let f = random_fire(4, 8, 1, 100 + seed, Activation::Relu);
        random.push(
            Draft::bias(
                &format!("seed-{seed}-square-16"),
                "random θ, c, m with L ≈ 8: positions 0..16 cross the threshold",
                fire_enc(&f),
                range(16),
                range(16),
            )
            .clauses(CORE)
            .clauses(&["fire.params", "variants.catalogue", "conv.length"])
            .flags(&[Flag::RandomParams, Flag::FutureKeys])
            .profile("bf16"),
        );
    }
    // The hidden layer scaled so that its pre-activations w·x + b reach ±20 on x ∈ [0, 1]: the
    // other cases stay within ±3.2, where ReLU6 or a hardtanh-like clip equals ReLU; and far
    // outside every other case's range, ±200, where a clamp "for stability" (a ReLU capped at 30
    // or 100) shows.
    for (id, what, seed, weight, bias, profile) in [
        (
            "large-preactivations-square-16",
            "random θ with hidden pre-activations up to ±20: f_θ's ReLU is not clipped",
            104,
            10.0,
            4.0,
            "bf16",
        ),
        (
            "huge-preactivations-square-16",
            "random θ with hidden pre-activations up to ±200: f_θ's ReLU is not capped anywhere",
            105,
            100.0,
            40.0,
            "f32",
        ),
    ] {
        let mut steep = random_fire(4, 8, 1, seed, Activation::Relu);
        steep.mlp.layers[0]
            .weight
            .iter_mut()
            .for_each(|w| *w *= weight);
        steep.mlp.layers[0].bias.iter_mut().for_each(|b| *b *= bias);
        random.push(
            Draft::bias(id, what, fire_enc(&steep), range(16), range(16))
                .clauses(CORE)
                .clauses(&["fire.params", "fire.activation", "variants.catalogue"])
                .flags(&[
                    Flag::RandomParams,
                    Flag::LargePreactivations,
                    Flag::FutureKeys,
                ])
                .profile(profile),
        );
    }
    // c = 7.5 with m = 2.5, outside the other cases' ranges: c clipped to [−2, 2], or m to
    // [0.5, 2] (L = 20 against 16 for every query below it), shows.
    let mut large = random_fire(4, 8, 1, 106, Activation::Relu);
    large.c = 7.5;
    large.l_multiplier = 2.5;
    random.push(
        Draft::bias(
            "large-c-and-multiplier-square-16",
            "random θ, c = 7.5 and m = 2.5 (L = 20 above every query): neither is clipped",
            fire_enc(&large),
            range(16),
            range(16),
        )
        .clauses(CORE)
        .clauses(&["fire.params", "variants.catalogue"])
        .flags(&[Flag::RandomParams, Flag::FutureKeys]),
    );
    let mut depth = Vec::new();
    for (dep, flag) in [(0usize, Flag::Depth0), (2, Flag::Depth2)] {
        let f = random_fire(4, 8, dep, 200 + dep as u64, Activation::Relu);
        depth.push(
            Draft::bias(
                &format!("depth-{dep}"),
                &format!("{dep} hidden layers, random parameters"),
                fire_enc(&f),
                range(12),
                range(12),
            )
            .clauses(CORE)
            .clauses(&["fire.ablation.depth"])
            .flags(&[flag, Flag::RandomParams, Flag::FutureKeys]),
        );
    }
    let dd = default_fire(4, 32, 2, 3);
    depth.push(
        Draft::bias(
            "depth-2-default-init",
            "two hidden layers of 32 (Appendix B's approximator) at default initialisation",
            fire_enc(&dd),
            range(8),
            range(8),
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.depth", "fire.defaults"])
        .flags(&[Flag::Depth2, Flag::DefaultInit, Flag::FutureKeys]),
    );
    let mut gelu = Vec::new();
    for (dep, seed) in [(1usize, 301u64), (2, 302)] {
        let f = random_fire(4, 8, dep, seed, Activation::Gelu);
        gelu.push(
            Draft::bias(
                &format!("gelu-depth-{dep}"),
                "exact GeLU hidden activation",
                fire_enc(&f),
                range(12),
                range(12),
            )
            .clauses(CORE)
            .clauses(&["fire.activation", "fire.ablation.activation"])
            .flags(&[Flag::Gelu, Flag::RandomParams, Flag::FutureKeys]),
        );
    }
    Ok(vec![
        epsilon()?,
        file(
            "fire",
            "default-init",
            "FIRE at Appendix E's default initialisation",
            default_init,
        )?,
        file(
            "fire",
            "random-params",
            "FIRE with random parameters and a threshold inside the position range",
            random,
        )?,
        file("fire", "depth", "MLPs with 0 and 2 hidden layers", depth)?,
        file("fire", "gelu", "MLPs with the exact GeLU activation", gelu)?,
    ])
}

/// `fire/epsilon`: ε large enough that where it goes shows at f32 tolerance. At the default
/// ε = 10⁻⁶ every placement of ε (missing, inside ψ, on L, as a floor, in the numerator, outside
/// the ratio, in several places) moves the output by ~10⁻⁶ of its scale, below f32's tolerance;
/// with ε comparable to ψ(max(i, L)) each moves it by a large fraction, and the log's base
/// (which the ratio cancels but ε does not) shows too. spec: [fire.normalizer], [num.profiles]
fn epsilon() -> crate::error::Result<(String, VectorFile)> {
    let mut floor = random_fire(4, 8, 1, 801, Activation::Relu);
    floor.c = 0.05;
    floor.eps = 0.5;
    floor.l_init = 8.0;
    floor.l_multiplier = 1.0;
    let mut hundredth = random_fire(3, 6, 1, 802, Activation::Relu);
    hundredth.c = 1.0;
    hundredth.eps = 1e-2;
    let mut open = random_fire(3, 8, 1, 803, Activation::Relu);
    open.eps = 0.1;
    open.threshold = Threshold::Disabled;
    let mut below_one = random_fire(3, 8, 1, 805, Activation::Relu);
    below_one.c = 1.0;
    below_one.eps = 0.1;
    below_one.l_init = 2.0;
    below_one.l_multiplier = 0.25;
    let mut b1 = random_fire(3, 8, 1, 804, Activation::Relu);
    b1.eps = 0.25;
    b1.transform = Transform::Identity;
    b1.threshold = Threshold::Disabled;
    let cases = vec![
        Draft::bias(
            "eps-half-small-c",
            "ε = 0.5 above ψ(L) = ln(1.4) ≈ 0.34 (c = 0.05, L = 8): every placement of ε, the log's base and a floor at ε differ by a large fraction",
            fire_enc(&floor),
            range(16),
            range(16),
        )
        .clauses(CORE)
        .clauses(&["fire.params"])
        .flags(&[Flag::LargeEps, Flag::RandomParams, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "eps-hundredth",
            "ε = 10⁻², c = 1: where ε goes moves x by ~1 % of ψ(L)",
            fire_enc(&hundredth),
            range(14),
            range(14),
        )
        .clauses(CORE)
        .flags(&[Flag::LargeEps, Flag::RandomParams, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "eps-tenth-no-threshold-query-zero",
            "no threshold and ε = 0.1: query 0's normaliser is ε alone, so its row is f_θ(ψ(j)/ε)",
            fire_enc(&open),
            range(10),
            range(10),
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.no-threshold"])
        .flags(&[
            Flag::LargeEps,
            Flag::QueryZero,
            Flag::Ablation,
            Flag::RandomParams,
            Flag::FutureKeys,
        ]),
        Draft::bias(
            "eps-tenth-threshold-below-one-query-zero",
            "L = |0.25 · 2| = 0.5 < 1 and ε = 0.1, c = 1: query 0's normaliser is ψ(0.5) + ε, so a position clamped to at least 1 before the max (ψ(1)), a threshold floored or rounded to an integer, or ε dropped each move its row by a large fraction",
            fire_enc(&below_one),
            range(10),
            range(10),
        )
        .clauses(CORE)
        .clauses(&["fire.params"])
        .flags(&[
            Flag::LargeEps,
            Flag::QueryZero,
            Flag::RandomParams,
            Flag::FutureKeys,
        ]),
        Draft::bias(
            "no-log-no-threshold",
            "Appendix B.1's f((i − j)/i): no log and no threshold together (ε = 0.25 keeps query 0 finite)",
            fire_enc(&b1),
            range(12),
            range(12),
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.no-log", "fire.ablation.no-threshold"])
        .flags(&[
            Flag::LargeEps,
            Flag::QueryZero,
            Flag::Ablation,
            Flag::RandomParams,
            Flag::FutureKeys,
        ]),
    ];
    file(
        "fire",
        "epsilon",
        "FIRE with ε large enough to show where it enters, at f32 tolerance",
        cases,
    )
}

/// FIRE-S over `layers` layers (one random module of `heads` heads, seed `shared`) and
/// per-layer FIRE (a random module per layer, seeds `per_layer`, `per_layer + 1`, …).
fn shared_and_per_layer(
    heads: usize,
    layers: usize,
    shared: u64,
    per_layer: u64,
) -> (Encoding, Encoding) {
    let module = fp(&random_fire(heads, 8, 1, shared, Activation::Relu));
    let modules = (0..layers as u64)
        .map(|l| fp(&random_fire(heads, 8, 1, per_layer + l, Activation::Relu)))
        .collect();
    (
        Encoding::FireShared(SharedParams { module, layers }),
        Encoding::FirePerLayer(PerLayerParams { modules }),
    )
}

/// `fire-s/`.
pub fn fire_s() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let (shared, per_layer) = shared_and_per_layer(3, 3, 401, 410);
    // Two layers of four heads: with H ≠ layers, output stacked on the wrong axis
    // ([H, layers, Q, K]) comes back with the wrong shape, where three of three reshape silently.
    let (shared_2x4, per_layer_2x4) = shared_and_per_layer(4, 2, 420, 430);
    let shared_case = |name: &str, desc: &str, enc: Encoding| {
        Draft::bias(name, desc, enc, range(10), range(10))
            .clauses(&["fire.shared", "fire.bias", "conv.layout"])
            .flags(&[Flag::Shared, Flag::RandomParams, Flag::FutureKeys])
    };
    let per_layer_case = |name: &str, desc: &str, enc: Encoding| {
        Draft::bias(name, desc, enc, range(10), range(10))
            .clauses(&["fire.per-layer", "fire.bias", "conv.layout"])
            .flags(&[Flag::PerLayer, Flag::RandomParams, Flag::FutureKeys])
    };
    Ok(vec![
        file(
            "fire-s",
            "shared",
            "FIRE-S: one module, every layer adds the same bias",
            vec![
                shared_case(
                    "three-layers",
                    "three layers share one module: output [layers, H, Q, K]",
                    shared,
                ),
                shared_case(
                    "two-layers-four-heads",
                    "two layers of four heads share one module: output [2, 4, Q, K], which [4, 2, Q, K] is not",
                    shared_2x4,
                ),
            ],
        )?,
        file(
            "fire-s",
            "per-layer",
            "FIRE: one independent module per layer",
            vec![
                per_layer_case(
                    "three-layers",
                    "three layers, three modules: output [layers, H, Q, K]",
                    per_layer,
                ),
                per_layer_case(
                    "two-layers-four-heads",
                    "two layers of four heads, two modules: output [2, 4, Q, K], which [4, 2, Q, K] is not",
                    per_layer_2x4,
                ),
            ],
        )?,
    ])
}

/// `variants/`: the Appendix B ablations (named deviations are diagnosed, not vectorised).
pub fn ablations() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let base = || random_fire(4, 8, 1, 501, Activation::Relu);
    let mut no_log = base();
    no_log.transform = Transform::Identity;
    let mut no_threshold = base();
    no_threshold.threshold = Threshold::Disabled;
    let mut fixed = base();
    fixed.threshold = Threshold::Fixed;
    let mut final_act = base();
    final_act.mlp.final_activation = Some(Activation::Relu);
    // Queries start at 1: without a threshold, query 0's normaliser is ε alone, and its future
    // keys would dominate the case's scale.
    let mk = |name: &str, desc: &str, f: &fire_reference::Fire, clause: &'static str| {
        Draft::bias(name, desc, fire_enc(f), (1..14).collect(), range(14))
            .clauses(&["fire.bias", "fire.input", "conv.future"])
            .clauses(&[clause])
            .flags(&[Flag::Ablation, Flag::RandomParams, Flag::FutureKeys])
    };
    Ok(vec![file(
        "variants",
        "ablations",
        "Appendix B's ablations of FIRE",
        vec![
            mk(
                "no-log",
                "ψ is the identity",
                &no_log,
                "fire.ablation.no-log",
            ),
            mk(
                "no-threshold",
                "normaliser ψ(i) + ε with no threshold",
                &no_threshold,
                "fire.ablation.no-threshold",
            ),
            mk(
                "fixed-threshold",
                "a frozen threshold has the learnable one's values",
                &fixed,
                "fire.ablation.fixed-threshold",
            ),
            mk(
                "final-relu",
                "a ReLU on the MLP output",
                &final_act,
                "fire.ablation.final-activation",
            ),
        ],
    )?])
}
