//! Strategies shared by the reference's property tests.
#![allow(dead_code)]

use fire_reference::fire::init::{self, Shape};
use fire_reference::fire::{Activation, Fire, Threshold, Transform};
use proptest::prelude::*;

/// A FIRE module with random shape, weights, c, m and ablation switches (all valid).
pub fn any_fire() -> impl Strategy<Value = Fire> {
    (
        1usize..5,
        1usize..9,
        0usize..3,
        any::<u64>(),
        prop_oneof![1e-3f64..10.0, -10.0f64..-1e-3],
        prop_oneof![0.05f64..4.0, -4.0f64..-0.05],
        1.0f64..2048.0,
        prop_oneof![Just(Activation::Relu), Just(Activation::Gelu)],
        prop_oneof![Just(Transform::Log), Just(Transform::Identity)],
        prop_oneof![
            Just(Threshold::Learnable),
            Just(Threshold::Fixed),
            Just(Threshold::Disabled)
        ],
    )
        .prop_map(
            |(heads, width, depth, seed, c, m, l_init, act, transform, threshold)| {
                let mut fire = init::appendix_e(
                    Shape {
                        heads,
                        width,
                        depth,
                    },
                    seed,
                );
                fire.c = c;
                fire.l_multiplier = m;
                fire.l_init = l_init;
                fire.mlp.activation = act;
                fire.transform = transform;
                fire.threshold = threshold;
                fire
            },
        )
}

/// A causal pair `j ≤ i` with positions up to `max`.
pub fn causal_pair(max: u64) -> impl Strategy<Value = (u64, u64)> {
    (0..=max).prop_flat_map(|i| (Just(i), 0..=i))
}
