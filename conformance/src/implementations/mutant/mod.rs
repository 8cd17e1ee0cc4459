//! Mutants: an implementation computing in f32 or f64 arithmetic, with at most one catalogued
//! mistake injected, for the two-precision mutation test and for demonstrations
//! (`fire-conformance run --builtin mutant:eps-twice --dtype f32`).
//!
//! A mutant rejects exactly what the reference rejects (its verdict on validation is the
//! reference's); its values are its own, computed in its dtype by an independent transcription
//! of FIRE, the official T5 bucketing, Alibi, Kerple and causal attention (its private `fire`
//! and `baselines` modules), with the mistake as a switch. Without a mistake it is an honest f32 (or f64)
//! implementation, which must pass every case it runs: the check that the suite's tolerances
//! never fail correct f32 arithmetic. Gradients, RoPE and the other baselines are skipped with
//! that reason. spec: [variants.catalogue], [num.profiles]

mod baselines;
mod fire;
mod real;

use std::collections::BTreeMap;

use fire_reference::variants::{self, Variant};

use self::fire::Module;
use self::real::Real;
use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::implementations::reference::evaluate_request;
use crate::vectors::format::{BaselineParams, Encoding, FireParams, Kind, Tensor};
use crate::vectors::params;

/// The arithmetic a mutant computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arithmetic {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
}

impl Arithmetic {
    /// The dtype name of the protocol.
    pub fn dtype(self) -> &'static str {
        match self {
            Arithmetic::F32 => "f32",
            Arithmetic::F64 => "f64",
        }
    }
}

/// An implementation with at most one catalogued mistake, in f32 or f64.
#[derive(Debug, Clone, Copy)]
pub struct Mutant {
    mistake: Option<&'static Variant>,
    arithmetic: Arithmetic,
}

/// True when the mutant models the named catalogue entry (a test holds every entry modelled).
pub fn models(name: &str) -> bool {
    fire::MODELLED.contains(&name) || baselines::MODELLED.contains(&name)
}

impl Mutant {
    /// A mutant making the named mistake (`None`: an honest implementation).
    pub fn new(mistake: Option<&str>, arithmetic: Arithmetic) -> Result<Self, String> {
        let mistake = match mistake {
            None => None,
            Some(name) => {
                let v = variants::find(name)
                    .ok_or_else(|| format!("`{name}` is not a catalogued variant"))?;
                if !models(name) {
                    return Err(format!("the mutant does not model `{name}`"));
                }
                Some(v)
            }
        };
        Ok(Self {
            mistake,
            arithmetic,
        })
    }

    fn mistake(&self) -> &'static str {
        self.mistake.map_or("", |v| v.name)
    }

    fn compute<F: Real>(&self, r: &Request) -> Result<Tensor, Skip> {
        let m = self.mistake();
        if r.kind == Kind::Vjp {
            return Err(Skip("the mutant does not compute gradients"));
        }
        let q = positions(&r.inputs.queries);
        let k = positions(&r.inputs.keys);
        let layers: Vec<Vec<F>> = match &r.encoding {
            Encoding::Fire(p) => vec![fire_bias(p, &q, &k, m)?],
            Encoding::FireShared(s) => vec![fire_bias(&s.module, &q, &k, m)?; s.layers],
            Encoding::FirePerLayer(p) if m == "first-module-reused" && !p.modules.is_empty() => {
                vec![fire_bias(&p.modules[0], &q, &k, m)?; p.modules.len()]
            }
            Encoding::FirePerLayer(p) => p
                .modules
                .iter()
                .map(|f| fire_bias(f, &q, &k, m))
                .collect::<Result<_, _>>()?,
            Encoding::Baseline(b) => vec![baseline_bias(b, &q, &k, m)?],
        };
        let heads = layers[0].len() / (q.len() * k.len()).max(1);
        match r.kind {
            Kind::Bias => {
                let mut shape = vec![heads, q.len(), k.len()];
                if !matches!(r.encoding, Encoding::Fire(_) | Encoding::Baseline(_)) {
                    shape.insert(0, layers.len());
                }
                Ok(tensor(shape, layers.concat()))
            }
            Kind::Attention => attention(r, &layers[0], heads, &q, &k, m),
            Kind::Vjp => Err(Skip("the mutant does not compute gradients")),
        }
    }
}

/// Why a mutant skips a case.
struct Skip(&'static str);

fn positions(p: &[i64]) -> Vec<u64> {
    p.iter().map(|&v| v.unsigned_abs()).collect()
}

fn tensor<F: Real>(shape: Vec<usize>, data: Vec<F>) -> Tensor {
    Tensor::new(shape, data.into_iter().map(Real::f64).collect())
}

fn fire_bias<F: Real>(p: &FireParams, q: &[u64], k: &[u64], m: &str) -> Result<Vec<F>, Skip> {
    let f = params::to_fire(p).map_err(|_| Skip("unreadable FIRE parameters"))?;
    Ok(Module::<F>::new(&f).bias(q, k, m))
}

fn setting(b: &BaselineParams, key: &str) -> Result<i64, Skip> {
    b.settings
        .get(key)
        .copied()
        .ok_or(Skip("a baseline setting is missing"))
}

fn values(b: &BaselineParams, key: &str) -> Result<Vec<f64>, Skip> {
    b.params
        .get(key)
        .map(|t| t.data.clone())
        .ok_or(Skip("a baseline parameter is missing"))
}

fn baseline_bias<F: Real>(
    b: &BaselineParams,
    q: &[u64],
    k: &[u64],
    m: &str,
) -> Result<Vec<F>, Skip> {
    let pairs = || q.iter().flat_map(|&i| k.iter().map(move |&j| (i, j)));
    let per_head = |heads: usize, f: &dyn Fn(usize, u64, u64) -> F| -> Vec<F> {
        (0..heads)
            .flat_map(|h| pairs().map(move |(i, j)| f(h, i, j)).collect::<Vec<_>>())
            .collect()
    };
    let real = |p: u64| F::of(p as f64);
    Ok(match b.name.as_str() {
        "t5-official" => {
            let n = setting(b, "num_buckets")?;
            let max = setting(b, "max_distance")? as f64;
            let bidirectional = setting(b, "bidirectional")? != 0;
            let table = values(b, "values")?;
            let width = usize::try_from(n).map_err(|_| Skip("bad num_buckets"))?;
            let heads = table.len() / width.max(1);
            per_head(heads, &|h, i, j| {
                let bucket = baselines::t5_bucket(n, max, bidirectional, i as i64, j as i64, m);
                usize::try_from(bucket)
                    .ok()
                    .filter(|&b| b < width)
                    .map_or(F::of(f64::NAN), |b| F::of(table[h * width + b]))
            })
        }
        "alibi" | "alibi-standard" => {
            let slopes: Vec<F> = if b.name == "alibi" {
                values(b, "slopes")?.into_iter().map(F::of).collect()
            } else {
                let heads = usize::try_from(setting(b, "heads")?).map_err(|_| Skip("bad heads"))?;
                baselines::alibi_slopes(heads, m)
            };
            per_head(slopes.len(), &|h, i, j| {
                -(slopes[h] * (real(i) - real(j)).abs())
            })
        }
        "kerple-log" | "kerple-power" => {
            let r1: Vec<F> = values(b, "r1")?.into_iter().map(F::of).collect();
            let r2: Vec<F> = values(b, "r2")?.into_iter().map(F::of).collect();
            let log = b.name == "kerple-log";
            per_head(r1.len(), &|h, i, j| {
                baselines::kerple(log, r1[h], r2[h], real(i), real(j), m)
            })
        }
        _ => return Err(Skip("the mutant does not model this baseline")),
    })
}

fn attention<F: Real>(
    r: &Request,
    bias: &[F],
    heads: usize,
    q: &[u64],
    k: &[u64],
    m: &str,
) -> Result<Tensor, Skip> {
    let get = |t: &Option<Tensor>| t.clone().ok_or(Skip("attention inputs are missing"));
    let (tq, tk, tv) = (get(&r.inputs.q)?, get(&r.inputs.k)?, get(&r.inputs.v)?);
    let (dim, dv) = (tq.shape[2], tv.shape[2]);
    let cast = |t: &Tensor| t.data.iter().map(|&v| F::of(v)).collect::<Vec<F>>();
    let (xq, xk, xv) = (cast(&tq), cast(&tk), cast(&tv));
    let (nq, nk) = (q.len(), k.len());
    let mut out = Vec::with_capacity(heads * nq * dv);
    for h in 0..heads {
        out.extend(baselines::attend(
            &xq[h * nq * dim..(h + 1) * nq * dim],
            &xk[h * nk * dim..(h + 1) * nk * dim],
            &xv[h * nk * dv..(h + 1) * nk * dv],
            &bias[h * nq * nk..(h + 1) * nq * nk],
            q,
            k,
            dim,
            dv,
            m,
        ));
    }
    Ok(tensor(vec![heads, nq, dv], out))
}

impl Implementation for Mutant {
    fn capabilities(&mut self) -> crate::error::Result<Capabilities> {
        Ok(Capabilities {
            name: match self.mistake {
                Some(v) => format!("mutant `{}` ({})", v.name, self.arithmetic.dtype()),
                None => format!("honest mutant ({})", self.arithmetic.dtype()),
            },
            families: vec!["*".into()],
            dtypes: vec![self.arithmetic.dtype().into()],
            future_keys: Default::default(),
            placement: Default::default(),
            positions: Default::default(),
            state: Default::default(),
        })
    }

    fn run(&mut self, r: &Request) -> Reply {
        let rope = matches!(&r.encoding, Encoding::Baseline(b) if b.name == "rope");
        if rope {
            return Reply::Skipped("the mutant does not model RoPE".into());
        }
        // Validation is the reference's: a mutant's mistakes are in its values.
        if let Err(e) = evaluate_request(&r.encoding, r.kind, &r.inputs, None) {
            return Reply::Errored(e.to_string());
        }
        let out = match self.arithmetic {
            Arithmetic::F32 => self.compute::<f32>(r),
            Arithmetic::F64 => self.compute::<f64>(r),
        };
        match out {
            Ok(t) => {
                let mut m = BTreeMap::new();
                m.insert(
                    r.outputs.first().cloned().unwrap_or_else(|| "bias".into()),
                    t,
                );
                Reply::Output(m)
            }
            Err(Skip(reason)) => Reply::Skipped(reason.into()),
        }
    }
}
