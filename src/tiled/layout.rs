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
    /// The slot of every tile of the grid (row-major; `u32::MAX` where none is
    /// stored), when the grid is small enough: lookups without hashing.
    dense_slots: Vec<u32>,
    offsets: Vec<usize>,
}

/// Grids of at most this many tiles get a dense slot table (4 bytes a tile).
const DENSE_SLOTS_MAX: f64 = (1u64 << 20) as f64;

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
            dense_slots: Vec::new(),
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
        let which = self.canonical_in(c, &mut best);
        (best, which)
    }

    /// The canonical image of `c`, written to `best` (as long as `c`), and the group
    /// element reaching it; allocates nothing for up to 16 dimensions.
    fn canonical_in(&self, c: &[u32], best: &mut [u32]) -> usize {
        best.copy_from_slice(c);
        let elements = self.group.elements();
        if elements.len() == 1 {
            return 0;
        }
        let n = c.len();
        let mut stack = [0u32; 16];
        let mut heap = Vec::new();
        let img: &mut [u32] = if n <= stack.len() {
            &mut stack[..n]
        } else {
            heap.resize(n, 0);
            &mut heap
        };
        let mut which = 0;
        for (k, (p, _)) in elements.iter().enumerate() {
            for (i, &q) in p.iter().enumerate() {
                img[i] = c[q];
            }
            if *img < *best {
                best.copy_from_slice(img);
                which = k;
            }
        }
        which
    }

    pub fn is_canonical(&self, c: &[u32]) -> bool {
        self.canonical(c).0 == c
    }

    /// Stores tiles `tiles` (canonical, distinct), each as a full row-major box.
    pub fn store(&mut self, tiles: Vec<Coord>) {
        self.tiles = tiles;
        self.slots = self.tiles.iter().enumerate().map(|(k, c)| (c.clone(), k)).collect();
        self.dense_slots = Vec::new();
        if self.grid_tiles() <= DENSE_SLOTS_MAX && self.tiles.len() < u32::MAX as usize {
            self.dense_slots = vec![u32::MAX; self.grid_tiles() as usize];
            for (k, c) in self.tiles.iter().enumerate() {
                let at = self.grid_index(c);
                self.dense_slots[at] = k as u32;
            }
        }
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

    /// The tensor's symmetry group (signed permutations of its dimensions).
    pub fn group(&self) -> &PermGroup {
        &self.group
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

    /// Row-major position of tile `c` in the tile grid.
    fn grid_index(&self, c: &[u32]) -> usize {
        c.iter().zip(&self.dims).fold(0, |at, (&k, d)| at * d.count() + k as usize)
    }

    /// Whether tile `c` (canonical) is stored.
    pub fn slot(&self, c: &[u32]) -> Option<usize> {
        if !self.dense_slots.is_empty() {
            if c.len() != self.dims.len() || c.iter().zip(&self.dims).any(|(&k, d)| k as usize >= d.count()) {
                return None;
            }
            let slot = self.dense_slots[self.grid_index(c)];
            return (slot != u32::MAX).then_some(slot as usize);
        }
        self.slots.get(c).copied()
    }

    /// How to read tile `c` (any coordinates), or `None` when it is zero.
    pub fn view(&self, c: &[u32]) -> Option<TileView> {
        let mut v = TileView { slot: 0, offset: 0, strides: Vec::new(), sign: 1.0 };
        self.view_into(c, &mut v).then_some(v)
    }

    /// [`Layout::view`] into `out` (its `strides` reused): whether tile `c` is
    /// nonzero. Allocates nothing for up to 16 dimensions once `out` has room.
    pub fn view_into(&self, c: &[u32], out: &mut TileView) -> bool {
        let n = c.len();
        let mut stack = [0u32; 16];
        let mut heap = Vec::new();
        let canon: &mut [u32] = if n <= stack.len() {
            &mut stack[..n]
        } else {
            heap.resize(n, 0);
            &mut heap
        };
        let which = self.canonical_in(c, canon);
        let Some(slot) = self.slot(canon) else { return false };
        let (perm, sign) = &self.group.elements()[which];
        // Row-major strides of the stored (canonical) tile; canon[i] = c[perm[i]]:
        // dimension perm[i] of `c` runs along stored dimension i.
        out.strides.clear();
        out.strides.resize(n, 0);
        let mut s = 1isize;
        for i in (0..n).rev() {
            out.strides[perm[i]] = s;
            s *= self.dims[i].extent(canon[i] as usize) as isize;
        }
        out.slot = slot;
        out.offset = self.offsets[slot];
        out.sign = *sign as f64;
        true
    }
}
