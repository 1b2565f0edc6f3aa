//! The 16-bit storage types `bf16` and `f16`: conversions between their bit
//! patterns and `f32`, all rounding to nearest, ties to even. Both types are
//! storage only: values are widened to `f32` (exactly) for arithmetic and rounded
//! once when stored, so these functions define what a stored value is.

/// The bf16 bits nearest to `x` (ties to even); NaN stays a quiet NaN with its sign.
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if x.is_nan() {
        return ((u >> 16) as u16) | 0x0040;
    }
    // bf16 is the top half of an f32: add half an ulp, plus one when the kept
    // part is odd (ties to even); an overflow carries into the exponent (to ∞).
    let round = 0x7fff + ((u >> 16) & 1);
    (u.wrapping_add(round) >> 16) as u16
}

/// The f32 a bf16 bit pattern holds (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// The IEEE half bits nearest to `x` (ties to even), with subnormals, overflow to
/// ∞ and NaN kept quiet with its sign.
pub fn f32_to_f16(x: f32) -> u16 {
    let u = x.to_bits();
    let sign = ((u >> 16) & 0x8000) as u16;
    let exp = ((u >> 23) & 0xff) as i32;
    let man = u & 0x007f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x0200 | (man >> 13) as u16 } else { 0 };
    }
    // The unbiased exponent, and the half exponent field it would take.
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal half (or zero): shift the full significand right, rounding.
        if e < -10 {
            return sign;
        }
        let m = man | 0x0080_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1 << shift) - 1);
        let mut r = m >> shift;
        if rem > half || (rem == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && r & 1 == 1) {
        r += 1; // may carry into the exponent, up to ∞: still correct
    }
    sign | r as u16
}

/// The f32 an IEEE half bit pattern holds (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x03ff) as u32;
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: man × 2^-24, exact in f32.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// `x` rounded to f32 and then to bf16, as an f64 (what a bf16 tensor stores of
/// a result computed in f32).
pub fn round_bf16(x: f64) -> f64 {
    bf16_to_f32(f32_to_bf16(x as f32)) as f64
}

/// `x` rounded to f32 and then to IEEE half, as an f64.
pub fn round_f16(x: f64) -> f64 {
    f16_to_f32(f32_to_f16(x as f32)) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_known_bits() {
        for (x, b) in [
            (1.0f32, 0x3f80u16),
            (-2.0, 0xc000),
            (0.0, 0x0000),
            (-0.0, 0x8000),
            (f32::INFINITY, 0x7f80),
            (f32::NEG_INFINITY, 0xff80),
            (f32::MAX, 0x7f80), // rounds up past the largest bf16
            (3.140625, 0x4049),
            (f32::from_bits(0x3f80_8000), 0x3f80), // tie, even stays
            (f32::from_bits(0x3f81_8000), 0x3f82), // tie, odd rounds up
            (f32::from_bits(0x3f80_8001), 0x3f81), // above the tie
            (f32::from_bits(0x0000_0001), 0x0000), // smallest f32 subnormal
            (f32::from_bits(0x0001_0000), 0x0001), // smallest bf16 subnormal
        ] {
            assert_eq!(f32_to_bf16(x), b, "{x:e}");
        }
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0x0001), f32::from_bits(0x0001_0000));
    }

    #[test]
    fn f16_known_bits() {
        for (x, h) in [
            (1.0f32, 0x3c00u16),
            (-2.0, 0xc000),
            (0.0, 0x0000),
            (-0.0, 0x8000),
            (65504.0, 0x7bff),
            (65520.0, 0x7c00), // the tie above the largest half rounds to ∞
            (65519.0, 0x7bff),
            (f32::INFINITY, 0x7c00),
            (f32::NEG_INFINITY, 0xfc00),
            (6.103_515_6e-5, 0x0400),              // smallest normal
            (5.960_464_5e-8, 0x0001),              // smallest subnormal
            (2.980_232_2e-8, 0x0000),              // half of it: tie to even (0)
            (8.940_697e-8, 0x0002),                // 1.5 × smallest: tie to even (2)
            (-3.0e-8, 0x8001),                     // just above half the smallest
            (1.0e-10, 0x0000),                     // underflow
            (f32::from_bits(0x3f80_1000), 0x3c00), // tie, even stays
            (f32::from_bits(0x3f80_3000), 0x3c02), // tie, odd rounds up
            (0.333_333_34, 0x3555),
        ] {
            assert_eq!(f32_to_f16(x), h, "{x:e}");
        }
        assert!(f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
        assert_eq!(f32_to_f16(f32::NAN) & 0x7c00, 0x7c00);
    }

    /// Every half bit pattern survives the round trip through f32 (NaNs stay NaN).
    #[test]
    fn round_trips() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_nan() {
                assert!(f16_to_f32(f32_to_f16(x)).is_nan());
            } else {
                assert_eq!(f32_to_f16(x), h, "{h:#06x}");
            }
            let y = bf16_to_f32(h);
            if y.is_nan() {
                assert!(y.is_nan() && bf16_to_f32(f32_to_bf16(y)).is_nan());
            } else {
                assert_eq!(f32_to_bf16(y), h, "{h:#06x}");
            }
        }
    }

    /// Rounding is to the nearest representable value: between every pair of
    /// neighbours, the midpoint goes to the even one and points on either side to
    /// the nearer one.
    #[test]
    fn nearest_between_neighbours() {
        for h in 0..0x7bffu16 {
            let (a, b) = (f16_to_f32(h) as f64, f16_to_f32(h + 1) as f64);
            let mid = ((a + b) / 2.0) as f32;
            assert_eq!(f32_to_f16(mid), if h % 2 == 0 { h } else { h + 1 }, "{h:#06x}");
            let below = ((a * 3.0 + b) / 4.0) as f32;
            assert_eq!(f32_to_f16(below), h);
        }
        for h in 0..0x7f7fu16 {
            let (a, b) = (bf16_to_f32(h) as f64, bf16_to_f32(h + 1) as f64);
            let mid = ((a + b) / 2.0) as f32;
            assert_eq!(f32_to_bf16(mid), if h % 2 == 0 { h } else { h + 1 }, "{h:#06x}");
            assert_eq!(f32_to_bf16(((a + b * 3.0) / 4.0) as f32), h + 1);
        }
    }
}
