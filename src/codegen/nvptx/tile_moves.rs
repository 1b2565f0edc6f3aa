//! The kernel of tiled programs on the GPU ([`crate::tiled::device`]): a batch of
//! [`Move`]s described at run time, since tiles read through symmetry have
//! strides that differ from tile to tile.
//!
//! Each move is cut into items of at most [`CHUNK`] points, one block of
//! [`THREADS`] threads per item; an item is [`ITEM_WORDS`] 64-bit words (see
//! [`encode`]). A thread takes the item's points `first + t`, `first + t +
//! THREADS`, …, splits each into its coordinates along the box (last dimension
//! fastest) and reads and writes through the strides. Element-wise functions
//! are applied in f64 with the generated `exp`/`log`/`tanh` of [`super::math`].
//! Adds are atomic (`atom.add.f64`).
//!
//! The same kernel is generated for the host and run block by block
//! ([`EmulatedMachine`]), which the tests hold to the interpreter.
//! [`crate::tiled::device::TileMachine`] is implemented by the GPU in
//! `codegen::cuda_tiled`.

use super::gen::{Gen, Mode};
use super::{err, CodegenError};
use crate::sema::hir::Func;
use crate::tiled::device::{Buf, HostBuffers, HostRounds, Loc, Move};
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use inkwell::targets::TargetMachine;
use inkwell::values::{FloatValue, IntValue, PointerValue};
use inkwell::{IntPredicate, OptimizationLevel};

/// The kernel's name in the PTX.
pub const KERNEL: &str = "tcc_tile_moves";
/// Threads per block.
pub const THREADS: u64 = 256;
/// Points of a move per item (block).
pub const CHUNK: usize = 4096;
/// Dimensions of a move's box after dropping those of extent 1.
pub const MAX_DIMS: usize = 10;
/// Words of one item: destination, two sources, first point, point count,
/// dimensions, alpha (bits), flags (bit 0: add; bits 1–2: sources; bits 8–15
/// and 16–23: the sources' functions, 1 + position in [`Func::ALL`]), the
/// sources' signs (bits), then extents, destination strides and the two
/// sources' strides, [`MAX_DIMS`] each.
pub const ITEM_WORDS: usize = 10 + 4 * MAX_DIMS;

/// Appends the items of move `m` to `items`; `addr` gives the address of a
/// location's element.
pub fn encode(m: &Move, addr: &dyn Fn(&Loc) -> u64, items: &mut Vec<u64>) -> Result<(), String> {
    let points = m.points();
    if points == 0 {
        return Ok(());
    }
    let keep: Vec<usize> = (0..m.ext.len()).filter(|&d| m.ext[d] != 1).collect();
    if keep.len() > MAX_DIMS || m.srcs.len() > 2 {
        return Err(format!(
            "a tile move over {} dimensions and {} sources (at most {MAX_DIMS} and 2)",
            keep.len(),
            m.srcs.len()
        ));
    }
    let code = |j: usize| -> u64 {
        m.srcs
            .get(j)
            .and_then(|s| s.func)
            .map_or(0, |(f, _)| 1 + Func::ALL.iter().position(|&g| g == f).expect("in ALL") as u64)
    };
    let flags = m.add as u64 | (m.srcs.len() as u64) << 1 | code(0) << 8 | code(1) << 16;
    let sign = |j: usize| m.srcs.get(j).and_then(|s| s.func).map_or(1.0, |(_, s)| s).to_bits();
    let src = |j: usize| m.srcs.get(j).map_or(0, |s| addr(&s.loc));
    let mut first = 0;
    while first < points {
        let count = CHUNK.min(points - first);
        let mut w = vec![0u64; ITEM_WORDS];
        w[..10].copy_from_slice(&[
            addr(&m.dst),
            src(0),
            src(1),
            first as u64,
            count as u64,
            keep.len() as u64,
            m.alpha.to_bits(),
            flags,
            sign(0),
            sign(1),
        ]);
        for (j, &d) in keep.iter().enumerate() {
            w[10 + j] = m.ext[d] as u64;
            w[10 + MAX_DIMS + j] = m.sdst[d] as i64 as u64;
            for (s, src) in m.srcs.iter().enumerate() {
                w[10 + (2 + s) * MAX_DIMS + j] = src.strides[d] as i64 as u64;
            }
        }
        items.extend_from_slice(&w);
        first += count;
    }
    Ok(())
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

    /// The kernel: `void tcc_tile_moves(i64* items)` on the device, `void
    /// tcc_tile_moves(i64 block, i64 thread, i64* items)` on the host.
    fn tile_moves_kernel(&mut self) -> Result<(), CodegenError> {
        let (i64t, f64t) = (self.ctx.i64_type(), self.ctx.f64_type());
        let items_ty = i64t.ptr_type(self.addr_space());
        let mut params: Vec<inkwell::types::BasicMetadataTypeEnum> = Vec::new();
        if self.mode == Mode::Host {
            params.extend([inkwell::types::BasicMetadataTypeEnum::from(i64t); 2]);
        }
        params.push(items_ty.into());
        let f = self.module.add_function(KERNEL, self.ctx.void_type().fn_type(&params, false), None);
        self.func = Some(f);
        let entry = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(entry);
        let param = |j: u32| f.get_nth_param(j).expect("declared");
        let (block, thread, items) = match self.mode {
            Mode::Host => (param(0).into_int_value(), param(1).into_int_value(), param(2).into_pointer_value()),
            Mode::Device => (
                self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.x")?,
                self.sreg("llvm.nvvm.read.ptx.sreg.tid.x")?,
                param(0).into_pointer_value(),
            ),
        };
        let base = self.b.build_int_mul(block, self.i64c(ITEM_WORDS as u64), "item")?;
        let word = |g: &Self, j: IntValue<'ctx>| -> Result<IntValue<'ctx>, CodegenError> {
            let at = g.b.build_int_add(base, j, "w")?;
            // SAFETY: the item has ITEM_WORDS words.
            let p = unsafe { g.b.build_in_bounds_gep(items, &[at], "wp")? };
            Ok(g.b.build_load(p, "word")?.into_int_value())
        };
        let at = |g: &Self, j: u64| word(g, g.i64c(j));
        let ptr_of = |g: &Self, w: IntValue<'ctx>| -> Result<PointerValue<'ctx>, CodegenError> {
            Ok(g.b.build_int_to_ptr(w, f64t.ptr_type(g.addr_space()), "p")?)
        };
        let dst = ptr_of(self, at(self, 0)?)?;
        let srcs = [ptr_of(self, at(self, 1)?)?, ptr_of(self, at(self, 2)?)?];
        let (first, count, nd) = (at(self, 3)?, at(self, 4)?, at(self, 5)?);
        let alpha = self.b.build_bit_cast(at(self, 6)?, f64t, "alpha")?.into_float_value();
        let flags = at(self, 7)?;
        let signs = [
            self.b.build_bit_cast(at(self, 8)?, f64t, "s0")?.into_float_value(),
            self.b.build_bit_cast(at(self, 9)?, f64t, "s1")?.into_float_value(),
        ];
        let bits = |g: &Self, shift: u64, mask: u64| -> Result<IntValue<'ctx>, CodegenError> {
            let s = g.b.build_right_shift(flags, g.i64c(shift), false, "sh")?;
            Ok(g.b.build_and(s, g.i64c(mask), "bits")?)
        };
        let add = self.b.build_int_compare(IntPredicate::NE, bits(self, 0, 1)?, self.i64c(0), "add")?;
        let nsrc = bits(self, 1, 3)?;
        let codes = [bits(self, 8, 255)?, bits(self, 16, 255)?];
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
            (0..3).map(|j| self.b.build_alloca(i64t, &format!("off{j}"))).collect::<Result<_, _>>()?;
        let val = self.b.build_alloca(f64t, "val")?;
        let x = self.b.build_alloca(f64t, "x")?;
        self.for_range(self.i64c(0), trips, &mut |g, j| {
            let e = g.b.build_int_add(thread, g.b.build_int_mul(j, g.i64c(THREADS), "jt")?, "e")?;
            g.b.build_store(rem, g.b.build_int_add(first, e, "lin")?)?;
            for &o in &offs {
                g.b.build_store(o, g.i64c(0))?;
            }
            g.for_range(g.i64c(0), nd, &mut |g, r| {
                // Dimension nd − 1 − r: the last varies fastest.
                let d = g.b.build_int_sub(g.b.build_int_sub(nd, r, "d1")?, g.i64c(1), "d")?;
                let ext = word(g, g.b.build_int_add(d, g.i64c(10), "we")?)?;
                let lin = g.b.build_load(rem, "lin")?.into_int_value();
                let q = g.b.build_int_unsigned_div(lin, ext, "q")?;
                let i = g.b.build_int_sub(lin, g.b.build_int_mul(q, ext, "qe")?, "i")?;
                g.b.build_store(rem, q)?;
                for (k, &o) in offs.iter().enumerate() {
                    let w = g.b.build_int_add(d, g.i64c(10 + (k as u64 + 1) * MAX_DIMS as u64), "ws")?;
                    let s = word(g, w)?;
                    let cur = g.b.build_load(o, "o")?.into_int_value();
                    g.b.build_store(o, g.b.build_int_add(cur, g.b.build_int_mul(i, s, "is")?, "o2")?)?;
                }
                Ok(())
            })?;
            g.b.build_store(val, alpha)?;
            for j in 0..2 {
                let has = g.b.build_int_compare(IntPredicate::UGT, nsrc, g.i64c(j as u64), "has")?;
                g.when(has, &mut |g| {
                    let o = g.b.build_load(offs[j + 1], "o")?.into_int_value();
                    // SAFETY: the move's points lie inside the source by construction.
                    let p = unsafe { g.b.build_gep(srcs[j], &[o], "sp")? };
                    g.b.build_store(x, g.b.build_load(p, "x")?)?;
                    for (n, &func) in Func::ALL.iter().enumerate() {
                        let is = g.b.build_int_compare(IntPredicate::EQ, codes[j], g.i64c(n as u64 + 1), "is")?;
                        g.when(is, &mut |g| {
                            let v = g.b.build_load(x, "x")?.into_float_value();
                            let v = g.b.build_float_mul(signs[j], v, "sx")?;
                            let r = g.apply(func, v)?;
                            g.b.build_store(x, r)?;
                            Ok(())
                        })?;
                    }
                    let v: FloatValue = g.b.build_load(val, "v")?.into_float_value();
                    let xv = g.b.build_load(x, "x")?.into_float_value();
                    g.b.build_store(val, g.b.build_float_mul(v, xv, "vx")?)?;
                    Ok(())
                })?;
            }
            let o = g.b.build_load(offs[0], "od")?.into_int_value();
            // SAFETY: as for the sources.
            let p = unsafe { g.b.build_gep(dst, &[o], "dp")? };
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
    g.tile_moves_kernel()?;
    drop(g);
    super::gen::verify_and_optimize(&module, tm, "the tile-move kernel")?;
    Ok(module)
}

/// The kernel's PTX (what `tcc build --target cuda --tiled` writes).
pub fn ptx() -> Result<String, CodegenError> {
    let ctx = Context::create();
    let tm = super::gen::nvptx_machine()?;
    let m = module(&ctx, Mode::Device, &tm)?;
    super::gen::ptx_text(&m, &tm)
}

type HostKernel = unsafe extern "C" fn(i64, i64, *const u64);

/// A [`TileMachine`] on the host running the generated kernel block by block,
/// GEMMs as plain loops. For tests.
pub struct EmulatedMachine {
    _engine: ExecutionEngine<'static>,
    kernel: HostKernel,
    mem: HostBuffers,
}

impl EmulatedMachine {
    pub fn new() -> Result<EmulatedMachine, CodegenError> {
        // The engine borrows its context for as long as the machine lives.
        let ctx: &'static Context = Box::leak(Box::new(Context::create()));
        let tm = super::emulate::host_machine()?;
        let m = module(ctx, Mode::Host, &tm)?;
        let engine = m.create_jit_execution_engine(OptimizationLevel::Default).map_err(|e| err(e.to_string()))?;
        let addr = engine.get_function_address(KERNEL).map_err(|e| err(format!("JIT: {e:?}")))?;
        // SAFETY: the function was generated with this signature.
        let kernel: HostKernel = unsafe { std::mem::transmute::<usize, HostKernel>(addr) };
        Ok(EmulatedMachine { _engine: engine, kernel, mem: HostBuffers::default() })
    }
}

impl HostRounds for EmulatedMachine {
    fn mem(&mut self) -> &mut HostBuffers {
        &mut self.mem
    }

    fn moves(&mut self, moves: &[Move]) -> Result<(), String> {
        let mut items = Vec::new();
        let addr = |l: &Loc| -> u64 {
            let base = match l.buf {
                Buf::Scratch => self.mem.scratch.as_ptr(),
                Buf::Tensor(t) => self.mem.bufs.get(&t).map_or(std::ptr::null(), |b| b.as_ptr()),
            };
            base.wrapping_add(l.offset) as u64
        };
        for m in moves {
            encode(m, &addr, &mut items)?;
        }
        for block in 0..items.len() / ITEM_WORDS {
            for t in 0..THREADS {
                // SAFETY: every item's addresses point into live buffers of this
                // machine, which nothing else touches meanwhile.
                unsafe { (self.kernel)(block as i64, t as i64, items.as_ptr()) };
            }
        }
        Ok(())
    }
}
