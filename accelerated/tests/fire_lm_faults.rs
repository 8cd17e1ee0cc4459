//! The `fire-lm` command line under the faults of `faults.rs`: what a user sees on standard
//! error, word for word (the table in accelerated/README.md quotes these), and that each
//! refusal exits non-zero while the explicit way out (`--resume-from`) works.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use std::path::Path;
use std::process::{Command, Output};

const TINY: &[&str] = &[
    "--d-model",
    "32",
    "--layers",
    "2",
    "--heads",
    "2",
    "--d-ff",
    "64",
    "--seq-len",
    "32",
    "--batch",
    "4",
    "--warmup",
    "1",
    "--checkpoint-every",
    "2",
    "--quiet",
];

/// Runs `fire-lm args…` in `dir` (so paths in messages are the short relative ones a user
/// typed), without backtraces.
fn fire_lm(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fire-lm"))
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .output()
        .unwrap()
}

fn train(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--run", "run"];
    args.extend_from_slice(TINY);
    args.extend_from_slice(extra);
    fire_lm(dir, &args)
}

/// Standard error of a run that must have failed.
fn refused(out: &Output) -> String {
    assert!(!out.status.success(), "succeeded: {out:?}");
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn flip_two_bytes(file: &Path) {
    let mut b = std::fs::read(file).unwrap();
    let n = b.len();
    b[n - 100] ^= 0x10;
    b[n - 7] ^= 0x01;
    std::fs::write(file, b).unwrap();
}

#[test]
fn a_damaged_checkpoint_is_named_by_verify_eval_and_resume_and_resume_from_gets_past_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(&train(d, &["--steps", "6", "--stop-after", "4"]));
    let stdout = ok(&fire_lm(d, &["verify", "run"]));
    assert_eq!(
        stdout,
        "step-0000002: ok (every file matches manifest.json)\n\
         step-0000004 (latest): ok (every file matches manifest.json)\n\
         run: all 2 checkpoints verify\n"
    );

    flip_two_bytes(&d.join("run/checkpoints/step-0000004/model.safetensors"));
    let out = fire_lm(d, &["verify", "run"]);
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "step-0000002: ok (every file matches manifest.json)"
    );
    assert!(
        lines[1].starts_with(
            "step-0000004 (latest): FAILED: model.safetensors does not match its manifest: \
             SHA-256 "
        ),
        "{stdout}"
    );
    assert_eq!(
        refused(&out),
        "Error: run: 1 of 2 checkpoints fail verification (step-0000004); the newest checkpoint \
         that verifies is run/checkpoints/step-0000002; continue from it with `fire-lm train \
         --run run --resume-from step-0000002`\n"
    );

    let err = refused(&fire_lm(d, &["eval", "run", "--lengths", "32"]));
    assert!(
        err.starts_with(
            "Error: cannot evaluate the run run\n\nCaused by:\n    checkpoint run/checkpoints/step-0000004: \
             model.safetensors does not match its manifest: SHA-256 "
        ),
        "{err}"
    );
    assert!(
        err.ends_with("the newest checkpoint that verifies is run/checkpoints/step-0000002\n"),
        "{err}"
    );

    let err = refused(&train(d, &["--resume"]));
    assert!(
        err.starts_with(
            "Error: checkpoint run/checkpoints/step-0000004: model.safetensors does not match \
             its manifest: SHA-256 "
        ),
        "{err}"
    );
    assert!(
        err.ends_with(
            "; the newest checkpoint that verifies is run/checkpoints/step-0000002; continue \
             from it with `--run run --resume-from step-0000002`\n"
        ),
        "{err}"
    );

    let out = train(d, &["--resume-from", "step-2"]);
    let stdout = ok(&out);
    assert!(stdout.starts_with("trained 4 steps to loss "), "{stdout}");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "note: continuing from run/checkpoints/step-0000002: moved the newer \
         run/checkpoints/step-0000004 aside to run/checkpoints/superseded/step-0000004\n"
    );
    ok(&fire_lm(d, &["verify", "run"]));
}

#[test]
fn a_truncated_checkpoint_names_the_file_and_the_previous_good_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(&train(d, &["--steps", "4"]));
    let file = d.join("run/checkpoints/step-0000004/model.safetensors");
    let size = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(5000)
        .unwrap();
    assert_eq!(
        refused(&fire_lm(d, &["eval", "run", "--lengths", "32"])),
        format!(
            "Error: cannot evaluate the run run\n\nCaused by:\n    checkpoint run/checkpoints/step-0000004: \
             model.safetensors is 5000 bytes but its manifest records {size} (truncated since \
             it was written); the newest checkpoint that verifies is \
             run/checkpoints/step-0000002\n"
        )
    );
}

#[test]
fn divergence_and_bad_settings_are_said_in_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let err = refused(&train(d, &["--steps", "40", "--lr", "1000"]));
    assert!(err.starts_with("Error: diverged at step "), "{err}");
    let latest = std::fs::read_to_string(d.join("run/latest")).unwrap();
    assert!(
        err.ends_with(&format!(
            "; last good checkpoint {latest}; try a lower learning rate\n"
        )),
        "{err}"
    );

    let err = refused(&fire_lm(
        d,
        &["train", "--run", "other", "--lr=-1", "--quiet"],
    ));
    assert_eq!(
        err,
        "Error: --lr (`lr` in --train-config) must be a positive number, got -1\n"
    );
    let err = refused(&fire_lm(
        d,
        &["train", "--run", "other", "--keep-checkpoints", "0"],
    ));
    assert_eq!(
        err,
        "Error: --keep-checkpoints must be at least 1 (the newest checkpoint is always kept)\n"
    );
    let err = refused(&train(d, &["--resume-from", "step-3"]));
    assert_eq!(
        err,
        format!(
            "Error: checkpoint run/checkpoints/step-0000003: does not exist; the run has {}\n",
            checkpoints(d)
        )
    );
    let err = refused(&fire_lm(d, &["verify", "missing"]));
    assert_eq!(err, "Error: missing: no such run directory\n");
    let err = refused(&fire_lm(
        d,
        &["train", "--run", "other", "--d-model", "64", "--heads", "3"],
    ));
    assert!(
        err.contains(
            "the number of heads (3) must divide the model width (64): set by --heads and \
             --d-model, or `n_heads` and `d_model` in the model config"
        ),
        "{err}"
    );
    let err = refused(&fire_lm(d, &["train", "--run", "other", "--heads", "0"]));
    assert!(
        err.contains("the number of heads must be at least 1: set by --heads"),
        "{err}"
    );
    // A model flag next to --config would be ignored (the file defines the model): refused.
    std::fs::write(d.join("model.yaml"), "encoding:\n  kind: nope\n").unwrap();
    for flag in [
        &["--init", "gpt2"][..],
        &["--encoding", "alibi"],
        &["--d-model", "64"],
    ] {
        let mut args = vec!["train", "--run", "other", "--config", "model.yaml"];
        args.extend_from_slice(flag);
        let err = refused(&fire_lm(d, &args));
        let upper = flag[0]
            .trim_start_matches('-')
            .replace('-', "_")
            .to_uppercase();
        assert!(
            err.starts_with(&format!(
                "error: the argument '--config <CONFIG>' cannot be used with '{} <{upper}>'",
                flag[0]
            )),
            "{err}"
        );
    }
    // `run` holds the diverged run's last good checkpoint.
    let err = refused(&fire_lm(d, &["eval", "run", "--lengths", "0"]));
    assert!(
        err.contains("evaluation lengths (--lengths) must be positive, got [0]"),
        "{err}"
    );
}

/// The run's checkpoints as `select` lists them.
fn checkpoints(d: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(d.join("run/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    names.sort();
    names.join(", ")
}

/// A real write failure through the command line, root or not: a file-size limit
/// (`ulimit -f`, with SIGXFSZ ignored so the write returns EFBIG instead of killing the
/// process) smaller than `model.safetensors`. The resumed run's save at step 4 fails; step 2
/// and `latest` stay as they were and still verify.
#[cfg(target_os = "linux")]
#[test]
fn a_save_past_a_file_size_limit_fails_cleanly_and_keeps_the_previous_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(&train(d, &["--steps", "6", "--stop-after", "2"]));
    let mut script = format!(
        "trap '' XFSZ; ulimit -f 100; exec '{}' train --run run --resume",
        env!("CARGO_BIN_EXE_fire-lm")
    );
    for a in TINY {
        script.push(' ');
        script.push_str(a);
    }
    let out = Command::new("sh")
        .args(["-c", &script])
        .current_dir(d)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .output()
        .unwrap();
    assert_eq!(
        refused(&out),
        "Error: saving checkpoint step-0000004 failed: \
         run/checkpoints/.tmp-step-0000004/model.safetensors: File too large (os error 27); the \
         previous checkpoint run/checkpoints/step-0000002 and `latest` are unchanged\n"
    );
    let left: Vec<String> = std::fs::read_dir(d.join("run/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["step-0000002"]);
    assert_eq!(
        std::fs::read_to_string(d.join("run/latest")).unwrap(),
        "step-0000002"
    );
    assert_eq!(
        ok(&fire_lm(d, &["verify", "run"])),
        "step-0000002 (latest): ok (every file matches manifest.json)\n\
         run: its one checkpoint verifies\n"
    );
}

/// Standard error of a run refused with a clean error: non-zero, and not a panic (101).
fn clean_refusal(out: &Output) -> String {
    assert_ne!(out.status.code(), Some(101), "panicked: {out:?}");
    refused(out)
}

#[test]
fn absurd_sizes_and_nonsense_values_are_refused_not_panicked_on() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(&train(d, &["--steps", "2"]));
    // A batch no machine holds (~35 TB by the lower bound), said before anything is allocated
    // rather than in the allocator's abort.
    let mut huge = vec![
        "train",
        "--run",
        "huge",
        "--encoding",
        "fire",
        "--steps",
        "2",
    ];
    huge.extend(TINY);
    let batch = huge.iter().position(|a| *a == "--batch").unwrap();
    huge[batch + 1] = "1000000000";
    let err = clean_refusal(&fire_lm(d, &huge));
    assert!(
        err.starts_with(
            "Error: training 2 layers of d_model 32 and d_ff 64 over a vocabulary of 256 at \
             batch 1000000000 × seq_len 32 would need at least "
        ),
        "{err}"
    );
    assert!(
        err.contains("of memory, more than this machine's "),
        "{err}"
    );
    // A run directory that is a file: said so, not only "File exists".
    std::fs::write(d.join("a-file"), "").unwrap();
    let mut onto_file = vec!["train", "--run", "a-file"];
    onto_file.extend(TINY);
    let err = clean_refusal(&fire_lm(d, &onto_file));
    assert!(
        err.starts_with(
            "Error: invalid configuration: a-file is not a directory: the run's directory holds"
        ),
        "{err}"
    );
    let max = "18446744073709551615";
    let err = clean_refusal(&fire_lm(d, &["eval", "run", "--lengths", max]));
    assert!(
        err.contains("no held-out document has 18446744073709551616 tokens (longest: "),
        "{err}"
    );
    let err = clean_refusal(&fire_lm(d, &["generate", "run", "--max-new", max]));
    assert!(
        err.starts_with(&format!("Error: --max-new {max} would need at least ")),
        "{err}"
    );
    let err = clean_refusal(&fire_lm(d, &["bias", "run", "--query", max, "--out", "x"]));
    assert_eq!(
        err,
        format!(
            "Error: --query {max} is beyond 2^53 = 9007199254740992, the last exactly \
             representable position (the bias of run would need every key 0..=query)\n"
        )
    );
    let err = clean_refusal(&fire_lm(
        d,
        &["bias", "run", "--query", "1000000000000", "--out", "x"],
    ));
    assert!(
        err.starts_with("Error: --query 1000000000000 would need at least "),
        "{err}"
    );
    for t in ["nan", "-1", "inf"] {
        let err = clean_refusal(&fire_lm(
            d,
            &["generate", "run", &format!("--temperature={t}")],
        ));
        assert!(
            err.starts_with(
                "Error: invalid input: the temperature must be 0 (greedy) or a positive finite \
                 number, got "
            ),
            "{err}"
        );
    }
    for (flag, what) in [
        (
            "--max-windows",
            "at least 1 (the spans of the longest length)",
        ),
        ("--batch", "at least 1"),
        (
            "--split-at",
            "at least 1 (P splits each window into positions < P and >= P)",
        ),
    ] {
        let err = clean_refusal(&fire_lm(d, &["eval", "run", "--lengths", "32", flag, "0"]));
        assert_eq!(err, format!("Error: {flag} must be {what}, got 0\n"));
    }
    let err = clean_refusal(&fire_lm(
        d,
        &["train", "--run", "other", "--lr", "1e-320", "--quiet"],
    ));
    assert_eq!(
        err,
        "Error: --lr (`lr` in --train-config) must be at least 1.1754944e-38 (the smallest \
         normal f32: the optimizer computes in f32), got 1e-320\n"
    );
    std::fs::write(d.join("t.yaml"), format!("position_offset: {max}\n")).unwrap();
    let err = clean_refusal(&fire_lm(
        d,
        &["train", "--run", "other", "--train-config", "t.yaml"],
    ));
    assert_eq!(
        err,
        format!(
            "Error: `position_offset` in --train-config plus seq_len (128) must be at most 2^53 \
             = 9007199254740992 (positions beyond are not exactly representable), got {max}\n"
        )
    );
    // A model config with nonsense numbers, from the run's own.
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run/config.json")).unwrap()).unwrap();
    for (key, value, what) in [
        (
            "layer_norm_eps",
            serde_json::json!(0.0),
            "`layer_norm_eps` in the model config must be a positive finite number, got 0",
        ),
        (
            "init_std",
            serde_json::json!(-1.0),
            "`init_std` in the model config must be 0 or a positive finite number, got -1",
        ),
        (
            "vocab_size",
            serde_json::json!(1),
            "the vocabulary must have at least 2 tokens, got 1: set by --tokenizer's \
             vocabulary, or `vocab_size` in the model config",
        ),
    ] {
        let mut m = saved["model"].clone();
        m[key] = value;
        std::fs::write(d.join("m.json"), m.to_string()).unwrap();
        let err = clean_refusal(&fire_lm(
            d,
            &["train", "--run", "other", "--config", "m.json"],
        ));
        assert_eq!(err, format!("Error: invalid configuration: {what}\n"));
    }
}

#[test]
fn resume_refuses_flags_it_would_ignore_and_says_when_the_run_is_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(&train(d, &["--steps", "2"]));
    let err = clean_refusal(&fire_lm(
        d,
        &[
            "train",
            "--run",
            "run",
            "--resume",
            "--steps",
            "10",
            "--lr",
            "5",
            "--d-model",
            "64",
            "--encoding",
            "nope",
        ],
    ));
    assert_eq!(
        err,
        "Error: run is resumed with the settings it was started with, so --steps (the run has \
         2), --lr (the run has 0.003), --d-model (the run has 32), --encoding (the run has \
         fire) would be ignored; drop them, or train a new run in another directory\n"
    );
    // The same flags as the run's own are fine: the run is complete, and says so, with success
    // (nothing failed; a script resuming until done ends there).
    let said = ok(&train(d, &["--steps", "2", "--resume"]));
    assert_eq!(
        said,
        "run is already complete at step 2 of 2; nothing to train\n"
    );
}

#[test]
fn a_misplaced_state_and_another_models_weights_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // The default encoding is FIRE; a NoPE run of the same sizes beside it.
    ok(&train(d, &["--steps", "2"]));
    let mut nope = vec![
        "train",
        "--run",
        "nope",
        "--encoding",
        "nope",
        "--steps",
        "2",
    ];
    nope.extend_from_slice(TINY);
    ok(&fire_lm(d, &nope));
    let ckpt = |run: &str, step: &str| d.join(run).join("checkpoints").join(step);
    // A checkpoint copied under another step's name (its manifest intact): its state.json would
    // resume the schedule at the wrong step.
    let (from, to) = (ckpt("run", "step-0000002"), ckpt("run", "step-0000004"));
    std::fs::create_dir(&to).unwrap();
    for f in std::fs::read_dir(&from).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
    }
    let err = refused(&fire_lm(d, &["verify", "run"]));
    let out = String::from_utf8(fire_lm(d, &["verify", "run"]).stdout).unwrap();
    assert!(
        out.contains(
            "step-0000004: FAILED: state.json says step 2 but sits in `step-0000004` (step 4)"
        ),
        "{out}{err}"
    );
    // A FIRE model's weights in the NoPE run (a checkpoint without a manifest, as older ones
    // are): the FIRE tensors have no place in its model, and are named rather than ignored.
    let target = ckpt("nope", "step-0000002");
    std::fs::copy(
        from.join("model.safetensors"),
        target.join("model.safetensors"),
    )
    .unwrap();
    std::fs::remove_file(target.join("manifest.json")).unwrap();
    let err = clean_refusal(&fire_lm(d, &["eval", "nope", "--lengths", "32"]));
    assert!(
        err.contains(
            "model.safetensors holds 14 tensor(s) the model in state.json has no place for: \
             `layers.0.attn.fire.L_multiplier`, "
        ),
        "{err}"
    );
    let err = clean_refusal(&fire_lm(d, &["train", "--run", "nope", "--resume"]));
    assert!(err.contains("has no place for"), "{err}");
}

/// Runs scored on different held-out text (here another corpus) do not share a table of losses
/// per token: it would read as a comparison that it is not.
#[test]
fn runs_trained_on_different_text_are_not_evaluated_side_by_side() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(&train(d, &["--steps", "2"]));
    std::fs::create_dir(d.join("corpus")).unwrap();
    for name in ["a", "b", "c", "d"] {
        let text = format!("{name}: the quick brown fox jumps over the lazy dog. ").repeat(60);
        std::fs::write(d.join("corpus").join(format!("{name}.txt")), text).unwrap();
    }
    let mut other = vec![
        "train", "--run", "other", "--steps", "2", "--corpus", "corpus",
    ];
    other.extend(TINY);
    ok(&fire_lm(d, &other));
    let err = clean_refusal(&fire_lm(d, &["eval", "run", "other", "--lengths", "32"]));
    assert_eq!(
        err,
        "Error: run and other were trained on different text (corpus embedded vs corpus): their \
         losses per token are over different held-out tokens and cannot share a table; evaluate \
         them one at a time\n"
    );
    ok(&fire_lm(d, &["eval", "other", "--lengths", "32"]));
}
