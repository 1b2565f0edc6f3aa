//! A tensor in tiled storage: a [`Layout`] and one buffer holding its stored tiles.

use super::buffer::AlignedBuf;
use super::layout::{Coord, Layout};
use super::SyncPtr;
use crate::interp::{random_key, random_value_keyed};
use crate::tensor::Dense;

/// The stored tiles of one tensor, back to back (see [`Layout`]).
#[derive(Debug, Clone)]
pub struct TiledTensor {
    pub layout: Layout,
    pub data: AlignedBuf,
}

/// Allocation failed: the tensor's name and the elements asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocError {
    pub name: String,
    pub elements: usize,
}

impl TiledTensor {
    /// Zero-filled storage for `layout`, failing (not aborting) when memory is short.
    pub fn zeros(layout: Layout) -> Result<TiledTensor, AllocError> {
        let n = layout.len();
        let data = AlignedBuf::zeroed(n).ok_or_else(|| AllocError { name: layout.name.clone(), elements: n })?;
        Ok(TiledTensor { layout, data })
    }

    /// Calls `f(slot, coord, start, extents)` for every stored tile.
    fn for_tiles(&self, mut f: impl FnMut(usize, &Coord, &[usize], &[usize])) {
        for (slot, c) in self.layout.tiles().iter().enumerate() {
            let start: Vec<usize> = c.iter().enumerate().map(|(d, &k)| self.layout.dims[d].start(k as usize)).collect();
            let ext: Vec<usize> = c.iter().enumerate().map(|(d, &k)| self.layout.dims[d].extent(k as usize)).collect();
            f(slot, c, &start, &ext);
        }
    }

    /// Tiles of `dense` copied into `layout` (what the layout does not store is
    /// dropped: the caller checks the dense tensor has the declared structure).
    pub fn from_dense(layout: Layout, dense: &Dense) -> Result<TiledTensor, AllocError> {
        let mut t = TiledTensor::zeros(layout)?;
        let shape = dense.shape.clone();
        let mut out = std::mem::take(&mut t.data);
        t.for_tiles(|slot, _, start, ext| {
            let base = t.layout.offset(slot);
            let mut k = 0;
            for_each_local(ext, |l| {
                let lin = l.iter().zip(start).zip(&shape).fold(0, |acc, ((&x, &s), &n)| acc * n + x + s);
                out[base + k] = dense.data[lin];
                k += 1;
            });
        });
        t.data = out;
        Ok(t)
    }

    /// The random values `interp::fill_random` gives the dense tensor, generated
    /// straight into the stored tiles: element `x` is `sign · random_value(seed,
    /// name, linear(rep))` with `(rep, sign)` its canonical index under the group.
    pub fn fill_random(
        layout: Layout,
        group: &crate::symmetry::PermGroup,
        seed: u64,
        round: impl Fn(f64) -> f64 + Sync,
    ) -> Result<TiledTensor, AllocError> {
        let mut t = TiledTensor::zeros(layout)?;
        let shape: Vec<usize> = t.layout.dims.iter().map(|d| d.start(d.count())).collect();
        let name = t.layout.name.clone();
        // Tiles are independent: fill them on every core.
        let spans: Vec<(usize, usize, Vec<usize>, Vec<usize>)> = {
            let mut v = Vec::new();
            t.for_tiles(|slot, _, start, ext| {
                v.push((t.layout.offset(slot), t.layout.offset(slot + 1), start.to_vec(), ext.to_vec()))
            });
            v
        };
        let base = SyncPtr(t.data.as_mut_ptr());
        let key = random_key(seed, &name);
        tcc_runtime::kernels::parallel_for(spans.len(), |k| {
            let (lo, hi, start, ext) = &spans[k];
            // SAFETY: tiles occupy disjoint ranges `lo..hi` of the buffer.
            let out = unsafe { std::slice::from_raw_parts_mut(base.get().add(*lo), hi - lo) };
            fill_tile(out, start, ext, &shape, group, key, &round);
        });
        Ok(t)
    }

    /// Element `idx` of the dense tensor this stands for.
    pub fn get(&self, idx: &[usize]) -> f64 {
        let c: Coord = idx.iter().enumerate().map(|(d, &i)| self.layout.dims[d].tile_of(i) as u32).collect();
        match self.layout.view(&c) {
            None => 0.0,
            Some(v) => {
                let off = idx.iter().enumerate().fold(v.offset as isize, |acc, (d, &i)| {
                    acc + (i - self.layout.dims[d].start(c[d] as usize)) as isize * v.strides[d]
                });
                v.sign * self.data[off as usize]
            }
        }
    }

    /// The dense tensor (every element, by symmetry and zeros where not stored),
    /// filled tile by tile through [`Layout::view`].
    pub fn to_dense(&self) -> Dense {
        let shape: Vec<usize> = self.layout.dims.iter().map(|d| d.start(d.count())).collect();
        let mut data = vec![0.0; shape.iter().product()];
        let counts: Vec<usize> = self.layout.dims.iter().map(|d| d.count()).collect();
        // Row-major strides of the dense tensor.
        let mut dense_stride = vec![1usize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            dense_stride[d] = dense_stride[d + 1] * shape[d + 1];
        }
        for_each_local(&counts, |tile| {
            let c: Coord = tile.iter().map(|&k| k as u32).collect();
            let Some(v) = self.layout.view(&c) else { return };
            let start: Vec<usize> = tile.iter().enumerate().map(|(d, &k)| self.layout.dims[d].start(k)).collect();
            let ext: Vec<usize> = tile.iter().enumerate().map(|(d, &k)| self.layout.dims[d].extent(k)).collect();
            let base: usize = start.iter().zip(&dense_stride).map(|(s, t)| s * t).sum();
            // Rows along the last dimension in one tight loop: the outputs of
            // symmetric tiled runs hold 10⁸ elements and more.
            let n = ext.len();
            let (inner, inner_dense, inner_src) = match n {
                0 => (1, 0, 0),
                _ => (ext[n - 1], dense_stride[n - 1], v.strides[n - 1]),
            };
            for_each_local(&ext[..n.saturating_sub(1)], |l| {
                let at = base + l.iter().zip(&dense_stride).map(|(x, t)| x * t).sum::<usize>();
                let src = v.offset as isize + l.iter().zip(&v.strides).map(|(&x, &s)| x as isize * s).sum::<isize>();
                for i in 0..inner {
                    data[at + i * inner_dense] = v.sign * self.data[(src + i as isize * inner_src) as usize];
                }
            });
        });
        Dense { shape, data }
    }
}

/// The random values of one tile (`start`, `ext`) of a tensor of `shape` whose
/// [`random_key`] is `key`: see [`TiledTensor::fill_random`].
pub fn fill_tile(
    out: &mut [f64],
    start: &[usize],
    ext: &[usize],
    shape: &[usize],
    group: &crate::symmetry::PermGroup,
    key: u64,
    round: &(impl Fn(f64) -> f64 + ?Sized),
) {
    let n = start.len();
    let (mut idx, mut rep, mut scratch) = (vec![0usize; n], vec![0usize; n], vec![0usize; n]);
    let mut i = 0;
    for_each_local(ext, |l| {
        for d in 0..n {
            idx[d] = start[d] + l[d];
        }
        let sign = group.canonical_into(&idx, &mut rep, &mut scratch);
        out[i] = if sign == 0 {
            0.0
        } else {
            let lin = rep.iter().zip(shape).fold(0u64, |acc, (&x, &n)| acc * n as u64 + x as u64);
            round(sign as f64 * random_value_keyed(key, lin))
        };
        i += 1;
    });
}

/// Calls `f` on every multi-index of the box `ext` in row-major order.
pub fn for_each_local(ext: &[usize], mut f: impl FnMut(&[usize])) {
    if ext.contains(&0) {
        return;
    }
    let mut l = vec![0usize; ext.len()];
    loop {
        f(&l);
        let mut d = ext.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            l[d] += 1;
            if l[d] < ext[d] {
                break;
            }
            l[d] = 0;
        }
    }
}
