//! Self-checks of a communicator, run by the unit tests (in-process ranks) and by
//! the MPI tests under `mpirun` (`tests/mpi.rs`): every collective against a
//! sequential reference, message order, shared counters, and back-end mixing with
//! a table that alternates back ends by size. Each function is collective and
//! panics on a wrong result, except [`sized`], which returns one verdict per
//! operation (the device check of the `nccl` back end prints them).

use super::{displs, Backend, Collective, CommStats, Communicator, Read, ReduceOp, World};
use crate::task::{run_tasks, Schedule};
use crate::tune::{Entry, TuningTable};
use std::collections::BTreeMap;

/// Rank r's test vector of length n: distinct values, not exactly summable.
pub fn data(r: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| ((r * 31 + i * 7) % 17) as f64 * 0.1 + 1.0 / (1 + r + i) as f64).collect()
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
}

fn sum_of(p: usize, n: usize) -> Vec<f64> {
    let mut s = data(0, n);
    for q in 1..p {
        ReduceOp::Sum.combine(&mut s, &data(q, n));
    }
    s
}

/// Every collective once, with uneven and empty blocks.
pub fn collectives(c: &dyn Communicator) {
    let (p, r) = (c.size(), c.rank());
    for root in 0..p {
        let mut buf = if r == root { data(root, 5) } else { vec![0.0; 5] };
        c.broadcast(&mut buf, root);
        assert_eq!(buf, data(root, 5), "broadcast from {root}");
        let mut out = if r == root { vec![0.0; 6] } else { Vec::new() };
        c.reduce(&data(r, 6), &mut out, ReduceOp::Sum, root);
        if r == root {
            assert!(close(&out, &sum_of(p, 6)), "reduce to {root}");
        }
    }
    let mut b = data(r, 6);
    c.allreduce(&mut b, ReduceOp::Sum);
    assert!(close(&b, &sum_of(p, 6)), "allreduce");
    let mut all = vec![0.0; 6 * p];
    c.allgather(&b, &mut all);
    for q in 0..p {
        assert!(
            all[q * 6..(q + 1) * 6].iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "allreduce bits differ across ranks"
        );
    }
    let mut m = data(r, 6);
    c.allreduce(&mut m, ReduceOp::Max);
    let want: Vec<f64> = (0..6).map(|i| (0..p).map(|q| data(q, 6)[i]).fold(f64::MIN, f64::max)).collect();
    assert_eq!(m, want, "allreduce max");

    let counts: Vec<usize> = (0..p).map(|q| (q * 3) % 4).collect();
    let mut g = vec![0.0; counts.iter().sum()];
    c.allgatherv(&data(r, counts[r]), &counts, &mut g);
    let want: Vec<f64> = (0..p).flat_map(|q| data(q, counts[q])).collect();
    assert_eq!(g, want, "allgatherv");

    let total: usize = counts.iter().sum();
    let mut rs = vec![0.0; counts[r]];
    c.reduce_scatter(&data(r, total), &counts, &mut rs, ReduceOp::Sum);
    let d = displs(&counts);
    assert!(close(&rs, &sum_of(p, total)[d[r]..d[r] + counts[r]]), "reduce_scatter");

    let sc: Vec<usize> = (0..p).map(|q| (r + q) % 3).collect();
    let send: Vec<f64> = (0..p).flat_map(|q| (0..sc[q]).map(move |k| (r * 100 + q * 10 + k) as f64)).collect();
    let rc: Vec<usize> = (0..p).map(|s| (s + r) % 3).collect();
    let mut recv = vec![0.0; rc.iter().sum()];
    c.alltoallv(&send, &sc, &mut recv, &rc);
    let want: Vec<f64> = (0..p).flat_map(|s| (0..rc[s]).map(move |k| (s * 100 + r * 10 + k) as f64)).collect();
    assert_eq!(recv, want, "alltoallv");
    send_recv(c);
}

/// Point-to-point messages keep their order per (source, tag) whatever the order
/// of receives across tags; then a barrier.
pub fn send_recv(c: &dyn Communicator) {
    let (p, r) = (c.size(), c.rank());
    let next = (r + 1) % p;
    let prev = (r + p - 1) % p;
    c.send(next, 7, &[1.0, r as f64]);
    c.send(next, 3, &[r as f64]);
    c.send(next, 7, &[2.0]);
    assert_eq!(c.recv(prev, 3), vec![prev as f64]);
    assert_eq!(c.recv(prev, 7), vec![1.0, prev as f64]);
    assert_eq!(c.recv(prev, 7), vec![2.0]);
    c.barrier();
}

/// Dynamic claims from a shared counter hand out every task exactly once.
pub fn counter(c: &dyn Communicator) {
    let (p, r) = (c.size(), c.rank());
    let ctr = c.counter();
    let mut mine: Vec<f64> = Vec::new();
    run_tasks(50, r, p, Schedule::Dynamic, ctr.as_ref(), 3, |t| mine.push(t as f64));
    drop(ctr);
    let mut counts = vec![0.0; p];
    c.allgather(&[mine.len() as f64], &mut counts);
    let counts: Vec<usize> = counts.iter().map(|&x| x as usize).collect();
    let mut all = vec![0.0; counts.iter().sum()];
    c.allgatherv(&mine, &counts, &mut all);
    let mut ids: Vec<usize> = all.iter().map(|&x| x as usize).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..50).collect::<Vec<_>>(), "each task claimed once");
    // Counters made together (one window under MPI) count apart: every rank adds
    // 1 to counter k k+1 times, interleaved; counter k hands out 0..p(k+1) once each.
    let ctrs = c.counters(3);
    let mut got: Vec<f64> = Vec::new();
    for round in 0..3 {
        for (k, ctr) in ctrs.iter().enumerate() {
            if round <= k {
                got.push((k * 1000) as f64 + ctr.fetch_add(1) as f64);
            }
        }
    }
    drop(ctrs);
    let mut all = vec![0.0; got.len() * p];
    c.allgather(&got, &mut all);
    for k in 0..3 {
        let mut vals: Vec<usize> =
            all.iter().map(|&x| x as usize).filter(|&x| x / 1000 == k).map(|x| x % 1000).collect();
        vals.sort_unstable();
        assert_eq!(vals, (0..p * (k + 1)).collect::<Vec<_>>(), "counter {k} of 3");
    }
}

/// A table alternating the two back ends of `world` at 0, 64, 256, 1024 bytes.
pub fn zigzag(world: World) -> TuningTable {
    let b = world.backends();
    let mut entries = Vec::new();
    for op in Collective::ALL {
        for (k, bytes) in [0u64, 64, 256, 1024].into_iter().enumerate() {
            entries.push(Entry { op, bytes, backend: b[k % b.len()], seconds: BTreeMap::new() });
        }
    }
    TuningTable { world, ranks: 0, entries, calibration: None }
}

/// Many collectives on a mixing communicator with sizes crossing every threshold,
/// and per-rank all-to-all sizes that differ (the ranks must agree on a back end).
pub fn mixing(m: &dyn Communicator) {
    let (p, r) = (m.size(), m.rank());
    for step in 0..40usize {
        let n = 1 + (step * 37) % 200;
        let mut b = data(r, n);
        m.allreduce(&mut b, ReduceOp::Sum);
        assert!(close(&b, &sum_of(p, n)), "mixed allreduce at step {step}");
        let mut bb = if r == step % p { data(r, n) } else { vec![0.0; n] };
        m.broadcast(&mut bb, step % p);
        assert_eq!(bb, data(step % p, n));
        let md = 1 + (step * 13) % 70;
        let sc: Vec<usize> = (0..p).map(|q| (r * 20 + q + step) % md).collect();
        let rc: Vec<usize> = (0..p).map(|s| (s * 20 + r + step) % md).collect();
        let send: Vec<f64> = (0..sc.iter().sum::<usize>()).map(|i| (r * 1000 + i) as f64).collect();
        let mut recv = vec![0.0; rc.iter().sum()];
        m.alltoallv(&send, &sc, &mut recv, &rc);
        let counts: Vec<usize> = (0..p).map(|q| (q + step) % 30).collect();
        let mut g = vec![0.0; counts.iter().sum()];
        m.allgatherv(&data(r, counts[r]), &counts, &mut g);
        let want: Vec<f64> = (0..p).flat_map(|q| data(q, counts[q])).collect();
        assert_eq!(g, want);
        if step % 7 == 0 {
            m.send((r + 1) % p, 1, &[step as f64]);
            assert_eq!(m.recv((r + p - 1) % p, 1), vec![step as f64]);
        }
    }
}

/// The back ends a mixing run used for all-reduce (for tests that both were used).
pub fn used(calls: &[(Collective, Backend, u64)], op: Collective) -> Vec<Backend> {
    calls.iter().filter(|c| c.0 == op && c.2 > 0).map(|c| c.1).collect()
}

// ---------------------------------------------------------------------------------
// Sized checks with counts (shared by the unit tests and the device check of the
// `nccl` back end, `runtime/examples/nccl_check.rs`).
// ---------------------------------------------------------------------------------

/// One collective call, as the counting model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Broadcast { n: usize, root: usize },
    Reduce { n: usize, root: usize },
    Allreduce { n: usize },
    Allgatherv { counts: Vec<usize> },
    ReduceScatter { counts: Vec<usize> },
    Alltoallv { send_counts: Vec<usize>, recv_counts: Vec<usize> },
}

/// What a flat back end (`shm`, native `mpi`, `nccl`) counts for `call` on rank `r`
/// of `p`: one message per (sender, receiver) pair that must move data, carrying
/// what the receiver needs (see the module docs of [`super`]).
pub fn flat_counts(call: &Call, p: usize, r: usize) -> CommStats {
    let mut s = CommStats::default();
    let mut out = |words: usize, messages: usize| {
        s.words_sent += (words * messages) as u64;
        s.messages_sent += messages as u64;
    };
    let mut inn = CommStats::default();
    let mut got = |words: usize, messages: usize| {
        inn.words_received += (words * messages) as u64;
        inn.messages_received += messages as u64;
    };
    match call {
        Call::Broadcast { n, root } => {
            if r == *root {
                out(*n, p - 1)
            } else {
                got(*n, 1)
            }
        }
        Call::Reduce { n, root } => {
            if r == *root {
                got(*n, p - 1)
            } else {
                out(*n, 1)
            }
        }
        Call::Allreduce { n } => {
            out(*n, p - 1);
            got(*n, p - 1);
        }
        Call::Allgatherv { counts } => {
            out(counts[r], p - 1);
            (0..p).filter(|&q| q != r).for_each(|q| got(counts[q], 1));
        }
        Call::ReduceScatter { counts } => {
            (0..p).filter(|&q| q != r).for_each(|q| out(counts[q], 1));
            got(counts[r], p - 1);
        }
        Call::Alltoallv { send_counts, recv_counts } => {
            (0..p).filter(|&q| q != r).for_each(|q| out(send_counts[q], 1));
            (0..p).filter(|&q| q != r).for_each(|q| got(recv_counts[q], 1));
        }
    }
    s.words_received = inn.words_received;
    s.messages_received = inn.messages_received;
    s
}

/// `n` words split into `p` blocks of different lengths (block q ∝ q + 1).
pub fn uneven(n: usize, p: usize) -> Vec<usize> {
    let w = p * (p + 1) / 2;
    let mut c: Vec<usize> = (0..p).map(|q| n * (q + 1) / w).collect();
    let rest = n - c.iter().sum::<usize>();
    c[p - 1] += rest;
    c
}

/// What one operation of [`sized`] gave.
#[derive(Debug, Clone, PartialEq)]
pub struct OpCheck {
    /// The operation and its parameters, e.g. `allreduce max`.
    pub op: String,
    /// The message size of the call in words (see [`super::mixed`]).
    pub words: usize,
    /// `None` when the result (and, where checked, the counts) were right.
    pub error: Option<String>,
}

fn diff(what: &str, got: &[f64], want: &[f64], exact: bool) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{what}: {} words, expected {}", got.len(), want.len()));
    }
    let bad = got.iter().zip(want).position(|(x, y)| {
        if exact {
            x.to_bits() != y.to_bits()
        } else {
            (x - y).abs() > 1e-12 * (1.0 + y.abs())
        }
    });
    bad.map(|i| format!("{what}: word {i} is {}, expected {}", got[i], want[i]))
}

fn fold(p: usize, n: usize, op: ReduceOp) -> Vec<f64> {
    let mut s = data(0, n);
    for q in 1..p {
        op.combine(&mut s, &data(q, n));
    }
    s
}

/// Every collective once with messages of about `n` words (uneven blocks where the
/// operation takes them), then a send/recv around the ring in the even/odd order
/// that also suits back ends whose sends wait for the receiver (`nccl`), each
/// against a sequential reference. Sums are compared to 1e-12 (relative), the rest
/// bit for bit. With `flat`, each call's counts must be [`flat_counts`]' (send/recv
/// counts are checked for every back end). Collective; wrong results are returned,
/// not panicked on.
pub fn sized(c: &dyn Communicator, n: usize, flat: bool) -> Vec<OpCheck> {
    let (p, r) = (c.size(), c.rank());
    let mut out = Vec::new();
    let mut run = |op: String, words: usize, call: Option<Call>, f: &mut dyn FnMut() -> Option<String>| {
        let before = c.stats();
        let mut error = f();
        let after = c.stats();
        let got = CommStats {
            words_sent: after.words_sent - before.words_sent,
            messages_sent: after.messages_sent - before.messages_sent,
            words_received: after.words_received - before.words_received,
            messages_received: after.messages_received - before.messages_received,
            ..CommStats::default()
        };
        let want = match &call {
            Some(call) if flat => Some(flat_counts(call, p, r)),
            Some(_) => None,
            // send/recv: one message of `words` each way, on every back end.
            None => Some(CommStats {
                words_sent: words as u64,
                messages_sent: 1,
                words_received: words as u64,
                messages_received: 1,
                ..CommStats::default()
            }),
        };
        if let (None, Some(want)) = (&error, want) {
            if got != want {
                error = Some(format!("counts {got:?}, expected {want:?}"));
            }
        }
        out.push(OpCheck { op, words, error });
    };
    let mut roots = vec![0, p - 1];
    roots.dedup();
    for &root in &roots {
        run(format!("broadcast root {root}"), n, Some(Call::Broadcast { n, root }), &mut || {
            let mut buf = if r == root { data(root, n) } else { vec![0.0; n] };
            c.broadcast(&mut buf, root);
            diff("broadcast", &buf, &data(root, n), true)
        });
        run(format!("reduce sum root {root}"), n, Some(Call::Reduce { n, root }), &mut || {
            let mut recv = if r == root { vec![0.0; n] } else { Vec::new() };
            c.reduce(&data(r, n), &mut recv, ReduceOp::Sum, root);
            if r == root {
                diff("reduce", &recv, &fold(p, n, ReduceOp::Sum), false)
            } else {
                None
            }
        });
    }
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        run(format!("allreduce {op:?}").to_lowercase(), n, Some(Call::Allreduce { n }), &mut || {
            let mut buf = data(r, n);
            c.allreduce(&mut buf, op);
            diff("allreduce", &buf, &fold(p, n, op), op != ReduceOp::Sum)
        });
    }
    let equal = vec![n / p; p];
    let skewed = uneven(n, p);
    for (name, counts) in [("allgather", &equal), ("allgatherv", &skewed)] {
        let total: usize = counts.iter().sum();
        run(name.to_string(), total, Some(Call::Allgatherv { counts: counts.clone() }), &mut || {
            let mut recv = vec![f64::NAN; total];
            c.allgatherv(&data(r, counts[r]), counts, &mut recv);
            let want: Vec<f64> = (0..p).flat_map(|q| data(q, counts[q])).collect();
            diff(name, &recv, &want, true)
        });
    }
    for (name, counts, op) in
        [("reduce_scatter sum (uneven)", &skewed, ReduceOp::Sum), ("reduce_scatter min", &equal, ReduceOp::Min)]
    {
        let total: usize = counts.iter().sum();
        run(name.to_string(), total, Some(Call::ReduceScatter { counts: counts.clone() }), &mut || {
            let mut recv = vec![f64::NAN; counts[r]];
            c.reduce_scatter(&data(r, total), counts, &mut recv, op);
            let d = displs(counts);
            diff(name, &recv, &fold(p, total, op)[d[r]..d[r] + counts[r]], op != ReduceOp::Sum)
        });
    }
    // Rank s sends block q of length u[(s + q) % p]; word k of it is tagged (s, q, k).
    let block = n / p;
    for (name, u) in [("alltoall", vec![block; p]), ("alltoallv", skewed.clone())] {
        let sc: Vec<usize> = (0..p).map(|q| u[(r + q) % p]).collect();
        let rc: Vec<usize> = (0..p).map(|s| u[(s + r) % p]).collect();
        let tag = |s: usize, q: usize, k: usize| ((s * p + q) * (1 << 26) + k) as f64;
        run(
            name.to_string(),
            sc.iter().sum(),
            Some(Call::Alltoallv { send_counts: sc.clone(), recv_counts: rc.clone() }),
            &mut || {
                let send: Vec<f64> = (0..p).flat_map(|q| (0..sc[q]).map(move |k| tag(r, q, k))).collect();
                let mut recv = vec![f64::NAN; rc.iter().sum()];
                c.alltoallv(&send, &sc, &mut recv, &rc);
                let want: Vec<f64> = (0..p).flat_map(|s| (0..rc[s]).map(move |k| tag(s, r, k))).collect();
                diff(name, &recv, &want, true)
            },
        );
    }
    run("send/recv".to_string(), n, None, &mut || {
        let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
        let mine = data(r, n);
        let got = if r % 2 == 0 {
            c.send(next, 5, &mine);
            c.recv(prev, 5)
        } else {
            let got = c.recv(prev, 5);
            c.send(next, 5, &mine);
            got
        };
        diff("send/recv", &got, &data(prev, n), true)
    });
    out
}

/// One-sided reads ([`Communicator::expose`]), where the back end has them: every
/// rank exposes two segments of its own lengths (one empty on rank 0) and reads
/// every other rank's, whole and in pieces, checked bit for bit, with the words
/// read counted. Returns whether the back end had a window.
pub fn window(c: &dyn Communicator) -> bool {
    let (p, r) = (c.size(), c.rank());
    let len = |q: usize, seg: usize| if q == 0 && seg == 1 { 0 } else { 3 + q + 2 * seg };
    let segs: Vec<Vec<f64>> = (0..2).map(|seg| data(r * 2 + seg, len(r, seg))).collect();
    let refs: Vec<&[f64]> = segs.iter().map(|s| s.as_slice()).collect();
    let before = c.stats();
    let Some(w) = c.expose(&refs) else { return false };
    let mut words = 0;
    for k in 1..=p {
        let q = (r + k) % p;
        for seg in 0..2 {
            let want = data(q * 2 + seg, len(q, seg));
            let mut got = vec![0.0; want.len()];
            w.get(q, seg, 0, &mut got);
            assert_eq!(got, want, "rank {r} read segment {seg} of rank {q}");
            if want.len() > 2 {
                let mut mid = vec![0.0; 2];
                w.get(q, seg, 1, &mut mid);
                assert_eq!(mid, want[1..3], "rank {r} read words 1..3 of segment {seg} of rank {q}");
                if q != r {
                    words += 2;
                }
            }
            if q != r {
                words += want.len();
            }
        }
    }
    w.close();
    let after = c.stats();
    assert_eq!(after.words_got - before.words_got, words as u64, "words read counted on rank {r}");
    true
}

/// Window memory ([`Communicator::alloc_window_memory`]) exposed next to an
/// ordinary segment (`with_plain`: where the back end makes windows over memory
/// it did not allocate), twice (the owner rewrites its memory between the two
/// exposures, which must then be seen), read in one batch of gets. `false`
/// where the back end has no window memory (nothing checked).
pub fn window_memory(c: &dyn Communicator, with_plain: bool) -> bool {
    let (p, r) = (c.size(), c.rank());
    // Rank 0 gets an empty buffer: it must still have a window of its own.
    let len = |q: usize| if q == 0 { 0 } else { 4 + q };
    let Some(mut mem) = c.alloc_window_memory(len(r)) else { return false };
    let Some(mut empty) = c.alloc_window_memory(0) else { panic!("rank {r}: a second window memory was refused") };
    assert!(mem.as_slice().iter().all(|&x| x == 0.0), "rank {r}: window memory is not zeroed");
    assert!(empty.as_mut_slice().is_empty());
    let plain = data(100 + r, 3);
    for round in 0..2 {
        mem.as_mut_slice().copy_from_slice(&data(10 * round + r, len(r)));
        let mut segs = vec![mem.as_slice(), empty.as_slice()];
        if with_plain {
            segs.insert(0, plain.as_slice());
        }
        let w = c.expose(&segs).expect("windows over window memory");
        // Segment numbers of the plain one, the memory and the empty memory.
        let at = |k: usize| k - usize::from(!with_plain);
        let mut bufs: Vec<(usize, usize, Vec<f64>)> = Vec::new();
        for q in 0..p {
            if with_plain {
                bufs.push((q, 0, vec![0.0; 3]));
            }
            bufs.push((q, at(1), vec![0.0; len(q)]));
            bufs.push((q, at(2), Vec::new()));
        }
        let mut reads: Vec<Read<'_>> =
            bufs.iter_mut().map(|(q, seg, b)| Read { target: *q, segment: *seg, offset: 0, dst: b }).collect();
        w.get_many(&mut reads);
        drop(reads);
        for (q, seg, got) in &bufs {
            let want = match seg + usize::from(!with_plain) {
                0 => data(100 + q, 3),
                1 => data(10 * round + q, len(*q)),
                _ => Vec::new(),
            };
            assert_eq!(got, &want, "round {round}: rank {r} read segment {seg} of rank {q}");
        }
        w.close();
    }
    // Dropped in the same order on every rank (collective).
    drop(empty);
    drop(mem);
    true
}
