//! `fire-lm bench`: one run, side by side — the kernel table of
//! `fire_kernels::bench::compare` and the end-to-end evaluation throughput — so that every
//! figure is a ratio measured on the same machine at the same moment.

use anyhow::Result;
use clap::Args;

use fire_accelerated::kernels::bench as kernel_bench;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Kernel-table lengths (`fire_kernels::bench::compare`); `--kernel-lengths` alone skips
    /// the kernel table.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "512,1024")]
    kernel_lengths: Vec<usize>,
    /// Heads of the kernel table.
    #[arg(long, default_value_t = 12)]
    kernel_heads: usize,
    /// Head dimension of the kernel table.
    #[arg(long, default_value_t = 64)]
    kernel_head_dim: usize,
    /// Attention variants of the kernel table (default: all): fused-nope, fused-nope-zero-bias,
    /// fused-fire, fused-fire-s, fused-alibi, fused-kerple-log, fused-kerple-power, fused-t5,
    /// fused-sandwich, materialised-fire. Run one variant per process under `/usr/bin/time -v`
    /// for an independent peak-memory figure.
    #[arg(long, value_delimiter = ',', value_parser = variant)]
    variants: Vec<kernel_bench::Variant>,
    /// Skip the kernel table's bias rows (materialised MLP vs compiled pairs/s).
    #[arg(long)]
    no_bias: bool,
    /// The largest `[H, N, N]` f32 bias materialised FIRE may allocate, in GiB (longer lengths
    /// skip that variant).
    #[arg(long, default_value_t = 4.0)]
    materialised_limit_gib: f64,
    /// Training length of the end-to-end model (FIRE's L_init, the candle chunk).
    #[arg(long, default_value_t = 64)]
    train_len: usize,
    /// Evaluated lengths, as multiples of the training length (`--multiples` alone skips
    /// end-to-end).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,2,4,8,16")]
    multiples: Vec<usize>,
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    #[arg(long, default_value_t = 2)]
    layers: usize,
    #[arg(long, default_value_t = 2)]
    repeats: usize,
    /// Skip the candle path above this length.
    #[arg(long, default_value_t = 1 << 20)]
    candle_max_len: usize,
    /// End-to-end: measure only fused FIRE (long-context memory runs).
    #[arg(long)]
    fire_only: bool,
}

/// A kernel-table variant by its name.
fn variant(name: &str) -> std::result::Result<kernel_bench::Variant, String> {
    kernel_bench::Variant::parse(name)
        .ok_or_else(|| format!("unknown variant `{name}` (see fire-lm bench --help)"))
}

pub fn run_bench(a: &BenchArgs) -> Result<()> {
    use fire_accelerated::throughput;
    eprintln!("threads: {}", rayon::current_num_threads());
    if !a.kernel_lengths.is_empty() {
        let mut variants = a.variants.clone();
        if !variants.is_empty() && !variants.contains(&kernel_bench::Variant::NopeNoBias) {
            // Every ratio is to fused NoPE: always measure it.
            variants.insert(0, kernel_bench::Variant::NopeNoBias);
        }
        let defaults = kernel_bench::Config::default();
        let cfg = kernel_bench::Config {
            heads: a.kernel_heads,
            head_dim: a.kernel_head_dim,
            lengths: a.kernel_lengths.clone(),
            repeats: a.repeats.max(1),
            variants: if variants.is_empty() {
                defaults.variants.clone()
            } else {
                variants
            },
            bias: !a.no_bias,
            materialised_limit_bytes: (a.materialised_limit_gib.max(0.0) * (1u64 << 30) as f64)
                as usize,
        };
        let table = kernel_bench::compare(&cfg, |l| eprintln!("{l}"))?;
        println!("{table}");
    }
    if !a.multiples.is_empty() {
        let cfg = throughput::Config {
            train_len: a.train_len,
            multiples: a.multiples.clone(),
            d_model: a.d_model,
            heads: a.heads,
            layers: a.layers,
            repeats: a.repeats,
            candle_max_len: a.candle_max_len,
            fire_only: a.fire_only,
        };
        let rows = throughput::end_to_end(&cfg, |l| eprintln!("{l}"))?;
        print!("{}", throughput::table(&cfg, &rows));
    }
    Ok(())
}
