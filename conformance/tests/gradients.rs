//! What a gradient reply must not carry: a gradient for a parameter the case freezes.
//! spec: [grad.layout]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::implementation::{Capabilities, Implementation, Reply, Request};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::runner::{self, Options, Overall, Status};
use fire_conformance::vectors::format::{Kind, Tensor};
use fire_conformance::vectors::load;

/// The reference, whose glue returns every parameter's gradient, `L_multiplier`'s included
/// where the case's threshold is fixed (the module trains it anyway: 0.5).
struct TrainsFixedMultiplier;

impl Implementation for TrainsFixedMultiplier {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match Reference.run(r) {
            Reply::Output(mut out) if r.kind == Kind::Vjp => {
                out.entry("L_multiplier".into())
                    .or_insert_with(|| Tensor::new(vec![], vec![0.5]));
                Reply::Output(out)
            }
            other => other,
        }
    }
}

#[test]
fn a_gradient_for_the_multiplier_of_a_fixed_threshold_fails() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let opts = Options {
        run: vec!["fire-grad/*".into()],
        diagnose: true,
        ..Options::default()
    };
    let r = runner::run(&suite, &mut TrainsFixedMultiplier, &opts).unwrap();
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
            nan: false
        })
    );
}

/// The reference, sending each scalar gradient as `[1]`, as a module keeping `c` and `m` as
/// one-element tensors does.
struct ScalarsAsOneElement;

impl Implementation for ScalarsAsOneElement {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match Reference.run(r) {
            Reply::Output(mut out) if r.kind == Kind::Vjp => {
                for t in out.values_mut().filter(|t| t.shape.is_empty()) {
                    t.shape = vec![1];
                }
                Reply::Output(out)
            }
            other => other,
        }
    }
}

#[test]
fn scalar_gradients_sent_as_one_element_tensors_pass() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let opts = Options {
        run: vec!["fire-grad/*".into()],
        ..Options::default()
    };
    let r = runner::run(&suite, &mut ScalarsAsOneElement, &opts).unwrap();
    let (passed, failed, _) = r.counts();
    assert_eq!(failed, 0, "{}", r.summary());
    assert!(passed >= 10, "{}", r.summary());
}
