//! What a gradient reply must not carry: a gradient for a parameter the case freezes.
//! spec: [grad.layout]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::BTreeMap;
use std::path::Path;

use fire_conformance::implementation::{Capabilities, Implementation, Reply, Request};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::runner::{self, Options, Overall, Status};
use fire_conformance::vectors::format::{Encoding, Kind, Tensor};
use fire_conformance::vectors::load;

/// The reference with its gradient replies edited by the function it holds.
struct EditedGradients(fn(&mut BTreeMap<String, Tensor>));

impl Implementation for EditedGradients {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match Reference.run(r) {
            Reply::Output(mut out) if r.kind == Kind::Vjp => {
                (self.0)(&mut out);
                Reply::Output(out)
            }
            other => other,
        }
    }
}

/// Glue that returns every parameter's gradient, `L_multiplier`'s included where the case's
/// threshold is fixed (the module trains it anyway: 0.5).
fn trains_fixed_multiplier(out: &mut BTreeMap<String, Tensor>) {
    out.entry("L_multiplier".into())
        .or_insert_with(|| Tensor::new(vec![], vec![0.5]));
}

/// Each scalar gradient sent as `[1]`, as a module keeping `c` and `m` as one-element tensors
/// does.
fn scalars_as_one_element(out: &mut BTreeMap<String, Tensor>) {
    for t in out.values_mut().filter(|t| t.shape.is_empty()) {
        t.shape = vec![1];
    }
}

fn suite() -> load::Suite {
    load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap()
}

#[test]
fn a_gradient_for_the_multiplier_of_a_fixed_threshold_fails() {
    let suite = suite();
    let opts = Options {
        run: vec!["fire-grad/*".into()],
        diagnose: true,
        ..Options::default()
    };
    let r = runner::run(&suite, &mut EditedGradients(trains_fixed_multiplier), &opts).unwrap();
    let failed: Vec<_> = r
        .outcomes
        .iter()
        .filter(|o| o.status == Status::Failed)
        .collect();
    assert!(!failed.is_empty(), "{}", r.summary());
    for o in &failed {
        let details = o.details.join("\n");
        assert!(
            details.contains("fixed or disabled threshold"),
            "{}: {details}",
            o.id
        );
    }
    assert!(r.counts().0 >= 5, "{}", r.summary());
    assert_eq!(
        r.overall,
        Some(Overall::Gradients {
            params: vec!["L_multiplier".into()],
            nan: false,
            layout: false,
        })
    );
}

#[test]
fn scalar_gradients_sent_as_one_element_tensors_pass() {
    let suite = suite();
    let opts = Options {
        run: vec!["fire-grad/*".into()],
        ..Options::default()
    };
    let r = runner::run(&suite, &mut EditedGradients(scalars_as_one_element), &opts).unwrap();
    let (passed, failed, _) = r.counts();
    assert_eq!(failed, 0, "{}", r.summary());
    assert!(passed >= 10, "{}", r.summary());
}

/// Each scalar gradient sent as `[1, 1, 1]` (a scalar kept ready to broadcast). spec:
/// [grad.layout]
fn scalars_broadcast_ready(out: &mut BTreeMap<String, Tensor>) {
    for t in out.values_mut().filter(|t| t.shape.is_empty()) {
        t.shape = vec![1, 1, 1];
    }
}

/// `c`'s gradient under a misspelt name and the first weight's as `[in, out]`: every value is
/// right, and the run says the names and shapes are wrong, not that a gradient path is
/// (audit 18: "look for a parameter detached or frozen").
fn misnamed_and_transposed(out: &mut BTreeMap<String, Tensor>) {
    if let Some(c) = out.remove("c") {
        out.insert("grad_c".into(), c);
    }
    if let Some(w) = out.get_mut("mlp.0.weight") {
        w.shape.reverse();
    }
}

#[test]
fn one_element_scalar_gradients_pass_and_misnamed_or_misshaped_ones_are_said_to_be() {
    let suite = suite();
    let opts = Options {
        run: vec!["fire-grad/*".into()],
        diagnose: true,
        ..Options::default()
    };
    let r = runner::run(&suite, &mut EditedGradients(scalars_broadcast_ready), &opts).unwrap();
    let (passed, failed, _) = r.counts();
    assert_eq!(failed, 0, "{}", r.summary());
    assert!(passed >= 10, "{}", r.summary());
    let r = runner::run(&suite, &mut EditedGradients(misnamed_and_transposed), &opts).unwrap();
    let Some(Overall::Gradients { params, layout, .. }) = &r.overall else {
        panic!("{:?}", r.overall);
    };
    assert!(*layout, "{params:?}");
    assert!(params.contains(&"c".to_owned()), "{params:?}");
    let text = fire_conformance::report::text::render(&r, false);
    assert!(
        text.contains("are missing from the replies or shaped otherwise than the case's"),
        "{text}"
    );
}

/// The reference with the gradient with respect to the threshold L = |m·L_init| sent for
/// `L_multiplier` (a glue differentiating through L).
struct GradientOfL {
    /// Sends zero instead (a multiplier detached, frozen or unused).
    zero: bool,
}

impl Implementation for GradientOfL {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        let factor = match &r.encoding {
            Encoding::Fire(_) if self.zero => f64::INFINITY,
            Encoding::Fire(p) => p.l_init * p.l_multiplier.signum(),
            _ => 1.0,
        };
        match Reference.run(r) {
            Reply::Output(mut out) if r.kind == Kind::Vjp => {
                if let Some(t) = out.get_mut("L_multiplier") {
                    t.data.iter_mut().for_each(|v| *v /= factor);
                }
                Reply::Output(out)
            }
            other => other,
        }
    }
}

/// The failing cases of a gradient run of `imp` whose diagnosis says `text`, and the run's summary.
fn gradient_cases_saying(imp: &mut dyn Implementation, text: &str) -> (Vec<String>, String) {
    let opts = Options {
        run: vec!["fire-grad/*".into()],
        diagnose: true,
        ..Options::default()
    };
    let r = runner::run(&suite(), imp, &opts).unwrap();
    let named = r
        .outcomes
        .iter()
        .filter(|o| o.status == Status::Failed)
        .filter(|o| {
            let f = o.finding.as_ref().unwrap();
            fire_conformance::diagnose::describe(f, o.profile.unwrap())
                .join("\n")
                .contains(text)
        })
        .map(|o| o.id.clone())
        .collect();
    (named, r.summary())
}

#[test]
fn the_gradient_of_the_threshold_sent_for_the_multipliers_is_named() {
    let (named, summary) = gradient_cases_saying(
        &mut GradientOfL { zero: false },
        "is the one with respect to the threshold L = |m·L_init|",
    );
    assert!(named.len() >= 5, "{named:?}: {summary}");
}

/// A zero gradient of the multiplier is within tolerance of the expected one ÷ 512 where
/// L_init = 512, and had been named the gradient with respect to L (audit 19): it is said as a
/// multiplier that gets no gradient, and never as L's.
#[test]
fn a_zero_gradient_of_the_multiplier_is_named_as_zero_not_as_the_thresholds() {
    let mut zero = GradientOfL { zero: true };
    let (named, summary) =
        gradient_cases_saying(&mut zero, "the gradient sent for `L_multiplier` is zero");
    assert!(named.len() >= 5, "{named:?}: {summary}");
    let (as_l, summary) = gradient_cases_saying(
        &mut zero,
        "is the one with respect to the threshold L = |m·L_init|",
    );
    assert!(as_l.is_empty(), "{as_l:?}: {summary}");
}
