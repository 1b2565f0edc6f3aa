//! Contraction order at scale: a hyper-optimizer in the manner of cotengra for
//! products beyond the exact DP of [`super::opmin`].
//!
//! Trials draw a tree from one of two generators with parameters drawn per trial —
//! randomized greedy ([`rgreedy`], Boltzmann sampling over
//! `size(out) - alpha·(size(a)+size(b))`) and recursive graph bisection ([`bisect`],
//! with the multilevel bisection of [`partition`]) — and keep the best few under
//! the [`Objective`]; interleaved with the trials, those are improved by subtree
//! reconfiguration ([`reconf`]: exact DP on windows of at most 8 subtrees), and under the flops
//! objective the winner's largest intermediate is trimmed by reconfiguration under
//! a size cap for at most [`TRIM_SLACK`] more flops ([`trim`]). Everything is seeded
//! from [`super::opmin::Options::seed`] and the trial number, so the sequence of
//! trees is deterministic; the time budget only decides how far along it the
//! search gets (`max_trials` bounds it instead for reproducible results).
//!
//! Trees are SSA pair lists, as in `opmin`: operand `< n` is input `k`, `n + k` is
//! step `k`.

mod arena;
mod bisect;
mod partition;
mod progress;
mod reconf;
mod rgreedy;

use super::opmin::{Ctx, Options};
use arena::Arena;
use std::time::{Duration, Instant};

/// What a better contraction tree means (`--objective`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Fewest flops (ties: smaller largest intermediate), then the largest
    /// intermediate trimmed for at most [`TRIM_SLACK`] more flops.
    #[default]
    Flops,
    /// Smallest largest intermediate (ties: fewer flops).
    Size,
    /// Flops plus [`FLOPS_PER_BYTE`] × bytes of memory traffic: every intermediate
    /// written once and read once, 8 bytes an element (ties: smaller largest
    /// intermediate).
    Combined,
}

/// The weight of a byte of intermediate traffic in [`Objective::Combined`], in
/// flops: roughly a CPU socket's peak flop rate over its memory bandwidth (about 1
/// Tflop/s over 100 GB/s), so a step that streams a large intermediate through
/// memory for little arithmetic costs what it would take in time.
pub const FLOPS_PER_BYTE: f64 = 10.0;

/// Bytes moved per intermediate element: written once, read once, as f64.
const TRAFFIC_BYTES_PER_ELEMENT: f64 = 16.0;

impl Objective {
    pub fn name(self) -> &'static str {
        match self {
            Objective::Flops => "flops",
            Objective::Size => "size",
            Objective::Combined => "combined",
        }
    }

    pub fn from_name(s: &str) -> Option<Objective> {
        [Objective::Flops, Objective::Size, Objective::Combined].into_iter().find(|o| o.name() == s)
    }

    /// The cost of one step that produces an intermediate of `size` elements
    /// (`size` 0 for the final result) with `flops`, as (primary, secondary) parts.
    fn step(self, flops: f64, size: f64) -> Cost {
        match self {
            Objective::Flops => Cost(flops, size),
            Objective::Size => Cost(size, flops),
            Objective::Combined => Cost(flops + FLOPS_PER_BYTE * TRAFFIC_BYTES_PER_ELEMENT * size, size),
        }
    }

    /// How costs of parts combine: (primary, secondary) are added, or maxed for a
    /// size.
    fn add(self, a: Cost, b: Cost) -> Cost {
        match self {
            Objective::Flops | Objective::Combined => Cost(a.0 + b.0, a.1.max(b.1)),
            Objective::Size => Cost(a.0.max(b.0), a.1 + b.1),
        }
    }
}

/// How reconfiguration scores a window: an [`Objective`], or (the flops
/// objective's last pass, [`trim`]) the largest intermediate above a cap first and
/// flops second, so that windows whose intermediates all fit the cap only lower
/// their flops.
#[derive(Debug, Clone, Copy)]
pub(super) enum Score {
    Obj(Objective),
    /// `max(size, cap)` over the steps, then flops.
    Cap(f64),
}

impl From<Objective> for Score {
    fn from(o: Objective) -> Score {
        Score::Obj(o)
    }
}

impl Score {
    fn step(self, flops: f64, size: f64) -> Cost {
        match self {
            Score::Obj(o) => o.step(flops, size),
            Score::Cap(cap) => Cost(size.max(cap), flops),
        }
    }

    fn add(self, a: Cost, b: Cost) -> Cost {
        match self {
            Score::Obj(o) => o.add(a, b),
            Score::Cap(_) => Objective::Size.add(a, b),
        }
    }
}

/// A tree's cost under an objective, compared lexicographically.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub(super) struct Cost(pub f64, pub f64);

impl Cost {
    const ZERO: Cost = Cost(0.0, 0.0);

    /// Strictly better, by more than rounding.
    fn better(self, o: Cost) -> bool {
        let lt = |a: f64, b: f64| a < b * (1.0 - 1e-12);
        lt(self.0, o.0) || (!lt(o.0, self.0) && lt(self.1, o.1))
    }
}

/// The cost of a whole tree.
pub(super) fn tree_cost<const W: usize>(ctx: &Ctx<W>, pairs: &[(usize, usize)], obj: impl Into<Score>) -> Cost {
    let obj = obj.into();
    let mut a = Arena::new(ctx);
    let mut total = Cost::ZERO;
    for (k, &(x, y)) in pairs.iter().enumerate() {
        let last = k + 1 == pairs.len();
        let id = a.contract(ctx, x, y);
        let size = if last { 0.0 } else { a.ops[id].size };
        total = obj.add(total, obj.step(a.ops[id].flops, size));
    }
    total
}

/// SplitMix64: per-trial generators from (seed, trial).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next_u64();
        r
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(super) fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.f64() * n as f64) as usize % n
    }

    /// Log-uniform in [lo, hi].
    pub(super) fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + self.f64() * (hi.ln() - lo.ln())).exp()
    }
}

/// Trials without improvement after which the search may stop early (and at
/// least as many as it took to find the last improvement, and a quarter of the
/// trials' time).
const PATIENCE: usize = 64;

/// How many more flops (a fraction) the flops objective gives for a smaller
/// largest intermediate in its last pass ([`trim`]).
pub const TRIM_SLACK: f64 = 0.02;

/// When a search stops: a deadline, a trial cap and, so that easy networks do not
/// spend the whole budget, patience (trials without improvement; deterministic).
struct Budget {
    deadline: Instant,
    max_trials: usize,
}

impl Budget {
    fn over(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Raw trial trees kept for reconfiguration: the best few distinct ones.
const POOL: usize = 16;

/// The hyper-optimizer: the best tree found from `starts` (greedy trees, the first
/// the cheapest in flops) within `opts`' budget, counted from `start` (when the
/// search of this product began, the greedy starts included). Never worse than the
/// best of `starts` under `opts.objective`.
///
/// Trials and reconfiguration interleave, each taking about half of the time
/// before the last tenth (the flops objective's [`trim`]): after a trial, while
/// reconfiguration has used less time than the trials, the best trial tree not yet
/// reconfigured is (a tree's raw cost says little of what reconfiguration makes of
/// it: on a 300-tensor 3-regular graph the best raw tree came out 7× worse than
/// the second).
pub(super) fn hyper<const W: usize>(
    ctx: &Ctx<W>,
    starts: &[Vec<(usize, usize)>],
    opts: &Options,
    start: Instant,
) -> Vec<(usize, usize)> {
    let obj = opts.objective;
    let total = opts.search_time.clamp(0.0, 1e7);
    let budget =
        Budget { deadline: start + Duration::from_secs_f64(total), max_trials: opts.max_trials.unwrap_or(usize::MAX) };
    let mut prog = progress::Progress::new(opts.progress, ctx.n, opts.search_time, obj);
    // The pool: the best few distinct raw trees, cheapest first, and whether each
    // was reconfigured.
    type Pool = Vec<(Cost, Vec<(usize, usize)>, bool)>;
    let mut pool: Pool = Vec::new();
    let offer = |pool: &mut Pool, c: Cost, t: Vec<(usize, usize)>| {
        if pool.iter().any(|(pc, _, _)| *pc == c) {
            return;
        }
        let at = pool.iter().position(|(pc, _, _)| c.better(*pc)).unwrap_or(pool.len());
        if at < POOL {
            pool.insert(at, (c, t, false));
            pool.truncate(POOL);
        }
    };
    let mut best: (Cost, Vec<(usize, usize)>) = (Cost(f64::INFINITY, f64::INFINITY), Vec::new());
    for s in starts {
        let c = tree_cost(ctx, s, obj);
        if c.better(best.0) {
            best = (c, s.clone());
        }
        offer(&mut pool, c, s.clone());
    }
    // The last tenth of the budget is the flops objective's trim.
    let work_deadline = start + Duration::from_secs_f64(total * 0.9);
    let (mut trial, mut last_gain, mut gained_at) = (0usize, 0usize, Instant::now());
    let (mut trial_time, mut reconf_time) = (Duration::ZERO, Duration::ZERO);
    // Bisection earns trials while it wins: a generator is drawn with probability
    // proportional to (1 + its improvements).
    let mut wins = [1usize, 1usize];
    loop {
        let now = Instant::now();
        if now >= work_deadline {
            break;
        }
        let pending = pool.iter().position(|(_, _, done)| !done);
        let trials_left = trial < budget.max_trials;
        // Patience in trials and in time: a large network's trials are quick but
        // its trees improve late (a 100-tensor 3-regular graph found its best
        // tree after 164 trials, 100 after the previous gain).
        let patient =
            trial - last_gain < PATIENCE.max(last_gain) || gained_at.elapsed() < Duration::from_secs_f64(total * 0.15);
        let trials_on = trials_left && patient;
        // With `max_trials` (reproducible results) the trials run first, then the
        // pool's reconfiguration: an interleaving by time would depend on the
        // machine's speed.
        let turn = opts.max_trials.is_none() && reconf_time <= trial_time;
        if let Some(k) = pending.filter(|_| turn || !trials_on) {
            let t0 = Instant::now();
            pool[k].2 = true;
            let r = reconf::reconfigure(ctx, &pool[k].1, obj, Some(&work_deadline), 16);
            let c = tree_cost(ctx, &r, obj);
            if c.better(best.0) {
                best = (c, r);
                gained_at = Instant::now();
                last_gain = trial;
            }
            reconf_time += t0.elapsed();
            prog.tick(trial, best.0 .0);
            continue;
        }
        if !trials_on {
            break;
        }
        let t0 = Instant::now();
        let mut rng = Rng::new(opts.seed, trial as u64);
        let use_bisect = ctx.n >= 8 && rng.below(wins[0] + wins[1]) >= wins[0];
        let t =
            if use_bisect { bisect::sample(ctx, &mut rng, &budget) } else { rgreedy::sample(ctx, &mut rng, &budget) };
        if let Some(t) = t {
            let c = tree_cost(ctx, &t, obj);
            let improves = pool.first().is_none_or(|(b, _, _)| c.better(*b));
            if c.better(best.0) {
                best = (c, t.clone());
            }
            offer(&mut pool, c, t);
            if improves {
                gained_at = Instant::now();
                last_gain = trial;
                wins[use_bisect as usize] += 1;
            }
        }
        trial += 1;
        trial_time += t0.elapsed();
        prog.tick(trial, best.0 .0);
    }
    let mut best = best.1;
    if obj == Objective::Flops {
        best = trim(ctx, best, &budget.deadline);
    }
    prog.finish();
    best
}

/// The flops objective's last pass: the largest intermediate of `tree` lowered
/// by reconfiguration under a size cap while the flops grow by at most
/// [`TRIM_SLACK`].
fn trim<const W: usize>(ctx: &Ctx<W>, tree: Vec<(usize, usize)>, deadline: &Instant) -> Vec<(usize, usize)> {
    let c0 = tree_cost(ctx, &tree, Objective::Flops);
    let limit = c0.0 * (1.0 + TRIM_SLACK);
    let (mut best, mut size) = (tree, c0.1);
    // Halve the cap while that stays within the slack; else only the largest
    // intermediates are pressed down.
    'outer: while Instant::now() < *deadline {
        for f in [0.5, 0.999] {
            let r = reconf::reconfigure(ctx, &best, Score::Cap(size * f), Some(deadline), 16);
            let c = tree_cost(ctx, &r, Objective::Flops);
            if c.0 <= limit && c.1 < size {
                best = r;
                size = c.1;
                continue 'outer;
            }
        }
        break;
    }
    best
}

/// Subtree reconfiguration to a fixpoint under `obj`, without a time budget: how a
/// flops-exact DP tree is adapted to another objective.
pub(super) fn refine<const W: usize>(ctx: &Ctx<W>, pairs: Vec<(usize, usize)>, obj: Objective) -> Vec<(usize, usize)> {
    let r = reconf::reconfigure(ctx, &pairs, obj, None, 16);
    if tree_cost(ctx, &r, obj).better(tree_cost(ctx, &pairs, obj)) {
        r
    } else {
        pairs
    }
}

/// Subtree reconfiguration under a size cap (the largest intermediate above `cap`
/// first, then flops), to a fixpoint: how the slicer fits a tree to its target
/// between choices, as cotengra's `slice_and_reconfigure` does.
pub(super) fn refine_capped<const W: usize>(ctx: &Ctx<W>, pairs: Vec<(usize, usize)>, cap: f64) -> Vec<(usize, usize)> {
    reconf::reconfigure(ctx, &pairs, Score::Cap(cap), None, 16)
}

#[cfg(test)]
mod tests;
