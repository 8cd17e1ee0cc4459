//! Buffers the fused block takes for its intermediates and gives back when done, so that a
//! training step reuses last step's memory instead of zero-filling fresh buffers.
//!
//! Why: the block ([`super::block`]) needs a dozen `[B·T, D]`- or `[B·T, F]`-sized buffers per
//! layer and pass (activations kept for the backward pass, the backward's products). Taken as
//! `vec![0.0; n]`, each is zero-filled (the allocator keeps freed memory, so `calloc` cannot
//! hand out fresh zero pages), and every one of them is then overwritten in full by a matrix
//! product or a row-wise pass: the zeroing was ~5 % of a small model's training step (perf).
//!
//! A [`Scratch`] is a `Vec<f32>` taken from a process-wide pool and returned to it on drop.
//! [`Scratch::overwritten`] hands out a buffer whose values are whatever its last user left:
//! initialised memory (no `unsafe`), but not zeros, so it is only for outputs written in full
//! before they are read. Builds with debug assertions (every test) fill those buffers with NaN
//! instead, so a read before the write poisons the result and fails the parity tests against
//! the composed twin.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Buffers waiting for reuse.
static POOL: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

/// At most this many buffers wait in the pool (a training step of the paper's models uses
/// ~10 per layer); a buffer given back to a full pool is freed.
const POOL_BUFFERS: usize = 256;

/// A pooled `f32` buffer of a fixed length (see the module documentation): the first `len`
/// values of `buf`. A pooled vector keeps its full length, so reusing it for a shorter buffer
/// and then a longer one never zero-fills anything.
pub(crate) struct Scratch {
    buf: Vec<f32>,
    len: usize,
}

impl Scratch {
    /// `len` values of unspecified content (a previous user's; NaN under debug assertions),
    /// for an output the caller writes in full before reading it.
    pub(crate) fn overwritten(len: usize) -> Self {
        let mut s = Self {
            buf: take(len),
            len,
        };
        if cfg!(debug_assertions) {
            s.fill(f32::NAN);
        }
        s
    }

    /// The buffer as a `Vec` of `len` values, taken out of the pool for good: for an output
    /// that becomes a tensor.
    pub(crate) fn into_vec(mut self) -> Vec<f32> {
        let mut v = std::mem::take(&mut self.buf);
        v.truncate(self.len);
        v
    }

    /// A copy of `src`.
    pub(crate) fn copy_of(src: &[f32]) -> Self {
        let mut s = Self {
            buf: take(src.len()),
            len: src.len(),
        };
        s.copy_from_slice(src);
        s
    }
}

/// The shortest pooled vector of `len` to `2·len` values (its old values kept), or a new one
/// of exactly `len` zeros. The upper bound keeps a small request from taking a large buffer
/// that a later large request would then have to allocate again.
fn take(len: usize) -> Vec<f32> {
    let found = POOL.lock().ok().and_then(|mut pool| {
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, v)| v.len() >= len && v.len() <= len.saturating_mul(2))
            .min_by_key(|(_, v)| v.len())
            .map(|(i, _)| i)?;
        Some(pool.swap_remove(best))
    });
    found.unwrap_or_else(|| vec![0.0; len])
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.buf);
        if v.is_empty() {
            return;
        }
        if let Ok(mut pool) = POOL.lock() {
            if pool.len() < POOL_BUFFERS {
                pool.push(v);
            }
        }
    }
}

impl Deref for Scratch {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[..self.len]
    }
}

impl DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_reused_at_its_new_length_and_a_copy_is_a_copy() {
        let mut a = Scratch::overwritten(1000);
        a.fill(7.0);
        let ptr = a.as_ptr();
        drop(a);
        // Other tests share the pool; the buffer comes back unless one took it meanwhile.
        let b = Scratch::overwritten(900);
        assert_eq!(b.len(), 900);
        if b.as_ptr() == ptr {
            // Reused: debug builds poison it, release builds keep the old values.
            assert!(b.iter().all(|&v| if cfg!(debug_assertions) {
                v.is_nan()
            } else {
                v == 7.0
            }));
        }
        drop(b);
        // Longer than every pooled buffer: a new one.
        let c = Scratch::overwritten(100_000);
        assert_eq!(c.len(), 100_000);
        let c_ptr = c.as_ptr();
        drop(c);
        // Far shorter than the pooled 100 000: not that buffer.
        let small = Scratch::overwritten(10);
        assert_ne!(small.as_ptr(), c_ptr);
        let d = Scratch::copy_of(&[1.0, 2.0, 3.0]);
        assert_eq!(&*d, &[1.0, 2.0, 3.0]);
    }
}
