//! The golden vectors compiled into the harness (by `build.rs`, from the repository's
//! `vectors/`), so that `fire-conformance run` needs no folder beside it: the binary a user
//! installs with `pip` or `cargo install` carries the suite it checks against. The embedded
//! files are verified exactly like a folder — each against the manifest's SHA-256, no unlisted
//! file — and reports name the manifest hash. spec: [vec.manifest], [proto.suite]

use super::load::{self, InMemory, LoadError, Suite};

include!(concat!(env!("OUT_DIR"), "/embedded_vectors.rs"));

/// Loads and verifies the embedded suite.
pub fn load() -> Result<Suite, LoadError> {
    load::load_from(&InMemory(FILES))
}
