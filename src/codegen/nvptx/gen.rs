//! Kernels → LLVM IR (NVPTX, or the host CPU for [`super::emulate`]) → PTX.

use super::*;
use crate::sema::hir::Hir;
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, FloatType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue,
};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate, OptimizationLevel};

/// The host emulation's f16 conversions ([`crate::half`]; MCJIT's code for
/// LLVM's `half` would call compiler-rt functions it cannot resolve).
pub(super) const HOST_F16_TO_F32: &str = "tcc_emu_f16_to_f32";
pub(super) const HOST_F32_TO_F16: &str = "tcc_emu_f32_to_f16";

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Mode {
    /// NVPTX kernel: thread id from the special registers, global pointers.
    Device,
    /// Host function `void k(i64 tid, T*...)` (tiled kernels: `void k(i64 bx,
    /// i64 by, i64 bz, T*...)`, one whole block), for [`super::emulate`].
    Host,
}

pub(super) struct Gen<'a, 'ctx> {
    pub(super) ctx: &'ctx Context,
    pub(super) module: &'a Module<'ctx>,
    pub(super) b: Builder<'ctx>,
    pub(super) mode: Mode,
    pub(super) func: Option<FunctionValue<'ctx>>,
    /// The kernels are a 16-bit program's (one of them loads or stores 16-bit
    /// elements): element-wise functions of f32 values run in f32 ([`Gen::apply`]).
    pub(super) half: bool,
}

impl<'a, 'ctx> Gen<'a, 'ctx> {
    /// The arithmetic type of elements stored as `e` (f32 for 16-bit storage).
    pub(super) fn ft(&self, e: Elem) -> FloatType<'ctx> {
        match e {
            Elem::F64 => self.ctx.f64_type(),
            Elem::F32 | Elem::Bf16 | Elem::F16 => self.ctx.f32_type(),
        }
    }

    /// A function the host emulation provides ([`super::emulate`] maps it).
    fn host_fn(&self, name: &str, ty: inkwell::types::FunctionType<'ctx>) -> FunctionValue<'ctx> {
        self.module.get_function(name).unwrap_or_else(|| self.module.add_function(name, ty, None))
    }

    /// A pointer to elements stored as `e` (`i16` bits for 16-bit storage).
    pub(super) fn ptr_ty(&self, e: Elem) -> inkwell::types::PointerType<'ctx> {
        self.storage_ty(e).ptr_type(self.addr_space())
    }

    /// The element at `p`, stored as `e`, as a value of type `lt` ([`Gen::decode`]).
    pub(super) fn load_as(
        &self,
        p: PointerValue<'ctx>,
        e: Elem,
        lt: FloatType<'ctx>,
    ) -> Result<FloatValue<'ctx>, CodegenError> {
        let raw = self.b.build_load(p, "x")?;
        self.decode(raw, e, lt)
    }

    /// The LLVM type elements stored as `e` have in memory (`i16` bits for
    /// 16-bit storage).
    pub(super) fn storage_ty(&self, e: Elem) -> inkwell::types::BasicTypeEnum<'ctx> {
        if e.is_half() {
            self.ctx.i16_type().into()
        } else {
            self.ft(e).into()
        }
    }

    /// A value as stored as `e` ([`Gen::storage_ty`]) to type `lt`: bf16 bits
    /// shifted into the top of an f32, f16 through `cvt.f32.f16` (both exact;
    /// f16 on the host through [`crate::half`]).
    pub(super) fn decode(
        &self,
        raw: BasicValueEnum<'ctx>,
        e: Elem,
        lt: FloatType<'ctx>,
    ) -> Result<FloatValue<'ctx>, CodegenError> {
        let v = match e {
            Elem::F32 | Elem::F64 => raw.into_float_value(),
            Elem::Bf16 => {
                let w = self.b.build_int_z_extend(raw.into_int_value(), self.ctx.i32_type(), "hw")?;
                let u = self.b.build_left_shift(w, self.ctx.i32_type().const_int(16, false), "hu")?;
                self.b.build_bit_cast(u, self.ctx.f32_type(), "bf")?.into_float_value()
            }
            Elem::F16 if self.mode == Mode::Host => {
                let f =
                    self.host_fn(HOST_F16_TO_F32, self.ctx.f32_type().fn_type(&[self.ctx.i16_type().into()], false));
                self.call(f, &[raw.into_int_value().into()])?.into_float_value()
            }
            Elem::F16 => {
                let x = self.b.build_bit_cast(raw, self.ctx.f16_type(), "hf")?.into_float_value();
                self.b.build_float_ext(x, self.ctx.f32_type(), "f")?
            }
        };
        Ok(if v.get_type() != lt { self.b.build_float_cast(v, lt, "cvt")? } else { v })
    }

    /// Stores `v` at `p` as `e` ([`Gen::encode`]).
    pub(super) fn store_as(&self, p: PointerValue<'ctx>, v: FloatValue<'ctx>, e: Elem) -> Result<(), CodegenError> {
        self.b.build_store(p, self.encode(v, e)?)?;
        Ok(())
    }

    /// `v` as stored as `e` ([`Gen::storage_ty`]): a 16-bit type rounded to
    /// nearest even from f32 (`cvt.rn.bf16.f32`, `cvt.rn.f16.f32` on the device;
    /// on the host the same rounding in integer arithmetic for bf16,
    /// [`crate::half`] for f16).
    pub(super) fn encode(&self, v: FloatValue<'ctx>, e: Elem) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let f32t = self.ctx.f32_type();
        let v = if e.is_half() && v.get_type() != f32t { self.b.build_float_cast(v, f32t, "f")? } else { v };
        let bits = match e {
            Elem::F32 | Elem::F64 => {
                let v = if v.get_type() != self.ft(e) { self.b.build_float_cast(v, self.ft(e), "cvt")? } else { v };
                return Ok(v.into());
            }
            Elem::F16 if self.mode == Mode::Host => {
                let f = self.host_fn(HOST_F32_TO_F16, self.ctx.i16_type().fn_type(&[f32t.into()], false));
                self.call(f, &[v.into()])?.into_int_value()
            }
            Elem::F16 => {
                let h = self.b.build_float_trunc(v, self.ctx.f16_type(), "h")?;
                self.b.build_bit_cast(h, self.ctx.i16_type(), "hb")?.into_int_value()
            }
            Elem::Bf16 if self.mode == Mode::Device => {
                let fty = self.ctx.i16_type().fn_type(&[f32t.into()], false);
                let asm = self.ctx.create_inline_asm(
                    fty,
                    "cvt.rn.bf16.f32 $0, $1;".into(),
                    "=h,f".into(),
                    false,
                    false,
                    None,
                    false,
                );
                let callee = inkwell::values::CallableValue::try_from(asm)
                    .map_err(|_| err("internal: inline asm is not callable".to_string()))?;
                self.b
                    .build_call(callee, &[v.into()], "bf")?
                    .try_as_basic_value()
                    .left()
                    .ok_or_else(|| err("internal: cvt returned nothing".to_string()))?
                    .into_int_value()
            }
            Elem::Bf16 => {
                // crate::half::f32_to_bf16: add half an ulp (plus one when the kept
                // half is odd) and keep the top 16 bits; NaN stays a quiet NaN.
                let i32t = self.ctx.i32_type();
                let u = self.b.build_bit_cast(v, i32t, "u")?.into_int_value();
                let hi = self.b.build_right_shift(u, i32t.const_int(16, false), false, "hi")?;
                let odd = self.b.build_and(hi, i32t.const_int(1, false), "odd")?;
                let r =
                    self.b.build_int_add(u, self.b.build_int_add(odd, i32t.const_int(0x7fff, false), "r")?, "ru")?;
                let rounded = self.b.build_right_shift(r, i32t.const_int(16, false), false, "rb")?;
                let quiet = self.b.build_or(hi, i32t.const_int(0x40, false), "q")?;
                let nan = self.b.build_float_compare(FloatPredicate::UNO, v, v, "nan")?;
                let b = self.b.build_select(nan, quiet, rounded, "b")?.into_int_value();
                self.b.build_int_truncate(b, self.ctx.i16_type(), "bf")?
            }
        };
        Ok(bits.into())
    }
    pub(super) fn i64c(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v, false)
    }
    pub(super) fn addr_space(&self) -> AddressSpace {
        match self.mode {
            Mode::Device => AddressSpace::from(1u16),
            Mode::Host => AddressSpace::default(),
        }
    }
    pub(super) fn intrinsic(
        &self,
        name: &str,
        tys: &[inkwell::types::BasicTypeEnum<'ctx>],
    ) -> Result<FunctionValue<'ctx>, CodegenError> {
        Intrinsic::find(name)
            .and_then(|i| i.get_declaration(self.module, tys))
            .ok_or_else(|| err(format!("LLVM intrinsic {name} not found")))
    }
    pub(super) fn call(
        &self,
        f: FunctionValue<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> Result<inkwell::values::BasicValueEnum<'ctx>, CodegenError> {
        Ok(self.b.build_call(f, args, "c")?.try_as_basic_value().left().expect("value"))
    }
    pub(super) fn fcall(&self, name: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let f = self.intrinsic(name, &[x.get_type().into()])?;
        Ok(self.call(f, &[x.into()])?.into_float_value())
    }

    /// `*p += v` atomically (relaxed): `atom.global.add` on the device.
    pub(super) fn atomic_fadd(&self, p: PointerValue<'ctx>, v: FloatValue<'ctx>) {
        use inkwell::values::AsValueRef;
        // SAFETY: a plain LLVM C API call on live values of this context
        // (inkwell's atomicrmw only takes integers).
        unsafe {
            llvm_sys::core::LLVMBuildAtomicRMW(
                self.b.as_mut_ptr(),
                llvm_sys::LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFAdd,
                p.as_value_ref(),
                v.as_value_ref(),
                llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic,
                0,
            );
        }
    }

    /// `for i in lo..hi { body(i) }` (skipped when `lo >= hi`).
    pub(super) fn for_range(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let f = self.func.expect("in a function");
        let pre = self.b.get_insert_block().expect("positioned");
        let head = self.ctx.append_basic_block(f, "loop");
        let exit = self.ctx.append_basic_block(f, "loop.exit");
        let any = self.b.build_int_compare(IntPredicate::ULT, lo, hi, "any")?;
        self.b.build_conditional_branch(any, head, exit)?;
        self.b.position_at_end(head);
        let phi = self.b.build_phi(self.ctx.i64_type(), "i")?;
        phi.add_incoming(&[(&lo, pre)]);
        let i = phi.as_basic_value().into_int_value();
        body(self, i)?;
        let next = self.b.build_int_add(i, self.i64c(1), "i.next")?;
        let latch = self.b.get_insert_block().expect("positioned");
        phi.add_incoming(&[(&next, latch)]);
        let cond = self.b.build_int_compare(IntPredicate::ULT, next, hi, "i.cond")?;
        self.b.build_conditional_branch(cond, head, exit)?;
        self.b.position_at_end(exit);
        Ok(())
    }

    /// An `nvvm.annotations` entry of `f` (`kernel`, `maxntidx`, ...).
    pub(super) fn annotate(&self, f: FunctionValue<'ctx>, key: &str, value: u64) -> Result<(), CodegenError> {
        let md = self.ctx.metadata_node(&[
            f.as_global_value().as_pointer_value().into(),
            self.ctx.metadata_string(key).into(),
            self.ctx.i32_type().const_int(value, false).into(),
        ]);
        self.module.add_global_metadata("nvvm.annotations", &md).map_err(|e| err(format!("LLVM metadata: {e}")))
    }

    pub(super) fn sreg(&self, name: &str) -> Result<IntValue<'ctx>, CodegenError> {
        let f = self.intrinsic(name, &[])?;
        let v = self.call(f, &[])?.into_int_value();
        Ok(self.b.build_int_z_extend(v, self.ctx.i64_type(), "sreg")?)
    }

    /// The function of kernel `k`: `void k(C*, A*...)` on the device; on the
    /// host first `host_ids` i64 ids (a thread's, or a block's three for the
    /// kernels the emulation runs a block at a time). Pointers `noalias`; made
    /// current and positioned at its entry. Returns it and the parameter index
    /// of its first pointer.
    pub(super) fn kernel_fn(&mut self, k: &Kernel, host_ids: u32) -> (FunctionValue<'ctx>, u32) {
        let first_ptr = if self.mode == Mode::Host { host_ids } else { 0 };
        let mut params: Vec<BasicMetadataTypeEnum> =
            vec![BasicMetadataTypeEnum::from(self.ctx.i64_type()); first_ptr as usize];
        params.push(self.ptr_ty(k.out_elem()).into());
        for o in &k.ops {
            params.push(self.ptr_ty(o.elem).into());
        }
        let f = self.module.add_function(&k.name, self.ctx.void_type().fn_type(&params, false), None);
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for j in 0..=k.ops.len() as u32 {
            f.add_attribute(AttributeLoc::Param(first_ptr + j), self.ctx.create_enum_attribute(noalias, 0));
        }
        self.func = Some(f);
        let entry = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(entry);
        (f, first_ptr)
    }

    fn kernel(&mut self, k: &Kernel) -> Result<(), CodegenError> {
        if let Some(t) = &k.tiled {
            return self.tiled_kernel(k, t);
        }
        if let Some(t) = k.transpose {
            return self.transpose_kernel(k, t);
        }
        if k.lanes > 1 {
            return self.wide_kernel(k);
        }
        let (f, first_ptr) = self.kernel_fn(k, 1);
        let lt = self.ft(k.elem);
        let acc = self.b.build_alloca(lt, "acc")?;
        let (tid, done) = self.thread_in_range(f, k.threads())?;
        let ptr = |j: usize| f.get_nth_param(first_ptr + j as u32).expect("ptr").into_pointer_value();
        let p_total: u64 = k.par.iter().product();
        let p = self.b.build_int_unsigned_rem(tid, self.i64c(p_total.max(1)), "p")?;
        let s = self.b.build_int_unsigned_div(tid, self.i64c(p_total.max(1)), "s")?;
        let (out_off, op_off) = self.par_offsets(k, p)?;
        let init = match k.combine {
            Combine::Max => lt.const_float(f64::NEG_INFINITY),
            Combine::Min => lt.const_float(f64::INFINITY),
            Combine::Sum | Combine::Select(_) => lt.const_zero(),
        };
        self.b.build_store(acc, init)?;
        let ptrs: Vec<PointerValue> = (0..k.ops.len()).map(|j| ptr(j + 1)).collect();
        if k.split_vars > 0 {
            let l: u64 = k.red[..k.split_vars].iter().product();
            let lo = self.b.build_int_mul(s, self.i64c(k.chunk), "lo")?;
            let hi0 = self.b.build_int_add(lo, self.i64c(k.chunk), "hi0")?;
            let lim = self.i64c(l);
            let lt_ = self.b.build_int_compare(IntPredicate::ULT, hi0, lim, "lt")?;
            let hi = self.b.build_select(lt_, hi0, lim, "hi")?.into_int_value();
            let base = op_off.clone();
            self.for_range(lo, hi, &mut |g, li| {
                let mut offs = base.clone();
                for (j, v) in g.delinearize(li, &k.red[..k.split_vars])?.into_iter().enumerate() {
                    for (o, off) in k.ops.iter().zip(offs.iter_mut()) {
                        *off = g.add_scaled(*off, v, o.red_strides[j])?;
                    }
                }
                g.reduce(k, k.split_vars, offs, &ptrs, acc)
            })?;
        } else {
            self.reduce(k, 0, op_off, &ptrs, acc)?;
        }
        let sum = self.b.build_load(acc, "sum")?.into_float_value();
        let val = if k.coef == 1.0 { sum } else { self.b.build_float_mul(sum, lt.const_float(k.coef), "val")? };
        let outp = unsafe { self.b.build_in_bounds_gep(ptr(0), &[out_off], "outp")? };
        if k.store {
            self.store_as(outp, val, k.out_elem())?;
        } else if k.split > 1 {
            if k.out_elem().is_half() {
                return Err(err("internal: atomic adds into a 16-bit buffer"));
            }
            self.atomic_fadd(outp, val);
        } else {
            let old = self.load_as(outp, k.out_elem(), lt)?;
            let new = self.b.build_float_add(old, val, "new")?;
            self.store_as(outp, new, k.out_elem())?;
        }
        self.finish_thread(f, done)
    }

    /// The thread's id (`ctaid · ntid + tid` on the device, the first
    /// parameter on the host), with the builder positioned where it is below
    /// `threads`; the returned block is where threads past it go.
    fn thread_in_range(
        &mut self,
        f: FunctionValue<'ctx>,
        threads: u64,
    ) -> Result<(IntValue<'ctx>, inkwell::basic_block::BasicBlock<'ctx>), CodegenError> {
        let body = self.ctx.append_basic_block(f, "body");
        let done = self.ctx.append_basic_block(f, "done");
        let tid = match self.mode {
            Mode::Host => f.get_nth_param(0).expect("tid").into_int_value(),
            Mode::Device => {
                let ctaid = self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.x")?;
                let ntid = self.sreg("llvm.nvvm.read.ptx.sreg.ntid.x")?;
                let t = self.sreg("llvm.nvvm.read.ptx.sreg.tid.x")?;
                self.b.build_int_add(self.b.build_int_mul(ctaid, ntid, "base")?, t, "tid")?
            }
        };
        let inside = self.b.build_int_compare(IntPredicate::ULT, tid, self.i64c(threads), "inside")?;
        self.b.build_conditional_branch(inside, body, done)?;
        self.b.position_at_end(body);
        Ok((tid, done))
    }

    /// Ends a thread's work: branch to `done`, return, mark `f` a kernel.
    fn finish_thread(
        &mut self,
        f: FunctionValue<'ctx>,
        done: inkwell::basic_block::BasicBlock<'ctx>,
    ) -> Result<(), CodegenError> {
        self.b.build_unconditional_branch(done)?;
        self.b.position_at_end(done);
        self.b.build_return(None)?;
        if self.mode == Mode::Device {
            self.annotate(f, "kernel", 1)?;
        }
        self.func = None;
        Ok(())
    }

    /// The offsets of output element `p` (the parallel variables linearized,
    /// the last fastest) in the output and in each operand.
    fn par_offsets(
        &self,
        k: &Kernel,
        p: IntValue<'ctx>,
    ) -> Result<(IntValue<'ctx>, Vec<IntValue<'ctx>>), CodegenError> {
        let mut out_off = self.i64c(0);
        let mut op_off: Vec<IntValue> = vec![self.i64c(0); k.ops.len()];
        for (j, v) in self.delinearize(p, &k.par)?.into_iter().enumerate() {
            out_off = self.add_scaled(out_off, v, k.out_strides[j])?;
            for (o, off) in k.ops.iter().zip(op_off.iter_mut()) {
                *off = self.add_scaled(*off, v, o.par_strides[j])?;
            }
        }
        Ok((out_off, op_off))
    }

    /// The values of variables with `extents` whose linearized index (the
    /// last fastest) is `x`; the first takes whatever is left.
    fn delinearize(&self, x: IntValue<'ctx>, extents: &[u64]) -> Result<Vec<IntValue<'ctx>>, CodegenError> {
        let mut vals = vec![x; extents.len()];
        let mut rem = x;
        for j in (1..extents.len()).rev() {
            vals[j] = self.b.build_int_unsigned_rem(rem, self.i64c(extents[j]), "v")?;
            rem = self.b.build_int_unsigned_div(rem, self.i64c(extents[j]), "r")?;
        }
        if let Some(first) = vals.first_mut() {
            *first = rem;
        }
        Ok(vals)
    }

    /// An element-wise kernel whose thread `t` owns output elements
    /// `t·lanes ..` (`lanes` of them, in one row: [`Kernel::lanes`]). The
    /// output and the operands with stride 1 move as one vector access each;
    /// an operand with stride 0 is loaded once. Each lane computes what
    /// [`Gen::kernel`]'s thread computes for its element.
    fn wide_kernel(&mut self, k: &Kernel) -> Result<(), CodegenError> {
        let (f, first_ptr) = self.kernel_fn(k, 1);
        let lanes = k.lanes as usize;
        let lt = self.ft(k.elem);
        let (tid, done) = self.thread_in_range(f, k.threads())?;
        let ptr = |j: usize| f.get_nth_param(first_ptr + j as u32).expect("ptr").into_pointer_value();
        let first = self.b.build_int_mul(tid, self.i64c(k.lanes), "first")?;
        let (out_off, op_off) = self.par_offsets(k, first)?;
        let mut prods: Vec<Option<FloatValue>> = vec![None; lanes];
        for (j, o) in k.ops.iter().enumerate() {
            let p = unsafe { self.b.build_in_bounds_gep(ptr(j + 1), &[op_off[j]], "p")? };
            let vals = if widen::is_vector_operand(o) {
                let mut vals = self.load_lanes(p, o.elem, lanes, lt)?;
                for v in &mut vals {
                    *v = self.apply_operand_func(o, *v)?;
                }
                vals
            } else {
                let v = self.load_as(p, o.elem, lt)?;
                vec![self.apply_operand_func(o, v)?; lanes]
            };
            for (q, v) in prods.iter_mut().zip(vals) {
                *q = Some(match *q {
                    None => v,
                    Some(q) => self.b.build_float_mul(q, v, "m")?,
                });
            }
        }
        let outp = unsafe { self.b.build_in_bounds_gep(ptr(0), &[out_off], "outp")? };
        let old = if k.store { None } else { Some(self.load_lanes(outp, k.out_elem(), lanes, lt)?) };
        let mut vals = Vec::with_capacity(lanes);
        for (q, prod) in prods.into_iter().enumerate() {
            let prod = prod.unwrap_or_else(|| lt.const_float(1.0));
            let mut v =
                if k.coef == 1.0 { prod } else { self.b.build_float_mul(prod, lt.const_float(k.coef), "val")? };
            if let Some(old) = &old {
                v = self.b.build_float_add(old[q], v, "new")?;
            }
            vals.push(v);
        }
        self.store_lanes(outp, &vals, k.out_elem())?;
        self.finish_thread(f, done)
    }

    /// `n` elements stored as `e` from `p` on, as values of type `lt`: one
    /// vector load ([`Gen::vector_alignment`]).
    fn load_lanes(
        &mut self,
        p: PointerValue<'ctx>,
        e: Elem,
        n: usize,
        lt: FloatType<'ctx>,
    ) -> Result<Vec<FloatValue<'ctx>>, CodegenError> {
        let wt = self.lanes_ty(e, n);
        let vp = self.b.build_pointer_cast(p, wt.ptr_type(self.addr_space()), "vp")?;
        let align = self.vector_alignment(p, (n * e.bytes()) as u32, e.bytes() as u32)?;
        let w = self.b.build_load(vp, "v")?;
        w.as_instruction_value().expect("a load").set_alignment(align).map_err(|e| err(e.to_string()))?;
        let w = w.into_vector_value();
        let i32t = self.ctx.i32_type();
        (0..n)
            .map(|q| {
                let x = if e.is_half() {
                    // Little-endian: element 2i is the low half of word i.
                    let word = self.b.build_extract_element(w, i32t.const_int(q as u64 / 2, false), "w")?;
                    let shift = i32t.const_int(16 * (q as u64 % 2), false);
                    let h = self.b.build_right_shift(word.into_int_value(), shift, false, "h")?;
                    self.b.build_int_truncate(h, self.ctx.i16_type(), "h")?.into()
                } else {
                    self.b.build_extract_element(w, i32t.const_int(q as u64, false), "x")?
                };
                self.decode(x, e, lt)
            })
            .collect()
    }

    /// `vals` to `p`, `p[1]`, ... stored as `e`: one vector store.
    fn store_lanes(&mut self, p: PointerValue<'ctx>, vals: &[FloatValue<'ctx>], e: Elem) -> Result<(), CodegenError> {
        let wt = self.lanes_ty(e, vals.len());
        let vp = self.b.build_pointer_cast(p, wt.ptr_type(self.addr_space()), "vp")?;
        let align = self.vector_alignment(p, (vals.len() * e.bytes()) as u32, e.bytes() as u32)?;
        let i32t = self.ctx.i32_type();
        let mut out = wt.get_undef();
        if e.is_half() {
            for (q, pair) in vals.chunks(2).enumerate() {
                let lo = self.b.build_int_z_extend(self.encode(pair[0], e)?.into_int_value(), i32t, "lo")?;
                let hi = self.b.build_int_z_extend(self.encode(pair[1], e)?.into_int_value(), i32t, "hi")?;
                let hi = self.b.build_left_shift(hi, i32t.const_int(16, false), "hi")?;
                let word = self.b.build_or(lo, hi, "word")?;
                out = self.b.build_insert_element(out, word, i32t.const_int(q as u64, false), "w")?;
            }
        } else {
            for (q, &x) in vals.iter().enumerate() {
                out = self.b.build_insert_element(out, self.encode(x, e)?, i32t.const_int(q as u64, false), "w")?;
            }
        }
        let st = self.b.build_store(vp, out)?;
        st.set_alignment(align).map_err(|e| err(e.to_string()))?;
        Ok(())
    }

    /// The vector type `n` elements stored as `e` move as: 16-bit elements in
    /// pairs, as 32-bit words (`n` is even: [`widen`] gives them 4 or 8
    /// lanes), since PTX has no `v8.u16` access and LLVM would split eight
    /// 16-bit lanes into two 8-byte accesses.
    fn lanes_ty(&self, e: Elem, n: usize) -> inkwell::types::VectorType<'ctx> {
        if e.is_half() {
            self.ctx.i32_type().vec_type(n as u32 / 2)
        } else {
            self.ft(e).vec_type(n as u32)
        }
    }

    /// The alignment to give a vector access of `bytes` bytes at `p`: `bytes`
    /// on the device, where the planner proved it ([`widen`], [`Tiled::vector_width`]);
    /// on the host only the element's `elem_bytes`, and an address that is no
    /// multiple of `bytes` is counted in the kernel's
    /// [`super::tiled::misaligned_global`] (the emulation fails the run on it,
    /// as the device would fault).
    pub(super) fn vector_alignment(
        &mut self,
        p: PointerValue<'ctx>,
        bytes: u32,
        elem_bytes: u32,
    ) -> Result<u32, CodegenError> {
        if self.mode == Mode::Device {
            return Ok(bytes);
        }
        let name = super::tiled::misaligned_global(&self.func.expect("in a function").get_name().to_string_lossy());
        // A declaration: the emulation maps it to its own counter.
        let cnt = self
            .module
            .get_global(&name)
            .map(|g| g.as_pointer_value())
            .unwrap_or_else(|| self.module.add_global(self.ctx.i64_type(), None, &name).as_pointer_value());
        let addr = self.b.build_ptr_to_int(p, self.ctx.i64_type(), "addr")?;
        let low = self.b.build_and(addr, self.i64c(bytes as u64 - 1), "low")?;
        let bad = self.b.build_int_compare(IntPredicate::NE, low, self.i64c(0), "bad")?;
        let bad = self.b.build_int_z_extend(bad, self.ctx.i64_type(), "bad")?;
        let c = self.b.build_load(cnt, "n")?.into_int_value();
        self.b.build_store(cnt, self.b.build_int_add(c, bad, "n")?)?;
        Ok(elem_bytes)
    }

    pub(super) fn add_scaled(
        &self,
        acc: IntValue<'ctx>,
        v: IntValue<'ctx>,
        stride: u64,
    ) -> Result<IntValue<'ctx>, CodegenError> {
        Ok(match stride {
            0 => acc,
            1 => self.b.build_int_add(acc, v, "o")?,
            s => self.b.build_int_add(acc, self.b.build_int_mul(v, self.i64c(s), "o")?, "o")?,
        })
    }

    /// The innermost step of a `max`/`min` (`acc = maxnum(acc, x)`, as
    /// [`crate::sema::hir::Extremum::combine`]) or `where` (`acc = a cmp b ? x : y`).
    fn combine(
        &mut self,
        k: &Kernel,
        offs: &[IntValue<'ctx>],
        ptrs: &[PointerValue<'ctx>],
        acc: PointerValue<'ctx>,
    ) -> Result<(), CodegenError> {
        let lt = self.ft(k.elem);
        let mut vals = Vec::with_capacity(k.ops.len());
        for (j, o) in k.ops.iter().enumerate() {
            let p = unsafe { self.b.build_in_bounds_gep(ptrs[j], &[offs[j]], "p")? };
            vals.push(self.load_as(p, o.elem, lt)?);
        }
        let new = match k.combine {
            Combine::Max | Combine::Min => {
                let name = if k.combine == Combine::Max { "llvm.maxnum" } else { "llvm.minnum" };
                let old = self.b.build_load(acc, "a")?.into_float_value();
                let f = self.intrinsic(name, &[lt.into()])?;
                self.call(f, &[old.into(), vals[0].into()])?.into_float_value()
            }
            Combine::Select(cmp) => {
                let pred = match cmp {
                    SelectCmp::Lt => FloatPredicate::OLT,
                    SelectCmp::Le => FloatPredicate::OLE,
                    SelectCmp::Gt => FloatPredicate::OGT,
                    SelectCmp::Ge => FloatPredicate::OGE,
                    SelectCmp::Eq => FloatPredicate::OEQ,
                    SelectCmp::Ne => FloatPredicate::UNE,
                };
                let c = self.b.build_float_compare(pred, vals[0], vals[1], "cmp")?;
                self.b.build_select(c, vals[2], vals[3], "sel")?.into_float_value()
            }
            Combine::Sum => return Err(err("internal: a sum kernel has no combine step")),
        };
        self.b.build_store(acc, new)?;
        Ok(())
    }

    /// Nested loops over reduction variables `from..`, then `acc += Π operands`.
    fn reduce(
        &mut self,
        k: &Kernel,
        from: usize,
        offs: Vec<IntValue<'ctx>>,
        ptrs: &[PointerValue<'ctx>],
        acc: PointerValue<'ctx>,
    ) -> Result<(), CodegenError> {
        if from == k.red.len() && k.combine != Combine::Sum {
            return self.combine(k, &offs, ptrs, acc);
        }
        if from == k.red.len() {
            let lt = self.ft(k.elem);
            let mut prod: Option<FloatValue> = None;
            for (j, o) in k.ops.iter().enumerate() {
                let p = unsafe { self.b.build_in_bounds_gep(ptrs[j], &[offs[j]], "p")? };
                let v = self.load_as(p, o.elem, lt)?;
                let v = self.apply_operand_func(o, v)?;
                prod = Some(match prod {
                    None => v,
                    Some(q) => self.b.build_float_mul(q, v, "m")?,
                });
            }
            let prod = prod.unwrap_or_else(|| lt.const_float(1.0));
            let old = self.b.build_load(acc, "a")?.into_float_value();
            let new = self.b.build_float_add(old, prod, "a.new")?;
            self.b.build_store(acc, new)?;
            return Ok(());
        }
        let extent = k.red[from];
        self.for_range(self.i64c(0), self.i64c(extent), &mut |g, i| {
            let mut o2 = offs.clone();
            for (o, off) in k.ops.iter().zip(o2.iter_mut()) {
                *off = g.add_scaled(*off, i, o.red_strides[from])?;
            }
            g.reduce(k, from + 1, o2, ptrs, acc)
        })
    }
}

pub(super) fn build_module<'ctx>(
    ctx: &'ctx Context,
    kernels: &[Kernel],
    mode: Mode,
    tm: &TargetMachine,
) -> Result<Module<'ctx>, CodegenError> {
    let module = new_module(ctx, "tcc_gpu", tm);
    // The kernels of one plan are one program's, whose results are checked with
    // the 16-bit tolerance when it has a 16-bit tensor (crate::run::compare::tolerance).
    let half = kernels.iter().any(|k| k.out_elem().is_half() || k.ops.iter().any(|o| o.elem.is_half()));
    let mut g = Gen { ctx, module: &module, b: ctx.create_builder(), mode, func: None, half };
    for k in kernels {
        g.kernel(k)?;
    }
    drop(g);
    verify_and_optimize(&module, tm, "the generated GPU module")?;
    Ok(module)
}

/// An empty module for target machine `tm`.
pub(super) fn new_module<'ctx>(ctx: &'ctx Context, name: &str, tm: &TargetMachine) -> Module<'ctx> {
    let module = ctx.create_module(name);
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module
}

/// Verifies a generated module (`what` names it in the error) and runs
/// `default<O3>` on it.
pub(super) fn verify_and_optimize(module: &Module<'_>, tm: &TargetMachine, what: &str) -> Result<(), CodegenError> {
    module.verify().map_err(|e| err(format!("LLVM rejected {what}: {}", e.to_string())))?;
    module
        .run_passes("default<O3>", tm, PassBuilderOptions::create())
        .map_err(|e| err(format!("LLVM passes: {}", e.to_string())))
}

/// The PTX of a module built for the NVPTX machine `tm`.
pub(super) fn ptx_text(module: &Module<'_>, tm: &TargetMachine) -> Result<String, CodegenError> {
    let buf =
        tm.write_to_memory_buffer(module, FileType::Assembly).map_err(|e| err(format!("LLVM: {}", e.to_string())))?;
    Ok(String::from_utf8_lossy(buf.as_slice()).trim_end_matches('\0').to_string())
}

pub(super) fn nvptx_machine() -> Result<TargetMachine, CodegenError> {
    Target::initialize_nvptx(&InitializationConfig::default());
    let triple = TargetTriple::create(TRIPLE);
    let target = Target::from_triple(&triple).map_err(|e| err(format!("LLVM: {e}")))?;
    target
        .create_target_machine(
            &triple,
            SM,
            PTX_FEATURES,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| err(format!("LLVM cannot generate code for {TRIPLE} {SM}")))
}

/// The PTX of a plan's kernels (one module).
pub fn emit_ptx(plan: &GpuPlan) -> Result<String, CodegenError> {
    let ctx = Context::create();
    let tm = nvptx_machine()?;
    let module = build_module(&ctx, &plan.kernels, Mode::Device, &tm)?;
    ptx_text(&module, &tm)
}

/// The optimized LLVM IR of a plan's kernels for the NVPTX target.
pub fn emit_nvptx_ir(plan: &GpuPlan) -> Result<String, CodegenError> {
    let ctx = Context::create();
    let tm = nvptx_machine()?;
    let m = build_module(&ctx, &plan.kernels, Mode::Device, &tm)?;
    let s = m.print_to_string().to_string();
    Ok(s)
}

/// `tcc opt --emit=ptx`: plan and compile `units`.
pub fn ptx_for(hir: &Hir, units: &[UnitId], opts: &GpuOptions) -> Result<(GpuPlan, String), CodegenError> {
    let plan = plan(hir, units, opts)?;
    let ptx = emit_ptx(&plan)?;
    Ok((plan, ptx))
}
