//! The suite compiled into the binary: it is the repository's `vectors/` byte for byte, it is
//! verified like a folder, the binary runs it from any directory, and `--vectors` /
//! `FIRE_VECTORS` override it, with the report naming which suite ran. spec: [vec.manifest]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::Command;

use fire_conformance::vectors::embedded;
use fire_conformance::vectors::load::{self, InMemory, LoadError, Origin};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_fire-conformance");

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")
}

/// Runs the binary in an empty directory, without `FIRE_VECTORS`.
fn in_empty_dir(args: &[&str]) -> (tempfile::TempDir, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir.path())
        .env_remove("FIRE_VECTORS")
        .output()
        .unwrap();
    (dir, out)
}

#[test]
fn the_embedded_suite_is_the_repository_suite_byte_for_byte() {
    let on_disk = load::yaml_files(&vectors()).unwrap();
    let embedded: Vec<&str> = embedded::FILES.iter().map(|(p, _)| *p).collect();
    assert_eq!(on_disk, embedded, "rebuild after regenerating the vectors");
    for (rel, bytes) in embedded::FILES {
        assert_eq!(std::fs::read(vectors().join(rel)).unwrap(), *bytes, "{rel}");
    }
    let (a, b) = (embedded::load().unwrap(), load::load(&vectors()).unwrap());
    assert_eq!(a.hash, b.hash);
    assert_eq!(a.origin, Origin::Embedded);
    assert_eq!(b.origin, Origin::Dir(vectors()));
    assert_eq!(a.cases().count(), b.cases().count());
}

#[test]
fn in_memory_files_are_checked_like_a_folder() {
    let mut files: Vec<(&str, Vec<u8>)> = embedded::FILES
        .iter()
        .map(|(p, b)| (*p, b.to_vec()))
        .collect();
    let last = files
        .iter_mut()
        .find(|(p, _)| *p != "MANIFEST.yaml")
        .unwrap();
    last.1.extend_from_slice(b"\n# edited\n");
    let view: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (*p, b.as_slice())).collect();
    assert!(matches!(
        load::load_from(&InMemory(&view)),
        Err(LoadError::Hash { .. })
    ));
    let mut extra = embedded::FILES.to_vec();
    extra.push(("fire/stray.yaml", b"format: 1\n"));
    let e = load::load_from(&InMemory(&extra)).unwrap_err();
    assert!(e.to_string().contains("not listed in MANIFEST.yaml"), "{e}");
}

#[test]
fn the_binary_runs_its_embedded_suite_from_any_directory() {
    let (_dir, o) = in_empty_dir(&["run", "--run", "fire/depth/*"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    let hash = &embedded::load().unwrap().hash[..12];
    assert!(
        text.starts_with("suite: embedded in fire-conformance")
            && text.contains(&format!("manifest {hash}")),
        "{text}"
    );
    let (_dir, o) = in_empty_dir(&["run", "--run", "fire/depth/*", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["suite_source"], "embedded");
    assert_eq!(v["passed"], 3);
    // Each case carries its block of the text report.
    let report = v["cases"][0]["report"].as_str().unwrap();
    assert!(report.starts_with("PASS fire/depth/"), "{report}");
}

#[test]
fn vectors_and_fire_vectors_override_the_embedded_suite() {
    let (_dir, o) = in_empty_dir(&[
        "run",
        "--json",
        "--run",
        "fire/depth/*",
        "--vectors",
        vectors().to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["suite_source"], vectors().display().to_string());
    let o = Command::new(BIN)
        .args(["run", "--json", "--run", "fire/depth/*"])
        .env("FIRE_VECTORS", vectors())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["suite_source"], vectors().display().to_string());
    // A folder that is not a suite is a clear error, not a fallback to the embedded suite.
    let (dir, _) = in_empty_dir(&[]);
    let o = Command::new(BIN)
        .args(["run", "--vectors"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("MANIFEST.yaml"), "{err}");
}

#[test]
fn list_names_every_case_for_test_runners() {
    let (_dir, o) = in_empty_dir(&["list", "--json"]);
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let suite = embedded::load().unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), suite.cases().count());
    assert_eq!(v["suite"]["manifest_sha256"], suite.hash.as_str());
    let invalid = cases.iter().find(|c| c["family"] == "invalid").unwrap();
    assert_eq!(invalid["result"], "invalid");
    assert_eq!(invalid["question"], "validation");
    let (_dir, o) = in_empty_dir(&["list", "--run", "edge/*", "--skip", "*/large-*"]);
    let ids = String::from_utf8_lossy(&o.stdout);
    assert!(ids
        .lines()
        .all(|l| l.starts_with("edge/") && !l.contains("/large-")));
    assert!(ids.lines().count() > 3, "{ids}");
}

#[test]
fn generate_outside_the_repository_names_its_folder_or_refuses() {
    // Built from this source tree, the binary falls back to its `vectors/` and says so.
    let (_dir, o) = in_empty_dir(&["generate", "--check"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("vectors"), "{text}");
}

#[test]
fn copy_exports_the_embedded_suite() {
    let (dir, o) = in_empty_dir(&["copy", "out"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let copied = load::load(&dir.path().join("out/vectors")).unwrap();
    assert_eq!(copied.hash, embedded::load().unwrap().hash);
    assert!(dir.path().join("out/test_fire_vectors.py").is_file());
}
