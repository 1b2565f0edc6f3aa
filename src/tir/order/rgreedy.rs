//! Randomized greedy: the greedy pairing with its choice sampled instead of taken.
//!
//! Each step scores every pair of live operands sharing an index by cotengra's
//! `size(out) - alpha·(size(a) + size(b))` (alpha = 1 is opt_einsum's "least memory
//! growth"), compresses the score to a signed logarithm so that temperatures mean
//! the same on networks of any size, and picks the minimum of score − T·Gumbel noise:
//! Boltzmann sampling at temperature `T`. Alpha and `T` are drawn per trial, so
//! trials explore both the greedy neighbourhood (small T) and far from it.

use super::arena::Arena;
use super::{Budget, Ctx, Rng};

/// Parameters of one trial.
pub(super) struct Params {
    pub alpha: f64,
    pub temperature: f64,
}

impl Params {
    pub fn draw(rng: &mut Rng) -> Params {
        Params { alpha: 2.0 * rng.f64(), temperature: rng.log_uniform(1e-3, 1.0) }
    }
}

/// One randomized greedy tree over the whole network (`None` past the deadline).
pub(super) fn sample<const W: usize>(ctx: &Ctx<W>, rng: &mut Rng, budget: &Budget) -> Option<Vec<(usize, usize)>> {
    let params = Params::draw(rng);
    let mut arena = Arena::new(ctx);
    let live: Vec<usize> = (0..ctx.n).collect();
    contract_group(ctx, &mut arena, live, &params, rng, Some(budget))?;
    Some(arena.pairs)
}

/// Contracts the live operands `live` of `arena` into one by randomized greedy
/// (operands outside the group stay live: their indices are kept). Its id.
pub(super) fn contract_group<const W: usize>(
    ctx: &Ctx<W>,
    arena: &mut Arena<W>,
    mut live: Vec<usize>,
    p: &Params,
    rng: &mut Rng,
    budget: Option<&Budget>,
) -> Option<usize> {
    let compress = |x: f64| x.signum() * x.abs().ln_1p();
    while live.len() > 1 {
        if budget.is_some_and(|b| b.over()) {
            return None;
        }
        // Operands holding each index (positions in `live`).
        let mut holders: std::collections::HashMap<usize, Vec<usize>> = std::collections::HashMap::new();
        for (x, &op) in live.iter().enumerate() {
            for i in arena.ops[op].set.ids() {
                holders.entry(i).or_default().push(x);
            }
        }
        let mut cands: Vec<(usize, usize)> = Vec::new();
        let mut keys: Vec<&usize> = holders.keys().collect();
        keys.sort_unstable();
        for i in keys {
            let h = &holders[i];
            for (k, &x) in h.iter().enumerate() {
                cands.extend(h[k + 1..].iter().map(|&y| (x, y)));
            }
        }
        cands.sort_unstable();
        cands.dedup();
        if cands.is_empty() {
            // Nothing shares an index: the outer product of the two smallest.
            let mut by: Vec<usize> = (0..live.len()).collect();
            by.sort_by(|&x, &y| arena.ops[live[x]].size.total_cmp(&arena.ops[live[y]].size).then(x.cmp(&y)));
            cands.push((by[0].min(by[1]), by[0].max(by[1])));
        }
        let mut pick = (f64::INFINITY, cands[0]);
        for &(x, y) in &cands {
            let (a, b) = (live[x], live[y]);
            let kept = arena.kept(ctx, a, b);
            let size = ctx.prod(kept);
            let score = size - p.alpha * (arena.ops[a].size + arena.ops[b].size);
            let u = rng.f64().clamp(1e-12, 1.0 - 1e-12);
            let noisy = compress(score) - p.temperature * -(-u.ln()).ln();
            if noisy < pick.0 {
                pick = (noisy, (x, y));
            }
        }
        let (x, y) = pick.1;
        let id = arena.contract(ctx, live[x], live[y]);
        live.swap_remove(y);
        live.swap_remove(x);
        live.push(id);
    }
    live.first().copied()
}
