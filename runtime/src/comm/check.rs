//! Self-checks of a communicator, run by the unit tests (in-process ranks) and by
//! the MPI tests under `mpirun` (`tests/mpi.rs`): every collective against a
//! sequential reference, message order, shared counters, and back-end mixing with
//! a table that alternates back ends by size. Each function is collective and
//! panics on a wrong result.

use super::{displs, Backend, Collective, Communicator, ReduceOp, World};
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
        assert!(all[q * 6..(q + 1) * 6].iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "allreduce bits differ across ranks");
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
    TuningTable { world, ranks: 0, entries }
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
