//! A distributed run's outputs without making them whole.
//!
//! No rank of a distributed run holds a whole tensor (issue 17), its outputs
//! included: each rank summarizes the dense images of the stored tiles it owns
//! (the report's norm2, sum and checksum are combined from every rank's
//! compensated sums), checks the declared symmetry inside the tiles that are
//! their own images (the only place a tiled output can break it: every other
//! image is read from its canonical tile), and writes its part of each
//! `--output-dir` file in place ([`crate::npy::BoxWriter`]). All three are
//! collective: every rank calls them in the same order.

use super::layout::Layout;
use super::tensor::for_each_local;
use crate::interp::round_to;
use crate::npy::BoxWriter;
use crate::run::{Summary, SummaryParts};
use crate::sema::hir::ElemType;
use crate::symmetry::PermGroup;
use tcc_runtime::comm::{Communicator, ReduceOp};

/// This rank's stored tile `slot` of one tensor (`None` when another rank owns it).
pub(crate) type OwnedTile<'a> = dyn Fn(usize) -> Option<&'a [f64]> + 'a;

/// Row-major strides of a dense array of `shape`.
fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Every tile of the dense grid whose values come from a stored tile this rank
/// owns, as `(first element, extent, values in row-major order)`.
fn for_each_owned_box(layout: &Layout, tile: &OwnedTile<'_>, mut f: impl FnMut(&[usize], &[usize], &[f64])) {
    let counts: Vec<usize> = layout.dims.iter().map(|d| d.count()).collect();
    let mut values = Vec::new();
    for_each_local(&counts, |grid| {
        let c: Vec<u32> = grid.iter().map(|&k| k as u32).collect();
        let Some(v) = layout.view(&c) else { return };
        let Some(data) = tile(v.slot) else { return };
        let (start, ext) = layout.tile_box(&c);
        values.clear();
        for_each_local(&ext, |l| {
            let at: isize = l.iter().zip(&v.strides).map(|(&x, &s)| x as isize * s).sum();
            values.push(v.sign * data[at as usize]);
        });
        f(&start, &ext, &values);
    });
}

/// The summary `tcc run` prints of the tensor laid out by `layout` (values as
/// `elem` stores them), from every rank's owned tiles, the same on every rank;
/// with `path`, also the tensor written there as a dense `.npy` file of `elem`,
/// every rank its owned tiles' images (one pass over them for both). `Err` on
/// every rank when any rank could not write (the failing rank's message names the
/// cause). Collective.
///
/// A complex `elem` is written by its two parts' tensors, `component` 0 (the real
/// part: it makes the file) and then 1, each one component of every element.
pub(crate) fn summarize_and_write(
    path: Option<&std::path::Path>,
    layout: &Layout,
    elem: ElemType,
    component: usize,
    tile: &OwnedTile<'_>,
    comm: &dyn Communicator,
) -> Result<Summary, String> {
    let shape: Vec<usize> = layout.dims.iter().map(|d| d.start(d.count())).collect();
    let stride = dense_strides(&shape);
    let all_ok = |mine: Result<(), String>| -> Result<(), String> {
        let mut failed = [if mine.is_err() { 1.0 } else { 0.0 }];
        comm.allreduce(&mut failed, ReduceOp::Max);
        match (mine, path) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(path)) if failed[0] > 0.0 => {
                Err(format!("another rank could not write `{}`", path.display()))
            }
            (Ok(()), _) => Ok(()),
        }
    };
    // Rank 0 makes the file (header, full length) before anyone writes to it.
    let writer = match path {
        None => None,
        Some(path) => {
            let made = if comm.rank() == 0 && component == 0 {
                BoxWriter::create(path, &shape, elem).map(drop).map_err(|e| e.0)
            } else {
                Ok(())
            };
            all_ok(made)?;
            Some(BoxWriter::open(path, &shape, elem, component).map_err(|e| e.0))
        }
    };
    let mut written = match &writer {
        Some(Err(e)) => Err(e.clone()),
        _ => Ok(()),
    };
    let mut parts = SummaryParts::default();
    for_each_owned_box(layout, tile, |start, ext, values| {
        let base: usize = start.iter().zip(&stride).map(|(s, t)| s * t).sum();
        let mut i = 0;
        for_each_local(ext, |l| {
            let k = base + l.iter().zip(&stride).map(|(x, t)| x * t).sum::<usize>();
            parts.add(k, round_to(elem, values[i]));
            i += 1;
        });
        let Some(Ok(w)) = &writer else { return };
        if written.is_err() {
            return;
        }
        let Some(&run) = ext.last() else {
            // A scalar: one element.
            written = w.write_run(0, values).map_err(|e| e.0);
            return;
        };
        let mut i = 0;
        for_each_local(&ext[..ext.len() - 1], |r| {
            let at = base + r.iter().zip(&stride).map(|(x, t)| x * t).sum::<usize>();
            if written.is_ok() {
                written = w.write_run(at, &values[i..i + run]).map_err(|e| e.0);
            }
            i += run;
        });
    });
    if path.is_some() {
        all_ok(written)?;
    }
    let mut all = vec![0.0; 6 * comm.size()];
    comm.allgather(&parts.to_array(), &mut all);
    let parts: Vec<[f64; 6]> = all.chunks(6).map(|c| c.try_into().expect("chunks of 6")).collect();
    Ok(SummaryParts::combine(&parts))
}

/// The declared symmetry checked inside the stored tiles that the group maps
/// onto themselves (diagonal tiles such as `(k, k)` of a symmetric pair), with
/// the tolerance of the dense check (`rtol` times the tensor's largest
/// magnitude; a NaN fails): a description of the worst violation, the same on
/// every rank, or `None`.
pub(crate) fn symmetry_violation(
    layout: &Layout,
    tile: &OwnedTile<'_>,
    rtol: f64,
    comm: &dyn Communicator,
) -> Option<String> {
    let n = layout.dims.len();
    let group = layout.group();
    // This rank's largest magnitude, worst difference, the two values and the two
    // positions (dense indices).
    let mut row = vec![0.0; 4 + 2 * n];
    for (slot, c) in layout.tiles().iter().enumerate() {
        let Some(data) = tile(slot) else { continue };
        row[0] = data.iter().fold(row[0], |m: f64, v| m.max(v.abs()));
        let coords: Vec<usize> = c.iter().map(|&k| k as usize).collect();
        let (start, ext) = layout.tile_box(c);
        let local = dense_strides(&ext);
        for (perm, sign) in &group.elements()[1..] {
            if PermGroup::apply(perm, &coords) != coords {
                continue;
            }
            for_each_local(&ext, |l| {
                let image = PermGroup::apply(perm, l);
                let at = |x: &[usize]| x.iter().zip(&local).map(|(a, b)| a * b).sum::<usize>();
                let (a, b) = (data[at(l)], data[at(&image)]);
                let diff = (b - *sign as f64 * a).abs();
                let diff = if diff.is_nan() { f64::INFINITY } else { diff };
                if diff > row[1] {
                    row[1] = diff;
                    row[2] = a;
                    row[3] = b;
                    for d in 0..n {
                        row[4 + d] = (start[d] + l[d]) as f64;
                        row[4 + n + d] = (start[d] + image[d]) as f64;
                    }
                }
            });
        }
    }
    let mut all = vec![0.0; row.len() * comm.size()];
    comm.allgather(&row, &mut all);
    let rows: Vec<&[f64]> = all.chunks(row.len()).collect();
    let max_abs = rows.iter().fold(0.0f64, |m, r| m.max(r[0]));
    let worst = rows.iter().copied().max_by(|a, b| a[1].total_cmp(&b[1]))?;
    if worst[1] <= rtol * max_abs {
        return None;
    }
    let idx = |from: usize| -> Vec<usize> { worst[from..from + n].iter().map(|&x| x as usize).collect() };
    Some(format!(
        "element {:?} = {:e} but its image under the declared symmetry {:?} = {:e} (in a tile that is its own image)",
        idx(4),
        worst[2],
        idx(4 + n),
        worst[3]
    ))
}
