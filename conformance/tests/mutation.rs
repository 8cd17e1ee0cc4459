//! The mutation test: every catalogued variant, run as an implementation, fails the suite and
//! is named by the diagnosis. spec: [variants.catalogue]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::implementations::variant::Mistaken;
use fire_conformance::runner::{self, Options};
use fire_conformance::vectors::load;
use fire_reference::fire::variants::CATALOGUE;

/// Variants that compute the same function at every input, so no vector can tell them apart:
/// swapping query and key, `b(j, i) = f(ψ(|j − i|) / N(j))`, *is* normalising by the key.
const ALIASES: &[[&str; 2]] = &[["normalize-by-key", "query-key-swapped"]];

fn aliases(a: &str, b: &str) -> bool {
    a == b
        || ALIASES
            .iter()
            .any(|p| (p[0] == a && p[1] == b) || (p[0] == b && p[1] == a))
}

#[test]
fn every_variant_fails_and_is_named() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let opts = Options {
        diagnose: true,
        ..Options::default()
    };
    let mut caught = 0;
    let mut unique = 0;
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
        assert!(
            named.iter().all(|n| aliases(n, v.name)),
            "variant `{}` is not told apart from {named:?}",
            v.name
        );
        caught += 1;
        unique += usize::from(named.len() == 1);
    }
    println!(
        "mutation score: {caught}/{} caught and named ({unique} uniquely; the rest are exact aliases)",
        CATALOGUE.len()
    );
    assert_eq!(caught, CATALOGUE.len());
}
