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
//! Temporaries take the element type of the statement that needs them.
//! [`crate::pipeline::prepare`] runs this, then the optimizer ([`crate::tir::optimize`]),
//! then this again (the optimizer may leave calls in terms it did not reorder).

use crate::sema::hir::{
    ElemType, Expr, Factor, Hir, IndexId, ModelId, Role, Stmt, Tensor, TensorId, TensorRef, Term, UnitKind,
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

/// Rewrites calls, sums and self-reads; see the module documentation.
pub fn materialize(hir: &Hir) -> Hir {
    let mut m = Mat { hir: hir.clone(), counter: 0 };
    for u in hir.units.ids() {
        let model = match hir.units[u].kind {
            UnitKind::Model(id) => Some(id),
            UnitKind::Program => None,
        };
        let stmts = std::mem::take(&mut m.hir.units[u].stmts);
        let mut out = Vec::new();
        for s in stmts {
            let elem = m.hir.tensors[s.lhs.tensor].elem;
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
        let inner = self.expr(e, elem, model, out);
        let t = self.temp(free, elem, model);
        let r = TensorRef { tensor: t, indices: free.to_vec(), span: e.span.clone() };
        out.push(Stmt { lhs: r.clone(), accumulate: false, rhs: inner, span: e.span.clone() });
        r
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
                });
            }
            terms.push(Term { coef: t.coef, factors, span: t.span.clone() });
        }
        Expr { terms, span: e.span.clone() }
    }
}
