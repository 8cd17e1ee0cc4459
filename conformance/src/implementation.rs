//! What the harness runs: anything that answers a request for one case with one reply.
//!
//! In-process implementations (the reference, variant test doubles, the accelerated crate) and
//! subprocesses speaking the JSON-lines protocol all sit behind this one trait, so the runner,
//! the comparison and the reports never know which kind they check. spec: [proto.request],
//! [proto.reply]

use std::collections::BTreeMap;

use crate::vectors::format::{Case, Encoding, Inputs, Kind, Tensor};

/// How an implementation treats keys after the query. spec: [conv.future], [proto.hello]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FutureKeys {
    /// Appendix E: the mirrored distance, normalised by the query (the reference).
    #[default]
    Mirrored,
    /// Exactly 0.
    Zero,
    /// The mask folded into the bias: −∞, or a finite mask value such as `finfo.min` or
    /// `-1e9` (any value at most [`crate::conventions::MASK_CEILING`]).
    Masked,
    /// Something other than FIRE's mirrored value by design (typically the signed distance
    /// `i − j`, whose ψ is NaN or negative); the upper triangle is not checked at all, and the
    /// report says how many elements that leaves out.
    Negated,
}

impl FutureKeys {
    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "mirrored" => Self::Mirrored,
            "zero" => Self::Zero,
            "masked" => Self::Masked,
            "negated" => Self::Negated,
            _ => return None,
        })
    }

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mirrored => "mirrored",
            Self::Zero => "zero",
            Self::Masked => "masked",
            Self::Negated => "negated",
        }
    }
}

/// Where the bias enters the logits: the shared vocabulary's word, whose wire names are the
/// protocol's. spec: [attn.placement], [proto.hello]
pub use fire_reference::attention::Placement;

/// What an implementation declares about itself (the handshake). spec: [proto.hello]
#[derive(Debug, Clone, PartialEq)]
pub struct Capabilities {
    /// A human name for reports.
    pub name: String,
    /// Family globs it supports (`*` for all); other cases are skipped, not failed.
    pub families: Vec<String>,
    /// The dtypes it computes in, most precise first; the run uses the first.
    pub dtypes: Vec<String>,
    /// Keys after the query.
    pub future_keys: FutureKeys,
    /// Bias placement in attention.
    pub placement: Placement,
    /// Whether it computes from the position lists it is given or from a whole square.
    pub positions: Positions,
    /// Whether the module computing each case was exercised across a parameter update.
    pub state: State,
}

/// What an implementation says of the module behind it across calls. spec: [proto.hello]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    /// Nothing said (the default): an implementation that is no glue around a module.
    #[default]
    Unsaid,
    /// Each case is computed by a module built for it: a cache or running value that a
    /// parameter update leaves stale never shows, and the report says so.
    Fresh,
    /// The module is called, and its parameters changed as an optimiser's step changes them,
    /// before the graded call, as training calls it (the ready-made glues).
    Stepped,
}

impl State {
    /// The name in the hello.
    pub fn name(self) -> &'static str {
        match self {
            State::Unsaid => "unsaid",
            State::Fresh => "fresh",
            State::Stepped => "stepped",
        }
    }

    /// The value of a name the hello may carry (`unsaid` is its absence).
    pub fn parse(s: &str) -> Option<Self> {
        [State::Fresh, State::Stepped]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// How an implementation meets a case's position lists. spec: [proto.hello]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Positions {
    /// It computes from the lists it is given (the default).
    #[default]
    Lists,
    /// It computes every bias over positions `0..T` (`T` one past the largest) and picks out
    /// the asked rows and columns itself, as a glue around a module that only takes a length
    /// does: the module's own handling of position lists (a decoding call given only the new
    /// query rows) is then not exercised by the cases that carry them.
    Square,
}

impl Positions {
    /// The name in the hello.
    pub fn name(self) -> &'static str {
        match self {
            Positions::Lists => "lists",
            Positions::Square => "square",
        }
    }

    /// The value of a name.
    pub fn parse(s: &str) -> Option<Self> {
        [Positions::Lists, Positions::Square]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// One case as an implementation sees it: inputs only, never the expected values.
/// spec: [proto.request]
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The case id; the reply must echo it.
    pub id: String,
    /// What to compute.
    pub kind: Kind,
    /// The dtype to compute in.
    pub dtype: String,
    /// The encoding and all parameters.
    pub encoding: Encoding,
    /// Positions and the kind's extra inputs.
    pub inputs: Inputs,
    /// The names of the outputs the reply must carry.
    pub outputs: Vec<String>,
}

impl Request {
    /// The request for `case`, computed in `dtype`.
    pub fn for_case(case: &Case, dtype: &str) -> Self {
        Self {
            id: case.id.clone(),
            kind: case.kind,
            dtype: dtype.to_owned(),
            encoding: case.encoding.clone(),
            inputs: case.inputs.clone(),
            outputs: output_names(case),
        }
    }

    /// The request for `case` as an implementation declaring `future` is asked it: a gradient
    /// case's cotangent is restricted to the causal triangle unless the implementation mirrors
    /// keys after the query. spec: [conv.future], [grad.vjp]
    pub fn for_case_under(case: &Case, dtype: &str, future: FutureKeys) -> Self {
        let mut r = Self::for_case(case, dtype);
        if case.kind == Kind::Vjp && future != FutureKeys::Mirrored {
            if let Some(c) = crate::conventions::causal_cotangent(&case.inputs) {
                r.inputs.cotangent = Some(c);
            }
        }
        r
    }
}

/// The output names a case's reply carries (spec: [vec.outputs]): its expected outputs, or for invalid cases what a
/// valid one of its kind would carry.
pub fn output_names(case: &Case) -> Vec<String> {
    match &case.expected {
        Some(e) => e.keys().cloned().collect(),
        None => match case.kind {
            Kind::Bias => vec!["bias".into()],
            Kind::Attention => vec!["output".into()],
            Kind::Vjp => vec![],
        },
    }
}

/// Exactly one reply per request. spec: [proto.reply]
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The computed outputs by name.
    Output(BTreeMap<String, Tensor>),
    /// The implementation does not support this case, and says why.
    Skipped(String),
    /// Skipped because the implementation cannot compute in the requested dtype (it raised a
    /// dtype error, or returned another dtype), and says why. Such a skip holds for the whole
    /// run or not at all: where other valid cases of the same run came back with outputs, the
    /// runner fails it, since a dtype that changes with the input is a bug on that input.
    /// spec: [proto.reply]
    UnsupportedDtype(String),
    /// The implementation refused or failed (the right answer for an invalid case).
    Errored(String),
    /// A glue's own check found the module it drives wrong (it drops the attention scores it is
    /// given, keeps a stale bias, holds c frozen): a failure of the module, never read as a
    /// broken adapter, and no rejection of an invalid case. spec: [proto.reply]
    Mistake(String),
    /// The harness could not get a well-formed reply (crash, hang, garbage, flood, wrong id).
    Broken(String),
}

/// Anything the harness can check. spec: [proto.request]
pub trait Implementation {
    /// The handshake: called once before any request.
    fn capabilities(&mut self) -> crate::error::Result<Capabilities>;
    /// Answers one request.
    fn run(&mut self, request: &Request) -> Reply;
    /// The implementation's note on its last reply (how a glue read the module's parameters),
    /// taken once: reports print it with the case, never grade it. spec: [proto.reply]
    fn take_note(&mut self) -> Option<String> {
        None
    }
}
