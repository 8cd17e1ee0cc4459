//! Runs a suite against one implementation: selection, grading, xfails, diagnosis, and the two
//! verdicts (values and validation). spec: [proto.request], [proto.reply], [proto.report],
//! [num.profiles]

use std::time::{Duration, Instant};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::compare::{self, Profile};
use crate::conventions::{future_keys, unchecked_under};
use crate::coverage;
use crate::diagnose::{self, Finding};
use crate::error::{Error, Result};
pub use crate::grade::{acceptable_for, expected_for, judge};
use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::overall::{broken_adapter, diagnose_run, glue_found, Ran};
pub use crate::overall::{GlueFinding, Overall};
use crate::vectors::format::{Case, Encoding, Kind, Verdict};
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

    /// Its name in reports (and in `--fail-on`).
    pub fn name(self) -> &'static str {
        match self {
            Question::Values => "values",
            Question::Validation => "validation",
        }
    }

    /// The other question.
    pub fn other(self) -> Self {
        match self {
            Question::Values => Question::Validation,
            Question::Validation => Question::Values,
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
    /// The implementation's note on its reply ([proto.reply]): printed, never graded.
    pub note: Option<String>,
    /// Wall time.
    pub duration: Duration,
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
    /// and an encoding (FIRE's whatever the architecture of f_θ) the run graded some case of:
    /// what they mark was not checked, whatever the verdict (at bf16 most of the suite is
    /// skipped; an adapter that cannot build a 10⁶-wide square skips the large positions; a
    /// two-layer module skips the one-layer cases). Cases of what the implementation never
    /// computes (a baseline, attention for a bias module) do not count, nor do the flags that
    /// name a configuration ([`crate::vectors::flags::Flag::is_configuration`]). spec: [proto.report]
    pub unchecked: Vec<String>,
    /// How many elements of graded bias cases sit at a key after their query and went unchecked
    /// because the implementation declared `negated`: a mistake only there cannot show in this
    /// run. spec: [conv.future], [proto.report]
    pub future_unchecked: usize,
    /// How many graded value cases with KV-cache, gapped, unsorted or random position lists an
    /// implementation declaring `positions: square` answered by computing the whole square and
    /// picking out rows and columns: the module's own handling of such lists was not run.
    /// spec: [proto.hello], [proto.report]
    pub positions_from_square: usize,
    /// Per encoding the run graded some value case of, where the implementation itself skipped
    /// every gradient case (a torch module returning a NumPy array, a glue without autograd):
    /// the encoding's name, how many, and the first reason. No gradient was checked there, so
    /// parameters that get no gradient, or the wrong one, pass. spec: [proto.report]
    pub gradients_unchecked: Vec<coverage::Unchecked>,
    /// Per encoding whose gradient cases the run graded, where the implementation itself
    /// skipped every bias case (an inference path that cannot compute in the dtype its autograd
    /// path does, or returns another): the bias, what the encoding is, was never graded, so the
    /// run does not pass ([`exit::NOTHING_RAN`]). spec: [proto.report]
    pub bias_unchecked: Vec<coverage::Unchecked>,
    /// The kinds of value case (bias, attention, gradient) of which the run graded none
    /// because every selected one needs a finer profile than the dtype (every attention case
    /// at `bf16`): a mistake there passes the run, which says so. spec: [num.profiles],
    /// [proto.report]
    pub too_precise: Vec<coverage::TooPrecise>,
    /// Per encoding the run graded some value case of, the kinds of value case (bias,
    /// gradient) of which it graded none because the implementation lists none of their
    /// families (a glue serving `fire`, `edge` and `invalid`: no gradient checked, so a
    /// parameter detached passes): said, as [`Report::gradients_unchecked`] is where the
    /// implementation itself skipped them. spec: [proto.hello], [proto.report]
    pub unserved: Vec<coverage::Unserved>,
    /// What the glue's own checks found where they found some failing value cases wrong but not
    /// all ([`Overall::GlueFound`] where all): said beside the diagnosis of the others, which
    /// the catalogue names from the cases the module answered. spec: [proto.reply],
    /// [proto.report]
    pub glue_found_partly: Option<GlueFinding>,
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

    /// The summary line: `N passed, M failed, K skipped`, and where `--fail-on` leaves some
    /// failures out of the exit status, how many (a passing run would read as failing).
    pub fn summary(&self) -> String {
        let (p, f, s) = self.counts();
        let line = format!("{p} passed, {f} failed, {s} skipped");
        let (left_out, flag) = match self.fail_on {
            FailOn::Both => return line,
            FailOn::Values => (Question::Validation, "values"),
            FailOn::Validation => (Question::Values, "validation"),
        };
        match self.counts_of(left_out).1 {
            0 => line,
            n => format!(
                "{line} ({n} of the failed are {} cases, not counted in the exit status: \
                 --fail-on {flag})",
                left_out.name()
            ),
        }
    }

    /// The implementation's notes ([proto.reply]), each distinct text once with how many cases
    /// carried it, in the order they first came.
    pub fn notes(&self) -> Vec<(&str, usize)> {
        let mut notes: Vec<(&str, usize)> = Vec::new();
        for note in self.outcomes.iter().filter_map(|o| o.note.as_deref()) {
            match notes.iter_mut().find(|(n, _)| *n == note) {
                Some((_, count)) => *count += 1,
                None => notes.push((note, 1)),
            }
        }
        notes
    }

    /// The names of the variants the overall diagnosis found (empty when none or broken).
    pub fn overall_variants(&self) -> Vec<&'static str> {
        match &self.overall {
            Some(Overall::Variants(v)) => v.clone(),
            Some(Overall::Regions { causal, future }) => vec![*causal, *future],
            Some(Overall::VariantAndInitial { variant, .. }) => vec![*variant],
            Some(Overall::Convention(_) | Overall::Gradients { .. }) => vec![],
            _ => vec![],
        }
    }

    /// True when a verdict that counts is vacuous: no case matched the selection, or every
    /// selected case of a counted question was skipped (an expected failure was graded; an
    /// inconclusive rejection was not). Such a run proves nothing and must not exit 0.
    pub fn nothing_ran(&self) -> bool {
        let graded =
            |o: &Outcome| matches!(o.status, Status::Passed | Status::Failed | Status::XFailed);
        !self.outcomes.iter().any(graded) || !self.ungraded().is_empty()
    }

    /// The counted verdicts that graded nothing: one whose selected cases were all skipped; or
    /// the one verdict asked for (`--fail-on values` or `validation`) with nothing graded,
    /// selected or not. A selection of value cases alone under `both` is judged on its values;
    /// one that leaves the only counted verdict empty is not a pass.
    pub fn ungraded(&self) -> Vec<Question> {
        let graded =
            |o: &Outcome| matches!(o.status, Status::Passed | Status::Failed | Status::XFailed);
        let single = self.fail_on != FailOn::Both;
        [Question::Values, Question::Validation]
            .into_iter()
            .filter(|&q| {
                let mut selected = self.outcomes.iter().filter(|o| o.question == q).peekable();
                let any = selected.peek().is_some();
                self.fail_on.counts(q) && (any || single) && !selected.any(graded)
            })
            .collect()
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
        } else if self.nothing_ran() || !self.bias_unchecked.is_empty() {
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
    /// (pytest's "no tests ran"); or an encoding's gradients were graded and none of its bias
    /// cases ([`super::Report::bias_unchecked`]).
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

/// A case's family: its id's first segment. spec: [vec.families]
pub(crate) fn family(id: &str) -> &str {
    id.split('/').next().unwrap_or(id)
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
    let mut mistakes: Vec<(usize, String)> = Vec::new();
    let mut future_unchecked = 0;
    let mut dtype_skips: Vec<(usize, bool, &Case)> = Vec::new();
    let mut declined: Vec<(usize, String)> = Vec::new();
    let mut too_precise: Vec<usize> = Vec::new();
    let mut unserved: Vec<usize> = Vec::new();
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
            note: None,
            duration: Duration::ZERO,
        };
        if !families.is_match(family(&case.id)) {
            outcome.details.push(format!(
                "family `{}` not supported by the implementation",
                family(&case.id)
            ));
            unserved.push(outcomes.len());
            outcomes.push(outcome);
            continue;
        }
        let Some(profile) = compare::grading(&case.profile, &dtype) else {
            outcome.details.push(format!(
                "needs profile {}; the implementation computes in {dtype}",
                case.profile
            ));
            too_precise.push(outcomes.len());
            outcomes.push(outcome);
            continue;
        };
        outcome.profile = Some(profile);
        let future = future_keys(case, &caps);
        let reply = imp.run(&Request::for_case_under(case, &dtype, future));
        outcome.note = imp.take_note();
        let (status, details) = judge(case, &reply, profile, &caps);
        if let (Reply::Output(_), Some(expected)) = (&reply, expected_for(case, &caps)) {
            future_unchecked += expected
                .values()
                .map(|w| unchecked_under(case.kind, &case.inputs, w, future))
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
            Reply::Mistake(m) => mistakes.push((outcomes.len(), m.clone())),
            Reply::UnsupportedDtype(m) if case.result == Verdict::Valid => {
                dtype_skips.push((outcomes.len(), xfail.is_match(&case.id), case));
                declined.push((outcomes.len(), m.clone()));
            }
            Reply::Skipped(m) if case.result == Verdict::Valid => {
                declined.push((outcomes.len(), m.clone()));
            }
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
    fail_inconsistent_dtype(&mut outcomes, &dtype_skips, &ran, &dtype);
    let mut overall = broken_adapter(&mut outcomes, &errors);
    let mut glue_found_partly = None;
    if overall.is_none() {
        match glue_found(&outcomes, &mistakes) {
            Some(f) if f.found == f.failed => overall = Some(Overall::GlueFound(f)),
            partly => glue_found_partly = partly,
        }
    }
    if overall.is_none() && opts.diagnose {
        overall = diagnose_run(&mut outcomes, &ran, &caps);
    }
    let tolerated = if opts.diagnose {
        name_tolerated(&mut outcomes, &ran, &caps)
    } else {
        vec![]
    };
    let unchecked = coverage::unchecked_flags(suite, &outcomes);
    let answered: Vec<usize> = ran.iter().map(|r| r.outcome).collect();
    let positions_from_square = coverage::from_square(&caps, &outcomes, &answered);
    let gradients_unchecked = coverage::unchecked_kind(suite, &outcomes, &declined, Kind::Vjp);
    let bias_unchecked = coverage::unchecked_kind(suite, &outcomes, &declined, Kind::Bias)
        .into_iter()
        .filter(|u| coverage::graded(suite, &outcomes, &u.encoding, Kind::Vjp))
        .collect();
    let too_precise = coverage::too_precise(suite, &outcomes, &too_precise);
    let unserved = coverage::unserved(suite, &outcomes, &unserved);
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
        positions_from_square,
        gradients_unchecked,
        bias_unchecked,
        too_precise,
        unserved,
        glue_found_partly,
    })
}

/// Which code path of an implementation a case exercises, for [`fail_inconsistent_dtype`]: the
/// kind of encoding (the baselines by name) and the kind of case. A glue may compute one
/// encoding, or its gradients, in fewer dtypes than another.
fn path(case: &Case) -> (std::mem::Discriminant<Encoding>, Option<&str>, Kind) {
    let baseline = match &case.encoding {
        Encoding::Baseline(b) => Some(b.name.as_str()),
        _ => None,
    };
    (std::mem::discriminant(&case.encoding), baseline, case.kind)
}

/// A skip for a dtype the implementation cannot compute in holds for a whole code path
/// ([`path`]: an encoding and a kind of case) or not at all: where valid cases of the same path
/// came back with outputs (`ran`), each valid case in `dtype_skips` (outcome index, listed in
/// `--xfails`, the case) fails, since a module that computes in `dtype` on some inputs and
/// raises a dtype error or returns another dtype on others has a bug on those inputs (a path
/// taken only by long inputs, say). spec: [proto.reply]
fn fail_inconsistent_dtype(
    outcomes: &mut [Outcome],
    dtype_skips: &[(usize, bool, &Case)],
    ran: &[Ran],
    dtype: &str,
) {
    for &(n, listed, case) in dtype_skips {
        let outputs = ran.iter().filter(|r| path(r.case) == path(case)).count();
        if outputs == 0 {
            continue;
        }
        let o = &mut outcomes[n];
        o.status = if listed {
            Status::XFailed
        } else {
            Status::Failed
        };
        o.details.push(format!(
            "failed: the implementation computed {outputs} other valid case(s) of this encoding and kind in {dtype}, so a dtype it cannot compute in here is a bug on this input (a code path that only some inputs take), not an unsupported dtype [proto.reply]"
        ));
    }
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
                diagnose::agrees(
                    r.case,
                    &p,
                    &r.got,
                    r.profile,
                    future_keys(r.case, caps),
                    None,
                )
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
