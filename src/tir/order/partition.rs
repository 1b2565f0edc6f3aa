//! Multilevel hypergraph bisection, in the manner of kahypar and hMETIS: the
//! hypergraph is coarsened by heavy-edge matching (vertices that share heavy, small
//! hyperedges merged pairwise) down to a few dozen vertices, bisected there by
//! greedy growing from several random seeds refined by Fiduccia–Mattheyses, and the
//! cut projected back level by level, each level refined by FM again. Refining on
//! coarse levels moves whole clusters at once — what single-vertex FM from a
//! breadth-first seed cannot do, and why its cuts on random regular graphs of
//! hundreds of vertices were a third larger than kahypar's.
//!
//! Everything is seeded from the caller's [`Rng`]; the result is a cut with each
//! side's weight at least `(1 - imbalance) / 2` of the total (or the best balance
//! one vertex move allows).

use super::Rng;

/// A hypergraph: weighted vertices and weighted hyperedges of at least two pins.
pub(super) struct Hypergraph {
    pub vw: Vec<f64>,
    pub edges: Vec<(f64, Vec<usize>)>,
}

/// Coarsening stops at this many vertices (or when a level shrinks by less than a
/// tenth).
const COARSEST: usize = 24;

/// Greedy-growing starts tried on the coarsest level.
const STARTS: usize = 8;

/// Consecutive moves without a better cut after which an FM pass stops.
const FM_PATIENCE: usize = 64;

impl Hypergraph {
    fn incidence(&self) -> Vec<Vec<usize>> {
        let mut inc = vec![Vec::new(); self.vw.len()];
        for (e, (_, p)) in self.edges.iter().enumerate() {
            for &v in p {
                inc[v].push(e);
            }
        }
        inc
    }

    /// Total weight of the hyperedges with pins on both sides.
    pub fn cut(&self, side: &[bool]) -> f64 {
        self.edges.iter().filter(|(_, p)| p.iter().any(|&v| side[v]) && p.iter().any(|&v| !side[v])).map(|e| e.0).sum()
    }

    /// One level of heavy-edge matching: the coarse hypergraph and each vertex's
    /// coarse vertex.
    fn coarsen(&self, inc: &[Vec<usize>], max_w: f64, rng: &mut Rng) -> (Hypergraph, Vec<usize>) {
        let nv = self.vw.len();
        let mut order: Vec<usize> = (0..nv).collect();
        for k in (1..nv).rev() {
            order.swap(k, rng.below(k + 1));
        }
        let mut map = vec![usize::MAX; nv];
        let mut next = 0;
        let mut score = vec![0.0f64; nv];
        let mut touched = Vec::new();
        for &v in &order {
            if map[v] != usize::MAX {
                continue;
            }
            for &e in &inc[v] {
                let (w, p) = &self.edges[e];
                let r = w / (p.len() - 1) as f64;
                for &u in p {
                    if u != v && map[u] == usize::MAX && self.vw[u] + self.vw[v] <= max_w {
                        if score[u] == 0.0 {
                            touched.push(u);
                        }
                        score[u] += r;
                    }
                }
            }
            // The heaviest connection; ties to the lighter vertex, then at random.
            let mut pick: Option<(f64, f64, usize)> = None;
            for &u in &touched {
                let key = (score[u], -self.vw[u]);
                if pick.is_none_or(|(s, w, _)| key > (s, w) || (key == (s, w) && rng.below(2) == 0)) {
                    pick = Some((key.0, key.1, u));
                }
            }
            for &u in &touched {
                score[u] = 0.0;
            }
            touched.clear();
            map[v] = next;
            if let Some((_, _, u)) = pick {
                map[u] = next;
            }
            next += 1;
        }
        let mut vw = vec![0.0; next];
        for v in 0..nv {
            vw[map[v]] += self.vw[v];
        }
        // Coarse edges: pins mapped, parallel edges merged, single-pin edges gone.
        let mut merged: std::collections::HashMap<Vec<usize>, f64> = std::collections::HashMap::new();
        for (w, p) in &self.edges {
            let mut q: Vec<usize> = p.iter().map(|&v| map[v]).collect();
            q.sort_unstable();
            q.dedup();
            if q.len() >= 2 {
                *merged.entry(q).or_insert(0.0) += w;
            }
        }
        let mut edges: Vec<(f64, Vec<usize>)> = merged.into_iter().map(|(p, w)| (w, p)).collect();
        edges.sort_by(|a, b| a.1.cmp(&b.1));
        (Hypergraph { vw, edges }, map)
    }
}

/// Splits `h` in two non-empty sides (`true`: the second) with a small cut, each
/// side at least `(1 - imbalance) / 2` of the total weight.
pub(super) fn bisect(h: &Hypergraph, imbalance: f64, rng: &mut Rng) -> Vec<bool> {
    let total: f64 = h.vw.iter().sum();
    let lightest = h.vw.iter().cloned().fold(f64::INFINITY, f64::min);
    let min_w = ((1.0 - imbalance.clamp(0.0, 1.0)) / 2.0 * total).floor().max(lightest);
    // Coarsen: `graphs[k + 1]` is `graphs[k]` matched by `maps[k]`.
    let max_w = (total / COARSEST as f64 * 1.5).max(2.0);
    let mut graphs = vec![Hypergraph { vw: h.vw.clone(), edges: h.edges.clone() }];
    let mut incs = vec![h.incidence()];
    let mut maps: Vec<Vec<usize>> = Vec::new();
    loop {
        let g = graphs.last().expect("a level");
        if g.vw.len() <= COARSEST {
            break;
        }
        let (c, map) = g.coarsen(incs.last().expect("a level"), max_w, rng);
        if c.vw.len() as f64 > 0.9 * g.vw.len() as f64 {
            break;
        }
        incs.push(c.incidence());
        graphs.push(c);
        maps.push(map);
    }
    // The level's balance bound: coarse levels may miss it by a vertex.
    let bound = |g: &Hypergraph, finest: bool| {
        if finest {
            min_w
        } else {
            (min_w - g.vw.iter().cloned().fold(0.0, f64::max)).max(0.0)
        }
    };
    // Initial cut on the coarsest level: the best of several grown starts.
    let top = graphs.len() - 1;
    let (g, inc) = (&graphs[top], &incs[top]);
    let lim = bound(g, top == 0);
    let mut best: Option<(f64, Vec<bool>)> = None;
    for _ in 0..STARTS {
        let mut s = grow(g, inc, total, rng);
        fm(g, inc, &mut s, lim, rng);
        let key = g.cut(&s) + if short(g, &s, lim) > 0.0 { f64::INFINITY } else { 0.0 };
        if best.as_ref().is_none_or(|(b, _)| key < *b) {
            best = Some((key, s));
        }
    }
    let mut side = best.expect("starts").1;
    // Uncoarsen: project and refine, level by level.
    for k in (0..top).rev() {
        side = maps[k].iter().map(|&c| side[c]).collect();
        let lim = bound(&graphs[k], k == 0);
        fm(&graphs[k], &incs[k], &mut side, lim, rng);
    }
    side
}

/// How far the sides fall short of `min_w`.
fn short(h: &Hypergraph, side: &[bool], min_w: f64) -> f64 {
    let ones: f64 = (0..h.vw.len()).filter(|&v| side[v]).map(|v| h.vw[v]).sum();
    let total: f64 = h.vw.iter().sum();
    (min_w - ones).max(0.0) + (min_w - (total - ones)).max(0.0)
}

/// A start: side 1 grown from a random vertex, each time by the vertex with the
/// best gain (ties at random), until it holds half the weight.
fn grow(h: &Hypergraph, inc: &[Vec<usize>], total: f64, rng: &mut Rng) -> Vec<bool> {
    let nv = h.vw.len();
    let mut side = vec![false; nv];
    if nv < 2 {
        return side;
    }
    let mut cnt: Vec<[u32; 2]> = h.edges.iter().map(|(_, p)| [p.len() as u32, 0]).collect();
    let mut w1 = 0.0;
    let mut first = true;
    while w1 + 1e-9 < total / 2.0 {
        let pick = if first {
            first = false;
            rng.below(nv)
        } else {
            let mut best: Option<(f64, usize)> = None;
            for (v, _) in side.iter().enumerate().filter(|(_, &on)| !on) {
                let g = gain(h, inc, &cnt, v, 0) + 1e-6 * rng.f64();
                if best.is_none_or(|(bg, _)| g > bg) {
                    best = Some((g, v));
                }
            }
            match best {
                Some((_, v)) => v,
                None => break,
            }
        };
        // Past half: stop on the side closer to it.
        if w1 > 0.0 && (w1 + h.vw[pick] - total / 2.0).abs() > (total / 2.0 - w1).abs() {
            break;
        }
        side[pick] = true;
        w1 += h.vw[pick];
        for &e in &inc[pick] {
            cnt[e][0] -= 1;
            cnt[e][1] += 1;
        }
        if side.iter().all(|&s| s) {
            side[pick] = false;
            break;
        }
    }
    side
}

/// The cut's drop when `v` moves off side `s`: an edge stops being cut if `v` was
/// its last pin on `s`, starts being cut if it had none on the other side.
fn gain(h: &Hypergraph, inc: &[Vec<usize>], cnt: &[[u32; 2]], v: usize, s: usize) -> f64 {
    let o = 1 - s;
    inc[v].iter().map(|&e| h.edges[e].0 * ((cnt[e][o] >= 1) as u8 as f64 - (cnt[e][s] >= 2) as u8 as f64)).sum()
}

/// Fiduccia–Mattheyses passes on `side`: single-vertex moves of best gain keeping
/// each side at least `min_w` (moves towards the lighter side always allowed while
/// one is short), the best prefix of each pass kept, until a pass gains nothing.
fn fm(h: &Hypergraph, inc: &[Vec<usize>], side: &mut [bool], min_w: f64, rng: &mut Rng) {
    let nv = h.vw.len();
    if nv < 2 {
        return;
    }
    let mut cnt: Vec<[u32; 2]> = h
        .edges
        .iter()
        .map(|(_, p)| {
            let ones = p.iter().filter(|&&v| side[v]).count() as u32;
            [p.len() as u32 - ones, ones]
        })
        .collect();
    let mut sizes = [0.0f64; 2];
    for v in 0..nv {
        sizes[side[v] as usize] += h.vw[v];
    }
    let mut gains: Vec<f64> = (0..nv).map(|v| gain(h, inc, &cnt, v, side[v] as usize)).collect();
    let short_of = |sizes: &[f64; 2]| (min_w - sizes[0]).max(0.0) + (min_w - sizes[1]).max(0.0);
    let flip = |v: usize, side: &mut [bool], cnt: &mut [[u32; 2]], sizes: &mut [f64; 2], gains: &mut [f64]| {
        let s = side[v] as usize;
        for &e in &inc[v] {
            cnt[e][s] -= 1;
            cnt[e][1 - s] += 1;
        }
        sizes[s] -= h.vw[v];
        sizes[1 - s] += h.vw[v];
        side[v] = !side[v];
        for &e in &inc[v] {
            for &u in &h.edges[e].1 {
                gains[u] = gain(h, inc, cnt, u, side[u] as usize);
            }
        }
    };
    for _pass in 0..8 {
        let mut locked = vec![false; nv];
        let mut moves: Vec<usize> = Vec::new();
        let start_cut = h.cut(side);
        // Scores of a state: shortfall first, then cut.
        let (mut run, mut best) = (0.0f64, (short_of(&sizes), 0.0f64));
        let mut best_len = 0;
        loop {
            let sh = short_of(&sizes);
            let mut pick: Option<(f64, usize)> = None;
            for v in 0..nv {
                if locked[v] {
                    continue;
                }
                let s = side[v] as usize;
                let after = sizes[s] - h.vw[v];
                let ok = if sh > 0.0 { sizes[s] > sizes[1 - s] && after > 0.0 } else { after >= min_w };
                if !ok {
                    continue;
                }
                let g = gains[v] + 1e-9 * rng.f64();
                if pick.is_none_or(|(pg, _)| g > pg) {
                    pick = Some((g, v));
                }
            }
            let Some((_, v)) = pick else { break };
            run += gains[v];
            flip(v, side, &mut cnt, &mut sizes, &mut gains);
            locked[v] = true;
            moves.push(v);
            let state = (short_of(&sizes), -run);
            if state.0 < best.0 - 1e-9 || (state.0 <= best.0 + 1e-9 && state.1 < best.1 - 1e-9) {
                best = state;
                best_len = moves.len();
            }
            if moves.len() - best_len > FM_PATIENCE {
                break;
            }
        }
        for &v in moves[best_len..].iter().rev() {
            flip(v, side, &mut cnt, &mut sizes, &mut gains);
        }
        if best_len == 0 || (h.cut(side) >= start_cut - 1e-9 && short_of(&sizes) == 0.0) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A random 3-regular multigraph by a configuration model (a few loops and
    /// parallel edges do not matter here).
    fn regular3(n: usize, seed: u64) -> Hypergraph {
        let mut rng = Rng::new(seed, 0);
        let mut stubs: Vec<usize> = (0..n).flat_map(|v| [v, v, v]).collect();
        for k in (1..stubs.len()).rev() {
            stubs.swap(k, rng.below(k + 1));
        }
        let edges = stubs.chunks(2).filter(|c| c[0] != c[1]).map(|c| (1.0, vec![c[0], c[1]])).collect();
        Hypergraph { vw: vec![1.0; n], edges }
    }

    /// Coarsening pays: on 300-vertex 3-regular graphs the multilevel bisection's
    /// best of four cuts at most 44 edges (kahypar cuts 41–44 on the benchmark's
    /// graph of that kind), where the same starts and FM without coarsening — the
    /// single-level bisection this replaced, with a better start — cut 45–50.
    #[test]
    fn multilevel_cuts_below_single_level_fm() {
        for seed in 0..4u64 {
            let h = regular3(300, seed);
            let inc = h.incidence();
            let mut rng = Rng::new(seed, 9);
            let (mut flat, mut multi) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..4 {
                let mut s = grow(&h, &inc, 300.0, &mut rng);
                fm(&h, &inc, &mut s, 147.0, &mut rng);
                flat = flat.min(h.cut(&s));
                multi = multi.min(h.cut(&bisect(&h, 0.02, &mut rng)));
            }
            assert!(multi <= 44.0, "seed {seed}: multilevel cut {multi}");
            assert!(flat > 44.0, "seed {seed}: single-level cut {flat}");
        }
    }

    #[test]
    fn sides_are_balanced_and_the_cut_is_counted() {
        for seed in 0..8 {
            let h = regular3(200, seed);
            let mut rng = Rng::new(seed, 1);
            for imb in [0.02, 0.3] {
                let side = bisect(&h, imb, &mut rng);
                let ones = side.iter().filter(|&&s| s).count() as f64;
                let min = ((1.0 - imb) / 2.0 * 200.0).floor();
                assert!(ones >= min && 200.0 - ones >= min, "seed {seed} imbalance {imb}: {ones}");
                let cut = h.cut(&side);
                let direct = h.edges.iter().filter(|(_, p)| side[p[0]] != side[p[1]]).count() as f64;
                assert_eq!(cut, direct);
            }
        }
    }
}
