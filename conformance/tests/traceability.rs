//! Every spec clause is covered by some vector file or says why not (`*No vectors:*`), and every
//! clause id a vector names exists. spec: [vec.file]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fire_conformance::vectors::load;

/// `id → exempt?` for every clause of spec/*.md.
fn clauses() -> BTreeMap<String, bool> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if !matches!(path.extension(), Some(e) if e == "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut current: Option<String> = None;
        let mut fenced = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            if let Some(rest) = line.strip_prefix("### [") {
                let id = rest.split(']').next().unwrap().to_owned();
                assert!(
                    out.insert(id.clone(), false).is_none(),
                    "clause [{id}] defined twice"
                );
                current = Some(id);
            } else if line.starts_with("## ") || line.starts_with("# ") {
                current = None;
            } else if line.trim_start().starts_with("*No vectors:*") {
                if let Some(id) = &current {
                    out.insert(id.clone(), true);
                }
            }
        }
    }
    out
}

#[test]
fn every_clause_is_covered_or_exempt_and_every_cited_clause_exists() {
    let spec = clauses();
    assert!(spec.len() > 40, "found only {} clauses", spec.len());
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let mut covered = BTreeSet::new();
    for (path, file) in &suite.files {
        for id in &file.clauses {
            assert!(
                spec.contains_key(id),
                "{path} cites [{id}], which no spec file defines"
            );
            covered.insert(id.clone());
        }
    }
    let missing: Vec<_> = spec
        .iter()
        .filter(|(id, exempt)| !**exempt && !covered.contains(*id))
        .map(|(id, _)| id)
        .collect();
    assert!(
        missing.is_empty(),
        "clauses neither covered by a vector file nor marked `*No vectors:*`: {missing:?}"
    );
    let pointless: Vec<_> = spec
        .iter()
        .filter(|(id, exempt)| **exempt && covered.contains(*id))
        .map(|(id, _)| id)
        .collect();
    println!(
        "{} clauses: {} covered by vectors, {} exempt ({} exempt yet covered: {pointless:?})",
        spec.len(),
        covered.len(),
        spec.values().filter(|e| **e).count(),
        pointless.len()
    );
}
