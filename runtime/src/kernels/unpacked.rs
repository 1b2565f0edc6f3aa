//! GETT without packing, for operands that already sit in cache: the tile
//! tasks of tiled execution multiply tiles of a few dozen elements per side,
//! where copying both operands into panels costs as much as the multiplication
//! (BLIS's "sup" kernels make the same trade). The micro-kernel reads one
//! operand's `MR` contiguous elements per step and broadcasts the other's from
//! any strides ([`UkernelStrided`]); only partial slivers at the edges are copied
//! (so that no read leaves the operands).

use super::{Elem, Params, Ptrs, Tables, PACK};

/// The micro-kernel reading unpacked operands:
/// `C[i*rs_c + j*cs_c] += alpha Σ_p A[p*sa + i] B[p*sbk + j*sbn]` for
/// `i < mrows`, `j < ncols` (reading all `MR` rows of A but only `ncols` columns
/// of B; a partial tile needs `rs_c == 1`).
pub type UkernelStrided<T> = unsafe extern "C" fn(
    kc: i64,
    a: *const T,
    b: *const T,
    c: *mut T,
    rs_c: i64,
    cs_c: i64,
    alpha: T,
    mrows: i64,
    ncols: i64,
    sa: i64,
    sbk: i64,
    sbn: i64,
);

/// Largest operands multiplied in place, in elements of A plus B: beyond it a
/// panel no longer stays in the core's L2 across its reuses, and packing pays.
const MAX_ELEMENTS: usize = 2 * 160 * 160;

/// `TCC_GETT_UNPACKED=0` turns the unpacked path off (experiments: the
/// benchmark compares both), read once.
pub(super) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TCC_GETT_UNPACKED").map_or(true, |v| v != "0"))
}

/// One operand's role in the kernel: the base of the batch entry and its steps.
#[derive(Clone, Copy)]
struct Operand<T> {
    base: *const T,
    /// Step along the kernel's rows (A) or columns (B).
    s_free: isize,
    /// Step along `k`.
    s_k: isize,
}

/// Runs the GETT of `t` unpacked if its groups allow it: every group an
/// arithmetic progression, and one operand's free group contiguous (A's `m`
/// directly, or B's `n`, computing `Cᵀ = Bᵀ Aᵀ`). Returns whether it ran.
///
/// # Safety
/// As for [`super::gett`]; `uks[w - 1]` must be a strided micro-kernel of `p.mr`
/// rows and at least `w` columns, for every `w ≤ p.nr`.
pub(super) unsafe fn try_run<T: Elem>(
    ptrs: Ptrs<T>,
    t: &Tables,
    alpha: T,
    p: &Params,
    uks: &[UkernelStrided<T>],
    overwrite: bool,
) -> bool {
    let (m, n, k) = (t.ma.len(), t.nb.len(), t.ka.len());
    if m == 0 || n == 0 || k == 0 || m * k + k * n > MAX_ELEMENTS || uks.len() < p.nr {
        return false;
    }
    let (Some(ma), Some(mc), Some(nb), Some(nc), Some(ka), Some(kb)) = (t.s_ma, t.s_mc, t.s_nb, t.s_nc, t.s_ka, t.s_kb)
    else {
        return false;
    };
    // A group of one element is contiguous whatever its step.
    let unit = |len: usize, s: isize| if len == 1 { 1 } else { s };
    let (ma, mc, nb, nc) = (unit(m, ma), unit(m, mc), unit(n, nb), unit(n, nc));
    let direct = ma == 1;
    let swapped = nb == 1;
    // Both orientations possible: prefer unit-stride rows of C (vector stores).
    let swap = swapped && (!direct || (mc != 1 && nc == 1));
    if !direct && !swapped {
        return false;
    }
    for bi in 0..t.ba.len() {
        let a = Operand { base: ptrs.a.offset(t.ba[bi]), s_free: ma, s_k: ka };
        let b = Operand { base: ptrs.b.offset(t.bb[bi]), s_free: nb, s_k: kb };
        let c = ptrs.c.offset(t.bc[bi]);
        if swap {
            entry(b, a, c, (n, m, k), (nc, mc), alpha, p, uks, overwrite);
        } else {
            entry(a, b, c, (m, n, k), (mc, nc), alpha, p, uks, overwrite);
        }
    }
    true
}

/// One batch entry: `C[i*rs + j*cs] (+)= alpha Σ_p A[i, p] B[p, j]` with A's rows
/// contiguous (`a.s_free == 1`).
#[allow(clippy::too_many_arguments)]
unsafe fn entry<T: Elem>(
    a: Operand<T>,
    b: Operand<T>,
    c: *mut T,
    (m, n, k): (usize, usize, usize),
    (rs, cs): (isize, isize),
    alpha: T,
    p: &Params,
    uks: &[UkernelStrided<T>],
    overwrite: bool,
) {
    debug_assert_eq!(a.s_free, 1);
    let (mr, nr) = (p.mr, p.nr);
    let elem = std::mem::size_of::<T>();
    PACK.with(|cell| {
        let mut buf = cell.borrow_mut();
        // The edge sliver of A and the scatter tile.
        let kc = p.kc.min(k);
        let need = ((kc * mr + mr * nr) * elem).div_ceil(8) + 8;
        if buf.len() < need {
            buf.resize(need, 0.0);
        }
        let a_edge = buf.as_mut_ptr() as *mut T;
        let tbuf = a_edge.add(kc * mr);
        let full_rows = m / mr * mr;
        let mut pc = 0;
        while pc < k {
            let kb = p.kc.min(k - pc);
            let clear = overwrite && pc == 0;
            // The partial last row sliver, zero padded, once per k block.
            if full_rows < m {
                let rows = m - full_rows;
                for pp in 0..kb {
                    let src = a.base.offset(full_rows as isize + (pc + pp) as isize * a.s_k);
                    for i in 0..mr {
                        *a_edge.add(pp * mr + i) = if i < rows { *src.add(i) } else { T::zero() };
                    }
                }
            }
            let mut jr = 0;
            while jr < n {
                let cols = nr.min(n - jr);
                // A partial sliver too, on a kernel as wide as it is.
                let uk = uks[cols - 1];
                let bptr = b.base.offset(jr as isize * b.s_free + pc as isize * b.s_k);
                let (sbk, sbn) = (b.s_k, b.s_free);
                let mut ir = 0;
                while ir < m {
                    let rows = mr.min(m - ir);
                    let aptr =
                        if rows == mr { a.base.offset(ir as isize + pc as isize * a.s_k) } else { a_edge as *const T };
                    let sa = if rows == mr { a.s_k } else { mr as isize };
                    let c0 = c.offset(ir as isize * rs + jr as isize * cs);
                    let call = |c: *mut T, rs: isize, cs: isize, rows: usize, cols: usize| {
                        uk(
                            kb as i64,
                            aptr,
                            bptr,
                            c,
                            rs as i64,
                            cs as i64,
                            alpha,
                            rows as i64,
                            cols as i64,
                            sa as i64,
                            sbk as i64,
                            sbn as i64,
                        )
                    };
                    if (rows == mr && cols == nr) || rs == 1 {
                        if clear {
                            for j in 0..cols as isize {
                                for i in 0..rows as isize {
                                    *c0.offset(i * rs + j * cs) = T::zero();
                                }
                            }
                        }
                        call(c0, rs, cs, rows, cols);
                    } else {
                        // A partial tile with strided rows: through `tbuf`.
                        for x in 0..mr * nr {
                            *tbuf.add(x) = T::zero();
                        }
                        call(tbuf, 1, mr as isize, mr, cols);
                        for j in 0..cols {
                            for i in 0..rows {
                                let dst = c0.offset(i as isize * rs + j as isize * cs);
                                let v = *tbuf.add(j * mr + i);
                                if clear {
                                    *dst = v;
                                } else {
                                    *dst += v;
                                }
                            }
                        }
                    }
                    ir += mr;
                }
                jr += nr;
            }
            pc += p.kc;
        }
    });
}
