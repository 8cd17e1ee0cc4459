//! The model configuration: a serde document (JSON or YAML) that fully determines a model's
//! shape; with a seed it determines the initial weights too.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{io, Error, Result};

/// FIRE's ψ, its threshold's role and its activations: the shared words, serialised by their
/// spec names (`log`, `learnable`, `relu`, …). spec: [fire.psi], [fire.threshold],
/// [fire.activation]
pub use fire_vocabulary::{Activation, Threshold, Transform};

/// How f_θ starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FireInit {
    /// `nn.Linear`'s defaults (Appendix E).
    #[default]
    AppendixE,
    /// The bias of a freshly initialised Kerple-log layer (r1 ~ U(0, 2), r2 ~ U(0, 1) per
    /// head, Kerple's own initialisation) through Theorem 3.1's construction
    /// ([thm31.kerple-log]): identity ψ, threshold `P = l_init` (a power of two), σ = symlog,
    /// hidden neuron `h < H` with weight `r2_h·P` feeding output `h` with weight `−r1_h`, so
    /// the bias equals that Kerple-log's for every `0 ≤ j ≤ i ≤ P`. The remaining hidden
    /// neurons (up to `width`) get weight `r·P`, r ~ U(0, 1), and output weight 0: more
    /// log-shaped features that leave the bias unchanged until training uses them.
    KerpleLog,
}

/// FIRE's hyper-parameters; defaults are Appendix E's. spec: [fire.defaults]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FireConfig {
    /// Hidden width of f_θ.
    pub width: usize,
    /// Hidden layers of f_θ (0 = linear, 1 = Appendix E, 2 = the paper's experiments).
    pub depth: usize,
    /// Initial c.
    pub c: f64,
    /// The frozen initial threshold `init_L`.
    pub l_init: f64,
    /// Initial `L_multiplier`.
    pub l_multiplier: f64,
    /// ε added to the log-normaliser.
    pub eps: f64,
    /// ψ.
    pub transform: Transform,
    /// The threshold's role.
    pub threshold: Threshold,
    /// σ of the hidden layers.
    pub activation: Activation,
    /// An activation on the output (an ablation; FIRE has none).
    pub final_activation: Option<Activation>,
    /// How f_θ starts.
    pub init: FireInit,
}

impl Default for FireConfig {
    fn default() -> Self {
        Self {
            width: 32,
            depth: 1,
            c: 0.1,
            l_init: 512.0,
            l_multiplier: 1.0,
            eps: 1e-6,
            transform: Transform::Log,
            threshold: Threshold::Learnable,
            activation: Activation::Relu,
            final_activation: None,
            init: FireInit::AppendixE,
        }
    }
}

/// The positional encoding and its hyper-parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum EncodingConfig {
    /// FIRE, one module per layer. spec: [fire.per-layer]
    Fire(FireConfig),
    /// FIRE-S, one module shared by all layers. spec: [fire.shared]
    FireS(FireConfig),
    /// No positional encoding.
    Nope,
    /// Rotary embeddings.
    Rope {
        /// The base θ (10 000).
        #[serde(default = "default_theta")]
        theta: f64,
    },
    /// RoPE with position interpolation: positions divided by `scale`.
    RopePi {
        /// The base θ.
        #[serde(default = "default_theta")]
        theta: f64,
        /// Target length / training length.
        scale: f64,
    },
    /// Alibi: −r_h·|i − j| with the standard geometric slopes.
    Alibi,
    /// Kerple-log: −r1·ln(1 + r2·|i − j|), per head and layer.
    KerpleLog,
    /// Kerple-power: −r1·|i − j|^r2, per head and layer.
    KerplePower,
    /// T5's log-binned relative buckets (causal), one table shared by all layers.
    T5 {
        /// The number of buckets.
        #[serde(default = "default_buckets")]
        num_buckets: usize,
        /// Distances at or beyond this share the last bucket.
        #[serde(default = "default_max_distance")]
        max_distance: u64,
    },
    /// Sandwich (NeMo's form).
    Sandwich,
}

fn default_theta() -> f64 {
    10_000.0
}
fn default_buckets() -> usize {
    32
}
fn default_max_distance() -> u64 {
    128
}

/// The encodings by name (`fire-lm --encoding`, the `kind` of an [`EncodingConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Encoding {
    /// FIRE, one module per layer.
    Fire,
    /// FIRE-S, one module shared by all layers.
    FireS,
    /// No positional encoding.
    Nope,
    /// Rotary embeddings.
    Rope,
    /// RoPE with position interpolation.
    RopePi,
    /// Alibi.
    Alibi,
    /// Kerple, logarithmic.
    KerpleLog,
    /// Kerple, power.
    KerplePower,
    /// T5's relative buckets.
    T5,
    /// Sandwich.
    Sandwich,
}

impl Encoding {
    /// The command-line and file name (`fire`, `fire-s`, `rope-pi`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Fire => "fire",
            Self::FireS => "fire-s",
            Self::Nope => "nope",
            Self::Rope => "rope",
            Self::RopePi => "rope-pi",
            Self::Alibi => "alibi",
            Self::KerpleLog => "kerple-log",
            Self::KerplePower => "kerple-power",
            Self::T5 => "t5",
            Self::Sandwich => "sandwich",
        }
    }

    /// The encoding with default hyper-parameters (`rope-pi` gets `rope_pi_scale`).
    pub fn config(self, rope_pi_scale: f64) -> EncodingConfig {
        match self {
            Self::Fire => EncodingConfig::Fire(FireConfig::default()),
            Self::FireS => EncodingConfig::FireS(FireConfig::default()),
            Self::Nope => EncodingConfig::Nope,
            Self::Rope => EncodingConfig::Rope {
                theta: default_theta(),
            },
            Self::RopePi => EncodingConfig::RopePi {
                theta: default_theta(),
                scale: rope_pi_scale,
            },
            Self::Alibi => EncodingConfig::Alibi,
            Self::KerpleLog => EncodingConfig::KerpleLog,
            Self::KerplePower => EncodingConfig::KerplePower,
            Self::T5 => EncodingConfig::T5 {
                num_buckets: default_buckets(),
                max_distance: default_max_distance(),
            },
            Self::Sandwich => EncodingConfig::Sandwich,
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Encoding {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        <Self as clap::ValueEnum>::from_str(s, false).map_err(|_| {
            let names: Vec<&str> = <Self as clap::ValueEnum>::value_variants()
                .iter()
                .map(|e| e.name())
                .collect();
            Error::Config(format!(
                "unknown encoding `{s}`; expected one of {}",
                names.join(", ")
            ))
        })
    }
}

impl EncodingConfig {
    /// Which encoding this is.
    pub fn kind(&self) -> Encoding {
        match self {
            Self::Fire(_) => Encoding::Fire,
            Self::FireS(_) => Encoding::FireS,
            Self::Nope => Encoding::Nope,
            Self::Rope { .. } => Encoding::Rope,
            Self::RopePi { .. } => Encoding::RopePi,
            Self::Alibi => Encoding::Alibi,
            Self::KerpleLog => Encoding::KerpleLog,
            Self::KerplePower => Encoding::KerplePower,
            Self::T5 { .. } => Encoding::T5,
            Self::Sandwich => Encoding::Sandwich,
        }
    }

    /// The command-line / file name of the encoding.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The encoding `name` with default hyper-parameters (`rope-pi` gets `rope_pi_scale`).
    pub fn from_name(name: &str, rope_pi_scale: f64) -> Result<Self> {
        Ok(name.parse::<Encoding>()?.config(rope_pi_scale))
    }
}

/// How the Transformer's own weights start (the encodings have their own schemes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum InitScheme {
    /// PyTorch's `nn.Linear` default for every projection (weights and biases
    /// U(−1/√fan_in, 1/√fan_in)), the embedding N(0, `init_std`²): what a PyTorch model of this
    /// architecture starts from. At d_model 128 its projections start 2.5× (q, k, v, fc1) to 7×
    /// (`o_proj`) larger than `gpt2`'s; in the 800-step recipe ablation
    /// (accelerated/results/figure1/, FIRE, one seed) that ended 0.09 nats/byte lower at the
    /// training length and 0.07 at 4×, but 0.04 higher at 16×.
    #[default]
    FanIn,
    /// GPT-2's: every projection N(0, `init_std`²), the residual outputs (attention `o_proj`,
    /// `mlp.fc2`) `init_std/√(2·layers)`, zero biases. The scheme of large models; slower to
    /// start at this scale.
    Gpt2,
}

/// A decoder-only Transformer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Vocabulary size (256 for the byte tokenizer).
    pub vocab_size: usize,
    /// Model width.
    pub d_model: usize,
    /// Number of blocks.
    pub n_layers: usize,
    /// Attention heads per block.
    pub n_heads: usize,
    /// Hidden width of the feed-forward block.
    pub d_ff: usize,
    /// Share the embedding matrix with the output head.
    #[serde(default = "yes")]
    pub tie_embeddings: bool,
    /// LayerNorm ε.
    #[serde(default = "default_ln_eps")]
    pub layer_norm_eps: f64,
    /// Standard deviation of the embedding's initialisation (and of the projections' under
    /// [`InitScheme::Gpt2`], of T5's table).
    #[serde(default = "default_init_std")]
    pub init_std: f64,
    /// How the projections start. [`ModelConfig::tiny`] and `fire-lm train` choose
    /// [`InitScheme::FanIn`]; a document without the field predates it and means
    /// [`InitScheme::Gpt2`], the only scheme there was, so an old config with its seed still
    /// gives the weights it gave.
    #[serde(default = "legacy_init")]
    pub init: InitScheme,
    /// The positional encoding.
    pub encoding: EncodingConfig,
}

fn yes() -> bool {
    true
}
fn default_ln_eps() -> f64 {
    1e-5
}
fn default_init_std() -> f64 {
    0.02
}
fn legacy_init() -> InitScheme {
    InitScheme::Gpt2
}

impl ModelConfig {
    /// A tiny model (for tests and the demo).
    pub fn tiny(encoding: EncodingConfig) -> Self {
        Self {
            vocab_size: 256,
            d_model: 64,
            n_layers: 2,
            n_heads: 4,
            d_ff: 256,
            tie_embeddings: true,
            layer_norm_eps: 1e-5,
            init_std: 0.02,
            init: InitScheme::default(),
            encoding,
        }
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// Checks the shape is buildable.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.vocab_size == 0 || self.d_model == 0 || self.n_layers == 0 || self.d_ff == 0 {
            return bad("vocab_size, d_model, n_layers and d_ff must be positive".into());
        }
        if self.vocab_size < 2 {
            // One token is always predicted with certainty: training reaches loss 0 and means
            // nothing. Usually a tokenizer.json whose vocabulary is (nearly) empty.
            return bad(format!(
                "the vocabulary must have at least 2 tokens, got {}: set by --tokenizer's \
                 vocabulary, or `vocab_size` in the model config",
                self.vocab_size
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            // NaN or inf turn every LayerNorm into NaN or 0 (a uniform model), 0 divides by 0
            // on a constant row.
            return bad(format!(
                "`layer_norm_eps` in the model config must be a positive finite number, got {}",
                self.layer_norm_eps
            ));
        }
        if !(self.init_std.is_finite() && self.init_std >= 0.0) {
            return bad(format!(
                "`init_std` in the model config must be 0 or a positive finite number, got {}",
                self.init_std
            ));
        }
        if self.n_heads == 0 {
            return bad(
                "the number of heads must be at least 1: set by --heads, or `n_heads` \
                 in the model config"
                    .into(),
            );
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return bad(format!(
                "the number of heads ({}) must divide the model width ({}): set by --heads and \
                 --d-model, or `n_heads` and `d_model` in the model config",
                self.n_heads, self.d_model
            ));
        }
        let rotary = matches!(
            self.encoding,
            EncodingConfig::Rope { .. } | EncodingConfig::RopePi { .. }
        );
        if rotary && !self.head_dim().is_multiple_of(2) {
            return bad("RoPE needs an even head dimension".into());
        }
        if let EncodingConfig::RopePi { scale, .. } = self.encoding {
            if !(scale.is_finite() && scale > 0.0) {
                return bad(format!("rope-pi scale must be positive, got {scale}"));
            }
        }
        if let EncodingConfig::Fire(f) | EncodingConfig::FireS(f) = &self.encoding {
            if f.width == 0 || f.depth > 2 {
                return bad("FIRE needs width > 0 and depth 0, 1 or 2".into());
            }
            if !(f.l_init > 0.0 && f.eps >= 0.0 && f.c.is_finite() && f.l_multiplier.is_finite()) {
                return bad("FIRE needs l_init > 0, eps >= 0, finite c and L_multiplier".into());
            }
            if f.init == FireInit::KerpleLog {
                let p = f.l_init;
                let power_of_two = p >= 1.0 && p.fract() == 0.0 && (p as u64).is_power_of_two();
                if f.depth != 1
                    || f.width < self.n_heads
                    || f.transform != Transform::Identity
                    || f.activation != Activation::Symlog
                    || !power_of_two
                {
                    return bad(format!(
                        "FIRE init kerple-log is Theorem 3.1's construction: it needs depth 1, \
                         width >= n_heads ({}), transform identity, activation symlog and a \
                         power-of-two l_init; got depth {}, width {}, transform {:?}, \
                         activation {:?}, l_init {}",
                        self.n_heads, f.depth, f.width, f.transform, f.activation, f.l_init
                    ));
                }
            }
        }
        if let EncodingConfig::T5 {
            num_buckets,
            max_distance,
        } = self.encoding
        {
            if num_buckets < 2 || max_distance <= (num_buckets / 2) as u64 {
                return bad("t5 needs num_buckets >= 2 and max_distance > num_buckets/2".into());
            }
        }
        Ok(())
    }

    /// Reads a config from JSON (`.json`) or YAML (anything else).
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io(path))?;
        let parsed: std::result::Result<Self, String> =
            if path.extension().is_some_and(|e| e == "json") {
                serde_json::from_str(&text).map_err(|e| e.to_string())
            } else {
                serde_saphyr::from_str(&text).map_err(|e| e.to_string())
            };
        let cfg = parsed.map_err(|reason| Error::Parse {
            path: path.display().to_string(),
            reason,
        })?;
        cfg.validate()?;
        Ok(cfg)
    }
}
