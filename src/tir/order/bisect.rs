//! Recursive graph bisection: the network as a hypergraph (tensors are vertices,
//! indices hyperedges weighted by `ln size`), cut in two with a small cut and
//! bounded imbalance, each half ordered recursively and the halves contracted last.
//! Cutting few, small indices at the top of the tree keeps the big intermediates
//! few — what greedy, which looks one step ahead, misses on lattices and regular
//! graphs. Parts of at most `cutoff` tensors are finished by randomized greedy.
//!
//! The bisection is our own (no C partitioner): a breadth-first grown seed part,
//! then Fiduccia–Mattheyses passes (Kernighan–Lin with single moves: move the
//! unlocked vertex of best gain that keeps balance, keep the best prefix).

use super::arena::Arena;
use super::rgreedy::{contract_group, Params};
use super::{Budget, Ctx, Rng};

struct Trial {
    /// Allowed imbalance: each side holds at least `(1 - imbalance) / 2` of a part.
    imbalance: f64,
    cutoff: usize,
    greedy: Params,
}

/// One bisection tree over the whole network (`None` past the deadline).
pub(super) fn sample<const W: usize>(ctx: &Ctx<W>, rng: &mut Rng, budget: &Budget) -> Option<Vec<(usize, usize)>> {
    let t = Trial {
        imbalance: rng.log_uniform(0.01, 0.6),
        cutoff: 2 + rng.below(9),
        greedy: Params { alpha: 2.0 * rng.f64(), temperature: rng.log_uniform(1e-3, 0.1) },
    };
    let mut arena = Arena::new(ctx);
    let leaves: Vec<usize> = (0..ctx.n).collect();
    build(ctx, &mut arena, leaves, &t, rng, budget)?;
    Some(arena.pairs)
}

fn build<const W: usize>(
    ctx: &Ctx<W>,
    arena: &mut Arena<W>,
    leaves: Vec<usize>,
    t: &Trial,
    rng: &mut Rng,
    budget: &Budget,
) -> Option<usize> {
    if budget.over() {
        return None;
    }
    if leaves.len() <= t.cutoff.max(2) {
        return contract_group(ctx, arena, leaves, &t.greedy, rng, Some(budget));
    }
    let side = bisect(ctx, &leaves, t.imbalance, rng);
    let (a, b): (Vec<usize>, Vec<usize>) = {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (k, &l) in leaves.iter().enumerate() {
            if side[k] {
                b.push(l)
            } else {
                a.push(l)
            }
        }
        (a, b)
    };
    let x = build(ctx, arena, a, t, rng, budget)?;
    let y = build(ctx, arena, b, t, rng, budget)?;
    Some(arena.contract(ctx, x, y))
}

/// Splits `leaves` in two non-empty sides (`true`: the second) with a small cut.
fn bisect<const W: usize>(ctx: &Ctx<W>, leaves: &[usize], imbalance: f64, rng: &mut Rng) -> Vec<bool> {
    let nv = leaves.len();
    // Hyperedges: indices held by at least two of the part's tensors.
    let mut pins: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
    for (v, &l) in leaves.iter().enumerate() {
        for i in ctx.leaf_idx[l].ids() {
            pins.entry(i).or_default().push(v);
        }
    }
    let edges: Vec<(f64, Vec<usize>)> = pins
        .into_iter()
        .filter(|(_, p)| p.len() >= 2)
        .map(|(i, p)| ((ctx.prod(super::super::bits::Bits::bit(i))).ln().max(1e-3), p))
        .collect();
    let mut inc: Vec<Vec<usize>> = vec![Vec::new(); nv];
    for (e, (_, p)) in edges.iter().enumerate() {
        for &v in p {
            inc[v].push(e);
        }
    }
    let min_side = (((1.0 - imbalance) / 2.0) * nv as f64).floor().max(1.0) as usize;
    let target = nv / 2;
    // Seed: grow side 1 breadth-first from a random vertex to half the part.
    let mut side = vec![false; nv];
    let mut grown = 0;
    let mut queue = std::collections::VecDeque::new();
    while grown < target {
        if queue.is_empty() {
            let free: Vec<usize> = (0..nv).filter(|&v| !side[v]).collect();
            let v = free[rng.below(free.len())];
            side[v] = true;
            grown += 1;
            queue.push_back(v);
            continue;
        }
        let v = queue.pop_front().unwrap();
        for &e in &inc[v] {
            for &u in &edges[e].1 {
                if grown < target && !side[u] {
                    side[u] = true;
                    grown += 1;
                    queue.push_back(u);
                }
            }
        }
    }
    // Fiduccia–Mattheyses passes.
    let mut cnt: Vec<[usize; 2]> = edges
        .iter()
        .map(|(_, p)| {
            let ones = p.iter().filter(|&&v| side[v]).count();
            [p.len() - ones, ones]
        })
        .collect();
    let mut sizes = [nv - grown, grown];
    let gain = |v: usize, side: &[bool], cnt: &[[usize; 2]]| -> f64 {
        let s = side[v] as usize;
        inc[v]
            .iter()
            .map(|&e| {
                let (w, c) = (edges[e].0, cnt[e]);
                let before = c[0] > 0 && c[1] > 0;
                let (mut c2, o) = (c, 1 - s);
                c2[s] -= 1;
                c2[o] += 1;
                let after = c2[0] > 0 && c2[1] > 0;
                w * (before as u8 as f64 - after as u8 as f64)
            })
            .sum()
    };
    // Moves `v` to the other side, keeping the per-edge side counts and the sizes.
    let flip = |v: usize, side: &mut [bool], cnt: &mut [[usize; 2]], sizes: &mut [usize; 2]| {
        let s = side[v] as usize;
        for &e in &inc[v] {
            cnt[e][s] -= 1;
            cnt[e][1 - s] += 1;
        }
        sizes[s] -= 1;
        sizes[1 - s] += 1;
        side[v] = !side[v];
    };
    for _pass in 0..4 {
        let mut locked = vec![false; nv];
        let mut moves: Vec<usize> = Vec::new();
        let (mut run, mut best, mut best_len) = (0.0f64, 0.0f64, 0usize);
        loop {
            let mut pick: Option<(f64, usize)> = None;
            for v in 0..nv {
                if locked[v] || sizes[side[v] as usize] <= min_side {
                    continue;
                }
                let g = gain(v, &side, &cnt) + 1e-9 * rng.f64();
                if pick.is_none_or(|(pg, _)| g > pg) {
                    pick = Some((g, v));
                }
            }
            let Some((g, v)) = pick else { break };
            flip(v, &mut side, &mut cnt, &mut sizes);
            locked[v] = true;
            moves.push(v);
            run += g;
            if run > best + 1e-9 {
                best = run;
                best_len = moves.len();
            }
        }
        // Undo the moves after the best prefix.
        for &v in moves[best_len..].iter().rev() {
            flip(v, &mut side, &mut cnt, &mut sizes);
        }
        if best_len == 0 {
            break;
        }
    }
    side
}
