//! Distributed tiled execution (`tcc run --tiled --ranks N`, or `--backend mpi`
//! under mpirun): every rank holds only the tiles it owns, computes the tasks of
//! the tiles it owns (owner computes), and before each task set receives the
//! remote operand tiles its tasks read in one all-to-all exchange.
//!
//! Ownership ([`Ownership`]): tiles are grouped by their first two coordinates, so
//! tiles of different tensors that share leading indices (`V[a,b,c,d]` and
//! `R[a,b,i,j]`) live on the same rank and the big operand of a ladder term stays
//! put; the groups are dealt to ranks by the cost of their tasks. Every rank plans alike, so each knows what every other rank needs from it
//! without asking (inspector–executor); the exchange is bulk-synchronous per task
//! set. Inputs are generated tile by tile on their owners (the interpreter's random
//! values); outputs are gathered on rank 0 for the report.

use super::buffer::AlignedBuf;
use super::exec::{Program, TiledOptions};
use super::layout::Coord;
use super::tensor::{fill_tile, TiledTensor};
use super::SyncPtr;
use crate::error::CommandError;
use crate::ids::TensorId;
use crate::interp::{random_key, round_to};
use crate::sema::hir::Role;
use crate::symmetry::PermGroup;
use std::collections::{BTreeSet, HashMap};
use tcc_runtime::comm::Communicator;
use tcc_runtime::task::ThreadPool;

/// Which rank owns each tile: tiles are grouped by their first two coordinates
/// (the key), and keys are dealt to ranks largest first (by the flops of the tasks
/// whose written tile has the key, then by the elements stored under it), each to
/// the rank with the least so far. Every rank computes the same map.
#[derive(Debug, Clone)]
pub struct Ownership {
    ranks: usize,
    of_key: HashMap<Vec<u32>, usize>,
}

impl Ownership {
    pub fn new(program: &Program, ranks: usize) -> Ownership {
        let mut weight: HashMap<Vec<u32>, (f64, f64)> = HashMap::new();
        for set in program.task_sets() {
            for (_, c, f) in program.level_tasks(set) {
                weight.entry(key(&c)).or_default().0 += f;
            }
        }
        for l in program.layouts.values() {
            for c in l.tiles() {
                weight.entry(key(c)).or_default().1 += l.tile_len(c) as f64;
            }
        }
        let mut keys: Vec<(Vec<u32>, (f64, f64))> = weight.into_iter().collect();
        keys.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(b.1 .1.total_cmp(&a.1 .1)).then(a.0.cmp(&b.0)));
        let mut load = vec![(0.0f64, 0.0f64); ranks.max(1)];
        let mut of_key = HashMap::new();
        for (k, (f, e)) in keys {
            let r = (0..load.len())
                .min_by(|&x, &y| load[x].0.total_cmp(&load[y].0).then(load[x].1.total_cmp(&load[y].1)))
                .unwrap_or(0);
            load[r].0 += f;
            load[r].1 += e;
            of_key.insert(k, r);
        }
        Ownership { ranks: ranks.max(1), of_key }
    }

    /// The rank that owns tile `c`.
    pub fn owner(&self, c: &[u32]) -> usize {
        self.of_key.get(&key(c)).copied().unwrap_or(0) % self.ranks
    }
}

fn key(c: &[u32]) -> Vec<u32> {
    c.iter().take(2).copied().collect()
}

/// One rank's tiles of one tensor: stored slot → offset in `data`.
#[derive(Debug, Default)]
struct Local {
    offsets: HashMap<usize, usize>,
    data: AlignedBuf,
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
    /// Seconds spent planning and running the exchanges (the rest of `run_s` is
    /// tasks).
    pub exchange_s: f64,
    /// Peak resident memory of this process in bytes (per rank under MPI; shared
    /// by all in-process ranks).
    pub peak_rss: f64,
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

/// One remote tile on its way: from its owner to the rank whose tasks read it.
#[derive(Debug, Clone, Copy)]
struct Shipment {
    from: usize,
    to: usize,
    tensor: TensorId,
    slot: usize,
    len: usize,
    round: usize,
}

/// The exchange of one task set, in rounds of at most [`ROUND_WORDS`] sent per
/// rank. Every rank computes the same plan from the same `needs`, so each knows
/// what it sends and receives in every round without asking.
struct Exchange {
    /// Per sender, in order: to rank 0's tiles in `needs` order, then rank 1's...
    shipments: Vec<Vec<Shipment>>,
    count: usize,
}

impl Exchange {
    fn plan(
        needs: &[BTreeSet<(TensorId, usize)>],
        owner: &dyn Fn(TensorId, usize) -> usize,
        tile_len: &dyn Fn(TensorId, usize) -> usize,
        p: usize,
    ) -> Exchange {
        let mut shipments: Vec<Vec<Shipment>> = vec![Vec::new(); p];
        for (to, need) in needs.iter().enumerate() {
            for &(tensor, slot) in need {
                let from = owner(tensor, slot);
                if from != to {
                    shipments[from].push(Shipment { from, to, tensor, slot, len: tile_len(tensor, slot), round: 0 });
                }
            }
        }
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

    fn sent_by(&self, rank: usize) -> impl Iterator<Item = &Shipment> {
        self.shipments[rank].iter()
    }

    /// What `rank` receives, in buffer order: by round, then sender, then order.
    fn received(&self, rank: usize) -> impl Iterator<Item = &Shipment> {
        (0..self.count).flat_map(move |c| {
            self.shipments.iter().flat_map(move |list| list.iter().filter(move |s| s.to == rank && s.round == c))
        })
    }

    fn received_at(&self, rank: usize) -> HashMap<(TensorId, usize), usize> {
        let mut at = 0;
        self.received(rank)
            .map(|s| {
                let here = at;
                at += s.len;
                ((s.tensor, s.slot), here)
            })
            .collect()
    }

    fn received_len(&self, rank: usize) -> usize {
        self.received(rank).map(|s| s.len).sum()
    }

    /// Where round `c`'s tiles for `rank` start in its buffer, and the words from
    /// each sender.
    fn received_in(&self, rank: usize, c: usize) -> (usize, Vec<usize>) {
        let start = self.received(rank).take_while(|s| s.round < c).map(|s| s.len).sum();
        let mut counts = vec![0; self.shipments.len()];
        for s in self.received(rank).filter(|s| s.round == c) {
            counts[s.from] += s.len;
        }
        (start, counts)
    }

    fn max_send_len(&self, rank: usize) -> usize {
        let mut per_round = vec![0; self.count];
        for s in &self.shipments[rank] {
            per_round[s.round] += s.len;
        }
        per_round.into_iter().max().unwrap_or(0)
    }
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
    seed: u64,
    opts: &TiledOptions,
) -> Result<(Option<HashMap<TensorId, TiledTensor>>, RankStats), CommandError> {
    let mut rank = RankTiles::new(program, comm.rank(), comm.size())?;
    rank.fill_random(seed);
    rank.run(comm, opts)?;
    let outputs = rank.gather(comm)?;
    Ok((outputs, rank.stats))
}

/// One rank's part of a distributed tiled run: the tiles it owns of every tensor
/// alive, back to back per tensor in storage-slot order (the documented
/// distribution of `tcc build --mpi` libraries: the caller fills the input
/// tiles it owns, runs, and reads the output tiles it owns).
pub struct RankTiles<'p> {
    program: &'p Program,
    own: Ownership,
    me: usize,
    ranks: usize,
    local: HashMap<TensorId, Local>,
    pub stats: RankStats,
}

impl<'p> RankTiles<'p> {
    /// Rank `me` of `ranks`, holding zeroed tiles of the unit's inputs and outputs.
    pub fn new(program: &'p Program, me: usize, ranks: usize) -> Result<RankTiles<'p>, CommandError> {
        let own = Ownership::new(program, ranks);
        let mut r = RankTiles { program, own, me, ranks, local: HashMap::new(), stats: RankStats::default() };
        let hir = &program.hir;
        for t in hir.unit_inputs(program.unit).into_iter().chain(hir.unit_outputs(program.unit)) {
            if !r.local.contains_key(&t) {
                let loc = r.make_local(t)?;
                r.local.insert(t, loc);
            }
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

    fn make_local(&self, t: TensorId) -> Result<Local, CommandError> {
        let l = &self.program.layouts[&t];
        let mut offsets = HashMap::new();
        let mut n = 0;
        for k in self.slots(t) {
            offsets.insert(k, n);
            n += l.tile_len(&l.tiles()[k]);
        }
        Ok(Local { offsets, data: alloc(n, &format!("`{}`", l.name))? })
    }

    fn owned_now(&self) -> f64 {
        self.local.values().map(|l| l.data.len() as f64).sum::<f64>()
    }

    /// Fills this rank's input tiles with the interpreter's random values.
    pub fn fill_random(&mut self, seed: u64) {
        let hir = &self.program.hir;
        for t in hir.unit_inputs(self.program.unit) {
            let l = &self.program.layouts[&t];
            let loc = self.local.get_mut(&t).expect("inputs are held from the start");
            let shape: Vec<usize> = l.dims.iter().map(|d| d.start(d.count())).collect();
            let group = PermGroup::of(&hir.tensors[t]);
            let key = random_key(seed, &l.name);
            let elem = hir.tensors[t].elem;
            for (&k, &off) in &loc.offsets {
                let c = &l.tiles()[k];
                let (start, ext) = l.tile_box(c);
                let len = l.tile_len(c);
                fill_tile(&mut loc.data[off..off + len], &start, &ext, &shape, &group, key, &|x| round_to(elem, x));
            }
        }
    }

    /// Runs the unit's task sets: before each, one exchange of the remote operand
    /// tiles this rank's tasks read; then its tasks. Outputs stay where they are
    /// owned; temporaries are freed after their last use.
    pub fn run(&mut self, comm: &dyn Communicator, opts: &TiledOptions) -> Result<(), CommandError> {
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
        let own = self.own.clone();
        let owner = |c: &[u32]| own.owner(c);
        // The task set after which each temporary is no longer used.
        let sets = program.task_sets();
        let mut last_use: HashMap<TensorId, usize> = HashMap::new();
        let mut reads = Vec::new();
        for (l, set) in sets.iter().enumerate() {
            for &s in set {
                last_use.insert(program.written(s), l);
            }
            for (s, c, _) in program.level_tasks(set) {
                reads.clear();
                program.task_reads(s, &c, &mut reads);
                for (t, _) in &reads {
                    last_use.insert(*t, l);
                }
            }
        }
        let pool = ThreadPool::new(opts.threads);
        let t0 = std::time::Instant::now();
        crate::exec::distributed::maybe_inject_failure(me);
        for (l, set) in sets.iter().enumerate() {
            for &s in set {
                let t = program.written(s);
                if !self.local.contains_key(&t) {
                    let loc = self.make_local(t)?;
                    self.local.insert(t, loc);
                }
            }
            self.stats.owned_peak = self.stats.owned_peak.max(self.owned_now());
            let local = &mut self.local;
            let tasks = program.level_tasks(set);
            // needs[q]: the remote tiles rank q's tasks read, in a fixed order.
            let mut needs: Vec<BTreeSet<(TensorId, usize)>> = vec![BTreeSet::new(); p];
            for (s, c, _) in &tasks {
                let q = owner(c);
                reads.clear();
                program.task_reads(*s, c, &mut reads);
                for &(t, k) in &reads {
                    if owner(&layouts[&t].tiles()[k]) != q {
                        needs[q].insert((t, k));
                    }
                }
            }
            // Send every rank the tiles it needs that this rank owns; receive ours.
            let tile_len = |t: TensorId, k: usize| layouts[&t].tile_len(&layouts[&t].tiles()[k]);
            let x0 = std::time::Instant::now();
            let rounds = Exchange::plan(&needs, &|t, k| owner(&layouts[&t].tiles()[k]), &tile_len, p);
            let fetched_at = rounds.received_at(me);
            let total = rounds.received_len(me);
            let mut fetched = alloc(total, "received tiles")?;
            // One alltoallv per round: a send buffer of at most a round's words,
            // received tiles written where they stay (no second copy).
            let mut send = alloc(rounds.max_send_len(me), "tiles to send")?;
            for c in 0..rounds.count {
                let mut send_counts = vec![0usize; p];
                let mut at = 0;
                for item in rounds.sent_by(me).filter(|i| i.round == c) {
                    let loc = &local[&item.tensor];
                    let off = loc.offsets[&item.slot];
                    send[at..at + item.len].copy_from_slice(&loc.data[off..off + item.len]);
                    send_counts[item.to] += item.len;
                    at += item.len;
                }
                let (start, recv_counts) = rounds.received_in(me, c);
                let end = start + recv_counts.iter().sum::<usize>();
                comm.alltoallv(&send[..at], &send_counts, &mut fetched[start..end], &recv_counts);
            }
            drop(send);
            self.stats.exchange_s += x0.elapsed().as_secs_f64();
            self.stats.fetched_peak = self.stats.fetched_peak.max(total as f64);
            // Run this rank's tasks.
            let mut mine: Vec<&(usize, Coord, f64)> = tasks.iter().filter(|(_, c, _)| owner(c) == me).collect();
            if opts.schedule == tcc_runtime::task::Schedule::Dynamic {
                mine.sort_by(|a, b| b.2.total_cmp(&a.2));
            }
            let base: HashMap<TensorId, SyncPtr> =
                local.iter_mut().map(|(&t, v)| (t, SyncPtr(v.data.as_mut_ptr()))).collect();
            let offsets: HashMap<TensorId, &HashMap<usize, usize>> =
                local.iter().map(|(&t, v)| (t, &v.offsets)).collect();
            let fetched_ptr = SyncPtr(fetched.as_mut_ptr());
            let tile_ptr = |t: TensorId, k: usize| -> *mut f64 {
                // SAFETY: offsets index this rank's buffers (owned tiles, or received ones).
                unsafe {
                    match offsets.get(&t).and_then(|o| o.get(&k)) {
                        Some(&off) => base[&t].0.add(off),
                        None => fetched_ptr.get().add(fetched_at[&(t, k)]),
                    }
                }
            };
            let flops = std::sync::atomic::AtomicU64::new(0);
            pool.parallel_for(mine.len(), opts.schedule, |i, _| {
                let (s, c, _) = mine[i];
                // SAFETY: a task writes only its own (owned) tile; the set reads no
                // tensor it writes.
                let (f, _) = unsafe { program.run_task(*s, c, &tile_ptr, &kernel) };
                flops.fetch_add(f as u64, std::sync::atomic::Ordering::Relaxed);
            });
            self.stats.flops += flops.load(std::sync::atomic::Ordering::Relaxed) as f64;
            drop(fetched);
            local.retain(|t, _| hir.tensors[*t].role != Role::Temporary || last_use.get(t).is_some_and(|&u| u > l));
        }
        self.stats.run_s = t0.elapsed().as_secs_f64();
        self.stats.peak_rss = peak_rss_bytes();
        Ok(())
    }

    /// The unit's outputs, whole, on rank 0 (`None` elsewhere): every rank sends
    /// its tiles (collective).
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
