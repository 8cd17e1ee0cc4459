//! Criterion benches of the fast FIRE kernels at small default sizes (so that a quick
//! `cargo bench -p fire-kernels --features bench --bench kernels` stays cheap; the feature keeps
//! criterion out of the test build). The side-by-side table at 2k–32k tokens, with ratios, is
//! `fire-lm bench`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fire_kernels::bench::{Setup, Variant};

fn bias(c: &mut Criterion) {
    let n = 512;
    let setup = Setup::new(12, n, 64, 0).expect("setup");
    let mut g = c.benchmark_group("bias_pairs");
    g.throughput(Throughput::Elements((n * (n + 1) / 2) as u64));
    g.sample_size(10);
    g.bench_function("materialised_mlp", |b| b.iter(|| setup.bias_materialised()));
    g.bench_function("compiled", |b| b.iter(|| setup.bias_compiled()));
    g.finish();
}

fn attention(c: &mut Criterion) {
    let n = 512;
    let setup = Setup::new(12, n, 64, 0).expect("setup");
    let mut g = c.benchmark_group("attention_forward");
    g.sample_size(10);
    for v in Variant::ALL {
        if v == Variant::MaterialisedFire {
            continue;
        }
        g.bench_function(v.name(), |b| b.iter(|| setup.run(v)));
    }
    g.finish();
}

criterion_group!(benches, bias, attention);
criterion_main!(benches);
