//! Which tiles of a tensor are stored, where, and how any tile is read from them.
//!
//! A tile is named by its coordinates (one tile number per dimension). Of the tiles
//! the tensor's symmetry group maps onto each other only the *canonical* one (the
//! lexicographically smallest image) is stored, in full — a diagonal tile such as
//! `(k, k)` of an antisymmetric pair keeps its own internal (anti)symmetry exactly.
//! Any other tile is read from its canonical tile with permuted strides and the
//! sign of the permutation, as NWChem's TCE does; nothing is copied. Tiles the
//! block rules (spin, irreps, explicit lists) declare zero, or that no computation
//! reaches, are not stored at all.

use super::space::TiledRange;
use crate::sema::hir::{BlockRule, Hir, TensorId};
use crate::symmetry::PermGroup;
use std::collections::HashMap;
use std::sync::Arc;

/// Tile coordinates.
pub type Coord = Vec<u32>;

/// How to read one tile: from `offset` in the tensor's data, element `l` (local
/// coordinates) at `offset + Σ l[d]·strides[d]`, times `sign`.
#[derive(Debug, Clone, PartialEq)]
pub struct TileView {
    /// The stored tile read (its number in [`Layout::tiles`]).
    pub slot: usize,
    pub offset: usize,
    pub strides: Vec<isize>,
    pub sign: f64,
}

/// The storage layout of one tensor.
#[derive(Debug, Clone)]
pub struct Layout {
    pub name: String,
    pub dims: Vec<Arc<TiledRange>>,
    group: PermGroup,
    rules: Vec<BlockRule>,
    tiles: Vec<Coord>,
    slots: HashMap<Coord, usize>,
    offsets: Vec<usize>,
}

impl Layout {
    /// A layout with no tiles yet (see [`Layout::candidates`] and [`Layout::store`]).
    pub fn new(hir: &Hir, t: TensorId, tilings: &HashMap<crate::ids::RangeId, Arc<TiledRange>>) -> Layout {
        let tensor = &hir.tensors[t];
        Layout {
            name: tensor.name.clone(),
            dims: tensor.dims.iter().map(|r| tilings[r].clone()).collect(),
            group: PermGroup::of(tensor),
            rules: tensor.blocks.clone(),
            tiles: Vec::new(),
            slots: HashMap::new(),
            offsets: vec![0],
        }
    }

    /// Number of tiles of the full tile grid (dense count).
    pub fn grid_tiles(&self) -> f64 {
        self.dims.iter().map(|d| d.count() as f64).product()
    }

    /// Elements of the dense tensor.
    pub fn dense_len(&self) -> f64 {
        self.dims.iter().map(|d| d.start(d.count()) as f64).product()
    }

    /// Every canonical tile the block rules allow, in row-major order; `None` when
    /// the tile grid has more than `limit` tiles.
    pub fn candidates(&self, limit: f64) -> Option<Vec<Coord>> {
        Some(self.canonical_tiles(limit)?.into_iter().filter(|c| self.allowed(c)).collect())
    }

    /// Every canonical tile, in row-major order; `None` when the tile grid has more
    /// than `limit` tiles.
    pub fn canonical_tiles(&self, limit: f64) -> Option<Vec<Coord>> {
        if self.grid_tiles() > limit {
            return None;
        }
        let counts: Vec<usize> = self.dims.iter().map(|d| d.count()).collect();
        let mut out = Vec::new();
        let mut c: Coord = vec![0; counts.len()];
        if counts.contains(&0) {
            return Some(out);
        }
        loop {
            if self.is_canonical(&c) {
                out.push(c.clone());
            }
            // Odometer, last dimension fastest.
            let mut d = counts.len();
            loop {
                if d == 0 {
                    return Some(out);
                }
                d -= 1;
                c[d] += 1;
                if (c[d] as usize) < counts[d] {
                    break;
                }
                c[d] = 0;
            }
        }
    }

    /// Whether the block rules allow tile `c`.
    pub fn allowed(&self, c: &[u32]) -> bool {
        self.rules.iter().all(|rule| match rule {
            BlockRule::Spin { upper, lower } => {
                let alpha = |ps: &[usize]| ps.iter().filter(|&&p| self.dims[p].label(c[p] as usize) == 0).count();
                alpha(upper) == alpha(lower)
            }
            BlockRule::Irrep { positions } => {
                positions.iter().fold(0u8, |x, &p| x ^ self.dims[p].label(c[p] as usize)) == 0
            }
            BlockRule::Tiles(list) => {
                let user: Vec<usize> =
                    c.iter().enumerate().map(|(d, &k)| self.dims[d].user_coord(k as usize)).collect();
                list.contains(&user)
            }
        })
    }

    /// The canonical image of `c` and the group element reaching it.
    fn canonical(&self, c: &[u32]) -> (Coord, usize) {
        let mut best: Coord = c.to_vec();
        let mut which = 0;
        let mut img: Coord = vec![0; c.len()];
        for (k, (p, _)) in self.group.elements().iter().enumerate() {
            for (i, &q) in p.iter().enumerate() {
                img[i] = c[q];
            }
            if img < best {
                best.copy_from_slice(&img);
                which = k;
            }
        }
        (best, which)
    }

    pub fn is_canonical(&self, c: &[u32]) -> bool {
        self.canonical(c).0 == c
    }

    /// Stores tiles `tiles` (canonical, distinct), each as a full row-major box.
    pub fn store(&mut self, tiles: Vec<Coord>) {
        self.tiles = tiles;
        self.slots = self.tiles.iter().enumerate().map(|(k, c)| (c.clone(), k)).collect();
        self.offsets = vec![0];
        let mut at = 0;
        for c in &self.tiles {
            at += self.tile_len(c);
            self.offsets.push(at);
        }
    }

    /// The first element and the extent of tile `c` in every dimension.
    pub fn tile_box(&self, c: &[u32]) -> (Vec<usize>, Vec<usize>) {
        c.iter().enumerate().map(|(d, &k)| (self.dims[d].start(k as usize), self.dims[d].extent(k as usize))).unzip()
    }

    /// Elements of tile `c`'s box.
    pub fn tile_len(&self, c: &[u32]) -> usize {
        c.iter().enumerate().map(|(d, &k)| self.dims[d].extent(k as usize)).product()
    }

    /// The stored tiles, in storage order.
    pub fn tiles(&self) -> &[Coord] {
        &self.tiles
    }

    /// Elements stored.
    pub fn len(&self) -> usize {
        *self.offsets.last().expect("offsets start with 0")
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offset of stored tile number `slot`.
    pub fn offset(&self, slot: usize) -> usize {
        self.offsets[slot]
    }

    /// Whether tile `c` (canonical) is stored.
    pub fn slot(&self, c: &[u32]) -> Option<usize> {
        self.slots.get(c).copied()
    }

    /// How to read tile `c` (any coordinates), or `None` when it is zero.
    pub fn view(&self, c: &[u32]) -> Option<TileView> {
        let (canon, which) = self.canonical(c);
        let slot = *self.slots.get(&canon)?;
        let (perm, sign) = &self.group.elements()[which];
        // Row-major strides of the stored (canonical) tile.
        let n = c.len();
        let mut stored = vec![0isize; n];
        let mut s = 1isize;
        for d in (0..n).rev() {
            stored[d] = s;
            s *= self.dims[d].extent(canon[d] as usize) as isize;
        }
        // canon[i] = c[perm[i]]: dimension perm[i] of `c` runs along stored dimension i.
        let mut strides = vec![0isize; n];
        for i in 0..n {
            strides[perm[i]] = stored[i];
        }
        Some(TileView { slot, offset: self.offsets[slot], strides, sign: *sign as f64 })
    }
}
