//! Side-by-side measurements of the fast kernels, returned as a table of ratios (what
//! `fire-lm bench` prints). Everything is measured in one process, variants interleaved
//! round-robin within each repeat so machine noise hits them alike; the table reports medians
//! and ratios to fused NoPE without bias.
//!
//! Peak memory is the resident-set high-water mark per variant on Linux (reset through
//! `/proc/self/clear_refs` before each run; `None` elsewhere), minus the resident size before
//! the run.

use std::fmt;
use std::time::Instant;

use rayon::prelude::*;

use fire_vocabulary::{Activation, Position, SplitMix64};

use crate::attention::{attend, fused_causal, Shape};
use crate::baselines::{alibi_slopes, DistanceBias, DistanceEncoding};
use crate::error::Result;
use crate::fire::{FireBias, FireParams};
use crate::materialised::{self, DenseMlp, Materialised};
use crate::mlp::{Linear, Mlp};
use crate::tile::{BiasPlan, TileBias};

/// One attention variant of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Fused kernel, no bias at all.
    NopeNoBias,
    /// Fused kernel, NoPE as an explicit zero bias.
    NopeZero,
    /// Fused kernel, FIRE: the plan built inside the call (one module per layer).
    Fire,
    /// Fused kernel, FIRE-S: one plan shared by every layer, built outside the call.
    FireShared,
    /// Fused kernel, Alibi.
    Alibi,
    /// Fused kernel, Kerple (log).
    KerpleLog,
    /// Fused kernel, Kerple (power).
    KerplePower,
    /// Fused kernel, T5 buckets.
    T5,
    /// Fused kernel, Sandwich.
    Sandwich,
    /// Appendix E: the `[H, N, N]` bias from the MLP on every pair, then the same kernel.
    MaterialisedFire,
}

impl Variant {
    /// Every variant, in table order.
    pub const ALL: [Variant; 10] = [
        Variant::NopeNoBias,
        Variant::NopeZero,
        Variant::Fire,
        Variant::FireShared,
        Variant::Alibi,
        Variant::KerpleLog,
        Variant::KerplePower,
        Variant::T5,
        Variant::Sandwich,
        Variant::MaterialisedFire,
    ];

    /// A stable name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::NopeNoBias => "fused-nope",
            Variant::NopeZero => "fused-nope-zero-bias",
            Variant::Fire => "fused-fire",
            Variant::FireShared => "fused-fire-s",
            Variant::Alibi => "fused-alibi",
            Variant::KerpleLog => "fused-kerple-log",
            Variant::KerplePower => "fused-kerple-power",
            Variant::T5 => "fused-t5",
            Variant::Sandwich => "fused-sandwich",
            Variant::MaterialisedFire => "materialised-fire",
        }
    }

    /// Parses [`Variant::name`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// The benchmark's draws: SplitMix64, symmetric around zero.
#[derive(Debug, Clone)]
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    /// Uniform in [−bound, bound).
    fn uniform(&mut self, bound: f64) -> f64 {
        bound * (2.0 * self.0.unit() - 1.0)
    }

    fn linear(&mut self, inputs: usize, outputs: usize) -> Result<Linear> {
        let b = 1.0 / (inputs as f64).sqrt();
        let w = (0..inputs * outputs).map(|_| self.uniform(b)).collect();
        let bias = (0..outputs).map(|_| self.uniform(b)).collect();
        Linear::new(w, bias, inputs, outputs)
    }
}

/// Appendix E's module shape (1 → 32 → H, ReLU) with PyTorch-like seeded weights.
pub fn appendix_e_mlp(heads: usize, seed: u64) -> Result<Mlp> {
    let mut rng = Rng::new(seed);
    Mlp::new(
        vec![rng.linear(1, 32)?, rng.linear(32, heads)?],
        Activation::Relu,
        None,
    )
}

/// The inputs of one benchmark size: random q, k, v `[H, N, d]`, positions `0..N`, and every
/// encoding built for them.
#[derive(Debug)]
pub struct Setup {
    /// The attention shape.
    pub shape: Shape,
    /// `q`.
    pub q: Vec<f32>,
    /// `k`.
    pub k: Vec<f32>,
    /// `v`.
    pub v: Vec<f32>,
    /// `0..N`.
    pub positions: Vec<Position>,
    /// f_θ.
    pub mlp: Mlp,
    /// FIRE's scalars (Appendix E's).
    pub params: FireParams,
    /// Compiled FIRE.
    pub fire: FireBias,
    /// `[NoPE, Alibi, Kerple log, Kerple power, T5, Sandwich]`.
    pub baselines: Vec<DistanceBias>,
}

impl Setup {
    /// Builds everything for `heads` heads, `n` tokens, head dimension `d`.
    pub fn new(heads: usize, n: usize, d: usize, seed: u64) -> Result<Self> {
        let mut rng = Rng::new(seed ^ 0x5EED);
        let mut draw =
            |len: usize, b: f64| -> Vec<f32> { (0..len).map(|_| rng.uniform(b) as f32).collect() };
        let q = draw(heads * n * d, 1.0);
        let k = draw(heads * n * d, 1.0);
        let v = draw(heads * n * d, 1.0);
        let half: Vec<f64> = draw(heads, 1.0)
            .iter()
            .map(|&x| 0.5 + 0.5 * f64::from(x))
            .collect();
        let t5: Vec<f64> = draw(heads * 32, 1.0)
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        let mlp = appendix_e_mlp(heads, seed)?;
        let params = FireParams::appendix_e();
        let fire = FireBias::new(mlp.clone(), params, n)?;
        let encodings = [
            DistanceEncoding::Nope,
            DistanceEncoding::Alibi {
                slopes: alibi_slopes(heads),
            },
            DistanceEncoding::KerpleLog {
                r1: half.clone(),
                r2: half.clone(),
            },
            DistanceEncoding::KerplePower {
                r1: half.clone(),
                r2: half.iter().map(|x| 2.0 * x).collect(),
            },
            DistanceEncoding::T5 {
                buckets: 32,
                max_distance: 128,
                table: t5,
            },
            DistanceEncoding::Sandwich { heads, dim: d },
        ];
        let baselines = encodings
            .into_iter()
            .map(|e| DistanceBias::new(e, heads, n))
            .collect::<Result<_>>()?;
        Ok(Self {
            shape: Shape {
                heads,
                queries: n,
                keys: n,
                head_dim: d,
            },
            q,
            k,
            v,
            positions: (0..n as Position).collect(),
            mlp,
            params,
            fire,
            baselines,
        })
    }

    /// FIRE's plan for the full sequence (what FIRE-S shares across layers).
    pub fn fire_plan(&self) -> Result<Box<dyn BiasPlan + '_>> {
        self.fire.plan(&self.positions, &self.positions)
    }

    fn fused(&self, e: Option<&dyn TileBias>) -> Result<Vec<f32>> {
        let p = &self.positions;
        attend(&self.q, &self.k, &self.v, self.shape, p, p, e)
    }

    /// The fused kernel with a prepared plan.
    pub fn run_planned(&self, plan: &dyn BiasPlan) -> Result<Vec<f32>> {
        let p = &self.positions;
        fused_causal(&self.q, &self.k, &self.v, self.shape, p, p, Some(plan))
    }

    /// One attention forward of `variant` (FIRE-S builds its plan here too; [`compare`]
    /// excludes it, as a model builds it once for all layers).
    pub fn run(&self, variant: Variant) -> Result<Vec<f32>> {
        let b = |i: usize| Some(&self.baselines[i] as &dyn TileBias);
        match variant {
            Variant::NopeNoBias => self.fused(None),
            Variant::NopeZero => self.fused(b(0)),
            Variant::Fire | Variant::FireShared => self.fused(Some(&self.fire)),
            Variant::Alibi => self.fused(b(1)),
            Variant::KerpleLog => self.fused(b(2)),
            Variant::KerplePower => self.fused(b(3)),
            Variant::T5 => self.fused(b(4)),
            Variant::Sandwich => self.fused(b(5)),
            Variant::MaterialisedFire => {
                let p = &self.positions;
                let data = materialised::fire_bias(&self.mlp, &self.params, p, p)?;
                let n = p.len();
                self.run_planned(&Materialised {
                    data,
                    queries: n,
                    keys: n,
                })
            }
        }
    }

    /// The causal FIRE bias (every pair j ≤ i, every head) by the MLP on every pair, f32,
    /// multithreaded over rows. Returns a checksum so the work is not optimised away.
    pub fn bias_materialised(&self) -> f32 {
        let heads = self.shape.heads;
        let dense = DenseMlp::new(&self.mlp);
        let params = &self.params;
        self.positions
            .par_iter()
            .map(|&i| {
                let norm = params.normaliser(i as f64) as f32;
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let mut out = vec![0f32; heads];
                let mut sum = 0.0;
                for j in 0..=i {
                    let x = params.psi((i - j) as f64) as f32 / norm;
                    dense.eval(x, &mut a, &mut b, &mut out);
                    sum += out[0];
                }
                sum
            })
            .sum()
    }

    /// The same causal bias from the compiled form through the plan's tiles (64 rows at a
    /// time, every head). Returns a checksum.
    pub fn bias_compiled(&self) -> f32 {
        let Ok(plan) = self.fire_plan() else {
            return f32::NAN;
        };
        let n = self.positions.len();
        let plan = plan.as_ref();
        (0..n.div_ceil(64))
            .into_par_iter()
            .map(|t| {
                let rows = t * 64..(t * 64 + 64).min(n);
                let cols = rows.end;
                let mut buf = vec![0f32; rows.len() * cols];
                let mut sum = 0.0;
                for h in 0..self.shape.heads {
                    plan.fill_causal(h, rows.clone(), 0..cols, &mut buf, cols);
                    sum += buf[buf.len() - 1];
                }
                sum
            })
            .sum()
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// `H` (12, as in Appendix E).
    pub heads: usize,
    /// `d` (64).
    pub head_dim: usize,
    /// Sequence lengths.
    pub lengths: Vec<usize>,
    /// Repeats per variant (the median is reported).
    pub repeats: usize,
    /// Variants to run; materialised FIRE is skipped where its bias exceeds
    /// `materialised_limit_bytes`.
    pub variants: Vec<Variant>,
    /// Largest `[H, N, N]` f32 bias the materialised variant may allocate.
    pub materialised_limit_bytes: usize,
    /// Whether to measure bias pairs/s (materialised MLP vs compiled).
    pub bias: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            heads: 12,
            head_dim: 64,
            lengths: vec![2048, 8192],
            repeats: 3,
            variants: Variant::ALL.to_vec(),
            materialised_limit_bytes: 4 << 30,
            bias: true,
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// `N`.
    pub n: usize,
    /// Median seconds per call.
    pub seconds: f64,
    /// Every repeat's seconds.
    pub samples: Vec<f64>,
    /// `seconds / baseline seconds` (fused NoPE for attention, the materialised MLP for bias).
    pub ratio: f64,
    /// The fastest repeat over the baseline's fastest: what the code costs when the shared
    /// machine's other work does not interfere (interference only ever adds time).
    pub min_ratio: f64,
    /// Median CPU seconds of the whole process (all threads) per call, where /proc has them:
    /// unlike wall time, not inflated by other processes holding the cores.
    pub cpu_seconds: Option<f64>,
    /// `cpu_seconds / baseline cpu_seconds`; `None` where the baseline's is under
    /// [`CPU_RATIO_MIN_SECONDS`] (a ratio of a few clock ticks, or 0/0, says nothing).
    pub cpu_ratio: Option<f64>,
    /// Pairs per second, for bias rows.
    pub pairs_per_second: Option<f64>,
    /// Peak resident memory above the start of the call, bytes (Linux only).
    pub peak_bytes: Option<u64>,
}

/// The measurements.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Rows in measurement order.
    pub rows: Vec<Row>,
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| what | N | median s | ratio | min ratio | CPU s | CPU ratio | pairs/s | peak RSS MiB | samples s |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|---|")?;
        for r in &self.rows {
            let pairs = r
                .pairs_per_second
                .map_or("-".into(), |p| format!("{p:.3e}"));
            let peak = r.peak_bytes.map_or("-".into(), |b| {
                format!("{:.1}", b as f64 / (1 << 20) as f64)
            });
            let samples: Vec<String> = r.samples.iter().map(|s| format!("{s:.3}")).collect();
            let cpu = r.cpu_seconds.map_or("-".into(), |c| format!("{c:.3}"));
            let cpu_ratio = r.cpu_ratio.map_or("-".into(), |c| format!("{c:.3}"));
            writeln!(
                f,
                "| {} | {} | {:.4} | {:.3} | {:.3} | {} | {} | {} | {} | {} |",
                r.name,
                r.n,
                r.seconds,
                r.ratio,
                r.min_ratio,
                cpu,
                cpu_ratio,
                pairs,
                peak,
                samples.join(" ")
            )?;
        }
        Ok(())
    }
}

/// Resident set size and its high-water mark, bytes, from /proc (Linux).
fn memory() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = s.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The least baseline CPU time a CPU ratio is formed from: ten of /proc's 1/100 s ticks, so a
/// tick either way moves the ratio by a tenth at most. Shorter calls (short lengths) show `-`.
pub const CPU_RATIO_MIN_SECONDS: f64 = 0.1;

/// The process's user + system CPU time (every thread), seconds, from /proc/self/stat
/// (Linux; clock ticks of 1/100 s, the kernel's `USER_HZ` on every mainstream architecture).
fn cpu_time() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// One measured call: wall seconds, CPU seconds, the peak resident memory it added.
struct Sample {
    wall: f64,
    cpu: Option<f64>,
    peak: Option<u64>,
}

/// Times `f` once, with its CPU time and the peak resident memory it added.
fn measure<T>(f: impl FnOnce() -> T) -> (Sample, T) {
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = memory();
    let cpu0 = cpu_time();
    let start = Instant::now();
    let out = f();
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu0.zip(cpu_time()).map(|(a, b)| b - a);
    let peak = match (reset, before, memory()) {
        (true, Some((rss, _)), Some((_, hwm))) => Some(hwm.saturating_sub(rss)),
        _ => None,
    };
    (Sample { wall, cpu, peak }, out)
}

fn min(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// Runs the comparison and returns the table. `progress` receives one line per measurement.
pub fn compare(config: &Config, mut progress: impl FnMut(&str)) -> Result<Table> {
    let mut table = Table::default();
    for &n in &config.lengths {
        let setup = Setup::new(config.heads, n, config.head_dim, 0)?;
        if config.bias {
            let pairs = (n * (n + 1) / 2) as f64;
            let mut mat = Vec::new();
            let mut comp = Vec::new();
            for _ in 0..config.repeats {
                mat.push(measure(|| setup.bias_materialised()).0.wall);
                comp.push(measure(|| setup.bias_compiled()).0.wall);
            }
            let (base, base_min) = (median(&mat), min(&mat));
            for (name, s) in [("bias-materialised-mlp", mat), ("bias-compiled", comp)] {
                let m = median(&s);
                progress(&format!("{name} N={n}: {m:.4} s"));
                table.rows.push(Row {
                    name: name.into(),
                    n,
                    seconds: m,
                    ratio: m / base,
                    min_ratio: min(&s) / base_min,
                    cpu_seconds: None,
                    cpu_ratio: None,
                    samples: s,
                    pairs_per_second: Some(pairs / m),
                    peak_bytes: None,
                });
            }
        }
        let plan = setup.fire_plan()?;
        let plan_s = measure(|| setup.fire_plan().map(|p| p.bytes())).0.wall;
        let variants: Vec<Variant> = config
            .variants
            .iter()
            .copied()
            .filter(|&v| {
                v != Variant::MaterialisedFire
                    || config.heads * n * n * 4 <= config.materialised_limit_bytes
            })
            .collect();
        let mut samples = vec![Vec::new(); variants.len()];
        let mut cpus: Vec<Option<Vec<f64>>> = vec![Some(Vec::new()); variants.len()];
        let mut peaks = vec![None; variants.len()];
        for _ in 0..config.repeats {
            for (k, &v) in variants.iter().enumerate() {
                let (s, out) = if v == Variant::FireShared {
                    measure(|| setup.run_planned(plan.as_ref()))
                } else {
                    measure(|| setup.run(v))
                };
                out?;
                samples[k].push(s.wall);
                cpus[k] = cpus[k].take().zip(s.cpu).map(|(mut c, x)| {
                    c.push(x);
                    c
                });
                peaks[k] = peaks[k].max(s.peak);
                progress(&format!("{} N={n}: {:.4} s", v.name(), s.wall));
            }
        }
        let nope = variants.iter().position(|&v| v == Variant::NopeNoBias);
        let (base, base_min) = nope.map_or((f64::NAN, f64::NAN), |k| {
            (median(&samples[k]), min(&samples[k]))
        });
        let base_cpu = nope
            .and_then(|k| cpus[k].as_deref().map(median))
            .filter(|&b| b >= CPU_RATIO_MIN_SECONDS);
        for (k, v) in variants.iter().enumerate() {
            let m = median(&samples[k]);
            let cpu = cpus[k].as_deref().map(median);
            table.rows.push(Row {
                name: v.name().into(),
                n,
                seconds: m,
                samples: samples[k].clone(),
                ratio: m / base,
                min_ratio: min(&samples[k]) / base_min,
                cpu_seconds: cpu,
                cpu_ratio: cpu.zip(base_cpu).map(|(c, b)| c / b),
                pairs_per_second: None,
                peak_bytes: peaks[k],
            });
        }
        progress(&format!(
            "fire plan N={n}: {plan_s:.4} s, {} bytes (FIRE-S builds it once per forward)",
            plan.bytes()
        ));
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap

    use super::*;

    /// Calls far shorter than /proc's clock tick have no CPU ratio (it had been 0/0 = NaN);
    /// their wall-clock ratios are still there.
    #[test]
    fn a_cpu_ratio_of_a_few_ticks_is_left_out_not_nan() {
        let config = Config {
            heads: 1,
            head_dim: 8,
            lengths: vec![4],
            repeats: 2,
            variants: vec![Variant::NopeNoBias, Variant::Fire],
            bias: false,
            ..Config::default()
        };
        let table = compare(&config, |_| {}).unwrap();
        assert_eq!(table.rows.len(), 2);
        for row in &table.rows {
            assert_eq!(row.cpu_ratio, None, "{}", row.name);
            assert!(row.ratio.is_finite(), "{}", row.name);
        }
        assert!(!table.to_string().contains("NaN"), "{table}");
    }
}
