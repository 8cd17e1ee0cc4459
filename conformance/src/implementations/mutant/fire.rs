//! FIRE in the mutant's arithmetic, written as an implementer would write it, with every
//! catalogued FIRE mistake as a switch: `b(i, j) = f_θ( ψ(|i − j|) / (ψ(max(i, L)) + ε) )`.
//!
//! This is deliberately not the reference's code: it is a second, independent transcription of
//! each mistake, so the mutation test checks that the catalogue's description of a mistake is
//! what real code making it computes, in f32 as in f64. spec: [variants.catalogue]

use fire_reference::fire::{Activation, Fire, Threshold, Transform};

use super::real::Real;

/// Every FIRE mistake this transcription models, by catalogue name.
pub const MODELLED: &[&str] = &[
    "one-based-positions",
    "positions-as-indices",
    "signed-distance",
    "reversed-distance",
    "future-distance-clamped",
    "psi-identity",
    "log-without-plus-one",
    "log-base-2",
    "log-base-10",
    "no-abs-c",
    "no-abs-c-in-distance",
    "c-softplus",
    "c-exp",
    "c-clamped",
    "no-abs-threshold",
    "multiplier-ignored",
    "threshold-ignored",
    "threshold-as-min",
    "normalize-by-threshold",
    "normalize-by-length",
    "normalize-by-key",
    "normalize-by-distance",
    "normalize-by-farthest-key",
    "normalizer-missing",
    "eps-missing",
    "eps-inside-log",
    "eps-on-threshold",
    "eps-as-floor",
    "eps-twice",
    "eps-numerator-only",
    "eps-outside-ratio",
    "eps-everywhere",
    "eps-inside-psi",
    "first-module-reused",
    "difference-of-logs",
    "no-hidden-activation",
    "final-relu",
    "hidden-bias-missing",
    "output-bias-missing",
    "weights-column-major",
    "gelu-tanh",
    "gelu-for-relu",
    "gelu-tanh-for-relu",
    "relu-for-gelu",
    "heads-reversed",
    "layout-qkh",
];

#[derive(Clone, Copy, PartialEq)]
enum Act<F> {
    Relu,
    Gelu,
    GeluTanh,
    Identity,
    Heaviside,
    Power(F),
    Log1p,
    Cos,
}

impl<F: Real> Act<F> {
    fn of(a: Activation) -> Self {
        match a {
            Activation::Relu => Act::Relu,
            Activation::Gelu => Act::Gelu,
            Activation::Identity => Act::Identity,
            Activation::Heaviside => Act::Heaviside,
            Activation::Power(p) => Act::Power(F::of(p)),
            Activation::Log1p => Act::Log1p,
            Activation::Cos => Act::Cos,
        }
    }

    fn apply(self, z: F) -> F {
        let zero = F::of(0.0);
        let one = F::of(1.0);
        let half = F::of(0.5);
        match self {
            Act::Relu => z.max(zero),
            Act::Gelu => half * z * (one + (z / F::of(std::f64::consts::SQRT_2)).erf()),
            Act::GeluTanh => {
                let k = F::of((2.0 / std::f64::consts::PI).sqrt());
                half * z * (one + (k * (z + F::of(0.044_715) * z * z * z)).tanh())
            }
            Act::Identity => z,
            Act::Heaviside => {
                if z >= zero {
                    one
                } else if z < zero {
                    zero
                } else {
                    z
                }
            }
            Act::Power(p) => z.max(zero).powf(p),
            Act::Log1p => z.ln_1p(),
            Act::Cos => z.cos(),
        }
    }
}

/// One FIRE module in the mutant's arithmetic.
pub struct Module<F> {
    /// `(W [out][in], b [out])` per layer.
    layers: Vec<(Vec<Vec<F>>, Vec<F>)>,
    activation: Act<F>,
    final_activation: Option<Act<F>>,
    c: F,
    l_init: F,
    m: F,
    eps: F,
    log: bool,
    threshold: Threshold,
}

impl<F: Real> Module<F> {
    /// The reference's parameters, rounded to `F` as a module loading a state dict would.
    pub fn new(f: &Fire) -> Self {
        Self {
            layers: f
                .mlp
                .layers
                .iter()
                .map(|l| {
                    let w = (0..l.weight.nrows())
                        .map(|r| {
                            (0..l.weight.ncols())
                                .map(|c| F::of(l.weight[(r, c)]))
                                .collect()
                        })
                        .collect();
                    (w, l.bias.iter().map(|&b| F::of(b)).collect())
                })
                .collect(),
            activation: Act::of(f.mlp.activation),
            final_activation: f.mlp.final_activation.map(Act::of),
            c: F::of(f.c),
            l_init: F::of(f.l_init),
            m: F::of(f.l_multiplier),
            eps: F::of(f.eps),
            log: f.transform == Transform::Log,
            threshold: f.threshold,
        }
    }

    fn heads(&self) -> usize {
        self.layers.last().map_or(0, |(w, _)| w.len())
    }

    /// f_θ(x) with the MLP mistakes.
    fn mlp(&self, x: F, mistake: &str) -> Vec<F> {
        let zero = F::of(0.0);
        let last = self.layers.len() - 1;
        let hidden = match (mistake, self.activation) {
            ("no-hidden-activation", _) => Act::Identity,
            ("gelu-for-relu", Act::Relu) => Act::Gelu,
            ("gelu-tanh-for-relu", Act::Relu) => Act::GeluTanh,
            ("relu-for-gelu", Act::Gelu) => Act::Relu,
            ("gelu-tanh", Act::Gelu) => Act::GeluTanh,
            (_, a) => a,
        };
        let output = match (mistake, self.final_activation) {
            ("final-relu", _) => Some(Act::Relu),
            ("gelu-tanh", Some(Act::Gelu)) => Some(Act::GeluTanh),
            (_, a) => a,
        };
        let mut a = vec![x];
        for (n, (w, b)) in self.layers.iter().enumerate() {
            let (rows, cols) = (w.len(), a.len());
            let weight = |r: usize, c: usize| {
                if mistake == "weights-column-major" {
                    // The row-major buffer read column-major.
                    let flat = c * rows + r;
                    w[flat / cols][flat % cols]
                } else {
                    w[r][c]
                }
            };
            let drop_bias = (mistake == "hidden-bias-missing" && n < last)
                || (mistake == "output-bias-missing" && n == last);
            let sigma = if n < last { Some(hidden) } else { output };
            a = (0..rows)
                .map(|r| {
                    let mut z = if drop_bias { zero } else { b[r] };
                    for (c, &ac) in a.iter().enumerate() {
                        z = z + weight(r, c) * ac;
                    }
                    sigma.map_or(z, |s| s.apply(z))
                })
                .collect();
        }
        a
    }

    /// b(i, j) at real positions, with the pair-level mistakes; `far` is the query's largest
    /// causal distance to the keys it is given (what `normalize-by-farthest-key` reads).
    fn pair(&self, i: F, j: F, length: F, far: F, mistake: &str) -> Vec<F> {
        let (zero, one) = (F::of(0.0), F::of(1.0));
        let (i, j) = if mistake == "one-based-positions" {
            (i + one, j + one)
        } else {
            (i, j)
        };
        let scale_c = match mistake {
            "no-abs-c" => self.c,
            "c-softplus" => self.c.max(zero) + (-self.c.abs()).exp().ln_1p(),
            "c-exp" => self.c.exp(),
            "c-clamped" => self.c.max(F::of(1e-4)),
            _ => self.c.abs(),
        };
        let psi = |x: F| {
            if !self.log {
                return x;
            }
            match mistake {
                "psi-identity" => x,
                "log-without-plus-one" => (scale_c * x).ln(),
                "log-base-2" => (scale_c * x + one).log2(),
                "log-base-10" => (scale_c * x + one).log10(),
                _ => (scale_c * x).ln_1p(),
            }
        };
        // The distance's ψ, which one mistake computes with c itself.
        let psi_distance = |x: F| match mistake {
            "no-abs-c-in-distance" if self.log => (self.c * x).ln_1p(),
            _ => psi(x),
        };
        let l = match self.threshold {
            Threshold::Disabled => None,
            _ => Some(match mistake {
                "no-abs-threshold" => self.m * self.l_init,
                "multiplier-ignored" => self.l_init,
                _ => (self.m * self.l_init).abs(),
            }),
        };
        let thr = |a: F, l: Option<F>| l.map_or(a, |l| a.max(l));
        let d = match mistake {
            "signed-distance" => i - j,
            "reversed-distance" => j - i,
            "future-distance-clamped" => (i - j).max(zero),
            _ => (i - j).abs(),
        };
        let arg = match mistake {
            "threshold-ignored" => i,
            "threshold-as-min" => l.map_or(i, |l| i.min(l)),
            "normalize-by-threshold" => l.unwrap_or(i),
            "normalize-by-length" => thr(length, l),
            "normalize-by-key" => thr(j, l),
            // Appendix E's `torch.max(rel, L)` on the signed distance, ψ taking |c·x|.
            "normalize-by-distance" => thr(i - j, l).abs(),
            "normalize-by-farthest-key" => thr(far, l),
            "eps-on-threshold" => thr(i, l.map(|l| l + self.eps)),
            _ => thr(i, l),
        };
        let eps = self.eps;
        let num = psi_distance(d);
        let x = match mistake {
            "normalizer-missing" => num,
            "eps-missing" | "eps-on-threshold" => num / psi(arg),
            "eps-inside-log" => num / psi(arg + eps),
            "eps-as-floor" => num / psi(arg).max(eps),
            "eps-twice" => (num + eps) / (psi(arg) + eps),
            "eps-numerator-only" => (num + eps) / psi(arg),
            "eps-outside-ratio" => num / psi(arg) + eps,
            "eps-everywhere" => (num + eps) / (psi(arg + eps) + eps),
            "eps-inside-psi" if self.log => {
                let guarded = |y: F| (scale_c * (y + eps) + one + eps).ln();
                guarded(d) / guarded(arg)
            }
            "difference-of-logs" => num - (psi(arg) + eps),
            _ => num / (psi(arg) + eps),
        };
        self.mlp(x, mistake)
    }

    /// The `[H, Q, K]` bias, row-major, with the layout mistakes.
    pub fn bias(&self, queries: &[u64], keys: &[u64], mistake: &str) -> Vec<F> {
        let indices = |n: usize| (0..n as u64).collect::<Vec<u64>>();
        let (q, k) = if mistake == "positions-as-indices" {
            (indices(queries.len()), indices(keys.len()))
        } else {
            (queries.to_vec(), keys.to_vec())
        };
        let length = q.iter().chain(&k).max().map_or(0.0, |&p| p as f64 + 1.0);
        let (h, nq, nk) = (self.heads(), q.len(), k.len());
        let mut out = vec![F::of(0.0); h * nq * nk];
        if mistake == "layout-qkh" {
            // The context's square written [n, n, H], read back as [H, n, n], then the
            // requested rows and columns gathered ([conv.length]).
            let n = q.iter().chain(&k).max().map_or(0, |&p| u128::from(p) + 1);
            for head in 0..h {
                for (r, &i) in q.iter().enumerate() {
                    for (c, &j) in k.iter().enumerate() {
                        let flat = (head as u128 * n + u128::from(i)) * n + u128::from(j);
                        let (pair, written) = (flat / h as u128, (flat % h as u128) as usize);
                        let (a, b) = ((pair / n) as f64, (pair % n) as f64);
                        let v = self.pair(F::of(a), F::of(b), F::of(length), F::of(a), "")[written];
                        out[(head * nq + r) * nk + c] = v;
                    }
                }
            }
            return out;
        }
        for (r, &i) in q.iter().enumerate() {
            let far = k.iter().map(|&j| i.saturating_sub(j)).max().unwrap_or(0);
            for (c, &j) in k.iter().enumerate() {
                let (i, j, far) = (F::of(i as f64), F::of(j as f64), F::of(far as f64));
                let b = self.pair(i, j, F::of(length), far, mistake);
                for (head, v) in b.into_iter().enumerate() {
                    let head = if mistake == "heads-reversed" {
                        h - 1 - head
                    } else {
                        head
                    };
                    out[(head * nq + r) * nk + c] = v;
                }
            }
        }
        out
    }
}
