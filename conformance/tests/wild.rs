//! "Wild" implementations, one per symptom users met with real FIRE code, each run through the
//! real CLI and subprocess path with the exact verdict, diagnosis and exit status asserted:
//! mistakes caught in f32 and named alone, NaN-producing mistakes named by their NaN pattern,
//! declared conventions honoured by gradient cases, broken glue called broken, vacuous runs
//! refused, and the values verdict kept apart from the validation verdict.
//!
//! NumPy fakes always run (CI sets FIRE_REQUIRE_NUMPY=1, which turns a missing numpy into a
//! failure); the PyTorch fakes run when torch imports and are skipped loudly otherwise.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn numpy() -> bool {
    let ok = python_has("numpy");
    if !ok {
        assert!(
            std::env::var_os("FIRE_REQUIRE_NUMPY").is_none(),
            "FIRE_REQUIRE_NUMPY is set but numpy is missing"
        );
        eprintln!("SKIPPED: the wild NumPy implementations need python3 with numpy");
    }
    ok
}

/// The glue command for a class of `tests/wild/appendix_e_fakes.py`.
fn appendix(class: &str, dtype: &str) -> String {
    format!(
        "python3 {} {}:{class} --dtype {dtype}",
        root().join("conformance/adapters/appendix_e.py").display(),
        root()
            .join("conformance/tests/wild/appendix_e_fakes.py")
            .display()
    )
}

fn glue(name: &str) -> String {
    format!(
        "python3 {} {name}",
        root().join("conformance/tests/wild/glues.py").display()
    )
}

/// Runs `fire-conformance run --json --impl CMD ARGS…`: the exit status and the JSON report.
fn run(cmd: &str, args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_fire-conformance"))
        .args(["run", "--json", "--impl", cmd])
        // These tests are about verdicts, not hangs (tests/hostile.rs): a loaded 2-core
        // machine running Python under `cargo test`'s parallelism must not turn a slow case
        // into a timeout.
        .args(["--timeout", "600", "--startup-timeout", "600"])
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), report)
}

fn overall(r: &Value) -> Vec<String> {
    r["overall_variants"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

fn count(r: &Value, question: &str, status: &str) -> u64 {
    r[question][status].as_u64().unwrap()
}

/// Asserts that the run fails on values and names `variant` alone.
fn named(cmd: &str, variant: &str) -> Value {
    let (code, r) = run(cmd, &[]);
    assert_eq!(code, 1, "{variant}: {r:#}");
    assert!(count(&r, "values", "failed") > 0, "{variant}");
    assert_eq!(overall(&r), [variant], "{variant}");
    r
}

#[test]
fn eps_twice_is_caught_in_f32_and_named_alone() {
    if numpy() {
        named(&appendix("EpsTwice", "f32"), "eps-twice");
    }
}

#[test]
fn eps_in_three_places_is_caught_and_named() {
    if numpy() {
        named(&appendix("EpsThreePlaces", "f32"), "eps-everywhere");
        named(&appendix("EpsThreePlaces", "f64"), "eps-everywhere");
    }
}

#[test]
fn a_min_threshold_is_named() {
    if numpy() {
        named(&appendix("MinThreshold", "f32"), "threshold-as-min");
    }
}

#[test]
fn a_missing_abs_on_c_is_named_by_its_nan_pattern() {
    if !numpy() {
        return;
    }
    let r = named(&appendix("NoAbsC", "f32"), "no-abs-c");
    let nan = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "failed")
        .any(|c| c["details"].to_string().contains("got NaN"));
    assert!(nan, "no failing case shows a NaN: {r:#}");
}

#[test]
fn a_clamped_c_is_named() {
    if numpy() {
        named(&appendix("ClampedC", "f32"), "c-clamped");
    }
}

#[test]
fn positions_taken_as_list_indices_are_named() {
    if numpy() {
        named(&glue("positions-as-indices"), "positions-as-indices");
    }
}

#[test]
fn a_module_right_under_its_declared_convention_passes_bias_and_gradient_cases() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&glue("future-negated"), &[]);
    assert_eq!(code, 0, "{r:#}");
    let grads_passed = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("fire-grad/") && c["status"] == "passed")
        .count();
    assert!(grads_passed >= 10, "{grads_passed} gradient cases passed");
}

#[test]
fn t5_bucketing_in_binary64_passes_and_is_reported() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&glue("t5-binary64"), &[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(
        r["tolerated_variants"],
        serde_json::json!(["t5-binary64-buckets"])
    );
}

#[test]
fn seq_len_device_forwards_hidden_states_and_batched_outputs_are_driven() {
    if !numpy() {
        return;
    }
    // HiddenStates reads the length from x.shape[1], ScoresPlusBias from x.shape[-1]: called
    // with Appendix E's x ([1, H, T, 1]) alone, the first returned an H × H bias and every case
    // with T ≠ H failed — a correct module graded wrong.
    for class in ["SeqLenDevice", "HiddenStates", "ScoresPlusBias", "Batched"] {
        let (_, r) = run(&appendix(class, "f64"), &["--fail-on", "values"]);
        assert_eq!(count(&r, "values", "failed"), 0, "{class}: {r:#}");
        assert!(count(&r, "values", "passed") >= 20, "{class}: {r:#}");
    }
}

#[test]
fn a_forward_x_that_no_layout_of_x_fits_is_called_broken_naming_them_all() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&appendix("LengthFromBatch", "f64"), &[]);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    for part in ["[1, H, T, 1]", "[1, T, 1]", "[1, H, T, T]", "--call"] {
        assert!(error.contains(part), "{part}: {error}");
    }
}

#[test]
fn glue_that_errors_on_every_valid_case_is_called_broken() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&appendix("AlwaysRaises", "f32"), &[]);
    assert_eq!(code, 3, "{r:#}");
    assert!(
        r["adapter_broken"]["error"]
            .as_str()
            .unwrap()
            .contains("attention_mask"),
        "{r:#}"
    );
    // Its rejections of invalid cases prove nothing and are not counted as passes.
    assert_eq!(count(&r, "validation", "passed"), 0, "{r:#}");
    assert!(count(&r, "validation", "skipped") > 0, "{r:#}");
}

#[test]
fn runs_that_grade_nothing_exit_5() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&appendix("Correct", "f32"), &["--run", "fires/*"]);
    assert_eq!(code, 5, "a typo in --run: {r:#}");
    let (code, r) = run(&appendix("Correct", "f32"), &["--run", "rope/*"]);
    assert_eq!(code, 5, "every selected case skipped: {r:#}");
    assert!(count(&r, "values", "skipped") > 0);
}

#[test]
fn values_and_validation_are_separate_verdicts() {
    if !numpy() {
        return;
    }
    // Appendix E validates nothing: right numbers, wrong verdict on invalid parameters.
    let (code, r) = run(&appendix("Correct", "f32"), &[]);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    assert!(count(&r, "values", "passed") >= 15, "{r:#}");
    assert!(count(&r, "validation", "failed") > 0, "{r:#}");
    let (code, _) = run(&appendix("Correct", "f32"), &["--fail-on", "values"]);
    assert_eq!(code, 0);
    let (code, _) = run(&appendix("Correct", "f32"), &["--fail-on", "validation"]);
    assert_eq!(code, 1);
}

#[test]
fn a_module_that_cannot_compute_in_the_asked_dtype_is_skipped_with_the_reason() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&appendix("Float32Only", "f64"), &[]);
    assert_eq!(code, 5, "{r:#}");
    let fire = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"].as_str().unwrap().starts_with("fire/"))
        .unwrap();
    let reason = fire["details"].to_string();
    assert!(reason.contains("rerun with the --dtype"), "{reason}");
}

#[test]
fn the_papers_pytorch_module_passes_in_f32_and_a_mistaken_one_is_named() {
    if !python_has("torch") {
        eprintln!("SKIPPED: torch is not installed; the PyTorch wild implementations were NOT run");
        return;
    }
    let module = |class: &str| {
        format!(
            "python3 {} {}:{class} --dtype f32",
            root().join("conformance/adapters/appendix_e.py").display(),
            root()
                .join("conformance/tests/wild/torch_fakes.py")
                .display()
        )
    };
    let (_, r) = run(&module("FIRE"), &["--fail-on", "values"]);
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    let grads = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("fire-grad/") && c["status"] == "passed")
        .count();
    assert!(grads >= 5, "{grads} gradient cases passed: {r:#}");
    // Every module gets the cotangent-shape case right through the glue.
    let shape = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "invalid/inputs/cotangent-shape")
        .unwrap();
    assert_eq!(shape["status"], "passed", "{shape:#}");
    named(&module("EpsTwice"), "eps-twice");
    // The GPT-style copy (the length from hidden states' x.size(1)) is right, and graded so.
    let (code, r) = run(&module("HiddenStates"), &["--fail-on", "values"]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    assert!(count(&r, "values", "passed") >= 20, "{r:#}");
    // Appendix B's two hidden layers: graded on the cases of that depth (bias and gradient),
    // the one-hidden-layer cases skipped as another architecture rather than failed.
    let (code, r) = run(&module("TwoHidden"), &["--fail-on", "values"]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    let passed: Vec<&str> = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "passed" && c["id"].as_str().unwrap().contains("depth-2"))
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(passed.len() >= 3, "{passed:?}: {r:#}");
    assert!(
        passed.iter().any(|id| id.starts_with("fire-grad/")),
        "{passed:?}"
    );
}
