//! Every collective on 1–8 in-process ranks, both in-process back ends, against a
//! sequential reference; exact message counts; failure propagation; mixing.

use super::mixed::Mixed;
use super::threads::{self, Rank};
use super::*;
use crate::dist::{DistTensor, Distribution, ProcGrid};
use crate::task::{run_tasks, Schedule};
use std::time::{Duration, Instant};

const BACKENDS: [Backend; 2] = [Backend::Threads, Backend::Shm];

/// Rank r's test vector of length n: distinct, not exactly summable in any order.
fn data(r: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| ((r * 31 + i * 7) % 17) as f64 * 0.1 + 1.0 / (1 + r + i) as f64).collect()
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
}

fn for_worlds(test: impl Fn(&Rank, &dyn Communicator) + Sync) {
    for backend in BACKENDS {
        for p in 1..=8 {
            threads::run(p, |rank| {
                let c = rank.comm(backend);
                test(rank, c.as_ref())
            })
            .unwrap_or_else(|e| panic!("{backend} on {p} ranks: {e}"));
        }
    }
}

#[test]
fn broadcast_from_every_root() {
    for_worlds(|_, c| {
        for root in 0..c.size() {
            let mut buf = if c.rank() == root { data(root, 5) } else { vec![0.0; 5] };
            c.broadcast(&mut buf, root);
            assert_eq!(buf, data(root, 5));
        }
    });
}

#[test]
fn reduce_and_allreduce() {
    for_worlds(|_, c| {
        let p = c.size();
        let n = 6;
        let mut sum = data(0, n);
        for q in 1..p {
            ReduceOp::Sum.combine(&mut sum, &data(q, n));
        }
        let max: Vec<f64> = (0..n).map(|i| (0..p).map(|q| data(q, n)[i]).fold(f64::MIN, f64::max)).collect();
        let min: Vec<f64> = (0..n).map(|i| (0..p).map(|q| data(q, n)[i]).fold(f64::MAX, f64::min)).collect();
        for root in [0, p - 1] {
            let mut out = if c.rank() == root { vec![0.0; n] } else { Vec::new() };
            c.reduce(&data(c.rank(), n), &mut out, ReduceOp::Sum, root);
            if c.rank() == root {
                assert!(close(&out, &sum), "{out:?} vs {sum:?}");
            }
        }
        let mut b = data(c.rank(), n);
        c.allreduce(&mut b, ReduceOp::Sum);
        assert!(close(&b, &sum));
        // Every rank has the same bits.
        let mut all = vec![0.0; n * p];
        c.allgather(&b, &mut all);
        for q in 0..p {
            assert_eq!(
                all[q * n..(q + 1) * n].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
        let mut b = data(c.rank(), n);
        c.allreduce(&mut b, ReduceOp::Max);
        assert_eq!(b, max);
        let mut b = data(c.rank(), n);
        c.allreduce(&mut b, ReduceOp::Min);
        assert_eq!(b, min);
    });
}

#[test]
fn allgatherv_reduce_scatter_alltoallv() {
    for_worlds(|_, c| {
        let (p, r) = (c.size(), c.rank());
        // Uneven blocks, some empty.
        let counts: Vec<usize> = (0..p).map(|q| (q * 3) % 4).collect();
        let mut g = vec![0.0; counts.iter().sum()];
        c.allgatherv(&data(r, counts[r]), &counts, &mut g);
        let want: Vec<f64> = (0..p).flat_map(|q| data(q, counts[q])).collect();
        assert_eq!(g, want);

        let total: usize = counts.iter().sum();
        let mut rs = vec![0.0; counts[r]];
        c.reduce_scatter(&data(r, total), &counts, &mut rs, ReduceOp::Sum);
        let mut sum = data(0, total);
        for q in 1..p {
            ReduceOp::Sum.combine(&mut sum, &data(q, total));
        }
        let d = displs(&counts);
        assert!(close(&rs, &sum[d[r]..d[r] + counts[r]]));

        // alltoallv: rank s sends (s + q) % 3 words to q, values tagged by (s, q).
        let sc: Vec<usize> = (0..p).map(|q| (r + q) % 3).collect();
        let send: Vec<f64> = (0..p).flat_map(|q| (0..sc[q]).map(move |k| (r * 100 + q * 10 + k) as f64)).collect();
        let rc: Vec<usize> = (0..p).map(|s| (s + r) % 3).collect();
        let mut recv = vec![0.0; rc.iter().sum()];
        c.alltoallv(&send, &sc, &mut recv, &rc);
        let want: Vec<f64> = (0..p).flat_map(|s| (0..rc[s]).map(move |k| (s * 100 + r * 10 + k) as f64)).collect();
        assert_eq!(recv, want);

        // alltoall with equal blocks.
        let send: Vec<f64> = (0..2 * p).map(|i| (r * 1000 + i) as f64).collect();
        let mut recv = vec![0.0; 2 * p];
        c.alltoall(&send, &mut recv);
        let want: Vec<f64> = (0..p).flat_map(|s| (0..2).map(move |k| (s * 1000 + 2 * r + k) as f64)).collect();
        assert_eq!(recv, want);
    });
}

#[test]
fn send_recv_keeps_order_per_tag_and_barrier() {
    for_worlds(|_, c| check::send_recv(c));
}

#[test]
fn reductions_are_bit_reproducible() {
    for backend in BACKENDS {
        let once = || {
            threads::run(5, |rank| {
                let c = rank.comm(backend);
                let mut b = data(rank.rank(), 64);
                c.allreduce(&mut b, ReduceOp::Sum);
                b.iter().map(|x| x.to_bits()).collect::<Vec<u64>>()
            })
            .unwrap()
        };
        let first = once();
        for _ in 0..5 {
            assert_eq!(once(), first);
        }
    }
}

#[test]
fn p2p_counts_are_exact() {
    // threads back end, 4 ranks, 10 words.
    let stats = threads::run(4, |rank| {
        let c = rank.comm(Backend::Threads);
        let mut b = vec![1.0; 10];
        c.broadcast(&mut b, 0);
        let s1 = c.stats();
        let mut g = vec![0.0; 40];
        c.allgather(&b, &mut g);
        let s2 = c.stats();
        let mut recv = vec![0.0; 40];
        c.alltoall(&g, &mut recv);
        let s3 = c.stats();
        (s1, s2, s3)
    })
    .unwrap();
    // Binomial tree over 4: 0 → 2, 0 → 1, 2 → 3.
    let b: Vec<(u64, u64)> = stats.iter().map(|s| (s.0.messages_sent, s.0.words_sent)).collect();
    assert_eq!(b, vec![(2, 20), (0, 0), (1, 10), (0, 0)]);
    for (s1, s2, s3) in &stats {
        // Ring: 3 messages of 10 words; pairwise all-to-all: 3 of 10 words.
        assert_eq!((s2.messages_sent - s1.messages_sent, s2.words_sent - s1.words_sent), (3, 30));
        assert_eq!((s3.messages_sent - s2.messages_sent, s3.words_sent - s2.words_sent), (3, 30));
    }
    let total_recv: u64 = stats.iter().map(|s| s.2.words_received).sum();
    let total_sent: u64 = stats.iter().map(|s| s.2.words_sent).sum();
    assert_eq!(total_recv, total_sent);
    // shm counts the flat algorithm: broadcast root sends p − 1 messages.
    let stats = threads::run(4, |rank| {
        let c = rank.comm(Backend::Shm);
        let mut b = vec![1.0; 10];
        c.broadcast(&mut b, 1);
        c.stats()
    })
    .unwrap();
    let b: Vec<(u64, u64)> = stats.iter().map(|s| (s.messages_sent, s.words_sent)).collect();
    assert_eq!(b, vec![(0, 0), (3, 30), (0, 0), (0, 0)]);
    // On both back ends, every word counted as sent is counted as received.
    for backend in BACKENDS {
        let stats = threads::run(3, |rank| {
            let c = rank.comm(backend);
            let r = rank.rank();
            let mut b = vec![1.0; 4];
            c.broadcast(&mut b, 2);
            c.allreduce(&mut b, ReduceOp::Sum);
            let mut out = [0.0; 4];
            c.reduce(&b, if r == 1 { &mut out[..] } else { &mut out[..0] }, ReduceOp::Max, 1);
            let mut g = vec![0.0; 6];
            c.allgatherv(&b[..r], &[0, 1, 2], &mut g[..3]);
            let mut rs = vec![0.0; r];
            c.reduce_scatter(&g[..3], &[0, 1, 2], &mut rs, ReduceOp::Sum);
            let mut recv = vec![0.0; 6];
            c.alltoall(&g, &mut recv);
            c.stats()
        })
        .unwrap();
        let sent: u64 = stats.iter().map(|s| s.words_sent).sum();
        let recv: u64 = stats.iter().map(|s| s.words_received).sum();
        assert_eq!(sent, recv, "{backend}");
        assert!(sent > 0);
    }
}

#[test]
fn a_failing_rank_aborts_the_others() {
    for backend in BACKENDS {
        let t0 = Instant::now();
        let r = threads::run(4, |rank| {
            let c = rank.comm(backend);
            if rank.rank() == 2 {
                panic!("rank two gives up");
            }
            // The others wait in a collective rank 2 never joins.
            let mut b = vec![1.0; 3];
            c.allreduce(&mut b, ReduceOp::Sum);
            c.barrier();
        });
        let e = r.unwrap_err();
        assert_eq!(e.rank, 2, "{e}");
        assert!(e.message.contains("rank two gives up"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
        // A rank that fails after others are blocked in a receive.
        let r = threads::run(3, |rank| {
            let c = rank.comm(backend);
            if rank.rank() == 0 {
                std::thread::sleep(Duration::from_millis(30));
                panic!("late failure");
            }
            c.recv(0, 1)
        });
        assert_eq!(r.unwrap_err().rank, 0);
    }
}

#[test]
fn mixing_back_ends_does_not_deadlock() {
    let t0 = Instant::now();
    for p in [2, 3, 4] {
        let calls = threads::run(p, |rank| {
            let m =
                Mixed::new(vec![rank.comm(Backend::Threads), rank.comm(Backend::Shm)], check::zigzag(World::Threads));
            check::mixing(&m);
            check::collectives(&m);
            m.calls()
        })
        .unwrap();
        for op in [Collective::Allreduce, Collective::Alltoall, Collective::Allgather] {
            let used = check::used(&calls[0], op);
            assert!(BACKENDS.iter().all(|b| used.contains(b)), "{op:?} used only {used:?}");
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(60));
}

#[test]
fn self_checks_pass_on_both_back_ends() {
    for_worlds(|_, c| {
        check::collectives(c);
        check::counter(c);
        // Only the shm back end reads other ranks' memory directly.
        assert_eq!(check::window(c), c.backend() == Backend::Shm);
        // Only MPI has window memory.
        assert!(!check::window_memory(c, true));
    });
}

#[test]
fn shared_counter_hands_out_each_number_once() {
    for backend in BACKENDS {
        let got = threads::run(4, |rank| {
            let c = rank.comm(backend);
            let ctr = c.counter();
            let mut mine = Vec::new();
            run_tasks(50, rank.rank(), 4, Schedule::Dynamic, ctr.as_ref(), 3, |t| mine.push(t));
            mine
        })
        .unwrap();
        let mut all: Vec<usize> = got.concat();
        all.sort_unstable();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
    }
}

/// Across ranks: tasks of skewed cost (sleeps), static blocks vs shared-counter
/// claims, measured within one run.
#[test]
fn dynamic_beats_static_across_ranks() {
    let makespan = |schedule: Schedule| {
        let t0 = Instant::now();
        threads::run(4, |rank| {
            let c = rank.comm(Backend::Threads);
            let ctr = c.counter();
            run_tasks(32, rank.rank(), 4, schedule, ctr.as_ref(), 1, |t| {
                std::thread::sleep(Duration::from_millis(if t < 4 { 25 } else { 1 }))
            });
            c.barrier();
        })
        .unwrap();
        t0.elapsed().as_secs_f64()
    };
    let st = makespan(Schedule::Static);
    let dy = makespan(Schedule::Dynamic);
    eprintln!("ranks: static {st:.3}s, dynamic {dy:.3}s, ratio {:.2}", dy / st);
    assert!(dy / st < 0.85, "dynamic {dy:.3}s vs static {st:.3}s");
}

#[test]
fn redistribute_get_and_accumulate_tiles() {
    let shape = vec![5usize, 7];
    let global: Vec<f64> = (0..35).map(|i| i as f64).collect();
    for p in 1..=6 {
        threads::run(p, |rank| {
            let c = rank.comm(Backend::Threads);
            let r = rank.rank();
            let rows = Distribution::block(2, 0, p);
            let t = DistTensor::from_global(shape.clone(), rows.clone(), r, &global);
            // rows → columns → replicated → 2-D grid (when p factors) → rows
            let cols = t.redistribute(c.as_ref(), Distribution::block(2, 1, p));
            assert_eq!(cols, DistTensor::from_global(shape.clone(), Distribution::block(2, 1, p), r, &global));
            let rep = cols.redistribute(c.as_ref(), Distribution::replicated(2, p));
            assert_eq!(rep.local, global);
            let grid = if p % 2 == 0 { vec![2, p / 2] } else { vec![p, 1] };
            let d2 = Distribution::new(ProcGrid::new(grid), vec![Some(1), Some(0)]);
            let t2 = rep.redistribute(c.as_ref(), d2.clone());
            assert_eq!(t2, DistTensor::from_global(shape.clone(), d2, r, &global));
            let back = t2.redistribute(c.as_ref(), rows.clone());
            assert_eq!(back, t);
            // Tiles named at run time.
            let want = [vec![1..3, 2..6], vec![4..5, 0..7]];
            let tiles = t.get_tiles(c.as_ref(), if r % 2 == 0 { &want[..] } else { &want[..1] });
            assert_eq!(tiles[0], vec![9., 10., 11., 12., 16., 17., 18., 19.]);
            if r % 2 == 0 {
                assert_eq!(tiles[1], (28..35).map(|x| x as f64).collect::<Vec<_>>());
            }
            assert_eq!(t.gather(c.as_ref(), p - 1).is_some(), r == p - 1);
            if r == p - 1 {
                assert_eq!(t.gather(c.as_ref(), p - 1), None::<Vec<f64>>.or(Some(global.clone())));
            } else {
                t.gather(c.as_ref(), p - 1);
            }
            // Every rank adds 1 to a tile: it grows by p everywhere it is held.
            let mut acc = rep.clone();
            acc.accumulate_tiles(c.as_ref(), &[(vec![0..2, 0..2], vec![1.0; 4])]);
            assert_eq!(acc.local[0], p as f64);
            assert_eq!(acc.local[8], 8.0 + p as f64);
            assert_eq!(acc.local[2], 2.0);
        })
        .unwrap();
    }
}

#[test]
fn sized_checks_pass_and_flat_counts_match_shm() {
    for backend in BACKENDS {
        for p in 1..=5 {
            for n in [0, 1, 13, 200] {
                let res = threads::run(p, |rank| check::sized(rank.comm(backend).as_ref(), n, backend == Backend::Shm))
                    .unwrap();
                for (r, checks) in res.iter().enumerate() {
                    assert!(checks.len() >= 12, "{backend}: only {} checks", checks.len());
                    for c in checks {
                        assert_eq!(c.error, None, "{backend}, {p} ranks, n = {n}, rank {r}: {}", c.op);
                    }
                }
            }
        }
    }
}

#[test]
fn sized_checks_catch_wrong_counts_and_results() {
    // The p2p algorithms of `threads` count differently from the flat model: asking
    // for flat counts must report it (so the device check can fail).
    let res = threads::run(4, |rank| check::sized(rank.comm(Backend::Threads).as_ref(), 16, true)).unwrap();
    let bad: Vec<&str> = res[0].iter().filter(|c| c.error.is_some()).map(|c| c.op.as_str()).collect();
    assert!(bad.contains(&"allreduce sum") && bad.contains(&"broadcast root 0"), "{bad:?}");
    assert!(res[0].iter().filter_map(|c| c.error.as_deref()).all(|e| e.starts_with("counts")));
    // A communicator that corrupts all-reduces is caught.
    struct Liar(Box<dyn Communicator>);
    impl Communicator for Liar {
        fn rank(&self) -> usize {
            self.0.rank()
        }
        fn size(&self) -> usize {
            self.0.size()
        }
        fn backend(&self) -> Backend {
            self.0.backend()
        }
        fn stats(&self) -> CommStats {
            self.0.stats()
        }
        fn barrier(&self) {
            self.0.barrier()
        }
        fn send(&self, d: usize, t: u32, x: &[f64]) {
            self.0.send(d, t, x)
        }
        fn recv(&self, s: usize, t: u32) -> Vec<f64> {
            self.0.recv(s, t)
        }
        fn broadcast(&self, b: &mut [f64], root: usize) {
            self.0.broadcast(b, root)
        }
        fn reduce(&self, s: &[f64], r: &mut [f64], op: ReduceOp, root: usize) {
            self.0.reduce(s, r, op, root)
        }
        fn allreduce(&self, b: &mut [f64], op: ReduceOp) {
            self.0.allreduce(b, op);
            if let Some(x) = b.last_mut() {
                *x += 1e-9;
            }
        }
        fn allgatherv(&self, s: &[f64], c: &[usize], r: &mut [f64]) {
            self.0.allgatherv(s, c, r)
        }
        fn reduce_scatter(&self, s: &[f64], c: &[usize], r: &mut [f64], op: ReduceOp) {
            self.0.reduce_scatter(s, c, r, op)
        }
        fn alltoallv(&self, s: &[f64], sc: &[usize], r: &mut [f64], rc: &[usize]) {
            self.0.alltoallv(s, sc, r, rc)
        }
        fn counter(&self) -> Box<dyn SharedCounter> {
            self.0.counter()
        }
    }
    let res = threads::run(2, |rank| check::sized(&Liar(rank.comm(Backend::Shm)), 10, true)).unwrap();
    let bad: Vec<&str> = res[1].iter().filter(|c| c.error.is_some()).map(|c| c.op.as_str()).collect();
    assert_eq!(bad, vec!["allreduce sum", "allreduce max", "allreduce min"]);
}

#[test]
fn flat_counts_follow_the_model() {
    use check::{flat_counts, Call};
    let s = flat_counts(&Call::Broadcast { n: 10, root: 1 }, 4, 1);
    assert_eq!((s.messages_sent, s.words_sent, s.messages_received), (3, 30, 0));
    let s = flat_counts(&Call::ReduceScatter { counts: vec![1, 2, 3] }, 3, 2);
    assert_eq!((s.messages_sent, s.words_sent, s.messages_received, s.words_received), (2, 3, 2, 6));
    // One rank moves nothing.
    assert_eq!(flat_counts(&Call::Allreduce { n: 99 }, 1, 0), CommStats::default());
    assert_eq!(check::uneven(10, 4), vec![1, 2, 3, 4]);
    assert_eq!(check::uneven(7, 3), vec![1, 2, 4]);
    assert_eq!(check::uneven(0, 2), vec![0, 0]);
}

#[test]
fn backends_say_whether_this_build_has_them() {
    assert_eq!(Backend::Threads.available(), Ok(()));
    assert_eq!(Backend::Nccl.available().is_ok(), cfg!(feature = "nccl"));
    assert_eq!(Backend::Mpi.available().is_ok(), cfg!(feature = "mpi"));
    if let Err(e) = Backend::Nccl.available() {
        assert!(e.contains("--features nccl"), "{e}");
    }
    // `nccl` is a name tables can use: a table of the nccl world reads back.
    let t = crate::tune::TuningTable::default_for(World::Nccl);
    let back = crate::tune::TuningTable::from_toml(&t.to_toml()).unwrap();
    assert_eq!(back.choose(Collective::Allreduce, 1 << 20), Some(Backend::Nccl));
    assert_eq!(Backend::from_name("nccl"), Some(Backend::Nccl));
}

#[test]
fn algorithms_over_groups_of_ranks() {
    // Two groups (odd and even ranks, the even ones in reverse order), each running
    // the ring all-gather, ring reduce-scatter, direct reduce and pairwise exchange.
    for_worlds(|_, c| {
        let (p, me) = (c.size(), c.rank());
        let mut members: Vec<usize> = (0..p).filter(|q| q % 2 == me % 2).collect();
        if me % 2 == 0 {
            members.reverse();
        }
        let g = algo::Group::new(c, members.clone(), 7);
        let (q, r) = (algo::Transport::size(&g), algo::Transport::rank(&g));
        assert_eq!(g.member(r), me);
        let counts: Vec<usize> = (0..q).map(|k| (k * 3 + 1) % 4).collect();
        let total: usize = counts.iter().sum();
        let before = c.stats();
        let mut all = vec![0.0; total];
        algo::allgatherv(&g, &data(me, counts[r]), &counts, &mut all);
        let want: Vec<f64> = (0..q).flat_map(|k| data(members[k], counts[k])).collect();
        assert_eq!(all, want);
        let mid = c.stats();
        // Ring: rank r sends every block but its successor's.
        assert_eq!(mid.words_sent - before.words_sent, (total - counts[(r + 1) % q]) as u64);

        let mut rs = vec![0.0; counts[r]];
        algo::reduce_scatter_ring(&g, &data(me, total), &counts, &mut rs, ReduceOp::Sum);
        let (sum, d) = (sum_of(&members, total), displs(&counts));
        assert!(close(&rs, &sum[d[r]..d[r] + counts[r]]));
        // Ring: rank r sends every block but its own.
        assert_eq!(c.stats().words_sent - mid.words_sent, (total - counts[r]) as u64);

        let mut red = if r == 0 { vec![0.0; 5] } else { Vec::new() };
        algo::reduce_direct(&g, &data(me, 5), &mut red, ReduceOp::Sum, 0);
        if r == 0 {
            assert!(close(&red, &sum_of(&members, 5)));
        }

        let sc: Vec<usize> = (0..q).map(|k| (r + k) % 3).collect();
        let send: Vec<f64> = (0..q).flat_map(|k| (0..sc[k]).map(move |i| (r * 100 + k * 10 + i) as f64)).collect();
        let rc: Vec<usize> = (0..q).map(|s| (s + r) % 3).collect();
        let mut recv = vec![0.0; rc.iter().sum()];
        algo::alltoallv(&g, &send, &sc, &mut recv, &rc);
        let want: Vec<f64> = (0..q).flat_map(|s| (0..rc[s]).map(move |i| (s * 100 + r * 10 + i) as f64)).collect();
        assert_eq!(recv, want);
    });
}

/// The sum of the members' test vectors of length n, in member order.
fn sum_of(members: &[usize], n: usize) -> Vec<f64> {
    let mut s = data(members[0], n);
    for &m in &members[1..] {
        ReduceOp::Sum.combine(&mut s, &data(m, n));
    }
    s
}
