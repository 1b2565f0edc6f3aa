//! Communication lower bounds for one contraction step (see `book/src/planner.md`).
//!
//! A step `C[SC] = A[SA] · B[SB]` is a set of `F = ∏ n_x` multiply points (one per
//! assignment of all its indices). A rank that performs `F_r` of them touches `a`
//! elements of A, `b` of B and `c` of C (partial sums), and:
//! * (Loomis–Whitney, generalized) `F_r ≤ s · √(a·b·c)`, where `s` is the product
//!   of the extents of indices occurring in only one of A, B, C (1 for a matmul-like
//!   or batched step);
//! * (each element is used a bounded number of times) `a ≥ F_r / n_{∉A}`,
//!   `b ≥ F_r / n_{∉B}`, `c ≥ F_r / n_{∉C}`, with `n_{∉X}` the product of extents of
//!   the step's indices absent from X;
//! * (cannot touch more than exists) `a ≤ |A|`, `b ≤ |B|`, `c ≤ |C|`.
//!
//! **Memory-independent** (Al Daas, Ballard, Grigori, Kumar, Rouse, SPAA'22, whose
//! three matmul cases are the box constraints being active; generalized here to any
//! index classes): some rank performs `F_r ≥ F/P`, starts with at most `|A|/P`,
//! `|B|/P` and ends with at most `|C|/P`, so it moves at least
//! `W_mi = min{a+b+c : constraints} − (|A|+|B|+|C|)/P`; the minimum is a water-fill
//! `x = clamp(t, lo_x, hi_x)` with `t` such that `a·b·c = (F_r/s)²`.
//!
//! **Memory-dependent** (Irony–Toledo–Tiskin 2004, in the form of Ballard, Demmel,
//! Holtz, Schwartz 2011): cut the rank's work into segments of `M` words moved; a
//! segment can touch at most `2M` elements of each operand, hence at most
//! `S = min(s·√(min(2M,|A|)·min(2M,|B|)·min(2M,|C|)), 2M·n_{∉A}, 2M·n_{∉B}, 2M·n_{∉C})`
//! points, so `W_md = M·(F_r/S − 1)` — for a square matmul `F_r/(2√2·√M) − M`.
//!
//! The bound is `max(W_mi, W_md, 0)`.

use serde::Serialize;

/// One index of a step: extent and whether it occurs in A, B, C.
#[derive(Debug, Clone, Copy)]
pub struct BoundIndex {
    pub n: u64,
    pub a: bool,
    pub b: bool,
    pub c: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bound {
    /// Multiply points per rank, F/P.
    pub points_per_rank: f64,
    /// min a + b + c.
    pub access_min: f64,
    /// (|A|+|B|+|C|)/P.
    pub owned: f64,
    pub mem_independent: f64,
    pub mem_dependent: Option<f64>,
    /// max of the above and 0.
    pub words: f64,
    /// Which case of the memory-independent bound is active: `3D` (no tensor fully
    /// touched, none at its lower limit), `2D` (two tensors free, one fully touched),
    /// `1D` (at most one free), or `local` (the bound is 0).
    pub case: String,
}

/// The bound for `p` ranks; `mem_words` is the memory per rank in words (if limited);
/// `has_b` is false for a unary step (copy, transpose, reduction).
pub fn lower_bound(idx: &[BoundIndex], has_b: bool, p: usize, mem_words: Option<f64>) -> Bound {
    let p = p.max(1) as f64;
    let prod = |f: &dyn Fn(&BoundIndex) -> bool| idx.iter().filter(|x| f(x)).map(|x| x.n as f64).product::<f64>();
    let f_all = prod(&|_| true);
    let fr = f_all / p;
    let size_a = prod(&|x| x.a);
    let size_b = if has_b { prod(&|x| x.b) } else { 0.0 };
    let size_c = prod(&|x| x.c);
    let not_a = prod(&|x| !x.a);
    let not_b = prod(&|x| !x.b);
    let not_c = prod(&|x| !x.c);
    let owned = (size_a + size_b + size_c) / p;
    let (access_min, case, md) = if has_b {
        let single = prod(&|x| (x.a as u8 + x.b as u8 + x.c as u8) == 1);
        let lo = [fr / not_a, fr / not_b, fr / not_c];
        let hi = [size_a, size_b, size_c];
        let target = (fr / single).powi(2);
        let x = water_fill(lo, hi, target);
        let interior = (0..3).filter(|&i| x[i] < hi[i] * (1.0 - 1e-9) && x[i] > lo[i] * (1.0 + 1e-9)).count();
        let case = ["1D", "1D", "2D", "3D"][interior].to_string();
        let md = mem_words.map(|m| {
            let m2 = 2.0 * m;
            let lw = single * (m2.min(size_a) * m2.min(size_b) * m2.min(size_c)).sqrt();
            let s = lw.min(m2 * not_a).min(m2 * not_b).min(m2 * not_c);
            m * (fr / s - 1.0)
        });
        (x.iter().sum::<f64>(), case, md)
    } else {
        let a = (fr / not_a).min(size_a);
        let c = (fr / not_c).min(size_c);
        let md = mem_words.map(|m| {
            let s = (2.0 * m * not_a).min(2.0 * m * not_c);
            m * (fr / s - 1.0)
        });
        (a + c, "1D".to_string(), md)
    };
    let mi = access_min - owned;
    let words = mi.max(md.unwrap_or(0.0)).max(0.0);
    // Relative slack for floating-point noise in the bound itself.
    let words = if words < 1e-9 * (size_a + size_b + size_c) { 0.0 } else { words };
    let case = if words == 0.0 { "local".to_string() } else { case };
    Bound { points_per_rank: fr, access_min, owned, mem_independent: mi, mem_dependent: md, words, case }
}

/// min Σx subject to Π x ≥ target, lo ≤ x ≤ hi: x = clamp(t, lo, hi).
pub fn water_fill(lo: [f64; 3], hi: [f64; 3], target: f64) -> [f64; 3] {
    let lo = [lo[0].min(hi[0]), lo[1].min(hi[1]), lo[2].min(hi[2])];
    let at = |t: f64| [t.clamp(lo[0], hi[0]), t.clamp(lo[1], hi[1]), t.clamp(lo[2], hi[2])];
    let prod = |x: [f64; 3]| x[0] * x[1] * x[2];
    if prod(lo) >= target {
        return lo;
    }
    let top = hi.iter().cloned().fold(0.0, f64::max);
    if prod(hi) <= target {
        return hi;
    }
    let (mut l, mut h) = (lo.iter().cloned().fold(f64::INFINITY, f64::min).max(1e-300), top);
    for _ in 0..200 {
        let m = (l * h).sqrt();
        if prod(at(m)) >= target {
            h = m;
        } else {
            l = m;
        }
    }
    at(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mm(m: u64, n: u64, k: u64) -> Vec<BoundIndex> {
        vec![
            BoundIndex { n: m, a: true, b: false, c: true },
            BoundIndex { n, a: false, b: true, c: true },
            BoundIndex { n: k, a: true, b: true, c: false },
        ]
    }

    #[test]
    fn square_matmul_is_the_3d_formula() {
        let n = 1024.0f64;
        for p in [8usize, 64, 512] {
            let b = lower_bound(&mm(1024, 1024, 1024), true, p, None);
            let expect = 3.0 * (n * n * n / p as f64).powf(2.0 / 3.0) - 3.0 * n * n / p as f64;
            assert!((b.words - expect).abs() < 1e-6 * expect, "{p}: {} vs {expect}", b.words);
            assert_eq!(b.case, "3D");
        }
    }

    #[test]
    fn rectangular_cases_match_al_daas_et_al() {
        // n1 ≥ n2 ≥ n3: m = 4096 (n1), n = 256 (n2), k = 16 (n3).
        let (n1, n2, n3) = (4096.0f64, 256.0f64, 16.0f64);
        let all = n1 * n2 + n1 * n3 + n2 * n3;
        // 1 ≤ P < n1/n2 = 16: one large dimension, W = n2·n3 + ... : the smallest two fully touched.
        let p = 8.0;
        let b = lower_bound(&mm(4096, 256, 16), true, 8, None);
        let expect = n1 * n3 / p + n2 * n3 + n1 * n2 / p - all / p;
        assert!((b.words - expect).abs() < 1e-6 * expect, "{} vs {expect}", b.words);
        assert_eq!(b.case, "1D");
        // n1/n2 ≤ P < n1·n2/n3² = 4096: two large dimensions.
        let p = 256.0;
        let b = lower_bound(&mm(4096, 256, 16), true, 256, None);
        let expect = 2.0 * (n1 * n2 * n3 * n3 / p).sqrt() + n2 * n3 - all / p;
        assert!((b.words - expect).abs() < 1e-6 * expect, "{} vs {expect}", b.words);
        assert_eq!(b.case, "2D");
    }

    #[test]
    fn memory_dependent_square_form() {
        let m = 1e5;
        let b = lower_bound(&mm(4096, 4096, 4096), true, 64, Some(m));
        let expect = (4096f64.powi(3) / 64.0) / (2.0 * 2f64.sqrt() * m.sqrt()) - m;
        assert!((b.mem_dependent.unwrap() - expect).abs() < 1e-6 * expect);
        assert!(b.words >= b.mem_independent);
    }

    #[test]
    fn batched_and_local_cases() {
        // A pure batch (Hadamard) step needs no communication.
        let h = [BoundIndex { n: 1 << 20, a: true, b: true, c: true }];
        assert_eq!(lower_bound(&h, true, 64, None).words, 0.0);
        assert_eq!(lower_bound(&mm(64, 64, 64), true, 1, None).words, 0.0);
    }
}
