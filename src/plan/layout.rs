//! Block layouts of a tensor on a processor grid, and exact per-rank block sizes.
//!
//! Ranks are numbered row-major over the grid (the last grid dimension varies
//! fastest). A tensor dimension of extent `n` split over grid dimensions
//! `[g1, g2, ...]` (outermost first) is cut into `p_g1` blocks of `ceil(n/p_g1)`
//! (the last ones shorter or empty), each of those into `p_g2` blocks the same way,
//! and so on: the block a rank holds is the product of its intervals. A grid
//! dimension that splits no tensor dimension replicates the tensor along it, unless
//! it is listed in `idle`: then only the ranks with coordinate 0 along it hold data.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Layout {
    /// Grid extents (their product is the number of ranks).
    pub grid: Vec<usize>,
    /// For each tensor dimension, the grid dimensions splitting it, outermost first.
    /// Every grid dimension occurs at most once in all of them.
    pub splits: Vec<Vec<usize>>,
    /// Grid dimensions along which only coordinate 0 holds data.
    pub idle: Vec<usize>,
}

/// `[lo, hi)` cut into `p` blocks of `ceil(len/p)`: block `c`.
pub fn sub_interval(lo: usize, hi: usize, p: usize, c: usize) -> (usize, usize) {
    let len = hi - lo;
    if p <= 1 {
        return (lo, hi);
    }
    let b = len.div_ceil(p);
    let s = (c * b).min(len);
    let e = ((c + 1) * b).min(len);
    (lo + s, lo + e)
}

/// The distinct lengths of the `p` blocks of an interval of length `len`.
pub fn block_lengths(len: usize, p: usize) -> Vec<usize> {
    if p <= 1 {
        return vec![len];
    }
    let mut v: Vec<usize> = (0..p)
        .map(|c| {
            let (s, e) = sub_interval(0, len, p, c);
            e - s
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

impl Layout {
    /// Fully replicated on `grid` (every rank holds everything).
    pub fn replicated(grid: &[usize], ndims: usize) -> Layout {
        Layout { grid: grid.to_vec(), splits: vec![Vec::new(); ndims], idle: Vec::new() }
    }

    pub fn procs(&self) -> usize {
        self.grid.iter().product()
    }

    /// Grid coordinates of a rank.
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        coords_of(&self.grid, rank)
    }

    /// Grid dimensions that neither split the tensor nor are idle: copies along them.
    pub fn replicated_dims(&self) -> Vec<usize> {
        (0..self.grid.len()).filter(|g| !self.idle.contains(g) && !self.splits.iter().any(|s| s.contains(g))).collect()
    }

    /// Number of copies of each element.
    pub fn replication(&self) -> usize {
        self.replicated_dims().iter().map(|&g| self.grid[g]).product()
    }

    /// The interval of tensor dimension `d` (extent `n`) held at `coords`.
    pub fn interval(&self, d: usize, n: usize, coords: &[usize]) -> (usize, usize) {
        let (mut lo, mut hi) = (0, n);
        for &g in &self.splits[d] {
            (lo, hi) = sub_interval(lo, hi, self.grid[g], coords[g]);
        }
        (lo, hi)
    }

    /// The block held by a rank, as one interval per dimension; `None` on an idle rank.
    pub fn block(&self, shape: &[usize], rank: usize) -> Option<Vec<(usize, usize)>> {
        let c = self.coords(rank);
        if self.idle.iter().any(|&g| c[g] != 0) {
            return None;
        }
        Some((0..shape.len()).map(|d| self.interval(d, shape[d], &c)).collect())
    }

    /// Elements held by a rank.
    pub fn block_size(&self, shape: &[usize], rank: usize) -> u64 {
        self.block(shape, rank).map(|b| volume(&b)).unwrap_or(0)
    }

    /// The largest block any rank holds (closed form: blocks are largest at
    /// coordinate 0 of every splitting grid dimension).
    pub fn max_block(&self, shape: &[usize]) -> u64 {
        (0..shape.len()).map(|d| self.max_extent(d, shape[d]) as u64).product()
    }

    pub fn max_extent(&self, d: usize, n: usize) -> usize {
        let zeros = vec![0; self.grid.len()];
        let (s, e) = self.interval(d, n, &zeros);
        e - s
    }

    /// Distinct pairs (length after the first `keep` splits, final length) of
    /// dimension `d` over all ranks.
    pub fn prefix_pairs(&self, d: usize, n: usize, keep: usize) -> Vec<(usize, usize)> {
        let mut outer = vec![n];
        for &g in &self.splits[d][..keep] {
            let mut next: Vec<usize> = outer.iter().flat_map(|&l| block_lengths(l, self.grid[g])).collect();
            next.sort_unstable();
            next.dedup();
            outer = next;
        }
        let mut pairs = Vec::new();
        for &l in &outer {
            let mut inner = vec![l];
            for &g in &self.splits[d][keep..] {
                let mut next: Vec<usize> = inner.iter().flat_map(|&x| block_lengths(x, self.grid[g])).collect();
                next.sort_unstable();
                next.dedup();
                inner = next;
            }
            pairs.extend(inner.into_iter().map(|i| (l, i)));
        }
        pairs
    }

    /// Human-readable: `[a/g0, k/(g1·g2), j]`.
    pub fn describe(&self, names: &[String]) -> String {
        let parts: Vec<String> = self
            .splits
            .iter()
            .enumerate()
            .map(|(d, s)| {
                let n = names.get(d).cloned().unwrap_or_else(|| format!("d{d}"));
                match s.len() {
                    0 => n,
                    1 => format!("{n}/g{}", s[0]),
                    _ => format!("{n}/({})", s.iter().map(|g| format!("g{g}")).collect::<Vec<_>>().join("·")),
                }
            })
            .collect();
        let mut out = format!("[{}]", parts.join(", "));
        let rep = self.replicated_dims();
        if !rep.is_empty() {
            out.push_str(&format!(
                " replicated over {}",
                rep.iter().map(|g| format!("g{g}")).collect::<Vec<_>>().join(",")
            ));
        }
        if !self.idle.is_empty() {
            out.push_str(&format!(
                " on coordinate 0 of {}",
                self.idle.iter().map(|g| format!("g{g}")).collect::<Vec<_>>().join(",")
            ));
        }
        out
    }
}

pub fn coords_of(grid: &[usize], mut rank: usize) -> Vec<usize> {
    let mut c = vec![0; grid.len()];
    for g in (0..grid.len()).rev() {
        c[g] = rank % grid[g];
        rank /= grid[g];
    }
    c
}

pub fn volume(b: &[(usize, usize)]) -> u64 {
    b.iter().map(|&(s, e)| (e - s) as u64).product()
}

pub fn overlap(a: &[(usize, usize)], b: &[(usize, usize)]) -> u64 {
    a.iter().zip(b).map(|(&(s1, e1), &(s2, e2))| e1.min(e2).saturating_sub(s1.max(s2)) as u64).product()
}

/// Max over ranks of `Π after − Π before` when `to` keeps a prefix of each of
/// `from`'s split lists (a gather: `from` = fine, `to` = coarse), exactly.
pub fn max_gather_recv(shape: &[usize], fine: &Layout, coarse: &Layout) -> u64 {
    let mut fixed: u64 = 1;
    let mut changed: Vec<Vec<(usize, usize)>> = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        let keep = coarse.splits[d].len();
        if keep == fine.splits[d].len() {
            fixed *= fine.max_extent(d, n) as u64;
        } else {
            changed.push(fine.prefix_pairs(d, n, keep));
        }
    }
    if changed.is_empty() {
        return 0;
    }
    // Enumerate the product of the (few) distinct pairs per changed dimension.
    let mut best: u64 = 0;
    let mut idx = vec![0usize; changed.len()];
    loop {
        let (mut after, mut before) = (1u64, 1u64);
        for (k, &i) in idx.iter().enumerate() {
            after *= changed[k][i].0 as u64;
            before *= changed[k][i].1 as u64;
        }
        best = best.max(after - before);
        let mut k = 0;
        loop {
            if k == idx.len() {
                return best * fixed;
            }
            idx[k] += 1;
            if idx[k] < changed[k].len() {
                break;
            }
            idx[k] = 0;
            k += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_cover_exactly_once() {
        let l = Layout { grid: vec![3, 2], splits: vec![vec![0, 1], vec![]], idle: vec![] };
        let shape = [7, 5];
        let total: u64 = (0..6).map(|r| l.block_size(&shape, r)).sum();
        assert_eq!(total, 35);
        assert_eq!(l.max_block(&shape), (0..6).map(|r| l.block_size(&shape, r)).max().unwrap());
        // 7 → [0,3) [3,6) [6,7); [0,3) → [0,2) [2,3)
        assert_eq!(l.block(&shape, 0).unwrap(), vec![(0, 2), (0, 5)]);
        assert_eq!(l.block(&shape, 1).unwrap(), vec![(2, 3), (0, 5)]);
        assert_eq!(l.block(&shape, 5).unwrap(), vec![(7, 7), (0, 5)]);
    }

    #[test]
    fn closed_form_gather_max_matches_enumeration() {
        let fine = Layout { grid: vec![3, 2, 5], splits: vec![vec![0, 2], vec![1]], idle: vec![] };
        let coarse = Layout { grid: vec![3, 2, 5], splits: vec![vec![0], vec![1]], idle: vec![] };
        for shape in [[7usize, 5usize], [13, 3], [2, 9], [30, 4]] {
            let brute = (0..30).map(|r| coarse.block_size(&shape, r) - fine.block_size(&shape, r)).max().unwrap();
            assert_eq!(max_gather_recv(&shape, &fine, &coarse), brute, "{shape:?}");
        }
    }
}
