//! GETT epilogues: which element-wise `=` statements on the result of a GETT
//! (`Sc = 0.125·Q·K; P = exp(Sc)`) the CPU back end runs inside that GETT,
//! applied to each block of its output as soon as the block's sum is complete,
//! the GETT writing straight into `P` (`codegen::llvm::epilogue`). Separately,
//! the map is one more pass over `Sc` and `P` after the GETT.
//!
//! Only where nothing can tell the difference: `Sc` is a temporary that only
//! these two statements touch, both whole (not sliced by loops or ranges), at
//! the top level of the nest; the GETT is the statement's one term, run as a
//! GETT; `P = c·f(Sc[same indices])` is the map's only term; and no step before
//! the map's touches `P`, so doing the map early cannot race with a step of the
//! same task set or change what an earlier step reads.

use super::cost::Kernel;
use super::{LoopNest, Node};
use crate::sema::hir::{Factor, Hir, Role, TensorId, TensorRef, Term, UnitId};
use std::collections::BTreeSet;

/// Pairs `(gett, map)` of statements of the nest's unit whose map may run as
/// the GETT's epilogue (see the module documentation), where the first is run
/// as a GETT that overwrites its target: the back end checks that (its rule may
/// be set apart from the model's, [`gett_pairs`] by the model's). None with
/// `TCC_GETT_EPILOGUE=0` (for measuring).
pub fn pairs(hir: &Hir, nest: &LoopNest) -> Vec<(usize, usize)> {
    if std::env::var("TCC_GETT_EPILOGUE").is_ok_and(|v| v.trim() == "0") {
        return Vec::new();
    }
    let unit = nest.unit;
    let stmts = &hir.units[unit].stmts;
    let body = &nest.body;
    let touched: Vec<BTreeSet<TensorId>> = body.iter().map(|n| tensors(hir, unit, n)).collect();
    let whole = |t: TensorId| nest.buffers.get(&t).is_some_and(|b| b.fixed.is_empty());
    let zero_of = |x: usize, st: usize| matches!(body[x], Node::Zero { stmt, .. } if stmt == st);
    let mut out = Vec::new();
    for (g, n) in body.iter().enumerate() {
        let Node::Compute { stmt: i } = *n else { continue };
        // The GETT's zeroing right before it (what lets it overwrite).
        if g == 0 || !zero_of(g - 1, i) {
            continue;
        }
        let si = &stmts[i];
        let s = si.lhs.tensor;
        if si.accumulate
            || si.rhs.terms.len() != 1
            || hir.tensors[s].role != Role::Temporary
            || hir.stmt_has_slice(si)
            || crate::tir::materialize::special_stmt(si).is_some()
            || !whole(s)
        {
            continue;
        }
        // The map: the first top-level statement after the GETT that reads `Sc`.
        let Some(h) = (g + 1..body.len()).find(|&x| touched[x].contains(&s)) else { continue };
        let Node::Compute { stmt: j } = body[h] else { continue };
        let sj = &stmts[j];
        let p = sj.lhs.tensor;
        let distinct = sj.lhs.indices.iter().enumerate().all(|(k, x)| !sj.lhs.indices[..k].contains(x));
        let map_ok = !sj.accumulate
            && sj.rhs.terms.len() == 1
            && map_operand(&sj.rhs.terms[0]).is_some_and(|r| r.tensor == s && r.indices == si.lhs.indices)
            && sj.lhs.indices == si.lhs.indices
            && distinct
            && p != s
            && hir.tensors[p].elem == hir.tensors[s].elem
            && !hir.stmt_has_slice(sj)
            && crate::tir::materialize::special_stmt(sj).is_none()
            && whole(p);
        // `Sc` touched by these two steps only; `P` by no step before the map's
        // (its own zeroing aside).
        let s_alone = touched.iter().enumerate().all(|(x, t)| !t.contains(&s) || x == g || x == h || zero_of(x, i));
        let p_untouched = (0..h).all(|x| !touched[x].contains(&p) || zero_of(x, j));
        if map_ok && s_alone && p_untouched {
            out.push((i, j));
        }
    }
    out
}

/// [`pairs`] whose first statement the time model runs as one GETT (what
/// `--emit=lir` marks).
pub fn gett_pairs(hir: &Hir, nest: &LoopNest) -> Vec<(usize, usize)> {
    let mut p = pairs(hir, nest);
    p.retain(|&(i, _)| matches!(nest.kernels.get(i).map(Vec::as_slice), Some([Kernel::Gett { .. }])));
    p
}

/// The one tensor a map's term reads: `c·T[…]` or `c·f(T[…])`.
fn map_operand(term: &Term) -> Option<&TensorRef> {
    match term.factors.as_slice() {
        [Factor::Tensor(r)] => Some(r),
        [Factor::Call { arg, free, .. }] => crate::tir::materialize::simple_call_arg(arg, free),
        _ => None,
    }
}

/// Every tensor node `n` reads or writes ([`super::tasks::collect`]).
fn tensors(hir: &Hir, unit: UnitId, n: &Node) -> BTreeSet<TensorId> {
    let (mut reads, mut writes, mut stmts) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    super::tasks::collect(hir, unit, std::slice::from_ref(n), &mut reads, &mut writes, &mut stmts);
    reads.extend(writes);
    reads
}
