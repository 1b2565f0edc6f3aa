//! Materialization: preparing a checked program for code generation.
//!
//! The code generators compile loop nests whose statements multiply *elements*:
//! tensor factors, and element-wise functions of one tensor element. This pass
//! rewrites the HIR into that form, preserving the interpreter's values:
//!
//! * a parenthesised sum `(e)[free]` is computed first into a fresh temporary
//!   `_mN[free] = e` and read like a tensor;
//! * a call `f(e)` whose argument is not a single tensor element over the call's
//!   free indices gets its argument computed into `_mN[free] = e` first, and stays
//!   as the factor `f(_mN[free])` (applied element by element when the product is
//!   formed);
//! * a statement that reads its own target (`C[i,j] += C[j,i]`) first computes its
//!   right-hand side into a temporary, then assigns or adds that (the interpreter
//!   evaluates the right-hand side completely before writing).
//!
//! * a tensor read at affine subscripts (`I[n,c,y+r,x+s]`) is gathered into a
//!   temporary over its free indices, `_mN[n,c,y,r,x,s] = I[n,c,y+r,x+s]` (im2col),
//!   so every later pass sees plain tensors and a convolution is an ordinary
//!   contraction (a GEMM);
//!
//! Temporaries take the element type of the statement that needs them.
//! [`crate::pipeline::prepare`] runs this, then the optimizer ([`crate::tir::optimize`]),
//! then this again (the optimizer may leave calls in terms it did not reorder).

use crate::sema::hir::{
    expr_indices, AffineRef, CmpOp, ElemType, Expr, Extremum, Factor, Hir, IndexId, ModelId, Role, Stmt, Tensor,
    TensorId, TensorRef, Term, UnitKind,
};

/// Whether `arg` (the argument of a call over `free`) is one tensor element:
/// one term, coefficient 1, a single tensor factor indexed by exactly the free
/// indices (each once).
pub fn simple_call_arg<'e>(arg: &'e Expr, free: &[IndexId]) -> Option<&'e TensorRef> {
    if arg.terms.len() != 1 || arg.terms[0].coef != 1.0 || arg.terms[0].factors.len() != 1 {
        return None;
    }
    match &arg.terms[0].factors[0] {
        Factor::Tensor(r) => {
            let mut a = r.indices.clone();
            a.sort_unstable();
            let distinct = a.windows(2).all(|w| w[0] != w[1]);
            let mut f = free.to_vec();
            f.sort_unstable();
            (distinct && a == f).then_some(r)
        }
        _ => None,
    }
}

/// A statement the back ends compute as a whole: `T[free] = max(A[…])` /
/// `min(…)` with `A` one tensor over distinct indices including `free`, or
/// `T[free] = where(a cmp b, x, y)` with each argument one tensor over distinct
/// indices among `free` ([`materialize`] leaves every `max`, `min` and `where`
/// so).
pub enum Special<'s> {
    Reduce {
        op: Extremum,
        arg: &'s TensorRef,
    },
    Select {
        cmp: CmpOp,
        args: Vec<&'s TensorRef>,
    },
    /// `T[…] = I[n,c,y+r,x+s]`: a gather at affine subscripts, over the target's
    /// indices (distinct, in any order).
    Gather {
        arg: &'s AffineRef,
    },
}

/// `st` as a [`Special`] statement, if it is one.
pub fn special_stmt(st: &Stmt) -> Option<Special<'_>> {
    let [t] = &st.rhs.terms[..] else { return None };
    let [f] = &t.factors[..] else { return None };
    if let Factor::Affine(arg) = f {
        // A gather may store its indices in any order (see `Mat::gather_order`).
        let (mut a, mut b) = (arg.free.clone(), st.lhs.indices.clone());
        a.sort_unstable();
        b.sort_unstable();
        return (t.coef == 1.0 && a == b && distinct(&a)).then_some(Special::Gather { arg });
    }
    if t.coef != 1.0 || f.indices() != st.lhs.indices.as_slice() {
        return None;
    }
    match f {
        Factor::Reduce { op, arg, free, .. } => {
            simple_reduce_arg(arg, free).map(|arg| Special::Reduce { op: *op, arg })
        }
        Factor::Select { cmp, args, .. } => {
            let args: Vec<&TensorRef> = args.iter().filter_map(|a| simple_select_arg(a)).collect();
            (args.len() == 4).then_some(Special::Select { cmp: *cmp, args })
        }
        _ => None,
    }
}

fn distinct(idx: &[IndexId]) -> bool {
    idx.iter().enumerate().all(|(p, i)| !idx[..p].contains(i))
}

/// The argument of `max`/`min` over `free` if it is one tensor over distinct
/// indices including `free`.
fn simple_reduce_arg<'e>(arg: &'e Expr, free: &[IndexId]) -> Option<&'e TensorRef> {
    let [t] = &arg.terms[..] else { return None };
    match &t.factors[..] {
        [Factor::Tensor(r)] if t.coef == 1.0 && distinct(&r.indices) && free.iter().all(|i| r.indices.contains(i)) => {
            Some(r)
        }
        _ => None,
    }
}

/// An argument of `where` if it is one tensor over distinct indices.
fn simple_select_arg(a: &Factor) -> Option<&TensorRef> {
    match a {
        Factor::Tensor(r) if distinct(&r.indices) => Some(r),
        Factor::Sum { arg, free, .. } => simple_call_arg(arg, free),
        _ => None,
    }
}

/// Rewrites calls, sums and self-reads; see the module documentation.
/// Most terms in one statement handed to the back ends: a loop body of
/// thousands of products made LLVM's memory-dependence analysis quadratic (1000
/// terms took over a minute to compile), so longer sums are split.
pub const MAX_TERMS: usize = 32;

/// Splits statements of more than [`MAX_TERMS`] terms into a first statement of
/// [`MAX_TERMS`] terms (`=` or `+=`, as written) followed by `+=` statements
/// of the rest. Run after [`materialize`], which leaves no statement reading
/// its own target, so the split computes the same sum (in another association).
pub fn split_wide_sums(hir: &Hir) -> Hir {
    let mut out = hir.clone();
    for u in hir.units.ids() {
        if hir.units[u].stmts.iter().all(|s| s.rhs.terms.len() <= MAX_TERMS) {
            continue;
        }
        let mut stmts = Vec::new();
        for s in &hir.units[u].stmts {
            if s.rhs.terms.len() <= MAX_TERMS {
                stmts.push(s.clone());
                continue;
            }
            for (k, chunk) in s.rhs.terms.chunks(MAX_TERMS).enumerate() {
                stmts.push(Stmt {
                    lhs: s.lhs.clone(),
                    accumulate: s.accumulate || k > 0,
                    rhs: Expr { terms: chunk.to_vec(), span: s.rhs.span.clone() },
                    span: s.span.clone(),
                });
            }
        }
        out.units[u].stmts = stmts;
    }
    out
}

pub fn materialize(hir: &Hir) -> Hir {
    let mut m = Mat { hir: hir.clone(), counter: 0, memo: Vec::new() };
    for u in hir.units.ids() {
        let model = match hir.units[u].kind {
            UnitKind::Model(id) => Some(id),
            UnitKind::Program => None,
        };
        let stmts = std::mem::take(&mut m.hir.units[u].stmts);
        let mut out = Vec::new();
        for s in stmts {
            m.memo.clear();
            let elem = m.hir.tensors[s.lhs.tensor].elem;
            // A `max`, `min` or `where` already alone in its statement stays there.
            if let Some(f) = m.special_alone(&s) {
                let mut f = m.special_args(f, elem, model, &mut out);
                if let Factor::Reduce { free, .. } | Factor::Select { free, .. } = &mut f {
                    free.clone_from(&s.lhs.indices);
                }
                let rhs = Expr {
                    terms: vec![Term { coef: 1.0, factors: vec![f], span: s.span.clone() }],
                    span: s.span.clone(),
                };
                out.push(Stmt { lhs: s.lhs.clone(), accumulate: s.accumulate, rhs, span: s.span.clone() });
                continue;
            }
            let rhs = m.expr(&s.rhs, elem, model, &mut out);
            let mut self_read = false;
            crate::sema::hir::collect_reads(&rhs, &mut |t| self_read |= t == s.lhs.tensor);
            if self_read {
                let tmp = m.temp(&s.lhs.indices, elem, model);
                let r = TensorRef { tensor: tmp, indices: s.lhs.indices.clone(), span: s.span.clone() };
                out.push(Stmt { lhs: r.clone(), accumulate: false, rhs, span: s.span.clone() });
                let read = Expr {
                    terms: vec![Term { coef: 1.0, factors: vec![Factor::Tensor(r)], span: s.span.clone() }],
                    span: s.span.clone(),
                };
                out.push(Stmt { lhs: s.lhs.clone(), accumulate: s.accumulate, rhs: read, span: s.span.clone() });
            } else {
                out.push(Stmt { lhs: s.lhs.clone(), accumulate: s.accumulate, rhs, span: s.span.clone() });
            }
        }
        m.hir.units[u].stmts = out;
    }
    m.hir
}

struct Mat {
    hir: Hir,
    counter: usize,
    /// The sub-expressions of the current statement already computed into
    /// temporaries, by value (the copies `softmax` makes of its argument are
    /// computed once; within one right-hand side nothing they read changes).
    memo: Vec<(Factor, TensorRef)>,
}

impl Mat {
    fn temp(&mut self, idx: &[IndexId], elem: ElemType, model: Option<ModelId>) -> TensorId {
        self.counter += 1;
        let dims = idx.iter().map(|&i| self.hir.indices[i].range).collect();
        self.hir.tensors.push(Tensor {
            name: format!("_m{}", self.counter),
            role: Role::Temporary,
            elem,
            dims,
            symmetry: Vec::new(),
            pair_symmetry: Vec::new(),
            blocks: Vec::new(),
            span: 0..0,
            model,
        });
        TensorId::new(self.hir.tensors.len() - 1)
    }

    /// Computes `e` over `free` into a fresh temporary (statements into `out`).
    fn compute_into(
        &mut self,
        e: &Expr,
        free: &[IndexId],
        elem: ElemType,
        model: Option<ModelId>,
        out: &mut Vec<Stmt>,
    ) -> TensorRef {
        let key = Factor::Sum { arg: Box::new(e.clone()), free: free.to_vec(), span: 0..0 };
        if let Some((_, r)) = self.memo.iter().find(|(k, _)| *k == key) {
            return r.clone();
        }
        let inner = self.expr(e, elem, model, out);
        let t = self.temp(free, elem, model);
        let r = TensorRef { tensor: t, indices: free.to_vec(), span: e.span.clone() };
        out.push(Stmt { lhs: r.clone(), accumulate: false, rhs: inner, span: e.span.clone() });
        self.memo.push((key, r.clone()));
        r
    }

    /// The `max`/`min`/`where` factor that is `s`'s whole right-hand side over its
    /// target's indices (in any order), if `s` does not read its target.
    fn special_alone<'s>(&self, s: &'s Stmt) -> Option<&'s Factor> {
        let [t] = &s.rhs.terms[..] else { return None };
        let [f] = &t.factors[..] else { return None };
        let mut self_read = false;
        crate::sema::hir::collect_reads(&s.rhs, &mut |x| self_read |= x == s.lhs.tensor);
        let (mut a, mut b) = (f.indices().to_vec(), s.lhs.indices.clone());
        a.sort_unstable();
        b.sort_unstable();
        let special = matches!(f, Factor::Reduce { .. } | Factor::Select { .. } | Factor::Affine(_));
        (special && !self_read && t.coef == 1.0 && a == b && distinct(&a)).then_some(f)
    }

    /// A `max`/`min`/`where` factor with every argument a single tensor (computed
    /// into temporaries first where it is not).
    fn special_args(&mut self, f: &Factor, elem: ElemType, model: Option<ModelId>, out: &mut Vec<Stmt>) -> Factor {
        match f {
            Factor::Reduce { op, arg, free, span } => {
                let arg = match simple_reduce_arg(arg, free) {
                    Some(_) => (**arg).clone(),
                    None => {
                        let all = expr_indices(arg, free);
                        let mut all_free: Vec<IndexId> = free.clone();
                        all_free.extend(all.into_iter().filter(|i| !free.contains(i)));
                        let r = self.compute_into(arg, &all_free, elem, model, out);
                        Expr {
                            terms: vec![Term { coef: 1.0, factors: vec![Factor::Tensor(r)], span: span.clone() }],
                            span: span.clone(),
                        }
                    }
                };
                Factor::Reduce { op: *op, arg: Box::new(arg), free: free.clone(), span: span.clone() }
            }
            Factor::Select { cmp, args, free, span } => {
                let args = args
                    .iter()
                    .map(|a| match (simple_select_arg(a), a) {
                        (Some(r), _) => Factor::Tensor(r.clone()),
                        (None, Factor::Sum { arg, free, .. }) => {
                            Factor::Tensor(self.compute_into(arg, free, elem, model, out))
                        }
                        (None, _) => {
                            let mut own: Vec<IndexId> = Vec::new();
                            for &i in a.indices() {
                                if !own.contains(&i) {
                                    own.push(i);
                                }
                            }
                            Factor::Tensor(self.compute_into(&a.as_expr(), &own, elem, model, out))
                        }
                    })
                    .collect();
                Factor::Select { cmp: *cmp, args, free: free.clone(), span: span.clone() }
            }
            _ => f.clone(),
        }
    }

    fn expr(&mut self, e: &Expr, elem: ElemType, model: Option<ModelId>, out: &mut Vec<Stmt>) -> Expr {
        let mut terms = Vec::new();
        for t in &e.terms {
            let mut factors = Vec::new();
            for f in &t.factors {
                factors.push(match f {
                    Factor::Tensor(_) => f.clone(),
                    Factor::Sum { arg, free, .. } => Factor::Tensor(self.compute_into(arg, free, elem, model, out)),
                    Factor::Call { func, arg, free, span } => {
                        let arg = if simple_call_arg(arg, free).is_some() {
                            (**arg).clone()
                        } else {
                            let r = self.compute_into(arg, free, elem, model, out);
                            Expr {
                                terms: vec![Term { coef: 1.0, factors: vec![Factor::Tensor(r)], span: span.clone() }],
                                span: span.clone(),
                            }
                        };
                        Factor::Call { func: *func, arg: Box::new(arg), free: free.clone(), span: span.clone() }
                    }
                    // Gathered into a temporary laid out for the contraction.
                    Factor::Affine(a) => {
                        if let Some((_, r)) = self.memo.iter().find(|(k, _)| k == f) {
                            factors.push(Factor::Tensor(r.clone()));
                            continue;
                        }
                        let order = gather_order(a, &t.factors);
                        let tmp = self.temp(&order, elem, model);
                        let r = TensorRef { tensor: tmp, indices: order, span: a.span.clone() };
                        let rhs = Expr {
                            terms: vec![Term { coef: 1.0, factors: vec![f.clone()], span: a.span.clone() }],
                            span: a.span.clone(),
                        };
                        out.push(Stmt { lhs: r.clone(), accumulate: false, rhs, span: a.span.clone() });
                        self.memo.push((f.clone(), r.clone()));
                        Factor::Tensor(r)
                    }
                    // Into a statement of its own (see [`special_stmt`]).
                    Factor::Reduce { free, span, .. } | Factor::Select { free, span, .. } => {
                        if let Some((_, r)) = self.memo.iter().find(|(k, _)| k == f) {
                            factors.push(Factor::Tensor(r.clone()));
                            continue;
                        }
                        let key = f.clone();
                        let f = self.special_args(f, elem, model, out);
                        let t = self.temp(free, elem, model);
                        let r = TensorRef { tensor: t, indices: free.clone(), span: span.clone() };
                        let rhs = Expr {
                            terms: vec![Term { coef: 1.0, factors: vec![f], span: span.clone() }],
                            span: span.clone(),
                        };
                        out.push(Stmt { lhs: r.clone(), accumulate: false, rhs, span: span.clone() });
                        self.memo.push((key, r.clone()));
                        Factor::Tensor(r)
                    }
                });
            }
            terms.push(Term { coef: t.coef, factors, span: t.span.clone() });
        }
        Expr { terms, span: e.span.clone() }
    }
}

/// The index order of the temporary an affine read `a` is gathered into: first
/// the indices no other factor of the term has (the GEMM's rows: `n,y,x` of a
/// convolution), then the shared ones in the order the other factors have them
/// (`c,r,s` as in `F[k,c,r,s]`), so that the summed indices are contiguous and
/// ordered alike in both operands — the GEMM reads plain row-major matrices.
fn gather_order(a: &AffineRef, factors: &[Factor]) -> Vec<IndexId> {
    let mut others: Vec<IndexId> = Vec::new();
    for f in factors {
        if matches!(f, Factor::Affine(b) if b == a) {
            continue;
        }
        for &i in f.indices() {
            if a.free.contains(&i) && !others.contains(&i) {
                others.push(i);
            }
        }
    }
    let mut order: Vec<IndexId> = a.free.iter().copied().filter(|i| !others.contains(i)).collect();
    order.extend(others);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UnitId;
    use std::collections::HashMap;

    #[test]
    fn wide_sums_are_split_into_accumulations_with_the_same_value() {
        // C = 70 terms, then D += 40 terms: 3 + 2 statements, the same values.
        let terms = |n: usize| (0..n).map(|t| format!("{}.5 * A{}[i,j] * B[j,k]", t % 5, t % 3)).collect::<Vec<_>>();
        let src = format!(
            "range N = 3; index i, j, k : N; input tensor A0[i,j]; input tensor A1[i,j]; input tensor A2[i,j];\n\
             input tensor B[j,k]; output tensor C[i,k]; output tensor D[i,k];\nC[i,k] = {};\nD[i,k] = A0[i,j] * B[j,k];\nD[i,k] += {};\n",
            terms(70).join(" + "),
            terms(40).join(" - ")
        );
        let (hir, diags) = crate::compile(&src, "wide");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
        let split = split_wide_sums(&materialize(&hir));
        let u = UnitId::new(0);
        let stmts = &split.units[u].stmts;
        assert_eq!(stmts.len(), 3 + 1 + 2);
        assert!(stmts.iter().all(|s| s.rhs.terms.len() <= MAX_TERMS));
        assert_eq!(stmts.iter().map(|s| s.accumulate).collect::<Vec<_>>(), [false, true, true, false, true, true]);
        let inputs = crate::interp::random_inputs(&hir, u, 1).unwrap();
        let want = crate::interp::run_unit(&hir, u, &inputs).unwrap();
        let got = crate::interp::run_unit(&split, u, &inputs).unwrap();
        for (t, w) in &want {
            crate::run::compare::compare(
                &HashMap::from([(*t, got[t].clone())]),
                &HashMap::from([(*t, w.clone())]),
                1e-12,
                |_| "out".into(),
            )
            .unwrap();
        }
    }
}
