//! Traceability: every clause of spec/ has citing code, and every citation names a clause.
//!
//! A clause is a level-3 heading `### [id] Title` (spec/README.md). Code cites clauses in doc
//! comments as `spec: [a], [b]`, possibly continued on the next comment lines. This test reads
//! the whole workspace (every crate, nested ones included), because a clause may be implemented
//! by any of them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Bracketed ids in `text`: `[a.b-c]` with at least one dot, not followed by `(` (a link).
fn ids(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut start = None;
    for (n, &b) in bytes.iter().enumerate() {
        match (b, start) {
            (b'[', _) => start = Some(n + 1),
            (b']', Some(s)) => {
                let id = &text[s..n];
                let linked = bytes.get(n + 1) == Some(&b'(');
                let well_formed = id.contains('.')
                    && !id.starts_with('.')
                    && id.bytes().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || b".-".contains(&c)
                    });
                if well_formed && !linked && !id.ends_with(".md") && !id.ends_with(".rs") {
                    out.push(id.to_owned());
                }
                start = None;
            }
            (b'\n', _) => start = None,
            _ => {}
        }
    }
    out
}

/// Every clause defined in spec/: id → file.
fn clauses() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(workspace().join("spec")).expect("spec/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            let text = fs::read_to_string(&path).expect("read spec file");
            let mut fenced = false;
            for line in text.lines() {
                if line.starts_with("```") {
                    fenced = !fenced;
                }
                if fenced {
                    continue;
                }
                if let Some(rest) = line.strip_prefix("### [") {
                    let id = rest.split(']').next().unwrap_or_default().to_owned();
                    let file = path
                        .file_name()
                        .expect("file name")
                        .to_string_lossy()
                        .into_owned();
                    assert!(
                        out.insert(id.clone(), file.clone()).is_none(),
                        "clause [{id}] is defined twice (second time in {file})"
                    );
                }
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every citation in the crates' sources: id → first file citing it.
fn citations() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    for krate in [
        "reference",
        "reference/vocabulary",
        "accelerated",
        "accelerated/kernels",
        "conformance",
    ] {
        rust_files(&workspace().join(krate).join("src"), &mut files);
    }
    let mut out = BTreeMap::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("read source");
        let mut continuing = false;
        for line in text.lines() {
            let t = line.trim_start();
            let comment = t.strip_prefix("///").or_else(|| t.strip_prefix("//!"));
            let Some(comment) = comment else {
                continuing = false;
                continue;
            };
            let cited = if let Some((_, after)) = comment.split_once("spec:") {
                continuing = true;
                ids(after)
            } else if continuing && comment.trim_start().starts_with('[') {
                ids(comment)
            } else {
                continuing = false;
                Vec::new()
            };
            for id in cited {
                out.entry(id).or_insert_with(|| file.display().to_string());
            }
        }
    }
    out
}

#[test]
fn every_clause_is_cited_by_code() {
    let clauses = clauses();
    assert!(
        clauses.len() > 30,
        "spec/ defines only {} clauses",
        clauses.len()
    );
    let cited = citations();
    let uncited: Vec<_> = clauses
        .iter()
        .filter(|(id, _)| !cited.contains_key(*id))
        .map(|(id, file)| format!("[{id}] ({file})"))
        .collect();
    assert!(
        uncited.is_empty(),
        "clauses with no citing code: {uncited:?}"
    );
}

#[test]
fn every_citation_names_a_clause() {
    let clauses = clauses();
    let dangling: Vec<_> = citations()
        .into_iter()
        .filter(|(id, _)| !clauses.contains_key(id))
        .map(|(id, file)| format!("[{id}] cited in {file}"))
        .collect();
    assert!(
        dangling.is_empty(),
        "citations of missing clauses: {dangling:?}"
    );
}

#[test]
fn every_reference_in_the_spec_resolves() {
    let clauses = clauses();
    let mut missing = BTreeSet::new();
    for entry in fs::read_dir(workspace().join("spec")).expect("spec/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            for id in ids(&fs::read_to_string(&path).expect("read")) {
                if !clauses.contains_key(&id) {
                    missing.insert(format!("[{id}] in {}", path.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "spec refers to undefined clauses: {missing:?}"
    );
}

#[test]
fn the_id_parser_finds_what_it_should() {
    assert_eq!(
        ids("spec: [fire.psi], [grad.kinks]"),
        ["fire.psi", "grad.kinks"]
    );
    assert!(ids("[fire.md](fire.md) and [x] and [T5.x]").is_empty());
}
