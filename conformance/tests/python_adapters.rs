//! The Python adapters through the real subprocess path: the independent NumPy FIRE passes every
//! case it supports, and the Appendix E glue drives a module shaped like Appendix E (a NumPy one,
//! since torch is not a test dependency). Skips loudly when python3 or numpy is missing, unless
//! FIRE_REQUIRE_NUMPY=1 (CI) makes that a failure.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fire_conformance::implementations::external::{External, Limits};
use fire_conformance::runner::{self, Options, Status};
use fire_conformance::vectors::load;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn numpy_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("FIRE_REQUIRE_NUMPY").is_none(),
            "FIRE_REQUIRE_NUMPY is set but `python3 -c 'import numpy'` fails"
        );
        eprintln!("\n********************************************************************");
        eprintln!("SKIPPED: python3 with numpy is not available; the Python adapters were");
        eprintln!(
            "NOT tested. Install it with `pip install numpy` (CI sets FIRE_REQUIRE_NUMPY=1)."
        );
        eprintln!("********************************************************************\n");
    }
    ok
}

fn limits() -> Limits {
    Limits {
        case: Duration::from_secs(60),
        ..Limits::default()
    }
}

#[test]
fn the_independent_numpy_fire_passes_every_case() {
    if !numpy_available() {
        return;
    }
    let suite = load::load(&root().join("vectors")).unwrap();
    let cmd = format!(
        "python3 {}",
        root().join("conformance/adapters/numpy_fire.py").display()
    );
    let report = runner::run(
        &suite,
        &mut External::new(&cmd, limits()),
        &Options::default(),
    )
    .unwrap();
    let failures: Vec<_> = report
        .outcomes
        .iter()
        .filter(|o| o.status == Status::Failed)
        .map(|o| (&o.id, &o.details))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let (passed, _, _) = report.counts();
    assert!(passed > 60, "{}", report.summary());
    // Only encodings it does not implement (the baselines) may be skipped, and they say so.
    for o in report
        .outcomes
        .iter()
        .filter(|o| o.status == Status::Skipped)
    {
        let why = o.details.join(" ");
        assert!(
            why.contains("not supported") || why.contains("not implemented"),
            "{}: {why}",
            o.id
        );
    }
}

#[test]
fn the_appendix_e_glue_gathers_rows_and_columns_from_the_full_square() {
    if !numpy_available() {
        return;
    }
    let suite = load::load(&root().join("vectors")).unwrap();
    let glue = root().join("conformance/adapters/appendix_e.py");
    let module = root().join("conformance/adapters/examples/appendix_e_numpy.py");
    let cmd = format!(
        "python3 {} {}:AppendixEFire --map L_multiplier=L_mult --dtype f64 --max-len 1024",
        glue.display(),
        module.display()
    );
    let opts = Options {
        run: vec!["fire/*".into(), "edge/*".into()],
        diagnose: true,
        ..Options::default()
    };
    let report = runner::run(&suite, &mut External::new(&cmd, limits()), &opts).unwrap();
    let status = |id: &str| {
        report
            .outcomes
            .iter()
            .find(|o| o.id == id)
            .map(|o| o.status)
    };
    // Non-contiguous, unsorted and KV-cache rows pass through gathering.
    for id in [
        "edge/positions/non-contiguous",
        "edge/positions/unsorted-repeated",
        "edge/positions/kv-cache-row",
        "fire/default-init/square-8",
    ] {
        assert_eq!(status(id), Some(Status::Passed), "{id}");
    }
    // Appendix E computes ψ as log(1 + |c|x), not log1p; the small-c cases are chosen so that
    // this conforming form stays within the f64 profile ([num.profiles]).
    assert_eq!(status("edge/parameters/tiny-c"), Some(Status::Passed));
    assert_eq!(
        status("edge/parameters/tiny-negative-c"),
        Some(Status::Passed)
    );
    // Squares beyond --max-len are skipped with the reason.
    let large = report
        .outcomes
        .iter()
        .find(|o| o.id == "edge/positions/large-positions")
        .unwrap();
    assert_eq!(large.status, Status::Skipped);
    assert!(
        large.details.join(" ").contains("--max-len"),
        "{:?}",
        large.details
    );
}
