//! Corpora, the byte-level tokenizer (others: [`crate::tokenizer`]), the document split, training batches and evaluation
//! windows. Nothing here touches the network.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::error::{io, Error, Result};
use crate::tokenizer::Tokenizer;
use fire_vocabulary::SplitMix64;

/// The Python 3.11 tutorial (PSF licence), embedded in the binary; see `data/README.md`.
const EMBEDDED: [(&str, &str); 17] = [
    (
        "appendix.rst",
        include_str!("../data/python-tutorial/appendix.rst"),
    ),
    (
        "appetite.rst",
        include_str!("../data/python-tutorial/appetite.rst"),
    ),
    (
        "classes.rst",
        include_str!("../data/python-tutorial/classes.rst"),
    ),
    (
        "controlflow.rst",
        include_str!("../data/python-tutorial/controlflow.rst"),
    ),
    (
        "datastructures.rst",
        include_str!("../data/python-tutorial/datastructures.rst"),
    ),
    (
        "errors.rst",
        include_str!("../data/python-tutorial/errors.rst"),
    ),
    (
        "floatingpoint.rst",
        include_str!("../data/python-tutorial/floatingpoint.rst"),
    ),
    (
        "index.rst",
        include_str!("../data/python-tutorial/index.rst"),
    ),
    (
        "inputoutput.rst",
        include_str!("../data/python-tutorial/inputoutput.rst"),
    ),
    (
        "interactive.rst",
        include_str!("../data/python-tutorial/interactive.rst"),
    ),
    (
        "interpreter.rst",
        include_str!("../data/python-tutorial/interpreter.rst"),
    ),
    (
        "introduction.rst",
        include_str!("../data/python-tutorial/introduction.rst"),
    ),
    (
        "modules.rst",
        include_str!("../data/python-tutorial/modules.rst"),
    ),
    (
        "stdlib.rst",
        include_str!("../data/python-tutorial/stdlib.rst"),
    ),
    (
        "stdlib2.rst",
        include_str!("../data/python-tutorial/stdlib2.rst"),
    ),
    ("venv.rst", include_str!("../data/python-tutorial/venv.rst")),
    (
        "whatnow.rst",
        include_str!("../data/python-tutorial/whatnow.rst"),
    ),
];

/// The byte-level tokenizer: token = byte, vocabulary 256. Needs no files and no downloads.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByteTokenizer;

impl ByteTokenizer {
    /// The vocabulary size.
    pub const VOCAB: usize = 256;

    /// Bytes of `text` as tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    /// Tokens back to text (invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, tokens: &[u32]) -> String {
        let bytes: Vec<u8> = tokens.iter().map(|&t| t.min(255) as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// One document: a name (its path in the corpus) and its tokens.
#[derive(Debug, Clone)]
pub struct Document {
    /// Name, unique in the corpus.
    pub name: String,
    /// Tokens.
    pub tokens: Vec<u32>,
}

/// A set of documents.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Sorted by name.
    pub documents: Vec<Document>,
}

/// FNV-1a: a stable hash for the document split (independent of Rust's hasher seeds).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Corpus {
    /// The embedded corpus, byte-tokenized.
    pub fn embedded() -> Self {
        let tok = ByteTokenizer;
        Self {
            documents: EMBEDDED
                .iter()
                .map(|(name, text)| Document {
                    name: (*name).to_owned(),
                    tokens: tok.encode(text),
                })
                .collect(),
        }
    }

    /// The embedded corpus through `tok`.
    pub fn embedded_with(tok: &Tokenizer) -> Result<Self> {
        let documents = EMBEDDED
            .iter()
            .map(|(name, text)| {
                Ok(Document {
                    name: (*name).to_owned(),
                    tokens: tok.encode(text)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self { documents })
    }

    /// Every regular file under `dir` (recursively), read as UTF-8 (lossily), sorted by path,
    /// byte-tokenized.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        Self::from_dir_with(dir, &Tokenizer::Bytes)
    }

    /// [`Self::from_dir`] through `tok`.
    pub fn from_dir_with(dir: &Path, tok: &Tokenizer) -> Result<Self> {
        let mut files = Vec::new();
        walk(dir, &mut files)?;
        files.sort();
        let mut documents = Vec::with_capacity(files.len());
        for f in files {
            let bytes = std::fs::read(&f).map_err(io(&f))?;
            let text = String::from_utf8_lossy(&bytes);
            let name = f.strip_prefix(dir).unwrap_or(&f).display().to_string();
            documents.push(Document {
                name,
                tokens: tok.encode(&text)?,
            });
        }
        if documents.is_empty() {
            return Err(Error::Data(format!("no files under {}", dir.display())));
        }
        Ok(Self { documents })
    }

    /// The embedded corpus, or the files under `dir`, byte-tokenized.
    pub fn load(dir: Option<&Path>) -> Result<Self> {
        Self::load_with(dir, &Tokenizer::Bytes)
    }

    /// The embedded corpus, or the files under `dir`, through `tok`.
    pub fn load_with(dir: Option<&Path>, tok: &Tokenizer) -> Result<Self> {
        match dir {
            Some(d) => Self::from_dir_with(d, tok),
            None => Self::embedded_with(tok),
        }
    }

    /// Total tokens.
    pub fn tokens(&self) -> usize {
        self.documents.iter().map(|d| d.tokens.len()).sum()
    }

    /// Splits by document: a document is held out when the FNV-1a hash of its name falls in
    /// the lowest `held_out` fraction. Deterministic, independent of the document order, and
    /// stable when documents are added. At least one document lands on each side.
    pub fn split(&self, held_out: f64) -> Result<Split> {
        if self.documents.len() < 2 {
            let only = self
                .documents
                .first()
                .map_or_else(String::new, |d| format!(" (`{}`)", d.name));
            return Err(Error::Data(format!(
                "the corpus holds {} document{only}; it needs at least two, one for training and \
                 one held out for evaluation (each file of a corpus directory is a document)",
                self.documents.len()
            )));
        }
        let cut = (held_out.clamp(0.0, 1.0) * u64::MAX as f64) as u64;
        let (mut eval, mut train): (Vec<Document>, Vec<Document>) = self
            .documents
            .iter()
            .cloned()
            .partition(|d| fnv1a(&d.name) < cut);
        let key = |d: &Document| fnv1a(&d.name);
        if eval.is_empty() {
            let i = (0..train.len())
                .min_by_key(|&i| key(&train[i]))
                .unwrap_or(0);
            eval.push(train.remove(i));
        }
        if train.is_empty() {
            let i = (0..eval.len()).max_by_key(|&i| key(&eval[i])).unwrap_or(0);
            train.push(eval.remove(i));
        }
        Ok(Split { train, eval })
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(io(dir))?;
    for e in entries {
        let e = e.map_err(io(dir))?;
        let p = e.path();
        let ft = e.file_type().map_err(io(&p))?;
        if ft.is_dir() {
            walk(&p, out)?;
        } else if ft.is_file() {
            out.push(p);
        }
    }
    Ok(())
}

/// Training and held-out documents; the held-out ones are never trained on.
#[derive(Debug, Clone)]
pub struct Split {
    /// Training documents.
    pub train: Vec<Document>,
    /// Held-out documents.
    pub eval: Vec<Document>,
}

/// Random training windows from the training documents, concatenated into one stream with a
/// blank line between documents.
#[derive(Debug, Clone)]
pub struct Batcher {
    stream: Vec<u32>,
    seq_len: usize,
    batch: usize,
}

impl Batcher {
    /// A batcher of `batch` windows of `seq_len + 1` tokens of byte-tokenized documents.
    pub fn new(train: &[Document], seq_len: usize, batch: usize) -> Result<Self> {
        Self::with_separator(train, &ByteTokenizer.encode("\n\n"), seq_len, batch)
    }

    /// [`Self::new`] with `separator` (the blank line in the documents' tokenizer) between
    /// documents.
    pub fn with_separator(
        train: &[Document],
        separator: &[u32],
        seq_len: usize,
        batch: usize,
    ) -> Result<Self> {
        let mut stream = Vec::new();
        for d in train {
            stream.extend_from_slice(&d.tokens);
            stream.extend_from_slice(separator);
        }
        if seq_len == 0 || batch == 0 {
            return Err(Error::Data("seq_len and batch must be positive".into()));
        }
        if stream.len() < seq_len + 2 {
            return Err(Error::Data(format!(
                "training stream has {} tokens, fewer than seq_len + 2 = {}",
                stream.len(),
                seq_len + 2
            )));
        }
        Ok(Self {
            stream,
            seq_len,
            batch,
        })
    }

    /// Tokens in the stream.
    pub fn len(&self) -> usize {
        self.stream.len()
    }

    /// True if the stream is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.stream.is_empty()
    }

    /// One batch `(inputs, targets)`, each `[B, T]` u32, drawn with `rng`.
    pub fn next(&self, rng: &mut SplitMix64, device: &Device) -> Result<(Tensor, Tensor)> {
        let span = (self.stream.len() - self.seq_len - 1) as u64;
        let mut x = Vec::with_capacity(self.batch * self.seq_len);
        let mut y = Vec::with_capacity(self.batch * self.seq_len);
        for _ in 0..self.batch {
            let s = rng.below(span + 1) as usize;
            x.extend_from_slice(&self.stream[s..s + self.seq_len]);
            y.extend_from_slice(&self.stream[s + 1..s + 1 + self.seq_len]);
        }
        let shape = (self.batch, self.seq_len);
        Ok((
            Tensor::from_vec(x, shape, device)?,
            Tensor::from_vec(y, shape, device)?,
        ))
    }
}

/// Evaluation spans: non-overlapping slices of `longest + 1` tokens from the held-out documents
/// at least that long, taken round-robin over documents (so a cap still samples every
/// document), at most `max_spans` of them.
pub fn eval_spans(eval: &[Document], longest: usize, max_spans: usize) -> Result<Vec<&[u32]>> {
    let eligible: Vec<&Document> = eval.iter().filter(|d| d.tokens.len() > longest).collect();
    if eligible.is_empty() || longest == 0 {
        let best = eval.iter().map(|d| d.tokens.len()).max().unwrap_or(0);
        return Err(Error::Data(format!(
            "no held-out document has {} tokens (longest: {best}); use shorter lengths or a \
             larger corpus",
            // u128: `longest` may be usize::MAX (a user's --lengths).
            longest as u128 + 1
        )));
    }
    let mut out = Vec::new();
    for k in 0.. {
        let mut any = false;
        for d in &eligible {
            let s = k * longest;
            if s + longest < d.tokens.len() {
                any = true;
                out.push(&d.tokens[s..s + longest + 1]);
                if out.len() >= max_spans.max(1) {
                    return Ok(out);
                }
            }
        }
        if !any {
            break;
        }
    }
    Ok(out)
}

/// Windows of `len + 1` tokens cut from each span (`⌊longest / len⌋` per span): every length
/// predicts the same tokens of the same spans, only with different context lengths, so the
/// numbers are comparable across lengths.
pub fn eval_windows<'a>(spans: &[&'a [u32]], len: usize) -> Vec<&'a [u32]> {
    let mut out = Vec::new();
    for span in spans {
        let longest = span.len() - 1;
        for w in 0..longest / len.max(1) {
            out.push(&span[w * len..w * len + len + 1]);
        }
    }
    out
}
