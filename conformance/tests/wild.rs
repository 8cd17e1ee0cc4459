//! "Wild" implementations, one per symptom users met with real FIRE code, each run through the
//! real CLI and subprocess path with the exact verdict, diagnosis and exit status asserted:
//! mistakes caught in f32 and named alone, NaN-producing mistakes named by their NaN pattern,
//! declared conventions honoured by gradient cases, broken glue called broken, vacuous runs
//! refused, the values verdict kept apart from the validation verdict, modules whose state is not
//! Appendix E's (a torch state dict, a JAX params tree) loaded or refused by name, and what a
//! module prints kept off the protocol.
//!
//! NumPy fakes always run (CI sets FIRE_REQUIRE_NUMPY=1, which turns a missing numpy into a
//! failure); the PyTorch fakes run when torch imports and are skipped loudly otherwise; the JAX
//! fakes run when jax imports, and FIRE_REQUIRE_JAX=1 (set by CI) turns a missing jax into a
//! failure.

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

/// The Appendix E glue's command for a class of `tests/wild/FILE`.
fn fake(file: &str, class: &str, dtype: &str) -> String {
    format!(
        "python3 {} {}:{class} --dtype {dtype}",
        root().join("conformance/adapters/appendix_e.py").display(),
        root().join("conformance/tests/wild").join(file).display()
    )
}

/// The glue command for a class of `tests/wild/appendix_e_fakes.py`.
fn appendix(class: &str, dtype: &str) -> String {
    fake("appendix_e_fakes.py", class, dtype)
}

/// Whether the PyTorch fakes can run; says loudly when they cannot.
fn torch() -> bool {
    let ok = python_has("torch");
    if !ok {
        eprintln!("SKIPPED: torch is not installed; the PyTorch wild implementations were NOT run");
    }
    ok
}

/// The glue command for a class of `tests/wild/torch_fakes.py`.
fn torch_fake(class: &str, dtype: &str) -> String {
    fake("torch_fakes.py", class, dtype)
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

/// A module masking keys after the query with `finfo(float32).min`, as Hugging Face models do,
/// passes when it declares `masked`, gradients included, through the real JSON path.
#[test]
fn a_module_masking_with_finfo_min_passes_when_it_declares_masked() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&glue("future-finfo-min"), &[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["future_keys_unchecked"], 0);
    let graded = |family: &str| {
        r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["id"].as_str().unwrap().starts_with(family)
                    && c["flags"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f == "future-keys")
                    && c["status"] == "passed"
            })
            .count()
    };
    assert!(
        graded("fire/") >= 10,
        "{} masked bias cases passed",
        graded("fire/")
    );
    assert!(
        graded("fire-grad/") >= 10,
        "{} gradient cases passed",
        graded("fire-grad/")
    );
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

/// A dtype the module cannot compute in holds for the whole run or not at all: a module that
/// answers short cases in f64 and long ones in float32 fails the long ones (here its long path
/// also drops the threshold, which a skip would have hidden).
#[test]
fn a_module_whose_dtype_changes_with_the_input_fails_where_it_changes() {
    if !numpy() {
        return;
    }
    let (code, r) = run(
        &appendix("ThresholdIgnoredOnLongInputs", "f64"),
        &["--fail-on", "values"],
    );
    assert_eq!(code, 1, "{r:#}");
    let cases = r["cases"].as_array().unwrap();
    let changed: Vec<&Value> = cases
        .iter()
        .filter(|c| {
            c["details"]
                .to_string()
                .contains("cannot compute in this dtype")
        })
        .collect();
    assert!(!changed.is_empty(), "{r:#}");
    for c in &changed {
        assert_eq!(c["status"], "failed", "{c:#}");
        assert!(c["details"].to_string().contains("[proto.reply]"), "{c:#}");
    }
    assert!(count(&r, "values", "passed") >= 10, "{r:#}");
}

/// The dtype rule holds per encoding and kind of case: a glue whose FIRE kernel is f32 only and
/// whose baselines compute in f64 has its FIRE cases skipped at f64, not failed.
#[test]
fn a_dtype_one_encoding_cannot_compute_in_is_skipped_for_that_encoding() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&glue("fire-f32-only"), &["--fail-on", "values"]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    let cases = r["cases"].as_array().unwrap();
    assert!(cases
        .iter()
        .any(|c| c["status"] == "skipped" && c["details"].to_string().contains("float32 only")));
    assert!(cases
        .iter()
        .any(|c| c["status"] == "passed" && c["id"].as_str().unwrap().starts_with("alibi/")));
}

#[test]
fn the_papers_pytorch_module_passes_in_f32_and_a_mistaken_one_is_named() {
    if !torch() {
        return;
    }
    let module = |class: &str| torch_fake(class, "f32");
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

#[test]
fn a_forward_that_returns_a_tuple_is_called_broken_saying_so() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&appendix("ReturnsTuple", "f32"), &[]);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(
        error.contains("forward returned a tuple of 2") && error.contains("build(case)"),
        "{error}"
    );
}

/// Asserts a run of `cmd` passes on values with at least `min` cases graded.
fn passes(cmd: &str, min: u64) -> Value {
    passes_in(cmd, min, &[])
}

/// As [`passes`], on the cases `args` select.
fn passes_in(cmd: &str, min: u64, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["--fail-on", "values"]);
    let (code, r) = run(cmd, &args);
    assert_eq!(code, 0, "{cmd}: {r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{cmd}: {r:#}");
    assert!(count(&r, "values", "passed") >= min, "{cmd}: {r:#}");
    r
}

#[test]
fn what_a_module_or_glue_prints_to_stdout_does_not_reach_the_protocol() {
    if !numpy() {
        return;
    }
    // A banner at import, logging to sys.stdout, a print and a raw write to fd 1 in forward.
    passes(&fake("noisy_fakes.py", "Noisy", "f32"), 15);
    // A build(case) file served by fire_conformance.glue, printing at import and in build.
    let glue_file = root().join("conformance/tests/wild/noisy_glue.py");
    let cmd = format!(
        "PYTHONPATH={} python3 -m fire_conformance.glue {}",
        root().join("conformance/python").display(),
        glue_file.display()
    );
    let (code, r) = run(&cmd, &[]);
    assert_eq!(code, 0, "{r:#}");
    assert!(count(&r, "values", "passed") >= 15, "{r:#}");
    // A glue of its own calling kit.serve, printing in build.
    passes(&glue("prints"), 15);
}

#[test]
fn the_catalogued_mlp_mistakes_written_in_torch_are_graded_and_named() {
    if !torch() {
        return;
    }
    // Their state dicts are not Appendix E's (a bias missing, layers renumbered): loaded layer
    // by layer, their values are graded and the mistake named, where a strict load called the
    // adapter broken.
    named(&torch_fake("HiddenBiasFalse", "f32"), "hidden-bias-missing");
    named(&torch_fake("OutputBiasFalse", "f32"), "output-bias-missing");
    named(
        &torch_fake("NoHiddenActivation", "f32"),
        "no-hidden-activation",
    );
}

#[test]
fn torch_modules_with_scalars_of_shape_1_or_a_positions_buffer_pass() {
    if !torch() {
        return;
    }
    for class in ["ScalarsShape1", "PositionsBuffer"] {
        let r = passes(&torch_fake(class, "f32"), 20);
        let grads = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["id"].as_str().unwrap().starts_with("fire-grad/") && c["status"] == "passed"
            })
            .count();
        assert!(grads >= 5, "{class}: {grads} gradient cases passed: {r:#}");
    }
}

#[test]
fn a_torch_module_that_builds_its_output_layer_first_is_graded_and_passes() {
    if !torch() {
        return;
    }
    // Its layers go to the case's by how their shapes compose, not by registration order;
    // taken in that order they were [12, 32] then [32, 1], and every case was skipped.
    let r = passes(&torch_fake("OutputLayerFirst", "f32"), 20);
    let appendix_e = passes(&torch_fake("FIRE", "f32"), 20);
    for status in ["passed", "skipped"] {
        assert_eq!(
            count(&r, "values", status),
            count(&appendix_e, "values", status),
            "{status}: {r:#}"
        );
    }
}

/// NaN above the diagonal is allowed under `negated` for the bias, but it poisons the gradients
/// (0·NaN), and the run-level verdict says so rather than blaming a detached parameter.
#[test]
fn a_torch_module_with_nan_above_the_diagonal_passes_its_bias_and_fails_its_gradients_saying_why() {
    if !torch() {
        return;
    }
    let cmd = format!(
        "{} --future-keys negated",
        torch_fake("SignedDistance", "f32")
    );
    let (code, r) = run(&cmd, &["--fail-on", "values", "--run", "fire*"]);
    assert_eq!(code, 1, "{r:#}");
    // Only gradient cases fail: those whose square reaches c·(i − j) < −1, where ψ is NaN.
    let mut grads_failed = 0;
    for c in r["cases"].as_array().unwrap() {
        let (id, status) = (c["id"].as_str().unwrap(), &c["status"]);
        if id.starts_with("fire-grad/") {
            grads_failed += usize::from(status == "failed");
        } else {
            assert_ne!(status, "failed", "{id}: {c:#}");
        }
    }
    assert!(grads_failed > 0, "{r:#}");
    assert_eq!(r["overall_gradients_nan"], true, "{r:#}");
}

#[test]
fn a_torch_module_returning_numpy_has_its_bias_graded_and_its_gradients_skipped() {
    if !torch() {
        return;
    }
    let r = passes(&torch_fake("NumpyOut", "f32"), 20);
    assert!(
        r.to_string().contains("autograd cannot differentiate"),
        "{r:#}"
    );
}

#[test]
fn a_torch_module_with_its_multiplier_under_another_name_is_refused_naming_it() {
    if !torch() {
        return;
    }
    let (code, r) = run(&torch_fake("MultiplierBuffer", "f32"), &[]);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(error.contains("['L_mult']"), "{error}");
}

#[test]
fn a_torch_module_with_a_parameter_no_case_value_reaches_is_refused_by_name() {
    if !torch() {
        return;
    }
    refused_naming_scale(&torch_fake("ExtraParameter", "f32"), &[]);
}

/// Asserts a run of `cmd` is called broken (exit 3) naming the unreached parameter `scale`.
fn refused_naming_scale(cmd: &str, args: &[&str]) {
    let (code, r) = run(cmd, args);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(
        error.contains("['scale']") && error.contains("--map"),
        "{error}"
    );
}

#[test]
fn the_papers_pytorch_module_runs_in_bf16() {
    if !torch() {
        return;
    }
    // Cast to bfloat16, it computes and returns bfloat16, graded by the bf16 profile; cast to
    // float32 it was refused for not returning the dtype asked, and nothing was graded.
    passes(&torch_fake("FIRE", "bf16"), 2);
}

#[test]
fn a_mixed_precision_torch_module_is_graded_at_bf16() {
    if !torch() {
        return;
    }
    // bf16 arithmetic, a float32 bias: graded by the bf16 profile, where every case skipped
    // with "rerun with the --dtype it computes in" although it did.
    passes(&torch_fake("MixedPrecision", "bf16"), 2);
}

#[test]
fn a_torch_module_that_trains_init_l_fails_the_gradient_cases_saying_so() {
    if !torch() {
        return;
    }
    fails_the_gradient_cases_on_init_l(&torch_fake("TrainableInitL", "f32"), &[]);
}

/// Asserts a run of `cmd` fails on values, only on gradient cases, each saying that
/// [grad.layout] freezes `init_L`, while a bias case passes (the bias itself is right).
fn fails_the_gradient_cases_on_init_l(cmd: &str, args: &[&str]) {
    let mut args = args.to_vec();
    args.extend(["--fail-on", "values"]);
    let (code, r) = run(cmd, &args);
    assert_eq!(code, 1, "{r:#}");
    let cases = r["cases"].as_array().unwrap();
    let failed: Vec<&Value> = cases
        .iter()
        .filter(|c| c["status"] == "failed" && c["question"] == "values")
        .collect();
    assert!(!failed.is_empty());
    for c in &failed {
        let id = c["id"].as_str().unwrap();
        assert!(id.starts_with("fire-grad/"), "{id} failed: {c:#}");
        assert!(
            c["details"].to_string().contains("[grad.layout] freezes"),
            "{id}: {c:#}"
        );
    }
    assert!(cases
        .iter()
        .any(|c| c["id"].as_str().unwrap().starts_with("fire/") && c["status"] == "passed"));
    // The run-level verdict names the gradient that is wrong.
    let wrong = r["overall_gradients"].as_array().unwrap();
    assert!(wrong.iter().any(|g| g == "init_L"), "{wrong:?}");
}

/// Whether the JAX fakes can run: a failure when FIRE_REQUIRE_JAX is set (CI), else a loud skip.
fn jax() -> bool {
    let ok = python_has("jax");
    if !ok {
        assert!(
            std::env::var_os("FIRE_REQUIRE_JAX").is_none(),
            "FIRE_REQUIRE_JAX is set but jax is missing"
        );
        eprintln!("SKIPPED: jax is not installed; the JAX wild implementations were NOT run");
    }
    ok
}

/// The glue command for a class of `tests/wild/jax_fakes.py` (the Appendix E adapter hands a
/// module with `init`/`apply` to the JAX glue).
fn jax_fake(class: &str) -> String {
    fake("jax_fakes.py", class, "f32")
}

/// The cases the JAX runs take. Eager JAX compiles every primitive for every new shape (~50 ms
/// each; a gradient case costs seconds), so a whole-suite run costs a minute: the bias cases
/// below share one shape; the gradient cases add a VJP and both kinks.
const JAX_BIAS: [&str; 2] = ["--run", "fire/random-params/*"];
const JAX_GRAD: [&str; 6] = [
    "--run",
    "fire/random-params/*",
    "--run",
    "fire-grad/vjp/random-square-12",
    "--run",
    "fire-grad/kinks/*",
];

/// The ids of the cases of `r` that passed and start with `prefix`.
fn passed_with(r: &Value, prefix: &str) -> Vec<String> {
    r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "passed" && c["id"].as_str().unwrap().starts_with(prefix))
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_catalogued_mlp_mistakes_written_in_jax_are_graded_and_named() {
    if !jax() {
        return;
    }
    // A params tree without a bias leaf is loaded layer by layer, graded, and the mistake
    // named, where a by-name lookup called the glue broken.
    for (class, variant) in [
        ("HiddenBiasFalse", "hidden-bias-missing"),
        ("OutputBiasFalse", "output-bias-missing"),
        ("NoHiddenActivation", "no-hidden-activation"),
        ("GeluDefault", "gelu-tanh-for-relu"),
    ] {
        let (code, r) = run(&jax_fake(class), &JAX_BIAS);
        assert_eq!(code, 1, "{class}: {r:#}");
        assert_eq!(count(&r, "values", "failed"), 4, "{class}: {r:#}");
        assert_eq!(overall(&r), [variant], "{class}: {r:#}");
    }
}

#[test]
fn jax_modules_with_scalars_of_shape_1_or_layers_named_otherwise_pass_values_and_gradients() {
    if !jax() {
        return;
    }
    for class in ["ScalarsShape1", "NamedOutputFirst"] {
        let r = passes_in(&jax_fake(class), 7, &JAX_GRAD);
        let grads = passed_with(&r, "fire-grad/");
        assert_eq!(grads.len(), 3, "{class}: {grads:?}: {r:#}");
    }
}

#[test]
fn a_deeper_jax_approximator_is_graded_on_the_cases_of_its_depth() {
    if !jax() {
        return;
    }
    let args = [
        "--run",
        "fire/depth/depth-2*",
        "--run",
        "fire-grad/vjp/depth-2",
        "--run",
        "fire/default-init/square-8",
    ];
    let r = passes_in(&jax_fake("TwoHidden"), 3, &args);
    let deep: Vec<String> = passed_with(&r, "")
        .into_iter()
        .filter(|id| id.contains("depth-2"))
        .collect();
    assert!(deep.len() >= 3, "{deep:?}: {r:#}");
    assert!(
        deep.iter().any(|id| id.starts_with("fire-grad/")),
        "{deep:?}"
    );
    // The one-hidden-layer cases are not its architecture: skipped, none graded.
    assert!(passed_with(&r, "fire/default-init/").is_empty(), "{r:#}");
}

#[test]
fn a_jax_module_whose_constructor_ignores_its_width_is_refused_not_skipped() {
    if !jax() {
        return;
    }
    let (code, r) = run(&jax_fake("WidthIgnored"), &JAX_BIAS);
    assert_ne!(code, 0, "{r:#}");
    assert!(count(&r, "values", "failed") > 0, "{r:#}");
    assert!(
        r.to_string().contains("ignores num_heads or mlp_width"),
        "{r:#}"
    );
    // A constructor that does not name mlp_width has one architecture by design: skipped.
    let (code, r) = run(&jax_fake("FixedWidth"), &JAX_BIAS);
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    assert_eq!(code, 5, "{r:#}");
}

#[test]
fn a_jax_module_without_a_threshold_multiplier_is_graded_and_named() {
    if !jax() {
        return;
    }
    let (code, r) = run(&jax_fake("NoMultiplier"), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(overall(&r), ["multiplier-ignored"], "{r:#}");
}

#[test]
fn a_jax_module_whose_threshold_may_be_parametrised_otherwise_is_refused_saying_how() {
    if !jax() {
        return;
    }
    for (class, says) in [
        ("MultiplierConstant", "constants/L_mult"),
        ("LearnsLDirectly", "learns L directly"),
    ] {
        let (code, r) = run(&jax_fake(class), &JAX_BIAS);
        assert_eq!(code, 3, "{class}: {r:#}");
        let error = r["adapter_broken"]["error"].as_str().unwrap();
        assert!(error.contains(says), "{class}: {error}");
    }
}

#[test]
fn a_jax_module_with_a_parameter_no_case_value_reaches_is_refused_by_name() {
    if !jax() {
        return;
    }
    refused_naming_scale(&jax_fake("ExtraParameter"), &JAX_BIAS);
}

#[test]
fn a_jax_module_that_trains_init_l_fails_the_gradient_cases_saying_so() {
    if !jax() {
        return;
    }
    fails_the_gradient_cases_on_init_l(&jax_fake("TrainableInitL"), &JAX_GRAD);
}
