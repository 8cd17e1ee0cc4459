//! The machine-readable report (`--json`). spec: [proto.report]

use serde_json::{json, Value};

use crate::implementation::FutureKeys;
use crate::overall::{loosely_explained, may_declare};
use crate::runner::{GlueFinding, Overall, Question, Report, Status};

fn status(s: Status) -> &'static str {
    match s {
        Status::Passed => "passed",
        Status::Failed => "failed",
        Status::Skipped => "skipped",
        Status::XFailed => "xfailed",
        Status::Inconclusive => "inconclusive",
    }
}

fn verdict(r: &Report, q: Question) -> Value {
    let (passed, failed, skipped) = r.counts_of(q);
    json!({
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "counted": r.fail_on.counts(q),
    })
}

/// The report as JSON.
pub fn render(r: &Report) -> Value {
    let (passed, failed, skipped) = r.counts();
    let cases: Vec<Value> = r
        .outcomes
        .iter()
        .map(|o| {
            let finding = o.finding.as_ref();
            json!({
                "id": o.id,
                "question": o.question.name(),
                "status": status(o.status),
                "clauses": o.clauses,
                "flags": o.flags,
                "profile": o.profile.map(|p| p.name),
                "details": o.details,
                "variants": finding.map(|f| f.variants.iter().map(|v| v.name).collect::<Vec<_>>()),
                "partial": finding.map(|f| f.partial.iter().map(|(v, s)| json!({"variant": v.name, "on": s.to_string()})).collect::<Vec<_>>()),
                "agrees_with_reference_on": finding.map(|f| f.agrees_on.iter().map(ToString::to_string).collect::<Vec<_>>()),
                "notes": finding.map(|f| f.notes.clone()),
                "other_initial": finding.and_then(|f| f.other_initial.first()).map(|o| json!({
                    "name": o.name,
                    "value": o.value,
                    "spec": o.spec,
                    "alike": finding.map_or(vec![], |f| f.other_initial[1..].iter().map(|a| a.value).collect::<Vec<_>>()),
                    "failing_off_defaults": finding.map_or(0, |f| f.failing_off_defaults),
                })),
                "precision": finding.and_then(|f| f.precision),
                "positions_held": finding.and_then(|f| f.positions).map(|h| held_json(&h)),
                "stored": finding.and_then(|f| f.stored).map(|s| json!({"format": s.format, "parameters": s.which.name()})),
                "carried_from": finding.and_then(|f| f.carried.clone()),
                "implementation_note": o.note,
                "seconds": o.duration.as_secs_f64(),
            })
        })
        .collect();
    let (convention, gradients) = match &r.overall {
        Some(Overall::Convention(f)) => (json!(f.name()), Value::Null),
        Some(Overall::Gradients { params, .. }) => (Value::Null, json!(params)),
        _ => (Value::Null, Value::Null),
    };
    let (overall, broken) = match &r.overall {
        Some(Overall::Variants(v)) => (Some(v.clone()), Value::Null),
        Some(Overall::Regions { causal, future }) => (Some(vec![*causal, *future]), Value::Null),
        Some(Overall::VariantAndInitial { variant, .. }) => (Some(vec![*variant]), Value::Null),
        Some(
            Overall::Convention(_)
            | Overall::Gradients { .. }
            | Overall::Several(_)
            | Overall::SomeInputs { .. }
            | Overall::RowShift
            | Overall::FutureOnly { .. }
            | Overall::OtherInitial(_)
            | Overall::Precision(_)
            | Overall::Stored { .. }
            | Overall::Positions(_)
            | Overall::Carried { .. }
            | Overall::Placement(_),
        ) => (Some(vec![]), Value::Null),
        Some(Overall::GlueFound(_)) => (Some(vec![]), Value::Null),
        Some(Overall::AdapterBroken { error, count, ran }) => (
            None,
            json!({"error": error, "count": count, "valid_cases_ran": ran}),
        ),
        None => (None, Value::Null),
    };
    let notes: Vec<Value> = r
        .notes()
        .iter()
        .map(|(note, count)| json!({"note": note, "cases": count}))
        .collect();
    let finding = |f: &GlueFinding| {
        json!({"message": f.message, "count": f.count, "same_message": f.same,
               "found_cases": f.found, "failed_cases": f.failed})
    };
    let glue_found = match &r.overall {
        Some(Overall::GlueFound(f)) => finding(f),
        _ => Value::Null,
    };
    let glue_found_partly = r.glue_found_partly.as_ref().map_or(Value::Null, finding);
    let mut report = json!({
        "implementation": r.capabilities.name,
        "dtype": r.dtype,
        "future_keys": r.capabilities.future_keys.name(),
        "placement": r.capabilities.placement.name(),
        "suite_version": r.suite_version,
        "suite_manifest_sha256": r.suite_hash,
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "values": verdict(r, Question::Values),
        "validation": verdict(r, Question::Validation),
        "nothing_ran": r.nothing_ran(),
        "exit_code": r.exit_code(),
        "overall_variants": overall,
        "overall_convention": convention,
        "overall_row_shift": matches!(r.overall, Some(Overall::RowShift)),
        "run_lines": super::text::run_lines(r).lines().collect::<Vec<_>>(),
        "too_precise": r.too_precise.iter().map(|t| json!({"kind": t.kind, "cases": t.cases, "profiles": t.profiles})).collect::<Vec<_>>(),
        "overall_other_initial": match &r.overall {
            Some(Overall::OtherInitial(values) | Overall::VariantAndInitial { values, .. }) => json!(values.iter().map(|o| json!({"name": o.name, "value": o.value, "spec": o.spec})).collect::<Vec<_>>()),
            _ => Value::Null,
        },
        "overall_placement": match &r.overall {
            Some(Overall::Placement(p)) => json!(p.name()),
            _ => Value::Null,
        },
        "overall_precision": match &r.overall {
            Some(Overall::Precision(p)) => json!(p),
            _ => Value::Null,
        },
        "overall_positions": match &r.overall {
            Some(Overall::Positions(held)) => held_json(held),
            _ => Value::Null,
        },
        "overall_carried": match &r.overall {
            Some(Overall::Carried { failed, count, case, from }) => json!({"count": count, "failed_cases": failed, "case": case, "from": from}),
            _ => Value::Null,
        },
        "overall_stored": match &r.overall {
            Some(Overall::Stored { stored: s, within }) => json!({"format": s.format, "parameters": s.which.name(), "within_precision": within}),
            _ => Value::Null,
        },
        "overall_some_inputs": match &r.overall {
            Some(Overall::SomeInputs { variant, passed }) => json!({"variant": variant, "passed": passed}),
            _ => Value::Null,
        },
        "overall_several": match &r.overall {
            Some(Overall::Several(names)) => json!(names),
            _ => Value::Null,
        },
        "overall_regions": match &r.overall {
            Some(Overall::Regions { causal, future }) => json!({"causal": causal, "future": future}),
            _ => Value::Null,
        },
        "overall_loosely_explained": loosely_explained(r),
        "overall_may_declare": may_declare(r).map(FutureKeys::name),
        "overall_gradients": gradients,
        "overall_gradients_nan": matches!(r.overall, Some(Overall::Gradients { nan: true, .. })),
        "overall_gradients_layout": matches!(r.overall, Some(Overall::Gradients { layout: true, .. })),
        "tolerated_variants": r.tolerated,
        "unchecked_flags": r.unchecked,
        "future_keys_unchecked": r.future_unchecked,
        "positions_from_square": r.positions_from_square,
        "gradients_unchecked": unchecked(&r.gradients_unchecked),
        "bias_unchecked": unchecked(&r.bias_unchecked),
        "adapter_broken": broken,
        "glue_found": glue_found,
        "cases": cases,
    });
    // Beside the rest rather than in it: one more key exceeds `json!`'s recursion limit.
    report["implementation_notes"] = Value::Array(notes);
    report["glue_found_partly"] = glue_found_partly;
    // [proto.hello]: what it said of the module across calls.
    report["state"] = Value::String(r.capabilities.state.name().into());
    report["unserved"] = Value::Array(
        r.unserved
            .iter()
            .map(|u| json!({"kind": u.kind, "encoding": u.encoding, "cases": u.cases, "families": u.families}))
            .collect(),
    );
    report
}

/// `{"encoding", "cases", "reason"}` per encoding a kind of whose cases went unchecked.
fn unchecked(list: &[crate::coverage::Unchecked]) -> Vec<serde_json::Value> {
    list.iter()
        .map(|u| {
            serde_json::json!({
                "encoding": u.encoding,
                "cases": u.cases,
                "reason": u.reason,
            })
        })
        .collect()
}

/// `{"clamped": 511}` or `{"rounded": "float16"}`: how a module held the positions.
fn held_json(held: &crate::diagnose::HeldPositions) -> Value {
    match held {
        crate::diagnose::HeldPositions::Clamped(last) => json!({"clamped": last}),
        crate::diagnose::HeldPositions::Rounded(format) => json!({"rounded": format}),
    }
}
