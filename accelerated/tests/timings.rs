//! `train::Options::timings_after`: the parts of the steps after the warm-up, with the fused
//! block's parts inside the step's. In a test binary of its own: the timers are process-wide.

use candle_core::Device;
use fire_accelerated::config::{EncodingConfig, ModelConfig};
use fire_accelerated::train::{self, Options, TrainConfig};

#[test]
fn a_timed_run_reports_the_steps_after_the_warm_up_by_part() {
    let dir = tempfile::tempdir().unwrap();
    let m = ModelConfig {
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        d_ff: 64,
        ..ModelConfig::tiny(EncodingConfig::Nope)
    };
    let t = TrainConfig {
        seq_len: 32,
        batch: 2,
        steps: 5,
        ..TrainConfig::default()
    };
    let opts = Options {
        run: dir.path().join("run"),
        timings_after: Some(2),
        ..Options::default()
    };
    let out = train::train(&m, &t, &opts, &Device::Cpu).unwrap();
    let (steps, parts) = out.timings.expect("timings asked for");
    assert_eq!(steps, 3);
    let part = |name: &str| {
        parts
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no part {name} in {parts:?}"))
            .clone()
    };
    // Counted over the 3 timed steps only (the warm-up's were reset).
    assert_eq!(part("step").calls, 3);
    assert_eq!(part("step: forward").calls, 3);
    assert_eq!(part("block forward").calls, 3 * 2);
    assert_eq!(part("block backward").calls, 3 * 2);
    assert_eq!(part("block forward: products").calls, 3 * 2 * 4);
    // Nested parts fit inside the parts that hold them.
    assert!(part("block forward").seconds <= part("step: forward").seconds);
    assert!(part("block backward").seconds <= part("step: backward").seconds);
    assert!(part("step: forward").seconds + part("step: backward").seconds <= part("step").seconds);
    // The timers are off again: an untimed run leaves no trace.
    fire_accelerated::timing::reset();
    let again = Options {
        run: dir.path().join("again"),
        ..Options::default()
    };
    let out = train::train(&m, &t, &again, &Device::Cpu).unwrap();
    assert!(out.timings.is_none());
    assert!(fire_accelerated::timing::parts().is_empty());
}
