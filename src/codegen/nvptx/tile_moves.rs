//! The kernels of tiled programs on the GPU ([`crate::tiled::device`]): a batch
//! of [`Move`]s described at run time, since tiles read through symmetry have
//! strides that differ from tile to tile; one kernel for products, sums and
//! copies, one for `max`/`min` and `where` ([`MoveKernel`]).
//!
//! Each move is one item of [`MoveKernel::item_words`] 64-bit words (see
//! [`encode`]) and is cut into pieces of at most [`CHUNK`] points, one block of
//! [`THREADS`] threads per piece; a launch's block table gives each block its
//! item, so the host writes a move's description once, not once per piece (the
//! CCD residual's 1588 moves at v = 200 were 6.8 M words in 136 k pieces). A
//! thread takes its piece's points `first + t`, `first + t + THREADS`, …,
//! splits each into its coordinates along the box (last dimension fastest) and
//! reads and writes through the strides. Element-wise functions
//! are applied in f64 with the generated `exp`/`log`/`tanh` of [`super::math`].
//! Adds are atomic (`atom.add.f64`), and so are `max`/`min` (integer
//! `atom.max`/`atom.min` on the bits: see [`Gen::atomic_extremum`]).
//!
//! The same kernels are generated for the host and run block by block
//! ([`EmulatedMachine`]), which the tests hold to the interpreter.
//! [`crate::tiled::device::TileMachine`] is implemented by the GPU in
//! `codegen::cuda_tiled`.

use super::gen::{Gen, Mode};
use super::{err, CodegenError};
use crate::sema::hir::{CmpOp, Extremum, Func};
use crate::tiled::device::{Buf, HostBuffers, HostRounds, Loc, Move, MoveOp};
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use inkwell::targets::TargetMachine;
use inkwell::values::{FloatValue, IntValue, PointerValue};
use inkwell::{AtomicOrdering, AtomicRMWBinOp, FloatPredicate, IntPredicate, OptimizationLevel};

/// Threads per block.
pub const THREADS: u64 = 256;
/// Points of a move per block.
pub const CHUNK: usize = 4096;
/// Dimensions of a move's box after dropping those of extent 1.
pub const MAX_DIMS: usize = 10;

/// The two kernels of the PTX. Products, sums and copies (every move of a
/// contraction) go to a lean kernel of at most two sources; `max`/`min` and
/// `where` to one of four with their writes, so that the code they need costs
/// the products nothing (in one kernel the CCD residual's moves ran 2× slower).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveKernel {
    Product,
    Special,
}

/// Positions of an item's words: the destination, the sources, the move's
/// points, its first block in the launch, dimensions, alpha (bits), flags, the
/// sources' signs (bits), then extents, destination strides and each source's
/// strides, [`MAX_DIMS`] each.
/// Flags: bit 0 add (else store), bits 1–3 the number of sources, 8 + 8·j the
/// function of source `j` (1 + position in [`Func::ALL`], 0 none); for the
/// special kernel bits 48–51 its op (2 max, 3 min, 4 where) and 52–55 the
/// comparison of a `where`.
impl MoveKernel {
    pub const ALL: [MoveKernel; 2] = [MoveKernel::Product, MoveKernel::Special];
    /// Its position in [`MoveKernel::ALL`] (where machines keep their kernels).
    pub fn index(self) -> usize {
        self as usize
    }
    /// The kernel of a move's op.
    pub fn of(op: MoveOp) -> MoveKernel {
        match op {
            MoveOp::Store | MoveOp::Add => MoveKernel::Product,
            MoveOp::Extremum(_) | MoveOp::Select(_) => MoveKernel::Special,
        }
    }
    /// The kernel's name in the PTX.
    pub fn name(self) -> &'static str {
        match self {
            MoveKernel::Product => "tcc_tile_moves",
            MoveKernel::Special => "tcc_tile_special",
        }
    }
    /// Sources of a move at most (`where` reads four).
    pub fn srcs(self) -> usize {
        match self {
            MoveKernel::Product => 2,
            MoveKernel::Special => 4,
        }
    }
    fn w_first(self) -> usize {
        1 + self.srcs()
    }
    fn w_signs(self) -> usize {
        self.w_first() + 5
    }
    fn header(self) -> usize {
        self.w_signs() + self.srcs()
    }
    /// Words of one item.
    pub fn item_words(self) -> usize {
        self.header() + (2 + self.srcs()) * MAX_DIMS
    }
}

/// The comparisons of `where`, by their code in the flags.
const CMPS: [CmpOp; 6] = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];

/// The code of a special kernel's `op` in an item's flags, and of its
/// comparison (0 for the product kernel's ops, whose flag is bit 0).
fn op_code(op: MoveOp) -> (u64, u64) {
    match op {
        MoveOp::Store | MoveOp::Add => (0, 0),
        MoveOp::Extremum(Extremum::Max) => (2, 0),
        MoveOp::Extremum(Extremum::Min) => (3, 0),
        MoveOp::Select(c) => (4, CMPS.iter().position(|&x| x == c).expect("in CMPS") as u64),
    }
}

/// Whether the move kernels can run `m`: at most [`MAX_DIMS`] dimensions of
/// extent above 1 and the sources its kernel takes.
pub fn check(m: &Move) -> Result<(), String> {
    let dims = m.ext.iter().filter(|&&e| e != 1).count();
    let max_srcs = MoveKernel::of(m.op).srcs();
    if dims > MAX_DIMS || m.srcs.len() > max_srcs {
        return Err(format!(
            "a tile move over {dims} dimensions and {} source{} (the move kernels take at most {MAX_DIMS} and {max_srcs})",
            m.srcs.len(),
            if m.srcs.len() == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

/// Appends the item of move `m` to `items` (laid out for its kernel,
/// [`MoveKernel::of`]), whose blocks start at block `first_block` of its
/// launch; `addr` gives the address of a location's element. The move's
/// blocks: one per [`CHUNK`] points (none for an empty move, which adds no item).
pub fn encode(m: &Move, addr: &dyn Fn(&Loc) -> u64, first_block: usize, items: &mut Vec<u64>) -> Result<usize, String> {
    let kind = MoveKernel::of(m.op);
    let (max_srcs, header) = (kind.srcs(), kind.header());
    let points = m.points();
    if points == 0 {
        return Ok(0);
    }
    check(m)?;
    let keep: Vec<usize> = (0..m.ext.len()).filter(|&d| m.ext[d] != 1).collect();
    let code = |j: usize| -> u64 {
        m.srcs
            .get(j)
            .and_then(|s| s.func)
            .map_or(0, |(f, _)| 1 + Func::ALL.iter().position(|&g| g == f).expect("in ALL") as u64)
    };
    let (op, cmp) = op_code(m.op);
    let base = u64::from(m.op == MoveOp::Add) | (m.srcs.len() as u64) << 1 | op << 48 | cmp << 52;
    let flags = (0..m.srcs.len()).fold(base, |f, j| f | code(j) << (8 + 8 * j));
    // The product kernel reads a source's sign inside its function only (the
    // planner folds the others into alpha).
    if kind == MoveKernel::Product && m.srcs.iter().any(|s| s.func.is_none() && s.sign != 1.0) {
        return Err("internal: a product move with a sign outside a function".into());
    }
    let sign = |j: usize| m.srcs.get(j).map_or(1.0, |s| s.func.map_or(s.sign, |(_, sign)| sign)).to_bits();
    let src = |j: usize| m.srcs.get(j).map_or(0, |s| addr(&s.loc));
    let at = items.len();
    items.resize(at + kind.item_words(), 0);
    let w = &mut items[at..];
    w[0] = addr(&m.dst);
    for j in 0..max_srcs {
        w[1 + j] = src(j);
        w[kind.w_signs() + j] = sign(j);
    }
    w[kind.w_first()..kind.w_signs()].copy_from_slice(&[
        points as u64,
        first_block as u64,
        keep.len() as u64,
        m.alpha.to_bits(),
        flags,
    ]);
    for (j, &d) in keep.iter().enumerate() {
        w[header + j] = m.ext[d] as u64;
        w[header + MAX_DIMS + j] = m.sdst[d] as i64 as u64;
        for (s, src) in m.srcs.iter().enumerate() {
            w[header + (2 + s) * MAX_DIMS + j] = src.strides[d] as i64 as u64;
        }
    }
    Ok(points.div_ceil(CHUNK))
}

/// One launch of a move kernel: its items from word `items` of the items, its
/// block table (the item of every block, numbered from the launch's first)
/// from word `blocks` of the tables, `count` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    pub kernel: MoveKernel,
    pub items: usize,
    pub blocks: usize,
    pub count: usize,
}

/// Appends the items of `moves` to `items` and their block tables to
/// `blocks`, those of each kernel together; the launches. Moves of one phase
/// write disjoint elements, so the kernels may run in any order.
pub fn encode_phase(
    moves: &[Move],
    addr: &dyn Fn(&Loc) -> u64,
    items: &mut Vec<u64>,
    blocks: &mut Vec<u64>,
) -> Result<Vec<Launch>, String> {
    let mut launches = Vec::new();
    for kernel in MoveKernel::ALL {
        let (at, table) = (items.len(), blocks.len());
        for m in moves.iter().filter(|m| MoveKernel::of(m.op) == kernel) {
            let item = ((items.len() - at) / kernel.item_words()) as u64;
            let n = encode(m, addr, blocks.len() - table, items)?;
            blocks.resize(blocks.len() + n, item);
        }
        launches.push(Launch { kernel, items: at, blocks: table, count: blocks.len() - table });
    }
    Ok(launches)
}

impl<'ctx> Gen<'_, 'ctx> {
    /// `if cond { body }`.
    fn when(
        &mut self,
        cond: IntValue<'ctx>,
        body: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let f = self.func.expect("in a function");
        let then = self.ctx.append_basic_block(f, "then");
        let join = self.ctx.append_basic_block(f, "join");
        self.b.build_conditional_branch(cond, then, join)?;
        self.b.position_at_end(then);
        body(self)?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        Ok(())
    }

    /// `*p = max(*p, v)` (or `min`) atomically; a NaN `v` changes nothing (as
    /// `maxnum`). The order of f64 values is the signed order of their bits
    /// where `v >= +0` and the reversed unsigned order where `v` is negative, so
    /// `max` is an integer `atom.max.s64` of the bits for the one and
    /// `atom.min.u64` for the other (`min`: `atom.min.s64`, `atom.max.u64`);
    /// either keeps a larger (smaller) value already there, of either sign.
    fn atomic_extremum(&mut self, p: PointerValue<'ctx>, v: FloatValue<'ctx>, e: Extremum) -> Result<(), CodegenError> {
        let i64t = self.ctx.i64_type();
        let bits = self.b.build_bit_cast(v, i64t, "bits")?.into_int_value();
        let pi = self.b.build_pointer_cast(p, i64t.ptr_type(p.get_type().get_address_space()), "pi")?;
        let num = self.b.build_float_compare(FloatPredicate::ORD, v, v, "num")?;
        let neg = self.b.build_int_compare(IntPredicate::SLT, bits, self.i64c(0), "neg")?;
        let (on_pos, on_neg) = match e {
            Extremum::Max => (AtomicRMWBinOp::Max, AtomicRMWBinOp::UMin),
            Extremum::Min => (AtomicRMWBinOp::Min, AtomicRMWBinOp::UMax),
        };
        for (op, sign) in [(on_pos, self.b.build_not(neg, "pos")?), (on_neg, neg)] {
            let go = self.b.build_and(num, sign, "go")?;
            self.when(go, &mut |g| {
                g.b.build_atomicrmw(op, pi, bits, AtomicOrdering::Monotonic)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Kernel `kind`: `void NAME(i64* items, i64* blocks)` on the device, `void
    /// NAME(i64 block, i64 thread, i64* items, i64* blocks)` on the host.
    fn tile_moves_kernel(&mut self, kind: MoveKernel) -> Result<(), CodegenError> {
        let max_srcs = kind.srcs();
        let (header, w_first, w_signs) = (kind.header(), kind.w_first(), kind.w_signs());
        let special = kind == MoveKernel::Special;
        let (i64t, f64t) = (self.ctx.i64_type(), self.ctx.f64_type());
        let items_ty = i64t.ptr_type(self.addr_space());
        let mut params: Vec<inkwell::types::BasicMetadataTypeEnum> = Vec::new();
        if self.mode == Mode::Host {
            params.extend([inkwell::types::BasicMetadataTypeEnum::from(i64t); 2]);
        }
        params.extend([inkwell::types::BasicMetadataTypeEnum::from(items_ty); 2]);
        let f = self.module.add_function(kind.name(), self.ctx.void_type().fn_type(&params, false), None);
        self.func = Some(f);
        let entry = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(entry);
        let param = |j: u32| f.get_nth_param(j).expect("declared");
        let (block, thread, items, table) = match self.mode {
            Mode::Host => (
                param(0).into_int_value(),
                param(1).into_int_value(),
                param(2).into_pointer_value(),
                param(3).into_pointer_value(),
            ),
            Mode::Device => (
                self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.x")?,
                self.sreg("llvm.nvvm.read.ptx.sreg.tid.x")?,
                param(0).into_pointer_value(),
                param(1).into_pointer_value(),
            ),
        };
        // The block's item, from the launch's block table.
        // SAFETY: the table has an entry per block of the launch.
        let entry_ptr = unsafe { self.b.build_in_bounds_gep(table, &[block], "bp")? };
        let item = self.b.build_load(entry_ptr, "item")?.into_int_value();
        let base = self.b.build_int_mul(item, self.i64c(kind.item_words() as u64), "base")?;
        let word = |g: &Self, j: IntValue<'ctx>| -> Result<IntValue<'ctx>, CodegenError> {
            let at = g.b.build_int_add(base, j, "w")?;
            // SAFETY: the item has `kind.item_words()` words.
            let p = unsafe { g.b.build_in_bounds_gep(items, &[at], "wp")? };
            Ok(g.b.build_load(p, "word")?.into_int_value())
        };
        let at = |g: &Self, j: u64| word(g, g.i64c(j));
        let ptr_of = |g: &Self, w: IntValue<'ctx>| -> Result<PointerValue<'ctx>, CodegenError> {
            Ok(g.b.build_int_to_ptr(w, f64t.ptr_type(g.addr_space()), "p")?)
        };
        let dst = ptr_of(self, at(self, 0)?)?;
        let mut srcs = Vec::new();
        let mut signs = Vec::new();
        for j in 0..max_srcs {
            srcs.push(ptr_of(self, at(self, (1 + j) as u64)?)?);
            signs.push(self.b.build_bit_cast(at(self, (w_signs + j) as u64)?, f64t, "sign")?.into_float_value());
        }
        let [points, first_block, nd, alpha, flags] = [0, 1, 2, 3, 4].map(|j| at(self, (w_first + j) as u64));
        let (points, first_block, nd, flags) = (points?, first_block?, nd?, flags?);
        // The block's piece of the move: CHUNK points from `first`, fewer in the last.
        let piece = self.b.build_int_sub(block, first_block, "piece")?;
        let first = self.b.build_int_mul(piece, self.i64c(CHUNK as u64), "first")?;
        let left = self.b.build_int_sub(points, first, "after")?;
        let full = self.b.build_int_compare(IntPredicate::UGT, left, self.i64c(CHUNK as u64), "full")?;
        let count = self.b.build_select(full, self.i64c(CHUNK as u64), left, "count")?.into_int_value();
        let alpha = self.b.build_bit_cast(alpha?, f64t, "alpha")?.into_float_value();
        let bits = |g: &Self, shift: u64, mask: u64| -> Result<IntValue<'ctx>, CodegenError> {
            let s = g.b.build_right_shift(flags, g.i64c(shift), false, "sh")?;
            Ok(g.b.build_and(s, g.i64c(mask), "bits")?)
        };
        let add = self.b.build_int_compare(IntPredicate::NE, bits(self, 0, 1)?, self.i64c(0), "add")?;
        let nsrc = bits(self, 1, 7)?;
        let codes: Vec<IntValue<'ctx>> =
            (0..max_srcs as u64).map(|j| bits(self, 8 + 8 * j, 255)).collect::<Result<_, _>>()?;
        // The special kernel's op and comparison.
        let (op, cmp) = (bits(self, 48, 15)?, bits(self, 52, 15)?);
        // Points thread `thread` takes: ⌈(count − thread) / THREADS⌉, or none.
        let some = self.b.build_int_compare(IntPredicate::ULT, thread, count, "some")?;
        let left = self.b.build_int_sub(count, thread, "left")?;
        let left = self.b.build_select(some, left, self.i64c(0), "left")?.into_int_value();
        let trips = self.b.build_int_unsigned_div(
            self.b.build_int_add(left, self.i64c(THREADS - 1), "up")?,
            self.i64c(THREADS),
            "trips",
        )?;
        let rem = self.b.build_alloca(i64t, "rem")?;
        let offs: Vec<PointerValue<'ctx>> =
            (0..=max_srcs).map(|j| self.b.build_alloca(i64t, &format!("off{j}"))).collect::<Result<_, _>>()?;
        let val = self.b.build_alloca(f64t, "val")?;
        let xs: Vec<PointerValue<'ctx>> =
            (0..max_srcs).map(|j| self.b.build_alloca(f64t, &format!("x{j}"))).collect::<Result<_, _>>()?;
        self.for_range(self.i64c(0), trips, &mut |g, j| {
            let e = g.b.build_int_add(thread, g.b.build_int_mul(j, g.i64c(THREADS), "jt")?, "e")?;
            g.b.build_store(rem, g.b.build_int_add(first, e, "lin")?)?;
            for &o in &offs {
                g.b.build_store(o, g.i64c(0))?;
            }
            g.for_range(g.i64c(0), nd, &mut |g, r| {
                // Dimension nd − 1 − r: the last varies fastest.
                let d = g.b.build_int_sub(g.b.build_int_sub(nd, r, "d1")?, g.i64c(1), "d")?;
                let ext = word(g, g.b.build_int_add(d, g.i64c(header as u64), "we")?)?;
                let lin = g.b.build_load(rem, "lin")?.into_int_value();
                let q = g.b.build_int_unsigned_div(lin, ext, "q")?;
                let i = g.b.build_int_sub(lin, g.b.build_int_mul(q, ext, "qe")?, "i")?;
                g.b.build_store(rem, q)?;
                // The destination's offset and those of the sources the move has
                // (the same for the whole block: no divergence).
                for (k, &o) in offs.iter().enumerate() {
                    let mut step = |g: &mut Self| {
                        let w = g.b.build_int_add(d, g.i64c((header + (k + 1) * MAX_DIMS) as u64), "ws")?;
                        let s = word(g, w)?;
                        let cur = g.b.build_load(o, "o")?.into_int_value();
                        g.b.build_store(o, g.b.build_int_add(cur, g.b.build_int_mul(i, s, "is")?, "o2")?)?;
                        Ok(())
                    };
                    if k == 0 || !special {
                        step(g)?;
                    } else {
                        let has = g.b.build_int_compare(IntPredicate::UGE, nsrc, g.i64c(k as u64), "hasrc")?;
                        g.when(has, &mut step)?;
                    }
                }
                Ok(())
            })?;
            // Each source's value, `sign · x` or `func(sign · x)`; the product's
            // factors multiplied into `val` (which starts at alpha).
            g.b.build_store(val, alpha)?;
            for j in 0..max_srcs {
                let has = g.b.build_int_compare(IntPredicate::UGT, nsrc, g.i64c(j as u64), "has")?;
                g.when(has, &mut |g| {
                    let o = g.b.build_load(offs[j + 1], "o")?.into_int_value();
                    // SAFETY: the move's points lie inside the source by construction.
                    let p = unsafe { g.b.build_gep(srcs[j], &[o], "sp")? };
                    let raw = g.b.build_load(p, "x")?.into_float_value();
                    // The special kernel's sources carry their signs; the
                    // product kernel's only inside a function.
                    let x = if special { g.b.build_float_mul(signs[j], raw, "sx")? } else { raw };
                    g.b.build_store(xs[j], x)?;
                    for (n, &func) in Func::ALL.iter().enumerate() {
                        let is = g.b.build_int_compare(IntPredicate::EQ, codes[j], g.i64c(n as u64 + 1), "is")?;
                        g.when(is, &mut |g| {
                            let v = g.b.build_load(xs[j], "x")?.into_float_value();
                            let v = if special { v } else { g.b.build_float_mul(signs[j], v, "sx")? };
                            let r = g.apply(func, v)?;
                            g.b.build_store(xs[j], r)?;
                            Ok(())
                        })?;
                    }
                    let v: FloatValue = g.b.build_load(val, "v")?.into_float_value();
                    let xv = g.b.build_load(xs[j], "x")?.into_float_value();
                    g.b.build_store(val, g.b.build_float_mul(v, xv, "vx")?)?;
                    Ok(())
                })?;
            }
            let o = g.b.build_load(offs[0], "od")?.into_int_value();
            // SAFETY: as for the sources.
            let p = unsafe { g.b.build_gep(dst, &[o], "dp")? };
            if !special {
                // Products, sums and copies: stored, or added atomically.
                let v = g.b.build_load(val, "v")?.into_float_value();
                let f = g.func.expect("in the kernel");
                let (atomic, plain, done) = (
                    g.ctx.append_basic_block(f, "atomic"),
                    g.ctx.append_basic_block(f, "plain"),
                    g.ctx.append_basic_block(f, "stored"),
                );
                g.b.build_conditional_branch(add, atomic, plain)?;
                g.b.position_at_end(atomic);
                g.atomic_fadd(p, v);
                g.b.build_unconditional_branch(done)?;
                g.b.position_at_end(plain);
                g.b.build_store(p, v)?;
                g.b.build_unconditional_branch(done)?;
                g.b.position_at_end(done);
                return Ok(());
            }
            let is_op = |g: &Self, code: u64| g.b.build_int_compare(IntPredicate::EQ, op, g.i64c(code), "isop");
            // `where`: the value is the third or fourth source's.
            let select = is_op(g, 4)?;
            g.when(select, &mut |g| {
                let mut v = Vec::new();
                for &x in &xs {
                    v.push(g.b.build_load(x, "x")?.into_float_value());
                }
                let (a, b, x, y) = (v[0], v[1], v[2], v[3]);
                for (n, &c) in CMPS.iter().enumerate() {
                    let pred = crate::codegen::float_predicate(c);
                    let is = g.b.build_int_compare(IntPredicate::EQ, cmp, g.i64c(n as u64), "iscmp")?;
                    let holds = g.b.build_float_compare(pred, a, b, "holds")?;
                    g.when(is, &mut |g| {
                        g.b.build_store(val, g.b.build_select(holds, x, y, "sel")?)?;
                        Ok(())
                    })?;
                }
                Ok(())
            })?;
            let v = g.b.build_load(val, "v")?.into_float_value();
            let (max, min) = (is_op(g, 2)?, is_op(g, 3)?);
            g.when(select, &mut |g| {
                g.b.build_store(p, v)?;
                Ok(())
            })?;
            g.when(max, &mut |g| g.atomic_extremum(p, v, Extremum::Max))?;
            g.when(min, &mut |g| g.atomic_extremum(p, v, Extremum::Min))?;
            Ok(())
        })?;
        self.b.build_return(None)?;
        if self.mode == Mode::Device {
            self.annotate(f, "kernel", 1)?;
        }
        self.func = None;
        Ok(())
    }
}

fn module<'ctx>(ctx: &'ctx Context, mode: Mode, tm: &TargetMachine) -> Result<Module<'ctx>, CodegenError> {
    let module = super::gen::new_module(ctx, "tcc_tile_moves", tm);
    let mut g = Gen { ctx, module: &module, b: ctx.create_builder(), mode, func: None, half: false };
    for kind in MoveKernel::ALL {
        g.tile_moves_kernel(kind)?;
    }
    drop(g);
    super::gen::verify_and_optimize(&module, tm, "the tile-move kernels")?;
    Ok(module)
}

/// The kernel's PTX (what `tcc build --target cuda --tiled` writes).
pub fn ptx() -> Result<String, CodegenError> {
    let ctx = Context::create();
    let tm = super::gen::nvptx_machine()?;
    let m = module(&ctx, Mode::Device, &tm)?;
    super::gen::ptx_text(&m, &tm)
}

type HostKernel = unsafe extern "C" fn(i64, i64, *const u64, *const u64);

/// A [`TileMachine`] on the host running the generated kernel block by block,
/// GEMMs as plain loops. For tests.
pub struct EmulatedMachine {
    _engine: ExecutionEngine<'static>,
    /// The kernels of [`MoveKernel::ALL`].
    kernels: Vec<HostKernel>,
    mem: HostBuffers,
}

impl EmulatedMachine {
    pub fn new() -> Result<EmulatedMachine, CodegenError> {
        // The engine borrows its context for as long as the machine lives.
        let ctx: &'static Context = Box::leak(Box::new(Context::create()));
        let tm = super::emulate::host_machine()?;
        let m = module(ctx, Mode::Host, &tm)?;
        let engine = m.create_jit_execution_engine(OptimizationLevel::Default).map_err(|e| err(e.to_string()))?;
        let mut kernels = Vec::new();
        for kind in MoveKernel::ALL {
            let addr = engine.get_function_address(kind.name()).map_err(|e| err(format!("JIT: {e:?}")))?;
            // SAFETY: the function was generated with this signature.
            kernels.push(unsafe { std::mem::transmute::<usize, HostKernel>(addr) });
        }
        Ok(EmulatedMachine { _engine: engine, kernels, mem: HostBuffers::default() })
    }
}

impl HostRounds for EmulatedMachine {
    fn mem(&mut self) -> &mut HostBuffers {
        &mut self.mem
    }

    fn moves(&mut self, moves: &[Move]) -> Result<(), String> {
        let addr = |l: &Loc| -> u64 {
            let base = match l.buf {
                Buf::Scratch => self.mem.scratch.as_ptr(),
                Buf::Tensor(t) => self.mem.bufs.get(&t).map_or(std::ptr::null(), |b| b.as_ptr()),
            };
            base.wrapping_add(l.offset) as u64
        };
        let (mut items, mut blocks) = (Vec::new(), Vec::new());
        let launches = encode_phase(moves, &addr, &mut items, &mut blocks)?;
        for l in launches {
            let (its, table) = (items[l.items..].as_ptr(), blocks[l.blocks..].as_ptr());
            debug_assert!(blocks[l.blocks..l.blocks + l.count]
                .iter()
                .all(|&i| l.items + (i as usize + 1) * l.kernel.item_words() <= items.len()));
            for block in 0..l.count {
                for t in 0..THREADS {
                    // SAFETY: every item's addresses point into live buffers of this
                    // machine, which nothing else touches meanwhile; the table names
                    // items of the launch.
                    unsafe { self.kernels[l.kernel.index()](block as i64, t as i64, its, table) };
                }
            }
        }
        Ok(())
    }
}
