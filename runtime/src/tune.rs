//! The tuner: measures each back end of a world for each collective over message
//! sizes (8 B … 64 MiB by default) and writes a [`TuningTable`] as TOML, which
//! [`crate::comm::mixed::Mixed`] reads to choose a back end per operation and size.
//!
//! ```toml
//! world = "threads"
//! ranks = 4
//!
//! [[entry]]
//! op = "allreduce"
//! bytes = 8            # this entry covers sizes from 8 B up to the next entry's
//! backend = "shm"
//! [entry.seconds]      # what was measured (seconds per call, slowest rank)
//! shm = 1.9e-6
//! threads = 4.1e-6
//! ```
//!
//! The *message size* of a call is the bytes of its largest buffer per rank (see
//! [`crate::comm::mixed`]).

use crate::comm::{Backend, Collective, Communicator, ReduceOp, World};
use crate::task::static_block;
use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub op: Collective,
    /// The smallest message size (bytes) this entry applies to.
    pub bytes: u64,
    pub backend: Backend,
    /// Seconds per call measured for each back end (informational).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub seconds: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TuningTable {
    pub world: World,
    /// Ranks the table was measured with (informational: it is used for any count).
    pub ranks: usize,
    #[serde(default, rename = "entry")]
    pub entries: Vec<Entry>,
    /// What tiled runs predict their time with (`tcc run --tiled --stats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
}

/// The α-β-γ calibration of tiled runs, measured by `tcc tune`: an exchange round
/// costs `alpha + beta · bytes` (bytes: the larger of what a rank sends and
/// receives in it), a tile kernel call's cost is fitted to the rates measured on
/// a set of tile shapes while `ranks` ranks compute at once (and alone).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// The back end `alpha` and `beta` were fitted on: the one tiled runs exchange with.
    pub backend: Backend,
    /// Ranks (or threads) computing at once while the kernel rates were measured.
    pub ranks: usize,
    /// Seconds per all-to-all round, whatever its size.
    pub alpha: f64,
    /// Seconds per byte a rank sends (or receives) in an all-to-all.
    pub beta: f64,
    /// Tile kernel rates by shape.
    #[serde(default, rename = "kernel")]
    pub kernels: Vec<KernelRate>,
    /// The same rates with one thread computing alone.
    #[serde(default, rename = "kernel_alone")]
    pub kernels_alone: Vec<KernelRate>,
    /// Seconds the executor spends per kernel call around the kernel.
    #[serde(default)]
    pub call_overhead: f64,
    /// Rates of the tile kernel as the executor calls it (strided tile views of
    /// a calibration program, one thread alone), by the mean shape of each
    /// class of calls: thin products through symmetric views run slower than
    /// the same shapes on contiguous tiles.
    #[serde(default, rename = "kernel_exec", skip_serializing_if = "Vec::is_empty")]
    pub kernels_exec: Vec<KernelRate>,
    /// One-sided reads ([`measure_gets`]): seconds per get, whatever its size,
    /// and seconds per byte read, with every rank reading at once (0: not measured).
    #[serde(default)]
    pub get_alpha: f64,
    #[serde(default)]
    pub get_beta: f64,
    /// Seconds per byte of fresh tile memory first written ([`measure_touch`];
    /// 0: not measured), every rank at once and one rank alone.
    #[serde(default)]
    pub touch_per_byte: f64,
    #[serde(default)]
    pub touch_alone_per_byte: f64,
    /// The same for private memory (one process's tensors; 0: not measured).
    #[serde(default)]
    pub private_touch_per_byte: f64,
    #[serde(default)]
    pub private_touch_alone_per_byte: f64,
}

/// One thread's rate in the tile kernel on `C[m,n] += A[m,k]·B[k,n]`, operand
/// tiles read from memory (as a task reads them).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KernelRate {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub flops_per_s: f64,
}

/// `alpha` and `beta` fitted to the all-to-all times measured for `backend`:
/// `alpha` is the time of the smallest message, `beta` the median over messages
/// of 1 MiB and more (or the largest, if all are smaller) of `(t - alpha) / bytes`
/// (`None` with fewer than two sizes).
pub fn fit_alpha_beta(ms: &[Measurement], backend: Backend) -> Option<(f64, f64)> {
    let mut pts: Vec<(u64, f64)> = ms
        .iter()
        .filter(|m| m.op == Collective::Alltoall && m.backend == backend)
        .map(|m| (m.bytes, m.seconds))
        .collect();
    pts.sort_by_key(|p| p.0);
    let alpha = pts.first()?.1;
    let from = pts.last()?.0.min(1 << 20);
    let mut slopes: Vec<f64> =
        pts[1..].iter().filter(|p| p.0 >= from).map(|&(b, t)| ((t - alpha) / b as f64).max(0.0)).collect();
    if slopes.is_empty() {
        return None;
    }
    slopes.sort_by(f64::total_cmp);
    Some((alpha, slopes[slopes.len() / 2]))
}

/// The cost of one-sided reads on `c` (collective): every rank exposes a buffer
/// and reads from the next rank, all at once, in gets of 512 words (a 4 KiB
/// tile) and of `big` words, never the same words twice (out of cache, as a
/// run's tiles mostly are); α per get and β per byte from the two (best of
/// three rounds, then the largest over ranks). `None` where the back end has no
/// windows.
pub fn measure_gets(c: &dyn Communicator, big: usize) -> Option<(f64, f64)> {
    const SMALL: usize = 512;
    const SMALL_GETS: usize = 256;
    const ROUNDS: usize = 3;
    let big = big.max(2 * SMALL);
    // Each round reads words it has not read before, as a run reads each tile once.
    let per_round = big + SMALL * SMALL_GETS;
    let exposed: Vec<f64> = (0..ROUNDS * per_round).map(|i| i as f64).collect();
    // Small gets land in 8 rotating slots (not one cache-hot slot).
    let mut dst = vec![0.0; big.max(8 * SMALL)];
    let w = c.expose(&[&exposed])?;
    let next = (c.rank() + 1) % c.size();
    let mut best = [f64::INFINITY; 2];
    for round in 0..ROUNDS {
        let at = round * per_round;
        let t0 = Instant::now();
        for k in 0..SMALL_GETS {
            w.get(next, 0, at + k * SMALL, &mut dst[k % 8 * SMALL..(k % 8 + 1) * SMALL]);
        }
        best[0] = best[0].min(t0.elapsed().as_secs_f64() / SMALL_GETS as f64);
        let t0 = Instant::now();
        w.get(next, 0, at + SMALL * SMALL_GETS, &mut dst[..big]);
        best[1] = best[1].min(t0.elapsed().as_secs_f64());
    }
    w.close();
    let beta = ((best[1] - best[0]) / (8 * (big - SMALL)) as f64).max(0.0);
    let alpha = (best[0] - beta * (8 * SMALL) as f64).max(0.0);
    let mut v = [alpha, beta];
    c.allreduce(&mut v, ReduceOp::Max);
    Some((v[0], v[1]))
}

/// Seconds per byte of fresh memory a rank allocates and first writes, with
/// every rank doing so at once and with rank 0 alone (the others allocating one
/// word), as a tiled run allocates the tiles a task set writes: window memory
/// where the communicator has it (zeroed as allocated), else private memory
/// written once (always private memory with `private`: what one process's
/// tensors are). Page faults make this far from free (0.3-0.7 GB/s per rank
/// with 16 ranks at once on sandboxed hosts, where 4 KiB pages of shared memory
/// each fault), and it is paid again by every temporary. `(at once, alone)`.
pub fn measure_touch(c: &dyn Communicator, words: usize, private: bool) -> (f64, f64) {
    const ROUNDS: usize = 2;
    // Above glibc's largest mmap threshold (32 MiB): fresh pages from the system,
    // not ones an earlier free left in the heap.
    let words = words.max(MIN_TOUCH_WORDS);
    // Seconds to allocate and first write `n` words (collective where the
    // memory is window memory: every rank calls it, with its own `n`).
    let touch = |n: usize| -> Option<f64> {
        let t0 = Instant::now();
        match if private { None } else { c.alloc_window_memory(n) } {
            Some(m) => {
                let s = t0.elapsed().as_secs_f64();
                c.barrier();
                drop(m);
                Some(s)
            }
            None => {
                let mut v: Vec<f64> = Vec::new();
                v.try_reserve_exact(n).ok()?;
                v.resize(n, 0.0);
                // `resize` may leave calloc'd pages untouched: write each once.
                for x in v.iter_mut().step_by(512) {
                    *x = 1.0;
                }
                std::hint::black_box(&v);
                Some(t0.elapsed().as_secs_f64())
            }
        }
    };
    let (mut busy, mut alone) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..ROUNDS {
        c.barrier();
        busy = busy.min(touch(words).unwrap_or(0.0));
    }
    for _ in 0..ROUNDS {
        c.barrier();
        let n = if c.rank() == 0 { words } else { 1 };
        let s = touch(n).unwrap_or(0.0);
        if c.rank() == 0 {
            alone = alone.min(s);
        }
    }
    let per_byte = 1.0 / (8 * words) as f64;
    let mut v = [busy * per_byte, if c.rank() == 0 { alone * per_byte } else { 0.0 }];
    c.allreduce(&mut v, ReduceOp::Max);
    (v[0], v[1])
}

/// The fewest words [`measure_touch`] allocates: 64 MiB.
const MIN_TOUCH_WORDS: usize = 8 << 20;

/// Why a tuning file could not be used.
#[derive(Debug, Clone, PartialEq)]
pub struct TableError(pub String);

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for TableError {}

impl TuningTable {
    /// Built-in choices when no table was measured, from the measurements on a
    /// 2-core machine recorded in `bench/collectives/README.md`: in-process, the
    /// mailbox algorithms (`threads`) below 64 KiB (lower latency: no barrier) and
    /// the shared board (`shm`, one copy instead of one per tree level) from 64 KiB
    /// up, except all-to-all, where pairwise `threads` exchange wins at every size;
    /// for MPI, MPI's own collectives.
    pub fn default_for(world: World) -> TuningTable {
        let mut entries = Vec::new();
        for op in Collective::ALL {
            match world {
                World::Threads => {
                    entries.push(Entry { op, bytes: 0, backend: Backend::Threads, seconds: BTreeMap::new() });
                    if op != Collective::Alltoall {
                        entries.push(Entry { op, bytes: 64 << 10, backend: Backend::Shm, seconds: BTreeMap::new() });
                    }
                }
                World::Mpi => entries.push(Entry { op, bytes: 0, backend: Backend::Mpi, seconds: BTreeMap::new() }),
                World::Nccl => entries.push(Entry { op, bytes: 0, backend: Backend::Nccl, seconds: BTreeMap::new() }),
            }
        }
        TuningTable { world, ranks: 0, entries, calibration: None }
    }

    /// One back end for everything (for comparisons).
    pub fn single(world: World, backend: Backend) -> TuningTable {
        TuningTable {
            world,
            ranks: 0,
            calibration: None,
            entries: Collective::ALL
                .iter()
                .map(|&op| Entry { op, bytes: 0, backend, seconds: BTreeMap::new() })
                .collect(),
        }
    }

    /// The back end for `op` at `bytes`: the entry with the largest `bytes` not above
    /// the size (or the smallest entry, for sizes below all of them).
    pub fn choose(&self, op: Collective, bytes: u64) -> Option<Backend> {
        let mut best: Option<&Entry> = None;
        let mut smallest: Option<&Entry> = None;
        for e in self.entries.iter().filter(|e| e.op == op) {
            if smallest.is_none_or(|s| e.bytes < s.bytes) {
                smallest = Some(e);
            }
            if e.bytes <= bytes && best.is_none_or(|b| e.bytes >= b.bytes) {
                best = Some(e);
            }
        }
        best.or(smallest).map(|e| e.backend)
    }

    /// Whether `op`'s back end changes with the size.
    pub fn depends_on_size(&self, op: Collective) -> bool {
        let mut it = self.entries.iter().filter(|e| e.op == op).map(|e| e.backend);
        match it.next() {
            Some(first) => it.any(|b| b != first),
            None => false,
        }
    }

    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a tuning table serializes");
        format!("# tcc tuning table: the back end per collective and message size (written by `tcc tune`)\n{body}")
    }

    pub fn from_toml(text: &str) -> Result<TuningTable, TableError> {
        let t: TuningTable = toml::from_str(text).map_err(|e| TableError(format!("not a tuning table: {e}")))?;
        for e in &t.entries {
            if e.backend.world() != t.world {
                return Err(TableError(format!(
                    "entry for {} at {} bytes uses back end `{}`, which is not of the `{:?}` world",
                    e.op.name(),
                    e.bytes,
                    e.backend,
                    t.world
                )));
            }
        }
        Ok(t)
    }

    pub fn read(path: &std::path::Path) -> Result<TuningTable, TableError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| TableError(format!("cannot read `{}`: {e}", path.display())))?;
        TuningTable::from_toml(&text).map_err(|e| TableError(format!("`{}`: {}", path.display(), e.0)))
    }

    /// Merges consecutive sizes with the same choice.
    fn compact(mut self) -> TuningTable {
        self.entries.sort_by_key(|e| (e.op, e.bytes));
        let mut out: Vec<Entry> = Vec::new();
        for e in self.entries {
            if let Some(last) = out.last() {
                if last.op == e.op && last.backend == e.backend {
                    continue;
                }
            }
            out.push(e);
        }
        self.entries = out;
        self
    }
}

/// Where `tcc tune` writes by default: `$XDG_CONFIG_HOME/tcc/tuning.toml` or
/// `~/.config/tcc/tuning.toml`.
pub fn default_path() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|s| !s.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".config")))?;
    Some(base.join("tcc").join("tuning.toml"))
}

/// One measured point.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Measurement {
    pub op: Collective,
    pub bytes: u64,
    pub backend: Backend,
    /// Seconds per call, the slowest rank's.
    pub seconds: f64,
}

/// Message sizes 8 B, 32 B, 128 B, … (×4) up to `max` (included).
pub fn sizes_up_to(max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = 8u64;
    while s < max {
        v.push(s);
        match s.checked_mul(4) {
            Some(n) => s = n,
            None => break,
        }
    }
    v.push(max.max(8));
    v.dedup();
    v
}

/// Runs `op` once with message size `bytes` on `c` (buffers prepared by the caller).
fn run_op(c: &dyn Communicator, op: Collective, words: usize, a: &mut [f64], b: &mut [f64]) {
    let p = c.size();
    let r = c.rank();
    let counts: Vec<usize> = (0..p).map(|q| static_block(words, q, p).len()).collect();
    match op {
        Collective::Broadcast => c.broadcast(&mut a[..words], 0),
        Collective::Reduce => {
            let recv = if r == 0 { &mut b[..words] } else { &mut b[..0] };
            c.reduce(&a[..words], recv, ReduceOp::Sum, 0)
        }
        Collective::Allreduce => c.allreduce(&mut a[..words], ReduceOp::Sum),
        Collective::Allgather => c.allgatherv(&a[..counts[r]], &counts, &mut b[..words]),
        Collective::ReduceScatter => c.reduce_scatter(&a[..words], &counts, &mut b[..counts[r]], ReduceOp::Sum),
        Collective::Alltoall => {
            let recv_counts = vec![counts[r]; p];
            let n = counts[r] * p;
            c.alltoallv(&a[..words], &counts, &mut b[..n], &recv_counts)
        }
    }
}

/// Options of a measurement.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    pub ops: Vec<Collective>,
    pub sizes: Vec<u64>,
    /// Bytes moved per measured point (repetitions = budget / size, clamped).
    pub budget_bytes: u64,
    pub max_reps: usize,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            ops: Collective::ALL.to_vec(),
            sizes: sizes_up_to(64 << 20),
            budget_bytes: 64 << 20,
            max_reps: 200,
        }
    }
}

/// Measures every op at every size on each communicator (each one back end over
/// the same ranks; collective: every rank calls it). `progress` is called on rank 0
/// after each point. Every rank returns the same measurements (slowest rank's time).
pub fn measure(
    comms: &[&dyn Communicator],
    opts: &TuneOptions,
    progress: &mut dyn FnMut(&Measurement),
) -> Vec<Measurement> {
    try_measure(comms, opts, progress).unwrap_or_else(|e| panic!("{e}"))
}

/// [`measure`], with its buffers allocated fallibly: `Err` (before any collective,
/// on this rank only) when the largest size's buffers cannot be allocated. A caller
/// with several ranks must then abort the others, which would wait for this one.
pub fn try_measure(
    comms: &[&dyn Communicator],
    opts: &TuneOptions,
    progress: &mut dyn FnMut(&Measurement),
) -> Result<Vec<Measurement>, String> {
    let primary = comms[0];
    let max_words = opts.sizes.iter().map(|&b| usize::try_from(b.div_ceil(8)).unwrap_or(usize::MAX)).max().unwrap_or(1);
    let p = primary.size();
    let no_memory = |n: usize| format!("cannot allocate {n} words (8 bytes each) of message buffers");
    let mut a: Vec<f64> = Vec::new();
    a.try_reserve_exact(max_words).map_err(|_| no_memory(max_words))?;
    a.extend((0..max_words).map(|i| (i % 13) as f64 * 0.5));
    let len_b = max_words.checked_add(p).ok_or_else(|| no_memory(max_words))?;
    let mut b: Vec<f64> = Vec::new();
    b.try_reserve_exact(len_b).map_err(|_| no_memory(len_b))?;
    b.resize(len_b, 0.0);
    let mut out = Vec::new();
    for &op in &opts.ops {
        for &bytes in &opts.sizes {
            let words = (bytes as usize).div_ceil(8).max(1);
            let reps = ((opts.budget_bytes / bytes.max(1)) as usize).clamp(2, opts.max_reps.max(2));
            for &c in comms {
                run_op(c, op, words, &mut a, &mut b); // warm-up
                primary.barrier();
                let t0 = Instant::now();
                for _ in 0..reps {
                    run_op(c, op, words, &mut a, &mut b);
                }
                let mut t = [t0.elapsed().as_secs_f64() / reps as f64];
                primary.allreduce(&mut t, ReduceOp::Max);
                let m = Measurement { op, bytes, backend: c.backend(), seconds: t[0] };
                if primary.rank() == 0 {
                    progress(&m);
                }
                out.push(m);
            }
        }
    }
    Ok(out)
}

/// The table choosing, for each (op, size), the fastest back end measured.
pub fn table_from(world: World, ranks: usize, ms: &[Measurement]) -> TuningTable {
    let mut points: BTreeMap<(Collective, u64), BTreeMap<String, f64>> = BTreeMap::new();
    for m in ms {
        points.entry((m.op, m.bytes)).or_default().insert(m.backend.name().to_string(), m.seconds);
    }
    let entries = points
        .into_iter()
        .map(|((op, bytes), seconds)| {
            let best = seconds
                .iter()
                .min_by(|x, y| x.1.total_cmp(y.1))
                .map(|(n, _)| Backend::from_name(n).expect("measured back ends have names"))
                .expect("at least one measurement per point");
            Entry { op, bytes, backend: best, seconds }
        })
        .collect();
    TuningTable { world, ranks, entries, calibration: None }.compact_keep_first_size()
}

impl TuningTable {
    /// Compacts, but keeps the table's smallest size per op at the smallest measured
    /// size (so a reader sees where measurements began).
    fn compact_keep_first_size(self) -> TuningTable {
        self.compact()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_uses_the_entry_at_or_below_the_size() {
        let mut t = TuningTable::single(World::Threads, Backend::Shm);
        t.entries.retain(|e| e.op != Collective::Allreduce);
        for (bytes, backend) in [(8, Backend::Threads), (1024, Backend::Shm), (1 << 20, Backend::Threads)] {
            t.entries.push(Entry { op: Collective::Allreduce, bytes, backend, seconds: BTreeMap::new() });
        }
        assert_eq!(t.choose(Collective::Allreduce, 0), Some(Backend::Threads));
        assert_eq!(t.choose(Collective::Allreduce, 1023), Some(Backend::Threads));
        assert_eq!(t.choose(Collective::Allreduce, 1024), Some(Backend::Shm));
        assert_eq!(t.choose(Collective::Allreduce, 1 << 30), Some(Backend::Threads));
        assert_eq!(t.choose(Collective::Broadcast, 5), Some(Backend::Shm));
        assert!(t.depends_on_size(Collective::Allreduce));
        assert!(!t.depends_on_size(Collective::Broadcast));
        let back = TuningTable::from_toml(&t.to_toml()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn tables_from_other_worlds_are_refused() {
        let text = "world = \"threads\"\nranks = 2\n[[entry]]\nop = \"allreduce\"\nbytes = 8\nbackend = \"mpi\"\n";
        let e = TuningTable::from_toml(text).unwrap_err();
        assert!(e.0.contains("back end `mpi`"), "{e}");
        assert!(TuningTable::from_toml("world = 3").is_err());
    }

    #[test]
    fn table_from_picks_the_fastest_and_compacts() {
        let m = |bytes, backend, seconds| Measurement { op: Collective::Broadcast, bytes, backend, seconds };
        let ms = vec![
            m(8, Backend::Threads, 1.0),
            m(8, Backend::Shm, 2.0),
            m(32, Backend::Threads, 1.0),
            m(32, Backend::Shm, 3.0),
            m(128, Backend::Threads, 5.0),
            m(128, Backend::Shm, 3.0),
        ];
        let t = table_from(World::Threads, 2, &ms);
        let got: Vec<(u64, Backend)> = t.entries.iter().map(|e| (e.bytes, e.backend)).collect();
        assert_eq!(got, vec![(8, Backend::Threads), (128, Backend::Shm)]);
        assert_eq!(t.entries[1].seconds["threads"], 5.0);
    }

    #[test]
    fn sizes_cover_8_bytes_to_64_mib() {
        let s = sizes_up_to(64 << 20);
        assert_eq!(s[0], 8);
        assert_eq!(*s.last().unwrap(), 64 << 20);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn alpha_beta_fit_recovers_a_linear_cost_and_round_trips() {
        let (a, b) = (3e-6, 2e-10);
        let ms: Vec<Measurement> = sizes_up_to(64 << 20)
            .into_iter()
            .map(|bytes| Measurement {
                op: Collective::Alltoall,
                bytes,
                backend: Backend::Shm,
                seconds: a + b * bytes as f64,
            })
            .collect();
        let (fa, fb) = fit_alpha_beta(&ms, Backend::Shm).unwrap();
        assert!((fa - a).abs() < 1e-8 && (fb - b).abs() / b < 1e-3, "{fa} {fb}");
        assert!(fit_alpha_beta(&ms, Backend::Threads).is_none());
        let mut t = table_from(World::Threads, 4, &ms);
        t.calibration = Some(Calibration {
            backend: Backend::Shm,
            ranks: 4,
            alpha: fa,
            beta: fb,
            kernels: vec![
                KernelRate { m: 8, n: 8, k: 8, flops_per_s: 4e9 },
                KernelRate { m: 64, n: 12, k: 4, flops_per_s: 2e10 },
            ],
            kernels_alone: vec![KernelRate { m: 8, n: 8, k: 8, flops_per_s: 5e9 }],
            call_overhead: 1e-6,
            kernels_exec: vec![KernelRate { m: 12, n: 90, k: 4, flops_per_s: 3e9 }],
            get_alpha: 2e-7,
            get_beta: 1e-10,
            touch_per_byte: 2e-10,
            touch_alone_per_byte: 1e-10,
            private_touch_per_byte: 1e-10,
            private_touch_alone_per_byte: 5e-11,
        });
        assert_eq!(TuningTable::from_toml(&t.to_toml()).unwrap(), t);
    }
}
