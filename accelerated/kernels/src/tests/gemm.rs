//! The `gemm` wrapper against its triple-loop twin: every transpose combination, shapes
//! around the microkernels' block sizes (so edge tiles run), overwrite and accumulate; and the
//! checks that keep the unsafe call inside its slices.

use super::random;
use crate::gemm::{matmul, matmul_threaded, matmul_twin, Mat, Threading};

/// `a (m×k, or its transpose stored k×m) · b (k×n, or stored n×k)` both ways; the error bound
/// is f32's rounding of a k-term dot product, `k·2⁻²³·Σ|a||b|` (with Σ|a||b| ≤ k here).
fn agree(m: usize, k: usize, n: usize, ta: bool, tb: bool, accumulate: bool, seed: u64) {
    agree_with(Threading::Bands, m, k, n, ta, tb, accumulate, seed);
}

#[allow(clippy::too_many_arguments)]
fn agree_with(
    threading: Threading,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
    accumulate: bool,
    seed: u64,
) {
    let a_data = random(m * k, seed);
    let b_data = random(k * n, seed + 1);
    let a = if ta {
        Mat::row_major(&a_data, k, m).unwrap().t()
    } else {
        Mat::row_major(&a_data, m, k).unwrap()
    };
    let b = if tb {
        Mat::row_major(&b_data, n, k).unwrap().t()
    } else {
        Mat::row_major(&b_data, k, n).unwrap()
    };
    let start = random(m * n, seed + 2);
    let (mut fast, mut slow) = (start.clone(), start);
    matmul_threaded(&mut fast, a, b, accumulate, threading).unwrap();
    matmul_twin(&mut slow, a, b, accumulate).unwrap();
    let bound = (k as f32 + 2.0) * (k as f32 + 2.0) * f32::EPSILON;
    let worst = super::max_diff(&fast, &slow);
    assert!(
        worst <= bound,
        "{m}×{k}·{k}×{n} ({threading:?}, ta {ta}, tb {tb}, accumulate {accumulate}): off by {worst} > {bound}"
    );
}

#[test]
fn every_layout_matches_the_triple_loop() {
    let mut seed = 0;
    for (m, k, n) in [
        (1, 1, 1),
        (3, 5, 7),
        (17, 33, 9),
        (48, 16, 50),
        (130, 64, 31),
        (64, 130, 96),
        (257, 128, 128),
    ] {
        for ta in [false, true] {
            for tb in [false, true] {
                for accumulate in [false, true] {
                    seed += 3;
                    agree(m, k, n, ta, tb, accumulate, seed);
                }
            }
        }
    }
}

/// The bands of rows and of columns, on pools of 2 and 3 threads (uneven last bands, a band
/// count that is not the thread count), and `gemm`'s own split: each must write exactly its
/// part of the output, all of it, and add to it only when asked.
#[test]
fn every_threading_matches_the_triple_loop() {
    let mut seed = 100;
    for threads in [2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            // Row bands (m/threads ≥ 64, n small), column bands (n/threads ≥ 256), neither.
            for (m, k, n) in [(203, 37, 21), (150, 19, 800), (9, 70, 30)] {
                for threading in [Threading::Bands, Threading::Gemm] {
                    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                        for accumulate in [false, true] {
                            seed += 3;
                            agree_with(threading, m, k, n, ta, tb, accumulate, seed);
                        }
                    }
                }
            }
        });
    }
}

#[test]
fn an_empty_inner_dimension_gives_zero_or_leaves_the_destination() {
    let (a, b) = (
        Mat::row_major(&[], 2, 0).unwrap(),
        Mat::row_major(&[], 0, 3).unwrap(),
    );
    let mut dst = vec![1.5f32; 6];
    matmul(&mut dst, a, b, true).unwrap();
    assert_eq!(dst, vec![1.5; 6]);
    matmul(&mut dst, a, b, false).unwrap();
    assert_eq!(dst, vec![0.0; 6]);
}

#[test]
fn mismatched_shapes_are_refused_before_the_call() {
    let data = random(12, 1);
    assert!(Mat::row_major(&data, 5, 3).is_err());
    let a = Mat::row_major(&data, 3, 4).unwrap();
    let b = Mat::row_major(&data, 4, 3).unwrap();
    let mut dst = vec![0f32; 9];
    // Inner dimensions 4 and 3.
    let err = matmul(&mut dst, a, a, false).unwrap_err().to_string();
    assert!(err.contains("inner dimensions"), "{err}");
    // Destination of the wrong size.
    let err = matmul(&mut dst[..8], a, b, false).unwrap_err().to_string();
    assert!(err.contains("destination"), "{err}");
    matmul(&mut dst, a, b, false).unwrap();
}
