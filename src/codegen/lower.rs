//! What the code generators read off a prepared program (see
//! [`crate::pipeline::prepare`]): the operands and loop variables of a term, and a
//! unit's floating-point operations.

use crate::sema::hir::{Factor, Func, Hir, IndexId, TensorId, Term, UnitId};
use crate::tir::materialize::simple_call_arg;

/// Floating-point operations of a prepared unit: per term, `2 ×` (or `1 ×` for a
/// term of at most one factor) the product of the sizes of its distinct indices.
pub fn unit_flops(hir: &Hir, unit: UnitId) -> f64 {
    hir.units[unit].stmts.iter().map(|s| stmt_flops(hir, s)).sum()
}

/// [`unit_flops`] of one statement.
pub fn stmt_flops(hir: &Hir, s: &crate::sema::hir::Stmt) -> f64 {
    let mut total = 0.0;
    for t in &s.rhs.terms {
        let mut idx: Vec<IndexId> = s.lhs.indices.clone();
        for f in &t.factors {
            for &i in f.indices() {
                if !idx.contains(&i) {
                    idx.push(i);
                }
            }
        }
        let n: f64 = idx.iter().map(|&i| hir.index_size(i) as f64).product();
        total += if t.factors.len() >= 2 { 2.0 * n } else { n };
    }
    total
}

/// One factor of a prepared term as the code generators see it: a tensor reference,
/// possibly under an element-wise function.
pub(crate) struct Operand {
    pub tensor: TensorId,
    pub indices: Vec<IndexId>,
    pub func: Option<Func>,
}

/// The operands of a prepared term (calls reduced to a function of one reference,
/// no parenthesised sums — `prepare` guarantees both).
pub(crate) fn term_operands(term: &Term) -> Result<Vec<Operand>, String> {
    term.factors
        .iter()
        .map(|f| match f {
            Factor::Tensor(r) => Ok(Operand { tensor: r.tensor, indices: r.indices.clone(), func: None }),
            Factor::Call { func, arg, free, .. } => {
                let r = simple_call_arg(arg, free).ok_or("internal: a call was not prepared")?;
                Ok(Operand { tensor: r.tensor, indices: r.indices.clone(), func: Some(*func) })
            }
            Factor::Sum { .. } => Err("internal: a parenthesised sum was not prepared".to_string()),
            Factor::Reduce { .. } | Factor::Select { .. } | Factor::Affine(_) => Err(
                "internal: a `max`, `min`, `where` or affine subscript was not prepared into a statement of its own"
                    .to_string(),
            ),
        })
        .collect()
}

/// Whether every term of `st` has plain operands ([`term_operands`]) none of
/// which is the target.
pub(crate) fn term_operands_ok(st: &crate::sema::hir::Stmt) -> bool {
    st.rhs.terms.iter().all(|t| term_operands(t).is_ok_and(|ops| ops.iter().all(|o| o.tensor != st.lhs.tensor)))
}

/// The loop variables of a term: the target's indices, then the operands', each
/// once, leaving out those bound by enclosing loops.
pub(crate) fn term_vars(lhs: &[IndexId], ops: &[Operand], bound: impl Fn(IndexId) -> bool) -> Vec<IndexId> {
    let mut vars: Vec<IndexId> = Vec::new();
    for &i in lhs.iter().chain(ops.iter().flat_map(|o| o.indices.iter())) {
        if !bound(i) && !vars.contains(&i) {
            vars.push(i);
        }
    }
    vars
}
