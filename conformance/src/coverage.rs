//! What a run did not check: the flags only skipped value cases carry, among the cases of what
//! the implementation computes. spec: [proto.report]
//!
//! For FIRE, "what it computes" is the encoding, not one architecture of f_θ: a module of one
//! depth and activation skips the others' cases, and a condition (negative `c`, query 0, the
//! threshold boundary) that only cases of another architecture carry went unchecked for it just
//! the same. The flags that name a configuration ([`Flag::is_configuration`]: a depth, an
//! activation, an ablation, a construction) are not conditions and never count.

use std::collections::BTreeMap;

use crate::implementation::{Capabilities, Positions};
use crate::runner::{family, Outcome, Question, Status};
use crate::vectors::flags::Flag;
use crate::vectors::format::{Case, Encoding, Kind};
use crate::vectors::load::Suite;

/// A case's encoding, coarsely: FIRE's whatever the architecture of f_θ, each baseline by name.
pub(crate) fn encoding_name(case: &Case) -> String {
    match &case.encoding {
        Encoding::Fire(_) => "fire".into(),
        Encoding::FireShared(_) => "fire-s".into(),
        Encoding::FirePerLayer(_) => "fire per layer".into(),
        Encoding::Baseline(b) => b.name.clone(),
    }
}

/// What an implementation computes for a case, coarsely: its kind and its [`encoding_name`].
fn domain(case: &Case) -> String {
    format!("{:?} {}", case.kind, encoding_name(case))
}

/// An encoding one kind of whose cases the run did not check
/// ([`crate::runner::Report::gradients_unchecked`], [`crate::runner::Report::bias_unchecked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unchecked {
    /// The encoding: `fire` (whatever the architecture of f_θ), `fire-s`, `fire per layer`, or
    /// a baseline's name.
    pub encoding: String,
    /// How many of its cases of that kind the implementation skipped.
    pub cases: usize,
    /// The first skip's reason.
    pub reason: String,
}

/// Whether some value case of `kind` of the encoding named `encoding` ([`encoding_name`]) was
/// graded.
pub(crate) fn graded(suite: &Suite, outcomes: &[Outcome], encoding: &str, kind: Kind) -> bool {
    let cases: BTreeMap<&str, &Case> = suite.cases().map(|c| (c.id.as_str(), c)).collect();
    outcomes.iter().any(|o| {
        o.question == Question::Values
            && o.status != Status::Skipped
            && cases
                .get(o.id.as_str())
                .is_some_and(|c| c.kind == kind && encoding_name(c) == encoding)
    })
}

/// The encodings whose every value case of `kind` the implementation itself skipped while it
/// answered some other value case of the encoding ([`crate::runner::Report::gradients_unchecked`],
/// [`crate::runner::Report::bias_unchecked`]): `declined` holds the outcomes (indices into
/// `outcomes`) of valid cases the implementation skipped, with its reasons; cases the harness
/// skipped (a family the implementation does not list, a profile finer than its dtype) are not
/// the implementation's answer and do not count.
pub(crate) fn unchecked_kind(
    suite: &Suite,
    outcomes: &[Outcome],
    declined: &[(usize, String)],
    kind: Kind,
) -> Vec<Unchecked> {
    let cases: BTreeMap<&str, &Case> = suite.cases().map(|c| (c.id.as_str(), c)).collect();
    let case_of = |o: &Outcome| cases.get(o.id.as_str()).copied();
    let graded = |e: &str, of_kind: bool| {
        outcomes.iter().any(|o| {
            o.question == Question::Values
                && o.status != Status::Skipped
                && case_of(o).is_some_and(|c| encoding_name(c) == e && (c.kind == kind) == of_kind)
        })
    };
    let mut unchecked: Vec<Unchecked> = Vec::new();
    for (n, reason) in declined {
        let o = &outcomes[*n];
        let Some(case) = case_of(o) else {
            continue;
        };
        let e = encoding_name(case);
        if o.question != Question::Values
            || case.kind != kind
            || o.status != Status::Skipped
            || graded(&e, true)
            || !graded(&e, false)
        {
            continue;
        }
        match unchecked.iter_mut().find(|u| u.encoding == e) {
            Some(u) => u.cases += 1,
            None => unchecked.push(Unchecked {
                encoding: e,
                cases: 1,
                reason: reason.clone(),
            }),
        }
    }
    unchecked
}

/// A kind of value case none of which the run graded because every selected one needs a finer
/// profile than the run's dtype ([`crate::runner::Report::too_precise`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TooPrecise {
    /// The kind of case: `bias`, `attention` or `gradient`.
    pub kind: &'static str,
    /// How many such cases the harness skipped.
    pub cases: usize,
    /// The profiles they need, finest last.
    pub profiles: Vec<String>,
}

/// [`crate::runner::Report::too_precise`]: of the outcomes the harness skipped for their
/// profile (`skipped`, indices into `outcomes`), the kinds of value case with no graded case
/// at all. Flags are said by [`unchecked_flags`] within a kind the run graded; a kind it never
/// graded (every attention case at `bf16`) would otherwise go unsaid.
pub(crate) fn too_precise(
    suite: &Suite,
    outcomes: &[Outcome],
    skipped: &[usize],
) -> Vec<TooPrecise> {
    let cases: BTreeMap<&str, &Case> = suite.cases().map(|c| (c.id.as_str(), c)).collect();
    let kind_of = |o: &Outcome| cases.get(o.id.as_str()).map(|c| c.kind);
    let name = |k: Kind| match k {
        Kind::Bias => "bias",
        Kind::Attention => "attention",
        Kind::Vjp => "gradient",
    };
    let mut out: Vec<TooPrecise> = Vec::new();
    for kind in [Kind::Bias, Kind::Attention, Kind::Vjp] {
        let graded = outcomes.iter().any(|o| {
            o.question == Question::Values
                && o.status != Status::Skipped
                && kind_of(o) == Some(kind)
        });
        let mine: Vec<&Case> = skipped
            .iter()
            .map(|&n| &outcomes[n])
            .filter(|o| o.question == Question::Values && kind_of(o) == Some(kind))
            .filter_map(|o| cases.get(o.id.as_str()).copied())
            .collect();
        if graded || mine.is_empty() {
            continue;
        }
        let mut profiles: Vec<String> = mine.iter().map(|c| c.profile.clone()).collect();
        profiles.sort_by_key(|p| crate::compare::profile(p).map_or(0, |p| p.rank));
        profiles.dedup();
        out.push(TooPrecise {
            kind: name(kind),
            cases: mine.len(),
            profiles,
        });
    }
    out
}

/// A kind of value case of an encoding the run graded other cases of (bias or gradient cases),
/// none of which it graded because the implementation lists none of their families
/// ([`crate::runner::Report::unserved`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unserved {
    /// The kind of case: `bias` or `gradient`.
    pub kind: &'static str,
    /// The encoding: `fire` (whatever the architecture of f_θ), `fire-s`, `fire per layer`, or
    /// a baseline's name.
    pub encoding: String,
    /// How many such cases the harness skipped.
    pub cases: usize,
    /// Their families, none of which the implementation lists.
    pub families: Vec<String>,
}

/// [`crate::runner::Report::unserved`]: of the outcomes the harness skipped because the
/// implementation lists no family of theirs (`skipped`, indices into `outcomes`), the kinds of
/// value case of an encoding with no graded case of that kind while another kind of the
/// encoding was graded. A glue serving `fire`, `edge` and `invalid` is graded on FIRE's bias
/// alone: a parameter detached passes, and the run says that no gradient was checked, as it
/// says of the flags no graded case carries ([`unchecked_flags`], within a kind it graded).
pub(crate) fn unserved(suite: &Suite, outcomes: &[Outcome], skipped: &[usize]) -> Vec<Unserved> {
    let cases: BTreeMap<&str, &Case> = suite.cases().map(|c| (c.id.as_str(), c)).collect();
    let values = |o: &&Outcome| o.question == Question::Values;
    let graded: Vec<&Case> = outcomes
        .iter()
        .filter(values)
        .filter(|o| o.status != Status::Skipped)
        .filter_map(|o| cases.get(o.id.as_str()).copied())
        .collect();
    let mut out: Vec<Unserved> = Vec::new();
    // Not the attention cases: a bias module serves none, and its own output is what they
    // would check inside a layer (a bias module skipping attention leaves nothing of its own
    // unchecked, as in [`unchecked_flags`]).
    for (kind, name) in [(Kind::Bias, "bias"), (Kind::Vjp, "gradient")] {
        let mine: Vec<&Case> = skipped
            .iter()
            .map(|&n| &outcomes[n])
            .filter(values)
            .filter_map(|o| cases.get(o.id.as_str()).copied())
            .filter(|c| c.kind == kind)
            .collect();
        let mut encodings: Vec<String> = mine.iter().map(|c| encoding_name(c)).collect();
        encodings.sort();
        encodings.dedup();
        for e in encodings {
            let of_kind = |c: &Case| encoding_name(c) == e && c.kind == kind;
            let other_kind = graded
                .iter()
                .any(|c| encoding_name(c) == e && c.kind != kind);
            if graded.iter().any(|c| of_kind(c)) || !other_kind {
                continue;
            }
            let these: Vec<&Case> = mine.iter().copied().filter(|c| of_kind(c)).collect();
            let mut families: Vec<String> =
                these.iter().map(|c| family(&c.id).to_owned()).collect();
            families.sort();
            families.dedup();
            out.push(Unserved {
                kind: name,
                encoding: e,
                cases: these.len(),
                families,
            });
        }
    }
    out
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
        .filter(|f| !Flag::named(f).is_some_and(Flag::is_configuration))
        .filter(|f| !graded.iter().any(|(o, _)| o.flags.contains(f)))
        .cloned()
        .collect();
    unchecked.sort_unstable();
    unchecked.dedup();
    unchecked
}

/// The flags of cases whose position lists are not `0..n` square: what a glue computing over
/// the whole square and picking out rows and columns answers without the module seeing them.
const POSITION_LISTS: &[Flag] = &[
    Flag::KvCache,
    Flag::NonContiguous,
    Flag::Unsorted,
    Flag::RandomPositions,
];

/// [`crate::runner::Report::positions_from_square`]: of the value cases that came back with
/// outputs (`answered`, indices into `outcomes`; an errored case computed nothing).
pub(crate) fn from_square(caps: &Capabilities, outcomes: &[Outcome], answered: &[usize]) -> usize {
    if caps.positions != Positions::Square {
        return 0;
    }
    answered
        .iter()
        .map(|&n| &outcomes[n])
        .filter(|o| o.question == Question::Values && o.status != Status::Skipped)
        .filter(|o| {
            o.flags
                .iter()
                .any(|f| Flag::named(f).is_some_and(|f| POSITION_LISTS.contains(&f)))
        })
        .count()
}
