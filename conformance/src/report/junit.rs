//! JUnit XML (`--junit FILE`), one testcase per case, grouped by family.

use std::fmt::Write;

use crate::runner::{Report, Status};

fn esc(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".into(),
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '"' => "&quot;".into(),
            '\'' => "&apos;".into(),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => " ".into(),
            c => c.to_string(),
        })
        .collect()
}

/// The report as a JUnit XML document.
pub fn render(r: &Report) -> String {
    let (_, failed, skipped) = r.counts();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuite name=\"fire-conformance: {}\" tests=\"{}\" failures=\"{failed}\" skipped=\"{skipped}\">",
        esc(&r.capabilities.name),
        r.outcomes.len()
    );
    for o in &r.outcomes {
        let (class, name) = o.id.split_once('/').unwrap_or(("", &o.id));
        let _ = write!(
            out,
            "  <testcase classname=\"{}\" name=\"{}\" time=\"{:.6}\">",
            esc(class),
            esc(name),
            o.duration.as_secs_f64()
        );
        let mut body = o.details.join("\n");
        if let Some(note) = &o.note {
            body.push_str("\nthe implementation notes: ");
            body.push_str(note);
        }
        if let (Some(f), Some(p)) = (&o.finding, o.profile) {
            body.push('\n');
            body.push_str(&crate::diagnose::describe(f, p).join("\n"));
        }
        let head = format!("[{}] flags: {}", o.clauses.join(" "), o.flags.join(" "));
        match o.status {
            Status::Passed => {}
            Status::Failed => {
                let _ = write!(
                    out,
                    "<failure message=\"{}\">{}\n{}</failure>",
                    esc(o.details.first().map_or("", |s| s.as_str())),
                    esc(&head),
                    esc(&body)
                );
            }
            Status::Skipped | Status::XFailed | Status::Inconclusive => {
                let _ = write!(out, "<skipped message=\"{}\"/>", esc(&body));
            }
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n");
    out
}
