//! Where a training step's time goes, before and after the fused CPU ops and the SIMD dispatch,
//! measured in one run and one process so the machine's load hits both sides alike:
//!
//! ```sh
//! cargo run --release -p fire-accelerated --example step_profile -- \
//!     --d-model 128 --layers 4 --heads 4 --d-ff 512 --seq-len 128 --batch 16 --encoding fire
//! ```
//!
//! "before" is the code as it was without them (`ops::use_composed(true)`: layer norm, GeLU,
//! cross-entropy and AdamW as compositions of candle primitives, the linear layers as batched
//! products; `fire_kernels::simd::force_plain_path(true)`: the attention's inner loops at the
//! baseline SSE2 width); "after" is what `fire-lm train` runs. The two alternate `--rounds`
//! times. Printed (markdown): the median seconds of each phase of the step (forward, loss,
//! backward, clipping, AdamW) and, at the step's shapes, of each kind of op forward + backward
//! times how often a step runs it; what the ops do not cover (embedding, residual adds,
//! reshapes, autograd's own work) is the step minus their sum. A measurement, not a test.

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::{Device, Tensor, Var};
use fire_accelerated::attention::{fused_train, AttentionPath, Purpose};
use fire_accelerated::config::{EncodingConfig, ModelConfig};
use fire_accelerated::encodings::LayerBias;
use fire_accelerated::model::Model;
use fire_accelerated::nn::{self, LayerNorm, Linear};
use fire_accelerated::ops;
use fire_accelerated::optim::{clipped_gradients, AdamW, AdamWConfig};
use fire_accelerated::params::ParamStore;
use fire_vocabulary::SplitMix64;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Clone)]
struct Args {
    d_model: usize,
    layers: usize,
    heads: usize,
    d_ff: usize,
    seq_len: usize,
    batch: usize,
    encoding: String,
    steps: usize,
    rounds: usize,
}

fn args() -> Res<Args> {
    let mut a = Args {
        d_model: 128,
        layers: 4,
        heads: 4,
        d_ff: 512,
        seq_len: 128,
        batch: 16,
        encoding: "fire".into(),
        steps: 8,
        rounds: 3,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let [key, value] = pair else {
            return Err(format!("{} has no value", pair[0]).into());
        };
        let n = || value.parse::<usize>();
        match key.as_str() {
            "--d-model" => a.d_model = n()?,
            "--layers" => a.layers = n()?,
            "--heads" => a.heads = n()?,
            "--d-ff" => a.d_ff = n()?,
            "--seq-len" => a.seq_len = n()?,
            "--batch" => a.batch = n()?,
            "--steps" => a.steps = n()?,
            "--rounds" => a.rounds = n()?,
            "--encoding" => a.encoding = value.clone(),
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    Ok(a)
}

/// Phase and op timings of one side, each a list of seconds.
#[derive(Debug, Default)]
struct Side {
    times: BTreeMap<&'static str, Vec<f64>>,
}

impl Side {
    fn add(&mut self, what: &'static str, s: f64) {
        self.times.entry(what).or_default().push(s);
    }
    fn median(&self, what: &str) -> f64 {
        let mut v = self.times.get(what).cloned().unwrap_or_default();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
}

fn set_side(after: bool) {
    ops::use_composed(!after);
    fire_kernels::simd::force_plain_path(!after);
}

fn random(shape: &[usize], rng: &mut SplitMix64) -> Res<Var> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
    Ok(Var::from_tensor(&Tensor::from_vec(
        v,
        shape,
        &Device::Cpu,
    )?)?)
}

/// Whole training steps (as `fire_accelerated::train` runs them, on random tokens).
fn steps(a: &Args, side: &mut Side) -> Res<()> {
    let dev = Device::Cpu;
    let cfg = ModelConfig {
        vocab_size: 256,
        d_model: a.d_model,
        n_layers: a.layers,
        n_heads: a.heads,
        d_ff: a.d_ff,
        ..ModelConfig::tiny(EncodingConfig::from_name(&a.encoding, 1.0)?)
    };
    let mut store = ParamStore::fresh(&dev, 1);
    let model = Model::new(&cfg, &mut store)?;
    let params = store.trainable().clone();
    let mut opt = AdamW::new(AdamWConfig::default(), &params)?;
    let backend = model.backend(AttentionPath::Fused, Purpose::Train)?;
    let mut rng = SplitMix64::new(7);
    let (b, t) = (a.batch, a.seq_len);
    for step in 0..a.steps + 2 {
        let tokens: Vec<u32> = (0..b * (t + 1)).map(|_| rng.below(256) as u32).collect();
        let all = Tensor::from_vec(tokens, (b, t + 1), &dev)?;
        let (x, y) = (all.narrow(1, 0, t)?, all.narrow(1, 1, t)?.contiguous()?);
        let t0 = Instant::now();
        let logits = model.forward(&x, &backend, None)?;
        let t1 = Instant::now();
        let loss = nn::cross_entropy(&logits.reshape(((), 256))?, &y.flatten_all()?)?;
        let _: f32 = loss.to_scalar()?;
        let t2 = Instant::now();
        let grads = loss.backward()?;
        let t3 = Instant::now();
        let (grads, _) = clipped_gradients(&params, &grads, 1.0)?;
        let t4 = Instant::now();
        opt.update(&params, &grads, 1e-3)?;
        let t5 = Instant::now();
        if step >= 2 {
            side.add("step", (t5 - t0).as_secs_f64());
            side.add("forward", (t1 - t0).as_secs_f64());
            side.add("loss", (t2 - t1).as_secs_f64());
            side.add("backward", (t3 - t2).as_secs_f64());
            side.add("clip", (t4 - t3).as_secs_f64());
            side.add("adamw", (t5 - t4).as_secs_f64());
        }
    }
    Ok(())
}

/// Forward + backward of `f` on fresh inputs, `repeats` times, the median added as `what`.
fn time_op(
    side: &mut Side,
    what: &'static str,
    repeats: usize,
    mut f: impl FnMut() -> Res<Tensor>,
) -> Res<()> {
    let mut v = Vec::new();
    for _ in 0..repeats {
        let t0 = Instant::now();
        let out = f()?;
        let _ = out.sum_all()?.backward()?;
        v.push(t0.elapsed().as_secs_f64());
    }
    v.sort_by(f64::total_cmp);
    side.add(what, v[v.len() / 2]);
    Ok(())
}

/// Each kind of op at the step's shapes, forward + backward, once.
fn ops_once(a: &Args, side: &mut Side) -> Res<()> {
    let (b, t, d, ff) = (a.batch, a.seq_len, a.d_model, a.d_ff);
    let dh = d / a.heads;
    let mut rng = SplitMix64::new(3);
    let q = random(&[b, a.heads, t, dh], &mut rng)?;
    let k = random(&[b, a.heads, t, dh], &mut rng)?;
    let v = random(&[b, a.heads, t, dh], &mut rng)?;
    time_op(side, "attention (NoPE kernel)", 5, || {
        Ok(fused_train::attend(
            q.as_tensor(),
            k.as_tensor(),
            v.as_tensor(),
            &LayerBias::None,
            0,
            0,
        )?)
    })?;
    let x = random(&[b, t, d], &mut rng)?;
    let ln = LayerNorm {
        weight: random(&[d], &mut rng)?.as_tensor().clone(),
        bias: random(&[d], &mut rng)?.as_tensor().clone(),
        eps: 1e-5,
    };
    time_op(side, "layer norm", 5, || Ok(ln.forward(x.as_tensor())?))?;
    let y = random(&[b, t, ff], &mut rng)?;
    let bias = random(&[ff], &mut rng)?;
    time_op(side, "bias + GeLU", 5, || {
        let (y, bias) = (y.as_tensor(), bias.as_tensor());
        Ok(if ops::fusable(y) {
            ops::bias_gelu(y, bias)?
        } else {
            y.broadcast_add(bias)?.gelu_erf()?
        })
    })?;
    let logits = random(&[b * t, 256], &mut rng)?;
    let targets: Vec<u32> = (0..b * t).map(|_| rng.below(256) as u32).collect();
    let targets = Tensor::from_vec(targets, b * t, &Device::Cpu)?;
    time_op(side, "cross-entropy", 5, || {
        Ok(nn::cross_entropy(logits.as_tensor(), &targets)?)
    })?;
    let mut store = ParamStore::fresh(&Device::Cpu, 5);
    let mut root = store.root();
    let square = Linear::new(&mut root.pp("sq"), d, d, false)?;
    let up = Linear::new(&mut root.pp("up"), d, ff, true)?;
    let down = Linear::new(&mut root.pp("down"), ff, d, true)?;
    let head = Linear::new(&mut root.pp("head"), d, 256, false)?;
    let h = random(&[b, t, ff], &mut rng)?;
    time_op(side, "linear d→d", 5, || {
        Ok(square.forward(x.as_tensor())?)
    })?;
    time_op(side, "linear d→ff", 5, || Ok(up.forward(x.as_tensor())?))?;
    time_op(side, "linear ff→d", 5, || Ok(down.forward(h.as_tensor())?))?;
    time_op(side, "linear head", 5, || Ok(head.forward(x.as_tensor())?))?;
    Ok(())
}

fn main() -> Res<()> {
    let a = args()?;
    let mut sides = [Side::default(), Side::default()];
    for _ in 0..a.rounds {
        for (after, side) in sides.iter_mut().enumerate() {
            set_side(after == 1);
            steps(&a, side)?;
            ops_once(&a, side)?;
        }
    }
    set_side(true);
    let l = a.layers as f64;
    // How often one step runs each op (forward + backward).
    let ops_per_step: [(&str, f64); 8] = [
        ("attention (NoPE kernel)", l),
        ("layer norm", 2.0 * l + 1.0),
        ("bias + GeLU", l),
        ("cross-entropy", 1.0),
        ("linear d→d", 4.0 * l),
        ("linear d→ff", l),
        ("linear ff→d", l),
        ("linear head", 1.0),
    ];
    println!(
        "training step, {} layers, d {}, {} heads, FFN {}, batch {} × {}, {}; {} rounds of {} \
         steps per side, SIMD path {}, {} rayon threads\n",
        a.layers,
        a.d_model,
        a.heads,
        a.d_ff,
        a.batch,
        a.seq_len,
        a.encoding,
        a.rounds,
        a.steps,
        fire_kernels::simd::path(),
        rayon::current_num_threads()
    );
    println!("| part of the step | before (s) | after (s) | before ÷ after |");
    println!("|---|---|---|---|");
    let row = |what: &str, x: f64, y: f64| {
        println!("| {what} | {x:.4} | {y:.4} | {:.2} |", x / y);
    };
    for phase in ["step", "forward", "loss", "backward", "clip", "adamw"] {
        row(phase, sides[0].median(phase), sides[1].median(phase));
    }
    let mut covered = [0.0; 2];
    for (what, count) in ops_per_step {
        let [x, y] = [sides[0].median(what), sides[1].median(what)];
        covered[0] += x * count;
        covered[1] += y * count;
        row(&format!("{what} ×{count}, fwd+bwd"), x * count, y * count);
    }
    let [x, y] = [
        sides[0].median("forward") + sides[0].median("loss") + sides[0].median("backward")
            - covered[0],
        sides[1].median("forward") + sides[1].median("loss") + sides[1].median("backward")
            - covered[1],
    ];
    row("rest of forward + backward (by difference)", x, y);
    Ok(())
}
