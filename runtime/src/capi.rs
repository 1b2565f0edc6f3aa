//! The C ABI (`runtime/include/tcc_runtime.h`): a thread pool running tile tasks
//! through a callback, and in-process ranks with collectives. Every function catches
//! Rust panics; none unwinds into C. Return codes: 0 success, `TCC_ERR_ARG` (-1) a
//! bad argument, `TCC_ERR_ABORTED` (-2) another rank failed, `TCC_ERR_FAILED` (-3)
//! a rank or task failed.

use crate::comm::threads::{self, Aborted};
use crate::comm::{Backend, Communicator, ReduceOp};
use crate::task::{Schedule, TaskSet, ThreadPool, TileSpace};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub const TCC_OK: c_int = 0;
pub const TCC_ERR_ARG: c_int = -1;
pub const TCC_ERR_ABORTED: c_int = -2;
pub const TCC_ERR_FAILED: c_int = -3;

fn guard(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(c) => c,
        Err(p) if p.downcast_ref::<Aborted>().is_some() => TCC_ERR_ABORTED,
        Err(_) => TCC_ERR_FAILED,
    }
}

/// The runtime version, a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn tcc_runtime_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

pub struct TccPool(ThreadPool);

/// A pool of `threads` workers (0: one per core). Free with `tcc_pool_free`.
#[no_mangle]
pub extern "C" fn tcc_pool_new(threads: usize) -> *mut TccPool {
    let p = if threads == 0 { ThreadPool::with_available_parallelism() } else { ThreadPool::new(threads) };
    Box::into_raw(Box::new(TccPool(p)))
}

/// # Safety
/// `pool` comes from `tcc_pool_new` and is not used afterwards (NULL is allowed).
#[no_mangle]
pub unsafe extern "C" fn tcc_pool_free(pool: *mut TccPool) {
    if !pool.is_null() {
        drop(Box::from_raw(pool));
    }
}

/// Calls `task(ctx, lo, hi, worker)` for every tile of the box `[0, extents)` cut in
/// tiles of `tile` (`ndims` entries each; `lo`/`hi` are the tile's bounds, `ndims`
/// entries, valid during the call). `schedule`: 0 static, 1 dynamic. The callback
/// returns 0, or non-zero to report a failure (the other tiles still run).
///
/// # Safety
/// `extents` and `tile` point to `ndims` values; `task` is safe to call from several
/// threads at once with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn tcc_pool_for_tiles(
    pool: *const TccPool,
    ndims: usize,
    extents: *const usize,
    tile: *const usize,
    schedule: c_int,
    task: Option<unsafe extern "C" fn(*mut c_void, *const usize, *const usize, usize) -> c_int>,
    ctx: *mut c_void,
) -> c_int {
    let (Some(pool), Some(task)) = (pool.as_ref(), task) else { return TCC_ERR_ARG };
    if ndims > 0 && (extents.is_null() || tile.is_null()) {
        return TCC_ERR_ARG;
    }
    let schedule = match schedule {
        0 => Schedule::Static,
        1 => Schedule::Dynamic,
        _ => return TCC_ERR_ARG,
    };
    let ext = if ndims == 0 { vec![] } else { std::slice::from_raw_parts(extents, ndims).to_vec() };
    let til = if ndims == 0 { vec![] } else { std::slice::from_raw_parts(tile, ndims).to_vec() };
    if til.contains(&0) {
        return TCC_ERR_ARG;
    }
    let ctx = ctx as usize;
    let failed = std::sync::atomic::AtomicBool::new(false);
    guard(|| {
        let set = TaskSet::new(vec![TileSpace::new(ext, til)]);
        pool.0.for_tiles(&set, schedule, |_, r, w| {
            let lo: Vec<usize> = r.iter().map(|x| x.start).collect();
            let hi: Vec<usize> = r.iter().map(|x| x.end).collect();
            if task(ctx as *mut c_void, lo.as_ptr(), hi.as_ptr(), w) != 0 {
                failed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        if failed.load(std::sync::atomic::Ordering::SeqCst) {
            TCC_ERR_FAILED
        } else {
            TCC_OK
        }
    })
}

pub struct TccComm(Box<dyn Communicator>);

/// Runs `rank_fn(ctx, comm)` on `nranks` in-process ranks of back end `backend`
/// ("threads" or "shm"). Returns 0 when every rank returned 0; if a rank returns
/// non-zero, the others' pending collectives return `TCC_ERR_ABORTED` and this
/// returns `TCC_ERR_FAILED`.
///
/// # Safety
/// `backend` is a NUL-terminated string; `rank_fn` may be called from several
/// threads at once with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn tcc_threads_run(
    nranks: usize,
    backend: *const c_char,
    rank_fn: Option<unsafe extern "C" fn(*mut c_void, *mut TccComm) -> c_int>,
    ctx: *mut c_void,
) -> c_int {
    let Some(f) = rank_fn else { return TCC_ERR_ARG };
    if nranks == 0 || backend.is_null() {
        return TCC_ERR_ARG;
    }
    let b = match CStr::from_ptr(backend).to_str().ok().and_then(Backend::from_name) {
        Some(b @ (Backend::Threads | Backend::Shm)) => b,
        _ => return TCC_ERR_ARG,
    };
    let ctx = ctx as usize;
    let r = catch_unwind(AssertUnwindSafe(|| {
        threads::run(nranks, |rank| {
            let mut comm = TccComm(rank.comm(b));
            let code = f(ctx as *mut c_void, &mut comm);
            if code != 0 {
                rank.abort(&format!("rank function returned {code}"));
            }
        })
    }));
    match r {
        Ok(Ok(_)) => TCC_OK,
        _ => TCC_ERR_FAILED,
    }
}

/// # Safety
/// `comm` is the communicator handed to a rank function.
#[no_mangle]
pub unsafe extern "C" fn tcc_comm_rank(comm: *const TccComm) -> c_int {
    comm.as_ref().map_or(TCC_ERR_ARG, |c| c.0.rank() as c_int)
}

/// # Safety
/// `comm` is the communicator handed to a rank function.
#[no_mangle]
pub unsafe extern "C" fn tcc_comm_size(comm: *const TccComm) -> c_int {
    comm.as_ref().map_or(TCC_ERR_ARG, |c| c.0.size() as c_int)
}

fn reduce_op(op: c_int) -> Option<ReduceOp> {
    match op {
        0 => Some(ReduceOp::Sum),
        1 => Some(ReduceOp::Max),
        2 => Some(ReduceOp::Min),
        _ => None,
    }
}

/// In-place all-reduce of `n` doubles; `op`: 0 sum, 1 max, 2 min.
///
/// # Safety
/// `buf` points to `n` doubles; `comm` is a rank function's communicator.
#[no_mangle]
pub unsafe extern "C" fn tcc_comm_allreduce(comm: *mut TccComm, buf: *mut f64, n: usize, op: c_int) -> c_int {
    let (Some(c), Some(op)) = (comm.as_ref(), reduce_op(op)) else { return TCC_ERR_ARG };
    if buf.is_null() && n > 0 {
        return TCC_ERR_ARG;
    }
    let s = if n == 0 { &mut [][..] } else { std::slice::from_raw_parts_mut(buf, n) };
    guard(|| {
        c.0.allreduce(s, op);
        TCC_OK
    })
}

/// Broadcast of `n` doubles from `root`.
///
/// # Safety
/// `buf` points to `n` doubles; `comm` is a rank function's communicator.
#[no_mangle]
pub unsafe extern "C" fn tcc_comm_broadcast(comm: *mut TccComm, buf: *mut f64, n: usize, root: c_int) -> c_int {
    let Some(c) = comm.as_ref() else { return TCC_ERR_ARG };
    if (buf.is_null() && n > 0) || root < 0 || root as usize >= c.0.size() {
        return TCC_ERR_ARG;
    }
    let s = if n == 0 { &mut [][..] } else { std::slice::from_raw_parts_mut(buf, n) };
    guard(|| {
        c.0.broadcast(s, root as usize);
        TCC_OK
    })
}

/// All-gather: `n` doubles from every rank into `recv` (`n · size` doubles).
///
/// # Safety
/// `send` points to `n` doubles and `recv` to `n · size`.
#[no_mangle]
pub unsafe extern "C" fn tcc_comm_allgather(comm: *mut TccComm, send: *const f64, n: usize, recv: *mut f64) -> c_int {
    let Some(c) = comm.as_ref() else { return TCC_ERR_ARG };
    if n > 0 && (send.is_null() || recv.is_null()) {
        return TCC_ERR_ARG;
    }
    let p = c.0.size();
    let (s, r) = if n == 0 {
        (&[][..], &mut [][..])
    } else {
        (std::slice::from_raw_parts(send, n), std::slice::from_raw_parts_mut(recv, n * p))
    };
    guard(|| {
        c.0.allgather(s, r);
        TCC_OK
    })
}

/// Words and messages this rank sent so far.
///
/// # Safety
/// `words` and `messages` are NULL or valid pointers.
#[no_mangle]
pub unsafe extern "C" fn tcc_comm_stats(comm: *const TccComm, words: *mut u64, messages: *mut u64) -> c_int {
    let Some(c) = comm.as_ref() else { return TCC_ERR_ARG };
    let s = c.0.stats();
    if !words.is_null() {
        *words = s.words_sent;
    }
    if !messages.is_null() {
        *messages = s.messages_sent;
    }
    TCC_OK
}
