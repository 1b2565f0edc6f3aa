//! The LIR validator: the facts the back ends and the LIR executor rely on when they
//! walk a [`LoopNest`] (see the semantics in [`crate::lir`]).
//!
//! * every statement of the unit is computed exactly once, in program order;
//! * a loop's extent is its index's size, and no index is bound twice on one path;
//! * every loop around a statement is an index of that statement (fusion never
//!   recomputes), and every loop around a `Zero` is an index of the left-hand side
//!   of the statement it clears (an `=`, or the first `+=` into a temporary), which
//!   comes later on the same path — except the loops of a sliced term
//!   ([`crate::lir::slice`]) around its own statements, which recompute by design;
//! * every tensor a statement references has a buffer; a buffer's stored and fixed
//!   positions partition the tensor's dimensions, only temporaries are sliced, its
//!   element count is the product of the stored extents, and each fixed position is
//!   bound by a loop around every statement using the tensor, indexed by that loop's
//!   index at that position.

use super::{ensure, ValidationError};
use crate::lir::{LoopNest, Node};
use crate::sema::hir::{Factor, Hir, IndexId, Role, Stmt, TensorId};
use std::collections::HashSet;

/// Checks one nest against the (prepared or optimized) HIR it was lowered from.
pub fn validate(hir: &Hir, nest: &LoopNest) -> Result<(), ValidationError> {
    let unit = hir.units.get(nest.unit).ok_or_else(|| ValidationError {
        place: "lir".into(),
        message: format!("unit id {:?} out of range", nest.unit),
    })?;
    let place = || format!("lir unit `{}`", unit.name);
    let mut slice_loops = vec![Vec::new(); unit.stmts.len()];
    for g in crate::lir::slice::groups(hir, nest.unit) {
        for k in g.stmts {
            slice_loops[k] = g.indices.clone();
        }
    }
    let mut walk =
        Walk { hir, stmts: &unit.stmts, slice_loops, computed: Vec::new(), zeroed: Vec::new(), loops_at: Vec::new() };
    walk.nodes(&nest.body, &mut Vec::new()).map_err(|message| ValidationError { place: place(), message })?;

    let order: Vec<usize> = walk.computed.clone();
    ensure(order == (0..unit.stmts.len()).collect::<Vec<_>>(), place, || {
        format!("statements computed in the order {order:?}, expected each of 0..{} once in order", unit.stmts.len())
    })?;
    for (z, zloops) in &walk.zeroed {
        let pos = order.iter().position(|s| s == z).unwrap_or(0);
        let cloops = &walk.loops_at[pos];
        ensure(zloops.len() <= cloops.len() && cloops[..zloops.len()] == zloops[..], place, || {
            format!("the zeroing of statement {z} is not on the path to the statement")
        })?;
    }

    for (k, s) in unit.stmts.iter().enumerate() {
        let loops = &walk.loops_at[k];
        for (t, indices) in refs(s) {
            let place = || format!("lir unit `{}` statement {k}", unit.name);
            let b = nest.buffers.get(&t).ok_or_else(|| ValidationError {
                place: place(),
                message: format!("`{}` has no buffer", hir.tensors[t].name),
            })?;
            for &(p, i) in &b.fixed {
                ensure(loops.contains(&i) && indices.get(p) == Some(&i), place, || {
                    format!(
                        "buffer `{}` is sliced at position {p} by `{}`, but the statement is not inside that loop \
                         or indexes the position otherwise",
                        hir.tensors[t].name, hir.indices[i].name
                    )
                })?;
            }
        }
    }

    for (&t, b) in &nest.buffers {
        let tensor = &hir.tensors[t];
        let place = || format!("lir buffer `{}`", tensor.name);
        ensure(b.tensor == t, place, || "is filed under another tensor".into())?;
        let mut positions: Vec<usize> = b.stored.iter().copied().chain(b.fixed.iter().map(|f| f.0)).collect();
        positions.sort_unstable();
        ensure(positions == (0..tensor.dims.len()).collect::<Vec<_>>(), place, || {
            format!(
                "stored {:?} and fixed {:?} do not partition its {} dimensions",
                b.stored,
                b.fixed,
                tensor.dims.len()
            )
        })?;
        ensure(b.fixed.is_empty() || tensor.role == Role::Temporary, place, || "an input or output is sliced".into())?;
        let shape = hir.shape(t);
        let elements = b.stored.iter().try_fold(1usize, |acc, &p| acc.checked_mul(shape[p]));
        ensure(elements.is_none_or(|e| e == b.elements), place, || {
            format!("holds {} elements, its stored extents give {elements:?}", b.elements)
        })?;
        for &(p, i) in &b.fixed {
            ensure(hir.indices[i].range == tensor.dims[p], place, || {
                format!("position {p} is fixed by an index of another range")
            })?;
        }
    }
    Ok(())
}

struct Walk<'a> {
    hir: &'a Hir,
    stmts: &'a [Stmt],
    /// Per statement, the sliced indices whose loops may enclose it regardless.
    slice_loops: Vec<Vec<IndexId>>,
    /// Statements in the order the nest computes them, and the loops around each.
    computed: Vec<usize>,
    loops_at: Vec<Vec<IndexId>>,
    /// `Zero` nodes: the statement and the loops around the node.
    zeroed: Vec<(usize, Vec<IndexId>)>,
}

impl Walk<'_> {
    fn nodes(&mut self, nodes: &[Node], loops: &mut Vec<IndexId>) -> Result<(), String> {
        for n in nodes {
            match n {
                Node::Loop { index, extent, body } => {
                    let x = self
                        .hir
                        .indices
                        .get(*index)
                        .ok_or_else(|| format!("loop over index id {index:?} out of range"))?;
                    if *extent != self.hir.index_size(*index) {
                        return Err(format!(
                            "loop over `{}` has extent {extent}, the index has {}",
                            x.name,
                            self.hir.index_size(*index)
                        ));
                    }
                    if loops.contains(index) {
                        return Err(format!("`{}` is bound by two nested loops", x.name));
                    }
                    loops.push(*index);
                    self.nodes(body, loops)?;
                    loops.pop();
                }
                Node::Zero { tensor, stmt } => {
                    let s = self.stmts.get(*stmt).ok_or_else(|| format!("zero of statement {stmt} out of range"))?;
                    // `+=` as the first write of a temporary is cleared like an `=`.
                    let first_write = self.hir.tensors[*tensor].role == Role::Temporary
                        && !self.stmts[..*stmt].iter().any(|e| e.lhs.tensor == *tensor);
                    if s.lhs.tensor != *tensor || (s.accumulate && !first_write) {
                        return Err(format!(
                            "zero of statement {stmt}, which is neither an `=` writing that tensor nor its first write"
                        ));
                    }
                    let sliced = &self.slice_loops[*stmt];
                    if let Some(i) = loops.iter().find(|i| !s.lhs.indices.contains(i) && !sliced.contains(i)) {
                        return Err(format!(
                            "the zeroing of statement {stmt} is inside a loop over `{}`, which it sums",
                            self.hir.indices[*i].name
                        ));
                    }
                    if self.computed.contains(stmt) {
                        return Err(format!("statement {stmt} is zeroed after it was computed"));
                    }
                    self.zeroed.push((*stmt, loops.clone()));
                }
                Node::Compute { stmt } => {
                    let s = self.stmts.get(*stmt).ok_or_else(|| format!("compute of statement {stmt} out of range"))?;
                    let own = stmt_indices(s);
                    let sliced = &self.slice_loops[*stmt];
                    if let Some(i) = loops.iter().find(|i| !own.contains(i) && !sliced.contains(i)) {
                        return Err(format!(
                            "statement {stmt} is inside a loop over `{}`, which it does not use",
                            self.hir.indices[*i].name
                        ));
                    }
                    self.computed.push(*stmt);
                    self.loops_at.push(loops.clone());
                }
            }
        }
        Ok(())
    }
}

/// The indices of a statement: its left-hand side's and those of its right-hand
/// side's factors (a call or parenthesised sum contributes its free indices).
fn stmt_indices(s: &Stmt) -> HashSet<IndexId> {
    let mut out: HashSet<IndexId> = s.lhs.indices.iter().copied().collect();
    for t in &s.rhs.terms {
        for f in &t.factors {
            out.extend(f.indices().iter().copied());
        }
    }
    out
}

/// The left-hand side and every tensor factor at the top level of the right-hand side.
fn refs(s: &Stmt) -> Vec<(TensorId, &[IndexId])> {
    let mut out = vec![(s.lhs.tensor, &s.lhs.indices[..])];
    for t in &s.rhs.terms {
        for f in &t.factors {
            if let Factor::Tensor(r) = f {
                out.push((r.tensor, &r.indices[..]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lir::fusion::{lower_unit, FusionOptions};

    fn checked(src: &str) -> Hir {
        let (hir, diags) = crate::compile(src, "t");
        hir.unwrap_or_else(|| panic!("{diags:?}"))
    }

    const SRC: &str = "range N = 4; index i, j, k, l : N;\n\
        input tensor A[i,j]; input tensor B[j,k]; input tensor C[k,l]; output tensor D[i,l]; tensor T[i,k];\n\
        T[i,k] = A[i,j] * B[j,k]; D[i,l] = T[i,k] * C[k,l];";

    #[test]
    fn fused_and_unfused_nests_are_valid() {
        let hir = checked(SRC);
        let fused = lower_unit(
            &hir,
            crate::sema::hir::UnitId::new(0),
            FusionOptions { mode: crate::lir::fusion::FuseMode::Max, ..FusionOptions::default() },
        );
        assert!(fused.buffers.values().any(|b| !b.fixed.is_empty()), "expected the temporary to be sliced");
        validate(&hir, &fused).unwrap();
        validate(&hir, &crate::lir::fusion::unfused(&hir, crate::sema::hir::UnitId::new(0), &Default::default()))
            .unwrap();
    }

    #[test]
    fn catches_a_missing_statement_a_wrong_extent_and_a_slice_without_its_loop() {
        let hir = checked(SRC);
        let mut nest = crate::lir::fusion::unfused(&hir, crate::sema::hir::UnitId::new(0), &Default::default());
        nest.body.pop();
        assert!(validate(&hir, &nest).unwrap_err().message.contains("computed in the order"));

        let mut nest = lower_unit(
            &hir,
            crate::sema::hir::UnitId::new(0),
            FusionOptions { mode: crate::lir::fusion::FuseMode::Max, ..FusionOptions::default() },
        );
        let Node::Loop { extent, .. } = &mut nest.body[0] else { panic!("expected an outer loop: {nest:?}") };
        *extent += 1;
        assert!(validate(&hir, &nest).unwrap_err().message.contains("has extent 5"));

        let mut nest = crate::lir::fusion::unfused(&hir, crate::sema::hir::UnitId::new(0), &Default::default());
        let t = nest.buffers.keys().copied().find(|&t| hir.tensors[t].name == "T").unwrap();
        let b = nest.buffers.get_mut(&t).unwrap();
        let p = b.stored.remove(0);
        b.fixed.push((p, hir.units[crate::sema::hir::UnitId::new(0)].stmts[0].lhs.indices[0]));
        b.elements /= 4;
        assert!(validate(&hir, &nest).unwrap_err().message.contains("is sliced at position 0"));
    }
}
