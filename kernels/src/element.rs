//! The element types the collectives take, tied to the vocabulary's [`DType`].

use std::fmt::Debug;

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

use crate::vocab::DType;

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
    impl Sealed for f32 {}
}

/// `half::bf16`, `half::f16` or `f32`. Custom kernels accumulate all of them in f32.
pub trait Element:
    DeviceRepr
    + ValidAsZeroBits
    + Copy
    + Default
    + PartialEq
    + Debug
    + Send
    + Sync
    + 'static
    + sealed::Sealed
{
    /// The vocabulary's name for this type, which the tables are keyed by.
    const DTYPE: DType;
    /// Exact widening.
    fn to_f64(self) -> f64;
    /// Round to nearest even (overflow to infinity), as the kernels' `cvt.rn`.
    fn from_f64(value: f64) -> Self;
    /// The bit pattern, zero-extended.
    fn to_bits(self) -> u32;
    /// The value of a bit pattern; a 16-bit type reads the low 16 bits.
    fn from_bits(bits: u32) -> Self;
}

impl Element for bf16 {
    const DTYPE: DType = DType::Bf16;
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(value: f64) -> Self {
        bf16::from_f64(value)
    }
    fn to_bits(self) -> u32 {
        bf16::to_bits(self) as u32
    }
    fn from_bits(bits: u32) -> Self {
        bf16::from_bits(bits as u16)
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(value: f64) -> Self {
        f16::from_f64(value)
    }
    fn to_bits(self) -> u32 {
        f16::to_bits(self) as u32
    }
    fn from_bits(bits: u32) -> Self {
        f16::from_bits(bits as u16)
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(value: f64) -> Self {
        value as f32
    }
    fn to_bits(self) -> u32 {
        f32::to_bits(self)
    }
    fn from_bits(bits: u32) -> Self {
        f32::from_bits(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_and_sizes_agree() {
        assert_eq!(bf16::DTYPE.size_bytes(), std::mem::size_of::<bf16>() as u64);
        assert_eq!(f16::DTYPE.size_bytes(), std::mem::size_of::<f16>() as u64);
        assert_eq!(f32::DTYPE.size_bytes(), std::mem::size_of::<f32>() as u64);
    }

    #[test]
    fn narrowing_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
        assert_eq!(
            <bf16 as Element>::from_f64(1.0 + 1.0 / 256.0).to_bits(),
            0x3f80
        );
        assert_eq!(
            <f16 as Element>::from_f64(1e6).to_bits(),
            0x7c00,
            "overflow to +inf"
        );
        assert_eq!(<f32 as Element>::from_f64(-0.0).to_bits(), 0x8000_0000);
    }
}
