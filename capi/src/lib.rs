//! `libtcc_dist`: the C API of distributed tiled programs
//! ([`tcc::tiled::session::Session`]), declared in `include/tcc_dist.h`.
//! `tcc build --mpi` emits libraries whose open functions call
//! [`tcc_dist_open`] with the program's source; the rest of the API is shared.
//! Every entry point checks its arguments and catches panics: a bad call is an
//! error the caller can read, never an abort of the caller's MPI job.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tcc::tiled::exec::TiledOptions;
use tcc::tiled::session::{LocalTile, Session, SessionComm};

/// An open program and its tiles per tensor (computed once: callers walk them).
pub struct Handle {
    session: Session<'static>,
    tiles: Vec<Vec<LocalTile>>,
    ndims: Vec<usize>,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: impl Into<String>) {
    let s = msg.into().replace('\0', " ");
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(s).unwrap_or_default());
}

/// Runs `f`, turning a panic into an error and `fallback`.
fn guarded<T>(fallback: T, f: impl FnOnce() -> Result<T, String>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_error(e);
            fallback
        }
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            set_error(format!("internal error: {}", msg.unwrap_or_else(|| "panic".into())));
            fallback
        }
    }
}

unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    CStr::from_ptr(p).to_str().map_err(|_| format!("{what} is not UTF-8"))
}

unsafe fn handle<'a>(h: *const Handle) -> Result<&'a Handle, String> {
    h.as_ref().ok_or_else(|| "the handle is NULL".to_string())
}

fn tensor_index(h: &Handle, t: i64) -> Result<usize, String> {
    usize::try_from(t).ok().filter(|&t| t < h.tiles.len()).ok_or_else(|| {
        format!("tensor number {t} is out of range (the program has {} inputs and outputs)", h.tiles.len())
    })
}

#[cfg(feature = "mpi")]
fn communicator(comm_f: c_int) -> Result<SessionComm<'static>, String> {
    tcc_runtime::comm::mpi::MpiComm::from_fortran(comm_f)
        .map(|c| SessionComm::Owned(Box::new(c)))
        .ok_or_else(|| "MPI is not initialized, or the handle is not a communicator".to_string())
}

#[cfg(not(feature = "mpi"))]
fn communicator(_comm_f: c_int) -> Result<SessionComm<'static>, String> {
    Err("libtcc_dist was built without MPI (cargo build -p tcc-dist --features mpi)".to_string())
}

/// See `tcc_dist.h`.
///
/// # Safety
/// `source` (and `program` unless NULL) must be NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_open(source: *const c_char, program: *const c_char, comm_f: c_int) -> *mut Handle {
    tcc_dist_open_sized(source, program, comm_f, 0, std::ptr::null(), std::ptr::null())
}

/// See `tcc_dist.h`.
///
/// # Safety
/// `source` (and `program` unless NULL) must be NUL-terminated strings;
/// `names` and `sizes` arrays of `nsizes` entries (NULL when `nsizes` is 0),
/// each name a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_open_sized(
    source: *const c_char,
    program: *const c_char,
    comm_f: c_int,
    nsizes: i64,
    names: *const *const c_char,
    sizes: *const i64,
) -> *mut Handle {
    guarded(std::ptr::null_mut(), || {
        let source = text(source, "the source")?;
        let program = if program.is_null() { None } else { Some(text(program, "the program name")?) };
        // A bad size argument is refused inside the open, with the other ranks.
        let given = read_sizes(nsizes, names, sizes);
        let comm = communicator(comm_f)?;
        let mut opts = TiledOptions::default();
        match tcc::tiled::autotile::tile_from_env()? {
            Some(n) => opts.tile = n,
            None => opts.auto_tile = true,
        }
        match tcc::tiled::placement::flops_per_word_from_env() {
            Ok(Some(x)) => opts.flops_per_word = x,
            Ok(None) => {}
            Err(v) => return Err(format!("TCC_FLOPS_PER_WORD={v} is not a number ≥ 0")),
        }
        if let Some(mode) = tcc::tiled::ExchangeMode::from_env()? {
            opts.exchange = mode;
        }
        if let Err(v) = tcc::tiled::placement::balance_from_env() {
            return Err(format!("TCC_BALANCE={v} is neither time nor flops"));
        }
        match tcc::tiled::steal::Steal::from_env() {
            Ok(Some(x)) => opts.steal = x,
            Ok(None) => {}
            Err(v) => return Err(format!("TCC_STEAL={v} is none of on, off, eager")),
        }
        match tcc::tiled::placement::Split::from_env() {
            Ok(Some(x)) => opts.split = x,
            Ok(None) => {}
            Err(v) => return Err(format!("TCC_SPLIT={v} is none of on, off, eager or a fraction in (0, 1]")),
        }
        let session = Session::open(source, program, given.as_deref().map_err(Clone::clone), comm, opts)?;
        let n = (0..).take_while(|&t| session.describe(t).is_some()).count();
        let tiles = (0..n).map(|t| session.tiles(t).unwrap_or_default()).collect();
        let ndims = (0..n).map(|t| session.describe(t).map_or(0, |d| d.2.len())).collect();
        Ok(Box::into_raw(Box::new(Handle { session, tiles, ndims })))
    })
}

/// The (range name, size) pairs of `tcc_dist_open_sized`.
///
/// # Safety
/// As for [`tcc_dist_open_sized`].
unsafe fn read_sizes(
    nsizes: i64,
    names: *const *const c_char,
    sizes: *const i64,
) -> Result<Vec<(String, i64)>, String> {
    let n = usize::try_from(nsizes).map_err(|_| format!("the number of sizes is negative ({nsizes})"))?;
    if n > 0 && (names.is_null() || sizes.is_null()) {
        return Err("the size names or values are NULL".into());
    }
    (0..n).map(|k| Ok((text(*names.add(k), "a size's range name")?.to_string(), *sizes.add(k)))).collect()
}

/// See `tcc_dist.h`.
///
/// # Safety
/// `h` must be NULL or an open handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_read_npy(h: *mut Handle, tensor: i64, path: *const c_char) -> c_int {
    guarded(-1, || {
        let h = h.as_mut().ok_or_else(|| "the handle is NULL".to_string())?;
        // Checked after the collective part, so a bad argument on one rank
        // fails every rank instead of leaving them waiting.
        let path = text(path, "the path").map(std::path::PathBuf::from);
        let t = usize::try_from(tensor).unwrap_or(usize::MAX);
        match path {
            Ok(p) => h.session.read_npy(t, &p)?,
            Err(e) => {
                let _ = h.session.read_npy(usize::MAX, std::path::Path::new(""));
                return Err(e);
            }
        }
        Ok(0)
    })
}

/// The last error of the calling thread (empty if none). Valid until the next call.
#[no_mangle]
pub extern "C" fn tcc_dist_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_rank(h: *const Handle) -> i64 {
    guarded(-1, || Ok(handle(h)?.session.rank_and_size().0 as i64))
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_size(h: *const Handle) -> i64 {
    guarded(-1, || Ok(handle(h)?.session.rank_and_size().1 as i64))
}

/// # Safety
/// `h` must be NULL or an open handle; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_tensor(h: *const Handle, name: *const c_char) -> i64 {
    guarded(-1, || {
        let name = text(name, "the tensor name")?;
        handle(h)?.session.tensor(name).map(|t| t as i64).ok_or_else(|| format!("no input or output `{name}`"))
    })
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_is_output(h: *const Handle, tensor: i64) -> c_int {
    guarded(-1, || {
        let h = handle(h)?;
        let t = tensor_index(h, tensor)?;
        Ok(h.session.describe(t).map_or(-1, |d| d.1 as c_int))
    })
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_ndims(h: *const Handle, tensor: i64) -> i64 {
    guarded(-1, || {
        let h = handle(h)?;
        Ok(h.ndims[tensor_index(h, tensor)?] as i64)
    })
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_extent(h: *const Handle, tensor: i64, dim: i64) -> i64 {
    guarded(-1, || {
        let h = handle(h)?;
        let t = tensor_index(h, tensor)?;
        let ext = h.session.describe(t).map(|d| d.2).unwrap_or_default();
        usize::try_from(dim)
            .ok()
            .and_then(|d| ext.get(d))
            .map(|&e| e as i64)
            .ok_or_else(|| format!("dimension {dim} is out of range (the tensor has {})", ext.len()))
    })
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_local_tiles(h: *const Handle, tensor: i64) -> i64 {
    guarded(-1, || {
        let h = handle(h)?;
        Ok(h.tiles[tensor_index(h, tensor)?].len() as i64)
    })
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_local_len(h: *const Handle, tensor: i64) -> i64 {
    guarded(-1, || {
        let h = handle(h)?;
        let tiles = &h.tiles[tensor_index(h, tensor)?];
        Ok(tiles.last().map_or(0, |t| t.offset + t.extent.iter().product::<usize>()) as i64)
    })
}

/// # Safety
/// `h` must be NULL or an open handle; `start` and `extent` must each have room
/// for `tcc_dist_ndims` entries.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_tile(
    h: *const Handle,
    tensor: i64,
    i: i64,
    start: *mut i64,
    extent: *mut i64,
) -> i64 {
    guarded(-1, || {
        let h = handle(h)?;
        let tiles = &h.tiles[tensor_index(h, tensor)?];
        let tile = usize::try_from(i)
            .ok()
            .and_then(|i| tiles.get(i))
            .ok_or_else(|| format!("tile {i} is out of range (this rank holds {})", tiles.len()))?;
        if start.is_null() || extent.is_null() {
            return Err("start or extent is NULL".into());
        }
        for (d, (&s, &e)) in tile.start.iter().zip(&tile.extent).enumerate() {
            *start.add(d) = s as i64;
            *extent.add(d) = e as i64;
        }
        Ok(tile.offset as i64)
    })
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_local_data(h: *mut Handle, tensor: i64) -> *mut f64 {
    guarded(std::ptr::null_mut(), || {
        let h = h.as_mut().ok_or("the handle is NULL")?;
        let t = tensor_index(h, tensor)?;
        Ok(h.session.data_mut(t).filter(|d| !d.is_empty()).map_or(std::ptr::null_mut(), |d| d.as_mut_ptr()))
    })
}

/// The open session, the tensor and the dense array of `len` elements of a
/// conversion call, checked.
unsafe fn dense_call<'a>(
    h: *mut Handle,
    tensor: i64,
    dense: *const f64,
    len: i64,
) -> Result<(&'a mut Handle, usize, usize), String> {
    let h = h.as_mut().ok_or("the handle is NULL")?;
    let t = tensor_index(h, tensor)?;
    let len = usize::try_from(len).map_err(|_| format!("length {len} is negative"))?;
    if dense.is_null() {
        return Err("the dense array is NULL".into());
    }
    Ok((h, t, len))
}

/// # Safety
/// `h` must be NULL or an open handle; `dense` must hold `len` elements.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_pack_dense(h: *mut Handle, tensor: i64, dense: *const f64, len: i64) -> c_int {
    guarded(1, || {
        let (h, t, len) = dense_call(h, tensor, dense, len)?;
        h.session.pack_dense(t, std::slice::from_raw_parts(dense, len)).map(|_| 0)
    })
}

/// # Safety
/// `h` must be NULL or an open handle; `dense` must hold `len` elements.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_unpack_dense(h: *mut Handle, tensor: i64, dense: *mut f64, len: i64) -> c_int {
    guarded(1, || {
        let (h, t, len) = dense_call(h, tensor, dense, len)?;
        h.session.unpack_dense(t, std::slice::from_raw_parts_mut(dense, len)).map(|_| 0)
    })
}

/// # Safety
/// `h` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_run(h: *mut Handle) -> c_int {
    guarded(1, || {
        let h = h.as_mut().ok_or("the handle is NULL")?;
        h.session.run().map(|_| 0)
    })
}

/// # Safety
/// `h` must be NULL or a handle from `tcc_dist_open`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn tcc_dist_close(h: *mut Handle) {
    if !h.is_null() {
        guarded((), || {
            drop(Box::from_raw(h));
            Ok(())
        })
    }
}
