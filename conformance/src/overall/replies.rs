//! The run-level verdicts read off the replies alone, before any diagnosis: an adapter that
//! errored on every valid case ([`Overall::AdapterBroken`]), and failures the glue's own checks
//! found ([`Overall::GlueFound`]). spec: [proto.reply], [proto.report]

use std::collections::BTreeMap;

use super::{GlueFinding, Overall};
use crate::runner::{Outcome, Question, Status};

/// What kind of finding a glue's message is: the error type it starts with (`XMisused: …`),
/// else the whole message.
fn kind_of(message: &str) -> &str {
    match message.split_once(": ") {
        Some((kind, _))
            if !kind.is_empty()
                && kind
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '.') =>
        {
            kind
        }
        _ => message,
    }
}

/// What the glue found ([`GlueFinding`]) on the failed value cases of `outcomes` that are among
/// `mistakes` (indices into `outcomes`, with the glue's message); `None` where none is.
pub(crate) fn glue_found(
    outcomes: &[Outcome],
    mistakes: &[(usize, String)],
) -> Option<GlueFinding> {
    let failed: Vec<usize> = (0..outcomes.len())
        .filter(|&n| {
            outcomes[n].question == Question::Values && outcomes[n].status == Status::Failed
        })
        .collect();
    let found: Vec<&str> = mistakes
        .iter()
        .filter(|(i, _)| failed.contains(i))
        .map(|(_, m)| m.as_str())
        .collect();
    let mut freq: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &found {
        *freq.entry(kind_of(m)).or_default() += 1;
    }
    // The most frequent kind; of kinds as frequent, the first found.
    let count = freq.values().copied().max()?;
    let message = *found.iter().find(|m| freq[kind_of(m)] == count)?;
    let kind = kind_of(message);
    Some(GlueFinding {
        message: message.to_owned(),
        count,
        same: found
            .iter()
            .filter(|m| kind_of(m) == kind)
            .all(|m| *m == message),
        found: found.len(),
        failed: failed.len(),
    })
}

/// Glue that cannot call the module errors on every case, valid or not, and its rejections of
/// invalid cases then prove nothing. When every valid case that ran errored or broke, the run is
/// an adapter failure; otherwise an invalid case rejected with an error that some valid case
/// also got is inconclusive. spec: [vec.invalid], [proto.report]
pub(crate) fn broken_adapter(
    outcomes: &mut [Outcome],
    errors: &[(usize, String)],
) -> Option<Overall> {
    let message = |n: usize| {
        errors
            .iter()
            .find(|(i, _)| *i == n)
            .map(|(_, m)| m.as_str())
    };
    let valid_ran: Vec<usize> = (0..outcomes.len())
        .filter(|&n| outcomes[n].question == Question::Values && outcomes[n].profile.is_some())
        .filter(|&n| !matches!(outcomes[n].status, Status::Skipped))
        .collect();
    let valid_errors: Vec<&str> = valid_ran.iter().filter_map(|&n| message(n)).collect();
    let all_broken = !valid_ran.is_empty() && valid_errors.len() == valid_ran.len();
    for (n, o) in outcomes.iter_mut().enumerate() {
        if o.question != Question::Validation || o.status != Status::Passed {
            continue;
        }
        let same = message(n).is_some_and(|m| valid_errors.contains(&m));
        if all_broken || same {
            o.status = Status::Inconclusive;
            o.details.push(if all_broken {
                "not assessed: every valid case errored too, so this rejection says nothing about validation".into()
            } else {
                "not assessed: a valid case errored with the same message, so this rejection says nothing about validation".into()
            });
        }
    }
    if !all_broken {
        return None;
    }
    let mut freq: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &valid_errors {
        *freq.entry(m).or_default() += 1;
    }
    let (error, count) = freq.into_iter().max_by_key(|(_, c)| *c).unwrap_or(("", 0));
    Some(Overall::AdapterBroken {
        error: error.to_owned(),
        count,
        ran: valid_ran.len(),
    })
}
