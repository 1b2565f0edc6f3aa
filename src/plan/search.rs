//! Steps of a unit, the candidate grids and mappings of a step, their exact costs,
//! and the greedy walk over the steps that picks one mapping per step.

use std::collections::HashMap;

use crate::sema::hir::{Factor, Hir, IndexId, Role, UnitId};
use crate::tir::graph::{factor_label, ref_text};

use super::bounds::{lower_bound, BoundIndex};
use super::layout::{max_gather_recv, Layout};
use super::{
    CommOp, CommandError, GridDim, OpKind, OperandPlan, Phase, Plan, PlanOptions, PlanStep, StepCost, Strategy, Totals,
};

/// Largest number of a step's indices considered for grid dimensions (the largest
/// extents are kept).
const MAX_SEARCH_INDICES: usize = 8;
const MAX_GRID_DIMS: usize = 4;

#[derive(Debug, Clone)]
pub(crate) struct Operand {
    pub name: String,
    /// Identity of the stored tensor (None: opaque, computed where needed).
    pub key: Option<String>,
    pub idx: Vec<IndexId>,
    pub shape: Vec<usize>,
    pub elem: usize,
    pub role: Role,
}

#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub stmt: usize,
    pub term: usize,
    pub text: String,
    pub a: Operand,
    pub b: Option<Operand>,
    pub c: Operand,
    pub accumulate: bool,
    /// Distinct indices of the step: C's, then A's, then B's.
    pub indices: Vec<IndexId>,
    pub ext: Vec<usize>,
    pub summing: bool,
}

impl Spec {
    pub(crate) fn ext_of(&self, x: IndexId) -> usize {
        self.ext[self.indices.iter().position(|&y| y == x).unwrap()]
    }

    fn class(&self, x: IndexId) -> &'static str {
        let a = self.a.idx.contains(&x);
        let b = self.b.as_ref().is_some_and(|b| b.idx.contains(&x));
        let c = self.c.idx.contains(&x);
        match (a, b, c) {
            (true, true, true) => "batch",
            (true, false, true) => "free-left",
            (false, true, true) => "free-right",
            (true, true, false) => "contracted",
            (true, false, false) => "summed-left",
            (false, true, false) => "summed-right",
            _ => "free",
        }
    }

    fn flops_total(&self) -> f64 {
        (if self.summing { 2.0 } else { 1.0 }) * self.ext.iter().map(|&n| n as f64).product::<f64>()
    }
}

fn operand(hir: &Hir, f: &Factor) -> Operand {
    match f {
        Factor::Tensor(r) => {
            let t = &hir.tensors[r.tensor];
            Operand {
                name: ref_text(hir, &t.name, &r.indices),
                key: Some(t.name.clone()),
                idx: r.indices.clone(),
                shape: hir.shape(r.tensor),
                elem: t.elem.size_bytes(),
                role: t.role,
            }
        }
        _ => {
            let idx = f.indices().to_vec();
            Operand {
                name: factor_label(hir, f),
                key: None,
                shape: idx.iter().map(|&i| hir.index_size(i)).collect(),
                idx,
                elem: 8,
                role: Role::Temporary,
            }
        }
    }
}

/// The steps of a unit of the optimized program, and notes on what was skipped.
pub(crate) fn build_steps(hir: &Hir, u: UnitId) -> (Vec<Spec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut notes = Vec::new();
    let mut fresh = 0usize;
    for (si, st) in hir.units[u].stmts.iter().enumerate() {
        let lt = &hir.tensors[st.lhs.tensor];
        let c = Operand {
            name: ref_text(hir, &lt.name, &st.lhs.indices),
            key: Some(lt.name.clone()),
            idx: st.lhs.indices.clone(),
            shape: hir.shape(st.lhs.tensor),
            elem: lt.elem.size_bytes(),
            role: lt.role,
        };
        for (ti, term) in st.rhs.terms.iter().enumerate() {
            let accumulate = st.accumulate || ti > 0;
            let ops: Vec<Operand> = term.factors.iter().map(|f| operand(hir, f)).collect();
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
                    let name = format!("_p{fresh}");
                    fresh += 1;
                    Operand {
                        name: ref_text(hir, &name, &keep),
                        key: Some(name),
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
                let rhs = match &b {
                    Some(b) => format!("{} * {}", acc.name, b.name),
                    None => acc.name.clone(),
                };
                let text = format!("{} {} {}", out.name, if last && accumulate { "+=" } else { "=" }, rhs);
                specs.push(Spec {
                    stmt: si,
                    term: ti,
                    text,
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
    CommOp {
        kind: OpKind::AllGather,
        phase: Phase::Before,
        tensor: op.key.clone().unwrap_or_else(|| op.name.clone()),
        shape: op.shape.clone(),
        along: along.to_vec(),
        from: fine.clone(),
        to: coarse.clone(),
        panels,
        elem_bytes: op.elem,
        recv_max: recv,
        sent_max: sent,
        moved_max: recv,
        recv_total: 0,
        msgs_max: msgs,
        time: net.alpha * msgs as f64 + net.beta * (op.elem as u64 * recv.max(sent)) as f64,
    }
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
    CommOp {
        kind,
        phase: Phase::After,
        tensor: format!("partial {}", c.key.clone().unwrap_or_else(|| c.name.clone())),
        shape: c.shape.clone(),
        along: along.to_vec(),
        from: partial.clone(),
        to: fin.clone(),
        panels: 1,
        elem_bytes: c.elem,
        recv_max: recv,
        sent_max: sent,
        moved_max: sent,
        recv_total: 0,
        msgs_max: rounds(q),
        time: net.alpha * rounds(q) as f64 + net.beta * (c.elem as u64 * recv.max(sent)) as f64,
    }
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
        .filter(|(_, x)| spec.class(**x) == "contracted")
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

/// (time, words, mapping, redistributions before, after).
type Choice = (f64, u64, Eval, Vec<CommOp>, Vec<CommOp>);

/// A tensor's current layout, shape and element size.
type State = HashMap<String, (Layout, Vec<usize>, usize)>;

fn alltoall(
    name: &str,
    shape: &[usize],
    elem: usize,
    from: &Layout,
    to: &Layout,
    phase: Phase,
    net: &super::Network,
) -> Option<CommOp> {
    let p = to.procs();
    let (mut recv_max, mut sent_max, mut total) = (0u64, 0u64, 0u64);
    let mut op = CommOp {
        kind: OpKind::AllToAll,
        phase,
        tensor: name.to_string(),
        shape: shape.to_vec(),
        along: (0..to.grid.len()).collect(),
        from: from.clone(),
        to: to.clone(),
        panels: 1,
        elem_bytes: elem,
        recv_max: 0,
        sent_max: 0,
        moved_max: 0,
        recv_total: 0,
        msgs_max: 0,
        time: 0.0,
    };
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
        if let Some((cur, _, _)) = o.key.as_ref().and_then(|k| state.get(k)) {
            t += cost(cur, need, &o.shape, o.elem);
        }
    }
    if spec.accumulate {
        if let Some((cur, _, _)) = spec.c.key.as_ref().and_then(|k| state.get(k)) {
            t += cost(&e.c.1, cur, &spec.c.shape, spec.c.elem);
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
    let (specs, mut notes) = build_steps(opt, u);
    let mut state: State = HashMap::new();
    let mut initial: Vec<(String, Layout)> = Vec::new();
    // Initial layouts: `distribute` hints on a grid of P ranks.
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
        initial.push((t.name.clone(), l.clone()));
        state.insert(t.name.clone(), (l, opt.shape(d.tensor), t.elem.size_bytes()));
    }
    if opts.strategy == Strategy::Naive {
        for t in opt.unit_inputs(u) {
            let tt = &opt.tensors[t];
            if state.contains_key(&tt.name) {
                continue;
            }
            let grid = if p == 1 { Vec::new() } else { vec![p] };
            let mut l = Layout::replicated(&grid, tt.dims.len());
            if !tt.dims.is_empty() && p > 1 {
                l.splits[0].push(0);
            }
            initial.push((tt.name.clone(), l.clone()));
            state.insert(tt.name.clone(), (l, opt.shape(t), tt.elem.size_bytes()));
        }
    }
    // Last step reading each temporary.
    let mut last_read: HashMap<String, usize> = HashMap::new();
    for (i, s) in specs.iter().enumerate() {
        for o in std::iter::once(&s.a).chain(s.b.as_ref()) {
            if let Some(k) = &o.key {
                last_read.insert(k.clone(), i);
            }
        }
    }
    // Lookahead: for each dimension of each step's result, how many steps down
    // the chain of consumers its index is summed (splitting it then forces a
    // redistribution before that step).
    let consumer_summed: Vec<Option<Vec<Option<usize>>>> = specs
        .iter()
        .enumerate()
        .map(|(i, sp)| {
            let mut key = sp.c.key.clone()?;
            let mut dist: Vec<Option<usize>> = vec![None; sp.c.idx.len()];
            let mut from = i + 1;
            let mut depth = 1;
            while let Some(j) = (from..specs.len()).find(|&j| {
                std::iter::once(&specs[j].a).chain(specs[j].b.as_ref()).any(|o| o.key.as_ref() == Some(&key))
            }) {
                let nx = &specs[j];
                for (d, x) in sp.c.idx.iter().enumerate() {
                    if dist[d].is_none() && !nx.c.idx.contains(x) {
                        dist[d] = Some(depth);
                    }
                }
                match &nx.c.key {
                    Some(k) if *k != key => key = k.clone(),
                    _ => break,
                }
                from = j + 1;
                depth += 1;
            }
            Some(dist)
        })
        .collect();
    let mem_limit = mem_limit_of(opts);
    let mut steps = Vec::new();
    let mut rank_all = vec![0u64; p];
    let mut rank_step = vec![0u64; p];
    for (i, spec) in specs.iter().enumerate() {
        let involved: Vec<&String> = std::iter::once(&spec.a)
            .chain(spec.b.as_ref())
            .chain(std::iter::once(&spec.c))
            .filter_map(|o| o.key.as_ref())
            .collect();
        let resident: u64 = state
            .iter()
            .filter(|(k, _)| !involved.contains(k))
            .map(|(_, (l, sh, e))| l.max_block(sh) * *e as u64)
            .sum();
        let evals: Vec<Eval> = match opts.strategy {
            Strategy::Naive => evaluate(spec, &naive_candidate(spec, p), net, None, resident).into_iter().collect(),
            Strategy::Search => {
                let mut cands = candidates(spec, p);
                for o in std::iter::once(&spec.a).chain(spec.b.as_ref()) {
                    if let Some((cur, _, _)) = o.key.as_ref().and_then(|k| state.get(k)) {
                        if let Some(c) = inherit(spec, o, cur) {
                            cands.push(c);
                        }
                    }
                }
                let mut v: Vec<(f64, Eval)> = cands
                    .iter()
                    .filter_map(|c| evaluate(spec, c, net, mem_limit, resident))
                    .map(|e| {
                        (
                            e.time
                                + redistribution_estimate(spec, &e, &state, net)
                                + lookahead(spec, &e, &consumer_summed[i], net),
                            e,
                        )
                    })
                    .collect();
                v.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.mem_bytes.cmp(&y.1.mem_bytes)));
                v.truncate(opts.shortlist.max(1));
                v.into_iter().map(|(_, e)| e).collect()
            }
        };
        if evals.is_empty() {
            let need = candidates(spec, p)
                .iter()
                .filter_map(|c| evaluate(spec, c, net, None, resident))
                .map(|e| {
                    // The least memory over panel counts: re-evaluate with a tiny limit is
                    // not possible, so report the unpanelled need of the best mapping.
                    e.mem_bytes
                })
                .min()
                .unwrap_or(0);
            return Err(CommandError {
                code: "E0803",
                message: format!(
                    "step {} (`{}`) does not fit in {} bytes per rank on {p} ranks (the smallest mapping needs about {need} bytes without panels, {resident} of them other live tensors)",
                    i + 1,
                    spec.text,
                    opts.mem_per_rank.unwrap_or(0)
                ),
                hint: Some("raise --mem-per-rank or use more --procs".into()),
            });
        }
        // Re-rank the shortlist with the exact redistribution costs.
        let mut best: Option<Choice> = None;
        for e in evals {
            let mut pre = Vec::new();
            let mut seen: Vec<(String, Layout)> = Vec::new();
            let stationaries =
                std::iter::once((&spec.a, &e.a.0)).chain(spec.b.as_ref().zip(e.b.as_ref().map(|b| &b.0)));
            for (o, need) in stationaries {
                let Some(k) = &o.key else { continue };
                let cur = seen
                    .iter()
                    .rev()
                    .find(|(n, _)| n == k)
                    .map(|(_, l)| l.clone())
                    .or_else(|| state.get(k).map(|s| s.0.clone()));
                if let Some(cur) = cur {
                    if let Some(op) = alltoall(k, &o.shape, o.elem, &cur, need, Phase::Before, net) {
                        pre.push(op);
                    }
                }
                seen.push((k.clone(), need.clone()));
            }
            let mut post = Vec::new();
            if spec.accumulate {
                if let Some((cur, _, _)) = spec.c.key.as_ref().and_then(|k| state.get(k)) {
                    if let Some(op) = alltoall(
                        &format!("new {}", spec.c.key.clone().unwrap_or_default()),
                        &spec.c.shape,
                        spec.c.elem,
                        &e.c.1,
                        cur,
                        Phase::After,
                        net,
                    ) {
                        post.push(op);
                    }
                }
            }
            let t = e.time
                + pre.iter().chain(&post).map(|o| o.time).sum::<f64>()
                + lookahead(spec, &e, &consumer_summed[i], net);
            let w: u64 = e.ops.iter().chain(&pre).chain(&post).map(|o| o.moved_max).sum();
            if best.as_ref().is_none_or(|b| t < b.0 * (1.0 - 1e-12) || (t <= b.0 * (1.0 + 1e-12) && w < b.1)) {
                best = Some((t, w, e, pre, post));
            }
        }
        let (_, _, e, pre, post) = best.expect("non-empty shortlist");
        // Update the state: operands now live in their stationary layouts.
        for (o, (fine, _)) in std::iter::once((&spec.a, &e.a)).chain(spec.b.as_ref().zip(e.b.as_ref())) {
            if let Some(k) = &o.key {
                if !state.contains_key(k) && matches!(o.role, Role::Input | Role::Param) {
                    initial.push((k.clone(), fine.clone()));
                }
                state.insert(k.clone(), (fine.clone(), o.shape.clone(), o.elem));
            }
        }
        if let Some(k) = &spec.c.key {
            let keep_existing = spec.accumulate && state.contains_key(k);
            if !keep_existing {
                state.insert(k.clone(), (e.c.1.clone(), spec.c.shape.clone(), spec.c.elem));
            }
        }
        // Free temporaries after their last read.
        for o in std::iter::once(&spec.a).chain(spec.b.as_ref()) {
            if let Some(k) = &o.key {
                if o.role == Role::Temporary && last_read.get(k) == Some(&i) {
                    state.remove(k);
                }
            }
        }
        let mut ops: Vec<CommOp> = pre;
        ops.extend(e.ops.iter().cloned());
        ops.extend(post);
        // Exact per-rank counts (the closed forms above are maxima per operation).
        let mut per_rank_all = vec![0u64; p];
        let mut per_rank_step = vec![0u64; p];
        let mut sent_rank = vec![0u64; p];
        let mut recv_rank = vec![0u64; p];
        for op in &mut ops {
            let (mut rm, mut sm, mut mm, mut tot) = (0, 0, 0, 0);
            for r in 0..p {
                let w = op.rank_words(r);
                rm = rm.max(w.recv);
                sm = sm.max(w.sent);
                mm = mm.max(w.moved);
                tot += w.recv;
                per_rank_all[r] += w.moved;
                sent_rank[r] += w.sent;
                recv_rank[r] += w.recv;
                if op.kind != OpKind::AllToAll {
                    per_rank_step[r] += w.moved;
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
        for r in 0..p {
            rank_all[r] += per_rank_all[r];
            rank_step[r] += per_rank_step[r];
        }
        let time_comm: f64 = ops.iter().map(|o| o.time).sum();
        let time_compute = net.gamma * e.flops_max;
        let step_words_max = per_rank_step.iter().copied().max().unwrap_or(0);
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
            .map(|(&size, a)| GridDim {
                size,
                index: a.map(|x| opt.indices[x].name.clone()),
                class: a.map(|x| spec.class(x)).unwrap_or("idle").to_string(),
            })
            .collect();
        let names = |o: &super::search::Operand| o.idx.iter().map(|&x| opt.indices[x].name.clone()).collect::<Vec<_>>();
        let oplan = |o: &super::search::Operand, l: &(Layout, Layout)| OperandPlan {
            name: o.name.clone(),
            indices: names(o),
            shape: o.shape.clone(),
            stationary: l.0.clone(),
            gathered: l.1.clone(),
            opaque: o.key.is_none(),
        };
        let mut step_notes = Vec::new();
        if e.active < p {
            step_notes.push(format!(
                "{} of {p} ranks have work (an idle grid dimension or empty blocks); the bound is for {} ranks",
                e.active, e.active
            ));
        }
        if e.panels > 1 {
            step_notes.push(format!("all-gathers in {} panels to fit the memory limit", e.panels));
        }
        let mut s = PlanStep {
            stmt: spec.stmt,
            term: spec.term,
            text: spec.text.clone(),
            accumulate: spec.accumulate,
            grid: e.cand.grid.clone(),
            mapping,
            active_ranks: e.active,
            panels: e.panels,
            a: oplan(&spec.a, &e.a),
            b: spec.b.as_ref().zip(e.b.as_ref()).map(|(o, l)| oplan(o, l)),
            c: OperandPlan { stationary: e.c.0.clone(), gathered: e.c.1.clone(), ..oplan(&spec.c, &e.c) },
            cost: StepCost {
                flops_total: spec.flops_total(),
                flops_max: e.flops_max,
                step_words_max,
                words_max: per_rank_all.iter().copied().max().unwrap_or(0),
                sent_max: sent_rank.iter().copied().max().unwrap_or(0),
                recv_max: recv_rank.iter().copied().max().unwrap_or(0),
                msgs_max: ops.iter().map(|o| o.msgs_max).sum(),
                mem_words: e.mem_bytes / spec.c.elem as u64,
                mem_bytes: e.mem_bytes,
                time_compute,
                time_comm,
                time: time_compute + time_comm,
            },
            bound,
            ratio,
            notes: step_notes,
            ops,
        };
        s.c.name = spec.c.name.clone();
        steps.push(s);
    }
    let bound_words: f64 = steps.iter().map(|s| s.bound.words).sum();
    let step_words_sum: u64 = steps.iter().map(|s| s.cost.step_words_max).sum();
    let totals = Totals {
        flops: steps.iter().map(|s| s.cost.flops_max).sum(),
        words_max: rank_all.iter().copied().max().unwrap_or(0),
        step_words_max: rank_step.iter().copied().max().unwrap_or(0),
        msgs_max: steps.iter().map(|s| s.cost.msgs_max).sum(),
        mem_peak_bytes: steps.iter().map(|s| s.cost.mem_bytes).max().unwrap_or(0),
        time: steps.iter().map(|s| s.cost.time).sum(),
        bound_words,
        ratio: if bound_words > 0.0 { Some(step_words_sum as f64 / bound_words) } else { None },
    };
    if initial.iter().all(|(n, _)| !opt.distributions.iter().any(|d| opt.tensors[d.tensor].name == *n))
        && opts.strategy == Strategy::Search
    {
        // Nothing to say: inputs without hints start where their first step wants them.
    }
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
    })
}
