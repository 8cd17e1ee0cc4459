//! The committed suite: it regenerates byte-identically, loads, and the reference passes every
//! case exactly; tampered or malformed files are clear errors.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::fs;
use std::path::{Path, PathBuf};

use fire_conformance::compare::{compare, profile};
use fire_conformance::generate;
use fire_conformance::implementation::{Implementation, Reply, Request};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::runner::{self, Options};
use fire_conformance::vectors::format::Verdict;
use fire_conformance::vectors::load;

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")
}

#[test]
fn committed_vectors_regenerate_byte_identically() {
    let n = generate::check(&suite_dir()).unwrap();
    assert!(n > 10);
}

#[test]
fn reference_passes_every_vector_exactly() {
    let suite = load::load(&suite_dir()).unwrap();
    let exact = profile("exact").unwrap();
    let mut checked = 0;
    for case in suite.cases() {
        let reply = Reference.run(&Request::for_case(case, "f64"));
        match (case.result, reply) {
            (Verdict::Valid, Reply::Output(got)) => {
                for (name, want) in case.expected.as_ref().unwrap() {
                    compare(&got[name], want, exact, None)
                        .unwrap_or_else(|e| panic!("{}: {e:?}", case.id));
                }
                checked += 1;
            }
            (Verdict::Invalid, Reply::Errored(_)) => checked += 1,
            (v, r) => panic!("{}: {v:?} case got {r:?}", case.id),
        }
    }
    assert_eq!(checked, suite.cases().count());
    let report = runner::run(&suite, &mut Reference, &Options::default()).unwrap();
    let (p, f, s) = report.counts();
    assert_eq!((f, s), (0, 0), "{}", report.summary());
    assert_eq!(p, checked);
}

fn copy_suite() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for rel in load::yaml_files(&suite_dir()).unwrap() {
        let to = tmp.path().join(&rel);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(suite_dir().join(&rel), to).unwrap();
    }
    tmp
}

fn load_err(dir: &Path) -> String {
    match load::load(dir) {
        Ok(_) => "loaded without error".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn an_edited_file_fails_its_hash() {
    let tmp = copy_suite();
    let p = tmp.path().join("fire/depth.yaml");
    let text = fs::read_to_string(&p).unwrap().replacen("0.", "1.", 1);
    fs::write(&p, text).unwrap();
    let e = load_err(tmp.path());
    assert!(
        e.contains("fire/depth.yaml") && e.contains("SHA-256"),
        "{e}"
    );
}

/// Rewrites a file and its manifest hash, so the structural checks (not the hash) must catch it.
fn tamper(dir: &Path, rel: &str, edit: impl Fn(&str) -> String) -> String {
    let p = dir.join(rel);
    let old = fs::read(&p).unwrap();
    let new = edit(&String::from_utf8(old.clone()).unwrap());
    assert_ne!(new.as_bytes(), &old[..], "the edit must change the file");
    fs::write(&p, &new).unwrap();
    let m = dir.join("MANIFEST.yaml");
    let manifest = fs::read_to_string(&m).unwrap().replace(
        &fire_conformance::vectors::manifest::sha256(&old),
        &fire_conformance::vectors::manifest::sha256(new.as_bytes()),
    );
    fs::write(m, manifest).unwrap();
    load_err(dir)
}

/// An edit of a file's text.
type Edit = dyn Fn(&str) -> String;

#[test]
fn unknown_fields_flags_bad_yaml_and_bad_shapes_are_clear_errors() {
    let cases: [(&str, &Edit, &str); 6] = [
        (
            "unknown field",
            &|t| t.replacen("    kind: \"bias\"", "    kind: \"bias\"\n    extra: 1", 1),
            "extra",
        ),
        (
            "unknown flag",
            &|t| t.replacen("\"default-init\"", "\"made-up-flag\"", 1),
            "made-up-flag",
        ),
        (
            "bad yaml",
            &|t| t.replacen("cases:", "cases: [", 1),
            "fire/default-init.yaml",
        ),
        (
            "short data",
            &|t| t.replacen("shape: [32, 1]", "shape: [33, 1]", 1),
            "needs",
        ),
        (
            "wrong family",
            &|t| t.replacen("family: \"fire\"", "family: \"edge\"", 1),
            "family",
        ),
        (
            "duplicate id",
            &|t| {
                t.replacen(
                    "id: \"fire/default-init/seed-2-square-6\"",
                    "id: \"fire/default-init/square-8\"",
                    1,
                )
            },
            "duplicate",
        ),
    ];
    for (what, edit, needle) in cases {
        let tmp = copy_suite();
        let e = tamper(tmp.path(), "fire/default-init.yaml", edit);
        assert!(e.contains(needle), "{what}: {e}");
    }
}

#[test]
fn unlisted_and_missing_files_are_errors() {
    let tmp = copy_suite();
    fs::write(tmp.path().join("fire/extra.yaml"), "format: 1\n").unwrap();
    assert!(load_err(tmp.path()).contains("not listed"));
    let tmp = copy_suite();
    fs::remove_file(tmp.path().join("edge/positions.yaml")).unwrap();
    assert!(load_err(tmp.path()).contains("cannot read"));
}

#[test]
fn drift_is_reported_by_path() {
    let tmp = copy_suite();
    let p = tmp.path().join("invalid/inputs.yaml");
    let mut t = fs::read_to_string(&p).unwrap();
    t.push('\n');
    fs::write(&p, t).unwrap();
    let e = generate::check(tmp.path()).unwrap_err().to_string();
    assert!(e.contains("invalid/inputs.yaml: differs"), "{e}");
}

/// An edit that may borrow what the test built.
type BorrowingEdit<'a> = dyn Fn(&str) -> String + 'a;

#[test]
fn non_finite_expected_values_huge_position_lists_and_anchors_are_refused_at_load() {
    // Vector files are input the harness does not trust ([vec.case], [vec.floats], [vec.yaml]):
    // a NaN or an overflowing literal where an expected value stands had been graded, blaming
    // the implementation; 10⁵ × 10⁵ positions had the in-process reference abort allocating
    // 80 GB; an anchor had been read.
    let huge: String = (0..3000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let cases: [(&str, &BorrowingEdit, &str); 5] = [
        (
            "NaN expected",
            &|t| t.replacen("data: [-0.0, -0.25,", "data: [.nan, -0.25,", 1),
            "an expected output holds NaN at element 0",
        ),
        (
            "1e400 expected",
            &|t| t.replacen("data: [-0.0, -0.25,", "data: [-1.0e+400, -0.25,", 1),
            "an expected output holds -inf at element 0",
        ),
        (
            "NaN parameter of a valid case",
            &|t| t.replacen("data: [0.25, 0.0625,", "data: [.nan, 0.0625,", 1),
            "a parameter of a valid case holds NaN",
        ),
        (
            "huge position lists",
            &|t| {
                t.replacen(
                    "queries: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n      keys: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]",
                    &format!("queries: [{huge}]\n      keys: [{huge}]"),
                    1,
                )
            },
            "3000 queries × 3000 keys: more than 4194304 query–key pairs",
        ),
        (
            "anchor",
            &|t| t.replacen("settings: {}", "settings: &s {}", 1),
            "nchor",
        ),
    ];
    for (what, edit, needle) in cases {
        let tmp = copy_suite();
        let e = tamper(tmp.path(), "alibi/slopes.yaml", edit);
        assert!(e.contains("alibi/slopes.yaml"), "{what}: {e}");
        assert!(e.contains(needle), "{what}: {e}");
    }
}
