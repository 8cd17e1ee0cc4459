//! Hostile implementations never take the harness down: each misbehaviour becomes a failed case
//! with a clear message, and the next case still runs. spec: [proto.lifecycle]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;
use std::time::Duration;

use fire_conformance::implementation::Implementation;
use fire_conformance::implementations::external::{External, Limits};
use fire_conformance::runner::{self, Options, Status};
use fire_conformance::vectors::load::{self, Suite};

const BIN: &str = env!("CARGO_BIN_EXE_fire-conformance");

fn suite() -> Suite {
    load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap()
}

fn limits() -> Limits {
    Limits {
        case: Duration::from_millis(1500),
        startup: Duration::from_secs(20),
        max_line: 1 << 20,
        max_failed_starts: 3,
        memory_mib: Some(4096),
    }
}

/// Runs two cases against `cmd`; returns each outcome's status and joined details.
fn two_cases(cmd: &str) -> Vec<(Status, String)> {
    two_cases_within(cmd, limits())
}

/// As [`two_cases`], under `limits`.
fn two_cases_within(cmd: &str, limits: Limits) -> Vec<(Status, String)> {
    let mut imp = External::new(cmd, limits);
    let opts = Options {
        run: vec![
            "edge/positions/query-zero".into(),
            "edge/positions/kv-cache-row".into(),
        ],
        diagnose: true,
        ..Options::default()
    };
    let report = runner::run(&suite(), &mut imp, &opts).unwrap();
    assert_eq!(report.outcomes.len(), 2);
    report
        .outcomes
        .iter()
        .map(|o| (o.status, o.details.join("\n")))
        .collect()
}

fn misbehaving(kind: &str, needle: &str) {
    let outcomes = two_cases(&format!("{BIN} serve --misbehave {kind}"));
    for (status, details) in outcomes {
        assert_eq!(status, Status::Failed, "{kind}: {details}");
        assert!(
            details.contains(needle),
            "{kind}: expected `{needle}` in: {details}"
        );
    }
}

#[test]
fn a_well_behaved_subprocess_passes() {
    for (status, details) in two_cases(&format!("{BIN} serve")) {
        assert_eq!(status, Status::Passed, "{details}");
    }
}

#[test]
fn a_crash_fails_the_case_and_the_next_case_runs_on_a_restart() {
    misbehaving("crash", "closed its output");
}

/// The first case has the start-up allowance (JIT compilation lands there); once it has hung,
/// every later case has the plain per-case limit, and the message names the flag to raise.
#[test]
fn a_hang_times_out() {
    let limits = Limits {
        startup: Duration::from_secs(4),
        ..limits()
    };
    let outcomes = two_cases_within(&format!("{BIN} serve --misbehave hang"), limits);
    for (status, _) in &outcomes {
        assert_eq!(*status, Status::Failed);
    }
    let first = &outcomes[0].1;
    assert!(
        first.contains("no reply within 4.0s to the first case")
            && first.contains("--startup-timeout"),
        "{first}"
    );
    let second = &outcomes[1].1;
    assert!(
        second.contains("no reply within 1.5s") && second.contains("--timeout"),
        "{second}"
    );
}

/// A first case slower than the per-case limit (a `torch.compile`d module compiling) passes.
#[test]
fn a_slow_first_case_has_the_start_up_allowance() {
    assert!(fire_conformance::serve::SLOW_START > limits().case);
    for (status, details) in two_cases(&format!("{BIN} serve --misbehave slow-start")) {
        assert_eq!(status, Status::Passed, "{details}");
    }
}

#[test]
fn garbage_is_invalid_json() {
    misbehaving("garbage", "invalid JSON");
    misbehaving("garbage", "write logs to standard error");
}

#[test]
fn bare_nan_tokens_are_explained() {
    misbehaving("bare-nan", "bare NaN");
}

#[test]
fn nan_outputs_fail_the_comparison() {
    misbehaving("nan", "got NaN");
}

#[test]
fn a_wrong_shape_is_named() {
    misbehaving("wrong-shape", "(an extra axis of 1: drop it)");
}

/// An output under another name is named beside the missing one.
#[test]
fn a_misnamed_output_is_named_beside_the_missing_one() {
    misbehaving(
        "misnamed",
        "output `bias` is missing from the reply, which has `biass` instead",
    );
}

#[test]
fn a_reply_for_another_case_is_refused() {
    misbehaving("wrong-id", "reply for case `some/other/case`");
}

#[test]
fn a_flood_hits_the_size_cap() {
    misbehaving("flood", "size cap");
}

#[test]
fn an_implementation_that_cannot_start_is_a_clear_error() {
    let mut imp = External::new("exec /nonexistent/fire-impl", limits());
    let e = imp.capabilities().unwrap_err().to_string();
    assert!(e.contains("handshake failed"), "{e}");
    let mut imp = External::new(
        "echo '{\"type\": \"hello\", \"protocol\": 99, \"name\": \"x\"}'",
        limits(),
    );
    let e = imp.capabilities().unwrap_err().to_string();
    assert!(e.contains("protocol version"), "{e}");
    // A script that ends cleanly without a hello (a glue file nothing serves) is told how to
    // serve it; one that crashes is not.
    let mut imp = External::new("true", limits());
    let e = imp.capabilities().unwrap_err().to_string();
    assert!(
        e.contains("without saying hello") && e.contains("fire_conformance.glue"),
        "{e}"
    );
    let mut imp = External::new("false", limits());
    let e = imp.capabilities().unwrap_err().to_string();
    assert!(!e.contains("without saying hello"), "{e}");
}

#[test]
fn the_cli_prints_the_summary_and_exits_non_zero_on_failure() {
    let out = std::process::Command::new(BIN)
        .args(["run", "--run", "fire/depth/*", "--impl"])
        .arg(format!("{BIN} serve --variant heads-reversed"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.lines()
            .last()
            .unwrap()
            .ends_with("0 passed, 3 failed, 0 skipped"),
        "{text}"
    );
    assert!(text.contains("matches variant `heads-reversed`"), "{text}");
}

/// Runs the two cases with `limits` and returns the outcomes and how long the run took.
fn two_cases_with(cmd: &str, limits: Limits) -> (Vec<(Status, String)>, Duration) {
    let start = std::time::Instant::now();
    let mut imp = External::new(cmd, limits);
    let opts = Options {
        run: vec![
            "edge/positions/query-zero".into(),
            "edge/positions/kv-cache-row".into(),
        ],
        ..Options::default()
    };
    let report = runner::run(&suite(), &mut imp, &opts).unwrap();
    drop(imp);
    let outcomes = report
        .outcomes
        .iter()
        .map(|o| (o.status, o.details.join("\n")))
        .collect();
    (outcomes, start.elapsed())
}

#[test]
fn endless_standard_error_neither_hangs_nor_grows_the_harness() {
    // `yes` writes to stderr for as long as it lives; the replies still come on stdout.
    let cmd = format!("yes 'noise on stderr' >&2 & exec {BIN} serve");
    let (outcomes, took) = two_cases_with(&cmd, limits());
    for (status, details) in outcomes {
        assert_eq!(status, Status::Passed, "{details}");
    }
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn unbounded_allocation_hits_the_memory_cap_and_fails_the_case() {
    // Reads the handshake, answers it, then allocates without end on the first case.
    let script = r#"
import json, sys
hello = sys.stdin.readline()
print(json.dumps({"type": "hello", "protocol": 1, "name": "hog", "families": ["*"], "dtypes": ["f64"]}), flush=True)
for line in sys.stdin:
    hog = []
    while True:
        hog.append(bytearray(64 << 20))
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hog.py");
    std::fs::write(&path, script).unwrap();
    let limits = Limits {
        memory_mib: Some(512),
        case: Duration::from_secs(20),
        ..limits()
    };
    let (outcomes, took) = two_cases_with(&format!("python3 {}", path.display()), limits);
    for (status, details) in &outcomes {
        assert_eq!(*status, Status::Failed, "{details}");
        assert!(
            details.contains("MemoryError") || details.contains("closed its output"),
            "{details}"
        );
    }
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

#[test]
fn children_left_running_are_killed_with_the_implementation() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("orphan.pid");
    let cmd = format!(
        "sleep 300 & echo $! > {}; exec {BIN} serve",
        pidfile.display()
    );
    let (outcomes, _) = two_cases_with(&cmd, limits());
    assert!(outcomes.iter().all(|(s, _)| *s == Status::Passed));
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    };
    for _ in 0..40 {
        if !alive(&pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the orphan {pid} outlived the run");
}
