//! Reading a suite: every file verified against the manifest, every case checked for the
//! invariants of the format. Malformed or tampered files are clear errors, never panics.
//! spec: [vec.manifest], [vec.file], [vec.case]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::format::{Case, Encoding, FireParams, Tensor, VectorFile, Verdict, FORMAT};
use super::manifest::{sha256, Manifest, MANIFEST};
use crate::compare;

/// Why a suite could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// A file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error (not a `source`: the message already says it, and a chained source
        /// would print it twice).
        error: std::io::Error,
    },
    /// A file is not valid YAML of the expected shape (bad syntax, unknown field or flag).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A file's bytes do not hash to the manifest's SHA-256.
    #[error("{path}: SHA-256 {got} does not match the manifest's {want} (edited or corrupted)")]
    Hash {
        /// The file.
        path: String,
        /// From the manifest.
        want: String,
        /// Of the bytes.
        got: String,
    },
    /// A rule of spec/vectors.md is broken.
    #[error("{path}: {message}")]
    Invalid {
        /// The file (and case).
        path: String,
        /// Which rule.
        message: String,
    },
}

/// Where a suite's bytes came from: a folder, or the copy compiled into the harness.
/// Reports name it beside the manifest hash, so a reader knows which suite ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A folder on disk (`--vectors DIR`, `FIRE_VECTORS`).
    Dir(PathBuf),
    /// The suite embedded in this build of the harness (spec: [vec.manifest]).
    Embedded,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Dir(d) => write!(f, "{}", d.display()),
            Origin::Embedded => f.write_str("embedded"),
        }
    }
}

/// A loaded suite.
#[derive(Debug, Clone)]
pub struct Suite {
    /// The manifest.
    pub manifest: Manifest,
    /// The SHA-256 of `MANIFEST.yaml`, which pins every file's hash: names the suite that ran.
    pub hash: String,
    /// The files, in manifest order, with their relative paths.
    pub files: Vec<(String, VectorFile)>,
    /// Where the bytes came from.
    pub origin: Origin,
}

impl Suite {
    /// Every case, in order.
    pub fn cases(&self) -> impl Iterator<Item = &Case> {
        self.files.iter().flat_map(|(_, f)| f.cases.iter())
    }
}

/// Parses YAML the way every vector file is read: non-finite floats (`.nan`, `.inf`) pass
/// through serde's buffering of the tagged `encoding` (serde-saphyr rejects them there by
/// default); anchors and aliases, which the subset has none of, are refused. spec: [vec.yaml]
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_anchors = 0;
    budget.max_aliases = 0;
    options.budget = Some(budget);
    serde_saphyr::from_str_with_options(text, options)
}

fn bad(path: &str, message: impl Into<String>) -> LoadError {
    LoadError::Invalid {
        path: path.into(),
        message: message.into(),
    }
}

/// Parses one vector file's text (no hash check) and checks its invariants.
/// spec: [vec.file], [vec.case], [vec.tensor]
pub fn parse_file(path: &str, text: &str) -> Result<VectorFile, LoadError> {
    let file: VectorFile = from_yaml(text).map_err(|e| LoadError::Parse {
        path: path.into(),
        message: e.to_string(),
    })?;
    check_file(path, &file)?;
    Ok(file)
}

fn clause_ok(id: &str) -> bool {
    !id.is_empty()
        && id.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

fn check_tensor(at: &str, t: &Tensor) -> Result<(), LoadError> {
    if t.dtype != "f64" {
        return Err(bad(
            at,
            format!("dtype `{}` (only f64 is written)", t.dtype),
        ));
    }
    if let Some(wrong) = t.length_mismatch() {
        return Err(bad(at, wrong));
    }
    if let Some(s) = t.scale {
        if !(s.is_finite() && s >= 0.0) {
            return Err(bad(at, format!("scale {s} must be finite and ≥ 0")));
        }
    }
    Ok(())
}

fn fire_tensors(p: &FireParams) -> Vec<&Tensor> {
    p.mlp
        .layers
        .iter()
        .flat_map(|l| [&l.weight, &l.bias])
        .collect()
}

fn encoding_tensors(e: &Encoding) -> Vec<&Tensor> {
    let fire = fire_tensors;
    match e {
        Encoding::Fire(p) => fire(p),
        Encoding::FireShared(s) => fire(&s.module),
        Encoding::FirePerLayer(p) => p.modules.iter().flat_map(fire).collect(),
        Encoding::Baseline(b) => b.params.values().collect(),
    }
}

/// The most query–key pairs a case may ask for: the suite's largest asks 400; a file the
/// harness does not trust could otherwise name 10⁵ queries and 10⁵ keys in a megabyte and have
/// the reference allocate ~80 GB before any check of its own. spec: [vec.case]
pub const MAX_PAIRS: usize = 1 << 22;

/// Where non-finite values may stand in an expected or acceptable output. spec: [vec.floats]
#[derive(Clone, Copy)]
enum Outputs {
    /// `expected`, `acceptable`: finite only.
    Normative,
    /// `expected_under`, `acceptable_under`: −∞ allowed (the `masked` convention), not NaN or +∞.
    UnderConvention,
}

fn check_values(at: &str, what: &str, t: &Tensor, allowed: Outputs) -> Result<(), LoadError> {
    let fine = |v: f64| match allowed {
        Outputs::Normative => v.is_finite(),
        Outputs::UnderConvention => v.is_finite() || v == f64::NEG_INFINITY,
    };
    match t.data.iter().position(|&v| !fine(v)) {
        None => Ok(()),
        Some(i) => Err(bad(
            at,
            format!(
                "{what} holds {} at element {i}; non-finite values appear only in invalid cases' \
                 parameters (and −∞ under the `masked` convention)",
                t.data[i]
            ),
        )),
    }
}

fn check_case(path: &str, stem: &str, case: &Case) -> Result<(), LoadError> {
    let at = format!("{path}: case `{}`", case.id);
    if !case.id.starts_with(stem) || case.id.len() <= stem.len() {
        return Err(bad(&at, format!("id must start with `{stem}`")));
    }
    let (queries, keys) = (case.inputs.queries.len(), case.inputs.keys.len());
    if queries
        .checked_mul(keys)
        .is_none_or(|pairs| pairs > MAX_PAIRS)
    {
        return Err(bad(
            &at,
            format!(
                "{queries} queries × {keys} keys: more than {MAX_PAIRS} query–key pairs, which no \
                 case of the suite asks for (refused before anything is allocated)"
            ),
        ));
    }
    if case.clauses.is_empty() || !case.clauses.iter().all(|c| clause_ok(c)) {
        return Err(bad(
            &at,
            format!(
                "clause ids must be non-empty, lowercase and dotted: {:?}",
                case.clauses
            ),
        ));
    }
    if compare::profile(&case.profile).is_none() {
        return Err(bad(&at, format!("unknown profile `{}`", case.profile)));
    }
    let inputs = [
        &case.inputs.cotangent,
        &case.inputs.q,
        &case.inputs.k,
        &case.inputs.v,
    ]
    .into_iter()
    .flatten()
    .map(|t| ("an input of a valid case", t));
    let params = encoding_tensors(&case.encoding)
        .into_iter()
        .map(|t| ("a parameter of a valid case", t));
    for (what, t) in inputs.chain(params) {
        check_tensor(&at, t)?;
        if case.result == Verdict::Valid {
            check_values(&at, what, t, Outputs::Normative)?;
        }
    }
    // Each alternative is shaped and scaled like the outputs it stands beside.
    let under = |name: &str| case.expected_under.as_ref().and_then(|u| u.get(name));
    let alternatives = case
        .acceptable
        .iter()
        .flatten()
        .map(|a| (a, case.expected.as_ref(), Outputs::Normative));
    let alternatives_under = case
        .acceptable_under
        .iter()
        .flatten()
        .flat_map(|(name, alts)| {
            alts.iter()
                .map(move |a| (a, under(name), Outputs::UnderConvention))
        });
    for (alternative, expected, allowed) in alternatives.chain(alternatives_under) {
        let Some(expected) = expected else {
            return Err(bad(
                &at,
                "an acceptable output stands beside no expected output (an invalid case, or an \
                 undeclared convention)",
            ));
        };
        for (name, t) in alternative {
            check_tensor(&at, t)?;
            check_values(&at, &format!("acceptable output `{name}`"), t, allowed)?;
            match expected.get(name) {
                Some(e) if e.shape == t.shape && t.scale == e.scale => {}
                _ => {
                    return Err(bad(
                        &at,
                        format!(
                        "acceptable output `{name}` is not shaped and scaled like the expected one"
                    ),
                    ))
                }
            }
        }
    }
    match (case.result, &case.expected) {
        (Verdict::Valid, Some(e)) if !e.is_empty() => {
            let normative = e.values().map(|t| (t, Outputs::Normative));
            let under = case.expected_under.iter().flat_map(|u| {
                u.values()
                    .flat_map(|m| m.values().map(|t| (t, Outputs::UnderConvention)))
            });
            for (t, allowed) in normative.chain(under) {
                check_tensor(&at, t)?;
                check_values(&at, "an expected output", t, allowed)?;
                if t.scale.is_none() {
                    return Err(bad(&at, "an expected tensor has no scale"));
                }
            }
        }
        (Verdict::Valid, _) => return Err(bad(&at, "a valid case needs expected outputs")),
        (Verdict::Invalid, None) if case.expected_under.is_none() => {}
        (Verdict::Invalid, _) => {
            return Err(bad(&at, "an invalid case carries no expected output"))
        }
    }
    Ok(())
}

/// Checks a parsed file's invariants.
pub fn check_file(path: &str, file: &VectorFile) -> Result<(), LoadError> {
    if file.format != FORMAT {
        return Err(bad(
            path,
            format!("format {} (this harness reads {FORMAT})", file.format),
        ));
    }
    let stem = format!("{}/", path.strip_suffix(".yaml").unwrap_or(path));
    if !path.starts_with(&format!("{}/", file.family)) {
        return Err(bad(
            path,
            format!("family `{}` does not match the folder", file.family),
        ));
    }
    let mut covered = BTreeSet::new();
    for case in &file.cases {
        check_case(path, &stem, case)?;
        covered.extend(case.clauses.iter().cloned());
    }
    let listed: BTreeSet<String> = file.clauses.iter().cloned().collect();
    if listed != covered {
        return Err(bad(
            path,
            "the file's clauses must be the union of its cases' clauses",
        ));
    }
    Ok(())
}

/// Parses a manifest's text.
pub fn parse_manifest(text: &str) -> Result<Manifest, LoadError> {
    let m: Manifest = from_yaml(text).map_err(|e| LoadError::Parse {
        path: MANIFEST.into(),
        message: e.to_string(),
    })?;
    if m.format != FORMAT {
        return Err(bad(
            MANIFEST,
            format!("format {} (this harness reads {FORMAT})", m.format),
        ));
    }
    Ok(m)
}

/// The files of a suite, wherever they are: what [`load_from`] reads.
pub trait Files {
    /// The bytes of the file at `rel` (a `/`-separated path inside the suite).
    fn read(&self, rel: &str) -> Result<Vec<u8>, LoadError>;
    /// Every `.yaml` file of the suite, `/`-separated and sorted.
    fn list(&self) -> Result<Vec<String>, LoadError>;
    /// Where they are, for reports.
    fn origin(&self) -> Origin;
}

/// A suite folder on disk.
#[derive(Debug, Clone, Copy)]
pub struct Dir<'a>(pub &'a Path);

impl Files for Dir<'_> {
    fn read(&self, rel: &str) -> Result<Vec<u8>, LoadError> {
        let path = self.0.join(rel);
        std::fs::read(&path).map_err(|error| LoadError::Io { path, error })
    }

    fn list(&self) -> Result<Vec<String>, LoadError> {
        yaml_files(self.0)
    }

    fn origin(&self) -> Origin {
        Origin::Dir(self.0.to_path_buf())
    }
}

/// Every `.yaml` file under `dir`, relative and `/`-separated, sorted; none when `dir` does
/// not exist (a suite not generated yet).
pub fn yaml_files(dir: &Path) -> Result<Vec<String>, LoadError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), LoadError> {
        let io = |error| LoadError::Io {
            path: dir.to_path_buf(),
            error,
        };
        if !dir.exists() {
            return Ok(());
        }
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let p = entry.map_err(io)?.path();
            if p.is_dir() {
                walk(root, &p, out)?;
            } else if p.extension().is_some_and(|e| e == "yaml") {
                let rel = p
                    .strip_prefix(root)
                    .unwrap_or(&p)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push(rel);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Files held in memory as `(relative path, bytes)`: the embedded suite, or a test's.
#[derive(Debug, Clone, Copy)]
pub struct InMemory<'a>(pub &'a [(&'a str, &'a [u8])]);

impl Files for InMemory<'_> {
    fn read(&self, rel: &str) -> Result<Vec<u8>, LoadError> {
        self.0
            .iter()
            .find(|(p, _)| *p == rel)
            .map(|(_, b)| b.to_vec())
            .ok_or_else(|| LoadError::Io {
                path: PathBuf::from(rel),
                error: std::io::Error::new(std::io::ErrorKind::NotFound, "not in the suite"),
            })
    }

    fn list(&self) -> Result<Vec<String>, LoadError> {
        let mut out: Vec<String> = self.0.iter().map(|(p, _)| (*p).to_owned()).collect();
        out.sort();
        Ok(out)
    }

    fn origin(&self) -> Origin {
        Origin::Embedded
    }
}

/// Loads the suite rooted at `dir`. spec: [vec.manifest]
pub fn load(dir: &Path) -> Result<Suite, LoadError> {
    load_from(&Dir(dir))
}

/// Loads a suite from any [`Files`], with the same checks whatever the source: every file
/// hashes to the manifest's SHA-256, none is unlisted, every case keeps the format's
/// invariants. spec: [vec.manifest], [vec.file]
pub fn load_from(source: &dyn Files) -> Result<Suite, LoadError> {
    let manifest_bytes = source.read(MANIFEST)?;
    let hash = sha256(&manifest_bytes);
    let text = String::from_utf8_lossy(&manifest_bytes).into_owned();
    let manifest = parse_manifest(&text)?;
    let on_disk = source.list()?;
    for p in &on_disk {
        if p != MANIFEST && !manifest.files.iter().any(|e| &e.path == p) {
            return Err(bad(p, "not listed in MANIFEST.yaml"));
        }
    }
    let mut files = Vec::new();
    let mut ids = BTreeSet::new();
    for entry in &manifest.files {
        if entry.path.contains("..") || entry.path.starts_with('/') {
            return Err(bad(&entry.path, "paths must stay inside the suite"));
        }
        let bytes = source.read(&entry.path)?;
        let got = sha256(&bytes);
        if got != entry.sha256 {
            return Err(LoadError::Hash {
                path: entry.path.clone(),
                want: entry.sha256.clone(),
                got,
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| bad(&entry.path, "not UTF-8"))?;
        let file = parse_file(&entry.path, &text)?;
        if file.cases.len() != entry.cases {
            return Err(bad(
                &entry.path,
                format!("{} cases, manifest says {}", file.cases.len(), entry.cases),
            ));
        }
        for c in &file.cases {
            if !ids.insert(c.id.clone()) {
                return Err(bad(&entry.path, format!("duplicate case id `{}`", c.id)));
            }
        }
        files.push((entry.path.clone(), file));
    }
    Ok(Suite {
        manifest,
        hash,
        files,
        origin: source.origin(),
    })
}
