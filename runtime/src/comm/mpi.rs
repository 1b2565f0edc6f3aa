//! The MPI back ends (cargo feature `mpi`): `mpi` calls MPI's own collectives;
//! `mpi-p2p` runs the point-to-point algorithms of [`super::algo`] over MPI
//! send/recv. Each communicator is a duplicate of `MPI_COMM_WORLD`, so back ends never
//! see each other's messages. The shared task counter is an `MPI_Win_allocate`d
//! window of one `u64` on rank 0, updated with `MPI_Fetch_and_op(MPI_SUM)` under a
//! shared lock (NXTVAL).
//!
//! Failure: MPI's default error handler aborts the job on an MPI error; a rank that
//! panics should call [`abort`] (tcc's `main` does), which takes every rank down
//! with `MPI_Abort`, and a rank that exits without `MPI_Finalize` makes `mpirun` kill
//! the others. Either way every rank exits non-zero instead of hanging.

use super::{algo, Backend, CommStats, Communicator, Read, ReduceOp, SharedCounter, Window, WindowMemory};
use mpi::ffi;
use std::cell::Cell;
use std::os::raw::{c_int, c_void};

/// The MPI environment: initialized once per process, finalized on drop.
pub struct MpiWorld {
    _universe: mpi::environment::Universe,
    rank: usize,
    size: usize,
}

impl MpiWorld {
    /// Initializes MPI (`None` if it was already initialized).
    pub fn init() -> Option<MpiWorld> {
        let universe = mpi::initialize()?;
        let (mut r, mut s) = (0, 0);
        unsafe {
            ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut r);
            ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut s);
        }
        Some(MpiWorld { _universe: universe, rank: r as usize, size: s as usize })
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.size
    }
    /// A new communicator over all processes (collective: same order everywhere).
    pub fn comm(&self, backend: Backend) -> Box<dyn Communicator> {
        let native = match backend {
            Backend::Mpi => true,
            Backend::MpiP2p => false,
            other => panic!("the MPI world has no `{other}` back end (use mpi or mpi-p2p)"),
        };
        let mut comm: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
        unsafe { ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut comm) };
        Box::new(MpiComm {
            comm,
            rank: self.rank,
            size: self.size,
            native,
            stats: Cell::new(CommStats::default()),
            free: false,
            allocated: Default::default(),
            one_node: Cell::new(None),
        })
    }
}

impl MpiComm {
    /// A duplicate of the caller's communicator, given by its Fortran handle
    /// (`MPI_Comm_c2f` in C; what Fortran passes as an integer), for libraries
    /// that an MPI program calls: MPI is the caller's to initialize and finalize,
    /// and the duplicate is freed on drop. `None` if MPI is not initialized or the
    /// handle is not a communicator.
    pub fn from_fortran(handle: i32) -> Option<MpiComm> {
        unsafe {
            let mut init: c_int = 0;
            ffi::MPI_Initialized(&mut init);
            let mut fin: c_int = 0;
            ffi::MPI_Finalized(&mut fin);
            if init == 0 || fin != 0 {
                return None;
            }
            let given = ffi::MPI_Comm_f2c(handle as c_int);
            if given == ffi::RSMPI_COMM_NULL {
                return None;
            }
            let mut comm: ffi::MPI_Comm = ffi::RSMPI_COMM_NULL;
            if ffi::MPI_Comm_dup(given, &mut comm) != 0 {
                return None;
            }
            let (mut r, mut s) = (0, 0);
            ffi::MPI_Comm_rank(comm, &mut r);
            ffi::MPI_Comm_size(comm, &mut s);
            Some(MpiComm {
                comm,
                rank: r as usize,
                size: s as usize,
                native: true,
                stats: Cell::new(CommStats::default()),
                free: true,
                allocated: Default::default(),
                one_node: Cell::new(None),
            })
        }
    }
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        if self.free {
            let mut fin: c_int = 0;
            unsafe {
                ffi::MPI_Finalized(&mut fin);
                if fin == 0 {
                    ffi::MPI_Comm_free(&mut self.comm);
                }
            }
        }
    }
}

/// Aborts every process of the job with `code` (for a rank that failed).
pub fn abort(code: i32) -> ! {
    unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code as c_int) };
    std::process::exit(code)
}

fn c(n: usize) -> c_int {
    c_int::try_from(n).expect("MPI counts are limited to 2^31 - 1 elements")
}

fn op_of(op: ReduceOp) -> ffi::MPI_Op {
    unsafe {
        match op {
            ReduceOp::Sum => ffi::RSMPI_SUM,
            ReduceOp::Max => ffi::RSMPI_MAX,
            ReduceOp::Min => ffi::RSMPI_MIN,
        }
    }
}

pub struct MpiComm {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    native: bool,
    stats: Cell<CommStats>,
    /// Whether the communicator is this value's own duplicate, freed on drop.
    free: bool,
    /// The live window memory this communicator allocated: address, words and
    /// window of each, and whether it is shared memory (`expose` reuses their
    /// windows).
    allocated: Registry,
    /// Whether every rank of the communicator runs on this node (asked once, at
    /// the first window memory: collective).
    one_node: Cell<Option<bool>>,
}

/// Live [`MpiWindowMemory`] of one communicator: (address, words, window, from
/// `MPI_Win_allocate_shared`).
type Registry = std::sync::Arc<std::sync::Mutex<Vec<(usize, usize, WinHandle, bool)>>>;

/// An `MPI_Win` that may cross threads (the handle is a pointer in Open MPI).
#[derive(Clone, Copy, PartialEq)]
struct WinHandle(ffi::MPI_Win);
// SAFETY: a handle; every MPI call on it stays on the thread that owns the rank's
// MPI calls (the rank's main thread).
unsafe impl Send for WinHandle {}
unsafe impl Sync for WinHandle {}

/// Memory from `MPI_Win_allocate` (or `MPI_Win_allocate_shared` when every rank
/// is on one node), in a passive-target epoch on every rank (`MPI_Win_lock_all`)
/// until dropped.
struct MpiWindowMemory {
    ptr: *mut f64,
    len: usize,
    win: WinHandle,
    registry: Registry,
}

// SAFETY: owns its memory like a `Vec<f64>`; the window is touched only on drop.
unsafe impl Send for MpiWindowMemory {}
unsafe impl Sync for MpiWindowMemory {}

impl WindowMemory for MpiWindowMemory {
    fn as_slice(&self) -> &[f64] {
        // SAFETY: `len` words (at least one allocated) that this value owns.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn as_mut_slice(&mut self) -> &mut [f64] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for MpiWindowMemory {
    fn drop(&mut self) {
        let mut list = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|&(_, _, w, _)| w != self.win);
        drop(list);
        let mut win = self.win.0;
        // SAFETY: collective (every rank drops its window memory in the same
        // order); no window of an `expose` uses it any more.
        unsafe {
            ffi::MPI_Win_unlock_all(win);
            ffi::MPI_Win_free(&mut win);
        }
    }
}

impl MpiComm {
    /// `x` reduced by `op` over every rank (collective): how ranks agree on
    /// whether a collective allocation succeeded everywhere.
    fn int_allreduce(&self, x: c_int, op: ffi::MPI_Op) -> c_int {
        let mut out: c_int = 0;
        // SAFETY: one `c_int` in and out, on this communicator.
        unsafe {
            let this = &x as *const c_int as *const c_void;
            ffi::MPI_Allreduce(this, &mut out as *mut c_int as *mut c_void, 1, ffi::RSMPI_INT32_T, op, self.comm);
        }
        out
    }
    fn count(&self, words: usize, messages: usize) {
        let mut s = self.stats.get();
        s.words_sent += (words * messages) as u64;
        s.messages_sent += messages as u64;
        self.stats.set(s);
    }
    /// Received words of a native collective, by the flat model.
    fn count_in(&self, words: usize, messages: usize) {
        let mut s = self.stats.get();
        s.words_received += (words * messages) as u64;
        s.messages_received += messages as u64;
        self.stats.set(s);
    }
    fn dbl() -> ffi::MPI_Datatype {
        unsafe { ffi::RSMPI_DOUBLE }
    }
}

impl algo::Transport for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn send(&self, dest: usize, tag: u32, data: &[f64]) {
        unsafe {
            ffi::MPI_Send(
                data.as_ptr() as *const c_void,
                c(data.len()),
                Self::dbl(),
                dest as c_int,
                tag as c_int,
                self.comm,
            )
        };
        self.count(data.len(), 1);
    }
    fn recv(&self, src: usize, tag: u32) -> Vec<f64> {
        unsafe {
            let mut st: ffi::MPI_Status = std::mem::zeroed();
            ffi::MPI_Probe(src as c_int, tag as c_int, self.comm, &mut st);
            let mut n: c_int = 0;
            ffi::MPI_Get_count(&st, Self::dbl(), &mut n);
            let mut v = vec![0.0f64; n as usize];
            ffi::MPI_Recv(
                v.as_mut_ptr() as *mut c_void,
                n,
                Self::dbl(),
                src as c_int,
                tag as c_int,
                self.comm,
                ffi::RSMPI_STATUS_IGNORE,
            );
            let mut s = self.stats.get();
            s.received(v.len());
            self.stats.set(s);
            v
        }
    }
    fn sendrecv(&self, dest: usize, data: &[f64], src: usize, tag: u32) -> Vec<f64> {
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        unsafe {
            ffi::MPI_Isend(
                data.as_ptr() as *const c_void,
                c(data.len()),
                Self::dbl(),
                dest as c_int,
                tag as c_int,
                self.comm,
                &mut req,
            );
        }
        self.count(data.len(), 1);
        let v = algo::Transport::recv(self, src, tag);
        unsafe { ffi::MPI_Wait(&mut req, ffi::RSMPI_STATUS_IGNORE) };
        v
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn backend(&self) -> Backend {
        if self.native {
            Backend::Mpi
        } else {
            Backend::MpiP2p
        }
    }
    fn stats(&self) -> CommStats {
        self.stats.get()
    }
    fn barrier(&self) {
        if self.native {
            unsafe { ffi::MPI_Barrier(self.comm) };
        } else {
            algo::barrier(self)
        }
    }
    fn send(&self, dest: usize, tag: u32, data: &[f64]) {
        assert!(tag < super::MAX_USER_TAG, "tag {tag} is reserved");
        algo::Transport::send(self, dest, tag, data)
    }
    fn recv(&self, src: usize, tag: u32) -> Vec<f64> {
        algo::Transport::recv(self, src, tag)
    }
    fn broadcast(&self, buf: &mut [f64], root: usize) {
        if !self.native {
            return algo::broadcast(self, buf, root);
        }
        if self.rank == root {
            self.count(buf.len(), self.size - 1);
        } else {
            self.count_in(buf.len(), 1);
        }
        unsafe { ffi::MPI_Bcast(buf.as_mut_ptr() as *mut c_void, c(buf.len()), Self::dbl(), root as c_int, self.comm) };
    }
    fn reduce(&self, send: &[f64], recv: &mut [f64], op: ReduceOp, root: usize) {
        if !self.native {
            return algo::reduce(self, send, recv, op, root);
        }
        if self.rank != root {
            self.count(send.len(), 1);
        } else {
            assert_eq!(recv.len(), send.len(), "reduce: receive buffer length");
            self.count_in(send.len(), self.size - 1);
        }
        let rp = if self.rank == root { recv.as_mut_ptr() as *mut c_void } else { std::ptr::null_mut() };
        unsafe {
            ffi::MPI_Reduce(
                send.as_ptr() as *const c_void,
                rp,
                c(send.len()),
                Self::dbl(),
                op_of(op),
                root as c_int,
                self.comm,
            )
        };
    }
    fn allreduce(&self, buf: &mut [f64], op: ReduceOp) {
        if !self.native {
            return algo::allreduce(self, buf, op);
        }
        self.count(buf.len(), self.size - 1);
        self.count_in(buf.len(), self.size - 1);
        let send = buf.to_vec();
        unsafe {
            ffi::MPI_Allreduce(
                send.as_ptr() as *const c_void,
                buf.as_mut_ptr() as *mut c_void,
                c(buf.len()),
                Self::dbl(),
                op_of(op),
                self.comm,
            )
        };
    }
    fn allgatherv(&self, send: &[f64], counts: &[usize], recv: &mut [f64]) {
        if !self.native {
            return algo::allgatherv(self, send, counts, recv);
        }
        assert_eq!(recv.len(), counts.iter().sum::<usize>(), "allgatherv: receive buffer length");
        self.count(send.len(), self.size - 1);
        for (q, &n) in counts.iter().enumerate() {
            if q != self.rank {
                self.count_in(n, 1);
            }
        }
        let rc: Vec<c_int> = counts.iter().map(|&n| c(n)).collect();
        let rd: Vec<c_int> = super::displs(counts).into_iter().map(c).collect();
        unsafe {
            ffi::MPI_Allgatherv(
                send.as_ptr() as *const c_void,
                c(send.len()),
                Self::dbl(),
                recv.as_mut_ptr() as *mut c_void,
                rc.as_ptr(),
                rd.as_ptr(),
                Self::dbl(),
                self.comm,
            )
        };
    }
    fn reduce_scatter(&self, send: &[f64], counts: &[usize], recv: &mut [f64], op: ReduceOp) {
        if !self.native {
            return algo::reduce_scatter(self, send, counts, recv, op);
        }
        assert_eq!(recv.len(), counts[self.rank], "reduce_scatter: receive buffer length");
        for (q, &n) in counts.iter().enumerate() {
            if q != self.rank {
                self.count(n, 1);
            }
        }
        self.count_in(counts[self.rank], self.size - 1);
        let rc: Vec<c_int> = counts.iter().map(|&n| c(n)).collect();
        unsafe {
            ffi::MPI_Reduce_scatter(
                send.as_ptr() as *const c_void,
                recv.as_mut_ptr() as *mut c_void,
                rc.as_ptr(),
                Self::dbl(),
                op_of(op),
                self.comm,
            )
        };
    }
    fn alltoallv(&self, send: &[f64], send_counts: &[usize], recv: &mut [f64], recv_counts: &[usize]) {
        if !self.native {
            return algo::alltoallv(self, send, send_counts, recv, recv_counts);
        }
        for (q, &n) in send_counts.iter().enumerate() {
            if q != self.rank {
                self.count(n, 1);
            }
        }
        for (q, &n) in recv_counts.iter().enumerate() {
            if q != self.rank {
                self.count_in(n, 1);
            }
        }
        let sc: Vec<c_int> = send_counts.iter().map(|&n| c(n)).collect();
        let sd: Vec<c_int> = super::displs(send_counts).into_iter().map(c).collect();
        let rc: Vec<c_int> = recv_counts.iter().map(|&n| c(n)).collect();
        let rd: Vec<c_int> = super::displs(recv_counts).into_iter().map(c).collect();
        unsafe {
            ffi::MPI_Alltoallv(
                send.as_ptr() as *const c_void,
                sc.as_ptr(),
                sd.as_ptr(),
                Self::dbl(),
                recv.as_mut_ptr() as *mut c_void,
                rc.as_ptr(),
                rd.as_ptr(),
                Self::dbl(),
                self.comm,
            )
        };
    }
    fn counter(&self) -> Box<dyn SharedCounter> {
        self.counters(1).pop().expect("one counter")
    }
    fn counters(&self, n: usize) -> Vec<Box<dyn SharedCounter>> {
        if n == 0 {
            return Vec::new();
        }
        // One window on rank 0 holding all `n` (one collective to make and one to
        // free, however many: a task set of the tiled executor makes one per rank).
        let win = unsafe {
            let mut base: *mut u64 = std::ptr::null_mut();
            let mut win: ffi::MPI_Win = ffi::RSMPI_WIN_NULL;
            let bytes: ffi::MPI_Aint = if self.rank == 0 { 8 * n as ffi::MPI_Aint } else { 0 };
            ffi::MPI_Win_allocate(
                bytes,
                8,
                ffi::RSMPI_INFO_NULL,
                self.comm,
                &mut base as *mut *mut u64 as *mut c_void,
                &mut win,
            );
            if self.rank == 0 {
                ffi::MPI_Win_lock(ffi::MPI_LOCK_EXCLUSIVE as c_int, 0, 0, win);
                std::ptr::write_bytes(base, 0, n);
                ffi::MPI_Win_unlock(0, win);
            }
            ffi::MPI_Barrier(self.comm);
            std::rc::Rc::new(CounterWindow(win))
        };
        (0..n)
            .map(|at| Box::new(MpiCounter { win: win.clone(), at, ops: Cell::new(0) }) as Box<dyn SharedCounter>)
            .collect()
    }
    fn alloc_window_memory(&self, n: usize) -> Option<Box<dyn WindowMemory>> {
        // On one node, shared memory: the other ranks then read these tiles in
        // place (`Window::segment_in_place`) instead of copying them. Where the
        // library cannot (no shared-memory one-sided component), plain window
        // memory from then on.
        if shared_window_memory_wanted() && self.on_one_node() {
            if let Some(m) = self.window_memory(n, true) {
                return Some(m);
            }
            self.one_node.set(Some(false));
        }
        self.window_memory(n, false)
    }
    fn expose<'a>(&'a self, segments: &[&'a [f64]]) -> Option<Box<dyn Window + 'a>> {
        // A segment that is window memory of this communicator (the same address
        // and length on this rank, so the same tensor's on every rank) reuses its
        // window. For the rest, an MPI library may have no one-sided component
        // for memory it did not allocate (Open MPI with
        // `btl_vader_single_copy_mechanism=none`): then `MPI_Win_create` fails,
        // and the caller falls back to collectives instead of the job aborting.
        let registered: Vec<Option<(WinHandle, bool)>> = {
            let list = self.allocated.lock().unwrap_or_else(|e| e.into_inner());
            segments
                .iter()
                .map(|seg| {
                    list.iter()
                        .find(|&&(p, n, _, _)| p == seg.as_ptr() as usize && n == seg.len())
                        .map(|&(_, _, w, shared)| (w, shared))
                })
                .collect()
        };
        let mut wins = Vec::with_capacity(segments.len());
        unsafe { ffi::MPI_Comm_set_errhandler(self.comm, ffi::RSMPI_ERRORS_RETURN) };
        for (seg, reg) in segments.iter().zip(&registered) {
            if let Some((w, _)) = reg {
                wins.push((w.0, false));
                continue;
            }
            let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
            // SAFETY: the segment outlives the window (`'a`), and nobody writes it
            // until the window is closed; MPI only reads it.
            let rc = unsafe {
                ffi::MPI_Win_create(
                    seg.as_ptr() as *mut c_void,
                    (seg.len() * 8) as ffi::MPI_Aint,
                    8,
                    ffi::RSMPI_INFO_NULL,
                    self.comm,
                    &mut win,
                )
            };
            if rc != 0 {
                break;
            }
            wins.push((win, true));
        }
        unsafe { ffi::MPI_Comm_set_errhandler(self.comm, ffi::RSMPI_ERRORS_ARE_FATAL) };
        // Every rank made the same windows, or the job cannot go on.
        let made = wins.len() as c_int;
        let least = self.int_allreduce(made, unsafe { ffi::RSMPI_MIN });
        let most = self.int_allreduce(made, unsafe { ffi::RSMPI_MAX });
        assert_eq!(least, most, "MPI_Win_create failed on some ranks only ({least} to {most} windows made)");
        if wins.len() < segments.len() {
            for (mut win, own) in wins {
                if own {
                    // SAFETY: every rank made this window and nobody accessed it.
                    unsafe { ffi::MPI_Win_free(&mut win) };
                }
            }
            return None;
        }
        for &(win, own) in &wins {
            // SAFETY: valid windows. Made ones start a shared passive-target epoch on
            // every rank; window memory is in one already, and its owner's stores
            // become visible to the others' reads through the sync and barrier.
            unsafe {
                if own {
                    ffi::MPI_Win_lock_all(0, win);
                } else {
                    ffi::MPI_Win_sync(win);
                }
            }
        }
        // Every rank's segments are final before anyone reads.
        unsafe { ffi::MPI_Barrier(self.comm) };
        for &(win, own) in &wins {
            if !own {
                // SAFETY: a valid window in a passive-target epoch.
                unsafe { ffi::MPI_Win_sync(win) };
            }
        }
        let shared = registered.iter().map(|r| r.is_some_and(|(_, shared)| shared)).collect();
        Some(Box::new(MpiWindow { comm: self, wins, shared }))
    }
}

/// Whether window memory may be shared memory (`TCC_READ_IN_PLACE` is not `off`).
fn shared_window_memory_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var("TCC_READ_IN_PLACE").map_or(true, |v| v != "off"))
}

impl MpiComm {
    /// `n` zeroed words of window memory (collective), shared memory of the node
    /// with `shared` (`MPI_Win_allocate_shared`), else `MPI_Win_allocate`d;
    /// `None` unless every rank got its part.
    fn window_memory(&self, n: usize, shared: bool) -> Option<Box<dyn WindowMemory>> {
        let mut base: *mut f64 = std::ptr::null_mut();
        let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
        unsafe { ffi::MPI_Comm_set_errhandler(self.comm, ffi::RSMPI_ERRORS_RETURN) };
        // At least one word, so that every buffer has an address of its own
        // (`expose` finds a buffer's window by its address).
        let bytes = (n.max(1) * 8) as ffi::MPI_Aint;
        let base_out = &mut base as *mut *mut f64 as *mut c_void;
        // SAFETY: MPI writes the address of the memory it allocated into `base`.
        let rc = unsafe {
            if shared {
                // Each rank's part on its own pages (first touched by its owner
                // below), not one block that rank 0 allocates.
                let mut info: ffi::MPI_Info = ffi::RSMPI_INFO_NULL;
                ffi::MPI_Info_create(&mut info);
                ffi::MPI_Info_set(info, c"alloc_shared_noncontig".as_ptr(), c"true".as_ptr());
                let rc = ffi::MPI_Win_allocate_shared(bytes, 8, info, self.comm, base_out, &mut win);
                ffi::MPI_Info_free(&mut info);
                rc
            } else {
                ffi::MPI_Win_allocate(bytes, 8, ffi::RSMPI_INFO_NULL, self.comm, base_out, &mut win)
            }
        };
        unsafe { ffi::MPI_Comm_set_errhandler(self.comm, ffi::RSMPI_ERRORS_ARE_FATAL) };
        let ok = (rc == 0 && !base.is_null()) as c_int;
        if self.int_allreduce(ok, unsafe { ffi::RSMPI_MIN }) == 0 {
            if rc == 0 {
                // SAFETY: made on this rank (collective free: every rank that made one frees it).
                unsafe { ffi::MPI_Win_free(&mut win) };
            }
            return None;
        }
        // SAFETY: `n` words MPI allocated for this window; zeroed before any use.
        unsafe {
            std::ptr::write_bytes(base, 0, n);
            ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win);
        }
        let win = WinHandle(win);
        self.allocated.lock().unwrap_or_else(|e| e.into_inner()).push((base as usize, n, win, shared));
        Some(Box::new(MpiWindowMemory { ptr: base, len: n, win, registry: self.allocated.clone() }))
    }

    /// Whether every rank of this communicator shares this node's memory
    /// (collective the first time: `MPI_Comm_split_type` by shared memory).
    fn on_one_node(&self) -> bool {
        if let Some(known) = self.one_node.get() {
            return known;
        }
        let mut node: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: collective on `self.comm`; the node communicator is freed here.
        let one = unsafe {
            let rc = ffi::MPI_Comm_split_type(
                self.comm,
                ffi::RSMPI_COMM_TYPE_SHARED,
                self.rank as c_int,
                ffi::RSMPI_INFO_NULL,
                &mut node,
            );
            let mut size: c_int = 0;
            if rc == 0 {
                ffi::MPI_Comm_size(node, &mut size);
                ffi::MPI_Comm_free(&mut node);
            }
            size as usize == self.size
        };
        // Every rank must agree (a split node would make some ranks' windows shared only).
        let one = self.int_allreduce(one as c_int, unsafe { ffi::RSMPI_MIN }) == 1;
        self.one_node.set(Some(one));
        one
    }
}

/// An open window of the MPI back ends: one `MPI_Win` per segment, in a
/// passive-target epoch on every rank (`MPI_Win_lock_all`).
struct MpiWindow<'a> {
    comm: &'a MpiComm,
    /// One per segment, and whether `expose` made it (else it is window memory's).
    wins: Vec<(ffi::MPI_Win, bool)>,
    /// Per segment: window memory from `MPI_Win_allocate_shared`, which every
    /// rank of the node can load from in place.
    shared: Vec<bool>,
}

impl Window for MpiWindow<'_> {
    fn get(&self, target: usize, segment: usize, offset: usize, dst: &mut [f64]) {
        self.get_many(&mut [Read { target, segment, offset, dst }]);
    }
    fn get_many(&self, reads: &mut [Read<'_>]) {
        let mut used = vec![false; self.wins.len()];
        let mut stats = self.comm.stats.get();
        for r in reads.iter_mut() {
            assert!(
                r.target < self.comm.size && r.segment < self.wins.len(),
                "get: no segment {} on rank {}",
                r.segment,
                r.target
            );
            if r.dst.is_empty() {
                continue;
            }
            assert!(r.dst.len() <= c_int::MAX as usize, "get: {} words in one MPI_Get", r.dst.len());
            // SAFETY: `dst` is ours until the flush below completes the get; MPI
            // checks the range against the target's window (an error aborts the job).
            unsafe {
                ffi::MPI_Get(
                    r.dst.as_mut_ptr() as *mut c_void,
                    r.dst.len() as c_int,
                    MpiComm::dbl(),
                    r.target as c_int,
                    r.offset as ffi::MPI_Aint,
                    r.dst.len() as c_int,
                    MpiComm::dbl(),
                    self.wins[r.segment].0,
                );
            }
            used[r.segment] = true;
            if r.target != self.comm.rank {
                stats.got(r.dst.len());
            }
        }
        for (&(win, _), _) in self.wins.iter().zip(&used).filter(|(_, &u)| u) {
            // SAFETY: completes this rank's gets on `win` locally (the buffers are filled).
            unsafe { ffi::MPI_Win_flush_local_all(win) };
        }
        self.comm.stats.set(stats);
    }
    fn segment_in_place(&self, target: usize, segment: usize) -> Option<(*const f64, usize)> {
        if !*self.shared.get(segment)? || target >= self.comm.size {
            return None;
        }
        let (mut bytes, mut unit, mut base): (ffi::MPI_Aint, c_int, *mut f64) = (0, 0, std::ptr::null_mut());
        // SAFETY: a shared-memory window; MPI writes the target's base address, size
        // and displacement unit.
        let rc = unsafe {
            ffi::MPI_Win_shared_query(
                self.wins[segment].0,
                target as c_int,
                &mut bytes,
                &mut unit,
                &mut base as *mut *mut f64 as *mut c_void,
            )
        };
        (rc == 0 && !base.is_null()).then_some((base as *const f64, bytes as usize / 8))
    }
    fn count_in_place(&self, target: usize, words: usize) {
        if target != self.comm.rank {
            let mut stats = self.comm.stats.get();
            stats.got(words);
            self.comm.stats.set(stats);
        }
    }
    fn progress(&self) {
        let mut flag: c_int = 0;
        // SAFETY: a probe with no status; it only drives the library's progress.
        unsafe {
            ffi::MPI_Iprobe(
                ffi::RSMPI_ANY_SOURCE,
                ffi::RSMPI_ANY_TAG,
                self.comm.comm,
                &mut flag,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
    }
    fn close(self: Box<Self>) {
        // SAFETY: every get of this rank completed (flushed); after the barrier no
        // rank accesses any of the windows, so freeing the ones `expose` made
        // (collective) is safe; window memory stays in its epoch.
        unsafe {
            for &(win, own) in &self.wins {
                if own {
                    ffi::MPI_Win_unlock_all(win);
                }
            }
            ffi::MPI_Barrier(self.comm.comm);
            for (mut win, own) in self.wins {
                if own {
                    ffi::MPI_Win_free(&mut win);
                }
            }
        }
    }
}

/// NXTVAL: a `u64` on rank 0 (the `at`-th of its window's), incremented with
/// `MPI_Fetch_and_op`. Dropping the last counter of a window frees it
/// (collective: every rank drops its counters at the same point).
struct MpiCounter {
    win: std::rc::Rc<CounterWindow>,
    at: usize,
    ops: Cell<u64>,
}

/// The window of one or more [`MpiCounter`]s.
struct CounterWindow(ffi::MPI_Win);

impl Drop for CounterWindow {
    fn drop(&mut self) {
        let mut w = self.0;
        // SAFETY: collective, at the same point on every rank (the last counter dropped).
        unsafe { ffi::MPI_Win_free(&mut w) };
    }
}

impl SharedCounter for MpiCounter {
    fn fetch_add(&self, n: u64) -> u64 {
        let mut old: u64 = 0;
        unsafe {
            let win = self.win.0;
            ffi::MPI_Win_lock(ffi::MPI_LOCK_SHARED as c_int, 0, 0, win);
            ffi::MPI_Fetch_and_op(
                &n as *const u64 as *const c_void,
                &mut old as *mut u64 as *mut c_void,
                ffi::RSMPI_UINT64_T,
                0,
                self.at as ffi::MPI_Aint,
                ffi::RSMPI_SUM,
                win,
            );
            ffi::MPI_Win_unlock(0, win);
        }
        self.ops.set(self.ops.get() + 1);
        old
    }
    fn ops(&self) -> u64 {
        self.ops.get()
    }
}
