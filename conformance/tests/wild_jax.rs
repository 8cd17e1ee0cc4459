//! The "wild" implementations written in JAX with Flax linen's interface
//! (`tests/wild/jax_fakes.py`), through the JAX glue and the real CLI: params trees that are not
//! Appendix E's, loaded layer by layer or refused by name. They run when jax imports, and
//! FIRE_REQUIRE_JAX=1 (set by CI) turns a missing jax into a failure.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use common::*;

/// The random-parameter bias cases and the random gradient cases.
const RANDOM_AND_GRADIENT: [&str; 4] = [
    "--run",
    "fire/random-params/*",
    "--run",
    "fire-grad/vjp/random-*",
];

/// A Flax module whose distances' ψ comes from the constructor's `init_c` (a table made in
/// `setup`) rather than the `c` in `params` passed every case (audit 23): the glue builds it
/// with the case's c. Built again with another init_c and applied to the same variables, its
/// bias differs, and the case fails saying it follows the constructor; Appendix E passes.
#[test]
fn a_jax_bias_that_follows_the_constructors_init_c_fails_saying_so() {
    if !jax() {
        return;
    }
    let (code, r) = run(&short(&jax_fake("PsiFromInitC")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(
        failed_saying(&r, "FollowsInitC: built with init_c").len(),
        6,
        "{r:#}"
    );
    passes_in(&short(&jax_fake("FIRE")), 6, &JAX_BIAS);
    // The glue's own NumPy FIRE refusing an invalid encoding is no rejection by the module.
    let invalid = ["--run", "invalid/parameters/*"];
    let (_, plain) = run(&jax_fake("FIRE"), &invalid);
    let (_, table) = run(&jax_fake("PsiFromInitC"), &invalid);
    assert_eq!(
        count(&table, "validation", "passed"),
        count(&plain, "validation", "passed"),
        "{table:#}"
    );
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
        let (code, r) = run(&short(&jax_fake(class)), &JAX_BIAS);
        assert_eq!(code, 1, "{class}: {r:#}");
        assert_eq!(count(&r, "values", "failed"), 6, "{class}: {r:#}");
        assert_eq!(overall(&r), [variant], "{class}: {r:#}");
    }
}

#[test]
fn jax_modules_with_scalars_of_shape_1_or_layers_named_otherwise_pass_values_and_gradients() {
    if !jax() {
        return;
    }
    for class in ["ScalarsShape1", "NamedOutputFirst"] {
        let r = passes_in(&short(&jax_fake(class)), 7, &JAX_GRAD);
        let grads = passed_with(&r, "fire-grad/");
        assert_eq!(grads.len(), 3, "{class}: {grads:?}: {r:#}");
    }
}

/// Layers written as bare parameters are found by their names and shapes, without --map: a
/// first layer whose weight is a vector [W] (`x[..., None] * w_in + b_in`) beside a Dense (it had
/// been refused as "not [out, in] matrices", audit 31, then asked for --map), and a tree of
/// `W1`, `b1`, `W2`, `b2` kept [in, out] or, ported from PyTorch, [out, in]; mapped, the same.
/// Names that say nothing (`p1`…`p4`) are refused with the --map that grades them.
#[test]
fn layers_written_as_parameters_are_found_by_their_names() {
    if !jax() {
        return;
    }
    let args = [
        "--run",
        "fire/random-params/seed-1-square-16",
        "--run",
        "fire-grad/vjp/random-square-12",
    ];
    for class in ["VectorFirstWeight", "HandWritten", "HandWrittenTorchLayout"] {
        let r = passes_in(&jax_fake(class), 2, &args);
        assert_eq!(passed_with(&r, "fire-grad/").len(), 1, "{class}: {r:#}");
        let notes = r.to_string();
        assert!(notes.contains("as mlp.0.weight"), "{class}: {r:#}");
    }
    let (_, r) = run(&jax_fake("HandWritten"), &args);
    assert!(
        r.to_string()
            .contains("`W2` ([in, out], transposed) as mlp.2.weight"),
        "{r:#}"
    );
    let (_, r) = run(&jax_fake("HandWrittenTorchLayout"), &args);
    let notes = r.to_string();
    assert!(
        notes.contains("`W2` as mlp.2.weight") && !notes.contains("transposed"),
        "{r:#}"
    );
    let mapped = jax_fake("VectorFirstWeight")
        + " --map mlp.0.weight=w_in --map mlp.0.bias=b_in --map mlp.2.weight=out/kernel --map mlp.2.bias=out/bias";
    let r = passes_in(&mapped, 2, &args);
    assert_eq!(passed_with(&r, "fire-grad/").len(), 1, "{r:#}");
    let (code, r) = run(&jax_fake("HandWrittenUnnamed"), &args);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(error.contains("--map mlp.0.weight="), "{error}");
    let mapped = jax_fake("HandWrittenUnnamed")
        + " --map mlp.0.weight=p1 --map mlp.0.bias=p2 --map mlp.2.weight=p3 --map mlp.2.bias=p4";
    passes_in(&mapped, 2, &args);
}

/// c held as `log_c` is refused saying it looks like a transform, which a build(case) glue
/// converts, where the refusal had offered `--map c=PATH` alone; mapped anyway, the transform is
/// told with the values held, signs kept (audit 31).
#[test]
fn a_c_held_as_its_log_under_its_own_name_is_told_to_convert() {
    if !jax() {
        return;
    }
    let args = ["--run", "fire/random-params/seed-1-square-16"];
    let (code, r) = run(&jax_fake("LogNamedC"), &args);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(
        error.contains("`log_c` looks like c held through a transform")
            && error.contains("write a build(case) glue that converts"),
        "{error}"
    );
    let (code, r) = run(
        &(jax_fake("LogNamedC") + " --map c=log_c"),
        &DEFAULT_AND_RANDOM,
    );
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(
        error.contains("TransformedArgument") && error.contains("the module holds c = -"),
        "{error}"
    );
}

/// `apply(variables, i, j)`, x-transformers' call: called with the square's lengths, graded
/// on values and gradients (it had been "adapter broken"); `apply(variables, q, k)` with the
/// attention's query and key tensors, the same call (audit 31).
#[test]
fn a_jax_module_called_with_query_and_key_lengths_passes() {
    if !jax() {
        return;
    }
    for class in ["LengthsCall", "QueryKeyStates"] {
        let r = passes_in(
            &jax_fake(class),
            3,
            &[
                "--run",
                "fire/random-params/seed-1-square-16",
                "--run",
                "fire-grad/vjp/random-square-12",
                "--run",
                "edge/positions/kv-cache-row",
            ],
        );
        assert_eq!(passed_with(&r, "fire-grad/").len(), 1, "{class}: {r:#}");
        assert_eq!(r["positions_from_square"], 0, "{class}: {r:#}");
    }
}

#[test]
fn a_jax_bias_over_a_batch_is_graded_and_one_that_mixes_batch_and_heads_fails() {
    if !jax() {
        return;
    }
    // x holds two sequences: a [B, H, T, T] output is compared entry by entry (outside jax.vjp's
    // tracing on the gradient cases), then graded.
    let small = [
        "--run",
        "fire/random-params/seed-1-square-16",
        "--run",
        "fire-grad/vjp/random-square-12",
    ];
    let r = passes_in(&jax_fake("BatchedOutput"), 2, &small);
    assert_eq!(passed_with(&r, "fire-grad/").len(), 1, "{r:#}");
    // The gradient case, where the entries are compared outside jax.vjp's tracing, fails
    // naming the mix-up: a mistake the glue found, which the overall line quotes.
    let (code, r) = run(
        &jax_fake("BatchHeadsInterleaved"),
        &["--run", "fire-grad/vjp/random-square-12"],
    );
    assert_eq!(code, 1, "{r:#}");
    let error = r["glue_found"]["message"].as_str().unwrap();
    assert!(
        error.contains("differs between batch entries 0 and 1"),
        "{error}"
    );
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
    let (code, r) = run(&short(&jax_fake("WidthIgnored")), &JAX_BIAS);
    // The module's mistake, not the glue's: a failure (exit 1), not "adapter broken" (audit 33).
    assert_eq!(code, 1, "{r:#}");
    assert!(count(&r, "values", "failed") > 0, "{r:#}");
    assert!(
        r.to_string().contains("ignores num_heads or mlp_width"),
        "{r:#}"
    );
    // A constructor that does not name mlp_width has one architecture by design: skipped.
    let (code, r) = run(&short(&jax_fake("FixedWidth")), &JAX_BIAS);
    assert_eq!(count(&r, "values", "failed"), 0, "{r:#}");
    assert_eq!(code, 5, "{r:#}");
}

#[test]
fn a_jax_module_without_a_threshold_multiplier_is_graded_and_named() {
    if !jax() {
        return;
    }
    let (code, r) = run(&short(&jax_fake("NoMultiplier")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(overall(&r), ["multiplier-ignored"], "{r:#}");
}

/// A module learning L directly is refused saying so. A multiplier kept outside `params` under
/// a name that says it is one (`constants/L_mult`) takes the case's value there: the bias cases
/// pass, and the gradient cases fail naming it frozen (it had been refused as a scalar the glue
/// cannot reach).
#[test]
fn a_jax_module_whose_threshold_may_be_parametrised_otherwise_is_refused_saying_how() {
    if !jax() {
        return;
    }
    let (code, r) = run(&short(&jax_fake("LearnsLDirectly")), &JAX_BIAS);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(error.contains("learns L directly"), "{error}");
    let mut args = JAX_BIAS.to_vec();
    args.extend(["--run", "fire-grad/vjp/random-square-12"]);
    let (code, r) = run(&jax_fake("MultiplierConstant"), &args);
    assert_eq!(code, 1, "{r:#}");
    for case in r["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let text = case.to_string();
        if id.starts_with("fire-grad/") {
            assert_eq!(case["status"], "failed", "{case:#}");
            assert!(
                text.contains("`L_mult` (the case's `L_multiplier`) in the `constants` collection"),
                "{case:#}"
            );
        } else {
            assert_eq!(case["status"], "passed", "{case:#}");
            assert!(
                text.contains("`constants/L_mult` as L_multiplier"),
                "{case:#}"
            );
        }
    }
}

#[test]
fn a_jax_module_with_a_parameter_no_case_value_reaches_is_refused_by_name() {
    if !jax() {
        return;
    }
    refused_naming_scale(&short(&jax_fake("ExtraParameter")), &JAX_BIAS);
}

#[test]
fn a_jax_module_that_trains_init_l_fails_the_gradient_cases_saying_so() {
    if !jax() {
        return;
    }
    fails_the_gradient_cases_on_init_l(&short(&jax_fake("TrainableInitL")), &JAX_GRAD);
}

/// At the spec's initial values the JAX glue builds a module on its own defaults and keeps the
/// scalars it initialises, as the torch glue does ([fire.defaults]): a multiplier starting at
/// 0.5, or c, L_init and ε of other values, fail the default case and nothing else; a correct
/// module, and one whose constructor requires those arguments, pass it.
#[test]
fn a_jax_module_whose_defaults_are_not_the_specs_fails_the_default_case() {
    if !jax() {
        return;
    }
    let args = DEFAULT_AND_RANDOM;
    // A constructor that requires L_init only is given it, and its defaults for c and ε are
    // still checked (it had been given all three, so wrong ones passed: audit 12).
    for class in [
        "MultiplierStartsAtHalf",
        "OtherDefaults",
        "RequiresLOtherDefaults",
    ] {
        let (code, r) = run(&jax_fake(class), &args);
        assert_eq!(code, 1, "{class}: {r:#}");
        assert_eq!(count(&r, "values", "failed"), 1, "{class}: {r:#}");
        assert_eq!(count(&r, "values", "passed"), 1, "{class}: {r:#}");
        let failed = &r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["status"] == "failed")
            .unwrap()["id"];
        assert_eq!(failed, "fire/default-init/square-8", "{class}: {r:#}");
        // A bias shows the threshold m·L_init only: L = 256 for the multiplier of 0.5.
        let named = &r["overall_other_initial"];
        if class == "MultiplierStartsAtHalf" {
            assert_eq!(named[0]["name"], "L", "{r:#}");
            assert_eq!(named[0]["value"], 256.0, "{r:#}");
        } else {
            assert!(named.is_null(), "{r:#}");
        }
    }
    for class in ["FIRE", "RequiredArguments", "RequiresL"] {
        let r = passes_in(&jax_fake(class), 2, &args[..4]);
        assert!(!r.to_string().contains("default ε"), "{class}: {r:#}");
    }
    // A default ε of 1e-5 moves the default case's bias by less than f32's tolerance: it
    // passes, and the note says what it defaults to.
    let r = passes_in(&jax_fake("DefaultEpsTenTimes"), 2, &args[..4]);
    assert!(
        notes(&r)
            .iter()
            .any(|n| n.contains("the constructor's default ε is 1e-05")),
        "{r:#}"
    );
}

/// As for a torch module (tests/wild_torch.rs): a constructor that ignores `init_c`, whose c the
/// glue loads from each case, is named from the module as built.
#[test]
fn a_jax_constructor_that_ignores_its_initial_c_fails_naming_it() {
    if !jax() {
        return;
    }
    fails_naming_the_ignored_argument(&jax_fake("IgnoresInitC"), "init_c");
}

/// A class without Flax linen's `init`/`apply` (a `flax.nnx` module) is refused before any case,
/// naming the interface and what to do, where every case had errored with an `AttributeError`
/// (audit 19).
#[test]
fn a_jax_class_without_init_and_apply_is_refused_naming_the_interface() {
    if !jax() {
        return;
    }
    // The JAX glue itself: the Appendix E glue hands it only classes with `init` and `apply`
    // (or a Flax module's).
    let glue = format!(
        "python3 -m fire_conformance.jax_glue {}:NoLinenInterface",
        root().join("conformance/tests/wild/jax_fakes.py").display()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fire-conformance"))
        .args(["run", "--impl", &glue])
        .env("PYTHONPATH", root().join("conformance/python"))
        .current_dir(root())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NoLinenInterface: no init/apply methods; the JAX glue takes Flax linen's"),
        "{err}"
    );
}

/// A scalar kept outside `params` by its own name takes the case's value there: `c` in the
/// `constants` collection is graded on values and fails every gradient case naming the
/// collection (it never trains), where the whole run had been "adapter broken"; an `init_L`
/// constant that ignores the constructor's argument is named as for a torch buffer (audit 19).
#[test]
fn a_jax_scalar_outside_params_is_loaded_there_and_named_when_it_cannot_train() {
    if !jax() {
        return;
    }
    let (code, r) = run(&jax_fake("CInConstants"), &RANDOM_AND_GRADIENT);
    only_the_gradients_fail_saying(
        &r,
        code,
        &["keeps `c` in the `constants` collection, outside `params`"],
    );
    fails_naming_the_ignored_argument(&jax_fake("IgnoresInitLConstant"), "init_L");
}

/// A JAX module returning a NumPy array has its bias graded, and fails the gradient cases
/// saying no parameter gets a gradient, as the torch glue says of a torch one: every gradient
/// case had errored with a message about layouts of x (audit 19), then been skipped with the run
/// passing (audit 28).
#[test]
fn a_jax_module_returning_numpy_has_its_bias_graded_and_fails_its_gradient_cases() {
    if !jax() {
        return;
    }
    let (code, r) = run(&jax_fake("ReturnsNumpy"), &RANDOM_AND_GRADIENT);
    assert!(count(&r, "values", "passed") >= 6, "{r:#}");
    only_the_gradients_fail_saying(
        &r,
        code,
        &["returns a NumPy array", "jax.vjp cannot reach through"],
    );
}

/// Weights not named `kernel` are graded once mapped (and unmapped where their names say what
/// they are), in JAX's `[in, out]` or, where only that
/// composes, PyTorch's `[out, in]` kept by a port: the first had been refused even mapped (only
/// `kernel` leaves were transposed), the second skipped as layers that do not compose (audit 19).
#[test]
fn mapped_jax_weights_in_either_layout_are_graded() {
    if !jax() {
        return;
    }
    let maps =
        "--map mlp.0.weight=w1 --map mlp.0.bias=b1 --map mlp.2.weight=w2 --map mlp.2.bias=b2";
    for class in ["ExplicitWeights", "TorchLayoutWeights"] {
        let r = passes_in(
            &format!("{} {maps}", jax_fake(class)),
            6,
            &RANDOM_AND_GRADIENT,
        );
        assert!(
            !passed_with(&r, "fire-grad/").is_empty(),
            "{class}: no gradient case graded: {r:#}"
        );
    }
    // Unmapped, `w1`, `b1`, `w2`, `b2` say what they are: found by their names (they had been
    // refused, asking for the map).
    let r = passes_in(&jax_fake("ExplicitWeights"), 6, &RANDOM_AND_GRADIENT);
    assert!(
        r.to_string()
            .contains("`w1` ([in, out], transposed) as mlp.0.weight, `b1` as mlp.0.bias"),
        "{r:#}"
    );
}

/// A module whose f_θ holds its parameters in float16 and computes in float32 (Flax's
/// `param_dtype=jnp.float16`) fails every case, and each, bias and gradient alike, is named as
/// the reference's with those parameters rounded to float16, where it had been said to be a
/// shift per query row (audit 21 F10).
#[test]
fn a_jax_module_holding_its_weights_in_float16_is_named_so() {
    if !jax() {
        return;
    }
    let (code, r) = run(&jax_fake("Float16Weights"), &RANDOM_AND_GRADIENT);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(count(&r, "values", "passed"), 0, "{r:#}");
    assert_eq!(
        r["overall_stored"],
        serde_json::json!({"format": "float16", "parameters": "mlp", "within_precision": 0}),
        "{r:#}"
    );
    for case in r["cases"].as_array().unwrap() {
        assert_eq!(case["stored"]["format"], "float16", "{case:#}");
        let notes = case["notes"].as_array().unwrap();
        assert!(
            !notes
                .iter()
                .any(|n| n.as_str().unwrap().contains("constant per query row")),
            "{case:#}"
        );
    }
    assert_eq!(r["overall_row_shift"], false, "{r:#}");
    // c alone in float16: its constructor holds init_c as float16 rounds it, no argument
    // ignored; every failing bias case is named by c so rounded (its gradient, reduced in
    // float16 by JAX's transpose of the broadcast, is further off than one rounding).
    let (code, r) = run(&short(&jax_fake("CFloat16")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(
        r["overall_stored"],
        serde_json::json!({"format": "float16", "parameters": "c", "within_precision": 0}),
        "{r:#}"
    );
    assert!(failed_saying(&r, "ignores").is_empty(), "{r:#}");
    // f_θ in bfloat16 over every FIRE case: named at run level though a case or two agree only
    // within bf16's precision (audit 37).
    let (code, r) = run(
        &jax_fake("Bfloat16Weights"),
        &["--run", "fire/*", "--run", "fire-grad/*", "--run", "edge/*"],
    );
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["overall_stored"]["format"], "bfloat16", "{r:#}");
    assert_eq!(r["overall_stored"]["parameters"], "mlp", "{r:#}");
    assert!(
        r["overall_stored"]["within_precision"].as_u64().unwrap() >= 1,
        "{r:#}"
    );
}

/// The bias cases, the [fire.defaults] ones, the ε cases and a gradient case.
const WITH_EPSILON: [&str; 8] = [
    "--run",
    "fire/random-params/*",
    "--run",
    "fire/epsilon/*",
    "--run",
    "fire/default-init/*",
    "--run",
    "fire-grad/vjp/random-square-12",
];

/// A constructor naming Appendix E's arguments otherwise had every case refused with "write a
/// build(case) glue": the refusal now reads the constructor's arguments and says which
/// `--map-arg` would name them, and with those the module is graded as Appendix E is.
#[test]
fn a_constructor_naming_its_arguments_otherwise_is_told_the_map_arg_and_then_graded() {
    if !jax() {
        return;
    }
    let (code, r) = run(&short(&jax_fake("ArgumentsNamedOtherwise")), &JAX_BIAS);
    assert_eq!(code, 3, "{r:#}");
    let said = r.to_string();
    assert!(
        said.contains("its constructor takes (heads, hidden, c0, L0, eps)")
            && said.contains(
                "--map-arg num_heads=heads --map-arg mlp_width=hidden --map-arg init_c=c0 \
                 --map-arg init_L=L0"
            ),
        "{r:#}"
    );
    let mapped = jax_fake("ArgumentsNamedOtherwise")
        + " --map-arg num_heads=heads --map-arg mlp_width=hidden --map-arg init_c=c0 \
           --map-arg init_L=L0";
    // A --map-arg naming an argument the constructor does not take is refused before any
    // case (an initial value would otherwise be left out as one it does not take).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fire-conformance"))
        .args(["run", "--impl"])
        .arg(jax_fake("ArgumentsNamedOtherwise") + " --map-arg init_c=c_init")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--map-arg init_c=c_init: the constructor takes no such argument"),
        "{err}"
    );
    let r = passes_in(&mapped, 10, &WITH_EPSILON);
    let appendix_e = passes_in(&jax_fake("FIRE"), 10, &WITH_EPSILON);
    assert_eq!(
        count(&r, "values", "passed"),
        count(&appendix_e, "values", "passed"),
        "{r:#}"
    );
}

/// A constructor without `eps` (ε fixed), or with the shape alone (c and L_init made by the
/// module), had every case but the [fire.defaults] ones errored ("unexpected keyword argument
/// 'eps'"): a correct FIRE failed. It is now built with what it takes, the case's c and L_init
/// loaded over its own, and graded on the cases at the spec's ε; the cases at another ε are
/// skipped saying why, and the run's name says what its constructor does not take. A fixed ε
/// of 10⁻³ still fails.
#[test]
fn a_constructor_taking_fewer_arguments_is_graded_at_the_specs_epsilon() {
    if !jax() {
        return;
    }
    for class in ["NoEpsArgument", "ShapeArgumentsOnly"] {
        let (code, r) = run(&jax_fake(class), &WITH_EPSILON);
        assert_eq!(code, 0, "{class}: {r:#}");
        assert!(count(&r, "values", "passed") >= 9, "{class}: {r:#}");
        let said = r.to_string();
        assert!(
            said.contains("takes no eps (cases at ε ≠ 1e-06 skipped)"),
            "{class}: {r:#}"
        );
        assert!(
            said.contains("the constructor takes no `eps`, so the module keeps its own"),
            "{class}: {r:#}"
        );
        assert!(
            passed_with(&r, "fire/random-params/").len() >= 6,
            "{class}: {r:#}"
        );
    }
    let (code, r) = run(&jax_fake("NoEpsArgumentOtherEps"), &WITH_EPSILON);
    assert_eq!(code, 1, "{r:#}");
    assert!(count(&r, "values", "failed") >= 6, "{r:#}");
}

/// A bias kept as a parameter of its own beside a bias-free layer (`self.param` beside
/// `Dense(use_bias=False)`, Haiku's `hk.Linear(with_bias=False)` and `hk.Bias`) had a correct
/// module refused ("take none of the case's values"): such a vector, as long as the layer's
/// output, is now read as its bias; one the module never adds fails as `hidden-bias-missing`.
#[test]
fn biases_kept_apart_from_their_layers_are_loaded_and_graded() {
    if !jax() {
        return;
    }
    let r = passes_in(&jax_fake("BiasesApart"), 10, &WITH_EPSILON);
    // Which vector was read as which layer's bias is said ([proto.reply]).
    let said = notes(&r);
    assert_eq!(said.len(), 1, "{said:?}");
    for read in [
        "`b0` as mlp.0.bias",
        "`b1` as mlp.2.bias",
        "([in, out], transposed) as mlp.0.weight",
    ] {
        assert!(said[0].contains(read), "{said:?}");
    }
    // So is a heads' bias kept `[H, 1, 1]` to broadcast (refused, even when mapped: audit 29),
    // and a constructor taking the shape by position only (refused as broken) is given it so.
    passes_in(&jax_fake("HeadBiasBroadcast"), 10, &WITH_EPSILON);
    passes_in(&jax_fake("PositionalOnly"), 10, &WITH_EPSILON);
    let (code, r) = run(&short(&jax_fake("BiasesApartOutputOnly")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(overall(&r), ["hidden-bias-missing"], "{r:#}");
    // The vector the module makes and never adds was read as the hidden bias: the note says so.
    assert!(
        notes(&r).iter().all(|n| n.contains("`b0` as mlp.0.bias")),
        "{r:#}"
    );
}

/// An f_θ whose last layer has one output shared by the heads (a real "FIRE" shares it and
/// tells the heads apart by a threshold each) had been refused as a constructor ignoring
/// `num_heads`, the adapter called broken: it fails as the module's, saying f_θ gives each head
/// its own bias.
#[test]
fn an_f_theta_with_one_output_for_every_head_fails_saying_so() {
    if !jax() {
        return;
    }
    let (code, r) = run(&short(&jax_fake("OneOutputForEveryHead")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    let found = r["glue_found"]["message"].as_str().unwrap_or_default();
    assert!(
        found.starts_with("SharedAcrossHeads:")
            && found.contains("1 → 8 → 1")
            && found.contains("[fire.mlp]"),
        "{r:#}"
    );
}

/// A JAX constructor that takes `init_L` and keeps it where nothing the glue loads holds it (an
/// attribute) passes; one that keeps 512 whatever it is given fails naming the argument (it had
/// failed with no catalogued variant, audit 30's torch finding, checked in both glues).
#[test]
fn a_jax_threshold_kept_as_an_attribute_is_checked_through_the_constructor() {
    if !jax() {
        return;
    }
    passes_in(&short(&jax_fake("ThresholdAttributeGiven")), 6, &JAX_BIAS);
    every_failure_says(
        &short(&jax_fake("ThresholdAttributeIgnored")),
        &JAX_BIAS,
        "keeps a threshold of its own",
    );
    // Masked with finfo.min above the diagonal, the same: the mask is no scale for the bias
    // (every masked module had failed as keeping its own threshold, audit 31).
    let masked = |class: &str| short(&(jax_fake(class) + " --future-keys masked"));
    passes_in(&masked("ThresholdAttributeMasked"), 6, &JAX_BIAS);
    every_failure_says(
        &masked("ThresholdAttributeMaskedIgnored"),
        &JAX_BIAS,
        "keeps a threshold of its own",
    );
    // A threshold taken as min(i, L), the same bias for every L past the positions, takes the
    // argument: named by its values, never as keeping a threshold of its own (audit 33).
    let (code, r) = run(&jax_fake("ThresholdAttributeMin"), &DEFAULT_AND_RANDOM);
    assert_eq!(code, 1, "{r:#}");
    assert!(
        !r.to_string().contains("keeps a threshold of its own"),
        "{r:#}"
    );
    assert!(
        overall(&r).iter().any(|l| l.contains("threshold-as-min")),
        "{r:#}"
    );
}

/// A JAX `apply(variables, idx)` unpacking token ids `[B, T]` is called with token ids, not
/// failed for ignoring positions (audit 30), and says so.
#[test]
fn a_jax_module_reading_token_ids_is_called_with_them() {
    if !jax() {
        return;
    }
    let mut args = JAX_BIAS.to_vec();
    args.extend(["--run", "edge/positions/non-contiguous"]);
    let r = passes_in(&jax_fake("TokenIds"), 6, &args);
    assert!(
        notes(&r)
            .iter()
            .any(|n| n.contains("`idx` read as token ids [B, T]")),
        "{r:#}"
    );
}

/// Biases apart from layers as wide as each other (Appendix B's two hidden layers) go to them by
/// the numbers in their names (made output first, `b2`, `b1`, `b0`), or in the order the module
/// made them where the names number nothing (`bias_in`, `bias_hidden`); a tree that sorts its
/// names (NNX's) is `an_nnx_tree_sorted_by_name_has_its_biases_mapped`.
#[test]
fn biases_apart_from_layers_as_wide_go_by_their_names_or_their_order() {
    if !jax() {
        return;
    }
    let deep = ["--run", "edge/depth-2/*", "--run", "fire/depth/*"];
    for (fake, read) in [
        (
            "TwoHiddenBiasesApart",
            [
                "`b0` as mlp.0.bias",
                "`b1` as mlp.2.bias",
                "`b2` as mlp.4.bias",
            ],
        ),
        (
            "TwoHiddenBiasesNamed",
            [
                "`bias_in` as mlp.0.bias",
                "`bias_hidden` as mlp.2.bias",
                "`bias_out` as mlp.4.bias",
            ],
        ),
    ] {
        let r = passes_in(&jax_fake(fake), 8, &deep);
        let deeper: Vec<String> = notes(&r)
            .into_iter()
            .filter(|n| n.contains("mlp.4.bias"))
            .collect();
        assert_eq!(deeper.len(), 1, "{fake}: {r:#}");
        for each in read {
            assert!(deeper[0].contains(each), "{fake}: {deeper:?}");
        }
    }
}

/// A constructor without `init_L` whose module keeps L_init where no case value reaches it (a
/// plain attribute) had failed every case at another L_init as if its threshold were wrong:
/// those cases are skipped saying so, and it is graded on the cases at the spec's L_init.
#[test]
fn a_threshold_no_case_value_reaches_is_graded_at_the_specs_l_init() {
    if !jax() {
        return;
    }
    let (code, r) = run(&jax_fake("ThresholdAttribute"), &WITH_EPSILON);
    assert_eq!(code, 0, "{r:#}");
    assert!(count(&r, "values", "passed") >= 3, "{r:#}");
    assert!(
        r.to_string().contains(
            "the constructor takes no `init_L` and the module holds none the glue can load"
        ),
        "{r:#}"
    );
}

/// A JAX module built from one config object that it reads only when initialised (as a Flax
/// linen module reads its `config` field in `setup`) is given one built from each case and
/// passes, its ε cases graded once its reads are known; one that reads `config.fire_init_L` and
/// keeps 512 fails the cases off the defaults, naming the attribute it read.
#[test]
fn a_jax_module_reading_its_config_when_initialised_is_given_one_and_graded() {
    if !jax() {
        return;
    }
    let r = passes_in(&jax_fake("FromConfig"), 10, &WITH_EPSILON);
    let name = r["implementation"].as_str().unwrap();
    assert!(
        name.contains(
            "takes one config object, built by the glue, which it reads when first called"
        ),
        "{name}"
    );
    assert!(passed_with(&r, "fire/epsilon/").len() >= 3, "{r:#}");
    let (code, r) = run(&jax_fake("FromConfigKeepsOwnL"), &DEFAULT_AND_RANDOM);
    assert_eq!(code, 1, "{r:#}");
    let failed = failed_saying(
        &r,
        "it starts init_L at a value of its own whatever `config.fire_init_L` holds",
    );
    assert_eq!(failed, ["fire/random-params/seed-1-square-16"], "{r:#}");
}

/// A JAX module whose call takes a training flag (`deterministic=True` by default) was graded
/// in evaluation mode alone, so a `stop_gradient` only training takes passed. Each gradient case
/// is now run again with the flag as training gives it and compared: the correct module passes,
/// the one whose ψ is detached in training fails naming c and the flag.
#[test]
fn a_jax_module_is_also_graded_as_training_calls_it() {
    if !jax() {
        return;
    }
    let grad = ["--run", "fire-grad/vjp/*", "--run", "fire-grad/kinks/*"];
    passes_in(&short(&jax_fake("TrainingFlag")), 3, &grad);
    let (code, r) = run(&short(&jax_fake("DetachedInTraining")), &grad);
    assert_eq!(code, 1, "{r:#}");
    let failed = failed_saying(
        &r,
        "in training mode (`deterministic=False`, as a training loop calls it) the gradient of `c`",
    );
    assert!(!failed.is_empty(), "{r:#}");
    assert_eq!(failed.len() as u64, count(&r, "values", "failed"), "{r:#}");
}

/// A linen module that stops the normaliser's gradient past 1 024 positions (a Python branch on
/// the static length) fails the once-per-run check at 2 049 positions, naming c; so does one
/// that stops it there only in training, the check being made with the training flag where
/// training agreed with evaluation on the case (audit 37: it passed).
#[test]
fn a_linen_path_taken_only_for_long_sequences_is_checked() {
    if !flax() {
        return;
    }
    let grad = ["--run", "fire-grad/vjp/*", "--run", "fire-grad/kinks/*"];
    for class in ["LongDetached", "LongDetachedInTraining"] {
        let (code, r) = run(&linen_fake(class), &grad);
        assert_eq!(code, 1, "{class}: {r:#}");
        let says = "at a long length (2049 positions; the gradient cases are small squares) in \
                    training mode (`deterministic=False`, as a training loop calls it, its keys \
                    fixed) the gradient of `c` (off by up to";
        assert_eq!(failed_saying(&r, says).len(), 1, "{class}: {r:#}");
        assert_eq!(count(&r, "values", "failed"), 1, "{class}: {r:#}");
    }
}

/// A `flax.linen` module with an `nn.Dropout` on the bias under Flax's `deterministic` flag
/// (defaulting to evaluation, required as `train`, or merged from a field by `nn.merge_param`):
/// the correct one passes; one that detaches its normaliser only in training fails naming the
/// flag, where its training output, random with the dropout on, had not been compared (audit
/// 34): the glue's training call now turns linen's dropouts off. Randomness of the module's own
/// is fixed by its keys, and its gradients held to its own derivative.
#[test]
fn a_linen_module_with_a_dropout_is_compared_in_training_with_it_off() {
    if !flax() {
        return;
    }
    let grad = ["--run", "fire-grad/vjp/*", "--run", "fire-grad/kinks/*"];
    // A flag the call requires (`train: bool`) or leaves to None (`nn.merge_param`) is given
    // evaluation's value in the graded call, where every case had stopped on it (audit 34).
    for (class, flag) in [
        ("FIRE", "deterministic=False"),
        ("TrainRequired", "train=True"),
        ("MergedFlag", "deterministic=False"),
        // An rng stream of its own (`make_rng("noise")`) is given a key in training.
        ("NoiseStream", "deterministic=False"),
    ] {
        passes_in(&short(&linen_fake(class)), 3, &grad);
        let mistaken = if class == "FIRE" {
            "DetachedInTraining".to_string()
        } else {
            format!("{class}Detached")
        };
        let (code, r) = run(&short(&linen_fake(&mistaken)), &grad);
        assert_eq!(code, 1, "{mistaken}: {r:#}");
        let says =
            format!("in training mode (`{flag}`, as a training loop calls it) the gradient of `c`");
        let failed = failed_saying(&r, &says);
        assert!(!failed.is_empty(), "{mistaken}: {r:#}");
        assert_eq!(failed.len() as u64, count(&r, "values", "failed"), "{r:#}");
    }
    // The flag given by the field instead (`--kwargs '{"deterministic": true}'`, what Flax's
    // own error advises): not given at call time too, which `nn.merge_param` refuses; training's
    // value set on a clone of the module.
    let by_field = r#" --kwargs '{"deterministic": true}'"#;
    passes_in(&short(&(linen_fake("MergedFlag") + by_field)), 3, &grad);
    let (code, r) = run(
        &short(&(linen_fake("MergedFlagDetached") + by_field)),
        &grad,
    );
    assert_eq!(code, 1, "{r:#}");
    assert!(
        !failed_saying(
            &r,
            "in training mode (`deterministic=False`, as a training loop calls it)"
        )
        .is_empty(),
        "{r:#}"
    );
    // A noise of its own in training makes its output random: with its keys fixed, its
    // gradients are held to its training call's own derivative. Correct under an additive noise
    // or a multiplicative mask; detached under the noise, it fails (audit 34: it had passed).
    for class in ["NoisyInTraining", "MaskedInTraining"] {
        let r = passes_in(&short(&linen_fake(class)), 3, &grad);
        assert!(
            !r.to_string().contains("training mode not compared"),
            "{class}: {r:#}"
        );
        // Its values there are nobody's to check, and the run says so (audit 37: a random
        // training path normalising by another range had passed unsaid).
        assert!(
            r.to_string().contains(
                "training mode's values not compared (`deterministic=False`): its output changes from call to call"
            ),
            "{class}: {r:#}"
        );
    }
    let (code, r) = run(&short(&linen_fake("NoisyInTrainingDetached")), &grad);
    assert_eq!(code, 1, "{r:#}");
    let says = "in training mode (`deterministic=False`, as a training loop calls it, its \
                randomness fixed) the gradient of `c`";
    let failed = failed_saying(&r, says);
    assert!(!failed.is_empty(), "{r:#}");
    assert_eq!(failed.len() as u64, count(&r, "values", "failed"), "{r:#}");
    // Randomness no key fixes (drawn on the host): not compared, and the run says so.
    let r = passes_in(&short(&linen_fake("HostNoiseInTraining")), 3, &grad);
    assert!(
        r.to_string().contains(
            "training mode not compared (`deterministic=False`): its output there changes from call to call"
        ),
        "{r:#}"
    );
}

/// A JAX module whose call also takes the cache's length (`past_key_values_length=0`) is called
/// again as a decoding step, the square's first half cached, as the torch glue calls one: the
/// correct module passes; one that counts its keys over the new tokens alone, which a call
/// without a cache never shows, fails saying the step's attention spans the cache.
#[test]
fn a_jax_module_taking_the_caches_length_is_called_with_a_cache() {
    if !jax() {
        return;
    }
    let args = [
        "--run",
        "fire/random-params/*",
        "--run",
        "fire/default-init/*",
    ];
    passes_in(&jax_fake("PastLength"), 8, &args);
    every_failure_says(
        &jax_fake("PastLengthKeysFromZero"),
        &args,
        "a decoding step's attention spans the cache too",
    );
}
