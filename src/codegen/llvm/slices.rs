//! Sliced terms ([`crate::lir::slice`]) as parallel tasks: the slices are cut into
//! as many chunks as the runtime has threads (fewer if their private memory would
//! pass the memory limit), run by `tcc_rt_parallel_range`. Each chunk has its own
//! copy of the term's temporaries and, when a sliced index is summed, of the
//! target, which the caller adds into the target in chunk order once all are done
//! (the result depends on the thread count only). A sliced index kept in the
//! target needs no copy: slices write disjoint parts. With one chunk (one thread,
//! or less work than a parallel loop needs), or when the private copies cannot be
//! allocated, the slices run in place, in order.
//!
//! The slices run are the window `tcc_rt_slice_begin` gives (every slice, unless
//! the process is one of several ranks sharing the term: `tcc_runtime::slices`),
//! and `tcc_rt_slice_end` then combines the ranks' parts of the target.

use super::*;
use crate::lir::slice::Group;

/// Private copies are 64-byte aligned within a chunk's block.
const ALIGN: u64 = 64;

impl<'ctx> Gen<'_, 'ctx> {
    /// The group whose outermost slice loop is `index` around `body`, if any.
    pub(super) fn slice_group_at(&self, unit: UnitId, index: IndexId, body: &[Node]) -> Option<Group> {
        fn first_stmt(nodes: &[Node]) -> Option<usize> {
            nodes.iter().find_map(|n| match n {
                Node::Loop { body, .. } => first_stmt(body),
                Node::Zero { stmt, .. } | Node::Compute { stmt } => Some(*stmt),
            })
        }
        let s = first_stmt(body)?;
        crate::lir::slice::groups(self.hir, unit).into_iter().find(|g| g.indices[0] == index && g.stmts.contains(&s))
    }

    /// Elements of `t`'s buffer (its stored dimensions), in runtime sizes.
    fn stored_elements(&self, t: TensorId) -> Poly {
        let dims = &self.hir.tensors[t].dims;
        self.strides[&t]
            .iter()
            .zip(dims)
            .filter(|(s, _)| !s.is_zero())
            .fold(Poly::constant(1), |acc, (_, &r)| acc.mul(&Poly::range(self.hir, &self.runtime, r)))
    }

    /// Bytes of `t`'s buffer rounded up to [`ALIGN`], as a value.
    fn aligned_bytes(&self, t: TensorId) -> Result<IntValue<'ctx>, CodegenError> {
        let n = self.poly_value(&self.stored_elements(t))?;
        let size = self.i64c(self.hir.tensors[t].elem.size_bytes() as u64);
        let bytes = self.b.build_int_mul(n, size, "sl.bytes")?;
        let up = self.b.build_int_add(bytes, self.i64c(ALIGN - 1), "sl.up")?;
        Ok(self.b.build_and(up, self.i64c(!(ALIGN - 1)), "sl.al")?)
    }

    /// The tensors a chunk holds privately: the group's temporaries, and the
    /// target when a sliced index is summed.
    fn private_tensors(&self, g: &Group, unit: UnitId) -> (Vec<TensorId>, bool) {
        let stmts = &self.hir.units[unit].stmts;
        let last = &stmts[g.stmts.end - 1];
        let mut ts: Vec<TensorId> = (g.stmts.start..g.stmts.end - 1).map(|k| stmts[k].lhs.tensor).collect();
        let summed = g.indices.iter().any(|i| !last.lhs.indices.contains(i));
        if summed {
            ts.push(last.lhs.tensor);
        }
        (ts, summed)
    }

    /// The most chunks whose private copies fit the memory limit beside the
    /// nest's peak (at the assumed sizes), at least 1.
    fn max_chunks(&self, private: &[TensorId]) -> u64 {
        let per: u64 = private
            .iter()
            .map(|&t| {
                let n: u64 = self.stored_elements(t).assumed(self.hir).max(1);
                n.saturating_mul(self.hir.tensors[t].elem.size_bytes() as u64).div_ceil(ALIGN) * ALIGN
            })
            .sum::<u64>()
            .max(1);
        (self.mem_limit.saturating_sub(self.nest_peak) / per).max(1)
    }

    /// The group's loop nest `outer` (its loops over the sliced indices, outermost
    /// first): parallel chunks when there are two or more, else in place.
    pub(super) fn sliced_loops(&mut self, g: &Group, outer: &Node, unit: UnitId) -> Result<(), CodegenError> {
        let mut inner: &[Node] = std::slice::from_ref(outer);
        for _ in &g.indices {
            match inner {
                [Node::Loop { body, .. }] => inner = body,
                _ => return Err(err("internal: a sliced term's loops are not its sliced indices")),
            }
        }
        let i64t = self.ctx.i64_type();
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let (private, summed) = self.private_tensors(g, unit);
        let mut all = self.i64c(1);
        for &i in &g.indices {
            let e = self.poly_value(&self.index_poly(i))?;
            all = self.b.build_int_mul(all, e, "sl.all")?;
        }
        // This process's window of the slices: `lo .. lo + n`.
        let target = self.hir.units[unit].stmts[g.stmts.end - 1].lhs.tensor;
        let desc = self.slice_desc(g, unit, all, summed)?;
        let tptr = self.b.build_pointer_cast(self.bufs[&target], i8p, "sl.tgt")?;
        let window = self.i64_slots(2, "sl.window")?;
        let w0 = unsafe { self.b.build_in_bounds_gep(window, &[self.i64c(0), self.i64c(0)], "sl.w0")? };
        let w1 = unsafe { self.b.build_in_bounds_gep(window, &[self.i64c(0), self.i64c(1)], "sl.w1")? };
        let i64p = i64t.ptr_type(AddressSpace::default());
        let begin = self.declare("tcc_rt_slice_begin", None, &[i64p.into(), i8p.into(), i64p.into()]);
        self.b.build_call(begin, &[desc.into(), tptr.into(), w0.into()], "")?;
        let lo = self.b.build_load(w0, "sl.lo")?.into_int_value();
        let hi = self.b.build_load(w1, "sl.hi")?.into_int_value();
        let n = self.b.build_int_sub(hi, lo, "sl.n")?;
        // Chunks: min(slices, threads, what fits the limit).
        let nt = self.declare("tcc_rt_num_threads", Some(i64t.into()), &[]);
        let nt = self.b.build_call(nt, &[], "sl.nt")?.try_as_basic_value().left().expect("i64").into_int_value();
        let umin = |g: &Self, a: IntValue<'ctx>, b: IntValue<'ctx>| -> Result<IntValue<'ctx>, CodegenError> {
            let lt = g.b.build_int_compare(IntPredicate::ULT, a, b, "sl.lt")?;
            Ok(g.b.build_select(lt, a, b, "sl.min")?.into_int_value())
        };
        let chunks = umin(self, n, nt)?;
        let chunks = umin(self, chunks, self.i64c(self.max_chunks(&private)))?;
        let mut per = self.i64c(0);
        for &t in &private {
            let b = self.aligned_bytes(t)?;
            per = self.b.build_int_add(per, b, "sl.per")?;
        }
        let total = self.b.build_int_mul(per, chunks, "sl.total")?;
        let f = self.current_fn();
        let try_bb = self.ctx.append_basic_block(f, "slices.alloc");
        let par_bb = self.ctx.append_basic_block(f, "slices.par");
        let ser_bb = self.ctx.append_basic_block(f, "slices.serial");
        let join_bb = self.ctx.append_basic_block(f, "slices.done");
        // Too little work for threads (as for parallel loops): in place.
        let chunks = if g.flops < self.parallel_min { self.i64c(1) } else { chunks };
        let two = self.b.build_int_compare(IntPredicate::UGE, chunks, self.i64c(2), "sl.two")?;
        self.b.build_conditional_branch(two, try_bb, ser_bb)?;
        self.b.position_at_end(try_bb);
        let alloc = self.declare("tcc_rt_alloc_zeroed", Some(i8p.into()), &[i64t.into()]);
        let base = self
            .b
            .build_call(alloc, &[total.into()], "sl.base")?
            .try_as_basic_value()
            .left()
            .expect("ptr")
            .into_pointer_value();
        let null = self.b.build_is_null(base, "sl.null")?;
        self.b.build_conditional_branch(null, ser_bb, par_bb)?;

        // In place, in order.
        self.b.position_at_end(ser_bb);
        let extents: Vec<IntValue<'ctx>> =
            g.indices.iter().map(|&i| self.poly_value(&self.index_poly(i))).collect::<Result<_, _>>()?;
        self.slice_range(g, inner, unit, &extents, lo, n)?;
        self.b.build_unconditional_branch(join_bb)?;

        // Parallel chunks.
        self.b.position_at_end(par_bb);
        self.launch_chunks(g, inner, unit, &private, base, chunks, (lo, n))?;
        if summed {
            // target += Σ_c copy_c, in chunk order.
            let target = *private.last().expect("the target");
            let elems = self.poly_value(&self.stored_elements(target))?;
            let ft = self.ft(self.hir.tensors[target].elem);
            let mut off = self.i64c(0);
            for &t in &private[..private.len() - 1] {
                let b = self.aligned_bytes(t)?;
                off = self.b.build_int_add(off, b, "sl.off")?;
            }
            self.build_loop(chunks, &mut |g, c| {
                let at = g.b.build_int_mul(c, per, "sl.at")?;
                let at = g.b.build_int_add(at, off, "sl.at")?;
                let raw = unsafe { g.b.build_in_bounds_gep(base, &[at], "sl.copy")? };
                let copy = g.b.build_pointer_cast(raw, ft.ptr_type(AddressSpace::default()), "sl.copyT")?;
                g.build_loop(elems, &mut |g, e| {
                    let dst = g.elem_ptr(target, e)?;
                    let src = unsafe { g.b.build_in_bounds_gep(copy, &[e], "sl.src")? };
                    let a = g.b.build_load(dst, "sl.a")?.into_float_value();
                    let b = g.b.build_load(src, "sl.b")?.into_float_value();
                    let s = g.b.build_float_add(a, b, "sl.s")?;
                    g.b.build_store(dst, s)?;
                    Ok(())
                })
            })?;
        }
        let free = self.declare("tcc_rt_free", None, &[i8p.into(), i64t.into()]);
        self.b.build_call(free, &[base.into(), total.into()], "")?;
        self.b.build_unconditional_branch(join_bb)?;
        self.b.position_at_end(join_bb);
        let end = self.declare("tcc_rt_slice_end", None, &[i64p.into(), i8p.into()]);
        self.b.build_call(end, &[desc.into(), tptr.into()], "")?;
        Ok(())
    }

    /// An `[n x i64]` stack slot in the function's entry block (not in a loop).
    fn i64_slots(&mut self, n: u32, name: &str) -> Result<PointerValue<'ctx>, CodegenError> {
        let entry = self.current_fn().get_first_basic_block().expect("entry");
        let eb = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => eb.position_before(&i),
            None => eb.position_at_end(entry),
        }
        Ok(eb.build_alloca(self.ctx.i64_type().array_type(n), name)?)
    }

    /// The term's descriptor for `tcc_rt_slice_begin`/`_end` (its layout is
    /// documented in `tcc_runtime::slices`), filled here; a pointer to its first
    /// element.
    fn slice_desc(
        &mut self,
        g: &Group,
        unit: UnitId,
        slices: IntValue<'ctx>,
        summed: bool,
    ) -> Result<PointerValue<'ctx>, CodegenError> {
        let last = &self.hir.units[unit].stmts[g.stmts.end - 1];
        let target = last.lhs.tensor;
        let dims: Vec<(usize, RangeId)> = self.hir.tensors[target]
            .dims
            .iter()
            .enumerate()
            .filter(|(d, _)| !self.strides[&target][*d].is_zero())
            .map(|(d, &r)| (d, r))
            .collect();
        let elem = self.hir.tensors[target].elem.size_bytes() as u64;
        let mut vals = vec![
            slices,
            self.i64c(elem),
            self.i64c(summed as u64),
            self.i64c(g.indices.len() as u64),
            self.i64c(dims.len() as u64),
        ];
        for &i in &g.indices {
            vals.push(self.poly_value(&self.index_poly(i))?);
        }
        for (d, r) in dims {
            vals.push(self.poly_value(&Poly::range(self.hir, &self.runtime, r))?);
            vals.push(self.poly_value(&self.strides[&target][d].clone())?);
            let pos = g.indices.iter().position(|&i| i == last.lhs.indices[d]).map_or(-1, |p| p as i64);
            vals.push(self.ctx.i64_type().const_int(pos as u64, true));
        }
        let arr = self.i64_slots(vals.len() as u32, "sl.desc")?;
        for (k, v) in vals.into_iter().enumerate() {
            let slot = unsafe { self.b.build_in_bounds_gep(arr, &[self.i64c(0), self.i64c(k as u64)], "sl.d")? };
            self.b.build_store(slot, v)?;
        }
        Ok(unsafe { self.b.build_in_bounds_gep(arr, &[self.i64c(0), self.i64c(0)], "sl.desc0")? })
    }

    /// Slices `lo .. lo + len` of the group, in order, on the buffers in scope.
    fn slice_range(
        &mut self,
        g: &Group,
        inner: &[Node],
        unit: UnitId,
        extents: &[IntValue<'ctx>],
        lo: IntValue<'ctx>,
        len: IntValue<'ctx>,
    ) -> Result<(), CodegenError> {
        // A rank may have no slice (more ranks than slices); `build_loop` runs once.
        let f = self.current_fn();
        let run_bb = self.ctx.append_basic_block(f, "slices.some");
        let done_bb = self.ctx.append_basic_block(f, "slices.none");
        let some = self.b.build_int_compare(IntPredicate::NE, len, self.i64c(0), "sl.some")?;
        self.b.build_conditional_branch(some, run_bb, done_bb)?;
        self.b.position_at_end(run_bb);
        let r = self.build_loop(len, &mut |gen, j| {
            // Slice number → the sliced indices' values (row-major).
            let mut rest = gen.b.build_int_add(lo, j, "slice")?;
            for (&i, &e) in g.indices.iter().zip(extents).rev() {
                let v = gen.b.build_int_unsigned_rem(rest, e, "sv")?;
                rest = gen.b.build_int_unsigned_div(rest, e, "sr")?;
                gen.bound.insert(i, v);
            }
            gen.nodes(inner, unit)
        });
        // The values are defined in the loop: out of scope after it.
        for i in &g.indices {
            self.bound.remove(i);
        }
        r?;
        self.b.build_unconditional_branch(done_bb)?;
        self.b.position_at_end(done_bb);
        Ok(())
    }

    /// `tcc_rt_parallel_range` over the chunks, each running its slices on its own
    /// copies (chunk `c` of `chunks` runs slices `lo + n·c/chunks .. lo +
    /// n·(c+1)/chunks` of the window `(lo, n)`).
    #[allow(clippy::too_many_arguments)]
    fn launch_chunks(
        &mut self,
        g: &Group,
        inner: &[Node],
        unit: UnitId,
        private: &[TensorId],
        base: PointerValue<'ctx>,
        chunks: IntValue<'ctx>,
        (lo, n): (IntValue<'ctx>, IntValue<'ctx>),
    ) -> Result<(), CodegenError> {
        let i64t = self.ctx.i64_type();
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        // Captures, then base, chunks, slices.
        let caller = self.current_fn();
        let bv = self.b.build_ptr_to_int(base, i64t, "basev")?;
        let (caps, arr) = self.capture(&[bv, chunks, n, lo], "slctx")?;
        let name = self.name(&format!("{}.slices", caller.get_name().to_string_lossy()));
        let fty = self.ctx.void_type().fn_type(&[i8p.into(), i64t.into(), i64t.into()], false);
        let f = self.module.add_function(&name, fty, Some(Linkage::Internal));
        self.set_target_attrs(f);
        let fp = self.b.build_pointer_cast(f.as_global_value().as_pointer_value(), i8p, "fp")?;
        let first = unsafe { self.b.build_in_bounds_gep(arr, &[self.i64c(0), self.i64c(0)], "slot")? };
        let ctxp = self.b.build_pointer_cast(first, i8p, "ctxp")?;
        let rt = self.declare("tcc_rt_parallel_range", None, &[i64t.into(), i8p.into(), i8p.into()]);
        self.b.build_call(rt, &[chunks.into(), fp.into(), ctxp.into()], "")?;

        // The task function: (ctx, lo, hi) over chunk numbers.
        let (saved, extra) = self.enter_outlined(f, &caps, 4)?;
        let base = self.b.build_int_to_ptr(extra[0], i8p, "base")?;
        let (chunks, n, first) = (extra[1], extra[2], extra[3]);
        let lo = f.get_nth_param(1).expect("lo").into_int_value();
        let hi = f.get_nth_param(2).expect("hi").into_int_value();
        let count = self.b.build_int_sub(hi, lo, "nchunks")?;
        let mut per = self.i64c(0);
        for &t in private {
            let b = self.aligned_bytes(t)?;
            per = self.b.build_int_add(per, b, "sl.per")?;
        }
        let extents: Vec<IntValue<'ctx>> =
            g.indices.iter().map(|&i| self.poly_value(&self.index_poly(i))).collect::<Result<_, _>>()?;
        // `hi > lo` and `chunks ≤ n`: every loop below runs at least once.
        self.build_loop(count, &mut |gen, k| {
            let c = gen.b.build_int_add(lo, k, "chunk")?;
            let mut off = gen.b.build_int_mul(c, per, "sl.at")?;
            for &t in private {
                let raw = unsafe { gen.b.build_in_bounds_gep(base, &[off], "sl.priv")? };
                let ft = gen.ft(gen.hir.tensors[t].elem);
                let p = gen.b.build_pointer_cast(raw, ft.ptr_type(AddressSpace::default()), "sl.privT")?;
                gen.bufs.insert(t, p);
                let b = gen.aligned_bytes(t)?;
                off = gen.b.build_int_add(off, b, "sl.next")?;
            }
            let s_lo = gen.b.build_int_mul(n, c, "s.lo")?;
            let s_lo = gen.b.build_int_unsigned_div(s_lo, chunks, "s.lo")?;
            let c1 = gen.b.build_int_add(c, gen.i64c(1), "c1")?;
            let s_hi = gen.b.build_int_mul(n, c1, "s.hi")?;
            let s_hi = gen.b.build_int_unsigned_div(s_hi, chunks, "s.hi")?;
            let len = gen.b.build_int_sub(s_hi, s_lo, "s.len")?;
            let s_lo = gen.b.build_int_add(first, s_lo, "s.first")?;
            gen.slice_range(g, inner, unit, &extents, s_lo, len)
        })?;
        self.b.build_return(None)?;
        self.leave_outlined(saved);
        Ok(())
    }
}
