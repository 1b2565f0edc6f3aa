//! Name tables and "did you mean" suggestions.
//!
//! Each scope (the file, or one `model` block) has four namespaces, because each
//! kind of name is written in its own syntactic position and so can never be
//! mistaken for another: *index spaces* (ranges and indices together: both are
//! written in brackets and after `:`/`on`, and a range where an index belongs gets a
//! dedicated error), *tensors*, *grids* and *units* (programs and models). This lets
//! the book's `range V` coexist with `tensor V`, which the language reference uses.

use super::hir::{GridId, IndexId, RangeId, TensorId};
use crate::syntax::Span;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ns {
    /// Ranges (and model dims) and indices.
    Space,
    Tensor,
    Grid,
    /// Programs and models (each becomes a unit named after it).
    Unit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sym {
    Range(RangeId),
    Index(IndexId),
    Tensor(TensorId),
    Grid(GridId),
    Unit,
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub sym: Sym,
    /// Where the name was declared; `None` for the file's own top-level program.
    pub span: Option<Span>,
}

/// One scope's names. Names reported as unknown are remembered (with the
/// placeholder made for them) so that each is reported once, not at every use.
#[derive(Debug, Default)]
pub(crate) struct Names {
    table: BTreeMap<(Ns, String), Entry>,
    unknown: BTreeMap<(Ns, String), Sym>,
}

impl Names {
    pub fn get(&self, ns: Ns, name: &str) -> Option<&Entry> {
        self.table.get(&(ns, name.to_string()))
    }

    pub fn insert(&mut self, ns: Ns, name: &str, entry: Entry) {
        self.table.insert((ns, name.to_string()), entry);
    }

    /// Every name of a namespace, sorted (so suggestions are deterministic).
    pub fn names(&self, ns: Ns) -> impl Iterator<Item = (&str, &Entry)> {
        // The table is ordered by namespace first: only `ns`'s part is read.
        self.table
            .range((ns, String::new())..)
            .take_while(move |((n, _), _)| *n == ns)
            .map(|((_, s), e)| (s.as_str(), e))
    }

    pub fn unknown(&self, ns: Ns, name: &str) -> Option<Sym> {
        self.unknown.get(&(ns, name.to_string())).copied()
    }

    pub fn mark_unknown(&mut self, ns: Ns, name: &str, placeholder: Sym) {
        self.unknown.insert((ns, name.to_string()), placeholder);
    }
}

/// Edit distance counting insertions, deletions, substitutions and swaps of two
/// adjacent characters (the usual typos).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `name`, if it is close enough to be a likely typo:
/// at most one edit per three characters (at least one), and never a suggestion for
/// one-letter names unless only the case differs (`i` vs `k` is not a typo).
pub(crate) fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    let limit = (len / 3).max(1);
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        if c == name {
            continue;
        }
        // The distance is at least the difference in length: skip without it.
        if c.chars().count().abs_diff(len) > limit {
            continue;
        }
        let d = if c.eq_ignore_ascii_case(name) { 0 } else { edit_distance(name, c) };
        let close = d <= limit && (len > 1 || d == 0) && d < c.chars().count().max(len);
        if close && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("T2", "T3"), 1);
    }

    #[test]
    fn suggestions_are_conservative() {
        assert_eq!(closest("T3", ["T2", "V"]), Some("T2"));
        assert_eq!(closest("k", ["l", "i"]), None);
        assert_eq!(closest("hiden", ["hidden", "heads"]), Some("hidden"));
        assert_eq!(closest("reul", ["relu", "exp"]), Some("relu"));
        assert_eq!(closest("rleu", ["relu"]), Some("relu"));
        assert_eq!(closest("relux", ["relu"]), Some("relu"));
        assert_eq!(closest("Data", ["data"]), Some("data"));
        assert_eq!(closest("expo", ["exp", "log"]), Some("exp"));
    }
}
