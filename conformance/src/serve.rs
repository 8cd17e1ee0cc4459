//! The implementation side of the protocol, for in-process implementations: `fire-conformance
//! serve` puts the reference (or a catalogued mistake) behind stdin/stdout, which tests the
//! subprocess path end to end without Python, and can misbehave on purpose to prove the
//! harness survives hostile implementations. spec: [proto.framing], [proto.reply]

use std::io::{BufRead, Write};

use serde::Deserialize;
use serde_json::json;

use crate::error::{Error, Result};
use crate::implementation::{Implementation, Reply, Request};
use crate::protocol;
use crate::vectors::format::{Encoding, Inputs, Kind};

/// A deliberate protocol violation, for tests of the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Exit without replying.
    Crash,
    /// Never reply.
    Hang,
    /// Reply with a line that is not JSON.
    Garbage,
    /// Reply with NaN in every output.
    Nan,
    /// Reply with an extra leading axis (Appendix E's batch axis left in).
    WrongShape,
    /// Reply for another case id.
    WrongId,
    /// Reply under other output names (`bias` as `biases`: a glue's typo).
    Misnamed,
    /// Write an endless line.
    Flood,
    /// Write bare `NaN` tokens (Python's `json.dumps` default).
    BareNan,
    /// Take [`SLOW_START`] over the first case, as a JIT compiler does, then reply correctly.
    SlowStart,
}

/// How long [`Misbehaviour::SlowStart`] takes over its first case.
pub const SLOW_START: std::time::Duration = std::time::Duration::from_secs(3);

impl Misbehaviour {
    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "crash" => Self::Crash,
            "hang" => Self::Hang,
            "garbage" => Self::Garbage,
            "nan" => Self::Nan,
            "wrong-shape" => Self::WrongShape,
            "wrong-id" => Self::WrongId,
            "misnamed" => Self::Misnamed,
            "flood" => Self::Flood,
            "bare-nan" => Self::BareNan,
            "slow-start" => Self::SlowStart,
            _ => return None,
        })
    }
}

#[derive(Deserialize)]
struct WireCase {
    id: String,
    kind: Kind,
    dtype: String,
    #[serde(default)]
    outputs: Vec<String>,
    encoding: Encoding,
    inputs: Inputs,
}

/// Serves `imp` over `input`/`output` until `bye` or end of input. Misbehaves on every case when
/// told to.
pub fn serve(
    imp: &mut dyn Implementation,
    input: impl BufRead,
    mut output: impl Write,
    misbehave: Option<Misbehaviour>,
) -> Result<()> {
    let caps = imp.capabilities()?;
    let mut first = true;
    for line in input.lines() {
        let line = line.map_err(Error::io("standard input"))?;
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => return Err(Error::Protocol(format!("invalid JSON: {e}"))),
        };
        let reply_line = match v.get("type").and_then(|t| t.as_str()) {
            Some("hello") => json!({
                "type": "hello",
                "protocol": protocol::VERSION,
                "name": caps.name,
                "families": caps.families,
                "dtypes": caps.dtypes,
                "conventions": {"future_keys": caps.future_keys.name(), "placement": caps.placement.name()},
                "positions": caps.positions.name(),
            })
            .to_string(),
            Some("bye") => return Ok(()),
            Some("case") => {
                let id = v.get("id").and_then(|i| i.as_str()).unwrap_or("").to_owned();
                let reply = match serde_json::from_value::<WireCase>(v) {
                    Ok(c) => imp.run(&Request {
                        id: c.id,
                        kind: c.kind,
                        dtype: c.dtype,
                        encoding: c.encoding,
                        inputs: c.inputs,
                        outputs: c.outputs,
                    }),
                    Err(e) => Reply::Errored(format!("cannot read the request: {e}")),
                };
                match misbehave {
                    None => protocol::result_line(&id, &reply),
                    Some(m) => match act(m, &id, reply, std::mem::take(&mut first), &mut output)? {
                        Some(l) => l,
                        None => return Ok(()),
                    },
                }
            }
            other => return Err(Error::Protocol(format!("unknown message type {other:?}"))),
        };
        writeln!(output, "{reply_line}")
            .and_then(|()| output.flush())
            .map_err(Error::io("standard output"))?;
    }
    Ok(())
}

fn act(
    m: Misbehaviour,
    id: &str,
    reply: Reply,
    first: bool,
    out: &mut impl Write,
) -> Result<Option<String>> {
    let mangle = |f: &dyn Fn(&mut crate::vectors::format::Tensor)| match reply.clone() {
        Reply::Output(mut outs) => {
            outs.values_mut().for_each(f);
            Reply::Output(outs)
        }
        other => other,
    };
    Ok(Some(match m {
        Misbehaviour::Crash => std::process::exit(3),
        Misbehaviour::Hang => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        Misbehaviour::Garbage => "this is not JSON {".into(),
        Misbehaviour::Nan => protocol::result_line(
            id,
            &mangle(&|t| t.data.iter_mut().for_each(|v| *v = f64::NAN)),
        ),
        Misbehaviour::WrongShape => protocol::result_line(id, &mangle(&|t| t.shape.insert(0, 1))),
        Misbehaviour::WrongId => protocol::result_line("some/other/case", &reply),
        Misbehaviour::Misnamed => match reply {
            Reply::Output(outs) => protocol::result_line(
                id,
                &Reply::Output(outs.into_iter().map(|(k, t)| (k + "s", t)).collect()),
            ),
            other => protocol::result_line(id, &other),
        },
        Misbehaviour::SlowStart => {
            if first {
                std::thread::sleep(SLOW_START);
            }
            protocol::result_line(id, &reply)
        }
        Misbehaviour::BareNan => {
            json!({"type": "result", "id": id, "status": "output", "outputs": {}})
                .to_string()
                .replace("{}", "{\"bias\": {\"shape\": [1], \"data\": [NaN]}}")
        }
        Misbehaviour::Flood => {
            let chunk = vec![b'x'; 1 << 16];
            loop {
                if out.write_all(&chunk).is_err() {
                    return Ok(None);
                }
            }
        }
    }))
}
