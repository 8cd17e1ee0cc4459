//! Declared conventions are checked as declared, and a convention that is used but not declared
//! is named by the diagnosis. spec: [conv.future], [attn.placement]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::conventions::causal_cotangent;
use fire_conformance::implementation::{
    Capabilities, FutureKeys, Implementation, Placement, Reply, Request,
};
use fire_conformance::implementations::reference::{evaluate_placed, Reference};
use fire_conformance::runner::{self, Options, Overall, Status};
use fire_conformance::vectors::format::Kind;
use fire_conformance::vectors::load;
use fire_reference::attention::Placement as RefPlacement;

/// The reference, but keys after the query get `future` and the bias enters `placement`; it
/// declares `declared`.
struct Convention {
    future: FutureKeys,
    placement: Placement,
    declared: (FutureKeys, Placement),
}

impl Implementation for Convention {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        (c.future_keys, c.placement) = self.declared;
        Ok(c)
    }

    fn run(&mut self, r: &Request) -> Reply {
        let place = match self.placement {
            Placement::AfterScaling => RefPlacement::AfterScaling,
            Placement::BeforeScaling => RefPlacement::BeforeScaling,
        };
        let mut inputs = r.inputs.clone();
        if r.kind == Kind::Vjp && self.future != FutureKeys::Mirrored {
            // The module's bias at keys after the query is a constant (or unchecked): its true
            // gradient sees only the causal entries of the cotangent.
            if let Some(c) = causal_cotangent(&inputs) {
                inputs.cotangent = Some(c);
            }
        }
        let Ok(mut out) = evaluate_placed(&r.encoding, r.kind, &inputs, None, place) else {
            return Reply::Errored("rejected".into());
        };
        if r.kind == Kind::Bias {
            let (nq, nk) = (r.inputs.queries.len(), r.inputs.keys.len());
            for t in out.values_mut() {
                for (n, v) in t.data.iter_mut().enumerate() {
                    if r.inputs.keys[n % nk] > r.inputs.queries[(n / nk) % nq] {
                        match self.future {
                            FutureKeys::Zero => *v = 0.0,
                            FutureKeys::Masked => *v = f64::NEG_INFINITY,
                            FutureKeys::Negated => *v = 12345.0,
                            FutureKeys::Mirrored => {}
                        }
                    }
                }
            }
        }
        Reply::Output(out)
    }
}

fn run(imp: &mut Convention, glob: &str) -> runner::Report {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let opts = Options {
        run: vec![glob.into()],
        diagnose: true,
        ..Options::default()
    };
    runner::run(&suite, imp, &opts).unwrap()
}

#[test]
fn declared_future_key_conventions_pass_and_undeclared_ones_are_named() {
    for future in [FutureKeys::Zero, FutureKeys::Masked, FutureKeys::Negated] {
        let mut honest = Convention {
            future,
            placement: Placement::AfterScaling,
            declared: (future, Placement::AfterScaling),
        };
        let r = run(&mut honest, "fire/random-params/*");
        assert_eq!(r.counts().1, 0, "{:?} declared: {}", future, r.summary());
    }
    let mut silent = Convention {
        future: FutureKeys::Zero,
        placement: Placement::AfterScaling,
        declared: (FutureKeys::Mirrored, Placement::AfterScaling),
    };
    let r = run(&mut silent, "fire/random-params/*");
    let o = r
        .outcomes
        .iter()
        .find(|o| o.status == Status::Failed)
        .unwrap();
    let notes = &o.finding.as_ref().unwrap().notes;
    assert!(
        notes.iter().any(|n| n.contains("follow `zero`")),
        "{notes:?}"
    );
}

#[test]
fn a_declared_before_scaling_placement_passes_and_an_undeclared_one_is_named() {
    let mut honest = Convention {
        future: FutureKeys::Mirrored,
        placement: Placement::BeforeScaling,
        declared: (FutureKeys::Mirrored, Placement::BeforeScaling),
    };
    assert_eq!(run(&mut honest, "attention/*").counts().1, 0);
    let mut silent = Convention {
        future: FutureKeys::Mirrored,
        placement: Placement::BeforeScaling,
        declared: (FutureKeys::Mirrored, Placement::AfterScaling),
    };
    let r = run(&mut silent, "attention/*");
    assert!(r.counts().1 > 0);
    assert_eq!(
        r.overall,
        Some(Overall::Variants(vec!["bias-before-scaling"])),
        "{}",
        r.summary()
    );
}

/// A module right on the causal triangle under its declared convention gets gradients exactly
/// right for the cotangent that convention allows: gradient cases pass, as bias cases do.
#[test]
fn declared_conventions_apply_to_gradient_cotangents() {
    for future in [FutureKeys::Zero, FutureKeys::Masked, FutureKeys::Negated] {
        let mut honest = Convention {
            future,
            placement: Placement::AfterScaling,
            declared: (future, Placement::AfterScaling),
        };
        let r = run(&mut honest, "fire-grad/*");
        let (passed, failed, _) = r.counts();
        assert_eq!(failed, 0, "{future:?}: {}", r.summary());
        assert!(passed >= 10, "{future:?}: {}", r.summary());
    }
    // Declaring `mirrored` while masking the gradient is a real deviation, and is caught.
    let mut silent = Convention {
        future: FutureKeys::Zero,
        placement: Placement::AfterScaling,
        declared: (FutureKeys::Mirrored, Placement::AfterScaling),
    };
    assert!(run(&mut silent, "fire-grad/*").counts().1 > 0);
}
