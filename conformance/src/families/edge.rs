//! Family `edge/`: query 0, the threshold boundary, huge positions, tiny and negative c, a
//! negative multiplier, and position lists that are not `0..n`; the same conditions again for
//! a two-hidden-layer f_θ. spec: [vec.families]

use fire_reference::fire::Activation;

use super::common::{default_fire, file, fire_enc, random_fire, random_positions, range, Draft};
use crate::vectors::flags::Flag;
use crate::vectors::format::VectorFile;

const CORE: &[&str] = &[
    "fire.bias",
    "fire.input",
    "fire.normalizer",
    "conv.positions",
    "conv.layout",
];

/// `edge/`.
pub fn edge() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let d = default_fire(4, 16, 1, 21);
    let r = random_fire(4, 8, 1, 701, Activation::Relu);
    let mut l8 = random_fire(4, 8, 1, 702, Activation::Relu);
    l8.l_multiplier = 1.0; // L = 8 exactly
    let positions = vec![
        Draft::bias(
            "query-zero",
            "query 0 against keys 0..4: ψ(0)/(ψ(L)+ε) on the diagonal, future keys beyond",
            fire_enc(&r),
            vec![0],
            range(4),
        )
        .clauses(CORE)
        .clauses(&["conv.future"])
        .flags(&[Flag::QueryZero, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "threshold-boundary",
            "queries L−1, L, L+1 with L = 8 exactly",
            fire_enc(&l8),
            vec![7, 8, 9],
            range(10),
        )
        .clauses(CORE)
        .clauses(&["fire.threshold", "conv.future"])
        .flags(&[Flag::ThresholdBoundary, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "threshold-boundary-default",
            "queries 511, 512, 513 at L = 512",
            fire_enc(&d),
            vec![511, 512, 513],
            vec![0, 1, 2, 256, 510, 511, 512, 513],
        )
        .clauses(CORE)
        .clauses(&["fire.threshold", "fire.defaults", "conv.indexing"])
        .flags(&[
            Flag::ThresholdBoundary,
            Flag::DefaultInit,
            Flag::FutureKeys,
            Flag::NonContiguous,
        ]),
        Draft::bias(
            "large-positions",
            "positions up to 10^6, three orders of magnitude past L",
            fire_enc(&d),
            vec![999_999, 1_000_000],
            vec![0, 1, 10, 1000, 500_000, 999_998, 999_999, 1_000_000],
        )
        .clauses(CORE)
        .flags(&[Flag::LargePositions, Flag::DefaultInit, Flag::NonContiguous]),
        Draft::bias(
            "huge-positions",
            "positions between 10^6 and 2^53, the largest an f64 holds exactly (f64 only: f32 rounds positions above 2^24)",
            fire_enc(&d),
            vec![1 << 33, 1 << 52, 1 << 53],
            vec![0, 1, (1 << 33) - 1, 1 << 33, (1 << 52) - 1, (1 << 53) - 1, 1 << 53],
        )
        .clauses(CORE)
        .clauses(&["conv.future"])
        .flags(&[
            Flag::HugePositions,
            Flag::DefaultInit,
            Flag::NonContiguous,
            Flag::FutureKeys,
        ])
        .profile("f64"),
        Draft::bias(
            "kv-cache-row",
            "one decoding step: query 37 against keys 0..=37",
            fire_enc(&r),
            vec![37],
            range(38),
        )
        .clauses(CORE)
        .flags(&[Flag::KvCache])
        .profile("bf16"),
        Draft::bias(
            "non-contiguous",
            "gapped queries and keys",
            fire_enc(&r),
            vec![3, 9, 20, 21, 40],
            vec![0, 2, 3, 9, 15, 21, 33, 40],
        )
        .clauses(CORE)
        .clauses(&["conv.future"])
        .flags(&[Flag::NonContiguous, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "unsorted-repeated",
            "unsorted lists with a repeated position",
            fire_enc(&r),
            vec![12, 3, 7, 3, 0],
            vec![7, 0, 12, 5, 5, 1],
        )
        .clauses(CORE)
        .clauses(&["conv.future"])
        .flags(&[Flag::Unsorted, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "randomised-positions",
            "sorted random positions below 4096, as randomised-position training draws",
            fire_enc(&r),
            random_positions(10, 4096, 3),
            random_positions(10, 4096, 3),
        )
        .clauses(CORE)
        .clauses(&["conv.future"])
        .flags(&[Flag::RandomPositions, Flag::NonContiguous, Flag::FutureKeys]),
        Draft::bias(
            "sliding-window",
            "queries 60..=63 against the window of keys 40..=63 (a KV cache past its oldest keys): the normaliser is the query's, whatever the farthest key",
            fire_enc(&r),
            (60..64).collect(),
            (40..64).collect(),
        )
        .clauses(CORE)
        .clauses(&["conv.future"])
        .flags(&[Flag::SlidingWindow, Flag::FutureKeys])
        .profile("bf16"),
    ];
    let mut tiny = r.clone();
    tiny.c = 1e-3;
    let mut tiny_neg = d.clone();
    tiny_neg.c = -1e-4;
    let mut neg_c = r.clone();
    neg_c.c = -0.7;
    let mut neg_m = r.clone();
    neg_m.l_multiplier = -0.75;
    let mut neg_both = d.clone();
    neg_both.c = -0.1;
    neg_both.l_multiplier = -1.0;
    let params = vec![
        Draft::bias(
            "tiny-c",
            "c = 1e-3 with a small L: ψ(L) ≈ 1e-2, so ε moves x by ~1e-4 and where ε goes shows in f64",
            fire_enc(&tiny),
            range(12),
            range(12),
        )
        .clauses(CORE)
        .clauses(&["fire.psi", "conv.future"])
        .clauses(&["num.compare", "num.profiles"])
        .flags(&[Flag::TinyC, Flag::RandomParams, Flag::FutureKeys])
        .profile("f64"),
        Draft::bias(
            "tiny-negative-c",
            "c = −1e-4 at default init: ψ(L) ≈ 0.05, so ε moves x by ~2e-5 and where ε goes shows in f64",
            fire_enc(&tiny_neg),
            range(8),
            range(8),
        )
        .clauses(CORE)
        .clauses(&["fire.psi", "conv.future"])
        .flags(&[
            Flag::TinyC,
            Flag::NegativeC,
            Flag::DefaultInit,
            Flag::FutureKeys,
        ])
        .profile("f64"),
        Draft::bias(
            "negative-c",
            "c = −0.7 equals c = 0.7",
            fire_enc(&neg_c),
            range(12),
            range(12),
        )
        .clauses(CORE)
        .clauses(&["fire.psi", "conv.future"])
        .flags(&[Flag::NegativeC, Flag::RandomParams, Flag::FutureKeys])
        .profile("bf16"),
        Draft::bias(
            "negative-multiplier",
            "m = −0.75: L = |m·L_init| = 6",
            fire_enc(&neg_m),
            range(12),
            range(12),
        )
        .clauses(CORE)
        .clauses(&["fire.threshold", "conv.future"])
        .flags(&[
            Flag::NegativeMultiplier,
            Flag::RandomParams,
            Flag::FutureKeys,
        ])
        .profile("bf16"),
        Draft::bias(
            "negative-c-and-multiplier-default",
            "c = −0.1, m = −1 at default init equal the defaults",
            fire_enc(&neg_both),
            vec![0, 5, 511, 512, 700],
            vec![0, 1, 5, 511, 512, 700],
        )
        .clauses(CORE)
        .clauses(&["fire.psi", "fire.threshold"])
        .flags(&[
            Flag::NegativeC,
            Flag::NegativeMultiplier,
            Flag::DefaultInit,
            Flag::FutureKeys,
            Flag::NonContiguous,
        ]),
    ];
    Ok(vec![
        file(
            "edge",
            "positions",
            "boundary and irregular position lists",
            positions,
        )?,
        file(
            "edge",
            "parameters",
            "tiny and negative c, negative multiplier",
            params,
        )?,
        depth_two()?,
    ])
}

/// `edge/depth-2`: the edge conditions once more with two hidden layers, Appendix B's
/// approximator ([fire.defaults] makes both depths first-class). A module is built for one
/// depth and skips the other's cases, so without these a two-layer module with, say, `c`
/// taken without |·| would meet no case that shows it.
fn depth_two() -> crate::error::Result<(String, VectorFile)> {
    let base = random_fire(4, 8, 2, 711, Activation::Relu);
    let with = |edit: &dyn Fn(&mut fire_reference::fire::Fire)| {
        let mut f = base.clone();
        edit(&mut f);
        fire_enc(&f)
    };
    let flags = |extra: &[Flag]| {
        let mut all = vec![Flag::Depth2, Flag::RandomParams];
        all.extend_from_slice(extra);
        all
    };
    let cases = vec![
        Draft::bias(
            "negative-c",
            "two hidden layers, c = −0.7 equals c = 0.7",
            with(&|f| f.c = -0.7),
            range(12),
            range(12),
        )
        .clauses(CORE)
        .clauses(&["fire.psi", "fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::NegativeC, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "negative-multiplier",
            "two hidden layers, m = −0.75: L = |m·L_init| = 6",
            with(&|f| f.l_multiplier = -0.75),
            range(12),
            range(12),
        )
        .clauses(CORE)
        .clauses(&["fire.threshold", "fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::NegativeMultiplier, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "threshold-boundary",
            "two hidden layers, queries L−1, L, L+1 with L = 8 exactly",
            with(&|f| f.l_multiplier = 1.0),
            vec![7, 8, 9],
            range(10),
        )
        .clauses(CORE)
        .clauses(&["fire.threshold", "fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::ThresholdBoundary, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "eps-half-small-c",
            "two hidden layers, ε = 0.5 above ψ(L) = ln(1.4) ≈ 0.34 (c = 0.05, L = 8): where ε enters differs by a large fraction",
            with(&|f| {
                f.c = 0.05;
                f.eps = 0.5;
                f.l_multiplier = 1.0;
            }),
            range(16),
            range(16),
        )
        .clauses(CORE)
        .clauses(&["fire.params", "fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::LargeEps, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "query-zero",
            "two hidden layers, query 0 against keys 0..4",
            with(&|_| {}),
            vec![0],
            range(4),
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::QueryZero, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "kv-cache-row",
            "two hidden layers, one decoding step: query 37 against keys 0..=37",
            with(&|_| {}),
            vec![37],
            range(38),
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.depth"])
        .flags(&flags(&[Flag::KvCache]))
        .profile("bf16"),
        Draft::bias(
            "sliding-window",
            "two hidden layers, queries 60..=63 against the window of keys 40..=63",
            with(&|_| {}),
            (60..64).collect(),
            (40..64).collect(),
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::SlidingWindow, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "non-contiguous",
            "two hidden layers, gapped queries and keys",
            with(&|_| {}),
            vec![3, 9, 20, 21, 40],
            vec![0, 2, 3, 9, 15, 21, 33, 40],
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::NonContiguous, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "unsorted-repeated",
            "two hidden layers, unsorted lists with a repeated position",
            with(&|_| {}),
            vec![12, 3, 7, 3, 0],
            vec![7, 0, 12, 5, 5, 1],
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::Unsorted, Flag::FutureKeys]))
        .profile("bf16"),
        Draft::bias(
            "large-positions",
            "two hidden layers, positions up to 10^6",
            with(&|_| {}),
            vec![999_999, 1_000_000],
            vec![0, 1, 10, 1000, 500_000, 999_998, 999_999, 1_000_000],
        )
        .clauses(CORE)
        .clauses(&["fire.ablation.depth"])
        .flags(&flags(&[Flag::LargePositions, Flag::NonContiguous])),
        Draft::bias(
            "large-parameters",
            "two hidden layers, c = 7.5, m = 2.5 (L = 20 above every query) and first-layer pre-activations up to ~50: nothing clipped",
            with(&|f| {
                f.c = 7.5;
                f.l_multiplier = 2.5;
                f.mlp.layers[0].weight.iter_mut().for_each(|w| *w *= 20.0);
                f.mlp.layers[0].bias.iter_mut().for_each(|b| *b *= 20.0);
            }),
            range(16),
            range(16),
        )
        .clauses(CORE)
        .clauses(&["fire.params", "fire.activation", "fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::LargePreactivations, Flag::FutureKeys])),
        Draft::bias(
            "tiny-c",
            "two hidden layers, c = 1e-3: ψ(L) ≈ 1e-2, so where ε goes shows in f64",
            with(&|f| f.c = 1e-3),
            range(12),
            range(12),
        )
        .clauses(CORE)
        .clauses(&["fire.psi", "fire.ablation.depth", "conv.future"])
        .flags(&flags(&[Flag::TinyC, Flag::FutureKeys]))
        .profile("f64"),
    ];
    file(
        "edge",
        "depth-2",
        "the edge conditions for an MLP with two hidden layers",
        cases,
    )
}
