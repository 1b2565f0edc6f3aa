//! Where each piece of a task set's work runs in a distributed tiled run.
//!
//! Owner-computes alone (every task on the rank owning its written tile) was
//! measured at 14% parallel efficiency on 16 ranks: a task set can have fewer
//! tasks than ranks (21 in the CCD ladder set), the tiles' owners balance flops
//! over the whole program but not within a set, and under pair symmetry half of
//! ⟨ab||cd⟩ travels to the ranks whose tasks read it transposed. So tasks are cut
//! into pieces by anchor (the largest operand tile of each contribution, see
//! [`Program::task_pieces`]) and the pieces of a set are placed largest first, each
//! on the rank where it would finish earliest, counting as time the words it makes
//! travel: the remote operand tiles it reads (fetched once per rank and set) and,
//! away from the owner of the written tile, the partial tile sent back to be added
//! there. A piece goes to the owner of its written tile, the owner of one of its
//! operand tiles, or the least-loaded rank. Every rank computes the same placement
//! (only ordered containers are iterated), so each knows what to send and receive.

use super::exec::{Anchor, Program, TaskPiece};
use super::layout::Coord;
use super::model::TimeModel;
use crate::ids::TensorId;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The flops one word moved between ranks is worth, by default
/// (`TCC_FLOPS_PER_WORD` sets it). On the 16-core host of
/// bench/distributed/results.md a rank does 30–45 GFLOP/s in the tile kernels and
/// an in-process exchange moves about 6e7 words per second per rank (copies and
/// waits included), so a word costs some 500–700 flops; sweeps of 64–1024 gave
/// the same times within noise (`bench/distributed/sweep_fpw.sh`). The ratio only
/// has to be right within a few times: it decides between moving a large tile
/// and unbalancing a set.
pub const FLOPS_PER_WORD: f64 = 512.0;

/// `TCC_FLOPS_PER_WORD` when set: `Err` with the value when it is not a finite
/// number ≥ 0 (`tcc run` and `tcc build --mpi` libraries refuse it).
pub fn flops_per_word_from_env() -> Result<Option<f64>, String> {
    match std::env::var_os("TCC_FLOPS_PER_WORD") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|x| x.is_finite() && *x >= 0.0)
            .map(Some)
            .ok_or_else(|| v.to_string_lossy().into_owned()),
    }
}

/// One rank's share of one task: all its pieces (`anchors` = `None`) or those
/// anchored at the listed tiles (sorted). A task's pieces on one rank form at most
/// two shares: those reading only the rank's tiles and those reading remote ones.
#[derive(Debug, Clone)]
pub struct Work {
    /// Index into the set's task list.
    pub task: usize,
    pub anchors: Option<Vec<Anchor>>,
    pub flops: f64,
    /// Its modelled seconds on one thread ([`super::model`]): what a rank that
    /// takes it over weighs the gets it needs against ([`super::steal`]).
    pub seconds: f64,
    /// Whether it reads a tile another rank owns (else it can run while the
    /// exchange that brings those tiles is in flight).
    pub remote: bool,
    /// The tiles other ranks own that it reads (tensor, stored slot), sorted.
    pub remote_reads: Vec<(TensorId, usize)>,
    /// Every tile it reads, sorted: what a rank that takes it over must get
    /// ([`super::steal`]).
    pub reads: Vec<(TensorId, usize)>,
    /// Into how many parts it may be split ([`split_tails`]; 1: not at all).
    pub splits: usize,
    /// Part `j` of `n` of the share ([`super::exec::Program::run_task`]), once split.
    pub split: Option<(usize, usize)>,
}

/// The placement of one task set over `ranks` ranks.
#[derive(Debug, Clone)]
pub struct SetPlacement {
    /// Per rank, its work, largest first.
    pub work: Vec<Vec<Work>>,
    /// Per rank, the operand tiles it reads and does not own.
    pub needs: Vec<BTreeSet<(TensorId, usize)>>,
    /// Per rank, the tasks (indices) of which it computes a partial tile that it
    /// then sends to the written tile's owner.
    pub partials: Vec<BTreeSet<usize>>,
    /// Per rank, the flops placed on it.
    pub flops: Vec<f64>,
    /// Per rank, the predicted seconds of its work on one thread ([`super::model`]).
    pub seconds: Vec<f64>,
    /// The part of `seconds` that reads only the rank's own tiles.
    pub early_seconds: Vec<f64>,
}

/// What placement balances: modelled seconds (as flops at the set's mean
/// modelled rate, so that `TCC_FLOPS_PER_WORD` keeps its unit), or flops.
/// Flops alone left the 16-rank CCD's ranks 0.14–0.30 s in kernels for flops
/// within 8% of each other: the pieces' shapes run at different rates.
/// `TCC_BALANCE=flops` restores flops (experiments), read once; `tcc run` and
/// libraries refuse any other value than `time` or `flops` ([`balance_from_env`]).
fn balance_by_time() -> bool {
    static TIME: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TIME.get_or_init(|| balance_from_env() != Ok(Some(false)))
}

/// `TCC_BALANCE` when set: `Some(true)` for `time`, `Some(false)` for `flops`,
/// `Err` with any other value.
pub fn balance_from_env() -> Result<Option<bool>, String> {
    match std::env::var("TCC_BALANCE") {
        Err(_) => Ok(None),
        Ok(v) if v == "time" => Ok(Some(true)),
        Ok(v) if v == "flops" => Ok(Some(false)),
        Ok(v) => Err(v),
    }
}

/// A piece of a task of the set.
pub(crate) struct Piece {
    pub task: usize,
    pub anchor: Anchor,
    pub flops: f64,
    pub seconds: f64,
    pub reads: Vec<(TensorId, usize)>,
    pub splits: usize,
}

/// The work of one task set, enumerated once for ownership, placement and
/// lifetimes: its tasks (`(statement, written tile, flops)`, as
/// [`Program::level_tasks`] gives them), the written tile (tensor, slot) of each,
/// and the pieces of all of them.
pub struct SetWork {
    pub tasks: Vec<(usize, Coord, f64)>,
    pub(crate) written: Vec<(TensorId, usize)>,
    pub(crate) pieces: Vec<Piece>,
}

impl SetWork {
    pub fn new(program: &Program, set: &[usize], model: &TimeModel) -> SetWork {
        let tasks = program.level_tasks(set);
        let mut pieces = Vec::new();
        let mut written = Vec::with_capacity(tasks.len());
        for (i, (s, c, _)) in tasks.iter().enumerate() {
            let t = program.written(*s);
            let slot = program.layouts[&t].slot(c).expect("tasks run over stored tiles");
            written.push((t, slot));
            for TaskPiece { anchor, flops, seconds, reads, splits } in program.task_pieces(*s, c, model) {
                pieces.push(Piece { task: i, anchor, flops, seconds, reads, splits });
            }
        }
        SetWork { tasks, written, pieces }
    }
}

/// Places the work of one set over `ranks` ranks. `owner(t, slot)` is the rank
/// owning a stored tile, `tile_len` its elements.
pub fn place(
    work: &SetWork,
    owner: &dyn Fn(TensorId, usize) -> usize,
    tile_len: &dyn Fn(TensorId, usize) -> usize,
    ranks: usize,
    flops_per_word: f64,
) -> SetPlacement {
    let p = ranks.max(1);
    let SetWork { tasks, written, pieces } = work;
    let (written, pieces) = (&written[..], &pieces[..]);
    let homes: Vec<usize> = written.iter().map(|&(t, slot)| owner(t, slot)).collect();
    // Each piece's weight: its flops, or its modelled seconds at the set's mean rate.
    let (all_flops, all_seconds) = pieces.iter().fold((0.0, 0.0), |(f, t), x| (f + x.flops, t + x.seconds));
    let weight: Vec<f64> = if balance_by_time() && all_seconds > 0.0 && all_flops > 0.0 {
        pieces.iter().map(|x| x.seconds * all_flops / all_seconds).collect()
    } else {
        pieces.iter().map(|x| x.flops).collect()
    };
    let mut state = State {
        load: vec![0.0; p],
        flops: vec![0.0; p],
        fetched: vec![HashMap::new(); p],
        partial: vec![HashMap::new(); p],
        at: vec![0; pieces.len()],
    };
    let ctx = Ctx { pieces, weight: &weight, written, homes: &homes, owner, tile_len, flops_per_word };
    // Locality first: each piece where it moves the fewest words (its written
    // tile's owner on a tie).
    for (k, piece) in pieces.iter().enumerate() {
        let mut best = (usize::MAX, homes[piece.task]);
        for r in ctx.candidates(k) {
            let w = state.words_to_add(&ctx, k, r);
            if w < best.0 {
                best = (w, r);
            }
        }
        state.add(&ctx, k, best.1);
    }
    // Then balance: ranks above the average load, most loaded first, shed pieces
    // (the cheapest to move per flop first) while a move lowers the larger of the
    // two loads: to the least loaded rank, or to one whose tiles the piece reads.
    // Each piece is considered once, so planning stays linear in the pieces.
    let mean = state.load.iter().sum::<f64>() / p as f64;
    let mut by_load: Vec<usize> = (0..p).collect();
    by_load.sort_by(|&x, &y| state.load[y].total_cmp(&state.load[x]).then(x.cmp(&y)));
    let mut on: Vec<Vec<usize>> = vec![Vec::new(); p];
    for (k, &r) in state.at.iter().enumerate() {
        on[r].push(k);
    }
    for hi in by_load {
        if state.load[hi] <= mean * 1.01 {
            break;
        }
        let mut mine = std::mem::take(&mut on[hi]);
        // Words moved per flop if the piece went anywhere else (at most).
        let penalty = |k: usize| -> f64 {
            let piece = &pieces[k];
            let (wt, wslot) = written[piece.task];
            let words: usize =
                piece.reads.iter().map(|&(t, slot)| tile_len(t, slot)).sum::<usize>() + tile_len(wt, wslot);
            words as f64 / weight[k].max(1.0)
        };
        mine.sort_by(|&a, &b| penalty(a).total_cmp(&penalty(b)).then(a.cmp(&b)));
        for k in mine {
            if state.load[hi] <= mean * 1.01 {
                break;
            }
            let lo = (0..p).min_by(|&x, &y| state.load[x].total_cmp(&state.load[y]).then(x.cmp(&y))).unwrap_or(0);
            let left = state.load[hi] - state.cost_to_remove(&ctx, k, hi);
            let mut best: Option<(f64, usize)> = None;
            for d in std::iter::once(lo).chain(ctx.candidates(k)) {
                if d == hi {
                    continue;
                }
                let there = state.load[d] + weight[k] + flops_per_word * state.words_to_add(&ctx, k, d) as f64;
                if left.max(there) < state.load[hi] * (1.0 - 1e-9) && best.is_none_or(|b| there < b.0) {
                    best = Some((there, d));
                }
            }
            if let Some((_, d)) = best {
                state.remove(&ctx, k, hi);
                state.add(&ctx, k, d);
            }
        }
    }
    let State { flops, fetched, partial, at, .. } = state;
    // Per rank, task and whether the pieces read a remote tile: anchors, flops,
    // seconds. A task's local pieces run while the exchange is in flight, its
    // remote ones after (the two parts of one task never run at once).
    type Share = (Vec<Anchor>, f64, f64, BTreeSet<(TensorId, usize)>, BTreeSet<(TensorId, usize)>, usize);
    let mut assigned: Vec<BTreeMap<(usize, bool), Share>> = vec![BTreeMap::new(); p];
    for (k, &r) in at.iter().enumerate() {
        let remote = pieces[k].reads.iter().any(|&(t, slot)| owner(t, slot) != r);
        let entry = assigned[r]
            .entry((pieces[k].task, remote))
            .or_insert_with(|| (Vec::new(), 0.0, 0.0, BTreeSet::new(), BTreeSet::new(), usize::MAX));
        entry.0.push(pieces[k].anchor);
        entry.1 += pieces[k].flops;
        entry.2 += pieces[k].seconds;
        entry.3.extend(pieces[k].reads.iter().filter(|&&(t, slot)| owner(t, slot) != r));
        entry.4.extend(pieces[k].reads.iter().copied());
        entry.5 = entry.5.min(pieces[k].splits);
    }
    let seconds: Vec<f64> = assigned.iter().map(|m| m.values().map(|x| x.2).sum()).collect();
    let early_seconds: Vec<f64> =
        assigned.iter().map(|m| m.iter().filter(|(key, _)| !key.1).map(|(_, x)| x.2).sum()).collect();
    let mut pieces_of = vec![0usize; tasks.len()];
    for piece in pieces {
        pieces_of[piece.task] += 1;
    }
    let work = assigned
        .into_iter()
        .map(|tasks_here| {
            let mut list: Vec<Work> = tasks_here
                .into_iter()
                .map(|((task, remote), (mut anchors, f, seconds, remote_reads, reads, splits))| {
                    anchors.sort();
                    let whole = anchors.len() == pieces_of[task];
                    let (remote_reads, reads) = (remote_reads.into_iter().collect(), reads.into_iter().collect());
                    Work {
                        task,
                        anchors: (!whole).then_some(anchors),
                        flops: f,
                        seconds,
                        remote,
                        remote_reads,
                        reads,
                        splits,
                        split: None,
                    }
                })
                .collect();
            list.sort_by(|a, b| b.flops.total_cmp(&a.flops).then(a.task.cmp(&b.task)).then(a.remote.cmp(&b.remote)));
            list
        })
        .collect();
    let needs = fetched.into_iter().map(|m| m.into_keys().collect()).collect();
    let partials = partial.into_iter().map(|m| m.into_keys().collect()).collect();
    SetPlacement { work, needs, partials, flops, seconds, early_seconds }
}

/// What placement reads: the pieces, the written tile of each task and its owner.
struct Ctx<'a> {
    pieces: &'a [Piece],
    /// What each piece adds to a rank's load besides words ([`balance_by_time`]).
    weight: &'a [f64],
    written: &'a [(TensorId, usize)],
    homes: &'a [usize],
    owner: &'a dyn Fn(TensorId, usize) -> usize,
    tile_len: &'a dyn Fn(TensorId, usize) -> usize,
    flops_per_word: f64,
}

impl Ctx<'_> {
    /// The ranks a piece may go to for locality: its written tile's owner, then the
    /// owners of the tiles it reads.
    fn candidates(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        let piece = &self.pieces[k];
        std::iter::once(self.homes[piece.task]).chain(piece.reads.iter().map(|&(t, slot)| (self.owner)(t, slot)))
    }
}

/// Placement so far: per rank its load (weights plus words weighted), flops, the
/// remote tiles it reads and the partial tiles it makes (with the number of its
/// pieces that need each), and where each piece is.
struct State {
    load: Vec<f64>,
    flops: Vec<f64>,
    fetched: Vec<HashMap<(TensorId, usize), usize>>,
    partial: Vec<HashMap<usize, usize>>,
    /// The rank of each piece.
    at: Vec<usize>,
}

impl State {
    /// Words rank `r` would receive or send anew if piece `k` went there.
    fn words_to_add(&self, ctx: &Ctx, k: usize, r: usize) -> usize {
        let piece = &ctx.pieces[k];
        let fetch: usize = piece
            .reads
            .iter()
            .filter(|&&(t, slot)| (ctx.owner)(t, slot) != r && !self.fetched[r].contains_key(&(t, slot)))
            .map(|&(t, slot)| (ctx.tile_len)(t, slot))
            .sum();
        let (wt, wslot) = ctx.written[piece.task];
        let back = if r != ctx.homes[piece.task] && !self.partial[r].contains_key(&piece.task) {
            (ctx.tile_len)(wt, wslot)
        } else {
            0
        };
        fetch + back
    }

    /// The load rank `r` sheds if piece `k` (on it) leaves.
    fn cost_to_remove(&self, ctx: &Ctx, k: usize, r: usize) -> f64 {
        let piece = &ctx.pieces[k];
        let fetch: usize = piece
            .reads
            .iter()
            .filter(|&&key| self.fetched[r].get(&key) == Some(&1))
            .map(|&(t, slot)| (ctx.tile_len)(t, slot))
            .sum();
        let (wt, wslot) = ctx.written[piece.task];
        let back = if self.partial[r].get(&piece.task) == Some(&1) { (ctx.tile_len)(wt, wslot) } else { 0 };
        ctx.weight[k] + ctx.flops_per_word * (fetch + back) as f64
    }

    fn add(&mut self, ctx: &Ctx, k: usize, r: usize) {
        let piece = &ctx.pieces[k];
        self.load[r] += ctx.weight[k] + ctx.flops_per_word * self.words_to_add(ctx, k, r) as f64;
        self.flops[r] += piece.flops;
        for &(t, slot) in &piece.reads {
            if (ctx.owner)(t, slot) != r {
                *self.fetched[r].entry((t, slot)).or_default() += 1;
            }
        }
        if r != ctx.homes[piece.task] {
            *self.partial[r].entry(piece.task).or_default() += 1;
        }
        self.at[k] = r;
    }

    fn remove(&mut self, ctx: &Ctx, k: usize, r: usize) {
        let piece = &ctx.pieces[k];
        self.load[r] -= self.cost_to_remove(ctx, k, r);
        self.flops[r] -= piece.flops;
        for &(t, slot) in &piece.reads {
            if let Some(n) = self.fetched[r].get_mut(&(t, slot)) {
                *n -= 1;
                if *n == 0 {
                    self.fetched[r].remove(&(t, slot));
                }
            }
        }
        if let Some(n) = self.partial[r].get_mut(&piece.task) {
            *n -= 1;
            if *n == 0 {
                self.partial[r].remove(&piece.task);
            }
        }
    }
}

/// The order a rank runs (and claims) its work items in: those reading only its
/// own tiles first, then the rest (each part in list order). Other ranks taking
/// over its items count its claims in the same order.
pub fn claim_order(work: &[Work]) -> Vec<usize> {
    let (early, late): (Vec<usize>, Vec<usize>) = (0..work.len()).partition(|&i| !work[i].remote);
    early.into_iter().chain(late).collect()
}

/// The most parts one item is split into.
pub const MAX_PARTS: usize = 16;

/// The fewest modelled seconds a part of a split item has ([`split_tails`]):
/// below this, handing out an item and getting its tiles cost more than the
/// finer end saves.
pub const MIN_PART_SECONDS: f64 = 2e-3;

/// One rank's work list with the items near its end split ([`Split`]): in claim
/// order, an item of `s` modelled seconds with `R` seconds of work left from it on
/// (itself included) is cut into `⌈s / (f·R)⌉` parts (at most [`MAX_PARTS`], its
/// `splits`, and parts of at least [`MIN_PART_SECONDS`]), so that no item left
/// near the set's end is more than a fraction `f` of what is left: the last item
/// becomes `⌈1/f⌉` parts, and the ranks' last items, which every other rank waits
/// for at the set's closing sync, are small. Parts follow each other where the
/// item was; each has `1/n` of its flops and seconds. Every rank splits every
/// rank's list alike (the lists are planned identically everywhere).
pub fn split_tails(work: Vec<Work>, split: Split) -> Vec<Work> {
    let mut parts = vec![1usize; work.len()];
    let mut left = 0.0;
    for &i in claim_order(&work).iter().rev() {
        let w = &work[i];
        left += w.seconds;
        let most = w.splits.min(MAX_PARTS);
        parts[i] = match split {
            Split::Off => 1,
            Split::Eager => most.min(3),
            Split::Tail(f) => {
                let wanted = if left > 0.0 { (w.seconds / (f * left)).ceil() } else { 1.0 };
                let by_size = (w.seconds / MIN_PART_SECONDS).floor();
                (wanted.min(by_size).max(1.0) as usize).min(most).max(1)
            }
        };
    }
    let mut out = Vec::with_capacity(parts.iter().sum());
    for (w, n) in work.into_iter().zip(parts) {
        if n <= 1 {
            out.push(w);
            continue;
        }
        for j in 0..n {
            out.push(Work {
                flops: w.flops / n as f64,
                seconds: w.seconds / n as f64,
                split: Some((j, n)),
                ..w.clone()
            });
        }
    }
    out
}

/// Whether and how work items near the end of a rank's list are split into parts
/// (`TCC_SPLIT`: `off`; `on`, the default, with the fraction [`SPLIT_FRACTION`]; a
/// fraction in (0, 1]; or `eager`, for tests: every item that can be split, into
/// up to 3 parts, whatever its size). A part computes a slab of rows of the
/// written tile ([`super::exec::Program::run_task`]): parts of one item write
/// disjoint rows, and a part taken over by another rank ([`super::steal`]) is
/// added by the tile's owner like any partial tile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Split {
    Off,
    Tail(f64),
    Eager,
}

/// The fraction of a rank's remaining work that no item near the end exceeds
/// by default ([`split_tails`]).
pub const SPLIT_FRACTION: f64 = 0.25;

impl Default for Split {
    fn default() -> Split {
        Split::Tail(SPLIT_FRACTION)
    }
}

impl Split {
    /// `TCC_SPLIT` when set: `Err` with a value that is none of `on`, `off`,
    /// `eager` or a number in (0, 1].
    pub fn from_env() -> Result<Option<Split>, String> {
        match std::env::var("TCC_SPLIT") {
            Err(_) => Ok(None),
            Ok(v) => match v.as_str() {
                "on" => Ok(Some(Split::default())),
                "off" | "0" => Ok(Some(Split::Off)),
                "eager" => Ok(Some(Split::Eager)),
                x => match x.trim().parse::<f64>() {
                    Ok(f) if f > 0.0 && f <= 1.0 => Ok(Some(Split::Tail(f))),
                    _ => Err(v),
                },
            },
        }
    }
}
