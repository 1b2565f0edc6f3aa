//! The `nccl` back end over cudarc (see [`super`] for what each operation does).

use super::UniqueId;
use crate::comm::{displs, Backend, CommStats, Communicator, ReduceOp, SharedCounter, MAX_USER_TAG};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaViewMut, DriverError};
use cudarc::nccl::{result as nres, safe as nsafe, sys as nsys};
use std::cell::{Cell, RefCell, RefMut};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// NCCL's own text for an error code.
fn describe(e: &nres::NcclError) -> String {
    // SAFETY: ncclGetErrorString returns a static C string for every code.
    let text = unsafe {
        let p = nsys::ncclGetErrorString(e.0);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    format!("{:?}: {text}", e.0)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// Runs `f`, turning a panic of the library loader (cudarc panics when a library
/// lacks a symbol) into an `Err`.
fn guard<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!("loading CUDA or NCCL failed: {}", panic_text(p.as_ref()))),
    }
}

/// Whether the CUDA driver and libnccl can be loaded.
fn libraries() -> Result<(), String> {
    // SAFETY: probing only loads the libraries.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("the CUDA driver library (libcuda.so) is not installed: the nccl back end needs an NVIDIA GPU and its driver".into());
    }
    // SAFETY: as above.
    if !unsafe { nsys::is_culib_present() } {
        return Err("libnccl was not found: cudarc loads `libnccl.so` (not `libnccl.so.2`); put a folder holding a libnccl.so (a link to libnccl.so.2 will do) on LD_LIBRARY_PATH".into());
    }
    Ok(())
}

pub(super) fn unique_id() -> Result<UniqueId, String> {
    guard(|| {
        libraries()?;
        let id = nsafe::Id::new().map_err(|e| format!("ncclGetUniqueId: {}", describe(&e)))?;
        let mut b = [0u8; 128];
        b.iter_mut().zip(id.internal()).for_each(|(x, &c)| *x = c as u8);
        Ok(UniqueId(b))
    })
}

/// Messages kept for later receives: (tag, data), in arrival order.
type Queue = VecDeque<(u32, Vec<f64>)>;
/// Counters of this process by (communicator id, counter number).
type Registry = Mutex<HashMap<([u8; 128], u64), Weak<AtomicU64>>>;

/// Device scratch: `a` and `b` for data, `hdr` for send headers and barriers.
struct Bufs {
    a: CudaSlice<f64>,
    b: CudaSlice<f64>,
    hdr: CudaSlice<f64>,
}

/// One rank of an NCCL communicator (see [`super`]). Not `Send`: it stays on the
/// thread that made it, which has its CUDA context.
pub struct NcclComm {
    comm: nsafe::Comm,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    id: UniqueId,
    rank: usize,
    size: usize,
    bufs: RefCell<Bufs>,
    stats: Cell<CommStats>,
    grouped: Cell<bool>,
    /// Messages this rank sent itself.
    own: RefCell<Queue>,
    /// Messages received while looking for another tag, per source.
    stash: RefCell<HashMap<usize, Queue>>,
    counters: Cell<u64>,
}

impl NcclComm {
    /// A one-rank communicator on CUDA device 0.
    pub fn single() -> Result<NcclComm, String> {
        let id = super::UniqueId::new()?;
        NcclComm::from_rank(0, 1, &id, 0)
    }

    /// Rank `rank` of `size` on CUDA device `device`; every rank passes the same
    /// `id`. Blocks until all `size` ranks have joined (`ncclCommInitRank`).
    pub fn from_rank(rank: usize, size: usize, id: &UniqueId, device: usize) -> Result<NcclComm, String> {
        if rank >= size || size > i32::MAX as usize {
            return Err(format!("nccl: rank {rank} of {size} is not a rank of the communicator"));
        }
        guard(|| {
            libraries()?;
            let ctx = CudaContext::new(device).map_err(|e| format!("cannot open CUDA device {device}: {e:?}"))?;
            // One stream only: cudarc's cross-stream event tracking is not needed.
            // SAFETY: every buffer of this communicator is used on `stream` alone.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().map_err(|e| format!("cannot create a CUDA stream: {e:?}"))?;
            let mut internal = [0 as std::ffi::c_char; 128];
            internal.iter_mut().zip(&id.0).for_each(|(c, &b)| *c = b as std::ffi::c_char);
            let comm = nsafe::Comm::from_rank(stream.clone(), rank, size, nsafe::Id::uninit(internal))
                .map_err(|e| format!("ncclCommInitRank (rank {rank} of {size}, device {device}): {}", describe(&e)))?;
            let alloc =
                |n: usize| stream.alloc_zeros::<f64>(n).map_err(|e| format!("cannot allocate device memory: {e:?}"));
            let bufs = Bufs { a: alloc(1)?, b: alloc(1)?, hdr: alloc(2)? };
            Ok(NcclComm {
                comm,
                ctx,
                stream,
                id: *id,
                rank,
                size,
                bufs: RefCell::new(bufs),
                stats: Cell::new(CommStats::default()),
                grouped: Cell::new(false),
                own: RefCell::new(VecDeque::new()),
                stash: RefCell::new(HashMap::new()),
                counters: Cell::new(0),
            })
        })
    }

    /// With `on`, all-gathers and reduce-scatters of equal blocks also take the
    /// grouped path of uneven ones (one broadcast or reduce per rank), so that a
    /// single GPU, where every block is the whole buffer, tests that path too.
    pub fn set_grouped(&self, on: bool) {
        self.grouped.set(on)
    }

    /// The CUDA device's name.
    pub fn device_name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "CUDA device".into())
    }

    /// NCCL's version, e.g. 22703 for 2.27.3.
    pub fn nccl_version() -> Result<i32, String> {
        guard(|| {
            libraries()?;
            nres::get_nccl_version().map_err(|e| describe(&e))
        })
    }

    fn drv<T>(&self, r: Result<T, DriverError>, what: &str) -> T {
        r.unwrap_or_else(|e| panic!("nccl back end, rank {}: {what} failed: {e:?}", self.rank))
    }
    fn nc<T>(&self, r: Result<T, nres::NcclError>, what: &str) -> T {
        r.unwrap_or_else(|e| panic!("nccl back end, rank {}: {what} failed: {}", self.rank, describe(&e)))
    }
    fn sync(&self) {
        self.drv(self.stream.synchronize(), "waiting for the stream");
    }
    /// The scratch buffers, `a` with at least `na` words and `b` with `nb`.
    fn bufs(&self, na: usize, nb: usize) -> RefMut<'_, Bufs> {
        self.drv(self.ctx.bind_to_thread(), "making the CUDA context current");
        let mut guard = self.bufs.borrow_mut();
        let s = &mut *guard;
        for (buf, n) in [(&mut s.a, na), (&mut s.b, nb)] {
            if buf.len() < n {
                let grown = n.max(2 * buf.len());
                *buf = self.drv(self.stream.alloc_zeros::<f64>(grown), "allocating device scratch");
            }
        }
        guard
    }
    fn put(&self, src: &[f64], dst: &mut CudaViewMut<'_, f64>) {
        if !src.is_empty() {
            self.drv(self.stream.memcpy_htod(src, dst), "copying to the device");
        }
    }
    fn get(&self, src: &CudaSlice<f64>, from: usize, dst: &mut [f64]) {
        if !dst.is_empty() {
            self.drv(self.stream.memcpy_dtoh(&src.slice(from..from + dst.len()), dst), "copying from the device");
        }
    }
    /// Runs `f` inside `ncclGroupStart`/`ncclGroupEnd` (ended even if `f` fails).
    fn group(&self, what: &str, f: impl FnOnce() -> Result<(), nres::NcclError>) {
        self.nc(nres::group_start(), "ncclGroupStart");
        let r = f();
        let end = nres::group_end();
        self.nc(r, what);
        self.nc(end, "ncclGroupEnd");
    }
    fn count(&self, words: usize, messages: usize) {
        let mut s = self.stats.get();
        s.words_sent += (words * messages) as u64;
        s.messages_sent += messages as u64;
        self.stats.set(s);
    }
    fn count_in(&self, words: usize, messages: usize) {
        let mut s = self.stats.get();
        s.words_received += (words * messages) as u64;
        s.messages_received += messages as u64;
        self.stats.set(s);
    }
    fn check_rank(&self, what: &str, q: usize) {
        assert!(q < self.size, "{what}: rank {q} out of range for {} ranks", self.size);
    }
    fn check_counts(&self, what: &str, counts: &[usize]) {
        assert_eq!(counts.len(), self.size, "{what}: {} counts for {} ranks", counts.len(), self.size);
    }

    /// The all-gather(v) itself, uncounted (the counter's setup uses it too).
    fn gather(&self, send: &[f64], counts: &[usize], recv: &mut [f64]) {
        let total: usize = counts.iter().sum();
        if total == 0 {
            return;
        }
        let d = displs(counts);
        let equal = counts.iter().all(|&n| n == counts[0]) && !self.grouped.get();
        let mut guard = self.bufs(send.len(), total);
        let s = &mut *guard;
        if equal {
            self.put(send, &mut s.a.slice_mut(0..send.len()));
            let (a, b) = (&s.a, &mut s.b);
            self.nc(self.comm.all_gather(&a.slice(0..send.len()), &mut b.slice_mut(0..total)), "ncclAllGather");
        } else {
            self.put(send, &mut s.b.slice_mut(d[self.rank]..d[self.rank] + send.len()));
            let b = &mut s.b;
            self.group("ncclBroadcast (all-gatherv)", || {
                for (q, &n) in counts.iter().enumerate().filter(|c| *c.1 > 0) {
                    self.comm.broadcast_in_place(&mut b.slice_mut(d[q]..d[q] + n), q as i32)?;
                }
                Ok(())
            });
        }
        self.get(&s.b, 0, recv);
        self.sync();
    }

    /// Receives the next message from `src` (another rank): header, then data.
    fn recv_next(&self, src: usize) -> (u32, Vec<f64>) {
        let mut guard = self.bufs(0, 0);
        let s = &mut *guard;
        self.nc(self.comm.recv(&mut s.hdr, src as i32).map(|_| ()), "ncclRecv (header)");
        let mut h = [0.0; 2];
        self.get(&s.hdr, 0, &mut h);
        self.sync();
        let (tag, n) = (h[0] as u32, h[1] as usize);
        drop(guard);
        let mut v = vec![0.0; n];
        if n > 0 {
            let mut guard = self.bufs(n, 0);
            let s = &mut *guard;
            self.nc(self.comm.recv(&mut s.a.slice_mut(0..n), src as i32).map(|_| ()), "ncclRecv");
            self.get(&s.a, 0, &mut v);
            self.sync();
        }
        (tag, v)
    }
}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclComm {{ rank: {}, size: {}, device: {} }}", self.rank, self.size, self.ctx.ordinal())
    }
}

fn nccl_op(op: ReduceOp) -> nsafe::ReduceOp {
    match op {
        ReduceOp::Sum => nsafe::ReduceOp::Sum,
        ReduceOp::Max => nsafe::ReduceOp::Max,
        ReduceOp::Min => nsafe::ReduceOp::Min,
    }
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn backend(&self) -> Backend {
        Backend::Nccl
    }
    fn stats(&self) -> CommStats {
        self.stats.get()
    }
    fn barrier(&self) {
        let mut guard = self.bufs(0, 0);
        let s = &mut *guard;
        self.nc(
            self.comm.all_reduce_in_place(&mut s.hdr.slice_mut(0..1), &nsafe::ReduceOp::Sum),
            "ncclAllReduce (barrier)",
        );
        self.sync();
    }
    fn send(&self, dest: usize, tag: u32, data: &[f64]) {
        assert!(tag < MAX_USER_TAG, "tag {tag} is reserved");
        self.check_rank("send", dest);
        self.count(data.len(), 1);
        if dest == self.rank {
            self.own.borrow_mut().push_back((tag, data.to_vec()));
            return;
        }
        let mut guard = self.bufs(data.len(), 0);
        let s = &mut *guard;
        self.put(&[tag as f64, data.len() as f64], &mut s.hdr.slice_mut(0..2));
        self.nc(self.comm.send(&s.hdr, dest as i32), "ncclSend (header)");
        self.sync();
        if !data.is_empty() {
            self.put(data, &mut s.a.slice_mut(0..data.len()));
            self.nc(self.comm.send(&s.a.slice(0..data.len()), dest as i32), "ncclSend");
            self.sync();
        }
    }
    fn recv(&self, src: usize, tag: u32) -> Vec<f64> {
        self.check_rank("recv", src);
        let take = |q: &mut Queue| q.iter().position(|m| m.0 == tag).and_then(|i| q.remove(i)).map(|m| m.1);
        let got = if src == self.rank {
            let v = take(&mut self.own.borrow_mut());
            Some(v.unwrap_or_else(|| {
                panic!(
                    "nccl back end, rank {src}: receive from itself with tag {tag}, but no such message was sent (it would wait forever)"
                )
            }))
        } else {
            take(self.stash.borrow_mut().entry(src).or_default())
        };
        let v = got.unwrap_or_else(|| loop {
            let (t, v) = self.recv_next(src);
            if t == tag {
                break v;
            }
            self.stash.borrow_mut().entry(src).or_default().push_back((t, v));
        });
        self.count_in(v.len(), 1);
        v
    }
    fn broadcast(&self, buf: &mut [f64], root: usize) {
        self.check_rank("broadcast", root);
        if self.rank == root {
            self.count(buf.len(), self.size - 1);
        } else {
            self.count_in(buf.len(), 1);
        }
        let n = buf.len();
        if n == 0 {
            return;
        }
        let mut guard = self.bufs(n, 0);
        let s = &mut *guard;
        if self.rank == root {
            self.put(buf, &mut s.a.slice_mut(0..n));
        }
        self.nc(self.comm.broadcast_in_place(&mut s.a.slice_mut(0..n), root as i32), "ncclBroadcast");
        if self.rank != root {
            self.get(&s.a, 0, buf);
        }
        self.sync();
    }
    fn reduce(&self, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize) {
        self.check_rank("reduce", root);
        let n = send.len();
        if self.rank == root {
            assert_eq!(recv.len(), n, "reduce: receive buffer length");
            self.count_in(n, self.size - 1);
        } else {
            self.count(n, 1);
        }
        if n == 0 {
            return;
        }
        let mut guard = self.bufs(n, 0);
        let s = &mut *guard;
        self.put(send, &mut s.a.slice_mut(0..n));
        self.nc(self.comm.reduce_in_place(&mut s.a.slice_mut(0..n), &nccl_op(op), root as i32), "ncclReduce");
        if self.rank == root {
            self.get(&s.a, 0, recv);
        }
        self.sync();
    }
    fn allreduce(&self, buf: &mut [f64], op: ReduceOp) {
        self.count(buf.len(), self.size - 1);
        self.count_in(buf.len(), self.size - 1);
        let n = buf.len();
        if n == 0 {
            return;
        }
        let mut guard = self.bufs(n, 0);
        let s = &mut *guard;
        self.put(buf, &mut s.a.slice_mut(0..n));
        self.nc(self.comm.all_reduce_in_place(&mut s.a.slice_mut(0..n), &nccl_op(op)), "ncclAllReduce");
        self.get(&s.a, 0, buf);
        self.sync();
    }
    fn allgatherv(&self, send: &[f64], counts: &[usize], recv: &mut [f64]) {
        self.check_counts("allgatherv", counts);
        assert_eq!(send.len(), counts[self.rank], "allgatherv: own block length");
        assert_eq!(recv.len(), counts.iter().sum::<usize>(), "allgatherv: receive buffer length");
        self.count(send.len(), self.size - 1);
        for (q, &n) in counts.iter().enumerate() {
            if q != self.rank {
                self.count_in(n, 1);
            }
        }
        self.gather(send, counts, recv)
    }
    fn reduce_scatter(&self, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp) {
        self.check_counts("reduce_scatter", counts);
        let total: usize = counts.iter().sum();
        let me = self.rank;
        assert_eq!(send.len(), total, "reduce_scatter: send buffer length");
        assert_eq!(recv.len(), counts[me], "reduce_scatter: receive buffer length");
        for (q, &n) in counts.iter().enumerate() {
            if q != me {
                self.count(n, 1);
            }
        }
        self.count_in(counts[me], self.size - 1);
        if total == 0 {
            return;
        }
        let d = displs(counts);
        let equal = counts.iter().all(|&n| n == counts[0]) && !self.grouped.get();
        let mut guard = self.bufs(total, counts[me]);
        let s = &mut *guard;
        self.put(send, &mut s.a.slice_mut(0..total));
        let (a, b) = (&s.a, &mut s.b);
        if equal {
            self.nc(
                self.comm.reduce_scatter(&a.slice(0..total), &mut b.slice_mut(0..counts[me]), &nccl_op(op)),
                "ncclReduceScatter",
            );
        } else {
            self.group("ncclReduce (reduce-scatterv)", || {
                for (q, &n) in counts.iter().enumerate().filter(|c| *c.1 > 0) {
                    let mut mine = b.slice_mut(0..counts[me]);
                    let into = if q == me { Some(&mut mine) } else { None };
                    self.comm.reduce(&a.slice(d[q]..d[q] + n), into, &nccl_op(op), q as i32)?;
                }
                Ok(())
            });
        }
        self.get(&s.b, 0, recv);
        self.sync();
    }
    fn alltoallv(&self, send: &[f64], send_counts: &[usize], recv: &mut [f64], recv_counts: &[usize]) {
        self.check_counts("alltoallv", send_counts);
        self.check_counts("alltoallv", recv_counts);
        assert_eq!(send.len(), send_counts.iter().sum::<usize>(), "alltoallv: send buffer length");
        assert_eq!(recv.len(), recv_counts.iter().sum::<usize>(), "alltoallv: receive buffer length");
        let me = self.rank;
        for q in (0..self.size).filter(|&q| q != me) {
            self.count(send_counts[q], 1);
            self.count_in(recv_counts[q], 1);
        }
        // A rank with nothing to move has no pair with anyone (counts match pairwise).
        if send.is_empty() && recv.is_empty() {
            return;
        }
        let (sd, rd) = (displs(send_counts), displs(recv_counts));
        let mut guard = self.bufs(send.len(), recv.len());
        let s = &mut *guard;
        self.put(send, &mut s.a.slice_mut(0..send.len()));
        let (a, b) = (&s.a, &mut s.b);
        self.group("ncclSend/ncclRecv (all-to-allv)", || {
            for q in 0..self.size {
                if send_counts[q] > 0 {
                    self.comm.send(&a.slice(sd[q]..sd[q] + send_counts[q]), q as i32)?;
                }
                if recv_counts[q] > 0 {
                    self.comm.recv(&mut b.slice_mut(rd[q]..rd[q] + recv_counts[q]), q as i32)?;
                }
            }
            Ok(())
        });
        self.get(&s.b, 0, recv);
        self.sync();
    }
    fn counter(&self) -> Box<dyn SharedCounter> {
        let k = self.counters.get();
        self.counters.set(k + 1);
        // Take (or make) the atomic before the all-gather below, which every rank
        // enters only after this, so no rank can drop it before all hold it.
        let value = {
            static REGISTRY: OnceLock<Registry> = OnceLock::new();
            let mut reg = REGISTRY.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
            reg.retain(|_, w| w.strong_count() > 0);
            match reg.get(&(self.id.0, k)).and_then(Weak::upgrade) {
                Some(a) => a,
                None => {
                    let a = Arc::new(AtomicU64::new(0));
                    reg.insert((self.id.0, k), Arc::downgrade(&a));
                    a
                }
            }
        };
        let token = process_token();
        let mut all = vec![0.0; 4 * self.size];
        self.gather(&token, &vec![4; self.size], &mut all);
        if let Some(q) = (0..self.size).find(|&q| all[4 * q..4 * q + 4] != token) {
            panic!(
                "nccl back end: ranks {} and {q} are in different processes, and NCCL has no shared counter across processes; \
                 take the counter from an `mpi` communicator (the primary back end of a Mixed communicator)",
                self.rank
            );
        }
        Box::new(Counter { value, ops: Cell::new(0) })
    }
}

/// Four words that differ between processes (pid, start time, an address).
fn process_token() -> [f64; 4] {
    static TOKEN: OnceLock<[f64; 4]> = OnceLock::new();
    *TOKEN.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let h = t ^ (&TOKEN as *const _ as u64).rotate_left(29);
        [std::process::id() as f64, (h >> 32) as f64, (h & 0xffff_ffff) as f64, (t >> 40) as f64]
    })
}

struct Counter {
    value: Arc<AtomicU64>,
    ops: Cell<u64>,
}

impl SharedCounter for Counter {
    fn fetch_add(&self, n: u64) -> u64 {
        self.ops.set(self.ops.get() + 1);
        self.value.fetch_add(n, Ordering::SeqCst)
    }
    fn ops(&self) -> u64 {
        self.ops.get()
    }
}
