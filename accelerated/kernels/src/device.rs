//! The bias sources as flat tables for a device kernel (the CUDA fused attention,
//! [`CUDA_SOURCE`]), and the device kernel's algorithm in Rust.
//!
//! A GPU kernel cannot call back into a [`crate::BiasPlan`]; it needs the bias as a
//! formula over small arrays. Both forms the fast kernels use have one:
//!
//! - a distance table: `b_h(i, j) = T[h·cap + (i − j)]` (Alibi, Kerple, T5, Sandwich, NoPE);
//! - compiled FIRE: `x = ψ[i − j]·inv[q]`, `s = #{t_k ≤ x}` (a binary search over the
//!   breakpoints), `b_h = slope[h·S + s]·x + intercept[h·S + s]`.
//!
//! [`DeviceBias::value`] is that formula, written once in Rust; the tests check it against
//! every source's own tiles, and [`attend_rowwise`] — the CUDA kernel's algorithm (one query row
//! at a time, keys in order, online softmax) — against the tiled CPU kernel. The CUDA source
//! mirrors both line for line; a GPU run (`accelerated/scripts/gpu-check.sh`) compares it with
//! the CPU. Queries are the contiguous positions `q0..q0 + Nq`, keys `0..Nk` (a full sequence or
//! a KV cache). spec: [attn.logits], [attn.causal], [fire.bias]
//!
//! The tile abstraction ([`crate::tile`]) knows nothing of this format: a source that has a
//! table form implements [`DeviceTables`] besides [`TileBias`].

use fire_vocabulary::Position;

use crate::attention::Shape;
use crate::error::{Error, Result};
use crate::tile::TileBias;

/// The CUDA C source of the fused attention kernel that reads [`DeviceBias`] tables; the
/// accelerated crate compiles it at run time (NVRTC) and launches it on candle's CUDA tensors.
pub const CUDA_SOURCE: &str = include_str!("fused_attention.cu");

/// The CUDA kernel's entry point in [`CUDA_SOURCE`].
pub const CUDA_ENTRY: &str = "fire_fused_attention_f32";

/// A bias source the device kernel can read: besides its tiles, its bias as flat tables.
pub trait DeviceTables: TileBias {
    /// The bias as flat tables for these query positions and distances below `distances`;
    /// `None` when the source has no table form (a GeLU FIRE).
    fn device_bias(&self, queries: &[Position], distances: usize) -> Option<DeviceBias>;
}

/// A bias as the device kernel reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceBias {
    /// No bias.
    None,
    /// `b_h(n) = table[h·capacity + n]` for distances `n < capacity`.
    Table {
        /// `H`.
        heads: usize,
        /// Distances covered.
        capacity: usize,
        /// `[H, capacity]`, distance-major per head.
        table: Vec<f32>,
    },
    /// Compiled FIRE.
    Fire {
        /// `ψ(n)` for `n < psi.len()`.
        psi: Vec<f32>,
        /// `1 / (ψ(max(i, L)) + ε)` per query row.
        inv: Vec<f32>,
        /// Sorted breakpoints `t_0 < … < t_{B−1}`.
        breakpoints: Vec<f32>,
        /// `[H, B + 1]`.
        slope: Vec<f32>,
        /// `[H, B + 1]`.
        intercept: Vec<f32>,
    },
}

impl DeviceBias {
    /// The distances the tables cover (`usize::MAX` without a bias).
    pub fn capacity(&self) -> usize {
        match self {
            DeviceBias::None => usize::MAX,
            DeviceBias::Table { capacity, .. } => *capacity,
            DeviceBias::Fire { psi, .. } => psi.len(),
        }
    }

    /// `b_head` for query row `q` (position `i`) at distance `n = i − j ≤ i`: exactly what the
    /// CUDA kernel computes.
    pub fn value(&self, head: usize, q: usize, n: usize) -> f32 {
        match self {
            DeviceBias::None => 0.0,
            DeviceBias::Table {
                capacity, table, ..
            } => table[head * capacity + n],
            DeviceBias::Fire {
                psi,
                inv,
                breakpoints,
                slope,
                intercept,
            } => {
                let x = psi[n] * inv[q];
                let (mut lo, mut hi) = (0, breakpoints.len());
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if breakpoints[mid] <= x {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                let at = head * (breakpoints.len() + 1) + lo;
                slope[at] * x + intercept[at]
            }
        }
    }
}

/// The CUDA kernel's algorithm on the CPU: causal attention of queries `q0..q0 + Nq` against
/// keys `0..Nk`, one row at a time, keys in order with an online softmax (`exp` in f32), the
/// bias from [`DeviceBias::value`]. `q: [H, Nq, d]`, `k, v: [H, Nk, d]`; returns `[H, Nq, d]`.
pub fn attend_rowwise(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape_: Shape,
    q0: Position,
    bias: &DeviceBias,
) -> Result<Vec<f32>> {
    shape_.check_buffers(q, k, v)?;
    let Shape {
        heads,
        queries: nq,
        keys: nk,
        head_dim: d,
    } = shape_;
    let last_query = q0 as usize + nq.saturating_sub(1);
    if last_query >= bias.capacity() {
        return Err(Error::Invalid {
            what: "device bias".into(),
            reason: format!(
                "distance {last_query} is past its {} entries",
                bias.capacity()
            ),
        });
    }
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; q.len()];
    for h in 0..heads {
        for r in 0..nq {
            let i = q0 as usize + r;
            let qr = &q[(h * nq + r) * d..(h * nq + r + 1) * d];
            let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
            let acc = &mut out[(h * nq + r) * d..(h * nq + r + 1) * d];
            for j in 0..=i.min(nk.saturating_sub(1)) {
                let kr = &k[(h * nk + j) * d..(h * nk + j + 1) * d];
                let s: f32 = qr.iter().zip(kr).map(|(a, b)| a * scale * b).sum::<f32>()
                    + bias.value(h, r, i - j);
                let mn = m.max(s);
                let alpha = (m - mn).exp();
                let p = (s - mn).exp();
                l = l * alpha + p;
                let vr = &v[(h * nk + j) * d..(h * nk + j + 1) * d];
                for (a, &vv) in acc.iter_mut().zip(vr) {
                    *a = *a * alpha + p * vv;
                }
                m = mn;
            }
            acc.iter_mut().for_each(|a| *a /= l);
        }
    }
    Ok(out)
}
