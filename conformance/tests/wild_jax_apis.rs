//! FIRE written with the JAX APIs that have no linen `init`/`apply`: `flax.nnx`
//! (`tests/wild/nnx_fakes.py`), Equinox (`tests/wild/equinox_fakes.py`) and Haiku
//! (`tests/wild/haiku_fakes.py`), through the Appendix E glue, which hands them to the JAX glue
//! through a bridge to linen's interface (`fire_conformance.nnx_bridge`, `equinox_bridge`,
//! `haiku_bridge`): Appendix E and other layouts graded on values and gradients, and the mistakes
//! each API invites named. They run when flax (Equinox, dm-haiku) imports, and
//! FIRE_REQUIRE_FLAX=1 (FIRE_REQUIRE_EQUINOX=1, FIRE_REQUIRE_HAIKU=1), set by CI, turns a missing
//! one into a failure.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use common::*;

/// Appendix E in NNX (`nnx.Sequential`) and with named `nnx.Linear` layers and `[1]` scalars
/// pass the bias, gradient and kink cases, where the glue had refused every NNX module.
#[test]
fn nnx_modules_shaped_like_appendix_e_pass() {
    if !flax() {
        return;
    }
    // So do the NNX idioms audit 26 found graded wrongly: an `nnx.Dropout` (now read in
    // evaluation mode), a constructor passing `**kwargs` on (now given `rngs`), Python floats
    // in `nnx.Param` (the glue had crashed).
    for class in [
        "FIRE",
        "NamedLayers",
        "WithDropout",
        "ForwardsKwargs",
        "PythonFloatScalars",
    ] {
        let r = passes_in(&short(&nnx_fake(class)), 8, &JAX_GRAD);
        let gradients = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["status"] == "passed" && c["id"].as_str().unwrap().starts_with("fire-grad/")
            })
            .count();
        assert!(gradients >= 2, "{class}: {r:#}");
    }
    // A table of positions kept as an `nnx.Param` and read through `stop_gradient`: graded as
    // built, the run saying what would still move it (audit 38: failed as a stale bias, the
    // glue's step having scaled the table, which the bridge never wrote back).
    let r = passes_in(&short(&nnx_fake("PositionsTableParam")), 8, &JAX_GRAD);
    assert!(
        notes(&r).iter().any(|n| n.contains(
            "kept as built: ['positions_table'] (among the parameters, no case value reaches them"
        ) && n.contains("weight decay")),
        "{r:#}"
    );
}

/// A `c` held as a plain `nnx.Variable` is right on values, but NNX's optimiser over
/// `nnx.Param` never trains it: every gradient case fails naming where it is kept.
#[test]
fn an_nnx_c_held_outside_param_fails_the_gradient_cases_naming_it() {
    if !flax() {
        return;
    }
    let (code, r) = run(&short(&nnx_fake("CAsVariable")), &JAX_GRAD);
    only_the_gradients_fail_saying(
        &r,
        code,
        &["keeps `c` in the `nnx.Variable` collection, outside `params`"],
    );
}

/// A ψ table made in `__init__` from `init_c` follows the constructor, not the `c` the module
/// holds; a bias cached in an `nnx.data` attribute is stale after the glue's step (the module
/// called with its parameters changed, then given the case's values). Both pass a single call
/// of a freshly built module; each fails every case saying which.
#[test]
fn an_nnx_table_from_init_c_and_a_cached_bias_fail_saying_which() {
    if !flax() {
        return;
    }
    for (class, says) in [
        ("PsiTableFromInitC", "FollowsInitC: built with init_c"),
        // Stale: the step's bias itself, or (keyed on c alone, the step's call with f_θ
        // changed alone) one a module built anew does not return.
        (
            "CachesBias",
            "StaleBias: the module returned exactly the bias of the glue's training step",
        ),
        (
            "CacheKeyedOnC",
            "StaleBias: after the glue's training step (the module called",
        ),
    ] {
        let (code, r) = run(&short(&nnx_fake(class)), &JAX_BIAS);
        assert_eq!(code, 1, "{class}: {r:#}");
        assert_eq!(count(&r, "values", "passed"), 0, "{class}: {r:#}");
        assert_eq!(failed_saying(&r, says).len(), 6, "{class}: {r:#}");
    }
    // A cache the traced call of a gradient misses (keyed on the instance, the traced module
    // merged anew) and the direct call hits: stale, not x misused (which the probes, calling
    // the module directly, had said on the gradient cases).
    let (code, r) = run(&short(&nnx_fake("CachesBiasGlobally")), &JAX_GRAD);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(count(&r, "values", "passed"), 0, "{r:#}");
    let stale = failed_saying(&r, "StaleBias:");
    assert!(
        stale.len() >= 8 && stale.iter().any(|id| id.starts_with("fire-grad/")),
        "{r:#}"
    );
    assert!(!r.to_string().contains("XMisused"), "{r:#}");
    // A cache in an `nnx.Cache` used only past 1 024 positions, written during the call: the
    // module takes a step at the long length before the probe, and the gradients there are
    // taken through a module whose state this trace may write (audit 38: it passed, the
    // probe's `jax.vjp` raising TraceContextError).
    let (code, r) = run(&nnx_fake("CachesLongBias"), &JAX_GRAD);
    assert_eq!(code, 1, "{r:#}");
    let says = "StaleBias: at a long length (2049 positions) the module returns the bias it \
                computed there before its parameters changed";
    assert_eq!(failed_saying(&r, says).len(), 1, "{r:#}");
    assert_eq!(count(&r, "values", "failed"), 1, "{r:#}");
    // Its normaliser cached so: the direct call of a gradient case differs from the traced one.
    let (code, r) = run(&short(&nnx_fake("CachesNormaliserGlobally")), &JAX_GRAD);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(count(&r, "values", "passed"), 0, "{r:#}");
    let traced = failed_saying(
        &r,
        "the module called directly returns a bias it does not return under jax.vjp",
    );
    assert!(
        !traced.is_empty() && traced.iter().all(|id| id.starts_with("fire-grad/")),
        "{r:#}"
    );
    assert!(!r.to_string().contains("XMisused"), "{r:#}");
}

/// A catalogued mistake written in NNX is diagnosed as in any framework.
#[test]
fn an_nnx_module_counting_positions_from_one_is_diagnosed() {
    if !flax() {
        return;
    }
    let (code, r) = run(&short(&nnx_fake("OneBasedPositions")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(overall(&r), ["one-based-positions"], "{r:#}");
}

/// Appendix E in Equinox (`eqx.nn.MLP`, whose `weight` leaves are PyTorch's `[out, in]`; an
/// `init_L` kept as a Python float, which the glue loads the case's value into) passes the bias,
/// gradient and kink cases.
#[test]
fn an_equinox_module_shaped_like_appendix_e_passes() {
    if !equinox() {
        return;
    }
    // Audit 27: a table of positions read through `jax.lax.stop_gradient` (no gradient reaches
    // it: kept as built, where it had been refused as a parameter no case value reaches) and
    // hand-written layers whose `weight` is `[in, out]` (every case had been skipped) pass too.
    // Positions cached in a dict at module level (they depend on the length alone) are no
    // mistake: the file imported afresh returns the same bias.
    for class in [
        "FIRE",
        "PositionsStopGradient",
        "HandWrittenLayers",
        "PositionsCachedGlobally",
        // Audit 31: one sequence [T, D], no batch (the glue's `sequence` layout).
        "OneSequence",
        // An `inference` field eqx.nn.inference_mode cannot set (the module graded as built),
        // and a dropout on the bias (off in inference, where the bias is graded), its call
        // taking a key or requiring one.
        "InferenceField",
        "DropoutInTraining",
        "DropoutKeyRequired",
        // Audit 38: the table read through `stop_gradient` in a module reading one sequence
        // `[T, D]` (refused: the table's gradient had been tried on a batch).
        "OneSequencePositionsStopGradient",
    ] {
        passes_in(&short(&equinox_fake(class)), 8, &JAX_GRAD);
    }
}

/// Kept as built, a ψ table made from `init_c` and read through `stop_gradient` is still a
/// mistake: the twin, built with another `init_c`, keeps its own table, and the case fails
/// saying the bias follows the constructor. `c` held as `log c` is a transform the glue cannot
/// load a case's c into: refused saying so on every case, where it had failed as a constructor
/// ignoring `init_c` (audit 27).
#[test]
fn an_equinox_table_kept_as_built_fails_and_a_transformed_c_is_refused() {
    if !equinox() {
        return;
    }
    let (code, r) = run(&short(&equinox_fake("PsiTableStopGradient")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(
        failed_saying(&r, "FollowsInitC: built with init_c").len(),
        6,
        "{r:#}"
    );
    let (code, r) = run(&equinox_fake("LogC"), &DEFAULT_AND_RANDOM);
    assert_ne!(code, 0, "{r:#}");
    assert_eq!(count(&r, "values", "passed"), 0, "{r:#}");
    let cases = r["cases"].as_array().unwrap();
    let graded = cases.iter().filter(|c| c["status"] != "skipped").count();
    assert_eq!(graded, 2, "{r:#}");
    assert_eq!(
        failed_saying(&r, "TransformedArgument: built with init_c").len(),
        graded,
        "{r:#}"
    );
}

/// A `c` kept as a Python float, or declared a static field, is right on values, but Equinox
/// trains floating arrays alone: every gradient case fails saying so; a catalogued mistake is diagnosed as in any framework.
#[test]
fn equinox_mistakes_are_named() {
    if !equinox() {
        return;
    }
    // So is one declared a static field (no leaf: the glue had refused the module, finding no
    // `c` to load).
    for (class, kept) in [("CAsFloat", "constants"), ("CStatic", "static")] {
        let (code, r) = run(&short(&equinox_fake(class)), &JAX_GRAD);
        only_the_gradients_fail_saying(
            &r,
            code,
            &[
                &format!("keeps `c` in the `{kept}` collection"),
                "hold it as a floating array",
            ],
        );
    }
    // A normaliser cached in a dict at module level under the length: the twin shares it, so
    // only the file imported afresh shows what it is (it had failed as no catalogued variant).
    let (code, r) = run(&short(&equinox_fake("NormaliserCachedGlobally")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(count(&r, "values", "passed"), 0, "{r:#}");
    assert_eq!(
        failed_saying(&r, "StaleBias: imported afresh").len(),
        6,
        "{r:#}"
    );
    // So on the cases at the spec's initial values, where the module is built on its own
    // defaults and has no twin: the file imported afresh is built the same way.
    every_failure_says(
        &equinox_fake("NormaliserCachedGlobally"),
        &["--run", "fire/default-init/*"],
        "StaleBias: imported afresh",
    );
    let (code, r) = run(&short(&equinox_fake("OneBasedPositions")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(overall(&r), ["one-based-positions"], "{r:#}");
}

/// Appendix E in Haiku, with `hk.Linear` layers (whose `w` is `[in, out]`, beside a `b`) and with
/// `hk.nets.MLP` (its layers a module deeper), passes the bias, gradient and kink cases, where
/// the glue had refused every Haiku module (no `init`/`apply` on the class).
#[test]
fn haiku_modules_shaped_like_appendix_e_pass() {
    if !haiku() {
        return;
    }
    // Audit 28: `__call__(x, is_training)` with a dropout that always draws a key (now given
    // `is_training=False` and a key, where it had been refused) and hand-written layers whose
    // `w` is PyTorch's `[out, in]` (every case had been skipped) pass too, and so do layers
    // without a bias each followed by an `hk.Bias` module (which had been refused).
    for class in [
        "FIRE",
        "NetsMLP",
        "TrainingFlagAndDropout",
        "TorchLayoutW",
        "BiasModules",
    ] {
        passes_in(&short(&haiku_fake(class)), 8, &JAX_GRAD);
    }
}

/// An NNX constructor is read from its `__init__` (the metaclass's `__call__` takes anything):
/// one naming its shape otherwise is told the `--map-arg`s, and one without `eps` is graded at
/// the spec's ε, where every case off the defaults had failed with a TypeError (audit 29).
#[test]
fn an_nnx_constructor_is_read_from_its_init() {
    if !flax() {
        return;
    }
    let (code, r) = run(&short(&nnx_fake("NamedOtherwiseNoEps")), &JAX_BIAS);
    assert_eq!(code, 3, "{r:#}");
    assert!(
        r.to_string()
            .contains("--map-arg num_heads=n_heads --map-arg mlp_width=hidden"),
        "{r:#}"
    );
    let mapped =
        nnx_fake("NamedOtherwiseNoEps") + " --map-arg num_heads=n_heads --map-arg mlp_width=hidden";
    let r = passes_in(
        &mapped,
        6,
        &["--run", "fire/random-params/*", "--run", "fire/epsilon/*"],
    );
    assert!(
        r.to_string().contains("the constructor takes no `eps`"),
        "{r:#}"
    );
}

/// NNX's state sorts its names, so biases apart from layers as wide as each other and named by
/// role (`bias_hidden` before `bias_in`) had gone to the wrong layers and a correct module failed
/// (audit 29): those cases are skipped naming the `--map` that grades them; with it the module
/// passes, with the two swapped it fails.
#[test]
fn an_nnx_tree_sorted_by_name_has_its_biases_mapped() {
    if !flax() {
        return;
    }
    let deep = ["--run", "edge/depth-2/*", "--run", "fire/depth/*"];
    let (code, r) = run(&nnx_fake("TwoHiddenBiasesNamed"), &deep);
    assert_eq!(code, 5, "{r:#}");
    let said = r.to_string();
    assert!(
        said.contains(
            "could each be the bias of its layers ['lin_in/kernel', 'lin_hidden/kernel']"
        ) && said.contains("--map mlp.0.bias=NAME --map mlp.2.bias=NAME grades these cases"),
        "{r:#}"
    );
    let mapped = |first: &str, second: &str| {
        format!(
            "{} --map mlp.0.bias={first} --map mlp.2.bias={second}",
            nnx_fake("TwoHiddenBiasesNamed")
        )
    };
    passes_in(&mapped("bias_in", "bias_hidden"), 8, &deep);
    let (code, r) = run(&mapped("bias_hidden", "bias_in"), &deep);
    assert_eq!(code, 1, "{r:#}");
}

/// The mistakes Haiku invites, each named: a `c` kept with `hk.get_state` (right on values, but
/// never trained: the gradient cases fail saying where it is), a ψ table from `init_c`
/// (`FollowsInitC`), a bias cached at module level (`StaleBias`: a Haiku module lives for one
/// call, so initialised again it makes no parameter, which had been refused as a module without
/// layers), state a training loop carries from step to step (a bias kept there, an offset
/// advanced on every call), and a catalogued mistake diagnosed as in any framework.
#[test]
fn haiku_mistakes_are_named() {
    if !haiku() {
        return;
    }
    let (code, r) = run(&short(&haiku_fake("CInState")), &JAX_GRAD);
    only_the_gradients_fail_saying(
        &r,
        code,
        &[
            "keeps `c` in the `state` collection",
            "declare it with hk.get_parameter",
        ],
    );
    // Audit 28: state a program carries from call to call (a bias kept there, had passed: the
    // glue dropped the state each call returned; an offset advanced on every call).
    for (class, says) in [
        ("PsiTableFromInitC", "FollowsInitC: built with init_c"),
        ("CachesBiasGlobally", "StaleBias: "),
        (
            "BiasKeptInState",
            "StaleBias: the module returned exactly the bias of the glue's training step",
        ),
        (
            "OffsetInState",
            "TwinDiffers: called twice, one call after the other",
        ),
    ] {
        let (code, r) = run(&short(&haiku_fake(class)), &JAX_BIAS);
        assert_eq!(code, 1, "{class}: {r:#}");
        assert_eq!(count(&r, "values", "passed"), 0, "{class}: {r:#}");
        assert_eq!(failed_saying(&r, says).len(), 6, "{class}: {r:#}");
    }
    // On the cases at the spec's initial values too, where the module is built on its own
    // defaults and has no twin: it takes the step all the same (it had passed them).
    let (code, r) = run(
        &haiku_fake("BiasKeptInState"),
        &["--run", "fire/default-init/*"],
    );
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(count(&r, "values", "passed"), 0, "{r:#}");
    let (code, r) = run(&short(&haiku_fake("OneBasedPositions")), &JAX_BIAS);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(overall(&r), ["one-based-positions"], "{r:#}");
}

/// An NNX module whose call takes `deterministic=True`, a Haiku one taking `is_training`, and
/// Equinox ones with an `inference` field or call argument are also run as training calls them
/// (through their bridges) on each gradient case: one detached only in training fails naming
/// the parameter and the switch, with the module's dropouts turned off in the training call (a
/// correct module with one passes above: `TrainingFlagAndDropout`, `DropoutInTraining`; one
/// detached in training fails here with its dropout on, where its random training output had
/// not been compared, audit 34).
#[test]
fn nnx_haiku_and_equinox_modules_detached_only_in_training_fail() {
    let mut runs = Vec::new();
    if flax() {
        // With a dropout on (audit 34): its training output, random, had not been compared.
        runs.push((
            nnx_fake("DetachedInTrainingWithDropout"),
            "`deterministic=False`",
            "L_multiplier",
        ));
    }
    if haiku() {
        runs.push((
            haiku_fake("DetachedInTrainingWithDropout"),
            "`is_training=True`",
            "c",
        ));
    }
    if equinox() {
        runs.push((
            equinox_fake("DetachedInTrainingWithDropout"),
            "eqx.nn.inference_mode(module, False)",
            "c",
        ));
        runs.push((
            equinox_fake("DetachedInTrainingField"),
            "eqx.nn.inference_mode(module, False)",
            "c",
        ));
        runs.push((
            equinox_fake("DetachedInTrainingArgument"),
            "`inference=False`",
            "c",
        ));
    }
    if flax() {
        runs.push((
            nnx_fake("DetachedInTraining"),
            "`deterministic=False`",
            "L_multiplier",
        ));
    }
    if haiku() {
        runs.push((haiku_fake("DetachedInTraining"), "`is_training=True`", "c"));
    }
    for (cmd, flag, param) in runs {
        let (code, r) = run(&short(&cmd), &JAX_GRAD);
        assert_eq!(code, 1, "{r:#}");
        let says =
            format!("in training mode ({flag}, as a training loop calls it) the gradient of `");
        let failed = failed_saying(&r, &says);
        assert!(!failed.is_empty(), "{r:#}");
        assert_eq!(failed.len() as u64, count(&r, "values", "failed"), "{r:#}");
        assert!(r.to_string().contains(&format!("({param})")), "{r:#}");
    }
}
