//! Dynamic balancing across ranks in one-sided task sets.
//!
//! Placement balances the modelled time of each rank's work, but at 16 ranks
//! on one host the same kernels ran at different speeds on different cores at
//! once: ranks' kernel seconds spread 0.19–0.30 s for modelled work within
//! 0.27–0.33 s, and the first ranks done waited for the last
//! (bench/distributed/results.md, run G). So each rank takes its own work items
//! through a counter every rank can reach (`Communicator::counter`: an atomic,
//! or an MPI window updated with `MPI_Fetch_and_op`), and a rank out of work
//! takes the next unstarted item of another rank: it gets the operand tiles it
//! does not own from their owners' windows, computes into a partial tile of its
//! own, and after the set every rank learns who took what (one all-gather), so
//! the owner of each written tile adds those partial tiles as it adds the
//! planned ones. Every MPI call stays on the rank's main thread, which hands
//! items to its compute threads through a [`JobQueue`]. An item is taken only
//! when the gets it needs take less time than computing it, both by the time
//! model ([`worth_taking`]: `tcc tune` measures the gets).

use super::buffer::AlignedBuf;
use crate::ids::TensorId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex};

/// Whether ranks take over each other's unstarted work in one-sided sets
/// (`TCC_STEAL`: `on`, the default; `off`; `eager`, for tests: ranks other than
/// 0 try the other ranks' work before their own and take any item, and rank 0
/// starts late, so that taking over happens on every run). On by default since
/// runs H3 and H4 (16 MPI processes, CCD o=28 v=280, alternating with and
/// without; bench/distributed/results.md): the ranks' kernel seconds spread
/// 1.07–2.28 s for balanced modelled work; taking over cut the waits at the
/// sets' ends from 0.60–0.96 s to 0.19–0.45 s and the wall time from 2.04–2.76 s
/// to 1.82–2.47 s. (On in-process ranks with CCD o=20 v=200, run G4, it had not
/// moved the median: 0.497 against 0.496 s.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Steal {
    Off,
    #[default]
    On,
    Eager,
}

/// Whether a rank should take over an item of `seconds` (modelled) whose
/// operand tiles it lacks and whose partial tile it writes have `tiles` words
/// each: when getting them (one get per tile, as the model prices gets) takes
/// less than computing the item.
pub fn worth_taking(model: &super::model::TimeModel, tiles: impl IntoIterator<Item = usize>, seconds: f64) -> bool {
    tiles.into_iter().map(|w| model.get_seconds(w)).sum::<f64>() < seconds
}

impl Steal {
    /// `TCC_STEAL` when set: `Err` with a value that is none of `on`, `off`, `eager`.
    pub fn from_env() -> Result<Option<Steal>, String> {
        match std::env::var("TCC_STEAL") {
            Err(_) => Ok(None),
            Ok(v) => match v.as_str() {
                "on" | "1" => Ok(Some(Steal::On)),
                "off" | "0" => Ok(Some(Steal::Off)),
                "eager" => Ok(Some(Steal::Eager)),
                _ => Err(v),
            },
        }
    }
}

/// A work item of another rank, taken over: the operand tiles this rank neither
/// owns nor fetched for its own items (got from their owners, or shared with the
/// item taken before it: parts of a split item read the same tiles) and the
/// partial tile it computes, which the written tile's owner adds after the set.
pub(crate) struct Taken {
    pub victim: usize,
    /// Index into the victim's work list.
    pub item: usize,
    pub operands: HashMap<(TensorId, usize), std::sync::Arc<AlignedBuf>>,
    pub partial: AlignedBuf,
}

/// What a compute thread runs next: item `k` of the rank's own list (in claim
/// order), or a taken-over item.
pub(crate) enum Job {
    Own(usize),
    Taken(*mut Taken),
}

// SAFETY: a `Taken` is created by the dispatching thread, handed to exactly one
// compute thread through the queue, and not touched by its creator again until
// every compute thread has stopped.
unsafe impl Send for Job {}

/// Jobs from the rank's main thread (which makes every communicator call) to
/// its compute threads; at most `depth` wait, so that unstarted items stay
/// where other ranks can take them.
pub(crate) struct JobQueue {
    state: Mutex<(VecDeque<Job>, bool)>,
    cv: Condvar,
    depth: usize,
    /// Nanoseconds the compute threads waited in [`JobQueue::pop`], all together.
    idle_ns: std::sync::atomic::AtomicU64,
}

impl JobQueue {
    pub fn new(depth: usize) -> JobQueue {
        JobQueue {
            state: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
            depth: depth.max(1),
            idle_ns: Default::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (VecDeque<Job>, bool)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, job: Job) {
        self.lock().0.push_back(job);
        self.cv.notify_all();
    }

    /// Whether fewer than `depth` jobs wait.
    pub fn has_room(&self) -> bool {
        self.lock().0.len() < self.depth
    }

    /// Waits (at most a millisecond) for a compute thread to take a job.
    pub fn wait_for_room(&self) {
        let g = self.lock();
        if g.0.len() >= self.depth {
            let _ = self.cv.wait_timeout(g, std::time::Duration::from_millis(1));
        }
    }

    /// The next job; `None` once the queue is closed and empty.
    pub fn pop(&self) -> Option<Job> {
        let mut g = self.lock();
        let mut since: Option<std::time::Instant> = None;
        let job = loop {
            if let Some(j) = g.0.pop_front() {
                drop(g);
                self.cv.notify_all();
                break Some(j);
            }
            if g.1 {
                break None;
            }
            since.get_or_insert_with(std::time::Instant::now);
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        };
        if let Some(t) = since {
            self.idle_ns.fetch_add(t.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        job
    }

    /// Seconds the compute threads waited for jobs, all together.
    pub fn idle_s(&self) -> f64 {
        self.idle_ns.load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-9
    }

    /// No more jobs: compute threads stop when the queue is empty.
    pub fn close(&self) {
        self.lock().1 = true;
        self.cv.notify_all();
    }
}

/// Encodes each rank's taken-over items as `(victim, item)` pairs of `f64`s for
/// an all-gather, and decodes every rank's list from it.
pub(crate) fn encode(taken: &[(usize, usize)]) -> Vec<f64> {
    taken.iter().flat_map(|&(v, i)| [v as f64, i as f64]).collect()
}

pub(crate) fn decode(all: &[f64], counts: &[usize]) -> Vec<Vec<(usize, usize)>> {
    let mut at = 0;
    counts
        .iter()
        .map(|&n| {
            let list = all[at..at + n].chunks(2).map(|c| (c[0] as usize, c[1] as usize)).collect();
            at += n;
            list
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_taken_only_when_its_gets_cost_less_than_computing_it() {
        let mut m = crate::tiled::model::TimeModel::builtin();
        m.get_alpha = 1e-5;
        m.get_beta = 1e-9; // 8e-9 s per word
                           // Two tiles of 1e5 words: 2 · (1e-5 + 8e-4) = 1.62e-3 s of gets.
        assert!(worth_taking(&m, [100_000, 100_000], 2e-3));
        assert!(!worth_taking(&m, [100_000, 100_000], 1.5e-3));
        // Many small gets pay α each.
        assert!(!worth_taking(&m, vec![10; 200], 1.9e-3));
        assert!(worth_taking(&m, Vec::<usize>::new(), 1e-9));
    }

    #[test]
    fn lists_survive_the_all_gather_encoding() {
        let lists = vec![vec![(1, 4), (2, 0)], vec![], vec![(0, 7)]];
        let all: Vec<f64> = lists.iter().flat_map(|l| encode(l)).collect();
        let counts: Vec<usize> = lists.iter().map(|l| 2 * l.len()).collect();
        assert_eq!(decode(&all, &counts), lists);
    }

    #[test]
    fn the_queue_hands_every_job_once_and_stops_when_closed() {
        let q = JobQueue::new(2);
        let got = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while let Some(Job::Own(k)) = q.pop() {
                        got.lock().unwrap().push(k);
                    }
                });
            }
            for k in 0..50 {
                while !q.has_room() {
                    q.wait_for_room();
                }
                q.push(Job::Own(k));
            }
            q.close();
        });
        let mut got = got.into_inner().unwrap();
        got.sort();
        assert_eq!(got, (0..50).collect::<Vec<_>>());
    }
}
