//! Sliced terms shared among ranks.
//!
//! Generated code runs a sliced term (the compiler's `--max-intermediate`) as one
//! task per value of its sliced indices. Alone, a process runs every slice. On
//! ranks (`tcc run --ranks N --max-intermediate B`), every rank runs the same
//! compiled unit with a [`SliceShare`] installed on its thread: each sliced term
//! asks [`tcc_rt_slice_begin`] for its window of slices (a balanced block of the
//! slice numbers), and after its slices [`tcc_rt_slice_end`] combines the ranks'
//! parts of the target with the communicator:
//!
//! * a summed sliced index: every rank holds a partial sum. Ranks other than 0
//!   clear the target before their slices (rank 0 keeps what an `+=` adds to),
//!   so an all-reduce (sum) of the targets is the whole result;
//! * only kept sliced indices: the slices write disjoint parts of the target, so
//!   each rank sends the elements of its own slices (an all-gather) and writes
//!   the others' into place.
//!
//! Every rank then holds the whole target, as after a run in one process. The
//! compiled code is the same with and without a share; without one (one process,
//! or a library) the window is every slice and the end does nothing.
//!
//! The term's descriptor (`desc`, `i64`s, values at run time): slices, element
//! bytes (8 or 4), summed (0/1), `k` sliced indices, `m` stored dimensions of the
//! target; then the `k` sliced extents (row-major slice numbering, first index
//! slowest); then per stored target dimension its extent, stride (elements) and
//! the position of its index among the sliced ones (−1: not sliced).

use crate::comm::{Communicator, ReduceOp};
use std::cell::Cell;

/// One rank's share of the sliced terms it runs: its communicator, and what it did.
pub struct SliceShare<'a> {
    comm: &'a dyn Communicator,
    /// Slices this rank ran.
    slices: Cell<u64>,
    /// Sliced terms whose results were combined.
    terms: Cell<u64>,
}

impl<'a> SliceShare<'a> {
    pub fn new(comm: &'a dyn Communicator) -> Self {
        SliceShare { comm, slices: Cell::new(0), terms: Cell::new(0) }
    }

    /// Slices this rank ran so far.
    pub fn slices(&self) -> u64 {
        self.slices.get()
    }

    /// Sliced terms combined so far.
    pub fn terms(&self) -> u64 {
        self.terms.get()
    }

    /// The block of `n` slices this rank runs.
    fn window(&self, n: u64) -> (u64, u64) {
        let (r, p) = (self.comm.rank() as u128, self.comm.size() as u128);
        let n = n as u128;
        ((n * r / p) as u64, (n * (r + 1) / p) as u64)
    }
}

thread_local! {
    /// The share installed on this thread (a `&SliceShare` with its lifetime erased).
    static SHARE: Cell<Option<*const SliceShare<'static>>> = const { Cell::new(None) };
}

/// Runs `f` with `share` installed on this thread: the sliced terms generated code
/// runs on this thread inside `f` run only this rank's slices and combine with
/// the other ranks, which must run the same code.
pub fn with_share<R>(share: &SliceShare<'_>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<*const SliceShare<'static>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SHARE.with(|s| s.set(self.0));
        }
    }
    // SAFETY (of the later dereferences): the pointer is removed by `Restore`
    // before `share` can go away.
    let erased = std::ptr::from_ref(share).cast::<SliceShare<'static>>();
    let _restore = Restore(SHARE.with(|s| s.replace(Some(erased))));
    f()
}

fn current<'a>() -> Option<&'a SliceShare<'static>> {
    // SAFETY: set only by `with_share`, for as long as the share lives.
    SHARE.with(|s| s.get()).map(|p| unsafe { &*p })
}

/// A term's descriptor, decoded.
struct Desc {
    slices: u64,
    elem_bytes: usize,
    summed: bool,
    extents: Vec<u64>,
    /// Target dimensions: extent, stride, position among the sliced indices.
    dims: Vec<(u64, u64, i64)>,
}

impl Desc {
    /// # Safety
    /// `desc` points to a descriptor as the module documentation gives it.
    unsafe fn read(desc: *const i64) -> Desc {
        let at = |k: usize| unsafe { *desc.add(k) };
        let (k, m) = (at(3).max(0) as usize, at(4).max(0) as usize);
        let extents = (0..k).map(|j| at(5 + j) as u64).collect();
        let dims = (0..m).map(|d| (at(5 + k + 3 * d) as u64, at(6 + k + 3 * d) as u64, at(7 + k + 3 * d))).collect();
        Desc { slices: at(0) as u64, elem_bytes: at(1) as usize, summed: at(2) != 0, extents, dims }
    }

    fn elements(&self) -> usize {
        self.dims.iter().map(|d| d.0 as usize).product()
    }

    /// Calls `f(offset, slice)` for every element of the target: its offset in the
    /// buffer and the slice that writes it (row-major over the sliced extents;
    /// sliced indices absent from the target count as 0).
    fn each_element(&self, mut f: impl FnMut(usize, u64)) {
        if self.dims.iter().any(|d| d.0 == 0) {
            return;
        }
        // The weight of each sliced index in the slice number.
        let mut weight = vec![1u64; self.extents.len()];
        for j in (0..self.extents.len().saturating_sub(1)).rev() {
            weight[j] = weight[j + 1] * self.extents[j + 1];
        }
        let mut coord = vec![0u64; self.dims.len()];
        loop {
            let mut off = 0u64;
            let mut slice = 0u64;
            for (c, &(_, stride, pos)) in coord.iter().zip(&self.dims) {
                off += c * stride;
                if pos >= 0 {
                    slice += c * weight[pos as usize];
                }
            }
            f(off as usize, slice);
            // Odometer, last dimension fastest.
            let mut d = self.dims.len();
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                coord[d] += 1;
                if coord[d] < self.dims[d].0 {
                    break;
                }
                coord[d] = 0;
            }
        }
    }
}

/// Element `off` of a target of `elem_bytes`-byte floats, as f64.
///
/// # Safety
/// `target` holds at least `off + 1` elements.
unsafe fn load(target: *const u8, elem_bytes: usize, off: usize) -> f64 {
    if elem_bytes == 4 {
        unsafe { f64::from(*(target as *const f32).add(off)) }
    } else {
        unsafe { *(target as *const f64).add(off) }
    }
}

/// # Safety
/// As [`load`].
unsafe fn store(target: *mut u8, elem_bytes: usize, off: usize, v: f64) {
    if elem_bytes == 4 {
        unsafe { *(target as *mut f32).add(off) = v as f32 }
    } else {
        unsafe { *(target as *mut f64).add(off) = v }
    }
}

/// Before a sliced term's slices: writes the window of slice numbers this process
/// runs to `window[0..2]` (every slice without a share) and, on ranks other than
/// 0, clears the target when a sliced index is summed.
///
/// # Safety
/// `desc` is a descriptor (module documentation), `target` the term's target
/// buffer as it describes, `window` two writable `i64`s.
#[no_mangle]
pub unsafe extern "C" fn tcc_rt_slice_begin(desc: *const i64, target: *mut u8, window: *mut i64) {
    let d = unsafe { Desc::read(desc) };
    let (lo, hi) = match current() {
        None => (0, d.slices),
        Some(share) => {
            if d.summed && share.comm.rank() != 0 {
                d.each_element(|off, _| unsafe { store(target, d.elem_bytes, off, 0.0) });
            }
            let w = share.window(d.slices);
            share.slices.set(share.slices.get() + (w.1 - w.0));
            w
        }
    };
    unsafe {
        *window = lo as i64;
        *window.add(1) = hi as i64;
    }
}

/// After a sliced term's slices: with a share, makes the target whole on every
/// rank (all-reduce of partial sums, or all-gather of the ranks' slices).
///
/// # Safety
/// As [`tcc_rt_slice_begin`], with the same arguments.
#[no_mangle]
pub unsafe extern "C" fn tcc_rt_slice_end(desc: *const i64, target: *mut u8) {
    let Some(share) = current() else { return };
    let d = unsafe { Desc::read(desc) };
    let eb = d.elem_bytes;
    if d.summed {
        let mut offs = Vec::with_capacity(d.elements());
        d.each_element(|off, _| offs.push(off));
        let mut buf: Vec<f64> = offs.iter().map(|&o| unsafe { load(target, eb, o) }).collect();
        share.comm.allreduce(&mut buf, ReduceOp::Sum);
        for (&o, &v) in offs.iter().zip(&buf) {
            unsafe { store(target, eb, o, v) };
        }
    } else {
        let p = share.comm.size();
        let me = share.comm.rank();
        let bounds: Vec<u64> = (0..=p as u128).map(|r| (d.slices as u128 * r / p as u128) as u64).collect();
        let owner = |s: u64| bounds.partition_point(|&b| b <= s) - 1;
        let mut counts = vec![0usize; p];
        let mut elems: Vec<(usize, usize)> = Vec::with_capacity(d.elements());
        let mut mine = Vec::new();
        d.each_element(|off, s| {
            let r = owner(s);
            counts[r] += 1;
            elems.push((off, r));
            if r == me {
                mine.push(unsafe { load(target, eb, off) });
            }
        });
        let mut all = vec![0.0; elems.len()];
        share.comm.allgatherv(&mine, &counts, &mut all);
        let mut next = crate::comm::displs(&counts);
        for (off, r) in elems {
            if r != me {
                unsafe { store(target, eb, off, all[next[r]]) };
            }
            next[r] += 1;
        }
    }
    share.terms.set(share.terms.get() + 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Summed: a 2×3 target whose first dimension is the second of two sliced
    /// indices (extents 4 and 2; the first is summed). Kept: a 4×2×3 target whose
    /// first two dimensions are the sliced indices.
    fn desc(summed: bool) -> Vec<i64> {
        match summed {
            true => vec![8, 8, 1, 2, 2, 4, 2, 2, 3, 1, 3, 1, -1],
            false => vec![8, 8, 0, 2, 3, 4, 2, 4, 6, 0, 2, 3, 1, 3, 1, -1],
        }
    }

    #[test]
    fn each_element_names_the_slice_that_writes_it() {
        let d = unsafe { Desc::read(desc(true).as_ptr()) };
        let mut seen = Vec::new();
        d.each_element(|off, s| seen.push((off, s)));
        assert_eq!(seen, vec![(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 1)]);
        let d = unsafe { Desc::read(desc(false).as_ptr()) };
        let mut seen = Vec::new();
        d.each_element(|off, s| seen.push((off, s)));
        assert_eq!(seen.len(), 24);
        assert!(seen.iter().all(|&(off, s)| s == (off / 3) as u64), "{seen:?}");
    }

    #[test]
    fn without_a_share_every_slice_runs_and_nothing_moves() {
        let mut target = [1.0f64; 6];
        let mut w = [7i64; 2];
        unsafe {
            tcc_rt_slice_begin(desc(true).as_ptr(), target.as_mut_ptr() as *mut u8, w.as_mut_ptr());
            tcc_rt_slice_end(desc(true).as_ptr(), target.as_mut_ptr() as *mut u8);
        }
        assert_eq!(w, [0, 8]);
        assert_eq!(target, [1.0; 6]);
    }

    /// What slice `s` adds to element `e` (an `+=` onto 5): summed, every slice
    /// adds to the row `s % 2`; kept, slice `s` writes its own row of 3.
    fn adds(summed: bool, s: i64, e: usize) -> f64 {
        let writes = if summed { (e / 3) as i64 == s % 2 } else { (e / 3) as i64 == s };
        if writes {
            (s + 1) as f64 * (e + 1) as f64
        } else {
            0.0
        }
    }

    #[test]
    fn ranks_split_the_slices_and_gather_or_reduce() {
        for summed in [false, true] {
            let len = if summed { 6 } else { 24 };
            let got = crate::comm::threads::run(3, |rank| {
                let comm = rank.comm(crate::comm::Backend::Threads);
                let share = SliceShare::new(comm.as_ref());
                let dsc = desc(summed);
                let mut target = vec![5.0f64; len];
                let mut w = [0i64; 2];
                with_share(&share, || unsafe {
                    tcc_rt_slice_begin(dsc.as_ptr(), target.as_mut_ptr() as *mut u8, w.as_mut_ptr());
                    for s in w[0]..w[1] {
                        for (e, t) in target.iter_mut().enumerate() {
                            *t += adds(summed, s, e);
                        }
                    }
                    tcc_rt_slice_end(dsc.as_ptr(), target.as_mut_ptr() as *mut u8);
                });
                (w, target, share.slices(), comm.stats().words_sent)
            })
            .unwrap_or_else(|_| panic!("ranks failed"));
            let windows: Vec<[i64; 2]> = got.iter().map(|g| g.0).collect();
            assert_eq!(windows, vec![[0, 2], [2, 5], [5, 8]]);
            assert_eq!(got.iter().map(|g| g.2).sum::<u64>(), 8);
            let want: Vec<f64> = (0..len).map(|e| 5.0 + (0..8).map(|s| adds(summed, s, e)).sum::<f64>()).collect();
            for g in &got {
                assert_eq!(g.1, want, "summed {summed}");
                assert!(g.3 > 0, "every rank sends its part");
            }
        }
    }
}
