//! Loop nests of the terms that are not GETTs: loop order, collapsing, threads
//! (disjoint slices or a parallel sum) and the element-wise functions.

use super::*;
use crate::sema::hir::{AffineRef, Extremum, TensorRef};
use crate::tir::materialize::Special;

/// The largest sum per target element (product of summed extents) of a term that
/// joins a shared loop nest ([`Gen::shared_nest_run`]): longer sums keep their own
/// nest, whose loop order the term chooses.
pub(super) const SHARED_NEST_MAX_SUM: f64 = 32.0;

/// What an outlined parallel function takes from its caller: the buffers, the
/// bound indices and the run-time sizes in scope (sorted, so the layout of the
/// context array is deterministic).
pub(super) struct Captures<'ctx> {
    pub bufs: Vec<(TensorId, PointerValue<'ctx>)>,
    pub bound: Vec<(IndexId, IntValue<'ctx>)>,
    pub sizes: Vec<(RangeId, IntValue<'ctx>)>,
}

/// The function being generated, set aside while an outlined function is
/// ([`Gen::enter_outlined`]): where the builder was and what was in scope.
pub(super) struct SavedFn<'ctx> {
    block: inkwell::basic_block::BasicBlock<'ctx>,
    func: Option<FunctionValue<'ctx>>,
    bufs: HashMap<TensorId, PointerValue<'ctx>>,
    bound: HashMap<IndexId, IntValue<'ctx>>,
    size_vals: HashMap<RangeId, IntValue<'ctx>>,
    acc_slot: Option<(TensorId, PointerValue<'ctx>)>,
}

impl<'ctx> Gen<'_, 'ctx> {
    /// The caller's [`Captures`] and an `i64` array holding them (buffers as
    /// integers, then bound indices, then sizes, then `extra`), allocated in the
    /// caller's entry block (not in a loop) and filled here: the context an
    /// outlined function of `tcc_rt_parallel_*` reads.
    pub(super) fn capture(
        &mut self,
        extra: &[IntValue<'ctx>],
        name: &str,
    ) -> Result<(Captures<'ctx>, PointerValue<'ctx>), CodegenError> {
        let i64t = self.ctx.i64_type();
        let mut bufs: Vec<(TensorId, PointerValue<'ctx>)> = self.bufs.iter().map(|(&t, &p)| (t, p)).collect();
        bufs.sort_by_key(|x| x.0);
        let mut bound: Vec<(IndexId, IntValue<'ctx>)> = self.bound.iter().map(|(&i, &v)| (i, v)).collect();
        bound.sort_by_key(|x| x.0);
        // Runtime sizes travel like bound indices (the task is another function).
        let mut sizes: Vec<(RangeId, IntValue<'ctx>)> = self.size_vals.iter().map(|(&r, &v)| (r, v)).collect();
        sizes.sort_by_key(|x| x.0);
        let n = (bufs.len() + bound.len() + sizes.len() + extra.len()).max(1) as u32;
        let entry = self.current_fn().get_first_basic_block().expect("entry");
        let eb = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => eb.position_before(&i),
            None => eb.position_at_end(entry),
        }
        let arr = eb.build_alloca(i64t.array_type(n), name)?;
        let mut values = Vec::with_capacity(n as usize);
        for (_, p) in &bufs {
            values.push(self.b.build_ptr_to_int(*p, i64t, "pv")?);
        }
        values.extend(bound.iter().map(|x| x.1).chain(sizes.iter().map(|x| x.1)).chain(extra.iter().copied()));
        for (k, v) in values.into_iter().enumerate() {
            let slot = unsafe { self.b.build_in_bounds_gep(arr, &[self.i64c(0), self.i64c(k as u64)], "slot")? };
            self.b.build_store(slot, v)?;
        }
        Ok((Captures { bufs, bound, sizes }, arr))
    }

    /// Starts generating `f`, an outlined `void (i8* ctx, i64 lo, i64 hi)` whose
    /// context [`Gen::capture`] filled with `caps` and `extra` more values: the
    /// caller's function is set aside, the captures are in scope again (loaded
    /// from the context), and the `extra` values are returned.
    pub(super) fn enter_outlined(
        &mut self,
        f: FunctionValue<'ctx>,
        caps: &Captures<'ctx>,
        extra: usize,
    ) -> Result<(SavedFn<'ctx>, Vec<IntValue<'ctx>>), CodegenError> {
        let saved = SavedFn {
            block: self.b.get_insert_block().expect("positioned"),
            func: self.func.replace(f),
            bufs: std::mem::take(&mut self.bufs),
            bound: std::mem::take(&mut self.bound),
            size_vals: std::mem::take(&mut self.size_vals),
            acc_slot: self.acc_slot.take(),
        };
        let fe = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(fe);
        let i64t = self.ctx.i64_type();
        let cp = self.b.build_pointer_cast(
            f.get_nth_param(0).expect("ctx").into_pointer_value(),
            i64t.ptr_type(AddressSpace::default()),
            "c",
        )?;
        let n = caps.bufs.len() + caps.bound.len() + caps.sizes.len() + extra;
        let mut values = Vec::with_capacity(n);
        for k in 0..n {
            let sp = unsafe { self.b.build_in_bounds_gep(cp, &[self.i64c(k as u64)], "s")? };
            values.push(self.b.build_load(sp, "v")?.into_int_value());
        }
        let mut values = values.into_iter();
        for ((t, p), v) in caps.bufs.iter().zip(values.by_ref()) {
            let p = self.b.build_int_to_ptr(v, p.get_type(), "buf")?;
            self.bufs.insert(*t, p);
        }
        self.bound.extend(caps.bound.iter().map(|x| x.0).zip(values.by_ref()));
        self.size_vals.extend(caps.sizes.iter().map(|x| x.0).zip(values.by_ref()));
        Ok((saved, values.collect()))
    }

    /// Back to the function [`Gen::enter_outlined`] set aside.
    pub(super) fn leave_outlined(&mut self, saved: SavedFn<'ctx>) {
        self.func = saved.func;
        self.bufs = saved.bufs;
        self.bound = saved.bound;
        self.size_vals = saved.size_vals;
        self.acc_slot = saved.acc_slot;
        self.b.position_at_end(saved.block);
    }

    /// Loops over `vars` (outermost first) binding each, then `inner`.
    pub(super) fn nest(
        &mut self,
        vars: &[IndexId],
        inner: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        self.nest_hinted(vars, false, inner)
    }

    /// [`Self::nest_hinted`]; with `parallel`, the outermost loop is outlined into a
    /// function `void (i8* ctx, i64 lo, i64 hi)` run on the runtime's pool through
    /// `tcc_rt_parallel_range` (its index must be one of the written tensor's, so
    /// that chunks write disjoint slices). The buffers and bound indices the body
    /// uses travel in an `i64` array.
    ///
    /// With `sum = Some(c)` the loop is a reduction into the single element of `c`
    /// the bound indices select: each chunk sums into a private accumulator and
    /// returns it, `tcc_rt_parallel_sum` adds the chunks' sums in chunk order (the
    /// result depends on the thread count only), and the total is added to `c`.
    pub(super) fn nest_parallel(
        &mut self,
        vars: &[IndexId],
        parallel: bool,
        hint: bool,
        sum: Option<(TensorId, &[IndexId])>,
        inner: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        if !parallel || vars.is_empty() {
            return self.nest_hinted(vars, hint, inner);
        }
        let (pv, rest) = (vars[0], &vars[1..]);
        let i64t = self.ctx.i64_type();
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let caller = self.current_fn();
        let (Captures { bufs, bound, sizes }, arr) = self.capture(&[], "ctx")?;
        let slot = |g: &Self, k: u64| -> Result<PointerValue<'ctx>, CodegenError> {
            Ok(unsafe { g.b.build_in_bounds_gep(arr, &[g.i64c(0), g.i64c(k)], "slot")? })
        };
        let name = self.name(&format!("{}.par", caller.get_name().to_string_lossy()));
        let f64t = self.ctx.f64_type();
        let fty = match sum {
            None => self.ctx.void_type().fn_type(&[i8p.into(), i64t.into(), i64t.into()], false),
            Some(_) => f64t.fn_type(&[i8p.into(), i64t.into(), i64t.into()], false),
        };
        let f = self.module.add_function(&name, fty, Some(Linkage::Internal));
        self.set_target_attrs(f);
        let fp = self.b.build_pointer_cast(f.as_global_value().as_pointer_value(), i8p, "fp")?;
        let ctxp = self.b.build_pointer_cast(slot(self, 0)?, i8p, "ctxp")?;
        let n_iter = self.poly_value(&self.extent(pv))?;
        match sum {
            None => {
                let rt = self.declare("tcc_rt_parallel_range", None, &[i64t.into(), i8p.into(), i8p.into()]);
                self.b.build_call(rt, &[n_iter.into(), fp.into(), ctxp.into()], "")?;
            }
            Some((c, lhs_idx)) => {
                let rt = self.declare("tcc_rt_parallel_sum", Some(f64t.into()), &[i64t.into(), i8p.into(), i8p.into()]);
                let total = self.b.build_call(rt, &[n_iter.into(), fp.into(), ctxp.into()], "total")?;
                let total = total.try_as_basic_value().left().expect("f64").into_float_value();
                let ct = self.ft(self.hir.tensors[c].elem);
                let total = self.b.build_float_cast(total, ct, "total.t")?;
                let off = self.offset(c, lhs_idx)?;
                let p = self.elem_ptr(c, off)?;
                let old = self.b.build_load(p, "c")?.into_float_value();
                let new = self.b.build_float_add(old, total, "c.new")?;
                self.b.build_store(p, new)?;
            }
        }

        // The outlined wrapper loads the captures and calls the chunk function,
        // whose buffer parameters are `noalias` (as in the unit's body).
        let saved_block = self.b.get_insert_block().expect("positioned");
        let saved = (
            self.func,
            std::mem::take(&mut self.bufs),
            std::mem::take(&mut self.bound),
            std::mem::take(&mut self.size_vals),
        );
        let mut params: Vec<BasicMetadataTypeEnum> = bufs.iter().map(|(_, p)| p.get_type().into()).collect();
        params.extend(std::iter::repeat_n(BasicMetadataTypeEnum::from(i64t), bound.len() + sizes.len() + 2));
        let chunk_ty = match sum {
            None => self.ctx.void_type().fn_type(&params, false),
            Some(_) => f64t.fn_type(&params, false),
        };
        let chunk = self.module.add_function(&format!("{name}.chunk"), chunk_ty, Some(Linkage::Internal));
        self.set_target_attrs(chunk);
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for k in 0..bufs.len() {
            chunk.add_attribute(AttributeLoc::Param(k as u32), self.ctx.create_enum_attribute(noalias, 0));
        }
        self.func = Some(f);
        let fe = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(fe);
        let cp = self.b.build_pointer_cast(
            f.get_nth_param(0).expect("ctx").into_pointer_value(),
            i64t.ptr_type(AddressSpace::default()),
            "c",
        )?;
        let mut args: Vec<BasicMetadataValueEnum> = Vec::new();
        for (k, (_, p)) in bufs.iter().enumerate() {
            let sp = unsafe { self.b.build_in_bounds_gep(cp, &[self.i64c(k as u64)], "s")? };
            let v = self.b.build_load(sp, "v")?.into_int_value();
            args.push(self.b.build_int_to_ptr(v, p.get_type(), "buf")?.into());
        }
        for k in 0..bound.len() + sizes.len() {
            let sp = unsafe { self.b.build_in_bounds_gep(cp, &[self.i64c((bufs.len() + k) as u64)], "s")? };
            args.push(self.b.build_load(sp, "v")?.into());
        }
        args.push(f.get_nth_param(1).expect("lo").into());
        args.push(f.get_nth_param(2).expect("hi").into());
        let part = self.b.build_call(chunk, &args, "part")?;
        match sum {
            None => self.b.build_return(None)?,
            Some(_) => self.b.build_return(Some(&part.try_as_basic_value().left().expect("f64")))?,
        };

        self.func = Some(chunk);
        let fe = self.ctx.append_basic_block(chunk, "entry");
        self.b.position_at_end(fe);
        for (k, (t, _)) in bufs.iter().enumerate() {
            self.bufs.insert(*t, chunk.get_nth_param(k as u32).expect("buf").into_pointer_value());
        }
        for (k, (i, _)) in bound.iter().enumerate() {
            self.bound.insert(*i, chunk.get_nth_param((bufs.len() + k) as u32).expect("index").into_int_value());
        }
        let first_size = bufs.len() + bound.len();
        for (k, (r, _)) in sizes.iter().enumerate() {
            self.size_vals.insert(*r, chunk.get_nth_param((first_size + k) as u32).expect("size").into_int_value());
        }
        let lo = chunk.get_nth_param((first_size + sizes.len()) as u32).expect("lo").into_int_value();
        let hi = chunk.get_nth_param((first_size + sizes.len() + 1) as u32).expect("hi").into_int_value();
        let saved_acc = self.acc_slot.take();
        if let Some((c, _)) = sum {
            let ct = self.ft(self.hir.tensors[c].elem);
            let acc = self.b.build_alloca(ct, "acc")?;
            self.b.build_store(acc, ct.const_zero())?;
            self.acc_slot = Some((c, acc));
        }
        let head = self.ctx.append_basic_block(chunk, "ploop");
        let exit = self.ctx.append_basic_block(chunk, "ploop.exit");
        let any = self.b.build_int_compare(IntPredicate::SLT, lo, hi, "any")?;
        self.b.build_conditional_branch(any, head, exit)?;
        self.b.position_at_end(head);
        let phi = self.b.build_phi(i64t, "pi")?;
        phi.add_incoming(&[(&lo, fe)]);
        let iv = phi.as_basic_value().into_int_value();
        self.bound.insert(pv, iv);
        self.nest_hinted(rest, hint, inner)?;
        let next = self.b.build_int_add(iv, self.i64c(1), "pn")?;
        let latch = self.b.get_insert_block().expect("positioned");
        phi.add_incoming(&[(&next, latch)]);
        let more = self.b.build_int_compare(IntPredicate::SLT, next, hi, "more")?;
        let br = self.b.build_conditional_branch(more, head, exit)?;
        if hint && rest.is_empty() {
            self.mark_vectorize(br);
        }
        self.b.position_at_end(exit);
        match self.acc_slot.take() {
            Some((_, acc)) => {
                let v = self.b.build_load(acc, "acc.v")?.into_float_value();
                let v = self.b.build_float_ext(v, f64t, "acc.d")?;
                self.b.build_return(Some(&v))?;
            }
            None => {
                self.b.build_return(None)?;
            }
        }
        self.acc_slot = saved_acc;
        self.func = saved.0;
        self.bufs = saved.1;
        self.bound = saved.2;
        self.size_vals = saved.3;
        self.b.position_at_end(saved_block);
        Ok(())
    }

    /// The trip count of `v`'s loop: its size, or that of the indices collapsed into it.
    pub(super) fn extent(&self, v: IndexId) -> Poly {
        self.extents.get(&v).cloned().unwrap_or_else(|| self.index_poly(v))
    }

    /// The stride of `v` in the reference `t[idx]` (summed over the positions it
    /// indexes: a diagonal walks both).
    pub(super) fn stride_in(&self, t: TensorId, idx: &[IndexId], v: IndexId) -> Poly {
        idx.iter().zip(&self.strides[&t]).filter(|(i, _)| **i == v).fold(Poly::zero(), |acc, (_, s)| acc.add(s))
    }

    /// [`Self::nest`], the innermost loop marked for vectorization when `hint`.
    pub(super) fn nest_hinted(
        &mut self,
        vars: &[IndexId],
        hint: bool,
        inner: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        match vars.split_first() {
            None => inner(self),
            Some((&v, rest)) => {
                let extent = self.poly_value(&self.extent(v))?;
                self.build_loop_hinted(extent, hint && rest.is_empty(), &mut |g, i| {
                    g.bound.insert(v, i);
                    g.nest_hinted(rest, hint, inner)?;
                    g.bound.remove(&v);
                    Ok(())
                })
            }
        }
    }

    /// The GETT plan of term `k` of `st` under the loops bound now, if it is one.
    pub(super) fn term_gett(&self, st: &Stmt, k: usize) -> Result<Option<(Vec<Operand>, GettPlan)>, CodegenError> {
        let hir = self.hir;
        let ops = crate::codegen::lower::term_operands(&st.rhs.terms[k]).map_err(err)?;
        let c = st.lhs.tensor;
        let vars = crate::codegen::lower::term_vars(&st.lhs.indices, &ops, |i| self.bound.contains_key(&i));
        if vars.iter().any(|&v| hir.index_size(v) == 0) {
            return Ok(None);
        }
        if ops.len() != 2 || !ops.iter().all(|o| o.func.is_none() && hir.tensors[o.tensor].elem == hir.tensors[c].elem)
        {
            return Ok(None);
        }
        Ok(self.gett_plan(st, &ops, &vars, &|t, idx, v| self.stride_in(t, idx, v)).map(|p| (ops, p)))
    }

    /// The term of `st` that may overwrite its freshly zeroed output, run first: the
    /// first GETT term that reads nothing of the output (every index with a size).
    /// The zeroing pass is then dropped and the other terms add to what it wrote
    /// (`W = V + T·U` is one GETT pass and one pass adding `V`, not a zeroing pass,
    /// an adding pass and a GETT reading and writing `W` again).
    pub(super) fn overwrite_gett(&self, st: &Stmt) -> Option<usize> {
        (0..st.rhs.terms.len()).find(|&k| {
            let reads_self = crate::codegen::lower::term_operands(&st.rhs.terms[k])
                .map(|ops| ops.iter().any(|o| o.tensor == st.lhs.tensor))
                .unwrap_or(true);
            !reads_self && matches!(self.term_gett(st, k), Ok(Some(_)))
        })
    }

    /// A term of `st` that term `k`'s overwriting GETT can start the target from
    /// instead of zero (`W = V + T·U`: `V` is read where each tile of `W` is
    /// first written, not in a pass of its own that reads and writes `W` again):
    /// one plain tensor, not the target, of its element type (f64 or f32), summed
    /// over nothing and laid out as the target over every unbound index.
    /// `TCC_GETT_INIT=0` (read when code is generated) turns it off, for measuring.
    pub(super) fn gett_init_term(&self, st: &Stmt, k: usize) -> Option<usize> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let elem = hir.tensors[c].elem;
        if !matches!(elem, ElemType::F64 | ElemType::F32)
            || std::env::var("TCC_GETT_INIT").is_ok_and(|v| v.trim() == "0")
        {
            return None;
        }
        let free: Vec<IndexId> = st.lhs.indices.iter().copied().filter(|i| !self.bound.contains_key(i)).collect();
        (0..st.rhs.terms.len()).filter(|&j| j != k).find(|&j| {
            let Ok(ops) = crate::codegen::lower::term_operands(&st.rhs.terms[j]) else { return false };
            let [d] = ops.as_slice() else { return false };
            d.func.is_none()
                && d.tensor != c
                && hir.tensors[d.tensor].elem == elem
                && d.indices.iter().all(|i| self.bound.contains_key(i) || free.contains(i))
                && free
                    .iter()
                    .all(|&v| self.stride_in(d.tensor, &d.indices, v) == self.stride_in(c, &st.lhs.indices, v))
        })
    }

    /// Whether every term of `st` can share one nest over its freshly zeroed target
    /// that stores instead of adding ([`Self::shared_nest_terms`] with `store`): no
    /// special statement, no parallel sum's private accumulator in place.
    pub(super) fn store_nest(&self, st: &Stmt) -> bool {
        !st.rhs.terms.is_empty()
            && self.acc_slot.is_none()
            && crate::tir::materialize::special_stmt(st).is_none()
            && self.shared_nest_run(st, 0) == st.rhs.terms.len()
    }

    /// Terms `ks` of `st`, in order, adding into the target: runs that can share
    /// one nest ([`Self::shared_nest_run`]) in one pass, the others one by one.
    pub(super) fn terms_in(&mut self, st: &Stmt, ks: std::ops::Range<usize>) -> Result<(), CodegenError> {
        let mut term = ks.start;
        while term < ks.end {
            let run = self.shared_nest_run(st, term).min(ks.end - term);
            if run >= 2 {
                self.shared_nest_terms(st, term..term + run, false)?;
                term += run;
            } else {
                self.term(st, term, false)?;
                term += 1;
            }
        }
        Ok(())
    }

    /// How many terms of `st` from term `k` on can share one loop nest over the
    /// target's free indices, so that the target is read and written once for all of
    /// them instead of once per term: terms that are not GETT calls, do not read the
    /// target, and sum over at most [`SHARED_NEST_MAX_SUM`] iterations per element —
    /// a sum of permutations (`X[a,b,i,j] - X[b,a,i,j] - …`), broadcast terms, and
    /// many short products into one output (`C[i,k] += A0[i,j]*B[j,k] + …`, which as
    /// one nest per term is also hundreds of loop nests for LLVM). 0 or 1: no group.
    pub(super) fn shared_nest_run(&self, st: &Stmt, k: usize) -> usize {
        let hir = self.hir;
        let free: Vec<IndexId> = st.lhs.indices.iter().copied().filter(|i| !self.bound.contains_key(i)).collect();
        let distinct = free.iter().enumerate().all(|(p, i)| !free[..p].contains(i));
        if free.is_empty() || !distinct {
            return 0;
        }
        let fits = |t: usize| -> bool {
            let Ok(ops) = crate::codegen::lower::term_operands(&st.rhs.terms[t]) else { return false };
            let mut summed: Vec<IndexId> = Vec::new();
            for &i in ops.iter().flat_map(|o| o.indices.iter()) {
                if !self.bound.contains_key(&i) && !free.contains(&i) && !summed.contains(&i) {
                    summed.push(i);
                }
            }
            let sum: f64 = summed.iter().map(|&i| hir.index_size(i) as f64).product();
            ops.iter().all(|o| o.tensor != st.lhs.tensor)
                && sum <= SHARED_NEST_MAX_SUM
                && !matches!(self.term_gett(st, t), Ok(Some(_)))
        };
        (k..st.rhs.terms.len()).take_while(|&t| fits(t)).count()
    }

    /// Terms `ks` of `st` (a [`Self::shared_nest_run`]) in one loop nest over the
    /// target's free indices, in its storage order (the last innermost: contiguous
    /// writes), the outermost on threads when there is enough work. Element-wise
    /// terms are added with one load and store of the target element; a term that
    /// sums runs its short sum inside, sequentially.
    ///
    /// With `store` (the target's region was just zeroed, the zeroing dropped) the
    /// element-wise terms' sum is stored, not added: a copy such as `R = V` is one
    /// pass that writes `R`, not a zeroing pass and a pass reading and writing it.
    pub(super) fn shared_nest_terms(
        &mut self,
        st: &Stmt,
        ks: std::ops::Range<usize>,
        store: bool,
    ) -> Result<(), CodegenError> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let order: Vec<IndexId> = st.lhs.indices.iter().copied().filter(|i| !self.bound.contains_key(i)).collect();
        if order.iter().any(|&v| hir.index_size(v) == 0) {
            return Ok(());
        }
        let mut elementwise = Vec::new();
        let mut summing = Vec::new();
        let mut inner_work = 0.0;
        for k in ks {
            let ops = crate::codegen::lower::term_operands(&st.rhs.terms[k]).map_err(err)?;
            let vars = crate::codegen::lower::term_vars(&st.lhs.indices, &ops, |i| {
                self.bound.contains_key(&i) || order.contains(&i)
            });
            if vars.is_empty() {
                elementwise.push((st.rhs.terms[k].coef, ops));
                inner_work += 1.0;
            } else {
                inner_work += vars.iter().map(|&v| hir.index_size(v) as f64).product::<f64>();
                summing.push(k);
            }
        }
        let work: f64 = order.iter().map(|&v| hir.index_size(v) as f64).product::<f64>() * inner_work;
        let par = work >= self.parallel_min && order.len() >= 2 && hir.index_size(order[0]) >= 2;
        let lt = self.ft(hir.tensors[c].elem);
        let lhs_idx = st.lhs.indices.clone();
        self.nest_parallel(&order, par, false, None, &mut |g| {
            let mut total: Option<FloatValue> = None;
            for (coef, ops) in &elementwise {
                let prod = g.product(*coef, ops, lt)?;
                total = Some(match total {
                    None => prod,
                    Some(t) => g.b.build_float_add(t, prod, "t")?,
                });
            }
            if store {
                let off = g.offset(c, &lhs_idx)?;
                let p = g.elem_ptr(c, off)?;
                g.b.build_store(p, total.unwrap_or(lt.const_zero()))?;
            } else if let Some(total) = total {
                let off = g.offset(c, &lhs_idx)?;
                let p = g.elem_ptr(c, off)?;
                let old = g.b.build_load(p, "c")?.into_float_value();
                let new = g.b.build_float_add(old, total, "c.new")?;
                g.b.build_store(p, new)?;
            }
            // Each short sum: the usual term loops over its summed indices only (the
            // target's are bound here), on this thread.
            let parallel_min = std::mem::replace(&mut g.parallel_min, f64::INFINITY);
            let result = summing.iter().try_for_each(|&k| g.term(st, k, false));
            g.parallel_min = parallel_min;
            result
        })
    }

    /// `coef` times the operands at the current loop indices (each converted to the
    /// target's type `lt`, then its function applied), in the target's type.
    fn product(&mut self, coef: f64, ops: &[Operand], lt: FloatType<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let hir = self.hir;
        let mut prod: Option<FloatValue> = if coef == 1.0 { None } else { Some(lt.const_float(coef)) };
        for o in ops {
            let off = self.offset(o.tensor, &o.indices)?;
            let p = self.elem_ptr(o.tensor, off)?;
            let mut v = self.b.build_load(p, "x")?.into_float_value();
            let ot = self.ft(hir.tensors[o.tensor].elem);
            if ot != lt {
                v = self.b.build_float_cast(v, lt, "cvt")?;
            }
            if let Some(func) = o.func {
                v = self.apply(func, v, lt)?;
            }
            prod = Some(match prod {
                None => v,
                Some(p) => self.b.build_float_mul(p, v, "m")?,
            });
        }
        Ok(prod.unwrap_or_else(|| lt.const_float(coef)))
    }

    pub(super) fn term(&mut self, st: &Stmt, k: usize, overwrite: bool) -> Result<(), CodegenError> {
        let hir = self.hir;
        let term = &st.rhs.terms[k];
        if let Some((ops, plan)) = self.term_gett(st, k)? {
            return self.gett(st, term.coef, &ops, plan, overwrite);
        }
        debug_assert!(!overwrite, "overwrite is only planned for GETT terms");
        let ops = crate::codegen::lower::term_operands(term).map_err(err)?;
        let c = st.lhs.tensor;
        let vars = crate::codegen::lower::term_vars(&st.lhs.indices, &ops, |i| self.bound.contains_key(&i));
        if vars.iter().any(|&v| hir.index_size(v) == 0) {
            return Ok(());
        }
        // Stride of each var in each reference (lhs first), at the assumed sizes:
        // it only orders loops.
        let stride_in = |t: TensorId, idx: &[IndexId], v: IndexId| -> u64 { self.stride_in(t, idx, v).assumed(hir) };
        // Loop order: larger strides outside; innermost the index whose accesses
        // are the most contiguous — a strided read costs 2, a strided write 3, a
        // sum (the written element fixed) 1, as it needs a reassociated reduction;
        // ties go to the larger extent.
        let mut refs: Vec<(TensorId, &[IndexId])> = vec![(c, st.lhs.indices.as_slice())];
        refs.extend(ops.iter().map(|o| (o.tensor, o.indices.as_slice())));
        let score = |v: IndexId| -> u64 {
            refs.iter().map(|(t, idx)| stride_in(*t, idx, v)).filter(|&s| s > 0).min().unwrap_or(u64::MAX)
        };
        let inner_cost = |v: IndexId| -> (u64, std::cmp::Reverse<usize>) {
            let mut cost = match stride_in(c, &st.lhs.indices, v) {
                0 => 1,
                1 => 0,
                _ => 3,
            };
            for o in &ops {
                cost += match stride_in(o.tensor, &o.indices, v) {
                    0 | 1 => 0,
                    _ => 2,
                };
            }
            (cost, std::cmp::Reverse(hir.index_size(v)))
        };
        // Outer to inner by stride in the largest tensor (it moves the most
        // memory), then in the next largest, …; `score` breaks ties.
        let mut by_size: Vec<(TensorId, &[IndexId])> = refs.clone();
        by_size.sort_by_key(|(t, _)| std::cmp::Reverse(hir.shape(*t).iter().map(|&n| n as u64).product::<u64>()));
        let mut order = vars.clone();
        order.sort_by_key(|&v| {
            std::cmp::Reverse((by_size.iter().map(|(t, idx)| stride_in(*t, idx, v)).collect::<Vec<_>>(), score(v)))
        });
        let mut reduction_inner = false;
        if let Some(&inner) = order.iter().min_by_key(|&&v| inner_cost(v)) {
            order.retain(|&v| v != inner);
            order.push(inner);
            reduction_inner = !st.lhs.indices.contains(&inner);
        }
        let lt = self.ft(hir.tensors[c].elem);
        let coef = term.coef;
        let lhs_idx = st.lhs.indices.clone();
        // Threads: the outermost loop over a written index, when there is enough work.
        let work: f64 = order.iter().map(|&v| hir.index_size(v) as f64).product();
        let par = if work >= self.parallel_min && order.len() >= 2 {
            order[..order.len() - 1].iter().position(|v| st.lhs.indices.contains(v) && hir.index_size(*v) >= 2)
        } else {
            None
        };
        if let Some(p) = par {
            let v = order.remove(p);
            order.insert(0, v);
        }
        let (order, zeroed) = collapse(&order, &refs, &|t, idx, v| self.stride_in(t, idx, v), &|v| self.index_poly(v));
        // Nothing written is left to split: a (long) sum into one element is
        // split instead, each thread summing a range.
        let one_element = !order.iter().any(|v| st.lhs.indices.contains(v));
        let sum_par = par.is_none()
            && one_element
            && work >= self.parallel_min
            && order.first().is_some_and(|&v| hir.index_size(v) >= 2);
        let zero = self.i64c(0);
        for (v, n) in &zeroed {
            self.bound.insert(*v, zero);
            self.extents.insert(n.0, n.1.clone());
        }
        let sum = sum_par.then_some((c, st.lhs.indices.as_slice()));
        let result = self.nest_parallel(&order, par.is_some() || sum_par, reduction_inner, sum, &mut |g| {
            let prod = g.product(coef, &ops, lt)?;
            let p = match g.acc_slot {
                Some((t, acc)) if t == c => acc,
                _ => {
                    let off = g.offset(c, &lhs_idx)?;
                    g.elem_ptr(c, off)?
                }
            };
            let old = g.b.build_load(p, "c")?.into_float_value();
            let new = g.b.build_float_add(old, prod, "c.new")?;
            g.b.build_store(p, new)?;
            Ok(())
        });
        for (v, n) in &zeroed {
            self.bound.remove(v);
            self.extents.remove(&n.0);
        }
        result
    }

    /// A `max`/`min` or `where` statement ([`Special`]): one loop nest over the
    /// target's unbound indices (threads on the outermost when there is enough
    /// work); a reduction keeps its running value in a register over an inner nest
    /// of the reduced indices, as [`Extremum::combine`] (`maxnum`/`minnum`).
    pub(super) fn special(&mut self, st: &Stmt, sp: Special<'_>) -> Result<(), CodegenError> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let order: Vec<IndexId> = st.lhs.indices.iter().copied().filter(|i| !self.bound.contains_key(i)).collect();
        let inner: Vec<IndexId> = match &sp {
            Special::Reduce { arg, .. } => arg
                .indices
                .iter()
                .copied()
                .filter(|i| !st.lhs.indices.contains(i) && !self.bound.contains_key(i))
                .collect(),
            Special::Select { .. } | Special::Gather { .. } => Vec::new(),
        };
        if order.iter().chain(&inner).any(|&v| hir.index_size(v) == 0) {
            return Ok(());
        }
        let work: f64 = order.iter().chain(&inner).map(|&v| hir.index_size(v) as f64).product();
        let par = work >= self.parallel_min && order.first().is_some_and(|&v| hir.index_size(v) >= 2);
        let lt = self.ft(hir.tensors[c].elem);
        let lhs_idx = st.lhs.indices.clone();
        let accumulate = st.accumulate;
        self.nest_parallel(&order, par, inner.is_empty(), None, &mut |g| {
            let v = match &sp {
                Special::Reduce { op, arg } => {
                    let acc = g.entry_alloca(lt)?;
                    g.b.build_store(acc, lt.const_float(op.identity()))?;
                    let combine = g.intrinsic(if *op == Extremum::Max { "llvm.maxnum" } else { "llvm.minnum" }, lt)?;
                    g.nest(&inner, &mut |g| {
                        let x = g.load_as(arg, lt)?;
                        let old = g.b.build_load(acc, "r")?.into_float_value();
                        let new = g.call1(combine, &[old, x])?;
                        g.b.build_store(acc, new)?;
                        Ok(())
                    })?;
                    g.b.build_load(acc, "r.v")?.into_float_value()
                }
                Special::Select { cmp, args } => {
                    let vals: Vec<FloatValue> = args.iter().map(|r| g.load_as(r, lt)).collect::<Result<_, _>>()?;
                    let pred = crate::codegen::float_predicate(*cmp);
                    let cond = g.b.build_float_compare(pred, vals[0], vals[1], "cmp")?;
                    g.b.build_select(cond, vals[2], vals[3], "sel")?.into_float_value()
                }
                Special::Gather { arg } => g.affine_load(arg, lt)?,
            };
            let off = g.offset(c, &lhs_idx)?;
            let p = g.elem_ptr(c, off)?;
            let v = if accumulate {
                let old = g.b.build_load(p, "c")?.into_float_value();
                g.b.build_float_add(old, v, "c.new")?
            } else {
                v
            };
            g.b.build_store(p, v)?;
            Ok(())
        })
    }

    /// The element of `a` (`I[n,c,y+r,x+s]`) at the current loop indices, converted
    /// to `t`: Σ over dimensions of stride × (constant + Σ coefficient × index).
    fn affine_load(&mut self, a: &AffineRef, t: FloatType<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let st = self.strides[&a.tensor].clone();
        let mut off = self.i64c(0);
        for (sub, s) in a.subs.iter().zip(&st) {
            if s.is_zero() {
                continue;
            }
            // `sema` proves every subscript within its dimension (≥ 0).
            let mut v = self.ctx.i64_type().const_int(sub.constant as u64, true);
            for &(coef, i) in &sub.terms {
                let x = self.bound[&i];
                let x = if coef == 1 { x } else { self.b.build_int_mul(x, self.i64c(coef as u64), "a")? };
                v = self.b.build_int_add(v, x, "a")?;
            }
            let term = if s.as_const() == Some(1) { v } else { self.b.build_int_mul(v, self.poly_value(s)?, "a")? };
            off = self.b.build_int_add(off, term, "a")?;
        }
        let p = self.elem_ptr(a.tensor, off)?;
        let v = self.b.build_load(p, "x")?.into_float_value();
        if self.ft(self.hir.tensors[a.tensor].elem) != t {
            return Ok(self.b.build_float_cast(v, t, "cvt")?);
        }
        Ok(v)
    }

    /// The element of `r` at the current loop indices, converted to `t`.
    fn load_as(&mut self, r: &TensorRef, t: FloatType<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let off = self.offset(r.tensor, &r.indices)?;
        let p = self.elem_ptr(r.tensor, off)?;
        let v = self.b.build_load(p, "x")?.into_float_value();
        if self.ft(self.hir.tensors[r.tensor].elem) != t {
            return Ok(self.b.build_float_cast(v, t, "cvt")?);
        }
        Ok(v)
    }

    /// A stack slot in the current function's entry block (not in a loop, where
    /// every iteration would grow the stack).
    fn entry_alloca(&self, t: FloatType<'ctx>) -> Result<PointerValue<'ctx>, CodegenError> {
        let entry = self.current_fn().get_first_basic_block().expect("entry");
        let eb = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => eb.position_before(&i),
            None => eb.position_at_end(entry),
        }
        Ok(eb.build_alloca(t, "acc")?)
    }

    pub(super) fn intrinsic(&self, name: &str, t: FloatType<'ctx>) -> Result<FunctionValue<'ctx>, CodegenError> {
        Intrinsic::find(name)
            .and_then(|i| i.get_declaration(self.module, &[t.into()]))
            .ok_or_else(|| err(format!("LLVM intrinsic {name} not found")))
    }

    pub(super) fn call1(
        &self,
        f: FunctionValue<'ctx>,
        args: &[FloatValue<'ctx>],
    ) -> Result<FloatValue<'ctx>, CodegenError> {
        let a: Vec<BasicMetadataValueEnum> = args.iter().map(|&x| x.into()).collect();
        Ok(self.b.build_call(f, &a, "f")?.try_as_basic_value().left().expect("value").into_float_value())
    }

    pub(super) fn libm(&self, name: &str, t: FloatType<'ctx>) -> FunctionValue<'ctx> {
        let n = if t == self.ctx.f32_type() { format!("{name}f") } else { name.to_string() };
        self.declare(&n, Some(t.into()), &[t.into()])
    }

    /// `exp(x)` as straight-line arithmetic that LLVM's vectorizer can widen (a
    /// call of `llvm.exp` stays one scalar libm call per element on x86: 3.1 M of
    /// them were 9 ms of the attention block at 2 threads). In f64 (f32 is widened
    /// and rounded once at the end): `k = rint(x·log2 e)` by the 1.5·2⁵² trick,
    /// `r = x − k·ln2` with ln 2 split in two (Cody–Waite; `k·ln2_hi` is exact),
    /// `eʳ` by its Taylor polynomial of degree 13 (truncation below 5e-18 on
    /// |r| ≤ ln2/2), times `2^k` built from exponent bits in two halves, so
    /// results that overflow are ∞ and those that underflow go through the
    /// subnormals to 0. `x` is clamped to [-746, 710] first (beyond, the result
    /// is 0 or ∞ anyway) and a NaN is passed through. Within 2 ulp of libm's
    /// `exp` (`codegen::tests::inline_exp_matches_libm`).
    pub(super) fn exp(&self, x: FloatValue<'ctx>, t: FloatType<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let b = &self.b;
        let f64t = self.ctx.f64_type();
        let i64t = self.ctx.i64_type();
        let wide = t != f64t;
        let x = if wide { b.build_float_ext(x, f64t, "x64")? } else { x };
        let c = |v: f64| f64t.const_float(v);
        let lo = self.call1(self.intrinsic("llvm.maxnum", f64t)?, &[x, c(-746.0)])?;
        let xc = self.call1(self.intrinsic("llvm.minnum", f64t)?, &[lo, c(710.0)])?;
        const MAGIC: f64 = 6755399441055744.0; // 1.5 · 2^52
        let kb = b.build_float_add(b.build_float_mul(xc, c(std::f64::consts::LOG2_E), "xl")?, c(MAGIC), "kb")?;
        let k = b.build_float_sub(kb, c(MAGIC), "k")?;
        let ln2_hi = f64::from_bits(0x3FE6_2E42_FEE0_0000);
        let ln2_lo = f64::from_bits(0x3DEA_39EF_3579_3C76);
        let r = b.build_float_sub(xc, b.build_float_mul(k, c(ln2_hi), "khi")?, "r0")?;
        let r = b.build_float_sub(r, b.build_float_mul(k, c(ln2_lo), "klo")?, "r")?;
        // Horner: Σ_{n ≤ 13} rⁿ/n!
        let mut fact = [1.0f64; 14];
        for n in 1..14 {
            fact[n] = fact[n - 1] * n as f64;
        }
        // `llvm.fmuladd`: one fused multiply-add where the target has it.
        let fma = self.intrinsic("llvm.fmuladd", f64t)?;
        let mut p = c(1.0 / fact[13]);
        for n in (0..13).rev() {
            p = self.call1(fma, &[p, r, c(1.0 / fact[n])])?;
        }
        // 2^k = 2^k1 · 2^k2 with k1 = floor(k/2), k2 = k − k1, each a normal power.
        let k1 = self.call1(self.intrinsic("llvm.floor", f64t)?, &[b.build_float_mul(k, c(0.5), "kh")?])?;
        let k2 = b.build_float_sub(k, k1, "k2")?;
        let pow2 = |kf: FloatValue<'ctx>| -> Result<FloatValue<'ctx>, CodegenError> {
            let m = b.build_bit_cast(b.build_float_add(kf, c(MAGIC), "km")?, i64t, "kmb")?.into_int_value();
            let e = b.build_int_add(m, i64t.const_int((1023i64 - MAGIC.to_bits() as i64) as u64, true), "e")?;
            let bits = b.build_left_shift(e, i64t.const_int(52, false), "eb")?;
            Ok(b.build_bit_cast(bits, f64t, "p2")?.into_float_value())
        };
        let y = b.build_float_mul(b.build_float_mul(p, pow2(k1)?, "y1")?, pow2(k2)?, "y")?;
        let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "nan")?;
        let y = b.build_select(nan, x, y, "exp")?.into_float_value();
        Ok(if wide { b.build_float_trunc(y, t, "exp32")? } else { y })
    }

    /// The element-wise function, as [`Func::apply`] defines it.
    pub(super) fn apply(
        &self,
        func: Func,
        x: FloatValue<'ctx>,
        t: FloatType<'ctx>,
    ) -> Result<FloatValue<'ctx>, CodegenError> {
        let one = t.const_float(1.0);
        let b = &self.b;
        Ok(match func {
            Func::Exp => self.exp(x, t)?,
            // The lowering of complex types leaves only real values here.
            Func::Conj => x,
            Func::Log => self.call1(self.intrinsic("llvm.log", t)?, &[x])?,
            Func::Sqrt => self.call1(self.intrinsic("llvm.sqrt", t)?, &[x])?,
            Func::Abs => self.call1(self.intrinsic("llvm.fabs", t)?, &[x])?,
            Func::Recip => b.build_float_div(one, x, "recip")?,
            Func::Relu => self.call1(self.intrinsic("llvm.maxnum", t)?, &[x, t.const_zero()])?,
            Func::Tanh => self.call1(self.libm("tanh", t), &[x])?,
            Func::Sigmoid | Func::Silu => {
                let neg = b.build_float_neg(x, "neg")?;
                let e = self.exp(neg, t)?;
                let d = b.build_float_add(one, e, "den")?;
                let num = if func == Func::Sigmoid { one } else { x };
                b.build_float_div(num, d, "sig")?
            }
            Func::Gelu => {
                let x3 = b.build_float_mul(b.build_float_mul(x, x, "x2")?, x, "x3")?;
                let inner = b.build_float_add(x, b.build_float_mul(t.const_float(0.044715), x3, "a")?, "in")?;
                let k = (2.0 / std::f64::consts::PI).sqrt();
                let th = self.call1(self.libm("tanh", t), &[b.build_float_mul(t.const_float(k), inner, "s")?])?;
                let h = b.build_float_mul(t.const_float(0.5), x, "h")?;
                b.build_float_mul(h, b.build_float_add(one, th, "1p")?, "gelu")?
            }
        })
    }
}

/// Merges adjacent loops of `order` (outer `u`, inner `v`) that every reference
/// walks as one: `stride(u) == stride(v) · size(v)` in each, for every runtime size
/// (the polynomials are compared, not their assumed values). The merged loop is
/// `v`'s, running `size(u)·size(v)` times, while `u` stays bound to 0 — so every
/// offset is unchanged. Long inner loops vectorize better (e.g. `pqrs,rs->pq`
/// becomes a 2-loop GEMV). Returns the new order and, per removed index, the
/// index it went into with the merged extent.
#[allow(clippy::type_complexity)]
pub(super) fn collapse(
    order: &[IndexId],
    refs: &[(TensorId, &[IndexId])],
    stride: &dyn Fn(TensorId, &[IndexId], IndexId) -> Poly,
    size: &dyn Fn(IndexId) -> Poly,
) -> (Vec<IndexId>, Vec<(IndexId, (IndexId, Poly))>) {
    let mut out: Vec<(IndexId, Poly)> = Vec::new();
    let mut removed: Vec<(IndexId, IndexId)> = Vec::new();
    for &v in order {
        let n = size(v);
        if let Some((u, m)) = out.last().cloned() {
            // `u`'s stride is its own (it is never a merged loop's inner index).
            let ok = refs.iter().all(|(t, idx)| stride(*t, idx, u) == stride(*t, idx, v).mul(&n));
            if ok && !n.is_zero() && !m.is_zero() {
                out.pop();
                // Indices merged earlier into `u` now live in `v`'s loop too.
                for (_, into) in removed.iter_mut() {
                    if *into == u {
                        *into = v;
                    }
                }
                removed.push((u, v));
                out.push((v, m.mul(&n)));
                continue;
            }
        }
        out.push((v, n));
    }
    // Each merged loop's final extent.
    let ext: HashMap<IndexId, Poly> = out.iter().cloned().collect();
    let removed = removed.into_iter().map(|(u, into)| (u, (into, ext[&into].clone()))).collect();
    (out.into_iter().map(|(v, _)| v).collect(), removed)
}
