//! [`Mixed`]: one communicator over several back ends of one world, choosing per
//! operation and message size from a [`TuningTable`] (MCR-DL's idea).
//!
//! **No deadlock when mixing.** Every rank must send a given collective to the same
//! back end, so the choice depends only on values every rank knows: the operation
//! and the *message size* — the bytes of the largest buffer of the call, which for
//! broadcast/reduce/all-reduce is the buffer, for all-gather(v) the gathered result
//! (`Σ counts`), for reduce-scatter the input (`Σ counts`), all of them equal on all
//! ranks. For all-to-all(v) each rank only knows its own send total, so when the
//! table's choice for all-to-all depends on the size, the ranks first agree on the
//! largest send total with a one-word all-reduce (counted like any message) on the
//! primary back end. Send/recv and barriers always use the primary back end (a
//! receiver cannot know the size of what it will receive). Each back end has its own
//! message space, so one back end never consumes another's messages.

use super::{Backend, Collective, CommStats, Communicator, ReduceOp, SharedCounter, Window, WindowMemory};
use crate::tune::TuningTable;

pub struct Mixed {
    comms: Vec<Box<dyn Communicator>>,
    table: TuningTable,
    /// Calls served by each back end, per operation (for tests and `--stats`).
    calls: std::cell::RefCell<std::collections::BTreeMap<(Collective, Backend), u64>>,
}

impl Mixed {
    /// `comms[0]` is the primary back end. All must span the same ranks.
    pub fn new(comms: Vec<Box<dyn Communicator>>, table: TuningTable) -> Mixed {
        assert!(!comms.is_empty(), "Mixed needs at least one back end");
        let (r, p) = (comms[0].rank(), comms[0].size());
        assert!(comms.iter().all(|c| c.rank() == r && c.size() == p), "back ends over different rank sets");
        Mixed { comms, table, calls: Default::default() }
    }
    pub fn table(&self) -> &TuningTable {
        &self.table
    }
    fn pick(&self, op: Collective, bytes: usize) -> &dyn Communicator {
        let want = self.table.choose(op, bytes as u64);
        let c = want.and_then(|b| self.comms.iter().find(|c| c.backend() == b)).unwrap_or(&self.comms[0]);
        *self.calls.borrow_mut().entry((op, c.backend())).or_default() += 1;
        c.as_ref()
    }
    /// How many calls of each operation each back end served.
    pub fn calls(&self) -> Vec<(Collective, Backend, u64)> {
        self.calls.borrow().iter().map(|(&(o, b), &n)| (o, b, n)).collect()
    }
    /// Statistics per back end.
    pub fn stats_by_backend(&self) -> Vec<(Backend, CommStats)> {
        self.comms.iter().map(|c| (c.backend(), c.stats())).collect()
    }
}

impl Communicator for Mixed {
    fn rank(&self) -> usize {
        self.comms[0].rank()
    }
    fn size(&self) -> usize {
        self.comms[0].size()
    }
    fn backend(&self) -> Backend {
        self.comms[0].backend()
    }
    fn stats(&self) -> CommStats {
        let mut s = CommStats::default();
        for c in &self.comms {
            s.add(&c.stats());
        }
        s
    }
    fn barrier(&self) {
        self.comms[0].barrier()
    }
    fn send(&self, dest: usize, tag: u32, data: &[f64]) {
        self.comms[0].send(dest, tag, data)
    }
    fn recv(&self, src: usize, tag: u32) -> Vec<f64> {
        self.comms[0].recv(src, tag)
    }
    fn broadcast(&self, buf: &mut [f64], root: usize) {
        self.pick(Collective::Broadcast, buf.len() * 8).broadcast(buf, root)
    }
    fn reduce(&self, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize) {
        self.pick(Collective::Reduce, send.len() * 8).reduce(send, recv, op, root)
    }
    fn allreduce(&self, buf: &mut [f64], op: ReduceOp) {
        self.pick(Collective::Allreduce, buf.len() * 8).allreduce(buf, op)
    }
    fn allgatherv(&self, send: &[f64], counts: &[usize], recv: &mut [f64]) {
        self.pick(Collective::Allgather, counts.iter().sum::<usize>() * 8).allgatherv(send, counts, recv)
    }
    fn reduce_scatter(&self, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp) {
        self.pick(Collective::ReduceScatter, counts.iter().sum::<usize>() * 8).reduce_scatter(send, counts, recv, op)
    }
    fn alltoallv(&self, send: &[f64], send_counts: &[usize], recv: &mut [f64], recv_counts: &[usize]) {
        let bytes = if self.table.depends_on_size(Collective::Alltoall) {
            let mut m = [send.len() as f64];
            self.comms[0].allreduce(&mut m, ReduceOp::Max);
            m[0] as usize * 8
        } else {
            send.len() * 8
        };
        self.pick(Collective::Alltoall, bytes).alltoallv(send, send_counts, recv, recv_counts)
    }
    /// The first back end with one-sided access (every rank's table lists the
    /// same back ends in the same order, so all pick the same).
    fn expose<'a>(&'a self, segments: &[&'a [f64]]) -> Option<Box<dyn Window + 'a>> {
        self.comms.iter().find_map(|c| c.expose(segments))
    }
    fn alloc_window_memory(&self, n: usize) -> Option<Box<dyn WindowMemory>> {
        self.comms.iter().find_map(|c| c.alloc_window_memory(n))
    }
    fn counter(&self) -> Box<dyn SharedCounter> {
        self.comms[0].counter()
    }
    fn counters(&self, n: usize) -> Vec<Box<dyn SharedCounter>> {
        self.comms[0].counters(n)
    }
}
