//! Subtree reconfiguration: improving a whole tree by exact DP on small windows.
//!
//! A window is a node of the tree and its subtree cut off at no more than
//! [`WINDOW`] subtrees (expanding the largest intermediate first, where the cost
//! sits). The window's inputs and output are fixed, so the best way to combine its
//! subtrees is an exact DP over at most 2^8 subsets under the objective; a better
//! one replaces the window. Nodes are visited largest first, in passes, until a
//! pass changes nothing (or the deadline passes). The index set of a node depends
//! only on the leaves below it, so a window's change never changes the rest of the
//! tree.

use super::arena::Arena;
use super::{Cost, Ctx, Score};
use crate::tir::bits::Bits;
use crate::tir::opmin::Sym;
use std::time::Instant;

/// Most subtrees a window holds.
pub(super) const WINDOW: usize = 8;

#[derive(Clone)]
struct Node<const W: usize> {
    kids: Option<(usize, usize)>,
    set: Bits<W>,
    groups: Vec<Sym<W>>,
    size: f64,
    flops: f64,
}

/// `pairs` improved window by window under `obj` (until `deadline`, if any).
pub(super) fn reconfigure<const W: usize>(
    ctx: &Ctx<W>,
    pairs: &[(usize, usize)],
    obj: impl Into<Score>,
    deadline: Option<&Instant>,
    passes: usize,
) -> Vec<(usize, usize)> {
    let obj = obj.into();
    let n = ctx.n;
    if pairs.is_empty() {
        return pairs.to_vec();
    }
    let mut arena = Arena::new(ctx);
    for &(a, b) in pairs {
        arena.contract(ctx, a, b);
    }
    let mut nodes: Vec<Node<W>> = arena
        .ops
        .into_iter()
        .enumerate()
        .map(|(k, o)| Node {
            kids: if k < n { None } else { Some(pairs[k - n]) },
            set: o.set,
            groups: o.groups,
            size: o.size,
            flops: o.flops,
        })
        .collect();
    let root = nodes.len() - 1;
    let late = || deadline.is_some_and(|d| Instant::now() >= *d);
    for _pass in 0..passes {
        // Reachable internal nodes, largest first.
        let mut order = Vec::new();
        let mut stack = vec![root];
        while let Some(v) = stack.pop() {
            if let Some((a, b)) = nodes[v].kids {
                order.push(v);
                stack.push(a);
                stack.push(b);
            }
        }
        order.sort_by(|&x, &y| nodes[y].size.total_cmp(&nodes[x].size).then(x.cmp(&y)));
        let mut changed = false;
        for r in order {
            if late() {
                break;
            }
            changed |= window(ctx, &mut nodes, r, r == root, obj);
        }
        if !changed || late() {
            break;
        }
    }
    let mut out = Vec::with_capacity(n.saturating_sub(1));
    fn emit<const W: usize>(v: usize, nodes: &[Node<W>], n: usize, out: &mut Vec<(usize, usize)>) -> usize {
        match nodes[v].kids {
            None => v,
            Some((a, b)) => {
                let x = emit(a, nodes, n, out);
                let y = emit(b, nodes, n, out);
                out.push((x, y));
                n + out.len() - 1
            }
        }
    }
    emit(root, &nodes, n, &mut out);
    out
}

/// Optimizes the window rooted at `r`; whether it changed.
fn window<const W: usize>(ctx: &Ctx<W>, nodes: &mut Vec<Node<W>>, r: usize, is_root: bool, obj: Score) -> bool {
    let (a, b) = nodes[r].kids.expect("internal node");
    let mut frontier = vec![a, b];
    let mut inner = vec![r];
    while frontier.len() < WINDOW {
        let pick = (0..frontier.len())
            .filter(|&k| nodes[frontier[k]].kids.is_some())
            .max_by(|&x, &y| nodes[frontier[x]].size.total_cmp(&nodes[frontier[y]].size).then(y.cmp(&x)));
        let Some(k) = pick else { break };
        let v = frontier.swap_remove(k);
        let (x, y) = nodes[v].kids.expect("internal");
        inner.push(v);
        frontier.push(x);
        frontier.push(y);
    }
    if frontier.len() < 3 {
        return false;
    }
    let step = |node: &Node<W>, top: bool| obj.step(node.flops, if top && is_root { 0.0 } else { node.size });
    let current = inner.iter().fold(Cost::ZERO, |acc, &v| obj.add(acc, step(&nodes[v], v == r)));
    let k = frontier.len();
    let full = (1usize << k) - 1;
    let mut ind = vec![Bits::<W>::empty(); full + 1];
    for s in 1..=full {
        let low = s.trailing_zeros() as usize;
        ind[s] = ind[s & (s - 1)] | nodes[frontier[low]].set;
    }
    let out = nodes[r].set;
    let kept = |s: usize| if s == full { out } else { ind[s] & (out | ind[full ^ s]) };
    struct E<const W: usize> {
        cost: Cost,
        split: usize,
        groups: Vec<Sym<W>>,
        size: f64,
        flops: f64,
    }
    let mut best: Vec<Option<E<W>>> = (0..=full).map(|_| None).collect();
    for (j, &f) in frontier.iter().enumerate() {
        best[1 << j] =
            Some(E { cost: Cost::ZERO, split: 0, groups: nodes[f].groups.clone(), size: nodes[f].size, flops: 0.0 });
    }
    for s in 1..=full {
        if s.count_ones() < 2 {
            continue;
        }
        let ks = kept(s);
        let low = s & s.wrapping_neg();
        let rest = s ^ low;
        let mut sub = rest;
        let mut cur: Option<E<W>> = None;
        loop {
            let x = low | sub;
            let y = s ^ x;
            if y != 0 {
                let (ex, ey) = (best[x].as_ref().expect("smaller"), best[y].as_ref().expect("smaller"));
                let c = ctx.combine(kept_leaf(&ind, x, &kept), &ex.groups, kept_leaf(&ind, y, &kept), &ey.groups, ks);
                let size = if s == full && is_root { 0.0 } else { c.size };
                let total = obj.add(obj.add(ex.cost, ey.cost), obj.step(c.flops, size));
                if cur.as_ref().is_none_or(|e| total.better(e.cost)) {
                    cur = Some(E { cost: total, split: x, groups: c.groups, size: c.size, flops: c.flops });
                }
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
        best[s] = cur;
    }
    let top = best[full].as_ref().expect("full set");
    if !top.cost.better(current) {
        return false;
    }
    // Rebuild: new nodes for the window's inner subsets, `r` keeps its id.
    fn place<const W: usize>(
        s: usize,
        full: usize,
        r: usize,
        frontier: &[usize],
        best: &[Option<E<W>>],
        kept: &dyn Fn(usize) -> Bits<W>,
        nodes: &mut Vec<Node<W>>,
    ) -> usize {
        if s.count_ones() == 1 {
            return frontier[s.trailing_zeros() as usize];
        }
        let e = best[s].as_ref().expect("solved");
        let x = place(e.split, full, r, frontier, best, kept, nodes);
        let y = place(s ^ e.split, full, r, frontier, best, kept, nodes);
        let node = Node { kids: Some((x, y)), set: kept(s), groups: e.groups.clone(), size: e.size, flops: e.flops };
        if s == full {
            nodes[r] = node;
            r
        } else {
            nodes.push(node);
            nodes.len() - 1
        }
    }
    place(full, full, r, &frontier, &best, &kept, nodes);
    true
}

/// The index set of subset `s` of a window: a single subtree's own, else what it keeps.
fn kept_leaf<const W: usize>(ind: &[Bits<W>], s: usize, kept: &dyn Fn(usize) -> Bits<W>) -> Bits<W> {
    if s.count_ones() == 1 {
        ind[s]
    } else {
        kept(s)
    }
}
