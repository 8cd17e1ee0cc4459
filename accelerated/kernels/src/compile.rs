//! Exact compilation of a piecewise-linear f_θ into breakpoints and per-head affine pieces.
//!
//! A ReLU MLP of one scalar `x` is continuous and piecewise linear: inside any interval where
//! no unit changes sign, every layer is an affine function of `x`. Compilation finds those
//! intervals layer by layer. On each current interval, the pre-activations of the next layer
//! are affine in `x` (slope α, intercept β, obtained by pushing the interval's activation
//! pattern through the weights), so each of its ReLU units can only switch at `x = −β/α`; those
//! roots that fall strictly inside the interval become new breakpoints. With one hidden layer
//! this gives the familiar `x = −b_k/w_k`; with two, every second-layer unit adds its own
//! crossings per first-layer interval. All of this runs in f64; the pieces are then stored in
//! f32 for the kernels (and f64 for checks).
//!
//! The compiled form covers all of R (FIRE only ever feeds `x ≥ 0`, and `x ≤ 1` on the causal
//! part, but keys after the query give `x > 1`, and nothing is gained by cutting the domain).
//!
//! **When it is compiled.** Compilation costs O(depth·W²·segments) flops — microseconds for
//! Appendix E's width 32. Evaluation and inference compile once per call from the loaded
//! weights. Training recompiles at every forward call of the fused training op
//! (`fire-accelerated`'s `attention::fused_train`, through [`crate::PackedFire`]), i.e. after
//! every optimiser step, from the current weights; its backward pass differentiates the
//! compiled form segment by segment ([`crate::fire_grad`]), so the compilation never needs a
//! gradient of its own.
//!
//! spec: [fire.mlp], [fire.activation]

use fire_vocabulary::Activation;

use crate::error::{Error, Result};
use crate::mlp::Mlp;

/// f_θ compiled: sorted breakpoints `t_0 < … < t_{B−1}` and, for every segment and head, the
/// affine piece `f_h(x) = slope·x + intercept`. Segment `s` covers `[t_{s−1}, t_s)` (with
/// `t_{−1} = −∞`, `t_B = +∞`), so there are `B + 1` segments.
#[derive(Debug, Clone, PartialEq)]
pub struct PiecewiseLinear {
    breakpoints: Vec<f64>,
    heads: usize,
    /// Head-major `[H, B + 1]`.
    slope: Vec<f64>,
    /// Head-major `[H, B + 1]`.
    intercept: Vec<f64>,
    slope32: Vec<f32>,
    intercept32: Vec<f32>,
}

/// The affine map `x ↦ α·x + β` of every unit of one layer, on one interval.
#[derive(Debug, Clone)]
struct Affine {
    alpha: Vec<f64>,
    beta: Vec<f64>,
}

impl PiecewiseLinear {
    /// Compiles `mlp` exactly. Fails when an activation is not piecewise linear (GeLU): such an
    /// MLP is evaluated directly instead.
    pub fn compile(mlp: &Mlp) -> Result<Self> {
        if !mlp.is_piecewise_linear() {
            return Err(Error::Invalid {
                what: "MLP compilation".into(),
                reason: "only piecewise-linear activations (ReLU, identity) compile exactly".into(),
            });
        }
        let layers = mlp.layers.len();
        let mut breakpoints: Vec<f64> = Vec::new();
        // Refine once per layer whose output goes through a ReLU.
        for n in 0..layers {
            let sigma = activation_after(mlp, n);
            if sigma != Some(Activation::Relu) {
                continue;
            }
            let mut roots = Vec::new();
            for (lo, hi) in intervals(&breakpoints) {
                let z = pre_activation(mlp, n, representative(lo, hi));
                for (a, b) in z.alpha.iter().zip(&z.beta) {
                    if *a != 0.0 {
                        let r = -b / a;
                        if r > lo && r < hi && r.is_finite() {
                            roots.push(r);
                        }
                    }
                }
            }
            breakpoints.extend(roots);
            breakpoints.sort_by(f64::total_cmp);
            breakpoints.dedup();
        }
        let heads = mlp.heads();
        let segments = breakpoints.len() + 1;
        let mut slope = vec![0.0; heads * segments];
        let mut intercept = vec![0.0; heads * segments];
        for (s, (lo, hi)) in intervals(&breakpoints).enumerate() {
            let out = output(mlp, representative(lo, hi));
            for h in 0..heads {
                slope[h * segments + s] = out.alpha[h];
                intercept[h * segments + s] = out.beta[h];
            }
        }
        Ok(Self {
            slope32: slope.iter().map(|&v| v as f32).collect(),
            intercept32: intercept.iter().map(|&v| v as f32).collect(),
            breakpoints,
            heads,
            slope,
            intercept,
        })
    }

    /// `H`.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// The sorted breakpoints.
    pub fn breakpoints(&self) -> &[f64] {
        &self.breakpoints
    }

    /// `B + 1`.
    pub fn segments(&self) -> usize {
        self.breakpoints.len() + 1
    }

    /// The segment holding `x`: the number of breakpoints `≤ x`.
    pub fn segment(&self, x: f64) -> usize {
        self.breakpoints.partition_point(|&t| t <= x)
    }

    /// `(slope, intercept)` of head `h` on segment `s`, in f32 (what the kernels use).
    pub fn piece(&self, h: usize, s: usize) -> (f32, f32) {
        let i = h * self.segments() + s;
        (self.slope32[i], self.intercept32[i])
    }

    /// The slope of head `h` on segment `s`, in f64.
    pub fn slope(&self, h: usize, s: usize) -> f64 {
        self.slope[h * self.segments() + s]
    }

    /// Head `h`'s f32 slopes and intercepts, one per segment.
    pub fn head_pieces(&self, h: usize) -> (&[f32], &[f32]) {
        let s = self.segments();
        (
            &self.slope32[h * s..(h + 1) * s],
            &self.intercept32[h * s..(h + 1) * s],
        )
    }

    /// f_θ(x) for every head, in f64: one segment lookup and one multiply-add per head.
    pub fn eval(&self, x: f64) -> Vec<f64> {
        let s = self.segment(x);
        let n = self.segments();
        (0..self.heads)
            .map(|h| self.slope[h * n + s] * x + self.intercept[h * n + s])
            .collect()
    }
}

/// The activation applied to layer `n`'s output, if any.
fn activation_after(mlp: &Mlp, n: usize) -> Option<Activation> {
    if n + 1 < mlp.layers.len() {
        Some(mlp.activation)
    } else {
        mlp.final_activation
    }
}

/// The open intervals between consecutive breakpoints, with infinite ends.
pub(crate) fn intervals(breakpoints: &[f64]) -> impl Iterator<Item = (f64, f64)> + '_ {
    let n = breakpoints.len();
    (0..=n).map(move |s| {
        let lo = if s == 0 {
            f64::NEG_INFINITY
        } else {
            breakpoints[s - 1]
        };
        let hi = if s == n {
            f64::INFINITY
        } else {
            breakpoints[s]
        };
        (lo, hi)
    })
}

/// A point strictly inside `(lo, hi)`: where the interval's activation pattern is read.
pub(crate) fn representative(lo: f64, hi: f64) -> f64 {
    match (lo.is_finite(), hi.is_finite()) {
        (true, true) => lo + 0.5 * (hi - lo),
        (false, true) => hi - 1.0 - hi.abs(),
        (true, false) => lo + 1.0 + lo.abs(),
        (false, false) => 0.0,
    }
}

/// Layer `n`'s pre-activation as an affine map of `x`, valid on the interval holding `at`
/// (every earlier layer's units keep their sign on that interval).
fn pre_activation(mlp: &Mlp, n: usize, at: f64) -> Affine {
    let mut cur = Affine {
        alpha: vec![1.0],
        beta: vec![0.0],
    };
    for (m, layer) in mlp.layers.iter().enumerate().take(n + 1) {
        let mut next = Affine {
            alpha: Vec::with_capacity(layer.outputs),
            beta: Vec::with_capacity(layer.outputs),
        };
        for o in 0..layer.outputs {
            let w = layer.row(o);
            let a: f64 = w.iter().zip(&cur.alpha).map(|(w, a)| w * a).sum();
            let b: f64 = w.iter().zip(&cur.beta).map(|(w, b)| w * b).sum::<f64>() + layer.bias[o];
            next.alpha.push(a);
            next.beta.push(b);
        }
        if m == n {
            return next;
        }
        if activation_after(mlp, m) == Some(Activation::Relu) {
            for (a, b) in next.alpha.iter_mut().zip(next.beta.iter_mut()) {
                if *a * at + *b <= 0.0 {
                    *a = 0.0;
                    *b = 0.0;
                }
            }
        }
        cur = next;
    }
    cur
}

/// The network's output (after any final activation) as an affine map on the interval of `at`.
fn output(mlp: &Mlp, at: f64) -> Affine {
    let last = mlp.layers.len() - 1;
    let mut out = pre_activation(mlp, last, at);
    if mlp.final_activation == Some(Activation::Relu) {
        for (a, b) in out.alpha.iter_mut().zip(out.beta.iter_mut()) {
            if *a * at + *b <= 0.0 {
                *a = 0.0;
                *b = 0.0;
            }
        }
    }
    out
}
