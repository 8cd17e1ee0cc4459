//! GFLOP/s of the fused transformer block's matrix products, at the training step's shapes,
//! for each way [`fire_kernels::gemm::Threading`] spreads a product over the threads:
//!
//! ```sh
//! cargo run --release -p fire-kernels --example gemm_timing -- 40
//! python3 accelerated/benches/torch_gemm.py      # torch's `a @ b` at the same shapes
//! ```
//!
//! Argument: calls per shape and threading (default 40). The threadings alternate call by
//! call, so machine load hits them alike; each figure is the median call. Shapes are those of
//! `fire-lm train` at d 256, 6 layers, FFN 1 024, 4 × 512 tokens ("large") and at d 128,
//! FFN 512, 16 × 128 tokens ("small"), named after the product in
//! `fire_accelerated::ops::block` (`ᵀ`: the operand is read transposed, as the block reads it).
//! A measurement, not a test.

use std::time::Instant;

use fire_kernels::gemm::{matmul_threaded, Mat, Threading};

/// (name, m, k, n, left read transposed, right read transposed).
const SHAPES: &[(&str, usize, usize, usize, bool, bool)] = &[
    ("large x·Wqkvᵀ", 2048, 256, 768, false, true),
    ("large h·W1ᵀ", 2048, 256, 1024, false, true),
    ("large g·W2ᵀ", 2048, 1024, 256, false, true),
    ("large dy·W2", 2048, 256, 1024, false, false),
    ("large dW2 = dyᵀ·g", 256, 2048, 1024, true, false),
    ("large dW1 = dzᵀ·h", 1024, 2048, 256, true, false),
    ("large dWqkv = dqkvᵀ·h", 768, 2048, 256, true, false),
    ("small x·Wqkvᵀ", 2048, 128, 384, false, true),
    ("small dW1 = dzᵀ·h", 512, 2048, 128, true, false),
    ("small dW2 = dyᵀ·g", 128, 2048, 512, true, false),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls: usize = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 40,
    };
    let threadings = [Threading::Gemm, Threading::Bands];
    println!(
        "{} threads, median of {calls} calls, GFLOP/s",
        rayon::current_num_threads()
    );
    println!("| product | m × k × n | Gemm | Bands | Bands ÷ Gemm |");
    println!("|---|---|---|---|---|");
    for &(name, m, k, n, ta, tb) in SHAPES {
        let fill = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7919 + seed) % 1000) as f32 * 1e-3 - 0.5)
                .collect()
        };
        let (a_data, b_data) = (fill(m * k, 1), fill(k * n, 2));
        let a = if ta {
            Mat::row_major(&a_data, k, m)?.t()
        } else {
            Mat::row_major(&a_data, m, k)?
        };
        let b = if tb {
            Mat::row_major(&b_data, n, k)?.t()
        } else {
            Mat::row_major(&b_data, k, n)?
        };
        let mut dst = vec![0f32; m * n];
        let mut seconds = vec![Vec::with_capacity(calls); threadings.len()];
        for _ in 0..calls {
            for (t, &threading) in threadings.iter().enumerate() {
                let start = Instant::now();
                matmul_threaded(&mut dst, a, b, false, threading)?;
                seconds[t].push(start.elapsed().as_secs_f64());
            }
        }
        let flops = 2.0 * (m * k * n) as f64;
        let gflops: Vec<f64> = seconds
            .iter_mut()
            .map(|s| {
                s.sort_by(f64::total_cmp);
                flops / s[s.len() / 2] / 1e9
            })
            .collect();
        println!(
            "| {name} | {m} × {k} × {n} | {:.0} | {:.0} | {:.2} |",
            gflops[0],
            gflops[1],
            gflops[1] / gflops[0]
        );
    }
    Ok(())
}
