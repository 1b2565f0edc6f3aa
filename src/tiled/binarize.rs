//! Products of three or more factors split into binary ones for tiled execution.
//!
//! The optimizer binarizes contractions, but it keeps an element-wise product
//! (`R[a,b,i,j] · exp(X[a,b,i,j]) · recip(D[a,b,i,j])`) as one term, since one loop
//! nest is cheapest for it. A tile task calls one kernel per pair of operand
//! tiles, so such a term is computed here left to right through temporaries
//! `_bN`, each over the indices of its two factors that the rest of the term or
//! the written tensor still needs. Values are unchanged up to rounding: the
//! interpreter sums the same products.

use crate::ids::{IndexId, TensorId, UnitId};
use crate::sema::hir::{Expr, Factor, Hir, Role, Stmt, Tensor, TensorRef, Term};

/// `hir` with every term of unit `unit` that has more than two factors split.
pub(crate) fn binary_products(hir: &Hir, unit: UnitId) -> Hir {
    let mut out = hir.clone();
    if hir.units[unit].stmts.iter().all(|s| s.rhs.terms.iter().all(|t| t.factors.len() <= 2)) {
        return out;
    }
    let mut counter = 0;
    let mut stmts = Vec::new();
    for st in &hir.units[unit].stmts {
        let mut terms = Vec::new();
        for term in &st.rhs.terms {
            let mut factors = term.factors.clone();
            while factors.len() > 2 {
                let rest: Vec<&Factor> = factors[2..].iter().collect();
                let needed = |i: &IndexId| st.lhs.indices.contains(i) || rest.iter().any(|f| f.indices().contains(i));
                let mut idx: Vec<IndexId> = Vec::new();
                for &i in factors[0].indices().iter().chain(factors[1].indices()) {
                    if needed(&i) && !idx.contains(&i) {
                        idx.push(i);
                    }
                }
                let tmp = new_temp(&mut out, &mut counter, &idx, st.lhs.tensor);
                let pair: Vec<Factor> = factors.drain(..2).collect();
                let span = term.span.clone();
                stmts.push(Stmt {
                    lhs: TensorRef { tensor: tmp, indices: idx.clone(), span: span.clone() },
                    accumulate: false,
                    rhs: Expr {
                        terms: vec![Term { coef: 1.0, factors: pair, span: span.clone() }],
                        span: span.clone(),
                    },
                    span: st.span.clone(),
                });
                factors.insert(0, Factor::Tensor(TensorRef { tensor: tmp, indices: idx, span }));
            }
            terms.push(Term { coef: term.coef, factors, span: term.span.clone() });
        }
        stmts.push(Stmt { rhs: Expr { terms, span: st.rhs.span.clone() }, ..st.clone() });
    }
    out.units[unit].stmts = stmts;
    out
}

/// A dense temporary over `idx` with the element type of `like`, named `_bN`
/// (a name no tensor has).
fn new_temp(hir: &mut Hir, counter: &mut usize, idx: &[IndexId], like: TensorId) -> TensorId {
    let name = loop {
        *counter += 1;
        let name = format!("_b{counter}");
        if hir.tensors.iter().all(|t| t.name != name) {
            break name;
        }
    };
    let dims = idx.iter().map(|&i| hir.indices[i].range).collect();
    let like = &hir.tensors[like];
    let tensor = Tensor {
        name,
        role: Role::Temporary,
        elem: like.elem,
        dims,
        symmetry: Vec::new(),
        pair_symmetry: Vec::new(),
        blocks: Vec::new(),
        span: 0..0,
        model: like.model,
    };
    hir.tensors.push(tensor);
    TensorId::new(hir.tensors.len() - 1)
}
