//! A gather's written tile (`T[n,c,y,x,r,s] = I[n,c,y+r,x+s]`) cut into boxes
//! that each read one tile of the input at a fixed stride per dimension, so
//! that the device path copies it with plain strided moves ([`super::device`]).
//!
//! Within one input tile, the element a point reads is affine in the point:
//! `Σ_d stride_d · (Σ a·(start_p + l_p) + const − tile_start_d)`. Only where a
//! subscript crosses from one input tile into the next does that break, so per
//! subscript one position (its *interval* position, read by no other
//! subscript) is cut into the intervals that stay in one input tile, and the
//! subscript's other positions are taken one value at a time. Positions no
//! subscript reads span the whole tile. Every point of the tile is in exactly
//! one box.

use super::space::TiledRange;
use std::sync::Arc;

/// Per input dimension, the subscript as (coefficient, position) terms and a
/// constant (coefficients are positive: E0313 refuses the others).
pub type Affine = [(Vec<(i64, usize)>, i64)];

/// A box of the written tile whose points all read tile `coord` of the input.
#[derive(Debug, Clone, PartialEq)]
pub struct GatherBox {
    /// Per position of the written tile: the box's first point and its extent.
    pub lo: Vec<usize>,
    pub ext: Vec<usize>,
    /// The input tile read and, per input dimension, the element of it that the
    /// box's first point reads (relative to the tile's start).
    pub coord: Vec<u32>,
    pub local: Vec<usize>,
}

/// Calls `f` with every box of the written tile whose positions start at
/// `start` (elements) and span `ext`, reading an input whose dimensions are
/// tiled as `dims`.
pub fn boxes(affine: &Affine, start: &[usize], ext: &[usize], dims: &[Arc<TiledRange>], f: &mut dyn FnMut(&GatherBox)) {
    let n = ext.len();
    if ext.contains(&0) {
        return;
    }
    let mut uses = vec![0usize; n];
    for (terms, _) in affine {
        for &(_, p) in terms {
            uses[p] += 1;
        }
    }
    // Per subscript, its interval position: the longest one no other subscript reads.
    let interval: Vec<Option<(i64, usize)>> = affine
        .iter()
        .map(|(terms, _)| terms.iter().copied().filter(|&(_, p)| uses[p] == 1).max_by_key(|&(_, p)| (ext[p], n - p)))
        .collect();
    let is_interval = |p: usize| interval.iter().flatten().any(|&(_, q)| q == p);
    let stepped: Vec<usize> = (0..n).filter(|&p| uses[p] > 0 && !is_interval(p)).collect();
    let stepped_ext: Vec<usize> = stepped.iter().map(|&p| ext[p]).collect();
    let mut l = vec![0usize; n];
    // Per subscript: (first and end point of the interval position, input tile, local element).
    let mut pieces: Vec<Vec<(usize, usize, usize, usize)>> = vec![Vec::new(); affine.len()];
    super::tensor::for_each_local(&stepped_ext, |v| {
        for (&p, &x) in stepped.iter().zip(v) {
            l[p] = x;
        }
        for (d, ((terms, constant), iv)) in affine.iter().zip(&interval).enumerate() {
            let rest = terms
                .iter()
                .filter(|&&(_, p)| iv.is_none_or(|(_, q)| q != p))
                .fold(*constant, |acc, &(a, p)| acc + a * (start[p] + l[p]) as i64);
            let dim = &dims[d];
            let piece = &mut pieces[d];
            piece.clear();
            match *iv {
                None => {
                    let s = rest as usize;
                    let k = dim.tile_of(s);
                    piece.push((0, 1, k, s - dim.start(k)));
                }
                Some((a, p)) => {
                    let mut x = 0;
                    while x < ext[p] {
                        let s = (rest + a * (start[p] + x) as i64) as usize;
                        let k = dim.tile_of(s);
                        // The points after x whose element stays before the tile's end.
                        let end = (dim.start(k) + dim.extent(k)) as i64;
                        let past = ((end - rest + a - 1) / a) as usize - start[p];
                        let next = past.min(ext[p]);
                        assert!(next > x, "a gather's interval stopped at {x}");
                        piece.push((x, next, k, s - dim.start(k)));
                        x = next;
                    }
                }
            }
        }
        let counts: Vec<usize> = pieces.iter().map(Vec::len).collect();
        super::tensor::for_each_local(&counts, |pick| {
            let mut b = GatherBox {
                lo: (0..n).map(|p| if uses[p] == 0 { 0 } else { l[p] }).collect(),
                ext: (0..n).map(|p| if uses[p] == 0 { ext[p] } else { 1 }).collect(),
                coord: Vec::with_capacity(affine.len()),
                local: Vec::with_capacity(affine.len()),
            };
            for ((piece, &i), iv) in pieces.iter().zip(pick).zip(&interval) {
                let (x0, x1, k, local) = piece[i];
                if let Some((_, p)) = *iv {
                    b.lo[p] = x0;
                    b.ext[p] = x1 - x0;
                }
                b.coord.push(k as u32);
                b.local.push(local);
            }
            f(&b);
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiled::space::TiledRange;

    /// `len` elements cut every `tile`, the first tile one shorter (uneven cuts).
    fn range(len: usize, tile: usize) -> Arc<TiledRange> {
        let mut starts = vec![0];
        let mut at = tile.saturating_sub(1).max(1);
        while at < len {
            starts.push(at);
            at += tile;
        }
        starts.push(len);
        Arc::new(TiledRange::from_starts(starts))
    }

    /// Every point of the tile is in one box, and reads there the element its
    /// subscripts give; the boxes of a window tile are few.
    #[test]
    fn boxes_cover_the_tile_once_and_read_what_the_subscripts_give() {
        // (subscripts, written positions' (start, extent), input lengths), input tile 3 or 4.
        type Case = (Vec<(Vec<(i64, usize)>, i64)>, Vec<(usize, usize)>, Vec<usize>);
        let cases: Vec<Case> = vec![
            // I[y+r] at y in 2..7, r in 0..3
            (vec![(vec![(1, 0), (1, 1)], 0)], vec![(2, 5), (0, 3)], vec![9]),
            // I[2y+r+1, x+s], and a position no subscript reads
            (
                vec![(vec![(2, 0), (1, 1)], 1), (vec![(1, 2), (1, 3)], 0)],
                vec![(0, 4), (0, 3), (1, 5), (0, 2), (0, 3)],
                vec![12, 8],
            ),
            // I[i+j, i+k]: i in both subscripts, stepped
            (vec![(vec![(1, 0), (1, 1)], 0), (vec![(1, 0), (1, 2)], 2)], vec![(0, 3), (3, 4), (0, 4)], vec![9, 9]),
            // X[t-1]
            (vec![(vec![(1, 0)], -1)], vec![(1, 7)], vec![8]),
            // I[5]: a constant subscript
            (vec![(Vec::new(), 5)], vec![(0, 4)], vec![8]),
        ];
        for tile in [1, 3, 4] {
            for (affine, pos, lens) in &cases {
                let start: Vec<usize> = pos.iter().map(|x| x.0).collect();
                let ext: Vec<usize> = pos.iter().map(|x| x.1).collect();
                let dims: Vec<_> = lens.iter().map(|&n| range(n, tile)).collect();
                let mut hits = vec![0usize; ext.iter().product()];
                let mut count = 0;
                boxes(affine, &start, &ext, &dims, &mut |b| {
                    count += 1;
                    crate::tiled::tensor::for_each_local(&b.ext, |o| {
                        let l: Vec<usize> = b.lo.iter().zip(o).map(|(a, b)| a + b).collect();
                        let at = l.iter().zip(&ext).fold(0, |acc, (&x, &e)| acc * e + x);
                        hits[at] += 1;
                        for (d, (terms, c)) in affine.iter().enumerate() {
                            let want = terms.iter().fold(*c, |acc, &(a, p)| acc + a * (start[p] + l[p]) as i64);
                            // Within the box, the element moves by a per position.
                            let moved: i64 = terms.iter().map(|&(a, p)| a * o[p] as i64).sum();
                            let got = dims[d].start(b.coord[d] as usize) as i64 + b.local[d] as i64 + moved;
                            assert_eq!(got, want, "tile {tile}, {affine:?}, point {l:?}, dimension {d}");
                            assert!(
                                (got as usize)
                                    < dims[d].start(b.coord[d] as usize) + dims[d].extent(b.coord[d] as usize)
                            );
                        }
                    });
                });
                assert!(hits.iter().all(|&h| h == 1), "tile {tile}, {affine:?}: {hits:?}");
                if tile == 4 && affine.len() == 1 && affine[0].0.len() == 2 && affine[0].1 == 0 {
                    // I[y+r]: per r, y+r spans 5 elements, in at most 3 tiles of 4.
                    assert!(count <= 3 * 3, "{count} boxes");
                }
            }
        }
    }
}
