//! Runtime dispatch of the hot loops to the widest instruction set the CPU has, in safe Rust.
//!
//! The inner loops (`inner`) are plain Rust over fixed-size register blocks. Built for
//! the baseline target (x86-64: SSE2), the compiler vectorises them 4 wide without fused
//! multiply-add. `dispatch` runs a kernel inside a function compiled for AVX2 + FMA (or
//! AVX-512 where the `pulp` crate was built with it) when the CPU has it, through `pulp`'s safe
//! `Arch::dispatch`: the kernel's body is inlined there, so the same source becomes 8- or
//! 16-wide code with FMA. The kernel is generic over `Madd`, so the multiply-adds are fused
//! (`f32::mul_add`, one rounding) exactly where the hardware fuses them, and stay a multiply and
//! an add on CPUs without FMA (where `mul_add` would be a slow library call).
//!
//! Results therefore differ between the two paths by float rounding only (FMA rounds once where
//! the plain path rounds twice); the tests hold both to the same tolerances against the
//! materialised twins.

/// A multiply-add, fused or not, and the vector width the kernel is compiled for.
pub trait Madd: Copy + Send + Sync {
    /// f32 lanes of the target's vectors: the register blocks of the tile products are sized
    /// by it (`crate::inner`), so that AVX-512's 32 registers of 16 lanes are filled rather
    /// than AVX2's 16 of 8.
    const LANES: usize;
    /// `a·b + c`.
    fn madd(a: f32, b: f32, c: f32) -> f32;
}

/// `a.mul_add(b, c)`: one rounding (used only under FMA), 8-lane vectors (AVX2, and NEON's
/// 4-lane ones, whose 32 registers hold the same blocks).
#[derive(Debug, Clone, Copy)]
pub struct Fused;

impl Madd for Fused {
    const LANES: usize = 8;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// [`Fused`] for 16-lane vectors (AVX-512): the same arithmetic, larger register blocks.
#[derive(Debug, Clone, Copy)]
pub struct FusedWide;

impl Madd for FusedWide {
    const LANES: usize = 16;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// `a·b + c`: two roundings.
#[derive(Debug, Clone, Copy)]
pub struct Separate;

impl Madd for Separate {
    const LANES: usize = 4;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// A piece of work whose hot loops are generic over [`Madd`]. `run` must be
/// `#[inline(always)]` (and so must what it calls in its loops) for the dispatch to reach them.
pub trait Kernel {
    /// What the kernel returns.
    type Output;
    /// The work.
    fn run<M: Madd>(self) -> Self::Output;
}

/// `k` as pulp's [`pulp::WithSimd`], whose `with_simd` pulp calls from inside a function
/// compiled for the CPU's features. Not a closure: a closure's body is an ordinary function
/// that LLVM may decline to inline there, and compiled for the baseline target every
/// `f32::mul_add` in it becomes a call to the software `fmaf` (measured: the backward pass 12×
/// slower than without the dispatch). `with_simd` and everything it reaches in the hot loops
/// are `#[inline(always)]`, so the body is compiled inside the target-feature function.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
struct Wide<K>(K);

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl<K: Kernel> pulp::WithSimd for Wide<K> {
    type Output = K::Output;
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> K::Output {
        // A constant per instantiation: each target's copy keeps one branch.
        if S::F32_LANES >= 16 {
            self.0.run::<FusedWide>()
        } else {
            self.0.run::<Fused>()
        }
    }
}

/// Runs `k` with the widest SIMD the CPU supports (see the module docs).
#[inline]
pub fn dispatch<K: Kernel>(k: K) -> K::Output {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let arch = pulp::Arch::new();
        if !matches!(arch, pulp::Arch::Scalar) && !force_plain() {
            return arch.dispatch(Wide(k));
        }
    }
    k.run::<Separate>()
}

/// Set by [`force_plain_path`].
static FORCED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// With `true`, the dispatch keeps the baseline path from now on, as does `FIRE_KERNELS_PLAIN=1`
/// in the environment: to measure what the dispatch buys in one run (the benchmarks time both
/// paths interleaved), and to exercise the plain path on machines that have the wide one.
pub fn force_plain_path(on: bool) {
    FORCED.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn force_plain() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    FORCED.load(std::sync::atomic::Ordering::Relaxed)
        || *ENV.get_or_init(|| std::env::var_os("FIRE_KERNELS_PLAIN").is_some_and(|v| v == "1"))
}

/// Which path the dispatch takes on this machine: `"fma-16"` (AVX-512), `"fma"` (AVX2, NEON)
/// or `"plain"`.
pub fn path() -> &'static str {
    struct Lanes;
    impl Kernel for Lanes {
        type Output = usize;
        #[inline(always)]
        fn run<M: Madd>(self) -> usize {
            M::LANES
        }
    }
    match dispatch(Lanes) {
        16 => "fma-16",
        8 => "fma",
        _ => "plain",
    }
}

/// `e^x` for `x ≤ 0` as the attention kernels compute it (Cephes-style range reduction and
/// polynomial, within 4·10⁻⁷ relative of `f32::exp` on [−60, 0], 0 below −60), its
/// multiply-adds `M`'s (fused on the paths that fuse): branch-free, so a caller's loop over a
/// slice vectorises under [`dispatch`] where a call to `f32::exp` (libm, one value at a time)
/// would not. For the accelerated crate's GeLU and cross-entropy.
#[inline(always)]
pub fn exp_nonpositive<M: Madd>(x: f32) -> f32 {
    crate::inner::exp::<M>(x)
}
