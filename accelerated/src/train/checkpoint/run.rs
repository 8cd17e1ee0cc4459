//! A run's checkpoints as a set: listing them, verifying each, choosing the one to resume from,
//! and setting aside the newer ones a resume from an older checkpoint abandons.

use std::path::{Path, PathBuf};

use super::{storage, verify, Disk, Integrity, Problem};
use crate::error::{io, Error, Fallback, Result};

/// A checkpoint directory's name for `step` (`step-0000040`).
pub fn step_name(step: u64) -> String {
    format!("step-{step:07}")
}

/// The step a checkpoint directory name stands for.
fn parse_step(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Every checkpoint directory of `run` (`run/checkpoints/step-N`), oldest first; empty when the
/// run has none.
pub fn list(run: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let root = run.join("checkpoints");
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&root)(e)),
    };
    let mut out: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let step = parse_step(&e.file_name().to_string_lossy())?;
            Some((step, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The run directory a checkpoint directory belongs to (`run/checkpoints/step-N` → `run`).
pub(super) fn run_of(checkpoint: &Path) -> Option<&Path> {
    let parent = checkpoint.parent()?;
    (parent.file_name()? == "checkpoints").then(|| parent.parent())?
}

/// The newest checkpoint of `run`, other than `exclude`, that verifies against its manifest —
/// or, failing that, the newest without a manifest that reads back.
pub fn newest_good(run: &Path, exclude: Option<&Path>) -> Fallback {
    let Ok(all) = list(run) else {
        return Fallback::None;
    };
    let mut unverified = None;
    for (_, dir) in all.iter().rev() {
        if exclude.is_some_and(|x| x == dir) {
            continue;
        }
        match verify(dir) {
            Ok(Integrity::Verified) => return Fallback::Verified(dir.clone()),
            Ok(Integrity::Unverified) if unverified.is_none() => unverified = Some(dir.clone()),
            _ => {}
        }
    }
    unverified.map_or(Fallback::None, Fallback::Unverified)
}

/// One checkpoint's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The step.
    pub step: u64,
    /// The directory.
    pub dir: PathBuf,
    /// What [`verify`] found.
    pub result: std::result::Result<Integrity, Problem>,
}

/// Verifies every checkpoint of `run`, oldest first.
pub fn verify_run(run: &Path) -> Result<Vec<Verdict>> {
    Ok(list(run)?
        .into_iter()
        .map(|(step, dir)| Verdict {
            step,
            result: verify(&dir),
            dir,
        })
        .collect())
}

/// Which checkpoint a resumed run continues from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ResumeFrom {
    /// The one `latest` names.
    #[default]
    Latest,
    /// `step-N`.
    Step(u64),
    /// The newest one that verifies against its manifest.
    Verified,
}

impl std::str::FromStr for ResumeFrom {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "latest" => Ok(Self::Latest),
            "verified" => Ok(Self::Verified),
            _ => parse_step(s)
                .or_else(|| s.parse().ok())
                .map(Self::Step)
                .ok_or_else(|| {
                    format!("`{s}` is not a checkpoint: expected step-N, N, `latest` or `verified`")
                }),
        }
    }
}

/// The checkpoint directory of `run` that `from` designates.
pub fn select(run: &Path, from: &ResumeFrom) -> Result<PathBuf> {
    let all = list(run)?;
    let names = || {
        if all.is_empty() {
            "has no checkpoints".to_owned()
        } else {
            let n: Vec<String> = all.iter().map(|(s, _)| step_name(*s)).collect();
            format!("has {}", n.join(", "))
        }
    };
    match from {
        ResumeFrom::Latest => {
            if !run.join("latest").is_file() {
                return Err(Error::Checkpoint {
                    path: run.display().to_string(),
                    reason: format!("has no `latest` to resume from; it {}", names()),
                });
            }
            super::resolve(run)
        }
        ResumeFrom::Step(step) => all
            .iter()
            .find(|(s, _)| s == step)
            .map(|(_, d)| d.clone())
            .ok_or_else(|| Error::Checkpoint {
                path: run
                    .join("checkpoints")
                    .join(step_name(*step))
                    .display()
                    .to_string(),
                reason: format!("does not exist; the run {}", names()),
            }),
        ResumeFrom::Verified => all
            .iter()
            .rev()
            .find(|(_, d)| verify(d) == Ok(Integrity::Verified))
            .map(|(_, d)| d.clone())
            .ok_or_else(|| Error::Checkpoint {
                path: run.join("checkpoints").display().to_string(),
                reason: format!(
                    "none verifies; the run {} (`fire-lm verify` says why each fails)",
                    names()
                ),
            }),
    }
}

/// Makes `chosen` the run's newest checkpoint before training continues from it: every newer
/// checkpoint is moved (never deleted) to `run/checkpoints/superseded/`, and `latest` names
/// `chosen`. Returns the moves, `(from, to)`.
pub fn rewind(run: &Path, chosen: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let chosen_step = chosen
        .file_name()
        .and_then(|n| parse_step(&n.to_string_lossy()))
        .ok_or_else(|| Error::Checkpoint {
            path: chosen.display().to_string(),
            reason: "is not a `step-N` directory of the run".into(),
        })?;
    let aside = run.join("checkpoints").join("superseded");
    let mut moves = Vec::new();
    for (step, dir) in list(run)? {
        if step <= chosen_step {
            continue;
        }
        std::fs::create_dir_all(&aside).map_err(io(&aside))?;
        let name = step_name(step);
        let mut to = aside.join(&name);
        let mut n = 2;
        while to.exists() {
            to = aside.join(format!("{name}.{n}"));
            n += 1;
        }
        std::fs::rename(&dir, &to).map_err(io(&dir))?;
        moves.push((dir, to));
    }
    let latest = run.join("latest");
    let names_chosen =
        std::fs::read_to_string(&latest).is_ok_and(|n| n.trim() == step_name(chosen_step));
    if !names_chosen {
        storage::write_atomic(&Disk, &latest, step_name(chosen_step).as_bytes())
            .map_err(|(p, e)| io(p)(e))?;
    }
    Ok(moves)
}

#[cfg(test)]
mod tests {
    use super::ResumeFrom;

    #[test]
    fn resume_from_reads_what_a_user_types() {
        let parse = |s: &str| s.parse::<ResumeFrom>();
        assert_eq!(parse("step-0000040"), Ok(ResumeFrom::Step(40)));
        assert_eq!(parse("step-40"), Ok(ResumeFrom::Step(40)));
        assert_eq!(parse("40"), Ok(ResumeFrom::Step(40)));
        assert_eq!(parse("verified"), Ok(ResumeFrom::Verified));
        assert_eq!(parse("latest"), Ok(ResumeFrom::Latest));
        assert_eq!(
            parse("step-"),
            Err("`step-` is not a checkpoint: expected step-N, N, `latest` or `verified`".into())
        );
    }
}
