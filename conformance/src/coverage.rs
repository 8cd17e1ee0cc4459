//! What a run did not check: the flags only skipped value cases carry, among the cases of what
//! the implementation computes. spec: [proto.report]

use std::collections::BTreeMap;

use crate::runner::{Outcome, Question, Status};
use crate::vectors::format::{Case, Encoding};
use crate::vectors::load::Suite;

/// What an implementation computes for a case, coarsely: its kind and its encoding, FIRE's
/// with the depth and activation of f_θ (a module of one architecture skips the others').
fn domain(case: &Case) -> String {
    let mlp = |m: &crate::vectors::format::MlpParams| {
        format!(
            "depth {} {}",
            m.layers.len().saturating_sub(1),
            m.activation
        )
    };
    let encoding = match &case.encoding {
        Encoding::Fire(p) => format!("fire {}", mlp(&p.mlp)),
        Encoding::FireShared(_) => "fire-s".into(),
        Encoding::FirePerLayer(_) => "fire per layer".into(),
        Encoding::Baseline(b) => b.name.clone(),
    };
    format!("{:?} {encoding}", case.kind)
}

/// [`crate::runner::Report::unchecked`].
pub(crate) fn unchecked_flags(suite: &Suite, outcomes: &[Outcome]) -> Vec<String> {
    let cases: BTreeMap<&str, &Case> = suite.cases().map(|c| (c.id.as_str(), c)).collect();
    let values = || {
        outcomes
            .iter()
            .filter(|o| o.question == Question::Values)
            .filter_map(|o| Some((o, *cases.get(o.id.as_str())?)))
    };
    let graded: Vec<(&Outcome, &Case)> = values()
        .filter(|(o, _)| o.status != Status::Skipped)
        .collect();
    let domains: Vec<String> = graded.iter().map(|(_, c)| domain(c)).collect();
    let mut unchecked: Vec<String> = values()
        .filter(|(o, c)| o.status == Status::Skipped && domains.contains(&domain(c)))
        .flat_map(|(o, _)| o.flags.iter())
        .filter(|f| !graded.iter().any(|(o, _)| o.flags.contains(f)))
        .cloned()
        .collect();
    unchecked.sort_unstable();
    unchecked.dedup();
    unchecked
}
