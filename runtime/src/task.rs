//! DLTC-style tile tasks: a contraction's work is a [`TileSpace`] (the box of its
//! output split into tiles), described by extents and tile sizes rather than a
//! materialized list; several independent contractions form one [`TaskSet`] whose
//! tasks are numbered consecutively, so they run concurrently. Workers (threads of a
//! [`ThreadPool`], or ranks) claim task numbers:
//!
//! * [`Schedule::Static`]: worker `w` of `W` runs the block `[w·T/W, (w+1)·T/W)`;
//! * [`Schedule::Dynamic`]: workers take the next `chunk` numbers from a shared
//!   counter (an atomic in a process; across MPI ranks `MPI_Fetch_and_op` on a window
//!   of rank 0 — the NXTVAL idea), so a worker that drew cheap tasks takes more.

use crate::comm::SharedCounter;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// How tasks are assigned to workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    Static,
    Dynamic,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Static => "static",
            Schedule::Dynamic => "dynamic",
        }
    }
}

/// The tiles of a box `[0, extents[d])` with tile sizes `tile[d]` (the last tile of
/// a dimension may be smaller). Tiles are numbered in row-major order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileSpace {
    extents: Vec<usize>,
    tile: Vec<usize>,
    counts: Vec<usize>,
}

impl TileSpace {
    /// Panics if the lengths differ or a tile size is 0.
    pub fn new(extents: Vec<usize>, tile: Vec<usize>) -> TileSpace {
        assert_eq!(extents.len(), tile.len(), "TileSpace: {} extents but {} tile sizes", extents.len(), tile.len());
        assert!(tile.iter().all(|&t| t > 0), "TileSpace: a tile size is 0");
        let counts = extents.iter().zip(&tile).map(|(&n, &t)| n.div_ceil(t)).collect();
        TileSpace { extents, tile, counts }
    }
    /// Tiles per dimension.
    pub fn counts(&self) -> &[usize] {
        &self.counts
    }
    pub fn extents(&self) -> &[usize] {
        &self.extents
    }
    /// Number of tiles (1 for a zero-dimensional space: one task, the whole thing).
    pub fn len(&self) -> usize {
        self.counts.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The index ranges of tile `id`.
    pub fn tile(&self, id: usize) -> Vec<Range<usize>> {
        assert!(id < self.len(), "tile {id} of {}", self.len());
        let mut rest = id;
        let mut out = vec![0..0; self.counts.len()];
        for d in (0..self.counts.len()).rev() {
            let k = rest % self.counts[d];
            rest /= self.counts[d];
            let lo = k * self.tile[d];
            out[d] = lo..(lo + self.tile[d]).min(self.extents[d]);
        }
        out
    }
    pub fn iter(&self) -> impl Iterator<Item = Vec<Range<usize>>> + '_ {
        (0..self.len()).map(|i| self.tile(i))
    }
}

/// Several tile spaces numbered one after the other.
#[derive(Debug, Clone, Default)]
pub struct TaskSet {
    spaces: Vec<TileSpace>,
    starts: Vec<usize>,
    total: usize,
}

impl TaskSet {
    pub fn new(spaces: Vec<TileSpace>) -> TaskSet {
        let mut starts = Vec::with_capacity(spaces.len());
        let mut total = 0;
        for s in &spaces {
            starts.push(total);
            total += s.len();
        }
        TaskSet { spaces, starts, total }
    }
    pub fn len(&self) -> usize {
        self.total
    }
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
    pub fn spaces(&self) -> &[TileSpace] {
        &self.spaces
    }
    /// Task `id` as (space, tile of that space).
    pub fn locate(&self, id: usize) -> (usize, usize) {
        assert!(id < self.total, "task {id} of {}", self.total);
        let s = self.starts.partition_point(|&st| st <= id) - 1;
        // Skip empty spaces that share a start.
        let mut s = s;
        while self.spaces[s].is_empty() {
            s += 1;
        }
        (s, id - self.starts[s])
    }
}

/// The static block of worker `w` of `workers` over `total` tasks.
pub fn static_block(total: usize, w: usize, workers: usize) -> Range<usize> {
    (w * total / workers)..((w + 1) * total / workers)
}

/// Runs `f(task)` for the tasks this worker gets: its static block, or dynamic claims
/// of `chunk` tasks from `counter` (shared by all workers, starting at 0). Returns how
/// many tasks it ran.
pub fn run_tasks(
    total: usize,
    worker: usize,
    workers: usize,
    schedule: Schedule,
    counter: &dyn SharedCounter,
    chunk: usize,
    mut f: impl FnMut(usize),
) -> usize {
    let mut ran = 0;
    match schedule {
        Schedule::Static => {
            for t in static_block(total, worker, workers) {
                f(t);
                ran += 1;
            }
        }
        Schedule::Dynamic => {
            let chunk = chunk.max(1) as u64;
            loop {
                let start = counter.fetch_add(chunk) as usize;
                if start >= total {
                    break;
                }
                for t in start..(start + chunk as usize).min(total) {
                    f(t);
                    ran += 1;
                }
            }
        }
    }
    ran
}

/// A counter local to one process (what a thread pool's workers share).
#[derive(Debug, Default)]
pub struct LocalCounter {
    value: AtomicU64,
    ops: AtomicU64,
}

impl SharedCounter for LocalCounter {
    fn fetch_add(&self, n: u64) -> u64 {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.value.fetch_add(n, Ordering::SeqCst)
    }
    fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }
}

/// A pool of worker threads for tile tasks (threads are started per call with
/// scoped threads; the pool holds the configuration).
#[derive(Debug, Clone)]
pub struct ThreadPool {
    threads: usize,
}

impl ThreadPool {
    pub fn new(threads: usize) -> ThreadPool {
        ThreadPool { threads: threads.max(1) }
    }
    /// As many workers as the machine has cores.
    pub fn with_available_parallelism() -> ThreadPool {
        ThreadPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
    pub fn threads(&self) -> usize {
        self.threads
    }
    /// Runs `f(task, worker)` for every task in `0..tasks`; returns how many tasks
    /// each worker ran. A panicking task propagates after all workers stop.
    pub fn parallel_for(&self, tasks: usize, schedule: Schedule, f: impl Fn(usize, usize) + Sync) -> Vec<usize> {
        let counter = LocalCounter::default();
        let w = self.threads;
        if w == 1 {
            return vec![run_tasks(tasks, 0, 1, schedule, &counter, 1, |t| f(t, 0))];
        }
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..w)
                .map(|k| {
                    let (f, counter) = (&f, &counter);
                    s.spawn(move || run_tasks(tasks, k, w, schedule, counter, 1, |t| f(t, k)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        })
    }
    /// Runs `f(space, tile ranges, worker)` for every tile of every space of `set`.
    pub fn for_tiles(
        &self,
        set: &TaskSet,
        schedule: Schedule,
        f: impl Fn(usize, &[Range<usize>], usize) + Sync,
    ) -> Vec<usize> {
        self.parallel_for(set.len(), schedule, |t, w| {
            let (s, k) = set.locate(t);
            f(s, &set.spaces()[s].tile(k), w)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    #[test]
    fn tiles_cover_the_box_exactly_once() {
        let s = TileSpace::new(vec![5, 3, 4], vec![2, 3, 3]);
        assert_eq!(s.counts(), &[3, 1, 2]);
        assert_eq!(s.len(), 6);
        let mut hit = vec![0u8; 5 * 3 * 4];
        for t in s.iter() {
            for i in t[0].clone() {
                for j in t[1].clone() {
                    for k in t[2].clone() {
                        hit[(i * 3 + j) * 4 + k] += 1;
                    }
                }
            }
        }
        assert!(hit.iter().all(|&h| h == 1), "{hit:?}");
        assert_eq!(s.tile(5), vec![4..5, 0..3, 3..4]);
        let scalar = TileSpace::new(vec![], vec![]);
        assert_eq!(scalar.len(), 1);
        assert_eq!(scalar.tile(0), Vec::<Range<usize>>::new());
        assert!(TileSpace::new(vec![0, 3], vec![1, 1]).is_empty());
    }

    #[test]
    fn task_set_numbers_spaces_consecutively() {
        let set = TaskSet::new(vec![
            TileSpace::new(vec![4], vec![2]),
            TileSpace::new(vec![0], vec![1]),
            TileSpace::new(vec![3], vec![1]),
        ]);
        assert_eq!(set.len(), 5);
        let got: Vec<_> = (0..5).map(|t| set.locate(t)).collect();
        assert_eq!(got, vec![(0, 0), (0, 1), (2, 0), (2, 1), (2, 2)]);
    }

    #[test]
    fn both_schedules_run_every_task_once() {
        for schedule in [Schedule::Static, Schedule::Dynamic] {
            for threads in [1, 3] {
                let seen = Mutex::new(vec![0u32; 101]);
                let per = ThreadPool::new(threads).parallel_for(101, schedule, |t, _| seen.lock().unwrap()[t] += 1);
                assert!(seen.lock().unwrap().iter().all(|&c| c == 1));
                assert_eq!(per.iter().sum::<usize>(), 101);
                assert_eq!(per.len(), threads);
            }
        }
        assert_eq!(static_block(10, 2, 3), 6..10);
    }

    /// The one timed test: tasks of skewed cost (the first eighth takes 25 ms, the
    /// rest 1 ms; costs are sleeps, so the test measures scheduling, not the load of
    /// the machine). Static blocks give all the heavy tasks to worker 0; dynamic
    /// claims spread them. Makespans are measured in one run and compared as a ratio.
    #[test]
    fn dynamic_beats_static_on_skewed_tasks() {
        let pool = ThreadPool::new(4);
        let tasks = 32;
        let cost = |t: usize| Duration::from_millis(if t < tasks / 8 { 25 } else { 1 });
        let makespan = |schedule| {
            let t0 = Instant::now();
            pool.parallel_for(tasks, schedule, |t, _| std::thread::sleep(cost(t)));
            t0.elapsed().as_secs_f64()
        };
        let st = makespan(Schedule::Static);
        let dy = makespan(Schedule::Dynamic);
        eprintln!("threads: static {st:.3}s, dynamic {dy:.3}s, ratio {:.2}", dy / st);
        // Ideal: static 4·25 + 4·1 = 104 ms; dynamic ≈ (100 + 28) / 4 ≈ 32..40 ms.
        assert!(dy / st < 0.85, "dynamic {dy:.3}s vs static {st:.3}s: ratio {:.2}", dy / st);
    }
}
