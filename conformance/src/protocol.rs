//! The JSON-lines wire format between the harness and an external implementation.
//!
//! Reading is defensive: every malformed line becomes a message for a failed case, never a
//! panic (the protocol reader is a fuzz target). spec: [proto.framing], [proto.hello],
//! [proto.request], [proto.reply], [proto.numbers]

use std::collections::BTreeMap;

use serde_json::{json, Map, Number, Value};

use crate::implementation::{
    Capabilities, FutureKeys, Placement, Positions, Reply, Request, State,
};
use crate::vectors::format::Tensor;
use crate::vectors::yaml::Node;

/// The protocol version this harness speaks. spec: [proto.hello]
pub const VERSION: i64 = 1;

/// A number on the wire: a JSON number, or `"nan"`, `"inf"`, `"-inf"` for the values JSON
/// cannot write. spec: [proto.numbers]
pub fn number(v: f64) -> Value {
    match Number::from_f64(v) {
        Some(n) => Value::Number(n),
        None if v.is_nan() => Value::String("nan".into()),
        None if v > 0.0 => Value::String("inf".into()),
        None => Value::String("-inf".into()),
    }
}

/// Reads a wire number. spec: [proto.numbers]
pub fn read_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "nan" => Some(f64::NAN),
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// A vector-tree node as JSON.
pub fn to_json(n: &Node) -> Value {
    match n {
        Node::Map(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect::<Map<_, _>>(),
        ),
        Node::Seq(s) => Value::Array(s.iter().map(to_json).collect()),
        Node::Str(s) => Value::String(s.clone()),
        Node::Int(i) => json!(i),
        Node::Float(f) => number(*f),
        Node::Bool(b) => Value::Bool(*b),
    }
}

/// The harness's first line, with the seconds a reply may take (`--timeout`), which an
/// implementation making checks of its own beside a case's output budgets them by.
/// spec: [proto.hello]
pub fn hello(suite_version: &str, timeout: std::time::Duration) -> String {
    json!({
        "type": "hello",
        "protocol": VERSION,
        "suite_version": suite_version,
        "timeout_s": timeout.as_secs_f64(),
    })
    .to_string()
}

/// The line that asks for one case: inputs only. spec: [proto.request]
pub fn request(r: &Request) -> String {
    json!({
        "type": "case",
        "id": r.id,
        "kind": r.kind.name(),
        "dtype": r.dtype,
        "outputs": r.outputs,
        "encoding": to_json(&r.encoding.to_node()),
        "inputs": to_json(&r.inputs.to_node()),
    })
    .to_string()
}

/// The harness's last line.
pub fn bye() -> String {
    json!({"type": "bye"}).to_string()
}

fn parse_object(line: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("the line is JSON but not an object".into()),
        Err(e) => {
            let hint = if line.contains("NaN") || line.contains("Infinity") {
                " (bare NaN/Infinity are not JSON: write \"nan\", \"inf\", \"-inf\")"
            } else if !line.trim_start().starts_with(['{', '[']) {
                // Most often a log line: a `print` at import, or a progress message.
                " (standard output carries the protocol and nothing else [proto.framing]: \
                 write logs to standard error; in Python, call \
                 `fire_conformance.kit.reserve_stdout()` before anything prints, and every \
                 print goes there)"
            } else {
                ""
            };
            Err(format!("invalid JSON: {e}{hint}: {}", excerpt(line)))
        }
    }
}

/// The first 120 characters of a line, for messages.
pub fn excerpt(line: &str) -> String {
    let cut: String = line.chars().take(120).collect();
    if cut.len() < line.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

fn strings(v: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match v {
        None => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("`{what}` must be a list of strings"))
            })
            .collect(),
        Some(_) => Err(format!("`{what}` must be a list of strings")),
    }
}

/// The keys a hello line may have, and those of its `conventions`. spec: [proto.hello]
const HELLO_KEYS: [&str; 8] = [
    "type",
    "protocol",
    "name",
    "families",
    "dtypes",
    "conventions",
    "positions",
    "state",
];
const CONVENTION_KEYS: [&str; 2] = ["future_keys", "placement"];

/// Refuses a key the protocol does not define, naming the one it was probably meant to be: read
/// as absent, a misspelt `dtype` or `future_key` would have had the run graded under a default
/// the implementation did not declare. spec: [proto.hello]
fn known_keys(m: &Map<String, Value>, known: &[&str], within: &str) -> Result<(), String> {
    let Some(unknown) = m.keys().find(|k| !known.contains(&k.as_str())) else {
        return Ok(());
    };
    let nearest = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(unknown, k), k))
        .min()
        .filter(|(d, _)| *d <= 2)
        .map_or(String::new(), |(_, k)| format!(" (did you mean `{k}`?)"));
    Err(format!(
        "{within}: unknown key `{unknown}`{nearest}; the protocol defines {}",
        known
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Reads the implementation's handshake. spec: [proto.hello]
pub fn parse_hello(line: &str) -> Result<Capabilities, String> {
    let m = parse_object(line)?;
    if m.get("type").and_then(Value::as_str) != Some("hello") {
        return Err(format!("expected a hello line, got: {}", excerpt(line)));
    }
    known_keys(&m, &HELLO_KEYS, "hello")?;
    match m.get("protocol").and_then(Value::as_i64) {
        Some(VERSION) => {}
        other => {
            return Err(format!(
                "protocol version {other:?}; this harness speaks {VERSION}"
            ))
        }
    }
    let name = m
        .get("name")
        .and_then(Value::as_str)
        .ok_or("hello needs a `name`")?
        .to_owned();
    // Absent, a list has its default; present, it says what the implementation computes, and
    // an empty one would say nothing (read as "all", it failed the cases of families the
    // implementation never meant to answer).
    let listed = |key: &str, default: &str| -> Result<Vec<String>, String> {
        let v = strings(m.get(key), key)?;
        match (m.contains_key(key), v.is_empty()) {
            (true, true) => Err(format!(
                "hello: `{key}` is empty; list what the implementation computes, or leave it out for the default ({default})"
            )),
            (false, _) => Ok(vec![default.to_owned()]),
            (true, false) => Ok(v),
        }
    };
    let families = listed("families", "*")?;
    let dtypes = listed("dtypes", "f64")?;
    let conv = match m.get("conventions") {
        None => None,
        Some(Value::Object(c)) => {
            known_keys(c, &CONVENTION_KEYS, "hello: `conventions`")?;
            Some(c)
        }
        Some(_) => return Err("hello: `conventions` must be an object".into()),
    };
    // A declaration of another type is refused, not read as the default it did not say.
    let text = |v: Option<&Value>, key: &str| -> Result<Option<String>, String> {
        match v {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("hello: `{key}` must be a string, got {other}")),
        }
    };
    let get = |k: &str| text(conv.and_then(|c| c.get(k)), k);
    let future_keys = match get("future_keys")?.as_deref() {
        None => FutureKeys::default(),
        Some(s) => FutureKeys::parse(s).ok_or_else(|| {
            format!("unknown future_keys `{s}` (mirrored, zero, masked, negated)")
        })?,
    };
    let placement = match get("placement")?.as_deref() {
        None => Placement::default(),
        Some(s) => Placement::parse(s)
            .ok_or_else(|| format!("unknown placement `{s}` (after-scaling, before-scaling)"))?,
    };
    let positions = match text(m.get("positions"), "positions")?.as_deref() {
        None => Positions::default(),
        Some(s) => {
            Positions::parse(s).ok_or_else(|| format!("unknown positions `{s}` (lists, square)"))?
        }
    };
    let state = match text(m.get("state"), "state")?.as_deref() {
        None => State::default(),
        Some(s) => {
            State::parse(s).ok_or_else(|| format!("unknown state `{s}` (fresh, stepped)"))?
        }
    };
    Ok(Capabilities {
        name,
        families,
        dtypes,
        future_keys,
        placement,
        positions,
        state,
    })
}

fn tensor(name: &str, v: &Value) -> Result<Tensor, String> {
    let m = v
        .as_object()
        .ok_or_else(|| format!("output `{name}` must be an object with shape and data"))?;
    let shape = m
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("output `{name}` has no `shape` list"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| format!("output `{name}`: shape entries must be non-negative integers"))?;
    let data = m
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("output `{name}` has no flat `data` list"))?
        .iter()
        .map(read_number)
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| format!("output `{name}`: data must be numbers or \"nan\"/\"inf\"/\"-inf\" (a flat, row-major list)"))?;
    let t = Tensor::new(shape, data);
    if let Some(wrong) = t.length_mismatch() {
        return Err(format!("output `{name}`: {wrong}"));
    }
    Ok(t)
}

/// A result line as read: the case it answers, the reply, and the implementation's note on how
/// it answered. spec: [proto.reply]
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The case id it echoes.
    pub id: String,
    /// What it answered.
    pub reply: Reply,
    /// Its `note`, one line (whitespace runs, newlines included, read as one space).
    pub note: Option<String>,
}

/// The longest note a report prints, in characters: a note is a line for a reader, not a log.
pub const NOTE_CHARS: usize = 600;

/// Reads one reply line for case `id`: the reply and its note. Anything malformed is a
/// [`Reply::Broken`] with the reason (and no note). spec: [proto.reply]
pub fn parse_reply(line: &str, id: &str) -> (Reply, Option<String>) {
    match parse_result(line) {
        Err(e) => (Reply::Broken(e), None),
        Ok(a) if a.id != id => (
            Reply::Broken(format!(
                "reply for case `{}` while `{id}` was asked (replies must answer the current case)",
                a.id
            )),
            None,
        ),
        Ok(a) => (a.reply, a.note),
    }
}

/// A result's `note`: absent, or a string made one line and cut to [`NOTE_CHARS`]; anything else
/// is refused, as a misspelt field would be read as absent. spec: [proto.reply]
fn note(m: &Map<String, Value>) -> Result<Option<String>, String> {
    match m.get("note") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let line = s.split_whitespace().collect::<Vec<_>>().join(" ");
            Ok(match line.chars().count() {
                0 => None,
                n if n > NOTE_CHARS => {
                    Some(line.chars().take(NOTE_CHARS - 1).chain(['…']).collect())
                }
                _ => Some(line),
            })
        }
        Some(_) => Err("a result's `note` must be a string".into()),
    }
}

/// Reads a result line: its id, reply and note. spec: [proto.reply]
pub fn parse_result(line: &str) -> Result<Answer, String> {
    let m = parse_object(line)?;
    if m.get("type").and_then(Value::as_str) != Some("result") {
        return Err(format!("expected a result line, got: {}", excerpt(line)));
    }
    let id = m
        .get("id")
        .and_then(Value::as_str)
        .ok_or("a result needs a string `id`")?
        .to_owned();
    let note = note(&m)?;
    // A message or reason that is not a string is still what the implementation said: shown as
    // the JSON it sent, not dropped.
    let text = |k: &str| match m.get(k) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let reply = match m.get("status").and_then(Value::as_str) {
        Some("output") => {
            let outs = m
                .get("outputs")
                .and_then(Value::as_object)
                .ok_or("an output result needs an `outputs` object")?;
            let parsed: Result<BTreeMap<String, Tensor>, String> = outs
                .iter()
                .map(|(k, v)| Ok((k.clone(), tensor(k, v)?)))
                .collect();
            // A malformed output belongs to its case: fail that case, not the whole stream.
            parsed.map_or_else(Reply::Broken, Reply::Output)
        }
        Some("skipped") => match m.get("unsupported").and_then(Value::as_str) {
            Some("dtype") => Reply::UnsupportedDtype(text("reason")),
            Some(other) => {
                return Err(format!(
                    "unknown `unsupported` {other:?} in a skipped result (dtype)"
                ))
            }
            None => Reply::Skipped(text("reason")),
        },
        Some("errored") => match m.get("cause").and_then(Value::as_str) {
            Some("module") => Reply::Mistake(text("message")),
            Some(other) => {
                return Err(format!(
                    "unknown `cause` {other:?} in an errored result (module)"
                ))
            }
            None => Reply::Errored(text("message")),
        },
        other => {
            return Err(format!(
                "unknown status {other:?} (output, skipped, errored)"
            ))
        }
    };
    Ok(Answer { id, reply, note })
}

/// A result line, as an implementation (or a results file) writes it.
pub fn result_line(id: &str, reply: &Reply) -> String {
    match reply {
        Reply::Output(outs) => {
            let outputs: Map<String, Value> = outs
                .iter()
                .map(|(k, t)| (k.clone(), json!({"shape": t.shape, "data": t.data.iter().map(|&v| number(v)).collect::<Vec<_>>()})))
                .collect();
            json!({"type": "result", "id": id, "status": "output", "outputs": outputs}).to_string()
        }
        Reply::Skipped(r) => {
            json!({"type": "result", "id": id, "status": "skipped", "reason": r}).to_string()
        }
        Reply::UnsupportedDtype(r) => json!({
            "type": "result", "id": id, "status": "skipped", "reason": r, "unsupported": "dtype"
        })
        .to_string(),
        Reply::Mistake(m) => json!({
            "type": "result", "id": id, "status": "errored", "message": m, "cause": "module"
        })
        .to_string(),
        Reply::Errored(m) | Reply::Broken(m) => {
            json!({"type": "result", "id": id, "status": "errored", "message": m}).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `errored` reply with `"cause": "module"` is a mistake the glue found, kept apart from
    /// errors (it never makes the adapter broken), and written back the same; another cause is
    /// refused rather than read as a plain error. spec: [proto.reply]
    #[test]
    fn an_errored_reply_caused_by_the_module_is_a_mistake() {
        let line = r#"{"type": "result", "id": "a", "status": "errored", "message": "m", "cause": "module"}"#;
        let reply = parse_result(line).unwrap().reply;
        assert!(matches!(&reply, Reply::Mistake(m) if m == "m"), "{reply:?}");
        assert_eq!(
            parse_result(&result_line("a", &reply)).unwrap().reply,
            reply
        );
        let plain = r#"{"type": "result", "id": "a", "status": "errored", "message": "m"}"#;
        assert!(matches!(
            parse_result(plain).unwrap().reply,
            Reply::Errored(_)
        ));
        let other = r#"{"type": "result", "id": "a", "status": "errored", "message": "m", "cause": "glue"}"#;
        assert!(parse_result(other).unwrap_err().contains("unknown `cause`"));
    }

    /// A message that is not a string is shown as the JSON the implementation sent, not
    /// dropped (an errored case once read "errored on a valid case: " and nothing else).
    #[test]
    fn a_message_that_is_not_a_string_is_kept_as_its_json() {
        let line = r#"{"type": "result", "id": "a", "status": "errored", "message": {"code": 7}}"#;
        let reply = parse_result(line).unwrap().reply;
        assert!(
            matches!(&reply, Reply::Errored(m) if m == r#"{"code":7}"#),
            "{reply:?}"
        );
        let skip = r#"{"type": "result", "id": "a", "status": "skipped", "reason": null}"#;
        assert!(matches!(parse_result(skip).unwrap().reply, Reply::Skipped(m) if m.is_empty()));
    }

    /// A result's `note` is read as one line and cut to [`NOTE_CHARS`], on any status; absent,
    /// null or blank is no note; a note of another type makes the line unreadable rather than
    /// being dropped; a broken reply carries none. spec: [proto.reply]
    #[test]
    fn a_note_is_one_line_of_text_on_any_result() {
        let noted = |status: &str, note: &str| {
            parse_result(&format!(
                r#"{{"type": "result", "id": "a", {status}, "note": {note}}}"#
            ))
        };
        let output = r#""status": "output", "outputs": {}"#;
        let a = noted(output, r#""read `b1`\n  as\tmlp.0.bias ""#).unwrap();
        assert_eq!(a.note.as_deref(), Some("read `b1` as mlp.0.bias"));
        assert_eq!(a.reply, Reply::Output(BTreeMap::new()));
        for status in [
            r#""status": "skipped", "reason": "r""#,
            r#""status": "errored", "message": "m""#,
            r#""status": "errored", "message": "m", "cause": "module""#,
        ] {
            assert_eq!(noted(status, r#""n""#).unwrap().note.as_deref(), Some("n"));
        }
        for none in ["null", r#"" \n ""#] {
            assert_eq!(noted(output, none).unwrap().note, None);
        }
        let long = noted(output, &format!("\"{}\"", "x".repeat(2 * NOTE_CHARS))).unwrap();
        let cut = long.note.unwrap();
        assert_eq!(cut.chars().count(), NOTE_CHARS);
        assert!(cut.ends_with('…'));
        for wrong in ["1", r#"["n"]"#, r#"{"n": 1}"#] {
            assert!(noted(output, wrong)
                .unwrap_err()
                .contains("`note` must be a string"));
        }
        let other =
            r#"{"type": "result", "id": "b", "status": "skipped", "reason": "r", "note": "n"}"#;
        assert!(matches!(parse_reply(other, "a"), (Reply::Broken(_), None)));
        assert_eq!(parse_reply(other, "b").1.as_deref(), Some("n"));
    }

    fn hello(extra: &str) -> Result<Capabilities, String> {
        parse_hello(&format!(
            r#"{{"type": "hello", "protocol": 1, "name": "x"{extra}}}"#
        ))
    }

    /// Absent lists and declarations take their defaults; a present but empty list, or a
    /// declaration of another type, is refused rather than read as the default it did not say
    /// (`families: []` had been read as every family, failing the cases of those the
    /// implementation never meant to answer); so is a key the protocol does not define (a
    /// misspelt `dtype` had been ignored, the run graded at f64). spec: [proto.hello]
    #[test]
    fn a_malformed_hello_is_refused_and_an_absent_field_defaulted() {
        let c = hello("").unwrap();
        assert_eq!(
            (c.families, c.dtypes),
            (vec!["*".into()], vec!["f64".into()])
        );
        for (extra, said) in [
            (r#", "families": []"#, "`families` is empty"),
            (r#", "dtypes": []"#, "`dtypes` is empty"),
            (
                r#", "conventions": ["masked"]"#,
                "`conventions` must be an object",
            ),
            (
                r#", "conventions": {"future_keys": ["masked"]}"#,
                "`future_keys` must be a string",
            ),
            (
                r#", "conventions": {"placement": 1}"#,
                "`placement` must be a string",
            ),
            (r#", "positions": true"#, "`positions` must be a string"),
            (
                r#", "state": "kept""#,
                "unknown state `kept` (fresh, stepped)",
            ),
            (
                r#", "state": "unsaid""#,
                "unknown state `unsaid` (fresh, stepped)",
            ),
            (
                r#", "dtype": ["f32"]"#,
                "hello: unknown key `dtype` (did you mean `dtypes`?)",
            ),
            (
                r#", "conventions": {"future_key": "zero"}"#,
                "hello: `conventions`: unknown key `future_key` (did you mean `future_keys`?); \
                 the protocol defines `future_keys`, `placement`",
            ),
            (r#", "vendor": "acme""#, "hello: unknown key `vendor`; the"),
        ] {
            let e = hello(extra).unwrap_err();
            assert!(e.contains(said), "{extra}: {e}");
        }
        let c =
            hello(r#", "conventions": {"future_keys": "masked"}, "positions": "square""#).unwrap();
        assert_eq!(c.future_keys, FutureKeys::Masked);
        assert_eq!(c.positions, Positions::Square);
        assert_eq!(c.state, State::Unsaid);
        assert_eq!(hello(r#", "state": "fresh""#).unwrap().state, State::Fresh);
        assert_eq!(
            hello(r#", "state": "stepped""#).unwrap().state,
            State::Stepped
        );
    }
}
