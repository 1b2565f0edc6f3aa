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
use super::{Cost, Ctx, Objective, Score};
use crate::tir::bits::Bits;
use crate::tir::opmin::Sym;
use std::collections::HashSet;
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

/// `pairs` improved window by window under `obj` (until `deadline`, if any), the
/// passes alternating breadth-first and largest-first windows.
pub(super) fn reconfigure<const W: usize>(
    ctx: &Ctx<W>,
    pairs: &[(usize, usize)],
    obj: impl Into<Score>,
    deadline: Option<&Instant>,
    passes: usize,
) -> Vec<(usize, usize)> {
    reconfigure_with(ctx, pairs, obj, deadline, passes, &[Expand::Breadth, Expand::Largest])
}

/// [`reconfigure`] with the window shapes of the passes in turn (tests: the
/// largest-first windows alone, as before breadth-first ones were added).
pub(super) fn reconfigure_with<const W: usize>(
    ctx: &Ctx<W>,
    pairs: &[(usize, usize)],
    obj: impl Into<Score>,
    deadline: Option<&Instant>,
    passes: usize,
    shapes: &[Expand],
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
    // Windows (by their subtrees' ids, which always stand for the same leaves) whose
    // DP changed nothing: the same DP again would not either.
    let mut tried: HashSet<Vec<usize>> = HashSet::new();
    let mut idle = 0;
    for pass in 0..passes {
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
        // Where the cost sits: the costliest steps first for flops, the largest
        // intermediates first for sizes.
        let by_flops = matches!(obj, Score::Obj(Objective::Flops | Objective::Combined));
        let key = |v: usize| if by_flops { nodes[v].flops } else { nodes[v].size };
        order.sort_by(|&x, &y| key(y).total_cmp(&key(x)).then(x.cmp(&y)));
        let expand = shapes[pass % shapes.len()];
        let mut changed = false;
        for r in order {
            if late() {
                break;
            }
            changed |= window(ctx, &mut nodes, r, r == root, obj, expand, &mut tried);
        }
        // Done when a pass of each shape changed nothing.
        idle = if changed { 0 } else { idle + 1 };
        if idle >= shapes.len() || late() {
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

/// How a window grows from its root: breadth first (balanced, the top levels
/// under the root, as cotengra's default) or into the largest subtree first
/// (following the big intermediates down).
#[derive(Debug, Clone, Copy)]
pub(super) enum Expand {
    Breadth,
    Largest,
}

/// Optimizes the window rooted at `r`; whether it changed.
fn window<const W: usize>(
    ctx: &Ctx<W>,
    nodes: &mut Vec<Node<W>>,
    r: usize,
    is_root: bool,
    obj: Score,
    expand: Expand,
    tried: &mut HashSet<Vec<usize>>,
) -> bool {
    let (a, b) = nodes[r].kids.expect("internal node");
    let mut frontier = vec![a, b];
    let mut inner = vec![r];
    while frontier.len() < WINDOW {
        let internal = |k: &usize| nodes[frontier[*k]].kids.is_some();
        let pick = match expand {
            Expand::Breadth => (0..frontier.len()).find(internal),
            Expand::Largest => (0..frontier.len())
                .filter(internal)
                .max_by(|&x, &y| nodes[frontier[x]].size.total_cmp(&nodes[frontier[y]].size).then(y.cmp(&x))),
        };
        let Some(k) = pick else { break };
        let v = frontier.remove(k);
        let (x, y) = nodes[v].kids.expect("internal");
        inner.push(v);
        frontier.push(x);
        frontier.push(y);
    }
    if frontier.len() < 3 {
        return false;
    }
    let mut key = frontier.clone();
    key.sort_unstable();
    if tried.contains(&key) {
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
    // Each subset's index set: a single subtree's own, else what the subset keeps.
    let kset: Vec<Bits<W>> = (0..=full).map(|s| if s.count_ones() == 1 { ind[s] } else { kept(s) }).collect();
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
        let low = s & s.wrapping_neg();
        let rest = s ^ low;
        let mut cur: Option<E<W>> = None;
        // Splits into pieces that share an index first (as cotengra's optimal DP,
        // without outer products); outer products only where no such split exists.
        for connected in [true, false] {
            let mut sub = rest;
            loop {
                let x = low | sub;
                let y = s ^ x;
                if y != 0 && (!connected || !(kset[x] & kset[y]).is_empty()) {
                    let (ex, ey) = (best[x].as_ref().expect("smaller"), best[y].as_ref().expect("smaller"));
                    let c = ctx.combine(kset[x], &ex.groups, kset[y], &ey.groups, kset[s]);
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
            if cur.is_some() {
                break;
            }
        }
        best[s] = cur;
    }
    let top = best[full].as_ref().expect("full set");
    if !top.cost.better(current) {
        tried.insert(key);
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
