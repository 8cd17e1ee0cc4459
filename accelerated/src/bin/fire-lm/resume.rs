//! `train --resume`: a resumed run keeps the settings it was started with (its config.json), so
//! a settings flag that says otherwise is refused by name rather than silently ignored.

use std::path::Path;

use anyhow::{bail, Result};
use fire_accelerated::config::ModelConfig;
use fire_accelerated::train::{self, TrainConfig};

use crate::{arg_name, TrainArgs};

/// The settings flags of `train` with the field each sets: on `--resume` the run's saved
/// config wins, so a flag that says otherwise would be silently ignored.
pub(crate) fn conflicts(
    a: &TrainArgs,
    given: &[String],
    m: &ModelConfig,
    t: &TrainConfig,
) -> Result<()> {
    // Missing or unreadable: the library's resume names that itself.
    let Ok((sm, st)) = train::read_config(&a.run) else {
        return Ok(());
    };
    let (sm, st) = (&sm, &st);
    let differs = |id: &str| -> Option<String> {
        let pair = |mine: String, theirs: String| (mine != theirs).then_some(theirs);
        match id {
            "config" => (m != sm).then(|| "a different model".to_owned()),
            "train_config" => (t != st).then(|| "different training settings".to_owned()),
            "encoding" => pair(m.encoding.name().into(), sm.encoding.name().into()),
            "rope_pi_scale" | "fire_l_init" | "fire_depth" => {
                pair(format!("{:?}", m.encoding), format!("{:?}", sm.encoding))
            }
            "init" => pair(arg_name(m.init), arg_name(sm.init)),
            "d_model" => pair(m.d_model.to_string(), sm.d_model.to_string()),
            "layers" => pair(m.n_layers.to_string(), sm.n_layers.to_string()),
            "heads" => pair(m.n_heads.to_string(), sm.n_heads.to_string()),
            "d_ff" => pair(m.d_ff.to_string(), sm.d_ff.to_string()),
            "seq_len" => pair(t.seq_len.to_string(), st.seq_len.to_string()),
            "batch" => pair(t.batch.to_string(), st.batch.to_string()),
            "steps" => pair(t.steps.to_string(), st.steps.to_string()),
            "warmup" => pair(t.warmup.to_string(), st.warmup.to_string()),
            "lr" => pair(t.lr.to_string(), st.lr.to_string()),
            "seed" => pair(t.seed.to_string(), st.seed.to_string()),
            "checkpoint_every" => pair(
                t.checkpoint_every.to_string(),
                st.checkpoint_every.to_string(),
            ),
            "corpus" => pair(format!("{:?}", t.corpus), format!("{:?}", st.corpus)),
            "tokenizer" => pair(format!("{:?}", t.tokenizer), format!("{:?}", st.tokenizer)),
            "attention" => pair(arg_name(t.attention), arg_name(st.attention)),
            _ => None,
        }
    };
    let clashes: Vec<String> = given
        .iter()
        .filter_map(|id| {
            differs(id).map(|theirs| format!("--{} (the run has {theirs})", id.replace('_', "-")))
        })
        .collect();
    if !clashes.is_empty() {
        bail!(
            "{} is resumed with the settings it was started with, so {} would be ignored; drop \
             them, or train a new run in another directory",
            a.run.display(),
            clashes.join(", ")
        );
    }
    Ok(())
}

/// The training settings saved in a run's config.json, where readable.
pub(crate) fn train_config_of(run: &Path) -> Option<TrainConfig> {
    train::read_config(run).ok().map(|(_, t)| t)
}
