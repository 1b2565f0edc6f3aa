//! Tilings of index ranges: where each tile starts and which sub-space (spin,
//! irrep) it belongs to. Tiles never straddle a sub-space boundary, nor a multiple
//! of the user's tile size (so `tiles[...]` coordinates name whole tiles).

use crate::ids::RangeId;
use crate::sema::hir::{Hir, Range, SubspaceKind};

/// The tile size the compiler aims at when the range does not give one: large
/// enough for the GETT micro-kernel to run near peak (≥ 32 per dimension), small
/// enough to give threads several tasks each.
pub const DEFAULT_TILE: usize = 40;

/// One range cut into tiles: tile `k` covers `starts[k]..starts[k + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledRange {
    starts: Vec<usize>,
    labels: Vec<u8>,
    /// The tile size `tiles[...]` coordinates are counted in (the user's, else the
    /// whole range).
    coord_tile: usize,
}

impl TiledRange {
    /// The tiling of `range`: the user's tile size, else `default_tile` rounded so
    /// that each sub-space splits into tiles of nearly equal size.
    pub fn new(range: &Range, default_tile: usize) -> TiledRange {
        let blocks: Vec<usize> = match &range.tiling.subspaces {
            Some(s) => s.sizes.clone(),
            None => vec![range.size],
        };
        let user = range.tiling.tile;
        let mut starts = vec![0];
        let mut labels = Vec::new();
        let mut at = 0;
        for (label, &len) in blocks.iter().enumerate() {
            let end = at + len;
            // Cut points: multiples of the user's tile, or an even split.
            let step = match user {
                Some(t) => t.max(1),
                None => {
                    let t = default_tile.max(1);
                    len.div_ceil(len.div_ceil(t).max(1)).max(1)
                }
            };
            while at < end {
                let next = match user {
                    Some(_) => ((at / step) + 1) * step,
                    None => at + step,
                }
                .min(end);
                starts.push(next);
                labels.push(label as u8);
                at = next;
            }
        }
        TiledRange { starts, labels, coord_tile: user.unwrap_or(range.size.max(1)) }
    }

    /// The tiling of range `r` of `hir`: a union of ranges (`range P = O + V;`) is
    /// its parts' tilings one after the other, so that a slice `F[i,a]` of a
    /// tensor over `P` is a block of whole tiles of it, each cut like the tiles of
    /// the part's own tensors.
    pub fn of(hir: &Hir, r: RangeId, default_tile: usize) -> TiledRange {
        let range = &hir.ranges[r];
        if range.parts.is_empty() {
            return TiledRange::new(range, default_tile);
        }
        let mut union = TiledRange { starts: vec![0], labels: Vec::new(), coord_tile: range.size.max(1) };
        for &p in &range.parts {
            let part = TiledRange::of(hir, p, default_tile);
            let at = *union.starts.last().expect("starts begin with 0");
            union.starts.extend(part.starts[1..].iter().map(|s| at + s));
            union.labels.extend(&part.labels);
        }
        union
    }

    /// Tiles cut at `starts` (the first 0, the last the length), for tests.
    #[cfg(test)]
    pub(crate) fn from_starts(starts: Vec<usize>) -> TiledRange {
        let n = starts.len() - 1;
        TiledRange { coord_tile: starts[n].max(1), starts, labels: vec![0; n] }
    }

    /// Number of tiles.
    pub fn count(&self) -> usize {
        self.labels.len()
    }
    pub fn start(&self, k: usize) -> usize {
        self.starts[k]
    }
    pub fn extent(&self, k: usize) -> usize {
        self.starts[k + 1] - self.starts[k]
    }
    /// The sub-space label of tile `k` (0 without sub-spaces).
    pub fn label(&self, k: usize) -> u8 {
        self.labels[k]
    }
    /// The tile holding element `i`.
    pub fn tile_of(&self, i: usize) -> usize {
        self.starts.partition_point(|&s| s <= i) - 1
    }
    /// The coordinate of tile `k` in units of the user's tile size (`tiles[...]`).
    pub fn user_coord(&self, k: usize) -> usize {
        self.starts[k] / self.coord_tile
    }
}

/// Whether `kind` sub-spaces obey an additive rule (spin) or a product rule (irreps).
pub fn describe(kind: SubspaceKind) -> &'static str {
    match kind {
        SubspaceKind::Spin => "spin",
        SubspaceKind::Irrep => "irreps",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sema::hir::{SizeKind, Subspaces, Tiling};

    fn range(size: usize, tile: Option<usize>, sub: Option<Vec<usize>>) -> Range {
        Range {
            name: "V".into(),
            size,
            span: 0..0,
            model: None,
            size_kind: SizeKind::Fixed,
            tiling: Tiling { tile, subspaces: sub.map(|sizes| Subspaces { kind: SubspaceKind::Spin, sizes }) },
            parts: Vec::new(),
        }
    }

    #[test]
    fn default_tiles_split_evenly_and_respect_subspaces() {
        let t = TiledRange::new(&range(200, None, Some(vec![100, 100])), 40);
        // 100 = 34 + 34 + 32 per spin.
        assert_eq!(t.count(), 6);
        assert_eq!((0..6).map(|k| t.extent(k)).collect::<Vec<_>>(), vec![34, 34, 32, 34, 34, 32]);
        assert_eq!((0..6).map(|k| t.label(k)).collect::<Vec<_>>(), vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(t.tile_of(99), 2);
        assert_eq!(t.tile_of(100), 3);
        assert_eq!(t.tile_of(199), 5);
    }

    #[test]
    fn user_tiles_cut_at_multiples_and_at_subspace_boundaries() {
        let t = TiledRange::new(&range(10, Some(4), Some(vec![5, 5])), 40);
        // Cuts at 4, 5 (sub-space), 8.
        assert_eq!(t.starts, vec![0, 4, 5, 8, 10]);
        assert_eq!((0..4).map(|k| t.user_coord(k)).collect::<Vec<_>>(), vec![0, 1, 1, 2]);
        let plain = TiledRange::new(&range(7, None, None), 40);
        assert_eq!(plain.count(), 1);
        assert_eq!(plain.extent(0), 7);
    }
}
