//! Family `invalid/`: inputs an implementation must reject rather than turn into numbers.
//! spec: [vec.invalid], [num.errors]

use fire_reference::fire::{Activation, Fire, Threshold};

use super::common::{file, fire_enc, random_fire, random_tensor, range, Draft};
use crate::vectors::flags::Flag;
use crate::vectors::format::{Encoding, Kind, SharedParams, Tensor, VectorFile};
use crate::vectors::params;

fn bad(name: &str, desc: &str, f: &Fire, flag: Flag, clause: &'static str) -> Draft {
    Draft::bias(name, desc, fire_enc(f), range(4), range(4))
        .clauses(&["num.errors", "fire.params"])
        .clauses(&[clause])
        .flags(&[flag])
        .invalid()
}

/// `invalid/`.
pub fn invalid() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let base = || random_fire(2, 4, 1, 901, Activation::Relu);
    let with = |edit: &dyn Fn(&mut Fire)| {
        let mut f = base();
        edit(&mut f);
        f
    };
    let mut params_cases = vec![
        bad(
            "c-nan",
            "c is NaN",
            &with(&|f| f.c = f64::NAN),
            Flag::NonFinite,
            "fire.psi",
        ),
        bad(
            "c-infinite",
            "c is +∞",
            &with(&|f| f.c = f64::INFINITY),
            Flag::NonFinite,
            "fire.psi",
        ),
        bad(
            "weight-nan",
            "an MLP weight is NaN",
            &with(&|f| f.mlp.layers[1].weight[(0, 2)] = f64::NAN),
            Flag::NonFinite,
            "fire.mlp",
        ),
        bad(
            "bias-neg-infinite",
            "an MLP bias is −∞",
            &with(&|f| f.mlp.layers[0].bias[1] = f64::NEG_INFINITY),
            Flag::NonFinite,
            "fire.mlp",
        ),
        bad(
            "c-zero",
            "c = 0 with the log transform makes ψ ≡ 0",
            &with(&|f| f.c = 0.0),
            Flag::InvalidParams,
            "fire.psi",
        ),
        bad(
            "l-init-zero",
            "L_init = 0",
            &with(&|f| f.l_init = 0.0),
            Flag::InvalidParams,
            "fire.threshold",
        ),
        bad(
            "l-init-negative",
            "L_init < 0",
            &with(&|f| f.l_init = -8.0),
            Flag::InvalidParams,
            "fire.threshold",
        ),
        bad(
            "multiplier-nan",
            "L_multiplier is NaN",
            &with(&|f| f.l_multiplier = f64::NAN),
            Flag::NonFinite,
            "fire.threshold",
        ),
        bad(
            "eps-negative",
            "ε < 0",
            &with(&|f| f.eps = -1e-6),
            Flag::InvalidParams,
            "fire.normalizer",
        ),
        bad(
            "zero-normaliser",
            "ε = 0 and m = 0: the normaliser at query 0 is 0",
            &with(&|f| {
                f.eps = 0.0;
                f.l_multiplier = 0.0;
            }),
            Flag::InvalidParams,
            "fire.normalizer",
        ),
        bad(
            "no-threshold-zero-eps",
            "no threshold and ε = 0 divide 0 by 0 at query 0",
            &with(&|f| {
                f.eps = 0.0;
                f.threshold = Threshold::Disabled;
            }),
            Flag::InvalidParams,
            "fire.ablation.no-threshold",
        ),
        bad(
            "power-nonpositive",
            "power(p) needs p > 0",
            &with(&|f| f.mlp.activation = Activation::Power(-1.0)),
            Flag::InvalidParams,
            "fire.activation",
        ),
        bad(
            "log1p-outside-domain",
            "a log1p hidden unit whose pre-activation falls below −1 (its bias is −10): ln of a negative number",
            &with(&|f| {
                f.mlp.activation = Activation::Log1p;
                f.mlp.layers[0].bias[0] = -10.0;
            }),
            Flag::InvalidParams,
            "fire.activation",
        ),
    ];
    // Shapes that do not chain from 1 input to H outputs.
    let f = base();
    let mut p = params::from_fire(&f);
    p.mlp.layers[1].weight = Tensor::new(vec![2, 3], vec![0.1; 6]);
    params_cases.push(
        Draft::bias(
            "shape-mismatch",
            "the output layer's input width differs from the hidden width",
            Encoding::Fire(p),
            range(4),
            range(4),
        )
        .clauses(&["num.errors", "fire.mlp"])
        .flags(&[Flag::InvalidShape])
        .invalid(),
    );
    let mut p = params::from_fire(&f);
    p.mlp.layers[0].bias = Tensor::new(vec![3], vec![0.1; 3]);
    params_cases.push(
        Draft::bias(
            "bias-length",
            "a hidden bias of the wrong length",
            Encoding::Fire(p),
            range(4),
            range(4),
        )
        .clauses(&["num.errors", "fire.mlp"])
        .flags(&[Flag::InvalidShape])
        .invalid(),
    );
    let mut p = params::from_fire(&f);
    p.mlp.layers.clear();
    params_cases.push(
        Draft::bias(
            "no-layers",
            "an MLP without layers",
            Encoding::Fire(p),
            range(4),
            range(4),
        )
        .clauses(&["num.errors", "fire.mlp"])
        .flags(&[Flag::InvalidShape])
        .invalid(),
    );
    params_cases.push(
        Draft::bias(
            "shared-zero-layers",
            "FIRE-S over zero layers",
            Encoding::FireShared(SharedParams {
                module: params::from_fire(&f),
                layers: 0,
            }),
            range(4),
            range(4),
        )
        .clauses(&["num.errors", "fire.shared"])
        .flags(&[Flag::InvalidShape, Flag::Shared])
        .invalid(),
    );

    let pos = |name: &str, desc: &str, q: Vec<i64>, k: Vec<i64>| {
        Draft::bias(name, desc, fire_enc(&f), q, k)
            .clauses(&["num.errors", "conv.positions"])
            .flags(&[Flag::InvalidPositions])
            .invalid()
    };
    let mut positions = vec![
        pos("empty-queries", "no query positions", vec![], range(3)),
        pos("empty-keys", "no key positions", range(3), vec![]),
        pos(
            "negative-position",
            "a negative key position",
            range(3),
            vec![0, -1, 2],
        ),
        pos(
            "beyond-2-53",
            "a position above 2^53 cannot be represented exactly",
            vec![(1i64 << 53) + 1],
            vec![0],
        ),
    ];
    let mut a = Draft::bias(
        "attention-no-visible-key",
        "query 0 against keys 1..3 sees no key",
        fire_enc(&f),
        vec![0],
        vec![1, 2, 3],
    )
    .kind(Kind::Attention)
    .clauses(&["num.errors", "attn.causal"])
    .flags(&[Flag::Attention, Flag::InvalidPositions])
    .invalid();
    a.inputs.q = Some(random_tensor(vec![2, 1, 4], 1));
    a.inputs.k = Some(random_tensor(vec![2, 3, 4], 2));
    a.inputs.v = Some(random_tensor(vec![2, 3, 2], 3));
    positions.push(a);
    let mut g = Draft::bias(
        "cotangent-shape",
        "a cotangent that is not shaped like the bias",
        fire_enc(&f),
        range(3),
        range(3),
    )
    .kind(Kind::Vjp)
    .clauses(&["num.errors", "grad.vjp"])
    .flags(&[Flag::Gradient, Flag::InvalidShape])
    .invalid();
    g.inputs.cotangent = Some(random_tensor(vec![2, 3, 4], 4));
    positions.push(g);
    Ok(vec![
        file(
            "invalid",
            "parameters",
            "parameters an implementation must reject",
            params_cases,
        )?,
        file(
            "invalid",
            "inputs",
            "positions and inputs an implementation must reject",
            positions,
        )?,
    ])
}
