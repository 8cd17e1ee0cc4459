//! The command line: JSON and JUnit reports, xfails, results files and export.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fire_conformance::implementation::{Implementation, Request};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::protocol;
use fire_conformance::vectors::load;

const BIN: &str = env!("CARGO_BIN_EXE_fire-conformance");

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--vectors")
        .arg(vectors())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn json_report_and_junit_file() {
    let tmp = tempfile::tempdir().unwrap();
    let junit = tmp.path().join("junit.xml");
    let o = run(&[
        "run",
        "--run",
        "fire/depth/*",
        "--json",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["passed"], 3);
    assert_eq!(v["cases"].as_array().unwrap().len(), 3);
    assert!(String::from_utf8_lossy(&o.stderr).contains("3 passed, 0 failed, 0 skipped"));
    let xml = std::fs::read_to_string(junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 3);
    assert!(xml.contains("tests=\"3\" failures=\"0\""));
}

#[test]
fn xfails_turn_known_failures_into_skips_and_fail_when_they_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let xf = tmp.path().join("xfails.txt");
    std::fs::write(&xf, "# known\nfire/depth/*\n").unwrap();
    let variant = format!("{BIN} serve --variant heads-reversed");
    let o = run(&[
        "run",
        "--run",
        "fire/depth/*",
        "--xfails",
        xf.to_str().unwrap(),
        "--impl",
        &variant,
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(
        stdout(&o).ends_with("0 passed, 0 failed, 3 skipped\n"),
        "{}",
        stdout(&o)
    );
    let o = run(&[
        "run",
        "--run",
        "fire/depth/*",
        "--xfails",
        xf.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        stdout(&o).contains("listed in --xfails but passed"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn results_files_are_graded_like_a_live_run() {
    let suite = load::load(&vectors()).unwrap();
    let mut good = String::new();
    let mut bad = String::new();
    for case in suite.cases().filter(|c| c.id.starts_with("edge/")) {
        let reply = Reference.run(&Request::for_case(case, "f64"));
        good.push_str(&protocol::result_line(&case.id, &reply));
        good.push('\n');
        let line = protocol::result_line(&case.id, &reply);
        bad.push_str(&line.replacen("\"data\":[", "\"data\":[1.5,", 1));
        bad.push('\n');
    }
    let tmp = tempfile::tempdir().unwrap();
    let (g, b) = (tmp.path().join("good.jsonl"), tmp.path().join("bad.jsonl"));
    std::fs::write(&g, good).unwrap();
    std::fs::write(&b, bad).unwrap();
    let o = run(&["check", "--results", g.to_str().unwrap(), "--run", "edge/*"]);
    assert!(o.status.success(), "{}", stdout(&o));
    let o = run(&["check", "--results", b.to_str().unwrap(), "--run", "edge/*"]);
    assert!(!o.status.success());
    assert!(
        stdout(&o).contains("needs"),
        "a longer data list is a shape error: {}",
        stdout(&o)
    );
    std::fs::write(&b, "not json\n").unwrap();
    let o = run(&["check", "--results", b.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 1"));
}

/// A results file without a hello line is graded in the `--dtype` given (it says nothing of its
/// own); ids the suite does not have and `--xfails` entries matching no case are reported on
/// standard error, not dropped in silence.
#[test]
fn results_files_without_a_hello_take_the_dtype_and_stray_ids_are_reported() {
    let suite = load::load(&vectors()).unwrap();
    let mut lines = String::new();
    for case in suite.cases().filter(|c| c.id.starts_with("fire/depth/")) {
        let reply = Reference.run(&Request::for_case(case, "f32"));
        lines.push_str(&protocol::result_line(&case.id, &reply));
        lines.push('\n');
    }
    lines.push_str(r#"{"type": "result", "id": "fire/depth/no-such-case", "status": "skipped", "reason": "x"}"#);
    lines.push('\n');
    let tmp = tempfile::tempdir().unwrap();
    let (file, xfails) = (tmp.path().join("r.jsonl"), tmp.path().join("xfails"));
    std::fs::write(&file, lines).unwrap();
    std::fs::write(&xfails, "fire/renamed-long-ago\n").unwrap();
    let (file, xfails) = (file.to_str().unwrap(), xfails.to_str().unwrap());
    let o = run(&[
        "check",
        "--results",
        file,
        "--run",
        "fire/depth/*",
        "--dtype",
        "f32",
        "--xfails",
        xfails,
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("`fire/depth/no-such-case`"), "{err}");
    assert!(
        err.contains("`fire/renamed-long-ago` matches no case"),
        "{err}"
    );
}

/// A folder that holds no suite: exit 2, the file and the OS error said once (a library error
/// that names its cause, chained as well, had printed it twice).
#[test]
fn a_folder_without_a_suite_is_a_usage_error_said_once() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args(["run", "--vectors"])
        .arg(tmp.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    let manifest = tmp.path().join("MANIFEST.yaml");
    assert!(
        err.contains(&format!("cannot read {}: ", manifest.display())),
        "{err}"
    );
    assert_eq!(err.matches("os error").count(), 1, "{err}");
}

#[test]
fn copy_exports_a_verifiable_suite_with_a_loader() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("export");
    let o = run(&["copy", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("test_fire_vectors.py").exists());
    let suite = load::load(&out.join("vectors")).unwrap();
    assert!(suite.cases().count() > 80);
}

#[test]
fn setup_runs_once_before_the_implementation_and_a_failing_setup_aborts() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("built");
    let setup = format!("touch {}", marker.display());
    let o = run(&[
        "run",
        "--run",
        "nope/*",
        "--setup",
        &setup,
        "--impl",
        &format!("{BIN} serve"),
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(marker.exists());
    let o = run(&[
        "run",
        "--setup",
        "exit 3",
        "--impl",
        &format!("{BIN} serve"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--setup"));
}

/// The one verdict asked for with nothing graded is no pass, even when the selection held none
/// of its cases (`--fail-on validation` over value cases had exited 0: audit 14); under the
/// default `both`, a selection of value cases alone is judged on its values.
#[test]
fn the_only_counted_verdict_with_nothing_graded_is_not_a_pass() {
    let o = run(&[
        "run",
        "--fail-on",
        "validation",
        "--run",
        "fire/default-init/*",
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    let o = run(&[
        "run",
        "--fail-on",
        "values",
        "--run",
        "invalid/parameters/*",
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    let o = run(&["run", "--run", "fire/default-init/*"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn a_timeout_that_is_not_a_positive_finite_number_of_seconds_is_a_usage_error() {
    // NaN, infinities and 1e300 had panicked converting to a Duration; 0 and negatives had
    // started a run in which no case could reply in time.
    for flag in ["--timeout", "--startup-timeout"] {
        for value in ["nan", "inf", "-1", "0", "1e300", "ten"] {
            let o = run(&["run", "--run", "alibi/*", &format!("{flag}={value}")]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{flag}={value}: {err}");
            assert!(err.contains("number of seconds"), "{flag}={value}: {err}");
            assert!(!err.contains("panicked"), "{flag}={value}: {err}");
        }
    }
    let o = run(&["run", "--run", "alibi/*", "--timeout", "0.5"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}
