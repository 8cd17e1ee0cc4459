//! The human report: failures with their id, clauses, flags, worst element and diagnosis, then
//! the summary line `N passed, M failed, K skipped`. spec: [proto.report]

use std::fmt::Write;

use crate::diagnose::describe;
use crate::runner::{Report, Status};

/// Renders the report; `verbose` also lists passes and skips.
pub fn render(r: &Report, verbose: bool) -> String {
    let c = &r.capabilities;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fire-conformance: `{}` (dtype {}, future keys {}, placement {}) against suite {}",
        c.name,
        r.dtype,
        c.future_keys.name(),
        c.placement.name(),
        r.suite_version
    );
    for o in &r.outcomes {
        let tag = match o.status {
            Status::Passed => "PASS",
            Status::Failed => "FAIL",
            Status::Skipped => "SKIP",
            Status::XFailed => "XFAIL",
        };
        if o.status == Status::Failed || verbose {
            let _ = writeln!(
                out,
                "{tag} {}  [{}]  flags: {}",
                o.id,
                o.clauses.join(" "),
                o.flags.join(" ")
            );
            for d in &o.details {
                let _ = writeln!(out, "    {d}");
            }
            if let (Some(f), Some(p)) = (&o.finding, o.profile) {
                for line in describe(f, p) {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
    if let Some(overall) = &r.overall {
        let _ = match overall.as_slice() {
            [] => writeln!(
                out,
                "overall: no single known variant explains every FIRE case"
            ),
            [one] => writeln!(out, "overall: every FIRE case matches variant `{one}`"),
            many => writeln!(
                out,
                "overall: every FIRE case matches each of the variants {}",
                many.iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    }
    let _ = writeln!(out, "{}", r.summary());
    out
}
