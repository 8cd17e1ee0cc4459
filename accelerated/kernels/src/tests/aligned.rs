//! Cache-line alignment is a matter of speed only: the buffers behave as `Vec`s, start on a
//! line, and the kernels give the same bits wherever in a line their inputs start.

use fire_vocabulary::{Position, SplitMix64};

use super::{attention_inputs, fire_pair, random};
use crate::aligned::{aligned, on_line, AlignedVec};
use crate::attention::{fused_causal_lse_batch, Shape};
use crate::backward::{
    fused_causal_backward, fused_causal_backward_into_rows, BackwardInputs, MergedRows,
};
use crate::fire::FireBias;
use crate::tile::{BiasPlan, TileBias};

/// A random sequence of resizes leaves an [`AlignedVec`] holding what a `Vec` resized the same
/// way holds, starting on a line throughout (growth included).
#[test]
fn an_aligned_vec_resizes_as_a_vec_does_and_stays_on_a_line() {
    let mut rng = SplitMix64::new(7);
    let (mut ours, mut want) = (AlignedVec::default(), Vec::new());
    for step in 0..400 {
        let len = (rng.uniform(0.0, 1.0) * 700.0) as usize;
        let value = step as f32;
        ours.resize(len, value);
        want.resize(len, value);
        assert_eq!(&ours[..], &want[..], "step {step}, len {len}");
        // Values written through the buffer stay there across the next resize.
        if let Some(x) = ours.first_mut() {
            *x = -value;
            want[0] = -value;
        }
        if len > 0 {
            assert!(on_line(&ours), "step {step}: the start is off a line");
        }
    }
    let zeros = AlignedVec::zeroed(33);
    assert!(zeros.iter().all(|&x| x == 0.0) && zeros.len() == 33 && on_line(&zeros));
}

/// `aligned` borrows a slice that starts on a line and copies one that does not, with the same
/// values either way.
#[test]
fn aligned_borrows_what_is_on_a_line_and_copies_the_rest() {
    let store = random(1000, 3);
    for offset in 0..16 {
        let values = &store[offset..offset + 900];
        let got = aligned(values, 64);
        assert_eq!(&got[..], values);
        assert!(on_line(&got));
        if on_line(values) {
            assert_eq!(
                got.as_ptr(),
                values.as_ptr(),
                "offset {offset}: not borrowed"
            );
        } else {
            assert_ne!(got.as_ptr(), values.as_ptr());
        }
    }
}

/// `values` placed `shift` floats past a line boundary (every residue of a 64-byte line is
/// some shift in 0..16).
fn placed(values: &[f32], shift: usize, store: &mut Vec<f32>) -> std::ops::Range<usize> {
    store.clear();
    store.resize(values.len() + 32, f32::NAN);
    let line = store.as_ptr().align_offset(64).min(15);
    let at = line + shift;
    store[at..at + values.len()].copy_from_slice(values);
    at..at + values.len()
}

/// The forward's output and log-sum-exp, the backward's gradients (split and merged into rows)
/// and FIRE's parameter gradient are bit-identical with q, k, v, out, dO starting at each of
/// the 16 places in a cache line: the aligned copies change where values are read from, never
/// which values or in what order they are summed.
#[test]
fn the_results_do_not_depend_on_the_inputs_addresses() {
    let (heads, n, d, batch) = (2, 200, 64, 2);
    let (_, mlp, params) = fire_pair(heads, 16, 1, 9, 0.2);
    let fire = FireBias::new(mlp, params, 256).unwrap();
    let pos: Vec<Position> = (0..n as u64).collect();
    let grad = fire.grad_plan(&pos, &pos).unwrap();
    let plan = fire.plan(&pos, &pos).unwrap();
    let shape = Shape {
        heads,
        queries: n,
        keys: n,
        head_dim: d,
    };
    let len = batch * heads * n * d;
    let [q, k, v, dout] = attention_inputs(len);
    let run = |shift: usize| {
        let mut stores = [(); 5].map(|_| Vec::new());
        let [sq, sk, sv, sd, so] = &mut stores;
        let (rq, rk, rv, rd) = (
            placed(&q, shift, sq),
            placed(&k, (shift + 5) % 16, sk),
            placed(&v, (shift + 11) % 16, sv),
            placed(&dout, (shift + 3) % 16, sd),
        );
        let (q, k, v, dout) = (&sq[rq], &sk[rk], &sv[rv], &sd[rd]);
        let bias: &dyn BiasPlan = plan.as_ref();
        let (out0, lse) =
            fused_causal_lse_batch(batch, q, k, v, shape, &pos, &pos, Some(bias)).unwrap();
        let ro = placed(&out0, (shift + 7) % 16, so);
        let out = &so[ro];
        let g = fused_causal_backward(
            batch,
            q,
            k,
            v,
            out,
            &lse,
            dout,
            shape,
            &pos,
            &pos,
            Some(grad.as_ref()),
        )
        .unwrap();
        let width = 3 * heads * d;
        let mut rows = vec![0f32; batch * n * width + shift];
        let inputs = BackwardInputs {
            batch,
            q,
            k,
            v,
            out,
            lse: &lse,
            dout,
            shape,
            queries: &pos,
            keys: &pos,
            bias: Some(grad.as_ref()),
        };
        let dst = MergedRows {
            rows: &mut rows[shift..],
            width,
            offsets: [0, heads * d, 2 * heads * d],
        };
        let dparams = fused_causal_backward_into_rows(inputs, dst).unwrap();
        (out0, lse, g, rows[shift..].to_vec(), dparams)
    };
    let want = run(0);
    assert!(want.0.iter().all(|x| x.is_finite()) && want.2.dparams.iter().any(|&x| x != 0.0));
    for shift in 1..16 {
        let got = run(shift);
        assert_eq!(got.0, want.0, "shift {shift}: forward output");
        assert_eq!(got.1, want.1, "shift {shift}: log-sum-exp");
        assert_eq!(got.2.dq, want.2.dq, "shift {shift}: dq");
        assert_eq!(got.2.dk, want.2.dk, "shift {shift}: dk");
        assert_eq!(got.2.dv, want.2.dv, "shift {shift}: dv");
        assert_eq!(got.3, want.3, "shift {shift}: merged rows");
        assert_eq!(
            got.4, want.4,
            "shift {shift}: FIRE's parameter gradient (rows)"
        );
        assert_eq!(
            got.2.dparams, want.2.dparams,
            "shift {shift}: parameter gradient"
        );
    }
}
