//! Fast exact FIRE: piecewise-linear compilation of f_θ and fused attention with on-the-fly bias.
