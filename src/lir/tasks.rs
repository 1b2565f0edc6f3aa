//! Task sets: a unit's top-level steps grouped so that steps with no data
//! dependence between them can run at the same time on the thread pool.
//!
//! A program's statements are often independent of each other — the CCSD
//! residual's intermediates each read only inputs — and each alone is too small to
//! keep every thread busy (a GETT of a few MFLOP splits poorly; the thread
//! hand-off costs as much as the work). Run side by side, one per thread, they
//! fill the machine without splitting.
//!
//! A *step* is one top-level node of the nest with the `Zero`s right before it
//! (as [`crate::codegen`] compiles them). Step B depends on an earlier step A when
//! one writes a tensor the other reads or writes. Steps are levelled as soon as
//! possible (a step's level is one more than that of the latest step it depends
//! on); each level is a [`TaskSet`], run in level order. Every dependence goes from
//! a lower level to a higher one and the steps of a level touch disjoint written
//! tensors, so any order or overlap within a level computes the same values as
//! the nest's order — bit for bit: accumulations into one tensor depend on each
//! other and keep their order.
//!
//! Which steps of a set actually overlap is the runtime's choice at run time, when
//! it knows its thread count (`tcc_rt_task_set`): a step that would take longer
//! alone than the others' share of the threads runs by itself on all of them
//! first; the rest run one per thread, largest first. Each step carries the CPU
//! time model's estimate ([`super::cost::stmt_time`]) for that choice.

use super::cost::{stmt_time, CpuRates};
use super::{LoopNest, Node};
use crate::sema::hir::{Expr, Factor, Hir, IndexId, TensorId, UnitId};
use std::collections::BTreeSet;
use std::ops::Range;

/// One top-level step: the nest's top-level nodes `nodes` (its `Zero`s and the
/// node they precede), with the model's seconds for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub nodes: Range<usize>,
    pub time_s: f64,
}

/// Steps with no data dependence between them, in the nest's order.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSet {
    pub steps: Vec<Step>,
    /// A member must run alone (a sliced term: its slices are already parallel
    /// tasks with private copies sized for the whole pool).
    pub alone: bool,
}

/// The nest's top-level steps levelled into task sets, in execution order. Every
/// top-level node is in exactly one step; a nest of one step is one set.
pub fn task_sets(hir: &Hir, nest: &LoopNest, rates: &CpuRates) -> Vec<TaskSet> {
    let unit = nest.unit;
    let body = &nest.body;
    let sliced = super::slice::groups(hir, unit);
    // Steps: each non-Zero node with the Zeros before it (trailing Zeros alone).
    let mut steps: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    for (k, n) in body.iter().enumerate() {
        if !matches!(n, Node::Zero { .. }) || k + 1 == body.len() {
            steps.push(start..k + 1);
            start = k + 1;
        }
    }
    struct Info {
        reads: BTreeSet<TensorId>,
        writes: BTreeSet<TensorId>,
        stmts: BTreeSet<usize>,
    }
    let infos: Vec<Info> = steps
        .iter()
        .map(|r| {
            let mut i = Info { reads: BTreeSet::new(), writes: BTreeSet::new(), stmts: BTreeSet::new() };
            collect(hir, unit, &body[r.clone()], &mut i.reads, &mut i.writes, &mut i.stmts);
            i
        })
        .collect();
    let depends = |a: &Info, b: &Info| {
        a.writes.iter().any(|t| b.reads.contains(t) || b.writes.contains(t))
            || b.writes.iter().any(|t| a.reads.contains(t))
    };
    let mut level = vec![0usize; steps.len()];
    for b in 0..steps.len() {
        level[b] = (0..b).filter(|&a| depends(&infos[a], &infos[b])).map(|a| level[a] + 1).max().unwrap_or(0);
    }
    let mut sets: Vec<TaskSet> = Vec::new();
    for l in 0..=level.iter().copied().max().unwrap_or(0) {
        let members: Vec<usize> = (0..steps.len()).filter(|&s| level[s] == l).collect();
        let mut alone = Vec::new();
        let mut together = Vec::new();
        for s in members {
            let step = Step { nodes: steps[s].clone(), time_s: step_time(hir, unit, &body[steps[s].clone()], rates) };
            if sliced.iter().any(|g| g.stmts.clone().any(|k| infos[s].stmts.contains(&k))) {
                alone.push(step);
            } else {
                together.push(step);
            }
        }
        if !together.is_empty() {
            sets.push(TaskSet { steps: together, alone: false });
        }
        sets.extend(alone.into_iter().map(|s| TaskSet { steps: vec![s], alone: true }));
    }
    sets
}

/// Tensors read and written by `nodes`, and their statements.
pub(super) fn collect(
    hir: &Hir,
    unit: UnitId,
    nodes: &[Node],
    reads: &mut BTreeSet<TensorId>,
    writes: &mut BTreeSet<TensorId>,
    stmts: &mut BTreeSet<usize>,
) {
    fn expr(e: &Expr, out: &mut BTreeSet<TensorId>) {
        for f in e.terms.iter().flat_map(|t| &t.factors) {
            match f {
                Factor::Tensor(r) => {
                    out.insert(r.tensor);
                }
                Factor::Affine(a) => {
                    out.insert(a.tensor);
                }
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => expr(arg, out),
                Factor::Select { args, .. } => args.iter().for_each(|a| expr(&a.as_expr(), out)),
            }
        }
    }
    for n in nodes {
        match n {
            Node::Loop { body, .. } => collect(hir, unit, body, reads, writes, stmts),
            Node::Zero { tensor, .. } => {
                writes.insert(*tensor);
            }
            Node::Compute { stmt } => {
                let st = &hir.units[unit].stmts[*stmt];
                stmts.insert(*stmt);
                writes.insert(st.lhs.tensor);
                expr(&st.rhs, reads);
            }
        }
    }
}

/// The model's seconds for `nodes` (statements inside loops priced per iteration,
/// whole tensors' bytes for the bandwidth choice: only the ratios matter here).
fn step_time(hir: &Hir, unit: UnitId, nodes: &[Node], rates: &CpuRates) -> f64 {
    fn walk(hir: &Hir, unit: UnitId, nodes: &[Node], bound: &mut Vec<IndexId>, outer: f64, rates: &CpuRates) -> f64 {
        let bytes = |t: TensorId| hir.num_elements(t).unwrap_or(0) as f64 * hir.tensors[t].elem.size_bytes() as f64;
        let mut total = 0.0;
        for n in nodes {
            match n {
                Node::Loop { index, extent, body } => {
                    bound.push(*index);
                    total += walk(hir, unit, body, bound, outer * *extent as f64, rates);
                    bound.pop();
                }
                Node::Zero { .. } => {}
                Node::Compute { stmt } => {
                    let st = &hir.units[unit].stmts[*stmt];
                    total += stmt_time(hir, st, &|i| bound.contains(&i), outer, &bytes, rates);
                }
            }
        }
        total
    }
    walk(hir, unit, nodes, &mut Vec::new(), 1.0, rates)
}

/// `--emit=lir`'s lines for the sets of two or more steps (nothing when every
/// step depends on the one before).
pub fn dump(hir: &Hir, nest: &LoopNest, sets: &[TaskSet]) -> String {
    let mut s = String::new();
    for (k, set) in sets.iter().enumerate().filter(|(_, t)| t.steps.len() >= 2) {
        let names: Vec<String> = set
            .steps
            .iter()
            .map(|st| {
                let mut w = BTreeSet::new();
                collect(
                    hir,
                    nest.unit,
                    &nest.body[st.nodes.clone()],
                    &mut BTreeSet::new(),
                    &mut w,
                    &mut BTreeSet::new(),
                );
                let names: Vec<&str> = w.iter().map(|&t| hir.tensors[t].name.as_str()).collect();
                format!("{} ({})", names.join(" "), super::seconds(st.time_s))
            })
            .collect();
        s.push_str(&format!("  // task set {} of {}: {}\n", k + 1, sets.len(), names.join(", ")));
    }
    s
}
