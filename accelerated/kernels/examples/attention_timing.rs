//! Times the fused causal attention forward and backward for the side-by-side comparison with
//! PyTorch (`accelerated/benches/side_by_side.py` runs it between its own PyTorch timings):
//!
//! ```sh
//! cargo run --release -p fire-kernels --example attention_timing -- 2048 12 64 nope,fire,fire-s
//! ```
//!
//! Arguments: N, heads, head dim, variants (`nope`, `fire`, `fire-s`), repeats (default 1; the
//! fastest is reported; the variants take turns within each repeat, in an order that rotates
//! from repeat to repeat, so each goes first, second and third alike). Prints one JSON line per
//! variant and pass: `{"variant", "pass", "n", "seconds", "simd"}`. The forward of `fire`
//! builds FIRE's plan inside the call (one module per layer); `fire-s` uses a plan built once
//! (shared by the layers). The backward times [`fire_kernels::fused_causal_backward`] alone,
//! from the forward's output and log-sum-exp, with a random output gradient.

use std::time::Instant;

use fire_kernels::bench::Setup;
use fire_kernels::{fused_causal_backward, fused_causal_lse, simd, BiasPlan, GradPlan};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let n: usize = get(0, "2048").parse()?;
    let heads: usize = get(1, "12").parse()?;
    let d: usize = get(2, "64").parse()?;
    let variants = get(3, "nope,fire,fire-s");
    let repeats: usize = get(4, "1").parse()?;
    let s = Setup::new(heads, n, d, 0)?;
    let p = &s.positions;
    let grad = s.fire.grad_plan(p, p)?;
    let dout: Vec<f32> = s.q.iter().rev().copied().collect();
    let variants: Vec<&str> = variants.split(',').collect();
    if let Some(other) = variants
        .iter()
        .find(|v| !matches!(**v, "nope" | "fire" | "fire-s"))
    {
        return Err(format!("unknown variant {other}").into());
    }
    // (forward, backward) per variant, the fastest so far. The variants take turns within each
    // repeat, so a slow spell of the machine falls on all of them rather than on one's block,
    // and the turn order rotates from repeat to repeat: in a fixed order FIRE-S, always third,
    // ran 5-8 % behind FIRE on the very same backward (the same plan, the same work).
    let mut best = vec![(f64::INFINITY, f64::INFINITY); variants.len()];
    for repeat in 0..repeats.max(1) {
        for turn in 0..variants.len() {
            let slot = (turn + repeat) % variants.len();
            let variant = variants[slot];
            let (forward, backward) = &mut best[slot];
            let t = Instant::now();
            let (out, lse) = match variant {
                "fire" => {
                    let plan = s.fire_plan()?;
                    fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, Some(plan.as_ref()))?
                }
                "fire-s" => {
                    let plan: &dyn BiasPlan = grad.as_bias();
                    fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, Some(plan))?
                }
                _ => fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, None)?,
            };
            *forward = forward.min(t.elapsed().as_secs_f64());
            let plan: Option<&dyn GradPlan> = (variant != "nope").then_some(grad.as_ref());
            let t = Instant::now();
            let g =
                fused_causal_backward(1, &s.q, &s.k, &s.v, &out, &lse, &dout, s.shape, p, p, plan)?;
            *backward = backward.min(t.elapsed().as_secs_f64());
            std::hint::black_box(g);
        }
    }
    for (variant, (forward, backward)) in variants.iter().zip(best) {
        report(variant, "forward", n, forward);
        report(variant, "backward", n, backward);
    }
    Ok(())
}

fn report(variant: &str, pass: &str, n: usize, seconds: f64) {
    println!(
        "{{\"variant\": \"{variant}\", \"pass\": \"{pass}\", \"n\": {n}, \"seconds\": {seconds}, \"simd\": \"{}\"}}",
        simd::path()
    );
}
