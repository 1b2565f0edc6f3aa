//! In-process ranks: the `threads` and `shm` back ends.
//!
//! [`run`] starts `n` ranks as threads of this process and hands each a [`Rank`],
//! from which it creates communicators (`rank.comm(Backend::Threads)`), in the same
//! order on every rank (like `MPI_Comm_dup`): the k-th communicator of every rank
//! shares one message space, so communicators never see each other's messages and
//! back ends can be mixed freely.
//!
//! **Failure.** When a rank panics, the world is *poisoned*: every rank blocked in (or
//! later entering) a receive, a barrier or a collective panics with [`Aborted`], and
//! [`run`] returns the first real failure as a [`RankFailure`]. Waits poll the
//! poison flag every few milliseconds, so nothing hangs.

use super::{algo, displs, Backend, CommStats, Communicator, ReduceOp, SharedCounter, Window};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The panic payload of a rank that stopped because another rank failed.
#[derive(Debug, Clone, Copy)]
pub struct Aborted;

/// The first rank that failed and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFailure {
    pub rank: usize,
    pub message: String,
    /// The ranks could not all be started: a count outside `1..=MAX_RANKS`, or a
    /// rank's thread that could not be created (`rank` is its number).
    pub not_started: bool,
}

impl std::fmt::Display for RankFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.not_started {
            write!(f, "{}", self.message)
        } else {
            write!(f, "rank {} failed: {}", self.rank, self.message)
        }
    }
}

impl std::error::Error for RankFailure {}

const POLL: Duration = Duration::from_millis(5);

enum Context {
    Mail(Arc<Vec<Mailbox>>),
    Board(Arc<Board>),
    Counter(Arc<AtomicU64>),
}

struct Shared {
    size: usize,
    failed: AtomicBool,
    failure: Mutex<Option<RankFailure>>,
    contexts: Mutex<HashMap<(u64, u64), Context>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A rank that panicked while holding a lock leaves it poisoned; the data (a
    // queue, a slot) is still consistent, and the world is aborting anyway.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn check(&self) {
        if self.failed.load(Ordering::SeqCst) {
            std::panic::panic_any(Aborted);
        }
    }
    fn fail(&self, rank: usize, message: String) {
        self.fail_as(rank, message, false)
    }
    fn fail_as(&self, rank: usize, message: String, not_started: bool) {
        let mut f = lock(&self.failure);
        if f.is_none() {
            *f = Some(RankFailure { rank, message, not_started });
        }
        self.failed.store(true, Ordering::SeqCst);
    }
    /// The context `(comm, k)`, created by the first rank that asks.
    fn context<T>(&self, key: (u64, u64), make: impl FnOnce() -> Context, get: impl Fn(&Context) -> Option<T>) -> T {
        let mut map = lock(&self.contexts);
        let c = map.entry(key).or_insert_with(make);
        get(c).expect("ranks created communicators in different orders")
    }
}

/// One rank's entry point to the in-process world.
pub struct Rank {
    rank: usize,
    shared: Arc<Shared>,
    next_comm: Cell<u64>,
}

impl Rank {
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.shared.size
    }
    /// A new communicator over all ranks (collective: same order on every rank).
    /// `Backend::Threads` or `Backend::Shm`; panics for other back ends.
    pub fn comm(&self, backend: Backend) -> Box<dyn Communicator> {
        let id = self.next_comm.get();
        self.next_comm.set(id + 1);
        let n = self.shared.size;
        let base = Base {
            rank: self.rank,
            id,
            shared: self.shared.clone(),
            stats: Cell::new(CommStats::default()),
            counters: Cell::new(0),
        };
        match backend {
            Backend::Threads => {
                let boxes = self.shared.context(
                    (id, u64::MAX),
                    || Context::Mail(Arc::new((0..n).map(|_| Mailbox::default()).collect())),
                    |c| if let Context::Mail(m) = c { Some(m.clone()) } else { None },
                );
                Box::new(ThreadComm { base, boxes })
            }
            Backend::Shm => {
                let board = self.shared.context(
                    (id, u64::MAX),
                    || Context::Board(Arc::new(Board::new(n))),
                    |c| if let Context::Board(b) = c { Some(b.clone()) } else { None },
                );
                Box::new(ShmComm { base, board })
            }
            other => panic!("the in-process world has no `{other}` back end (use threads or shm)"),
        }
    }
    /// Marks the world failed (as a panic would) — for callers that catch errors.
    pub fn abort(&self, message: &str) -> ! {
        self.shared.fail(self.rank, message.to_string());
        std::panic::panic_any(Aborted)
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// The most in-process ranks [`run`] starts: each rank is a thread, and its
/// mailboxes and boards grow with the square of the count.
pub const MAX_RANKS: usize = 4096;

/// The communicator of a world of one rank, for a caller that runs alone in its
/// process (the Python package's tiled programs): every collective is local.
pub fn solo(backend: Backend) -> Box<dyn Communicator> {
    let shared = Arc::new(Shared {
        size: 1,
        failed: AtomicBool::new(false),
        failure: Mutex::new(None),
        contexts: Mutex::new(HashMap::new()),
    });
    Rank { rank: 0, shared, next_comm: Cell::new(0) }.comm(backend)
}

/// Runs `f` on `n` in-process ranks and returns each rank's result, or the first
/// rank failure (every other rank is aborted, never left waiting). `n` must be in
/// `1..=MAX_RANKS`; outside it, or when a rank's thread cannot be created (process
/// or memory limits), the failure is returned before or instead of running `f`
/// (ranks already started are aborted).
pub fn run<R: Send>(n: usize, f: impl Fn(&Rank) -> R + Sync) -> Result<Vec<R>, RankFailure> {
    if n == 0 || n > MAX_RANKS {
        return Err(RankFailure {
            rank: 0,
            message: format!("{n} in-process ranks: the number of ranks must be between 1 and {MAX_RANKS}"),
            not_started: true,
        });
    }
    let shared = Arc::new(Shared {
        size: n,
        failed: AtomicBool::new(false),
        failure: Mutex::new(None),
        contexts: Mutex::new(HashMap::new()),
    });
    let results: Vec<Option<R>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(n);
        for r in 0..n {
            let shared2 = shared.clone();
            let f = &f;
            let spawned = std::thread::Builder::new().name(format!("rank-{r}")).spawn_scoped(s, move || {
                let shared = shared2;
                let rank = Rank { rank: r, shared: shared.clone(), next_comm: Cell::new(0) };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&rank))) {
                    Ok(v) => Some(v),
                    Err(p) => {
                        if p.downcast_ref::<Aborted>().is_none() {
                            shared.fail(r, panic_message(p.as_ref()));
                        } else {
                            // Aborted without a recorded failure: Rank::abort set it.
                            shared.failed.store(true, Ordering::SeqCst);
                        }
                        None
                    }
                }
            });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // The ranks already started see the poisoned world at their next
                    // wait and stop; none waits for the ranks never created.
                    shared.fail_as(r, format!("cannot create the thread of rank {r} of {n}: {e}"), true);
                    break;
                }
            }
        }
        handles.into_iter().map(|h| h.join().unwrap_or(None)).collect()
    });
    if let Some(f) = lock(&shared.failure).clone() {
        return Err(f);
    }
    Ok(results.into_iter().map(|r| r.expect("a rank without result records a failure")).collect())
}

/// What every in-process communicator has.
struct Base {
    rank: usize,
    id: u64,
    shared: Arc<Shared>,
    stats: Cell<CommStats>,
    counters: Cell<u64>,
}

impl Base {
    fn count_sent(&self, words: usize) {
        let mut s = self.stats.get();
        s.sent(words);
        self.stats.set(s);
    }
    fn count_received(&self, words: usize) {
        let mut s = self.stats.get();
        s.received(words);
        self.stats.set(s);
    }
    fn stats(&self) -> CommStats {
        let mut s = self.stats.get();
        s.counter_ops = 0;
        s
    }
    fn counter(&self) -> Box<dyn SharedCounter> {
        let k = self.counters.get();
        self.counters.set(k + 1);
        let c = self.shared.context(
            (self.id, k),
            || Context::Counter(Arc::new(AtomicU64::new(0))),
            |c| if let Context::Counter(a) = c { Some(a.clone()) } else { None },
        );
        Box::new(AtomicCounter { value: c, ops: Cell::new(0), shared: self.shared.clone() })
    }
}

struct AtomicCounter {
    value: Arc<AtomicU64>,
    ops: Cell<u64>,
    shared: Arc<Shared>,
}

impl SharedCounter for AtomicCounter {
    fn fetch_add(&self, n: u64) -> u64 {
        self.shared.check();
        self.ops.set(self.ops.get() + 1);
        self.value.fetch_add(n, Ordering::SeqCst)
    }
    fn ops(&self) -> u64 {
        self.ops.get()
    }
}

// ---------------------------------------------------------------------------------
// `threads`: mailboxes
// ---------------------------------------------------------------------------------

#[derive(Default)]
struct Mailbox {
    queue: Mutex<VecDeque<(usize, u32, Vec<f64>)>>,
    ready: Condvar,
}

/// The `threads` back end: point-to-point messages through per-rank mailboxes,
/// collectives from [`algo`].
pub struct ThreadComm {
    base: Base,
    boxes: Arc<Vec<Mailbox>>,
}

impl algo::Transport for ThreadComm {
    fn rank(&self) -> usize {
        self.base.rank
    }
    fn size(&self) -> usize {
        self.base.shared.size
    }
    fn send(&self, dest: usize, tag: u32, data: &[f64]) {
        self.base.shared.check();
        assert!(dest < self.boxes.len(), "send to rank {dest} of {}", self.boxes.len());
        let mb = &self.boxes[dest];
        lock(&mb.queue).push_back((self.base.rank, tag, data.to_vec()));
        mb.ready.notify_all();
        self.base.count_sent(data.len());
    }
    fn recv(&self, src: usize, tag: u32) -> Vec<f64> {
        let mb = &self.boxes[self.base.rank];
        let mut q = lock(&mb.queue);
        loop {
            if let Some(pos) = q.iter().position(|m| m.0 == src && m.1 == tag) {
                let (_, _, data) = q.remove(pos).expect("position is in range");
                drop(q);
                self.base.count_received(data.len());
                return data;
            }
            self.base.shared.check();
            q = mb.ready.wait_timeout(q, POLL).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
    fn sendrecv(&self, dest: usize, data: &[f64], src: usize, tag: u32) -> Vec<f64> {
        algo::Transport::send(self, dest, tag, data);
        algo::Transport::recv(self, src, tag)
    }
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.base.rank
    }
    fn size(&self) -> usize {
        self.base.shared.size
    }
    fn backend(&self) -> Backend {
        Backend::Threads
    }
    fn stats(&self) -> CommStats {
        self.base.stats()
    }
    fn barrier(&self) {
        algo::barrier(self)
    }
    fn send(&self, dest: usize, tag: u32, data: &[f64]) {
        assert!(tag < super::MAX_USER_TAG, "tag {tag} is reserved");
        algo::Transport::send(self, dest, tag, data)
    }
    fn recv(&self, src: usize, tag: u32) -> Vec<f64> {
        algo::Transport::recv(self, src, tag)
    }
    fn broadcast(&self, buf: &mut [f64], root: usize) {
        algo::broadcast(self, buf, root)
    }
    fn reduce(&self, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize) {
        algo::reduce(self, send, recv, op, root)
    }
    fn allreduce(&self, buf: &mut [f64], op: ReduceOp) {
        algo::allreduce(self, buf, op)
    }
    fn allgatherv(&self, send: &[f64], counts: &[usize], recv: &mut [f64]) {
        algo::allgatherv(self, send, counts, recv)
    }
    fn reduce_scatter(&self, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp) {
        algo::reduce_scatter(self, send, counts, recv, op)
    }
    fn alltoallv(&self, send: &[f64], send_counts: &[usize], recv: &mut [f64], recv_counts: &[usize]) {
        algo::alltoallv(self, send, send_counts, recv, recv_counts)
    }
    fn counter(&self) -> Box<dyn SharedCounter> {
        self.base.counter()
    }
}

// ---------------------------------------------------------------------------------
// `shm`: a shared board
// ---------------------------------------------------------------------------------

/// A barrier that gives up (panics with [`Aborted`]) when the world is poisoned.
struct PoisonBarrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl PoisonBarrier {
    fn wait(&self, shared: &Shared) {
        let mut st = lock(&self.state);
        let gen = st.1;
        st.0 += 1;
        if st.0 == self.n {
            st.0 = 0;
            st.1 += 1;
            self.cv.notify_all();
            return;
        }
        while st.1 == gen {
            if shared.failed.load(Ordering::SeqCst) {
                drop(st);
                std::panic::panic_any(Aborted);
            }
            st = self.cv.wait_timeout(st, POLL).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// What one rank publishes: a buffer and its block lengths.
type Published = Arc<(Vec<f64>, Vec<usize>)>;

/// Every rank publishes a buffer (and block lengths) in its slot; between two
/// barriers the others read it directly.
struct Board {
    slots: Vec<Mutex<Option<Published>>>,
    barrier: PoisonBarrier,
    /// Point-to-point messages (send/recv are rare on this back end).
    boxes: Vec<Mailbox>,
    /// Per rank, the segments of its open window ([`Communicator::expose`]):
    /// address and length.
    windows: Vec<Mutex<Vec<(usize, usize)>>>,
}

impl Board {
    fn new(n: usize) -> Board {
        Board {
            slots: (0..n).map(|_| Mutex::new(None)).collect(),
            barrier: PoisonBarrier { n, state: Mutex::new((0, 0)), cv: Condvar::new() },
            boxes: (0..n).map(|_| Mailbox::default()).collect(),
            windows: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }
}

/// The `shm` back end: flat collectives over a shared board (publish, barrier, read,
/// barrier); reductions combine contributions in rank order.
pub struct ShmComm {
    base: Base,
    board: Arc<Board>,
}

impl ShmComm {
    fn sync(&self) {
        self.board.barrier.wait(&self.base.shared)
    }
    fn publish(&self, data: Vec<f64>, counts: Vec<usize>) {
        *lock(&self.board.slots[self.base.rank]) = Some(Arc::new((data, counts)));
    }
    fn slot(&self, q: usize) -> Published {
        lock(&self.board.slots[q]).clone().expect("a rank published before the barrier")
    }
    /// Publish, wait, `read`, wait, clear.
    fn exchange<T>(&self, data: Vec<f64>, counts: Vec<usize>, read: impl FnOnce() -> T) -> T {
        self.base.shared.check();
        self.publish(data, counts);
        self.sync();
        let v = read();
        self.sync();
        v
    }
    /// Counts a flat transfer of `words` to each of `receivers` ranks.
    fn count_flat(&self, words: usize, receivers: usize) {
        for _ in 0..receivers {
            self.base.count_sent(words);
        }
    }
}

impl Communicator for ShmComm {
    fn rank(&self) -> usize {
        self.base.rank
    }
    fn size(&self) -> usize {
        self.base.shared.size
    }
    fn backend(&self) -> Backend {
        Backend::Shm
    }
    fn stats(&self) -> CommStats {
        self.base.stats()
    }
    fn barrier(&self) {
        self.base.shared.check();
        self.sync()
    }
    fn send(&self, dest: usize, tag: u32, data: &[f64]) {
        self.base.shared.check();
        let mb = &self.board.boxes[dest];
        lock(&mb.queue).push_back((self.base.rank, tag, data.to_vec()));
        mb.ready.notify_all();
        self.base.count_sent(data.len());
    }
    fn recv(&self, src: usize, tag: u32) -> Vec<f64> {
        let mb = &self.board.boxes[self.base.rank];
        let mut q = lock(&mb.queue);
        loop {
            if let Some(pos) = q.iter().position(|m| m.0 == src && m.1 == tag) {
                let data = q.remove(pos).expect("in range").2;
                self.base.count_received(data.len());
                return data;
            }
            self.base.shared.check();
            q = mb.ready.wait_timeout(q, POLL).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
    fn broadcast(&self, buf: &mut [f64], root: usize) {
        let p = self.size();
        let me = self.base.rank;
        let data = if me == root { buf.to_vec() } else { Vec::new() };
        if me == root {
            self.count_flat(buf.len(), p - 1);
        }
        self.exchange(data, vec![], || {
            if me != root {
                let s = self.slot(root);
                assert_eq!(s.0.len(), buf.len(), "broadcast: ranks disagree on the length");
                buf.copy_from_slice(&s.0);
                self.base.count_received(buf.len());
            }
        })
    }
    fn reduce(&self, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize) {
        let me = self.base.rank;
        if me != root {
            self.count_flat(send.len(), 1);
        }
        self.exchange(send.to_vec(), vec![], || {
            if me == root {
                let mut acc = self.slot(0).0.clone();
                for q in 1..self.size() {
                    op.combine(&mut acc, &self.slot(q).0);
                }
                for _ in 1..self.size() {
                    self.base.count_received(send.len());
                }
                recv.copy_from_slice(&acc);
            }
        })
    }
    fn allreduce(&self, buf: &mut [f64], op: ReduceOp) {
        self.count_flat(buf.len(), self.size() - 1);
        let data = buf.to_vec();
        self.exchange(data, vec![], || {
            let first = self.slot(0);
            buf.copy_from_slice(&first.0);
            for q in 1..self.size() {
                op.combine(buf, &self.slot(q).0);
                self.base.count_received(buf.len());
            }
        })
    }
    fn allgatherv(&self, send: &[f64], counts: &[usize], recv: &mut [f64]) {
        let d = displs(counts);
        assert_eq!(send.len(), counts[self.base.rank], "allgatherv: own block length");
        assert_eq!(recv.len(), counts.iter().sum::<usize>(), "allgatherv: receive buffer length");
        self.count_flat(send.len(), self.size() - 1);
        self.exchange(send.to_vec(), vec![], || {
            for q in 0..self.size() {
                let s = self.slot(q);
                assert_eq!(s.0.len(), counts[q], "allgatherv: rank {q} sent a block of another length");
                recv[d[q]..d[q] + counts[q]].copy_from_slice(&s.0);
                if q != self.base.rank {
                    self.base.count_received(counts[q]);
                }
            }
        })
    }
    fn reduce_scatter(&self, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp) {
        let me = self.base.rank;
        let d = displs(counts);
        for (q, &c) in counts.iter().enumerate() {
            if q != me {
                self.base.count_sent(c);
            }
        }
        self.exchange(send.to_vec(), vec![], || {
            let (lo, hi) = (d[me], d[me] + counts[me]);
            recv.copy_from_slice(&self.slot(0).0[lo..hi]);
            for q in 1..self.size() {
                op.combine(recv, &self.slot(q).0[lo..hi]);
            }
            for _ in 1..self.size() {
                self.base.count_received(hi - lo);
            }
        })
    }
    fn alltoallv(&self, send: &[f64], send_counts: &[usize], recv: &mut [f64], recv_counts: &[usize]) {
        let me = self.base.rank;
        for (q, &c) in send_counts.iter().enumerate() {
            if q != me {
                self.base.count_sent(c);
            }
        }
        let rd = displs(recv_counts);
        self.exchange(send.to_vec(), send_counts.to_vec(), || {
            for q in 0..self.size() {
                let s = self.slot(q);
                let sd = displs(&s.1);
                assert_eq!(
                    s.1[me], recv_counts[q],
                    "alltoallv: rank {q} sends {} words, {me} expects {}",
                    s.1[me], recv_counts[q]
                );
                recv[rd[q]..rd[q] + recv_counts[q]].copy_from_slice(&s.0[sd[me]..sd[me] + s.1[me]]);
                if q != me {
                    self.base.count_received(recv_counts[q]);
                }
            }
        })
    }
    fn counter(&self) -> Box<dyn SharedCounter> {
        self.base.counter()
    }
    fn expose<'a>(&'a self, segments: &[&'a [f64]]) -> Option<Box<dyn Window + 'a>> {
        self.base.shared.check();
        let me = self.base.rank;
        *lock(&self.board.windows[me]) = segments.iter().map(|s| (s.as_ptr() as usize, s.len())).collect();
        self.sync();
        // No rank publishes again before every rank has closed this window.
        let all: Vec<Vec<(usize, usize)>> = (0..self.size()).map(|q| lock(&self.board.windows[q]).clone()).collect();
        if let Some(q) = all.iter().position(|w| w.len() != segments.len()) {
            panic!("expose: rank {q} exposed {} segments, rank {me} {}", all[q].len(), segments.len());
        }
        Some(Box::new(ShmWindow { comm: self, all }))
    }
}

/// An open window of the `shm` back end: every rank's segments by address.
struct ShmWindow<'a> {
    comm: &'a ShmComm,
    all: Vec<Vec<(usize, usize)>>,
}

impl Window for ShmWindow<'_> {
    fn get(&self, target: usize, segment: usize, offset: usize, dst: &mut [f64]) {
        let (addr, len) = self.all[target][segment];
        assert!(
            offset.checked_add(dst.len()).is_some_and(|end| end <= len),
            "get: words {offset}..{} of a segment of {len} (rank {target}, segment {segment})",
            offset.saturating_add(dst.len())
        );
        if !dst.is_empty() {
            // SAFETY: rank `target` exposed `len` words at `addr` and writes none of them
            // until every rank has closed the window (`close` waits for all).
            let src = unsafe { std::slice::from_raw_parts((addr as *const f64).add(offset), dst.len()) };
            dst.copy_from_slice(src);
        }
        if target != self.comm.base.rank {
            let mut s = self.comm.base.stats.get();
            s.got(dst.len());
            self.comm.base.stats.set(s);
        }
    }
    fn segment_in_place(&self, target: usize, segment: usize) -> Option<(*const f64, usize)> {
        // One address space: every rank's segment can be read where it lies.
        self.all.get(target)?.get(segment).map(|&(addr, len)| (addr as *const f64, len))
    }
    fn count_in_place(&self, target: usize, words: usize) {
        if target != self.comm.base.rank {
            let mut s = self.comm.base.stats.get();
            s.got(words);
            self.comm.base.stats.set(s);
        }
    }
    fn close(self: Box<Self>) {
        self.comm.base.shared.check();
        self.comm.sync();
    }
}
