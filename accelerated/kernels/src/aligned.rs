//! f32 buffers that start on a cache line, for the operands the tile products read in whole
//! vectors.
//!
//! An AVX-512 vector is one 64-byte cache line. A vector load from an address that is not a
//! multiple of 64 straddles two lines, and on Intel cores every such load is a split load.
//! `malloc` aligns to 16 bytes, so a buffer's first value lands on a line boundary in one
//! allocation of four and the rest of the time every vector read from it is split; the
//! kernels' time then depended on where the allocator happened to put their buffers. Measured
//! on an Intel Xeon with AVX-512 (`attention_timing 8192 12 64 nope 3`, two threads, five
//! alternating rounds): with `q`, `k`, `v` and the packed keys 16 bytes past a line the NoPE
//! forward took 1.17x and the backward 1.07x the time with all of them on a line; the inputs
//! alone or the packed keys alone off a line, 1.0-1.1x.
//!
//! Safe Rust: an [`AlignedVec`] over-allocates a `Vec<f32>` by one line and starts at the first
//! value on a boundary (`<*const f32>::align_offset`); [`aligned`] borrows a caller's slice that
//! already starts on one and copies it otherwise. Alignment is only ever a speed matter here —
//! where no aligned start is found the buffer starts where the `Vec` does — so no result
//! depends on it: the kernels' outputs are bit-identical whatever their inputs' addresses
//! (`tests::attention::the_results_do_not_depend_on_the_inputs_addresses`).

use std::ops::{Deref, DerefMut};

use rayon::prelude::*;

/// Bytes of the boundary: a cache line, one AVX-512 vector.
pub(crate) const LINE: usize = 64;
/// f32 values in one [`LINE`].
const PAD: usize = LINE / std::mem::size_of::<f32>();

/// A zero-initialised f32 buffer whose first value sits on a [`LINE`] boundary.
#[derive(Debug, Clone, Default)]
pub(crate) struct AlignedVec {
    buf: Vec<f32>,
    start: usize,
    len: usize,
}

impl AlignedVec {
    /// `len` copies of `value`.
    pub(crate) fn filled(len: usize, value: f32) -> Self {
        let buf = vec![value; len + PAD];
        let start = line_offset(&buf);
        AlignedVec { buf, start, len }
    }

    /// `len` zeros.
    pub(crate) fn zeroed(len: usize) -> Self {
        Self::filled(len, 0.0)
    }

    /// [`Vec::resize`]: the first `min(len, old len)` values kept, any new ones `value`. Grows
    /// into a new allocation (aligned afresh) only past the current one's room.
    pub(crate) fn resize(&mut self, len: usize, value: f32) {
        if self.start + len <= self.buf.len() {
            if len > self.len {
                self.buf[self.start + self.len..self.start + len].fill(value);
            }
            self.len = len;
            return;
        }
        let mut grown = Self::filled(len.max(2 * self.len), value);
        grown.len = len;
        grown[..self.len].copy_from_slice(self);
        *self = grown;
    }
}

impl Deref for AlignedVec {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedVec {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// The first index of `buf` at a [`LINE`] boundary, 0 where none is found in the first line
/// (`buf` holds at least [`PAD`] values past its used ones, so any such index fits).
fn line_offset(buf: &[f32]) -> usize {
    match buf.as_ptr().align_offset(LINE) {
        o if o < PAD => o,
        _ => 0,
    }
}

/// Whether `values` starts on a [`LINE`] boundary.
pub(crate) fn on_line(values: &[f32]) -> bool {
    values.as_ptr().align_offset(LINE) == 0
}

/// A caller's slice as the products want it: itself where it starts on a line, otherwise a copy
/// that does (made in parallel, `chunk` values per piece).
pub(crate) enum Aligned<'a> {
    /// The caller's own values.
    Borrowed(&'a [f32]),
    /// A copy on a line.
    Copied(AlignedVec),
}

impl Deref for Aligned<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            Aligned::Borrowed(s) => s,
            Aligned::Copied(v) => v,
        }
    }
}

/// `values` on a line ([`Aligned`]), copied in parallel pieces of `chunk` values when it is
/// not already (a copy is one pass over memory the kernel then reads many times).
pub(crate) fn aligned(values: &[f32], chunk: usize) -> Aligned<'_> {
    if on_line(values) {
        return Aligned::Borrowed(values);
    }
    let mut copy = AlignedVec::zeroed(values.len());
    copy.par_chunks_mut(chunk.max(1))
        .zip(values.par_chunks(chunk.max(1)))
        .for_each(|(dst, src)| dst.copy_from_slice(src));
    Aligned::Copied(copy)
}
