//! Side-by-side measurement of the fast FIRE kernels; prints a markdown table of ratios.
//!
//! ```text
//! cargo run --release -p fire-accelerated --example fast_bench -- \
//!     [--lengths 2048,8192] [--repeats 3] [--heads 12] [--dim 64] \
//!     [--only fused-fire,fused-nope] [--no-bias] [--materialised-limit-gib 4]
//! ```
//! `--only` takes variant names (see `fire_accelerated::fast::bench::Variant::name`); run one
//! variant per process under `/usr/bin/time -v` for an independent peak-memory figure.

use anyhow::{anyhow, bail, Context, Result};
use fire_accelerated::fast::bench::{compare, Config, Variant};

fn main() -> Result<()> {
    let mut config = Config::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--lengths" => {
                config.lengths = value()?
                    .split(',')
                    .map(|s| s.parse().context("--lengths"))
                    .collect::<Result<_>>()?;
            }
            "--repeats" => config.repeats = value()?.parse().context("--repeats")?,
            "--heads" => config.heads = value()?.parse().context("--heads")?,
            "--dim" => config.head_dim = value()?.parse().context("--dim")?,
            "--only" => {
                config.variants = value()?
                    .split(',')
                    .map(|s| Variant::parse(s).ok_or_else(|| anyhow!("unknown variant {s}")))
                    .collect::<Result<_>>()?;
            }
            "--no-bias" => config.bias = false,
            "--materialised-limit-gib" => {
                let g: f64 = value()?.parse().context("--materialised-limit-gib")?;
                config.materialised_limit_bytes = (g * (1u64 << 30) as f64) as usize;
            }
            other => bail!("unknown flag {other}"),
        }
    }
    eprintln!("threads: {}", rayon::current_num_threads());
    let table = compare(&config, |line| eprintln!("{line}"))?;
    println!("{table}");
    Ok(())
}
