//! Families of the baseline encodings (`t5/`, `alibi/`, `kerple/`, `sandwich/`, `rope/`, `nope/`).
//! spec: [vec.families]

use std::collections::BTreeMap;

use fire_reference::baselines::{
    Alibi, KerpleLog, KerplePower, OfficialBucketing, SandwichPaper, T5Buckets, T5Official,
    T5Simplified,
};
use fire_reference::fire::init::SplitMix64;

use super::common::{file, random_tensor, range, Draft};
use crate::vectors::flags::Flag;
use crate::vectors::format::{BaselineParams, Encoding, Kind, Tensor, VectorFile};

fn enc(name: &str, settings: &[(&str, i64)], params: Vec<(&str, Tensor)>) -> Encoding {
    Encoding::Baseline(BaselineParams {
        name: name.into(),
        settings: settings
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
        params: params
            .into_iter()
            .map(|(k, t)| (k.to_owned(), t))
            .collect::<BTreeMap<_, _>>(),
    })
}

fn vec1(v: &[f64]) -> Tensor {
    Tensor::new(vec![v.len()], v.to_vec())
}

fn table(rows: &[Vec<f64>]) -> Tensor {
    Tensor::new(vec![rows.len(), rows[0].len()], rows.concat())
}

/// Dyadic values (multiples of 1/8 in [−2, 2]): exact in every dtype, so T5 cases can be `exact`.
pub(super) fn dyadic(heads: usize, n: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut r = SplitMix64::new(seed);
    (0..heads)
        .map(|_| {
            (0..n)
                .map(|_| ((r.next_u64() % 33) as f64 - 16.0) / 8.0)
                .collect()
        })
        .collect()
}

fn bias(
    name: &str,
    desc: &str,
    e: Encoding,
    q: Vec<i64>,
    k: Vec<i64>,
    clauses: &[&'static str],
    profile: &'static str,
) -> Draft {
    Draft::bias(name, desc, e, q, k)
        .clauses(clauses)
        .clauses(&["baselines.heads", "conv.layout"])
        .flags(&[Flag::Baseline, Flag::FutureKeys])
        .profile(profile)
}

/// Every baseline file.
pub fn all() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let simplified = T5Simplified {
        cap: 6,
        values: dyadic(3, 7, 1),
    };
    let buckets = T5Buckets {
        boundaries: vec![0, 1, 2, 4, 8, 16],
        values: dyadic(3, 6, 2),
    };
    let official = T5Official {
        bucketing: OfficialBucketing::new(8, 20, false)?,
        values: dyadic(2, 8, 3),
    };
    let official_bi = T5Official {
        bucketing: OfficialBucketing::new(8, 20, true)?,
        values: dyadic(2, 8, 4),
    };
    let official_default = T5Official {
        bucketing: OfficialBucketing::t5_default(false),
        values: dyadic(2, 32, 5),
    };
    let alibi = Alibi::standard(4)?;
    let klog = KerpleLog {
        r1: vec![0.5, 1.25, 2.0],
        r2: vec![0.125, 1.5, 3.0],
    };
    let kpow = KerplePower {
        r1: vec![0.5, 1.0, 2.0],
        r2: vec![0.5, 0.5, 1.5],
    };
    let spaper = SandwichPaper {
        r1: vec![0.5, 1.0],
        r2: 4,
        dim: 8.0,
    };
    let t5_enc = |t: &T5Official| {
        enc(
            "t5-official",
            &[
                ("num_buckets", i64::from(t.bucketing.num_buckets())),
                ("max_distance", t.bucketing.max_distance() as i64),
                ("bidirectional", i64::from(t.bucketing.bidirectional())),
            ],
            vec![("values", table(&t.values))],
        )
    };
    let far: Vec<i64> = vec![0, 1, 5, 12, 19, 20, 21, 64, 127, 128, 129, 500];
    let t5 = vec![
        bias(
            "simplified",
            "b = r_{h, min(i − j, K)} with K = 6",
            enc(
                "t5-simplified",
                &[("cap", 6)],
                vec![("values", table(&simplified.values))],
            ),
            range(10),
            range(10),
            &["t5.simplified", "t5.future"],
            "exact",
        ),
        bias(
            "buckets",
            "general boundaries 0, 1, 2, 4, 8, 16",
            enc(
                "t5-buckets",
                &[],
                vec![
                    ("boundaries", vec1(&[0.0, 1.0, 2.0, 4.0, 8.0, 16.0])),
                    ("values", table(&buckets.values)),
                ],
            ),
            range(20),
            range(20),
            &["t5.buckets", "t5.future"],
            "exact",
        ),
        bias(
            "official-8-20",
            "mesh-tensorflow bucketing, 8 buckets, max distance 20, unidirectional",
            t5_enc(&official),
            vec![0, 3, 7, 19, 20, 21, 40],
            range(41),
            &[
                "t5.bucket.official",
                "t5.bucket.official.float",
                "t5.official",
                "t5.official.boundaries",
                "t5.future",
                "conv.distance",
            ],
            "exact",
        ),
        bias(
            "official-8-20-bidirectional",
            "the bidirectional bucketing: future keys use the upper buckets",
            t5_enc(&official_bi),
            vec![0, 5, 20],
            range(30),
            &["t5.bucket.official", "t5.official", "t5.future"],
            "exact",
        ),
        bias(
            "official-default",
            "T5's defaults (32 buckets, max distance 128) at the log-bucket edges",
            t5_enc(&official_default),
            far.clone(),
            far,
            &[
                "t5.bucket.official",
                "t5.bucket.official.float",
                "t5.official",
            ],
            "exact",
        ),
    ];
    // Configurations where the binary32 arithmetic of the official code and binary64 give
    // different buckets (46 buckets / 164 at distance 107: 41 vs 40; 48 / 81 at 36: 31 vs 32).
    let mut t5 = t5;
    for (n, max, at, seed) in [(46u32, 164u64, 107i64, 6u64), (48, 81, 36, 7)] {
        let t = T5Official {
            bucketing: OfficialBucketing::new(n, max, false)?,
            values: dyadic(2, n as usize, seed),
        };
        t5.push(
            bias(
                &format!("official-{n}-{max}-binary32"),
                &format!(
                    "{n} buckets, max distance {max}: at distance {at} binary32 and binary64 bucketing differ, and binary32 is the code's"
                ),
                t5_enc(&t),
                vec![at, at + 1, 2 * at],
                range(at + 1),
                &[
                    "t5.bucket.official",
                    "t5.bucket.official.float",
                    "t5.official",
                ],
                "exact",
            )
            .flags(&[Flag::Binary32]),
        );
    }
    let standard = |heads: i64| {
        bias(
            &format!("standard-{heads}-heads"),
            &format!("the standard slopes for {heads} heads, computed by the implementation from the head count"),
            enc("alibi-standard", &[("heads", heads)], vec![]),
            range(10),
            range(10),
            &["alibi.bias", "alibi.slopes"],
            "f32",
        )
        .flags(&[Flag::StandardSlopes])
    };
    let other = vec![
        ("alibi", "standard", standard(6)),
        ("alibi", "standard", standard(8)),
        ("alibi", "standard", standard(12)),
        (
            "alibi",
            "slopes",
            bias(
                "standard-4",
                "standard slopes for 4 heads",
                enc("alibi", &[], vec![("slopes", vec1(&alibi.slopes))]),
                range(12),
                range(12),
                &["alibi.bias", "alibi.slopes"],
                "f32",
            ),
        ),
        (
            "kerple",
            "log",
            bias(
                "log",
                "−r1·ln(1 + r2·|i − j|)",
                enc(
                    "kerple-log",
                    &[],
                    vec![("r1", vec1(&klog.r1)), ("r2", vec1(&klog.r2))],
                ),
                range(12),
                range(12),
                &["kerple.params", "kerple.log"],
                "f32",
            ),
        ),
        (
            "kerple",
            "power",
            bias(
                "power",
                "−r1·|i − j|^r2",
                enc(
                    "kerple-power",
                    &[],
                    vec![("r1", vec1(&kpow.r1)), ("r2", vec1(&kpow.r2))],
                ),
                range(12),
                range(12),
                &["kerple.params", "kerple.power"],
                "f32",
            ),
        ),
        (
            "sandwich",
            "paper",
            bias(
                "paper",
                "r1·Σ_k cos((i − j)·10000^(−k/d'))",
                enc(
                    "sandwich-paper",
                    &[("r2", 4)],
                    vec![
                        ("r1", vec1(&spaper.r1)),
                        ("dim", Tensor::new(vec![], vec![8.0])),
                    ],
                ),
                range(12),
                range(12),
                &["sandwich.paper"],
                "f32",
            ),
        ),
        (
            "sandwich",
            "centred",
            bias(
                "centred",
                "the centred, head-scaled form",
                enc("sandwich-centred", &[("heads", 3), ("head_dim", 8)], vec![]),
                range(12),
                range(12),
                &["sandwich.centred"],
                "f32",
            ),
        ),
        (
            "nope",
            "zero",
            bias(
                "zero",
                "no positional bias at all",
                enc("nope", &[("heads", 2)], vec![]),
                range(6),
                range(6),
                &["nope.bias"],
                "exact",
            ),
        ),
    ];
    let mut out = vec![
        file("t5", "buckets", "T5 relative position buckets", t5)?,
        invalid()?,
    ];
    let mut grouped: Vec<(&str, &str, Vec<Draft>)> = Vec::new();
    for (family, stem, d) in other {
        match grouped.last_mut() {
            Some((f, s, ds)) if *f == family && *s == stem => ds.push(d),
            _ => grouped.push((family, stem, vec![d])),
        }
    }
    for (family, stem, ds) in grouped {
        out.push(file(family, stem, &format!("{family} ({stem})"), ds)?);
    }
    // RoPE is not additive: attention outputs with rotated queries and keys.
    let rope = |name: &str,
                desc: &str,
                base: f64,
                scale: f64,
                interleaved: i64,
                clauses: &[&'static str]| {
        let mut d = Draft::bias(
            name,
            desc,
            enc(
                "rope",
                &[("interleaved", interleaved)],
                vec![
                    ("base", Tensor::new(vec![], vec![base])),
                    ("scale", Tensor::new(vec![], vec![scale])),
                ],
            ),
            range(10),
            range(10),
        )
        .kind(Kind::Attention)
        .clauses(clauses)
        .clauses(&[
            "rope.frequencies",
            "rope.rotation",
            "rope.score",
            "attn.causal",
        ])
        .flags(&[Flag::Baseline, Flag::Attention]);
        d.inputs.q = Some(random_tensor(vec![2, 10, 8], 40 + interleaved as u64));
        d.inputs.k = Some(random_tensor(vec![2, 10, 8], 50 + interleaved as u64));
        d.inputs.v = Some(random_tensor(vec![2, 10, 3], 60 + interleaved as u64));
        d
    };
    out.push(file(
        "rope",
        "attention",
        "RoPE and RoPE-PI inside causal attention",
        vec![
            rope(
                "half-split",
                "GPT-NeoX pairing (x_m, x_{m+d/2}), base 10000",
                10000.0,
                1.0,
                0,
                &["rope.pairing"],
            ),
            rope(
                "interleaved",
                "RoFormer pairing (x_{2m}, x_{2m+1})",
                10000.0,
                1.0,
                1,
                &["rope.pairing"],
            ),
            rope(
                "position-interpolation",
                "RoPE-PI with scale 1/4",
                10000.0,
                0.25,
                0,
                &["rope.pi"],
            ),
        ],
    )?);
    Ok(out)
}

/// `invalid/baselines`: baseline parameters an implementation must reject. spec: [vec.invalid],
/// [num.errors]
fn invalid() -> crate::error::Result<(String, VectorFile)> {
    let t5 = |n: i64, max: i64, bi: i64, width: usize| {
        enc(
            "t5-official",
            &[
                ("num_buckets", n),
                ("max_distance", max),
                ("bidirectional", bi),
            ],
            vec![("values", table(&dyadic(2, width, 9)))],
        )
    };
    let bad = |name: &str, desc: &str, e: Encoding, clause: &'static str| {
        Draft::bias(name, desc, e, range(4), range(4))
            .clauses(&["num.errors", "baselines.heads", clause])
            .flags(&[Flag::Baseline, Flag::InvalidParams])
            .invalid()
    };
    let cases = vec![
        bad(
            "t5-max-distance-at-max-exact",
            "32 unidirectional buckets (max_exact 16) with max_distance 16: log(max_distance / max_exact) = 0",
            t5(32, 16, 0, 32),
            "t5.bucket.official",
        ),
        bad(
            "t5-max-distance-below-max-exact",
            "16 bidirectional buckets (max_exact 4) with max_distance 3",
            t5(16, 3, 1, 16),
            "t5.bucket.official",
        ),
        bad(
            "t5-odd-bidirectional",
            "31 bidirectional buckets cannot split evenly between the two directions",
            t5(31, 128, 1, 31),
            "t5.bucket.official",
        ),
        bad(
            "t5-values-width",
            "a value table with 30 columns for 32 buckets",
            t5(32, 128, 0, 30),
            "t5.official",
        ),
        bad(
            "alibi-standard-zero-heads",
            "standard Alibi slopes for zero heads",
            enc("alibi-standard", &[("heads", 0)], vec![]),
            "alibi.slopes",
        ),
        bad(
            "alibi-negative-slope",
            "an Alibi slope below zero",
            enc("alibi", &[], vec![("slopes", vec1(&[0.5, -0.25]))]),
            "alibi.bias",
        ),
        bad(
            "kerple-power-exponent-above-two",
            "Kerple-power with r2 = 2.5 > 2",
            enc(
                "kerple-power",
                &[],
                vec![("r1", vec1(&[1.0, 1.0])), ("r2", vec1(&[0.5, 2.5]))],
            ),
            "kerple.params",
        ),
        bad(
            "kerple-log-zero-r2",
            "Kerple-log with r2 = 0",
            enc(
                "kerple-log",
                &[],
                vec![("r1", vec1(&[1.0, 1.0])), ("r2", vec1(&[0.5, 0.0]))],
            ),
            "kerple.params",
        ),
    ];
    file(
        "invalid",
        "baselines",
        "baseline parameters an implementation must reject",
        cases,
    )
}
