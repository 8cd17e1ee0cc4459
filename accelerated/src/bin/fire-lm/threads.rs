//! candle's own thread pool told not to spin long beside rayon's.
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
