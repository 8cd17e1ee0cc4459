//! The baselines' own traps, and attention's: T5's binary32 bucketing and its direction, Alibi's
//! slopes for head counts that are not powers of two, Kerple's two forms, and where the bias
//! enters the logits. spec: [variants.catalogue]

use nalgebra::DVector;

use super::{Deviation, Variant};
use crate::attention::Placement;
use crate::baselines::kerple::{kerple_log, kerple_power};
use crate::baselines::t5_official::log_binary32;
use crate::baselines::{KerpleLog, KerplePower, OfficialBucketing};
use crate::bias::Pair;
use crate::error::{Error, Result};
use crate::positions::{as_real, Position};

use Deviation::{AlibiSlopes, Kerple, T5Bucket};

#[rustfmt::skip]
pub(super) const BASELINES: &[Variant] = &[
    // T5, official bucketing.
    Variant {
        tolerated: Some("binary64 differs from the official binary32 only at distances within float32 rounding of a bucket edge, where float32 libraries differ too (XLA's fused division, vectorised logs): those elements accept either bucket"),
        ..v("t5-binary64-buckets", "computes the log-binned bucket in binary64 where the official code computes in binary32", "t5.bucket.official.float",
      "torch.log(n.double() / max_exact) / math.log(max_distance / max_exact)", T5Bucket(t5_binary64))
    },
    v("t5-bidirectional-swapped", "buckets with the other direction setting (encoder buckets in a decoder, or the reverse)", "t5.bucket.official",
      "_relative_position_bucket(rel, bidirectional=not self.is_decoder)  # inverted", T5Bucket(t5_direction_swapped)),
    v("t5-distance-reversed", "passes query − key where the bucketing takes key − query", "t5.bucket.official",
      "rel = query_pos[:, None] - key_pos[None, :]", T5Bucket(t5_distance_reversed)),
    v("t5-future-mirrored", "gives keys after the query the bucket of the mirrored distance instead of bucket 0 (or their own half)", "t5.future",
      "n = rel.abs()  # instead of -torch.min(rel, 0) / the bidirectional offset", T5Bucket(t5_future_mirrored)),
    v("t5-log-bucket-rounded", "rounds the log-binned bucket to nearest instead of truncating", "t5.bucket.official",
      "max_exact + torch.round(t).long()", T5Bucket(t5_rounded)),
    // Alibi.
    v("alibi-slopes-geometric", "uses 2^(−8h/H) for every head count, not only powers of two", "alibi.slopes",
      "[2 ** (-8 * h / H) for h in range(1, H + 1)]", AlibiSlopes(alibi_geometric)),
    v("alibi-slopes-from-zero", "starts the geometric sequence at h = 0, so the first slope is 1", "alibi.slopes",
      "[ratio ** h for h in range(H)]", AlibiSlopes(alibi_from_zero)),
    // Kerple.
    v("kerple-log-power-swapped", "computes the power form for a log configuration and the log form for a power one", "kerple.log",
      "-r1 * rel ** r2  # where the module is kerple-log", Kerple { log: kerple_log_as_power, power: kerple_power_as_log }),
    v("kerple-signed-distance", "takes i − j without |·|: keys after the query see a negative distance (NaN or a sign flip)", "conv.future",
      "-r1 * torch.log1p(r2 * (pos[:, None] - pos[None, :]))", Kerple { log: kerple_log_signed, power: kerple_power_signed }),
    // Attention.
    v("bias-before-scaling", "adds the bias before the 1/√d scaling: (q·kᵀ + b)/√d", "attn.placement",
      "softmax((q @ k.T + bias) / math.sqrt(d))", Deviation::Placement(Placement::BeforeScaling)),
    v("no-causal-mask", "attends to every key, keys after the query included: the causal mask left out", "attn.causal",
      "softmax(q @ k.T / math.sqrt(d) + bias) @ v  # no mask, no is_causal=True", Deviation::Unmasked),
    v("bias-dropped", "attends causally without the bias: the bias never reaches the logits (an SDPA or flash path given the causal flag and no attn_mask)", "attn.logits",
      "F.scaled_dot_product_attention(q, k, v, is_causal=True)  # attn_mask=bias left out", Deviation::BiasDropped),
];

const fn v(
    name: &'static str,
    summary: &'static str,
    violates: &'static str,
    looks_like: &'static str,
    deviation: Deviation,
) -> Variant {
    Variant {
        name,
        summary,
        violates,
        looks_like,
        deviation,
        tolerated: None,
    }
}

/// How a T5 deviation computes the bucket; the correct reading is `Bucketing::OFFICIAL`.
#[derive(Clone, Copy)]
struct Bucketing {
    binary64: bool,
    swap_direction: bool,
    query_minus_key: bool,
    mirror_future: bool,
    round: bool,
}

impl Bucketing {
    const OFFICIAL: Self = Self {
        binary64: false,
        swap_direction: false,
        query_minus_key: false,
        mirror_future: false,
        round: false,
    };
}

/// mesh-tensorflow's `_relative_position_bucket`, transcribed once with the deviations as
/// switches (the reference's own bucketing, [`OfficialBucketing::bucket_of`], is independent of
/// this transcription). spec: [t5.bucket.official], [t5.bucket.official.float]
fn bucket(t5: &OfficialBucketing, i: Position, j: Position, how: Bucketing) -> i64 {
    let (i, j) = (as_real(i), as_real(j));
    let rel = if how.query_minus_key { i - j } else { j - i };
    let bidirectional = t5.bidirectional() != how.swap_direction;
    let mut n = -rel;
    let mut side = i64::from(t5.num_buckets());
    let mut offset = 0;
    if bidirectional {
        side /= 2;
        if n < 0.0 && !how.mirror_future {
            offset = side;
        }
        n = n.abs();
    } else if how.mirror_future {
        n = n.abs();
    } else {
        n = n.max(0.0);
    }
    let exact = side / 2;
    if n < exact as f64 {
        // n is a non-negative integer below `exact`.
        return offset + n as i64;
    }
    let span = (t5.max_distance() as f64 / exact as f64).ln();
    let t = if how.binary64 {
        (n / exact as f64).ln() / span * (side - exact) as f64
    } else {
        let log = log_binary32(n as f32 / exact as f32);
        f64::from(log / span as f32 * (side - exact) as f32)
    };
    let step = if how.round { t.round() } else { t.trunc() };
    offset + (exact + step as i64).min(side - 1)
}

fn t5_binary64(t5: &OfficialBucketing, i: Position, j: Position) -> i64 {
    bucket(
        t5,
        i,
        j,
        Bucketing {
            binary64: true,
            ..Bucketing::OFFICIAL
        },
    )
}

fn t5_direction_swapped(t5: &OfficialBucketing, i: Position, j: Position) -> i64 {
    bucket(
        t5,
        i,
        j,
        Bucketing {
            swap_direction: true,
            ..Bucketing::OFFICIAL
        },
    )
}

fn t5_distance_reversed(t5: &OfficialBucketing, i: Position, j: Position) -> i64 {
    bucket(
        t5,
        i,
        j,
        Bucketing {
            query_minus_key: true,
            ..Bucketing::OFFICIAL
        },
    )
}

fn t5_future_mirrored(t5: &OfficialBucketing, i: Position, j: Position) -> i64 {
    bucket(
        t5,
        i,
        j,
        Bucketing {
            mirror_future: true,
            ..Bucketing::OFFICIAL
        },
    )
}

fn t5_rounded(t5: &OfficialBucketing, i: Position, j: Position) -> i64 {
    bucket(
        t5,
        i,
        j,
        Bucketing {
            round: true,
            ..Bucketing::OFFICIAL
        },
    )
}

fn no_heads() -> Error {
    Error::Empty {
        what: "Alibi heads".into(),
    }
}

fn alibi_geometric(heads: usize) -> Result<Vec<f64>> {
    if heads == 0 {
        return Err(no_heads());
    }
    let h = heads as f64;
    Ok((1..=heads).map(|n| (-8.0 * n as f64 / h).exp2()).collect())
}

fn alibi_from_zero(heads: usize) -> Result<Vec<f64>> {
    if heads == 0 {
        return Err(no_heads());
    }
    let h = heads as f64;
    Ok((0..heads).map(|n| (-8.0 * n as f64 / h).exp2()).collect())
}

fn per_head(r1: &[f64], r2: &[f64], f: impl Fn(f64, f64) -> f64) -> DVector<f64> {
    DVector::from_iterator(r1.len(), r1.iter().zip(r2).map(|(&a, &b)| f(a, b)))
}

fn distance(p: Pair) -> f64 {
    as_real(p.i) - as_real(p.j)
}

fn kerple_log_as_power(k: &KerpleLog, p: Pair) -> DVector<f64> {
    let n = distance(p).abs();
    per_head(&k.r1, &k.r2, |a, b| kerple_power(a, b, n))
}

fn kerple_power_as_log(k: &KerplePower, p: Pair) -> DVector<f64> {
    let n = distance(p).abs();
    per_head(&k.r1, &k.r2, |a, b| kerple_log(a, b, n))
}

fn kerple_log_signed(k: &KerpleLog, p: Pair) -> DVector<f64> {
    let n = distance(p);
    per_head(&k.r1, &k.r2, |a, b| kerple_log(a, b, n))
}

fn kerple_power_signed(k: &KerplePower, p: Pair) -> DVector<f64> {
    let n = distance(p);
    per_head(&k.r1, &k.r2, |a, b| kerple_power(a, b, n))
}
