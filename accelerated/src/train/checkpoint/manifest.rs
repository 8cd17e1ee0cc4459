//! What a checkpoint should contain: the size and SHA-256 of every file it wrote, recorded in
//! `manifest.json`, the last file written before the checkpoint's directory is renamed into
//! place.
//!
//! The atomic rename already guarantees that a killed run leaves a whole checkpoint or none;
//! the manifest adds the other half — that the files read back are the files written. Without
//! it a flipped bit in `model.safetensors` loads silently as slightly wrong weights, and a
//! truncated file surfaces as a parser's complaint about a header.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's file name inside a checkpoint directory.
pub const MANIFEST: &str = "manifest.json";

/// The format tag: a reader refuses manifests it does not know rather than half-checking them.
const FORMAT: &str = "fire-lm checkpoint 1";

/// The manifest of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The format tag (`fire-lm checkpoint 1`).
    pub format: String,
    /// Every file of the checkpoint besides the manifest, in the order written.
    pub files: Vec<Entry>,
}

/// One recorded file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The file name, relative to the checkpoint directory.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The SHA-256 of its contents, lower-case hex.
    pub sha256: String,
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            format: FORMAT.into(),
            files: Vec::new(),
        }
    }
}

impl Manifest {
    /// Records `bytes` as the contents of `name`.
    pub fn record(&mut self, name: &str, bytes: &[u8]) {
        self.files.push(Entry {
            name: name.into(),
            bytes: bytes.len() as u64,
            sha256: sha256_hex(bytes),
        });
    }

    /// The entry of `name`.
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.files.iter().find(|e| e.name == name)
    }

    /// Parses a manifest; the reason when it is not one this version can check.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let m: Self = serde_json::from_slice(bytes).map_err(|e| format!("does not parse: {e}"))?;
        if m.format != FORMAT {
            return Err(format!(
                "has format `{}`; this fire-lm reads `{FORMAT}`",
                m.format
            ));
        }
        if let Some(bad) = m.files.iter().find(|e| !is_plain_name(&e.name)) {
            return Err(format!(
                "lists `{}`, not a file of the checkpoint",
                bad.name
            ));
        }
        Ok(m)
    }
}

/// A file name inside the checkpoint directory (no separators, no `..`): a manifest cannot
/// send the reader elsewhere.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
}

impl Entry {
    /// Checks `bytes` against the record; the reason (worded to follow the file's name) when
    /// they differ.
    pub fn check(&self, bytes: &[u8]) -> Result<(), String> {
        let size = bytes.len() as u64;
        if size != self.bytes {
            let how = if size < self.bytes {
                "truncated"
            } else {
                "grown"
            };
            return Err(format!(
                "is {size} bytes but its manifest records {} ({how} since it was written)",
                self.bytes
            ));
        }
        let got = sha256_hex(bytes);
        if got != self.sha256 {
            return Err(format!(
                "does not match its manifest: SHA-256 {} but {} was recorded (the file changed \
                 after it was written)",
                short(&got),
                short(&self.sha256)
            ));
        }
        Ok(())
    }
}

/// The SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first 12 hex digits: enough to tell two digests apart in a message.
fn short(hex: &str) -> String {
    let cut: String = hex.chars().take(12).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::{Manifest, FORMAT};

    #[test]
    fn a_recorded_file_checks_and_a_changed_one_says_how() {
        let mut m = Manifest::default();
        m.record("model.safetensors", b"weights");
        let e = m
            .entry("model.safetensors")
            .unwrap_or_else(|| unreachable!());
        assert_eq!(e.check(b"weights"), Ok(()));
        assert_eq!(
            e.check(b"weigh"),
            Err("is 5 bytes but its manifest records 7 (truncated since it was written)".into())
        );
        let err = e.check(b"weightss").unwrap_err();
        assert!(err.contains("(grown since it was written)"), "{err}");
        let err = e.check(b"Weights").unwrap_err();
        assert!(
            err.starts_with("does not match its manifest: SHA-256 "),
            "{err}"
        );
    }

    #[test]
    fn a_manifest_cannot_name_files_outside_its_checkpoint_or_an_unknown_format() {
        let text = format!(
            r#"{{"format": "{FORMAT}", "files": [{{"name": "../latest", "bytes": 1, "sha256": "00"}}]}}"#
        );
        assert_eq!(
            Manifest::parse(text.as_bytes()),
            Err("lists `../latest`, not a file of the checkpoint".into())
        );
        let text = r#"{"format": "fire-lm checkpoint 9", "files": []}"#;
        assert_eq!(
            Manifest::parse(text.as_bytes()),
            Err(format!(
                "has format `fire-lm checkpoint 9`; this fire-lm reads `{FORMAT}`"
            ))
        );
    }
}
