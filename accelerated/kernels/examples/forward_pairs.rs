//! FIRE's and FIRE-S's cost over NoPE in the fused causal forward, measured in one process as
//! paired ratios — the in-process measure of the speed notebook (`accelerated/results/
//! speed-rounds.md`), finer than `attention_timing`'s fastest-of-all for a change of a point or
//! two:
//!
//! ```sh
//! RAYON_NUM_THREADS=1 cargo run --release -p fire-kernels --example forward_pairs -- 2048 25
//! ```
//!
//! Arguments: N (default 2 048; 12 heads × 64 as `side_by_side.py`) and rounds (default 25).
//! Each round times NoPE, FIRE (its plan built inside the call) and FIRE-S (a plan built once),
//! each its fastest of 3 calls, in an order that rotates from round to round; the ratios are
//! taken within a round, so a slow spell of the machine falls on both sides of a ratio. Prints
//! the median and quartiles of FIRE ÷ NoPE, FIRE-S ÷ NoPE and FIRE ÷ FIRE-S. Run it with
//! glibc's `MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824`, as
//! `side_by_side.py` does (otherwise the 6 MiB output is mapped afresh in every call).

use std::time::Instant;

use fire_kernels::bench::Setup;
use fire_kernels::{fused_causal_lse, BiasPlan};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(2048), |a| a.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(25), |a| a.parse())?;
    if n == 0 || rounds == 0 {
        return Err("N and rounds must be at least 1".into());
    }
    let s = Setup::new(12, n, 64, 0)?;
    let p = &s.positions;
    let shared = s.fire.grad_plan(p, p)?;
    // 0: NoPE, 1: FIRE, 2: FIRE-S.
    let time = |variant: usize| -> Result<f64, Error> {
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            let out = match variant {
                1 => {
                    let plan = s.fire_plan()?;
                    fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, Some(plan.as_ref()))?
                }
                2 => {
                    let plan: &dyn BiasPlan = shared.as_bias();
                    fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, Some(plan))?
                }
                _ => fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, None)?,
            };
            best = best.min(t.elapsed().as_secs_f64());
            std::hint::black_box(out);
        }
        Ok(best)
    };
    let mut ratios = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..rounds {
        let mut t = [0.0; 3];
        for turn in 0..3 {
            let variant = (turn + round) % 3;
            t[variant] = time(variant)?;
        }
        ratios[0].push(t[1] / t[0]);
        ratios[1].push(t[2] / t[0]);
        ratios[2].push(t[1] / t[2]);
    }
    let names = ["FIRE ÷ NoPE", "FIRE-S ÷ NoPE", "FIRE ÷ FIRE-S"];
    println!("N = {n}, 12 × 64, {rounds} rounds (median [quartiles])");
    for (name, mut r) in names.into_iter().zip(ratios) {
        r.sort_by(f64::total_cmp);
        let at = |q: usize| r[(q * (r.len() - 1)) / 4];
        println!("{name:>14}: {:.3} [{:.3}–{:.3}]", at(2), at(1), at(3));
    }
    Ok(())
}
