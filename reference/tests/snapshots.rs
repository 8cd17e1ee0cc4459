//! Human-readable tables pinned with insta: a change to any of them is a change to the spec's
//! meaning and must be reviewed.

use fire_reference::evaluate;
use fire_reference::fire::init::{self, Shape};
use fire_reference::variants::CATALOGUE;
use std::fmt::Write;

/// [fire.defaults]: the bias of a default-initialised module (seed 0) at a few positions around
/// the threshold L = 512, heads 0–3.
#[test]
fn fire_bias_at_default_initialisation() {
    let fire = init::appendix_e(Shape::default(), 0);
    let queries = [0u64, 1, 2, 511, 512, 513, 4096];
    let keys = [0u64, 1, 2, 511];
    let bias = evaluate(&fire, &queries, &keys).unwrap();
    let mut out = String::new();
    for h in 0..4 {
        writeln!(
            out,
            "head {h}: rows = queries {queries:?}, columns = keys {keys:?}"
        )
        .unwrap();
        for (q, i) in queries.iter().enumerate() {
            let row: Vec<String> = (0..keys.len())
                .map(|k| format!("{:+.9}", bias.get(h, q, k)))
                .collect();
            writeln!(out, "  i={i:<5} {}", row.join("  ")).unwrap();
        }
    }
    writeln!(out, "inputs x(i, j):").unwrap();
    for &i in &queries {
        let row: Vec<String> = keys
            .iter()
            .map(|&j| format!("{:.9}", fire.input(i as f64, j as f64)))
            .collect();
        writeln!(out, "  i={i:<5} {}", row.join("  ")).unwrap();
    }
    insta::assert_snapshot!(out);
}

/// [variants.catalogue]: the names the harness reports are part of the interface.
#[test]
fn the_variant_catalogue() {
    let mut out = String::new();
    for v in CATALOGUE {
        writeln!(out, "{:<26} [{}] {}", v.name, v.violates, v.summary).unwrap();
        writeln!(out, "{:<26} looks like: {}", "", v.looks_like).unwrap();
        if let Some(why) = v.tolerated {
            writeln!(out, "{:<26} tolerated: {why}", "").unwrap();
        }
    }
    insta::assert_snapshot!(out);
}
