//! Steps of a unit, the candidate grids and mappings of a step, their exact costs,
//! and the greedy walk over the steps that picks one mapping per step.

use std::collections::HashMap;

use crate::sema::hir::{Factor, Hir, IndexId, Role, TensorId, UnitId};
use crate::tir::graph::factor_label;

use super::bounds::{lower_bound, BoundIndex};
use super::layout::{max_gather_recv, Layout};
use super::{
    CommOp, CommandError, DimClass, GridDim, OpKind, OperandPlan, Phase, Plan, PlanNames, PlanOptions, PlanStep,
    PlanTensor, StepCost, Strategy, Totals,
};

/// Largest number of a step's indices considered for grid dimensions (the largest
/// extents are kept).
const MAX_SEARCH_INDICES: usize = 8;
const MAX_GRID_DIMS: usize = 4;

#[derive(Debug, Clone)]
pub(crate) struct Operand {
    pub tensor: PlanTensor,
    pub idx: Vec<IndexId>,
    pub shape: Vec<usize>,
    pub elem: usize,
    pub role: Role,
}

#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub stmt: usize,
    pub term: usize,
    pub a: Operand,
    pub b: Option<Operand>,
    pub c: Operand,
    pub accumulate: bool,
    /// Distinct indices of the step: C's, then A's, then B's.
    pub indices: Vec<IndexId>,
    pub ext: Vec<usize>,
    pub summing: bool,
}

impl Operand {
    /// The stored tensor (None: opaque, computed where needed).
    pub fn key(&self) -> Option<PlanTensor> {
        self.tensor.stored()
    }
}

impl Spec {
    /// `C[i,j] += A[i,k] * B[k,j]`.
    pub(crate) fn text(&self, names: &PlanNames) -> String {
        let op = |o: &Operand| names.tensor_ref(o.tensor, &o.idx);
        let rhs = match &self.b {
            Some(b) => format!("{} * {}", op(&self.a), op(b)),
            None => op(&self.a),
        };
        format!("{} {} {}", op(&self.c), if self.accumulate { "+=" } else { "=" }, rhs)
    }

    pub(crate) fn ext_of(&self, x: IndexId) -> usize {
        self.ext[self.indices.iter().position(|&y| y == x).unwrap()]
    }

    fn class(&self, x: IndexId) -> DimClass {
        let a = self.a.idx.contains(&x);
        let b = self.b.as_ref().is_some_and(|b| b.idx.contains(&x));
        let c = self.c.idx.contains(&x);
        match (a, b, c) {
            (true, true, true) => DimClass::Batch,
            (true, false, true) => DimClass::FreeLeft,
            (false, true, true) => DimClass::FreeRight,
            (true, true, false) => DimClass::Contracted,
            (true, false, false) => DimClass::SummedLeft,
            (false, true, false) => DimClass::SummedRight,
            _ => DimClass::Free,
        }
    }

    fn flops_total(&self) -> f64 {
        (if self.summing { 2.0 } else { 1.0 }) * self.ext.iter().map(|&n| n as f64).product::<f64>()
    }
}

fn operand(hir: &Hir, f: &Factor, names: &mut PlanNames) -> Operand {
    match f {
        Factor::Tensor(r) => {
            let t = &hir.tensors[r.tensor];
            Operand {
                tensor: PlanTensor::Tensor(r.tensor),
                idx: r.indices.clone(),
                shape: hir.shape(r.tensor),
                elem: t.elem.size_bytes(),
                role: t.role,
            }
        }
        _ => {
            let idx = f.indices().to_vec();
            names.opaque.push(factor_label(hir, f));
            Operand {
                tensor: PlanTensor::Opaque(names.opaque.len() as u32 - 1),
                shape: idx.iter().map(|&i| hir.index_size(i)).collect(),
                idx,
                elem: 8,
                role: Role::Temporary,
            }
        }
    }
}

/// The steps of a unit of the optimized program, and notes on what was skipped;
/// the labels of opaque operands go to `names`.
pub(crate) fn build_steps(hir: &Hir, u: UnitId, names: &mut PlanNames) -> (Vec<Spec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut notes = Vec::new();
    let mut fresh = 0u32;
    for (si, st) in hir.units[u].stmts.iter().enumerate() {
        let lt = &hir.tensors[st.lhs.tensor];
        let c = Operand {
            tensor: PlanTensor::Tensor(st.lhs.tensor),
            idx: st.lhs.indices.clone(),
            shape: hir.shape(st.lhs.tensor),
            elem: lt.elem.size_bytes(),
            role: lt.role,
        };
        for (ti, term) in st.rhs.terms.iter().enumerate() {
            let accumulate = st.accumulate || ti > 0;
            let ops: Vec<Operand> = term.factors.iter().map(|f| operand(hir, f, names)).collect();
            if ops.is_empty() {
                notes.push(format!("stmt {si} term {ti}: a constant term, filled locally (no communication)"));
                continue;
            }
            if term.factors.iter().any(|f| !matches!(f, Factor::Tensor(_))) {
                notes.push(format!(
                    "stmt {si} term {ti}: calls and parenthesised sums are opaque operands, computed where needed; the tensors they read are not moved by the plan"
                ));
            }
            if ops.len() > 2 {
                notes.push(format!(
                    "stmt {si} term {ti}: {} factors left unordered by the optimizer, planned as a left-to-right chain",
                    ops.len()
                ));
            }
            // Left-to-right chain of binary steps.
            let mut acc = ops[0].clone();
            let mut k = 1;
            loop {
                let last = k + 1 >= ops.len();
                let b = ops.get(k).cloned();
                let out = if last {
                    c.clone()
                } else {
                    let later: Vec<IndexId> =
                        ops[k + 1..].iter().flat_map(|o| o.idx.clone()).chain(c.idx.clone()).collect();
                    let mut keep: Vec<IndexId> = Vec::new();
                    for &x in acc.idx.iter().chain(b.as_ref().map(|b| &b.idx).into_iter().flatten()) {
                        if later.contains(&x) && !keep.contains(&x) {
                            keep.push(x);
                        }
                    }
                    let tensor = PlanTensor::Chain(fresh);
                    fresh += 1;
                    Operand {
                        tensor,
                        shape: keep.iter().map(|&i| hir.index_size(i)).collect(),
                        idx: keep,
                        elem: c.elem,
                        role: Role::Temporary,
                    }
                };
                let mut indices: Vec<IndexId> = Vec::new();
                for &x in out.idx.iter().chain(&acc.idx).chain(b.as_ref().map(|b| &b.idx).into_iter().flatten()) {
                    if !indices.contains(&x) {
                        indices.push(x);
                    }
                }
                let summing = indices.iter().any(|x| !out.idx.contains(x));
                let ext = indices.iter().map(|&i| hir.index_size(i)).collect();
                specs.push(Spec {
                    stmt: si,
                    term: ti,
                    a: acc.clone(),
                    b,
                    c: out.clone(),
                    accumulate: last && accumulate,
                    indices,
                    ext,
                    summing,
                });
                if last {
                    break;
                }
                acc = out;
                k += 1;
            }
        }
    }
    (specs, notes)
}

/// Ordered factorizations of `p` into at most `maxd` factors ≥ 2 (`[]` for p = 1).
pub fn factorizations(p: usize, maxd: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    if p == 1 {
        out.push(Vec::new());
    }
    if maxd == 0 || p == 1 {
        return out;
    }
    for d in 2..=p {
        if p.is_multiple_of(d) {
            for mut rest in factorizations(p / d, maxd - 1) {
                rest.insert(0, d);
                out.push(rest);
            }
        }
    }
    out
}

/// One mapping of a step onto a grid.
#[derive(Debug, Clone)]
pub(crate) struct Cand {
    pub grid: Vec<usize>,
    /// Per grid dimension: the index it splits, or None (idle).
    pub assign: Vec<Option<IndexId>>,
}

/// Stationary (fine) and gathered (coarse) layouts of an operand, and the grid
/// dimensions it is gathered along.
fn operand_layouts(op: &Operand, cand: &Cand) -> (Layout, Layout, Vec<usize>) {
    let idle: Vec<usize> = (0..cand.grid.len()).filter(|&g| cand.assign[g].is_none()).collect();
    let mut fine = Layout { grid: cand.grid.clone(), splits: vec![Vec::new(); op.shape.len()], idle };
    for (g, a) in cand.assign.iter().enumerate() {
        if let Some(x) = a {
            if let Some(d) = op.idx.iter().position(|y| y == x) {
                fine.splits[d].push(g);
            }
        }
    }
    let mut along = Vec::new();
    if !op.shape.is_empty() {
        for (g, a) in cand.assign.iter().enumerate() {
            if let Some(x) = a {
                if !op.idx.contains(x) {
                    let d = (0..op.shape.len())
                        .max_by_key(|&d| (fine.max_extent(d, op.shape[d]), std::cmp::Reverse(d)))
                        .unwrap();
                    fine.splits[d].push(g);
                    along.push(g);
                }
            }
        }
    }
    let mut coarse = fine.clone();
    for s in &mut coarse.splits {
        s.retain(|g| !along.contains(g));
    }
    (fine, coarse, along)
}

/// A candidate evaluated without redistributions.
#[derive(Debug, Clone)]
pub(crate) struct Eval {
    pub cand: Cand,
    pub panels: usize,
    pub a: (Layout, Layout),
    pub b: Option<(Layout, Layout)>,
    /// (partial, final) layouts of the result.
    pub c: (Layout, Layout),
    pub ops: Vec<CommOp>,
    pub flops_max: f64,
    pub mem_bytes: u64,
    pub time: f64,
    pub active: usize,
}

/// Message rounds of a collective among `q` ranks: ⌈log2 q⌉ (recursive doubling /
/// halving, or a binomial tree for a reduce).
pub(crate) fn rounds(q: u64) -> u64 {
    if q <= 1 {
        0
    } else {
        64 - (q - 1).leading_zeros() as u64
    }
}

fn gather_op(
    op: &Operand,
    fine: &Layout,
    coarse: &Layout,
    along: &[usize],
    panels: usize,
    net: &super::Network,
) -> CommOp {
    let q: u64 = along.iter().map(|&g| fine.grid[g] as u64).product();
    // Ring: a rank receives the fibre's blocks but its own, forwards all but its
    // successor's; both maxima are the largest `coarse − fine` over the fibre.
    let recv = max_gather_recv(&op.shape, fine, coarse);
    let sent = if q > 1 { recv } else { 0 };
    let msgs = rounds(q) * panels as u64;
    let kind = OpKind::AllGather;
    let mut c = CommOp::moving(
        kind,
        Phase::Before,
        op.tensor,
        op.shape.clone(),
        along.to_vec(),
        (fine.clone(), coarse.clone()),
        op.elem,
    );
    (c.panels, c.recv_max, c.sent_max, c.moved_max, c.msgs_max) = (panels, recv, sent, recv, msgs);
    c.time = net.alpha * msgs as f64 + net.beta * (op.elem as u64 * recv.max(sent)) as f64;
    c
}

fn reduce_op(c: &Operand, partial: &Layout, fin: &Layout, along: &[usize], net: &super::Network) -> CommOp {
    let q: u64 = along.iter().map(|&g| partial.grid[g] as u64).product();
    let (kind, sent, recv) = if c.shape.is_empty() {
        let b = partial.max_block(&c.shape);
        (OpKind::Reduce, b, (q - 1) * b)
    } else {
        let w = max_gather_recv(&c.shape, fin, partial);
        (OpKind::ReduceScatter, w, w)
    };
    let mut op = CommOp::moving(
        kind,
        Phase::After,
        c.tensor,
        c.shape.clone(),
        along.to_vec(),
        (partial.clone(), fin.clone()),
        c.elem,
    );
    (op.recv_max, op.sent_max, op.moved_max, op.msgs_max) = (recv, sent, sent, rounds(q));
    op.time = net.alpha * rounds(q) as f64 + net.beta * (c.elem as u64 * recv.max(sent)) as f64;
    op
}

/// Evaluates a candidate; `None` when it does not fit in `mem_limit` bytes (with
/// `resident` bytes of other live tensors) at any number of panels.
pub(crate) fn evaluate(
    spec: &Spec,
    cand: &Cand,
    net: &super::Network,
    mem_limit: Option<u64>,
    resident: u64,
) -> Option<Eval> {
    let (af, ac, aal) = operand_layouts(&spec.a, cand);
    let bl = spec.b.as_ref().map(|b| operand_layouts(b, cand));
    // The result: partial layout = primary splits only; final adds the reductions.
    let (cf, cp, cal) = operand_layouts(&spec.c, cand);
    let idle: Vec<usize> = (0..cand.grid.len()).filter(|&g| cand.assign[g].is_none()).collect();
    let reduce_dims: Vec<usize> =
        (0..cand.grid.len()).filter(|&g| cand.assign[g].is_some_and(|x| !spec.c.idx.contains(&x))).collect();
    let (c_partial, c_final, c_along) = if spec.c.shape.is_empty() {
        let p = Layout { grid: cand.grid.clone(), splits: Vec::new(), idle: idle.clone() };
        let mut f = p.clone();
        f.idle.extend(reduce_dims.iter().copied());
        f.idle.sort_unstable();
        (p, f, reduce_dims.clone())
    } else {
        (cp, cf, cal)
    };
    // Ranks with a non-empty block of the iteration space.
    let active: usize = (0..cand.grid.len())
        .filter_map(|g| cand.assign[g].map(|x| (g, spec.ext_of(x))))
        .map(|(g, n)| if n == 0 { 0 } else { n.div_ceil(n.div_ceil(cand.grid[g])) })
        .product();
    // Local work: the busiest rank holds the first block of every split index.
    let mut local = vec![0usize; spec.indices.len()];
    for (k, &x) in spec.indices.iter().enumerate() {
        let n = spec.ext[k];
        local[k] = match cand.assign.iter().position(|a| *a == Some(x)) {
            Some(g) => n.div_ceil(cand.grid[g]),
            None => n,
        };
    }
    let flops_max = (if spec.summing { 2.0 } else { 1.0 }) * local.iter().map(|&n| n as f64).product::<f64>();
    // Panels run over the largest contracted index (in A and B, summed).
    let panel_idx = spec
        .indices
        .iter()
        .enumerate()
        .filter(|(_, x)| spec.class(**x) == DimClass::Contracted)
        .max_by_key(|(k, _)| local[*k])
        .map(|(k, &x)| (x, local[k]));
    let elem = spec.c.elem as u64;
    let buffer = |op: &Operand, coarse: &Layout, along: &[usize], s: usize| -> u64 {
        if along.is_empty() {
            return 0;
        }
        (0..op.shape.len())
            .map(|d| {
                let e = coarse.max_extent(d, op.shape[d]) as u64;
                match panel_idx {
                    Some((x, _)) if op.idx.get(d) == Some(&x) => e.div_ceil(s as u64),
                    _ => e,
                }
            })
            .product()
    };
    let c_reduce = !c_along.is_empty();
    let mem_at = |s: usize| -> u64 {
        let mut w = spec.a.elem as u64 * (af.max_block(&spec.a.shape) + buffer(&spec.a, &ac, &aal, s));
        if let (Some(b), Some((bf, bc, bal))) = (&spec.b, &bl) {
            w += b.elem as u64 * (bf.max_block(&b.shape) + buffer(b, bc, bal, s));
        }
        w += elem * c_partial.max_block(&spec.c.shape);
        if c_reduce {
            w += elem * c_final.max_block(&spec.c.shape);
        }
        w + resident
    };
    let mut panels = 1usize;
    if let Some(limit) = mem_limit {
        if mem_at(1) > limit {
            let max_s = panel_idx.map(|(_, l)| l.max(1)).unwrap_or(1);
            let mut s = 2;
            let mut found = None;
            while s < max_s {
                if mem_at(s) <= limit {
                    found = Some(s);
                    break;
                }
                s *= 2;
            }
            if found.is_none() && max_s > 1 && mem_at(max_s) <= limit {
                found = Some(max_s);
            }
            panels = found?;
        }
    }
    let mut ops = Vec::new();
    if !aal.is_empty() {
        ops.push(gather_op(&spec.a, &af, &ac, &aal, panels, net));
    }
    if let (Some(b), Some((bf, bc, bal))) = (&spec.b, &bl) {
        if !bal.is_empty() {
            ops.push(gather_op(b, bf, bc, bal, panels, net));
        }
    }
    if c_reduce {
        ops.push(reduce_op(&spec.c, &c_partial, &c_final, &c_along, net));
    }
    let time = net.gamma * flops_max + ops.iter().map(|o| o.time).sum::<f64>();
    let mem_bytes = mem_at(panels);
    Some(Eval {
        cand: cand.clone(),
        panels,
        a: (af, ac),
        b: bl.map(|(f, c, _)| (f, c)),
        c: (c_partial, c_final),
        ops,
        flops_max,
        mem_bytes,
        time,
        active,
    })
}

/// Every candidate mapping of a step on `p` ranks.
pub(crate) fn candidates(spec: &Spec, p: usize) -> Vec<Cand> {
    // Slots: the step's indices (at most MAX_SEARCH_INDICES, the largest), then idle.
    let mut order: Vec<usize> = (0..spec.indices.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(spec.ext[k]));
    order.truncate(MAX_SEARCH_INDICES);
    order.sort_unstable();
    let mut slots: Vec<Option<IndexId>> = order.iter().map(|&k| Some(spec.indices[k])).collect();
    slots.push(None);
    let mut out = Vec::new();
    for f in factorizations(p, MAX_GRID_DIMS) {
        let d = f.len();
        if d > slots.len() {
            continue;
        }
        // Combinations of d slots in increasing order.
        let mut comb: Vec<usize> = (0..d).collect();
        loop {
            let assign: Vec<Option<IndexId>> = comb.iter().map(|&s| slots[s]).collect();
            let ok = assign.iter().zip(&f).all(|(a, &pg)| match a {
                Some(x) => pg <= spec.ext_of(*x),
                None => true,
            });
            if ok {
                out.push(Cand { grid: f.clone(), assign });
            }
            // next combination
            let mut i = d;
            loop {
                if i == 0 {
                    break;
                }
                i -= 1;
                if comb[i] < slots.len() - d + i {
                    comb[i] += 1;
                    for j in i + 1..d {
                        comb[j] = comb[j - 1] + 1;
                    }
                    i = usize::MAX;
                    break;
                }
            }
            if i != usize::MAX {
                break;
            }
        }
    }
    out
}

/// The naive mapping: a 1D grid splitting the result's first index.
pub(crate) fn naive_candidate(spec: &Spec, p: usize) -> Cand {
    if p == 1 {
        return Cand { grid: Vec::new(), assign: Vec::new() };
    }
    let x = spec.c.idx.first().or(spec.a.idx.first()).copied();
    Cand { grid: vec![p], assign: vec![x] }
}

/// A mapping of a step with its exact redistributions, as the re-ranking weighs it.
struct Choice {
    /// Predicted seconds, lookahead included.
    time: f64,
    /// Words moved by the busiest rank, per op, summed.
    words: u64,
    eval: Eval,
    /// Redistributions (all-to-all) before the step, and the one after it.
    pre: Vec<CommOp>,
    post: Vec<CommOp>,
}

/// A live tensor: its current layout, shape and element size.
struct Live {
    layout: Layout,
    shape: Vec<usize>,
    elem: usize,
}

type State = HashMap<PlanTensor, Live>;

fn alltoall(
    tensor: PlanTensor,
    shape: &[usize],
    elem: usize,
    from: &Layout,
    to: &Layout,
    phase: Phase,
    net: &super::Network,
) -> Option<CommOp> {
    let p = to.procs();
    let (mut recv_max, mut sent_max, mut total) = (0u64, 0u64, 0u64);
    let mut op = CommOp::moving(
        OpKind::AllToAll,
        phase,
        tensor,
        shape.to_vec(),
        (0..to.grid.len()).collect(),
        (from.clone(), to.clone()),
        elem,
    );
    let mut active = 0u64;
    for r in 0..p {
        let w = op.rank_words(r);
        recv_max = recv_max.max(w.recv);
        sent_max = sent_max.max(w.sent);
        total += w.recv;
        if from.block(shape, r).is_some() || to.block(shape, r).is_some() {
            active += 1;
        }
    }
    if total == 0 && sent_max == 0 {
        return None;
    }
    op.recv_max = recv_max;
    op.sent_max = sent_max;
    op.moved_max = recv_max;
    op.recv_total = total;
    op.msgs_max = active.saturating_sub(1);
    op.time = net.alpha * op.msgs_max as f64
        + net.beta * net.alltoall_congestion() * (elem as u64 * recv_max.max(sent_max)) as f64;
    Some(op)
}

/// The mapping that keeps an operand where it is: the grid of its current layout,
/// each grid dimension assigned to the index whose dimension it splits first.
fn inherit(spec: &Spec, o: &Operand, cur: &Layout) -> Option<Cand> {
    if cur.grid.len() > MAX_GRID_DIMS {
        return None;
    }
    let mut assign = Vec::new();
    for g in 0..cur.grid.len() {
        if cur.idle.contains(&g) {
            assign.push(None);
            continue;
        }
        let d = cur.splits.iter().position(|s| s.first() == Some(&g))?;
        let x = *o.idx.get(d)?;
        if assign.contains(&Some(x)) || cur.grid[g] > spec.ext_of(x) {
            return None;
        }
        assign.push(Some(x));
    }
    Some(Cand { grid: cur.grid.clone(), assign })
}

/// A cheap upper estimate of the redistributions a mapping needs (exact ones are
/// computed for the shortlist only): nothing when the layout is already right,
/// else the whole block of the busiest rank.
fn redistribution_estimate(spec: &Spec, e: &Eval, state: &State, net: &super::Network) -> f64 {
    let cost = |cur: &Layout, need: &Layout, shape: &[usize], elem: usize| -> f64 {
        if cur == need {
            0.0
        } else {
            net.alpha * (need.procs() as f64 - 1.0)
                + net.beta * net.alltoall_congestion() * (elem as u64 * need.max_block(shape)) as f64
        }
    };
    let mut t = 0.0;
    for (o, need) in std::iter::once((&spec.a, &e.a.0)).chain(spec.b.as_ref().zip(e.b.as_ref().map(|b| &b.0))) {
        if let Some(cur) = o.key().and_then(|k| state.get(&k)) {
            t += cost(&cur.layout, need, &o.shape, o.elem);
        }
    }
    if spec.accumulate {
        if let Some(cur) = spec.c.key().and_then(|k| state.get(&k)) {
            t += cost(&e.c.1, &cur.layout, &spec.c.shape, spec.c.elem);
        }
    }
    t
}

/// The estimated cost of moving this step's result before its consumer when the
/// result is split along a dimension that the consumer sums over.
/// A heuristic only (not part of the reported cost): the estimated redistribution,
/// divided by how many steps away it is, so that splits that survive longer win ties.
fn lookahead(spec: &Spec, e: &Eval, summed: &Option<Vec<Option<usize>>>, net: &super::Network) -> f64 {
    let Some(summed) = summed else { return 0.0 };
    let fin = &e.c.1;
    let near = fin
        .splits
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .filter_map(|(d, _)| summed.get(d).copied().flatten())
        .min();
    let Some(dist) = near else { return 0.0 };
    (net.alpha * (fin.procs() as f64 - 1.0)
        + net.beta * net.alltoall_congestion() * (spec.c.elem as u64 * fin.max_block(&spec.c.shape)) as f64)
        / dist as f64
}

fn mem_limit_of(opts: &PlanOptions) -> Option<u64> {
    if opts.strategy == Strategy::Naive {
        None
    } else {
        opts.mem_per_rank
    }
}

/// Plans every unit in `units` of the optimized program `opt`.
pub fn plan_units(opt: &Hir, units: &[UnitId], opts: &PlanOptions) -> Result<Vec<Plan>, CommandError> {
    units.iter().map(|&u| plan_unit(opt, u, opts)).collect()
}

/// Plans one unit of the optimized program (`tcc::tir::optimize(&hir).0`).
pub fn plan_unit(opt: &Hir, u: UnitId, opts: &PlanOptions) -> Result<Plan, CommandError> {
    let p = opts.procs.max(1);
    let net = &opts.network;
    net.check_procs(p).map_err(|m| CommandError {
        code: "E0802",
        message: m,
        hint: Some("use fewer --procs or a larger network".into()),
    })?;
    let mut names = PlanNames::new(opt);
    let (specs, mut notes) = build_steps(opt, u, &mut names);
    let mut state: State = HashMap::new();
    let mut initial = initial_layouts(opt, u, opts, &mut state, &mut notes);
    let last_read = last_reads(&specs);
    let consumer_summed = consumer_summed(&specs);
    let mut steps = Vec::new();
    let mut rank_all = vec![0u64; p];
    let mut rank_step = vec![0u64; p];
    for (i, spec) in specs.iter().enumerate() {
        let involved: Vec<PlanTensor> = std::iter::once(&spec.a)
            .chain(spec.b.as_ref())
            .chain(std::iter::once(&spec.c))
            .filter_map(|o| o.key())
            .collect();
        let resident: u64 = state
            .iter()
            .filter(|(k, _)| !involved.contains(k))
            .map(|(_, l)| l.layout.max_block(&l.shape) * l.elem as u64)
            .sum();
        let evals = shortlist(spec, opts, &state, &consumer_summed[i], resident);
        if evals.is_empty() {
            return Err(does_not_fit(spec, &names, i, opts, resident));
        }
        let Choice { eval: e, pre, post, .. } = choose(spec, evals, &state, &consumer_summed[i], net);
        update_state(spec, &e, i, &last_read, &mut state, &mut initial);
        let mut ops: Vec<CommOp> = pre;
        ops.extend(e.ops.iter().cloned());
        ops.extend(post);
        let words = exact_words(&mut ops, p);
        for r in 0..p {
            rank_all[r] += words.all[r];
            rank_step[r] += words.step[r];
        }
        steps.push(plan_step(spec, e, ops, &words, opts));
    }
    let totals = totals(&steps, &rank_all, &rank_step);
    Ok(Plan {
        unit: opt.units[u].name.clone(),
        procs: p,
        network: net.clone(),
        mem_per_rank: opts.mem_per_rank,
        strategy: opts.strategy,
        initial,
        steps,
        totals,
        notes,
        names,
    })
}

/// Where the unit's inputs start: `distribute` hints on a grid of P ranks, and for
/// the naive strategy every other input split on its first dimension (the rest start
/// where their first step wants them: see `update_state`).
fn initial_layouts(
    opt: &Hir,
    u: UnitId,
    opts: &PlanOptions,
    state: &mut State,
    notes: &mut Vec<String>,
) -> Vec<(TensorId, Layout)> {
    let p = opts.procs.max(1);
    let mut initial = Vec::new();
    for d in &opt.distributions {
        let t = &opt.tensors[d.tensor];
        let g = &opt.grids[d.grid];
        if !opt.unit_inputs(u).contains(&d.tensor) {
            continue;
        }
        if g.procs() != p {
            notes.push(format!(
                "`distribute {}` ignored: grid {} has {} ranks, this plan has {p}",
                t.name,
                g.name,
                g.procs()
            ));
            continue;
        }
        let mut l = Layout { grid: g.dims.clone(), splits: vec![Vec::new(); t.dims.len()], idle: Vec::new() };
        for &(pos, gd) in &d.mapping {
            l.splits[pos].push(gd);
        }
        initial.push((d.tensor, l.clone()));
        state.insert(
            PlanTensor::Tensor(d.tensor),
            Live { layout: l, shape: opt.shape(d.tensor), elem: t.elem.size_bytes() },
        );
    }
    if opts.strategy == Strategy::Naive {
        for t in opt.unit_inputs(u) {
            let tt = &opt.tensors[t];
            if state.contains_key(&PlanTensor::Tensor(t)) {
                continue;
            }
            let grid = if p == 1 { Vec::new() } else { vec![p] };
            let mut l = Layout::replicated(&grid, tt.dims.len());
            if !tt.dims.is_empty() && p > 1 {
                l.splits[0].push(0);
            }
            initial.push((t, l.clone()));
            state.insert(PlanTensor::Tensor(t), Live { layout: l, shape: opt.shape(t), elem: tt.elem.size_bytes() });
        }
    }
    initial
}

/// The last step reading each stored operand.
fn last_reads(specs: &[Spec]) -> HashMap<PlanTensor, usize> {
    let mut last_read = HashMap::new();
    for (i, s) in specs.iter().enumerate() {
        for o in std::iter::once(&s.a).chain(s.b.as_ref()) {
            if let Some(k) = o.key() {
                last_read.insert(k, i);
            }
        }
    }
    last_read
}

/// Lookahead: for each dimension of each step's result, how many steps down the
/// chain of consumers its index is summed (splitting it then forces a
/// redistribution before that step).
fn consumer_summed(specs: &[Spec]) -> Vec<Option<Vec<Option<usize>>>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, sp)| {
            let mut key = sp.c.key()?;
            let mut dist: Vec<Option<usize>> = vec![None; sp.c.idx.len()];
            let mut from = i + 1;
            let mut depth = 1;
            while let Some(j) = (from..specs.len())
                .find(|&j| std::iter::once(&specs[j].a).chain(specs[j].b.as_ref()).any(|o| o.key() == Some(key)))
            {
                let nx = &specs[j];
                for (d, x) in sp.c.idx.iter().enumerate() {
                    if dist[d].is_none() && !nx.c.idx.contains(x) {
                        dist[d] = Some(depth);
                    }
                }
                match nx.c.key() {
                    Some(k) if k != key => key = k,
                    _ => break,
                }
                from = j + 1;
                depth += 1;
            }
            Some(dist)
        })
        .collect()
}

/// The mappings of a step worth re-ranking with exact redistribution costs: the
/// naive one, or the `opts.shortlist` cheapest by estimate; empty when none fits.
fn shortlist(
    spec: &Spec,
    opts: &PlanOptions,
    state: &State,
    summed: &Option<Vec<Option<usize>>>,
    resident: u64,
) -> Vec<Eval> {
    let p = opts.procs.max(1);
    let net = &opts.network;
    match opts.strategy {
        Strategy::Naive => evaluate(spec, &naive_candidate(spec, p), net, None, resident).into_iter().collect(),
        Strategy::Search => {
            let mem_limit = mem_limit_of(opts);
            let mut cands = candidates(spec, p);
            for o in std::iter::once(&spec.a).chain(spec.b.as_ref()) {
                if let Some(cur) = o.key().and_then(|k| state.get(&k)) {
                    if let Some(c) = inherit(spec, o, &cur.layout) {
                        cands.push(c);
                    }
                }
            }
            let mut v: Vec<(f64, Eval)> = cands
                .iter()
                .filter_map(|c| evaluate(spec, c, net, mem_limit, resident))
                .map(|e| (e.time + redistribution_estimate(spec, &e, state, net) + lookahead(spec, &e, summed, net), e))
                .collect();
            v.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.mem_bytes.cmp(&y.1.mem_bytes)));
            v.truncate(opts.shortlist.max(1));
            v.into_iter().map(|(_, e)| e).collect()
        }
    }
}

/// E0803: no mapping of step `i` fits in memory.
fn does_not_fit(spec: &Spec, names: &PlanNames, i: usize, opts: &PlanOptions, resident: u64) -> CommandError {
    let p = opts.procs.max(1);
    // The least memory over panel counts: re-evaluating with a tiny limit is not
    // possible, so report the unpanelled need of the best mapping.
    let need = candidates(spec, p)
        .iter()
        .filter_map(|c| evaluate(spec, c, &opts.network, None, resident))
        .map(|e| e.mem_bytes)
        .min()
        .unwrap_or(0);
    CommandError {
        code: "E0803",
        message: format!(
            "step {} (`{}`) does not fit in {} bytes per rank on {p} ranks (the smallest mapping needs about {need} bytes without panels, {resident} of them other live tensors)",
            i + 1,
            spec.text(names),
            opts.mem_per_rank.unwrap_or(0)
        ),
        hint: Some("raise --mem-per-rank or use more --procs".into()),
    }
}

/// Re-ranks the shortlist with the exact redistribution costs: the least time, then
/// the fewest words.
fn choose(
    spec: &Spec,
    evals: Vec<Eval>,
    state: &State,
    summed: &Option<Vec<Option<usize>>>,
    net: &super::Network,
) -> Choice {
    let mut best: Option<Choice> = None;
    for e in evals {
        let mut pre = Vec::new();
        let mut seen: Vec<(PlanTensor, Layout)> = Vec::new();
        let stationaries = std::iter::once((&spec.a, &e.a.0)).chain(spec.b.as_ref().zip(e.b.as_ref().map(|b| &b.0)));
        for (o, need) in stationaries {
            let Some(k) = o.key() else { continue };
            let cur = seen
                .iter()
                .rev()
                .find(|(n, _)| *n == k)
                .map(|(_, l)| l.clone())
                .or_else(|| state.get(&k).map(|s| s.layout.clone()));
            if let Some(cur) = cur {
                if let Some(op) = alltoall(k, &o.shape, o.elem, &cur, need, Phase::Before, net) {
                    pre.push(op);
                }
            }
            seen.push((k, need.clone()));
        }
        let mut post = Vec::new();
        if spec.accumulate {
            if let Some(k) = spec.c.key() {
                if let Some(cur) = state.get(&k) {
                    if let Some(op) = alltoall(k, &spec.c.shape, spec.c.elem, &e.c.1, &cur.layout, Phase::After, net) {
                        post.push(op);
                    }
                }
            }
        }
        let time = e.time + pre.iter().chain(&post).map(|o| o.time).sum::<f64>() + lookahead(spec, &e, summed, net);
        let words: u64 = e.ops.iter().chain(&pre).chain(&post).map(|o| o.moved_max).sum();
        if best
            .as_ref()
            .is_none_or(|b| time < b.time * (1.0 - 1e-12) || (time <= b.time * (1.0 + 1e-12) && words < b.words))
        {
            best = Some(Choice { time, words, eval: e, pre, post });
        }
    }
    best.expect("non-empty shortlist")
}

/// After step `i`: its operands live in their stationary layouts (an input seen for
/// the first time starts there), its result in its final layout (unless accumulated
/// into an existing one), and temporaries read for the last time are freed.
fn update_state(
    spec: &Spec,
    e: &Eval,
    i: usize,
    last_read: &HashMap<PlanTensor, usize>,
    state: &mut State,
    initial: &mut Vec<(TensorId, Layout)>,
) {
    for (o, (fine, _)) in std::iter::once((&spec.a, &e.a)).chain(spec.b.as_ref().zip(e.b.as_ref())) {
        if let Some(k) = o.key() {
            if !state.contains_key(&k) && matches!(o.role, Role::Input | Role::Param) {
                if let PlanTensor::Tensor(t) = k {
                    initial.push((t, fine.clone()));
                }
            }
            state.insert(k, Live { layout: fine.clone(), shape: o.shape.clone(), elem: o.elem });
        }
    }
    if let Some(k) = spec.c.key() {
        let keep_existing = spec.accumulate && state.contains_key(&k);
        if !keep_existing {
            state.insert(k, Live { layout: e.c.1.clone(), shape: spec.c.shape.clone(), elem: spec.c.elem });
        }
    }
    for o in std::iter::once(&spec.a).chain(spec.b.as_ref()) {
        if let Some(k) = o.key() {
            if o.role == Role::Temporary && last_read.get(&k) == Some(&i) {
                state.remove(&k);
            }
        }
    }
}

/// Exact words of each rank in one step.
struct StepWords {
    /// Moved, redistributions included.
    all: Vec<u64>,
    /// Moved by the step's own collectives.
    step: Vec<u64>,
    sent: Vec<u64>,
    recv: Vec<u64>,
}

/// Counts every op rank by rank (the closed forms of `evaluate` are maxima per
/// operation) and sets each op's maxima and total from the counts.
fn exact_words(ops: &mut [CommOp], p: usize) -> StepWords {
    let mut w = StepWords { all: vec![0; p], step: vec![0; p], sent: vec![0; p], recv: vec![0; p] };
    for op in ops {
        let (mut rm, mut sm, mut mm, mut tot) = (0, 0, 0, 0);
        for r in 0..p {
            let x = op.rank_words(r);
            rm = rm.max(x.recv);
            sm = sm.max(x.sent);
            mm = mm.max(x.moved);
            tot += x.recv;
            w.all[r] += x.moved;
            w.sent[r] += x.sent;
            w.recv[r] += x.recv;
            if op.kind != OpKind::AllToAll {
                w.step[r] += x.moved;
            }
        }
        debug_assert!(
            op.kind == OpKind::AllToAll || (rm, sm, mm) == (op.recv_max, op.sent_max, op.moved_max),
            "{op:?}"
        );
        op.recv_max = rm;
        op.sent_max = sm;
        op.moved_max = mm;
        op.recv_total = tot;
    }
    w
}

/// The step as the plan reports it: mapping, operands, costs and lower bound.
fn plan_step(spec: &Spec, e: Eval, ops: Vec<CommOp>, words: &StepWords, opts: &PlanOptions) -> PlanStep {
    let p = opts.procs.max(1);
    let time_comm: f64 = ops.iter().map(|o| o.time).sum();
    let time_compute = opts.network.gamma * e.flops_max;
    let step_words_max = words.step.iter().copied().max().unwrap_or(0);
    let bidx: Vec<BoundIndex> = spec
        .indices
        .iter()
        .zip(&spec.ext)
        .map(|(x, &n)| BoundIndex {
            n: n as u64,
            a: spec.a.idx.contains(x),
            b: spec.b.as_ref().is_some_and(|b| b.idx.contains(x)),
            c: spec.c.idx.contains(x),
        })
        .collect();
    let bound =
        lower_bound(&bidx, spec.b.is_some(), e.active, opts.mem_per_rank.map(|m| m as f64 / spec.c.elem as f64));
    let ratio = if bound.words > 0.0 { Some(step_words_max as f64 / bound.words) } else { None };
    let mapping = e
        .cand
        .grid
        .iter()
        .zip(&e.cand.assign)
        .map(|(&size, &a)| GridDim { size, index: a, class: a.map(|x| spec.class(x)).unwrap_or(DimClass::Idle) })
        .collect();
    let oplan = |o: &Operand, l: &(Layout, Layout)| OperandPlan {
        tensor: o.tensor,
        indices: o.idx.clone(),
        shape: o.shape.clone(),
        stationary: l.0.clone(),
        gathered: l.1.clone(),
    };
    let mut notes = Vec::new();
    if e.active < p {
        notes.push(format!(
            "{} of {p} ranks have work (an idle grid dimension or empty blocks); the bound is for {} ranks",
            e.active, e.active
        ));
    }
    if e.panels > 1 {
        notes.push(format!("all-gathers in {} panels to fit the memory limit", e.panels));
    }
    PlanStep {
        stmt: spec.stmt,
        term: spec.term,
        accumulate: spec.accumulate,
        grid: e.cand.grid.clone(),
        mapping,
        active_ranks: e.active,
        panels: e.panels,
        a: oplan(&spec.a, &e.a),
        b: spec.b.as_ref().zip(e.b.as_ref()).map(|(o, l)| oplan(o, l)),
        c: oplan(&spec.c, &e.c),
        cost: StepCost {
            flops_total: spec.flops_total(),
            flops_max: e.flops_max,
            step_words_max,
            words_max: words.all.iter().copied().max().unwrap_or(0),
            sent_max: words.sent.iter().copied().max().unwrap_or(0),
            recv_max: words.recv.iter().copied().max().unwrap_or(0),
            msgs_max: ops.iter().map(|o| o.msgs_max).sum(),
            mem_words: e.mem_bytes / spec.c.elem as u64,
            mem_bytes: e.mem_bytes,
            time_compute,
            time_comm,
            time: time_compute + time_comm,
        },
        bound,
        ratio,
        notes,
        ops,
    }
}

fn totals(steps: &[PlanStep], rank_all: &[u64], rank_step: &[u64]) -> Totals {
    let bound_words: f64 = steps.iter().map(|s| s.bound.words).sum();
    let step_words_sum: u64 = steps.iter().map(|s| s.cost.step_words_max).sum();
    Totals {
        flops: steps.iter().map(|s| s.cost.flops_max).sum(),
        words_max: rank_all.iter().copied().max().unwrap_or(0),
        step_words_max: rank_step.iter().copied().max().unwrap_or(0),
        msgs_max: steps.iter().map(|s| s.cost.msgs_max).sum(),
        mem_peak_bytes: steps.iter().map(|s| s.cost.mem_bytes).max().unwrap_or(0),
        time: steps.iter().map(|s| s.cost.time).sum(),
        bound_words,
        ratio: if bound_words > 0.0 { Some(step_words_sum as f64 / bound_words) } else { None },
    }
}
