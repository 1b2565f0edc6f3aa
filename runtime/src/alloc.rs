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
    fn an_impossible_size_is_null() {
        unsafe {
            assert!(tcc_rt_alloc_zeroed(u64::MAX).is_null());
            assert!(tcc_rt_alloc_zeroed(u64::MAX / 2).is_null());
        }
    }
}
