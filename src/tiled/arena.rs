//! One buffer for a rank's temporaries, planned before the first run.
//!
//! Every rank knows, before it runs, which task set first writes each
//! temporary and after which set it is dead, and how many words of it it owns.
//! Temporaries alive at the same time get disjoint ranges of one buffer; those
//! that never are may share (first fit, largest first — what a compiler does
//! for the activations of a network). The buffer is kept by the rank's tiles:
//!
//! * within a run, a temporary made after another died reuses that one's pages
//!   instead of the kernel faulting in fresh ones (which `tcc tune` measures at
//!   0.3–2.5 GB/s per rank: first touch can rival the kernels);
//! * across runs of the same tiles (sessions, `tcc build --mpi` libraries,
//!   called once per iteration of a coupled-cluster solver) no temporary
//!   touches fresh memory after the first run.
//!
//! Only a temporary's range that an earlier one used is cleared when it is
//! made: fresh pages are zero already, and clearing them would touch them on
//! the main thread instead of where they are computed.

use super::buffer::AlignedBuf;
use crate::ids::TensorId;
use std::collections::HashMap;

/// Ranges start on 64-byte lines, as every buffer of [`AlignedBuf`] does.
const LINE_WORDS: usize = super::buffer::ALIGN / 8;

/// What a temporary needs: its words on this rank and the task sets from the
/// one that first writes it to the last that reads it (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub tensor: TensorId,
    pub words: usize,
    pub first: usize,
    pub last: usize,
}

/// Offsets for `needs` such that two temporaries whose set ranges overlap get
/// disjoint ranges, and the total: first fit, largest first (ties by id, so
/// every rank with the same needs plans alike).
pub fn pack(needs: &[Need]) -> (HashMap<TensorId, usize>, usize) {
    let mut order: Vec<&Need> = needs.iter().filter(|n| n.words > 0).collect();
    order.sort_by_key(|n| (std::cmp::Reverse(n.words), n.tensor));
    let mut placed: Vec<(&Need, usize)> = Vec::new();
    let mut total = 0;
    for n in order {
        // The ranges of those alive with it, by start.
        let mut taken: Vec<(usize, usize)> = placed
            .iter()
            .filter(|(o, _)| o.first <= n.last && n.first <= o.last)
            .map(|&(o, at)| (at, at + o.words))
            .collect();
        taken.sort_unstable();
        let mut at = 0;
        for (start, end) in taken {
            if at + n.words <= start {
                break;
            }
            at = at.max(end.next_multiple_of(LINE_WORDS));
        }
        total = total.max(at + n.words);
        placed.push((n, at));
    }
    (placed.into_iter().map(|(n, at)| (n.tensor, at)).collect(), total)
}

/// The buffer, where each temporary lies in it, and which ranges have been
/// handed out (so, written) since it was mapped.
pub struct Arena {
    buf: AlignedBuf,
    at: HashMap<TensorId, (usize, usize)>,
    used: Vec<(usize, usize)>,
}

impl Arena {
    /// The arena of `needs`, its pages not yet touched; `None` when there is
    /// nothing to hold, or the memory cannot be had.
    pub fn new(needs: &[Need]) -> Option<Arena> {
        let (offsets, total) = pack(needs);
        if total == 0 {
            return None;
        }
        let buf = AlignedBuf::zeroed(total)?;
        let at = needs.iter().filter_map(|n| offsets.get(&n.tensor).map(|&o| (n.tensor, (o, n.words)))).collect();
        Some(Arena { buf, at, used: Vec::new() })
    }

    /// Words of the buffer: at most the sum of the temporaries, at least the
    /// most alive at once (tests).
    #[cfg(test)]
    pub fn words(&self) -> usize {
        self.buf.len()
    }

    /// Zeroed room for `t` (its words on this rank), or `None` for a tensor the
    /// arena does not hold. The room stays valid while the arena lives; it is
    /// `t`'s until the next run that makes `t` again, and no temporary alive
    /// with `t` is given any of it.
    pub fn take(&mut self, t: TensorId) -> Option<(*mut f64, usize)> {
        let &(at, len) = self.at.get(&t)?;
        for &(u, n) in &self.used {
            let (lo, hi) = (at.max(u), (at + len).min(u + n));
            if lo < hi {
                self.buf[lo..hi].fill(0.0);
            }
        }
        if !self.used.contains(&(at, len)) {
            self.used.push((at, len));
        }
        // SAFETY: `at + len <= words()` by `pack`; the buffer is never moved.
        Some((unsafe { self.buf.as_mut_ptr().add(at) }, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(t: usize, words: usize, first: usize, last: usize) -> Need {
        Need { tensor: TensorId::new(t), words, first, last }
    }

    #[test]
    fn temporaries_alive_together_never_share_and_the_others_do() {
        // The four-index transform's three quarter transforms: T1 dies when T3
        // is made, so T3 may lie over it but never over T2.
        let needs = [need(1, 1000, 0, 1), need(2, 1000, 1, 2), need(3, 1800, 2, 3)];
        let (at, total) = pack(&needs);
        assert!(total < 3800, "no sharing: {total}");
        assert!(total >= 2800, "T2 and T3 are alive together: {total}");
        // Random lifetimes: every pair alive together is disjoint, and starts are on lines.
        let mut state = 12345u64;
        let mut next = |m: usize| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize % m
        };
        for _ in 0..200 {
            let needs: Vec<Need> = (0..12)
                .map(|t| {
                    let first = next(8);
                    need(t, next(5000), first, first + next(4))
                })
                .collect();
            let (at, total) = pack(&needs);
            for a in needs.iter().filter(|n| n.words > 0) {
                let x = at[&a.tensor];
                assert_eq!(x % LINE_WORDS, 0);
                assert!(x + a.words <= total);
                for b in needs.iter().filter(|n| n.words > 0 && n.tensor != a.tensor) {
                    let y = at[&b.tensor];
                    if a.first <= b.last && b.first <= a.last {
                        assert!(x + a.words <= y || y + b.words <= x, "{a:?} at {x} and {b:?} at {y}");
                    }
                }
            }
            let most_alive = (0..12)
                .map(|l| needs.iter().filter(|n| n.first <= l && l <= n.last).map(|n| n.words).sum::<usize>())
                .max()
                .unwrap();
            assert!(total >= most_alive);
            assert!(total <= needs.iter().map(|n| n.words.next_multiple_of(LINE_WORDS)).sum::<usize>());
        }
        assert_eq!(at.len(), 3);
    }

    #[test]
    fn room_is_zero_when_taken_even_where_an_earlier_temporary_wrote() {
        let needs = [need(1, 100, 0, 0), need(2, 300, 1, 1)];
        let mut arena = Arena::new(&needs).unwrap();
        assert!(arena.words() < 400, "T2 lies over T1");
        for round in 0..2 {
            for t in [1, 2] {
                let (p, n) = arena.take(TensorId::new(t)).unwrap();
                // SAFETY: the room `take` gave, `n` words.
                let room = unsafe { std::slice::from_raw_parts_mut(p, n) };
                assert!(room.iter().all(|&x| x == 0.0), "round {round}, T{t}");
                room.fill(7.0);
            }
        }
        assert!(arena.take(TensorId::new(9)).is_none());
    }
}
