//! HIR → HIR operation minimization.
//!
//! For every statement of every unit:
//! 1. **Opaque factors.** In a term that will be reordered, every call or
//!    parenthesised sum is first computed into a fresh temporary `_tN[free]` (its
//!    argument optimized recursively), so that the product is over plain tensors.
//! 2. **Factorization.** Terms `c1*A*X1 + c2*A*X2 + ...` sharing a factor `A`
//!    (same tensor, same indices) whose remainders produce the same index set `F`
//!    (their indices shared with `A` or the result) become `A * S[F]` with
//!    `S[F] = c1*X1 + c2*X2 + ...`, when that lowers the flops.
//! 3. **Ordering.** A term of ≥ 3 factors is ordered by [`opmin::optimize_path`] and
//!    becomes a chain of binary products into fresh temporaries `_tN`, the last
//!    product staying in the statement (original coefficient, `=`/`+=`). A term is
//!    left alone when a single nested loop is not more expensive.
//! 4. **Common sub-expressions.** An intermediate (the product of a set of factors,
//!    with the indices it keeps) already computed earlier in the unit — equal up to a
//!    renaming of indices, and made only of inputs, parameters and this pass's own
//!    temporaries, which are never rewritten — is reused, not recomputed.
//!
//! Flops "before" count each term as a single loop nest over all its indices
//! (per point `k - 1` multiplications for `k ≥ 2` factors, plus an addition if it
//! sums an index — opt_einsum's naive count; `1 ×` for at most one factor); "after" is the sum of
//! the cost model of [`opmin`] over the emitted statements. Memory is the peak of
//! the live temporaries this pass creates (plus materialised calls/sums), in
//! distinct elements and in bytes.

use std::collections::HashMap;

use crate::sema::hir::{
    expr_indices, Expr, Factor, Hir, IndexId, ModelId, Role, Stmt, SymGroup, Tensor, TensorId, TensorRef, Term,
    UnitKind,
};
use crate::syntax::Span;

use super::graph::{factor_label, ref_text, term_graph};
use super::opmin::{self, optimize_path, Method, Options, Path};

/// Per-statement result of the optimizer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StmtReport {
    pub unit: String,
    /// Statement position in the original unit.
    pub stmt: usize,
    /// The original statement, abbreviated: `R[a,b,i,j] += 2 term(s)`.
    pub text: String,
    /// The chosen order of each term, e.g. `((C[d,s]*A[p,q,r,s])*C[c,r])`.
    pub order: Vec<String>,
    /// How each term was ordered.
    pub method: Vec<Method>,
    pub flops_before: f64,
    pub flops_after: f64,
    pub peak_elems_before: f64,
    pub peak_elems_after: f64,
    pub peak_bytes_before: f64,
    pub peak_bytes_after: f64,
    /// Temporaries this statement introduced.
    pub temporaries: Vec<String>,
    /// Intermediates reused from earlier (common sub-expressions).
    pub reused: Vec<String>,
    /// Factorizations applied, e.g. `A[i,k]*(2 terms)`.
    pub factorized: Vec<String>,
    /// Per term whose intermediates exceed `--max-intermediate`: the slicing that
    /// makes them fit, which the loop nests run ([`crate::sema::hir::SliceGroup`]).
    pub slicing: Vec<String>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OptReport {
    pub stmts: Vec<StmtReport>,
    pub flops_before: f64,
    pub flops_after: f64,
}

/// Optimizes every unit with the default search options.
pub fn optimize(hir: &Hir) -> (Hir, OptReport) {
    optimize_with(hir, &Options::default())
}

pub fn optimize_with(hir: &Hir, opts: &Options) -> (Hir, OptReport) {
    let mut rw = Rw {
        hir: hir.clone(),
        n_orig: hir.tensors.next_id(),
        opts: opts.clone(),
        counter: 0,
        cse: HashMap::new(),
        no_cse: false,
    };
    let mut report = OptReport::default();
    for u in hir.units.ids() {
        rw.cse.clear();
        let unit = hir.units[u].clone();
        let model = match unit.kind {
            UnitKind::Model(m) => Some(m),
            UnitKind::Program => None,
        };
        let mut out: Vec<Stmt> = Vec::new();
        let mut groups = Vec::new();
        let mut notes = Vec::new();
        let mut sliced = Vec::new();
        for s in &unit.stmts {
            let start = out.len();
            let first_temp = rw.hir.tensors.len();
            let mut ctx = StmtCtx {
                model,
                elem_of: s.lhs.tensor,
                span: s.span.clone(),
                order: Vec::new(),
                method: Vec::new(),
                reused: Vec::new(),
                factorized: Vec::new(),
                slicing: Vec::new(),
                sliced: Vec::new(),
                lhs_is_slice: hir.is_slice(&s.lhs),
            };
            let rhs = rw.expr(&s.rhs, &s.lhs.indices, &mut ctx, &mut out, true);
            // Sliced terms leave the statement: the rest of it first, then each
            // sliced term's steps and its last product added into the target (the
            // right-hand side never reads the target, so the order is free).
            let mut accumulate = s.accumulate;
            if !rhs.terms.is_empty() || ctx.sliced.is_empty() {
                out.push(Stmt { lhs: s.lhs.clone(), accumulate, rhs, span: s.span.clone() });
                accumulate = true;
            }
            // A sliced term's flops are its slices' (what it recomputes included).
            let mut extra = 0.0;
            for (steps, last, mut group) in std::mem::take(&mut ctx.sliced) {
                group.target = s.lhs.tensor;
                out.extend(steps);
                let rhs = Expr { terms: vec![last], span: s.rhs.span.clone() };
                out.push(Stmt { lhs: s.lhs.clone(), accumulate, rhs, span: s.span.clone() });
                let k = out.len() - 1 - group.temps.len();
                extra += group.flops - out[k..].iter().map(|st| stmt_cost(&rw.hir, st)).sum::<f64>();
                accumulate = true;
                sliced.push(group);
            }
            groups.push(start..out.len());
            notes.push((ctx, first_temp..rw.hir.tensors.len(), extra));
        }
        // Liveness of this pass's temporaries over the new statement list.
        let mut def: HashMap<TensorId, usize> = HashMap::new();
        let mut last: HashMap<TensorId, usize> = HashMap::new();
        for (i, s) in out.iter().enumerate() {
            if s.lhs.tensor >= rw.n_orig {
                def.entry(s.lhs.tensor).or_insert(i);
            }
            crate::sema::hir::collect_reads(&s.rhs, &mut |t| {
                if t >= rw.n_orig {
                    last.insert(t, i);
                }
            });
        }
        // A sliced term's temporaries hold one slice.
        let mut one_slice: HashMap<TensorId, f64> = HashMap::new();
        for g in &sliced {
            for st in out.iter().filter(|st| g.temps.contains(&st.lhs.tensor)) {
                let n = st.lhs.indices.iter().filter(|i| !g.indices.contains(i));
                one_slice.insert(st.lhs.tensor, n.map(|&i| rw.hir.index_size(i) as f64).product());
            }
        }
        let live_at = |i: usize| -> f64 {
            def.iter()
                .filter(|(t, &d)| d <= i && i <= *last.get(t).unwrap_or(&d))
                .map(|(&t, _)| one_slice.get(&t).copied().unwrap_or_else(|| distinct_elems(&rw.hir, t)))
                .sum()
        };
        for (k, s) in unit.stmts.iter().enumerate() {
            let g = groups[k].clone();
            let (ctx, temps, extra) = &notes[k];
            let elem = rw.hir.tensors[s.lhs.tensor].elem.size_bytes() as f64;
            let flops_before = naive_expr(&rw.hir, &s.rhs, &s.lhs.indices);
            let flops_after: f64 = out[g.clone()].iter().map(|st| stmt_cost(&rw.hir, st)).sum::<f64>() + extra;
            let peak_before = opaque_elems(&rw.hir, &s.rhs);
            let peak_after = g.clone().map(|i| live_at(i) + opaque_elems(&rw.hir, &out[i].rhs)).fold(0.0, f64::max);
            report.flops_before += flops_before;
            report.flops_after += flops_after;
            report.stmts.push(StmtReport {
                unit: unit.name.clone(),
                stmt: k,
                text: format!(
                    "{} {} {} term(s)",
                    ref_text(hir, &hir.tensors[s.lhs.tensor].name, &s.lhs.indices),
                    if s.accumulate { "+=" } else { "=" },
                    s.rhs.terms.len()
                ),
                order: ctx.order.clone(),
                method: ctx.method.clone(),
                flops_before,
                flops_after,
                peak_elems_before: peak_before,
                peak_elems_after: peak_after,
                peak_bytes_before: peak_before * elem,
                peak_bytes_after: peak_after * elem,
                temporaries: temps.clone().map(|t| rw.hir.tensors[TensorId::new(t)].name.clone()).collect(),
                reused: ctx.reused.clone(),
                factorized: ctx.factorized.clone(),
                slicing: ctx.slicing.clone(),
            });
        }
        if let Some(m) = model {
            for layer in &mut rw.hir.models[m].layers {
                let (a, b) = (layer.stmts.start, layer.stmts.end);
                let start = groups.get(a).map(|g| g.start).unwrap_or(out.len());
                let end = if b == 0 { start } else { groups.get(b - 1).map(|g| g.end).unwrap_or(out.len()) };
                layer.stmts = start..end.max(start);
            }
        }
        rw.hir.units[u].stmts = out;
        rw.hir.units[u].sliced = sliced;
    }
    (rw.hir, report)
}

/// A speed-up ratio: `12.34x`, or `9.010e43x` when large (a network's naive cost).
fn times(r: f64) -> String {
    if r < 1e6 {
        format!("{r:.2}x")
    } else {
        format!("{r:.3e}x")
    }
}

/// The report as text, one block per statement.
pub fn report_text(r: &OptReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for st in &r.stmts {
        let _ = writeln!(s, "{} stmt {}: {}", st.unit, st.stmt, st.text);
        for (k, o) in st.order.iter().enumerate() {
            let m = st.method.get(k).map(|m| format!("{m:?}").to_lowercase()).unwrap_or_default();
            let _ = writeln!(s, "  order [{m}] {o}");
        }
        let ratio = if st.flops_after > 0.0 { st.flops_before / st.flops_after } else { 1.0 };
        let _ = writeln!(s, "  flops  {} -> {} ({})", num(st.flops_before), num(st.flops_after), times(ratio));
        let _ = writeln!(
            s,
            "  peak   {} -> {} elements ({} -> {} bytes)",
            num(st.peak_elems_before),
            num(st.peak_elems_after),
            num(st.peak_bytes_before),
            num(st.peak_bytes_after)
        );
        if !st.temporaries.is_empty() {
            let _ = writeln!(s, "  temporaries {}", st.temporaries.join(", "));
        }
        for x in &st.reused {
            let _ = writeln!(s, "  reused {x}");
        }
        for x in &st.factorized {
            let _ = writeln!(s, "  factorized {x}");
        }
        for x in &st.slicing {
            let _ = writeln!(s, "  slicing {x}");
        }
    }
    let ratio = if r.flops_after > 0.0 { r.flops_before / r.flops_after } else { 1.0 };
    let _ = writeln!(s, "total flops {} -> {} ({})", num(r.flops_before), num(r.flops_after), times(ratio));
    s
}

fn num(x: f64) -> String {
    if x.abs() < 1e7 && x.fract() == 0.0 {
        format!("{x}")
    } else if x.abs() < 1e7 {
        format!("{x:.1}")
    } else {
        format!("{x:.4e}")
    }
}

struct StmtCtx {
    model: Option<ModelId>,
    elem_of: TensorId,
    span: Span,
    order: Vec<String>,
    method: Vec<Method>,
    reused: Vec<String>,
    factorized: Vec<String>,
    slicing: Vec<String>,
    /// Sliced terms taken out of the statement: their steps, last product and group.
    sliced: Vec<(Vec<Stmt>, Term, crate::sema::hir::SliceGroup)>,
    /// The statement writes a part of a union range (`range P = O + V;`).
    lhs_is_slice: bool,
}

/// A product up to index renaming: (tensor, index labels) per factor, kept labels.
type Key = (Vec<(TensorId, Vec<usize>)>, Vec<usize>);

struct Rw {
    hir: Hir,
    n_orig: TensorId,
    opts: Options,
    counter: usize,
    /// Intermediates of the current unit: key → (temporary, labels of its indices).
    cse: HashMap<Key, (TensorId, Vec<usize>)>,
    /// While a sliced term is emitted: its temporaries hold one slice at a time,
    /// so they are neither reused nor offered for reuse.
    no_cse: bool,
}

fn distinct(v: impl IntoIterator<Item = IndexId>) -> Vec<IndexId> {
    let mut out = Vec::new();
    for i in v {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

fn term_indices(t: &Term) -> Vec<IndexId> {
    distinct(t.factors.iter().flat_map(|f| f.indices().iter().copied()))
}

/// Distinct elements of a tensor (its symmetry groups divide by k!).
fn distinct_elems(hir: &Hir, t: TensorId) -> f64 {
    let n: f64 = hir.shape(t).iter().map(|&x| x as f64).product();
    let f: f64 =
        hir.tensors[t].symmetry.iter().map(|g| (1..=g.positions.len()).map(|x| x as f64).product::<f64>()).product();
    n / f
}

/// Naive flops of an expression: one loop nest per term.
fn naive_expr(hir: &Hir, e: &Expr, out: &[IndexId]) -> f64 {
    e.terms.iter().map(|t| naive_term(hir, t, out)).sum()
}

fn naive_term(hir: &Hir, t: &Term, out: &[IndexId]) -> f64 {
    let all = distinct(out.iter().copied().chain(term_indices(t)));
    let n: f64 = all.iter().map(|&i| hir.index_size(i) as f64).product();
    let inner: f64 = t
        .factors
        .iter()
        .map(|f| match f {
            Factor::Call { arg, free, .. } | Factor::Sum { arg, free, .. } => naive_expr(hir, arg, free),
            Factor::Reduce { arg, free, .. } => naive_expr(hir, arg, &expr_indices(arg, free)),
            Factor::Select { args, free, .. } => args.iter().map(|a| naive_expr(hir, &a.as_expr(), free)).sum(),
            Factor::Tensor(_) | Factor::Affine(_) => 0.0,
        })
        .sum();
    // k factors in one nest: k - 1 multiplications, and an addition if it sums an
    // index (opt_einsum's naive count).
    let sums = all.len() > distinct(out.iter().copied()).len();
    let per_point = (t.factors.len().saturating_sub(1)).max(1) + usize::from(sums && t.factors.len() >= 2);
    inner + per_point as f64 * n
}

/// Cost of a term as it will run: binary steps by the cost model, ≥ 3 factors as
/// one loop nest, calls and sums by their arguments.
fn term_cost(hir: &Hir, t: &Term, out: &[IndexId]) -> f64 {
    let inner: f64 = t
        .factors
        .iter()
        .map(|f| match f {
            Factor::Call { arg, free, .. } | Factor::Sum { arg, free, .. } => {
                arg.terms.iter().map(|t| term_cost(hir, t, free)).sum()
            }
            Factor::Reduce { arg, free, .. } => {
                let all = expr_indices(arg, free);
                arg.terms.iter().map(|t| term_cost(hir, t, &all)).sum()
            }
            Factor::Select { args, free, .. } => args.iter().map(|a| naive_expr(hir, &a.as_expr(), free)).sum(),
            Factor::Tensor(_) | Factor::Affine(_) => 0.0,
        })
        .sum();
    let own = if t.factors.len() == 2 {
        let (p, _) = term_graph(hir, t, out).problem();
        optimize_path(&p, &Options::default()).map(|p| p.flops).unwrap_or_else(|_| naive_term(hir, t, out))
    } else {
        let all = distinct(out.iter().copied().chain(term_indices(t)));
        let n: f64 = all.iter().map(|&i| hir.index_size(i) as f64).product();
        if t.factors.len() >= 3 {
            2.0 * n
        } else {
            n
        }
    };
    inner + own
}

fn stmt_cost(hir: &Hir, s: &Stmt) -> f64 {
    s.rhs.terms.iter().map(|t| term_cost(hir, t, &s.lhs.indices)).sum()
}

/// Elements of the calls and sums a statement materialises.
fn opaque_elems(hir: &Hir, e: &Expr) -> f64 {
    let mut total = 0.0;
    for t in &e.terms {
        for f in &t.factors {
            if let Factor::Call { arg, free, .. } | Factor::Sum { arg, free, .. } = f {
                total += free.iter().map(|&i| hir.index_size(i) as f64).product::<f64>() + opaque_elems(hir, arg);
            }
        }
    }
    total
}

fn is_opaque(f: &Factor) -> bool {
    !matches!(f, Factor::Tensor(_))
}

impl Rw {
    fn fresh_name(&mut self) -> String {
        loop {
            let name = format!("_t{}", self.counter);
            self.counter += 1;
            if !self.hir.tensors.iter().any(|t| t.name == name) {
                return name;
            }
        }
    }

    fn new_temp(&mut self, indices: &[IndexId], sym: Vec<SymGroup>, ctx: &StmtCtx) -> TensorId {
        let name = self.fresh_name();
        let elem = self.hir.tensors[ctx.elem_of].elem;
        let dims = indices.iter().map(|&i| self.hir.indices[i].range).collect();
        self.hir.tensors.push(Tensor {
            name,
            role: Role::Temporary,
            elem,
            dims,
            symmetry: sym,
            pair_symmetry: Vec::new(),
            blocks: Vec::new(),
            span: ctx.span.clone(),
            model: ctx.model,
        })
    }

    fn tref(&self, t: TensorId, indices: Vec<IndexId>, span: &Span) -> Factor {
        Factor::Tensor(TensorRef { tensor: t, indices, span: span.clone() })
    }

    /// Values that cannot change during the unit: inputs, parameters, our temporaries.
    fn stable(&self, t: TensorId) -> bool {
        t >= self.n_orig || self.hir.tensors[t].role.is_read_only()
    }

    /// Optimizes an expression whose result has indices `out`, emitting the
    /// statements it needs into `emit`; returns the rewritten expression.
    fn expr(&mut self, e: &Expr, out: &[IndexId], ctx: &mut StmtCtx, emit: &mut Vec<Stmt>, top: bool) -> Expr {
        let mut terms: Vec<Term> = Vec::new();
        for t in &e.terms {
            let reorder = t.factors.len() >= 3;
            let mut factors = Vec::new();
            for f in &t.factors {
                match f {
                    Factor::Tensor(_) => factors.push(f.clone()),
                    Factor::Call { func, arg, free, span } => {
                        let arg = self.expr(arg, free, ctx, emit, false);
                        let call =
                            Factor::Call { func: *func, arg: Box::new(arg), free: free.clone(), span: span.clone() };
                        factors.push(if reorder { self.hoist(call, free, ctx, emit) } else { call });
                    }
                    // `max`, `min` and `where` are opaque: materialized before the
                    // optimizer runs, their arguments are single tensors.
                    Factor::Reduce { free, .. } | Factor::Select { free, .. } => {
                        factors.push(if reorder { self.hoist(f.clone(), free, ctx, emit) } else { f.clone() });
                    }
                    // Likewise affine subscripts: gathered into a temporary first.
                    Factor::Affine(a) => {
                        factors.push(if reorder { self.hoist(f.clone(), &a.free, ctx, emit) } else { f.clone() });
                    }
                    Factor::Sum { arg, free, span } => {
                        if reorder {
                            // The sum's own terms go straight into the temporary.
                            let arg = self.expr(arg, free, ctx, emit, false);
                            let tmp = self.new_temp(free, Vec::new(), ctx);
                            emit.push(Stmt {
                                lhs: TensorRef { tensor: tmp, indices: free.clone(), span: span.clone() },
                                accumulate: false,
                                rhs: arg,
                                span: ctx.span.clone(),
                            });
                            factors.push(self.tref(tmp, free.clone(), span));
                        } else {
                            let arg = self.expr(arg, free, ctx, emit, false);
                            factors.push(Factor::Sum { arg: Box::new(arg), free: free.clone(), span: span.clone() });
                        }
                    }
                }
            }
            terms.push(Term { coef: t.coef, factors, span: t.span.clone() });
        }
        if terms.len() >= 2 && terms.len() <= 16 {
            terms = self.factorize(terms, out, ctx, emit);
        }
        let mut result = Vec::new();
        for t in terms {
            result.extend(self.order_term(t, out, ctx, emit, top));
        }
        Expr { terms: result, span: e.span.clone() }
    }

    /// Computes an opaque factor into a temporary over `free`.
    fn hoist(&mut self, f: Factor, free: &[IndexId], ctx: &mut StmtCtx, emit: &mut Vec<Stmt>) -> Factor {
        let span = f.span().clone();
        let tmp = self.new_temp(free, Vec::new(), ctx);
        emit.push(Stmt {
            lhs: TensorRef { tensor: tmp, indices: free.to_vec(), span: span.clone() },
            accumulate: false,
            rhs: Expr { terms: vec![Term { coef: 1.0, factors: vec![f], span: span.clone() }], span: span.clone() },
            span: ctx.span.clone(),
        });
        self.tref(tmp, free.to_vec(), &span)
    }

    /// Estimated cost of a term after ordering (min of path and one loop nest).
    fn estimate(&self, t: &Term, out: &[IndexId]) -> f64 {
        if t.factors.len() < 2 {
            return naive_term(&self.hir, t, out);
        }
        let (p, _) = term_graph(&self.hir, t, out).problem();
        let naive = naive_term(&self.hir, t, out);
        // Estimates only rank alternatives: greedy, not the hyper-optimizer's budget.
        match optimize_path(&p, &self.opts.quick()) {
            Ok(path) => path.flops.min(naive),
            Err(_) => naive,
        }
    }

    /// Applies profitable factorizations `A*X1 + A*X2 → A*(X1 + X2)`.
    fn factorize(
        &mut self,
        mut terms: Vec<Term>,
        out: &[IndexId],
        ctx: &mut StmtCtx,
        emit: &mut Vec<Stmt>,
    ) -> Vec<Term> {
        for _round in 0..8 {
            let mut best: Option<(f64, TensorRef, Vec<usize>, Vec<IndexId>)> = None;
            let mut candidates: Vec<TensorRef> = Vec::new();
            for t in &terms {
                for f in &t.factors {
                    if let Factor::Tensor(r) = f {
                        if !candidates.iter().any(|c| c.tensor == r.tensor && c.indices == r.indices) {
                            candidates.push(r.clone());
                        }
                    }
                }
            }
            for a in &candidates {
                // Terms holding `a`, grouped by the index set of their remainder.
                let mut groups: Vec<(Vec<IndexId>, Vec<usize>)> = Vec::new();
                for (k, t) in terms.iter().enumerate() {
                    if t.factors.len() < 2 || t.factors.iter().any(is_opaque) {
                        continue;
                    }
                    let Some(pos) = t
                        .factors
                        .iter()
                        .position(|f| matches!(f, Factor::Tensor(r) if r.tensor == a.tensor && r.indices == a.indices))
                    else {
                        continue;
                    };
                    let rest: Vec<IndexId> = distinct(
                        t.factors
                            .iter()
                            .enumerate()
                            .filter(|(j, _)| *j != pos)
                            .flat_map(|(_, f)| f.indices().iter().copied()),
                    );
                    let mut fset: Vec<IndexId> =
                        rest.into_iter().filter(|i| a.indices.contains(i) || out.contains(i)).collect();
                    fset.sort();
                    match groups.iter_mut().find(|(g, _)| *g == fset) {
                        Some((_, v)) => v.push(k),
                        None => groups.push((fset, vec![k])),
                    }
                }
                for (fset, members) in groups {
                    if members.len() < 2 {
                        continue;
                    }
                    let before: f64 = members.iter().map(|&k| self.estimate(&terms[k], out)).sum();
                    let mut after = 0.0;
                    for &k in &members {
                        after += self.estimate(&remainder(&terms[k], a), &fset);
                    }
                    // A * S[F]: one binary step.
                    let union = distinct(a.indices.iter().copied().chain(fset.iter().copied()));
                    let usize_: f64 = union.iter().map(|&i| self.hir.index_size(i) as f64).product();
                    after += if union.iter().all(|i| out.contains(i)) { usize_ } else { 2.0 * usize_ };
                    let gain = before - after;
                    if gain > 1e-9 * before && best.as_ref().is_none_or(|b| gain > b.0) {
                        best = Some((gain, a.clone(), members, fset));
                    }
                }
            }
            let Some((_, a, members, fset)) = best else { break };
            // S[F] = Σ c_k X_k
            let sum_terms: Vec<Term> = members.iter().map(|&k| remainder(&terms[k], &a)).collect();
            let span = terms[members[0]].span.clone();
            let sum_expr = Expr { terms: sum_terms, span: span.clone() };
            let rhs = self.expr(&sum_expr, &fset, ctx, emit, false);
            let tmp = self.new_temp(&fset, Vec::new(), ctx);
            ctx.factorized.push(format!(
                "{}*({} terms) -> {}",
                factor_label(&self.hir, &Factor::Tensor(a.clone())),
                members.len(),
                ref_text(&self.hir, &self.hir.tensors[tmp].name, &fset)
            ));
            emit.push(Stmt {
                lhs: TensorRef { tensor: tmp, indices: fset.clone(), span: span.clone() },
                accumulate: false,
                rhs,
                span: ctx.span.clone(),
            });
            let merged =
                Term { coef: 1.0, factors: vec![Factor::Tensor(a.clone()), self.tref(tmp, fset.clone(), &span)], span };
            let first = members[0];
            let mut next = Vec::new();
            for (k, t) in terms.into_iter().enumerate() {
                if k == first {
                    next.push(merged.clone());
                } else if !members.contains(&k) {
                    next.push(t);
                }
            }
            terms = next;
        }
        terms
    }

    /// Orders one term (all factors plain tensors when it has ≥ 3), emitting its
    /// intermediates; returns the final binary term, or `None` when the term is
    /// sliced (its steps and last product then go to `ctx.sliced`).
    fn order_term(
        &mut self,
        t: Term,
        out: &[IndexId],
        ctx: &mut StmtCtx,
        emit: &mut Vec<Stmt>,
        top: bool,
    ) -> Option<Term> {
        let labels: Vec<String> = t.factors.iter().map(|f| factor_label(&self.hir, f)).collect();
        let note = |ctx: &mut StmtCtx, text: String, m: Method| {
            if top {
                // A constant term (broadcast over the result) has no factors.
                ctx.order.push(if text.is_empty() { "(a number)".to_string() } else { text });
                ctx.method.push(m);
            }
        };
        if t.factors.len() < 3 {
            let text = if labels.len() == 2 { format!("({}*{})", labels[0], labels[1]) } else { labels.join("") };
            note(ctx, text, Method::Trivial);
            return Some(t);
        }
        let (p, local) = term_graph(&self.hir, &t, out).problem();
        let path = match optimize_path(&p, &self.opts) {
            Ok(path) => path,
            Err(e) => {
                note(ctx, format!("{} (not reordered: {e})", labels.join("*")), Method::Trivial);
                return Some(t);
            }
        };
        if path.flops >= naive_term(&self.hir, &t, out) {
            note(ctx, format!("{} (single loop nest)", labels.join("*")), path.method);
            return Some(t);
        }
        if let Some(bytes) = self.opts.slice_bytes.filter(|_| top) {
            let elem = self.hir.tensors[ctx.elem_of].elem.size_bytes() as f64;
            // Statements over parts of a union range run whole (never inside loops).
            let part =
                ctx.lhs_is_slice || t.factors.iter().any(|f| matches!(f, Factor::Tensor(r) if self.hir.is_slice(r)));
            match self.slicing(&p, &path, &local, bytes, elem, part) {
                Ok(None) => {}
                Ok(Some((s, text))) => {
                    // The order of one slice is the one emitted.
                    note(ctx, opmin::path_text(&s.path, &|k| labels[k].clone()), s.path.method);
                    ctx.slicing.push(text);
                    let mut steps = Vec::new();
                    self.no_cse = true;
                    let last = self.emit_root(&s.path, t, &local, ctx, &mut steps);
                    self.no_cse = false;
                    let group = crate::sema::hir::SliceGroup {
                        indices: s.indices.iter().map(|&i| local[i]).collect(),
                        temps: steps.iter().map(|st| st.lhs.tensor).collect(),
                        target: ctx.elem_of,
                        slices: s.slices,
                        flops: s.flops,
                        largest: s.largest,
                        overhead: s.overhead(),
                    };
                    ctx.sliced.push((steps, last, group));
                    return None;
                }
                Err(text) => ctx.slicing.push(text),
            }
        }
        note(ctx, opmin::path_text(&path, &|k| labels[k].clone()), path.method);
        Some(self.emit_root(&path, t, &local, ctx, emit))
    }

    /// Emits the steps of `path` but the last, whose product is returned.
    fn emit_root(&mut self, path: &Path, t: Term, local: &[IndexId], ctx: &mut StmtCtx, emit: &mut Vec<Stmt>) -> Term {
        let root = path.steps.len() - 1 + path.n_inputs;
        let (a, b) = (path.steps[root - path.n_inputs].a, path.steps[root - path.n_inputs].b);
        let fa = self.emit_node(a, path, &t, local, ctx, emit);
        let fb = self.emit_node(b, path, &t, local, ctx, emit);
        Term { coef: t.coef, factors: vec![fa, fb], span: t.span }
    }

    /// The slicing of `path` of problem `p` that makes every intermediate fit
    /// `bytes` (`elem` bytes an element) and the report's line for it; `None` when
    /// it fits already, the report's line when no slicing was found or the term
    /// touches `part` of a union range.
    fn slicing(
        &self,
        p: &opmin::Problem,
        path: &Path,
        local: &[IndexId],
        bytes: u64,
        elem: f64,
        part: bool,
    ) -> Result<Option<(super::slice::Slicing, String)>, String> {
        let target = (bytes as f64 / elem).floor();
        if super::slice::largest_intermediate(path) <= target {
            return Ok(None);
        }
        if part {
            return Err("not sliced: the term reads or writes part of a union range, which runs whole".to_string());
        }
        let s = match super::slice::slice_path(p, path.clone(), target, &self.opts) {
            Ok(s) if !s.indices.is_empty() => s,
            Ok(_) => return Ok(None),
            Err(e) => return Err(format!("not sliced: {e}")),
        };
        let names: Vec<&str> = s.indices.iter().map(|&i| self.hir.indices[local[i]].name.as_str()).collect();
        let text = format!(
            "{}: {} slices keep every intermediate within {} bytes (largest {} -> {} elements), flops {} -> {} ({})",
            names.join(","),
            num(s.slices),
            bytes,
            num(s.unsliced_largest),
            num(s.largest),
            num(s.unsliced_flops),
            num(s.flops),
            times(s.overhead())
        );
        Ok(Some((s, text)))
    }

    /// The factor for SSA node `id` of `path`: an input, a reused intermediate or a
    /// new temporary (its operands emitted first).
    fn emit_node(
        &mut self,
        id: usize,
        path: &Path,
        t: &Term,
        local: &[IndexId],
        ctx: &mut StmtCtx,
        emit: &mut Vec<Stmt>,
    ) -> Factor {
        let n = path.n_inputs;
        if id < n {
            return t.factors[id].clone();
        }
        let step = &path.steps[id - n];
        let indices: Vec<IndexId> = step.indices.iter().map(|&i| local[i]).collect();
        let mut leaves = Vec::new();
        collect_leaves(path, id, &mut leaves);
        let refs: Vec<(TensorId, Vec<IndexId>)> = leaves
            .iter()
            .map(|&k| match &t.factors[k] {
                Factor::Tensor(r) => (r.tensor, r.indices.clone()),
                _ => unreachable!("opaque factors are hoisted before ordering"),
            })
            .collect();
        let cse_ok = !self.no_cse && refs.iter().all(|(tn, _)| self.stable(*tn));
        let key = if cse_ok { Some(canonical(&refs, &indices)) } else { None };
        if let Some((key, lab)) = &key {
            if let Some((tmp, tlabels)) = self.cse.get(key) {
                let back: HashMap<usize, IndexId> = lab.iter().map(|(&i, &l)| (l, i)).collect();
                let idx: Vec<IndexId> = tlabels.iter().map(|l| back[l]).collect();
                ctx.reused.push(format!(
                    "{} as {}",
                    refs.iter()
                        .map(|(tn, ix)| ref_text(&self.hir, &self.hir.tensors[*tn].name, ix))
                        .collect::<Vec<_>>()
                        .join("*"),
                    ref_text(&self.hir, &self.hir.tensors[*tmp].name, &idx)
                ));
                let tmp = *tmp;
                return self.tref(tmp, idx, &t.span);
            }
        }
        let fa = self.emit_node(step.a, path, t, local, ctx, emit);
        let fb = self.emit_node(step.b, path, t, local, ctx, emit);
        let sym = step
            .sym
            .iter()
            .map(|g| SymGroup {
                kind: g.kind,
                positions: step.indices.iter().enumerate().filter(|(_, i)| g.ids.contains(i)).map(|(p, _)| p).collect(),
            })
            .collect();
        let tmp = self.new_temp(&indices, sym, ctx);
        emit.push(Stmt {
            lhs: TensorRef { tensor: tmp, indices: indices.clone(), span: t.span.clone() },
            accumulate: false,
            rhs: Expr {
                terms: vec![Term { coef: 1.0, factors: vec![fa, fb], span: t.span.clone() }],
                span: t.span.clone(),
            },
            span: ctx.span.clone(),
        });
        if let Some((key, lab)) = key {
            let tl = indices.iter().map(|i| lab[i]).collect();
            self.cse.insert(key, (tmp, tl));
        }
        self.tref(tmp, indices, &t.span)
    }
}

fn collect_leaves(path: &Path, id: usize, out: &mut Vec<usize>) {
    if id < path.n_inputs {
        out.push(id);
    } else {
        let s = &path.steps[id - path.n_inputs];
        collect_leaves(path, s.a, out);
        collect_leaves(path, s.b, out);
    }
}

/// The term without (one occurrence of) factor `a`.
fn remainder(t: &Term, a: &TensorRef) -> Term {
    let pos = t
        .factors
        .iter()
        .position(|f| matches!(f, Factor::Tensor(r) if r.tensor == a.tensor && r.indices == a.indices))
        .expect("factor present");
    let factors = t.factors.iter().enumerate().filter(|(j, _)| *j != pos).map(|(_, f)| f.clone()).collect();
    Term { coef: t.coef, factors, span: t.span.clone() }
}

/// Canonical form of the product of `refs` keeping `kept`, up to renaming of
/// indices: factors ordered by tensor (all orders of equal tensors tried, up to 720),
/// indices labelled by first appearance; the least key wins.
fn canonical(refs: &[(TensorId, Vec<IndexId>)], kept: &[IndexId]) -> (Key, HashMap<IndexId, usize>) {
    let mut order: Vec<usize> = (0..refs.len()).collect();
    order.sort_by_key(|&k| refs[k].0);
    // Runs of equal tensors.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut s = 0;
    for k in 1..=order.len() {
        if k == order.len() || refs[order[k]].0 != refs[order[s]].0 {
            runs.push((s, k));
            s = k;
        }
    }
    let total: usize = runs.iter().map(|&(a, b)| (1..=(b - a)).product::<usize>()).product();
    let mut best: Option<(Key, HashMap<IndexId, usize>)> = None;
    let mut consider = |ord: &[usize]| {
        let mut lab: HashMap<IndexId, usize> = HashMap::new();
        let mut fs = Vec::new();
        for &k in ord {
            let ls = refs[k]
                .1
                .iter()
                .map(|i| {
                    let n = lab.len();
                    *lab.entry(*i).or_insert(n)
                })
                .collect();
            fs.push((refs[k].0, ls));
        }
        let mut kl: Vec<usize> = kept.iter().map(|i| lab[i]).collect();
        kl.sort();
        let key = (fs, kl);
        if best.as_ref().is_none_or(|(b, _)| key < *b) {
            best = Some((key, lab));
        }
    };
    if total <= 720 {
        permute_runs(&mut order, &runs, 0, &mut consider);
    } else {
        consider(&order);
    }
    best.expect("at least one order")
}

fn permute_runs(order: &mut Vec<usize>, runs: &[(usize, usize)], r: usize, f: &mut dyn FnMut(&[usize])) {
    if r == runs.len() {
        f(order);
        return;
    }
    let (a, b) = runs[r];
    permute_range(order, b, a, runs, r, f);
}

fn permute_range(
    order: &mut Vec<usize>,
    b: usize,
    k: usize,
    runs: &[(usize, usize)],
    r: usize,
    f: &mut dyn FnMut(&[usize]),
) {
    if k + 1 >= b {
        permute_runs(order, runs, r + 1, f);
        return;
    }
    for j in k..b {
        order.swap(k, j);
        permute_range(order, b, k + 1, runs, r, f);
        order.swap(k, j);
    }
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;
