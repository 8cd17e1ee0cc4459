//! Runs a suite against one implementation: selection, grading, xfails, diagnosis, and the two
//! verdicts (values and validation). spec: [proto.request], [proto.reply], [proto.report],
//! [num.profiles]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::compare::{self, Profile};
use crate::conventions::unchecked_under;
use crate::coverage;
use crate::diagnose::{self, Finding};
use crate::error::{Error, Result};
pub use crate::grade::{acceptable_for, expected_for, judge};
use crate::implementation::{Capabilities, FutureKeys, Implementation, Reply, Request};
use crate::vectors::format::{Case, Kind, Tensor, Verdict};
use crate::vectors::load::Suite;

/// How a case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Matched (or an invalid case was rejected).
    Passed,
    /// Did not.
    Failed,
    /// Not run: unsupported, too precise for the dtype, or skipped by the implementation.
    Skipped,
    /// Failed as the `--xfails` file expects (counted with the skipped).
    XFailed,
    /// An invalid case was rejected, but with the very error that valid cases got too, so the
    /// rejection shows nothing about validation (counted with the skipped).
    Inconclusive,
}

/// The two questions a run answers. spec: [proto.report]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Question {
    /// Are the numbers right? Every valid case: bias, attention, gradients.
    Values,
    /// Are invalid inputs rejected? The `invalid` cases.
    Validation,
}

impl Question {
    /// The question a case asks.
    pub fn of(result: Verdict) -> Self {
        match result {
            Verdict::Valid => Question::Values,
            Verdict::Invalid => Question::Validation,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Question::Values => "values",
            Question::Validation => "validation",
        }
    }
}

/// Which verdicts decide the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailOn {
    /// Values and validation (the default).
    #[default]
    Both,
    /// Values only: a correct module that accepts invalid parameters still passes.
    Values,
    /// Validation only.
    Validation,
}

impl FailOn {
    /// Whether failures of `q` count.
    pub fn counts(self, q: Question) -> bool {
        matches!(
            (self, q),
            (FailOn::Both, _)
                | (FailOn::Values, Question::Values)
                | (FailOn::Validation, Question::Validation)
        )
    }
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The case id.
    pub id: String,
    /// Values or validation.
    pub question: Question,
    /// Its clauses.
    pub clauses: Vec<String>,
    /// Its flags, by name.
    pub flags: Vec<String>,
    /// Pass, fail or skip.
    pub status: Status,
    /// The profile graded at, if it ran.
    pub profile: Option<Profile>,
    /// Why it failed or was skipped, line by line.
    pub details: Vec<String>,
    /// Diagnosis of a failing case.
    pub finding: Option<Finding>,
    /// Wall time.
    pub duration: Duration,
}

/// The run-level judgement of the values.
#[derive(Debug, Clone, PartialEq)]
pub enum Overall {
    /// Named variants consistent with every diagnosable case that ran, each explaining at least
    /// one failure (empty: no single variant does).
    Variants(Vec<&'static str>),
    /// No variant explains the failures, and every failing case passes under this convention
    /// for keys after the query, not the declared one: a declaration to fix, not the maths.
    /// spec: [conv.future]
    Convention(FutureKeys),
    /// No variant explains the failures, and every failing case is a gradient case: the forward
    /// values checked are right, the gradients of these parameters are not. spec: [grad.vjp]
    Gradients(Vec<String>),
    /// Every valid case that ran errored (or broke): the adapter, not the maths, is at fault.
    /// Holds the error common to most of them and how many valid cases ran.
    AdapterBroken {
        /// The most frequent error message.
        error: String,
        /// How many valid cases gave exactly it.
        count: usize,
        /// How many valid cases ran.
        ran: usize,
    },
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The implementation's handshake.
    pub capabilities: Capabilities,
    /// The dtype run in.
    pub dtype: String,
    /// The suite version.
    pub suite_version: String,
    /// The suite's manifest hash (which suite exactly ran).
    pub suite_hash: String,
    /// Every selected case in suite order.
    pub outcomes: Vec<Outcome>,
    /// The run-level diagnosis, when some valid case failed.
    pub overall: Option<Overall>,
    /// Tolerated variants the output matched where a case accepted an alternative value.
    pub tolerated: Vec<&'static str>,
    /// Which verdicts decide the exit status.
    pub fail_on: FailOn,
    /// The flags ([vec.flags]) that only skipped value cases carry among the cases of a kind
    /// and an encoding (for FIRE: a depth and an activation) the run graded some case of:
    /// what they mark was not checked, whatever the verdict (at bf16 most of the suite is
    /// skipped; an adapter that cannot build a 10⁶-wide square skips the large positions).
    /// Cases of what the implementation never computes (another architecture, a baseline,
    /// attention for a bias module) do not count. spec: [proto.report]
    pub unchecked: Vec<String>,
    /// How many elements of graded bias cases sit at a key after their query and went unchecked
    /// because the implementation declared `negated`: a mistake only there cannot show in this
    /// run. spec: [conv.future], [proto.report]
    pub future_unchecked: usize,
}

/// `(passed, failed, skipped)`; expected failures and inconclusive cases count as skipped.
fn tally<'a>(outcomes: impl Iterator<Item = &'a Outcome>) -> (usize, usize, usize) {
    let mut t = (0, 0, 0);
    for o in outcomes {
        match o.status {
            Status::Passed => t.0 += 1,
            Status::Failed => t.1 += 1,
            Status::Skipped | Status::XFailed | Status::Inconclusive => t.2 += 1,
        }
    }
    t
}

impl Report {
    /// `(passed, failed, skipped)` over every selected case.
    pub fn counts(&self) -> (usize, usize, usize) {
        tally(self.outcomes.iter())
    }

    /// `(passed, failed, skipped)` of one question.
    pub fn counts_of(&self, q: Question) -> (usize, usize, usize) {
        tally(self.outcomes.iter().filter(|o| o.question == q))
    }

    /// The summary line: `N passed, M failed, K skipped`.
    pub fn summary(&self) -> String {
        let (p, f, s) = self.counts();
        format!("{p} passed, {f} failed, {s} skipped")
    }

    /// The names of the variants the overall diagnosis found (empty when none or broken).
    pub fn overall_variants(&self) -> Vec<&'static str> {
        match &self.overall {
            Some(Overall::Variants(v)) => v.clone(),
            Some(Overall::Convention(_) | Overall::Gradients(_)) => vec![],
            _ => vec![],
        }
    }

    /// True when a verdict that counts is vacuous: no case matched the selection, or every
    /// selected case of a counted question was skipped (an expected failure was graded; an
    /// inconclusive rejection was not). Such a run proves nothing and must not exit 0.
    pub fn nothing_ran(&self) -> bool {
        let graded =
            |o: &Outcome| matches!(o.status, Status::Passed | Status::Failed | Status::XFailed);
        if !self.outcomes.iter().any(graded) {
            return true;
        }
        [Question::Values, Question::Validation]
            .into_iter()
            .any(|q| {
                let mut selected = self.outcomes.iter().filter(|o| o.question == q).peekable();
                self.fail_on.counts(q) && selected.peek().is_some() && !selected.any(graded)
            })
    }

    /// True when the verdicts that count (see [`FailOn`]) have a failure.
    pub fn failed(&self) -> bool {
        self.outcomes
            .iter()
            .any(|o| o.status == Status::Failed && self.fail_on.counts(o.question))
    }

    /// The process exit status this report calls for. spec: [proto.report]
    pub fn exit_code(&self) -> u8 {
        if matches!(self.overall, Some(Overall::AdapterBroken { .. })) {
            exit::ADAPTER_BROKEN
        } else if self.failed() {
            exit::FAILED
        } else if self.nothing_ran() {
            exit::NOTHING_RAN
        } else {
            exit::PASSED
        }
    }
}

/// The exit statuses of `fire-conformance run` and `check`. spec: [proto.report]
pub mod exit {
    /// Every graded case of the counted verdicts passed.
    pub const PASSED: u8 = 0;
    /// At least one counted case failed.
    pub const FAILED: u8 = 1;
    /// Usage error or unreadable input: bad flags, a malformed suite or results file, a failed
    /// `--setup`, an implementation that could not start or complete the handshake.
    pub const ERROR: u8 = 2;
    /// Every valid case that ran errored or broke: the adapter, not the maths, is at fault.
    pub const ADAPTER_BROKEN: u8 = 3;
    /// Nothing was graded: no case matched the selection, or every selected case was skipped
    /// (pytest's "no tests ran").
    pub const NOTHING_RAN: u8 = 5;
}

/// Which cases to run and how.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Run only ids matching one of these globs (all when empty).
    pub run: Vec<String>,
    /// Never run ids matching these.
    pub skip: Vec<String>,
    /// Ids expected to fail.
    pub xfails: Vec<String>,
    /// The dtype to run in (default: the implementation's first).
    pub dtype: Option<String>,
    /// Name catalogued variants on failures.
    pub diagnose: bool,
    /// Which verdicts decide the exit status.
    pub fail_on: FailOn,
}

/// A glob set; an empty list matches nothing.
pub fn globs(patterns: &[String]) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(Glob::new(p).map_err(|e| Error::Usage(format!("bad glob `{p}`: {e}")))?);
    }
    b.build()
        .map_err(|e| Error::Usage(format!("bad glob set: {e}")))
}

/// Reads an xfails file: one id glob per line, `#` comments.
pub fn read_xfails(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn family(id: &str) -> &str {
    id.split('/').next().unwrap_or(id)
}

/// One valid case that ran and gave an output: what it is, what came back, how it was graded.
struct Ran<'a> {
    outcome: usize,
    case: &'a Case,
    got: BTreeMap<String, Tensor>,
    profile: Profile,
    /// Whether some catalogued variant applies ([`diagnose::diagnosable`]).
    diagnosable: bool,
}

/// Runs every selected case of `suite` against `imp`.
pub fn run(suite: &Suite, imp: &mut dyn Implementation, opts: &Options) -> Result<Report> {
    let caps = imp.capabilities()?;
    let dtype = match &opts.dtype {
        Some(d) if caps.dtypes.contains(d) => d.clone(),
        Some(d) => {
            return Err(Error::Usage(format!(
                "dtype `{d}` is not among the implementation's {:?}",
                caps.dtypes
            )))
        }
        None => caps.dtypes.first().cloned().unwrap_or_else(|| "f64".into()),
    };
    if compare::profile(&dtype).is_none() {
        return Err(Error::Usage(format!(
            "unknown dtype `{dtype}` (known: f64, f32, bf16)"
        )));
    }
    let run = globs(&opts.run)?;
    let skip = globs(&opts.skip)?;
    let xfail = globs(&opts.xfails)?;
    let families = globs(&caps.families)?;
    let mut outcomes = Vec::new();
    let mut ran: Vec<Ran> = Vec::new();
    let mut errors: Vec<(usize, String)> = Vec::new();
    let mut future_unchecked = 0;
    for case in suite.cases() {
        if (!opts.run.is_empty() && !run.is_match(&case.id)) || skip.is_match(&case.id) {
            continue;
        }
        let start = Instant::now();
        let mut outcome = Outcome {
            id: case.id.clone(),
            question: Question::of(case.result),
            clauses: case.clauses.clone(),
            flags: case.flags.iter().map(|f| f.name().to_owned()).collect(),
            status: Status::Skipped,
            profile: None,
            details: vec![],
            finding: None,
            duration: Duration::ZERO,
        };
        if !families.is_match(family(&case.id)) {
            outcome.details.push(format!(
                "family `{}` not supported by the implementation",
                family(&case.id)
            ));
            outcomes.push(outcome);
            continue;
        }
        let Some(profile) = compare::grading(&case.profile, &dtype) else {
            outcome.details.push(format!(
                "needs profile {}; the implementation computes in {dtype}",
                case.profile
            ));
            outcomes.push(outcome);
            continue;
        };
        outcome.profile = Some(profile);
        let reply = imp.run(&Request::for_case_under(case, &dtype, caps.future_keys));
        let (status, details) = judge(case, &reply, profile, &caps);
        if let (Reply::Output(_), Some(expected)) = (&reply, expected_for(case, &caps)) {
            future_unchecked += expected
                .values()
                .map(|w| unchecked_under(case.kind, &case.inputs, w, caps.future_keys))
                .sum::<usize>();
        }
        outcome.status = status;
        outcome.details = details;
        match &reply {
            Reply::Output(got) if case.result == Verdict::Valid => ran.push(Ran {
                outcome: outcomes.len(),
                case,
                got: got.clone(),
                profile,
                diagnosable: diagnose::diagnosable(case),
            }),
            Reply::Errored(m) | Reply::Broken(m) => errors.push((outcomes.len(), m.clone())),
            _ => {}
        }
        let listed = xfail.is_match(&case.id);
        outcome.status = match (outcome.status, listed) {
            (Status::Failed, true) => Status::XFailed,
            (Status::Passed, true) => {
                outcome
                    .details
                    .push("listed in --xfails but passed: remove it from the list".into());
                Status::Failed
            }
            (s, _) => s,
        };
        outcome.duration = start.elapsed();
        outcomes.push(outcome);
    }
    let mut overall = broken_adapter(&mut outcomes, &errors);
    if overall.is_none() && opts.diagnose {
        overall = diagnose_run(&mut outcomes, &ran, &caps);
    }
    let tolerated = if opts.diagnose {
        name_tolerated(&mut outcomes, &ran, &caps)
    } else {
        vec![]
    };
    let unchecked = coverage::unchecked_flags(suite, &outcomes);
    Ok(Report {
        capabilities: caps,
        dtype,
        suite_version: suite.manifest.suite_version.clone(),
        suite_hash: suite.hash.clone(),
        outcomes,
        overall,
        tolerated,
        fail_on: opts.fail_on,
        unchecked,
        future_unchecked,
    })
}

/// Where a case passed only through its acceptable alternative, names the tolerated variant the
/// output matches, so the user learns what the implementation computes. spec: [vec.case]
fn name_tolerated(outcomes: &mut [Outcome], ran: &[Ran], caps: &Capabilities) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for r in ran {
        let o = &mut outcomes[r.outcome];
        if o.status != Status::Passed || !o.details.iter().any(|d| d.starts_with("accepted:")) {
            continue;
        }
        for v in fire_reference::variants::CATALOGUE
            .iter()
            .filter(|v| v.tolerated.is_some() && diagnose::applies(v, r.case))
        {
            let matches = diagnose::predict(v, r.case, caps).is_some_and(|p| {
                diagnose::agrees(r.case, &p, &r.got, r.profile, caps.future_keys, None)
            });
            if matches {
                o.details.push(format!(
                    "the output matches variant `{}` ({}), accepted here: {}",
                    v.name,
                    v.summary,
                    v.tolerated.unwrap_or_default()
                ));
                if !names.contains(&v.name) {
                    names.push(v.name);
                }
            }
        }
    }
    names
}

/// Glue that cannot call the module errors on every case, valid or not, and its rejections of
/// invalid cases then prove nothing. When every valid case that ran errored or broke, the run is
/// an adapter failure; otherwise an invalid case rejected with an error that some valid case
/// also got is inconclusive. spec: [vec.invalid], [proto.report]
fn broken_adapter(outcomes: &mut [Outcome], errors: &[(usize, String)]) -> Option<Overall> {
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

/// Diagnoses every failing diagnosable case, then names the variants consistent with every
/// diagnosable case that ran and explaining at least one failure; failing that, what the
/// failures have in common ([`unexplained`]). spec: [variants.catalogue]
fn diagnose_run(outcomes: &mut [Outcome], ran: &[Ran], caps: &Capabilities) -> Option<Overall> {
    let failed: Vec<bool> = ran
        .iter()
        .map(|r| matches!(outcomes[r.outcome].status, Status::Failed | Status::XFailed))
        .collect();
    if !failed.contains(&true) {
        return None;
    }
    let predicted: Vec<Vec<diagnose::Prediction>> = ran
        .iter()
        .map(|r| diagnose::predictions(r.case, caps))
        .collect();
    let mut explained: Vec<&'static str> = Vec::new();
    for ((r, p), &failing) in ran.iter().zip(&predicted).zip(&failed) {
        if failing && r.diagnosable {
            let f = diagnose::diagnose(r.case, &r.got, r.profile, caps, p);
            explained.extend(f.variants.iter().map(|v| v.name));
            explained.extend(f.closest.map(|(v, _)| v.name));
            outcomes[r.outcome].finding = Some(f);
        }
    }
    let consistent = |name: &str| {
        ran.iter()
            .zip(&predicted)
            .zip(&failed)
            .filter(|((r, _), _)| r.diagnosable)
            .all(|((r, p), &failing)| {
                match p.iter().find(|(v, _)| v.name == name) {
                    Some((_, Some(prediction))) => diagnose::consistent(
                        diagnose::distance(
                            r.case,
                            prediction,
                            &r.got,
                            r.profile,
                            caps.future_keys,
                            None,
                        ),
                        r.profile,
                    ),
                    // The variant applies but cannot evaluate the case: it explains nothing here.
                    Some((_, None)) => false,
                    // The variant does not touch this case: it predicts the reference.
                    None => !failing,
                }
            })
    };
    let mut names: Vec<&'static str> = Vec::new();
    for v in fire_reference::variants::CATALOGUE {
        if explained.contains(&v.name) && !names.contains(&v.name) && consistent(v.name) {
            names.push(v.name);
        }
    }
    if names.is_empty() {
        return Some(unexplained(outcomes, ran, &failed, caps));
    }
    Some(Overall::Variants(names))
}

/// The run's verdict when no catalogued variant explains its failures, where the failing cases
/// still have something in common: every one passes under another convention for keys after
/// the query ([`Overall::Convention`]), or every one is a gradient case ([`Overall::Gradients`]).
/// Only when every failed value case gave an output (none errored or broke).
fn unexplained(outcomes: &[Outcome], ran: &[Ran], failed: &[bool], caps: &Capabilities) -> Overall {
    let failing: Vec<&Ran> = ran
        .iter()
        .zip(failed)
        .filter(|(_, f)| **f)
        .map(|(r, _)| r)
        .collect();
    let all_failed = outcomes
        .iter()
        .filter(|o| {
            o.question == Question::Values && matches!(o.status, Status::Failed | Status::XFailed)
        })
        .count();
    if failing.is_empty() || failing.len() != all_failed {
        return Overall::Variants(vec![]);
    }
    let passes_under = |future: FutureKeys| {
        let under = Capabilities {
            future_keys: future,
            ..caps.clone()
        };
        failing
            .iter()
            .all(|r| crate::grade::differing_outputs(r.case, &r.got, r.profile, &under).is_empty())
    };
    let other = [FutureKeys::Mirrored, FutureKeys::Zero, FutureKeys::Masked]
        .into_iter()
        .filter(|f| *f != caps.future_keys)
        .find(|f| passes_under(*f));
    if let Some(f) = other {
        return Overall::Convention(f);
    }
    if failing.iter().all(|r| r.case.kind == Kind::Vjp) {
        let mut params: Vec<String> = Vec::new();
        for r in &failing {
            for name in crate::grade::differing_outputs(r.case, &r.got, r.profile, caps) {
                if !params.contains(&name) {
                    params.push(name);
                }
            }
        }
        return Overall::Gradients(params);
    }
    Overall::Variants(vec![])
}
