//! [num.errors]: invalid input is a typed error, never a panic or a silent number.

use fire_reference::attention::{causal, HeadInputs, Placement};
use fire_reference::fire::init::{self, Shape};
use fire_reference::fire::{Threshold, Transform};
use fire_reference::positions::MAX_POSITION;
use fire_reference::{evaluate, Error};
use nalgebra::{DMatrix, DVector};

fn fire() -> fire_reference::Fire {
    init::appendix_e(
        Shape {
            heads: 2,
            width: 4,
            depth: 1,
        },
        1,
    )
}

fn rejects(f: &fire_reference::Fire) -> Error {
    evaluate(f, &[0, 1], &[0]).expect_err("must be rejected")
}

#[test]
fn non_finite_parameters() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut f = fire();
        f.c = bad;
        assert!(matches!(rejects(&f), Error::NonFinite { ref name, .. } if name == "c"));
        let mut f = fire();
        f.l_multiplier = bad;
        assert!(matches!(rejects(&f), Error::NonFinite { ref name, .. } if name == "L_multiplier"));
        let mut f = fire();
        f.mlp.layers[1].weight[(1, 2)] = bad;
        assert!(matches!(rejects(&f), Error::NonFinite { .. }));
    }
}

#[test]
fn non_positive_l_init() {
    for bad in [0.0, -512.0] {
        let mut f = fire();
        f.l_init = bad;
        let e = rejects(&f);
        assert!(
            matches!(e, Error::OutOfRange { ref name, .. } if name == "L_init"),
            "{e}"
        );
        assert!(e.to_string().contains("L_init > 0"));
    }
}

#[test]
fn zero_c_with_log_transform_but_not_without() {
    let mut f = fire();
    f.c = 0.0;
    assert!(matches!(rejects(&f), Error::OutOfRange { ref name, .. } if name == "c"));
    f.transform = Transform::Identity;
    assert!(evaluate(&f, &[0, 1], &[0]).is_ok());
}

#[test]
fn zero_normaliser_at_query_zero() {
    let mut f = fire();
    f.eps = 0.0;
    f.threshold = Threshold::Disabled;
    assert!(matches!(rejects(&f), Error::Invalid { .. }));
    let mut f = fire();
    f.eps = 0.0;
    f.l_multiplier = 0.0;
    assert!(matches!(rejects(&f), Error::OutOfRange { .. }));
    let mut f = fire();
    f.eps = -1e-6;
    assert!(matches!(rejects(&f), Error::OutOfRange { ref name, .. } if name == "eps"));
}

#[test]
fn mismatched_mlp_shapes() {
    let mut f = fire();
    f.mlp.layers[1].weight = DMatrix::zeros(2, 5);
    assert!(matches!(rejects(&f), Error::Shape { .. }));
    let mut f = fire();
    f.mlp.layers[0].bias = DVector::zeros(3);
    assert!(matches!(rejects(&f), Error::Shape { .. }));
    let mut f = fire();
    f.mlp.layers.clear();
    assert!(matches!(rejects(&f), Error::Empty { .. }));
}

#[test]
fn bad_positions() {
    let f = fire();
    assert!(matches!(evaluate(&f, &[], &[0]), Err(Error::Empty { .. })));
    assert!(matches!(evaluate(&f, &[0], &[]), Err(Error::Empty { .. })));
    assert!(matches!(
        evaluate(&f, &[MAX_POSITION + 1], &[0]),
        Err(Error::PositionTooLarge { .. })
    ));
    assert!(evaluate(&f, &[MAX_POSITION], &[0]).is_ok());
}

#[test]
fn bad_attention_inputs() {
    let f = fire();
    let bias = evaluate(&f, &[1], &[0, 2]).unwrap();
    let head = HeadInputs {
        q: DMatrix::from_element(1, 3, 0.5),
        k: DMatrix::from_element(2, 3, 0.25),
        v: DMatrix::from_element(2, 2, 1.0),
    };
    // Two heads of bias but one head of inputs.
    assert!(matches!(
        causal(
            std::slice::from_ref(&head),
            &bias,
            &[1],
            &[0, 2],
            Placement::AfterScaling
        ),
        Err(Error::Shape { .. })
    ));
    // A query that sees no key.
    let bias = evaluate(&f, &[1], &[2, 3]).unwrap();
    let r = causal(
        &[head.clone(), head.clone()],
        &bias,
        &[1],
        &[2, 3],
        Placement::AfterScaling,
    );
    assert!(matches!(r, Err(Error::Invalid { .. })));
    // NaN in q.
    let mut nan = head.clone();
    nan.q[(0, 0)] = f64::NAN;
    let bias = evaluate(&f, &[1], &[0, 1]).unwrap();
    let r = causal(&[nan, head], &bias, &[1], &[0, 1], Placement::AfterScaling);
    assert!(matches!(r, Err(Error::NonFinite { .. })));
}
