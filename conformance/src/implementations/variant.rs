//! Test doubles: the reference seen through one named deviation, so a mutation test can prove
//! the suite catches and names every catalogue entry. spec: [variants.catalogue]

use fire_reference::variants::Variant;

use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::implementations::reference::evaluate_request;
use crate::vectors::format::Kind;

/// An implementation that makes exactly one catalogued mistake.
#[derive(Debug, Clone, Copy)]
pub struct Mistaken(pub &'static Variant);

impl Implementation for Mistaken {
    fn capabilities(&mut self) -> crate::error::Result<Capabilities> {
        Ok(Capabilities {
            name: format!("variant {}", self.0.name),
            families: vec!["*".into()],
            dtypes: vec!["f64".into()],
            future_keys: Default::default(),
            placement: Default::default(),
            positions: Default::default(),
            state: Default::default(),
        })
    }

    fn run(&mut self, r: &Request) -> Reply {
        if r.kind == Kind::Vjp && r.encoding.is_fire() && self.0.applies_to_fire() {
            return Reply::Skipped("the test double does not model gradients".into());
        }
        match evaluate_request(&r.encoding, r.kind, &r.inputs, Some(self.0)) {
            Ok(out) => Reply::Output(out),
            Err(e) => Reply::Errored(e.to_string()),
        }
    }
}
