//! Tokenizers: bytes by default, or a Hugging Face `tokenizer.json`.
//!
//! The byte-level tokenizer (token = byte, 256 ids) needs no file and no download, so the
//! embedded corpus, the tests and the demo run anywhere. A `tokenizer.json` (BPE, WordPiece,
//! Unigram, WordLevel — whatever the `tokenizers` crate reads) is loaded from a local path given
//! by the user; nothing is fetched. A run records the path in its training config, and
//! evaluation and generation load the same file from there.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A text ↔ token-id mapping.
#[derive(Debug, Clone)]
pub enum Tokenizer {
    /// Token = byte; 256 ids; lossless on any UTF-8 text.
    Bytes,
    /// A Hugging Face tokenizer read from `path`.
    HuggingFace {
        /// Where it was read from.
        path: PathBuf,
        /// The loaded tokenizer.
        inner: Box<tokenizers::Tokenizer>,
    },
}

impl Tokenizer {
    /// The byte tokenizer for `None`, else the `tokenizer.json` at `path`.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        let Some(path) = path else {
            return Ok(Self::Bytes);
        };
        let text = std::fs::read_to_string(path).map_err(crate::error::io(path))?;
        let inner: tokenizers::Tokenizer = text.parse().map_err(|e| Error::Parse {
            path: path.display().to_string(),
            reason: format!("not a Hugging Face tokenizer.json: {e}"),
        })?;
        if inner.get_vocab_size(true) == 0 {
            return Err(Error::Parse {
                path: path.display().to_string(),
                reason: "the tokenizer has an empty vocabulary".into(),
            });
        }
        Ok(Self::HuggingFace {
            path: path.to_path_buf(),
            inner: Box::new(inner),
        })
    }

    /// The number of ids (the model's `vocab_size` must be at least this).
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Bytes => 256,
            Self::HuggingFace { inner, .. } => inner.get_vocab_size(true),
        }
    }

    /// A short description for logs.
    pub fn describe(&self) -> String {
        match self {
            Self::Bytes => "bytes (256 ids)".into(),
            Self::HuggingFace { path, .. } => {
                format!("{} ({} ids)", path.display(), self.vocab_size())
            }
        }
    }

    /// The ids of `text` (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Self::Bytes => Ok(text.bytes().map(u32::from).collect()),
            Self::HuggingFace { inner, path } => inner
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| Error::Data(format!("tokenizer {}: {e}", path.display()))),
        }
    }

    /// Text from ids (invalid UTF-8 from the byte tokenizer becomes U+FFFD).
    pub fn decode(&self, tokens: &[u32]) -> Result<String> {
        match self {
            Self::Bytes => {
                let bytes: Vec<u8> = tokens.iter().map(|&t| t.min(255) as u8).collect();
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            Self::HuggingFace { inner, path } => inner
                .decode(tokens, false)
                .map_err(|e| Error::Data(format!("tokenizer {}: {e}", path.display()))),
        }
    }
}
