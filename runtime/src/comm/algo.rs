//! Collectives built from point-to-point messages, shared by the `threads` and
//! `mpi-p2p` back ends. Each algorithm's message count per rank is documented, and
//! the word and message counters are incremented by the transport's `send`, so the
//! statistics are exact.
//!
//! | operation | algorithm | messages sent by rank r (p ranks, n words) |
//! |---|---|---|
//! | broadcast | binomial tree from the root | its children in the tree (root: ⌈log₂ p⌉) |
//! | reduce | binomial tree to the root, fixed combine order | 1 (non-root), 0 (root) |
//! | allreduce | reduce to 0, then broadcast from 0 | both of the above |
//! | allgatherv | ring, p − 1 steps | p − 1 |
//! | reduce-scatter | reduce to 0, then 0 sends block q to q | reduce, plus p − 1 at rank 0 |
//! | reduce-scatter (ring) | ring, p − 1 steps | p − 1 |
//! | reduce (direct) | every rank sends to the root | 1 (non-root), 0 (root) |
//! | alltoallv | pairwise exchange, p − 1 steps | p − 1 |
//!
//! [`Group`] runs them over some of a communicator's ranks (a fibre of a processor
//! grid, say), with the communicator's point-to-point messages.

use super::{displs, Communicator, ReduceOp, MAX_USER_TAG};

/// What the algorithms need from a back end.
pub trait Transport {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn send(&self, dest: usize, tag: u32, data: &[f64]);
    fn recv(&self, src: usize, tag: u32) -> Vec<f64>;
    /// Sends to `dest` and receives from `src` without deadlocking when two ranks
    /// exchange large messages.
    fn sendrecv(&self, dest: usize, data: &[f64], src: usize, tag: u32) -> Vec<f64>;
}

const TAG_BCAST: u32 = MAX_USER_TAG + 1;
const TAG_REDUCE: u32 = MAX_USER_TAG + 2;
const TAG_GATHER: u32 = MAX_USER_TAG + 3;
const TAG_SCATTER: u32 = MAX_USER_TAG + 4;
const TAG_A2A: u32 = MAX_USER_TAG + 5;
const TAG_BARRIER: u32 = MAX_USER_TAG + 6;
const TAG_RING: u32 = MAX_USER_TAG + 7;
const TAG_DIRECT: u32 = MAX_USER_TAG + 8;

fn expect_len(what: &str, got: usize, want: usize) {
    assert_eq!(got, want, "{what}: received {got} words, expected {want} (ranks disagree on the buffer sizes)");
}

/// Binomial-tree broadcast.
pub fn broadcast(t: &dyn Transport, buf: &mut [f64], root: usize) {
    let (p, r) = (t.size(), t.rank());
    assert!(root < p, "broadcast: root {root} out of range for {p} ranks");
    let vr = (r + p - root) % p;
    let mut mask = 1;
    while mask < p {
        if vr & mask != 0 {
            let x = t.recv((vr - mask + root) % p, TAG_BCAST);
            expect_len("broadcast", x.len(), buf.len());
            buf.copy_from_slice(&x);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < p {
            t.send((vr + mask + root) % p, TAG_BCAST, buf);
        }
        mask >>= 1;
    }
}

/// Binomial-tree reduction: at each level a rank combines its own partial result
/// (left) with its child's (right), so the order depends only on `p` and `root`.
pub fn reduce(t: &dyn Transport, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize) {
    let (p, r) = (t.size(), t.rank());
    assert!(root < p, "reduce: root {root} out of range for {p} ranks");
    let vr = (r + p - root) % p;
    let mut acc = send.to_vec();
    let mut mask = 1;
    while mask < p {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < p {
                let x = t.recv((child + root) % p, TAG_REDUCE);
                expect_len("reduce", x.len(), acc.len());
                op.combine(&mut acc, &x);
            }
        } else {
            t.send((vr - mask + root) % p, TAG_REDUCE, &acc);
            break;
        }
        mask <<= 1;
    }
    if r == root {
        expect_len("reduce (receive buffer)", recv.len(), acc.len());
        recv.copy_from_slice(&acc);
    }
}

/// Reduce to rank 0, then broadcast: every rank ends with the same bits.
pub fn allreduce(t: &dyn Transport, buf: &mut [f64], op: ReduceOp) {
    let mut out = if t.rank() == 0 { vec![0.0; buf.len()] } else { Vec::new() };
    reduce(t, buf, &mut out, op, 0);
    if t.rank() == 0 {
        buf.copy_from_slice(&out);
    }
    broadcast(t, buf, 0);
}

/// Ring all-gather: at step s rank r forwards block (r − s) to r + 1.
pub fn allgatherv(t: &dyn Transport, send: &[f64], counts: &[usize], recv: &mut [f64]) {
    let (p, r) = (t.size(), t.rank());
    assert_eq!(counts.len(), p, "allgatherv: {} counts for {p} ranks", counts.len());
    expect_len("allgatherv (own block)", send.len(), counts[r]);
    let d = displs(counts);
    expect_len("allgatherv (receive buffer)", recv.len(), counts.iter().sum());
    recv[d[r]..d[r] + counts[r]].copy_from_slice(send);
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for s in 0..p.saturating_sub(1) {
        let out = (r + p - s) % p;
        let inb = (r + 2 * p - s - 1) % p;
        let block = recv[d[out]..d[out] + counts[out]].to_vec();
        let x = t.sendrecv(right, &block, left, TAG_GATHER);
        expect_len("allgatherv", x.len(), counts[inb]);
        recv[d[inb]..d[inb] + counts[inb]].copy_from_slice(&x);
    }
}

/// Reduce the whole vector to rank 0, which sends block q to rank q.
pub fn reduce_scatter(t: &dyn Transport, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp) {
    let (p, r) = (t.size(), t.rank());
    assert_eq!(counts.len(), p, "reduce_scatter: {} counts for {p} ranks", counts.len());
    let total: usize = counts.iter().sum();
    expect_len("reduce_scatter (send buffer)", send.len(), total);
    expect_len("reduce_scatter (receive buffer)", recv.len(), counts[r]);
    let d = displs(counts);
    let mut full = if r == 0 { vec![0.0; total] } else { Vec::new() };
    reduce(t, send, &mut full, op, 0);
    if r == 0 {
        for q in 1..p {
            t.send(q, TAG_SCATTER, &full[d[q]..d[q] + counts[q]]);
        }
        recv.copy_from_slice(&full[..counts[0]]);
    } else {
        let x = t.recv(0, TAG_SCATTER);
        expect_len("reduce_scatter", x.len(), counts[r]);
        recv.copy_from_slice(&x);
    }
}

/// Ring reduce-scatter: at step s rank r sends its partial block (r − s − 1) to
/// r + 1 and adds the block (r − s − 2) it receives from r − 1 into its own; after
/// p − 1 steps block r holds the sum over all ranks.
pub fn reduce_scatter_ring(t: &dyn Transport, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp) {
    let (p, r) = (t.size(), t.rank());
    assert_eq!(counts.len(), p, "reduce_scatter_ring: {} counts for {p} ranks", counts.len());
    expect_len("reduce_scatter_ring (send buffer)", send.len(), counts.iter().sum());
    expect_len("reduce_scatter_ring (receive buffer)", recv.len(), counts[r]);
    let d = displs(counts);
    let mut acc = send.to_vec();
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for s in 0..p.saturating_sub(1) {
        let out = (r + 2 * p - s - 1) % p;
        let inb = (r + 2 * p - s - 2) % p;
        let x = t.sendrecv(right, &acc[d[out]..d[out] + counts[out]], left, TAG_RING);
        expect_len("reduce_scatter_ring", x.len(), counts[inb]);
        op.combine(&mut acc[d[inb]..d[inb] + counts[inb]], &x);
    }
    recv.copy_from_slice(&acc[d[r]..d[r] + counts[r]]);
}

/// Direct reduction: every other rank sends its buffer to the root, which combines
/// them into its own in rank order.
pub fn reduce_direct(t: &dyn Transport, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize) {
    let (p, r) = (t.size(), t.rank());
    assert!(root < p, "reduce_direct: root {root} out of range for {p} ranks");
    if r != root {
        return t.send(root, TAG_DIRECT, send);
    }
    expect_len("reduce_direct (receive buffer)", recv.len(), send.len());
    recv.copy_from_slice(send);
    for q in (0..p).filter(|&q| q != root) {
        let x = t.recv(q, TAG_DIRECT);
        expect_len("reduce_direct", x.len(), send.len());
        op.combine(recv, &x);
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Some ranks of a communicator as a [`Transport`]: `members[i]` is the group's rank
/// `i`. Every message is a point-to-point message of the communicator on the one
/// user tag given (the algorithms' own tags are not user tags; messages between two
/// ranks keep their order), so the communicator counts the words exactly. `sendrecv`
/// to `rank + k`, from `rank − k`, sends first at even positions of its cycle of the
/// permutation `x → x + k` and receives first at odd ones, so that blocking sends
/// cannot deadlock while every member shifts by the same `k` (rings, pairwise
/// exchange).
pub struct Group<'a> {
    comm: &'a dyn Communicator,
    members: Vec<usize>,
    rank: usize,
    tag: u32,
}

impl<'a> Group<'a> {
    pub fn new(comm: &'a dyn Communicator, members: Vec<usize>, tag: u32) -> Group<'a> {
        let me = comm.rank();
        let rank = members.iter().position(|&m| m == me).expect("this rank is a member of the group");
        Group { comm, members, rank, tag }
    }
    /// The communicator rank of the group's rank `i`.
    pub fn member(&self, i: usize) -> usize {
        self.members[i]
    }
}

impl Transport for Group<'_> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.members.len()
    }
    fn send(&self, dest: usize, _tag: u32, data: &[f64]) {
        self.comm.send(self.members[dest], self.tag, data)
    }
    fn recv(&self, src: usize, _tag: u32) -> Vec<f64> {
        self.comm.recv(self.members[src], self.tag)
    }
    fn sendrecv(&self, dest: usize, data: &[f64], src: usize, tag: u32) -> Vec<f64> {
        let (p, r) = (self.size(), self.rank);
        let k = (dest + p - r) % p;
        let (mut x, mut j) = (r % gcd(p, k), 0);
        while x != r {
            x = (x + k) % p;
            j += 1;
        }
        if j % 2 == 0 {
            self.send(dest, tag, data);
            self.recv(src, tag)
        } else {
            let got = self.recv(src, tag);
            self.send(dest, tag, data);
            got
        }
    }
}

/// Pairwise exchange: at step k rank r sends to r + k and receives from r − k.
pub fn alltoallv(t: &dyn Transport, send: &[f64], send_counts: &[usize], recv: &mut [f64], recv_counts: &[usize]) {
    let (p, r) = (t.size(), t.rank());
    assert_eq!(send_counts.len(), p, "alltoallv: {} send counts for {p} ranks", send_counts.len());
    assert_eq!(recv_counts.len(), p, "alltoallv: {} receive counts for {p} ranks", recv_counts.len());
    expect_len("alltoallv (send buffer)", send.len(), send_counts.iter().sum());
    expect_len("alltoallv (receive buffer)", recv.len(), recv_counts.iter().sum());
    let (sd, rd) = (displs(send_counts), displs(recv_counts));
    expect_len("alltoallv (own block)", send_counts[r], recv_counts[r]);
    recv[rd[r]..rd[r] + recv_counts[r]].copy_from_slice(&send[sd[r]..sd[r] + send_counts[r]]);
    for k in 1..p {
        let (dest, src) = ((r + k) % p, (r + p - k) % p);
        let x = t.sendrecv(dest, &send[sd[dest]..sd[dest] + send_counts[dest]], src, TAG_A2A);
        expect_len("alltoallv", x.len(), recv_counts[src]);
        recv[rd[src]..rd[src] + recv_counts[src]].copy_from_slice(&x);
    }
}

/// Dissemination barrier: ⌈log₂ p⌉ rounds of zero-length messages.
pub fn barrier(t: &dyn Transport) {
    let (p, r) = (t.size(), t.rank());
    let mut k = 1;
    while k < p {
        t.sendrecv((r + k) % p, &[], (r + p - k) % p, TAG_BARRIER);
        k <<= 1;
    }
}
