//! Comparisons shared by the parity tests. Both propagate NaN: `f32::max` drops a NaN
//! argument, so a fold over `m.max(|x − y|)` would let a NaN output (a buffer read before it
//! was written, a 0/0) pass any tolerance.

/// `max |a − b|`, NaN when any difference is NaN (the lengths must match).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "compared slices differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, nan_max)
}

/// `max |x|`, NaN when any value is NaN.
pub fn largest(x: &[f32]) -> f32 {
    x.iter().map(|v| v.abs()).fold(0.0, nan_max)
}

fn nan_max(m: f32, d: f32) -> f32 {
    if m.is_nan() || d.is_nan() {
        f32::NAN
    } else {
        m.max(d)
    }
}
