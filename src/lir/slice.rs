//! Sliced terms as loop nests.
//!
//! The optimizer slices a term whose intermediates exceed `--max-intermediate`
//! ([`crate::tir::slice`]): its binary steps and last product are consecutive
//! statements, noted in [`crate::sema::hir::SliceGroup`]. Running the term once per
//! value of the sliced indices is fusing those indices' loops around all of its
//! steps — what [`super::fusion`] does to shrink temporaries — except that a step
//! without a sliced index is recomputed in every slice and a step that sums one
//! keeps a per-slice partial: fusion's rules forbid both (no recomputation; a
//! temporary is complete before it is read), slicing needs both, and is exact
//! because every step is a product, linear in each operand. So a sliced term is
//! lowered here, after fusion, into the same LIR: one loop per sliced index around
//! the steps, every step's temporary cleared in each slice and stored without the
//! sliced dimensions (a [`Buffer`] with them fixed, as fusion's), the last product
//! adding into the target — the sum over slices of a summed sliced index, disjoint
//! writes of a kept one — which is cleared once outside the loops for an `=`. The
//! back ends, the LIR executor and the validator need nothing new: a loop is a
//! loop. The group's statements take no part in fusion (their loop nest is this
//! one).
//!
//! The time model ([`super::cost`]) priced the group's statements whole; here they
//! are priced as they run, once per slice ([`group_times`]): a step without a
//! sliced index is recomputed in every slice (the flops overhead), every step
//! streams its operands once per slice, and small slices may leave the GETT kernel
//! for loops. The nest's times take the difference.

use super::cost::{stmt_time, CpuRates};
use super::{Buffer, LoopNest, Node};
use crate::sema::hir::{Hir, IndexId, Role, TensorId, UnitId};
use std::collections::BTreeMap;

/// A sliced term located in its unit's statements.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The steps, then the last product (`stmts.end - 1`), which writes the target.
    pub stmts: std::ops::Range<usize>,
    pub indices: Vec<IndexId>,
    /// Flops of all slices together (the optimizer's count).
    pub flops: f64,
}

/// The sliced terms of `unit` whose statements are where the optimizer put them
/// (consecutive steps, the last product right after); others run unsliced.
pub fn groups(hir: &Hir, unit: UnitId) -> Vec<Group> {
    let u = &hir.units[unit];
    let mut out = Vec::new();
    for g in &u.sliced {
        let Some(a) = u.stmts.iter().position(|s| g.temps.first() == Some(&s.lhs.tensor)) else { continue };
        let b = a + g.temps.len();
        let consecutive = u.stmts.get(a..b).is_some_and(|ss| ss.iter().zip(&g.temps).all(|(s, t)| s.lhs.tensor == *t));
        let last = u.stmts.get(b).is_some_and(|s| s.lhs.tensor == g.target);
        if consecutive && last && !g.indices.is_empty() {
            out.push(Group { stmts: a..b + 1, indices: g.indices.clone(), flops: g.flops });
        }
    }
    out
}

/// Wraps each sliced term of the nest's unit in loops over its sliced indices (its
/// statements must be top-level nodes: fusion left them alone), slices its
/// temporaries' buffers and recomputes the nest's peak and model times.
pub fn apply(hir: &Hir, nest: &mut LoopNest, rates: &CpuRates) {
    let groups = groups(hir, nest.unit);
    if groups.is_empty() {
        return;
    }
    let stmts = &hir.units[nest.unit].stmts;
    for g in &groups {
        let in_group = |n: &Node| match n {
            Node::Zero { stmt, .. } | Node::Compute { stmt } => g.stmts.contains(stmt),
            Node::Loop { .. } => false,
        };
        let Some(first) = nest.body.iter().position(in_group) else { continue };
        let len = nest.body[first..].iter().take_while(|n| in_group(n)).count();
        let computed = nest.body[first..first + len].iter().filter(|n| matches!(n, Node::Compute { .. })).count();
        if computed != g.stmts.len() {
            continue;
        }
        let last = g.stmts.end - 1;
        let mut body = Vec::new();
        for (k, st) in stmts.iter().enumerate().take(last).skip(g.stmts.start) {
            body.push(Node::Zero { tensor: st.lhs.tensor, stmt: k });
            body.push(Node::Compute { stmt: k });
        }
        body.push(Node::Compute { stmt: last });
        for &i in g.indices.iter().rev() {
            body = vec![Node::Loop { index: i, extent: hir.index_size(i), body }];
        }
        if !stmts[last].accumulate {
            body.insert(0, Node::Zero { tensor: stmts[last].lhs.tensor, stmt: last });
        }
        nest.body.splice(first..first + len, body);
        for st in &stmts[g.stmts.start..last] {
            nest.buffers.insert(st.lhs.tensor, sliced_buffer(hir, st.lhs.tensor, &st.lhs.indices, &g.indices));
        }
        let (whole, sliced) = group_times(hir, nest.unit, g, rates);
        nest.time_s += sliced - whole;
        nest.unfused_time_s += sliced - whole;
    }
    nest.peak_bytes = peak(hir, nest.unit, &nest.buffers);
}

/// The model's seconds for a sliced term's statements: run once, whole (as fusion
/// priced them), and run once per slice with the temporaries holding a slice.
pub fn group_times(hir: &Hir, unit: UnitId, g: &Group, rates: &CpuRates) -> (f64, f64) {
    let stmts = &hir.units[unit].stmts;
    let esz = |t: TensorId| hir.tensors[t].elem.size_bytes() as f64;
    let whole_bytes = |t: TensorId| hir.num_elements(t).map_or(f64::INFINITY, |n| n as f64 * esz(t));
    let temps: Vec<(TensorId, f64)> = stmts[g.stmts.start..g.stmts.end - 1]
        .iter()
        .map(|st| {
            let b = sliced_buffer(hir, st.lhs.tensor, &st.lhs.indices, &g.indices);
            (st.lhs.tensor, b.elements as f64 * esz(st.lhs.tensor))
        })
        .collect();
    let slice_bytes = |t: TensorId| temps.iter().find(|x| x.0 == t).map_or_else(|| whole_bytes(t), |x| x.1);
    let slices: f64 = g.indices.iter().map(|&i| hir.index_size(i) as f64).product();
    let (mut whole, mut sliced) = (0.0, 0.0);
    for st in &stmts[g.stmts.clone()] {
        whole += stmt_time(hir, st, &|_| false, 1.0, &whole_bytes, rates);
        sliced += stmt_time(hir, st, &|i| g.indices.contains(&i), slices, &slice_bytes, rates);
    }
    (whole, sliced)
}

/// `t`'s buffer with the positions indexed by a sliced index fixed by its loop.
fn sliced_buffer(hir: &Hir, t: TensorId, indices: &[IndexId], sliced: &[IndexId]) -> Buffer {
    let shape = hir.shape(t);
    let (mut stored, mut fixed) = (Vec::new(), Vec::new());
    for (p, i) in indices.iter().enumerate() {
        match sliced.contains(i) {
            true => fixed.push((p, *i)),
            false => stored.push(p),
        }
    }
    let elements = stored.iter().map(|&p| shape[p]).fold(1usize, |a, n| a.saturating_mul(n));
    Buffer { tensor: t, stored, fixed, elements }
}

/// Peak bytes of temporaries live at once (each from its first to its last use).
pub fn peak(hir: &Hir, unit: UnitId, buffers: &BTreeMap<TensorId, Buffer>) -> u64 {
    let stmts = &hir.units[unit].stmts;
    let mut span: BTreeMap<TensorId, (usize, usize)> = BTreeMap::new();
    for (k, s) in stmts.iter().enumerate() {
        let mut touch = |t: TensorId| {
            let e = span.entry(t).or_insert((k, k));
            e.1 = k;
        };
        touch(s.lhs.tensor);
        crate::sema::hir::collect_reads(&s.rhs, &mut touch);
    }
    let mut delta = vec![0i128; stmts.len() + 1];
    for (t, (f, l)) in span {
        let (Some(b), true) = (buffers.get(&t), hir.tensors[t].role == Role::Temporary) else { continue };
        let bytes = (b.elements as u64).saturating_mul(hir.tensors[t].elem.size_bytes() as u64);
        delta[f] += i128::from(bytes);
        delta[l + 1] -= i128::from(bytes);
    }
    let mut live = 0i128;
    let top = delta.iter().map(|d| {
        live += d;
        live
    });
    u64::try_from(top.fold(0, i128::max)).unwrap_or(u64::MAX)
}

/// The largest buffer of a sliced term's temporaries, in bytes (0: none sliced).
pub fn largest_sliced_bytes(hir: &Hir, nest: &LoopNest) -> u64 {
    let stmts = &hir.units[nest.unit].stmts;
    groups(hir, nest.unit)
        .iter()
        .flat_map(|g| g.stmts.start..g.stmts.end - 1)
        .filter_map(|k| {
            let t = stmts[k].lhs.tensor;
            nest.buffers.get(&t).map(|b| (b.elements as u64).saturating_mul(hir.tensors[t].elem.size_bytes() as u64))
        })
        .max()
        .unwrap_or(0)
}
