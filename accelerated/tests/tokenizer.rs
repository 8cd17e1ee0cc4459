//! A Hugging Face `tokenizer.json` instead of bytes: loaded from a local file (built here, in
//! GPT-2's byte-level BPE format — nothing is downloaded), lossless round trips, clear errors
//! for bad files and too-small vocabularies, and a short training run whose evaluation reads
//! the same tokenizer back from the run's config.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use std::path::Path;

use candle_core::Device;
use fire_accelerated::config::{EncodingConfig, ModelConfig};
use fire_accelerated::data::Corpus;
use fire_accelerated::tokenizer::Tokenizer;
use fire_accelerated::train::{self, Options, TrainConfig};

/// GPT-2's reversible byte → printable character map.
fn byte_chars() -> Vec<char> {
    let mut bs: Vec<u32> = (u32::from('!')..=u32::from('~'))
        .chain(u32::from('¡')..=u32::from('¬'))
        .chain(u32::from('®')..=u32::from('ÿ'))
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut out = vec![' '; 256];
    for (b, c) in bs.iter().zip(&cs) {
        out[*b as usize] = char::from_u32(*c).unwrap();
    }
    out
}

const MERGES: [(&str, &str); 5] = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("o", "n")];

/// A byte-level BPE tokenizer: the 256 byte symbols plus five merges (261 ids).
fn write_tokenizer(path: &Path) {
    let mut vocab = serde_json::Map::new();
    for (id, c) in byte_chars().into_iter().enumerate() {
        vocab.insert(c.to_string(), id.into());
    }
    for (k, (a, b)) in MERGES.iter().enumerate() {
        vocab.insert(format!("{a}{b}"), (256 + k).into());
    }
    let byte_level = serde_json::json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true
    });
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "vocab": vocab,
            "merges": MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect::<Vec<_>>(),
        }
    });
    std::fs::write(path, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
}

#[test]
fn a_byte_level_bpe_tokenizer_json_round_trips_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    write_tokenizer(&path);
    let tok = Tokenizer::load(Some(&path)).unwrap();
    assert_eq!(tok.vocab_size(), 261);
    let text = "in the theory, on the naïve café — then\n\n";
    let ids = tok.encode(text).unwrap();
    assert!(ids.len() < text.len(), "merges shorten the sequence");
    assert!(
        ids.contains(&258),
        "\" the\" is one token (Ġthe = 258): {ids:?}"
    );
    assert_eq!(tok.decode(&ids).unwrap(), text);
    // Bytes stay the default and are lossless too.
    let bytes = Tokenizer::load(None).unwrap();
    assert_eq!(bytes.vocab_size(), 256);
    assert_eq!(bytes.decode(&bytes.encode(text).unwrap()).unwrap(), text);
    // The corpus loads through it.
    let corpus = Corpus::load_with(None, &tok).unwrap();
    assert!(corpus.tokens() < Corpus::embedded().tokens());
}

#[test]
fn bad_tokenizer_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let err = Tokenizer::load(Some(&missing)).unwrap_err().to_string();
    assert!(err.contains("nope.json"), "{err}");
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{\"model\": 3}").unwrap();
    let err = Tokenizer::load(Some(&garbage)).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json"), "{err}");
}

#[test]
fn training_and_evaluation_use_the_runs_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    write_tokenizer(&path);
    let t = TrainConfig {
        seq_len: 32,
        batch: 4,
        steps: 3,
        warmup: 1,
        checkpoint_every: 3,
        tokenizer: Some(path.clone()),
        ..TrainConfig::default()
    };
    let small = ModelConfig {
        d_model: 16,
        n_layers: 1,
        n_heads: 2,
        d_ff: 32,
        ..ModelConfig::tiny(EncodingConfig::Nope)
    };
    let opts = Options {
        run: dir.path().join("run"),
        ..Options::default()
    };
    // 256 ids cannot hold 261.
    let err = train::train(&small, &t, &opts, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("vocab_size 256") && err.contains("261"),
        "{err}"
    );
    let fits = ModelConfig {
        vocab_size: 261,
        ..small
    };
    let opts = Options {
        run: dir.path().join("run2"),
        ..Options::default()
    };
    let out = train::train(&fits, &t, &opts, &Device::Cpu).unwrap();
    assert!(out.losses.iter().all(|(_, l)| l.is_finite()));
    let config = std::fs::read_to_string(dir.path().join("run2/config.json")).unwrap();
    assert!(config.contains("tokenizer.json"), "{config}");
}
