//! The typed shape of a vector file: what `spec/vectors.md` describes, field by field.
//!
//! Reading is serde (with `deny_unknown_fields` everywhere, so a misspelt or tampered field is an
//! error); writing goes through [`Node`] and the deterministic writer of [`super::yaml`].
//! spec: [vec.file], [vec.case], [vec.tensor], [vec.encoding], [vec.inputs]

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::flags::Flag;
use super::yaml::Node;

/// A real number as a file or the protocol writes it: a number, or (the protocol's spelling of
/// non-finite values) `"nan"`, `"inf"`, `"-inf"`. spec: [vec.floats], [proto.numbers]
#[derive(Deserialize)]
#[serde(untagged)]
enum Real {
    Number(f64),
    Text(String),
}

impl Real {
    fn value<E: serde::de::Error>(self) -> Result<f64, E> {
        match self {
            Real::Number(v) => Ok(v),
            Real::Text(t) => match t.as_str() {
                "nan" | ".nan" => Ok(f64::NAN),
                "inf" | ".inf" => Ok(f64::INFINITY),
                "-inf" | "-.inf" => Ok(f64::NEG_INFINITY),
                _ => Err(E::custom(format!(
                    "expected a number, got the string `{t}`"
                ))),
            },
        }
    }
}

fn real<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Real::deserialize(d)?.value()
}

fn reals<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Vec::<Real>::deserialize(d)?
        .into_iter()
        .map(Real::value)
        .collect()
}

fn opt_real<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Option::<Real>::deserialize(d)?.map(Real::value).transpose()
}

/// The version of the file format; a reader refuses any other. spec: [vec.file]
pub const FORMAT: i64 = 2;

/// A dense tensor: a dtype, a shape and its values in row-major order. spec: [vec.tensor]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tensor {
    /// Always `f64` in the suite: the reference's arithmetic.
    pub dtype: String,
    /// The extent of each axis; `[]` is a scalar.
    pub shape: Vec<usize>,
    /// Expected outputs only: the magnitude bound `scale` of the comparison rule.
    #[serde(default, deserialize_with = "opt_real")]
    pub scale: Option<f64>,
    /// `product(shape)` values, row-major.
    #[serde(deserialize_with = "reals")]
    pub data: Vec<f64>,
}

impl Tensor {
    /// A tensor from a shape and its row-major data.
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Self {
        Self {
            dtype: "f64".into(),
            shape,
            scale: None,
            data,
        }
    }

    /// The number of elements the shape implies, or `None` on overflow.
    pub fn numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// `None` when `data` holds the shape's element count; else what is wrong, said for a
    /// person ("shape [4, 2] needs 8 values, data has 6").
    pub fn length_mismatch(&self) -> Option<String> {
        if self.numel() == Some(self.data.len()) {
            return None;
        }
        let needs = self.numel().map_or_else(
            || "more values than an address space holds".to_owned(),
            |n| format!("{n} values"),
        );
        Some(format!(
            "shape {:?} needs {needs}, data has {}",
            self.shape,
            self.data.len()
        ))
    }

    /// The multi-index of flat element `n`.
    pub fn index_of(&self, mut n: usize) -> Vec<usize> {
        let mut idx = vec![0; self.shape.len()];
        for (axis, &d) in self.shape.iter().enumerate().rev() {
            if d > 0 {
                idx[axis] = n % d;
                n /= d;
            }
        }
        idx
    }

    /// The same tensor carrying the comparison scale.
    pub fn with_scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    /// The tree form.
    pub fn to_node(&self) -> Node {
        let mut items = vec![
            ("dtype".to_owned(), Node::str(&self.dtype)),
            (
                "shape".into(),
                Node::Seq(self.shape.iter().map(|&d| Node::Int(d as i64)).collect()),
            ),
        ];
        if let Some(s) = self.scale {
            items.push(("scale".into(), Node::Float(s)));
        }
        items.push((
            "data".into(),
            Node::Seq(self.data.iter().map(|&v| Node::Float(v)).collect()),
        ));
        Node::Map(items)
    }
}

/// One affine layer `W·a + b`, `W` laid out `[out, in]`. spec: [vec.encoding], [fire.mlp]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearParams {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`.
    pub bias: Tensor,
}

/// f_θ. spec: [vec.encoding], [fire.mlp], [fire.activation]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlpParams {
    /// σ after each hidden layer: `relu`, `gelu`, `identity`, `heaviside`, `power(p)`, `log1p`, `cos`.
    pub activation: String,
    /// An activation applied to the output layer, absent in FIRE.
    #[serde(default)]
    pub final_activation: Option<String>,
    /// Hidden layers, then the output layer (`mlp.0`, `mlp.2`, … in Appendix E's names).
    pub layers: Vec<LinearParams>,
}

/// Every parameter of one FIRE module. spec: [vec.encoding], [fire.params]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FireParams {
    /// f_θ.
    pub mlp: MlpParams,
    /// c of ψ_c.
    #[serde(deserialize_with = "real")]
    pub c: f64,
    /// The frozen `init_L`.
    #[serde(deserialize_with = "real")]
    pub l_init: f64,
    /// The learnable `L_multiplier`.
    #[serde(deserialize_with = "real")]
    pub l_multiplier: f64,
    /// ε.
    #[serde(deserialize_with = "real")]
    pub eps: f64,
    /// `log` (FIRE) or `identity` (the no-log ablation).
    pub transform: String,
    /// `learnable`, `fixed` or `disabled`.
    pub threshold: String,
}

/// The encoding a case evaluates, tagged by `type`. spec: [vec.encoding]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Encoding {
    /// One FIRE module: output `[H, Q, K]`.
    Fire(FireParams),
    /// FIRE-S: one module shared by `layers` layers: output `[layers, H, Q, K]`.
    FireShared(SharedParams),
    /// One module per layer: output `[layers, H, Q, K]`.
    FirePerLayer(PerLayerParams),
    /// Any other additive encoding (the baselines), its parameters by name.
    Baseline(BaselineParams),
}

/// FIRE-S parameters. spec: [fire.shared]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedParams {
    /// The one module.
    pub module: FireParams,
    /// How many layers share it.
    pub layers: usize,
}

/// Per-layer FIRE parameters. spec: [fire.per-layer]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerLayerParams {
    /// One module per layer.
    pub modules: Vec<FireParams>,
}

/// A baseline encoding: its name (`t5-simplified`, `alibi`, …) and named real parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineParams {
    /// The encoding's name as in spec/baselines.md.
    pub name: String,
    /// Integer settings (heads, buckets, …).
    #[serde(default)]
    pub settings: BTreeMap<String, i64>,
    /// Real-valued parameters by name.
    #[serde(default)]
    pub params: BTreeMap<String, Tensor>,
}

/// What a case asks for. spec: [vec.case]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The bias tensor.
    Bias,
    /// Causal attention outputs given q, k, v.
    Attention,
    /// The gradient of `Σ G ⊙ bias` with respect to every trainable parameter.
    Vjp,
}

impl Kind {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bias => "bias",
            Kind::Attention => "attention",
            Kind::Vjp => "vjp",
        }
    }
}

/// Valid cases have an expected output; invalid ones must be rejected. spec: [vec.invalid]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Compare the output with `expected`.
    Valid,
    /// The implementation must reply `errored`.
    Invalid,
}

/// The inputs of a case: positions, and what its kind needs besides. spec: [vec.inputs]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    /// Query positions (rows), in order; integers, possibly negative in invalid cases.
    pub queries: Vec<i64>,
    /// Key positions (columns).
    pub keys: Vec<i64>,
    /// `vjp`: the cotangent `G`, shaped like the bias.
    #[serde(default)]
    pub cotangent: Option<Tensor>,
    /// `attention`: queries `[H, Q, d]`.
    #[serde(default)]
    pub q: Option<Tensor>,
    /// `attention`: keys `[H, K, d]`.
    #[serde(default)]
    pub k: Option<Tensor>,
    /// `attention`: values `[H, K, d_v]`.
    #[serde(default)]
    pub v: Option<Tensor>,
}

/// One case. spec: [vec.case]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique across the suite: `<family>/<file>/<name>`.
    pub id: String,
    /// One sentence: what the case checks.
    pub description: String,
    /// The clauses it exercises.
    pub clauses: Vec<String>,
    /// Why it exists.
    pub flags: Vec<Flag>,
    /// What it asks for.
    pub kind: Kind,
    /// `valid` or `invalid`.
    pub result: Verdict,
    /// The tightest tolerance profile it is graded at.
    pub profile: String,
    /// The encoding and all its parameters.
    pub encoding: Encoding,
    /// The inputs.
    pub inputs: Inputs,
    /// Named expected outputs (absent for invalid cases).
    #[serde(default)]
    pub expected: Option<BTreeMap<String, Tensor>>,
    /// Expected outputs under a declared non-default convention, e.g. `placement=before-scaling`.
    #[serde(default)]
    pub expected_under: Option<BTreeMap<String, BTreeMap<String, Tensor>>>,
    /// Where the spec leaves an element to the implementation — its floating-point library, or
    /// its choice of sub-gradient at a kink — the other outputs that are also correct, element
    /// by element (elsewhere equal to `expected`). spec: [vec.case],
    /// [t5.bucket.official.float], [grad.kinks]
    #[serde(default)]
    pub acceptable: Option<Vec<BTreeMap<String, Tensor>>>,
    /// `acceptable` under a declared non-default convention, as `expected_under` holds
    /// `expected`.
    #[serde(default)]
    pub acceptable_under: Option<BTreeMap<String, Vec<BTreeMap<String, Tensor>>>>,
}

/// One vector file. spec: [vec.file]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorFile {
    /// [`FORMAT`].
    pub format: i64,
    /// The family (the folder).
    pub family: String,
    /// What the file covers.
    pub description: String,
    /// Every clause its cases cover.
    pub clauses: Vec<String>,
    /// The cases.
    pub cases: Vec<Case>,
}

fn fire_node(p: &FireParams) -> Node {
    let layers = p
        .mlp
        .layers
        .iter()
        .map(|l| Node::map([("weight", l.weight.to_node()), ("bias", l.bias.to_node())]))
        .collect();
    let mut mlp = vec![("activation".to_owned(), Node::str(&p.mlp.activation))];
    if let Some(f) = &p.mlp.final_activation {
        mlp.push(("final_activation".into(), Node::str(f)));
    }
    mlp.push(("layers".into(), Node::Seq(layers)));
    Node::map([
        ("mlp", Node::Map(mlp)),
        ("c", Node::Float(p.c)),
        ("l_init", Node::Float(p.l_init)),
        ("l_multiplier", Node::Float(p.l_multiplier)),
        ("eps", Node::Float(p.eps)),
        ("transform", Node::str(&p.transform)),
        ("threshold", Node::str(&p.threshold)),
    ])
}

fn tagged(tag: &str, body: Node) -> Node {
    let mut items = vec![("type".to_owned(), Node::str(tag))];
    if let Node::Map(m) = body {
        items.extend(m);
    }
    Node::Map(items)
}

fn tensors(map: &BTreeMap<String, Tensor>) -> Node {
    Node::Map(map.iter().map(|(k, t)| (k.clone(), t.to_node())).collect())
}

impl Encoding {
    /// Whether this is one of FIRE's encodings (FIRE, FIRE-S, per-layer FIRE), not a baseline.
    pub fn is_fire(&self) -> bool {
        !matches!(self, Encoding::Baseline(_))
    }

    /// The tree form.
    pub fn to_node(&self) -> Node {
        match self {
            Encoding::Fire(p) => tagged("fire", fire_node(p)),
            Encoding::FireShared(s) => tagged(
                "fire-shared",
                Node::map([
                    ("module", fire_node(&s.module)),
                    ("layers", Node::Int(s.layers as i64)),
                ]),
            ),
            Encoding::FirePerLayer(p) => tagged(
                "fire-per-layer",
                Node::map([(
                    "modules",
                    Node::Seq(p.modules.iter().map(fire_node).collect()),
                )]),
            ),
            Encoding::Baseline(b) => tagged(
                "baseline",
                Node::map([
                    ("name", Node::str(&b.name)),
                    (
                        "settings",
                        Node::Map(
                            b.settings
                                .iter()
                                .map(|(k, v)| (k.clone(), Node::Int(*v)))
                                .collect(),
                        ),
                    ),
                    ("params", tensors(&b.params)),
                ]),
            ),
        }
    }

    /// The FIRE module a diagnosable encoding holds (FIRE and FIRE-S).
    pub fn fire(&self) -> Option<&FireParams> {
        match self {
            Encoding::Fire(p) => Some(p),
            Encoding::FireShared(s) => Some(&s.module),
            _ => None,
        }
    }
}

impl Inputs {
    /// The tree form.
    pub fn to_node(&self) -> Node {
        let ints = |v: &[i64]| Node::Seq(v.iter().map(|&p| Node::Int(p)).collect());
        let mut items = vec![
            ("queries".to_owned(), ints(&self.queries)),
            ("keys".to_owned(), ints(&self.keys)),
        ];
        for (name, t) in [
            ("cotangent", &self.cotangent),
            ("q", &self.q),
            ("k", &self.k),
            ("v", &self.v),
        ] {
            if let Some(t) = t {
                items.push((name.into(), t.to_node()));
            }
        }
        Node::Map(items)
    }
}

impl Case {
    /// The tree form, fields in the spec's order.
    pub fn to_node(&self) -> Node {
        let flags: Vec<&str> = self.flags.iter().map(|f| f.name()).collect();
        let mut items = vec![
            ("id".to_owned(), Node::str(&self.id)),
            ("description".into(), Node::str(&self.description)),
            ("clauses".into(), Node::strs(&self.clauses)),
            ("flags".into(), Node::strs(&flags)),
            ("kind".into(), Node::str(self.kind.name())),
            (
                "result".into(),
                Node::str(match self.result {
                    Verdict::Valid => "valid",
                    Verdict::Invalid => "invalid",
                }),
            ),
            ("profile".into(), Node::str(&self.profile)),
            ("encoding".into(), self.encoding.to_node()),
            ("inputs".into(), self.inputs.to_node()),
        ];
        if let Some(e) = &self.expected {
            items.push(("expected".into(), tensors(e)));
        }
        if let Some(u) = &self.expected_under {
            items.push((
                "expected_under".into(),
                Node::Map(u.iter().map(|(k, m)| (k.clone(), tensors(m))).collect()),
            ));
        }
        if let Some(a) = &self.acceptable {
            items.push((
                "acceptable".into(),
                Node::Seq(a.iter().map(tensors).collect()),
            ));
        }
        if let Some(u) = &self.acceptable_under {
            items.push((
                "acceptable_under".into(),
                Node::Map(
                    u.iter()
                        .map(|(k, alts)| (k.clone(), Node::Seq(alts.iter().map(tensors).collect())))
                        .collect(),
                ),
            ));
        }
        Node::Map(items)
    }
}

impl VectorFile {
    /// The tree form.
    pub fn to_node(&self) -> Node {
        Node::map([
            ("format", Node::Int(self.format)),
            ("family", Node::str(&self.family)),
            ("description", Node::str(&self.description)),
            ("clauses", Node::strs(&self.clauses)),
            (
                "cases",
                Node::Seq(self.cases.iter().map(Case::to_node).collect()),
            ),
        ])
    }
}
