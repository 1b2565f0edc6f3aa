//! Copies that permute a tensor (the operands and results cuBLAS needs laid out
//! as matrices) through a shared-memory tile, so that both the reads and the
//! writes are coalesced.
//!
//! A one-thread-per-output copy has consecutive threads write consecutive
//! elements of the output; where the input's stride-1 variable is another one,
//! their reads are strided (a warp touches 32 sectors for 32 elements). Here a
//! block moves a [`TILE`] × [`TILE`] tile spanned by the two stride-1 variables
//! (`q`, the input's, and `p`, the output's) for one value of every other
//! variable: its threads read the tile along `q` into shared memory, and after a
//! barrier write it along `p` (the classic shared-memory transpose; the row
//! padding of one element keeps the column reads free of bank conflicts).
//! Grid: x over the tiles, the `q` tile fastest, then `p`, then the other
//! variables (the last fastest); [`ROWS`] × [`TILE`] threads per block.
//!
//! On the host ([`super::emulate`]) the same function runs one whole block per
//! call, each stretch between barriers as a loop over the block's threads.

use super::gen::{Gen, Mode};
use super::*;
use inkwell::IntPredicate;

/// Elements per side of a block's tile.
pub const TILE: u64 = 32;
/// Rows of threads: each thread moves `TILE / ROWS` elements each way.
pub const ROWS: u64 = 8;
/// The shortest extent of `p` and `q` worth a tile (shorter ones leave most of
/// the tile idle; the one-thread-per-output copy stays).
const MIN_EXTENT: u64 = 8;

/// Which parallel variables of a copy kernel span the tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transpose {
    /// The variable with stride 1 in the output.
    pub p: usize,
    /// The variable with stride 1 in the input.
    pub q: usize,
}

impl Transpose {
    /// Tiles along `q`, then `p`, then the product of the other extents.
    fn tiles(&self, par: &[u64]) -> [u64; 3] {
        let rest: u64 = par.iter().enumerate().filter(|&(j, _)| j != self.p && j != self.q).map(|(_, &n)| n).product();
        [par[self.q].div_ceil(TILE), par[self.p].div_ceil(TILE), rest]
    }
    /// The launch grid: every tile a block, all along x.
    pub fn grid(&self, par: &[u64]) -> [u64; 3] {
        [self.tiles(par).iter().product(), 1, 1]
    }
}

/// The tile a copy kernel gets: a plain copy (one operand, no reduction, no
/// function; stored, or added to the output) whose output and input have their stride-1 variables in
/// different places, both at least [`MIN_EXTENT`] long.
pub fn detect(k: &Kernel) -> Option<Transpose> {
    let plain = k.tiled.is_none()
        && k.red.is_empty()
        && k.split == 1
        && k.combine == Combine::Sum
        && k.ops.len() == 1
        && k.ops[0].func.is_none();
    if !plain {
        return None;
    }
    let unit = |strides: &[u64]| strides.iter().position(|&s| s == 1);
    let (p, q) = (unit(&k.out_strides)?, unit(&k.ops[0].par_strides)?);
    (p != q && k.par[p] >= MIN_EXTENT && k.par[q] >= MIN_EXTENT).then_some(Transpose { p, q })
}

impl<'ctx> Gen<'ctx, '_> {
    /// The kernel of a tiled copy ([`Transpose`]); `void k(T* out, U* in)` on
    /// the device, `void k(i64 bx, i64 by, i64 bz, T* out, U* in)` on the host.
    pub(super) fn transpose_kernel(&mut self, k: &Kernel, t: Transpose) -> Result<(), CodegenError> {
        let lt = self.ft(k.elem);
        let op = &k.ops[0];
        let (f, first_ptr) = self.kernel_fn(k, 3);
        let ptr = |j: u32| f.get_nth_param(first_ptr + j).expect("ptr").into_pointer_value();
        let (pout, pin) = (ptr(0), ptr(1));
        let (bx, tid) = match self.mode {
            Mode::Host => (f.get_nth_param(0).expect("block id").into_int_value(), self.i64c(0)),
            Mode::Device => {
                (self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.x")?, self.sreg("llvm.nvvm.read.ptx.sreg.tid.x")?)
            }
        };
        let [nq_tiles, np_tiles, _] = t.tiles(&k.par);
        let (np, nq) = (k.par[t.p], k.par[t.q]);
        // The block's tile: q tile, p tile, then the other variables' values.
        let tq = self.b.build_int_unsigned_rem(bx, self.i64c(nq_tiles), "tq")?;
        let r = self.b.build_int_unsigned_div(bx, self.i64c(nq_tiles), "r")?;
        let tp = self.b.build_int_unsigned_rem(r, self.i64c(np_tiles), "tp")?;
        let mut rest = self.b.build_int_unsigned_div(r, self.i64c(np_tiles), "rest")?;
        let (mut base_out, mut base_in) = (self.i64c(0), self.i64c(0));
        for j in (0..k.par.len()).rev().filter(|&j| j != t.p && j != t.q) {
            let v = self.b.build_int_unsigned_rem(rest, self.i64c(k.par[j]), "v")?;
            rest = self.b.build_int_unsigned_div(rest, self.i64c(k.par[j]), "rest")?;
            base_out = self.add_scaled(base_out, v, k.out_strides[j])?;
            base_in = self.add_scaled(base_in, v, op.par_strides[j])?;
        }
        let q0 = self.b.build_int_mul(tq, self.i64c(TILE), "q0")?;
        let p0 = self.b.build_int_mul(tp, self.i64c(TILE), "p0")?;
        let ld = TILE + 1;
        let sh = self.block_array(&format!("{}_sh", k.name), lt.into(), TILE * ld);
        let nt = ROWS * TILE;
        // Reads along q: thread (x, y) reads q0 + x of rows p0 + y + ROWS·r.
        // Writes along p: thread (x, y) writes p0 + x of columns q0 + y + ROWS·r.
        for read in [true, false] {
            if !read {
                self.barrier()?;
            }
            self.per_thread(tid, nt, &mut |g, tid| {
                let x = g.b.build_int_unsigned_rem(tid, g.i64c(TILE), "x")?;
                let y = g.b.build_int_unsigned_div(tid, g.i64c(TILE), "y")?;
                for r in 0..TILE / ROWS {
                    let yr = g.b.build_int_add(y, g.i64c(r * ROWS), "yr")?;
                    // (along, across): the element's q and p offsets in the tile.
                    let (tq_, tp_) = if read { (x, yr) } else { (yr, x) };
                    let qi = g.b.build_int_add(q0, tq_, "qi")?;
                    let pi = g.b.build_int_add(p0, tp_, "pi")?;
                    let ok_q = g.b.build_int_compare(IntPredicate::ULT, qi, g.i64c(nq), "okq")?;
                    let ok_p = g.b.build_int_compare(IntPredicate::ULT, pi, g.i64c(np), "okp")?;
                    let ok = g.b.build_and(ok_q, ok_p, "ok")?;
                    let guard = nq % TILE != 0 || np % TILE != 0;
                    // Shared element [p][q] of the tile, rows padded to `ld`.
                    let s_at = g.b.build_int_add(g.b.build_int_mul(tp_, g.i64c(ld), "sp")?, tq_, "s")?;
                    g.if_then(ok, guard, &mut |g| {
                        let sp = g.at(sh, s_at)?;
                        if read {
                            let off = g.add_scaled(base_in, qi, 1)?;
                            let off = g.add_scaled(off, pi, op.par_strides[t.p])?;
                            // SAFETY: inside the operand: every variable within its extent.
                            let src = unsafe { g.b.build_in_bounds_gep(pin, &[off], "src")? };
                            let v = g.load_as(src, op.elem, lt)?;
                            let v =
                                if k.coef == 1.0 { v } else { g.b.build_float_mul(v, lt.const_float(k.coef), "v")? };
                            g.b.build_store(sp, v)?;
                        } else {
                            let off = g.add_scaled(base_out, pi, 1)?;
                            let off = g.add_scaled(off, qi, k.out_strides[t.q])?;
                            // SAFETY: inside the output: every variable within its extent.
                            let dst = unsafe { g.b.build_in_bounds_gep(pout, &[off], "dst")? };
                            let v = g.b.build_load(sp, "v")?.into_float_value();
                            let v = if k.store {
                                v
                            } else {
                                let old = g.load_as(dst, k.out_elem(), lt)?;
                                g.b.build_float_add(old, v, "new")?
                            };
                            g.store_as(dst, v, k.out_elem())?;
                        }
                        Ok(())
                    })?;
                }
                Ok(())
            })?;
        }
        self.end_block_kernel(f, nt)
    }
}
