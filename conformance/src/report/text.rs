//! The human report: failures with their id, clauses, flags, worst element and diagnosis, then
//! the two verdicts (values, validation) and the summary line `N passed, M failed, K skipped`.
//! spec: [proto.report]

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::diagnose::describe;
use crate::implementation::State;
use crate::overall::{loosely_explained, may_declare};
use crate::runner::{GlueFinding, Outcome, Overall, Question, Report, Status};

fn tag(s: Status) -> &'static str {
    match s {
        Status::Passed => "PASS",
        Status::Failed => "FAIL",
        Status::Skipped => "SKIP",
        Status::XFailed => "XFAIL",
        Status::Inconclusive => "INCONCLUSIVE",
    }
}

/// One case's block: the status, id, clauses and flags, then its details and diagnosis.
pub fn case(out: &mut String, o: &Outcome) {
    let _ = writeln!(
        out,
        "{} {}  [{}]  flags: {}",
        tag(o.status),
        o.id,
        o.clauses.join(" "),
        o.flags.join(" ")
    );
    for d in &o.details {
        let _ = writeln!(out, "    {d}");
    }
    if let Some(note) = &o.note {
        let _ = writeln!(out, "    the implementation notes: {note}");
    }
    if let (Some(f), Some(p)) = (&o.finding, o.profile) {
        for line in describe(f, p) {
            let _ = writeln!(out, "    {line}");
        }
    }
}

/// Other initial values as a report lists them.
fn listed(values: &[crate::initial::OtherInitial]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many distinct notes the run-level lines print before pointing to `-v`.
const NOTES_SHOWN: usize = 3;

/// The implementation's notes, once per distinct text with the cases that carried it: how a glue
/// read the module is the context of every verdict, passing or failing. spec: [proto.reply]
/// How many of a glue's findings ([`GlueFinding`]) said what its message says.
fn glue_share(f: &GlueFinding) -> String {
    let which = if f.same {
        "saying"
    } else {
        // The same finding in each case's own figures: the first said.
        "finding the same, the first saying"
    };
    if f.count == f.found {
        format!("all {} {which}", f.found)
    } else {
        format!("{} cases; {} of them {which}", f.found, f.count)
    }
}

fn notes(out: &mut String, r: &Report) {
    let notes = r.notes();
    for (note, count) in notes.iter().take(NOTES_SHOWN) {
        let cases = if *count == 1 { "case" } else { "cases" };
        let _ = writeln!(out, "the implementation notes ({count} {cases}): {note}");
    }
    if notes.len() > NOTES_SHOWN {
        let _ = writeln!(
            out,
            "the implementation notes {} more distinct note(s); -v prints each case's",
            notes.len() - NOTES_SHOWN
        );
    }
}

fn verdict(r: &Report, q: Question) -> String {
    let (p, f, s) = r.counts_of(q);
    let what = match q {
        Question::Values => "bias, attention and gradient cases",
        Question::Validation => "invalid inputs, which must be rejected",
    };
    let counted = if r.fail_on.counts(q) {
        ""
    } else {
        "; not counted in the exit status"
    };
    format!(
        "{:<11} {p} passed, {f} failed, {s} skipped  ({what}{counted})",
        format!("{}:", q.name())
    )
}

/// Renders the report; `verbose` also lists passes and skips.
pub fn render(r: &Report, verbose: bool) -> String {
    let c = &r.capabilities;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fire-conformance: `{}` (dtype {}, future keys {}, placement {}) against suite {} ({})",
        c.name,
        r.dtype,
        c.future_keys.name(),
        c.placement.name(),
        r.suite_version,
        short(&r.suite_hash)
    );
    for o in &r.outcomes {
        if matches!(o.status, Status::Failed) || verbose {
            case(&mut out, o);
        }
    }
    out.push_str(&run_lines(r));
    let _ = writeln!(out, "{}", verdict(r, Question::Values));
    let _ = writeln!(out, "{}", verdict(r, Question::Validation));
    if r.nothing_ran() {
        let empty = r.ungraded();
        let _ = match empty.as_slice() {
            [q] => writeln!(
                out,
                "nothing was graded for {}: no case of it was selected, or every one was skipped ({}), so the run does not pass; `--fail-on {}` counts the other verdict alone",
                q.name(),
                skip_reason(r, Some(*q)),
                q.other().name()
            ),
            _ => writeln!(
                out,
                "nothing was graded: no case matched the selection, or every selected case was skipped{}",
                if r.outcomes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", skip_reason(r, None))
                }
            ),
        };
    }
    let _ = writeln!(out, "{}", r.summary());
    out
}

/// Why the skipped cases of `question` (every question: `None`) were skipped: the reason most of them give, with how
/// many (a module computing only in float64, run at f32, skips every case for the same reason;
/// one returning bfloat16 skips all it is asked beside the cases the suite itself skips, for
/// other reasons each), and a pointer to `-v` for the others where it accounts for less than
/// half.
fn skip_reason(r: &Report, question: Option<Question>) -> String {
    let skipped = || {
        r.outcomes
            .iter()
            .filter(|o| question.is_none_or(|q| o.question == q) && o.status == Status::Skipped)
            .map(|o| o.details.first().map(String::as_str))
    };
    let said = most_given(skipped());
    // The module's own refusal of the dtype is what to act on, even where the suite's own
    // skips (profiles finer than the run's) are more.
    let refused: Vec<&str> = skipped()
        .flatten()
        .filter(|d| d.starts_with(crate::grade::CANNOT_COMPUTE))
        .collect();
    match refused.first() {
        Some(first) if !said.contains(crate::grade::CANNOT_COMPUTE) => {
            format!("{said}; {} {first}", refused.len())
        }
        _ => said,
    }
}

/// [`skip_reason`] over each skipped case's first detail line (`None`: it gave none).
fn most_given<'a>(skips: impl Iterator<Item = Option<&'a str>>) -> String {
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total = 0;
    for reason in skips {
        total += 1;
        if let Some(d) = reason {
            *reasons.entry(d).or_default() += 1;
        }
    }
    match reasons.iter().max_by_key(|(_, n)| **n) {
        Some((reason, &n)) if 2 * n >= total => {
            let share = if n == total {
                "every one".to_owned()
            } else {
                format!("{n} of {total}")
            };
            format!("{share}: {reason}")
        }
        Some((reason, &n)) if n > 1 => {
            format!("{n} of {total}, the most for one reason: {reason}; -v lists the others")
        }
        _ => "-v lists why".to_owned(),
    }
}

/// The run-level lines between the failing cases and the verdicts: the implementation's notes,
/// the overall diagnosis, the tolerated variants, and what the run did not check or grade — one text for the report, the
/// JSON (`run_lines`) and the pytest plugin, which prints them under a failing item.
/// spec: [proto.report]
pub fn run_lines(r: &Report) -> String {
    let c = &r.capabilities;
    let mut out = String::new();
    notes(&mut out, r);
    match &r.overall {
        Some(Overall::GlueFound(f)) => {
            let _ = writeln!(
                out,
                "overall: every failing value case is one where the glue's own checks found the module wrong ({}): {}",
                glue_share(f),
                f.message
            );
        }
        Some(Overall::AdapterBroken { error, count, ran }) => {
            let _ = writeln!(
                out,
                "adapter broken: every one of the {ran} valid cases that ran errored ({count} with the same message), so no value was checked and the rejections of invalid cases prove nothing:\n    {error}"
            );
        }
        Some(Overall::Variants(v)) => {
            let _ = match v.as_slice() {
                [] => writeln!(
                    out,
                    "overall: no single catalogued variant explains every failing case"
                ),
                [one] => writeln!(
                    out,
                    "overall: the failures are explained by variant `{one}`, consistent with every diagnosable case"
                ),
                many => writeln!(
                    out,
                    "overall: each of the variants {} explains the failures and every diagnosable case",
                    many.iter()
                        .map(|v| format!("`{v}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let loose = loosely_explained(r);
            if !v.is_empty() && !loose.is_empty() {
                let _ = writeln!(
                    out,
                    "overall: on {} failing case(s) (`{}`{}) the output is near that but not within tolerance: a second, smaller difference shows there, or the same mistake computed less accurately",
                    loose.len(),
                    loose[0],
                    if loose.len() > 1 { ", …" } else { "" }
                );
            }
            if let Some(f) = may_declare(r) {
                let _ = writeln!(
                    out,
                    "overall: only keys after the query differ; if they are meant to (a causal model never reads them), declare `{f}` (`future_keys=\"{f}\"` to the kit's serve, `--future-keys {f}` to the adapters), which leaves them unchecked [conv.future]",
                    f = f.name()
                );
            }
        }
        Some(Overall::Regions { causal, future }) => {
            let _ = writeln!(
                out,
                "overall: the causal triangle follows variant `{causal}` and the keys after the query follow `{future}`, consistent with every failing case, where no single variant explains them all: two mistakes, or one that acts as `{causal}` below the diagonal and as `{future}` above it (ψ(−|i − j|) does both)"
            );
        }
        Some(Overall::Several(names)) => {
            let _ = writeln!(
                out,
                "overall: no single catalogued variant explains every failing case, but {} do between them: each failing case matches one of them, and each agrees with every passing case — a mistake each, or one that shows as each on different cases (an activation table with ReLU and GeLU swapped); the cases above say which",
                names
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            );
        }
        Some(Overall::VariantAndInitial { variant, values }) => {
            let said = listed(values);
            let _ = writeln!(
                out,
                "overall: the failures are explained by variant `{variant}` together with {said}: every failing case off [fire.defaults] matches the variant, every failing case at the spec's initial values matches it started there, and every passing case agrees with it — the mistake, and a module that starts that value elsewhere (its constructor's default, or what it makes of the value it is given)"
            );
        }
        Some(Overall::OtherInitial(values)) => {
            let said = listed(values);
            let _ = writeln!(
                out,
                "overall: every failing case is at the spec's initial values and is the reference's with {said}: the module starts with other initial values than [fire.defaults] (its constructor's defaults, or what it makes of the values it is given), and every case that sets them passes"
            );
        }
        Some(Overall::Precision(p)) => {
            let _ = writeln!(
                out,
                "overall: every failing case agrees with the reference within {p} tolerance but not at {}: a difference of that size — some of FIRE computed in {} (a distance, ψ or the normaliser cast) though {} is returned, or a mistake that small (an extra guard, a small constant added), which a run at `--dtype {p}` passes too [num.profiles]",
                r.dtype,
                if *p == "bf16" { "bfloat16 or float16" } else { p },
                r.dtype
            );
        }
        Some(Overall::Positions(held)) => {
            let _ = writeln!(out, "overall: every failing case is the reference's {held}");
        }
        Some(Overall::Stored { stored: s, within }) => {
            let also = match within {
                0 => String::new(),
                n => format!(" (or, on {n} of them, agrees with it within that precision)"),
            };
            let _ = writeln!(
                out,
                "overall: every failing case is the reference's with {s}{also}: the module holds them in {} though it computes and returns {}, so it cannot hold the values it is given (nor, in training, an optimiser's small updates); keep them in the dtype it computes in [num.profiles]",
                s.format, r.dtype
            );
        }
        Some(Overall::Carried {
            failed,
            count,
            case,
            from,
        }) => {
            let which = if count == failed {
                format!("every failing case ({count})")
            } else {
                format!("{count} of the {failed} failing cases")
            };
            let _ = writeln!(
                out,
                "overall: {which} returned exactly what the implementation returned for an earlier case with another f_θ (`{case}` repeats `{from}`): its output does not follow the parameters it is given but is carried from one call to the next — a bias cached under the length or shape alone where a new module does not reset it (a module-level dict, a class attribute, `functools.lru_cache`); in a model every layer, and every step after the first, would get the first bias computed [fire.bias]"
            );
        }
        Some(Overall::FutureOnly { gradients }) => {
            let also = match gradients {
                0 => String::new(),
                n => format!(
                    " ({n} gradient case(s) fail beside them, whose cotangent reaches those keys under `mirrored`)"
                ),
            };
            let _ = writeln!(
                out,
                "overall: every failing bias case agrees with the reference on the causal triangle (keys ≤ query) and differs only at keys after the query{also}: a module meant to mirror Appendix E there has a mistake that only shows at j > i (a bias computed on the triangle and transposed above it normalises by the key there); one that computes something else there by design may declare `negated` (`future_keys=\"negated\"` to the kit's serve, `--future-keys negated` to the adapters), which leaves those keys unchecked and asks the gradient cases for the causal keys' gradients only [conv.future]"
            );
        }
        Some(Overall::RowShift) => {
            let _ = writeln!(
                out,
                "overall: every failing case is, on the causal triangle, the expected bias plus a constant per query row: causal attention is unchanged, the bias values are not — as Press et al.'s ALiBi code (`r·j`) computes it; conformance grades the bias [attn.logits]"
            );
        }
        Some(Overall::SomeInputs { variant, passed }) => {
            let _ = writeln!(
                out,
                "overall: every failing case matches variant `{variant}`, but `{variant}` would also have changed case(s) that passed (`{passed}`): the module makes that mistake on some inputs only — one branch of its code, or a setting honoured in one place and not another"
            );
        }
        Some(Overall::Convention(f)) => {
            let _ = writeln!(
                out,
                "overall: no catalogued variant, but a declaration: every failing case is right on the causal triangle and its keys after the query follow `{f}`, not the declared `{declared}`; if that is intended, declare `{f}` (`future_keys=\"{f}\"` to the kit's serve, `--future-keys {f}` to the adapters) [conv.future]",
                f = f.name(),
                declared = c.future_keys.name()
            );
        }
        Some(Overall::Placement(p)) => {
            let _ = writeln!(
                out,
                "overall: no catalogued variant, but a declaration: every failing case is an attention case that is right with the bias added {}, not `{}` as declared; if that is what the implementation does, declare `{p}` (`placement=\"{p}\"` to the kit's serve) [attn.placement]",
                crate::diagnose::placement_words(*p),
                c.placement.name()
            );
        }
        Some(Overall::Gradients {
            params,
            nan,
            layout,
        }) => {
            let params = params
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = if *layout {
                writeln!(
                    out,
                    "overall: only gradient cases fail (every bias and attention case that ran passed), and none on its values: the gradient(s) of {params} are missing from the replies or shaped otherwise than the case's (a misspelt name; a weight as [in, out] for [out, in]): send each parameter's gradient under the case's name, in its shape [grad.layout]"
                )
            } else if *nan {
                writeln!(
                    out,
                    "overall: only gradient cases fail (every bias and attention case that ran passed): the gradient(s) of {params} are NaN, from one of two causes: a NaN somewhere in the forward pass that the output does not show (keys after the query: ψ of a negative distance, masked afterwards), which reaches every gradient through 0·NaN even where the cotangent is 0, as it does in training — compute the bias finite everywhere (ψ(|i − j|), or torch.where before the log) [grad.vjp]; or a derivative undefined at a point the forward reaches, though its value there is finite: |y| written sqrt(y²) or a norm at y = 0, or a where whose untaken branch has a NaN gradient — [grad.kinks] takes d|y|/dy = 0 at y = 0"
                )
            } else {
                writeln!(
                    out,
                    "overall: only gradient cases fail (every bias and attention case that ran passed): the gradient(s) of {params} are wrong; look for a parameter detached or frozen, one trained that [grad.layout] freezes, or a hand-written backward [grad.vjp]"
                )
            };
        }
        None => {}
    }
    if let Some(f) = &r.glue_found_partly {
        let _ = writeln!(
            out,
            "overall: {} of the {} failing value cases are ones where the glue's own checks found the module wrong ({}), which the catalogue does not diagnose: {}",
            f.found,
            f.failed,
            glue_share(f),
            f.message
        );
    }
    if !r.tolerated.is_empty() {
        let _ = writeln!(
            out,
            "note: the output matches the tolerated variant(s) {} where a case accepts either value (passing cases with -v say where)",
            r.tolerated
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    // After "adapter broken" (no value checked at all) a list of flags left unchecked would
    // suggest the others were checked.
    let broken = matches!(r.overall, Some(Overall::AdapterBroken { .. }));
    let unchecked = &r.unchecked;
    if !unchecked.is_empty() && !broken {
        let _ = writeln!(
            out,
            "not checked: no graded value case carries the flag(s) {} (only skipped ones do; what they mark, spec/vectors.md [vec.flags], is untested by this run; -v lists the skips and why)",
            unchecked.join(", ")
        );
    }
    if r.future_unchecked > 0 {
        let _ = writeln!(
            out,
            "not checked: {} bias element(s) at keys after their query, which the declared `negated` leaves out [conv.future]; a mistake that shows only there passes this run (declare `mirrored`, `zero` or `masked` to have them checked)",
            r.future_unchecked
        );
    }
    for u in &r.bias_unchecked {
        let _ = writeln!(
            out,
            "not graded: the bias of {}: the implementation skipped every one of its {} bias case(s) ({}) while it computed its gradients in {}, so the run does not pass (exit 5): rerun with the --dtype its bias computes in, or, if the module is meant to compute in {} throughout, its path without autograd has a bug [proto.report]",
            u.encoding, u.cases, u.reason, r.dtype, r.dtype
        );
    }
    for t in &r.too_precise {
        let coarsest = t.profiles.first().map_or("f32", String::as_str);
        let _ = writeln!(
            out,
            "not checked: the {} cases: all {} selected need profile {}, finer than this run's {}, so none was graded and a mistake there passes this run; a module that computes in {coarsest} is graded on them with --dtype {coarsest} [num.profiles]",
            t.kind,
            t.cases,
            t.profiles.join(" or "),
            r.dtype
        );
    }
    for u in &r.unserved {
        let shows = if u.kind == "gradient" {
            "a parameter that gets no gradient, or the wrong one"
        } else {
            "a bias the attention outputs graded here do not show"
        };
        let _ = writeln!(
            out,
            "not checked: the {} cases of {}: the implementation lists none of their families ({}; its CAPABILITIES `families`), so the harness skipped all {} and a mistake only they show ({shows}) passes this run; list the family to have them graded [proto.hello]",
            u.kind,
            u.encoding,
            u.families.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", "),
            u.cases
        );
    }
    for u in &r.gradients_unchecked {
        let _ = writeln!(
            out,
            "not checked: the gradients of {}: the implementation skipped every one of its {} gradient case(s) ({}), so parameters that get no gradient, or the wrong one, pass this run [proto.report]",
            u.encoding, u.cases, u.reason
        );
    }
    if r.positions_from_square > 0 {
        let _ = writeln!(
            out,
            "not checked: the module's own handling of position lists: {} graded case(s) with KV-cache, gapped, unsorted or random positions were computed over the whole square 0..T and their rows and columns picked out by the glue (`positions: square`), so on those cases the module was never called with only their new query rows (a glue's own decoding probes aside) [proto.hello]; a module whose forward takes the query and key positions is run on the lists themselves (the ready-made glue's `--call qk`; in a build(case) glue, hand it `case.queries` and `case.keys` and leave `positions` out of CAPABILITIES)",
            r.positions_from_square
        );
    }
    let (passed, failed, _) = r.counts_of(Question::Values);
    if r.capabilities.state == State::Fresh && passed + failed > 0 {
        let _ = writeln!(
            out,
            "not checked: the module across a parameter update: each case was computed by a module built for it (`state: fresh`), so a cache or running value that an optimiser's step leaves stale never showed [proto.hello]; in a build(case) glue, call the module once, change its parameters as a step would, then load the case's values into that module and compute (the ready-made glues do), and declare `state=\"stepped\"`"
        );
    }
    out
}

/// The first 12 hex digits of a hash, enough to tell suites apart in a report line.
pub fn short(hash: &str) -> String {
    format!("manifest {}", &hash[..hash.len().min(12)])
}

#[cfg(test)]
mod tests {
    use super::most_given;

    /// The reason most skipped cases give is named with its count: alone where it is at least
    /// half, as the most for one reason where the suite's own skips (each for a reason of its
    /// own) outnumber it, and not at all where no reason repeats.
    #[test]
    fn the_commonest_skip_reason_is_named_with_its_count() {
        let bf16 = "the module returns bfloat16 but --dtype f32 was given";
        assert_eq!(
            most_given([Some(bf16), Some(bf16)].into_iter()),
            format!("every one: {bf16}")
        );
        assert_eq!(
            most_given([Some(bf16), Some(bf16), Some("profile f64")].into_iter()),
            format!("2 of 3: {bf16}")
        );
        let mixed = [
            Some(bf16),
            Some(bf16),
            Some("a"),
            Some("b"),
            Some("c"),
            None,
        ];
        assert_eq!(
            most_given(mixed.into_iter()),
            format!("2 of 6, the most for one reason: {bf16}; -v lists the others")
        );
        assert_eq!(
            most_given([Some("a"), Some("b"), Some("c")].into_iter()),
            "-v lists why"
        );
    }
}
