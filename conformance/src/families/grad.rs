//! Family `fire-grad/`: vector-Jacobian products, i.e. what `(bias * G).sum().backward()` leaves
//! in each parameter's `.grad`, named as Appendix E's state dict. spec: [vec.families]

use fire_reference::fire::{Activation, Fire, Threshold};

use super::common::{default_fire, file, fire_enc, random_fire, random_tensor, range, Draft};
use crate::vectors::flags::Flag;
use crate::vectors::format::{Kind, Tensor, VectorFile};

const GRAD: &[&str] = &[
    "grad.layout",
    "grad.theta",
    "grad.c",
    "grad.m",
    "grad.vjp",
    "fire.bias",
];

fn vjp(name: &str, desc: &str, f: &Fire, q: Vec<i64>, k: Vec<i64>, cot: Tensor) -> Draft {
    let mut d = Draft::bias(name, desc, fire_enc(f), q, k)
        .kind(Kind::Vjp)
        .clauses(GRAD)
        .flags(&[Flag::Gradient]);
    d.inputs.cotangent = Some(cot);
    d
}

fn one_hot(shape: [usize; 3], at: [usize; 3]) -> Tensor {
    let mut data = vec![0.0; shape.iter().product()];
    data[(at[0] * shape[1] + at[1]) * shape[2] + at[2]] = 1.0;
    Tensor::new(shape.to_vec(), data)
}

/// `fire-grad/`.
pub fn fire_grad() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let d = default_fire(4, 8, 1, 11);
    let r = random_fire(3, 6, 1, 601, Activation::Relu);
    let cot = |h: usize, n: usize, seed: u64| random_tensor(vec![h, n, n], seed);
    let mut vjps = vec![
        vjp(
            "default-init-square-6",
            "default init, random cotangent over the 6×6 square",
            &d,
            range(6),
            range(6),
            cot(4, 6, 1),
        )
        .flags(&[Flag::DefaultInit, Flag::FutureKeys]),
        vjp(
            "random-square-12",
            "random parameters with L ≈ 8: the gradient reaches m",
            &r,
            range(12),
            range(12),
            cot(3, 12, 2),
        )
        .flags(&[Flag::RandomParams, Flag::FutureKeys]),
    ];
    for (dep, flag) in [(0usize, Flag::Depth0), (2, Flag::Depth2)] {
        let f = random_fire(3, 6, dep, 610 + dep as u64, Activation::Relu);
        vjps.push(
            vjp(
                &format!("depth-{dep}"),
                "gradients through a different depth",
                &f,
                range(10),
                range(10),
                cot(3, 10, 3 + dep as u64),
            )
            .clauses(&["fire.ablation.depth"])
            .flags(&[flag, Flag::RandomParams, Flag::FutureKeys]),
        );
    }
    let g = random_fire(3, 6, 1, 620, Activation::Gelu);
    vjps.push(
        vjp(
            "gelu",
            "gradients through the exact GeLU",
            &g,
            range(10),
            range(10),
            cot(3, 10, 7),
        )
        .clauses(&["fire.activation"])
        .flags(&[Flag::Gelu, Flag::RandomParams, Flag::FutureKeys]),
    );
    let mut fixed = r.clone();
    fixed.threshold = Threshold::Fixed;
    vjps.push(
        vjp(
            "fixed-threshold",
            "a frozen multiplier has no gradient (and no L_multiplier output)",
            &fixed,
            range(12),
            range(12),
            cot(3, 12, 8),
        )
        .clauses(&["fire.ablation.fixed-threshold"])
        .flags(&[Flag::Ablation, Flag::RandomParams, Flag::FutureKeys]),
    );
    let mut negm = r.clone();
    negm.l_multiplier = -negm.l_multiplier;
    negm.c = -negm.c;
    vjps.push(
        vjp(
            "negative-c-and-m",
            "sign(c) and sign(m) enter ∂/∂c and ∂/∂m",
            &negm,
            range(12),
            range(12),
            cot(3, 12, 9),
        )
        .flags(&[
            Flag::NegativeC,
            Flag::NegativeMultiplier,
            Flag::RandomParams,
            Flag::FutureKeys,
        ]),
    );
    // ε large enough that a backward leaving it out (or putting it elsewhere than the forward)
    // shows at f32 tolerance: at 10⁻⁶ it moves ∂/∂c and ∂/∂m by about 10⁻⁶ of themselves.
    let mut large = r.clone();
    large.eps = 0.1;
    vjps.push(
        vjp(
            "large-eps",
            "ε = 0.1 in the normaliser enters ∂/∂c and ∂/∂m",
            &large,
            range(12),
            range(12),
            cot(3, 12, 10),
        )
        .clauses(&["fire.normalizer"])
        .flags(&[Flag::LargeEps, Flag::RandomParams, Flag::FutureKeys]),
    );
    let mut rows = Vec::new();
    for (n, at) in [[0usize, 11, 3], [2, 5, 5], [1, 9, 0]]
        .into_iter()
        .enumerate()
    {
        rows.push(
            vjp(
                &format!("jacobian-row-{n}"),
                "a one-hot cotangent: ∂b_h(i, j)/∂(θ, c, m) for one element",
                &r,
                range(12),
                range(12),
                one_hot([3, 12, 12], at),
            )
            .flags(&[Flag::OneHotCotangent, Flag::RandomParams, Flag::FutureKeys]),
        );
    }
    // Kinks: L is exactly 8, so query 8 ties max(i, L); a zero hidden bias puts the ReLU's
    // pre-activation exactly at 0 on the diagonal (x = 0).
    let mut k = random_fire(3, 6, 1, 630, Activation::Relu);
    k.l_multiplier = 1.0;
    k.mlp.layers[0].bias[0] = 0.0;
    k.mlp.layers[0].bias[1] = 0.0;
    let kinks = vec![
        vjp(
            "threshold-tie",
            "query at exactly i = L: d max(i, L)/dL = 1/2",
            &k,
            vec![7, 8, 9],
            range(10),
            random_tensor(vec![3, 3, 10], 11),
        )
        .clauses(&["grad.kinks"])
        .flags(&[Flag::Kink, Flag::ThresholdBoundary, Flag::FutureKeys]),
        vjp(
            "relu-at-zero",
            "diagonal keys give x = 0 where two hidden units sit at their kink",
            &k,
            range(5),
            range(5),
            cot(3, 5, 12),
        )
        .clauses(&["grad.kinks"])
        .flags(&[Flag::Kink, Flag::FutureKeys]),
    ];
    Ok(vec![
        file(
            "fire-grad",
            "vjp",
            "gradients of Σ G ⊙ b with respect to θ, c and m",
            vjps,
        )?,
        file(
            "fire-grad",
            "jacobian",
            "single Jacobian rows through one-hot cotangents",
            rows,
        )?,
        file(
            "fire-grad",
            "kinks",
            "the sub-gradient convention at every kink",
            kinks,
        )?,
    ])
}
