use fire_kernels::bench::Setup;
use fire_kernels::fused_causal_lse;
fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let s = Setup::new(12, 2048, 64, 0).unwrap();
    let p = &s.positions;
    let fire = a[0] == "fire";
    let t = std::time::Instant::now();
    for _ in 0..a[1].parse::<usize>().unwrap() {
        let out = if fire {
            let plan = s.fire_plan().unwrap();
            fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, Some(plan.as_ref())).unwrap()
        } else {
            fused_causal_lse(&s.q, &s.k, &s.v, s.shape, p, p, None).unwrap()
        };
        std::hint::black_box(out);
    }
    eprintln!("{:.4}", t.elapsed().as_secs_f64());
}
