//! Snapshots of the human report, for a passing and a failing implementation: the report is the
//! interface a newcomer reads first, so its shape is reviewed like code.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::implementation::{Capabilities, Implementation, Reply, Request};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::implementations::variant::Mistaken;
use fire_conformance::report::text;
use fire_conformance::runner::{self, Options, Overall};
use fire_conformance::vectors::format::Kind;
use fire_conformance::vectors::load;
use fire_reference::variants;

/// The suite's manifest hash changes with every regeneration; the report's shape does not.
fn redacted(text: String) -> String {
    match text.find("(manifest ") {
        Some(at) => {
            let end = text[at..].find(')').map_or(text.len(), |e| at + e + 1);
            format!("{}(manifest <hash>){}", &text[..at], &text[end..])
        }
        None => text,
    }
}

fn options() -> Options {
    Options {
        run: vec![
            "fire/depth/*".into(),
            "edge/positions/query-zero".into(),
            "invalid/inputs/empty-*".into(),
        ],
        diagnose: true,
        ..Options::default()
    }
}

#[test]
fn report_of_a_passing_implementation() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let report = runner::run(&suite, &mut Reference, &options()).unwrap();
    insta::assert_snapshot!(redacted(text::render(&report, true)));
}

#[test]
fn report_of_a_failing_implementation() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let v = variants::find("one-based-positions").unwrap();
    let report = runner::run(&suite, &mut Mistaken(v), &options()).unwrap();
    insta::assert_snapshot!(redacted(text::render(&report, false)));
}

/// The reference with the gradient of `c` doubled: every bias is right, and only gradient cases
/// can fail.
struct WrongGradient;

impl Implementation for WrongGradient {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match Reference.run(r) {
            Reply::Output(mut out) if r.kind == Kind::Vjp => {
                for v in &mut out.get_mut("c").unwrap().data {
                    *v *= 2.0;
                }
                Reply::Output(out)
            }
            other => other,
        }
    }
}

#[test]
fn report_of_an_implementation_with_wrong_gradients() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let options = Options {
        run: vec![
            "fire/depth/*".into(),
            "fire-grad/vjp/default-init-square-6".into(),
        ],
        diagnose: true,
        ..Options::default()
    };
    let report = runner::run(&suite, &mut WrongGradient, &options).unwrap();
    assert_eq!(
        report.overall,
        Some(Overall::Gradients {
            params: vec!["c".into()],
            nan: false,
            layout: false,
        })
    );
    insta::assert_snapshot!(redacted(text::render(&report, false)));
}
