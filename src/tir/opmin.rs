//! Operation minimization: the cheapest binary contraction order of one product.
//!
//! A [`Problem`] is one term seen as a tensor network: each input (a factor) has a
//! list of index ids (repeats allowed: a diagonal or trace), each index a size, and
//! the term has an output index list. An index not in the output is summed; it is
//! summed at the first binary step after which no remaining operand needs it.
//!
//! # Cost model (flops)
//! A binary step `R[r] = X[x] * Y[y]` loops over `u = x ∪ y` (distinct indices):
//! * if some index of `u` is summed in this step (`u ≠ r`) it costs
//!   `2 × ∏_{i∈u} size(i)` flops (a multiply and an add per point);
//! * otherwise (a pure outer or Hadamard product) `1 × ∏_{i∈u} size(i)`.
//!
//! This is exactly `opt_einsum`'s `flop_count` for a pairwise contraction
//! (`op_factor = 1 + inner`), so costs compare like with like.
//!
//! **Symmetry.** A symmetry group (a set of ≥ 2 indices of one range under which a
//! tensor is symmetric or antisymmetric) of `k` indices divides the number of
//! distinct elements by `k!` (the large-range approximation `n^k / k!`). The flops of
//! a step are divided by `k!` for every group of its *result* (only distinct result
//! elements are computed) and by `k!` for every summed group that is a symmetry group
//! of *both* operands (the sum runs over distinct index tuples). Groups propagate
//! conservatively: a group of an operand survives into the result when at least two
//! of its indices are kept and none of its indices occurs in the other operand — or
//! when the other operand has exactly the same group (symmetric × symmetric and
//! antisymmetric × antisymmetric give symmetric; mixed give antisymmetric). Nothing
//! else creates symmetry. Without symmetry groups the counts are exact.
//!
//! **Memory.** The size of an intermediate is its number of distinct elements; inputs
//! and the final result do not count. The peak is the largest total of live
//! intermediates when the steps run in the emitted order.
//!
//! # Search
//! * ≤ [`Options::exact_limit`] inputs (16 by default): dynamic programming over all
//!   subsets of inputs (bitmasks), all splits of each subset — outer products
//!   included, since they are sometimes optimal — pruned by an upper bound from the
//!   greedy search (a subset whose best cost already exceeds the bound cannot be part
//!   of an optimal tree). The result is exact in flops; among flops-optimal trees
//!   the one with the lowest peak is preferred (peak is combined per subset, a
//!   heuristic tie-break).
//! * beyond: greedy (opt_einsum-style "least memory growth" and "least flops"
//!   heuristics, preferring connected pairs) plus seeded randomized restarts; the
//!   cheapest tree wins.

use super::bits::Bits;
pub use super::order::Objective;
use crate::sema::hir::SymKind;

/// A symmetry group of a tensor, as the index ids it holds (ascending).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SymSet {
    pub kind: SymKind,
    pub ids: Vec<usize>,
}

/// Most distinct indices one product may have: 256 words of 64 bits. A term with
/// more (a network of thousands of tensors) is left unordered, and the report says why.
pub const MAX_INDICES: usize = Bits::<256>::CAPACITY;

/// A symmetry group inside the search: a `Copy` bitset of the width chosen for the
/// problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sym<const W: usize> {
    pub(super) kind: SymKind,
    pub(super) mask: Bits<W>,
}

impl<const W: usize> Sym<W> {
    fn public(&self) -> SymSet {
        SymSet { kind: self.kind, ids: self.mask.ids().collect() }
    }
}

/// One product to order.
#[derive(Debug, Clone, Default)]
pub struct Problem {
    /// Index ids of each input, in the input's dimension order (repeats allowed).
    pub inputs: Vec<Vec<usize>>,
    /// Index ids of the result (distinct).
    pub output: Vec<usize>,
    /// Size of every index id.
    pub sizes: Vec<usize>,
    /// Symmetry groups of each input (may be shorter than `inputs`: missing = none).
    pub sym: Vec<Vec<SymSet>>,
}

/// One binary step. Operands are SSA ids: `< n` is input `id`, `n + k` is step `k`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub a: usize,
    pub b: usize,
    /// The result's indices, in order (the output order for the last step).
    pub indices: Vec<usize>,
    /// Indices summed in this step.
    pub summed: Vec<usize>,
    /// Symmetry groups of the result.
    pub sym: Vec<SymSet>,
    pub flops: f64,
    /// Distinct elements of the result.
    pub size: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Fewer than two inputs: nothing to order.
    Trivial,
    /// Exhaustive dynamic programming.
    Exact,
    /// Greedy with randomized restarts.
    Greedy,
    /// The hyper-optimizer ([`super::order`]): randomized greedy, recursive
    /// bisection and subtree reconfiguration within a time budget.
    Hyper,
}

/// A contraction order: steps in execution order; the last one produces the output.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub n_inputs: usize,
    pub steps: Vec<Step>,
    pub flops: f64,
    /// Peak live intermediate elements.
    pub peak: f64,
    pub method: Method,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Largest number of inputs searched exactly.
    pub exact_limit: usize,
    /// Randomized greedy restarts beyond the exact limit.
    pub restarts: usize,
    pub seed: u64,
    /// What a better tree means (`--objective`).
    pub objective: Objective,
    /// The objective was not given: the CPU back end also orders products for
    /// `combined` and keeps that order where the CPU time model prices the fused
    /// nests faster ([`crate::pipeline::prepare_fused`]).
    pub by_time: bool,
    /// Seconds the hyper-optimizer may spend on one product beyond the exact limit
    /// (`--search-time`); 0 keeps the greedy result.
    pub search_time: f64,
    /// Most trials of the hyper-optimizer (tests: a deterministic amount of work
    /// whatever the machine's speed); `None`: the time budget alone.
    pub max_trials: Option<usize>,
    /// Draw a progress line on stderr when it is a terminal (the command line).
    pub progress: bool,
    /// Bytes an intermediate may take (`tcc opt --max-intermediate`): a reordered term
    /// whose largest intermediate is larger gets a slicing in the report
    /// ([`super::slice`]); `None`: none is searched.
    pub slice_bytes: Option<u64>,
}

/// Default `--search-time`: one second, spent only on products beyond the exact DP.
pub const DEFAULT_SEARCH_TIME: f64 = 1.0;

impl Default for Options {
    fn default() -> Self {
        Options {
            exact_limit: 16,
            restarts: 16,
            seed: 0x7cc,
            objective: Objective::Flops,
            by_time: true,
            search_time: DEFAULT_SEARCH_TIME,
            max_trials: None,
            progress: false,
            slice_bytes: None,
        }
    }
}

impl Options {
    /// The same options without the hyper-optimizer: greedy beyond the exact limit
    /// (cost estimates that only rank alternatives).
    pub fn quick(&self) -> Options {
        Options { search_time: 0.0, progress: false, slice_bytes: None, ..self.clone() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    TooManyIndices(usize),
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathError::TooManyIndices(n) => write!(f, "{n} distinct indices (at most {MAX_INDICES} are supported)"),
        }
    }
}

fn factorial(k: u32) -> f64 {
    (1..=k).map(|x| x as f64).product()
}

fn sym_factor<const W: usize>(groups: &[Sym<W>]) -> f64 {
    groups.iter().map(|g| factorial(g.mask.count_ones())).product()
}

/// Precomputed per-problem data shared by the searches.
pub(super) struct Ctx<const W: usize> {
    pub(super) n: usize,
    /// Distinct index ids (`0..m`).
    pub(super) m: usize,
    /// Products of sizes per 8-bit chunk of an index set.
    table: Vec<[f64; 256]>,
    pub(super) leaf_idx: Vec<Bits<W>>,
    pub(super) leaf_sym: Vec<Vec<Sym<W>>>,
    pub(super) out: Bits<W>,
    has_sym: bool,
}

/// The result of combining two operands.
pub(super) struct Combined<const W: usize> {
    pub(super) groups: Vec<Sym<W>>,
    pub(super) flops: f64,
    pub(super) size: f64,
}

/// The number of index ids of `p` (one more than the largest).
fn index_count(p: &Problem) -> usize {
    p.sizes.len().max(p.inputs.iter().flatten().chain(&p.output).map(|&i| i + 1).max().unwrap_or(0))
}

impl<const W: usize> Ctx<W> {
    pub(super) fn new(p: &Problem) -> Result<Ctx<W>, PathError> {
        let m = index_count(p);
        if m > Bits::<W>::CAPACITY {
            return Err(PathError::TooManyIndices(m));
        }
        let chunks = m.div_ceil(8);
        let mut table = vec![[1.0f64; 256]; chunks];
        for (c, t) in table.iter_mut().enumerate() {
            for (byte, slot) in t.iter_mut().enumerate() {
                let mut prod = 1.0;
                for b in 0..8 {
                    let i = c * 8 + b;
                    if byte & (1 << b) != 0 && i < p.sizes.len() {
                        prod *= p.sizes[i] as f64;
                    }
                }
                *slot = prod;
            }
        }
        let leaf_idx: Vec<Bits<W>> = p.inputs.iter().map(|ix| Bits::from_ids(ix.iter().copied())).collect();
        let leaf_sym: Vec<Vec<Sym<W>>> = (0..p.inputs.len())
            .map(|k| {
                p.sym
                    .get(k)
                    .map(|gs| {
                        gs.iter()
                            .filter(|g| g.ids.iter().all(|&i| i < m))
                            .map(|g| Sym { kind: g.kind, mask: Bits::from_ids(g.ids.iter().copied()) })
                            .filter(|g| g.mask.count_ones() >= 2 && (g.mask & !leaf_idx[k]).is_empty())
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        let has_sym = leaf_sym.iter().any(|g| !g.is_empty());
        let out = Bits::from_ids(p.output.iter().copied());
        Ok(Ctx { n: p.inputs.len(), m, table, leaf_idx, leaf_sym, out, has_sym })
    }

    #[inline]
    pub(super) fn prod(&self, m: Bits<W>) -> f64 {
        let mut r = 1.0;
        for (k, mut w) in m.0.into_iter().enumerate() {
            let mut c = 8 * k;
            while w != 0 {
                r *= self.table[c][(w & 0xff) as usize];
                w >>= 8;
                c += 1;
            }
        }
        r
    }

    /// Combine operands with index sets `ia`, `ib` and groups `ga`, `gb` into a result
    /// keeping `kept`.
    pub(super) fn combine(&self, ia: Bits<W>, ga: &[Sym<W>], ib: Bits<W>, gb: &[Sym<W>], kept: Bits<W>) -> Combined<W> {
        let union = ia | ib;
        let removed = union & !kept;
        let mult = if removed.is_empty() { 1.0 } else { 2.0 };
        if !self.has_sym || (ga.is_empty() && gb.is_empty()) {
            return Combined { groups: Vec::new(), flops: mult * self.prod(union), size: self.prod(kept) };
        }
        let mut groups = Vec::new();
        let mut sum_saving = 1.0;
        for g in ga {
            if let Some(h) = gb.iter().find(|h| h.mask == g.mask) {
                if g.mask & kept == g.mask {
                    let kind = if g.kind == h.kind { SymKind::Symmetric } else { SymKind::Antisymmetric };
                    groups.push(Sym { kind, mask: g.mask });
                } else if (g.mask & kept).is_empty() {
                    sum_saving *= factorial(g.mask.count_ones());
                }
            } else if (g.mask & ib).is_empty() && (g.mask & kept).count_ones() >= 2 {
                groups.push(Sym { kind: g.kind, mask: g.mask & kept });
            }
        }
        for h in gb {
            if ga.iter().any(|g| g.mask == h.mask) {
                continue;
            }
            if (h.mask & ia).is_empty() && (h.mask & kept).count_ones() >= 2 {
                groups.push(Sym { kind: h.kind, mask: h.mask & kept });
            }
        }
        let sf = sym_factor(&groups);
        Combined { flops: mult * self.prod(union) / (sf * sum_saving), size: self.prod(kept) / sf, groups }
    }
}

/// Finds the cheapest binary contraction order of `p` (see the module docs).
pub fn optimize_path(p: &Problem, opts: &Options) -> Result<Path, PathError> {
    // Index sets as wide as this problem needs.
    match index_count(p).div_ceil(64) {
        0..=2 => search::<2>(p, opts),
        3..=4 => search::<4>(p, opts),
        5..=16 => search::<16>(p, opts),
        17..=64 => search::<64>(p, opts),
        _ => search::<256>(p, opts),
    }
}

fn search<const W: usize>(p: &Problem, opts: &Options) -> Result<Path, PathError> {
    // `--search-time` counts from here: the greedy starts are part of the search.
    let started = std::time::Instant::now();
    let ctx = Ctx::<W>::new(p)?;
    let n = ctx.n;
    if n < 2 {
        return Ok(Path { n_inputs: n, steps: Vec::new(), flops: 0.0, peak: 0.0, method: Method::Trivial });
    }
    if n == 2 {
        return Ok(finalize(&ctx, p, &[(0, 1)], Method::Exact));
    }
    // Greedy first: a tree and an upper bound.
    let mut best = greedy(&ctx, Heuristic::Memory, None);
    let mut best_cost = tree_cost(&ctx, &best);
    let g2 = greedy(&ctx, Heuristic::Flops, None);
    let c2 = tree_cost(&ctx, &g2);
    if c2 < best_cost {
        best = g2.clone();
        best_cost = c2;
    }
    // The subset table holds 2^n index sets: exact search for narrow sets only.
    if n <= opts.exact_limit && n <= 24 && (W <= 4 || n <= 16) {
        let pairs = dp(&ctx, best_cost * (1.0 + 1e-9));
        // The DP is exact in flops; another objective refines its tree by windows.
        let pairs = match opts.objective {
            Objective::Flops => pairs,
            obj => super::order::refine(&ctx, pairs, obj),
        };
        return Ok(finalize(&ctx, p, &pairs, Method::Exact));
    }
    let mut rng = Rng(opts.seed | 1);
    let mut starts = vec![best.clone(), g2];
    // The hyper-optimizer's own randomized greedy replaces these restarts on large
    // networks, where each costs a noticeable share of the budget (a 300-tensor
    // graph's sixteen took a second): with a time budget, they stop after a
    // twentieth of it (never with `max_trials`, whose results must not depend on
    // the machine's speed).
    let hyper = opts.search_time > 0.0 && opts.max_trials != Some(0);
    let timed = hyper && opts.max_trials.is_none();
    for r in 0..opts.restarts {
        if timed && started.elapsed().as_secs_f64() > 0.05 * opts.search_time {
            break;
        }
        let h = if r % 2 == 0 { Heuristic::Memory } else { Heuristic::Flops };
        let t = 0.05 + 0.5 * (r as f64 / opts.restarts.max(1) as f64);
        let cand = greedy(&ctx, h, Some((&mut rng, t)));
        let c = tree_cost(&ctx, &cand);
        if c < best_cost {
            best = cand.clone();
            best_cost = c;
        }
        starts.push(cand);
    }
    if hyper {
        starts.insert(0, best);
        let pairs = super::order::hyper(&ctx, &starts, opts, started);
        return Ok(finalize(&ctx, p, &pairs, Method::Hyper));
    }
    Ok(finalize(&ctx, p, &best, Method::Greedy))
}

/// The [`Path`] of a given contraction tree of `p` (SSA pairs, as in
/// [`Step::a`]/[`Step::b`]): its steps, flops and sizes under `p`'s sizes — how a
/// tree found for one network is costed on another with the same structure (a
/// sliced one, [`super::slice`]).
pub fn path_of(p: &Problem, pairs: &[(usize, usize)], method: Method) -> Result<Path, PathError> {
    fn at<const W: usize>(p: &Problem, pairs: &[(usize, usize)], method: Method) -> Result<Path, PathError> {
        let ctx = Ctx::<W>::new(p)?;
        Ok(finalize(&ctx, p, pairs, method))
    }
    match index_count(p).div_ceil(64) {
        0..=2 => at::<2>(p, pairs, method),
        3..=4 => at::<4>(p, pairs, method),
        5..=16 => at::<16>(p, pairs, method),
        17..=64 => at::<64>(p, pairs, method),
        _ => at::<256>(p, pairs, method),
    }
}

/// Cost of a path over the inputs, without symmetry — for comparisons with tools
/// that ignore it (the benchmark): equal to [`Path::flops`] when no input has a
/// symmetry group.
pub fn path_flops(path: &Path) -> f64 {
    path.steps.iter().map(|s| s.flops).sum()
}

/// Total flops of an SSA pair list (same model as [`finalize`]).
fn tree_cost<const W: usize>(ctx: &Ctx<W>, pairs: &[(usize, usize)]) -> f64 {
    let mut ids: Vec<(Bits<W>, Vec<Sym<W>>, Vec<bool>)> = (0..ctx.n)
        .map(|k| {
            let mut cov = vec![false; ctx.n];
            cov[k] = true;
            (ctx.leaf_idx[k], ctx.leaf_sym[k].clone(), cov)
        })
        .collect();
    let mut total = 0.0;
    for &(a, b) in pairs {
        let cov: Vec<bool> = ids[a].2.iter().zip(&ids[b].2).map(|(x, y)| *x || *y).collect();
        let rest = (0..ctx.n).filter(|&k| !cov[k]).fold(Bits::empty(), |acc, k| acc | ctx.leaf_idx[k]);
        let kept = (ids[a].0 | ids[b].0) & (ctx.out | rest);
        let c = ctx.combine(ids[a].0, &ids[a].1, ids[b].0, &ids[b].1, kept);
        total += c.flops;
        ids.push((kept, c.groups, cov));
    }
    total
}

/// Builds the [`Path`] of an SSA pair list: index orders, flops, sizes, peak.
/// The tree `pairs` of `p` improved by subtree reconfiguration (exact DP on
/// windows, [`super::order`]) under `obj`, kept only if better by it: how a tree
/// is re-fitted to a network whose sizes changed (a sliced one, [`super::slice`]).
pub fn reconfigure_path(
    p: &Problem,
    pairs: &[(usize, usize)],
    obj: Objective,
    method: Method,
) -> Result<Path, PathError> {
    fn at<const W: usize>(
        p: &Problem,
        pairs: &[(usize, usize)],
        obj: Objective,
        method: Method,
    ) -> Result<Path, PathError> {
        let ctx = Ctx::<W>::new(p)?;
        let pairs = super::order::refine(&ctx, pairs.to_vec(), obj);
        Ok(finalize(&ctx, p, &pairs, method))
    }
    match index_count(p).div_ceil(64) {
        0..=2 => at::<2>(p, pairs, obj, method),
        3..=4 => at::<4>(p, pairs, obj, method),
        5..=16 => at::<16>(p, pairs, obj, method),
        17..=64 => at::<64>(p, pairs, obj, method),
        _ => at::<256>(p, pairs, obj, method),
    }
}

/// The tree `pairs` of `p` reconfigured under a size cap: intermediates above
/// `cap` lowered first, flops second ([`super::slice`]'s fitting between choices).
pub fn reconfigure_capped(p: &Problem, pairs: &[(usize, usize)], cap: f64, method: Method) -> Result<Path, PathError> {
    fn at<const W: usize>(p: &Problem, pairs: &[(usize, usize)], cap: f64, method: Method) -> Result<Path, PathError> {
        let ctx = Ctx::<W>::new(p)?;
        let pairs = super::order::refine_capped(&ctx, pairs.to_vec(), cap);
        Ok(finalize(&ctx, p, &pairs, method))
    }
    match index_count(p).div_ceil(64) {
        0..=2 => at::<2>(p, pairs, cap, method),
        3..=4 => at::<4>(p, pairs, cap, method),
        5..=16 => at::<16>(p, pairs, cap, method),
        17..=64 => at::<64>(p, pairs, cap, method),
        _ => at::<256>(p, pairs, cap, method),
    }
}

fn finalize<const W: usize>(ctx: &Ctx<W>, p: &Problem, pairs: &[(usize, usize)], method: Method) -> Path {
    let n = ctx.n;
    struct Op<const W: usize> {
        set: Bits<W>,
        order: Vec<usize>,
        groups: Vec<Sym<W>>,
        cov: Vec<bool>,
        size: f64,
    }
    let mut ops: Vec<Op<W>> = (0..n)
        .map(|k| {
            let mut cov = vec![false; n];
            cov[k] = true;
            Op { set: ctx.leaf_idx[k], order: p.inputs[k].clone(), groups: ctx.leaf_sym[k].clone(), cov, size: 0.0 }
        })
        .collect();
    let mut steps = Vec::new();
    let (mut live, mut peak) = (0.0f64, 0.0f64);
    for (s, &(a, b)) in pairs.iter().enumerate() {
        let last = s + 1 == pairs.len();
        let cov: Vec<bool> = ops[a].cov.iter().zip(&ops[b].cov).map(|(x, y)| *x || *y).collect();
        let rest = (0..n).filter(|&k| !cov[k]).fold(Bits::empty(), |acc, k| acc | ctx.leaf_idx[k]);
        let union = ops[a].set | ops[b].set;
        let kept = union & (ctx.out | rest);
        let c = ctx.combine(ops[a].set, &ops[a].groups, ops[b].set, &ops[b].groups, kept);
        let order: Vec<usize> = if last {
            p.output.clone()
        } else {
            // The larger operand's layout, each index it sums replaced by the next
            // new index of the other (in that one's order), the rest of those
            // appended: the layout a user writes for a quarter transform
            // (`T2[a,b,r,s] = C[b,q] T1[a,q,r,s]`), which keeps the result's
            // strides in the big operand's order for the GETT. (Appending every new
            // index instead made the four-index transform as one statement 70 ms
            // slower than its four hand-written steps at 2 threads.)
            let (big, small) = if ctx.prod(ops[b].set) > ctx.prod(ops[a].set) { (b, a) } else { (a, b) };
            let mut fresh: Vec<usize> = Vec::new();
            for &i in &ops[small].order {
                if kept.contains(i) && !ops[big].order.contains(&i) && !fresh.contains(&i) {
                    fresh.push(i);
                }
            }
            let mut fresh = fresh.into_iter();
            let mut o = Vec::new();
            for &i in &ops[big].order {
                if kept.contains(i) {
                    if !o.contains(&i) {
                        o.push(i);
                    }
                } else if let Some(f) = fresh.next() {
                    o.push(f);
                }
            }
            o.extend(fresh);
            o
        };
        let mut summed = Vec::new();
        for &i in ops[a].order.iter().chain(&ops[b].order) {
            if (union & !kept).contains(i) && !summed.contains(&i) {
                summed.push(i);
            }
        }
        let size = if last { 0.0 } else { c.size };
        live += size;
        peak = peak.max(live);
        live -= ops[a].size + ops[b].size;
        let sym = c.groups.iter().map(Sym::public).collect();
        steps.push(Step { a, b, indices: order.clone(), summed, sym, flops: c.flops, size: c.size });
        ops.push(Op { set: kept, order, groups: c.groups, cov, size });
    }
    let flops = steps.iter().map(|s| s.flops).sum();
    Path { n_inputs: n, steps, flops, peak, method }
}

#[derive(Clone)]
struct Entry<const W: usize> {
    cost: f64,
    peak: f64,
    size: f64,
    split: u32,
    a_first: bool,
    groups: Vec<Sym<W>>,
}

/// Exhaustive subset DP; returns SSA pairs. `bound`: an achievable total cost.
fn dp<const W: usize>(ctx: &Ctx<W>, bound: f64) -> Vec<(usize, usize)> {
    let n = ctx.n;
    let full: u32 = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
    let nsub = full as usize + 1;
    let mut ind = vec![Bits::<W>::empty(); nsub];
    for s in 1..nsub {
        let low = s & s.wrapping_neg();
        ind[s] = ind[s ^ low] | ctx.leaf_idx[low.trailing_zeros() as usize];
    }
    // Index set of a subset's tensor: the leaf's own, or what it keeps.
    let idx = |s: usize| -> Bits<W> {
        if s.count_ones() == 1 {
            ind[s]
        } else {
            ind[s] & (ctx.out | ind[full as usize ^ s])
        }
    };
    let empty = Entry { cost: f64::INFINITY, peak: 0.0, size: 0.0, split: 0, a_first: true, groups: Vec::new() };
    let mut best = vec![empty; nsub];
    // Costs apart from the entries: the inner loop reads only these (cache-friendly).
    let mut costs = vec![f64::INFINITY; nsub];
    for k in 0..n {
        best[1 << k] =
            Entry { cost: 0.0, peak: 0.0, size: 0.0, split: 0, a_first: true, groups: ctx.leaf_sym[k].clone() };
        costs[1 << k] = 0.0;
    }
    for s in 1..nsub {
        if s.count_ones() < 2 {
            continue;
        }
        let kept = idx(s);
        let is_root = s == full as usize;
        let low = s & s.wrapping_neg();
        let rest = s ^ low;
        let mut sub = rest;
        let mut cur =
            Entry { cost: f64::INFINITY, peak: f64::INFINITY, size: 0.0, split: 0, a_first: true, groups: Vec::new() };
        loop {
            if sub != rest {
                let a = low | sub;
                let b = s ^ a;
                let base = costs[a] + costs[b];
                if base <= bound && base <= cur.cost {
                    let (ea, eb) = (&best[a], &best[b]);
                    let c = ctx.combine(idx(a), &ea.groups, idx(b), &eb.groups, kept);
                    let total = base + c.flops;
                    if total <= bound && total <= cur.cost {
                        let rsize = if is_root { 0.0 } else { c.size };
                        let pa = ea.peak.max(ea.size + eb.peak).max(ea.size + eb.size + rsize);
                        let pb = eb.peak.max(eb.size + ea.peak).max(ea.size + eb.size + rsize);
                        let (peak, a_first) = if pa <= pb { (pa, true) } else { (pb, false) };
                        if total < cur.cost || peak < cur.peak {
                            cur = Entry { cost: total, peak, size: rsize, split: a as u32, a_first, groups: c.groups };
                        }
                    }
                }
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
        costs[s] = cur.cost;
        best[s] = cur;
    }
    let mut pairs = Vec::new();
    fn emit<const W: usize>(s: usize, best: &[Entry<W>], n: usize, pairs: &mut Vec<(usize, usize)>) -> usize {
        if s.count_ones() == 1 {
            return s.trailing_zeros() as usize;
        }
        let a = best[s].split as usize;
        let b = s ^ a;
        let (ia, ib) = if best[s].a_first {
            let ia = emit(a, best, n, pairs);
            (ia, emit(b, best, n, pairs))
        } else {
            let ib = emit(b, best, n, pairs);
            (emit(a, best, n, pairs), ib)
        };
        pairs.push((ia, ib));
        n + pairs.len() - 1
    }
    assert!(best[full as usize].cost.is_finite(), "DP bound excluded every tree");
    emit(full as usize, &best, n, &mut pairs);
    pairs
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Heuristic {
    /// Least growth in memory: `size(result) - size(a) - size(b)` (opt_einsum).
    Memory,
    /// Cheapest step.
    Flops,
}

/// xorshift64*: a small deterministic generator for restarts.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Greedy pairing; `noise`: (rng, temperature) for randomized restarts.
fn greedy<const W: usize>(ctx: &Ctx<W>, h: Heuristic, mut noise: Option<(&mut Rng, f64)>) -> Vec<(usize, usize)> {
    let n = ctx.n;
    // (ssa id, index set, groups, size)
    let mut alive: Vec<(usize, Bits<W>, Vec<Sym<W>>, f64)> =
        (0..n).map(|k| (k, ctx.leaf_idx[k], ctx.leaf_sym[k].clone(), ctx.prod(ctx.leaf_idx[k]))).collect();
    // How many live operands hold each index.
    let mut count = vec![0u32; ctx.m];
    for &(_, s, _, _) in &alive {
        for i in s.ids() {
            count[i] += 1;
        }
    }
    let mut pairs = Vec::new();
    let mut next = n;
    while alive.len() > 1 {
        let mut pick: Option<(f64, usize, usize, Bits<W>, Combined<W>)> = None;
        // The candidates: pairs sharing an index (found through the operands of each
        // index, so a sparse network costs its edges per step, not all pairs), in
        // ascending order; every pair when no two operands share an index.
        let mut holders: Vec<Vec<usize>> = vec![Vec::new(); ctx.m];
        for (x, a) in alive.iter().enumerate() {
            for i in a.1.ids() {
                holders[i].push(x);
            }
        }
        let mut candidates: Vec<(usize, usize)> = Vec::new();
        for h in &holders {
            for (k, &x) in h.iter().enumerate() {
                candidates.extend(h[k + 1..].iter().map(|&y| (x, y)));
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        if candidates.is_empty() {
            candidates = (0..alive.len()).flat_map(|x| (x + 1..alive.len()).map(move |y| (x, y))).collect();
        }
        let any_connected = !(alive[candidates[0].0].1 & alive[candidates[0].1].1).is_empty();
        for &(x, y) in &candidates {
            {
                let (sx, sy) = (alive[x].1, alive[y].1);
                let union = sx | sy;
                let mut kept = Bits::empty();
                for i in union.ids() {
                    let inside = sx.contains(i) as u32 + sy.contains(i) as u32;
                    if ctx.out.contains(i) || count[i] > inside {
                        kept |= Bits::bit(i);
                    }
                }
                let c = ctx.combine(sx, &alive[x].2, sy, &alive[y].2, kept);
                let mut score = match h {
                    Heuristic::Memory if any_connected => c.size - alive[x].3 - alive[y].3,
                    Heuristic::Memory => alive[x].3 + alive[y].3,
                    Heuristic::Flops => c.flops,
                };
                if let Some((rng, t)) = noise.as_mut() {
                    let u = rng.next_f64().clamp(1e-12, 1.0 - 1e-12);
                    let gumbel = -(-u.ln()).ln();
                    score -= *t * gumbel * (score.abs() + c.size);
                }
                let better = match &pick {
                    None => true,
                    Some((sc, _, _, _, pc)) => score < *sc || (score == *sc && c.flops < pc.flops),
                };
                if better {
                    pick = Some((score, x, y, kept, c));
                }
            }
        }
        let (_, x, y, kept, c) = pick.expect("at least two operands");
        let (ex, ey) = (alive[x].1, alive[y].1);
        for i in ex.ids() {
            count[i] -= 1;
        }
        for i in ey.ids() {
            count[i] -= 1;
        }
        for i in kept.ids() {
            count[i] += 1;
        }
        pairs.push((alive[x].0, alive[y].0));
        alive.remove(y);
        alive.remove(x);
        alive.push((next, kept, c.groups, c.size));
        next += 1;
    }
    pairs
}

/// Renders a path as a parenthesised product, naming inputs with `name(k)`.
pub fn path_text(path: &Path, name: &dyn Fn(usize) -> String) -> String {
    if path.n_inputs == 0 {
        return String::new();
    }
    let mut texts: Vec<String> = (0..path.n_inputs).map(name).collect();
    for s in &path.steps {
        let t = format!("({}*{})", texts[s.a], texts[s.b]);
        texts.push(t);
    }
    texts.pop().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses "ab,bc->ac" with letters as index ids.
    pub(crate) fn spec(s: &str, sizes: &[(char, usize)]) -> Problem {
        let (ins, out) = s.split_once("->").unwrap();
        let id = |c: char| (c as u8 - b'a') as usize;
        let mut sz = vec![1; 26];
        for &(c, n) in sizes {
            sz[id(c)] = n;
        }
        Problem {
            inputs: ins.split(',').map(|t| t.chars().map(id).collect()).collect(),
            output: out.chars().map(id).collect(),
            sizes: sz,
            sym: Vec::new(),
        }
    }

    /// Minimum flops over every contraction sequence (all binary trees).
    fn brute(ctx: &Ctx<2>, alive: Vec<(Bits<2>, Vec<Sym<2>>, Vec<bool>)>) -> f64 {
        if alive.len() == 1 {
            return 0.0;
        }
        let mut best = f64::INFINITY;
        for x in 0..alive.len() {
            for y in x + 1..alive.len() {
                let cov: Vec<bool> = alive[x].2.iter().zip(&alive[y].2).map(|(a, b)| *a || *b).collect();
                let rest = (0..ctx.n).filter(|&k| !cov[k]).fold(Bits::empty(), |acc, k| acc | ctx.leaf_idx[k]);
                let kept = (alive[x].0 | alive[y].0) & (ctx.out | rest);
                let c = ctx.combine(alive[x].0, &alive[x].1, alive[y].0, &alive[y].1, kept);
                let mut next: Vec<_> =
                    alive.iter().enumerate().filter(|(k, _)| *k != x && *k != y).map(|(_, v)| v.clone()).collect();
                next.push((kept, c.groups, cov));
                best = best.min(c.flops + brute(ctx, next));
            }
        }
        best
    }

    fn brute_force(p: &Problem) -> f64 {
        let ctx = Ctx::<2>::new(p).unwrap();
        let alive = (0..ctx.n)
            .map(|k| {
                let mut cov = vec![false; ctx.n];
                cov[k] = true;
                (ctx.leaf_idx[k], ctx.leaf_sym[k].clone(), cov)
            })
            .collect();
        brute(&ctx, alive)
    }

    #[test]
    fn matrix_chain_classic() {
        // CLRS: 30x35, 35x15, 15x5, 5x10, 10x20, 20x25 -> 15125 scalar multiplications.
        let p = spec(
            "ab,bc,cd,de,ef,fg->ag",
            &[('a', 30), ('b', 35), ('c', 15), ('d', 5), ('e', 10), ('f', 20), ('g', 25)],
        );
        let path = optimize_path(&p, &Options::default()).unwrap();
        assert_eq!(path.flops, 2.0 * 15125.0);
        assert_eq!(path.method, Method::Exact);
        let names = ["A1", "A2", "A3", "A4", "A5", "A6"];
        let text = path_text(&path, &|k| names[k].to_string());
        // ((A1(A2A3))((A4A5)A6))
        for part in ["(A2*A3)", "(A4*A5)"] {
            assert!(text.contains(part), "{text}");
        }
    }

    #[test]
    fn four_index_transform_is_n5() {
        let n = 7usize;
        let p = spec(
            "ap,bq,cr,ds,pqrs->abcd",
            &[('a', n), ('b', n), ('c', n), ('d', n), ('p', n), ('q', n), ('r', n), ('s', n)],
        );
        let path = optimize_path(&p, &Options::default()).unwrap();
        assert_eq!(path.steps.len(), 4);
        for s in &path.steps {
            assert_eq!(s.flops, 2.0 * (n as f64).powi(5));
        }
        assert!(path.peak <= 2.0 * (n as f64).powi(4));
    }

    #[test]
    fn symmetry_halves_cost() {
        // Y[p,q,r] = A[p,q,s] (symmetric in p q) * B[s,r]
        let mut p = spec("pqs,sr->pqr", &[('p', 6), ('q', 6), ('r', 5), ('s', 4)]);
        let plain = optimize_path(&p, &Options::default()).unwrap().flops;
        p.sym = vec![vec![SymSet { kind: SymKind::Symmetric, ids: vec![15, 16] }]];
        let sym = optimize_path(&p, &Options::default()).unwrap();
        assert_eq!(plain, 2.0 * 6.0 * 6.0 * 5.0 * 4.0);
        assert_eq!(sym.flops, plain / 2.0);
        assert_eq!(sym.steps[0].sym.len(), 1);
        // Summed antisymmetric pair in both operands, antisymmetric pairs kept:
        // X[a,b,i,j] = T[a,b,k,l] V[k,l,i,j] -> 1/8 of the plain cost.
        let mut p = spec("abkl,klij->abij", &[('a', 5), ('b', 5), ('i', 3), ('j', 3), ('k', 3), ('l', 3)]);
        let plain = optimize_path(&p, &Options::default()).unwrap().flops;
        let g = |x: char, y: char| SymSet {
            kind: SymKind::Antisymmetric,
            ids: vec![(x as u8 - b'a') as usize, (y as u8 - b'a') as usize],
        };
        p.sym = vec![vec![g('a', 'b'), g('k', 'l')], vec![g('k', 'l'), g('i', 'j')]];
        let sym = optimize_path(&p, &Options::default()).unwrap().flops;
        assert_eq!(sym, plain / 8.0);
    }

    #[test]
    fn outer_product_when_optimal() {
        // a[i] b[j] C[i,j,k]: outer product first is cheapest for large k.
        let p = spec("i,j,ijk->k", &[('i', 10), ('j', 10), ('k', 100)]);
        let path = optimize_path(&p, &Options::default()).unwrap();
        assert_eq!(path.flops, brute_force(&p));
        assert_eq!(path.flops, 100.0 + 2.0 * 10000.0);
    }

    fn random_problem(seed: u64, nf: usize) -> Problem {
        let mut rng = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
        let mut r = |k: usize| (rng.next_f64() * k as f64) as usize;
        let ni = 3 + r(6);
        let sizes: Vec<usize> = (0..ni).map(|_| 1 + r(5)).collect();
        let mut inputs: Vec<Vec<usize>> = (0..nf).map(|_| (0..r(4)).map(|_| r(ni)).collect()).collect();
        // connect a few random indices between factors
        for f in 1..nf {
            if r(3) > 0 {
                let i = r(ni);
                inputs[f].push(i);
                inputs[r(f)].push(i);
            }
        }
        let all: Vec<usize> = {
            let mut v: Vec<usize> = inputs.iter().flatten().copied().collect();
            v.sort();
            v.dedup();
            v
        };
        let output = all.into_iter().filter(|_| r(3) == 0).collect();
        Problem { inputs, output, sizes, sym: Vec::new() }
    }

    #[test]
    fn dp_matches_brute_force() {
        for seed in 0..150u64 {
            let nf = 2 + (seed % 5) as usize;
            let mut p = random_problem(seed, nf);
            if seed % 3 == 0 {
                // symmetric group on the first input's first two distinct indices
                let mut d = p.inputs[0].clone();
                d.dedup();
                if d.len() >= 2 && d[0] != d[1] && p.sizes[d[0]] == p.sizes[d[1]] {
                    p.sym = vec![vec![SymSet { kind: SymKind::Symmetric, ids: vec![d[0].min(d[1]), d[0].max(d[1])] }]];
                }
            }
            let path = optimize_path(&p, &Options::default()).unwrap();
            let bf = brute_force(&p);
            assert!((path.flops - bf).abs() <= 1e-9 * bf.max(1.0), "seed {seed}: dp {} brute {bf} {p:?}", path.flops);
            let greedy_only = optimize_path(&p, &Options { exact_limit: 0, ..Options::default() }).unwrap();
            assert!(greedy_only.flops >= path.flops - 1e-9);
        }
    }

    #[test]
    fn greedy_not_worse_than_naive() {
        for seed in 0..40u64 {
            let p = random_problem(seed + 1000, 8);
            let g = optimize_path(&p, &Options { exact_limit: 0, search_time: 0.0, ..Options::default() }).unwrap();
            let all = Bits::<2>::from_ids(p.inputs.iter().flatten().copied());
            let naive: f64 = 2.0 * all.ids().map(|i| p.sizes[i] as f64).product::<f64>();
            // Every binary step loops over a subset of all indices: n-1 steps.
            assert!(g.flops <= naive * (p.inputs.len() - 1) as f64, "seed {seed}");
            assert_eq!(g.method, Method::Greedy);
        }
    }

    #[test]
    fn large_network_uses_greedy() {
        let mut s = String::new();
        let letters: Vec<char> = ('a'..='z').collect();
        for k in 0..20 {
            if k > 0 {
                s.push(',');
            }
            s.push(letters[k]);
            s.push(letters[k + 1]);
        }
        s.push_str("->au");
        let sizes: Vec<(char, usize)> = letters.iter().map(|&c| (c, 3)).collect();
        let p = spec(&s, &sizes);
        let path = optimize_path(&p, &Options::default()).unwrap();
        assert_eq!(path.method, Method::Hyper);
        assert_eq!(path.steps.len(), 19);
        assert_eq!(path.flops, 19.0 * 2.0 * 27.0);
    }

    /// A random network with summed hyperedges: `nf` factors on a ring of bonds,
    /// plus diagonal gates (vectors) and three-leg hyperedges shared by random
    /// triples of factors.
    fn hyper_network(seed: u64, nf: usize) -> Problem {
        let mut rng = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
        let mut r = |k: usize| (rng.next_f64() * k as f64) as usize;
        let mut inputs: Vec<Vec<usize>> = (0..nf).map(|k| vec![k, (k + 1) % nf]).collect();
        let mut m = nf;
        for _ in 0..nf / 3 {
            // a diagonal gate on a bond: the bond index is held three times
            inputs.push(vec![r(nf)]);
        }
        for _ in 0..nf / 4 {
            let (a, b, c) = (r(nf), r(nf), r(nf));
            for f in [a, b, c] {
                inputs[f].push(m);
            }
            m += 1;
        }
        let sizes = (0..m).map(|_| 2 + r(3)).collect();
        let output = if r(2) == 0 { vec![] } else { vec![0] };
        Problem { inputs, output, sizes, sym: Vec::new() }
    }

    /// Every step keeps a summed index while some operand still to be contracted
    /// holds it, and sums it at the step that consumes its last holders: checked
    /// along the path for the exact DP, greedy and the hyper-optimizer, with flops
    /// recomputed from the steps' own index sets.
    #[test]
    fn hyperedges_are_summed_at_their_last_holder() {
        for seed in 0..24u64 {
            let nf = [4, 10, 14, 20, 28, 40][seed as usize % 6];
            let p = hyper_network(seed, nf);
            let holders = |i: usize| p.inputs.iter().filter(|ix| ix.contains(&i)).count();
            assert!((0..p.sizes.len()).any(|i| holders(i) >= 3), "seed {seed}: no hyperedge");
            let hyper = Options { max_trials: Some(32), ..Options::default() };
            let greedy = Options { search_time: 0.0, ..Options::default() };
            for opts in [hyper, greedy] {
                let path = optimize_path(&p, &opts).unwrap();
                let n = p.inputs.len();
                let mut sets: Vec<Vec<usize>> = p.inputs.clone();
                let mut live: Vec<bool> = vec![true; n];
                let mut flops = 0.0;
                for (k, s) in path.steps.iter().enumerate() {
                    assert!(live[s.a] && live[s.b], "seed {seed}: operand used twice");
                    live[s.a] = false;
                    live[s.b] = false;
                    let union: Vec<usize> = {
                        let mut u: Vec<usize> = sets[s.a].iter().chain(&sets[s.b]).copied().collect();
                        u.sort_unstable();
                        u.dedup();
                        u
                    };
                    let elsewhere = |i: usize| (0..sets.len()).any(|o| live[o] && sets[o].contains(&i));
                    for &i in &union {
                        let keep = p.output.contains(&i) || elsewhere(i);
                        assert_eq!(s.indices.contains(&i), keep, "seed {seed} step {k}: index {i} kept {keep}");
                        assert_eq!(s.summed.contains(&i), !keep, "seed {seed} step {k}: index {i}");
                    }
                    let points: f64 = union.iter().map(|&i| p.sizes[i] as f64).product();
                    flops += if s.summed.is_empty() { points } else { 2.0 * points };
                    sets.push(s.indices.clone());
                    live.push(true);
                }
                assert_eq!(path.steps.len(), n - 1);
                assert!((flops - path.flops).abs() <= 1e-9 * flops, "seed {seed}: {flops} vs {}", path.flops);
                if n <= 16 {
                    assert_eq!(path.method, Method::Exact);
                }
            }
            // The exact DP is still exact with hyperedges.
            if p.inputs.len() <= 6 {
                let path = optimize_path(&p, &Options::default()).unwrap();
                let bf = brute_force(&p);
                assert!((path.flops - bf).abs() <= 1e-9 * bf, "seed {seed}: dp {} brute {bf}", path.flops);
            }
        }
    }

    /// A chain of 300 matrices has 301 indices (index sets of five words): ordered
    /// by the hyper-optimizer like a short one, at the exact cost of a chain.
    #[test]
    fn networks_beyond_128_indices_are_ordered() {
        for n in [130usize, 300, 1100] {
            let p = Problem {
                inputs: (0..n).map(|k| vec![k, k + 1]).collect(),
                output: vec![0, n],
                sizes: vec![3; n + 1],
                sym: Vec::new(),
            };
            let path = optimize_path(&p, &Options::default()).unwrap();
            assert_eq!(path.method, Method::Hyper);
            assert_eq!(path.steps.len(), n - 1);
            assert_eq!(path.flops, (n - 1) as f64 * 2.0 * 27.0, "{n} matrices");
        }
        let too_many = Problem { inputs: vec![vec![MAX_INDICES], vec![0]], output: vec![], sizes: vec![], sym: vec![] };
        assert_eq!(optimize_path(&too_many, &Options::default()), Err(PathError::TooManyIndices(MAX_INDICES + 1)));
    }
}
