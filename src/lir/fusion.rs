//! Loop fusion and memory minimization (FuseT style).
//!
//! A fusion is described by, for each pair of consecutive statements `i, i+1`, the
//! set `S_i` of loops they share. An index in `S_l .. S_{r-1}` forms a loop *run*
//! enclosing statements `l..=r`. A fusion is legal when
//! 1. every loop around a statement is an index of that statement (no recomputation);
//! 2. the runs are laminar (nested or disjoint), so they form a loop tree;
//! 3. for every tensor written in the unit, a run that holds two or more of the
//!    statements using it indexes it with the loop at one and the same position in
//!    every one of their references — each iteration touches its own slice, so
//!    reordering iterations cannot change a value.
//!
//! A temporary then only stores the dimensions not fixed by the runs around all its
//! users. The search enumerates the `S_i` depth first, pruning illegal prefixes
//! (legality is monotone in the prefix), and keeps the best fusion by the mode
//! ([`FuseMode`]):
//!
//! * `auto` (default): the fastest nest by the CPU time model ([`super::cost`]) among
//!   those within the memory limit (none fits: the smallest peak). Fusing a
//!   contraction shrinks its GETT calls or turns it into loops, so the model keeps
//!   GEMM-shaped steps whole unless the limit forces otherwise. Sets are tried
//!   smallest first, so a search cut by its budget has seen the least fused nests;
//! * `max`: the lowest peak temporary memory (ties: fewer loops); larger sets first;
//! * `none`: no fusion.
//!
//! The unfused nest is always legal and always scored first, so the search always
//! reaches it and its result is never worse than unfused by the mode's measure.
//! When the budget cuts the search short before a nest within the limit is found,
//! `auto` also enumerates most-fused-first and then hill-climbs from the best of
//! both (one loop toggled at a time), each on its own budget.

use super::cost::{stmt_time, term_kernel, CpuRates, Kernel};
use super::{Buffer, LoopNest, Node};
use crate::sema::hir::{Factor, Hir, IndexId, Role, Stmt, TensorId, UnitId};
use std::collections::{BTreeMap, BTreeSet};

/// What fusion optimizes (`--fuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FuseMode {
    /// Fastest by the time model within the memory limit.
    #[default]
    Auto,
    /// No fusion: every statement runs whole.
    None,
    /// Least temporary memory.
    Max,
}

impl FuseMode {
    pub fn name(self) -> &'static str {
        match self {
            FuseMode::Auto => "auto",
            FuseMode::None => "none",
            FuseMode::Max => "max",
        }
    }
}

/// Search settings.
#[derive(Debug, Clone, Copy)]
pub struct FusionOptions {
    /// Number of search nodes visited before settling for the best fusion found.
    pub budget: usize,
    /// Bytes of temporaries allowed live at once (`auto`); `None`: no limit.
    pub mem_limit: Option<u64>,
    pub mode: FuseMode,
    /// The machine's kernel rates, for `auto`.
    pub rates: CpuRates,
}

impl Default for FusionOptions {
    fn default() -> Self {
        FusionOptions { budget: 20_000, mem_limit: None, mode: FuseMode::Auto, rates: CpuRates::default() }
    }
}

/// Loop sets per window of a long segment ([`lower_unit`]).
const WINDOW: usize = 64;
/// A window of a long segment gets at least 1/MIN_SHARE of the budget.
const MIN_SHARE: usize = 16;

/// What one statement touches, with indices renumbered locally (bit positions).
struct StmtInfo {
    /// Bit mask of the statement's indices (local numbering).
    indices: u64,
    /// Bit mask of the left-hand side's indices.
    lhs: u64,
    lhs_tensor: TensorId,
    /// Every tensor reference: (tensor, local index of each position, writes?).
    refs: Vec<(TensorId, Vec<usize>, bool)>,
    /// May share loops with its neighbours (only tensor factors, no self-reads).
    fusible: bool,
    assign: bool,
}

/// A loop enclosing statements `l..=r`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    bit: usize,
    l: usize,
    r: usize,
}

impl Run {
    fn len(&self) -> usize {
        self.r - self.l
    }
}

struct Problem<'a> {
    hir: &'a Hir,
    /// The unit's statements, as the HIR has them (for the time model).
    hir_stmts: &'a [Stmt],
    /// Local bit → global index id.
    locals: Vec<IndexId>,
    stmts: Vec<StmtInfo>,
    /// Tensors written in the unit, with the statements that use them.
    written: BTreeMap<TensorId, Vec<usize>>,
    /// Every tensor used in the unit, with the statements that use it (ascending).
    users: BTreeMap<TensorId, Vec<usize>>,
}

/// Whether a statement may share loops: tensor factors only, and no read of its own
/// target (which must see the old value, so it runs whole, as the interpreter does),
/// and no slice of a union's tensor (whose buffers fusion would cut by range).
pub(crate) fn fusible(hir: &Hir, st: &Stmt) -> bool {
    let mut refs = Vec::new();
    let mut opaque = false;
    collect_refs(&st.rhs, &mut refs, &mut opaque);
    !opaque && !refs.iter().any(|(t, _)| *t == st.lhs.tensor) && !hir.stmt_has_slice(st)
}

fn collect_refs(e: &crate::sema::hir::Expr, out: &mut Vec<(TensorId, Vec<IndexId>)>, opaque: &mut bool) {
    for t in &e.terms {
        for f in &t.factors {
            match f {
                Factor::Tensor(r) => out.push((r.tensor, r.indices.clone())),
                // Never fused, and its tensor never cut: no loop index names a
                // dimension of it (an empty index list fixes none).
                Factor::Affine(a) => {
                    *opaque = true;
                    out.push((a.tensor, Vec::new()));
                }
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => {
                    *opaque = true;
                    collect_refs(arg, out, opaque);
                }
                // Never fused: a `where`'s arguments are read where the loops of the
                // statement are, and `max`/`min` above reduce over their own loops.
                Factor::Select { args, .. } => {
                    *opaque = true;
                    args.iter().for_each(|a| collect_refs(&a.as_expr(), out, opaque));
                }
            }
        }
    }
}

impl<'a> Problem<'a> {
    fn new(hir: &'a Hir, stmts: &'a [Stmt]) -> Option<Problem<'a>> {
        let mut locals: Vec<IndexId> = Vec::new();
        let local = |i: IndexId, locals: &mut Vec<IndexId>| match locals.iter().position(|&x| x == i) {
            Some(p) => p,
            None => {
                locals.push(i);
                locals.len() - 1
            }
        };
        let mut infos = Vec::new();
        let mut written_before: BTreeSet<TensorId> = BTreeSet::new();
        for st in stmts {
            // A temporary's first write by `+=` starts from zero: when the
            // temporary is sliced by a fused loop, that zero must be re-established
            // for every slice, exactly where an `=` would clear it.
            let first_temp_write =
                hir.tensors[st.lhs.tensor].role == Role::Temporary && written_before.insert(st.lhs.tensor);
            let mut refs = Vec::new();
            let mut opaque = false;
            collect_refs(&st.rhs, &mut refs, &mut opaque);
            let mut info = StmtInfo {
                indices: 0,
                lhs: 0,
                lhs_tensor: st.lhs.tensor,
                refs: Vec::new(),
                fusible: fusible(hir, st),
                assign: !st.accumulate || first_temp_write,
            };
            let lhs_locals: Vec<usize> = st.lhs.indices.iter().map(|&i| local(i, &mut locals)).collect();
            info.refs.push((st.lhs.tensor, lhs_locals.clone(), true));
            for (t, idx) in refs {
                let l: Vec<usize> = idx.iter().map(|&i| local(i, &mut locals)).collect();
                info.refs.push((t, l, false));
            }
            if locals.len() > 64 {
                return None;
            }
            for &b in &lhs_locals {
                info.lhs |= 1 << b;
            }
            // A loop may only enclose a statement if every term uses its index:
            // a term without it would be repeated once per iteration.
            info.indices = if info.fusible {
                st.rhs.terms.iter().fold(u64::MAX, |acc, term| {
                    let mut m = info.lhs;
                    for f in &term.factors {
                        for &i in f.indices() {
                            m |= 1 << local(i, &mut locals);
                        }
                    }
                    acc & m
                })
            } else {
                0
            };
            infos.push(info);
        }
        let mut users: BTreeMap<TensorId, Vec<usize>> = BTreeMap::new();
        for (i, s) in infos.iter().enumerate() {
            let touched: BTreeSet<TensorId> = s.refs.iter().map(|r| r.0).collect();
            for t in touched {
                users.entry(t).or_default().push(i);
            }
        }
        let lhs: BTreeSet<TensorId> = infos.iter().map(|s| s.lhs_tensor).collect();
        let written = lhs.into_iter().map(|t| (t, users[&t].clone())).collect();
        Some(Problem { hir, hir_stmts: stmts, locals, stmts: infos, written, users })
    }

    fn candidates(&self, i: usize) -> u64 {
        let (a, b) = (&self.stmts[i], &self.stmts[i + 1]);
        if a.fusible && b.fusible {
            a.indices & b.indices
        } else {
            0
        }
    }

    fn extent(&self, bit: usize) -> usize {
        self.hir.index_size(self.locals[bit])
    }
}

/// The runs of a (prefix of a) fusion: `shared[i]` is `S_i`.
fn runs_of(shared: &[u64]) -> Vec<Run> {
    runs_at(shared, 0)
}

/// The runs of `shared`, a part of a fusion's `S_i` starting at `S_offset`
/// (statement numbers in the runs are the unit's).
fn runs_at(shared: &[u64], offset: usize) -> Vec<Run> {
    let mut runs = Vec::new();
    // Only the loops shared somewhere (most candidates share few).
    let any = shared.iter().fold(0u64, |a, &x| a | x);
    for bit in (0..64).filter(|b| any >> b & 1 == 1) {
        let mut i = 0;
        while i < shared.len() {
            if shared[i] >> bit & 1 == 1 {
                let l = i;
                while i < shared.len() && shared[i] >> bit & 1 == 1 {
                    i += 1;
                }
                runs.push(Run { bit, l: l + offset, r: i + offset });
            } else {
                i += 1;
            }
        }
    }
    runs
}

/// For each of the `n` statements, the positions in `runs` of the runs around it.
fn around(runs: &[Run], n: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); n];
    for (k, r) in runs.iter().enumerate() {
        for slot in &mut out[r.l..=r.r.min(n.saturating_sub(1))] {
            slot.push(k);
        }
    }
    out
}

fn laminar(runs: &[Run]) -> bool {
    for (k, a) in runs.iter().enumerate() {
        for b in &runs[k + 1..] {
            let disjoint = a.r < b.l || b.r < a.l;
            let nested = (a.l <= b.l && b.r <= a.r) || (b.l <= a.l && a.r <= b.r);
            if !disjoint && !nested {
                return false;
            }
        }
    }
    true
}

/// The single position at which `bit` indexes a reference, if it appears exactly once.
fn position(idx: &[usize], bit: usize) -> Option<usize> {
    let mut it = idx.iter().enumerate().filter(|(_, &b)| b == bit);
    match (it.next(), it.next()) {
        (Some((p, _)), None) => Some(p),
        _ => None,
    }
}

/// The users of a tensor (ascending) among the statements `l..=r`.
fn users_in(users: &[usize], l: usize, r: usize) -> &[usize] {
    let lo = users.partition_point(|&u| u < l);
    let hi = users.partition_point(|&u| u <= r);
    &users[lo..hi]
}

/// The statements `a..=b` of a unit searched on their own: no run crosses `a` or
/// `b` (`S_{a-1}` and `S_b` are empty), so legality, buffers, peak and time of a
/// nest that changes only `S_a .. S_{b-1}` follow from these statements and a few
/// numbers about the rest — each candidate costs the window's size, not the
/// unit's (scoring the whole unit per candidate made `tcc opt` quadratic).
struct Window {
    a: usize,
    b: usize,
    /// Tensors the window's statements touch; of them, those written in the unit.
    touched: Vec<TensorId>,
    written: Vec<TensorId>,
    /// Temporaries whose users all lie in the window: the only buffers that the
    /// window's runs can slice (no run covers a temporary used outside it).
    inside: Vec<TensorId>,
    /// Bytes live at each statement of the window from all other temporaries.
    base: Vec<i128>,
    /// Peak bytes at the statements outside the window.
    outside: i128,
}

impl Problem<'_> {
    /// Rule 3 for `runs` and the written tensors `tensors`.
    fn slices_consistent<'t>(&self, runs: &[Run], tensors: impl Iterator<Item = &'t TensorId>) -> bool {
        for tensor in tensors {
            let users = &self.written[tensor];
            for run in runs {
                let inside = users_in(users, run.l, run.r);
                if inside.len() < 2 {
                    continue;
                }
                let mut pos = None;
                for &u in inside {
                    for (t, idx, _) in &self.stmts[u].refs {
                        if t != tensor {
                            continue;
                        }
                        match (position(idx, run.bit), pos) {
                            (None, _) => return false,
                            (Some(p), None) => pos = Some(p),
                            (Some(p), Some(q)) if p != q => return false,
                            _ => {}
                        }
                    }
                }
            }
        }
        true
    }

    /// Rules 1 (by construction of the candidates), 2 and 3 for a nest that
    /// differs from a legal one only in the window's `S_i` (on a prefix: those
    /// after the one chosen are empty): the window's runs are laminar and slice
    /// consistently.
    fn legal_in(&self, shared: &[u64], w: &Window) -> bool {
        let runs = runs_at(&shared[w.a..w.b], w.a);
        laminar(&runs) && self.slices_consistent(&runs, w.written.iter())
    }

    /// The window for statements `a..=b`, given the bytes `live` at every
    /// statement now and the peak `outside` of the statements outside it.
    fn window(&self, a: usize, b: usize, live: &[i128], outside: i128) -> Window {
        let touched: BTreeSet<TensorId> = self.stmts[a..=b].iter().flat_map(|s| s.refs.iter().map(|r| r.0)).collect();
        let touched: Vec<TensorId> = touched.into_iter().collect();
        let written = touched.iter().copied().filter(|t| self.written.contains_key(t)).collect();
        let inside: Vec<TensorId> = touched
            .iter()
            .copied()
            .filter(|&t| {
                let u = &self.users[&t];
                self.hir.tensors[t].role == Role::Temporary && u[0] >= a && *u.last().unwrap_or(&u[0]) <= b
            })
            .collect();
        let mut w = Window { a, b, touched, written, inside, base: live[a..=b].to_vec(), outside };
        // The inside temporaries are unfused now (the window is not searched yet).
        let unfused: BTreeMap<TensorId, Buffer> = w.inside.iter().map(|&t| (t, self.buffer(t, &[]))).collect();
        let own = self.live_in(&unfused, &w);
        for (b, o) in w.base.iter_mut().zip(own) {
            *b -= o;
        }
        w
    }

    /// The buffer of tensor `t` under `runs` (any runs; those that do not cover
    /// every user of `t` are ignored).
    fn buffer(&self, t: TensorId, runs: &[Run]) -> Buffer {
        let users = &self.users[&t];
        let shape = self.hir.shape(t);
        let mut fixed: Vec<(usize, IndexId)> = Vec::new();
        if self.hir.tensors[t].role == Role::Temporary {
            let (first, last) = (users[0], *users.last().unwrap_or(&users[0]));
            for run in runs.iter().filter(|r| r.l <= first && last <= r.r) {
                let mut pos = None;
                let mut ok = true;
                for &u in users {
                    for (tensor, idx, _) in &self.stmts[u].refs {
                        if *tensor != t {
                            continue;
                        }
                        match (position(idx, run.bit), pos) {
                            (None, _) => ok = false,
                            (Some(p), None) => pos = Some(p),
                            (Some(p), Some(q)) if p != q => ok = false,
                            _ => {}
                        }
                    }
                }
                if let (true, Some(p)) = (ok, pos) {
                    if !fixed.iter().any(|(q, _)| *q == p) {
                        fixed.push((p, self.locals[run.bit]));
                    }
                }
            }
        }
        fixed.sort();
        let stored: Vec<usize> = (0..shape.len()).filter(|p| !fixed.iter().any(|(q, _)| q == p)).collect();
        let elements = stored.iter().map(|&p| shape[p]).fold(1usize, |a, n| a.saturating_mul(n));
        Buffer { tensor: t, stored, fixed, elements }
    }

    /// The buffer of every tensor used in the unit under a fusion (only of the
    /// temporaries with `temporaries_only`: all that [`Self::peak`] reads).
    /// Only the runs around a tensor's first user can fix one of its dimensions.
    fn buffers(&self, runs: &[Run], temporaries_only: bool) -> BTreeMap<TensorId, Buffer> {
        let around = around(runs, self.stmts.len());
        let mut out = BTreeMap::new();
        let mut mine = Vec::new();
        for (&t, users) in &self.users {
            if temporaries_only && self.hir.tensors[t].role != Role::Temporary {
                continue;
            }
            mine.clear();
            mine.extend(around[users[0]].iter().map(|&k| runs[k]));
            out.insert(t, self.buffer(t, &mine));
        }
        out
    }

    /// The buffers of the window's tensors under the window's runs.
    fn buffers_in(&self, runs: &[Run], w: &Window) -> BTreeMap<TensorId, Buffer> {
        w.touched
            .iter()
            .filter(|&&t| self.hir.tensors[t].role == Role::Temporary)
            .map(|&t| (t, self.buffer(t, runs)))
            .collect()
    }

    /// Bytes live at each statement of the window from its inside temporaries.
    fn live_in(&self, buffers: &BTreeMap<TensorId, Buffer>, w: &Window) -> Vec<i128> {
        let len = w.b - w.a + 1;
        let mut delta = vec![0i128; len + 1];
        for &t in &w.inside {
            let users = &self.users[&t];
            let (f, l) = (users[0], *users.last().unwrap_or(&users[0]));
            let bytes = (buffers[&t].elements as u64).saturating_mul(self.hir.tensors[t].elem.size_bytes() as u64);
            delta[f - w.a] += i128::from(bytes);
            delta[l + 1 - w.a] -= i128::from(bytes);
        }
        let mut live = 0i128;
        delta[..len]
            .iter()
            .map(|d| {
                live += d;
                live
            })
            .collect()
    }

    /// [`Self::peak`] of the unit when only the window's buffers changed.
    fn peak_in(&self, buffers: &BTreeMap<TensorId, Buffer>, w: &Window) -> u64 {
        let own = self.live_in(buffers, w);
        let peak = own.iter().zip(&w.base).map(|(o, b)| o + b).fold(w.outside, i128::max);
        u64::try_from(peak).unwrap_or(u64::MAX)
    }

    /// Bytes of temporaries live at each statement (live from first to last use).
    fn live(&self, buffers: &BTreeMap<TensorId, Buffer>) -> Vec<i128> {
        let n = self.stmts.len();
        // Bytes becoming live at a statement, and leaving after one.
        let mut delta = vec![0i128; n + 1];
        for (&t, b) in buffers {
            if self.hir.tensors[t].role != Role::Temporary {
                continue;
            }
            let users = &self.users[&t];
            if let (Some(&f), Some(&l)) = (users.first(), users.last()) {
                if f <= l && l < n {
                    let bytes = (b.elements as u64).saturating_mul(self.hir.tensors[t].elem.size_bytes() as u64);
                    delta[f] += i128::from(bytes);
                    delta[l + 1] -= i128::from(bytes);
                }
            }
        }
        let mut live = 0i128;
        delta[..n]
            .iter()
            .map(|d| {
                live += d;
                live
            })
            .collect()
    }

    /// Peak bytes of temporaries live at once, by one sweep over the statements.
    fn peak(&self, buffers: &BTreeMap<TensorId, Buffer>) -> u64 {
        u64::try_from(self.live(buffers).into_iter().fold(0, i128::max)).unwrap_or(u64::MAX)
    }

    /// Bit masks of the loops (local indices) around each of the statements
    /// `stmts`, in one pass over the runs.
    fn masks(&self, runs: &[Run], stmts: std::ops::Range<usize>) -> Vec<u64> {
        let mut m = vec![0u64; stmts.len()];
        if stmts.is_empty() {
            return m;
        }
        for r in runs {
            for i in r.l.max(stmts.start)..=r.r.min(stmts.end.saturating_sub(1)) {
                m[i - stmts.start] |= 1 << r.bit;
            }
        }
        m
    }

    /// Whether global index `v` is in the local mask `mask`.
    fn in_mask(&self, mask: u64, v: IndexId) -> bool {
        self.locals.iter().position(|&x| x == v).is_some_and(|b| mask >> b & 1 == 1)
    }

    /// The time model's seconds for the unit under `runs` ([`super::cost`]);
    /// `buffers` holds at least the temporaries' buffers.
    fn time(&self, runs: &[Run], buffers: &BTreeMap<TensorId, Buffer>, rates: &CpuRates) -> f64 {
        self.time_of(runs, buffers, rates, 0..self.stmts.len())
    }

    /// [`Self::time`] of the statements `stmts` only (a segment's: the others'
    /// loops, and so their times, do not change while it is searched).
    fn time_of(
        &self,
        runs: &[Run],
        buffers: &BTreeMap<TensorId, Buffer>,
        rates: &CpuRates,
        stmts: std::ops::Range<usize>,
    ) -> f64 {
        self.time_memo(runs, buffers, rates, stmts, &mut None)
    }

    /// [`Self::time_of`], with statement times remembered by (statement, loops
    /// around it, sizes of the temporaries it touches) — all a statement's time
    /// depends on — so that a search over a long unit prices each statement once
    /// per distinct situation instead of once per candidate.
    fn time_memo(
        &self,
        runs: &[Run],
        buffers: &BTreeMap<TensorId, Buffer>,
        rates: &CpuRates,
        stmts: std::ops::Range<usize>,
        memo: &mut Option<std::collections::HashMap<(usize, u64, u64), f64>>,
    ) -> f64 {
        let bytes = |t: TensorId| -> f64 {
            let esz = self.hir.tensors[t].elem.size_bytes() as f64;
            match buffers.get(&t) {
                Some(b) => b.elements as f64 * esz,
                None => self.hir.num_elements(t).map_or(f64::INFINITY, |n| n as f64 * esz),
            }
        };
        let mut total = 0.0;
        let masks = self.masks(runs, stmts.clone());
        for i in stmts.clone() {
            let mask = masks[i - stmts.start];
            let sizes = self.stmts[i]
                .refs
                .iter()
                .filter_map(|(t, _, _)| buffers.get(t).filter(|_| self.hir.tensors[*t].role == Role::Temporary))
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b.elements as u64).wrapping_mul(0x100_0000_01b3));
            if let Some(&t) = memo.as_ref().and_then(|m| m.get(&(i, mask, sizes))) {
                total += t;
                continue;
            }
            let outer: f64 = (0..64).filter(|b| mask >> b & 1 == 1).map(|b| self.extent(b) as f64).product();
            let bound = |v: IndexId| self.in_mask(mask, v);
            let t = stmt_time(self.hir, &self.hir_stmts[i], &bound, outer, &bytes, rates);
            if let Some(m) = memo.as_mut() {
                m.insert((i, mask, sizes), t);
            }
            total += t;
        }
        total
    }

    /// The kernel of every term of every statement under `runs`.
    fn kernels(&self, runs: &[Run]) -> Vec<Vec<Kernel>> {
        let masks = self.masks(runs, 0..self.stmts.len());
        (0..self.stmts.len())
            .map(|i| {
                let mask = masks[i];
                let st = &self.hir_stmts[i];
                st.rhs.terms.iter().map(|t| term_kernel(self.hir, st, t, &|v| self.in_mask(mask, v), None)).collect()
            })
            .collect()
    }
}

/// (over the limit, peak if over, the mode's measure, loops, peak): lower is better.
type Score = (bool, u64, u64, usize, u64);

struct Search<'p, 'a> {
    p: &'p Problem<'a>,
    visits: usize,
    opts: FusionOptions,
    /// Enumerate each `S_i` from the empty set up (else from the full set down).
    ascending: bool,
    /// The statements of the segment searched (only their times can change).
    stmts: std::ops::Range<usize>,
    /// The same statements, with what scoring them alone needs.
    w: Window,
    /// Statement times already computed (see [`Problem::time_memo`]).
    memo: Option<std::collections::HashMap<(usize, u64, u64), f64>>,
    /// The best score so far, and its `S_a .. S_{b-1}` (the window's).
    best: Option<(Score, Vec<u64>)>,
}

impl Search<'_, '_> {
    /// The nest's score. Only the window's runs count (the others are fixed
    /// while it is searched, so the number of runs is off by a constant), and
    /// the peak is the unit's.
    fn score(&mut self, shared: &[u64]) -> Score {
        let runs = runs_at(&shared[self.w.a..self.w.b], self.w.a);
        let buffers = self.p.buffers_in(&runs, &self.w);
        let peak = self.p.peak_in(&buffers, &self.w);
        let measure = match self.opts.mode {
            FuseMode::Max => peak,
            // Picoseconds: an order that ties only when the model cannot tell.
            FuseMode::Auto | FuseMode::None => {
                let stmts = self.stmts.clone();
                let t = self.p.time_memo(&runs, &buffers, &self.opts.rates, stmts, &mut self.memo) * 1e12;
                if t.is_finite() && t < u64::MAX as f64 {
                    t as u64
                } else {
                    u64::MAX
                }
            }
        };
        let over = self.opts.mode != FuseMode::Max && self.opts.mem_limit.is_some_and(|l| peak > l);
        (over, if over { peak } else { 0 }, measure, runs.len(), peak)
    }

    fn offer(&mut self, shared: &[u64]) {
        let score = self.score(shared);
        if self.best.as_ref().map(|(b, _)| score < *b).unwrap_or(true) {
            self.best = Some((score, shared[self.w.a..self.w.b].to_vec()));
        }
    }

    /// Tries every legal `S_pos .. S_{end-1}` (`auto`: smaller sets first; `max`:
    /// larger first); the other entries of `shared` stay as they are. Entries after
    /// `pos` are zero while `pos` is chosen, so `legal` sees a prefix.
    fn dfs(&mut self, shared: &mut [u64], pos: usize, end: usize) {
        if self.visits >= self.opts.budget {
            return;
        }
        self.visits += 1;
        if pos == end {
            self.offer(shared);
            return;
        }
        let c = self.p.candidates(pos);
        let ascending = self.ascending;
        let mut sub = if ascending { 0 } else { c };
        loop {
            shared[pos] = sub;
            if self.p.legal_in(shared, &self.w) {
                self.dfs(shared, pos + 1, end);
            }
            if ascending {
                if sub == c {
                    break;
                }
                // The next subset of `c` in increasing order.
                sub = sub.wrapping_sub(c) & c;
            } else {
                if sub == 0 {
                    break;
                }
                sub = (sub - 1) & c;
            }
        }
        shared[pos] = 0;
    }

    /// Hill climbing from the best nest over `S_start .. S_{end-1}`: toggles one loop
    /// of one `S_i` at a time and keeps any legal change that scores better, until
    /// none does or the budget is spent. Reaches good nests that a budget-cut
    /// enumeration of a long unit misses (e.g. the fastest within a tight limit).
    fn climb(&mut self, shared: &mut [u64]) {
        let Some((_, best)) = self.best.clone() else { return };
        let (start, end) = (self.w.a, self.w.b);
        shared[start..end].copy_from_slice(&best);
        let mut improved = true;
        // Each try scores the whole segment: charge its length against the budget.
        let cost = 1 + (end - start) / 16;
        while improved && self.visits < self.opts.budget {
            improved = false;
            for pos in start..end {
                let c = self.p.candidates(pos);
                for bit in (0..64).filter(|b| c >> b & 1 == 1) {
                    if self.visits >= self.opts.budget {
                        return;
                    }
                    self.visits += cost;
                    shared[pos] ^= 1 << bit;
                    let before = self.best.as_ref().map(|b| b.0);
                    if self.p.legal_in(shared, &self.w) {
                        self.offer(shared);
                    }
                    if self.best.as_ref().map(|b| b.0) != before {
                        improved = true;
                    } else {
                        shared[pos] ^= 1 << bit;
                    }
                }
            }
        }
    }
}

/// Lowers a unit to a loop nest with the best fusion by `opts.mode`.
///
/// Consecutive statements that cannot share any loop split the unit into segments
/// whose runs are independent; each segment is searched in turn with the earlier
/// ones fixed at their best, so long units cost a sum, not a product, of searches.
pub fn lower_unit(hir: &Hir, unit: UnitId, opts: FusionOptions) -> LoopNest {
    let stmts = &hir.units[unit].stmts;
    let n = stmts.len();
    let Some(mut p) = Problem::new(hir, stmts) else {
        return unfused(hir, unit, &opts.rates);
    };
    // A sliced term's statements get their loops from the slicing, not here.
    for g in super::slice::groups(hir, unit) {
        for k in g.stmts {
            p.stmts[k].indices = 0;
        }
    }
    let mut shared = vec![0u64; n.saturating_sub(1)];
    // Bytes of temporaries (unfused; at least 1 each) live across `S_k`, from
    // statement k to k + 1.
    let mut crossing = vec![0i128; n];
    for (&t, users) in &p.users {
        if hir.tensors[t].role == Role::Temporary {
            let bytes =
                hir.num_elements(t).unwrap_or(usize::MAX).saturating_mul(hir.tensors[t].elem.size_bytes()).max(1)
                    as i128;
            crossing[users[0]] += bytes;
            crossing[*users.last().unwrap_or(&users[0])] -= bytes;
        }
    }
    for k in 1..n {
        crossing[k] += crossing[k - 1];
    }
    // The windows searched: (first statement, last statement, budget, alone).
    // A window of a long segment is scored alone: its own peak (the bytes live at
    // its statements), not the unit's — the rest of the unit, still unfused,
    // would hide every saving below its peak. The bytes live at a window's
    // statements depend on its own loops only, so the least peak of each window
    // makes the least peak of the unit. A whole segment is scored with the unit's
    // peak, as always.
    let mut windows = Vec::new();
    let mut i = 0;
    while opts.mode != FuseMode::None && i < shared.len() {
        if p.candidates(i) == 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < shared.len() && p.candidates(i) != 0 {
            i += 1;
        }
        if i - start <= WINDOW {
            windows.push((start, i, opts.budget, false));
        } else {
            // A long segment is searched in windows of at most WINDOW loop sets
            // with no loop across their borders, on a share of the budget (never
            // below 1/MIN_SHARE of it): a budget-cut search of the whole segment
            // spent its budget on the last few statements anyway, and each
            // candidate costs the window's length instead of the segment's.
            // Borders go first where no temporary is live across (cutting every
            // loop there changes no statement's loops and no buffer, so no
            // nest's time or memory), then where the fewest bytes are.
            let budget = (opts.budget.saturating_mul(WINDOW) / (i - start)).max(opts.budget / MIN_SHARE);
            let mut c = start;
            while c < i {
                let free = (c..i.min(c + WINDOW + 1)).find(|&k| crossing[k] == 0).unwrap_or(i);
                let end = if free <= c + WINDOW {
                    free
                } else {
                    (c + WINDOW / 2..=c + WINDOW).rev().min_by_key(|&k| crossing[k]).unwrap_or(c + WINDOW)
                };
                if end > c {
                    windows.push((c, end, budget, true));
                }
                c = end + 1;
            }
        }
    }
    // Bytes live at each statement under the nest so far (windows not searched
    // yet are unfused), and the peak of the statements from each one on while unfused.
    let mut live = p.live(&p.buffers(&[], true));
    let mut after = vec![0i128; n + 1];
    for k in (0..n).rev() {
        after[k] = after[k + 1].max(live[k]);
    }
    let (mut done, mut done_max) = (0usize, 0i128);
    for (a, b, budget, alone) in windows {
        done_max = live[done..a].iter().copied().fold(done_max, i128::max);
        done = a;
        let w = p.window(a, b, &live, if alone { 0 } else { done_max.max(after[b + 1]) });
        let opts = FusionOptions { budget, ..opts };
        let mut s = Search {
            p: &p,
            visits: 0,
            opts,
            ascending: opts.mode != FuseMode::Max,
            stmts: a..b + 1,
            w,
            memo: Some(Default::default()),
            best: None,
        };
        // The segment unfused (its entries are still zero) is always a candidate.
        s.offer(&shared);
        s.dfs(&mut shared, a, b);
        // A search that ended within its budget saw every legal nest; one whose
        // best fits the limit is kept. Otherwise (a long unit under a tight limit)
        // look further for a nest that fits.
        let over = s.best.as_ref().is_some_and(|(score, _)| score.0);
        if opts.mode == FuseMode::Auto && s.visits >= opts.budget && over {
            // Also the most fused nests first (they fit tight limits), then a climb
            // from the best of both, each on a budget of its own.
            s.visits = 0;
            s.ascending = false;
            s.dfs(&mut shared, a, b);
            s.visits = 0;
            s.climb(&mut shared);
        }
        if let Some((_, best)) = &s.best {
            shared[a..b].copy_from_slice(best);
        }
        let runs = runs_at(&shared[a..b], a);
        let own = p.live_in(&p.buffers_in(&runs, &s.w), &s.w);
        for (k, o) in own.iter().enumerate() {
            live[a + k] = s.w.base[k] + o;
        }
    }
    let runs = runs_of(&shared);
    let buffers = p.buffers(&runs, false);
    let peak = p.peak(&buffers);
    let unfused_buffers = p.buffers(&[], false);
    let body = build_tree(&p, &runs);
    let mut nest = LoopNest {
        unit,
        body,
        peak_bytes: peak,
        unfused_peak_bytes: p.peak(&unfused_buffers),
        time_s: p.time(&runs, &buffers, &opts.rates),
        unfused_time_s: p.time(&[], &unfused_buffers, &opts.rates),
        kernels: p.kernels(&runs),
        unfused_kernels: p.kernels(&[]),
        buffers,
    };
    super::slice::apply(hir, &mut nest, &opts.rates);
    nest
}

/// The nest without any fusion (also used when a unit has more than 64 indices).
/// Its peak is the conservative sum of every temporary.
pub fn unfused(hir: &Hir, unit: UnitId, rates: &CpuRates) -> LoopNest {
    let stmts = &hir.units[unit].stmts;
    let mut body = Vec::new();
    let mut buffers = BTreeMap::new();
    let mut temp_total = 0u64;
    for (i, st) in stmts.iter().enumerate() {
        if !st.accumulate && fusible(hir, st) {
            body.push(Node::Zero { tensor: st.lhs.tensor, stmt: i });
        }
        body.push(Node::Compute { stmt: i });
        let mut refs = Vec::new();
        let mut opaque = false;
        collect_refs(&st.rhs, &mut refs, &mut opaque);
        refs.push((st.lhs.tensor, st.lhs.indices.clone()));
        for (t, _) in refs {
            buffers.entry(t).or_insert_with(|| {
                let elements = hir.num_elements(t).unwrap_or(usize::MAX);
                if hir.tensors[t].role == Role::Temporary {
                    let bytes = (elements as u64).saturating_mul(hir.tensors[t].elem.size_bytes() as u64);
                    temp_total = temp_total.saturating_add(bytes);
                }
                Buffer { tensor: t, stored: (0..hir.tensors[t].dims.len()).collect(), fixed: Vec::new(), elements }
            });
        }
    }
    let bytes =
        |t: TensorId| hir.num_elements(t).map_or(f64::INFINITY, |n| (n * hir.tensors[t].elem.size_bytes()) as f64);
    let time: f64 = stmts.iter().map(|st| stmt_time(hir, st, &|_| false, 1.0, &bytes, rates)).sum();
    let kernels: Vec<Vec<Kernel>> = stmts
        .iter()
        .map(|st| st.rhs.terms.iter().map(|t| term_kernel(hir, st, t, &|_| false, None)).collect())
        .collect();
    let mut nest = LoopNest {
        unit,
        body,
        buffers,
        peak_bytes: temp_total,
        unfused_peak_bytes: temp_total,
        time_s: time,
        unfused_time_s: time,
        unfused_kernels: kernels.clone(),
        kernels,
    };
    super::slice::apply(hir, &mut nest, rates);
    nest
}

/// Builds the loop tree from laminar runs; `=` becomes a `Zero` placed outside every
/// loop over an index the statement sums (so the sum accumulates across iterations).
fn build_tree(p: &Problem, runs: &[Run]) -> Vec<Node> {
    let n = p.stmts.len();
    // Loops around each statement, outermost first.
    let loops: Vec<Vec<Run>> = around(runs, n)
        .into_iter()
        .map(|ks| {
            let mut ls: Vec<Run> = ks.into_iter().map(|k| runs[k]).collect();
            ls.sort_by_key(|r| (std::cmp::Reverse(r.len()), r.l, r.bit));
            ls
        })
        .collect();
    // Where each `=` statement's zeroing goes: before the outermost run over an index
    // it sums, or right before the statement.
    let mut zero_before_run: Vec<(Run, TensorId, usize)> = Vec::new();
    let mut zero_before_stmt = vec![false; n];
    for (i, s) in p.stmts.iter().enumerate() {
        if !s.assign || !s.fusible {
            continue;
        }
        match loops[i].iter().find(|r| s.lhs >> r.bit & 1 == 0) {
            Some(r) => zero_before_run.push((*r, s.lhs_tensor, i)),
            None => zero_before_stmt[i] = true,
        }
    }
    fn build(
        p: &Problem,
        loops: &[Vec<Run>],
        zr: &[(Run, TensorId, usize)],
        zs: &[bool],
        lo: usize,
        hi: usize,
        depth: usize,
    ) -> Vec<Node> {
        let mut out = Vec::new();
        let mut i = lo;
        while i <= hi {
            if loops[i].len() > depth {
                let run = loops[i][depth];
                for (r, t, s) in zr {
                    if *r == run {
                        out.push(Node::Zero { tensor: *t, stmt: *s });
                    }
                }
                let body = build(p, loops, zr, zs, i, run.r.min(hi), depth + 1);
                out.push(Node::Loop { index: p.locals[run.bit], extent: p.extent(run.bit), body });
                i = run.r.min(hi) + 1;
            } else {
                if zs[i] {
                    out.push(Node::Zero { tensor: p.stmts[i].lhs_tensor, stmt: i });
                }
                out.push(Node::Compute { stmt: i });
                i += 1;
            }
        }
        out
    }
    if n == 0 {
        return Vec::new();
    }
    build(p, &loops, &zero_before_run, &zero_before_stmt, 0, n - 1, 0)
}
