//! Tiled programs on an accelerator (`tcc-gpu --tiled`): the same task sets as
//! [`Program::run`], as data movement and batched GEMMs.
//!
//! Every task's contributions ([`Program::device_ops`]) become [`TileOp`]s. A
//! product of two tiles runs as transpose–transpose–GEMM–transpose: an operand
//! tile that already is the GEMM's matrix (as stored or transposed, no
//! function applied) is read in place, any other is moved into a row-major
//! matrix in scratch memory ([`Round::pack`]); one batched GEMM per matrix shape
//! and operand layout multiplies all of a round's contributions of that shape
//! ([`Round::gemms`]), and each result is added into
//! its written tile through the tile's strides ([`Round::add`]). Element-wise
//! products, sums of one factor and constants are one [`Move`] each. Adds are
//! atomic, so the contributions to one tile need no order and a task set is a
//! few launches whatever its number of tiles. A round holds as many
//! contributions as fit the scratch limit; the tiles `=` statements write are
//! cleared before a set's first round.
//!
//! The [`TileMachine`] runs rounds: [`HostMachine`] here (plain loops, the
//! reference the tests hold the others to), the host emulation of the generated
//! move kernel (`codegen::nvptx::tile_moves`) and the GPU (`codegen::cuda_tiled`).

use super::exec::Program;
use super::tensor::TiledTensor;
use crate::codegen::nvptx::tile_moves;
use crate::error::CommandError;
use crate::ids::TensorId;
use crate::sema::hir::{CmpOp, Extremum, Func, Role};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;
use tcc_runtime::kernels::GettDim;

/// A stored tile a [`TileOp`] reads: where it starts in its tensor's buffer,
/// and the element-wise function read through, with the sign of the view that
/// goes inside it (`recip(-x)`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Operand {
    pub tensor: TensorId,
    pub offset: usize,
    pub func: Option<(Func, f64)>,
}

impl Operand {
    fn loc(&self) -> Loc {
        Loc { buf: Buf::Tensor(self.tensor), offset: self.offset }
    }
}

/// One piece of a task's work on stored tiles (`(tensor, element offset)` is
/// where the written tile starts in its tensor's buffer).
#[derive(Debug, Clone)]
pub enum TileOp {
    /// Elements `offset..offset + len` of tensor `t` set to zero.
    Zero { t: TensorId, offset: usize, len: usize },
    /// `c += alpha · a · b` over GETT dimensions (kind 0 batch, 1 m, 2 n, 3 k;
    /// strides relative to each tile's start).
    Gett { c: (TensorId, usize), a: Operand, b: Operand, alpha: f64, dims: Vec<GettDim> },
    /// Over the box `ext`, element by element: `c[Σ i·sc] += alpha · Π f[Σ i·s]`
    /// (zero, one or two factors; [`MoveOp::Add`]), `c = max(c, f)` / `min` of one
    /// factor, or `c = a cmp b ? x : y` of four; each factor times its sign (1
    /// where the sign is in alpha).
    Elementwise {
        c: (TensorId, usize),
        sc: Vec<isize>,
        factors: Vec<(Operand, f64, Vec<isize>)>,
        ext: Vec<usize>,
        alpha: f64,
        op: MoveOp,
    },
    /// Elements `offset..offset + len` of tensor `t` set to `value` (a `max`'s
    /// tile to −∞ before its contributions), in the round of the ops after it.
    Fill { t: TensorId, offset: usize, len: usize, value: f64 },
}

/// How a [`Move`] writes its value `v` to an element `d` of its destination.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MoveOp {
    /// `d = alpha · Π src`.
    Store,
    /// `d += alpha · Π src`, atomically.
    Add,
    /// `d = max(d, alpha · src)` / `min`, atomically (a NaN loses, as in `maxnum`).
    Extremum(Extremum),
    /// `d = src0 cmp src1 ? src2 : src3` (alpha unused).
    Select(CmpOp),
}

impl MoveOp {
    /// The destination element after the move writes `v` (sources combined) to `d`.
    pub fn write(self, d: f64, v: f64) -> f64 {
        match self {
            MoveOp::Store | MoveOp::Select(_) => v,
            MoveOp::Add => d + v,
            MoveOp::Extremum(e) => e.combine(d, v),
        }
    }
}

/// A buffer a [`Move`] reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buf {
    Tensor(TensorId),
    /// The round's scratch memory ([`Round::scratch`] elements).
    Scratch,
}

/// An element offset into a buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Loc {
    pub buf: Buf,
    pub offset: usize,
}

/// One source of a [`Move`]: element `Σ i·strides` from `loc`, through
/// `func(sign · x)` when there is a function, else times `sign` (1 where the
/// sign went into the move's alpha).
#[derive(Debug, Clone, PartialEq)]
pub struct Src {
    pub loc: Loc,
    pub strides: Vec<isize>,
    pub func: Option<(Func, f64)>,
    pub sign: f64,
}

impl Src {
    /// The value read as `x`.
    pub fn value(&self, x: f64) -> f64 {
        match self.func {
            Some((f, sign)) => f.apply(sign * x),
            None => self.sign * x,
        }
    }
}

/// `dst[Σ i·sdst] = alpha · Π src[Σ i·s]` (or `+=`, atomically, or `max`,
/// `min`, `where`: [`MoveOp`]) for every point `i` of the box `ext`, the last
/// dimension fastest. No source means the constant `alpha`.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub dst: Loc,
    pub sdst: Vec<isize>,
    pub srcs: Vec<Src>,
    pub ext: Vec<usize>,
    pub alpha: f64,
    pub op: MoveOp,
}

impl Move {
    pub fn points(&self) -> usize {
        self.ext.iter().product()
    }
}

/// How a GEMM operand lies in memory: element (row `r`, column `q`) of the
/// matrix at `r·ld + q`, or at `q·ld + r` when `transposed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MatLayout {
    pub transposed: bool,
    pub ld: usize,
}

impl MatLayout {
    /// Row-major with `cols` columns, as packed operands lie in scratch.
    pub fn packed(cols: usize) -> MatLayout {
        MatLayout { transposed: false, ld: cols.max(1) }
    }

    /// Where element `(r, q)` lies, from the matrix's start.
    pub fn at(self, r: usize, q: usize) -> usize {
        if self.transposed {
            q * self.ld + r
        } else {
            r * self.ld + q
        }
    }
}

/// One product of a [`Gemm`]: where its A and B start, and where its
/// row-major m×n result goes in scratch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmItem {
    pub a: Loc,
    pub b: Loc,
    pub c: usize,
}

/// Products `C_j = A_j · B_j` (m×k times k×n), one per item, of operands laid
/// out as `la` and `lb`: packed into scratch by the round's moves, or read in
/// place from stored tiles that already are matrices (no copy).
#[derive(Debug, Clone, PartialEq)]
pub struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub la: MatLayout,
    pub lb: MatLayout,
    pub items: Vec<GemmItem>,
}

impl Gemm {
    pub fn batch(&self) -> usize {
        self.items.len()
    }

    /// `(first item, distance in elements between items)` of A, B and C when
    /// the items lie at equal distances in one buffer each (a strided batch).
    pub fn strided(&self) -> Option<(GemmItem, [isize; 3])> {
        let first = *self.items.first()?;
        let step = |f: &dyn Fn(&GemmItem) -> (Buf, usize)| -> Option<isize> {
            let (buf0, at0) = f(&first);
            let d = self.items.get(1).map_or(0, |i| f(i).1 as isize - at0 as isize);
            if d < 0 {
                return None;
            }
            self.items
                .iter()
                .enumerate()
                .all(|(j, i)| {
                    let (buf, at) = f(i);
                    buf == buf0 && at as isize == at0 as isize + j as isize * d
                })
                .then_some(d)
        };
        let sa = step(&|i| (i.a.buf, i.a.offset))?;
        let sb = step(&|i| (i.b.buf, i.b.offset))?;
        let sc = step(&|i| (Buf::Scratch, i.c))?;
        Some((first, [sa, sb, sc]))
    }
}

/// What one step of a task set runs, in order: `pack`, then `gemms`, then `add`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    pub pack: Vec<Move>,
    pub gemms: Vec<Gemm>,
    pub add: Vec<Move>,
    /// Elements of scratch memory the round uses.
    pub scratch: usize,
}

/// One task set: ranges to clear, then rounds; afterwards the temporaries no
/// later set reads are released.
#[derive(Debug, Clone, Default)]
pub struct Level {
    pub zero: Vec<(TensorId, usize, usize)>,
    pub rounds: Vec<Round>,
    pub release: Vec<TensorId>,
}

/// A unit planned for an accelerator.
#[derive(Debug, Clone)]
pub struct DevicePlan {
    pub levels: Vec<Level>,
    /// Tensors written, with their stored elements, allocated (zeroed) when
    /// first written.
    pub written: Vec<(TensorId, usize)>,
    /// Flops of the GEMMs and moves, counted as [`Program::planned_flops`] does.
    pub flops: f64,
    pub gemm_calls: usize,
    pub moves: usize,
    pub operands: OperandCounts,
}

/// How the plan's GEMMs read their operand matrices.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OperandCounts {
    /// Read in place from stored tiles (no copy), and of those transposed.
    pub in_place: usize,
    pub transposed: usize,
    /// Packed into scratch by a move first.
    pub packed: usize,
    /// GEMM calls through arrays of pointers (products not at equal distances).
    pub pointer_gemms: usize,
}

/// The tile size of GPU tiled runs for ranges that declare none, unless
/// `--tile` gives one: tile 50 was 1.0–2.3× faster than 25 on the CCD residual
/// (bench/gpu/results.md); GPU GEMMs want larger tiles than the CPU's default.
pub const GPU_TILE: usize = 50;

/// Scratch elements a round may use unless `TCC_GPU_SCRATCH` (elements) says
/// otherwise: 2^27 f64, 1 GiB.
pub const SCRATCH_LIMIT: usize = 1 << 27;

/// The scratch limit: `TCC_GPU_SCRATCH` when set.
pub fn scratch_limit() -> Result<usize, CommandError> {
    match std::env::var("TCC_GPU_SCRATCH") {
        Err(_) => Ok(SCRATCH_LIMIT),
        Ok(v) => v.trim().parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
            CommandError::new(
                "E0760",
                format!("TCC_GPU_SCRATCH={v} is not a positive number of elements"),
                Some("unset it, or give the scratch elements per round, e.g. TCC_GPU_SCRATCH=134217728".into()),
            )
        }),
    }
}

/// Plans every task set of `program` for a machine with `scratch` elements of
/// scratch memory per round. Fails (E0760) where a move is more than the move
/// kernels take (over [`tile_moves::MAX_DIMS`] dimensions), so that `tcc build
/// --target cuda --tiled` says so before a run.
pub fn plan(program: &Program, scratch: usize) -> Result<DevicePlan, CommandError> {
    let sets = program.task_sets();
    let mut last_use: HashMap<TensorId, usize> = HashMap::new();
    let mut written: Vec<(TensorId, usize)> = Vec::new();
    let mut levels = Vec::with_capacity(sets.len());
    let mut ops = Vec::new();
    for (l, set) in sets.iter().enumerate() {
        ops.clear();
        for (s, c, _) in program.level_tasks(set) {
            program.device_ops(s, &c, &mut ops);
        }
        for op in &ops {
            for t in op_tensors(op) {
                last_use.insert(t, l);
            }
        }
        for &s in set {
            let t = program.written_tensor(s);
            if !written.iter().any(|&(w, _)| w == t) {
                written.push((t, program.layouts[&t].len()));
            }
        }
        levels.push(lower(&ops, scratch));
    }
    for (&t, &l) in &last_use {
        if program.hir.tensors[t].role == Role::Temporary {
            levels[l].release.push(t);
        }
    }
    for l in &mut levels {
        l.release.sort();
    }
    let mut plan =
        DevicePlan { levels, written, flops: 0.0, gemm_calls: 0, moves: 0, operands: OperandCounts::default() };
    for r in plan.levels.iter().flat_map(|l| &l.rounds) {
        for m in r.pack.iter().chain(&r.add) {
            tile_moves::check(m).map_err(|why| {
                CommandError::new(
                    "E0760",
                    format!("this program does not run tiled on the GPU: {why}"),
                    Some("run it with `tcc run --tiled` (CPU)".into()),
                )
            })?;
        }
        plan.gemm_calls += r.gemms.len();
        for g in &r.gemms {
            let o = &mut plan.operands;
            o.pointer_gemms += usize::from(g.strided().is_none());
            for (loc, layout) in g.items.iter().flat_map(|i| [(i.a, g.la), (i.b, g.lb)]) {
                if loc.buf == Buf::Scratch {
                    o.packed += 1;
                } else {
                    o.in_place += 1;
                    o.transposed += usize::from(layout.transposed);
                }
            }
        }
        plan.moves += r.pack.len() + r.add.len();
        plan.flops += r.gemms.iter().map(|g| 2.0 * (g.m * g.n * g.k * g.batch()) as f64).sum::<f64>();
        // A scatter of a GEMM's result is part of its flops; element-wise moves count.
        plan.flops +=
            r.add.iter().filter(|m| m.srcs.iter().all(|s| s.loc.buf != Buf::Scratch)).map(move_flops).sum::<f64>();
    }
    Ok(plan)
}

/// Flops of a move that is a term of its own: 2 per point of a product, 1 else.
fn move_flops(m: &Move) -> f64 {
    m.points() as f64 * if m.srcs.len() == 2 { 2.0 } else { 1.0 }
}

fn op_tensors(op: &TileOp) -> Vec<TensorId> {
    match op {
        TileOp::Zero { t, .. } => vec![*t],
        TileOp::Gett { c, a, b, .. } => vec![c.0, a.tensor, b.tensor],
        TileOp::Elementwise { c, factors, .. } => {
            std::iter::once(c.0).chain(factors.iter().map(|f| f.0.tensor)).collect()
        }
        TileOp::Fill { t, .. } => vec![*t],
    }
}

/// A GETT's dimensions in the order its matrices take them (batch, then m, n
/// and k), and the layouts of the operands that are read in place.
struct GettShape<'a> {
    batch: Vec<&'a GettDim>,
    ms: Vec<&'a GettDim>,
    ns: Vec<&'a GettDim>,
    ks: Vec<&'a GettDim>,
    /// `Some` where the operand's tile already is the matrix (no packing).
    a_in_place: Option<MatLayout>,
    b_in_place: Option<MatLayout>,
}

impl<'a> GettShape<'a> {
    /// Within each kind the dimensions run in decreasing stride of the tile
    /// they come from, so that packing reads along stride 1; the reduction
    /// dimensions in the order that lets more of the operands be read in place.
    fn of(a: &Operand, b: &Operand, dims: &'a [GettDim]) -> GettShape<'a> {
        let order = |kind: i64, key: &dyn Fn(&GettDim) -> i64| {
            let mut v: Vec<&GettDim> = dims.iter().filter(|d| d.kind == kind).collect();
            v.sort_by_key(|d| std::cmp::Reverse(key(d)));
            v
        };
        let (batch, ms, ns) = (order(0, &|d| d.sc), order(1, &|d| d.sa), order(2, &|d| d.sb));
        let (m, n) = (Self::size(&ms), Self::size(&ns));
        let k = dims.iter().filter(|d| d.kind == 3).map(|d| d.size as usize).product::<usize>();
        let mut best: Option<GettShape> = None;
        let mut best_saved = 0;
        for key in
            [&|d: &GettDim| d.sa.max(d.sb), &|d: &GettDim| d.sa, &|d: &GettDim| d.sb] as [&dyn Fn(&GettDim) -> i64; 3]
        {
            let ks = order(3, key);
            let a_in_place = if a.func.is_none() { in_place(&ms, &ks, &|d| d.sa) } else { None };
            let b_in_place = if b.func.is_none() { in_place(&ks, &ns, &|d| d.sb) } else { None };
            let saved = a_in_place.map_or(0, |_| m * k) + b_in_place.map_or(0, |_| k * n);
            if best.is_none() || saved > best_saved {
                best_saved = saved;
                best = Some(GettShape {
                    batch: batch.clone(),
                    ms: ms.clone(),
                    ns: ns.clone(),
                    ks,
                    a_in_place,
                    b_in_place,
                });
            }
        }
        best.expect("three orders tried")
    }

    fn size(v: &[&GettDim]) -> usize {
        v.iter().map(|d| d.size as usize).product()
    }

    /// (m, n, k) of the GEMM and the number of products (the batch).
    fn mnkb(&self) -> (usize, usize, usize, usize) {
        (Self::size(&self.ms), Self::size(&self.ns), Self::size(&self.ks), Self::size(&self.batch))
    }

    /// The layouts the GEMM reads A and B with.
    fn layouts(&self) -> (MatLayout, MatLayout) {
        let (_, n, k, _) = self.mnkb();
        (self.a_in_place.unwrap_or(MatLayout::packed(k)), self.b_in_place.unwrap_or(MatLayout::packed(n)))
    }

    /// Scratch elements: the packed operands and the result.
    fn scratch(&self) -> usize {
        let (m, n, k, nb) = self.mnkb();
        nb * (self.a_in_place.map_or(m * k, |_| 0) + self.b_in_place.map_or(k * n, |_| 0) + m * n)
    }
}

/// The layout of an operand read in place as the matrix of `rows` × `cols`
/// (each list outermost first), when its tile already is that matrix: the
/// dimensions of each list merge into one (each stride is the next one's times
/// its extent) and one of the two runs along stride 1.
fn in_place(rows: &[&GettDim], cols: &[&GettDim], s: &dyn Fn(&GettDim) -> i64) -> Option<MatLayout> {
    // (extent, stride of the merged dimension; None where the extent is 1).
    let merge = |v: &[&GettDim]| -> Option<(usize, Option<usize>)> {
        let (mut ext, mut inner, mut next) = (1usize, None, 0i64);
        for d in v.iter().rev().filter(|d| d.size > 1) {
            let st = s(d);
            match inner {
                None if st > 0 => inner = Some(st as usize),
                Some(_) if st == next => {}
                _ => return None,
            }
            next = st.checked_mul(d.size)?;
            ext *= d.size as usize;
        }
        Some((ext, inner))
    };
    let ((r, sr), (c, sc)) = (merge(rows)?, merge(cols)?);
    let fits = |ld: usize| ld <= i32::MAX as usize;
    if sc.is_none_or(|x| x == 1) {
        let ld = sr.unwrap_or(c.max(1));
        if ld >= c.max(1) && fits(ld) {
            return Some(MatLayout { transposed: false, ld });
        }
    }
    if sr.is_none_or(|x| x == 1) {
        let ld = sc.unwrap_or(r.max(1));
        if ld >= r.max(1) && fits(ld) {
            return Some(MatLayout { transposed: true, ld });
        }
    }
    None
}

/// A round's GETTs by GEMM: shape (m, n, k) and the layouts of A and B.
type GemmKey = (usize, usize, usize, MatLayout, MatLayout);
type Groups<'a> = BTreeMap<GemmKey, Vec<(&'a TileOp, GettShape<'a>)>>;

/// The ranges to clear and the rounds of one task set's operations.
fn lower(ops: &[TileOp], scratch: usize) -> Level {
    let mut level = Level::default();
    let mut round = Round::default();
    // The GETTs of the round being filled, by GEMM.
    let mut groups: Groups = BTreeMap::new();
    let mut used = 0usize;
    for op in ops {
        match op {
            TileOp::Zero { t, offset, len } => level.zero.push((*t, *offset, *len)),
            TileOp::Elementwise { c, sc, factors, ext, alpha, op } => round.add.push(Move {
                dst: Loc { buf: Buf::Tensor(c.0), offset: c.1 },
                sdst: sc.clone(),
                srcs: factors
                    .iter()
                    .map(|(f, sign, s)| Src { loc: f.loc(), strides: s.clone(), func: f.func, sign: *sign })
                    .collect(),
                ext: ext.clone(),
                alpha: *alpha,
                op: *op,
            }),
            // Before the ops after it: the pack moves of a round run first.
            TileOp::Fill { t, offset, len, value } => round.pack.push(Move {
                dst: Loc { buf: Buf::Tensor(*t), offset: *offset },
                sdst: vec![1],
                srcs: Vec::new(),
                ext: vec![*len],
                alpha: *value,
                op: MoveOp::Store,
            }),
            TileOp::Gett { a, b, dims, .. } => {
                let shape = GettShape::of(a, b, dims);
                let need = shape.scratch();
                if used > 0 && used + need > scratch {
                    finish_round(&mut round, &mut groups, &mut level);
                    used = 0;
                }
                used += need;
                let (m, n, k, _) = shape.mnkb();
                let (la, lb) = shape.layouts();
                groups.entry((m, n, k, la, lb)).or_default().push((op, shape));
            }
        }
    }
    finish_round(&mut round, &mut groups, &mut level);
    // Adjacent ranges of one tensor clear as one.
    level.zero.sort_by_key(|&(t, o, _)| (t, o));
    let mut merged: Vec<(TensorId, usize, usize)> = Vec::with_capacity(level.zero.len());
    for z in level.zero.drain(..) {
        match merged.last_mut() {
            Some(last) if last.0 == z.0 && last.1 + last.2 == z.1 => last.2 += z.2,
            _ => merged.push(z),
        }
    }
    level.zero = merged;
    level
}

/// Lays out the grouped GETTs of `round` in scratch (per GEMM: the packed A
/// matrices, then the packed B, then all results), adds their moves and
/// GEMMs, and starts a new round.
fn finish_round(round: &mut Round, groups: &mut Groups, level: &mut Level) {
    let mut at = 0usize;
    for (&(m, n, k, la, lb), members) in groups.iter() {
        let count = |f: &dyn Fn(&GettShape) -> bool| {
            members.iter().filter(|(_, s)| f(s)).map(|(_, s)| s.mnkb().3).sum::<usize>()
        };
        let (packed_a, packed_b, all) =
            (count(&|s| s.a_in_place.is_none()), count(&|s| s.b_in_place.is_none()), count(&|_| true));
        let (mut pa, mut pb, mut pc) = (at, at + packed_a * m * k, at + packed_a * m * k + packed_b * k * n);
        at = pc + all * m * n;
        let mut g = Gemm { m, n, k, la, lb, items: Vec::with_capacity(all) };
        for (op, shape) in members {
            let TileOp::Gett { c, a, b, alpha, .. } = op else { unreachable!("grouped GETTs only") };
            gett_moves(round, &mut g.items, *c, *a, *b, *alpha, shape, (&mut pa, &mut pb, &mut pc));
        }
        round.gemms.push(g);
    }
    round.scratch = at;
    groups.clear();
    if !round.pack.is_empty() || !round.add.is_empty() {
        level.rounds.push(std::mem::take(round));
    }
}

/// The moves and GEMM items of one GETT: an operand not read in place is
/// packed at `pa` (A as [batch, m, k]) or `pb` (B as [batch, k, n]) in
/// scratch; the result [batch, m, n] at `pc` is added into the written tile.
/// Each cursor moves past what this GETT takes.
#[allow(clippy::too_many_arguments)]
fn gett_moves(
    round: &mut Round,
    items: &mut Vec<GemmItem>,
    c: (TensorId, usize),
    a: Operand,
    b: Operand,
    alpha: f64,
    shape: &GettShape,
    (pa, pb, pc): (&mut usize, &mut usize, &mut usize),
) {
    let (m, n, k, nb) = shape.mnkb();
    let pack = |list: &[&[&GettDim]], src: Operand, s: &dyn Fn(&GettDim) -> i64, at: usize| {
        let all: Vec<&GettDim> = list.iter().flat_map(|l| l.iter().copied()).collect();
        let ext: Vec<usize> = all.iter().map(|d| d.size as usize).collect();
        Move {
            dst: Loc { buf: Buf::Scratch, offset: at },
            sdst: row_major(&ext),
            srcs: vec![Src {
                loc: src.loc(),
                strides: all.iter().map(|d| s(d) as isize).collect(),
                func: src.func,
                sign: 1.0,
            }],
            ext,
            alpha: 1.0,
            op: MoveOp::Store,
        }
    };
    let GettShape { batch, ms, ns, ks, .. } = shape;
    if shape.a_in_place.is_none() {
        round.pack.push(pack(&[batch, ms, ks], a, &|d| d.sa, *pa));
    }
    if shape.b_in_place.is_none() {
        round.pack.push(pack(&[batch, ks, ns], b, &|d| d.sb, *pb));
    }
    // One GEMM item per point of the batch dimensions.
    let bext: Vec<usize> = batch.iter().map(|d| d.size as usize).collect();
    let mut j = 0;
    super::tensor::for_each_local(&bext, |i| {
        let off = |s: &dyn Fn(&GettDim) -> i64| {
            i.iter().zip(batch.iter()).map(|(&x, d)| x as i64 * s(d)).sum::<i64>() as usize
        };
        let a_at = match shape.a_in_place {
            Some(_) => Loc { buf: a.loc().buf, offset: a.offset + off(&|d| d.sa) },
            None => Loc { buf: Buf::Scratch, offset: std::mem::replace(pa, *pa + m * k) },
        };
        let b_at = match shape.b_in_place {
            Some(_) => Loc { buf: b.loc().buf, offset: b.offset + off(&|d| d.sb) },
            None => Loc { buf: Buf::Scratch, offset: std::mem::replace(pb, *pb + k * n) },
        };
        items.push(GemmItem { a: a_at, b: b_at, c: *pc + j * m * n });
        j += 1;
    });
    let all: Vec<&GettDim> = batch.iter().chain(ms.iter()).chain(ns.iter()).copied().collect();
    let ext: Vec<usize> = all.iter().map(|d| d.size as usize).collect();
    round.add.push(Move {
        dst: Loc { buf: Buf::Tensor(c.0), offset: c.1 },
        sdst: all.iter().map(|d| d.sc as isize).collect(),
        srcs: vec![Src {
            loc: Loc { buf: Buf::Scratch, offset: *pc },
            strides: row_major(&ext),
            func: None,
            sign: 1.0,
        }],
        ext,
        alpha,
        op: MoveOp::Add,
    });
    *pc += nb * m * n;
}

/// Row-major strides of a box.
fn row_major(ext: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; ext.len()];
    let mut acc = 1isize;
    for d in (0..ext.len()).rev() {
        s[d] = acc;
        acc *= ext[d] as isize;
    }
    s
}

/// What runs a [`DevicePlan`]: buffers per tensor and one scratch buffer per
/// round, all of `f64`.
pub trait TileMachine {
    /// Makes a zeroed buffer of `len` elements for `t`.
    fn alloc(&mut self, t: TensorId, len: usize) -> Result<(), String>;
    fn upload(&mut self, t: TensorId, data: &[f64]) -> Result<(), String>;
    fn download(&mut self, t: TensorId, out: &mut [f64]) -> Result<(), String>;
    fn release(&mut self, t: TensorId);
    fn zero(&mut self, t: TensorId, offset: usize, len: usize) -> Result<(), String>;
    fn round(&mut self, r: &Round) -> Result<(), String>;
    /// Waits until everything issued has run.
    fn finish(&mut self) -> Result<(), String>;
    /// Seconds the host spent describing moves for the machine (encoding
    /// them) and the words it uploaded, since the last call; zero where the
    /// moves need no description.
    fn take_host_work(&mut self) -> (f64, usize) {
        (0.0, 0)
    }
}

/// What a run on a machine measured.
#[derive(Debug, Clone, Default)]
pub struct DeviceStats {
    /// Seconds of the fastest repetition (from the first clear to the last
    /// round's end; inputs already on the machine).
    pub run_s: f64,
    pub flops: f64,
    pub gemm_calls: usize,
    pub moves: usize,
    pub operands: OperandCounts,
    pub rounds: usize,
    /// Of the fastest repetition: seconds spent encoding moves on the host, and
    /// the words of moves uploaded ([`TileMachine::take_host_work`]).
    pub encode_s: f64,
    pub move_words: usize,
}

/// Runs `plan` of `program` on `machine` `repeat` times (at least once) on
/// `inputs`; the outputs of the last run.
pub fn run_on(
    program: &Program,
    plan: &DevicePlan,
    inputs: &HashMap<TensorId, TiledTensor>,
    machine: &mut dyn TileMachine,
    repeat: usize,
) -> Result<(HashMap<TensorId, TiledTensor>, DeviceStats), CommandError> {
    let dev = |e: String| CommandError::new("E0721", format!("CUDA: {e}"), None);
    for (&t, v) in inputs {
        machine.upload(t, &v.data).map_err(dev)?;
    }
    let mut best = f64::INFINITY;
    let mut host_work = (0.0, 0);
    for _ in 0..repeat.max(1) {
        machine.finish().map_err(dev)?;
        machine.take_host_work();
        let t0 = Instant::now();
        for &(t, len) in &plan.written {
            machine.alloc(t, len).map_err(dev)?;
        }
        for level in &plan.levels {
            for &(t, offset, len) in &level.zero {
                machine.zero(t, offset, len).map_err(dev)?;
            }
            for r in &level.rounds {
                machine.round(r).map_err(dev)?;
            }
            for &t in &level.release {
                machine.release(t);
            }
        }
        machine.finish().map_err(dev)?;
        let run_s = t0.elapsed().as_secs_f64();
        let work = machine.take_host_work();
        if run_s < best {
            (best, host_work) = (run_s, work);
        }
    }
    let mut outputs = HashMap::new();
    for &(t, _) in &plan.written {
        if program.hir.tensors[t].role == Role::Output {
            let mut v = TiledTensor::zeros(program.layouts[&t].clone()).map_err(|e| {
                crate::run::out_of_memory(format!("cannot allocate {} elements for `{}`", e.elements, e.name))
            })?;
            machine.download(t, &mut v.data).map_err(dev)?;
            outputs.insert(t, v);
        }
    }
    let stats = DeviceStats {
        run_s: best,
        flops: plan.flops,
        gemm_calls: plan.gemm_calls,
        moves: plan.moves,
        operands: plan.operands,
        rounds: plan.levels.iter().map(|l| l.rounds.len()).sum(),
        encode_s: host_work.0,
        move_words: host_work.1,
    };
    Ok((outputs, stats))
}

/// Tensor buffers and a round's scratch in host memory.
#[derive(Default)]
pub struct HostBuffers {
    pub bufs: HashMap<TensorId, Vec<f64>>,
    pub scratch: Vec<f64>,
}

/// A machine in host memory that runs moves its own way (plain loops here, the
/// generated kernel in `codegen::nvptx::tile_moves`); GEMMs are [`host_gemm`].
pub trait HostRounds {
    fn mem(&mut self) -> &mut HostBuffers;
    /// Runs `moves` (reads and writes may share a buffer only where they do not
    /// overlap, as in every plan).
    fn moves(&mut self, moves: &[Move]) -> Result<(), String>;
}

impl<M: HostRounds> TileMachine for M {
    fn alloc(&mut self, t: TensorId, len: usize) -> Result<(), String> {
        self.mem().bufs.insert(t, vec![0.0; len]);
        Ok(())
    }
    fn upload(&mut self, t: TensorId, data: &[f64]) -> Result<(), String> {
        self.mem().bufs.insert(t, data.to_vec());
        Ok(())
    }
    fn download(&mut self, t: TensorId, out: &mut [f64]) -> Result<(), String> {
        out.copy_from_slice(self.mem().bufs.get(&t).ok_or("an output is not on the machine")?);
        Ok(())
    }
    fn release(&mut self, t: TensorId) {
        self.mem().bufs.remove(&t);
    }
    fn zero(&mut self, t: TensorId, offset: usize, len: usize) -> Result<(), String> {
        let b = self.mem().bufs.get_mut(&t).ok_or("a cleared tensor is not on the machine")?;
        b[offset..offset + len].fill(0.0);
        Ok(())
    }
    fn round(&mut self, r: &Round) -> Result<(), String> {
        // NaN, so that a GEMM reading scratch no move wrote shows in the outputs.
        self.mem().scratch = vec![f64::NAN; r.scratch];
        self.moves(&r.pack)?;
        for g in &r.gemms {
            host_gemm(self.mem(), g)?;
        }
        self.moves(&r.add)
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// The reference machine: moves and GEMMs as plain loops.
#[derive(Default)]
pub struct HostMachine {
    mem: HostBuffers,
}

impl HostMachine {
    /// Runs one move (reads first, then writes).
    fn apply(&mut self, m: &Move) -> Result<(), String> {
        let mut vals = Vec::with_capacity(m.points());
        let mut offs = Vec::with_capacity(m.points());
        let mem = &self.mem;
        let srcs: Vec<(&Vec<f64>, &Src)> = m
            .srcs
            .iter()
            .map(|s| {
                let b = match s.loc.buf {
                    Buf::Scratch => &mem.scratch,
                    Buf::Tensor(t) => mem.bufs.get(&t).ok_or("a source is not on the machine")?,
                };
                Ok((b, s))
            })
            .collect::<Result<_, String>>()?;
        super::tensor::for_each_local(&m.ext, |i| {
            let at = |base: usize, s: &[isize]| {
                (base as isize + i.iter().zip(s).map(|(&x, &st)| x as isize * st).sum::<isize>()) as usize
            };
            let x = |(b, s): &(&Vec<f64>, &Src)| s.value(b[at(s.loc.offset, &s.strides)]);
            vals.push(match m.op {
                MoveOp::Select(cmp) => {
                    let [a, b, x1, x2] = [0, 1, 2, 3].map(|j| x(&srcs[j]));
                    if cmp.holds(a, b) {
                        x1
                    } else {
                        x2
                    }
                }
                _ => srcs.iter().fold(m.alpha, |v, s| v * x(s)),
            });
            offs.push(at(m.dst.offset, &m.sdst));
        });
        let dst = match m.dst.buf {
            Buf::Scratch => &mut self.mem.scratch,
            Buf::Tensor(t) => self.mem.bufs.get_mut(&t).ok_or("a written tensor is not on the machine")?,
        };
        for (o, v) in offs.into_iter().zip(vals) {
            let x = dst.get_mut(o).ok_or("a move writes outside its buffer")?;
            *x = m.op.write(*x, v);
        }
        Ok(())
    }
}

impl HostRounds for HostMachine {
    fn mem(&mut self) -> &mut HostBuffers {
        &mut self.mem
    }
    fn moves(&mut self, moves: &[Move]) -> Result<(), String> {
        moves.iter().try_for_each(|m| self.apply(m))
    }
}

/// A [`Gemm`] on host memory (each result overwritten in scratch).
pub fn host_gemm(mem: &mut HostBuffers, g: &Gemm) -> Result<(), String> {
    let (m, n, k) = (g.m, g.n, g.k);
    let mut c = vec![0.0; m * n];
    for item in &g.items {
        let buf = |l: &Loc| -> Result<&[f64], String> {
            match l.buf {
                Buf::Scratch => Ok(&mem.scratch[l.offset..]),
                Buf::Tensor(t) => mem
                    .bufs
                    .get(&t)
                    .map(|b| &b[l.offset..])
                    .ok_or_else(|| "a GEMM operand is not on the machine".into()),
            }
        };
        let (a, b) = (buf(&item.a)?, buf(&item.b)?);
        let read = |x: &[f64], at: usize| x.get(at).copied().ok_or("a GEMM reads outside its buffer");
        for i in 0..m {
            for q in 0..n {
                let mut acc = 0.0;
                for p in 0..k {
                    acc += read(a, g.la.at(i, p))? * read(b, g.lb.at(p, q))?;
                }
                c[i * n + q] = acc;
            }
        }
        mem.scratch.get_mut(item.c..item.c + m * n).ok_or("a GEMM writes outside scratch")?.copy_from_slice(&c);
    }
    Ok(())
}
