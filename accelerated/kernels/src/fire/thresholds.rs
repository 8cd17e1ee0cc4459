//! Where a query's row crosses f_θ's breakpoints: for each breakpoint t in `(0, 1]` of a
//! compiled f_θ, the first distance n whose x = ψ(n)·(1/ψ(max(L, i))) reaches t, found in the
//! kernel's own f32 arithmetic, so that the runs the fill writes and the segments the score
//! product starts from agree with the entries the slow path computes.
//!
//! spec: [fire.input], [fire.normalizer]

use fire_vocabulary::Position;

use super::FireBias;

impl FireBias {
    /// The distance thresholds of the breakpoints `bps` for `queries` (with their reciprocal
    /// normalisers `inv`) into `thr`, `bps.len()` per query, and into `reach` how many of each
    /// row's a causal pair can cross. Each search starts from the previous query's answer
    /// ([`partition_from`]): neighbouring queries' thresholds are a few distances apart, and
    /// the same below the threshold L, where the normaliser is.
    pub(super) fn thresholds_into(
        &self,
        queries: &[Position],
        inv: &[f32],
        keys: &[Position],
        bps: &[f64],
        thr: &mut [u32],
        reach: &mut [u32],
    ) {
        let m = self.capacity();
        let count = bps.len();
        for (q, (&i, &inv_i)) in queries.iter().zip(inv).enumerate() {
            let (before, rest) = thr.split_at_mut(q * count);
            let row = &mut rest[..count];
            let prev = q.checked_sub(1).map(|p| (inv[p], &before[p * count..]));
            match prev {
                Some((p, prev)) if p.to_bits() == inv_i.to_bits() => row.copy_from_slice(prev),
                _ => {
                    for (k, &t) in bps.iter().enumerate() {
                        // The first distance whose x reaches t, in the kernel's own f32
                        // arithmetic; `m` when none in the table does.
                        let below = |n: usize| f64::from(self.psi_at(n) * inv_i) < t;
                        let hint = prev.map_or(m / 2, |(_, prev)| prev[k] as usize);
                        row[k] = partition_from(m, hint, below) as u32;
                    }
                }
            }
            // No causal pair of the row is farther than `i − keys[0]`.
            let longest = keys.first().map_or(0, |&j| i.saturating_sub(j));
            reach[q] = row.partition_point(|&t| u64::from(t) <= longest) as u32;
        }
    }
}

/// The first `n` in `lo..hi` where `below(n)` turns false (`below` is true then false); `hi`
/// when it never does.
fn partition(mut lo: usize, mut hi: usize, below: impl Fn(usize) -> bool) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// [`partition`] over `0..m` (`m ≥ 1`), searching outwards from `hint` in steps that double
/// before bisecting: the same answer for any hint (`below` is monotone), in O(log distance
/// from the hint) probes.
fn partition_from(m: usize, hint: usize, below: impl Fn(usize) -> bool) -> usize {
    let h = hint.min(m - 1);
    let (mut lo, mut hi) = (0, m);
    let mut step = 1;
    if below(h) {
        // The answer is past h.
        lo = h + 1;
        while lo + step - 1 < m {
            let probe = lo + step - 1;
            if !below(probe) {
                hi = probe;
                break;
            }
            lo = probe + 1;
            step *= 2;
        }
    } else {
        // The answer is at or before h.
        hi = h;
        while step <= hi {
            let probe = hi - step;
            if below(probe) {
                lo = probe + 1;
                break;
            }
            hi = probe;
            step *= 2;
        }
    }
    partition(lo, hi, below)
}

#[cfg(test)]
mod tests {
    use super::{partition, partition_from};

    /// The search from a hint finds the first `false` of every monotone predicate, from every
    /// hint (inside, at and past the ends), exactly as the bisection from scratch does.
    #[test]
    fn the_search_from_a_hint_equals_the_plain_bisection() {
        for m in 1..70 {
            for answer in 0..=m {
                let below = |n: usize| n < answer;
                assert_eq!(partition(0, m, below), answer);
                for hint in 0..m + 3 {
                    assert_eq!(partition_from(m, hint, below), answer, "m {m}, hint {hint}");
                }
            }
        }
    }
}
