//! The machine-readable report (`--json`).

use serde_json::{json, Value};

use crate::runner::{Report, Status};

/// The report as JSON.
pub fn render(r: &Report) -> Value {
    let (passed, failed, skipped) = r.counts();
    let cases: Vec<Value> = r
        .outcomes
        .iter()
        .map(|o| {
            json!({
                "id": o.id,
                "status": match o.status {
                    Status::Passed => "passed",
                    Status::Failed => "failed",
                    Status::Skipped => "skipped",
                    Status::XFailed => "xfailed",
                },
                "clauses": o.clauses,
                "flags": o.flags,
                "profile": o.profile.map(|p| p.name),
                "details": o.details,
                "variants": o.finding.as_ref().map(|f| f.variants.iter().map(|v| v.name).collect::<Vec<_>>()),
                "notes": o.finding.as_ref().map(|f| f.notes.clone()),
                "seconds": o.duration.as_secs_f64(),
            })
        })
        .collect();
    json!({
        "implementation": r.capabilities.name,
        "dtype": r.dtype,
        "future_keys": r.capabilities.future_keys.name(),
        "placement": r.capabilities.placement.name(),
        "suite_version": r.suite_version,
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "overall_variants": r.overall,
        "cases": cases,
    })
}
