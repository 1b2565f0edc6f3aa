//! Tile storage: a zeroed `f64` buffer aligned to a cache line, allocated
//! fallibly. Tiles are stored back to back, so when tile lengths are multiples
//! of 8 elements (tile sizes of 8, 16, 32, 40, ... in some dimension) every tile
//! starts a cache line, and the unpacked micro-kernel's vector loads of a tile
//! column do not straddle two lines.
//!
//! Large buffers (tensors, received and partial tiles) are mapped straight from
//! the kernel instead: its pages are zero already, so nothing is written at
//! allocation (the allocator's `alloc_zeroed` with a 64-byte alignment writes
//! every page on the allocating thread), pages are first touched by the thread
//! that computes into them, and they are marked for transparent huge pages —
//! 512 times fewer page faults, which ranks of one process otherwise take
//! against one address space at every task set.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout as MemLayout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The alignment of every buffer, in bytes.
pub const ALIGN: usize = 64;

/// A heap buffer of `f64` with [`ALIGN`]-byte alignment.
pub struct AlignedBuf {
    ptr: NonNull<f64>,
    len: usize,
    /// Mapped with `mmap` (unmapped on drop) rather than from the allocator.
    mapped: bool,
}

/// Buffers of at least this many bytes are mapped ([`AlignedBuf`]).
const MAP_BYTES: usize = 4 << 20;

// SAFETY: the buffer owns its memory, like a `Vec<f64>`.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(len: usize) -> Option<MemLayout> {
        MemLayout::from_size_align(len.checked_mul(8)?, ALIGN).ok()
    }

    /// `len` zeros, or `None` when the memory cannot be had (never an abort).
    pub fn zeroed(len: usize) -> Option<AlignedBuf> {
        if len == 0 {
            return Some(AlignedBuf::default());
        }
        let layout = Self::layout(len)?;
        if layout.size() >= MAP_BYTES {
            return Self::mapped(layout.size()).map(|ptr| AlignedBuf { ptr, len, mapped: true });
        }
        // SAFETY: the layout has a nonzero size.
        let p = unsafe { alloc_zeroed(layout) } as *mut f64;
        NonNull::new(p).map(|ptr| AlignedBuf { ptr, len, mapped: false })
    }

    /// `bytes` of zero pages from the kernel (page-aligned, so [`ALIGN`]-aligned),
    /// advised as huge-page candidates; `None` when the kernel refuses.
    fn mapped(bytes: usize) -> Option<NonNull<f64>> {
        // SAFETY: an anonymous private mapping of a nonzero size at an address
        // the kernel chooses touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on the mapping just made; a kernel without transparent
        // huge pages answers EINVAL, which changes nothing.
        unsafe { libc::madvise(p, bytes, libc::MADV_HUGEPAGE) };
        NonNull::new(p as *mut f64)
    }
}

impl Default for AlignedBuf {
    fn default() -> AlignedBuf {
        AlignedBuf { ptr: NonNull::dangling(), len: 0, mapped: false }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let layout = Self::layout(self.len).expect("layout");
        if self.mapped {
            // SAFETY: mapped in `zeroed` with this size, and unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, layout.size()) };
        } else {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { dealloc(self.ptr.as_ptr() as *mut u8, layout) }
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        // SAFETY: `ptr` is valid for `len` initialized elements (or dangling with 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [f64] {
        // SAFETY: as for `deref`, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        let mut c =
            AlignedBuf::zeroed(self.len).unwrap_or_else(|| handle_alloc_error(Self::layout(self.len).expect("layout")));
        c.copy_from_slice(self);
        c
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} elements)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_independent_when_cloned() {
        // 1 << 20 elements (8 MiB) is mapped rather than allocated.
        for n in [0, 1, 7, 1000, 1 << 20, (1 << 20) + 3] {
            let mut b = AlignedBuf::zeroed(n).unwrap();
            assert_eq!(b.len(), n);
            assert!(b.iter().all(|&x| x == 0.0));
            if n > 0 {
                assert_eq!(b.as_ptr() as usize % ALIGN, 0);
                b[n - 1] = 3.0;
                let c = b.clone();
                b[n - 1] = 4.0;
                assert_eq!(c[n - 1], 3.0);
                assert_eq!(c.as_ptr() as usize % ALIGN, 0);
            }
        }
        assert!(AlignedBuf::zeroed(usize::MAX / 4).is_none());
    }
}
