//! Distributed tensors over a processor grid.
//!
//! A [`Distribution`] maps some tensor dimensions to distinct dimensions of a
//! [`ProcGrid`]: a mapped tensor dimension is split into balanced blocks along that
//! grid dimension; grid dimensions no tensor dimension uses *replicate* the tensor.
//! A rank's *local box* is the product of its blocks; the ranks whose coordinates are
//! 0 along every replicating grid dimension are the *primary* copies, whose boxes
//! partition the tensor.
//!
//! Data moves two-sided, in bulk-synchronous collective phases (see
//! `book/src/runtime.md` for why not MPI one-sided):
//!
//! * [`DistTensor::redistribute`]: both distributions are known to every rank, so
//!   each rank computes what it sends and receives and one all-to-all-v moves it;
//! * [`DistTensor::get_tiles`] / [`DistTensor::accumulate_tiles`]: tiles named at run
//!   time; requests (boxes) travel in a first all-to-all-v, data in a second.

use crate::comm::{displs, Communicator};
use std::ops::Range;

pub type Box_ = Vec<Range<usize>>;

/// A processor grid; ranks are numbered row-major over its coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcGrid {
    pub dims: Vec<usize>,
}

impl ProcGrid {
    pub fn new(dims: Vec<usize>) -> ProcGrid {
        assert!(dims.iter().all(|&d| d >= 1), "grid dimensions must be ≥ 1");
        ProcGrid { dims }
    }
    pub fn procs(&self) -> usize {
        self.dims.iter().product()
    }
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        let mut c = vec![0; self.dims.len()];
        let mut r = rank;
        for d in (0..self.dims.len()).rev() {
            c[d] = r % self.dims[d];
            r /= self.dims[d];
        }
        c
    }
}

/// The balanced block `k` of `parts` of `0..n`.
pub fn block(n: usize, parts: usize, k: usize) -> Range<usize> {
    (k * n / parts)..((k + 1) * n / parts)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distribution {
    pub grid: ProcGrid,
    /// For each tensor dimension, the grid dimension it is split along (or `None`).
    pub map: Vec<Option<usize>>,
}

impl Distribution {
    pub fn new(grid: ProcGrid, map: Vec<Option<usize>>) -> Distribution {
        let mut used: Vec<usize> = map.iter().flatten().copied().collect();
        assert!(used.iter().all(|&g| g < grid.dims.len()), "grid dimension out of range");
        used.sort_unstable();
        let n = used.len();
        used.dedup();
        assert_eq!(n, used.len(), "two tensor dimensions on one grid dimension");
        Distribution { grid, map }
    }
    /// Every rank holds the whole tensor.
    pub fn replicated(ndims: usize, procs: usize) -> Distribution {
        Distribution::new(ProcGrid::new(vec![procs]), vec![None; ndims])
    }
    /// Dimension `dim` split in `procs` blocks.
    pub fn block(ndims: usize, dim: usize, procs: usize) -> Distribution {
        let mut map = vec![None; ndims];
        map[dim] = Some(0);
        Distribution::new(ProcGrid::new(vec![procs]), map)
    }
    pub fn local_box(&self, shape: &[usize], rank: usize) -> Box_ {
        assert_eq!(shape.len(), self.map.len(), "distribution of another rank of tensor");
        let c = self.grid.coords(rank);
        shape
            .iter()
            .zip(&self.map)
            .map(|(&n, m)| match m {
                Some(g) => block(n, self.grid.dims[*g], c[*g]),
                None => 0..n,
            })
            .collect()
    }
    /// Whether `rank` holds the primary copy of its box.
    pub fn is_primary(&self, rank: usize) -> bool {
        let c = self.grid.coords(rank);
        (0..self.grid.dims.len()).all(|g| self.map.contains(&Some(g)) || c[g] == 0)
    }
}

/// The number of elements of a box.
pub fn volume(b: &[Range<usize>]) -> usize {
    b.iter().map(|r| r.len()).product()
}

pub fn intersect(a: &[Range<usize>], b: &[Range<usize>]) -> Option<Box_> {
    let v: Box_ = a.iter().zip(b).map(|(x, y)| x.start.max(y.start)..x.end.min(y.end)).collect();
    if v.iter().all(|r| r.start < r.end) {
        Some(v)
    } else {
        None
    }
}

/// Calls `f(offset in outer, offset in sub, n)` for each contiguous run of `n`
/// elements of `sub` (⊆ `outer`), row-major over `sub`.
fn walk(outer: &[Range<usize>], sub: &[Range<usize>], mut f: impl FnMut(usize, usize, usize)) {
    if sub.iter().any(|r| r.is_empty()) {
        return;
    }
    debug_assert!(
        sub.len() == outer.len() && sub.iter().zip(outer).all(|(s, o)| s.start >= o.start && s.end <= o.end),
        "{sub:?} not in {outer:?}"
    );
    let Some(last) = sub.last() else {
        return f(0, 0, 1);
    };
    let (n, run) = (sub.len(), last.len());
    let ext: Vec<usize> = outer.iter().map(|r| r.len()).collect();
    let mut idx: Vec<usize> = sub.iter().map(|r| r.start).collect();
    let mut k = 0;
    loop {
        let off = (0..n).fold(0, |acc, d| acc * ext[d] + (idx[d] - outer[d].start));
        f(off, k, run);
        k += run;
        let mut d = n - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < sub[d].end {
                break;
            }
            idx[d] = sub[d].start;
        }
    }
}

/// The elements of `sub` from an array laid out over `outer`.
pub fn pack(data: &[f64], outer: &[Range<usize>], sub: &[Range<usize>]) -> Vec<f64> {
    let mut v = vec![0.0; volume(sub)];
    walk(outer, sub, |o, k, n| v[k..k + n].copy_from_slice(&data[o..o + n]));
    v
}

/// Writes (or adds) `vals` (laid out over `sub`) into `data` (laid out over `outer`).
pub fn unpack(data: &mut [f64], outer: &[Range<usize>], sub: &[Range<usize>], vals: &[f64], add: bool) {
    debug_assert_eq!(vals.len(), volume(sub), "values for another box");
    walk(outer, sub, |o, k, n| {
        let (dst, src) = (&mut data[o..o + n], &vals[k..k + n]);
        if add {
            dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
        } else {
            dst.copy_from_slice(src);
        }
    });
}

/// Sends `out[q]` to every rank q and returns what each rank sent here, with the
/// receive counts known (`Some`) or exchanged first (`None`, one all-to-all).
pub fn exchange(comm: &dyn Communicator, out: Vec<Vec<f64>>, recv_counts: Option<Vec<usize>>) -> Vec<Vec<f64>> {
    let p = comm.size();
    let send_counts: Vec<usize> = out.iter().map(|v| v.len()).collect();
    let recv_counts = recv_counts.unwrap_or_else(|| {
        let sc: Vec<f64> = send_counts.iter().map(|&c| c as f64).collect();
        let mut rc = vec![0.0; p];
        comm.alltoall(&sc, &mut rc);
        rc.into_iter().map(|c| c as usize).collect()
    });
    let send: Vec<f64> = out.concat();
    let mut recv = vec![0.0; recv_counts.iter().sum()];
    comm.alltoallv(&send, &send_counts, &mut recv, &recv_counts);
    let d = displs(&recv_counts);
    (0..p).map(|q| recv[d[q]..d[q] + recv_counts[q]].to_vec()).collect()
}

/// One rank's part of a distributed tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct DistTensor {
    pub shape: Vec<usize>,
    pub dist: Distribution,
    pub rank: usize,
    /// The local box, row-major.
    pub local: Vec<f64>,
}

impl DistTensor {
    pub fn zeros(shape: Vec<usize>, dist: Distribution, rank: usize) -> DistTensor {
        let n = volume(&dist.local_box(&shape, rank));
        DistTensor { shape, dist, rank, local: vec![0.0; n] }
    }
    /// This rank's part of a tensor every rank has in full (row-major `global`).
    pub fn from_global(shape: Vec<usize>, dist: Distribution, rank: usize, global: &[f64]) -> DistTensor {
        let full: Box_ = shape.iter().map(|&n| 0..n).collect();
        let local = pack(global, &full, &dist.local_box(&shape, rank));
        DistTensor { shape, dist, rank, local }
    }
    pub fn local_box(&self) -> Box_ {
        self.dist.local_box(&self.shape, self.rank)
    }

    /// The same tensor in another distribution (collective; one all-to-all-v).
    pub fn redistribute(&self, comm: &dyn Communicator, to: Distribution) -> DistTensor {
        let p = comm.size();
        assert_eq!(
            self.dist.grid.procs(),
            p,
            "distribution over {} ranks, communicator of {p}",
            self.dist.grid.procs()
        );
        assert_eq!(to.grid.procs(), p, "target distribution over {} ranks, communicator of {p}", to.grid.procs());
        let me = self.rank;
        let mine = self.local_box();
        let target = to.local_box(&self.shape, me);
        let out: Vec<Vec<f64>> = (0..p)
            .map(|q| {
                if !self.dist.is_primary(me) {
                    return Vec::new();
                }
                match intersect(&mine, &to.local_box(&self.shape, q)) {
                    Some(b) => pack(&self.local, &mine, &b),
                    None => Vec::new(),
                }
            })
            .collect();
        let pieces: Vec<Option<Box_>> =
            (0..p)
                .map(|q| {
                    if self.dist.is_primary(q) {
                        intersect(&self.dist.local_box(&self.shape, q), &target)
                    } else {
                        None
                    }
                })
                .collect();
        let counts = pieces.iter().map(|b| b.as_ref().map_or(0, |b| volume(b))).collect();
        let got = exchange(comm, out, Some(counts));
        let mut local = vec![0.0; volume(&target)];
        for (q, b) in pieces.iter().enumerate() {
            if let Some(b) = b {
                unpack(&mut local, &target, b, &got[q], false);
            }
        }
        DistTensor { shape: self.shape.clone(), dist: to, rank: me, local }
    }

    /// The whole tensor on `root` (collective).
    pub fn gather(&self, comm: &dyn Communicator, root: usize) -> Option<Vec<f64>> {
        let full: Box_ = self.shape.iter().map(|&n| 0..n).collect();
        let got = self.get_tiles(comm, if comm.rank() == root { std::slice::from_ref(&full) } else { &[] });
        (comm.rank() == root).then(|| got.into_iter().next().expect("one tile asked"))
    }

    /// The tiles `wanted` by this rank, each row-major over its box (collective:
    /// every rank calls it, with its own list, possibly empty). Two-sided: the boxes
    /// go to the primary owners, which answer with the data.
    pub fn get_tiles(&self, comm: &dyn Communicator, wanted: &[Box_]) -> Vec<Vec<f64>> {
        let p = comm.size();
        let nd = self.shape.len();
        let owner_box = |q: usize| self.dist.local_box(&self.shape, q);
        // Requests: per owner, [tile, lo0, hi0, lo1, hi1, ...] per piece.
        let mut req: Vec<Vec<f64>> = vec![Vec::new(); p];
        let mut expect: Vec<Vec<(usize, Box_)>> = vec![Vec::new(); p];
        for (i, w) in wanted.iter().enumerate() {
            assert_eq!(w.len(), nd, "tile of another rank of tensor");
            assert!(w.iter().zip(&self.shape).all(|(r, &n)| r.end <= n), "tile {w:?} outside shape {:?}", self.shape);
            for (q, rq) in req.iter_mut().enumerate() {
                if !self.dist.is_primary(q) {
                    continue;
                }
                if let Some(b) = intersect(&owner_box(q), w) {
                    rq.push(i as f64);
                    for r in &b {
                        rq.push(r.start as f64);
                        rq.push(r.end as f64);
                    }
                    expect[q].push((i, b));
                }
            }
        }
        let asked = exchange(comm, req, None);
        let mine = self.local_box();
        let replies: Vec<Vec<f64>> = asked
            .iter()
            .map(|rq| {
                let mut v = Vec::new();
                for piece in rq.chunks(1 + 2 * nd) {
                    let b: Box_ = (0..nd).map(|d| piece[1 + 2 * d] as usize..piece[2 + 2 * d] as usize).collect();
                    v.extend(pack(&self.local, &mine, &b));
                }
                v
            })
            .collect();
        let counts = expect.iter().map(|e| e.iter().map(|(_, b)| volume(b)).sum()).collect();
        let got = exchange(comm, replies, Some(counts));
        let mut tiles: Vec<Vec<f64>> = wanted.iter().map(|w| vec![0.0; volume(w)]).collect();
        for (q, e) in expect.iter().enumerate() {
            let mut off = 0;
            for (i, b) in e {
                let n = volume(b);
                unpack(&mut tiles[*i], &wanted[*i], b, &got[q][off..off + n], false);
                off += n;
            }
        }
        tiles
    }

    /// Adds each `(box, values)` into the tensor, on every copy that holds part of
    /// the box (collective). Contributions are added in rank order.
    pub fn accumulate_tiles(&mut self, comm: &dyn Communicator, tiles: &[(Box_, Vec<f64>)]) {
        let p = comm.size();
        let nd = self.shape.len();
        let mut out: Vec<Vec<f64>> = vec![Vec::new(); p];
        for (b, vals) in tiles {
            assert_eq!(vals.len(), volume(b), "tile data does not match its box");
            for (q, o) in out.iter_mut().enumerate() {
                if let Some(x) = intersect(&self.dist.local_box(&self.shape, q), b) {
                    for r in &x {
                        o.push(r.start as f64);
                        o.push(r.end as f64);
                    }
                    o.extend(pack(vals, b, &x));
                }
            }
        }
        let got = exchange(comm, out, None);
        let mine = self.local_box();
        for msg in &got {
            let mut k = 0;
            while k < msg.len() {
                let b: Box_ = (0..nd).map(|d| msg[k + 2 * d] as usize..msg[k + 2 * d + 1] as usize).collect();
                k += 2 * nd;
                let n = volume(&b);
                unpack(&mut self.local, &mine, &b, &msg[k..k + n], true);
                k += n;
            }
        }
    }
}
