//! The threads of a training run: candle's own pool told not to spin long beside rayon's (or,
//! training through the fused block, not used: `single_threaded_candle_ops`), and rayon's kept
//! awake between parallel regions (`with_rayon_awake`).
//!
//! candle (0.11) runs its elementwise CPU ops on a pool of its own (`candle-bp-*` threads, one
//! fewer than the cores) whose workers spin 25 000 times after each op before they park, while
//! the heavy work of a training step (the GEMM, the fused attention and block ops) runs on
//! rayon's pool. On a machine with as many busy threads as cores, a spinning candle worker
//! takes a core from a rayon worker. Measured (perf, NoPE small training step, 2 threads, 40
//! steps): the candle worker held 3.8 % of the samples by default and 1.2 % with a spin limit
//! of 500, and the GEMM kernel's share rose 43.1 % -> 45.3 % (about 5 % less time outside it),
//! the same as with candle's pool removed (`CANDLE_NUM_THREADS=1`), which would also make its
//! elementwise ops single-threaded where the materialised attention needs them.

use std::sync::atomic::{AtomicBool, Ordering};

/// candle's variable for the spin count, read once when its pool starts.
const SPIN_LIMIT: &str = "CANDLE_BARRIER_POOL_SPIN_LIMIT";

/// Sets candle's spin limit to 500 unless the environment already sets it. Call before any
/// candle op (its pool starts with the first) and before other threads exist (it writes the
/// environment).
pub fn quiet_candle_pool() {
    if std::env::var_os(SPIN_LIMIT).is_none() {
        std::env::set_var(SPIN_LIMIT, "500");
    }
}

/// candle's variable for the size of its elementwise pool (the workers plus the caller).
const CANDLE_THREADS: &str = "CANDLE_NUM_THREADS";

/// Runs candle's elementwise CPU ops on the calling thread, unless the environment sets the
/// pool's size: for training through the fused block, where what is left to candle is small
/// and many — above all autograd's bookkeeping, which gives every input of every node its
/// gradient as a fresh zero tensor plus the incoming one (a few hundred ops a step) — so that
/// handing each op to the pool, and waking its worker, costs more than the op. Measured
/// (`fire-lm train`, NoPE, 2 threads, the same losses bit for bit): the part of the backward
/// pass outside the blocks 12.5 -> 8.6 ms of a small step (4 L, d 128, 16 × 128; timers
/// around the step's parts, 3 runs each) and 36 -> 27 ms of a larger one (6 L, d 256,
/// 4 × 512); the whole small step, 16 interleaved pairs against `CANDLE_NUM_THREADS=2`, 0.93×
/// the time (median of the paired ratios; 90 % interval 0.90–0.98), the larger one 1.00×
/// (6 pairs, 0.93–1.17). Other commands and the materialised attention keep the pool, whose
/// large elementwise ops it does speed up. Call before any candle op and before other threads
/// exist (it writes the environment).
pub fn single_threaded_candle_ops() {
    if std::env::var_os(CANDLE_THREADS).is_none() {
        std::env::set_var(CANDLE_THREADS, "1");
    }
}

/// Set to `0` to let rayon's workers sleep between parallel regions (see [`with_rayon_awake`]).
const AWAKE: &str = "FIRE_LM_SPIN";

/// Runs `f` on a rayon worker while another worker waits for work spinning instead of
/// sleeping, the way OpenMP's threads (PyTorch's) wait by default. A training step is a few
/// hundred short parallel regions with serial work between them; rayon parks an idle worker
/// after a few microseconds, and on a virtual machine a parked vCPU is handed to other guests,
/// so each region first waits for the worker to be woken (an inter-processor interrupt) and,
/// on a busy host, for its vCPU to be scheduled again (steal time). Measured on the 2-core VM
/// (NoPE small step, `fire-lm train`, 4 interleaved pairs): 0.145 → 0.122 s/step, the same
/// losses bit for bit (the work is split the same way); PyTorch with
/// `OMP_WAIT_POLICY=PASSIVE` (its threads sleeping like rayon's): 0.105 → 0.190 s/step.
///
/// The spinning worker runs the pool's pending jobs as they appear (`rayon::yield_now`), so
/// it still does its share of every region; it costs one busy core while `f` runs, as OpenMP's
/// spin does. With one thread in the pool, or `FIRE_LM_SPIN=0`, `f` runs as it is. If `f`
/// panics, the spinner stops and the panic propagates.
pub fn with_rayon_awake<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_num_threads() < 2 || std::env::var_os(AWAKE).is_some_and(|v| v == "0") {
        return f();
    }
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    rayon::scope(|s| {
        // Stops the spinner however `f` ends, so the scope can close.
        let _stop = SetOnDrop(&stop);
        s.spawn(|_| {
            started.store(true, Ordering::Release);
            while !stop.load(Ordering::Acquire) {
                if !matches!(rayon::yield_now(), Some(rayon::Yield::Executed)) {
                    std::hint::spin_loop();
                }
            }
        });
        // Another worker takes the spinner before `f` starts: were it left in this worker's
        // queue, a join inside `f` could pop it here and spin on this worker until `f` ends.
        while !started.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        f()
    })
}

/// Sets its flag when dropped (also while unwinding).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::with_rayon_awake;
    use rayon::prelude::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool")
    }

    /// Parallel work inside runs to the same result, on two threads and on one (where there
    /// is no other worker to spin: it must not wait for one).
    #[test]
    fn parallel_work_inside_completes_on_any_pool() {
        for threads in [1, 2, 3] {
            let sum = pool(threads).install(|| {
                with_rayon_awake(|| {
                    (0..200u64)
                        .map(|i| (0..1000u64).into_par_iter().map(|j| i * j).sum::<u64>())
                        .sum::<u64>()
                })
            });
            assert_eq!(sum, (0..200u64).sum::<u64>() * (0..1000u64).sum::<u64>());
        }
    }

    /// A panic in the work stops the spinner and reaches the caller (no hang).
    #[test]
    fn a_panic_inside_stops_the_spinner() {
        let caught =
            std::panic::catch_unwind(|| pool(2).install(|| with_rayon_awake(|| panic!("inside"))));
        assert!(caught.is_err());
    }
}
