//! The closed set of case flags, each explained once (the Wycheproof habit).
//!
//! A flag says *why* a case exists, so a failure report can say which property an
//! implementation gets wrong. An unknown flag in a file is a load error. spec: [vec.flags]

use serde::Deserialize;

macro_rules! flags {
    ($($variant:ident = $name:literal : $doc:literal,)*) => {
        /// A case flag. spec: [vec.flags]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
        pub enum Flag {
            $(#[doc = $doc] #[serde(rename = $name)] $variant,)*
        }

        impl Flag {
            /// Every flag, in the order the spec lists them.
            pub const ALL: &'static [Flag] = &[$(Flag::$variant,)*];

            /// The name written in vector files.
            pub fn name(self) -> &'static str {
                match self { $(Flag::$variant => $name,)* }
            }

            /// What the flag means.
            pub fn meaning(self) -> &'static str {
                match self { $(Flag::$variant => $doc,)* }
            }

            /// The flag of this name, if any.
            pub fn named(name: &str) -> Option<Flag> {
                Flag::ALL.iter().copied().find(|f| f.name() == name)
            }
        }
    };
}

flags! {
    DefaultInit = "default-init": "Parameters are Appendix E's defaults with seeded nn.Linear-style MLP weights.",
    RandomParams = "random-params": "θ, c and m are drawn at random away from their defaults.",
    LargePreactivations = "large-preactivations": "Hidden pre-activations reach well beyond ±6, where a clipped or saturating activation (ReLU6, hardtanh) departs from the specified one.",
    Depth0 = "depth-0": "The MLP has no hidden layer (a linear map of x per head).",
    Depth2 = "depth-2": "The MLP has two hidden layers (Appendix B's default approximator).",
    Gelu = "gelu": "The hidden activation is the exact GeLU.",
    Ablation = "ablation": "An Appendix B ablation of FIRE (no log, no or fixed threshold, final activation).",
    Shared = "shared": "FIRE-S: one module, the same bias in every layer.",
    PerLayer = "per-layer": "One independent FIRE module per layer.",
    FutureKeys = "future-keys": "Some keys come after their query; those entries are checked under the declared convention.",
    QueryZero = "query-zero": "Query position 0, where the normaliser is ψ(L) + ε and only key 0 is causal.",
    ThresholdBoundary = "threshold-boundary": "Query positions at L − 1, L and L + 1, where max(i, L) switches branch.",
    LargePositions = "large-positions": "Positions up to 10^6, far beyond the threshold.",
    HugePositions = "huge-positions": "Positions between 10^6 and 2^53, the largest an f64 holds exactly.",
    TinyC = "tiny-c": "|c| so small that ψ(L) is comparable to ε, which makes ε visible.",
    LargeEps = "large-eps": "ε comparable to ψ(max(i, L)), so where ε enters shows at f32 tolerance.",
    NegativeC = "negative-c": "c < 0; only |c| matters.",
    NegativeMultiplier = "negative-multiplier": "m < 0; only |m·L_init| matters.",
    NonContiguous = "non-contiguous": "Position lists with gaps (not 0..n).",
    Unsorted = "unsorted": "Position lists out of order or with repeats.",
    KvCache = "kv-cache": "One query row against all earlier keys, as in a decoding step.",
    SlidingWindow = "sliding-window": "Queries against a window of keys that does not start at position 0, as a KV cache past its oldest keys holds: a normaliser taken from the farthest key shows.",
    RandomPositions = "random-positions": "Sorted random positions, as in randomised-position training.",
    Gradient = "gradient": "The expected output is a vector-Jacobian product over the parameters.",
    OneHotCotangent = "one-hot-cotangent": "The cotangent selects a single bias element: one Jacobian row.",
    Kink = "kink": "A point where a derivative is defined by the sub-gradient convention (max tie, |0|).",
    Attention = "attention": "The expected output is causal attention, not the bias.",
    Placement = "placement": "The case separates a bias added after the 1/√d scaling from one added before it.",
    Baseline = "baseline": "A baseline encoding of the paper (T5, Alibi, Kerple, Sandwich, RoPE, NoPE).",
    Binary32 = "binary32": "A T5 configuration with distances whose bucket differs between binary32 and binary64 arithmetic.",
    StandardSlopes = "standard-slopes": "Alibi slopes the implementation computes from the head count.",
    Construction = "construction": "A Theorem 3.1 construction: a FIRE module that reproduces a baseline.",
    InvalidParams = "invalid-params": "A parameter is out of range; the case must be rejected.",
    NonFinite = "non-finite": "A parameter or input is NaN or infinite; the case must be rejected.",
    InvalidShape = "invalid-shape": "Shapes do not chain; the case must be rejected.",
    InvalidPositions = "invalid-positions": "A position list is empty, negative or too large; the case must be rejected.",
}

impl Flag {
    /// Whether the flag names a configuration of FIRE (a depth or activation of f_θ, an
    /// ablation, a Theorem 3.1 construction) rather than a condition of the inputs or
    /// parameters: a module of another configuration skipping those cases leaves nothing of
    /// its own unchecked ([proto.report]).
    pub fn is_configuration(self) -> bool {
        matches!(
            self,
            Flag::Depth0 | Flag::Depth2 | Flag::Gelu | Flag::Ablation | Flag::Construction
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_kebab_case() {
        let mut names: Vec<_> = Flag::ALL.iter().map(|f| f.name()).collect();
        assert!(names.iter().all(|n| n
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Flag::ALL.len());
    }

    #[test]
    fn the_spec_defines_exactly_these_flags() {
        let spec =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../spec/vectors.md"))
                .unwrap();
        let start = spec.find("### [vec.flags]").unwrap();
        let section = &spec[start..];
        let end = section[4..].find("\n### ").map_or(section.len(), |e| e + 4);
        let listed: Vec<&str> = section[..end]
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once('`').map(|(n, _)| n))
            .collect();
        let names: Vec<&str> = Flag::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(
            listed, names,
            "spec/vectors.md [vec.flags] and Flag::ALL differ"
        );
    }
}
