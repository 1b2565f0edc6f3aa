//! Zeroed temporaries for generated code: `tcc_rt_alloc_zeroed` / `tcc_rt_free`.
//!
//! A temporary of at least [`HUGE_MIN_BYTES`] is mapped on its own, aligned to
//! 2 MiB and marked `MADV_HUGEPAGE` (Linux): its first touch then faults once per
//! 2 MiB instead of once per 4 KiB page. On a machine whose transparent huge pages
//! are `madvise` (the common default) a 128 MiB temporary filled once took 57 ms
//! through `calloc`'s 4 KiB pages and 14 ms with huge pages (numpy marks its large
//! arrays the same way). Smaller blocks, other systems, and a failed mapping use
//! `calloc`/`free`. The pages are zero either way, as the interpreter's are.

/// Blocks at least this large are mapped with huge pages where possible.
pub const HUGE_MIN_BYTES: u64 = 4 << 20;

#[cfg(target_os = "linux")]
const HUGE: usize = 2 << 20;

extern "C" {
    fn calloc(n: usize, size: usize) -> *mut u8;
    fn malloc(n: usize) -> *mut u8;
    fn free(p: *mut u8);
}

#[cfg(target_os = "linux")]
mod sys {
    extern "C" {
        pub fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
        pub fn munmap(addr: *mut u8, len: usize) -> i32;
        pub fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
    }
    pub const PROT_READ: i32 = 1;
    pub const PROT_WRITE: i32 = 2;
    pub const MAP_PRIVATE: i32 = 2;
    pub const MAP_ANONYMOUS: i32 = 0x20;
    pub const MADV_HUGEPAGE: i32 = 14;
    pub const MAP_FAILED: *mut u8 = !0usize as *mut u8;
}

/// The length a huge mapping of `bytes` has (whole 2 MiB pages).
#[cfg(target_os = "linux")]
fn huge_len(bytes: usize) -> Option<usize> {
    bytes.div_ceil(HUGE).checked_mul(HUGE)
}

/// Whether a block of `bytes` is (to be) mapped on its own.
fn is_huge(bytes: u64) -> bool {
    cfg!(target_os = "linux") && bytes >= HUGE_MIN_BYTES
}

#[cfg(target_os = "linux")]
unsafe fn map_huge(bytes: usize) -> *mut u8 {
    use sys::*;
    let Some((len, over)) = huge_len(bytes).and_then(|l| Some((l, l.checked_add(HUGE)?))) else {
        return std::ptr::null_mut();
    };
    let p = mmap(std::ptr::null_mut(), over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if p == MAP_FAILED || p.is_null() {
        return std::ptr::null_mut();
    }
    // Keep the 2 MiB-aligned `len` bytes inside, give back the rest.
    let start = (p as usize).div_ceil(HUGE) * HUGE;
    let head = start - p as usize;
    if head > 0 {
        munmap(p, head);
    }
    let tail = over - head - len;
    if tail > 0 {
        munmap((start + len) as *mut u8, tail);
    }
    let q = start as *mut u8;
    // Advice only: without transparent huge pages the block still works.
    madvise(q, len, MADV_HUGEPAGE);
    q
}

/// `bytes` zeroed bytes, aligned for any element type; null if they cannot be had.
/// Free with [`tcc_rt_free`] and the same `bytes`.
///
/// # Safety
/// Always safe to call; the block must be freed only by [`tcc_rt_free`].
#[no_mangle]
pub unsafe extern "C" fn tcc_rt_alloc_zeroed(bytes: u64) -> *mut u8 {
    #[cfg(target_os = "linux")]
    if is_huge(bytes) {
        let Ok(b) = usize::try_from(bytes) else { return std::ptr::null_mut() };
        return map_huge(b);
    }
    let Ok(b) = usize::try_from(bytes.max(1)) else { return std::ptr::null_mut() };
    calloc(b, 1)
}

/// Frees a block of [`tcc_rt_alloc_zeroed`] (`bytes` as allocated); null is ignored.
///
/// # Safety
/// `p` is null or came from [`tcc_rt_alloc_zeroed`]`(bytes)` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn tcc_rt_free(p: *mut u8, bytes: u64) {
    if p.is_null() {
        return;
    }
    #[cfg(target_os = "linux")]
    if is_huge(bytes) {
        // Allocated, so the length did not overflow.
        sys::munmap(p, huge_len(bytes as usize).unwrap_or(0));
        return;
    }
    let _ = bytes;
    free(p)
}

// ---------------------------------------------------------------------------------
// Temporaries kept between calls
// ---------------------------------------------------------------------------------

/// Huge blocks given back by [`tcc_rt_free_temp`], kept mapped for the next call of
/// the program (`(address, mapped length)`, most recent last), and their total.
struct Cache {
    blocks: Vec<(usize, usize)>,
    bytes: usize,
}

static CACHE: std::sync::Mutex<Cache> = std::sync::Mutex::new(Cache { blocks: Vec::new(), bytes: 0 });

/// Whether [`tcc_rt_alloc_temp`] fills blocks it need not zero with NaN bytes
/// (tests: code that read such a block before writing it would show).
static POISON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns poisoning of the temporaries that generated code overwrites on or off
/// (also `TCC_TEMP_POISON=1`). For tests: every such block is then filled with
/// `0xff` bytes (NaN in every float type) before the code gets it.
pub fn set_poison(on: bool) {
    POISON.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn poison() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    POISON.load(std::sync::atomic::Ordering::Relaxed)
        || *ENV.get_or_init(|| std::env::var("TCC_TEMP_POISON").is_ok_and(|v| v == "1"))
}

/// Bytes of huge temporaries kept mapped between calls: `TCC_TEMP_CACHE` (bytes;
/// 0 turns the cache off), else 1 GiB. Read once.
pub fn cache_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| std::env::var("TCC_TEMP_CACHE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1 << 30))
}

/// Unmaps every cached block (the memory goes back to the system).
pub fn release_cache() {
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    for (p, len) in c.blocks.drain(..) {
        #[cfg(target_os = "linux")]
        unsafe {
            sys::munmap(p as *mut u8, len)
        };
        #[cfg(not(target_os = "linux"))]
        let _ = (p, len);
    }
    c.bytes = 0;
}

/// Bytes of huge blocks the cache holds now.
pub fn cached_bytes() -> usize {
    CACHE.lock().unwrap_or_else(|e| e.into_inner()).bytes
}

/// A temporary of `bytes` for generated code: as [`tcc_rt_alloc_zeroed`], except
/// that a huge block (at least [`HUGE_MIN_BYTES`]) is taken, where one of the
/// same mapped length is cached, from the blocks earlier calls gave back with
/// [`tcc_rt_free_temp`] — no page faults and no clearing by the kernel, which cost a
/// tenth of a whole program's time when each call mapped its temporaries afresh.
/// With `zeroed == 0` the caller writes every element before reading it, and the
/// block keeps whatever it held (NaN bytes under [`set_poison`]); else it is zero.
///
/// # Safety
/// Always safe to call; free the block with [`tcc_rt_free_temp`] and the same `bytes`.
#[no_mangle]
pub unsafe extern "C" fn tcc_rt_alloc_temp(bytes: u64, zeroed: i64) -> *mut u8 {
    let fill = |p: *mut u8, fresh: bool| {
        if !p.is_null() {
            if zeroed != 0 {
                if !fresh {
                    std::ptr::write_bytes(p, 0, bytes as usize);
                }
            } else if poison() {
                std::ptr::write_bytes(p, 0xff, bytes as usize);
            }
        }
        p
    };
    #[cfg(target_os = "linux")]
    if is_huge(bytes) {
        let Some(len) = usize::try_from(bytes).ok().and_then(huge_len) else { return std::ptr::null_mut() };
        let hit = {
            let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
            match c.blocks.iter().rposition(|&(_, l)| l == len) {
                Some(i) => {
                    let (p, _) = c.blocks.remove(i);
                    c.bytes -= len;
                    Some(p as *mut u8)
                }
                None => {
                    // Room for this block when it comes back: the oldest go.
                    while !c.blocks.is_empty() && c.bytes + len > cache_limit() {
                        let (p, l) = c.blocks.remove(0);
                        c.bytes -= l;
                        sys::munmap(p as *mut u8, l);
                    }
                    None
                }
            }
        };
        return match hit {
            Some(p) => fill(p, false),
            None => fill(map_huge(len), true),
        };
    }
    if zeroed != 0 {
        return tcc_rt_alloc_zeroed(bytes);
    }
    let Ok(b) = usize::try_from(bytes.max(1)) else { return std::ptr::null_mut() };
    fill(malloc(b), false)
}

/// Gives back a block of [`tcc_rt_alloc_temp`]: a huge one is kept for the next
/// call while the cache holds less than [`cache_limit`], else unmapped; null is
/// ignored.
///
/// # Safety
/// `p` is null or came from [`tcc_rt_alloc_temp`]`(bytes, _)` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn tcc_rt_free_temp(p: *mut u8, bytes: u64) {
    if p.is_null() {
        return;
    }
    #[cfg(target_os = "linux")]
    if is_huge(bytes) {
        let len = huge_len(bytes as usize).unwrap_or(0);
        let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if c.bytes + len <= cache_limit() {
            c.blocks.push((p as usize, len));
            c.bytes += len;
        } else {
            drop(c);
            sys::munmap(p, len);
        }
        return;
    }
    let _ = bytes;
    free(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_zero_writable_and_freed() {
        for bytes in [0u64, 1, 8, 4096, HUGE_MIN_BYTES - 8, HUGE_MIN_BYTES, HUGE_MIN_BYTES + 8, 3 * HUGE_MIN_BYTES + 5]
        {
            unsafe {
                let p = tcc_rt_alloc_zeroed(bytes);
                assert!(!p.is_null(), "{bytes}");
                if is_huge(bytes) {
                    assert_eq!(p as usize % (2 << 20), 0, "{bytes}: a huge block starts on a 2 MiB page");
                }
                let s = std::slice::from_raw_parts_mut(p, bytes as usize);
                assert!(s.iter().all(|&b| b == 0), "{bytes}: not zero");
                s.iter_mut().for_each(|b| *b = 7);
                tcc_rt_free(p, bytes);
            }
        }
    }

    #[test]
    fn huge_temporaries_come_back_from_the_cache_zeroed_or_as_left() {
        let bytes = 3 * HUGE_MIN_BYTES + 5;
        unsafe {
            let p = tcc_rt_alloc_temp(bytes, 1);
            assert!(!p.is_null());
            let s = std::slice::from_raw_parts_mut(p, bytes as usize);
            assert!(s.iter().all(|&b| b == 0), "a fresh block is zero");
            s.iter_mut().for_each(|b| *b = 7);
            tcc_rt_free_temp(p, bytes);
            // The same mapped length again: the block just given back, as left.
            let q = tcc_rt_alloc_temp(bytes, 0);
            assert_eq!(q, p, "the cached block is reused");
            let s = std::slice::from_raw_parts_mut(q, bytes as usize);
            assert!(s.iter().all(|&b| b == 7), "a block the code overwrites is not cleared");
            tcc_rt_free_temp(q, bytes);
            // Asked zeroed, the reused block is cleared.
            let r = tcc_rt_alloc_temp(bytes, 1);
            assert_eq!(r, p);
            let s = std::slice::from_raw_parts_mut(r, bytes as usize);
            assert!(s.iter().all(|&b| b == 0), "a reused block asked zeroed is zero");
            s.iter_mut().for_each(|b| *b = 9);
            tcc_rt_free_temp(r, bytes);
            set_poison(true);
            let t = tcc_rt_alloc_temp(bytes, 0);
            set_poison(false);
            let s = std::slice::from_raw_parts_mut(t, bytes as usize);
            assert!(s.iter().all(|&b| b == 0xff), "poisoned");
            tcc_rt_free_temp(t, bytes);
            // Small blocks: from malloc/calloc, zeroed when asked.
            let u = tcc_rt_alloc_temp(4096, 1);
            assert!(std::slice::from_raw_parts(u, 4096).iter().all(|&b| b == 0));
            tcc_rt_free_temp(u, 4096);
            assert!(tcc_rt_alloc_temp(u64::MAX, 0).is_null());
            assert!(cached_bytes() > 0);
            release_cache();
            assert_eq!(cached_bytes(), 0);
        }
    }

    #[test]
    fn an_impossible_size_is_null() {
        unsafe {
            assert!(tcc_rt_alloc_zeroed(u64::MAX).is_null());
            assert!(tcc_rt_alloc_zeroed(u64::MAX / 2).is_null());
        }
    }
}
