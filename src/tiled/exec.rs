//! Tiled execution of one unit: every statement of the prepared program (binary
//! contractions after operation minimization) becomes a DLTC task set with one task
//! per stored output tile; a task zeroes its tile (for `=`) and adds every
//! contribution — a tuple of nonzero operand tiles — with one call of the runtime's
//! GETT and the compiled tile kernel, reading symmetric operand tiles through
//! permuted strides and signs. Statements that do not depend on each other form one
//! task set and run concurrently; workers claim tasks dynamically (largest first)
//! or statically.
//!
//! Symmetry saves work three ways: only canonical output tiles are computed; a
//! summed group that is a symmetry group of both operands (same kind) runs over
//! ordered tile tuples only, weighted by the number of their distinct orderings;
//! and tiles that are zero by a block rule, or that nothing reaches, are neither
//! stored nor visited. [`Program::plan`] finds the stored tiles of every temporary
//! and output and counts the flops the tasks will execute before anything runs.

use super::device::{MoveOp, Operand, TileOp};
use super::layout::{Coord, Layout, TileView};
use super::model::TimeModel;
use super::profile::KernelProfile;
use super::space::TiledRange;
use super::tensor::TiledTensor;
use super::SyncPtr;
use crate::error::CommandError;
use crate::ids::{IndexId, RangeId, TensorId, UnitId};
use crate::sema::hir::{CmpOp, Extremum, Factor, Func, Hir, Role, SymKind, TensorRef};
use crate::tir::materialize::{simple_call_arg, special_stmt, Special};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tcc_runtime::kernels::GettDim;
use tcc_runtime::task::{Schedule, ThreadPool};

/// Tile grids larger than this are refused (a larger tile size is the remedy).
const MAX_GRID_TILES: f64 = 2e7;

/// Settings of a tiled run.
#[derive(Debug, Clone)]
pub struct TiledOptions {
    /// Tile size for ranges that do not declare one.
    pub tile: usize,
    /// Choose `tile` by the time model instead ([`super::autotile`]; `tcc run
    /// --tiled` and libraries without `--tile` / `TCC_TILE`).
    pub auto_tile: bool,
    pub threads: usize,
    pub schedule: Schedule,
    /// Distributed runs: the flops one word moved between ranks is worth when
    /// work is placed ([`super::placement`]; `TCC_FLOPS_PER_WORD`).
    pub flops_per_word: f64,
    /// What `--stats` predicts the run's time with ([`super::model`]).
    pub model: super::model::TimeModel,
    /// Distributed runs: how tiles move between ranks (`--exchange`).
    pub exchange: ExchangeMode,
    /// Time every kernel call against the model ([`KernelProfile`]; `--stats`):
    /// two clock reads per call.
    pub profile: bool,
    /// Distributed one-sided sets: whether ranks take over each other's
    /// unstarted work ([`super::steal`]; `TCC_STEAL`).
    pub steal: super::steal::Steal,
    /// Distributed runs: whether the work items near the end of each rank's list
    /// are split into parts ([`super::placement::split_tails`]; `TCC_SPLIT`).
    pub split: super::placement::Split,
    /// Distributed one-sided sets: read remote tiles in place where the back end
    /// can (in-process ranks; MPI ranks of one node, whose tiles are then shared
    /// memory) instead of copying them (`TCC_READ_IN_PLACE`).
    pub read_in_place: bool,
}

/// `TCC_READ_IN_PLACE` when set: `on` or `off`, else `Err` with the value.
pub fn read_in_place_from_env() -> Result<Option<bool>, String> {
    match std::env::var("TCC_READ_IN_PLACE") {
        Err(_) => Ok(None),
        Ok(v) => match v.as_str() {
            "on" => Ok(Some(true)),
            "off" => Ok(Some(false)),
            _ => Err(v),
        },
    }
}

/// How a distributed tiled run moves operand and partial tiles between ranks
/// (`tcc run --tiled --exchange`). Both move the same words; they differ in who
/// copies them and when work can start ([`super::dist`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExchangeMode {
    /// Per task set, whichever the time model predicts faster.
    #[default]
    Auto,
    /// Bulk-synchronous all-to-all rounds: each owner packs what the others
    /// need, work that reads remote tiles starts after the whole exchange.
    Collective,
    /// One-sided gets from windows over the owners' tiles: each rank reads the
    /// remote tiles its pieces need, in the order the pieces run, and runs each
    /// piece once its tiles have arrived; owners read their partial tiles the
    /// same way. Collective on a back end without windows.
    OneSided,
}

impl ExchangeMode {
    /// `TCC_EXCHANGE` when set (`auto`, `collective`, `one-sided`; how `tcc build
    /// --mpi` libraries are told): `Err` naming a value that is none of them.
    pub fn from_env() -> Result<Option<ExchangeMode>, String> {
        match std::env::var_os("TCC_EXCHANGE") {
            None => Ok(None),
            Some(v) => match v.to_str().map(str::trim) {
                Some("auto") => Ok(Some(ExchangeMode::Auto)),
                Some("collective") => Ok(Some(ExchangeMode::Collective)),
                Some("one-sided") => Ok(Some(ExchangeMode::OneSided)),
                _ => Err(format!("TCC_EXCHANGE={} is not one of auto, collective, one-sided", v.to_string_lossy())),
            },
        }
    }
}

impl Default for TiledOptions {
    fn default() -> Self {
        TiledOptions {
            tile: super::space::DEFAULT_TILE,
            auto_tile: false,
            threads: tcc_runtime::kernels::num_threads(),
            schedule: Schedule::Dynamic,
            flops_per_word: super::placement::FLOPS_PER_WORD,
            model: super::model::TimeModel::builtin(),
            exchange: ExchangeMode::Auto,
            profile: false,
            steal: super::steal::Steal::On,
            split: super::placement::Split::default(),
            // `tcc run` reads TCC_READ_IN_PLACE (main.rs); MPI libraries get plain
            // window memory under `off` from the runtime, so nothing is read in place.
            read_in_place: true,
        }
    }
}

fn fail(message: impl Into<String>, hint: &str) -> CommandError {
    CommandError::new("E0760", message, Some(hint.to_string()))
}

/// One term of a statement: `coef · Π factors`, over `indices` (the written
/// tensor's first, then the summed ones).
#[derive(Debug, Clone)]
struct TermPlan {
    coef: f64,
    indices: Vec<IndexId>,
    /// Number of leading `indices` that are the written tensor's.
    n_lhs: usize,
    /// Per factor: its tensor and the position in `indices` of each dimension.
    factors: Vec<(TensorId, Vec<usize>)>,
    /// Per factor and dimension: the tile where the index's range starts in the
    /// dimension's (nonzero for a slice `F[i,a]` of `F[p,q]`, `P = O + V`).
    tile_offsets: Vec<Vec<u32>>,
    /// Per factor: the element-wise function applied to it (`recip(D[a,b,i,j])`),
    /// if any. Such a factor is read through a copy of its tile with the function
    /// applied ([`Program::run_task`]).
    funcs: Vec<Option<Func>>,
    /// Groups of summed positions run over ordered tile tuples only.
    ordered: Vec<Vec<usize>>,
    /// What the term computes of its factors.
    op: TermOp,
    /// Of a gather (`T[…] = I[n,c,y+r,x+s]`): per dimension of its one factor, the
    /// subscript as (coefficient, position in `indices`) terms and a constant.
    affine: Vec<(Vec<(i64, usize)>, i64)>,
}

/// What a term computes: a product summed over its summed indices, or one of the
/// statements [`crate::tir::materialize`] leaves whole (`T = max(A)`, `T =
/// where(a > b, x, y)`), which a task computes element by element over its tile.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TermOp {
    Product,
    /// `T[free] = max(A[…])` / `min`: the summed positions are reduced instead. The
    /// tile starts at the reduction's identity, so the task is never split.
    Extremum(Extremum),
    /// `T[free] = where(a cmp b, x, y)` over four factors, assigned element by element.
    Select(CmpOp),
    /// `T[…] = I[n,c,y+r,x+s]` (im2col): each element of the tile read from the
    /// tile of `I` its subscripts fall in ([`TermPlan::affine`]).
    Gather,
}

#[derive(Debug, Clone)]
struct StmtPlan {
    lhs: TensorId,
    accumulate: bool,
    terms: Vec<TermPlan>,
    /// The tiles of `lhs` some term reaches, with the flops of each.
    tile_flops: Vec<(Coord, f64)>,
    /// The block of `lhs`'s tile grid the statement writes: per dimension, the
    /// first tile and the number of tiles (the whole grid unless it writes a slice
    /// `F[i,a] = …` of `F[p,q]`).
    block: Vec<(u32, u32)>,
}

impl StmtPlan {
    /// Whether tile `c` of the written tensor is in the block the statement writes.
    fn writes(&self, c: &[u32]) -> bool {
        c.iter().zip(&self.block).all(|(&k, &(first, count))| k >= first && k < first + count)
    }
}

/// What a tiled run did and stored.
#[derive(Debug, Clone, Default)]
pub struct TiledStats {
    /// Flops the tasks execute (2 per multiply-add of every GETT call, 1 per add of
    /// element-wise terms), predicted by the plan and counted by the run.
    pub planned_flops: f64,
    pub executed_flops: f64,
    /// The dense program's flops under the same count.
    pub dense_flops: f64,
    pub gett_calls: u64,
    pub tasks: usize,
    /// (tensor, stored elements, dense elements) for every tensor.
    pub storage: Vec<(String, f64, f64)>,
    pub run_s: f64,
    /// Seconds each worker spent in tasks.
    pub busy_s: Vec<f64>,
    pub task_sets: usize,
    /// Kernel calls by shape against the model (with [`TiledOptions::profile`]).
    pub profile: KernelProfile,
}

/// What [`Program::for_contributions`] calls per contribution: the term, the weight
/// of an ordered summed tuple, the operand tiles, the tile extent of every index.
type ContributionFn<'a> = dyn FnMut(&TermPlan, f64, &[TileView], &[usize]) + 'a;

/// A unit planned for tiled execution.
#[derive(Debug, Clone)]
pub struct Program {
    pub hir: Hir,
    pub unit: UnitId,
    tilings: HashMap<RangeId, Arc<TiledRange>>,
    pub layouts: HashMap<TensorId, Layout>,
    stmts: Vec<StmtPlan>,
    levels: Vec<Vec<usize>>,
    pub dense_flops: f64,
}

impl Program {
    /// Plans unit `unit` of `prepared` (the output of `pipeline::prepare`).
    pub fn plan(prepared: &Hir, unit: UnitId, opts: &TiledOptions) -> Result<Program, CommandError> {
        let hir = super::binarize::binary_products(prepared, unit);
        let mut tilings = HashMap::new();
        for r in hir.ranges.ids() {
            tilings.insert(r, Arc::new(TiledRange::of(&hir, r, opts.tile)));
        }
        let mut layouts: HashMap<TensorId, Layout> = HashMap::new();
        for t in hir.unit_inputs(unit) {
            let mut l = Layout::new(&hir, t, &tilings);
            let tiles = l.candidates(MAX_GRID_TILES).ok_or_else(|| too_many_tiles(&l))?;
            l.store(tiles);
            layouts.insert(t, l);
        }
        let mut stmts = Vec::new();
        let mut dense_flops = 0.0;
        for st in &hir.units[unit].stmts {
            check_block_write(&hir, st)?;
            let block = slice_tile_offsets(&hir, &tilings, &st.lhs)
                .into_iter()
                .zip(&st.lhs.indices)
                .map(|(first, &i)| (first, tilings[&hir.indices[i].range].count() as u32))
                .collect();
            let mut terms = Vec::new();
            if let Some(special) = special_stmt(st) {
                let term = special_term(&hir, &tilings, st, special)?;
                dense_flops += term_dense_flops(&hir, &term.indices, 1);
                terms.push(term);
            }
            let products = if terms.is_empty() { &st.rhs.terms[..] } else { &[] };
            for term in products {
                let mut indices: Vec<IndexId> = st.lhs.indices.clone();
                let mut factors = Vec::new();
                let mut funcs = Vec::new();
                let mut tile_offsets = Vec::new();
                for f in &term.factors {
                    let (r, func) = match f {
                        Factor::Tensor(r) => (r, None),
                        // After materialization a call's argument is one tensor element.
                        Factor::Call { func, arg, free, .. } => match simple_call_arg(arg, free) {
                            Some(r) => (r, Some(*func)),
                            None => return Err(unsupported_factor()),
                        },
                        _ => return Err(unsupported_factor()),
                    };
                    funcs.push(func);
                    tile_offsets.push(slice_tile_offsets(&hir, &tilings, r));
                    let mut pos = Vec::new();
                    for &i in &r.indices {
                        let p = match indices.iter().position(|&x| x == i) {
                            Some(p) => p,
                            None => {
                                indices.push(i);
                                indices.len() - 1
                            }
                        };
                        pos.push(p);
                    }
                    factors.push((r.tensor, pos));
                }
                debug_assert!(factors.len() <= 2, "binary_products splits longer products");
                let n_lhs = st.lhs.indices.len();
                dense_flops += term_dense_flops(&hir, &indices, factors.len());
                let ordered = ordered_groups(&hir, &indices, n_lhs, &factors, &funcs);
                terms.push(TermPlan {
                    coef: term.coef,
                    indices,
                    n_lhs,
                    factors,
                    tile_offsets,
                    funcs,
                    ordered,
                    op: TermOp::Product,
                    affine: Vec::new(),
                });
            }
            stmts.push(StmtPlan {
                lhs: st.lhs.tensor,
                accumulate: st.accumulate,
                terms,
                tile_flops: Vec::new(),
                block,
            });
        }
        let mut p = Program { hir, unit, tilings, layouts, stmts, levels: Vec::new(), dense_flops };
        p.place_outputs()?;
        p.check_function_operands()?;
        p.levels = p.levels();
        Ok(p)
    }

    /// A function with `f(0) ≠ 0` (`exp`, `recip`, …) of a tensor that stores only
    /// some of its tiles would be nonzero where nothing is stored, which the tasks
    /// never visit: such programs are refused rather than computed wrong.
    fn check_function_operands(&self) -> Result<(), CommandError> {
        for st in &self.stmts {
            for term in &st.terms {
                if term.op == TermOp::Gather {
                    // A gather copies values: an unstored tile's are its zeros.
                    continue;
                }
                if term.op != TermOp::Product {
                    // `max`, `min` and `where` see the zeros of unstored tiles too.
                    for (t, _) in &term.factors {
                        if !self.stores_every_tile(*t)? {
                            return Err(fail(
                                format!(
                                    "`{}` reads `{}`, which stores only some of its tiles (zero by its block rules, or never written), and tiled execution visits only stored tiles",
                                    self.hir.tensors[st.lhs].name, self.layouts[t].name
                                ),
                                "run it without --tiled, or take the maximum, minimum or `where` of a tensor without zero blocks",
                            ));
                        }
                    }
                    continue;
                }
                for ((t, _), func) in term.factors.iter().zip(&term.funcs) {
                    let Some(func) = func else { continue };
                    if func.apply(0.0) != 0.0 && !self.stores_every_tile(*t)? {
                        let name = &self.layouts[t].name;
                        return Err(fail(
                            format!(
                                "`{}({name})` is not zero where `{name}` stores no tile (zero by its block rules, or never written), and tiled execution visits only stored tiles",
                                func.name(),
                            ),
                            "run it without --tiled, or apply the function only where the tensor has no zero blocks",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether tensor `t` stores every canonical tile (none is zero by its block
    /// rules or left unwritten).
    fn stores_every_tile(&self, t: TensorId) -> Result<bool, CommandError> {
        let layout = &self.layouts[&t];
        let all = layout.canonical_tiles(MAX_GRID_TILES).ok_or_else(|| too_many_tiles(layout))?;
        Ok(all.iter().all(|c| layout.slot(c).is_some()))
    }

    /// Finds the stored tiles of every written tensor: the canonical tiles some
    /// term reaches (a tensor written twice keeps the union), and the flops of each.
    fn place_outputs(&mut self) -> Result<(), CommandError> {
        for s in 0..self.stmts.len() {
            let lhs = self.stmts[s].lhs;
            let layout = match self.layouts.get(&lhs) {
                Some(l) => l.clone(),
                None => Layout::new(&self.hir, lhs, &self.tilings),
            };
            let candidates = layout.canonical_tiles(MAX_GRID_TILES).ok_or_else(|| too_many_tiles(&layout))?;
            let mut reached = Vec::new();
            for c in candidates {
                let mut flops = 0.0;
                let mut any = false;
                self.for_contributions(s, &c, &mut |term, _, _, ext| {
                    any = true;
                    flops += contribution_flops(term, ext);
                });
                if !any {
                    continue;
                }
                if !layout.allowed(&c) {
                    return Err(fail(
                        format!(
                            "`{}` gets values in tile {c:?}, which its block rules declare zero",
                            self.hir.tensors[lhs].name
                        ),
                        "check its `spin(...)`, `irrep(...)` or `tiles[...]` declaration against the terms that write it",
                    ));
                }
                reached.push((c, flops));
            }
            let mut tiles: Vec<Coord> = layout.tiles().to_vec();
            for (c, _) in &reached {
                if layout.slot(c).is_none() {
                    tiles.push(c.clone());
                }
            }
            tiles.sort();
            let mut layout = layout;
            layout.store(tiles);
            self.layouts.insert(lhs, layout);
            self.stmts[s].tile_flops = reached;
        }
        Ok(())
    }

    /// Statements grouped into task sets: each statement goes one set after the last
    /// one it depends on (reads what it writes, writes what it reads or writes).
    fn levels(&self) -> Vec<Vec<usize>> {
        let reads =
            |s: &StmtPlan| -> Vec<TensorId> { s.terms.iter().flat_map(|t| t.factors.iter().map(|f| f.0)).collect() };
        let mut level = vec![0usize; self.stmts.len()];
        for i in 0..self.stmts.len() {
            let (ri, wi) = (reads(&self.stmts[i]), self.stmts[i].lhs);
            for j in 0..i {
                let (rj, wj) = (reads(&self.stmts[j]), self.stmts[j].lhs);
                if ri.contains(&wj) || wj == wi || rj.contains(&wi) {
                    level[i] = level[i].max(level[j] + 1);
                }
            }
        }
        let n = level.iter().max().map_or(0, |m| m + 1);
        (0..n).map(|l| (0..self.stmts.len()).filter(|&s| level[s] == l).collect()).collect()
    }

    /// Calls `f(term, weight, views, extents)` for every contribution to tile `c` of
    /// statement `s`'s written tensor: the factors' tiles (all nonzero), the weight
    /// of an ordered summed tuple, and the tile extent of every index of the term.
    fn for_contributions(&self, s: usize, c: &[u32], f: &mut ContributionFn<'_>) {
        let st = &self.stmts[s];
        if !st.writes(c) {
            return;
        }
        for term in &st.terms {
            let n = term.indices.len();
            let ranges: Vec<&TiledRange> =
                term.indices.iter().map(|&i| &*self.tilings[&self.hir.indices[i].range]).collect();
            let mut coord: Vec<u32> = vec![0; n];
            // Tile coordinates of the written tensor, relative to the block written.
            for ((x, &k), &(first, _)) in coord.iter_mut().zip(c).zip(&st.block) {
                *x = k - first;
            }
            if (term.n_lhs..n).any(|p| ranges[p].count() == 0) {
                continue;
            }
            if term.op == TermOp::Gather {
                // One contribution, the whole tile: its reads are `gather_reads`.
                let ext: Vec<usize> = (0..n).map(|p| ranges[p].extent(coord[p] as usize)).collect();
                f(term, 1.0, &[], &ext);
                continue;
            }
            // Reused by every contribution: the factors' layouts, views and tile
            // coordinates, and the extents.
            let layouts: Vec<Option<&Layout>> = term.factors.iter().map(|(t, _)| self.layouts.get(t)).collect();
            let mut views: Vec<TileView> = (0..term.factors.len())
                .map(|_| TileView { slot: 0, offset: 0, strides: Vec::with_capacity(n), sign: 1.0 })
                .collect();
            let mut fc: Coord = Vec::with_capacity(n);
            let mut ext = vec![0usize; n];
            loop {
                let weight = ordered_weight(&term.ordered, &coord);
                if weight > 0.0 {
                    let mut zero = false;
                    for ((((_, pos), offs), layout), view) in
                        term.factors.iter().zip(&term.tile_offsets).zip(&layouts).zip(views.iter_mut())
                    {
                        fc.clear();
                        fc.extend(pos.iter().zip(offs).map(|(&p, &o)| coord[p] + o));
                        if !layout.is_some_and(|l| l.view_into(&fc, view)) {
                            zero = true;
                            break;
                        }
                    }
                    if !zero {
                        for p in 0..n {
                            ext[p] = ranges[p].extent(coord[p] as usize);
                        }
                        f(term, weight, &views, &ext);
                    }
                }
                // Next summed tile tuple (odometer over positions n_lhs..n).
                let mut p = n;
                let done = loop {
                    if p == term.n_lhs {
                        break true;
                    }
                    p -= 1;
                    coord[p] += 1;
                    if (coord[p] as usize) < ranges[p].count() {
                        break false;
                    }
                    coord[p] = 0;
                };
                if done {
                    break;
                }
            }
        }
    }

    /// Per input dimension of a gather term writing tile `c`: the element range its
    /// subscript covers (coefficients are positive: E0313 refuses the others).
    fn gather_span(&self, term: &TermPlan, c: &[u32]) -> Vec<(usize, usize)> {
        let range = |p: usize| &*self.tilings[&self.hir.indices[term.indices[p]].range];
        term.affine
            .iter()
            .map(|(terms, constant)| {
                let (mut lo, mut hi) = (*constant, *constant);
                for &(a, p) in terms {
                    let (k, r) = (c[p] as usize, range(p));
                    lo += a * r.start(k) as i64;
                    hi += a * (r.start(k) + r.extent(k)).saturating_sub(1) as i64;
                }
                (lo.max(0) as usize, hi.max(0) as usize)
            })
            .collect()
    }

    /// Calls `f` with the view of every stored tile of a gather's input that the
    /// task writing tile `c` reads.
    fn gather_tiles(&self, term: &TermPlan, c: &[u32], f: &mut dyn FnMut(&TileView)) {
        let layout = &self.layouts[&term.factors[0].0];
        let span = self.gather_span(term, c);
        let first: Vec<usize> = span.iter().zip(&layout.dims).map(|(&(lo, _), d)| d.tile_of(lo)).collect();
        let counts: Vec<usize> =
            span.iter().zip(&layout.dims).zip(&first).map(|((&(_, hi), d), &k)| d.tile_of(hi) + 1 - k).collect();
        super::tensor::for_each_local(&counts, |l| {
            let coord: Coord = l.iter().zip(&first).map(|(&x, &k)| (x + k) as u32).collect();
            if let Some(v) = layout.view(&coord) {
                f(&v);
            }
        });
    }

    /// The first element and the extent, per position, of tile `c` of the tensor
    /// term `term` writes.
    fn tile_box(&self, term: &TermPlan, c: &[u32]) -> (Vec<usize>, Vec<usize>) {
        let range = |p: usize| &*self.tilings[&self.hir.indices[term.indices[p]].range];
        let start = (0..c.len()).map(|p| range(p).start(c[p] as usize)).collect();
        let ext = (0..c.len()).map(|p| range(p).extent(c[p] as usize)).collect();
        (start, ext)
    }

    /// Tile `c` of a gather's target, element by element: each subscript's value
    /// gives the input tile and the place in it (zero where no tile is stored).
    ///
    /// # Safety
    /// As [`Program::run_task`]: `tile_ptr` reaches every tile [`Self::gather_tiles`] lists.
    unsafe fn gather_task(
        &self,
        term: &TermPlan,
        c: &[u32],
        sc: &[isize],
        cptr: *mut f64,
        tile_ptr: &(dyn Fn(TensorId, usize) -> *mut f64 + Sync),
    ) {
        let input = term.factors[0].0;
        let layout = &self.layouts[&input];
        let (start, ext) = self.tile_box(term, c);
        let mut coord: Coord = vec![0; term.affine.len()];
        let mut local = vec![0usize; term.affine.len()];
        // The input tile read last, reused while elements stay in it.
        let mut cached: Option<(Coord, Option<TileView>)> = None;
        super::tensor::for_each_local(&ext, |l| {
            for (d, (terms, constant)) in term.affine.iter().enumerate() {
                let s = terms.iter().fold(*constant, |acc, &(a, p)| acc + a * (start[p] + l[p]) as i64) as usize;
                let k = layout.dims[d].tile_of(s);
                coord[d] = k as u32;
                local[d] = s - layout.dims[d].start(k);
            }
            if cached.as_ref().is_none_or(|(k, _)| *k != coord) {
                cached = Some((coord.clone(), layout.view(&coord)));
            }
            let value = match &cached {
                Some((_, Some(v))) => {
                    let at: isize = local.iter().zip(&v.strides).map(|(&o, &st)| o as isize * st).sum();
                    v.sign * *tile_ptr(input, v.slot).offset(at)
                }
                _ => 0.0,
            };
            let at: isize = l.iter().zip(sc).map(|(&x, &st)| x as isize * st).sum();
            *cptr.offset(at) = value;
        });
    }

    /// The tasks of task set `set`: (statement, tile of its written tensor, predicted
    /// flops). An `=` statement has a task for every stored tile (which it zeroes),
    /// a `+=` one for the tiles its terms reach.
    pub(crate) fn level_tasks(&self, set: &[usize]) -> Vec<(usize, Coord, f64)> {
        let mut tasks = Vec::new();
        for &s in set {
            let st = &self.stmts[s];
            if st.accumulate {
                tasks.extend(st.tile_flops.iter().map(|(c, f)| (s, c.clone(), *f)));
            } else {
                let flops_of: HashMap<&Coord, f64> = st.tile_flops.iter().map(|(c, f)| (c, *f)).collect();
                // `=` zeroes every stored tile of the block it writes (a slice
                // `F[i,a] = …` leaves the rest of `F` as it was).
                let all = self.layouts[&st.lhs].tiles().iter().filter(|c| st.writes(c));
                tasks.extend(all.map(|c| (s, c.clone(), flops_of.get(c).copied().unwrap_or(0.0))));
            }
        }
        tasks
    }

    /// The task sets, in order (statement numbers).
    pub(crate) fn task_sets(&self) -> &[Vec<usize>] {
        &self.levels
    }

    /// The tensor statement `s` writes.
    pub(crate) fn written_tensor(&self, s: usize) -> TensorId {
        self.stmts[s].lhs
    }

    /// Whether statement `s` adds to its tensor (`+=`) rather than overwriting it.
    pub(crate) fn accumulates(&self, s: usize) -> bool {
        self.stmts[s].accumulate
    }

    /// Whether statement `s` writes tile `c` of its tensor: every tile, unless it
    /// writes a slice (`F[i,a] = …`), which leaves the others as they were.
    pub(crate) fn writes_tile(&self, s: usize, c: &[u32]) -> bool {
        self.stmts[s].writes(c)
    }

    /// The elements of tile `c` of statement `s`'s written tensor (row-major) that
    /// part `split` of a task writes: the part's rows when the tile's first
    /// dimension is the one split ([`split_dim`]), else the whole tile. Only items
    /// whose every contribution is a GETT call are split.
    pub(crate) fn split_span(&self, s: usize, c: &[u32], split: Option<(usize, usize)>) -> std::ops::Range<usize> {
        let layout = &self.layouts[&self.stmts[s].lhs];
        let len = layout.tile_len(c);
        let Some((j, n)) = split.filter(|&(_, n)| n > 1) else { return 0..len };
        let ext: Vec<usize> = (0..c.len()).map(|d| layout.dims[d].extent(c[d] as usize)).collect();
        if ext.is_empty() || split_dim(ext.len(), &ext) != 0 || ext[0] == 0 || !len.is_multiple_of(ext[0]) {
            return 0..len;
        }
        let row = len / ext[0];
        ext[0] * j / n * row..ext[0] * (j + 1) / n * row
    }

    /// The tensor statement `s` writes.
    pub(crate) fn written(&self, s: usize) -> TensorId {
        self.stmts[s].lhs
    }

    /// The task for tile `c` of statement `s` cut into pieces by anchor (the largest
    /// operand tile of each contribution), in anchor order: each piece's flops and
    /// the operand tiles it reads. A distributed run places pieces apart, so that
    /// a large operand tile need not travel to the rank owning the written tile.
    pub(crate) fn task_pieces(&self, s: usize, c: &[u32], model: &TimeModel) -> Vec<TaskPiece> {
        // Per anchor: flops, predicted seconds, tiles read, and the parts it may be
        // split into (see `TaskPiece::splits`; `usize::MAX` until a contribution).
        type Sums = (f64, f64, BTreeSet<(TensorId, usize)>, usize);
        let mut pieces: BTreeMap<Anchor, Sums> = BTreeMap::new();
        self.for_contributions(s, c, &mut |term, _, views, ext| {
            let piece =
                pieces.entry(anchor(term, views, ext)).or_insert_with(|| (0.0, 0.0, BTreeSet::new(), usize::MAX));
            let flops = contribution_flops(term, ext);
            let [m, n, k, batch] = contribution_mnkb(term, ext);
            piece.0 += flops;
            piece.1 += model.kernel_seconds(flops, m, n, k, batch);
            piece.3 = piece.3.min(if is_gett(term, ext) { ext[split_dim(term.n_lhs, ext)] } else { 1 });
            for ((t, _), v) in term.factors.iter().zip(views) {
                piece.2.insert((*t, v.slot));
            }
            if term.op == TermOp::Gather {
                self.gather_tiles(term, c, &mut |v| {
                    piece.2.insert((term.factors[0].0, v.slot));
                });
            }
        });
        pieces
            .into_iter()
            .map(|(anchor, (flops, seconds, reads, splits))| TaskPiece {
                anchor,
                flops,
                seconds,
                reads: reads.into_iter().collect(),
                splits: splits.clamp(1, u32::MAX as usize),
            })
            .collect()
    }

    /// Predicted seconds of a one-process run on `threads` threads: per task set,
    /// its work spread evenly, or its largest task if that is longer; and the
    /// first writes of the fresh memory of every tensor the run computes (private
    /// memory zeroed by the tasks, spread over the threads).
    pub fn predicted_seconds(&self, model: &TimeModel, threads: usize) -> f64 {
        let inputs = self.hir.unit_inputs(self.unit);
        let mut written: Vec<TensorId> = self.stmts.iter().map(|s| s.lhs).filter(|t| !inputs.contains(t)).collect();
        written.sort();
        written.dedup();
        let fresh: f64 = written.iter().map(|t| self.layouts[t].len() as f64).sum();
        let work: f64 = self
            .task_sets()
            .iter()
            .map(|set| {
                let (mut total, mut largest) = (0.0, 0.0f64);
                for (s, c, _) in self.level_tasks(set) {
                    let t: f64 = self.task_pieces(s, &c, model).iter().map(|p| p.seconds).sum();
                    total += t;
                    largest = largest.max(t);
                }
                (total / threads.max(1) as f64).max(largest)
            })
            .sum();
        model.private_touch_seconds(fresh) / threads.max(1) as f64 + work
    }

    /// Predicted flops of all tasks.
    pub fn planned_flops(&self) -> f64 {
        self.stmts.iter().flat_map(|s| s.tile_flops.iter().map(|x| x.1)).sum()
    }

    /// (tensor, stored elements) of every tensor of the unit.
    pub fn storage_by_tensor(&self) -> Vec<(TensorId, f64)> {
        self.layouts.iter().map(|(&t, l)| (t, l.len() as f64)).collect()
    }

    /// (tensor, stored elements, dense elements) of every tensor of the unit.
    pub fn storage(&self) -> Vec<(String, f64, f64)> {
        let mut v: Vec<_> = self.layouts.values().map(|l| (l.name.clone(), l.len() as f64, l.dense_len())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Runs the unit on `inputs` (every input of the unit, in this program's
    /// layouts); returns the outputs and what was done.
    pub fn run(
        &self,
        mut inputs: HashMap<TensorId, TiledTensor>,
        opts: &TiledOptions,
    ) -> Result<(HashMap<TensorId, TiledTensor>, TiledStats), CommandError> {
        let kernel = crate::codegen::llvm::tile_kernel()
            .map_err(|e| fail(format!("the tile kernel: {e}"), "run it without --tiled"))?;
        let mut data: HashMap<TensorId, TiledTensor> = HashMap::new();
        for (t, v) in inputs.drain() {
            data.insert(t, v);
        }
        for s in &self.stmts {
            if let std::collections::hash_map::Entry::Vacant(slot) = data.entry(s.lhs) {
                let z = TiledTensor::zeros(self.layouts[&s.lhs].clone()).map_err(|e| {
                    crate::run::out_of_memory(format!("cannot allocate {} elements for `{}`", e.elements, e.name))
                })?;
                slot.insert(z);
            }
        }
        // The level after which each temporary is no longer read or written.
        let mut last_read: HashMap<TensorId, usize> = HashMap::new();
        for (l, set) in self.levels.iter().enumerate() {
            for &s in set {
                last_read.insert(self.stmts[s].lhs, l);
                for term in &self.stmts[s].terms {
                    for (t, _) in &term.factors {
                        last_read.insert(*t, l);
                    }
                }
            }
        }
        let pool = ThreadPool::new(opts.threads);
        let busy: Vec<AtomicU64> = (0..pool.threads()).map(|_| AtomicU64::new(0)).collect();
        let flops = AtomicU64::new(0);
        let calls = AtomicU64::new(0);
        let mut tasks_total = 0;
        let model = opts.model.at_concurrency(opts.threads);
        let profiles: Vec<std::sync::Mutex<KernelProfile>> = (0..pool.threads()).map(|_| Default::default()).collect();
        let t0 = Instant::now();
        for (l, set) in self.levels.iter().enumerate() {
            let mut tasks = self.level_tasks(set);
            if opts.schedule == Schedule::Dynamic {
                // Largest first: the dynamic claims then balance the tail.
                tasks.sort_by(|a, b| b.2.total_cmp(&a.2));
            }
            tasks_total += tasks.len();
            // Data pointers indexed by tensor (null for tensors not held now).
            let mut ptrs = vec![SyncPtr(std::ptr::null_mut()); self.hir.tensors.len()];
            for (&t, v) in data.iter_mut() {
                ptrs[t.index()] = SyncPtr(v.data.as_mut_ptr());
            }
            let layouts = &self.layouts;
            // SAFETY (of the offsets): every tensor is stored whole in its layout.
            let tile_ptr = |t: TensorId, slot: usize| unsafe { ptrs[t.index()].get().add(layouts[&t].offset(slot)) };
            pool.parallel_for(tasks.len(), opts.schedule, |k, w| {
                let start = Instant::now();
                let (s, c, _) = &tasks[k];
                // SAFETY: each task writes only its own tile of the written tensor;
                // a task set never reads a tensor one of its tasks writes (levels).
                let mut profile = opts.profile.then(|| profiles[w].lock().unwrap_or_else(|e| e.into_inner()));
                let prof = profile.as_deref_mut().map(|p| (&model, p));
                let (f, n) = unsafe { self.run_task(*s, c, &tile_ptr, &kernel, None, None, prof) };
                flops.fetch_add(f as u64, Ordering::Relaxed);
                calls.fetch_add(n, Ordering::Relaxed);
                busy[w].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            });
            // Temporaries no later set reads are freed now (peak memory).
            data.retain(|t, _| {
                self.hir.tensors[*t].role != Role::Temporary || last_read.get(t).is_some_and(|&r| r > l)
            });
        }
        let run_s = t0.elapsed().as_secs_f64();
        let outputs: HashMap<TensorId, TiledTensor> =
            data.into_iter().filter(|(t, _)| self.hir.tensors[*t].role == Role::Output).collect();
        let stats = TiledStats {
            planned_flops: self.planned_flops(),
            executed_flops: flops.load(Ordering::Relaxed) as f64,
            dense_flops: self.dense_flops,
            gett_calls: calls.load(Ordering::Relaxed),
            tasks: tasks_total,
            storage: self.storage(),
            run_s,
            busy_s: busy.iter().map(|b| b.load(Ordering::Relaxed) as f64 * 1e-9).collect(),
            task_sets: self.levels.len(),
            profile: merged(profiles),
        };
        Ok((outputs, stats))
    }

    /// One task: tile `c` of statement `s`'s written tensor. Returns the flops done
    /// and the GETT calls made. `part` runs a distributed piece of it instead: the
    /// contributions whose anchor is listed (sorted), added to the tile as it is.
    /// `split = Some((j, n))` runs part `j` of `n` of that: every GETT contribution
    /// cut along the tile's longest dimension ([`split_dim`]) into `n` slabs of
    /// rows, slab `j` computed (parts write disjoint rows, and add to the tile as it
    /// is: it is never zeroed); any other contribution runs whole in part 0.
    ///
    /// # Safety
    /// `tile_ptr(t, slot)` is the start of stored tile `slot` of tensor `t` for every
    /// tile the task reads or writes; no other thread touches this task's tile.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn run_task(
        &self,
        s: usize,
        c: &[u32],
        tile_ptr: &(dyn Fn(TensorId, usize) -> *mut f64 + Sync),
        kernel: &crate::codegen::llvm::TileKernel,
        part: Option<&[Anchor]>,
        split: Option<(usize, usize)>,
        mut prof: Option<(&TimeModel, &mut KernelProfile)>,
    ) -> (f64, u64) {
        let st = &self.stmts[s];
        let layout = &self.layouts[&st.lhs];
        let slot = layout.slot(c).expect("tasks run over stored tiles");
        let cptr = tile_ptr(st.lhs, slot);
        let len = layout.tile_len(c);
        if let Some(TermOp::Extremum(op)) = st.terms.first().map(|t| t.op) {
            // The whole task is one piece (see `anchor`), on the tile or a partial one.
            std::slice::from_raw_parts_mut(cptr, len).fill(op.identity());
        } else if !st.accumulate && part.is_none() && split.is_none() {
            std::ptr::write_bytes(cptr, 0, len);
        }
        let n_lhs = c.len();
        let sc = tile_strides(layout, c);
        let mut flops = 0.0;
        let mut calls = 0u64;
        // GETT calls run one contribution late: the operand tiles of the next call
        // are prefetched (into L2) while the previous one computes, since packing
        // small tiles otherwise waits on memory.
        let mut dims: Vec<GettDim> = Vec::new();
        let mut pending_dims: Vec<GettDim> = Vec::new();
        // A call waiting to run: operands, result, alpha, its m, n, k, batch and flops.
        type Pending = (*const f64, *const f64, *mut f64, f64, [f64; 4], f64);
        let mut pending: Option<Pending> = None;
        let run_pending =
            |pending: &mut Option<Pending>, dims: &[GettDim], prof: &mut Option<(&TimeModel, &mut KernelProfile)>| {
                if let Some((pa, pb, pc, alpha, mnkb, flops)) = pending.take() {
                    timed(prof, true, mnkb, flops, || {
                        tcc_runtime::kernels::gett_tile(
                            pa,
                            pb,
                            pc,
                            alpha,
                            dims,
                            kernel.params,
                            kernel.uk,
                            kernel.uks,
                            false,
                        )
                    });
                }
            };
        // Tiles of function factors with the function applied (one per factor).
        let mut mapped: Vec<Vec<f64>> = Vec::new();
        self.for_contributions(s, c, &mut |term, weight, views, ext| {
            if part.is_some_and(|p| p.binary_search(&anchor(term, views, ext)).is_err()) {
                return;
            }
            // Of a split task: this part's slab (dimension, first and end row) of a
            // GETT contribution, whose extents are the slab's from here on.
            let mut slab = None;
            let mut sliced = Vec::new();
            let ext = match split {
                Some((j, n)) if n > 1 => {
                    if !is_gett(term, ext) {
                        if j != 0 {
                            return;
                        }
                        ext
                    } else {
                        let p = split_dim(term.n_lhs, ext);
                        let (lo, hi) = (ext[p] * j / n, ext[p] * (j + 1) / n);
                        if lo == hi {
                            return;
                        }
                        slab = Some((p, lo));
                        sliced.extend_from_slice(ext);
                        sliced[p] = hi - lo;
                        &sliced[..]
                    }
                }
                _ => ext,
            };
            let points: f64 = ext.iter().map(|&e| e as f64).product();
            if term.op == TermOp::Gather {
                timed(&mut prof, false, contribution_mnkb(term, ext), points, || {
                    self.gather_task(term, c, &sc, cptr, tile_ptr)
                });
                flops += points;
                return;
            }
            // A function factor's sign goes inside the function; its tile is read
            // from a copy with the function applied, which the call below must not
            // outlive: the pending GETT runs first, and this one at once.
            let has_func = term.funcs.iter().any(Option::is_some);
            if has_func {
                run_pending(&mut pending, &pending_dims, &mut prof);
                mapped.resize_with(term.factors.len(), Vec::new);
            }
            // Products have at most two factors, `where` four.
            let mut ptrs: [*const f64; 4] = [std::ptr::null(); 4];
            let mut alpha = term.coef * weight;
            for (f, ((t, _), v)) in term.factors.iter().zip(views).enumerate() {
                let stored = tile_ptr(*t, v.slot);
                ptrs[f] = match term.funcs[f] {
                    None => {
                        alpha *= v.sign;
                        stored
                    }
                    Some(func) => {
                        let layout = &self.layouts[t];
                        let len = layout.tile_len(&layout.tiles()[v.slot]);
                        let src = std::slice::from_raw_parts(stored, len);
                        mapped[f].clear();
                        mapped[f].extend(src.iter().map(|&x| func.apply(v.sign * x)));
                        mapped[f].as_ptr()
                    }
                };
            }
            let stride = |f: usize, p: usize| factor_stride(term, views, f, p);
            let csd = |p: usize| if p < n_lhs { sc[p] } else { 0 };
            if term.op != TermOp::Product {
                run_pending(&mut pending, &pending_dims, &mut prof);
                let scs: Vec<isize> = (0..ext.len()).map(csd).collect();
                let st: Vec<Vec<isize>> =
                    (0..term.factors.len()).map(|f| (0..ext.len()).map(|p| stride(f, p)).collect()).collect();
                let sign: Vec<f64> = views.iter().map(|v| v.sign).collect();
                timed(&mut prof, false, contribution_mnkb(term, ext), points, || match term.op {
                    TermOp::Extremum(op) => strided_walk(ext, [&scs, &st[0]], |[oc, oa]| {
                        *cptr.offset(oc) = op.combine(*cptr.offset(oc), sign[0] * *ptrs[0].offset(oa))
                    }),
                    TermOp::Select(cmp) => {
                        strided_walk(ext, [&scs, &st[0], &st[1], &st[2], &st[3]], |[oc, oa, ob, ox, oy]| {
                            let (a, b) = (sign[0] * *ptrs[0].offset(oa), sign[1] * *ptrs[1].offset(ob));
                            *cptr.offset(oc) = if cmp.holds(a, b) {
                                sign[2] * *ptrs[2].offset(ox)
                            } else {
                                sign[3] * *ptrs[3].offset(oy)
                            };
                        })
                    }
                    TermOp::Product | TermOp::Gather => unreachable!("run elsewhere in this task"),
                });
                flops += points;
                return;
            }
            match term.factors.len() {
                2 if element_wise(term, ext) => {
                    // Element by element (`R[a,b,i,j] · recip(D[a,b,i,j])`): nothing is
                    // summed and some index is in both factors, which the GETT would
                    // take as a batch of 1×1 products.
                    run_pending(&mut pending, &pending_dims, &mut prof);
                    let sa: Vec<isize> = (0..ext.len()).map(|p| stride(0, p)).collect();
                    let sb: Vec<isize> = (0..ext.len()).map(|p| stride(1, p)).collect();
                    let scs: Vec<isize> = (0..ext.len()).map(csd).collect();
                    timed(&mut prof, false, contribution_mnkb(term, ext), points, || {
                        strided_mul_add(cptr, &scs, [ptrs[0], ptrs[1]], [&sa, &sb], ext, alpha)
                    });
                    flops += 2.0 * points;
                }
                2 => {
                    gett_dims(term, ext, &stride, &csd, &mut dims);
                    let (mut pa, mut pb, mut pc) = (ptrs[0], ptrs[1], cptr);
                    if let Some((p, lo)) = slab {
                        // The slab starts `lo` rows along `p` into every tile with `p`.
                        let lo = lo as isize;
                        (pa, pb, pc) =
                            (pa.offset(lo * stride(0, p)), pb.offset(lo * stride(1, p)), pc.offset(lo * sc[p]));
                    }
                    // The written tile's contiguous index should be a row (m) index.
                    if dims
                        .iter()
                        .filter(|d| d.kind == 1 || d.kind == 2)
                        .min_by_key(|d| d.sc)
                        .is_some_and(|d| d.kind == 2)
                    {
                        for d in dims.iter_mut() {
                            std::mem::swap(&mut d.sa, &mut d.sb);
                            d.kind = match d.kind {
                                1 => 2,
                                2 => 1,
                                k => k,
                            };
                        }
                        std::mem::swap(&mut pa, &mut pb);
                    }
                    dims.sort_by_key(|d| {
                        let s = if d.kind == 3 { d.sa.max(d.sb) } else { d.sc };
                        (d.kind, std::cmp::Reverse(s))
                    });
                    for (f, v) in term.factors.iter().zip(views) {
                        let len: usize = f.1.iter().map(|&p| ext[p]).product();
                        prefetch_l2(tile_ptr(f.0, v.slot), len.min(prefetch_words()));
                    }
                    run_pending(&mut pending, &pending_dims, &mut prof);
                    std::mem::swap(&mut dims, &mut pending_dims);
                    pending = Some((pa, pb, pc, alpha, contribution_mnkb(term, ext), 2.0 * points));
                    if has_func {
                        run_pending(&mut pending, &pending_dims, &mut prof);
                    }
                    calls += 1;
                    flops += 2.0 * points;
                }
                1 => {
                    run_pending(&mut pending, &pending_dims, &mut prof);
                    let a = ptrs[0];
                    let sa: Vec<isize> = (0..ext.len()).map(|p| stride(0, p)).collect();
                    let scs: Vec<isize> = (0..ext.len()).map(csd).collect();
                    timed(&mut prof, false, contribution_mnkb(term, ext), points, || {
                        strided_add(cptr, &scs, a, &sa, ext, alpha)
                    });
                    flops += points;
                }
                _ => {
                    run_pending(&mut pending, &pending_dims, &mut prof);
                    let scs: Vec<isize> = (0..ext.len()).map(csd).collect();
                    let one = [1.0f64];
                    timed(&mut prof, false, contribution_mnkb(term, ext), points, || {
                        strided_add(cptr, &scs, one.as_ptr(), &vec![0; ext.len()], ext, alpha)
                    });
                    flops += points;
                }
            }
        });
        run_pending(&mut pending, &pending_dims, &mut prof);
        (flops, calls)
    }
}

impl Program {
    /// The work of task `(s, c)` for an accelerator ([`super::device`]): what
    /// [`Program::run_task`] computes, as operations on stored tiles, appended to
    /// `out`.
    pub(crate) fn device_ops(&self, s: usize, c: &[u32], out: &mut Vec<TileOp>) {
        let st = &self.stmts[s];
        let layout = &self.layouts[&st.lhs];
        let slot = layout.slot(c).expect("tasks run over stored tiles");
        let c_at = (st.lhs, layout.offset(slot));
        let (t, offset, len) = (st.lhs, c_at.1, layout.tile_len(c));
        if let Some(TermOp::Extremum(op)) = st.terms.first().map(|t| t.op) {
            // As `run_task`: the tile starts at the reduction's identity.
            out.push(TileOp::Fill { t, offset, len, value: op.identity() });
        } else if !st.accumulate {
            out.push(TileOp::Zero { t, offset, len });
        }
        let n_lhs = c.len();
        let sc = tile_strides(layout, c);
        self.for_contributions(s, c, &mut |term, weight, views, ext| {
            if term.op == TermOp::Gather {
                return self.gather_moves(term, c, c_at, &sc, out);
            }
            // A function factor's sign goes inside the function.
            let alpha = views
                .iter()
                .zip(&term.funcs)
                .filter(|(_, f)| f.is_none())
                .fold(term.coef * weight, |a, (v, _)| a * v.sign);
            let at = |f: usize| Operand {
                tensor: term.factors[f].0,
                offset: views[f].offset,
                func: term.funcs[f].map(|g| (g, views[f].sign)),
            };
            let stride = |f: usize, p: usize| factor_stride(term, views, f, p);
            let csd = |p: usize| if p < n_lhs { sc[p] } else { 0 };
            if term.op == TermOp::Product && term.factors.len() == 2 && !element_wise(term, ext) {
                let mut dims = Vec::new();
                gett_dims(term, ext, &stride, &csd, &mut dims);
                out.push(TileOp::Gett { c: c_at, a: at(0), b: at(1), alpha, dims });
            } else {
                // A product's signs are in alpha; `max`/`min` and `where` read each
                // factor with its view's sign, as `run_task` does (they have no
                // coefficient and no function factors).
                let (op, alpha, signed) = match term.op {
                    TermOp::Extremum(e) => (MoveOp::Extremum(e), 1.0, true),
                    TermOp::Select(cmp) => (MoveOp::Select(cmp), 1.0, true),
                    TermOp::Product => (MoveOp::Add, alpha, false),
                    TermOp::Gather => unreachable!("a gather's moves are made by gather_moves, above"),
                };
                let factors = (0..term.factors.len())
                    .map(|f| {
                        let sign = if signed { views[f].sign } else { 1.0 };
                        (at(f), sign, (0..ext.len()).map(|p| stride(f, p)).collect())
                    })
                    .collect();
                let sc = (0..ext.len()).map(csd).collect();
                out.push(TileOp::Elementwise { c: c_at, sc, factors, ext: ext.to_vec(), alpha, op });
            }
        });
    }
}

impl Program {
    /// A gather's task (`=`, its tile cleared before) as strided copies: one per
    /// box of the tile that reads one input tile ([`super::gather`]), a
    /// constant 0 where that tile is not stored (as [`Program::gather_task`]
    /// reads it).
    fn gather_moves(&self, term: &TermPlan, c: &[u32], c_at: (TensorId, usize), sc: &[isize], out: &mut Vec<TileOp>) {
        let input = term.factors[0].0;
        let layout = &self.layouts[&input];
        let (start, ext) = self.tile_box(term, c);
        super::gather::boxes(&term.affine, &start, &ext, &layout.dims, &mut |b| {
            let dst = c_at.1 as isize + b.lo.iter().zip(sc).map(|(&l, &st)| l as isize * st).sum::<isize>();
            let (factors, alpha) = match layout.view(&b.coord) {
                Some(v) => {
                    let at = v.offset as isize
                        + b.local.iter().zip(&v.strides).map(|(&l, &st)| l as isize * st).sum::<isize>();
                    // A step of position p moves subscript d by its coefficient of p.
                    let strides = (0..c.len())
                        .map(|p| {
                            let coef =
                                |terms: &[(i64, usize)]| terms.iter().filter(|t| t.1 == p).map(|t| t.0).sum::<i64>();
                            term.affine.iter().zip(&v.strides).map(|((terms, _), &st)| coef(terms) as isize * st).sum()
                        })
                        .collect();
                    (vec![(Operand { tensor: input, offset: at as usize, func: None }, 1.0, strides)], v.sign)
                }
                None => (Vec::new(), 0.0),
            };
            let c = (c_at.0, dst as usize);
            out.push(TileOp::Elementwise { c, sc: sc.to_vec(), factors, ext: b.ext.clone(), alpha, op: MoveOp::Store });
        });
    }
}

/// The workers' profiles, summed.
pub(crate) fn merged(profiles: Vec<std::sync::Mutex<KernelProfile>>) -> KernelProfile {
    let mut all = KernelProfile::default();
    for p in profiles {
        all.merge(&p.into_inner().unwrap_or_else(|e| e.into_inner()));
    }
    all
}

/// Runs `f`, one kernel call of `flops` on tiles of `mnkb`, and when profiling
/// records its time next to the model's.
fn timed(
    prof: &mut Option<(&TimeModel, &mut KernelProfile)>,
    product: bool,
    mnkb: [f64; 4],
    flops: f64,
    f: impl FnOnce(),
) {
    let Some((model, profile)) = prof else { return f() };
    let t0 = Instant::now();
    f();
    let wall = t0.elapsed().as_secs_f64();
    let [m, n, k, b] = mnkb;
    let modelled = (model.kernel_seconds(flops, m, n, k, b) - model.call_overhead).max(0.0);
    profile.record(product, mnkb, flops, modelled, wall);
}

/// What a piece of a task is named by: its largest operand tile (tensor, slot; the
/// first factor's on a tie), `None` for a term without factors.
pub(crate) type Anchor = Option<(TensorId, usize)>;

/// The contributions of a task with one anchor: their flops and the operand tiles
/// (tensor, slot) they read.
pub(crate) struct TaskPiece {
    pub anchor: Anchor,
    pub flops: f64,
    /// Predicted seconds on one thread ([`TimeModel`]).
    pub seconds: f64,
    pub reads: Vec<(TensorId, usize)>,
    /// Into how many parts the piece may be split ([`Program::run_task`]'s
    /// `split`): the extent of the written tile's longest dimension when every
    /// contribution is a GETT call, else 1.
    pub splits: usize,
}

/// Whether a contribution runs as one GETT call in [`Program::run_task`]: a
/// product of two factors that is not element by element.
fn is_gett(term: &TermPlan, ext: &[usize]) -> bool {
    term.op == TermOp::Product && term.factors.len() == 2 && term.n_lhs > 0 && !element_wise(term, ext)
}

/// Row-major strides of stored tile `c` of a tensor laid out as `layout`.
fn tile_strides(layout: &Layout, c: &[u32]) -> Vec<isize> {
    let mut sc = vec![0isize; c.len()];
    let mut acc = 1isize;
    for d in (0..c.len()).rev() {
        sc[d] = acc;
        acc *= layout.dims[d].extent(c[d] as usize) as isize;
    }
    sc
}

/// Factor `f`'s stride along index position `p` of its term, read through
/// `views[f]`. A diagonal (`F[i,i]`) reads position `p` along every dimension it
/// indexes: the strides add.
fn factor_stride(term: &TermPlan, views: &[TileView], f: usize, p: usize) -> isize {
    let (_, pos) = &term.factors[f];
    pos.iter().zip(&views[f].strides).filter(|(&q, _)| q == p).map(|(_, &s)| s).sum()
}

/// Whether a product of two factors runs element by element (`R[a,b,i,j] ·
/// recip(D[a,b,i,j])`): nothing is summed and some index is in both factors,
/// which a GETT would take as a batch of 1×1 products.
fn element_wise(term: &TermPlan, ext: &[usize]) -> bool {
    term.n_lhs == ext.len() && (0..ext.len()).any(|p| term.factors.iter().all(|f| f.1.contains(&p)))
}

/// The GETT dimensions of a product of two factors, one per index position:
/// kind 0 (batch: written, in both factors or in neither), 1 (m: written, only
/// in the first), 2 (n: only in the second), 3 (k: summed); `stride(f, p)` is
/// factor `f`'s stride along position `p`, `csd(p)` the written tile's.
fn gett_dims(
    term: &TermPlan,
    ext: &[usize],
    stride: &dyn Fn(usize, usize) -> isize,
    csd: &dyn Fn(usize) -> isize,
    dims: &mut Vec<GettDim>,
) {
    let (a, b) = (&term.factors[0], &term.factors[1]);
    dims.clear();
    dims.extend((0..ext.len()).map(|p| {
        let kind = match (p < term.n_lhs, a.1.contains(&p), b.1.contains(&p)) {
            (true, true, true) | (true, false, false) => 0,
            (true, true, false) => 1,
            (true, false, true) => 2,
            (false, _, _) => 3,
        };
        GettDim { kind, size: ext[p] as i64, sa: stride(0, p) as i64, sb: stride(1, p) as i64, sc: csd(p) as i64 }
    }));
}

/// The dimension of the written tile a split task is cut along: its longest
/// (the first of the longest), the same for every contribution of a task.
fn split_dim(n_lhs: usize, ext: &[usize]) -> usize {
    (0..n_lhs).rev().max_by_key(|&p| ext[p]).unwrap_or(0)
}

fn anchor(term: &TermPlan, views: &[TileView], ext: &[usize]) -> Anchor {
    if term.op != TermOp::Product {
        // One piece: a reduction's tile starts at its identity, not at zero.
        return None;
    }
    let len = |pos: &[usize]| pos.iter().map(|&p| ext[p]).product::<usize>();
    let mut best: Anchor = None;
    let mut best_len = 0;
    for ((t, pos), v) in term.factors.iter().zip(views) {
        if best.is_none() || len(pos) > best_len {
            best = Some((*t, v.slot));
            best_len = len(pos);
        }
    }
    best
}

/// GEMM dimensions of a contribution for the time model: for a product, the
/// written extents only the first factor has (m), only the second has (n), the
/// summed extents (k) and the rest (batch); anything else is priced as a copy of
/// its points (m).
fn contribution_mnkb(term: &TermPlan, ext: &[usize]) -> [f64; 4] {
    if term.factors.len() != 2 {
        return [ext.iter().map(|&e| e as f64).product(), 1.0, 1.0, 1.0];
    }
    let (a, b) = (&term.factors[0].1, &term.factors[1].1);
    let mut d = [1.0; 4];
    for (p, &e) in ext.iter().enumerate() {
        let slot = match (p < term.n_lhs, a.contains(&p), b.contains(&p)) {
            (true, true, false) => 0,
            (true, false, true) => 1,
            (false, _, _) => 2,
            _ => 3,
        };
        d[slot] *= e as f64;
    }
    d
}

/// Flops of one contribution: 2 per multiply-add of a product, 1 per added element.
fn contribution_flops(term: &TermPlan, ext: &[usize]) -> f64 {
    let points: f64 = ext.iter().map(|&e| e as f64).product();
    if term.factors.len() >= 2 && term.op == TermOp::Product {
        2.0 * points
    } else {
        points
    }
}

/// The most elements of one operand tile prefetched before a GETT call (128 KiB:
/// both operands fit in any L2 next to the running call's). A whole large tile
/// never fits L2, and prefetching it streamed it from memory first: with tile 40,
/// CCD o=20 v=200 on one thread of a 2-core machine spent 0.37 s outside its
/// kernel calls with whole tiles prefetched and 0.16–0.22 s with at most
/// 4096–32768 elements (2.3–2.4 s in kernels either way); under MPI on 2 ranks
/// the kernels took about that much longer instead (that machine's large L3
/// keeps what the prefetch brought). On a 16-core host (run H5 in
/// bench/distributed/results.md) the cap made one rank alone 1.34× faster but 16
/// processes' kernels 1.07× slower. `TCC_PREFETCH_WORDS` (a
/// count, or `all` for whole tiles as before) sets it for experiments
/// (`bench/distributed/mpi_split.sh`); read once.
const PREFETCH_WORDS: usize = 16384;

fn prefetch_words() -> usize {
    static WORDS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WORDS.get_or_init(|| match std::env::var("TCC_PREFETCH_WORDS").as_deref() {
        Ok("all") => usize::MAX,
        Ok(v) => v.trim().parse().unwrap_or(PREFETCH_WORDS),
        Err(_) => PREFETCH_WORDS,
    })
}

/// Asks for the `len` elements from `p` to be brought into L2 (a hint only).
#[inline]
fn prefetch_l2(p: *const f64, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        // 8 f64 per 64-byte line; `wrapping_add` keeps the address arithmetic safe.
        for x in (0..len).step_by(8) {
            // SAFETY: a prefetch never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(x) as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// Calls `f` with the offsets, along each of `strides`, of every point of the box
/// `ext` in row-major order (nothing for an empty box; once for a scalar). The
/// last dimension runs as a plain inner loop, so the odometer's cost is paid once
/// per row.
#[inline(always)]
fn strided_walk<const N: usize>(ext: &[usize], strides: [&[isize]; N], mut f: impl FnMut([isize; N])) {
    if ext.contains(&0) {
        return;
    }
    let Some((&row, outer)) = ext.split_last() else {
        f([0; N]);
        return;
    };
    let step: [isize; N] = std::array::from_fn(|k| strides[k][outer.len()]);
    let n = outer.len();
    let mut l = vec![0usize; n];
    let mut at = [0isize; N];
    loop {
        let mut x = at;
        for _ in 0..row {
            f(x);
            for k in 0..N {
                x[k] += step[k];
            }
        }
        let mut d = n;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            l[d] += 1;
            for (o, s) in at.iter_mut().zip(&strides) {
                *o += s[d];
            }
            if l[d] < outer[d] {
                break;
            }
            for (o, s) in at.iter_mut().zip(&strides) {
                *o -= s[d] * outer[d] as isize;
            }
            l[d] = 0;
        }
    }
}

/// `c[l·sc] += alpha · a[l·sa]` over the box `ext`.
///
/// # Safety
/// Every offset the strides reach is in bounds.
unsafe fn strided_add(c: *mut f64, sc: &[isize], a: *const f64, sa: &[isize], ext: &[usize], alpha: f64) {
    strided_walk(ext, [sc, sa], |[oc, oa]| *c.offset(oc) += alpha * *a.offset(oa));
}

/// `c[l·sc] += alpha · a[l·sa] · b[l·sb]` over the box `ext`.
///
/// # Safety
/// Every offset the strides reach is in bounds.
unsafe fn strided_mul_add(
    c: *mut f64,
    sc: &[isize],
    [a, b]: [*const f64; 2],
    [sa, sb]: [&[isize]; 2],
    ext: &[usize],
    alpha: f64,
) {
    strided_walk(ext, [sc, sa, sb], |[oc, oa, ob]| *c.offset(oc) += alpha * *a.offset(oa) * *b.offset(ob));
}

/// The number of distinct orderings of each ordered group's tile tuple, or 0 when
/// a group's tiles are not in non-decreasing order.
pub(crate) fn ordered_weight(groups: &[Vec<usize>], coord: &[u32]) -> f64 {
    let mut w = 1.0;
    for g in groups {
        if g.windows(2).any(|x| coord[x[0]] > coord[x[1]]) {
            return 0.0;
        }
        // k! / Π multiplicity!
        let mut orderings = (1..=g.len()).map(|x| x as f64).product::<f64>();
        let mut run = 1;
        for k in 1..=g.len() {
            if k < g.len() && coord[g[k]] == coord[g[k - 1]] {
                run += 1;
            } else {
                orderings /= (1..=run).map(|x| x as f64).product::<f64>();
                run = 1;
            }
        }
        w *= orderings;
    }
    w
}

/// Per dimension of `r`: the tile of the dimension's tiling where the index's
/// range starts (0 unless `r` is a slice; the tilings of unions make it a tile
/// boundary, [`TiledRange::of`]).
fn slice_tile_offsets(hir: &Hir, tilings: &HashMap<RangeId, Arc<TiledRange>>, r: &TensorRef) -> Vec<u32> {
    let dims = &hir.tensors[r.tensor].dims;
    hir.ref_offsets(r)
        .iter()
        .zip(dims)
        .map(|(&at, d)| {
            let tiling = &tilings[d];
            let k = tiling.tile_of(at.min(tiling.start(tiling.count()).saturating_sub(1)));
            debug_assert!(at == 0 || tiling.start(k) == at, "a part of a union starts a tile");
            k as u32
        })
        .collect()
}

/// [`check_block_write`] for every statement of `hir` (`tcc build --mpi`, before
/// a library is made whose open would fail).
pub fn check_block_writes(hir: &Hir) -> Result<(), CommandError> {
    hir.units.iter().flat_map(|u| &u.stmts).try_for_each(|st| check_block_write(hir, st))
}

/// A statement writing a slice (`F[i,a] = …` of `F[p,q]`) writes whole tiles of
/// the block; a tensor with a symmetry or block rules written so is refused
/// (E0764): its canonical tiles need not lie in the block written.
pub(crate) fn check_block_write(hir: &Hir, st: &crate::sema::hir::Stmt) -> Result<(), CommandError> {
    let t = &hir.tensors[st.lhs.tensor];
    if !hir.is_slice(&st.lhs) || (t.symmetry.is_empty() && t.pair_symmetry.is_empty() && t.blocks.is_empty()) {
        return Ok(());
    }
    Err(CommandError::new(
        "E0764",
        format!(
            "`{}` has a declared symmetry or block rules and is written by blocks of a union of ranges, which tiled execution does not support",
            t.name
        ),
        Some("declare it without symmetry, write it whole, or run it without --tiled".into()),
    ))
}

/// The one term of a statement the back ends compute whole (`T = max(A)`,
/// `T = where(a cmp b, x, y)`): its factors are the arguments, read in place.
fn special_term(
    hir: &Hir,
    tilings: &HashMap<RangeId, Arc<TiledRange>>,
    st: &crate::sema::hir::Stmt,
    special: Special<'_>,
) -> Result<TermPlan, CommandError> {
    if st.accumulate {
        return Err(fail(
            "tiled execution computes `max`, `min` and `where` into a tensor with `=`, not `+=`",
            "compute it into a temporary with `=`, then add that",
        ));
    }
    let (op, args) = match special {
        Special::Reduce { op, arg } => (TermOp::Extremum(op), vec![arg]),
        Special::Select { cmp, args } => (TermOp::Select(cmp), args),
        Special::Gather { arg } => {
            // The written tensor's indices are the gather's (in any order).
            let at = |i: IndexId| st.lhs.indices.iter().position(|&x| x == i).expect("a gather writes its indices");
            let affine = arg
                .subs
                .iter()
                .map(|sub| (sub.terms.iter().map(|&(a, i)| (a, at(i))).collect(), sub.constant))
                .collect();
            return Ok(TermPlan {
                coef: 1.0,
                n_lhs: st.lhs.indices.len(),
                indices: st.lhs.indices.clone(),
                funcs: vec![None],
                factors: vec![(arg.tensor, Vec::new())],
                tile_offsets: vec![Vec::new()],
                ordered: Vec::new(),
                op: TermOp::Gather,
                affine,
            });
        }
    };
    let mut indices: Vec<IndexId> = st.lhs.indices.clone();
    let mut factors = Vec::new();
    let mut tile_offsets = Vec::new();
    for r in &args {
        tile_offsets.push(slice_tile_offsets(hir, tilings, r));
        let pos = r
            .indices
            .iter()
            .map(|&i| match indices.iter().position(|&x| x == i) {
                Some(p) => p,
                None => {
                    indices.push(i);
                    indices.len() - 1
                }
            })
            .collect();
        factors.push((r.tensor, pos));
    }
    Ok(TermPlan {
        coef: 1.0,
        n_lhs: st.lhs.indices.len(),
        indices,
        funcs: vec![None; factors.len()],
        factors,
        tile_offsets,
        ordered: Vec::new(),
        op,
        affine: Vec::new(),
    })
}

fn unsupported_factor() -> CommandError {
    fail(
        "tiled execution computes products of tensors, element-wise functions of one tensor, `max`/`min` of one tensor and `where` of tensors; this program has a term it cannot run",
        "run it without --tiled",
    )
}

fn too_many_tiles(l: &Layout) -> CommandError {
    fail(
        format!(
            "tensor `{}` has {:.3e} tiles, more than tiled execution handles ({MAX_GRID_TILES:.0e})",
            l.name,
            l.grid_tiles()
        ),
        "give its ranges a larger tile (`range V = 400 tile 64;` or --tile)",
    )
}

/// Dense flops of a term over `indices` with `n` factors (2 per multiply-add).
fn term_dense_flops(hir: &Hir, indices: &[IndexId], n: usize) -> f64 {
    let points: f64 = indices.iter().map(|&i| hir.index_size(i) as f64).product();
    if n >= 2 {
        2.0 * points
    } else {
        points
    }
}

/// Summed index groups over which both factors are symmetric alike: the term's
/// value is the same for every ordering of their tiles.
///
/// A function keeps a symmetric group but not an antisymmetric one (`f(-x)` is
/// not `-f(x)` in general).
///
/// The positions of a group must be indices of one range: a symmetric `F[p,q]`
/// read as the block `F[i,a]` pairs tiles of different ranges, which no ordering
/// covers. Nor may a group's index appear in the factor outside the group: a
/// tensor symmetric in its first two dimensions read as `A[i,k,i]` is not
/// symmetric in `i` and `k` (the diagonal ties `i` to the third dimension).
fn ordered_groups(
    hir: &Hir,
    indices: &[IndexId],
    n_lhs: usize,
    factors: &[(TensorId, Vec<usize>)],
    funcs: &[Option<Func>],
) -> Vec<Vec<usize>> {
    let [(a, pa), (b, pb)] = factors else { return Vec::new() };
    let groups_of = |t: TensorId, pos: &[usize], func: Option<Func>| -> Vec<(SymKind, Vec<usize>)> {
        hir.tensors[t]
            .symmetry
            .iter()
            .filter(|g| func.is_none() || g.kind == SymKind::Symmetric)
            .filter(|g| {
                let inside = |p: usize| g.positions.iter().any(|&d| pos[d] == p);
                pos.iter().enumerate().all(|(e, &p)| !inside(p) || g.positions.contains(&e))
            })
            .map(|g| {
                let mut ps: Vec<usize> = g.positions.iter().map(|&d| pos[d]).collect();
                ps.sort_unstable();
                (g.kind, ps)
            })
            .collect()
    };
    let gb = groups_of(*b, pb, funcs[1]);
    groups_of(*a, pa, funcs[0])
        .into_iter()
        .filter(|(kind, ps)| {
            let range = |p: &usize| hir.indices[indices[*p]].range;
            ps.windows(2).all(|w| w[0] != w[1])
                && ps.iter().all(|&p| p >= n_lhs && range(&p) == range(&ps[0]))
                && gb.iter().any(|(k, q)| k == kind && q == ps)
        })
        .map(|(_, ps)| ps)
        .collect()
}
