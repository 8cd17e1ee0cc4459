//! The report names what a run did not check: the flags only skipped cases carry, among the
//! cases of what the implementation computes. spec: [proto.report]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::implementation::{Capabilities, Implementation, Reply, Request};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::runner::{self, Options};
use fire_conformance::vectors::format::{Encoding, Kind};
use fire_conformance::vectors::load;

/// The reference for single FIRE modules' bias cases only, skipping `skip`'s.
struct Partial {
    skip: fn(&Request) -> bool,
}

impl Implementation for Partial {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        let fire = matches!(r.encoding, Encoding::Fire(_)) && r.kind == Kind::Bias;
        if !fire || (self.skip)(r) {
            return Reply::Skipped("not computed here".into());
        }
        Reference.run(r)
    }
}

fn unchecked(skip: fn(&Request) -> bool) -> Vec<String> {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    runner::run(&suite, &mut Partial { skip }, &Options::default())
        .unwrap()
        .unchecked
}

#[test]
fn a_run_that_skips_the_large_positions_says_it_did_not_check_them() {
    // Everything a bias-only FIRE module computes: nothing unchecked, although attention,
    // gradients and the baselines were skipped (it computes none of them).
    assert_eq!(unchecked(|_| false), Vec::<String>::new());
    // A module that cannot build a square as wide as the largest position.
    let wide = |r: &Request| {
        r.inputs
            .queries
            .iter()
            .chain(&r.inputs.keys)
            .any(|&p| p >= 4096)
    };
    let got = unchecked(wide);
    assert!(got.iter().any(|f| f == "large-positions"), "{got:?}");
    assert!(
        got.iter().all(|f| f != "attention" && f != "baseline"),
        "{got:?}"
    );
}
