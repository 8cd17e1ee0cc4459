//! # fire-vocabulary
//!
//! The plain words of FIRE that every implementation in this workspace speaks: a position, the
//! choice of ψ, the role of the threshold, the activations FIRE trains with, where the bias
//! enters the logits, and the seeded generator that draws test parameters and data order.
//!
//! Only names and data live here, never the maths: the reference (`fire-reference`) and the
//! fast kernels (`fire-kernels`) each compute ψ, σ and the normaliser their own way, so that the
//! conformance suite compares two independent readings of the spec. Sharing these words cannot
//! couple them: a wrong word is a wrong case on both sides, which the golden vectors, generated
//! from the spec's names, would show.
//!
//! Every word has one spelling, its name in the spec and the vector files ([`Transform::name`]
//! and [`Transform::parse`], and so on); with the `serde` feature the same names serialise.

/// A token position: a non-negative integer, 0-based as in Appendix E. spec: [conv.positions]
pub type Position = u64;

/// The largest position any implementation accepts: 2^53, the last integer from which every
/// smaller one and every distance converts to f64 exactly. spec: [conv.positions]
pub const MAX_POSITION: Position = 1 << 53;

/// Defines a closed set of words with their spec names: `name`, `parse` and, with the `serde`
/// feature, serialisation by those names.
macro_rules! words {
    ($(#[$meta:meta])* $vis:vis enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $wire:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        $vis enum $name {
            $($(#[$vmeta])* #[cfg_attr(feature = "serde", serde(rename = $wire))] $variant,)+
        }

        impl $name {
            /// Every word, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The spec's name of the word.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }

            /// The word named `name`, if any.
            pub fn parse(name: &str) -> Option<Self> {
                match name {
                    $($wire => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

words! {
    /// Which ψ FIRE applies to distances and to the normaliser's argument.
    /// spec: [fire.psi], [fire.ablation.no-log]
    #[derive(Default)]
    pub enum Transform {
        /// ψ_c(x) = ln(|c|·x + 1): FIRE.
        #[default]
        Log = "log",
        /// ψ(x) = x: the "no log transform" ablation and the Theorem 3.1 constructions.
        Identity = "identity",
    }
}

words! {
    /// How the threshold L = |m·L_init| enters the normaliser ψ(max(i, L)) + ε.
    /// spec: [fire.threshold], [fire.ablation.no-threshold], [fire.ablation.fixed-threshold]
    #[derive(Default)]
    pub enum Threshold {
        /// L = |m·L_init| with m trained: FIRE.
        #[default]
        Learnable = "learnable",
        /// The same value, but m is frozen (its gradient is zero).
        Fixed = "fixed",
        /// No threshold: the normaliser is ψ(i) + ε.
        Disabled = "disabled",
    }
}

impl Threshold {
    /// Whether L enters the normaliser at all (learnable or fixed).
    pub fn is_enabled(self) -> bool {
        self != Threshold::Disabled
    }
}

words! {
    /// The activations FIRE's f_θ trains with, between its layers (and optionally after the
    /// last). The reference's activation family is wider (the Theorem 3.1 constructions need
    /// Heaviside, powers, log1p and cos) and carries its own maths. spec: [fire.activation]
    #[derive(Default)]
    pub enum Activation {
        /// `max(z, 0)`: FIRE's default; piecewise linear.
        #[default]
        Relu = "relu",
        /// The exact GeLU `z·Φ(z)` (PyTorch's default `nn.GELU()`): not piecewise linear.
        Gelu = "gelu",
        /// `z`: piecewise linear (one piece).
        Identity = "identity",
        /// `sign(z)·ln(1 + |z|)`: the spec's `log1p` on `z ≥ 0`, where Theorem 3.1's Kerple-log
        /// construction ([thm31.kerple-log]) evaluates it, extended as an odd function so that
        /// training, which may push a pre-activation below −1, never leaves its domain. A FIRE
        /// started as that construction trains with it; not piecewise linear.
        Symlog = "symlog",
    }
}

impl Activation {
    /// True when σ is piecewise linear, so that an MLP of one scalar built from it is piecewise
    /// linear too (and compiles exactly to breakpoints and affine pieces). spec: [fire.activation]
    pub fn is_piecewise_linear(self) -> bool {
        matches!(self, Activation::Relu | Activation::Identity)
    }
}

words! {
    /// Where the bias enters the attention logits. spec: [attn.logits], [attn.placement]
    #[derive(Default)]
    pub enum Placement {
        /// `q·kᵀ/√d + b`: the normative choice (what `scaled_dot_product_attention` does with a
        /// float `attn_mask`).
        #[default]
        AfterScaling = "after-scaling",
        /// `(q·kᵀ + b)/√d`: a deviation some implementations make.
        BeforeScaling = "before-scaling",
    }
}

/// SplitMix64 (Steele, Lea and Flood 2014): a tiny, well-studied generator whose whole state is
/// one `u64`, so test parameters are reproducible from a seed and a checkpoint can store it to
/// resume a run's data order exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The whole state (for checkpoints).
    pub fn state(&self) -> u64 {
        self.state
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in [0, n); `n = 0` is read as 1.
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: unbiased enough for sampling windows, and branch-free.
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }

    /// A standard normal draw (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_round_trips_through_its_name() {
        for t in Transform::ALL {
            assert_eq!(Transform::parse(t.name()), Some(*t));
        }
        for t in Threshold::ALL {
            assert_eq!(Threshold::parse(t.name()), Some(*t));
        }
        for a in Activation::ALL {
            assert_eq!(Activation::parse(a.name()), Some(*a));
        }
        for p in Placement::ALL {
            assert_eq!(Placement::parse(p.name()), Some(*p));
        }
        assert_eq!(Activation::parse("swish"), None);
        assert_eq!(Placement::BeforeScaling.to_string(), "before-scaling");
    }

    #[test]
    fn splitmix64_matches_its_published_first_outputs() {
        // The first outputs for seed 1234567 of the reference C implementation.
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        let u = SplitMix64::new(0).unit();
        assert!((0.0..1.0).contains(&u));
    }
}
