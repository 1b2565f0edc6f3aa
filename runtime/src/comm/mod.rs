//! Collectives with several back ends (MCR-DL style).
//!
//! A [`Communicator`] is one rank's view of a group of `size()` ranks. Every back end
//! implements the same operations on `f64` buffers (a *word* is one `f64`):
//! broadcast, reduce, all-reduce, all-gather(v), reduce-scatter, all-to-all(v),
//! send/recv, barrier, and a shared task counter (the NXTVAL idea, see
//! [`SharedCounter`]). Back ends:
//!
//! * `threads` ([`threads`]): in-process ranks (std threads) exchanging messages
//!   through mailboxes; collectives are the point-to-point algorithms of [`algo`]
//!   (binomial trees, rings, pairwise exchange). Needs nothing installed.
//! * `shm` ([`threads`]): the same in-process ranks, but collectives read each
//!   other's buffers directly from a shared board between two barriers (flat
//!   algorithms, one copy).
//! * `mpi` and `mpi-p2p` (cargo feature `mpi`, [`mpi`]): MPI processes; `mpi` calls
//!   MPI's own collectives, `mpi-p2p` runs the algorithms of [`algo`] over MPI
//!   send/recv.
//! * `nccl` (cargo feature `nccl`, [`nccl`]): NVIDIA NCCL on one GPU per rank,
//!   staging the host buffers through device memory; tested on one GPU so far.
//!
//! [`mixed::Mixed`] dispatches each operation, by message size, to the back end a
//! tuning table ([`crate::tune`]) chose.
//!
//! **Determinism.** Every reduction combines contributions in an order fixed by the
//! ranks and the message size alone (rank order for the flat back ends, a fixed
//! binomial tree for the point-to-point ones), so results are bit-identical from run
//! to run, and every rank of an all-reduce gets the same bits.
//!
//! **Counting.** Each communicator counts the words and messages it sends
//! ([`CommStats`]). The point-to-point back ends count exactly what they send; the
//! flat ones (`shm`, native `mpi`), whose transfers are reads by the receiver or
//! internal to MPI, count the flat algorithm's messages: one message per (sender,
//! receiver) pair that must move data, carrying the words the receiver needs.

pub mod algo;
pub mod check;
pub mod mixed;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod nccl;
pub mod threads;

use std::fmt;

/// An element-wise reduction. Combination order is fixed (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    /// `acc[i] = acc[i] ⊕ x[i]`.
    pub fn combine(self, acc: &mut [f64], x: &[f64]) {
        assert_eq!(acc.len(), x.len(), "reduction over buffers of different lengths");
        match self {
            ReduceOp::Sum => acc.iter_mut().zip(x).for_each(|(a, b)| *a += b),
            ReduceOp::Max => acc.iter_mut().zip(x).for_each(|(a, b)| *a = a.max(*b)),
            ReduceOp::Min => acc.iter_mut().zip(x).for_each(|(a, b)| *a = a.min(*b)),
        }
    }
}

/// The operations a tuning table chooses a back end for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    Broadcast,
    Reduce,
    Allreduce,
    Allgather,
    ReduceScatter,
    Alltoall,
}

impl Collective {
    pub const ALL: [Collective; 6] = [
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Allreduce,
        Collective::Allgather,
        Collective::ReduceScatter,
        Collective::Alltoall,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Allreduce => "allreduce",
            Collective::Allgather => "allgather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Alltoall => "alltoall",
        }
    }
}

/// A back end, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Backend {
    /// In-process ranks, point-to-point mailboxes.
    #[serde(rename = "threads")]
    Threads,
    /// In-process ranks, shared-memory board.
    #[serde(rename = "shm")]
    Shm,
    /// MPI's own collectives.
    #[serde(rename = "mpi")]
    Mpi,
    /// The point-to-point algorithms over MPI send/recv.
    #[serde(rename = "mpi-p2p")]
    MpiP2p,
    /// NVIDIA NCCL, one GPU per rank (cargo feature `nccl`).
    #[serde(rename = "nccl")]
    Nccl,
}

impl Backend {
    pub const ALL: [Backend; 5] = [Backend::Threads, Backend::Shm, Backend::Mpi, Backend::MpiP2p, Backend::Nccl];
    pub fn name(self) -> &'static str {
        match self {
            Backend::Threads => "threads",
            Backend::Shm => "shm",
            Backend::Mpi => "mpi",
            Backend::MpiP2p => "mpi-p2p",
            Backend::Nccl => "nccl",
        }
    }
    pub fn from_name(s: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == s)
    }
    /// Whether this build has the back end: `Err` names the cargo feature it needs
    /// (a machine may still lack the library or device; the constructors say so).
    pub fn available(self) -> Result<(), String> {
        match self {
            Backend::Threads | Backend::Shm => Ok(()),
            Backend::Mpi | Backend::MpiP2p if cfg!(feature = "mpi") => Ok(()),
            Backend::Mpi | Backend::MpiP2p => {
                Err(format!("this build has no `{self}` back end (rebuild with `--features mpi`)"))
            }
            Backend::Nccl if cfg!(feature = "nccl") => Ok(()),
            Backend::Nccl => Err(nccl::NOT_BUILT.into()),
        }
    }
    /// The world the back end's ranks live in: back ends of one world can be mixed.
    pub fn world(self) -> World {
        match self {
            Backend::Threads | Backend::Shm => World::Threads,
            Backend::Mpi | Backend::MpiP2p => World::Mpi,
            Backend::Nccl => World::Nccl,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where ranks live. A program's ranks are all threads of one process or all MPI
/// processes; only back ends of that world can serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum World {
    Threads,
    Mpi,
    Nccl,
}

impl World {
    pub fn backends(self) -> &'static [Backend] {
        match self {
            World::Threads => &[Backend::Threads, Backend::Shm],
            World::Mpi => &[Backend::Mpi, Backend::MpiP2p],
            World::Nccl => &[Backend::Nccl],
        }
    }
}

/// What one rank sent (and received) through a communicator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CommStats {
    /// `f64` elements sent.
    pub words_sent: u64,
    /// Messages sent (a zero-length message counts).
    pub messages_sent: u64,
    pub words_received: u64,
    pub messages_received: u64,
    /// Operations on shared counters (task claims).
    pub counter_ops: u64,
    /// `f64` elements this rank read from other ranks' windows ([`Window::get`]),
    /// and how many reads.
    pub words_got: u64,
    pub gets: u64,
}

impl CommStats {
    pub fn add(&mut self, o: &CommStats) {
        self.words_sent += o.words_sent;
        self.messages_sent += o.messages_sent;
        self.words_received += o.words_received;
        self.messages_received += o.messages_received;
        self.counter_ops += o.counter_ops;
        self.words_got += o.words_got;
        self.gets += o.gets;
    }
    pub(crate) fn sent(&mut self, words: usize) {
        self.words_sent += words as u64;
        self.messages_sent += 1;
    }
    pub(crate) fn got(&mut self, words: usize) {
        self.words_got += words as u64;
        self.gets += 1;
    }
    pub(crate) fn received(&mut self, words: usize) {
        self.words_received += words as u64;
        self.messages_received += 1;
    }
}

/// A counter shared by all ranks of a communicator (MPI: an RMA window on rank 0
/// updated with `MPI_Fetch_and_op`; threads: an atomic). Used to claim tasks
/// dynamically so ranks with uneven work finish together.
pub trait SharedCounter {
    /// Adds `n` and returns the previous value (atomic across ranks).
    fn fetch_add(&self, n: u64) -> u64;
    /// How many `fetch_add` calls this rank made.
    fn ops(&self) -> u64;
}

/// One-sided reads of the segments every rank exposed ([`Communicator::expose`];
/// MPI: one `MPI_Win_create` window per segment, read with `MPI_Get` in a
/// passive-target epoch; in-process ranks: the segments' addresses on a shared
/// board, read with a copy). The reading rank does all the work; the owner of
/// the memory takes no part, so reads need not be matched by sends (the tiled
/// executor fetches each piece's operand tiles when it needs them).
pub trait Window {
    /// Copies words `offset..offset + dst.len()` of segment `segment` of rank
    /// `target` into `dst`; complete when it returns. Panics (a rank failure) on
    /// a range outside the segment.
    fn get(&self, target: usize, segment: usize, offset: usize, dst: &mut [f64]);
    /// Every read of `reads`, complete when it returns. MPI issues them all
    /// before waiting once per window, so a batch costs about one round trip,
    /// not one per read.
    fn get_many(&self, reads: &mut [Read<'_>]) {
        for r in reads {
            self.get(r.target, r.segment, r.offset, r.dst);
        }
    }
    /// Lets the library serve the other ranks' reads of this rank's segments
    /// where it needs the owner's help: Open MPI's `pt2pt` one-sided component
    /// (windows made of messages, where memory cannot be read directly) answers
    /// a get only while the owner is inside MPI. A rank with nothing to read
    /// calls this now and then instead of blocking outside MPI.
    fn progress(&self) {}
    /// Rank `target`'s segment `segment` where this process can load it in
    /// place, without a copy: its address and length in words. In-process ranks
    /// share one address space; MPI ranks on one node share memory when their
    /// tiles come from `MPI_Win_allocate_shared`. The words stay valid and
    /// unchanged until the window is closed. `None`: read it with [`Self::get`].
    fn segment_in_place(&self, target: usize, segment: usize) -> Option<(*const f64, usize)> {
        let _ = (target, segment);
        None
    }
    /// Counts `words` of rank `target` read in place as read (what a get of them
    /// would have counted), so words moved stay comparable with the plan.
    fn count_in_place(&self, target: usize, words: usize) {
        let _ = (target, words);
    }
    /// Ends the exposure (collective): returns once every rank has closed, so no
    /// rank reads a segment after its owner goes on to change it.
    fn close(self: Box<Self>);
}

/// Memory from [`Communicator::alloc_window_memory`]; dropping it frees it
/// (collective).
pub trait WindowMemory: Send + Sync {
    fn as_slice(&self) -> &[f64];
    fn as_mut_slice(&mut self) -> &mut [f64];
}

/// One read of [`Window::get_many`]: words `offset..offset + dst.len()` of
/// segment `segment` of rank `target`.
pub struct Read<'a> {
    pub target: usize,
    pub segment: usize,
    pub offset: usize,
    pub dst: &'a mut [f64],
}

/// A tag reserved for a communicator's own collectives; user tags must be below it.
pub const MAX_USER_TAG: u32 = 1 << 20;

/// One rank's handle on a group of ranks. All methods except `send`/`recv`/
/// `rank`/`size`/`stats` are collective: every rank of the group calls them in the
/// same order with compatible arguments (same lengths, same root, same counts).
///
/// A rank that fails (panics) makes every other rank's pending and later calls fail
/// too (the threads back ends panic with a message naming the failure; MPI aborts
/// the job), so a failure never becomes a hang.
pub trait Communicator {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn backend(&self) -> Backend;
    /// Words and messages sent so far by this rank.
    fn stats(&self) -> CommStats;
    fn barrier(&self);
    /// Sends `data` to `dest` (never blocks for the threads back ends).
    fn send(&self, dest: usize, tag: u32, data: &[f64]);
    /// Receives the next message from `src` with `tag` (messages between two ranks
    /// with one tag arrive in order).
    fn recv(&self, src: usize, tag: u32) -> Vec<f64>;
    /// `buf` on `root` is copied to every rank's `buf` (same length everywhere).
    fn broadcast(&self, buf: &mut [f64], root: usize);
    /// `recv` on `root` becomes the element-wise reduction of every rank's `send`;
    /// `recv` is not touched on other ranks (pass an empty slice there).
    fn reduce(&self, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize);
    /// Every rank's `buf` becomes the reduction of all ranks' `buf`.
    fn allreduce(&self, buf: &mut [f64], op: ReduceOp);
    /// `recv` (length `Σ counts`) gets rank `r`'s `send` (length `counts[r]`) at
    /// offset `Σ_{q<r} counts[q]`.
    fn allgatherv(&self, send: &[f64], counts: &[usize], recv: &mut [f64]);
    /// The reduction of every rank's `send` (length `Σ counts`), of which rank `r`
    /// keeps the block `r` (length `counts[r]`) in `recv`.
    fn reduce_scatter(&self, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp);
    /// Block `q` of `send` (length `send_counts[q]`) goes to rank `q`; block `q` of
    /// `recv` (length `recv_counts[q]`) comes from rank `q`.
    fn alltoallv(&self, send: &[f64], send_counts: &[usize], recv: &mut [f64], recv_counts: &[usize]);
    /// A new shared counter starting at 0 (collective).
    fn counter(&self) -> Box<dyn SharedCounter>;
    /// `n` new shared counters starting at 0 (collective): as [`Communicator::counter`]
    /// `n` times, which a back end may do with one collective (MPI: one window).
    fn counters(&self, n: usize) -> Vec<Box<dyn SharedCounter>> {
        (0..n).map(|_| self.counter()).collect()
    }
    /// Exposes this rank's `segments` to one-sided reads by every rank of the
    /// group (collective: every rank passes the same number of segments, in the
    /// same order; lengths may differ). Returns once every rank has exposed its
    /// segments, so what each wrote before is visible to the others. `None` where
    /// the back end has no one-sided access (`threads`, `nccl`): use collectives.
    ///
    /// Until [`Window::close`], no rank may write an exposed segment.
    fn expose<'a>(&'a self, segments: &[&'a [f64]]) -> Option<Box<dyn Window + 'a>> {
        let _ = segments;
        None
    }
    /// `n` zeroed words that later [`Communicator::expose`] calls expose without
    /// making a window each time, and that one-sided reads reach without the
    /// owner's help where the library can (MPI: `MPI_Win_allocate`, in a
    /// passive-target epoch while it lives; Open MPI's `osc sm` then reads it
    /// with loads on one node). Collective: every rank asks, in the same order,
    /// and drops what it got in the same order too. `None` where the back end
    /// has no such memory, or could not allocate it on every rank.
    fn alloc_window_memory(&self, n: usize) -> Option<Box<dyn WindowMemory>> {
        let _ = n;
        None
    }

    /// Every rank contributes `send` (same length everywhere).
    fn allgather(&self, send: &[f64], recv: &mut [f64]) {
        let counts = vec![send.len(); self.size()];
        self.allgatherv(send, &counts, recv)
    }
    /// Equal blocks of `send.len() / size()` words to every rank.
    fn alltoall(&self, send: &[f64], recv: &mut [f64]) {
        let p = self.size();
        assert_eq!(send.len() % p, 0, "alltoall: buffer length {} is not a multiple of {p}", send.len());
        let counts = vec![send.len() / p; p];
        self.alltoallv(send, &counts, recv, &counts)
    }
}

/// Offsets (exclusive prefix sums) of block lengths.
pub fn displs(counts: &[usize]) -> Vec<usize> {
    let mut d = Vec::with_capacity(counts.len());
    let mut acc = 0;
    for &c in counts {
        d.push(acc);
        acc += c;
    }
    d
}

#[cfg(test)]
mod tests;
