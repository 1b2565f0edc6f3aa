//! Recursive graph bisection: the network as a hypergraph (tensors are vertices,
//! indices hyperedges weighted by `ln size`), cut in two with a small cut and
//! bounded imbalance, each half ordered recursively and the halves contracted last.
//! Cutting few, small indices at the top of the tree keeps the big intermediates
//! few — what greedy, which looks one step ahead, misses on lattices and regular
//! graphs. Parts of at most `cutoff` tensors are finished by randomized greedy.
//!
//! The bisection is our own multilevel one ([`super::partition`]; no C
//! partitioner). Per trial, as cotengra draws kahypar's settings: the imbalance and
//! how it changes with a part's size, hyperedge weights (`ln size` or constant, with
//! random jitter), the cutoff, and how many bisections of each part are tried (the
//! smallest cut kept).

use super::arena::Arena;
use super::partition::{self, Hypergraph};
use super::rgreedy::{contract_group, Params};
use super::{Budget, Ctx, Rng};

struct Trial {
    /// Allowed imbalance at the top: each side holds at least `(1 - imbalance) / 2`
    /// of a part.
    imbalance: f64,
    /// How the imbalance follows a part's share `s` of the network: `s^decay ·
    /// imbalance` for `decay ≥ 0` (tighter below), else `1 - s^-decay · (1 -
    /// imbalance)` (looser below), as cotengra's `imbalance_decay`.
    decay: f64,
    /// Hyperedge weights `ln size` (else 1), times a jitter `exp(jitter · N(0,1)-ish)`.
    log_weights: bool,
    jitter: f64,
    /// Bisections tried per part.
    attempts: usize,
    cutoff: usize,
    greedy: Params,
}

/// One bisection tree over the whole network (`None` past the deadline).
pub(super) fn sample<const W: usize>(ctx: &Ctx<W>, rng: &mut Rng, budget: &Budget) -> Option<Vec<(usize, usize)>> {
    let t = Trial {
        imbalance: 0.02 + 0.9 * rng.f64(),
        decay: 6.0 * rng.f64() - 3.0,
        log_weights: rng.below(2) == 0,
        jitter: rng.log_uniform(1e-3, 0.5),
        attempts: 1 + rng.below(3),
        cutoff: 2 + rng.below(15),
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
    let share = leaves.len() as f64 / ctx.n as f64;
    let imbalance = if t.decay >= 0.0 {
        share.powf(t.decay) * t.imbalance
    } else {
        1.0 - share.powf(-t.decay) * (1.0 - t.imbalance)
    };
    let h = hypergraph(ctx, &leaves, t, rng);
    let mut side = Vec::new();
    let mut cut = f64::INFINITY;
    for _ in 0..t.attempts {
        let s = partition::bisect(&h, imbalance.clamp(0.0, 0.98), rng);
        let c = h.cut(&s);
        if c < cut {
            (cut, side) = (c, s);
        }
    }
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

/// The part's hypergraph: its tensors as unit vertices, and the indices held by at
/// least two of them as hyperedges (indices leaving the part are not cut here).
fn hypergraph<const W: usize>(ctx: &Ctx<W>, leaves: &[usize], t: &Trial, rng: &mut Rng) -> Hypergraph {
    let mut pins: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
    for (v, &l) in leaves.iter().enumerate() {
        for i in ctx.leaf_idx[l].ids() {
            pins.entry(i).or_default().push(v);
        }
    }
    let edges = pins
        .into_iter()
        .filter(|(_, p)| p.len() >= 2)
        .map(|(i, p)| {
            let base = if t.log_weights { ctx.prod(super::super::bits::Bits::bit(i)).ln().max(1e-3) } else { 1.0 };
            // A symmetric jitter in log space (difference of two uniforms).
            let noise = t.jitter * (rng.f64() - rng.f64());
            (base * noise.exp(), p)
        })
        .collect();
    Hypergraph { vw: vec![1.0; leaves.len()], edges }
}
