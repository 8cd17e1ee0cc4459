//! Gradients at a kink: every sub-gradient faithful code returns (0, ½ or 1 at each kink) passes
//! the vectors on a kink, under the normative cotangent and under a declared causal one, and a
//! sub-gradient no code returns still fails. spec: [grad.kinks], [vec.case]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::conventions::causal_cotangent;
use fire_conformance::implementation::{Capabilities, FutureKeys, Implementation, Reply, Request};
use fire_conformance::implementations::reference::{
    evaluate_request, evaluate_subgradients, Reference,
};
use fire_conformance::runner::{self, Options, Status};
use fire_conformance::vectors::format::Kind;
use fire_conformance::vectors::load::{self, Suite};
use fire_reference::fire::grad::Subgradients;

fn suite() -> Suite {
    load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap()
}

/// The reference, with the sub-gradients `sub` at every kink, declaring `future`: keys after
/// the query zero (their cotangent dropped) unless mirrored.
struct Kinked {
    sub: Subgradients,
    future: FutureKeys,
}

impl Implementation for Kinked {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        c.future_keys = self.future;
        Ok(c)
    }

    fn run(&mut self, r: &Request) -> Reply {
        let mut inputs = r.inputs.clone();
        if self.future != FutureKeys::Mirrored {
            inputs.cotangent = causal_cotangent(&r.inputs).or(inputs.cotangent);
        }
        let out = match r.kind {
            Kind::Vjp => evaluate_subgradients(&r.encoding, &inputs, self.sub),
            kind => evaluate_request(&r.encoding, kind, &inputs, None),
        };
        match out {
            Ok(out) => Reply::Output(out),
            Err(e) => Reply::Errored(e.to_string()),
        }
    }
}

fn kink_outcomes(sub: Subgradients, future: FutureKeys) -> Vec<(String, Status, Vec<String>)> {
    let suite = suite();
    let opts = Options {
        run: vec!["fire-grad/kinks/*".into()],
        ..Options::default()
    };
    let report = runner::run(&suite, &mut Kinked { sub, future }, &opts).unwrap();
    report
        .outcomes
        .into_iter()
        .filter(|o| o.flags.iter().any(|f| f == "kink") && o.status != Status::Skipped)
        .map(|o| (o.id, o.status, o.details))
        .collect()
}

#[test]
fn every_faithful_subgradient_passes_the_kinks() {
    for future in [FutureKeys::Mirrored, FutureKeys::Zero] {
        for sub in std::iter::once(Subgradients::SPEC).chain(Subgradients::others()) {
            let outcomes = kink_outcomes(sub, future);
            assert!(outcomes.len() >= 2, "{} kink cases ran", outcomes.len());
            for (id, status, details) in outcomes {
                assert_eq!(
                    status,
                    Status::Passed,
                    "{sub:?}, {future:?}: {id}: {details:?}"
                );
            }
        }
    }
}

#[test]
fn a_subgradient_no_code_returns_fails() {
    // A quarter of the gradient to L at a tie: inside the sub-differential, but no `maximum`,
    // `where` or `clamp` returns it, and the vectors do not accept every value between.
    let sub = Subgradients {
        max_tie: 0.25,
        ..Subgradients::SPEC
    };
    let outcomes = kink_outcomes(sub, FutureKeys::Mirrored);
    let tie = outcomes
        .iter()
        .find(|(id, ..)| id.ends_with("threshold-tie"))
        .unwrap();
    assert_eq!(tie.1, Status::Failed, "{:?}", tie.2);
    let relu = Subgradients {
        relu_at_zero: 0.25,
        ..Subgradients::SPEC
    };
    let outcomes = kink_outcomes(relu, FutureKeys::Mirrored);
    assert!(
        outcomes.iter().any(|(_, s, _)| *s == Status::Failed),
        "relu'(0) = 1/4 passed every kink case"
    );
}
