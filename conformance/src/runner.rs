//! Runs a suite against one implementation: selection, grading, xfails, diagnosis.
//! spec: [proto.request], [proto.reply], [num.profiles]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::compare::{self, compare, Mismatch, Profile, Shown};
use crate::conventions::adjust;
use crate::diagnose::{self, Finding};
use crate::implementation::{Capabilities, Implementation, Placement, Reply, Request};
use crate::vectors::format::{Case, Tensor, Verdict};
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
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The case id.
    pub id: String,
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
    /// Diagnosis of a failing FIRE case.
    pub finding: Option<Finding>,
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
    /// Every selected case in suite order.
    pub outcomes: Vec<Outcome>,
    /// Variants consistent with the implementation on every diagnosable case that ran (only
    /// computed when some diagnosable case failed).
    pub overall: Option<Vec<&'static str>>,
}

impl Report {
    /// `(passed, failed, skipped)`; expected failures count as skipped.
    pub fn counts(&self) -> (usize, usize, usize) {
        let n = |s: &[Status]| {
            self.outcomes
                .iter()
                .filter(|o| s.contains(&o.status))
                .count()
        };
        (
            n(&[Status::Passed]),
            n(&[Status::Failed]),
            n(&[Status::Skipped, Status::XFailed]),
        )
    }

    /// The summary line: `N passed, M failed, K skipped`.
    pub fn summary(&self) -> String {
        let (p, f, s) = self.counts();
        format!("{p} passed, {f} failed, {s} skipped")
    }
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
}

/// A glob set; an empty list matches nothing.
pub fn globs(patterns: &[String]) -> anyhow::Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(Glob::new(p).map_err(|e| anyhow::anyhow!("bad glob `{p}`: {e}"))?);
    }
    Ok(b.build()?)
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

/// Grades one reply. spec: [proto.reply], [vec.invalid], [num.compare]
pub fn judge(
    case: &Case,
    reply: &Reply,
    profile: Profile,
    caps: &Capabilities,
) -> (Status, Vec<String>) {
    match (reply, case.result) {
        (Reply::Broken(m), _) => (Status::Failed, vec![m.clone()]),
        (Reply::Skipped(r), _) => (Status::Skipped, vec![format!("skipped by the implementation: {r}")]),
        (Reply::Errored(_), Verdict::Invalid) => (Status::Passed, vec![]),
        (Reply::Errored(m), Verdict::Valid) => (Status::Failed, vec![format!("errored on a valid case: {m}")]),
        (Reply::Output(_), Verdict::Invalid) => (
            Status::Failed,
            vec!["returned an output for an invalid case; it must be rejected (reply `errored`) [num.errors]".into()],
        ),
        (Reply::Output(got), Verdict::Valid) => {
            let details = compare_outputs(case, got, profile, caps);
            (if details.is_empty() { Status::Passed } else { Status::Failed }, details)
        }
    }
}

/// The expected outputs under the implementation's declared placement.
pub fn expected_for<'a>(
    case: &'a Case,
    caps: &Capabilities,
) -> Option<&'a BTreeMap<String, Tensor>> {
    match caps.placement {
        Placement::BeforeScaling => case
            .expected_under
            .as_ref()
            .and_then(|u| u.get("placement=before-scaling"))
            .or(case.expected.as_ref()),
        Placement::AfterScaling => case.expected.as_ref(),
    }
}

fn compare_outputs(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
) -> Vec<String> {
    let mut details = Vec::new();
    let Some(expected) = expected_for(case, caps) else {
        return details;
    };
    for (name, want) in expected {
        let (want, mask) = adjust(case.kind, &case.inputs, want, caps.future_keys);
        let result = match got.get(name) {
            None => Err(Mismatch::Missing),
            Some(g) => compare(g, &want, profile, mask.as_deref()),
        };
        match result {
            Ok(()) => {}
            Err(Mismatch::Missing) => {
                details.push(format!("output `{name}` is missing from the reply"))
            }
            Err(Mismatch::Shape { want, got }) => details.push(format!(
                "output `{name}` has shape {got:?}, expected {want:?}"
            )),
            Err(Mismatch::Values {
                count,
                checked,
                worst,
                first,
            }) => {
                details.push(format!(
                    "output `{name}` {:?}: {count} of {checked} elements differ (profile {}: |got − want| ≤ {:e} + {:e} · scale {})",
                    want.shape,
                    profile.name,
                    profile.atol,
                    profile.rtol,
                    want.scale.map_or_else(|| "max|want|".into(), |s| format!("{s:.4e}"))
                ));
                details.push(format!("  worst {}", Shown(&worst, &want.shape)));
                for e in first.iter().filter(|e| e.flat != worst.flat) {
                    details.push(format!("  at    {}", Shown(e, &want.shape)));
                }
            }
        }
    }
    details
}

/// Runs every selected case of `suite` against `imp`.
pub fn run(suite: &Suite, imp: &mut dyn Implementation, opts: &Options) -> anyhow::Result<Report> {
    let caps = imp.capabilities()?;
    let dtype = match &opts.dtype {
        Some(d) if caps.dtypes.contains(d) => d.clone(),
        Some(d) => anyhow::bail!(
            "dtype `{d}` is not among the implementation's {:?}",
            caps.dtypes
        ),
        None => caps.dtypes.first().cloned().unwrap_or_else(|| "f64".into()),
    };
    if compare::profile(&dtype).is_none() {
        anyhow::bail!("unknown dtype `{dtype}` (known: f64, f32, bf16)");
    }
    let run = globs(&opts.run)?;
    let skip = globs(&opts.skip)?;
    let xfail = globs(&opts.xfails)?;
    let families = globs(&caps.families)?;
    let mut outcomes = Vec::new();
    let mut ran: Vec<(&Case, BTreeMap<String, Tensor>, Profile)> = Vec::new();
    for case in suite.cases() {
        if (!opts.run.is_empty() && !run.is_match(&case.id)) || skip.is_match(&case.id) {
            continue;
        }
        let start = Instant::now();
        let mut outcome = Outcome {
            id: case.id.clone(),
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
        let reply = imp.run(&Request::for_case(case, &dtype));
        let (status, details) = judge(case, &reply, profile, &caps);
        outcome.status = status;
        outcome.details = details;
        if let Reply::Output(got) = &reply {
            if diagnose::diagnosable(case) {
                if status == Status::Failed && opts.diagnose {
                    outcome.finding = Some(diagnose::diagnose(case, got, profile, &caps));
                }
                ran.push((case, got.clone(), profile));
            }
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
    let any_failed = outcomes
        .iter()
        .any(|o| o.status == Status::Failed && o.finding.is_some());
    let overall = (opts.diagnose && any_failed).then(|| {
        fire_reference::fire::variants::CATALOGUE
            .iter()
            .filter(|v| {
                ran.iter()
                    .all(|(c, got, p)| diagnose::explains(v, c, got, *p, &caps))
            })
            .map(|v| v.name)
            .collect()
    });
    Ok(Report {
        capabilities: caps,
        dtype,
        suite_version: suite.manifest.suite_version.clone(),
        outcomes,
        overall,
    })
}
