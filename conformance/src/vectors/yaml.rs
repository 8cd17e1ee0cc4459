//! The YAML subset the vectors are written in, and its one deterministic writer.
//!
//! Files are *read* with serde-saphyr; they are *written* by this module alone, so that the same
//! suite always serialises to the same bytes and every float is written the way
//! `spec/vectors.md` says (shortest round-trip decimal, readable by YAML 1.1 and 1.2 parsers).
//! spec: [vec.yaml], [vec.floats]

/// A value in the vector tree: the only shapes the format uses.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A mapping with keys in the order they are written.
    Map(Vec<(String, Node)>),
    /// A sequence.
    Seq(Vec<Node>),
    /// A string, always written double-quoted.
    Str(String),
    /// An integer.
    Int(i64),
    /// A real number, written by [`fmt_f64`].
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl Node {
    /// A mapping from `(key, value)` pairs.
    pub fn map<I: IntoIterator<Item = (&'static str, Node)>>(items: I) -> Node {
        Node::Map(items.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    /// A string node.
    pub fn str(s: impl Into<String>) -> Node {
        Node::Str(s.into())
    }

    /// A sequence of strings.
    pub fn strs<S: AsRef<str>>(items: &[S]) -> Node {
        Node::Seq(items.iter().map(|s| Node::str(s.as_ref())).collect())
    }

    fn is_scalar(&self) -> bool {
        !matches!(self, Node::Map(_) | Node::Seq(_))
    }
}

/// Writes a float as the spec requires: the shortest decimal that reads back to the same bits,
/// always with a `.`; an exponent, when used, carries its sign (`1.5e-7`, `2.0e+20`) because
/// YAML 1.1 parsers (PyYAML) read `1e-7` as a string; `.nan`, `.inf`, `-.inf`; `-0.0` keeps its
/// sign. spec: [vec.floats]
pub fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        return ".nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-5..16).contains(&exp) {
        let plain = format!("{v}");
        if plain.contains('.') {
            plain
        } else {
            format!("{plain}.0")
        }
    } else {
        let mantissa = if mantissa.contains('.') {
            mantissa.to_owned()
        } else {
            format!("{mantissa}.0")
        };
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{}", exp.abs())
    }
}

/// A string as a YAML double-quoted scalar (JSON escaping is a subset of YAML's).
fn fmt_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn fmt_key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if plain {
        k.to_owned()
    } else {
        fmt_str(k)
    }
}

fn fmt_scalar(n: &Node) -> String {
    match n {
        Node::Str(s) => fmt_str(s),
        Node::Int(i) => i.to_string(),
        Node::Float(f) => fmt_f64(*f),
        Node::Bool(b) => b.to_string(),
        Node::Map(m) if m.is_empty() => "{}".into(),
        Node::Seq(s) if s.is_empty() => "[]".into(),
        _ => String::new(),
    }
}

/// The widest a flow sequence line grows before it wraps.
const WIDTH: usize = 100;

fn flow_seq(items: &[Node], indent: usize, out: &mut String) {
    let cont = " ".repeat(indent + 2);
    let mut line = 0usize;
    out.push('[');
    for (n, item) in items.iter().enumerate() {
        let s = fmt_scalar(item);
        if n > 0 {
            out.push(',');
            if line + s.len() + 2 > WIDTH {
                out.push('\n');
                out.push_str(&cont);
                line = cont.len();
            } else {
                out.push(' ');
                line += 1;
            }
        }
        out.push_str(&s);
        line += s.len() + 1;
    }
    out.push(']');
}

fn inline(node: &Node) -> bool {
    match node {
        Node::Map(m) => m.is_empty(),
        Node::Seq(s) => s.iter().all(Node::is_scalar),
        _ => true,
    }
}

fn write_inline(node: &Node, indent: usize, out: &mut String) {
    match node {
        Node::Seq(s) if !s.is_empty() => flow_seq(s, indent, out),
        other => out.push_str(&fmt_scalar(other)),
    }
}

fn write_map(items: &[(String, Node)], indent: usize, first_inline: bool, out: &mut String) {
    let pad = " ".repeat(indent);
    for (n, (k, v)) in items.iter().enumerate() {
        if n > 0 || !first_inline {
            out.push_str(&pad);
        }
        out.push_str(&fmt_key(k));
        out.push(':');
        if inline(v) {
            out.push(' ');
            write_inline(v, indent, out);
            out.push('\n');
        } else {
            out.push('\n');
            write_block(v, indent + 2, out);
        }
    }
}

fn write_block(node: &Node, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match node {
        Node::Map(m) => write_map(m, indent, false, out),
        Node::Seq(items) => {
            for item in items {
                out.push_str(&pad);
                out.push_str("- ");
                match item {
                    Node::Map(m) if !m.is_empty() => write_map(m, indent + 2, true, out),
                    other if inline(other) => {
                        write_inline(other, indent + 2, out);
                        out.push('\n');
                    }
                    other => {
                        out.push('\n');
                        write_block(other, indent + 2, out);
                    }
                }
            }
        }
        scalar => {
            out.push_str(&pad);
            out.push_str(&fmt_scalar(scalar));
            out.push('\n');
        }
    }
}

/// Serialises a document: an optional leading comment, then `node` as block YAML.
pub fn to_string(comment: &str, node: &Node) -> String {
    let mut out = String::new();
    for line in comment.lines() {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    write_block(node, 0, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_shortest_round_trip_and_yaml11_safe() {
        let cases = [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (1e-6, "1.0e-6"),
            (1.5e-7, "1.5e-7"),
            (2e20, "2.0e+20"),
            (123456.0, "123456.0"),
            (0.0001, "0.0001"),
            (f64::NAN, ".nan"),
            (f64::NEG_INFINITY, "-.inf"),
        ];
        for (v, s) in cases {
            assert_eq!(fmt_f64(v), s);
        }
        let mut r = fire_reference::fire::init::SplitMix64::new(7);
        for _ in 0..2000 {
            let v = f64::from_bits(r.next_u64());
            if v.is_finite() {
                let back: f64 = fmt_f64(v).parse().unwrap();
                assert_eq!(back.to_bits(), v.to_bits(), "{v:e}");
            }
        }
    }

    #[test]
    fn writer_output_reads_back_through_serde_saphyr() {
        let node = Node::map([
            ("name", Node::str("a \"quoted\" name")),
            ("n", Node::Int(-3)),
            (
                "data",
                Node::Seq((0..40).map(|k| Node::Float(k as f64 / 7.0)).collect()),
            ),
            (
                "special",
                Node::Seq(vec![Node::Float(f64::INFINITY), Node::Float(-0.0)]),
            ),
            (
                "items",
                Node::Seq(vec![
                    Node::map([("a", Node::Int(1)), ("b", Node::Seq(vec![]))]),
                    Node::map([
                        ("a", Node::Int(2)),
                        ("b", Node::map([("c", Node::Bool(true))])),
                    ]),
                ]),
            ),
        ]);
        let text = to_string("header", &node);
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Item {
            a: i64,
            b: serde_json::Value,
        }
        #[derive(serde::Deserialize)]
        struct Doc {
            name: String,
            n: i64,
            data: Vec<f64>,
            special: Vec<f64>,
            items: Vec<Item>,
        }
        let doc: Doc = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(doc.name, "a \"quoted\" name");
        assert_eq!(doc.n, -3);
        assert_eq!(doc.data.len(), 40);
        assert_eq!(doc.data[39], 39.0 / 7.0);
        assert!(doc.special[0].is_infinite() && doc.special[1].is_sign_negative());
        assert_eq!(doc.items.len(), 2);
        assert!(text.lines().all(|l| l.len() <= WIDTH + 30), "{text}");
    }
}
