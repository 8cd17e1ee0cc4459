//! What every family shares: a case draft, its expected outputs from the reference, and the
//! `scale` of [num.compare]. spec: [vec.generation]

use std::collections::BTreeMap;

use crate::error::Error;
use fire_reference::attention::Placement;
use fire_reference::fire::grad::Subgradients;
use fire_reference::fire::init::{self, Shape, SplitMix64};
use fire_reference::fire::{Activation, Fire, Threshold, Transform};

use crate::implementations::reference::{evaluate_placed, evaluate_request, evaluate_subgradients};
use crate::vectors::flags::Flag;
use crate::vectors::format::{
    Case, Encoding, FireParams, Inputs, Kind, Tensor, VectorFile, Verdict, FORMAT,
};
use crate::vectors::params;

/// A case before the reference has computed its expected output.
#[derive(Debug, Clone)]
pub struct Draft {
    /// The last component of the id.
    pub name: String,
    /// What the case checks.
    pub description: String,
    /// Clause ids.
    pub clauses: Vec<&'static str>,
    /// Flags.
    pub flags: Vec<Flag>,
    /// What it asks for.
    pub kind: Kind,
    /// The least precise meaningful profile.
    pub profile: &'static str,
    /// The encoding.
    pub encoding: Encoding,
    /// The inputs.
    pub inputs: Inputs,
    /// True when the reference must reject it.
    pub invalid: bool,
}

impl Draft {
    /// A valid bias case.
    pub fn bias(
        name: &str,
        description: &str,
        encoding: Encoding,
        queries: Vec<i64>,
        keys: Vec<i64>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            clauses: vec![],
            flags: vec![],
            kind: Kind::Bias,
            profile: "f32",
            encoding,
            inputs: Inputs {
                queries,
                keys,
                cotangent: None,
                q: None,
                k: None,
                v: None,
            },
            invalid: false,
        }
    }

    /// Adds clause ids.
    pub fn clauses(mut self, ids: &[&'static str]) -> Self {
        self.clauses.extend_from_slice(ids);
        self
    }

    /// Adds flags.
    pub fn flags(mut self, flags: &[Flag]) -> Self {
        self.flags.extend_from_slice(flags);
        self
    }

    /// Sets the profile.
    pub fn profile(mut self, p: &'static str) -> Self {
        self.profile = p;
        self
    }

    /// Marks the case invalid, graded at every dtype (profile `bf16`, the least precise): a
    /// rejection does not depend on precision — the suite's invalid inputs are exact zeros,
    /// NaN, infinities, negative values, shapes and positions, the same in every dtype — and
    /// an f32 profile had left a bfloat16 implementation's validation verdict nothing to grade
    /// (exit 5 after every value passed). spec: [vec.invalid], [num.profiles]
    pub fn invalid(mut self) -> Self {
        self.invalid = true;
        self.profile = "bf16";
        self
    }

    /// Sets the kind.
    pub fn kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }
}

/// A FIRE encoding from a reference module.
pub fn fire_enc(f: &Fire) -> Encoding {
    Encoding::Fire(params::from_fire(f))
}

/// `0, 1, …, n−1`.
pub fn range(n: i64) -> Vec<i64> {
    (0..n).collect()
}

/// Appendix E's default module with `heads`, `width`, `depth` and a seed.
pub fn default_fire(heads: usize, width: usize, depth: usize, seed: u64) -> Fire {
    init::appendix_e(
        Shape {
            heads,
            width,
            depth,
        },
        seed,
    )
}

/// A module with every parameter drawn away from its default, and a small threshold so that
/// short position lists cross it.
pub fn random_fire(
    heads: usize,
    width: usize,
    depth: usize,
    seed: u64,
    activation: Activation,
) -> Fire {
    let mut f = default_fire(heads, width, depth, seed);
    let mut r = SplitMix64::new(seed ^ 0x5EED);
    for l in &mut f.mlp.layers {
        l.weight.iter_mut().for_each(|w| *w *= 2.0);
        l.bias.iter_mut().for_each(|b| *b = r.uniform(-1.0, 1.0));
    }
    f.mlp.activation = activation;
    f.c = r.uniform(0.05, 2.0);
    f.l_init = 8.0;
    f.l_multiplier = r.uniform(0.6, 1.4);
    f.eps = 1e-6;
    f.transform = Transform::Log;
    f.threshold = Threshold::Learnable;
    f
}

/// Random values, uniform in [−1, 1), as a tensor of `shape`.
pub fn random_tensor(shape: Vec<usize>, seed: u64) -> Tensor {
    let mut r = SplitMix64::new(seed);
    let n = shape.iter().product();
    Tensor::new(shape, (0..n).map(|_| r.uniform(-1.0, 1.0)).collect())
}

/// Sorted distinct random positions below `bound`.
pub fn random_positions(n: usize, bound: u64, seed: u64) -> Vec<i64> {
    let mut r = SplitMix64::new(seed);
    let mut v: Vec<i64> = Vec::new();
    while v.len() < n {
        let p = (r.next_u64() % bound) as i64;
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v.sort_unstable();
    v
}

/// [num.compare]'s scale of a FIRE bias: the largest sum of absolute terms of the output layer
/// over every evaluated pair. spec: [num.compare]
pub fn fire_scale(f: &Fire, queries: &[i64], keys: &[i64]) -> f64 {
    let out = match f.mlp.layers.last() {
        Some(l) => l,
        None => return 0.0,
    };
    let mut scale: f64 = 0.0;
    for &i in queries {
        for &j in keys {
            let x = f.input(i as f64, j as f64);
            let (_, act) = f.mlp.trace(x);
            let a = &act[f.mlp.layers.len() - 1];
            for h in 0..out.weight.nrows() {
                let s: f64 = (0..a.len())
                    .map(|m| (out.weight[(h, m)] * a[m]).abs())
                    .sum::<f64>()
                    + out.bias[h].abs();
                scale = scale.max(s);
            }
        }
    }
    scale
}

fn max_abs<'a>(ts: impl IntoIterator<Item = &'a Tensor>) -> f64 {
    ts.into_iter()
        .flat_map(|t| t.data.iter())
        .filter(|v| v.is_finite())
        .fold(0.0, |a, v| a.max(v.abs()))
}

fn modules(e: &Encoding) -> crate::error::Result<Vec<Fire>> {
    Ok(match e {
        Encoding::Fire(p) => vec![params::to_fire(p)?],
        Encoding::FireShared(s) => vec![params::to_fire(&s.module)?],
        Encoding::FirePerLayer(p) => p
            .modules
            .iter()
            .map(params::to_fire)
            .collect::<Result<_, _>>()?,
        Encoding::Baseline(_) => vec![],
    })
}

/// The stated scale of every expected output of a case. spec: [num.compare]
fn with_scales(
    d: &Draft,
    mut out: BTreeMap<String, Tensor>,
) -> crate::error::Result<BTreeMap<String, Tensor>> {
    let scale = match d.kind {
        Kind::Bias => {
            let ms = modules(&d.encoding)?;
            if ms.is_empty() {
                max_abs(out.values())
            } else {
                ms.iter()
                    .map(|m| fire_scale(m, &d.inputs.queries, &d.inputs.keys))
                    .fold(0.0, f64::max)
            }
        }
        Kind::Attention => max_abs(d.inputs.v.iter()),
        Kind::Vjp => max_abs(out.values()),
    };
    for t in out.values_mut() {
        t.scale = Some(scale);
    }
    Ok(out)
}

/// Expected outputs, those under conventions, and per convention the alternatives.
type Graded = (
    Option<BTreeMap<String, Tensor>>,
    Option<BTreeMap<String, BTreeMap<String, Tensor>>>,
    Option<Vec<BTreeMap<String, Tensor>>>,
    Option<BTreeMap<String, Vec<BTreeMap<String, Tensor>>>>,
);

/// A gradient case on a kink ([`Flag::Kink`]): its outputs under every sub-gradient other than
/// the spec's that changes them, as acceptable alternatives ([`Subgradients::others`]), for the
/// normative cotangent and for each convention's; every output of the case then takes the
/// largest magnitude among them all as its scale (a bound on what a correct implementation
/// returns). spec: [grad.kinks], [vec.case]
fn kink_alternatives(
    d: &Draft,
    expected: Option<BTreeMap<String, Tensor>>,
    under: Option<BTreeMap<String, BTreeMap<String, Tensor>>>,
) -> crate::error::Result<Graded> {
    let Some(mut expected) = expected else {
        return Ok((None, under, None, None));
    };
    let others = |inputs: &Inputs, want: &BTreeMap<String, Tensor>| {
        let mut alts: Vec<BTreeMap<String, Tensor>> = Vec::new();
        for sub in Subgradients::others() {
            let alt = evaluate_subgradients(&d.encoding, inputs, sub)?;
            let same = |a: &BTreeMap<String, Tensor>| {
                a.iter()
                    .all(|(k, t)| want.get(k).is_some_and(|w| w.data == t.data))
            };
            if !same(&alt) && !alts.iter().any(|a| a == &alt) {
                alts.push(alt);
            }
        }
        crate::error::Result::Ok(alts)
    };
    let mut alternatives = others(&d.inputs, &expected)?;
    let mut alternatives_under = BTreeMap::new();
    if let Some(under) = &under {
        for (name, want) in under {
            let mut inputs = d.inputs.clone();
            if name == crate::conventions::CAUSAL_COTANGENT {
                inputs.cotangent = crate::conventions::causal_cotangent(&d.inputs);
            }
            alternatives_under.insert(name.clone(), others(&inputs, want)?);
        }
    }
    let scale = max_abs(
        expected
            .values()
            .chain(
                under
                    .iter()
                    .flat_map(|u| u.values().flat_map(|m| m.values())),
            )
            .chain(alternatives.iter().flat_map(|m| m.values()))
            .chain(
                alternatives_under
                    .values()
                    .flatten()
                    .flat_map(|m| m.values()),
            ),
    );
    let rescale = |m: &mut BTreeMap<String, Tensor>| {
        m.values_mut().for_each(|t| t.scale = Some(scale));
    };
    rescale(&mut expected);
    alternatives.iter_mut().for_each(rescale);
    alternatives_under.values_mut().flatten().for_each(rescale);
    let mut under = under;
    under
        .iter_mut()
        .flat_map(|u| u.values_mut())
        .for_each(rescale);
    let alternatives_under: BTreeMap<_, _> = alternatives_under
        .into_iter()
        .filter(|(_, a)| !a.is_empty())
        .collect();
    Ok((
        Some(expected),
        under,
        (!alternatives.is_empty()).then_some(alternatives),
        (!alternatives_under.is_empty()).then_some(alternatives_under),
    ))
}

/// The acceptable alternative of an official-T5 bias case: at a distance whose bucket the port's
/// float32 library decides ([`OfficialBucketing::arithmetic_buckets`]), the value of the other
/// bucket. `None` when every distance is robust; an error when a distance has more than two
/// candidate buckets (such a case would need more than one alternative: choose other positions).
/// spec: [t5.bucket.official.float], [vec.case]
fn acceptable(d: &Draft) -> crate::error::Result<Option<BTreeMap<String, Tensor>>> {
    let Encoding::Baseline(b) = &d.encoding else {
        return Ok(None);
    };
    if b.name != "t5-official" || d.kind != Kind::Bias {
        return Ok(None);
    }
    let Some(t5) = crate::vectors::baselines::official(b)? else {
        return Ok(None);
    };
    let (q, k) = (&d.inputs.queries, &d.inputs.keys);
    let (nq, nk) = (q.len(), k.len());
    let mut alt = vec![0.0; t5.values.len() * nq * nk];
    let mut fragile = false;
    for (r, &i) in q.iter().enumerate() {
        for (c, &j) in k.iter().enumerate() {
            let normative = t5.bucketing.bucket_of(i as u64, j as u64);
            let mut bucket = normative;
            let n = (i - j).unsigned_abs();
            let future = j > i;
            // Only the log-binned distances have arithmetic: the bucket id within the side.
            let offset = if t5.bucketing.bidirectional() && future {
                t5.bucketing.side_buckets()
            } else {
                0
            };
            if !future || t5.bucketing.bidirectional() {
                let side = t5.bucketing.arithmetic_buckets(n);
                match side.as_slice() {
                    [_] => {}
                    [a, b] => {
                        fragile = true;
                        let other = if *a + offset == normative { *b } else { *a };
                        bucket = other + offset;
                    }
                    many => {
                        return Err(Error::Draft {
                            case: d.name.clone(),
                            reason: format!(
                                "distance {n} has {} candidate buckets {many:?}",
                                many.len()
                            ),
                        })
                    }
                }
            }
            for (h, row) in t5.values.iter().enumerate() {
                alt[(h * nq + r) * nk + c] = row[bucket as usize];
            }
        }
    }
    if !fragile {
        return Ok(None);
    }
    let mut out = BTreeMap::new();
    let shape = vec![t5.values.len(), nq, nk];
    out.insert(
        "bias".to_owned(),
        with_scales(
            d,
            BTreeMap::from([("bias".to_owned(), Tensor::new(shape, alt))]),
        )?
        .remove("bias")
        .unwrap_or_else(|| Tensor::new(vec![], vec![])),
    );
    Ok(Some(out))
}

/// Turns drafts into a file: computes every expected output with the reference and checks
/// that every invalid draft is rejected by it. spec: [vec.generation], [vec.invalid]
pub fn file(
    family: &str,
    stem: &str,
    description: &str,
    drafts: Vec<Draft>,
) -> crate::error::Result<(String, VectorFile)> {
    let mut cases = Vec::new();
    let mut clauses: Vec<String> = Vec::new();
    for d in drafts {
        let id = format!("{family}/{stem}/{}", d.name);
        let result = evaluate_request(&d.encoding, d.kind, &d.inputs, None);
        let acceptable = if d.invalid {
            None
        } else {
            acceptable(&d)
                .map_err(|e| draft(&id, format!("acceptable outputs: {e}")))?
                .map(|a| vec![a])
        };
        let (verdict, expected, under) = match (d.invalid, result) {
            (true, Err(_)) => (Verdict::Invalid, None, None),
            (true, Ok(_)) => {
                return Err(draft(
                    &id,
                    "drafted as invalid but the reference accepts it",
                ))
            }
            (false, Err(e)) => {
                return Err(draft(
                    &id,
                    format!("the reference rejects a valid draft: {e}"),
                ))
            }
            (false, Ok(out)) => {
                let restricted =
                    crate::conventions::causal_cotangent(&d.inputs).filter(|_| d.kind == Kind::Vjp);
                let under = if let Some(cot) = restricted {
                    let mut inputs = d.inputs.clone();
                    inputs.cotangent = Some(cot);
                    let causal = evaluate_request(&d.encoding, d.kind, &inputs, None)
                        .map_err(|e| draft(&id, format!("causal cotangent: {e}")))?;
                    let mut m = BTreeMap::new();
                    m.insert(
                        crate::conventions::CAUSAL_COTANGENT.to_owned(),
                        with_scales(&d, causal)?,
                    );
                    Some(m)
                } else if d.kind == Kind::Attention {
                    let before = evaluate_placed(
                        &d.encoding,
                        d.kind,
                        &d.inputs,
                        None,
                        Placement::BeforeScaling,
                    )
                    .map_err(|e| draft(&id, format!("before-scaling: {e}")))?;
                    let mut m = BTreeMap::new();
                    m.insert(
                        "placement=before-scaling".to_owned(),
                        with_scales(&d, before)?,
                    );
                    Some(m)
                } else {
                    None
                };
                (Verdict::Valid, Some(with_scales(&d, out)?), under)
            }
        };
        // On a kink, the outputs under every other sub-gradient, beside the normative ones and
        // those under the causal cotangent.
        let (expected, under, acceptable, acceptable_under) =
            if d.flags.contains(&Flag::Kink) && verdict == Verdict::Valid {
                kink_alternatives(&d, expected, under)
                    .map_err(|e| draft(&id, format!("sub-gradient alternatives: {e}")))?
            } else {
                (expected, under, acceptable, None)
            };
        for c in &d.clauses {
            if !clauses.iter().any(|x| x == c) {
                clauses.push((*c).to_owned());
            }
        }
        cases.push(Case {
            id,
            description: d.description,
            clauses: d.clauses.iter().map(|c| (*c).to_owned()).collect(),
            flags: d.flags,
            kind: d.kind,
            result: verdict,
            profile: d.profile.into(),
            encoding: d.encoding,
            inputs: d.inputs,
            expected,
            expected_under: under,
            acceptable,
            acceptable_under,
        });
    }
    clauses.sort();
    Ok((
        format!("{family}/{stem}.yaml"),
        VectorFile {
            format: FORMAT,
            family: family.into(),
            description: description.into(),
            clauses,
            cases,
        },
    ))
}

/// Shorthand for a FIRE module's parameters.
pub fn fp(f: &Fire) -> FireParams {
    params::from_fire(f)
}

fn draft(case: &str, reason: impl Into<String>) -> Error {
    Error::Draft {
        case: case.to_owned(),
        reason: reason.into(),
    }
}
