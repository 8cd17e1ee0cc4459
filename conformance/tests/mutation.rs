//! The mutation test: every catalogued variant, run as an implementation, fails the suite and
//! is named by the diagnosis. spec: [variants.catalogue]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::implementations::variant::Mistaken;
use fire_conformance::runner::{self, Options};
use fire_conformance::vectors::load;
use fire_reference::fire::variants::CATALOGUE;

#[test]
fn every_variant_fails_and_is_named() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let opts = Options {
        diagnose: true,
        ..Options::default()
    };
    let mut caught = 0;
    for v in CATALOGUE {
        let report = runner::run(&suite, &mut Mistaken(v), &opts).unwrap();
        let (_, failed, _) = report.counts();
        assert!(failed > 0, "variant `{}` passes the whole suite", v.name);
        let named = report.overall.clone().unwrap_or_default();
        assert!(
            named.contains(&v.name),
            "variant `{}` diagnosed as {named:?}",
            v.name
        );
        // The catalogue holds no two variants that compute the same function
        // ([variants.catalogue]), so the suite must single each one out.
        assert_eq!(
            named.len(),
            1,
            "variant `{}` is not told apart from {named:?}",
            v.name
        );
        caught += 1;
    }
    println!(
        "mutation score: {caught}/{} variants fail the suite and are named alone",
        CATALOGUE.len()
    );
    assert_eq!(caught, CATALOGUE.len());
}
