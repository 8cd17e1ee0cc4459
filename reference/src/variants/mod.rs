//! The catalogue of named deviations: the ways implementations get FIRE and the baselines wrong.
//!
//! The catalogue is derived operator by operator from the equations, not from memory: for FIRE,
//! `b(i, j) = f_θ( ψ(|i − j|) / (ψ(max(i, L)) + ε) )` with `ψ(x) = ln(|c|·x + 1)` and
//! `L = |m·L_init|`, each operator (the positions, the distance and its sign, ψ and the handling
//! of `c`, every place ε can go, the threshold, the normaliser's argument, the MLP's activation,
//! biases and weight layout, the head order and the memory layout) is replaced by the wrong
//! readings real code makes; for the baselines, each one's own traps (T5's binary32 bucketing
//! and direction, Alibi's slopes for a head count that is not a power of two, Kerple's two
//! forms); for attention, where the bias enters the logits.
//!
//! Each entry is one small function computing what the mistaken code computes, a sentence, the
//! clause it violates and one line of what it looks like in code. Two mistakes that compute the
//! same function on every input are one entry (no vector could tell them apart), named after the
//! more common. The harness evaluates a failing implementation's cases under every entry that
//! applies to the case's encoding and names the one its outputs match. spec: [variants.catalogue]

mod baselines;
mod fire;

use nalgebra::DVector;

use crate::attention::{Masking, Placement};
use crate::baselines::{Alibi, KerpleLog, KerplePower, OfficialBucketing, T5Official};
use crate::bias::{evaluate, AdditiveBias, Bias, Pair};
use crate::error::Result;
use crate::fire::Fire;
use crate::positions::Position;

/// What a deviation replaces, by the encoding it applies to. A mistaken implementation is
/// correct wherever its deviation does not apply. spec: [variants.catalogue]
#[derive(Debug, Clone, Copy)]
pub enum Deviation {
    /// FIRE's bias at one pair, as the mistaken code computes it (FIRE, FIRE-S, per-layer FIRE).
    Fire(fn(&Fire, Pair) -> DVector<f64>),
    /// FIRE over whole position lists: mistakes of indexing or memory layout that no single
    /// pair shows.
    FireLayout(fn(&Fire, &[Position], &[Position]) -> Result<Bias>),
    /// The official T5 bucket of query `i` and key `j`.
    T5Bucket(fn(&OfficialBucketing, Position, Position) -> i64),
    /// The standard Alibi slopes for `H` heads (encodings that name a head count, not slopes).
    AlibiSlopes(fn(usize) -> Result<Vec<f64>>),
    /// Kerple's bias at one pair, for each of its two forms.
    Kerple {
        /// Kerple-log.
        log: fn(&KerpleLog, Pair) -> DVector<f64>,
        /// Kerple-power.
        power: fn(&KerplePower, Pair) -> DVector<f64>,
    },
    /// The bias enters the attention logits elsewhere than [attn.placement] says.
    Placement(Placement),
    /// Attention over every key: the causal mask of [attn.causal] left out.
    Unmasked,
    /// Causal attention without the additive bias: [attn.logits]'s `b(i, j)` never reaches the
    /// logits (the causal flag of a fused kernel standing in for the mask that carried it).
    BiasDropped,
    /// Every layer of a per-layer encoding evaluates the first layer's module: one module built
    /// and shared where [fire.per-layer] has one per layer.
    ModuleReused,
}

/// One named deviation. spec: [variants.catalogue]
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    /// The stable name reported by the harness.
    pub name: &'static str,
    /// One sentence: what the mistaken implementation does.
    pub summary: &'static str,
    /// The clause the mistake violates.
    pub violates: &'static str,
    /// What the mistake looks like in code (PyTorch spelling), one line.
    pub looks_like: &'static str,
    /// What it computes.
    pub deviation: Deviation,
    /// `Some(why)` when the suite accepts this deviation's values where it differs: the spec leaves
    /// them to the implementation's floating-point library, so the deviation is reported, never
    /// failed.
    pub tolerated: Option<&'static str>,
}

/// Every known deviation, FIRE's first (in the order of the operators of [fire.bias]), then the
/// baselines', then attention's. spec: [variants.catalogue]
pub const CATALOGUE: &[Variant] = &{
    const F: usize = fire::FIRE.len();
    const B: usize = baselines::BASELINES.len();
    let mut all = [fire::FIRE[0]; F + B];
    let mut n = 0;
    while n < F {
        all[n] = fire::FIRE[n];
        n += 1;
    }
    while n < F + B {
        all[n] = baselines::BASELINES[n - F];
        n += 1;
    }
    all
};

/// Looks a variant up by name.
pub fn find(name: &str) -> Option<&'static Variant> {
    CATALOGUE.iter().find(|v| v.name == name)
}

impl Variant {
    /// True when the deviation changes FIRE modules (FIRE, FIRE-S, per-layer FIRE).
    pub fn applies_to_fire(&self) -> bool {
        matches!(
            self.deviation,
            Deviation::Fire(_) | Deviation::FireLayout(_)
        )
    }

    /// The placement an attention case computes with under this variant, given the declared one.
    pub fn placement(&self, declared: Placement) -> Placement {
        match self.deviation {
            Deviation::Placement(p) => p,
            _ => declared,
        }
    }

    /// True when every layer of a per-layer encoding evaluates the first module under this
    /// variant. spec: [fire.per-layer]
    pub fn reuses_first_module(&self) -> bool {
        matches!(self.deviation, Deviation::ModuleReused)
    }

    /// True when attention under this variant leaves the bias out of the logits.
    /// spec: [attn.logits]
    pub fn drops_bias(&self) -> bool {
        matches!(self.deviation, Deviation::BiasDropped)
    }

    /// The keys an attention case attends to under this variant.
    pub fn masking(&self) -> Masking {
        match self.deviation {
            Deviation::Unmasked => Masking::Unmasked,
            _ => Masking::Causal,
        }
    }
}

/// A FIRE module evaluated through a deviation (the module itself when the deviation is not
/// FIRE's). spec: [variants.catalogue]
pub fn fire_bias(
    fire: &Fire,
    variant: Option<&Variant>,
    queries: &[Position],
    keys: &[Position],
) -> Result<Bias> {
    match variant.map(|v| v.deviation) {
        Some(Deviation::Fire(f)) => evaluate(&PerPair { fire, f }, queries, keys),
        Some(Deviation::FireLayout(f)) => {
            // The same validation as the correct module: only the arithmetic deviates.
            evaluate(fire, queries, keys)?;
            f(fire, queries, keys)
        }
        _ => evaluate(fire, queries, keys),
    }
}

/// T5 with the official bucketing, through a deviation of its bucket (unchanged otherwise).
/// A bucket outside the table reads NaN, as an out-of-range gather gives no number.
pub fn t5_bias(
    t5: &T5Official,
    variant: Option<&Variant>,
    queries: &[Position],
    keys: &[Position],
) -> Result<Bias> {
    match variant.map(|v| v.deviation) {
        Some(Deviation::T5Bucket(f)) => evaluate(&T5Deviating { t5, f }, queries, keys),
        _ => evaluate(t5, queries, keys),
    }
}

/// The standard Alibi slopes for `heads`, through a deviation of their formula.
pub fn alibi_standard(heads: usize, variant: Option<&Variant>) -> Result<Alibi> {
    let slopes = match variant.map(|v| v.deviation) {
        Some(Deviation::AlibiSlopes(f)) => f(heads)?,
        _ => crate::baselines::alibi::standard_slopes(heads)?,
    };
    Ok(Alibi { slopes })
}

/// Kerple-log through a deviation.
pub fn kerple_log_bias(
    k: &KerpleLog,
    variant: Option<&Variant>,
    queries: &[Position],
    keys: &[Position],
) -> Result<Bias> {
    match variant.map(|v| v.deviation) {
        Some(Deviation::Kerple { log: f, .. }) => evaluate(
            &Wrapped {
                inner: k,
                f: &|p| f(k, p),
            },
            queries,
            keys,
        ),
        _ => evaluate(k, queries, keys),
    }
}

/// Kerple-power through a deviation.
pub fn kerple_power_bias(
    k: &KerplePower,
    variant: Option<&Variant>,
    queries: &[Position],
    keys: &[Position],
) -> Result<Bias> {
    match variant.map(|v| v.deviation) {
        Some(Deviation::Kerple { power: f, .. }) => evaluate(
            &Wrapped {
                inner: k,
                f: &|p| f(k, p),
            },
            queries,
            keys,
        ),
        _ => evaluate(k, queries, keys),
    }
}

struct PerPair<'a> {
    fire: &'a Fire,
    f: fn(&Fire, Pair) -> DVector<f64>,
}

impl AdditiveBias for PerPair<'_> {
    fn heads(&self) -> usize {
        self.fire.heads()
    }

    fn validate(&self) -> Result<()> {
        self.fire.validate()
    }

    fn bias(&self, pair: Pair) -> DVector<f64> {
        (self.f)(self.fire, pair)
    }
}

struct T5Deviating<'a> {
    t5: &'a T5Official,
    f: fn(&OfficialBucketing, Position, Position) -> i64,
}

impl AdditiveBias for T5Deviating<'_> {
    fn heads(&self) -> usize {
        self.t5.heads()
    }

    fn validate(&self) -> Result<()> {
        self.t5.validate()
    }

    fn bias(&self, pair: Pair) -> DVector<f64> {
        let b = (self.f)(&self.t5.bucketing, pair.i, pair.j);
        DVector::from_iterator(
            self.t5.values.len(),
            self.t5.values.iter().map(|row| {
                usize::try_from(b)
                    .ok()
                    .and_then(|b| row.get(b))
                    .copied()
                    .unwrap_or(f64::NAN)
            }),
        )
    }
}

struct Wrapped<'a, E> {
    inner: &'a E,
    f: &'a dyn Fn(Pair) -> DVector<f64>,
}

impl<E: AdditiveBias> AdditiveBias for Wrapped<'_, E> {
    fn heads(&self) -> usize {
        self.inner.heads()
    }

    fn validate(&self) -> Result<()> {
        self.inner.validate()
    }

    fn bias(&self, pair: Pair) -> DVector<f64> {
        (self.f)(pair)
    }
}

impl std::fmt::Debug for PerPair<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerPair").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for T5Deviating<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("T5Deviating").finish_non_exhaustive()
    }
}

impl<E> std::fmt::Debug for Wrapped<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wrapped").finish_non_exhaustive()
    }
}
