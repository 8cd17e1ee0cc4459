//! The baselines the catalogue has mistakes for (official T5, Alibi, Kerple) and causal
//! attention, in the mutant's arithmetic, each mistake a switch. spec: [variants.catalogue]

use super::real::Real;

/// Every baseline and attention mistake this transcription models, by catalogue name.
pub const MODELLED: &[&str] = &[
    "t5-binary64-buckets",
    "t5-bidirectional-swapped",
    "t5-distance-reversed",
    "t5-future-mirrored",
    "t5-log-bucket-rounded",
    "alibi-slopes-geometric",
    "alibi-slopes-from-zero",
    "kerple-log-power-swapped",
    "kerple-signed-distance",
    "bias-before-scaling",
    "no-causal-mask",
    "bias-dropped",
];

/// `_relative_position_bucket` of T5's code, in binary32 as the code computes it (whatever the
/// mutant's own arithmetic), with its mistakes. spec: [t5.bucket.official.float]
pub fn t5_bucket(
    num_buckets: i64,
    max_distance: f64,
    bidirectional: bool,
    i: i64,
    j: i64,
    mistake: &str,
) -> i64 {
    let rel = if mistake == "t5-distance-reversed" {
        i - j
    } else {
        j - i
    };
    let bidirectional = bidirectional != (mistake == "t5-bidirectional-swapped");
    let mirror = mistake == "t5-future-mirrored";
    let mut n = -rel;
    let mut buckets = num_buckets;
    let mut offset = 0;
    if bidirectional {
        buckets /= 2;
        if n < 0 && !mirror {
            offset = buckets;
        }
        n = n.abs();
    } else if mirror {
        n = n.abs();
    } else {
        n = n.max(0);
    }
    let exact = buckets / 2;
    if n < exact {
        return offset + n;
    }
    let span = (max_distance / exact as f64).ln();
    let t = if mistake == "t5-binary64-buckets" {
        (n as f64 / exact as f64).ln() / span * (buckets - exact) as f64
    } else {
        let ratio = n as f32 / exact as f32;
        f64::from(ratio.ln() / span as f32 * (buckets - exact) as f32)
    };
    let step = if mistake == "t5-log-bucket-rounded" {
        t.round()
    } else {
        t.trunc()
    };
    offset + (exact + step as i64).min(buckets - 1)
}

/// The standard Alibi slopes for `heads`, with their mistakes. spec: [alibi.slopes]
pub fn alibi_slopes<F: Real>(heads: usize, mistake: &str) -> Vec<F> {
    let h = heads as f64;
    match mistake {
        "alibi-slopes-geometric" => (1..=heads)
            .map(|n| F::of(-8.0 * n as f64 / h).exp2())
            .collect(),
        "alibi-slopes-from-zero" => (0..heads)
            .map(|n| F::of(-8.0 * n as f64 / h).exp2())
            .collect(),
        _ => {
            // The closest power of two, then every other slope of twice as many heads.
            let p = 1usize << heads.ilog2();
            let first = (1..=p).map(|n| F::of(-8.0 * n as f64 / p as f64).exp2());
            let rest =
                (1..=heads - p).map(|m| F::of(-8.0 * (2 * m - 1) as f64 / (2 * p) as f64).exp2());
            first.chain(rest).collect()
        }
    }
}

/// Kerple at signed distance `i − j`, log or power form, with its mistakes.
/// spec: [kerple.log], [kerple.power]
pub fn kerple<F: Real>(log: bool, r1: F, r2: F, i: F, j: F, mistake: &str) -> F {
    let d = if mistake == "kerple-signed-distance" {
        i - j
    } else {
        (i - j).abs()
    };
    let log = log != (mistake == "kerple-log-power-swapped");
    if log {
        -(r1 * (r2 * d).ln_1p())
    } else {
        -(r1 * d.powf(r2))
    }
}

/// Causal attention of one head, `softmax(q·kᵀ/√d + b)·v` over the keys at or before each query,
/// row-major `[Q, d_v]`; the bias placement mistake divides the bias too. spec: [attn.logits]
#[allow(clippy::too_many_arguments)]
pub fn attend<F: Real>(
    q: &[F],
    k: &[F],
    v: &[F],
    bias: &[F],
    queries: &[u64],
    keys: &[u64],
    dim: usize,
    dv: usize,
    mistake: &str,
) -> Vec<F> {
    let (nq, nk) = (queries.len(), keys.len());
    let scale = F::of(1.0) / F::of(dim as f64).sqrt();
    let mut out = vec![F::of(0.0); nq * dv];
    for r in 0..nq {
        let mut logits: Vec<(usize, F)> = Vec::new();
        for c in (0..nk).filter(|&c| mistake == "no-causal-mask" || keys[c] <= queries[r]) {
            let mut s = F::of(0.0);
            for e in 0..dim {
                s = s + q[r * dim + e] * k[c * dim + e];
            }
            let b = if mistake == "bias-dropped" {
                F::of(0.0)
            } else {
                bias[r * nk + c]
            };
            let logit = if mistake == "bias-before-scaling" {
                (s + b) * scale
            } else {
                s * scale + b
            };
            logits.push((c, logit));
        }
        let top = logits
            .iter()
            .fold(F::of(f64::NEG_INFINITY), |a, &(_, l)| a.max(l));
        let weights: Vec<(usize, F)> = logits.iter().map(|&(c, l)| (c, (l - top).exp())).collect();
        let total = weights.iter().fold(F::of(0.0), |a, &(_, w)| a + w);
        for (c, w) in weights {
            for e in 0..dv {
                out[r * dv + e] = out[r * dv + e] + w / total * v[c * dv + e];
            }
        }
    }
    out
}
