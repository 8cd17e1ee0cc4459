//! spec/attention.md: where the bias enters and the causal output.

use fire_reference::attention::{causal, causal_head, HeadInputs, Placement};
use fire_reference::evaluate;
use fire_reference::fire::init::{self, Shape, SplitMix64};
use nalgebra::DMatrix;

fn inputs(seed: u64, nq: usize, nk: usize, d: usize) -> HeadInputs {
    let mut rng = SplitMix64::new(seed);
    let mut m = |r, c| DMatrix::from_fn(r, c, |_, _| rng.uniform(-1.0, 1.0));
    HeadInputs {
        q: m(nq, d),
        k: m(nk, d),
        v: m(nk, d),
    }
}

/// [attn.causal]: keys after the query get weight 0 whatever their bias or values.
#[test]
fn future_keys_do_not_matter() {
    let x = inputs(1, 3, 4, 8);
    let q = [0, 1, 2];
    let k = [0, 1, 2, 3];
    let zero = DMatrix::zeros(3, 4);
    let mut wild = zero.clone();
    for r in 0..3 {
        for c in (r + 1)..4 {
            wild[(r, c)] = 1e6 * (c as f64);
        }
    }
    let mut changed = x.clone();
    changed.v.row_mut(3).fill(1e9);
    let a = causal_head(&x, &zero, &q, &k, Placement::AfterScaling).unwrap();
    let b = causal_head(&changed, &wild, &q, &k, Placement::AfterScaling).unwrap();
    assert_eq!(a, b);
    // Query 0 sees only key 0: its output is v_0 exactly.
    assert_eq!(a.row(0), x.v.row(0));
}

/// [attn.logits], [attn.placement]: the placements differ by the factor 1/√d on the bias.
#[test]
fn placement_scales_the_bias() {
    let x = inputs(2, 2, 2, 16);
    let bias = DMatrix::from_row_slice(2, 2, &[0.0, 0.0, 3.0, 0.0]);
    let after = causal_head(&x, &bias, &[0, 1], &[0, 1], Placement::AfterScaling).unwrap();
    let before = causal_head(&x, &bias, &[0, 1], &[0, 1], Placement::BeforeScaling).unwrap();
    let quarter = bias.map(|b| b / 4.0);
    let same = causal_head(&x, &quarter, &[0, 1], &[0, 1], Placement::AfterScaling).unwrap();
    assert!((&before - &same).abs().max() < 1e-15);
    assert!((after - before).abs().max() > 1e-3);
}

/// [attn.causal]: with a FIRE bias the output is a convex combination of visible values.
#[test]
fn outputs_are_convex_combinations() {
    let fire = init::appendix_e(Shape::default(), 9);
    let q = [5, 0, 3];
    let k = [0, 1, 2, 3, 4, 5];
    let bias = evaluate(&fire, &q, &k).unwrap();
    let heads: Vec<_> = (0..12).map(|h| inputs(h, 3, 6, 4)).collect();
    let out = causal(&heads, &bias, &q, &k, Placement::AfterScaling).unwrap();
    for (h, o) in out.iter().enumerate() {
        for (r, &i) in q.iter().enumerate() {
            let visible = &k[..=(i as usize)];
            for c in 0..4 {
                let col: Vec<f64> = visible
                    .iter()
                    .map(|&j| heads[h].v[(j as usize, c)])
                    .collect();
                let lo = col.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = col.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                assert!(o[(r, c)] >= lo - 1e-12 && o[(r, c)] <= hi + 1e-12);
            }
        }
    }
}
