//! A distributed tiled program held open by a caller (the C API of
//! `libtcc_dist`, which `tcc build --mpi` libraries call): compiled once on
//! every rank of the caller's communicator, its tiles laid out by
//! [`super::dist::Ownership`]; the caller fills the input tiles its rank owns,
//! runs, and reads the output tiles its rank owns. Nothing is gathered: no rank
//! ever holds a whole tensor.
//!
//! Complex and 16-bit programs run as `tcc run --tiled` runs them
//! ([`super::source`]): a complex tensor `X` is two real tensors of the session,
//! its parts `X_re` and `X_im` (the names `tcc opt --emit=hir` shows), and a
//! `bf16`/`f16` tensor holds values of its type: its input tiles are rounded to
//! the type when the program runs, its output tiles after.

use super::dist::RankTiles;
use super::exec::{Program, TiledOptions};
use crate::ids::TensorId;
use crate::ids::UnitId;
use crate::pipeline::PipelineOptions;
use crate::sema::hir::Role;
use crate::sema::hir::{ElemType, Hir};
use crate::tensor::DenseRef;
use std::collections::BTreeMap;
use tcc_runtime::comm::{Communicator, ReduceOp};

/// The communicator a session runs on: its own (a library's duplicate of the
/// caller's), or one lent by the caller (tests on in-process ranks).
pub enum SessionComm<'c> {
    Owned(Box<dyn Communicator>),
    Lent(&'c dyn Communicator),
}

impl SessionComm<'_> {
    fn get(&self) -> &dyn Communicator {
        match self {
            SessionComm::Owned(c) => c.as_ref(),
            SessionComm::Lent(c) => *c,
        }
    }
}

/// One rank's open program.
pub struct Session<'c> {
    /// Leaked at open and freed on drop, after `rank` (which borrows it).
    program: &'static Program,
    rank: Option<RankTiles<'static>>,
    comm: SessionComm<'c>,
    /// The unit's inputs then outputs, by name: the caller's tensor numbers.
    tensors: Vec<(String, TensorId, Role)>,
    /// Which tensors are parts of complex or 16-bit source tensors.
    view: super::source::SourceView,
}

/// This rank's run-time sizes for `unit`: the program with them bound, and the
/// sizes in the order of [`Hir::unit_runtime_ranges`], or why they are refused.
fn check_sizes(hir: &Hir, unit: UnitId, sizes: &[(String, i64)]) -> Result<(Hir, Vec<usize>), String> {
    let wanted = hir.unit_runtime_ranges(unit);
    let names: Vec<&str> = wanted.iter().map(|&r| hir.ranges[r].name.as_str()).collect();
    let program = &hir.units[unit].name;
    let mut given = BTreeMap::new();
    for (name, size) in sizes {
        if !names.contains(&name.as_str()) {
            let why = match hir.ranges.iter().find(|r| &r.name == name) {
                Some(r) if !r.is_runtime() => format!("range `{name}` has the fixed size {} in the source", r.size),
                Some(_) => format!("program `{program}` has no tensor over the run-time range `{name}`"),
                None => format!("the source has no range `{name}`"),
            };
            return Err(format!("a size was given for `{name}`: {why}"));
        }
        let n = usize::try_from(*size)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("the size of range `{name}` must be at least 1 (got {size})"))?;
        if given.insert(name.clone(), n).is_some() {
            return Err(format!("the size of range `{name}` was given twice"));
        }
    }
    let missing: Vec<&str> = names.iter().copied().filter(|n| !given.contains_key(*n)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "program `{program}` needs the size of the run-time range{} {} (its run-time ranges: {})",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            names.join(", ")
        ));
    }
    let bound = crate::sema::sizes::bind_all_sizes(hir, &given).map_err(|e| e.to_string())?;
    Ok((bound, names.iter().map(|n| given[*n]).collect()))
}

/// Every rank's [`check_sizes`] outcome made common (two all-reduces over the
/// sizes of `ranges`): the program when every rank accepted the same sizes;
/// else an error on every rank — its own refusal, that another rank refused,
/// or which range's sizes differ between ranks. A rank that went on alone would
/// plan other tiles than its peers and wait forever in their exchange.
fn agree_on_sizes(
    comm: &dyn Communicator,
    ranges: &[String],
    mine: Result<(Hir, Vec<usize>), String>,
) -> Result<Hir, String> {
    // [refused, sizes…]; the minimum travels as the maximum of the negation.
    let mut hi = vec![0.0; ranges.len() + 1];
    match &mine {
        Ok((_, v)) => v.iter().enumerate().for_each(|(k, &n)| hi[k + 1] = n as f64),
        Err(_) => hi[0] = 1.0,
    }
    let mut lo: Vec<f64> = hi.iter().map(|x| -x).collect();
    comm.allreduce(&mut hi, ReduceOp::Max);
    comm.allreduce(&mut lo, ReduceOp::Max);
    let (hir, _) = mine?;
    if hi[0] > 0.0 {
        return Err("another rank's sizes were refused (see its error); every rank must pass the same sizes".into());
    }
    for (k, name) in ranges.iter().enumerate() {
        let (max, min) = (hi[k + 1], -lo[k + 1]);
        if max != min {
            return Err(format!(
                "the ranks passed different sizes for range `{name}` ({min} on some, {max} on others): every rank must pass the same sizes"
            ));
        }
    }
    Ok(hir)
}

/// One stored tile of this rank: where it starts in the rank's buffer of its
/// tensor, and the index box it holds (row-major, last index fastest).
#[derive(Debug, Clone, PartialEq)]
pub struct LocalTile {
    pub offset: usize,
    pub start: Vec<usize>,
    pub extent: Vec<usize>,
}

impl<'c> Session<'c> {
    /// Compiles `source` and plans `program` (the file's only program when
    /// `None`; statements outside a `program` block form one named `main`, as
    /// for `tcc build`) for the ranks of `comm`, with `sizes` for the run-time
    /// ranges the program uses (by name; every one of them, and no other), or
    /// why the caller's sizes could not be read (refused collectively too).
    /// Every rank must call it alike: the ranks check that they agree on the
    /// sizes (see [`agree_on_sizes`]) and all fail when one is refused, so no
    /// rank is left waiting in a later collective. Errors are the compiler's
    /// messages.
    pub fn open(
        source: &str,
        program: Option<&str>,
        sizes: Result<&[(String, i64)], String>,
        comm: SessionComm<'c>,
        opts: TiledOptions,
    ) -> Result<Session<'c>, String> {
        let (hir, diags) = crate::compile(source, "main");
        let Some(hir) = hir else {
            return Err(crate::diag::render(&diags, "<source>", source, false));
        };
        let unit = match program {
            Some(name) => hir.unit_by_name(name).ok_or_else(|| {
                let names: Vec<&str> = hir.units.iter().map(|u| u.name.as_str()).collect();
                format!("no program `{name}` in the source (it has: {})", names.join(", "))
            })?,
            None => {
                let ids: Vec<_> = hir.units.ids().collect();
                match ids[..] {
                    [u] => u,
                    _ => return Err(format!("the source has {} programs: name one", ids.len())),
                }
            }
        };
        let ranges: Vec<String> = hir.unit_runtime_ranges(unit).iter().map(|&r| hir.ranges[r].name.clone()).collect();
        let hir = agree_on_sizes(comm.get(), &ranges, sizes.and_then(|s| check_sizes(&hir, unit, s)))?;
        // `prepare` lowers complex tensors to their parts and widens 16-bit ones.
        let view = super::source::SourceView::of(&hir);
        let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
        let ranks = super::autotile::Executor::Ranks(comm.get().size());
        let planned = super::autotile::plan(&prepared, unit, &opts, ranks)
            .and_then(|p| super::autotile::agree_on_tile(comm.get(), &prepared, unit, &opts, p))
            .map(|(p, _)| p)
            .map_err(|e| e.to_string())?;
        let program: &'static Program = Box::leak(Box::new(planned));
        let tensors = program
            .hir
            .unit_inputs(unit)
            .into_iter()
            .chain(program.hir.unit_outputs(unit))
            .map(|t| (program.hir.tensors[t].name.clone(), t, program.hir.tensors[t].role))
            .collect();
        let rank = match RankTiles::new(program, comm.get().rank(), comm.get().size(), &opts, None) {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: leaked just above; nothing borrows it.
                drop(unsafe { Box::from_raw(program as *const Program as *mut Program) });
                return Err(e.to_string());
            }
        };
        Ok(Session { program, rank: Some(rank), comm, tensors, view })
    }

    /// Words of this rank's arena of temporaries, and of its temporaries
    /// together (tests).
    #[cfg(test)]
    pub(crate) fn arena_words(&self) -> (usize, usize) {
        self.rank().arena_words()
    }

    fn rank(&self) -> &RankTiles<'static> {
        self.rank.as_ref().expect("open until dropped")
    }

    /// The flops the program executes on tiles (all ranks together), and the
    /// flops of the same steps computed dense.
    pub fn flops(&self) -> (f64, f64) {
        (self.program.planned_flops(), self.program.dense_flops)
    }

    /// This rank and the number of ranks.
    pub fn rank_and_size(&self) -> (usize, usize) {
        (self.comm.get().rank(), self.comm.get().size())
    }

    /// The caller's number of tensor `name` (an input or output of the program).
    pub fn tensor(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|(n, _, _)| n == name)
    }

    /// Tensor `t`'s name, whether it is an output, and its extents.
    pub fn describe(&self, t: usize) -> Option<(&str, bool, Vec<usize>)> {
        let (name, id, role) = self.tensors.get(t)?;
        let l = &self.program.layouts[id];
        Some((name, *role == Role::Output, l.dims.iter().map(|d| d.start(d.count())).collect()))
    }

    /// The source tensor that tensor `t` is a part of when `t` is a part of a
    /// complex one: `(source name, source element type, component)`, component
    /// 0 the real part, 1 the imaginary part.
    pub fn complex_part(&self, t: usize) -> Option<(&str, ElemType, usize)> {
        let (_, id, _) = self.tensors.get(t)?;
        self.view.part(*id).filter(|p| p.elem.is_complex()).map(|p| (p.name.as_str(), p.elem, p.component))
    }

    /// The tiles of tensor `t` this rank holds, in buffer order.
    pub fn tiles(&self, t: usize) -> Option<Vec<LocalTile>> {
        let (_, id, _) = self.tensors.get(t)?;
        let l = &self.program.layouts[id];
        let mut offset = 0;
        let mut out = Vec::new();
        for k in self.rank().slots(*id) {
            let c = &l.tiles()[k];
            let (start, extent) = l.tile_box(c);
            out.push(LocalTile { offset, start, extent });
            offset += l.tile_len(c);
        }
        Some(out)
    }

    /// This rank's buffer of tensor `t` (its tiles back to back).
    pub fn data_mut(&mut self, t: usize) -> Option<&mut [f64]> {
        let (_, id, _) = *self.tensors.get(t)?;
        self.rank.as_mut().expect("open until dropped").data_mut(id)
    }

    /// Fills this rank's tiles of tensor `t` from the whole tensor, dense and
    /// row-major (`dense.len()` must be the product of its extents). An array
    /// without the tensor's declared symmetry or nonzero outside its blocks is
    /// refused: the tiles would keep part of it and silently drop the rest.
    pub fn pack_dense(&mut self, t: usize, dense: &[f64]) -> Result<(), String> {
        let (shape, tiles) = self.dense_args(t, dense.len())?;
        let (name, id, _) = &self.tensors[t];
        if let Some(why) = structure_violation(&self.program.hir, *id, DenseRef { shape: &shape, data: dense }) {
            return Err(format!("`{name}` cannot be stored in its tiles: {why}"));
        }
        let buf = self.data_mut(t).unwrap_or_default();
        for tile in &tiles {
            let mut k = tile.offset;
            for_each_box(&tile.start, &tile.extent, |idx| {
                buf[k] = dense[linear(&shape, idx)];
                k += 1;
            });
        }
        Ok(())
    }

    /// Writes this rank's tiles of tensor `t` into the whole tensor, dense and
    /// row-major, with every image of each element under the tensor's symmetry
    /// (sign applied); elements that no tile of this rank reaches are left alone.
    pub fn unpack_dense(&mut self, t: usize, dense: &mut [f64]) -> Result<(), String> {
        let (shape, tiles) = self.dense_args(t, dense.len())?;
        let (_, id, _) = self.tensors[t];
        let group = crate::symmetry::PermGroup::of(&self.program.hir.tensors[id]);
        let buf = self.data_mut(t).unwrap_or_default();
        for tile in &tiles {
            let mut k = tile.offset;
            for_each_box(&tile.start, &tile.extent, |idx| {
                let v = buf[k];
                let (_, s1) = group.canonical(idx);
                for (perm, _) in group.elements() {
                    let img = crate::symmetry::PermGroup::apply(perm, idx);
                    let (_, s2) = group.canonical(&img);
                    dense[linear(&shape, &img)] = f64::from(s1 * s2) * v;
                }
                k += 1;
            });
        }
        Ok(())
    }

    /// Checks this rank's buffer of tensor `t` as written by a caller: a tile on
    /// the diagonal of a symmetry group holds elements that are images of each
    /// other, and they must agree (sign applied; zero where the symmetry forces
    /// it), or the program would read values no dense tensor has.
    pub fn check_packed(&mut self, t: usize) -> Result<(), String> {
        let (name, id, _) = self.tensors.get(t).ok_or_else(|| format!("tensor number {t} is out of range"))?;
        let (name, id) = (name.clone(), *id);
        let group = crate::symmetry::PermGroup::of(&self.program.hir.tensors[id]);
        if group.elements().len() <= 1 {
            return Ok(());
        }
        let tiles = self.tiles(t).unwrap_or_default();
        let buf = self.data_mut(t).unwrap_or_default();
        let tol = 1e-12 * buf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let mut bad = None;
        let perms: Vec<&[usize]> = group.elements().iter().map(|(p, _)| p.as_slice()).collect();
        for tile in &tiles {
            // Only a tile that some permutation maps onto itself holds images of
            // its own elements (tilings of symmetric dimensions are alike).
            let apply = crate::symmetry::PermGroup::apply;
            let on_diagonal = perms.iter().any(|p| {
                p.iter().enumerate().any(|(k, &x)| k != x)
                    && apply(p, &tile.start) == tile.start
                    && apply(p, &tile.extent) == tile.extent
            });
            if !on_diagonal {
                continue;
            }
            let mut k = tile.offset;
            for_each_box(&tile.start, &tile.extent, |idx| {
                let v = buf[k];
                k += 1;
                if bad.is_some() {
                    return;
                }
                let (rep, sign) = group.canonical(idx);
                let inside = rep.iter().zip(&tile.start).zip(&tile.extent).all(|((&x, &s), &e)| x >= s && x < s + e);
                let want = if sign == 0 {
                    0.0
                } else if rep.as_slice() != idx && inside {
                    let local: Vec<usize> = rep.iter().zip(&tile.start).map(|(x, s)| x - s).collect();
                    f64::from(sign) * buf[tile.offset + linear(&tile.extent, &local)]
                } else {
                    return;
                };
                #[allow(clippy::neg_cmp_op_on_partial_ord)]
                if !((v - want).abs() <= tol) {
                    bad = Some(format!(
                        "packed `{name}`: element {idx:?} = {v:e} but its symmetry makes it {want:e} (a tile on the \
                         diagonal holds both; write both images, or fill it with pack)"
                    ));
                }
            });
        }
        bad.map_or(Ok(()), Err)
    }

    /// The extents and local tiles of tensor `t`, after checking that a dense
    /// array of `len` elements is the whole tensor.
    fn dense_args(&self, t: usize, len: usize) -> Result<(Vec<usize>, Vec<LocalTile>), String> {
        let (name, _, shape) = self.describe(t).ok_or_else(|| format!("tensor number {t} is out of range"))?;
        let want: usize = shape.iter().product();
        if len != want {
            return Err(format!("`{name}` has {want} elements ({shape:?}); the dense array has {len}"));
        }
        Ok((shape, self.tiles(t).unwrap_or_default()))
    }

    /// Fills this rank's tiles of input `t` from a `.npy` file holding the whole
    /// tensor, reading only their boxes (collective: every rank calls it with
    /// the file, which all can read). A file without the declared structure, of
    /// another shape, or unreadable fails on every rank
    /// ([`RankTiles::fill_from_files`]).
    pub fn read_npy(&mut self, t: usize, path: &std::path::Path) -> Result<(), String> {
        let mine = match self.tensors.get(t) {
            None => Err(format!("tensor number {t} is out of range")),
            Some((name, _, Role::Output)) => Err(format!("`{name}` is an output: only inputs are read from files")),
            Some((_, id, _)) => {
                let files = std::collections::HashMap::from([(*id, path.to_path_buf())]);
                let rank = self.rank.as_mut().expect("open until dropped");
                // A part reads its component of a complex file; a 16-bit tensor
                // only a file of its type.
                rank.fill_from_files(&files, &self.view).map_err(|e| e.to_string())
            }
        };
        let mut flag = [if mine.is_err() { 1.0 } else { 0.0 }];
        self.comm.get().allreduce(&mut flag, tcc_runtime::comm::ReduceOp::Max);
        mine?;
        if flag[0] > 0.0 {
            return Err("another rank could not read its tiles from the file (see its error)".to_string());
        }
        Ok(())
    }

    /// Runs the program on the filled input tiles (collective). Inputs whose
    /// diagonal tiles break their symmetry are refused first (see
    /// [`Session::check_packed`]); 16-bit inputs are rounded to their type first
    /// and 16-bit outputs after, however their tiles were written.
    pub fn run(&mut self) -> Result<(), String> {
        let mut refused = None;
        for t in 0..self.tensors.len() {
            if self.tensors[t].2 != Role::Output && refused.is_none() {
                refused = self.check_packed(t).err();
            }
        }
        // Every rank learns whether any refused, so none is left waiting in the
        // run's exchanges for one that returned.
        let mut flag = [if refused.is_some() { 1.0 } else { 0.0 }];
        self.comm.get().allreduce(&mut flag, tcc_runtime::comm::ReduceOp::Max);
        if let Some(e) = refused {
            return Err(e);
        }
        if flag[0] > 0.0 {
            return Err("another rank refused its input tiles (see its error)".to_string());
        }
        self.round_half(false);
        let rank = self.rank.as_mut().expect("open until dropped");
        rank.run(self.comm.get()).map_err(|e| e.to_string())?;
        self.round_half(true);
        Ok(())
    }

    /// Rounds this rank's tiles of the 16-bit outputs (or inputs) to their type:
    /// the values a tensor of that type holds (rounding is idempotent, so a
    /// second run rounds nothing twice).
    fn round_half(&mut self, outputs: bool) {
        for t in 0..self.tensors.len() {
            let (_, id, role) = self.tensors[t];
            let Some(elem) = self.view.part(id).map(|p| p.elem).filter(|e| e.is_half()) else { continue };
            if (role == Role::Output) == outputs {
                for v in self.data_mut(t).unwrap_or_default() {
                    *v = crate::interp::round_to(elem, *v);
                }
            }
        }
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.rank = None;
        // SAFETY: leaked in `open`; `rank`, its only borrower, is gone.
        drop(unsafe { Box::from_raw(self.program as *const Program as *mut Program) });
    }
}

/// Where a dense value `x` of tensor `t` breaks the structure its tiled storage
/// relies on: its declared symmetries (to 1e-12 of its largest magnitude) or its
/// block rules (exactly: elements outside the blocks must be 0).
pub fn structure_violation(hir: &crate::sema::hir::Hir, t: TensorId, x: DenseRef<'_>) -> Option<String> {
    crate::interp::tensor_symmetry_violation(x, &hir.tensors[t], 1e-12)
        .or_else(|| crate::interp::block_violation(hir, t, x))
}

/// Row-major position of `idx` in a tensor of `shape`.
fn linear(shape: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&x, &n)| acc * n + x)
}

/// Calls `f` with every index of the box `start + [0, extent)`, last fastest.
pub fn for_each_box(start: &[usize], extent: &[usize], mut f: impl FnMut(&[usize])) {
    let mut idx = start.to_vec();
    super::tensor::for_each_local(extent, |l| {
        for (d, x) in idx.iter_mut().enumerate() {
            *x = start[d] + l[d];
        }
        f(&idx);
    });
}
