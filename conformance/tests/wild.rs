//! "Wild" implementations, one per symptom users met with real FIRE code, each run through the
//! real CLI and subprocess path with the exact verdict, diagnosis and exit status asserted:
//! mistakes caught in f32 and named alone, NaN-producing mistakes named by their NaN pattern,
//! declared conventions honoured by gradient cases, broken glue called broken, vacuous runs
//! refused, the values verdict kept apart from the validation verdict, dtypes a module cannot
//! compute in, and what a module prints kept off the protocol. These are the NumPy fakes and
//! glues, which always run (CI sets FIRE_REQUIRE_NUMPY=1, which turns a missing numpy into a
//! failure); the PyTorch ones are in `wild_torch.rs`, the JAX ones in `wild_jax.rs`.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use common::*;
use serde_json::Value;

/// A bias cached in a module-level dict keyed on the length (audit 20): every module built
/// after the first with a given length returned the first one's bias, and the failing cases
/// were "no catalogued variant". A failing case whose output repeats, value for value, an
/// earlier case's with another f_θ is now said to carry a result over, naming that case, per
/// case and for the run; the cases it computed itself pass.
#[test]
fn a_bias_carried_from_one_case_to_the_next_is_named_with_the_case_it_repeats() {
    if !numpy() {
        return;
    }
    let (code, r) = run(
        &appendix("CachedAcrossInstances", "f32"),
        &["--run", "fire/*", "--fail-on", "values"],
    );
    assert_eq!(code, 1, "{r:#}");
    let carried = &r["overall_carried"];
    assert!(carried["count"].as_u64().unwrap() >= 5, "{r:#}");
    assert_eq!(carried["from"], "fire/epsilon/eps-half-small-c", "{r:#}");
    let repeating: Vec<&str> = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["carried_from"] == "fire/epsilon/eps-half-small-c")
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        repeating.contains(&"fire/random-params/seed-1-square-16"),
        "{repeating:?}\n{r:#}"
    );
    // The case that filled the cache, and every length first seen, computed their own bias.
    assert!(count(&r, "values", "passed") >= 5, "{r:#}");
    let said = r.to_string();
    assert!(said.contains("carried from one call to the next"), "{r:#}");
    assert!(!said.contains("no single catalogued variant"), "{r:#}");
}

#[test]
fn eps_twice_is_caught_in_f32_and_named_alone() {
    if numpy() {
        let r = named(&appendix("EpsTwice", "f32"), "eps-twice");
        // The ready-made glue calls its module across a parameter update first [proto.hello].
        assert_eq!(r["state"], "stepped", "{r:#}");
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

/// A bias returned with its heads on the last axis ([1, T, T, H], the permute missing) fails as
/// a mistake the glue found, naming the layout, where no layout of x fitting its shape had called
/// the adapter broken (exit 3, audit 19).
#[test]
fn a_bias_with_its_heads_last_fails_naming_the_layout() {
    if !numpy() {
        return;
    }
    the_glue_finds(
        &appendix("HeadsLast", "f32"),
        &["--run", "fire/random-params/*", "--fail-on", "values"],
        "its heads on the last axis",
    );
    // Where T = H the shape cannot tell, the output is read as [H, T, T] and the catalogue
    // names the reshape; the report says that and what the glue found on the others (audit 30).
    let (code, r) = run(
        &appendix("HeadsLast", "f32"),
        &[
            "--run",
            "fire/random-params/*",
            "--run",
            "edge/positions/query-zero",
            "--fail-on",
            "values",
        ],
    );
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(overall(&r), ["layout-qkh"], "{r:#}");
    let partly = &r["glue_found_partly"];
    assert!(
        partly["message"]
            .as_str()
            .unwrap()
            .starts_with("HeadsLast:"),
        "{r:#}"
    );
    assert_eq!(
        partly["found_cases"].as_u64().unwrap() + 1,
        count(&r, "values", "failed"),
        "{r:#}"
    );
    let lines = r["run_lines"].to_string();
    assert!(
        lines.contains("of the 7 failing value cases are ones where the glue's own checks"),
        "{lines}"
    );
}

/// A bias computed on the causal triangle and transposed above it (b(j, i) at keys after the
/// query) matches no variant whole, case by case only "keys after the query differ": the run's
/// overall line says the same of every failing case and which declaration passes it, where it
/// had said only that no variant explains them (audit 30); declared, it passes.
#[test]
fn a_bias_transposed_above_the_diagonal_is_told_it_differs_only_there() {
    if !numpy() {
        return;
    }
    let (code, r) = run(
        &appendix("TransposedAbove", "f32"),
        &not_the_4096_square(&["--fail-on", "values"]),
    );
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["overall_may_declare"], "negated", "{r:#}");
    let lines = r["run_lines"].to_string();
    assert!(
        lines.contains("every failing bias case agrees with the reference on the causal triangle"),
        "{lines}"
    );
    passes_in(
        &(appendix("TransposedAbove", "f32") + " --future-keys negated"),
        20,
        &NOT_THE_4096_SQUARE,
    );
}

/// Positions clamped to a table's last entry (511) are named so, per case and for the run,
/// where the only statement had been a partial match of `future-distance-clamped` (audit 20);
/// so are positions rounded to bfloat16 (a position buffer cast with the model).
#[test]
fn positions_clamped_at_a_tables_end_are_named() {
    if !numpy() {
        return;
    }
    let (code, r) = run(
        &appendix("PositionsClamped", "f32"),
        &["--run", "fire/default-init/*", "--fail-on", "values"],
    );
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(
        r["overall_positions"],
        serde_json::json!({"clamped": 511}),
        "{r:#}"
    );
    let failed = failed_saying(&r, "positions clamped to 511");
    assert!(
        failed.iter().any(|id| id.contains("causal-rows-600")),
        "{failed:?}\n{r:#}"
    );
    // Right wherever every position is below 512.
    assert!(count(&r, "values", "passed") >= 2, "{r:#}");
    // Positions held in bfloat16 (exact to 256) are named by that rounding.
    let (code, r) = run(
        &appendix("PositionsInBfloat16", "f32"),
        &["--run", "fire/default-init/*", "--fail-on", "values"],
    );
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(
        r["overall_positions"],
        serde_json::json!({"rounded": "bfloat16"}),
        "{r:#}"
    );
    // A float64 module whose positions pass through float32 fails the case of positions up to
    // 2^53, named by float32's rounding, not float16's (whose range ends at 65 504: those
    // positions would be ∞ there; audit 38).
    let (code, r) = run(
        &appendix("PositionListThroughFloat32", "f64"),
        &[
            "--run",
            "edge/positions/huge-positions",
            "--fail-on",
            "values",
        ],
    );
    assert_eq!(code, 1, "{r:#}");
    let failed = failed_saying(&r, "positions rounded to float32");
    assert_eq!(failed, ["edge/positions/huge-positions"], "{r:#}");
    assert!(!r.to_string().contains("rounded to float16"), "{r:#}");
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

/// A `build(case)` glue whose gradients are cut past 1 024 positions (a `no_grad` taken there
/// "to save memory") passes every gradient case, all small squares: the kit asks it once per run
/// for a copy of its first right gradient case over 257 positions, then 2 049, and that case
/// fails naming the parameters; a cut past 128 is found at 257. Its bias likewise, on the first
/// right bias case: a bias rounded past 1 024 keys (audit 36) had passed. A glue that refuses gradients
/// there, or whose call there would take past a third of the harness's `--timeout` (judged by
/// the call over 257 positions), is noted, not failed: nothing bounds a glue's speed, and a
/// correct one must not time out on a check it never asked for.
#[test]
fn a_build_glue_taking_another_path_for_long_sequences_is_checked() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&glue("cut-when-long"), &["--fail-on", "values"]);
    assert_eq!(code, 1, "{r:#}");
    let says = "LongGradient: at a long length (2049 positions; the gradient cases are small squares) the gradient of `c` (off by up to";
    assert_eq!(failed_saying(&r, says).len(), 1, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 1, "{r:#}");
    assert!(count(&r, "values", "passed") >= 20, "{r:#}");
    // The bias too, on the first bias case: no value case asks for more than 1 024 keys.
    let (code, r) = run(&glue("quantised-when-long"), &["--fail-on", "values"]);
    assert_eq!(code, 1, "{r:#}");
    let says = "LongBias: at a long length (2049 positions; the value cases ask for a few hundred pairs) the bias is not FIRE's: off by 0.00";
    assert_eq!(failed_saying(&r, says).len(), 1, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 1, "{r:#}");
    let (code, r) = run(&glue("cut-past-128"), &["--fail-on", "values"]);
    assert_eq!(code, 1, "{r:#}");
    let says = "LongGradient: at a long length (257 positions; the gradient cases are small squares) the gradient of `c` (off by up to";
    assert_eq!(failed_saying(&r, says).len(), 1, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 1, "{r:#}");
    let (code, r) = run_allowing(&glue("slow-when-long"), &["--fail-on", "values"], "30");
    assert_eq!(code, 0, "{r:#}");
    let noted = notes(&r);
    assert_eq!(noted.len(), 1, "{r:#}");
    assert!(
        noted[0].starts_with(
            "gradients at a long length not checked (2049 positions): a call there would take about "
        ) && noted[0].contains(" s at the speed of one over 257 positions (0.2")
            && noted[0].ends_with(
                " s, checked), past a third of the 30 s the harness allows a reply (--timeout)"
            ),
        "{r:#}"
    );
    // The README's gradient glue: gradients shaped by `case.shape_of`, every gradient case run.
    let r = passes_in(&glue("flat-gradients"), 20, &[]);
    // A module built for each case, as the kit says by default [proto.hello].
    assert_eq!(r["state"], "fresh", "{r:#}");
    let gradients = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("fire-grad/") && c["status"] == "passed")
        .count();
    assert!(gradients >= 10, "{r:#}");
    let r = passes_in(&glue("refused-when-long"), 20, &[]);
    assert_eq!(
        notes(&r),
        [
            "gradients at a long length not checked (2049 positions): called so, it raised \
          MemoryError: no gradients past 1 024 positions on this machine"
        ],
        "{r:#}"
    );
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

/// A `forward(hidden_states, past_key_values_length=0)` is also called as a decoding step with
/// a cache: its square's last half as new tokens after the first half, and its last token alone
/// after the rest, which must give the square's last rows. Keys counted over the new tokens
/// alone, the offset ignored, or one new token put a position early fail saying so (audit 32:
/// the offset was never used, and such a module passed).
#[test]
fn a_forward_taking_the_caches_length_is_called_with_a_cache() {
    if !numpy() {
        return;
    }
    passes_in(&appendix("PastLength", "f64"), 20, &[]);
    for (class, says) in [
        ("PastLengthKeysFromZero", "spans the cache too"),
        ("PastLengthIgnored", "the offset is not applied"),
        // A generation step's one token alone is off by one (audit 35: only a prefill of half
        // the square was made, and it passed).
        (
            "PastLengthOneTokenBehind",
            "forward(x of 1 token, past_key_values_length=",
        ),
    ] {
        the_glue_finds(&appendix(class, "f64"), &["--run", "fire/*"], says);
    }
}

/// A `forward(attention_mask)` making its positions from a padding mask, as Hugging Face code
/// does, is called with a mask of ones first: it passes, and with `- 1` forgotten it is named
/// `one-based-positions` (audit 32: given zeros, every token was padding, and a correct module
/// failed as a stale cache). One adding its bias to an additive mask gets the other layouts.
#[test]
fn a_forward_of_the_attention_mask_is_given_a_mask_of_ones() {
    if !numpy() {
        return;
    }
    passes_in(&appendix("PaddingMask", "f64"), 20, &[]);
    named(
        &appendix("PaddingMaskOneBased", "f64"),
        "one-based-positions",
    );
    // An additive mask [B, 1, T, T] returned with the bias added is scores to the glue.
    passes_in(&appendix("AdditiveMask", "f64"), 20, &[]);
}

#[test]
fn seq_len_device_forwards_hidden_states_and_batched_outputs_are_driven() {
    if !numpy() {
        return;
    }
    // HiddenStates reads the length from x.shape[1], ScoresPlusBias from x.shape[-1]: called
    // with Appendix E's x ([B, H, T, 1]) alone, the first returned an H × H bias and every case
    // with T ≠ H failed — a correct module graded wrong.
    // AssertsHiddenStates fails an `assert` on Appendix E's x, not a shape check; AttentionMask
    // returns nn.MultiheadAttention's [B·H, T, T], batch-major.
    for class in [
        "SeqLenDevice",
        "HiddenStates",
        "ScoresPlusBias",
        "Batched",
        "AssertsHiddenStates",
        "AttentionMask",
    ] {
        let (_, r) = run(
            &appendix(class, "f64"),
            &not_the_4096_square(&["--fail-on", "values"]),
        );
        assert_eq!(count(&r, "values", "failed"), 0, "{class}: {r:#}");
        assert!(count(&r, "values", "passed") >= 20, "{class}: {r:#}");
    }
    // QueryKeyLengths (forward(i, j), x-transformers) and ComputeBias (forward(query_length,
    // key_length, device), Hugging Face) had been "adapter broken"; the call is all they show.
    for class in ["QueryKeyLengths", "ComputeBias"] {
        passes_in(
            &appendix(class, "f64"),
            4,
            &["--run", "fire/random-params/*"],
        );
    }
}

#[test]
fn a_bias_that_mixes_the_batch_with_the_heads_fails_on_the_batched_calls_saying_so() {
    if !numpy() {
        return;
    }
    // Both are right at batch 1, where a glue calling with one sequence had passed them: x holds
    // two sequences up to T = 512, and the sequences' biases must be equal.
    for class in ["BatchHeadsInterleaved", "AttentionMaskInterleaved"] {
        let (code, r) = run(
            &appendix(class, "f32"),
            &not_the_4096_square(&["--fail-on", "values"]),
        );
        assert_eq!(code, 1, "{class}: {r:#}");
        let mixed = failed_saying(&r, "differs between batch entries 0 and 1").len();
        assert!(mixed >= 15, "{class}: {mixed} failed on the batch: {r:#}");
        // Past T = 512 it is called with one sequence, and is right there.
        let long = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "fire/default-init/causal-rows-600")
            .unwrap();
        assert_eq!(long["status"], "passed", "{class}: {long:#}");
    }
}

#[test]
fn a_forward_x_that_no_layout_of_x_fits_is_called_broken_naming_them_all() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&appendix("ExpectsModelWidth", "f64"), &[]);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    for part in [
        "[B, H, T, 1]",
        "[B, T, 1]",
        "[B, H, T, T]",
        "[B, T] token ids",
        "[T, 1] one sequence",
        "--call",
    ] {
        assert!(error.contains(part), "{part}: {error}");
    }
    // One reading the length from x.shape[0] takes one sequence, no batch (Equinox's
    // convention, audit 31): called so, and graded.
    passes(&appendix("LengthFromFirstAxis", "f32"), 20);
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

/// What a `build(case)` returns is read as one array of numbers per output: a list of per-head
/// arrays stacks (it had been "adapter broken" on a message from inside the kit); a forgotten
/// return and a bare `assert` say what went wrong and where (audit 18).
#[test]
fn a_glues_return_value_and_bare_assert_are_read_or_said_clearly() {
    if !numpy() {
        return;
    }
    passes_in(
        &glue("list-of-heads"),
        4,
        &["--run", "fire/random-params/*"],
    );
    for (name, says) in [
        (
            "returns-none",
            "TypeError: build(case) returned output `bias` as None (did build forget to return \
             it?)",
        ),
        (
            "bare-assert",
            "AssertionError (no message; raised at glues.py:",
        ),
    ] {
        let (code, r) = run(&glue(name), &["--run", "fire/random-params/*"]);
        assert_eq!(code, 3, "{name}: {r:#}");
        let error = r["adapter_broken"]["error"].as_str().unwrap();
        assert!(error.contains(says), "{name}: {error}");
    }
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
    let (code, r) = run(&appendix("Correct", "f32"), &NOT_THE_4096_SQUARE);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    assert!(count(&r, "values", "passed") >= 15, "{r:#}");
    assert!(count(&r, "validation", "failed") > 0, "{r:#}");
    let (code, _) = run(
        &appendix("Correct", "f32"),
        &not_the_4096_square(&["--fail-on", "values"]),
    );
    assert_eq!(code, 0);
    let (code, _) = run(
        &appendix("Correct", "f32"),
        &not_the_4096_square(&["--fail-on", "validation"]),
    );
    assert_eq!(code, 1);
}

#[test]
fn a_module_that_cannot_compute_in_the_asked_dtype_is_skipped_with_the_reason() {
    if !numpy() {
        return;
    }
    // The skip reason of the first FIRE case of a run that graded nothing (exit 5).
    let reason = |class: &str, dtype: &str| {
        let (code, r) = run(&appendix(class, dtype), &NOT_THE_4096_SQUARE);
        assert_eq!(code, 5, "{r:#}");
        let fire = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"].as_str().unwrap().starts_with("fire/"))
            .unwrap();
        fire["details"].to_string()
    };
    let f32_only = reason("Float32Only", "f64");
    assert!(f32_only.contains("rerun with the --dtype"), "{f32_only}");
    // float16, which no --dtype names: the advice is one that can be followed.
    let reason = reason("Float16", "f32");
    assert!(
        reason.contains("float16 has no tolerance profile") && !reason.contains("rerun with"),
        "{reason}"
    );
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
        &not_the_4096_square(&["--fail-on", "values"]),
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

/// A FIRE whose gradient cases compute in the dtype while every bias case (an inference path of
/// its own) says it cannot is not passed on its gradients alone: its bias was never graded,
/// which the report says, and the run exits 5, not 0 (the cases stay skipped, not failed: a
/// correct module with an inference kernel in fewer dtypes does the same).
#[test]
fn a_bias_path_that_cannot_compute_in_the_dtype_its_gradients_do_does_not_pass() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&glue("bias-path-dtype"), &["--fail-on", "values"]);
    assert_eq!(code, 5, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    let unchecked = r["bias_unchecked"].as_array().unwrap();
    assert_eq!(unchecked.len(), 1, "{r:#}");
    assert_eq!(unchecked[0]["encoding"], "fire", "{r:#}");
    assert!(unchecked[0]["cases"].as_u64().unwrap() >= 20, "{r:#}");
    assert!(
        unchecked[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the inference path returns float64"),
        "{r:#}"
    );
    assert!(
        r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["status"] == "passed" && c["id"].as_str().unwrap().starts_with("fire-grad/")),
        "{r:#}"
    );
    // Its gradients were graded: none unchecked.
    assert_eq!(
        r["gradients_unchecked"].as_array().unwrap().len(),
        0,
        "{r:#}"
    );
}

/// An implementation that skips every gradient case of an encoding whose bias it computes is
/// told, in a `not checked:` line, that no gradient was checked.
#[test]
fn gradients_skipped_throughout_are_named_as_not_checked() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&glue("gradients-skipped"), &["--fail-on", "values"]);
    assert_eq!(code, 0, "{r:#}");
    let unchecked = r["gradients_unchecked"].as_array().unwrap();
    assert_eq!(unchecked.len(), 1, "{r:#}");
    assert_eq!(unchecked[0]["encoding"], "fire", "{r:#}");
    assert!(unchecked[0]["cases"].as_u64().unwrap() >= 9, "{r:#}");
    assert_eq!(unchecked[0]["reason"], "no autograd here", "{r:#}");
    // One that computes its gradients has none unchecked.
    let (_, r) = run(&glue("bias-path-dtype"), &["--fail-on", "values"]);
    assert_eq!(
        r["gradients_unchecked"].as_array().unwrap().len(),
        0,
        "{r:#}"
    );
}

#[test]
fn a_forward_that_returns_a_tuple_is_called_broken_saying_so() {
    if !numpy() {
        return;
    }
    let (code, r) = run(&appendix("ReturnsTuple", "f32"), &NOT_THE_4096_SQUARE);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(
        error.contains("forward returned a tuple of 2") && error.contains("build(case)"),
        "{error}"
    );
}

#[test]
fn what_a_module_or_glue_prints_to_stdout_does_not_reach_the_protocol() {
    if !numpy() {
        return;
    }
    // A banner at import, logging to sys.stdout, a print and a raw write to fd 1 in forward.
    passes_in(
        &fake("noisy_fakes.py", "Noisy", "f32"),
        15,
        &NOT_THE_4096_SQUARE,
    );
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
    // It serves `fire`, `edge` and `invalid`: no gradient case was graded, and the run says so
    // (audit 38: the README's glue template, with `c` detached, passed unsaid).
    // The attention cases it does not serve either are no gap of a bias module's: not said.
    let unserved = r["unserved"].as_array().unwrap();
    assert_eq!(unserved.len(), 1, "{r:#}");
    assert!(
        unserved.iter().any(|u| u["kind"] == "gradient"
            && u["encoding"] == "fire"
            && u["families"] == serde_json::json!(["fire-grad"])
            && u["cases"].as_u64().unwrap() >= 8),
        "{r:#}"
    );
    // A glue of its own calling kit.serve, printing in build.
    passes(&glue("prints"), 15);
}

/// A `forward(idx)` that unpacks a batch of token ids `[B, T]` (nanoGPT's name) had been called
/// with position lists and failed `PositionsIgnored` (audit 30): it takes no list `[n]` and reads
/// a `[1, n]` only for its length, so it is called with token ids, the note says so, and the run
/// says its position lists were gathered; the same name taking a list `[n]` and counting it
/// still fails. A `forward(attn_weights)` returning the bias alone fails as one dropping the
/// scores, told the `--call scores_shape` that grades it as returning the bias for its caller;
/// a constructor of one config object is told what reaches it.
#[test]
fn token_ids_scores_read_for_their_shape_and_config_constructors_are_told_how_to_call() {
    if !numpy() {
        return;
    }
    let r = passes(&appendix("TokenIds", "f32"), 20);
    assert!(
        notes(&r)
            .iter()
            .any(|n| n.contains("`idx` read as token ids [B, T]")),
        "{r:#}"
    );
    assert!(r["positions_from_square"].as_u64().unwrap() > 0, "{r:#}");
    let (code, r) = run(&appendix("IdxPositionsCounted", "f32"), &[]);
    assert_eq!(code, 1, "{r:#}");
    let found = r["glue_found"]["message"].as_str().unwrap_or_default();
    assert!(found.starts_with("PositionsIgnored:"), "{r:#}");
    let (code, r) = run(
        &appendix("ScoresShapeOnly", "f32"),
        &["--fail-on", "values"],
    );
    assert_eq!(code, 1, "{r:#}");
    let found = r["glue_found"]["message"].as_str().unwrap_or_default();
    assert!(found.contains("--call scores_shape"), "{r:#}");
    passes(
        &(appendix("ScoresShapeOnly", "f32") + " --call scores_shape"),
        20,
    );
    // A forward(t) given a length where t holds positions is told which --call hands them.
    let (code, r) = run(
        &appendix("PositionsNamedT", "f32"),
        &["--fail-on", "values"],
    );
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("forward(t) was called with a length") && error.contains("--call positions"),
        "{error}"
    );
    passes(
        &(appendix("PositionsNamedT", "f32") + " --call positions"),
        20,
    );
}

/// A constructor taking one config object (`__init__(self, config)`, Hugging Face's way) was
/// refused on every case, told to write a build(case) glue (audit 30; audit 32 met it as most
/// of its LIMITs). The glue now builds the config from each case: every attribute the module
/// reads is answered with the case's value of the argument its name says (`num_attention_heads`,
/// `fire_mlp_width`, `fire_hidden_size`, `fire_epsilon`, a `getattr` with a default included,
/// or FIRE's own entry read as a dict, `config.position_encoding["mlp_width"]`; an ε taken as an
/// argument of its own beside the config is given as one), and the run's name says which it
/// read as which. A name that says nothing certain of FIRE
/// (`hidden_size`, most configs' model width) is refused naming the `--map-arg` that answers it,
/// and passes once given; an ε read from elsewhere (the model's layer-norm ε) skips the cases at
/// another ε, naming the attribute, where the config holds no ε of FIRE's, and fails them where
/// its class declares one the module never reads.
#[test]
fn a_constructor_taking_one_config_object_is_given_one_built_from_each_case() {
    if !numpy() {
        return;
    }
    let args = ["--run", "fire/*", "--run", "edge/*"];
    let args = not_the_4096_square(&args);
    for (class, read) in [
        (
            "ConfigConstructor",
            "(num_heads ← config.num_attention_heads, mlp_width ← config.fire_mlp_width, eps ← config.fire_eps)",
        ),
        (
            "ConfigAndEps",
            "(num_heads ← config.num_attention_heads, mlp_width ← config.fire_mlp_width), and reads no init_c",
        ),
        (
            "ConfigAny",
            "(num_heads ← config.num_attention_heads, mlp_width ← config.fire_mlp_width, eps ← config.fire_eps)",
        ),
        (
            "ConfigDataclass",
            "(num_heads ← config.num_attention_heads, mlp_width ← config.fire_hidden_size, \
             init_c ← config.fire_init_c, init_L ← config.fire_init_L, eps ← config.fire_epsilon)",
        ),
        (
            "ConfigNested",
            "(num_heads ← config.num_attention_heads, mlp_width ← config.position_encoding.mlp_width, \
             init_c ← config.position_encoding.init_c, init_L ← config.position_encoding.init_L, \
             eps ← config.position_encoding.eps)",
        ),
    ] {
        let r = passes_in(&appendix(class, "f32"), 20, &args);
        let name = r["implementation"].as_str().unwrap();
        assert!(
            name.contains(&format!("takes one config object, built by the glue {read}")),
            "{class}: {name}"
        );
        // The ε cases are graded, not skipped: the module read its ε from the config.
        assert!(passed_with(&r, "fire/epsilon/").len() >= 3, "{class}: {r:#}");
    }
    let r = passes_in(&appendix("ConfigNoFireEps", "f32"), 10, &args);
    let name = r["implementation"].as_str().unwrap();
    assert!(
        name.contains("reads no eps (cases at ε ≠ 1e-06 skipped); it read config.layer_norm_eps"),
        "{name}"
    );
    assert!(passed_with(&r, "fire/epsilon/").is_empty(), "{r:#}");
    assert!(
        r.to_string()
            .contains("the module read no ε from the config the glue built"),
        "{r:#}"
    );
    // Where its config class declares FIRE's ε (`fire_epsilon`) and it normalises with the
    // layer norms' all the same, it ignores FIRE's: the cases at another ε fail (audit 33),
    // each naming `eps-missing` (on one, with the variants it coincides with there).
    let r = every_failure_says(
        &appendix("ConfigLayerNormEps", "f32"),
        &args,
        "`eps-missing`",
    );
    assert!(
        failed_saying(&r, "")
            .iter()
            .all(|id| id.starts_with("fire/epsilon/")),
        "{r:#}"
    );
    let (code, r) = run(&appendix("ConfigHiddenSize", "f32"), &args);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("holds no 'hidden_size'")
            && error.contains("--map-arg mlp_width=hidden_size"),
        "{error}"
    );
    passes_in(
        &(appendix("ConfigHiddenSize", "f32") + " --map-arg mlp_width=hidden_size"),
        20,
        &args,
    );
}

/// A glue's `case.note(…)` reaches the report as the reply's `note` ([proto.reply]): made one
/// line, several on one case joined, the same text once, each distinct note counted over the
/// cases that carried it, and the verdict unchanged.
#[test]
fn a_glues_notes_reach_the_report_once_per_distinct_text() {
    if !numpy() {
        return;
    }
    let r = passes(&glue("notes"), 15);
    let cases = r["cases"].as_array().unwrap();
    let ran = |kind: &str| {
        cases
            .iter()
            .filter(|c| c["status"] == "passed" && c["id"].as_str().unwrap().starts_with(kind))
            .count() as u64
    };
    let noted: Vec<(String, u64)> = r["implementation_notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["note"].as_str().unwrap().to_owned(),
                n["cases"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        noted,
        // In the suite's order, where fire-grad/ comes first.
        [
            (
                "answered by the NumPy FIRE (vjp); gradients by hand".to_owned(),
                ran("fire-grad/")
            ),
            ("answered by the NumPy FIRE (bias)".to_owned(), ran("fire/")),
        ],
        "{r:#}"
    );
}

/// A module called on the whole square has its KV-cache, gapped and unsorted cases answered by
/// the glue's gather, and the report says its own decoding call never ran; one whose forward
/// takes the query and key positions is run on the lists themselves ([proto.hello]). A square
/// glue is not handed squares past 4 096 unless it declares `max_len`.
#[test]
fn a_square_glue_says_the_position_lists_were_gathered() {
    if !numpy() {
        return;
    }
    let square = passes(&appendix("Correct", "f32"), 20);
    assert!(
        square["positions_from_square"].as_u64().unwrap() >= 5,
        "{square:#}"
    );
    // A build(case) file declaring it in CAPABILITIES, served by fire_conformance.glue.
    let cmd = format!(
        "PYTHONPATH={} python3 -m fire_conformance.glue {}",
        root().join("conformance/python").display(),
        root()
            .join("conformance/tests/wild/square_glue.py")
            .display()
    );
    let glued = passes(&cmd, 20);
    assert!(
        glued["positions_from_square"].as_u64().unwrap() >= 5,
        "{glued:#}"
    );
    // Its build has no guard for the 10⁶-wide square: the kit skips it, saying why.
    let large = glued["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "edge/positions/large-positions")
        .unwrap();
    assert_eq!(large["status"], "skipped", "{large:#}");
    assert!(large.to_string().contains("max_len"), "{large:#}");
    let lists = passes(&appendix("QueryKeyPositions", "f32"), 20);
    assert_eq!(lists["positions_from_square"], 0, "{lists:#}");
}

/// A module given attention scores ([B, H, T, T]) is handed non-zero ones: it must return them
/// added to its bias. One that drops them (a model's logits replaced by the bias), scales them
/// (said with its factor) or changes them otherwise errors saying so; one that reads only their length and returns the bias
/// alone, under a parameter not named for scores, is graded as a bias.
#[test]
fn a_module_given_scores_is_handed_non_zero_ones_and_must_add_them() {
    if !numpy() {
        return;
    }
    let args = ["--run", "fire/random-params/*", "--fail-on", "values"];
    // The second: whether every case says exactly the same (the changed scores' figures differ).
    for (class, same, says) in [
        ("ScoresDropped", true, "returned the bias without them"),
        (
            "ScoresScaled",
            false,
            "returned them scaled by 0.125 plus the bias",
        ),
        ("ScoresTanh", false, "returned neither scores + bias"),
    ] {
        // A mistake the glue found, not a broken adapter ([proto.reply]'s `cause: module`).
        let r = the_glue_finds(&appendix(class, "f32"), &args, says);
        assert_eq!(r["glue_found"]["same_message"], same, "{class}: {r:#}");
        assert_eq!(r["glue_found"]["count"], 6, "{class}: {r:#}");
        let cases = r["cases"].as_array().unwrap();
        assert!(
            cases
                .iter()
                .filter(|c| c["status"] == "failed")
                .all(|c| c["report"].as_str().unwrap().contains(says)),
            "{class}: {r:#}"
        );
    }
    for class in ["ScoresPlusBias", "LengthFromLastAxis"] {
        passes_in(
            &appendix(class, "f32"),
            4,
            &["--run", "fire/random-params/*"],
        );
    }
}

/// The positions probe on lists no vector holds: a correct `forward(positions)` given
/// consecutive positions reversed (below L its bias is 0..n's) is not told it counts, where one
/// that counts is, with a probe whose distances differ (audit 22).
#[test]
fn the_positions_probe_tells_a_counting_module_from_a_correct_one() {
    if !numpy() {
        return;
    }
    let out = std::process::Command::new("python3")
        .arg(root().join("conformance/tests/wild/probes.py"))
        .arg(root().join("conformance/tests/wild"))
        .env("PYTHONPATH", root().join("conformance/python"))
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `forward(x)` module is handed a non-zero x as well as zeros: one whose bias moves with x's
/// values (`x * 0.125 + bias`, which x of zeros alone passes) fails saying so, as a mistake the
/// glue found (exit 1); one that returns x + bias takes x for scores and is graded in that
/// layout.
#[test]
fn a_forward_x_whose_bias_depends_on_x_values_fails() {
    if !numpy() {
        return;
    }
    let r = the_glue_finds(
        &appendix("XLeaksIntoBias", "f32"),
        &["--run", "fire/random-params/*", "--fail-on", "values"],
        "depends on the values of x",
    );
    // Every case finds it, each in its own figures: one finding, not one case of six.
    assert_eq!(
        r["glue_found"]["count"], r["glue_found"]["failed_cases"],
        "{r:#}"
    );
    assert_eq!(r["glue_found"]["same_message"], false, "{r:#}");
    passes_in(
        &appendix("XPlusBias", "f32"),
        4,
        &["--run", "fire/random-params/*"],
    );
    // x read through the differences between the batch's sequences (audit 22): an x the same
    // for every sequence cannot see it; one whose sequences differ can.
    the_glue_finds(
        &appendix("XLeaksThroughTheBatch", "f32"),
        &["--run", "fire/random-params/*", "--fail-on", "values"],
        "whose sequences differ",
    );
}

/// A `forward(query_length, key_length)` module is given the decoding call, the query rows from
/// the first query to the last key: one that returns the first rows of a shorter query block
/// (a decoding step given query 0's bias) fails, saying so and how to declare that convention,
/// and passes where it declares it (`--query-rows first`, T5's compute_bias). Its lists reach it as far as the
/// interface can take them, so nothing is counted as gathered from a square.
#[test]
fn a_lengths_module_is_given_the_decoding_call() {
    if !numpy() {
        return;
    }
    let args = not_the_4096_square(&["--fail-on", "values"]);
    let (code, r) = run(&appendix("LengthsFirstRows", "f32"), &args);
    assert_eq!(code, 1, "{r:#}");
    // Said as the other convention, with the flag that declares it, where the diagnosis had
    // named `positions-as-indices` (audit 21).
    let failed = failed_saying(&r, "declare --query-rows first");
    assert!(
        failed.iter().any(|id| id.contains("kv-cache")),
        "{failed:?}\n{r:#}"
    );
    let first = format!("{} --query-rows first", appendix("LengthsFirstRows", "f32"));
    let r = passes_in(&first, 20, &not_the_4096_square(&[]));
    assert!(r["positions_from_square"].as_u64().unwrap() >= 5, "{r:#}");
    // The same call with the attention's query and key tensors, forward(q, k), read only for
    // their lengths (audit 31), logits q·kᵀ + bias included.
    for class in ["QueryKeyLengths", "QueryKeyStates", "ScoresFromStates"] {
        let r = passes_in(&appendix(class, "f32"), 20, &not_the_4096_square(&[]));
        assert_eq!(r["positions_from_square"], 0, "{class}: {r:#}");
    }
    // Logits without their 1/√d, q·kᵀ + bias: probed with non-zero tensors of head dimension 8
    // (the graded call's have 1, where √d = 1), the glue says so (audit 32: it passed).
    the_glue_finds(
        &appendix("ScoresFromStatesUnscaled", "f32"),
        &not_the_4096_square(&[]),
        "returned q·kᵀ + bias",
    );
    let (code, r) = run(&appendix("StatesFirstRows", "f32"), &args);
    assert_eq!(code, 1, "{r:#}");
    let failed = failed_saying(
        &r,
        "forward(q, k) with 1 queries and 38 keys returned the first",
    );
    assert!(
        failed.iter().any(|id| id.contains("kv-cache")),
        "{failed:?}\n{r:#}"
    );
}

/// A `forward(positions)` module is given the case's positions (the lists where the queries are
/// the keys, the queries then the keys otherwise), as a list or as `[1, n]` position_ids: one
/// that counts 0..n in place of them fails on gapped positions, where the square 0..T had let it
/// pass, saying so.
#[test]
fn a_positions_module_is_given_the_positions() {
    if !numpy() {
        return;
    }
    for class in ["PositionList", "PositionIds"] {
        let r = passes(&appendix(class, "f32"), 20);
        assert_eq!(r["positions_from_square"], 0, "{class}: {r:#}");
    }
    // A table of 4 096 positions fails past its end, told to declare its context; declared, the
    // cases past it skip and are named as not checked, as they are for a forward(x) module.
    let (code, r) = run(&appendix("PositionTable", "f32"), &["--fail-on", "values"]);
    assert_eq!(code, 1, "{r:#}");
    let failed = failed_saying(&r, "declares it with --max-len N");
    assert!(
        failed.iter().any(|id| id.ends_with("/large-positions")),
        "{failed:?}\n{r:#}"
    );
    assert_eq!(
        failed.len() as u64,
        count(&r, "values", "failed"),
        "{failed:?}\n{r:#}"
    );
    let r = passes(&(appendix("PositionTable", "f32") + " --max-len 4096"), 20);
    let unchecked = r["unchecked_flags"].to_string();
    assert!(unchecked.contains("large-positions"), "{r:#}");
    let (code, r) = run(
        &appendix("PositionListAsIndices", "f32"),
        &["--fail-on", "values"],
    );
    assert_eq!(code, 1, "{r:#}");
    // Named by the glue, which calls it again with 0..n: its lists were concatenated, so the
    // catalogue's positions-as-indices (each list's own indices) would not name it (audit 21).
    let failed = failed_saying(&r, "uses their count or their indices");
    assert!(
        failed.iter().any(|id| id.contains("randomised-positions")),
        "{failed:?}\n{r:#}"
    );
    assert!(
        failed.iter().any(|id| id.contains("kv-cache")),
        "{failed:?}\n{r:#}"
    );
}
