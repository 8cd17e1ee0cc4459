//! The arithmetic a mutant computes in: `f32` or `f64`, with the operations FIRE needs.

use std::ops::{Add, Div, Mul, Neg, Sub};

/// A binary floating-point type the mutant is generic over.
pub trait Real:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// Rounds an f64 to this type.
    fn of(v: f64) -> Self;
    /// Widens to f64 (exact).
    fn f64(self) -> f64;
    /// ln x.
    fn ln(self) -> Self;
    /// ln(1 + x).
    fn ln_1p(self) -> Self;
    /// log₂ x.
    fn log2(self) -> Self;
    /// log₁₀ x.
    fn log10(self) -> Self;
    /// eˣ.
    fn exp(self) -> Self;
    /// 2ˣ.
    fn exp2(self) -> Self;
    /// |x|.
    fn abs(self) -> Self;
    /// max(x, y), NaN-propagating as `torch.maximum`.
    fn max(self, o: Self) -> Self;
    /// min(x, y), NaN-propagating as `torch.minimum`.
    fn min(self, o: Self) -> Self;
    /// tanh x.
    fn tanh(self) -> Self;
    /// erf x.
    fn erf(self) -> Self;
    /// xʸ.
    fn powf(self, y: Self) -> Self;
    /// cos x.
    fn cos(self) -> Self;
    /// √x.
    fn sqrt(self) -> Self;
}

macro_rules! real {
    ($t:ty, $erf:path) => {
        impl Real for $t {
            fn of(v: f64) -> Self {
                v as $t
            }
            fn f64(self) -> f64 {
                f64::from(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn log2(self) -> Self {
                <$t>::log2(self)
            }
            fn log10(self) -> Self {
                <$t>::log10(self)
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn exp2(self) -> Self {
                <$t>::exp2(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn max(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t>::NAN
                } else {
                    <$t>::max(self, o)
                }
            }
            fn min(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t>::NAN
                } else {
                    <$t>::min(self, o)
                }
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn erf(self) -> Self {
                $erf(self)
            }
            fn powf(self, y: Self) -> Self {
                <$t>::powf(self, y)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
        }
    };
}

real!(f32, libm::erff);
real!(f64, libm::erf);
