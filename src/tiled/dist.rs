//! Distributed tiled execution (`tcc run --tiled --ranks N`, or `--backend mpi`
//! under mpirun): every rank holds only the tiles it owns ([`Ownership`]). Each
//! task set's work is placed in pieces ([`placement`]); before the set one
//! all-to-all exchange brings each rank the remote operand tiles its pieces read,
//! after it a second sends partial tiles to the owners of the written tiles.
//! Every rank plans alike, once, before running (inspector–executor), so each
//! knows what the others need from it without asking; the exchanges are
//! bulk-synchronous per task set. Inputs are generated tile by tile on their
//! owners (the interpreter's random values); outputs are gathered on rank 0 for
//! the report.

use super::arena::{Arena, Need};
use super::buffer::AlignedBuf;
use super::exec::{ExchangeMode, Program, TiledOptions};
use super::layout::Coord;
use super::placement::{self, SetWork};
use super::steal::{self, Job, JobQueue, Steal, Taken};
use super::tensor::{fill_tile, TiledTensor};
use super::SyncPtr;
use crate::error::CommandError;
use crate::ids::TensorId;
use crate::interp::{random_key, round_to};
use crate::sema::hir::Role;
use crate::symmetry::PermGroup;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use tcc_runtime::comm::{Communicator, Read, Window, WindowMemory};
use tcc_runtime::task::{Schedule, ThreadPool};

/// Which rank owns each tile: tiles are grouped by their first two coordinates
/// (the key), so that tiles of different tensors with the same leading indices
/// (`V[a,b,c,d]`, `R[a,b,i,j]`) live together. Keys are dealt to ranks largest
/// first, each to the rank where it least unbalances the work of every task set
/// and the elements stored: a piece of work counts for the key of its anchor
/// tile when that tile is larger than the written one (where placement will
/// most likely run it, see [`placement`]), else for the written tile's key.
/// Every rank computes the same map.
#[derive(Debug, Clone)]
pub struct Ownership {
    ranks: usize,
    of_key: HashMap<Key, usize>,
}

impl Ownership {
    /// The map for `program` alone (tests; runs enumerate the work once and call
    /// [`Self::of_work`]).
    #[cfg(test)]
    pub fn new(program: &Program, ranks: usize) -> Ownership {
        let model = super::model::TimeModel::builtin();
        let work: Vec<SetWork> = program.task_sets().iter().map(|set| SetWork::new(program, set, &model)).collect();
        Ownership::of_work(program, &work, ranks)
    }

    /// The map for the work of every task set, enumerated already.
    pub fn of_work(program: &Program, work: &[SetWork], ranks: usize) -> Ownership {
        // Per key: flops per task set, then elements stored.
        let dims = work.len() + 1;
        let mut weight: HashMap<Key, Vec<f64>> = HashMap::new();
        let tile = |t: TensorId, slot: usize| &program.layouts[&t].tiles()[slot];
        let len = |t: TensorId, slot: usize| program.layouts[&t].tile_len(tile(t, slot));
        for (l, set) in work.iter().enumerate() {
            for piece in &set.pieces {
                let (wt, wslot) = set.written[piece.task];
                let at = match piece.anchor {
                    Some((t, slot)) if len(t, slot) > len(wt, wslot) => key(tile(t, slot)),
                    _ => key(tile(wt, wslot)),
                };
                weight.entry(at).or_insert_with(|| vec![0.0; dims])[l] += piece.flops;
            }
        }
        for l in program.layouts.values() {
            for c in l.tiles() {
                weight.entry(key(c)).or_insert_with(|| vec![0.0; dims])[dims - 1] += l.tile_len(c) as f64;
            }
        }
        let mut keys: Vec<(Key, Vec<f64>)> = weight.into_iter().collect();
        let total = |w: &[f64]| w[..dims - 1].iter().sum::<f64>();
        keys.sort_by(|a, b| {
            total(&b.1).total_cmp(&total(&a.1)).then(b.1[dims - 1].total_cmp(&a.1[dims - 1])).then(a.0.cmp(&b.0))
        });
        let p = ranks.max(1);
        // Each dimension counts relative to its average per rank.
        let mut scale = vec![0.0f64; dims];
        for (_, w) in &keys {
            for (x, y) in scale.iter_mut().zip(w) {
                *x += y;
            }
        }
        let scale: Vec<f64> = scale.iter().map(|&x| if x > 0.0 { p as f64 / x } else { 0.0 }).collect();
        let mut load = vec![vec![0.0f64; dims]; p];
        let mut of_key = HashMap::new();
        for (k, w) in keys {
            // The growth of the sum of squared (scaled) loads: the least on the rank
            // with the least load where this key has weight.
            let growth = |r: usize| -> f64 {
                (0..dims).map(|d| w[d] * scale[d] * (2.0 * load[r][d] * scale[d] + w[d] * scale[d])).sum()
            };
            let r = (0..p).min_by(|&x, &y| growth(x).total_cmp(&growth(y))).unwrap_or(0);
            for (x, y) in load[r].iter_mut().zip(&w) {
                *x += y;
            }
            of_key.insert(k, r);
        }
        Ownership { ranks: p, of_key }
    }

    /// The rank that owns tile `c`.
    pub fn owner(&self, c: &[u32]) -> usize {
        self.of_key.get(&key(c)).copied().unwrap_or(0) % self.ranks
    }
}

/// A tile's first two coordinates (`u32::MAX` for a missing one).
type Key = [u32; 2];

fn key(c: &[u32]) -> Key {
    [c.first().copied().unwrap_or(u32::MAX), c.get(1).copied().unwrap_or(u32::MAX)]
}

/// One rank's tiles of one tensor: stored slot → offset in `data`.
#[derive(Debug, Default)]
struct Local {
    offsets: HashMap<usize, usize>,
    data: Storage,
}

/// Where a tensor's local tiles live: memory of this process, or window memory
/// from the communicator (MPI: `MPI_Win_allocate`), which one-sided reads reach
/// without the owner's help where the library can and which sets expose without
/// making windows.
enum Storage {
    Own(AlignedBuf),
    Window(Box<dyn WindowMemory>),
    /// A temporary's room in the rank's [`Arena`], which outlives it.
    Arena(SyncPtr, usize),
}

impl Default for Storage {
    fn default() -> Storage {
        Storage::Own(AlignedBuf::default())
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Storage::Own(_) => "own",
            Storage::Window(_) => "window",
            Storage::Arena(..) => "arena",
        };
        write!(f, "{} words ({kind} memory)", self.len())
    }
}

impl std::ops::Deref for Storage {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        match self {
            Storage::Own(b) => b,
            Storage::Window(w) => w.as_slice(),
            // SAFETY: room the arena handed out, valid while the rank's tiles live.
            Storage::Arena(p, n) => unsafe { std::slice::from_raw_parts(p.get(), *n) },
        }
    }
}

impl std::ops::DerefMut for Storage {
    fn deref_mut(&mut self) -> &mut [f64] {
        match self {
            Storage::Own(b) => b,
            Storage::Window(w) => w.as_mut_slice(),
            // SAFETY: as for `deref`; the room is this tensor's alone while it lives.
            Storage::Arena(p, n) => unsafe { std::slice::from_raw_parts_mut(p.get(), *n) },
        }
    }
}

/// What one rank held and moved.
#[derive(Debug, Clone, Default)]
pub struct RankStats {
    /// Elements of the tiles this rank owns (all tensors, at the largest point).
    pub owned_peak: f64,
    /// Elements of remote tiles received, at the largest task set.
    pub fetched_peak: f64,
    pub flops: f64,
    pub run_s: f64,
    /// Seconds spent in the exchanges (the rest of `run_s` is work).
    pub exchange_s: f64,
    /// Seconds spent planning (ownership, placement of every task set, exchange
    /// schedules), once when the rank's tiles are laid out, before any run.
    pub plan_s: f64,
    /// Peak resident memory of this process in bytes (per rank under MPI; shared
    /// by all in-process ranks).
    pub peak_rss: f64,
    /// The same before the rank allocated any tile (the program, its libraries,
    /// MPI): what the tiles add is `peak_rss - base_rss`.
    pub base_rss: f64,
    /// Words this rank's exchanges move (sent in collective exchanges, read by
    /// one-sided gets), as planned, and as counted by the communicator during
    /// [`RankTiles::run`].
    pub planned_words: f64,
    pub words_sent: f64,
    /// Task sets that moved tiles by one-sided gets, of all, and those planned
    /// one-sided that ran collective because the back end had no windows.
    pub one_sided_sets: usize,
    pub sets: usize,
    pub no_window_sets: usize,
    /// The run's predicted wall time ([`super::model`]; the same on every rank):
    /// per task set, the slowest rank's fetch rounds, work and reduce rounds.
    pub model_s: f64,
    /// The exchange rounds `model_s` counts (the fetch partly hidden behind work).
    pub model_exchange_s: f64,
    /// Flops of this rank's work that ran while the fetch exchange was in flight.
    pub overlapped_flops: f64,
    /// Where the rank's wall time went besides its kernels (one-sided sets):
    /// its compute threads waiting for fetched tiles (mean over threads), waiting
    /// for the other ranks at the windows' collective opening and closing (the
    /// set's imbalance), and reading and adding partial tiles.
    pub tiles_wait_s: f64,
    pub ranks_wait_s: f64,
    /// Two parts of the rest (one-sided sets): from each set's start until its
    /// work is handed out (making written tensors, the window, the claim
    /// counters: collective, so also the wait for the slowest rank to get there),
    /// and the compute threads' wait for their rank's main thread to hand them an
    /// item (mean over threads; sets whose ranks take over work).
    pub setup_s: f64,
    /// Of `setup_s` (and of sets without windows): making the tensors a set
    /// writes first, which is mostly first touching their fresh pages (see
    /// `tcc tune`'s "fresh tile memory" rate).
    pub new_tensors_s: f64,
    pub idle_s: f64,
    /// Seconds the compute threads spent running items (mean over threads): the
    /// kernel calls, and what the items do around them.
    pub items_s: f64,
    pub reduce_s: f64,
    /// The modelled seconds of the work placed on this rank, on one thread.
    pub work_model_s: f64,
    /// Work items of other ranks this rank took over ([`super::steal`]), and the
    /// words their operand and partial tiles moved (not in `words_sent`, which
    /// counts what the plan moves).
    pub taken_items: usize,
    pub taken_words: f64,
    /// Words of other ranks' tiles read in place (shared memory) instead of
    /// copied; counted in the words moved too.
    pub in_place_words: f64,
    /// This rank's kernel calls by shape against the model (with
    /// [`TiledOptions::profile`]).
    pub profile: super::profile::KernelProfile,
}

/// `struct rusage` of 64-bit Linux: two `timeval`s, then 14 longs.
#[repr(C)]
struct Rusage {
    utime: [i64; 2],
    stime: [i64; 2],
    maxrss: i64,
    rest: [i64; 13],
}

extern "C" {
    fn getrusage(who: i32, usage: *mut Rusage) -> i32;
}

/// This process's peak resident set size in bytes (0 if unknown).
pub fn peak_rss_bytes() -> f64 {
    peak_rss(false)
}

/// The peak resident set size in bytes of this process, or with `children` of the
/// largest waited-for child (getrusage; 0 if unknown).
pub fn peak_rss(children: bool) -> f64 {
    const RUSAGE_SELF: i32 = 0;
    const RUSAGE_CHILDREN: i32 = -1;
    let who = if children { RUSAGE_CHILDREN } else { RUSAGE_SELF };
    let mut u = Rusage { utime: [0; 2], stime: [0; 2], maxrss: 0, rest: [0; 13] };
    // SAFETY: `u` has the layout of `struct rusage` on 64-bit Linux.
    if unsafe { getrusage(who, &mut u) } == 0 {
        u.maxrss as f64 * 1024.0
    } else {
        0.0
    }
}

/// The words a rank sends in one round of a task set's exchange, at most (a
/// tile larger than this goes alone): the send buffer is this size, not the
/// size of everything sent, so that a rank's memory stays close to its tiles.
/// (Unit tests use tiny rounds, so that every exchange takes several.)
#[cfg(not(test))]
const ROUND_WORDS: usize = 1 << 21;
#[cfg(test)]
const ROUND_WORDS: usize = 7;

/// One tile on its way between ranks: an operand tile from its owner to a rank
/// whose work reads it, or a partial tile from where it was computed to the owner.
#[derive(Debug, Clone, Copy)]
struct Shipment {
    from: usize,
    to: usize,
    tensor: TensorId,
    slot: usize,
    len: usize,
    round: usize,
}

/// One exchange of a task set, in rounds of at most [`ROUND_WORDS`] sent per
/// rank. Every rank computes the same plan, so each knows what it sends and
/// receives in every round without asking.
struct Exchange {
    /// Per sender, in sending order.
    shipments: Vec<Vec<Shipment>>,
    count: usize,
}

impl Exchange {
    /// Operand tiles: each rank receives the tiles in `needs[rank]` from their owners.
    fn fetch(
        needs: &[BTreeSet<(TensorId, usize)>],
        owner: &dyn Fn(TensorId, usize) -> usize,
        tile_len: &dyn Fn(TensorId, usize) -> usize,
    ) -> Exchange {
        let mut shipments: Vec<Vec<Shipment>> = vec![Vec::new(); needs.len()];
        for (to, need) in needs.iter().enumerate() {
            for &(tensor, slot) in need {
                let from = owner(tensor, slot);
                if from != to {
                    shipments[from].push(Shipment { from, to, tensor, slot, len: tile_len(tensor, slot), round: 0 });
                }
            }
        }
        Exchange::in_rounds(shipments)
    }

    /// Partial tiles: each rank sends the written tiles `partials[rank]` to their owners.
    fn reduce(
        partials: &[Vec<(TensorId, usize)>],
        owner: &dyn Fn(TensorId, usize) -> usize,
        tile_len: &dyn Fn(TensorId, usize) -> usize,
    ) -> Exchange {
        let shipments = partials
            .iter()
            .enumerate()
            .map(|(from, list)| {
                let mut list: Vec<Shipment> = list
                    .iter()
                    .map(|&(tensor, slot)| {
                        let to = owner(tensor, slot);
                        Shipment { from, to, tensor, slot, len: tile_len(tensor, slot), round: 0 }
                    })
                    .collect();
                list.sort_by_key(|s| s.to);
                list
            })
            .collect();
        Exchange::in_rounds(shipments)
    }

    fn in_rounds(mut shipments: Vec<Vec<Shipment>>) -> Exchange {
        let mut count = 0;
        for list in &mut shipments {
            let (mut round, mut used) = (0, 0);
            for s in list.iter_mut() {
                if used > 0 && used + s.len > ROUND_WORDS {
                    round += 1;
                    used = 0;
                }
                s.round = round;
                used += s.len;
            }
            if !list.is_empty() {
                count = count.max(round + 1);
            }
        }
        Exchange { shipments, count }
    }

    /// Words `rank` sends in this exchange.
    fn sent_by(&self, rank: usize) -> usize {
        self.shipments[rank].iter().map(|s| s.len).sum()
    }

    /// Predicted seconds: per round, the rank that sends or receives the most sets
    /// the pace (every rank waits in the all-to-all).
    fn model_seconds(&self, model: &super::model::TimeModel) -> f64 {
        let p = self.shipments.len();
        let mut moved = vec![vec![(0usize, 0usize); p]; self.count];
        for s in self.shipments.iter().flatten() {
            moved[s.round][s.from].0 += s.len;
            moved[s.round][s.to].1 += s.len;
        }
        moved.iter().map(|round| model.round_seconds(round.iter().map(|&(a, b)| a.max(b)).max().unwrap_or(0))).sum()
    }

    /// What `rank` receives, in buffer order: by round, then sender, then order.
    fn received(&self, rank: usize) -> Vec<Shipment> {
        let mut all: Vec<Shipment> = self.shipments.iter().flatten().filter(|s| s.to == rank).copied().collect();
        // Stable: within a round and sender, sending order is kept.
        all.sort_by_key(|s| (s.round, s.from));
        all
    }

    /// Runs the exchange on rank `me`: what it sends is read through `source`; what
    /// it receives lands in `recv` (length: the sum over [`Self::received`]) in
    /// [`Self::received`] order.
    fn transfer<'a>(
        &self,
        comm: &dyn Communicator,
        me: usize,
        source: impl Fn(&Shipment) -> &'a [f64],
        recv: &mut [f64],
    ) -> Result<(), CommandError> {
        let p = self.shipments.len();
        let received = self.received(me);
        let mut per_round = vec![0; self.count];
        for s in &self.shipments[me] {
            per_round[s.round] += s.len;
        }
        let mut send = alloc(per_round.into_iter().max().unwrap_or(0), "tiles to send")?;
        let mut start = 0;
        let mut next = received.iter().peekable();
        for c in 0..self.count {
            let mut send_counts = vec![0usize; p];
            let mut at = 0;
            for item in self.shipments[me].iter().filter(|i| i.round == c) {
                send[at..at + item.len].copy_from_slice(source(item));
                send_counts[item.to] += item.len;
                at += item.len;
            }
            let mut recv_counts = vec![0usize; p];
            while let Some(s) = next.next_if(|s| s.round == c) {
                recv_counts[s.from] += s.len;
            }
            let end = start + recv_counts.iter().sum::<usize>();
            comm.alltoallv(&send[..at], &send_counts, &mut recv[start..end], &recv_counts);
            start = end;
        }
        Ok(())
    }
}

/// The remote tiles the `late` items of `work` read, in the order the items
/// first read them, and for each item how many of those tiles must have arrived
/// before it runs (non-decreasing: items run in order as their tiles arrive).
fn fetch_order(work: &[placement::Work], late: &[usize]) -> (Vec<(TensorId, usize)>, Vec<usize>) {
    let mut seen = std::collections::HashSet::new();
    let mut order = Vec::new();
    let ready = late
        .iter()
        .map(|&i| {
            order.extend(work[i].remote_reads.iter().filter(|&&tile| seen.insert(tile)));
            order.len()
        })
        .collect();
    (order, ready)
}

/// How many fetched tiles have arrived, shared between the thread that gets
/// them and the threads that compute with them. Waiting is an atomic load
/// while the tiles are there; only a thread that must sleep takes the lock, and
/// the getter wakes sleepers only when there are some (a tile costs no system
/// call).
#[derive(Default)]
struct Progress {
    arrived: AtomicUsize,
    /// The getter stopped (finished, or its rank failed).
    stopped: AtomicBool,
    sleepers: AtomicUsize,
    lock: std::sync::Mutex<()>,
    wake: std::sync::Condvar,
}

impl Progress {
    /// Waits until `n` tiles have arrived. Panics if the getter stopped short
    /// (its rank failed; the failure is reported there).
    fn wait_for(&self, n: usize) {
        if self.arrived.load(SeqCst) >= n {
            return;
        }
        self.sleepers.fetch_add(1, SeqCst);
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.arrived.load(SeqCst) < n {
            if self.stopped.load(SeqCst) {
                drop(guard);
                self.sleepers.fetch_sub(1, SeqCst);
                panic!("the fetch stopped after {} of {n} tiles", self.arrived.load(SeqCst));
            }
            guard = self
                .wake
                .wait_timeout(guard, std::time::Duration::from_millis(1))
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        drop(guard);
        self.sleepers.fetch_sub(1, SeqCst);
    }

    /// The getter's handle: dropping it (also on a panic) wakes every waiter.
    fn getter(&self) -> Getter<'_> {
        Getter(self)
    }

    fn wake_sleepers(&self) {
        if self.sleepers.load(SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }
}

struct Getter<'a>(&'a Progress);

impl Getter<'_> {
    fn announce(&mut self, n: usize) {
        self.0.arrived.store(n, SeqCst);
        self.0.wake_sleepers();
    }
    fn finish(self) {}
}

impl Drop for Getter<'_> {
    fn drop(&mut self) {
        self.0.stopped.store(true, SeqCst);
        let _guard = self.0.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.0.wake.notify_all();
    }
}

/// The most tiles one batch of one-sided reads asks for before waiting.
const MAX_GET_BATCH: usize = 32;

/// How often a rank whose fetches are done lets its MPI library serve the other
/// ranks' reads while its compute threads work: often enough that a get waits
/// little, seldom enough that the polling costs them almost nothing.
const SERVE_INTERVAL: std::time::Duration = std::time::Duration::from_micros(200);

/// Waits for `computing` inside the window's progress, not blocked outside MPI:
/// other ranks may still be reading this rank's tiles (or its claim counter),
/// and some MPI libraries answer only while the owner is inside MPI.
fn serve_while<T>(window: &dyn Window, computing: &std::thread::ScopedJoinHandle<'_, T>) {
    while !computing.is_finished() {
        window.progress();
        std::thread::sleep(SERVE_INTERVAL);
    }
}

/// Drops the tensors of `local` that `keep` rejects, in the order of their ids:
/// window memory is freed collectively, so every rank frees in the same order.
fn drop_tensors(local: &mut HashMap<TensorId, Local>, keep: impl Fn(TensorId) -> bool) {
    let mut gone: Vec<TensorId> = local.keys().copied().filter(|&t| !keep(t)).collect();
    gone.sort();
    for t in gone {
        local.remove(&t);
    }
}

/// Where each shipment of `received` starts in the receive buffer, and the total.
fn offsets_of(received: &[Shipment]) -> (HashMap<(TensorId, usize), usize>, usize) {
    let mut at = 0;
    let mut offsets = HashMap::with_capacity(received.len());
    for s in received {
        offsets.insert((s.tensor, s.slot), at);
        at += s.len;
    }
    (offsets, at)
}

fn alloc(n: usize, what: &str) -> Result<AlignedBuf, CommandError> {
    AlignedBuf::zeroed(n)
        .ok_or_else(|| crate::run::out_of_memory(format!("cannot allocate {n} elements for {what} on this rank")))
}

/// Runs `program` on this rank of `comm`: inputs generated where they live
/// (`seed`), the task sets run, the outputs gathered on rank 0 (`None` elsewhere),
/// with this rank's statistics.
pub fn run_rank(
    program: &Program,
    comm: &dyn Communicator,
    inputs: &Inputs,
    opts: &TiledOptions,
) -> Result<(Option<HashMap<TensorId, TiledTensor>>, RankStats), CommandError> {
    run_rank_then(program, comm, inputs, opts, |rank| rank.gather(comm))
}

/// What `tcc run` reports of one output of a distributed run: its summary and
/// any violation of its declared symmetry, made without making it whole
/// ([`super::outputs`]).
#[derive(Debug, Clone)]
pub struct OutputReport {
    pub tensor: TensorId,
    pub summary: crate::run::Summary,
    pub symmetry: Option<String>,
}

/// [`run_rank`], but the outputs stay distributed: every rank gets each
/// output's [`OutputReport`], and with `output_dir` every rank writes its
/// tiles into `DIR/NAME.npy` (collective; the files are dense).
pub fn run_rank_reported(
    program: &Program,
    comm: &dyn Communicator,
    inputs: &Inputs,
    opts: &TiledOptions,
    output_dir: Option<&std::path::Path>,
) -> Result<(Vec<OutputReport>, RankStats), CommandError> {
    run_rank_then(program, comm, inputs, opts, |rank| rank.report_outputs(comm, output_dir, &inputs.source))
}

/// Makes this rank's tiles, fills the inputs, runs the task sets and then `finish`.
fn run_rank_then<T>(
    program: &Program,
    comm: &dyn Communicator,
    inputs: &Inputs,
    opts: &TiledOptions,
    finish: impl FnOnce(&RankTiles<'_>) -> Result<T, CommandError>,
) -> Result<(T, RankStats), CommandError> {
    let base_rss = peak_rss_bytes();
    let mut rank = RankTiles::new(program, comm.rank(), comm.size(), opts, Some(comm))?;
    rank.stats.base_rss = base_rss;
    rank.fill_random(inputs.seed, &inputs.files, &inputs.source);
    let filled = rank.fill_from_files(&inputs.files, &inputs.source);
    match filled.and_then(|()| rank.run(comm)).and_then(|()| finish(&rank)) {
        Ok(outputs) => Ok((outputs, std::mem::take(&mut rank.stats))),
        Err(e) => {
            // This rank fails alone (the launcher aborts the job): no collective frees.
            rank.abandon_window_memory();
            Err(e)
        }
    }
}

/// Where a distributed run's inputs come from: `.npy` files read tile by tile
/// by each rank, the rest filled at random from `seed` (as the interpreter fills).
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub seed: u64,
    /// Per executed tensor (both parts of a complex one), its file.
    pub files: HashMap<TensorId, std::path::PathBuf>,
    /// What the executed tensors stand for: how values are rounded and files read.
    pub source: super::source::SourceView,
}

/// Everything every rank plans alike before a distributed run: ownership, each
/// task set's placement and exchanges, when temporaries die, and the predicted
/// time ([`super::model`]).
struct Planned {
    own: Ownership,
    plans: Vec<SetPlan>,
    last_use: HashMap<TensorId, usize>,
    /// Per tensor (by index) and stored slot: where the tile lies in its owner's
    /// buffer (owned tiles back to back in slot order), for one-sided gets.
    owner_offset: Vec<Vec<usize>>,
    plan_s: f64,
    model_s: f64,
    model_exchange_s: f64,
}

impl Planned {
    fn new(program: &Program, ranks: usize, opts: &TiledOptions) -> Planned {
        let t0 = std::time::Instant::now();
        let work: Vec<SetWork> =
            program.task_sets().iter().map(|set| SetWork::new(program, set, &opts.model)).collect();
        let own = Ownership::of_work(program, &work, ranks);
        let layouts = &program.layouts;
        // Per tensor (by index) and stored slot: owner and elements, looked up
        // often while planning.
        let n = program.hir.tensors.len();
        let (mut owners, mut lens) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        for (t, l) in layouts {
            owners[t.index()] = l.tiles().iter().map(|c| own.owner(c)).collect::<Vec<usize>>();
            lens[t.index()] = l.tiles().iter().map(|c| l.tile_len(c)).collect::<Vec<usize>>();
        }
        let owner = |t: TensorId, k: usize| owners[t.index()][k];
        let tile_len = |t: TensorId, k: usize| lens[t.index()][k];
        let mut owner_offset = vec![Vec::new(); n];
        for (t, l) in layouts {
            let mut at = vec![0usize; ranks.max(1)];
            owner_offset[t.index()] = (0..l.tiles().len())
                .map(|k| {
                    let r = owner(*t, k);
                    at[r] += tile_len(*t, k);
                    at[r] - tile_len(*t, k)
                })
                .collect();
        }
        let mut plans = Vec::new();
        let mut last_use: HashMap<TensorId, usize> = HashMap::new();
        for (l, (set, work)) in program.task_sets().iter().zip(work).enumerate() {
            for &s in set {
                last_use.insert(program.written(s), l);
            }
            for piece in &work.pieces {
                for (t, _) in &piece.reads {
                    last_use.insert(*t, l);
                }
            }
            let mut placed = placement::place(&work, &owner, &tile_len, ranks, opts.flops_per_word);
            // Finer items near each list's end: what balancing across ranks moves
            // last is small.
            for list in &mut placed.work {
                *list = placement::split_tails(std::mem::take(list), opts.split);
            }
            let fetch = Exchange::fetch(&placed.needs, &owner, &tile_len);
            let written = |i: &usize| work.written[*i];
            let partials: Vec<Vec<(TensorId, usize)>> =
                placed.partials.iter().map(|list| list.iter().map(written).collect()).collect();
            let reduce = Exchange::reduce(&partials, &owner, &tile_len);
            let mut windowed: Vec<TensorId> = placed.needs.iter().flatten().map(|&(t, _)| t).collect();
            windowed.sort();
            windowed.dedup();
            plans.push(SetPlan { tasks: work.tasks, placed, fetch, reduce, windowed, one_sided: false });
        }
        let plan_s = t0.elapsed().as_secs_f64();
        let threads = opts.threads.max(1) as f64;
        let model = &opts.model;
        // Words of fresh memory each rank first writes in each set: the tiles it
        // owns of the tensors the set writes first (allocated then), and its
        // buffers of received and partial tiles.
        let mut first_written: HashMap<TensorId, usize> = HashMap::new();
        for (l, set) in program.task_sets().iter().enumerate() {
            for &s in set {
                first_written.entry(program.written(s)).or_insert(l);
            }
        }
        let inputs = program.hir.unit_inputs(program.unit);
        let mut fresh = vec![vec![0usize; ranks.max(1)]; plans.len()];
        for (&t, &l) in first_written.iter().filter(|(t, _)| !inputs.contains(t)) {
            for k in 0..lens[t.index()].len() {
                fresh[l][owner(t, k)] += tile_len(t, k);
            }
        }
        for (plan, fresh) in plans.iter().zip(&mut fresh) {
            let written_len = |&i: &usize| {
                let (s, c, _) = &plan.tasks[i];
                layouts[&program.written(*s)].tile_len(c)
            };
            for (r, words) in fresh.iter_mut().enumerate() {
                // Ranks on one node read remote tiles in place (no buffer).
                if !opts.read_in_place {
                    *words += plan.fetch.received(r).iter().map(|s| s.len).sum::<usize>();
                }
                *words += plan.placed.partials[r].iter().map(written_len).sum::<usize>();
            }
        }
        let (mut model_s, mut model_exchange_s) = (0.0, 0.0);
        for (plan, fresh) in plans.iter_mut().zip(&fresh) {
            let placed = &plan.placed;
            // The work on rank r, the part reading remote tiles waiting for a fetch
            // of `fetch[r]` seconds that overlaps the part reading only local tiles,
            // after its fresh memory is first written.
            let time = |fetch: &dyn Fn(usize) -> f64| {
                (0..ranks)
                    .map(|r| {
                        let early = placed.early_seconds[r] / threads;
                        model.touch_seconds(fresh[r] as f64)
                            + fetch(r).max(early)
                            + (placed.seconds[r] - placed.early_seconds[r]) / threads
                    })
                    .fold(0.0, f64::max)
            };
            // Collective: every rank waits for the whole exchange (rounds paced by
            // the busiest rank), then the reduce rounds.
            let (fetch, reduce) = (plan.fetch.model_seconds(model), plan.reduce.model_seconds(model));
            let collective = (time(&|_| fetch) + reduce, fetch + reduce);
            // One-sided: each rank's own gets (the reader copies), then the owners'
            // gets of partial tiles; a synchronization to open and close each window.
            let gets = |list: Vec<Shipment>| list.iter().map(|s| model.get_seconds(s.len)).sum::<f64>();
            let fetch_gets: Vec<f64> = (0..ranks).map(|r| gets(plan.fetch.received(r))).collect();
            let reduce_gets = (0..ranks).map(|r| gets(plan.reduce.received(r))).fold(0.0, f64::max);
            let sync = 4.0 * model.alpha;
            let one_sided = (
                time(&|r| fetch_gets[r]) + reduce_gets + sync,
                fetch_gets.iter().copied().fold(0.0, f64::max) + reduce_gets + sync,
            );
            plan.one_sided = match opts.exchange {
                ExchangeMode::OneSided => true,
                ExchangeMode::Collective => false,
                ExchangeMode::Auto => one_sided.0 < collective.0,
            };
            let (t, x) = if plan.one_sided { one_sided } else { collective };
            model_s += t;
            model_exchange_s += x;
        }
        Planned { own, plans, last_use, owner_offset, plan_s, model_s, model_exchange_s }
    }
}

/// What a distributed tiled run will do, from the plan every rank computes
/// (`tcc plan --tiled`): per rank, and the predicted time.
#[derive(Debug, Clone)]
pub struct Forecast {
    pub ranks: Vec<RankForecast>,
    /// Predicted wall time and the exchange rounds in it ([`RankStats::model_s`]).
    pub model_s: f64,
    pub model_exchange_s: f64,
    pub plan_s: f64,
}

/// One rank's share of a [`Forecast`]: the same quantities `--stats` measures.
#[derive(Debug, Clone, Default)]
pub struct RankForecast {
    /// Elements of the tiles it owns at the largest point (inputs and outputs
    /// throughout, temporaries from the task set that writes them to their last use).
    pub owned_peak: f64,
    /// Elements of remote operand tiles and partial tiles held during one task
    /// set, at the largest.
    pub fetched_peak: f64,
    pub flops: f64,
    /// Words it sends in collective exchanges or reads with one-sided gets.
    pub words_sent: f64,
}

impl RankForecast {
    /// Bytes of tiles held at once, at most (`f64` elements).
    pub fn peak_bytes(&self) -> f64 {
        8.0 * (self.owned_peak + self.fetched_peak)
    }
}

/// Whether the file's images of the box `start + [0, ext)` (values `tile`,
/// row-major) under every element of `group` equal the box's values with the
/// element's sign, to 1e-12 of the largest magnitude met.
fn check_images(
    reader: &crate::npy::BoxReader,
    group: &PermGroup,
    start: &[usize],
    ext: &[usize],
    tile: &[f64],
) -> Result<(), String> {
    let n = ext.len();
    let mut strides = vec![1usize; n];
    for d in (0..n.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * ext[d + 1];
    }
    let mut image = vec![0.0; tile.len()];
    for (perm, sign) in group.elements().iter().skip(1) {
        let (s, e) = (PermGroup::apply(perm, start), PermGroup::apply(perm, ext));
        reader.read_box(&s, &e, &mut image).map_err(|e| e.0)?;
        let mut image_strides = vec![1usize; n];
        for d in (0..n.saturating_sub(1)).rev() {
            image_strides[d] = image_strides[d + 1] * e[d + 1];
        }
        let scale = tile.iter().chain(&image).fold(0.0f64, |m, v| m.max(v.abs()));
        let mut bad = None;
        super::tensor::for_each_local(ext, |l| {
            if bad.is_some() {
                return;
            }
            let at: usize = (0..n).map(|d| l[d] * strides[d]).sum();
            // Element l of the box maps to l' with l'[k] = l[perm[k]].
            let at_image: usize = (0..n).map(|k| l[perm[k]] * image_strides[k]).sum();
            let (v, w) = (tile[at], image[at_image]);
            if (w - f64::from(*sign) * v).abs() > 1e-12 * scale || w.is_nan() != v.is_nan() {
                let idx: Vec<usize> = (0..n).map(|d| start[d] + l[d]).collect();
                bad = Some(format!(
                    "element {idx:?} = {v:e} but its image {:?} = {w:e}, not {}{v:e} as the declared symmetry requires",
                    PermGroup::apply(perm, &idx),
                    if *sign < 0 { "-" } else { "" }
                ));
            }
        });
        if let Some(b) = bad {
            return Err(b);
        }
    }
    Ok(())
}

/// Plans `program` on `ranks` ranks as a run would, without allocating a tile.
pub fn forecast(program: &Program, ranks: usize, opts: &TiledOptions) -> Forecast {
    let planned = Planned::new(program, ranks, opts);
    let hir = &program.hir;
    let mut per = vec![RankForecast::default(); ranks];
    // Elements of `t` each rank owns.
    let owned_of = |t: TensorId| {
        let l = &program.layouts[&t];
        let mut v = vec![0.0; ranks];
        for c in l.tiles() {
            v[planned.own.owner(c)] += l.tile_len(c) as f64;
        }
        v
    };
    let mut alive: HashMap<TensorId, Vec<f64>> = hir
        .unit_inputs(program.unit)
        .into_iter()
        .chain(hir.unit_outputs(program.unit))
        .map(|t| (t, owned_of(t)))
        .collect();
    for (l, (set, plan)) in program.task_sets().iter().zip(&planned.plans).enumerate() {
        for &s in set {
            let t = program.written(s);
            alive.entry(t).or_insert_with(|| owned_of(t));
        }
        for (r, f) in per.iter_mut().enumerate() {
            f.owned_peak = f.owned_peak.max(alive.values().map(|v| v[r]).sum());
            let received: usize = plan.fetch.received(r).iter().map(|s| s.len).sum();
            let partial: usize = plan.reduce.shipments[r].iter().map(|s| s.len).sum();
            f.fetched_peak = f.fetched_peak.max((received + partial) as f64);
            f.flops += plan.placed.flops[r];
            f.words_sent += plan.words(r) as f64;
        }
        alive.retain(|t, _| hir.tensors[*t].role != Role::Temporary || planned.last_use.get(t).is_some_and(|&u| u > l));
    }
    Forecast {
        ranks: per,
        model_s: planned.model_s,
        model_exchange_s: planned.model_exchange_s,
        plan_s: planned.plan_s,
    }
}

/// One rank's part of a distributed tiled run: the tiles it owns of every tensor
/// alive, back to back per tensor in storage-slot order (the documented
/// distribution of `tcc build --mpi` libraries: the caller fills the input
/// tiles it owns, runs, and reads the output tiles it owns).
pub struct RankTiles<'p> {
    program: &'p Program,
    opts: TiledOptions,
    own: Ownership,
    me: usize,
    ranks: usize,
    local: HashMap<TensorId, Local>,
    plans: Vec<SetPlan>,
    /// The task set after which each temporary is no longer used.
    last_use: HashMap<TensorId, usize>,
    /// Where each tile lies in its owner's buffer ([`Planned::owner_offset`]).
    owner_offset: Vec<Vec<usize>>,
    /// Tensors live in the communicator's window memory (see [`RankTiles::new`]).
    window_storage: bool,
    /// The temporaries' room when they are this process's memory ([`super::arena`]).
    arena: Option<Arena>,
    pub stats: RankStats,
}

impl Drop for RankTiles<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The other ranks are not freeing alongside: freeing collectively
            // would wait for them forever (the launcher aborts the job instead).
            self.abandon_window_memory();
        } else {
            // Window memory is freed collectively: in the same order on every rank.
            drop_tensors(&mut self.local, |_| false);
        }
    }
}

impl RankTiles<'_> {
    /// Leaves this rank's window memory unfreed: for a rank that failed alone
    /// (an error or a panic), whose job is about to be aborted, where freeing it
    /// (collective) would wait for ranks that never free.
    fn abandon_window_memory(&mut self) {
        for (_, l) in self.local.drain() {
            if let Storage::Window(w) = l.data {
                std::mem::forget(w);
            }
        }
    }
}

/// What every rank knows of one task set before it runs (the inspector): its
/// tasks, where each piece of work runs, and the two exchanges.
struct SetPlan {
    tasks: Vec<(usize, Coord, f64)>,
    placed: placement::SetPlacement,
    fetch: Exchange,
    reduce: Exchange,
    /// The tensors some rank reads remotely: the segments of the one-sided
    /// fetch's window, in this order.
    windowed: Vec<TensorId>,
    /// Whether the set moves tiles by one-sided gets ([`ExchangeMode`]).
    one_sided: bool,
}

impl SetPlan {
    /// The words rank `r` moves: what it sends in the collective exchanges, or
    /// what it reads with gets (the owner takes no part in a get).
    fn words(&self, r: usize) -> usize {
        let received = |x: &Exchange| x.received(r).iter().map(|s| s.len).sum::<usize>();
        if self.one_sided {
            received(&self.fetch) + received(&self.reduce)
        } else {
            self.fetch.sent_by(r) + self.reduce.sent_by(r)
        }
    }
}

impl<'p> RankTiles<'p> {
    /// Rank `me` of `ranks`, holding zeroed tiles of the unit's inputs and outputs,
    /// with every task set planned.
    ///
    /// With `windows`, tensors live in the communicator's window memory when some
    /// set reads tiles one-sided (every rank of it must then create and drop its
    /// `RankTiles` at the same points: window memory is allocated and freed
    /// collectively).
    pub fn new(
        program: &'p Program,
        me: usize,
        ranks: usize,
        opts: &TiledOptions,
        windows: Option<&dyn Communicator>,
    ) -> Result<RankTiles<'p>, CommandError> {
        let Planned { own, plans, last_use, owner_offset, plan_s, model_s, model_exchange_s } =
            Planned::new(program, ranks, opts);
        let planned_words = plans.iter().map(|p| p.words(me) as f64).sum();
        let work_model_s = plans.iter().map(|p| p.placed.seconds[me]).sum();
        let mut r = RankTiles {
            program,
            opts: opts.clone(),
            own,
            me,
            ranks,
            local: HashMap::new(),
            plans,
            last_use,
            owner_offset,
            window_storage: false,
            arena: None,
            stats: RankStats { plan_s, model_s, model_exchange_s, planned_words, work_model_s, ..RankStats::default() },
        };
        let hir = &program.hir;
        let windows = windows.filter(|_| ranks > 1 && r.plans.iter().any(|p| p.one_sided));
        r.window_storage = windows.is_some();
        for t in hir.unit_inputs(program.unit).into_iter().chain(hir.unit_outputs(program.unit)) {
            if !r.local.contains_key(&t) {
                match r.make_local(t, windows) {
                    Ok(loc) => r.local.insert(t, loc),
                    Err(e) => {
                        r.abandon_window_memory();
                        return Err(e);
                    }
                };
            }
        }
        if !r.window_storage {
            r.arena = Arena::new(&r.temporaries_needs());
        }
        r.stats.owned_peak = r.owned_now();
        Ok(r)
    }

    /// The rank that owns tile `c` (of any tensor).
    pub fn owner(&self, c: &[u32]) -> usize {
        self.own.owner(c)
    }

    /// The storage slots of `t` this rank owns, in order: their tiles lie back to
    /// back in [`Self::data_mut`].
    pub fn slots(&self, t: TensorId) -> Vec<usize> {
        let l = &self.program.layouts[&t];
        l.tiles().iter().enumerate().filter(|(_, c)| self.own.owner(c) == self.me).map(|(k, _)| k).collect()
    }

    /// This rank's tiles of `t` (`None` for a tensor it does not hold now).
    pub fn data(&self, t: TensorId) -> Option<&[f64]> {
        self.local.get(&t).map(|l| &l.data[..])
    }

    /// This rank's tiles of `t`, to fill before [`Self::run`].
    pub fn data_mut(&mut self, t: TensorId) -> Option<&mut [f64]> {
        self.local.get_mut(&t).map(|l| &mut l.data[..])
    }

    /// Zeroed storage for this rank's tiles of `t`: window memory of `windows`
    /// (collective) where it has some, else this process's.
    fn make_local(&self, t: TensorId, windows: Option<&dyn Communicator>) -> Result<Local, CommandError> {
        let l = &self.program.layouts[&t];
        let mut offsets = HashMap::new();
        let mut n = 0;
        for k in self.slots(t) {
            offsets.insert(k, n);
            n += l.tile_len(&l.tiles()[k]);
        }
        let data = match windows.and_then(|c| c.alloc_window_memory(n)) {
            Some(w) => Storage::Window(w),
            None => Storage::Own(alloc(n, &format!("`{}`", l.name))?),
        };
        Ok(Local { offsets, data })
    }

    /// [`Self::make_local`], from the arena when it holds `t`.
    fn make_temporary(&mut self, t: TensorId, windows: Option<&dyn Communicator>) -> Result<Local, CommandError> {
        match self.arena.as_mut().and_then(|a| a.take(t)) {
            Some((p, n)) => {
                let l = &self.program.layouts[&t];
                let mut offsets = HashMap::new();
                let mut at = 0;
                for k in self.slots(t) {
                    offsets.insert(k, at);
                    at += l.tile_len(&l.tiles()[k]);
                }
                debug_assert_eq!(at, n, "the arena's room for `{}`", l.name);
                Ok(Local { offsets, data: Storage::Arena(SyncPtr(p), n) })
            }
            None => self.make_local(t, windows),
        }
    }

    /// Words of the arena and of the temporaries it holds, together (tests).
    #[cfg(test)]
    pub(crate) fn arena_words(&self) -> (usize, usize) {
        let all = self.temporaries_needs().iter().map(|n| n.words).sum();
        (self.arena.as_ref().map_or(0, Arena::words), all)
    }

    /// This rank's words of every temporary and the task sets it lives through
    /// (made by the first that writes it, dropped after its last use).
    fn temporaries_needs(&self) -> Vec<Need> {
        let hir = &self.program.hir;
        let mut first: HashMap<TensorId, usize> = HashMap::new();
        for (l, set) in self.program.task_sets().iter().enumerate() {
            for &s in set {
                first.entry(self.program.written(s)).or_insert(l);
            }
        }
        let mut needs: Vec<Need> = first
            .into_iter()
            .filter(|(t, _)| hir.tensors[*t].role == Role::Temporary)
            .map(|(t, l)| {
                let layout = &self.program.layouts[&t];
                let words = self.slots(t).iter().map(|&k| layout.tile_len(&layout.tiles()[k])).sum();
                Need { tensor: t, words, first: l, last: self.last_use.get(&t).copied().unwrap_or(l).max(l) }
            })
            .collect();
        needs.sort_by_key(|n| n.tensor);
        needs
    }

    fn owned_now(&self) -> f64 {
        self.local.values().map(|l| l.data.len() as f64).sum::<f64>()
    }

    /// Fills this rank's input tiles with the interpreter's random values, but
    /// those of the inputs in `except` (read from files).
    pub fn fill_random(
        &mut self,
        seed: u64,
        except: &HashMap<TensorId, std::path::PathBuf>,
        source: &super::source::SourceView,
    ) {
        let hir = &self.program.hir;
        for t in hir.unit_inputs(self.program.unit).into_iter().filter(|t| !except.contains_key(t)) {
            let l = &self.program.layouts[&t];
            let loc = self.local.get_mut(&t).expect("inputs are held from the start");
            let shape: Vec<usize> = l.dims.iter().map(|d| d.start(d.count())).collect();
            let group = PermGroup::of(&hir.tensors[t]);
            let key = random_key(seed, &l.name);
            let elem = source.round_as(t, hir.tensors[t].elem);
            for (&k, &off) in &loc.offsets {
                let c = &l.tiles()[k];
                let (start, ext) = l.tile_box(c);
                let len = l.tile_len(c);
                fill_tile(&mut loc.data[off..off + len], &start, &ext, &shape, &group, key, &|x| round_to(elem, x));
            }
        }
    }

    /// Reads this rank's tiles of the inputs in `files` from their `.npy` files
    /// (each tile's box only: no rank reads a whole tensor). A file must hold
    /// the tensor's declared structure — every image of an element under its
    /// symmetry equal to it with the sign, zero outside its blocks — else the
    /// tiles would silently keep part of it: each rank checks the images of its
    /// own tiles, and the zero tiles not stored are checked round-robin over the
    /// ranks. Errors name the file and the first element at fault.
    pub fn fill_from_files(
        &mut self,
        files: &HashMap<TensorId, std::path::PathBuf>,
        source: &super::source::SourceView,
    ) -> Result<(), CommandError> {
        let hir = &self.program.hir;
        let read = hir.unit_inputs(self.program.unit);
        for (&t, path) in files.iter().filter(|(t, _)| read.contains(t)) {
            let l = &self.program.layouts[&t];
            let tensor = &hir.tensors[t];
            let name = source.part(t).map_or(&tensor.name, |p| &p.name);
            // E0706 an unreadable file, E0707 a wrong shape, E0761 a wrong structure
            // (as for whole arrays, `tcc run --input`).
            let fail_as = |code: &'static str, why: String| {
                CommandError::new(
                    code,
                    format!("input `{name}` from `{}`: {why}", path.display()),
                    Some("write the array with the tensor's declared shape, symmetry and blocks".into()),
                )
            };
            let fail = |why: String| fail_as("E0761", why);
            let mut reader = crate::npy::BoxReader::open(path)
                .map_err(|e| CommandError::new("E0706", format!("input `{name}`: {}", e.0), None))?;
            source.check_file(t, tensor.elem, reader.elem).map_err(|(code, why)| {
                CommandError::new(code, format!("input `{name}` from `{}`: {why}", path.display()), None)
            })?;
            if let Some(p) = source.part(t) {
                reader.select_part(p.component);
            }
            let elem = source.round_as(t, tensor.elem);
            let shape: Vec<usize> = l.dims.iter().map(|d| d.start(d.count())).collect();
            if reader.shape != shape {
                return Err(fail_as("E0707", format!("its shape is {:?}; the tensor's is {shape:?}", reader.shape)));
            }
            let group = PermGroup::of(tensor);
            let loc = self.local.get_mut(&t).expect("inputs are held from the start");
            for (&k, &off) in &loc.offsets {
                let c = &l.tiles()[k];
                let (start, ext) = l.tile_box(c);
                let tile = &mut loc.data[off..off + l.tile_len(c)];
                reader.read_box(&start, &ext, tile).map_err(|e| fail_as("E0706", e.0))?;
                check_images(&reader, &group, &start, &ext, tile).map_err(fail)?;
                // As `tcc run --input` rounds: to the tensor's type.
                for v in tile.iter_mut() {
                    *v = round_to(elem, *v);
                }
            }
            // Tiles zero by the block rules: stored by no rank, checked by one.
            let zero: Vec<Coord> =
                l.canonical_tiles(f64::INFINITY).unwrap_or_default().into_iter().filter(|c| !l.allowed(c)).collect();
            for c in zero.iter().skip(self.me).step_by(self.ranks.max(1)) {
                let (start, ext) = l.tile_box(c);
                let mut buf = vec![0.0; ext.iter().product()];
                for (perm, _) in group.elements() {
                    let (s, e) = (PermGroup::apply(perm, &start), PermGroup::apply(perm, &ext));
                    reader.read_box(&s, &e, &mut buf).map_err(|e| fail_as("E0706", e.0))?;
                    if let Some(v) = buf.iter().find(|v| **v != 0.0) {
                        return Err(fail(format!(
                            "the tile at {s:?} (extent {e:?}) holds {v:e}, but the tensor's blocks declare it zero"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs the unit's task sets as planned: per set, one exchange brings each
    /// rank the remote operand tiles its work reads ([`placement`]) while the work
    /// that reads only the rank's own tiles runs on its threads, then the rest of
    /// the work runs, and a second exchange sends partial tiles to the
    /// owners of the written tiles, which add them. Outputs stay where they are
    /// owned; temporaries are freed after their last use. Every rank calls it.
    pub fn run(&mut self, comm: &dyn Communicator) -> Result<(), CommandError> {
        let (me, p) = (self.me, self.ranks);
        if (comm.rank(), comm.size()) != (me, p) {
            return Err(CommandError::new(
                "E0762",
                format!("tiles laid out for rank {me} of {p}, run on rank {} of {}", comm.rank(), comm.size()),
                Some("open the library on the communicator it runs on".into()),
            ));
        }
        let program = self.program;
        let hir = &program.hir;
        let kernel = crate::codegen::llvm::tile_kernel().map_err(|e| {
            CommandError::new("E0760", format!("the tile kernel: {e}"), Some("run it without --tiled".into()))
        })?;
        let layouts = &program.layouts;
        let tile_len = |t: TensorId, k: usize| layouts[&t].tile_len(&layouts[&t].tiles()[k]);
        let pool = ThreadPool::new(self.opts.threads);
        // Every thread of every rank computes at once.
        let model = self.opts.model.at_concurrency(self.opts.threads * p);
        let profiles: Vec<std::sync::Mutex<super::profile::KernelProfile>> =
            (0..pool.threads()).map(|_| Default::default()).collect();
        // Ranks start together: the time is the run's, not the skew of whatever
        // each did before (filling its inputs).
        comm.barrier();
        // Words moved: sent in collective exchanges, read by one-sided gets.
        let moved = || {
            let s = comm.stats();
            s.words_sent + s.words_got
        };
        let sent_before = moved();
        let t0 = std::time::Instant::now();
        crate::exec::distributed::maybe_inject_failure(me);
        for (l, set) in program.task_sets().iter().enumerate() {
            let set_t0 = std::time::Instant::now();
            for &s in set {
                let t = program.written(s);
                if !self.local.contains_key(&t) {
                    // Zero as allocated (and its pages untouched until computed into).
                    let made = std::time::Instant::now();
                    let loc = self.make_temporary(t, self.window_storage.then_some(comm))?;
                    self.stats.new_tensors_s += made.elapsed().as_secs_f64();
                    self.local.insert(t, loc);
                } else if !program.accumulates(s) {
                    // `=` overwrites the tiles it writes (all of them, or one block's
                    // for a slice `F[i,a] = …`), of which this rank owns some.
                    let l = &layouts[&t];
                    let local = self.local.get_mut(&t).expect("held");
                    for (&slot, &at) in &local.offsets {
                        let c = &l.tiles()[slot];
                        if program.writes_tile(s, c) {
                            local.data[at..at + l.tile_len(c)].fill(0.0);
                        }
                    }
                }
            }
            self.stats.owned_peak = self.stats.owned_peak.max(self.owned_now());
            let plan = &self.plans[l];
            let SetPlan { tasks, placed, fetch, reduce, windowed, one_sided } = plan;
            // The elements of its written tile that item `i` of rank `v` writes.
            let taken_span = |v: usize, i: usize| {
                let w = &placed.work[v][i];
                program.split_span(tasks[w.task].0, &tasks[w.task].1, w.split)
            };
            // The tile (tensor, stored slot) task `i` of the set writes.
            let written_tile = |i: usize| {
                let t = program.written(tasks[i].0);
                (t, layouts[&t].slot(&tasks[i].1).expect("tasks run over stored tiles"))
            };
            // Partial tiles of written tiles other ranks own, zeroed.
            let mut partial_at = HashMap::with_capacity(placed.partials[me].len());
            let mut partial_len = 0;
            for &i in &placed.partials[me] {
                let (t, k) = written_tile(i);
                partial_at.insert((t, k), partial_len);
                partial_len += tile_len(t, k);
            }
            let mut partials = alloc(partial_len, "partial tiles")?;
            let work = &placed.work[me];
            let (early, late): (Vec<usize>, Vec<usize>) = (0..work.len()).partition(|&i| !work[i].remote);
            let base: HashMap<TensorId, SyncPtr> =
                self.local.iter_mut().map(|(&t, v)| (t, SyncPtr(v.data.as_mut_ptr()))).collect();
            let local = &self.local;
            let offsets: HashMap<TensorId, &HashMap<usize, usize>> =
                local.iter().map(|(&t, v)| (t, &v.offsets)).collect();
            // One-sided where planned and the back end has windows (the same on
            // every rank).
            // Taking over other ranks' items may read any tensor the set reads.
            let stealing = *one_sided && self.opts.steal != Steal::Off && p > 1;
            let seg_tensors: Vec<TensorId> = if stealing {
                let mut all: Vec<TensorId> =
                    placed.work.iter().flatten().flat_map(|w| w.reads.iter().map(|&(t, _)| t)).collect();
                all.sort();
                all.dedup();
                all
            } else {
                windowed.clone()
            };
            let segments: Vec<&[f64]> = if *one_sided {
                seg_tensors.iter().map(|t| local.get(t).map_or(&[][..], |v| &v.data[..])).collect()
            } else {
                Vec::new()
            };
            let window = if *one_sided { comm.expose(&segments) } else { None };
            if *one_sided && window.is_none() {
                // No windows on this back end: the set's collective exchange moves
                // what its owners send.
                self.stats.no_window_sets += 1;
                self.stats.planned_words += (fetch.sent_by(me) + reduce.sent_by(me)) as f64 - plan.words(me) as f64;
            }
            let one_sided = window.is_some();
            // One counter per rank over its work items (collective, made alike everywhere).
            let claims: Vec<Box<dyn tcc_runtime::comm::SharedCounter>> =
                if one_sided && stealing { comm.counters(p) } else { Vec::new() };
            // One-sided: the remote tiles in the order the late work first reads
            // them, and how many of them each late item waits for.
            let (order, ready) = if one_sided { fetch_order(work, &late) } else { (Vec::new(), Vec::new()) };
            // Remote tiles this rank loads where they lie (shared memory) instead
            // of copying them: every rank's segments' addresses, where it can.
            let in_place_bases: Vec<Vec<Option<(usize, usize)>>> = match window.as_deref() {
                Some(w) if self.opts.read_in_place => (0..p)
                    .map(|r| {
                        (0..seg_tensors.len()).map(|i| w.segment_in_place(r, i).map(|(a, n)| (a as usize, n))).collect()
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let in_place = |t: TensorId, k: usize| -> Option<SyncPtr> {
                let owner = self.own.owner(&layouts[&t].tiles()[k]);
                if owner == me {
                    return None;
                }
                let at = seg_tensors.binary_search(&t).ok()?;
                let (addr, n) = (*in_place_bases.get(owner)?.get(at)?)?;
                let off = self.owner_offset[t.index()][k];
                assert!(off + tile_len(t, k) <= n, "tile {k} of a tensor beyond rank {owner}'s segment");
                Some(SyncPtr((addr as *mut f64).wrapping_add(off)))
            };
            let (fetched_at, total) = if one_sided {
                let mut at = 0;
                let mut offsets = HashMap::new();
                for &(t, k) in &order {
                    if in_place(t, k).is_some() {
                        continue;
                    }
                    offsets.insert((t, k), at);
                    at += tile_len(t, k);
                }
                (offsets, at)
            } else {
                offsets_of(&fetch.received(me))
            };
            if let Some(w) = window.as_deref() {
                // Read in place, as a get of them would have counted.
                for &(t, k) in order.iter().filter(|&&(t, k)| in_place(t, k).is_some()) {
                    w.count_in_place(self.own.owner(&layouts[&t].tiles()[k]), tile_len(t, k));
                    self.stats.in_place_words += tile_len(t, k) as f64;
                }
            }
            let mut fetched = alloc(total, "received tiles")?;
            self.stats.fetched_peak = self.stats.fetched_peak.max((total + partial_len) as f64);
            let partial_ptr = SyncPtr(partials.as_mut_ptr());
            let fetched_ptr = SyncPtr(fetched.as_mut_ptr());
            let flops = std::sync::atomic::AtomicU64::new(0);
            // Nanoseconds the compute threads waited for fetched tiles.
            let waited_ns = std::sync::atomic::AtomicU64::new(0);
            let items_ns = std::sync::atomic::AtomicU64::new(0);
            // Runs work item `w` on worker `worker` with its tiles at `tile_ptr`.
            let run_one = |w: &placement::Work,
                           tile_ptr: &(dyn Fn(TensorId, usize) -> *mut f64 + Sync),
                           worker: usize| {
                let (s, c, _) = &tasks[w.task];
                let i0 = std::time::Instant::now();
                let mut profile = self.opts.profile.then(|| profiles[worker].lock().unwrap_or_else(|e| e.into_inner()));
                let prof = profile.as_deref_mut().map(|p| (&model, p));
                // SAFETY: (callers) one item per written tile and rank runs at a
                // time, or parts of one split item, which write disjoint rows of it;
                // the set reads no tensor it writes; received tiles are read once
                // they have arrived.
                let (f, _) = unsafe { program.run_task(*s, c, tile_ptr, &kernel, w.anchors.as_deref(), w.split, prof) };
                flops.fetch_add(f as u64, std::sync::atomic::Ordering::Relaxed);
                items_ns.fetch_add(i0.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            };
            // The tiles of this rank's own items: owned, received, or partial.
            let own_tile = |fetched_ptr: Option<SyncPtr>| {
                let (offsets, base, fetched_at, partial_at, in_place) =
                    (&offsets, &base, &fetched_at, &partial_at, &in_place);
                move |t: TensorId, k: usize| -> *mut f64 {
                    // SAFETY: offsets index this rank's buffers: owned tiles, received
                    // operand tiles (only once they have arrived), or partial tiles (a
                    // set never reads what it writes); the rest are remote tiles read
                    // in place, which their owners leave unchanged until the window closes.
                    unsafe {
                        if let Some(&off) = offsets.get(&t).and_then(|o| o.get(&k)) {
                            base[&t].0.add(off)
                        } else if let (Some(&off), Some(p)) = (fetched_at.get(&(t, k)), fetched_ptr) {
                            p.get().add(off)
                        } else if let Some(&off) = partial_at.get(&(t, k)) {
                            partial_ptr.get().add(off)
                        } else {
                            in_place(t, k).expect("a remote tile read in place").get()
                        }
                    }
                }
            };
            let wait_timed = |progress: &Progress, n: usize| {
                let w0 = std::time::Instant::now();
                progress.wait_for(n);
                waited_ns.fetch_add(w0.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            };
            // Items of `items` run on the rank's threads; with `wait`, item i first
            // waits until `ready[i]` fetched tiles have arrived.
            let run_items = |items: &[usize], fetched_ptr: Option<SyncPtr>, wait: Option<(&Progress, &[usize])>| {
                let tile_ptr = own_tile(fetched_ptr);
                // In each phase one work item per written tile and rank (or the
                // parts of one, on disjoint rows); early items read no received tile.
                pool.parallel_for(items.len(), self.opts.schedule, |i, worker| {
                    if let Some((progress, ready)) = wait {
                        wait_timed(progress, ready[i]);
                    }
                    run_one(&work[items[i]], &tile_ptr, worker);
                });
            };
            // Work items taken over from other ranks (pointers from `Box::into_raw`),
            // and the words their tiles moved.
            let mut taken: Vec<*mut Taken> = Vec::new();
            let mut taken_words = 0usize;
            let mut in_place_taken = 0usize;
            // This rank's own items it claimed (the others took the rest).
            let mut own_claimed = 0usize;
            let x0 = std::time::Instant::now();
            if one_sided {
                self.stats.setup_s += set_t0.elapsed().as_secs_f64();
            }
            let mut exchange_s = 0.0;
            // `{ window }` moves it: the borrow of the tiles ends with this statement.
            let window = if claims.is_empty() {
                window
            } else if let Some(window) = { window } {
                // Dynamic: every item is claimed through the counters; the main
                // thread claims, gets and hands out, the compute threads run.
                let progress = Progress::default();
                // Every rank's items in the order it claims them.
                let orders: Vec<Vec<usize>> = placed.work.iter().map(|w| placement::claim_order(w)).collect();
                let own_items = &orders[me];
                debug_assert!(own_items.iter().eq(early.iter().chain(&late)));
                let own_ready: Vec<usize> = std::iter::repeat_n(0, early.len()).chain(ready.iter().copied()).collect();
                // Items claimed but not started are out of the other ranks' reach:
                // with the ends of the lists split (small items there) one waiting
                // item per compute thread is enough to keep them busy, else one more.
                let depth = if self.opts.split == placement::Split::Off { pool.threads() + 1 } else { pool.threads() };
                let queue = JobQueue::new(depth);
                // Two shares of one task must not write its tile at once.
                let task_lock: Vec<std::sync::Mutex<()>> = (0..tasks.len()).map(|_| Default::default()).collect();
                let seg = |t: TensorId| seg_tensors.binary_search(&t).expect("every tensor read is windowed");
                let in_place = &in_place;
                let own_ptr = own_tile(Some(fetched_ptr));
                std::thread::scope(|sc| -> Result<(), CommandError> {
                    let computing = sc.spawn(|| {
                        pool.parallel_for(pool.threads(), Schedule::Dynamic, |_, worker| {
                            while let Some(job) = queue.pop() {
                                match job {
                                    Job::Own(k) => {
                                        wait_timed(&progress, own_ready[k]);
                                        let w = &work[own_items[k]];
                                        let _only = task_lock[w.task].lock().unwrap_or_else(|e| e.into_inner());
                                        run_one(w, &own_ptr, worker);
                                    }
                                    Job::Taken(ptr) => {
                                        // SAFETY: handed to this thread alone (see `Job`).
                                        let tk = unsafe { &mut *ptr };
                                        let w = &placed.work[tk.victim][tk.item];
                                        let (t_w, k_w) = written_tile(w.task);
                                        let part = SyncPtr(tk.partial.as_mut_ptr());
                                        // Operand tiles are only read (kernels take them as
                                        // `*const`): shared with later taken parts.
                                        let ops: HashMap<(TensorId, usize), SyncPtr> = tk
                                            .operands
                                            .iter()
                                            .map(|(&key, b)| (key, SyncPtr(b.as_ptr() as *mut f64)))
                                            .collect();
                                        let tile_ptr = |t: TensorId, k: usize| -> *mut f64 {
                                            if (t, k) == (t_w, k_w) {
                                                part.get()
                                            } else if let Some(p) = ops.get(&(t, k)) {
                                                p.get()
                                            } else if let Some(&off) = offsets.get(&t).and_then(|o| o.get(&k)) {
                                                // SAFETY: a tile this rank owns.
                                                unsafe { base[&t].0.add(off) }
                                            } else if let Some(&off) = fetched_at.get(&(t, k)) {
                                                // SAFETY: a tile fetched for this rank's own items,
                                                // all of which arrived before any item was taken.
                                                unsafe { fetched_ptr.get().add(off) }
                                            } else {
                                                in_place(t, k).expect("a remote tile read in place").get()
                                            }
                                        };
                                        run_one(w, &tile_ptr, worker);
                                    }
                                }
                            }
                        });
                    });
                    let mut guard = progress.getter();
                    let eager = self.opts.steal == Steal::Eager;
                    if eager && me == 0 {
                        // Tests: the others find rank 0's items unstarted.
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    let mut victims: Vec<usize> = (1..p).map(|d| (me + d) % p).collect();
                    // The operand tiles of the item taken last, shared with the next.
                    let mut last_operands: HashMap<(TensorId, usize), std::sync::Arc<AlignedBuf>> = HashMap::new();
                    let (mut own_done, mut got, mut at) = (false, 0, 0);
                    let result = loop {
                        if computing.is_finished() {
                            break Ok(()); // a compute thread failed: reported at the join
                        }
                        let room = queue.has_room();
                        if room && !own_done && !(eager && me != 0 && !victims.is_empty()) {
                            let k = claims[me].fetch_add(1) as usize;
                            if k < own_items.len() {
                                own_claimed += 1;
                                queue.push(Job::Own(k));
                            } else {
                                own_done = true;
                            }
                            continue;
                        }
                        if got < order.len() {
                            let (t, k) = order[got];
                            if in_place(t, k).is_some() {
                                got += 1;
                                guard.announce(got);
                                continue;
                            }
                            let owner = self.own.owner(&layouts[&t].tiles()[k]);
                            let len = tile_len(t, k);
                            // SAFETY: only this thread writes `fetched`, each tile once (in
                            // `order`, back to back), before announcing it.
                            let dst = unsafe { std::slice::from_raw_parts_mut(fetched_ptr.get().add(at), len) };
                            window.get(owner, seg(t), self.owner_offset[t.index()][k], dst);
                            at += len;
                            got += 1;
                            guard.announce(got);
                            continue;
                        }
                        if room && !victims.is_empty() {
                            let v = victims[0];
                            let order_v = &orders[v];
                            // Worth taking only if its gets take less time than computing
                            // it here (by the time model; tests take anything).
                            let next = claims[v].fetch_add(0) as usize;
                            // Tiles it reads that this rank holds already: its own, those
                            // fetched for its own items (all arrived by now: the fetches
                            // come first), and the last taken item's (the parts of a
                            // split item read the same tiles).
                            let held = |t: TensorId, k: usize| {
                                self.own.owner(&layouts[&t].tiles()[k]) == me
                                    || fetched_at.contains_key(&(t, k))
                                    || last_operands.contains_key(&(t, k))
                                    || in_place(t, k).is_some()
                            };
                            let worth = |i: usize| {
                                let w = &placed.work[v][i];
                                let (t_w, k_w) = written_tile(w.task);
                                let gets = w
                                    .reads
                                    .iter()
                                    .filter(|&&(t, k)| !held(t, k))
                                    .map(|&(t, k)| tile_len(t, k))
                                    .chain([tile_len(t_w, k_w)]);
                                eager || steal::worth_taking(&self.opts.model, gets, w.seconds)
                            };
                            if order_v.get(next).is_none_or(|&i| !worth(i)) {
                                victims.remove(0);
                                continue;
                            }
                            let i = claims[v].fetch_add(1) as usize;
                            // The victim claims its items in its own order (local work first).
                            let Some(i) = order_v.get(i).copied() else {
                                victims.remove(0);
                                continue;
                            };
                            let w = &placed.work[v][i];
                            debug_assert_eq!(got, order.len(), "own fetches first");
                            let mut operands = HashMap::new();
                            let mut failed = None;
                            for &(t, k) in &w.reads {
                                let owner = self.own.owner(&layouts[&t].tiles()[k]);
                                if owner == me || fetched_at.contains_key(&(t, k)) {
                                    continue;
                                }
                                if in_place(t, k).is_some() {
                                    window.count_in_place(owner, tile_len(t, k));
                                    taken_words += tile_len(t, k);
                                    in_place_taken += tile_len(t, k);
                                    continue;
                                }
                                if let Some(b) = last_operands.get(&(t, k)) {
                                    operands.insert((t, k), std::sync::Arc::clone(b));
                                    continue;
                                }
                                let mut b = match alloc(tile_len(t, k), "tiles of taken-over work") {
                                    Ok(b) => b,
                                    Err(e) => {
                                        failed = Some(e);
                                        break;
                                    }
                                };
                                window.get(owner, seg(t), self.owner_offset[t.index()][k], &mut b);
                                taken_words += b.len();
                                operands.insert((t, k), std::sync::Arc::new(b));
                            }
                            if let Some(e) = failed {
                                break Err(e);
                            }
                            last_operands = operands.clone();
                            let (t_w, k_w) = written_tile(w.task);
                            let partial = match alloc(tile_len(t_w, k_w), "partial tiles of taken-over work") {
                                Ok(b) => b,
                                Err(e) => break Err(e),
                            };
                            let ptr = Box::into_raw(Box::new(Taken { victim: v, item: i, operands, partial }));
                            taken.push(ptr);
                            queue.push(Job::Taken(ptr));
                            continue;
                        }
                        if own_done && victims.is_empty() {
                            break Ok(());
                        }
                        window.progress();
                        queue.wait_for_room();
                    };
                    guard.finish();
                    queue.close();
                    exchange_s = x0.elapsed().as_secs_f64();
                    serve_while(&*window, &computing);
                    if let Err(panic) = computing.join() {
                        std::panic::resume_unwind(panic);
                    }
                    result
                })?;
                self.stats.idle_s += queue.idle_s() / pool.threads() as f64;
                let c0 = std::time::Instant::now();
                window.close();
                self.stats.ranks_wait_s += c0.elapsed().as_secs_f64();
                self.stats.one_sided_sets += 1;
                // What this rank ran (its own items less those taken, plus those it took).
                self.stats.overlapped_flops += flops.load(std::sync::atomic::Ordering::Relaxed) as f64;
                None
            } else {
                None
            };
            // SAFETY: every compute thread has stopped; each pointer is used once.
            let taken: Vec<Taken> = taken.into_iter().map(|p| *unsafe { Box::from_raw(p) }).collect();
            if !claims.is_empty() {
                // Ran above (the window is closed); the borrow of the tiles ends here.
                drop(window);
            } else if let Some(window) = { window } {
                // The late work runs as its tiles arrive, the early work first.
                let progress = Progress::default();
                std::thread::scope(|sc| {
                    let computing = sc.spawn(|| {
                        run_items(&early, None, None);
                        run_items(&late, Some(fetched_ptr), Some((&progress, &ready)));
                    });
                    let mut guard = progress.getter();
                    let (mut at, mut done) = (0, 0);
                    // Batches of growing size: the first tiles arrive after one
                    // round trip, later ones share theirs (a get may need the
                    // owner's attention: Window::progress).
                    let mut batch = 1;
                    while done < order.len() {
                        let end = (done + batch).min(order.len());
                        let mut reads = Vec::with_capacity(end - done);
                        for &(t, k) in &order[done..end] {
                            if in_place(t, k).is_some() {
                                continue;
                            }
                            let len = tile_len(t, k);
                            // SAFETY: only this thread writes `fetched`, each tile once (in
                            // `order`, back to back), before announcing it; readers read
                            // announced tiles only.
                            let dst = unsafe { std::slice::from_raw_parts_mut(fetched_ptr.get().add(at), len) };
                            reads.push(Read {
                                target: self.own.owner(&layouts[&t].tiles()[k]),
                                segment: windowed.binary_search(&t).expect("remote reads are windowed"),
                                offset: self.owner_offset[t.index()][k],
                                dst,
                            });
                            at += len;
                        }
                        window.get_many(&mut reads);
                        done = end;
                        guard.announce(done);
                        batch = (batch * 2).min(MAX_GET_BATCH);
                    }
                    guard.finish();
                    exchange_s = x0.elapsed().as_secs_f64();
                    serve_while(&*window, &computing);
                    if let Err(panic) = computing.join() {
                        std::panic::resume_unwind(panic);
                    }
                });
                // Collective: returns when the slowest rank has computed.
                let c0 = std::time::Instant::now();
                window.close();
                self.stats.ranks_wait_s += c0.elapsed().as_secs_f64();
                self.stats.one_sided_sets += 1;
                self.stats.overlapped_flops += work.iter().map(|w| w.flops).sum::<f64>();
            } else {
                // The work that reads only this rank's tiles runs while the exchange
                // brings the remote operand tiles (straight into place); the rest after.
                let source = |s: &Shipment| {
                    let loc = &local[&s.tensor];
                    let off = loc.offsets[&s.slot];
                    &loc.data[off..off + s.len]
                };
                std::thread::scope(|sc| {
                    let computing = (!early.is_empty()).then(|| sc.spawn(|| run_items(&early, None, None)));
                    let r = fetch.transfer(comm, me, source, &mut fetched);
                    exchange_s = x0.elapsed().as_secs_f64();
                    if let Some(h) = computing {
                        if let Err(panic) = h.join() {
                            std::panic::resume_unwind(panic);
                        }
                    }
                    r
                })?;
                self.stats.overlapped_flops += early.iter().map(|&i| work[i].flops).sum::<f64>();
                run_items(&late, Some(fetched_ptr), None);
            }
            self.stats.exchange_s += exchange_s;
            self.stats.tiles_wait_s +=
                waited_ns.load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-9 / pool.threads() as f64;
            self.stats.items_s +=
                items_ns.load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-9 / pool.threads() as f64;
            self.stats.sets += 1;
            self.stats.flops += flops.load(std::sync::atomic::Ordering::Relaxed) as f64;
            let local = &mut self.local;
            drop(fetched);
            // Partial tiles to their owners, added there in a fixed order.
            let x1 = std::time::Instant::now();
            // Who took over what: every rank's list, and this rank's partial tiles
            // of them back to back in list order.
            let (lists, taken_partials) = if claims.is_empty() {
                (Vec::new(), AlignedBuf::default())
            } else {
                let before = moved();
                let mine: Vec<(usize, usize)> = taken.iter().map(|t| (t.victim, t.item)).collect();
                let mut counts = vec![0.0; p];
                comm.allgather(&[2.0 * mine.len() as f64], &mut counts);
                let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
                let mut all = vec![0.0; counts.iter().sum()];
                comm.allgatherv(&steal::encode(&mine), &counts, &mut all);
                // Every item claimed exactly once, or the claim counters' atomics
                // failed (as Open MPI's `osc rdma` without single-copy transfers
                // was seen to): the sums would be wrong, so stop.
                let mut ran = vec![0.0; p];
                comm.allgather(&[(own_claimed + taken.len()) as f64], &mut ran);
                let ran: f64 = ran.iter().sum();
                let items: usize = placed.work.iter().map(|w| w.len()).sum();
                if ran != items as f64 {
                    return Err(CommandError::new(
                        "E0770",
                        format!(
                            "task set {l}: the ranks ran {ran} work items of {items}: a claim counter \
                             (MPI_Fetch_and_op) was not atomic, so some items ran twice or never"
                        ),
                        Some(
                            "use an MPI one-sided component with working atomics (Open MPI: \
                             OMPI_MCA_osc=sm,pt2pt on one node), or TCC_STEAL=off"
                                .into(),
                        ),
                    ));
                }
                // Bookkeeping, not planned words.
                taken_words += moved().saturating_sub(before) as usize;
                // Of a part of a split item, only the rows it wrote.
                let spans: Vec<std::ops::Range<usize>> = taken.iter().map(|t| taken_span(t.victim, t.item)).collect();
                let mut buf = alloc(spans.iter().map(|r| r.len()).sum(), "partial tiles of taken-over work")?;
                let mut at = 0;
                for (t, r) in taken.iter().zip(&spans) {
                    buf[at..at + r.len()].copy_from_slice(&t.partial[r.clone()]);
                    at += r.len();
                }
                self.stats.taken_items += taken.len();
                (steal::decode(&all, &counts), buf)
            };
            drop(taken);
            let segments: Vec<&[f64]> =
                if claims.is_empty() { vec![&partials[..]] } else { vec![&partials[..], &taken_partials[..]] };
            if let Some(window) = if one_sided { comm.expose(&segments) } else { None } {
                // Opening is collective too: what it took is the other ranks'.
                let opened = x1.elapsed().as_secs_f64();
                self.stats.ranks_wait_s += opened;
                // Each owner reads its partial tiles from the ranks that computed
                // them, in rank order, and adds them.
                let mut scratch = Vec::new();
                for q in (0..p).filter(|&q| q != me) {
                    let mut at = 0;
                    for &i in &placed.partials[q] {
                        let (t, k) = written_tile(i);
                        let len = tile_len(t, k);
                        if self.own.owner(&layouts[&t].tiles()[k]) == me {
                            scratch.resize(len, 0.0);
                            window.get(q, 0, at, &mut scratch);
                            let loc = local.get_mut(&t).expect("written tensors are held");
                            let off = loc.offsets[&k];
                            for (x, y) in loc.data[off..off + len].iter_mut().zip(&scratch) {
                                *x += y;
                            }
                        }
                        at += len;
                    }
                }
                // Then the partial tiles of taken-over items, by rank and list order.
                for (q, list) in lists.iter().enumerate() {
                    let mut at = 0;
                    for &(v, i) in list {
                        let (t, k) = written_tile(placed.work[v][i].task);
                        let span = taken_span(v, i);
                        let len = span.len();
                        if self.own.owner(&layouts[&t].tiles()[k]) == me {
                            let part: &[f64] = if q == me {
                                &taken_partials[at..at + len]
                            } else {
                                scratch.resize(len, 0.0);
                                window.get(q, 1, at, &mut scratch);
                                taken_words += len;
                                &scratch
                            };
                            let loc = local.get_mut(&t).expect("written tensors are held");
                            let off = loc.offsets[&k] + span.start;
                            for (x, y) in loc.data[off..off + len].iter_mut().zip(part) {
                                *x += y;
                            }
                        }
                        at += len;
                    }
                }
                self.stats.reduce_s += x1.elapsed().as_secs_f64() - opened;
                let c0 = std::time::Instant::now();
                window.close();
                self.stats.ranks_wait_s += c0.elapsed().as_secs_f64();
            } else {
                let incoming = reduce.received(me);
                if one_sided {
                    // Planned as gets, moved by the collective exchange (no window over
                    // the partial tiles): what this rank sends counts, as for such sets.
                    let got: usize = incoming.iter().map(|s| s.len).sum();
                    self.stats.planned_words += reduce.sent_by(me) as f64 - got as f64;
                }
                let mut sums = alloc(incoming.iter().map(|s| s.len).sum(), "received partial tiles")?;
                {
                    let partials = &partials;
                    let source = |s: &Shipment| {
                        let off = partial_at[&(s.tensor, s.slot)];
                        &partials[off..off + s.len]
                    };
                    reduce.transfer(comm, me, source, &mut sums)?;
                }
                let mut at = 0;
                for s in &incoming {
                    let loc = local.get_mut(&s.tensor).expect("written tensors are held");
                    let off = loc.offsets[&s.slot];
                    for (x, y) in loc.data[off..off + s.len].iter_mut().zip(&sums[at..at + s.len]) {
                        *x += y;
                    }
                    at += s.len;
                }
                if !lists.is_empty() {
                    // Items were taken over, but no window over the partial tiles
                    // could be made (Open MPI's `osc sm` makes none over memory it did
                    // not allocate): the taken items' partial tiles go to every rank,
                    // and each owner adds its own, in rank and list order.
                    let before = moved();
                    let spans = |list: &[(usize, usize)]| list.iter().map(|&(v, i)| taken_span(v, i).len()).sum();
                    let counts: Vec<usize> = lists.iter().map(|l| spans(l)).collect();
                    let mut all = alloc(counts.iter().sum(), "partial tiles of taken-over work")?;
                    comm.allgatherv(&taken_partials, &counts, &mut all);
                    taken_words += moved().saturating_sub(before) as usize;
                    let mut at = 0;
                    for &(v, i) in lists.iter().flatten() {
                        let (t, k) = written_tile(placed.work[v][i].task);
                        let span = taken_span(v, i);
                        let len = span.len();
                        if self.own.owner(&layouts[&t].tiles()[k]) == me {
                            let loc = local.get_mut(&t).expect("written tensors are held");
                            let off = loc.offsets[&k] + span.start;
                            for (x, y) in loc.data[off..off + len].iter_mut().zip(&all[at..at + len]) {
                                *x += y;
                            }
                        }
                        at += len;
                    }
                }
            }
            drop(partials);
            self.stats.taken_words += taken_words as f64;
            self.stats.in_place_words += in_place_taken as f64;
            self.stats.exchange_s += x1.elapsed().as_secs_f64();
            let last_use = &self.last_use;
            drop_tensors(local, |t| hir.tensors[t].role != Role::Temporary || last_use.get(&t).is_some_and(|&u| u > l));
        }
        self.stats.run_s = t0.elapsed().as_secs_f64();
        self.stats.profile = super::exec::merged(profiles);
        // What the plan moved: the words of taken-over items are counted apart.
        self.stats.words_sent = moved().saturating_sub(sent_before) as f64 - self.stats.taken_words;
        self.stats.peak_rss = peak_rss_bytes();
        Ok(())
    }

    /// Every output's report, the same on every rank, and with `output_dir` its
    /// `.npy` file written by every rank (collective).
    fn report_outputs(
        &self,
        comm: &dyn Communicator,
        output_dir: Option<&std::path::Path>,
        source: &super::source::SourceView,
    ) -> Result<Vec<OutputReport>, CommandError> {
        let hir = &self.program.hir;
        let mut reports = Vec::new();
        // A complex file is made by its real part's tensor, then completed by the
        // imaginary part's.
        let mut outputs = hir.unit_outputs(self.program.unit);
        outputs.sort_by_key(|&t| source.part(t).map_or(0, |p| p.component));
        for t in outputs {
            let l = &self.program.layouts[&t];
            let local = &self.local[&t];
            let tile = |slot: usize| -> Option<&[f64]> {
                let &at = local.offsets.get(&slot)?;
                Some(&local.data[at..at + l.tile_len(&l.tiles()[slot])])
            };
            // A part of a complex or 16-bit tensor is written and rounded as its source.
            let (name, elem, component) = match source.part(t) {
                Some(p) => (&p.name, p.elem, p.component),
                None => (&hir.tensors[t].name, hir.tensors[t].elem, 0),
            };
            let path = output_dir.map(|dir| dir.join(format!("{name}.npy")));
            let summary = super::outputs::summarize_and_write(path.as_deref(), l, elem, component, &tile, comm)
                .map_err(|e| crate::run::fail("E0709", e, None))?;
            reports.push(OutputReport {
                tensor: t,
                summary,
                symmetry: super::outputs::symmetry_violation(l, &tile, crate::run::SYMMETRY_RTOL, comm),
            });
        }
        Ok(reports)
    }

    /// The unit's outputs, whole, on rank 0 (`None` elsewhere): every rank sends
    /// its tiles (collective). Tests compare them with the interpreter; `tcc run`
    /// reports outputs without making them whole ([`Self::report_outputs`]).
    pub fn gather(&self, comm: &dyn Communicator) -> Result<Option<HashMap<TensorId, TiledTensor>>, CommandError> {
        let (me, p) = (self.me, self.ranks);
        let owner = |c: &[u32]| self.own.owner(c);
        let mut outputs = HashMap::new();
        for t in self.program.hir.unit_outputs(self.program.unit) {
            let l = &self.program.layouts[&t];
            // This rank's tiles are back to back in slot order already.
            let send = &self.local[&t].data;
            let mut send_counts = vec![0usize; p];
            send_counts[0] = send.len();
            let mut recv_counts = vec![0usize; p];
            if me == 0 {
                for (r, count) in recv_counts.iter_mut().enumerate() {
                    *count = l.tiles().iter().filter(|c| owner(c) == r).map(|c| l.tile_len(c)).sum();
                }
            }
            let mut recv = alloc(recv_counts.iter().sum(), "gathered outputs")?;
            comm.alltoallv(send, &send_counts, &mut recv, &recv_counts);
            if me == 0 {
                let mut whole = TiledTensor::zeros(l.clone()).map_err(|e| {
                    crate::run::out_of_memory(format!("cannot allocate {} elements for `{}`", e.elements, e.name))
                })?;
                let mut at = 0;
                for r in 0..p {
                    for (k, c) in l.tiles().iter().enumerate().filter(|(_, c)| owner(c) == r) {
                        let (off, len) = (l.offset(k), l.tile_len(c));
                        whole.data[off..off + len].copy_from_slice(&recv[at..at + len]);
                        at += len;
                    }
                }
                outputs.insert(t, whole);
            }
        }
        Ok((me == 0).then_some(outputs))
    }
}
