//! Bounded, property-based fuzzing of the same entry points as the cargo-fuzz targets
//! (`conformance/fuzz`), so CI exercises them on stable: mutated vector files and protocol lines
//! give values or errors, never panics. Crashes found by cargo-fuzz are pinned below.

#![allow(clippy::unwrap_used)] // tests may unwrap

use fire_conformance::implementations::external::Recorded;
use fire_conformance::protocol;
use fire_conformance::vectors::load;
use proptest::prelude::*;

const SAMPLE: &str = include_str!("../../vectors/invalid/inputs.yaml");
const REPLY: &str = r#"{"type": "result", "id": "a/b/c", "status": "output", "outputs": {"bias": {"shape": [1, 2], "data": [0.5, "nan"]}}}"#;
const HELLO: &str = r#"{"type": "hello", "protocol": 1, "name": "x", "dtypes": ["f32"], "conventions": {"future_keys": "zero"}}"#;

fn check_all(text: &str) {
    let _ = load::parse_file("invalid/inputs.yaml", text);
    let _ = load::parse_manifest(text);
    let _ = protocol::parse_hello(text);
    let _ = protocol::parse_result(text);
    let _ = protocol::parse_reply(text, "a/b/c");
    let _ = Recorded::parse(text);
}

/// Replaces, deletes or inserts bytes of `base` at positions drawn from `edits`.
fn mutate(base: &str, edits: &[(usize, u8, u8)]) -> String {
    let mut b = base.as_bytes().to_vec();
    for &(at, op, byte) in edits {
        if b.is_empty() {
            b.push(byte);
            continue;
        }
        let at = at % b.len();
        match op % 3 {
            0 => b[at] = byte,
            1 => {
                b.remove(at);
            }
            _ => b.insert(at, byte),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mutated_vector_files_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..8)) {
        check_all(&mutate(SAMPLE, &edits));
    }

    #[test]
    fn mutated_protocol_lines_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6)) {
        check_all(&mutate(REPLY, &edits));
        check_all(&mutate(HELLO, &edits));
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        check_all(&text);
    }
}

#[test]
fn the_unmutated_samples_parse() {
    assert!(load::parse_file("invalid/inputs.yaml", SAMPLE).is_ok());
    assert!(protocol::parse_hello(HELLO).is_ok());
    assert!(matches!(
        protocol::parse_reply(REPLY, "a/b/c").0,
        fire_conformance::implementation::Reply::Output(_)
    ));
}

/// Regression inputs: shapes whose element count overflows, deep nesting, huge numbers.
#[test]
fn regressions() {
    for text in [
        r#"{"type": "result", "id": "a", "status": "output", "outputs": {"b": {"shape": [18446744073709551615, 2], "data": []}}}"#,
        r#"{"type": "result", "id": "a", "status": "output", "outputs": {"b": {"shape": [4294967296, 4294967296], "data": [1]}}}"#,
        r#"{"type": "result", "id": "a", "status": "output", "outputs": {"b": {"shape": [], "data": [1e999]}}}"#,
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        "format: 1\nfamily: \"fire\"\ndescription: \"\"\nclauses: []\ncases:\n  - &a {}\n  - *a\n",
    ] {
        check_all(text);
    }
}
