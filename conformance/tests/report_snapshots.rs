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

/// A module without its output bias, driven by a glue that notes how it read the module's
/// parameters, as the ready-made glues do ([proto.reply]): one note for one-layer cases, another
/// for deeper ones, none for what it rejects.
struct Noting {
    mistaken: Mistaken,
    note: Option<String>,
}

impl Implementation for Noting {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        self.mistaken.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        let reply = self.mistaken.run(r);
        self.note = match (&reply, r.id.contains("depth-2")) {
            (Reply::Output(_), false) => Some(
                "read the module's `fc1.weight` as mlp.0.weight, `b1` as mlp.0.bias, `fc2.weight` as mlp.2.weight; no parameter of the module took mlp.2.bias".into(),
            ),
            (Reply::Output(_), true) => Some("read the module's `layers.0.weight` as mlp.0.weight".into()),
            _ => None,
        };
        reply
    }

    fn take_note(&mut self) -> Option<String> {
        self.note.take()
    }
}

/// The notes are printed with each case and once per distinct text over the run, counted, and
/// carried into the JSON; they change no verdict (the same failures as without them).
#[test]
fn report_of_an_implementation_that_notes_how_it_read_the_module() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let v = variants::find("output-bias-missing").unwrap();
    let mut noting = Noting {
        mistaken: Mistaken(v),
        note: None,
    };
    let report = runner::run(&suite, &mut noting, &options()).unwrap();
    let plain = runner::run(&suite, &mut Mistaken(v), &options()).unwrap();
    assert_eq!(report.counts(), plain.counts());
    assert_eq!(report.overall, plain.overall);
    let json = fire_conformance::report::json::render(&report);
    let notes = json["implementation_notes"].as_array().unwrap();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0]["note"]
        .as_str()
        .unwrap()
        .ends_with("took mlp.2.bias"));
    let with_note = json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["implementation_note"].is_string())
        .count();
    let counted: u64 = notes.iter().map(|n| n["cases"].as_u64().unwrap()).sum();
    assert_eq!(with_note as u64, counted);
    insta::assert_snapshot!(redacted(text::render(&report, false)));
}

/// Past three distinct notes the run-level lines count the rest and point to `-v`, so a glue
/// that notes something different on every case does not bury the verdict.
#[test]
fn many_distinct_notes_are_counted_not_listed() {
    struct EveryCase(u32);
    impl Implementation for EveryCase {
        fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
            Reference.capabilities()
        }
        fn run(&mut self, r: &Request) -> Reply {
            self.0 += 1;
            Reference.run(r)
        }
        fn take_note(&mut self) -> Option<String> {
            Some(format!("call {}", self.0))
        }
    }
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let report = runner::run(&suite, &mut EveryCase(0), &options()).unwrap();
    let lines = text::run_lines(&report);
    let noted: Vec<&str> = lines
        .lines()
        .filter(|l| l.starts_with("the implementation notes"))
        .collect();
    let ran = report.outcomes.len();
    assert_eq!(noted.len(), 4, "{lines}");
    assert_eq!(noted[0], "the implementation notes (1 case): call 1");
    assert_eq!(
        noted[3],
        format!(
            "the implementation notes {} more distinct note(s); -v prints each case's",
            ran - 3
        )
    );
}

/// An implementation that cannot compute in the run's dtype at all (a module hard-coding
/// float32 positions, run at bf16).
struct RefusesItsDtype;

impl Implementation for RefusesItsDtype {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        c.dtypes = vec!["bf16".into()];
        Ok(c)
    }

    fn run(&mut self, _: &Request) -> Reply {
        Reply::UnsupportedDtype("mat1 and mat2 must have the same dtype".into())
    }
}

/// Where nothing was graded, the module's own refusal of the dtype is named even though the
/// suite's skips (profiles finer than bf16) are more (audit 37: the line named only "needs
/// profile f32", and the module's error showed only under -v).
#[test]
fn nothing_graded_names_the_modules_refusal_of_its_dtype() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let options = Options {
        diagnose: true,
        ..Options::default()
    };
    let r = runner::run(&suite, &mut RefusesItsDtype, &options).unwrap();
    let said = text::render(&r, false);
    let line = said
        .lines()
        .find(|l| l.starts_with("nothing was graded"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(line.contains("needs profile"), "{line}");
    assert!(
        line.contains("skipped by the implementation, which cannot compute in this dtype: mat1 and mat2 must have the same dtype"),
        "{line}"
    );
}
