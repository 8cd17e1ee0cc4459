//! The `fire_conformance` Python package from this clone (`conformance/python` on `PYTHONPATH`,
//! this build's binary as `FIRE_CONFORMANCE_BIN`): `python -m fire_conformance`, the glue
//! runner, the pytest plugin on the example project (one item per case; a broken module's
//! failures carry the diagnosis) and the JAX glue. The installed wheel is checked by `.ci/test`.
//!
//! Needs python3 with numpy (FIRE_REQUIRE_NUMPY=1 makes its absence a failure); the plugin tests
//! need pytest (FIRE_REQUIRE_PYTEST=1), the JAX test jax (FIRE_REQUIRE_JAX=1). Each skips loudly
//! otherwise.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_fire-conformance");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether python3 imports `module`; a loud skip, or a failure when `require` is set.
fn python_has(module: &str, require: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os(require).is_none(),
            "{require} is set but `python3 -c 'import {module}'` fails"
        );
        eprintln!("\n********************************************************************");
        eprintln!("SKIPPED: python3 cannot import {module}; this Python package test did NOT");
        eprintln!("run. `pip install {module}` (CI sets {require}=1).");
        eprintln!("********************************************************************\n");
    }
    ok
}

/// python3 with the package from this clone and this build's binary, run in `dir`.
fn python(dir: &Path, args: &[&str]) -> Output {
    Command::new("python3")
        .args(args)
        .current_dir(dir)
        .env("PYTHONPATH", root().join("conformance/python"))
        .env("FIRE_CONFORMANCE_BIN", BIN)
        .env_remove("FIRE_VECTORS")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn case_count() -> usize {
    fire_conformance::vectors::embedded::load()
        .unwrap()
        .cases()
        .count()
}

#[test]
fn python_m_fire_conformance_runs_the_binary() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = python(dir.path(), &["-m", "fire_conformance", "list"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        case_count()
    );
    // A module run through the package, from a directory outside the repository.
    let o = python(
        dir.path(),
        &[
            "-m",
            "fire_conformance",
            "run",
            "--json",
            "--impl",
            "python3 -m fire_conformance.numpy_fire",
        ],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["exit_code"], 0, "{}", text(&o));
    assert_eq!(v["suite_source"], "embedded");
}

#[test]
fn the_glue_runner_serves_a_build_function_and_names_what_is_missing() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("my_glue.py"),
        "from fire_conformance import kit, numpy_fire\n\
         CAPABILITIES = {'name': 'my glue', 'families': ['fire']}\n\
         def build(case):\n    return numpy_fire.build(case)\n",
    )
    .unwrap();
    // The harness run through Python on a glue file of `dir`, with `args` before `--impl`.
    let serve = |file: &str, args: &[&str]| {
        let glue = format!("python3 -m fire_conformance.glue {file}");
        let all = [
            &["-m", "fire_conformance", "run"][..],
            args,
            &["--impl", &glue],
        ]
        .concat();
        python(dir.path(), &all)
    };
    let o = serve("my_glue.py", &["--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["implementation"], "my glue");
    assert_eq!(v["values"]["failed"], 0, "{}", text(&o));
    assert!(v["values"]["passed"].as_u64().unwrap() > 10);
    // A file with no CAPABILITIES calling serve(...) itself: served by import, its own
    // arguments never apply, and every case's note says so (audit 37: a glue's `dtypes=["f32"]`
    // was silently not in effect under `pytest --fire-glue`).
    std::fs::write(
        dir.path().join("own_serve.py"),
        "from fire_conformance import kit, numpy_fire\n\
         def build(case):\n    return numpy_fire.build(case)\n\
         if __name__ == '__main__':\n    kit.serve(build, name='mine', dtypes=['f32'])\n",
    )
    .unwrap();
    let o = serve("own_serve.py", &["--run", "fire/depth/*"]);
    assert!(
        text(&o).contains("own_serve.py calls serve(...) itself but declares no CAPABILITIES"),
        "{}",
        text(&o)
    );
    std::fs::write(dir.path().join("empty.py"), "x = 1\n").unwrap();
    let o = python(dir.path(), &["-m", "fire_conformance.glue", "empty.py"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("defines no build(case) function"),
        "{}",
        text(&o)
    );
}

/// Runs pytest with the plugin in `dir`.
fn pytest(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["-m", "pytest", "-p", "fire_conformance.pytest_plugin"];
    all.extend(["-p", "no:cacheprovider", "-q"]);
    all.extend(args);
    python(dir, &all)
}

#[test]
fn the_pytest_plugin_makes_every_case_an_item_of_the_example_project() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") || !python_has("pytest", "FIRE_REQUIRE_PYTEST") {
        return;
    }
    let project = root().join("conformance/adapters/examples/pytest_project");
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let o = pytest(
        &project,
        &[&format!("--junitxml={}", junit.display()), "tests"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), case_count(), "{xml}");
    assert!(xml.contains("name=\"fire/depth/depth-2\""), "{xml}");
    assert!(xml.contains("failures=\"0\""), "{xml}");
    // -k and family markers select cases.
    let o = pytest(&project, &["tests", "-m", "invalid", "-k", "parameters"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("deselected"), "{out}");
}

/// A selection whose every case the module skips (the large-positions square is beyond the
/// glue's `--max-len`) grades nothing: pytest exits 5 as the harness does, not 0.
#[test]
fn a_pytest_run_that_grades_nothing_does_not_pass() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") || !python_has("pytest", "FIRE_REQUIRE_PYTEST") {
        return;
    }
    let project = root().join("conformance/adapters/examples/pytest_project");
    let dir = tempfile::tempdir().unwrap();
    let module = format!("{}:FIRE", project.join("my_fire.py").display());
    let o = pytest(
        dir.path(),
        &["--fire-impl", &module, "-k", "large-positions"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(5), "{out}");
    assert!(out.contains("nothing graded"), "{out}");
}

/// `--fire-fail-on values` with a glue that computes no invalid case (its families leave them
/// out): the value items pass and pytest exits 0. The plugin had run the harness under the
/// default `both`, whose validation verdict then had nothing graded, and exited 5 (audit 14).
/// The family is given as one string, which the kit had sent letter by letter.
#[test]
fn the_value_items_alone_pass_under_fail_on_values() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") || !python_has("pytest", "FIRE_REQUIRE_PYTEST") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let glue = dir.path().join("reference_glue.py");
    std::fs::write(
        &glue,
        "from fire_conformance import numpy_fire\n\
         CAPABILITIES = {\"families\": \"fire\"}\n\
         build = numpy_fire.build\n",
    )
    .unwrap();
    let o = pytest(
        dir.path(),
        &[
            "--fire-glue",
            glue.to_str().unwrap(),
            "--fire-fail-on",
            "values",
        ],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("passed"), "{out}");
    assert!(!out.contains("nothing graded"), "{out}");
}

#[test]
fn a_broken_module_fails_under_pytest_with_the_diagnosis() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") || !python_has("pytest", "FIRE_REQUIRE_PYTEST") {
        return;
    }
    let project = root().join("conformance/adapters/examples/pytest_project");
    let dir = tempfile::tempdir().unwrap();
    let module = format!("{}:FIRE", project.join("broken_fire.py").display());
    let o = pytest(dir.path(), &["--fire-impl", &module, "-k", "random-params"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FAILED fire-conformance::fire/random-params/"),
        "{out}"
    );
    assert!(
        out.contains("diagnosis: matches variant `one-based-positions`"),
        "{out}"
    );
    assert!(out.contains("worst ["), "{out}");
    // The run-level lines as the harness's own report has them (`run_lines`).
    assert!(
        out.contains("overall: the failures are explained by variant `one-based-positions`, consistent with every diagnosable case"),
        "{out}"
    );
    // Usage errors are named, not a traceback.
    let o = pytest(dir.path(), &["--fire-impl", "missing.py:FIRE"]);
    assert!(text(&o).contains("module file not found"), "{}", text(&o));
    let o = pytest(
        dir.path(),
        &[
            "--fire-impl",
            &project.join("my_fire.py").display().to_string(),
        ],
    );
    assert!(
        text(&o).contains("path/to/file.py:ClassName"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_jax_glue_checks_values_and_gradients_through_jax_vjp() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") || !python_has("jax", "FIRE_REQUIRE_JAX") {
        return;
    }
    let module = root().join("conformance/adapters/examples/jax_fire.py");
    let dir = tempfile::tempdir().unwrap();
    let cmd = format!(
        "python3 -m fire_conformance.appendix_e {}:FIRE --dtype f32",
        module.display()
    );
    let o = python(
        dir.path(),
        &[
            "-m",
            "fire_conformance",
            "run",
            "--json",
            "--impl",
            &cmd,
            "--run",
            "fire/default-init/square-8",
            "--run",
            "fire-grad/vjp/default-init-square-6",
            "--run",
            "fire-grad/vjp/random-square-12",
            "--run",
            "edge/positions/kv-cache-row",
            "--fail-on",
            "values",
        ],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(v["exit_code"], 0, "{}", text(&o));
    assert!(v["implementation"]
        .as_str()
        .unwrap()
        .starts_with("jax glue"));
    let grads = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("fire-grad/") && c["status"] == "passed")
        .count();
    assert_eq!(grads, 2, "{v:#}");
}

/// The constructor's argument names reach the glue from pytest: `--fire-map-arg` on the command
/// line, `map_arg=` in `fire_cases`; without them the item fails with the `--map-arg`s to give.
#[test]
fn the_pytest_plugin_passes_the_constructors_argument_names_on() {
    if !python_has("numpy", "FIRE_REQUIRE_NUMPY") || !python_has("pytest", "FIRE_REQUIRE_PYTEST") {
        return;
    }
    let project = root().join("conformance/adapters/examples/pytest_project");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("named.py"),
        format!(
            "import sys\nsys.path.insert(0, {:?})\nfrom my_fire import FIRE\n\n\
             class Named(FIRE):\n    def __init__(self, heads=12, hidden=32, init_c=0.1, \
             init_L=512.0, eps=1e-6):\n        super().__init__(heads, hidden, init_c, init_L, eps)\n",
            project.display().to_string()
        ),
    )
    .unwrap();
    let select = ["-k", "random-params"];
    let o = pytest(
        dir.path(),
        &[&["--fire-impl", "named.py:Named"][..], &select].concat(),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("--map-arg num_heads=heads --map-arg mlp_width=hidden"),
        "{out}"
    );
    let named = [
        "--fire-impl",
        "named.py:Named",
        "--fire-map-arg",
        "num_heads=heads",
        "--fire-map-arg",
        "mlp_width=hidden",
    ];
    let o = pytest(dir.path(), &[&named[..], &select].concat());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::write(
        dir.path().join("test_named.py"),
        "from fire_conformance.pytest_plugin import fire_cases\n\
         test_named = fire_cases(impl=\"named.py:Named\", \
         map_arg={\"num_heads\": \"heads\", \"mlp_width\": \"hidden\"})\n",
    )
    .unwrap();
    let o = pytest(dir.path(), &["test_named.py", "-k", "random-params"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("passed"), "{out}");
    // `--fire-fail-on` reaches `fire_cases` items that leave `fail_on` unset (audit 37: a
    // module validating nothing failed its invalid-input items under `--fire-fail-on values`).
    let invalid_items = |extra: &[&str]| {
        let o = pytest(
            dir.path(),
            &[&["test_named.py", "--collect-only"][..], extra].concat(),
        );
        text(&o).lines().filter(|l| l.contains("invalid/")).count()
    };
    assert!(invalid_items(&[]) > 10);
    assert_eq!(invalid_items(&["--fire-fail-on", "values"]), 0);
}
