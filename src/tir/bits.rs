//! Fixed-width bitsets of index ids for the contraction-order search.
//!
//! The search combines index sets in its innermost loops, so a set must be a plain
//! `Copy` value; its width is chosen per problem ([`super::opmin`] dispatches on the
//! number of distinct indices), so a network of thousands of indices is ordered as
//! exactly as one of ten, and a small problem pays for two words only.

use std::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not};

/// A set of ids below `64 * W`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Bits<const W: usize>(pub [u64; W]);

impl<const W: usize> Default for Bits<W> {
    fn default() -> Self {
        Bits([0; W])
    }
}

impl<const W: usize> Bits<W> {
    /// The largest number of ids a set holds.
    pub const CAPACITY: usize = 64 * W;

    pub fn empty() -> Self {
        Self::default()
    }

    /// The set `{i}`; `i` must be below [`Self::CAPACITY`].
    pub fn bit(i: usize) -> Self {
        let mut b = Self::default();
        b.0[i / 64] = 1 << (i % 64);
        b
    }

    pub fn from_ids(ids: impl IntoIterator<Item = usize>) -> Self {
        let mut b = Self::default();
        for i in ids {
            b.0[i / 64] |= 1 << (i % 64);
        }
        b
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    pub fn contains(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }

    pub fn count_ones(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// The ids in the set, ascending.
    pub fn ids(self) -> impl Iterator<Item = usize> {
        self.0.into_iter().enumerate().flat_map(|(k, mut w)| {
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let i = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(64 * k + i)
            })
        })
    }
}

impl<const W: usize> BitOr for Bits<W> {
    type Output = Self;
    fn bitor(mut self, o: Self) -> Self {
        self |= o;
        self
    }
}

impl<const W: usize> BitOrAssign for Bits<W> {
    fn bitor_assign(&mut self, o: Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a |= b;
        }
    }
}

impl<const W: usize> BitAnd for Bits<W> {
    type Output = Self;
    fn bitand(mut self, o: Self) -> Self {
        self &= o;
        self
    }
}

impl<const W: usize> BitAndAssign for Bits<W> {
    fn bitand_assign(&mut self, o: Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a &= b;
        }
    }
}

impl<const W: usize> Not for Bits<W> {
    type Output = Self;
    fn not(mut self) -> Self {
        for a in self.0.iter_mut() {
            *a = !*a;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::Bits;

    #[test]
    fn sets_across_words() {
        let a = Bits::<4>::from_ids([0, 63, 64, 200]);
        let b = Bits::<4>::from_ids([63, 200, 255]);
        assert_eq!((a & b).ids().collect::<Vec<_>>(), [63, 200]);
        assert_eq!((a | b).count_ones(), 5);
        assert_eq!((a & !b).ids().collect::<Vec<_>>(), [0, 64]);
        assert!(a.contains(64) && !a.contains(65) && Bits::<4>::bit(255).contains(255));
        assert!((a & Bits::bit(1)).is_empty() && !a.is_empty());
    }
}
