//! Helpers shared by the wild test crates (`wild.rs`, `wild_torch.rs`, `wild_jax.rs`): the glue
//! commands for the fakes under `tests/wild/`, running the real CLI over them, and the verdict
//! checks they share, and a literal FIRE with ψ and the threshold of one's choosing for the
//! in-process ones. Each crate uses a subset.

#![allow(dead_code, clippy::unwrap_used)] // each test crate uses some of these; tests may unwrap

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use fire_conformance::diagnose::describe;
use fire_conformance::implementation::{Capabilities, Implementation, Reply, Request};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::runner::{self, Options, Report};
use fire_conformance::vectors::format::{Encoding, Kind, Tensor};
use fire_conformance::vectors::load;
use fire_conformance::vectors::params;
use serde_json::Value;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn numpy() -> bool {
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
pub fn fake(file: &str, class: &str, dtype: &str) -> String {
    format!(
        "python3 {} {}:{class} --dtype {dtype}",
        root().join("conformance/adapters/appendix_e.py").display(),
        root().join("conformance/tests/wild").join(file).display()
    )
}

/// The glue command for a class of `tests/wild/appendix_e_fakes.py`.
pub fn appendix(class: &str, dtype: &str) -> String {
    fake("appendix_e_fakes.py", class, dtype)
}

/// Whether the PyTorch fakes can run; says loudly when they cannot.
pub fn torch() -> bool {
    let ok = python_has("torch");
    if !ok {
        eprintln!("SKIPPED: torch is not installed; the PyTorch wild implementations were NOT run");
    }
    ok
}

/// The glue command for a class of `tests/wild/torch_fakes.py`.
pub fn torch_fake(class: &str, dtype: &str) -> String {
    fake("torch_fakes.py", class, dtype)
}

pub fn glue(name: &str) -> String {
    format!(
        "python3 {} {name}",
        root().join("conformance/tests/wild/glues.py").display()
    )
}

/// Runs `fire-conformance run --json --impl CMD ARGS…`: the exit status and the JSON report.
pub fn run(cmd: &str, args: &[&str]) -> (i32, Value) {
    // These tests are about verdicts, not hangs (tests/hostile.rs): a loaded 2-core machine
    // running Python under `cargo test`'s parallelism must not turn a slow case into a timeout.
    run_allowing(cmd, args, "600")
}

/// As [`run`], each reply allowed `timeout` seconds (`--timeout`), which the harness also tells
/// the implementation ([proto.hello]).
pub fn run_allowing(cmd: &str, args: &[&str], timeout: &str) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_fire-conformance"))
        .args(["run", "--json", "--impl", cmd])
        .args(["--timeout", timeout, "--startup-timeout", "600"])
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), report)
}

pub fn overall(r: &Value) -> Vec<String> {
    r["overall_variants"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// The implementation's notes over the run, each distinct text once ([proto.reply]).
pub fn notes(r: &Value) -> Vec<String> {
    r["implementation_notes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| n["note"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub fn count(r: &Value, question: &str, status: &str) -> u64 {
    r[question][status].as_u64().unwrap()
}

/// Asserts that the run fails on values and names `variant` alone.
pub fn named(cmd: &str, variant: &str) -> Value {
    let (code, r) = run(cmd, &[]);
    assert_eq!(code, 1, "{variant}: {r:#}");
    assert!(count(&r, "values", "failed") > 0, "{variant}");
    assert_eq!(overall(&r), [variant], "{variant}");
    r
}

/// Runs `cmd` with `args` and asserts that every value case failed as a mistake the glue found
/// (exit 1, not a broken adapter) whose run-level message contains `says`; the report.
pub fn the_glue_finds(cmd: &str, args: &[&str], says: &str) -> Value {
    let (code, r) = run(cmd, args);
    assert_eq!(code, 1, "{cmd}: {r:#}");
    assert_eq!(count(&r, "values", "passed"), 0, "{cmd}: {r:#}");
    let message = r["glue_found"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{cmd}: {says:?} not said: {r:#}");
    r
}

/// Asserts a run of `cmd` passes on values with at least `min` cases graded.
pub fn passes(cmd: &str, min: u64) -> Value {
    passes_in(cmd, min, &[])
}

/// Runs `cmd` with `args` and asserts it fails on values, every failing case saying `says`
/// (cases may pass, where what is wrong does not show on them); the report.
pub fn every_failure_says(cmd: &str, args: &[&str], says: &str) -> Value {
    let (code, r) = run(cmd, args);
    assert_eq!(code, 1, "{cmd}: {r:#}");
    let failed = count(&r, "values", "failed") as usize;
    assert!(failed > 0, "{cmd}: {r:#}");
    assert_eq!(
        failed_saying(&r, says).len(),
        failed,
        "{cmd}: {says:?}: {r:#}"
    );
    r
}

/// As [`passes`], on the cases `args` select.
pub fn passes_in(cmd: &str, min: u64, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["--fail-on", "values"]);
    let (code, r) = run(cmd, &args);
    assert_eq!(code, 0, "{cmd}: {r:#}");
    assert_eq!(count(&r, "values", "failed"), 0, "{cmd}: {r:#}");
    assert!(count(&r, "values", "passed") >= min, "{cmd}: {r:#}");
    r
}

/// Asserts a run of `cmd` is called broken (exit 3) naming the unreached parameter `scale`.
pub fn refused_naming_scale(cmd: &str, args: &[&str]) {
    let (code, r) = run(cmd, args);
    assert_eq!(code, 3, "{r:#}");
    let error = r["adapter_broken"]["error"].as_str().unwrap();
    assert!(
        error.contains("['scale']") && error.contains("--map"),
        "{error}"
    );
}

/// Asserts a run of `cmd` fails on values, only on gradient cases, each saying that
/// [grad.layout] freezes `init_L`, while a bias case passes (the bias itself is right).
pub fn fails_the_gradient_cases_on_init_l(cmd: &str, args: &[&str]) {
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

/// Whether `module` imports in `python3`: where it does not, a failure when the environment
/// variable `require` is set (CI), else a loud skip naming what (`fakes`) was NOT run.
pub fn importable(module: &str, package: &str, require: &str, fakes: &str) -> bool {
    let ok = python_has(module);
    if !ok {
        assert!(
            std::env::var_os(require).is_none(),
            "{require} is set but {package} is missing"
        );
        eprintln!(
            "SKIPPED: {package} is not installed; the {fakes} wild implementations were NOT run"
        );
    }
    ok
}

/// Whether the JAX fakes can run: a failure when FIRE_REQUIRE_JAX is set (CI), else a loud skip.
pub fn jax() -> bool {
    importable("jax", "jax", "FIRE_REQUIRE_JAX", "JAX")
}

/// Whether the `flax.nnx` fakes can run: a failure when FIRE_REQUIRE_FLAX is set (CI), else a
/// loud skip.
pub fn flax() -> bool {
    importable("flax.nnx", "flax", "FIRE_REQUIRE_FLAX", "flax.nnx")
}

/// The glue command for a class of `tests/wild/nnx_fakes.py` (the Appendix E adapter hands a
/// `flax.nnx` module to the JAX glue, which serves it through `nnx_bridge`).
pub fn nnx_fake(class: &str) -> String {
    fake("nnx_fakes.py", class, "f32")
}

/// Whether the Equinox fakes can run: a failure when FIRE_REQUIRE_EQUINOX is set (CI), else a
/// loud skip.
pub fn equinox() -> bool {
    importable("equinox", "equinox", "FIRE_REQUIRE_EQUINOX", "Equinox")
}

/// The glue command for a class of `tests/wild/equinox_fakes.py` (handed to the JAX glue, which
/// serves it through `equinox_bridge`).
pub fn equinox_fake(class: &str) -> String {
    fake("equinox_fakes.py", class, "f32")
}

/// Whether the Haiku fakes can run: a failure when FIRE_REQUIRE_HAIKU is set (CI), else a loud
/// skip.
pub fn haiku() -> bool {
    importable("haiku", "dm-haiku", "FIRE_REQUIRE_HAIKU", "Haiku")
}

/// The glue command for a class of `tests/wild/haiku_fakes.py` (the Appendix E adapter hands a
/// Haiku module to the JAX glue).
pub fn haiku_fake(class: &str) -> String {
    fake("haiku_fakes.py", class, "f32")
}

/// The glue command for a class of `tests/wild/linen_fakes.py` (`flax.linen` modules, handed to
/// the JAX glue).
pub fn linen_fake(class: &str) -> String {
    fake("linen_fakes.py", class, "f32")
}

/// The glue command for a class of `tests/wild/jax_fakes.py` (the Appendix E adapter hands a
/// module with `init`/`apply` to the JAX glue).
pub fn jax_fake(class: &str) -> String {
    fake("jax_fakes.py", class, "f32")
}

/// The cases the JAX runs take. Eager JAX compiles every primitive for every new shape (~50 ms
/// each; a gradient case costs seconds), so a whole-suite run costs a minute: the bias cases
/// below share one shape; the gradient cases add a VJP and both kinks.
pub const JAX_BIAS: [&str; 2] = ["--run", "fire/random-params/*"];
pub const JAX_GRAD: [&str; 6] = [
    "--run",
    "fire/random-params/*",
    "--run",
    "fire-grad/vjp/random-square-12",
    "--run",
    "fire-grad/kinks/*",
];

/// `cmd` declaring its module's context 257 positions long (the glue's own `--max-len`), for a
/// run over the small squares only ([`JAX_BIAS`], [`JAX_GRAD`], the gradient and kink cases:
/// none reaches position 32, so none skips). What changes is the glue's once-per-run probe at a
/// long length (`long_length.py`): made over 257 positions instead of 2 049, where a module
/// computing the whole square holds its hidden layer over 2 049² positions — about half of a
/// passing JAX run's time on a 2-core machine. For tests whose claims are about the small
/// squares; the tests of paths taken at a long length keep the full length.
pub fn short(cmd: &str) -> String {
    format!("{cmd} --max-len 257")
}

/// Leaves out the one case whose positions reach 4 095: a module computing the whole square
/// (Appendix E's style, the glue gathering the rows and columns) evaluates its MLP on a
/// 4 096 × 4 096 grid there, 7 s of NumPy per run on a 2-core machine (minutes at float16), the
/// bulk of a whole-suite run. For the runs whose claims are not about positions; the position
/// tests and the diagnosis tests (`named`) keep it.
pub const NOT_THE_4096_SQUARE: [&str; 2] = ["--skip", "edge/positions/randomised-positions"];

/// `args`, leaving out the 4 096-square case ([`NOT_THE_4096_SQUARE`]).
pub fn not_the_4096_square<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [args, &NOT_THE_4096_SQUARE[..]].concat()
}

/// The ids of the cases of `r` that passed and start with `prefix`.
pub fn passed_with(r: &Value, prefix: &str) -> Vec<String> {
    r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "passed" && c["id"].as_str().unwrap().starts_with(prefix))
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A case at [fire.defaults] and one with random c and L_init, graded on values.
pub const DEFAULT_AND_RANDOM: [&str; 6] = [
    "--run",
    "fire/default-init/square-8",
    "--run",
    "fire/random-params/seed-1-square-16",
    "--fail-on",
    "values",
];

/// Asserts a run of `cmd` over a case off the defaults (random c and L_init) fails it, the reply
/// naming the constructor argument `arg` the module ignores, while the default case passes.
pub fn fails_naming_the_ignored_argument(cmd: &str, arg: &str) {
    let (code, r) = run(cmd, &DEFAULT_AND_RANDOM);
    assert_eq!(code, 1, "{arg}: {r:#}");
    let cases = r["cases"].as_array().unwrap();
    let status = |id: &str| {
        cases
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["status"].clone())
            .unwrap_or_default()
    };
    assert_eq!(status("fire/default-init/square-8"), "passed", "{r:#}");
    let failed = cases
        .iter()
        .find(|c| c["id"] == "fire/random-params/seed-1-square-16")
        .unwrap();
    assert_eq!(failed["status"], "failed", "{r:#}");
    let details = failed["details"].to_string();
    assert!(
        details.contains(&format!("its constructor ignores `{arg}`")),
        "{details}"
    );
}

/// Runs `imp` in process over the repository's vectors (the cases `globs` select; every one
/// when empty), diagnosing the failures.
pub fn run_in_process(imp: &mut dyn Implementation, globs: &[&str]) -> Report {
    let suite = load::load(&root().join("vectors")).unwrap();
    let options = Options {
        diagnose: true,
        run: globs.iter().map(|g| (*g).to_owned()).collect(),
        ..Options::default()
    };
    runner::run(&suite, imp, &options).unwrap()
}

/// The diagnosis lines of the case `id` of `report`.
pub fn lines(report: &Report, id: &str) -> Vec<String> {
    let o = report.outcomes.iter().find(|o| o.id == id).unwrap();
    assert!(o.finding.is_some(), "{id}: {:?} {:?}", o.status, o.details);
    describe(o.finding.as_ref().unwrap(), o.profile.unwrap())
}

/// The ids of the cases `report` failed.
/// The ids of the failed cases of a JSON report whose report block contains `text`.
/// Asserts that a run failed (exit 1) on its gradient cases alone, each saying every one of
/// `says`, and passed every other case it did not skip: a scalar kept where no gradient reaches
/// it is right on values and never trains.
pub fn only_the_gradients_fail_saying(r: &Value, code: i32, says: &[&str]) {
    assert_eq!(code, 1, "{r:#}");
    for c in r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "skipped")
    {
        let gradient = c["id"].as_str().unwrap().starts_with("fire-grad/");
        assert_eq!(
            c["status"],
            if gradient { "failed" } else { "passed" },
            "{c:#}"
        );
        let details = c["details"].to_string();
        for text in says.iter().filter(|_| gradient) {
            assert!(details.contains(text), "{text:?}: {c:#}");
        }
    }
}

pub fn failed_saying<'a>(r: &'a Value, text: &str) -> Vec<&'a str> {
    r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "failed")
        .filter(|c| c["report"].as_str().unwrap().contains(text))
        .map(|c| c["id"].as_str().unwrap())
        .collect()
}

pub fn failed_ids(report: &Report) -> Vec<&str> {
    report
        .outcomes
        .iter()
        .filter(|o| o.status == runner::Status::Failed)
        .map(|o| o.id.as_str())
        .collect()
}

/// FIRE's bias computed literally, with ψ and the threshold L = |m·L_init| given.
pub struct Literal {
    pub name: &'static str,
    /// ψ(c, x).
    pub psi: fn(f64, f64) -> f64,
    /// The threshold the module uses, from the spec's.
    pub threshold: fn(f64) -> f64,
}

impl Implementation for Literal {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        c.name = self.name.into();
        c.dtypes = vec!["f32".into()];
        Ok(c)
    }

    fn run(&mut self, r: &Request) -> Reply {
        let (Encoding::Fire(p), Kind::Bias) = (&r.encoding, r.kind) else {
            return Reply::Skipped("bias cases of one FIRE module only".into());
        };
        let fire = params::to_fire(p).unwrap();
        let psi = |x: f64| (self.psi)(fire.c, x);
        let (q, k) = (&r.inputs.queries, &r.inputs.keys);
        let heads = fire.mlp.heads();
        let mut data = vec![0.0; heads * q.len() * k.len()];
        for (a, &i) in q.iter().enumerate() {
            for (b, &j) in k.iter().enumerate() {
                let (i, j) = (i as f64, j as f64);
                let n = fire
                    .threshold_value()
                    .map_or(i, |l| i.max((self.threshold)(l)));
                let out = fire.mlp.eval(psi((i - j).abs()) / (psi(n) + fire.eps));
                for (h, v) in out.iter().enumerate() {
                    data[(h * q.len() + a) * k.len() + b] = *v;
                }
            }
        }
        let mut m = BTreeMap::new();
        m.insert(
            "bias".into(),
            Tensor::new(vec![heads, q.len(), k.len()], data),
        );
        Reply::Output(m)
    }
}
