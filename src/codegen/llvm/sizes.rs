//! Sizes that are known only when the generated code runs.
//!
//! A range listed in [`super::Options::runtime_ranges`] is a parameter of the
//! generated functions; its size in the HIR is only an *assumption*, used for
//! choices that do not change values (loop order, threads, whether a contraction
//! calls the GETT, cache blocking). Every extent, stride, element count and offset
//! the code computes is a [`Poly`]: a polynomial in the runtime sizes with integer
//! coefficients (a stride is a product of sizes; a diagonal reference sums two).
//! Comparing two `Poly`s compares them for *every* size, which is what loop
//! collapsing needs; [`Poly::assumed`] evaluates one at the assumed sizes for the
//! choices; [`Gen::poly_value`](super::Gen) emits it as LLVM code (constants fold, so
//! a program without runtime ranges compiles exactly as before).

use crate::sema::hir::{Hir, IndexId, RangeId};
use std::collections::BTreeMap;

/// `Σ coef · Π sizes`, keyed by the sorted list of runtime ranges of each monomial
/// (the empty list is the constant term). Zero coefficients are never stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Poly(BTreeMap<Vec<RangeId>, u64>);

impl Poly {
    pub fn constant(c: u64) -> Poly {
        let mut m = BTreeMap::new();
        if c != 0 {
            m.insert(Vec::new(), c);
        }
        Poly(m)
    }

    pub fn zero() -> Poly {
        Poly::default()
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    /// The size of range `r`: a variable when it is a runtime range.
    pub fn range(hir: &Hir, runtime: &[RangeId], r: RangeId) -> Poly {
        if runtime.contains(&r) {
            Poly(BTreeMap::from([(vec![r], 1)]))
        } else {
            Poly::constant(hir.ranges[r].size as u64)
        }
    }

    pub fn index(hir: &Hir, runtime: &[RangeId], i: IndexId) -> Poly {
        Poly::range(hir, runtime, hir.indices[i].range)
    }

    pub fn add(&self, o: &Poly) -> Poly {
        let mut m = self.0.clone();
        for (k, c) in &o.0 {
            let e = m.entry(k.clone()).or_insert(0);
            *e = e.wrapping_add(*c);
        }
        m.retain(|_, c| *c != 0);
        Poly(m)
    }

    pub fn mul(&self, o: &Poly) -> Poly {
        let mut out = Poly::zero();
        for (ka, ca) in &self.0 {
            for (kb, cb) in &o.0 {
                let mut k: Vec<RangeId> = ka.iter().chain(kb).copied().collect();
                k.sort_unstable();
                out = out.add(&Poly(BTreeMap::from([(k, ca.wrapping_mul(*cb))])));
            }
        }
        out
    }

    /// Its value at the assumed sizes (saturating).
    pub fn assumed(&self, hir: &Hir) -> u64 {
        self.0.iter().fold(0u64, |acc, (k, c)| {
            let m = k.iter().fold(*c, |p, &r| p.saturating_mul(hir.ranges[r].size as u64));
            acc.saturating_add(m)
        })
    }

    /// The constant, when it depends on no runtime size.
    pub fn as_const(&self) -> Option<u64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    pub fn terms(&self) -> impl Iterator<Item = (&[RangeId], u64)> {
        self.0.iter().map(|(k, c)| (k.as_slice(), *c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polynomials_compare_for_every_size() {
        let (hir, _) = crate::compile("range O = 3; range V = 3; index i : O; index a : V;", "t");
        let hir = hir.unwrap();
        let (r0, r1) = (RangeId::new(0), RangeId::new(1));
        let rt = [r0, r1];
        let o = Poly::range(&hir, &rt, r0);
        let v = Poly::range(&hir, &rt, r1);
        // O·V and V·O are one monomial; O·V ≠ V·V although both assume 9.
        assert_eq!(o.mul(&v), v.mul(&o));
        assert_ne!(o.mul(&v), v.mul(&v));
        assert_eq!(o.mul(&v).assumed(&hir), v.mul(&v).assumed(&hir));
        // A diagonal stride O + 1 times 2 is 2·O + 2.
        let d = o.add(&Poly::constant(1)).mul(&Poly::constant(2));
        assert_eq!(d, o.mul(&Poly::constant(2)).add(&Poly::constant(2)));
        assert_eq!(d.assumed(&hir), 8);
        assert_eq!(Poly::constant(4).mul(&Poly::zero()), Poly::zero());
        assert_eq!(Poly::constant(5).as_const(), Some(5));
        assert_eq!(o.as_const(), None);
        // Fixed ranges are constants.
        assert_eq!(Poly::range(&hir, &[], r0).as_const(), Some(3));
    }
}
