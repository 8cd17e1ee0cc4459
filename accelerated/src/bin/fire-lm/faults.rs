//! `fire-lm verify`, and the last step of a fault's message: what the user can do next, in
//! the command line's words (flags rather than the library's field names).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;

use fire_accelerated::error::Fallback;
use fire_accelerated::train::checkpoint::{self, Integrity};
use fire_accelerated::train::TrainConfig;
use fire_accelerated::Error;

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Run directory.
    run: PathBuf,
}

/// Prints one line per checkpoint of the run and fails, naming the newest checkpoint that
/// verifies, when any does not.
pub fn run_verify(a: &VerifyArgs) -> Result<()> {
    let run = &a.run;
    if !run.is_dir() {
        bail!("{}: no such run directory", run.display());
    }
    let verdicts = checkpoint::verify_run(run)?;
    if verdicts.is_empty() {
        bail!(
            "{}: no checkpoints to verify (expected {}/checkpoints/step-N/)",
            run.display(),
            run.display()
        );
    }
    let latest = std::fs::read_to_string(run.join("latest")).ok();
    let latest = latest.as_deref().map(str::trim);
    let mut failed = Vec::new();
    for v in &verdicts {
        let name = checkpoint::step_name(v.step);
        let mark = if latest == Some(name.as_str()) {
            " (latest)"
        } else {
            ""
        };
        match &v.result {
            Ok(Integrity::Verified) => println!("{name}{mark}: ok (every file matches manifest.json)"),
            Ok(Integrity::Unverified) => println!(
                "{name}{mark}: readable, but has no manifest.json to verify (written by an older fire-lm)"
            ),
            Err(p) => {
                println!("{name}{mark}: FAILED: {} {}", p.file, p.reason);
                failed.push(name);
            }
        }
    }
    if let Some(l) = latest {
        if !verdicts.iter().any(|v| checkpoint::step_name(v.step) == l) {
            bail!(
                "{}: `latest` names `{l}`, which is not a checkpoint of the run; {}",
                run.display(),
                next_step(run, &checkpoint::newest_good(run, None))
            );
        }
    }
    if failed.is_empty() {
        match verdicts.len() {
            1 => println!("{}: its one checkpoint verifies", run.display()),
            n => println!("{}: all {n} checkpoints verify", run.display()),
        }
        return Ok(());
    }
    bail!(
        "{}: {} of {} checkpoints fail verification ({}); {}",
        run.display(),
        failed.len(),
        verdicts.len(),
        failed.join(", "),
        next_step(run, &checkpoint::newest_good(run, None))
    )
}

/// What to do about a corrupt checkpoint: where to continue from, in flags.
fn next_step(run: &Path, fallback: &Fallback) -> String {
    match fallback.path().and_then(|p| p.file_name()) {
        Some(name) => format!(
            "{fallback}; continue from it with `fire-lm train --run {} --resume-from {}`",
            run.display(),
            name.to_string_lossy()
        ),
        None => fallback.to_string(),
    }
}

/// The library's error with the command that gets past it where there is one: a corrupt
/// checkpoint names `--resume-from` for the newest one that verifies.
pub fn explain(e: Error) -> anyhow::Error {
    match &e {
        Error::Corrupt {
            checkpoint,
            fallback,
            ..
        } => match (
            fallback.path().and_then(|p| p.file_name()),
            run_of(checkpoint),
        ) {
            (Some(name), Some(run)) => anyhow::anyhow!(
                "{e}; continue from it with `--run {} --resume-from {}`",
                run.display(),
                name.to_string_lossy()
            ),
            _ => e.into(),
        },
        _ => e.into(),
    }
}

/// `run/checkpoints/step-N` → `run`.
fn run_of(checkpoint: &Path) -> Option<&Path> {
    let parent = checkpoint.parent()?;
    (parent.file_name()? == "checkpoints").then(|| parent.parent())?
}

/// Fails naming the first training setting out of range by its flag (and its key in
/// `--train-config`).
pub fn check_train_config(t: &TrainConfig) -> Result<()> {
    if let Some((field, what)) = t.problems().into_iter().next() {
        let flag = match field {
            "seq_len" | "batch" | "steps" | "warmup" | "lr" | "seed" | "checkpoint_every" => {
                format!(
                    "--{} (`{field}` in --train-config)",
                    field.replace('_', "-")
                )
            }
            _ => format!("`{field}` in --train-config"),
        };
        bail!("{flag} {what}");
    }
    Ok(())
}
