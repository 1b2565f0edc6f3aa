//! Typed ids and the vectors they index.
//!
//! Every table of the HIR (ranges, indices, tensors, grids, units, models) is an
//! [`IdVec`] indexed by its own id type, so a tensor id cannot index the ranges by
//! mistake. The model is rustc's `newtype_index` and naga's `Handle<T>`/`Arena<T>`:
//! an id is a `u32` newtype, `Copy` and ordered; `new(usize)` and `index()` convert
//! from and to a plain position.

use std::fmt;
use std::marker::PhantomData;

/// An id type: a position in an [`IdVec`].
pub trait Id: Copy + Eq + Ord + std::hash::Hash + fmt::Debug {
    fn new(index: usize) -> Self;
    fn index(self) -> usize;
}

/// Defines `pub struct $name(u32)` with a short `Debug` (`$prefix` then the index).
macro_rules! define_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(u32);

        impl $name {
            /// The id of position `index`; panics past `u32::MAX`.
            #[inline]
            pub fn new(index: usize) -> Self {
                $name(u32::try_from(index).expect(concat!(stringify!($name), " overflow")))
            }
            /// The position this id names.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl Id for $name {
            #[inline]
            fn new(index: usize) -> Self {
                $name::new(index)
            }
            #[inline]
            fn index(self) -> usize {
                $name::index(self)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

define_id!(
    /// A `range` declaration (or a model's `dims` entry).
    RangeId,
    "r"
);
define_id!(
    /// An `index` declaration.
    IndexId,
    "i"
);
define_id!(
    /// A tensor: declared, implied by a model layer, or a temporary of the optimizer.
    TensorId,
    "t"
);
define_id!(
    /// A `grid` declaration.
    GridId,
    "g"
);
define_id!(
    /// A unit: the top-level program, a `program` block or a model.
    UnitId,
    "u"
);
define_id!(
    /// A `model` declaration.
    ModelId,
    "m"
);

/// A vector indexed by a typed id.
pub struct IdVec<I, T> {
    raw: Vec<T>,
    _id: PhantomData<fn(I) -> I>,
}

impl<I: Id, T> IdVec<I, T> {
    pub fn new() -> Self {
        IdVec { raw: Vec::new(), _id: PhantomData }
    }

    pub fn from_raw(raw: Vec<T>) -> Self {
        IdVec { raw, _id: PhantomData }
    }

    /// `n` copies of `value`.
    pub fn from_elem(value: T, n: usize) -> Self
    where
        T: Clone,
    {
        IdVec::from_raw(vec![value; n])
    }

    /// Appends `value` and returns its id.
    pub fn push(&mut self, value: T) -> I {
        let id = I::new(self.raw.len());
        self.raw.push(value);
        id
    }

    /// The id the next `push` will return.
    pub fn next_id(&self) -> I {
        I::new(self.raw.len())
    }

    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn get(&self, id: I) -> Option<&T> {
        self.raw.get(id.index())
    }

    pub fn get_mut(&mut self, id: I) -> Option<&mut T> {
        self.raw.get_mut(id.index())
    }

    pub fn last(&self) -> Option<&T> {
        self.raw.last()
    }

    pub fn last_mut(&mut self) -> Option<&mut T> {
        self.raw.last_mut()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.raw.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.raw.iter_mut()
    }

    /// Every entry with its id, in order.
    pub fn iter_enumerated(&self) -> impl DoubleEndedIterator<Item = (I, &T)> + ExactSizeIterator + '_ {
        self.raw.iter().enumerate().map(|(i, t)| (I::new(i), t))
    }

    /// Every id, in order.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = I> + ExactSizeIterator + 'static
    where
        I: 'static,
    {
        (0..self.raw.len()).map(I::new)
    }

    /// The first id whose entry satisfies `pred`.
    pub fn position(&self, pred: impl FnMut(&T) -> bool) -> Option<I> {
        self.raw.iter().position(pred).map(I::new)
    }

    /// The entries as a plain slice, in id order.
    pub fn raw(&self) -> &[T] {
        &self.raw
    }

    pub fn raw_mut(&mut self) -> &mut Vec<T> {
        &mut self.raw
    }

    pub fn into_raw(self) -> Vec<T> {
        self.raw
    }
}

impl<I: Id, T> Default for IdVec<I, T> {
    fn default() -> Self {
        IdVec::new()
    }
}

impl<I, T: Clone> Clone for IdVec<I, T> {
    fn clone(&self) -> Self {
        IdVec { raw: self.raw.clone(), _id: PhantomData }
    }
}

impl<I, T: PartialEq> PartialEq for IdVec<I, T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<I, T: fmt::Debug> fmt::Debug for IdVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl<I, T: serde::Serialize> serde::Serialize for IdVec<I, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl<'de, I, T: serde::Deserialize<'de>> serde::Deserialize<'de> for IdVec<I, T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(IdVec { raw: Vec::deserialize(d)?, _id: PhantomData })
    }
}

impl<I: Id, T> std::ops::Index<I> for IdVec<I, T> {
    type Output = T;
    #[inline]
    fn index(&self, id: I) -> &T {
        &self.raw[id.index()]
    }
}

impl<I: Id, T> std::ops::IndexMut<I> for IdVec<I, T> {
    #[inline]
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.raw[id.index()]
    }
}

impl<I: Id, T> FromIterator<T> for IdVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        IdVec::from_raw(iter.into_iter().collect())
    }
}

impl<I: Id, T> Extend<T> for IdVec<I, T> {
    fn extend<It: IntoIterator<Item = T>>(&mut self, iter: It) {
        self.raw.extend(iter)
    }
}

impl<'a, I: Id, T> IntoIterator for &'a IdVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.raw.iter()
    }
}

impl<'a, I: Id, T> IntoIterator for &'a mut IdVec<I, T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.raw.iter_mut()
    }
}

impl<I: Id, T> IntoIterator for IdVec<I, T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.raw.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_index_and_enumerate() {
        let mut v: IdVec<TensorId, &str> = IdVec::new();
        let a = v.push("A");
        let b = v.push("B");
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(v[b], "B");
        v[a] = "C";
        assert_eq!(v.iter_enumerated().collect::<Vec<_>>(), vec![(a, &"C"), (b, &"B")]);
        assert_eq!(v.ids().collect::<Vec<_>>(), vec![a, b]);
        assert_eq!(format!("{a:?} {:?}", IndexId::new(7)), "t0 i7");
        assert_eq!(v.position(|s| *s == "B"), Some(b));
        let w: IdVec<TensorId, usize> = (0..3).collect();
        assert_eq!(w.len(), 3);
        assert!(!w.is_empty());
    }
}
