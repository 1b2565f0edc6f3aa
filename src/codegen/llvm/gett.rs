//! Binary contractions as GETT calls into the runtime, and the register-blocked
//! micro-kernel the compiler generates for them.

use super::*;

impl<'ctx> Gen<'_, 'ctx> {
    /// Index groups of a binary contraction, or `None` when plain loops are better.
    pub(super) fn gett_plan(
        &self,
        st: &Stmt,
        ops: &[Operand],
        vars: &[IndexId],
        stride_in: &dyn Fn(TensorId, &[IndexId], IndexId) -> Poly,
    ) -> Option<GettPlan> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        // Choices are made at the assumed sizes; the polynomials travel along.
        let build = |a: &Operand, b: &Operand| -> (Vec<[i64; 5]>, Vec<[Poly; 4]>) {
            vars.iter()
                .map(|&v| {
                    let (pa, pb, pc) = (
                        stride_in(a.tensor, &a.indices, v),
                        stride_in(b.tensor, &b.indices, v),
                        stride_in(c, &st.lhs.indices, v),
                    );
                    let (sa, sb, sc) = (pa.assumed(hir), pb.assumed(hir), pc.assumed(hir));
                    let size = self.index_poly(v);
                    let (ia, ib, ic) = (a.indices.contains(&v), b.indices.contains(&v), st.lhs.indices.contains(&v));
                    let kind = match (ic, ia, ib) {
                        (true, true, true) => 0,
                        (true, true, false) => 1,
                        (true, false, true) => 2,
                        (false, _, _) => 3,
                        (true, false, false) => 0,
                    };
                    ([kind, hir.index_size(v) as i64, sa as i64, sb as i64, sc as i64], [size, pa, pb, pc])
                })
                .unzip()
        };
        let mut swap = false;
        let (mut dims, mut polys) = build(&ops[0], &ops[1]);
        // The written tensor's most contiguous index should be a row (m) index.
        if let Some(d) = dims.iter().filter(|d| d[0] == 1 || d[0] == 2).min_by_key(|d| d[4]) {
            if d[0] == 2 {
                swap = true;
                (dims, polys) = build(&ops[1], &ops[0]);
            }
        }
        let size = |k: i64| -> f64 { dims.iter().filter(|d| d[0] == k).map(|d| d[1] as f64).product() };
        let (m, n, k) = (size(1), size(2), size(3));
        // The rule the fusion time model prices nests by (one function for both).
        let worth = crate::lir::cost::gemm_worth(m, n, k, self.gemm_min);
        if !worth {
            return None;
        }
        // Within a group: larger strides first (the last index varies fastest).
        // In the `k` group, an index of stride 1 in A or B goes last (smaller
        // of its two strides first, then the larger): then that operand's panels
        // are packed by the transposing copy along `k` even when its rows are
        // not contiguous (W_mbej's `B[a,e,i,m]`, rows `a, i` and `k = e, m`).
        let mut rows: Vec<([i64; 5], [Poly; 4])> = dims.into_iter().zip(polys).collect();
        rows.sort_by_key(|(d, _)| {
            let s = match d[0] {
                0..=2 => (d[4], 0),
                _ => (d[2].min(d[3]), d[2].max(d[3])),
            };
            (d[0], std::cmp::Reverse(s))
        });
        let dims = rows.into_iter().map(|(d, [size, sa, sb, sc])| GettDim { kind: d[0], size, sa, sb, sc }).collect();
        Some(GettPlan { dims, swap })
    }

    pub(super) fn gett(
        &mut self,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        plan: GettPlan,
        overwrite: bool,
    ) -> Result<(), CodegenError> {
        self.gett_call(st, coef, ops, plan, overwrite, None, None)
    }

    /// Term `k` of `st` as a GETT overwriting the target from term `j`, a copy
    /// of a tensor laid out as the target ([`Self::gett_init_term`]): one pass
    /// over the target for both (`tcc_rt_gett_init_*`).
    pub(super) fn gett_from(&mut self, st: &Stmt, k: usize, j: usize) -> Result<(), CodegenError> {
        let (ops, plan) = self.term_gett(st, k)?.ok_or_else(|| err("internal: an overwriting term is no GETT"))?;
        let d = crate::codegen::lower::term_operands(&st.rhs.terms[j]).map_err(err)?;
        let [d] = d.as_slice() else { return Err(err("internal: a GETT's initial term is not one tensor")) };
        let init = GettInit { tensor: d.tensor, indices: d.indices.clone(), beta: st.rhs.terms[j].coef };
        self.gett_call(st, st.rhs.terms[k].coef, &ops, plan, true, None, Some(init))
    }

    /// The GETT of `st` (one term, overwriting its target) with the map `map`
    /// (`P = c·f(S)`, see [`super::epilogue`]) as its epilogue, writing `P`.
    pub(super) fn gett_with_epilogue(&mut self, st: &Stmt, map: &Stmt) -> Result<(), CodegenError> {
        let (ops, plan) = self.term_gett(st, 0)?.ok_or_else(|| err("internal: an epilogue's GETT is no GETT"))?;
        let mops = crate::codegen::lower::term_operands(&map.rhs.terms[0]).map_err(err)?;
        let elem = self.hir.tensors[st.lhs.tensor].elem;
        let epi = self.epilogue_fn(elem, mops[0].func, map.rhs.terms[0].coef)?;
        self.gett_call(st, st.rhs.terms[0].coef, &ops, plan, true, Some((epi, map.lhs.tensor)), None)
    }

    /// The runtime call of a GETT; with `epi`, through `tcc_rt_gett_epi_*`, the
    /// output going to the epilogue's target (same indices and layout); with
    /// `init`, through `tcc_rt_gett_init_*`, overwriting from `beta·D`.
    #[allow(clippy::too_many_arguments)]
    fn gett_call(
        &mut self,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        plan: GettPlan,
        overwrite: bool,
        epi: Option<(FunctionValue<'ctx>, TensorId)>,
        init: Option<GettInit>,
    ) -> Result<(), CodegenError> {
        debug_assert!(init.is_none() || (overwrite && epi.is_none()), "a GETT from D overwrites, without epilogue");
        let hir = self.hir;
        let c = st.lhs.tensor;
        let elem = hir.tensors[c].elem;
        let (nv, nr) = self.tile_shape(elem, &plan.dims);
        let uk = self.ukernel_shaped(elem, nv, nr)?;
        let (a, b) = if plan.swap { (&ops[1], &ops[0]) } else { (&ops[0], &ops[1]) };
        let i64t = self.ctx.i64_type();
        let row =
            |d: &[i64; 5]| i64t.const_array(&d.iter().map(|&x| i64t.const_int(x as u64, true)).collect::<Vec<_>>());
        let arr_t = i64t.array_type(5);
        let zero = self.i64c(0);
        let consts: Option<Vec<[i64; 5]>> = plan
            .dims
            .iter()
            .map(|d| {
                let [n, a, b, c] = [&d.size, &d.sa, &d.sb, &d.sc].map(|p| p.as_const().map(|x| x as i64));
                Some([d.kind, n?, a?, b?, c?])
            })
            .collect();
        let dims_ptr = match consts {
            // Every size known: a constant table.
            Some(rows) => {
                let rows: Vec<_> = rows.iter().map(row).collect();
                let name = self.name("gett.dims");
                let g_dims = self.module.add_global(arr_t.array_type(rows.len() as u32), None, &name);
                g_dims.set_initializer(&arr_t.const_array(&rows));
                g_dims.set_constant(true);
                g_dims.set_linkage(Linkage::Private);
                unsafe { self.b.build_in_bounds_gep(g_dims.as_pointer_value(), &[zero, zero, zero], "dims")? }
            }
            // Runtime sizes: the table is filled where the call is made, in a stack
            // slot of the function's entry block.
            None => {
                let f = self.current_fn();
                let entry = f.get_first_basic_block().expect("entry");
                let eb = self.ctx.create_builder();
                match entry.get_first_instruction() {
                    Some(i) => eb.position_before(&i),
                    None => eb.position_at_end(entry),
                }
                let slot = eb.build_alloca(arr_t.array_type(plan.dims.len() as u32), "gett.dims")?;
                for (r, d) in plan.dims.iter().enumerate() {
                    let vals = [
                        self.i64c(d.kind as u64),
                        self.poly_value(&d.size)?,
                        self.poly_value(&d.sa)?,
                        self.poly_value(&d.sb)?,
                        self.poly_value(&d.sc)?,
                    ];
                    for (k, v) in vals.into_iter().enumerate() {
                        let p = unsafe {
                            self.b.build_in_bounds_gep(
                                slot,
                                &[zero, self.i64c(r as u64), self.i64c(k as u64)],
                                "dim",
                            )?
                        };
                        self.b.build_store(p, v)?;
                    }
                }
                unsafe { self.b.build_in_bounds_gep(slot, &[zero, zero, zero], "dims")? }
            }
        };
        let (kc, mc, nc) = cache_blocks(elem);
        // A deeper `k` block halves the passes over C (each reads and writes the
        // C tile): measured 4-10 % faster on 2500³ and 6400×900×6400 f64 GETTs
        // on a 48 KiB-L1 core. The runtime lowers it to what its L1 holds.
        let kc = if elem == ElemType::F64 { 2 * kc } else { kc };
        let params = [uk.mr as i64, uk.nr as i64, mc, nc, kc];
        let name = self.name("gett.params");
        let g_par = self.module.add_global(arr_t, None, &name);
        g_par.set_initializer(&row(&params));
        g_par.set_constant(true);
        g_par.set_linkage(Linkage::Private);
        let par_ptr = unsafe { self.b.build_in_bounds_gep(g_par.as_pointer_value(), &[zero, zero], "params")? };
        let pa = self.elem_ptr(a.tensor, self.partial_offset(a.tensor, &a.indices)?)?;
        let pb = self.elem_ptr(b.tensor, self.partial_offset(b.tensor, &b.indices)?)?;
        let target = epi.map_or(c, |e| e.1);
        debug_assert_eq!(self.strides[&target], self.strides[&c], "an epilogue's target has the GETT's layout");
        let pc = self.elem_ptr(target, self.partial_offset(target, &st.lhs.indices)?)?;
        let ft = self.ft(elem);
        let tp = ft.ptr_type(AddressSpace::default());
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let i64p = i64t.ptr_type(AddressSpace::default());
        let wide = matches!(elem, ElemType::F64 | ElemType::C128);
        let fname = match (wide, epi.is_some(), init.is_some()) {
            (true, false, false) => "tcc_rt_gett_f64",
            (false, false, false) => "tcc_rt_gett_f32",
            (true, true, _) => "tcc_rt_gett_epi_f64",
            (false, true, _) => "tcc_rt_gett_epi_f32",
            (true, false, true) => "tcc_rt_gett_init_f64",
            (false, false, true) => "tcc_rt_gett_init_f32",
        };
        let mut params: Vec<BasicMetadataTypeEnum> =
            vec![tp.into(), tp.into(), tp.into(), ft.into(), i64p.into(), i64t.into(), i64p.into(), i8p.into()];
        let ukp = self.b.build_pointer_cast(uk.f.as_global_value().as_pointer_value(), i8p, "uk")?;
        let mut args: Vec<BasicMetadataValueEnum> = vec![
            pa.into(),
            pb.into(),
            pc.into(),
            ft.const_float(coef).into(),
            dims_ptr.into(),
            self.i64c(plan.dims.len() as u64).into(),
            par_ptr.into(),
            ukp.into(),
        ];
        match (epi, init) {
            (Some((f, _)), _) => {
                params.push(i8p.into());
                args.push(self.b.build_pointer_cast(f.as_global_value().as_pointer_value(), i8p, "epi")?.into());
            }
            (None, Some(init)) => {
                params.extend::<[BasicMetadataTypeEnum; 2]>([tp.into(), ft.into()]);
                let pd = self.elem_ptr(init.tensor, self.partial_offset(init.tensor, &init.indices)?)?;
                args.extend::<[BasicMetadataValueEnum; 2]>([pd.into(), ft.const_float(init.beta).into()]);
            }
            (None, None) => {
                params.push(i64t.into());
                args.push(self.i64c(overwrite as u64).into());
            }
        }
        let f = self.declare(fname, None, &params);
        self.b.build_call(f, &args, "")?;
        Ok(())
    }

    /// The register-blocked micro-kernel for `elem`, generated once per module:
    /// `void uk(i64 kc, T* Ap, T* Bp, T* C, i64 rs, i64 cs, T alpha)` computing
    /// `C[i*rs + j*cs] += alpha Σ_p Ap[p*MR + i] Bp[p*NR + j]` over an `MR × NR` tile,
    /// with `MR/lanes` vectors per column and `NR` broadcasts per step.
    pub(super) fn ukernel(&mut self, elem: ElemType) -> Result<Uk<'ctx>, CodegenError> {
        self.ukernel_shaped(elem, 2, self.ukernel_width())
    }

    /// The packed micro-kernel with `nv` vectors per column (`MR = nv·lanes`)
    /// and `nr` columns, generated once per module and shape.
    fn ukernel_shaped(&mut self, elem: ElemType, nv: usize, nr: usize) -> Result<Uk<'ctx>, CodegenError> {
        let lanes = (self.bits / (8 * elem.size_bytes() as u32)) as usize;
        let key = (elem, nv * lanes, nr);
        if let Some(u) = self.uk.get(&key) {
            return Ok(*u);
        }
        let u = self.build_ukernel(elem, false, Some(nr), nv)?;
        self.uk.insert(key, u);
        Ok(u)
    }

    /// The register tile `(nv, NR)` for a GETT over `dims` (see [`tile_shape`]).
    fn tile_shape(&self, elem: ElemType, dims: &[GettDim]) -> (usize, usize) {
        let lanes = (self.bits / (8 * elem.size_bytes() as u32)) as usize;
        let regs = if self.bits == 512 { 32 } else { 16 };
        let group = |kind: i64| -> (u64, u64) {
            let sizes: Vec<u64> =
                dims.iter().filter(|d| d.kind == kind).map(|d| d.size.assumed(self.hir).max(1)).collect();
            // Rows are sorted by decreasing stride in C: the last is the innermost.
            (sizes.iter().product(), sizes.last().copied().unwrap_or(1))
        };
        tile_shape(lanes, regs, self.ukernel_width(), group(1), group(2))
    }

    /// The micro-kernel of [`Self::ukernel`] reading unpacked operands: three more
    /// parameters `i64 sa, i64 sbk, i64 sbn` give A's step per `p` (its `MR` rows
    /// stay contiguous) and B's steps per `p` and per column, so that
    /// `C[i*rs + j*cs] += alpha Σ_p A[p*sa + i] B[p*sbk + j*sbn]`; only the first
    /// `ncols` columns of B are read. Small tiles
    /// that sit in cache are multiplied in place this way instead of being
    /// copied into panels first (the packed kernel is this one with
    /// `sa = MR, sbk = NR, sbn = 1`).
    ///
    /// `width` narrows the kernel to fewer columns than the packed kernel's `NR`
    /// (`None`: all of them): edge slivers of a tile run on a kernel as wide as
    /// they are instead of computing columns that are thrown away.
    pub(super) fn ukernel_strided(&mut self, elem: ElemType, width: Option<usize>) -> Result<Uk<'ctx>, CodegenError> {
        self.build_ukernel(elem, true, width, 2)
    }

    /// The packed kernel's `NR` for this target: the widest micro-tile whose
    /// accumulators and operands fit the vector registers.
    pub(super) fn ukernel_width(&self) -> usize {
        match self.bits {
            512 => 12,
            256 => 6,
            _ => 4,
        }
    }

    fn build_ukernel(
        &mut self,
        elem: ElemType,
        strided: bool,
        width: Option<usize>,
        nv: usize,
    ) -> Result<Uk<'ctx>, CodegenError> {
        let lanes = (self.bits / (8 * elem.size_bytes() as u32)) as usize;
        let mr = lanes * nv;
        let nr = width.unwrap_or_else(|| self.ukernel_width()).max(1);
        let ft = self.ft(elem);
        let vt = ft.vec_type(lanes as u32);
        let i64t = self.ctx.i64_type();
        let tp = ft.ptr_type(AddressSpace::default());
        let vp = vt.ptr_type(AddressSpace::default());
        let fty = self.ctx.void_type().fn_type(
            &[
                i64t.into(),
                tp.into(),
                tp.into(),
                tp.into(),
                i64t.into(),
                i64t.into(),
                ft.into(),
                i64t.into(),
                i64t.into(),
                i64t.into(),
                i64t.into(),
                i64t.into(),
            ][..if strided { 12 } else { 9 }],
            false,
        );
        let name = format!("tcc_uk{}_{}_{}x{}", if strided { "s" } else { "" }, elem.name(), mr, nr);
        let f = self.module.add_function(&name, fty, Some(Linkage::Internal));
        self.set_target_attrs(f);
        if self.bits == 512 {
            f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("min-legal-vector-width", "512"));
            f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("prefer-vector-width", "512"));
        }
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for k in 1..4 {
            f.add_attribute(AttributeLoc::Param(k), self.ctx.create_enum_attribute(noalias, 0));
        }
        let saved = self.b.get_insert_block();
        let p = |k: u32| f.get_nth_param(k).expect("param");
        let (mrows, ncols) = (p(7).into_int_value(), p(8).into_int_value());
        let (kc, ap, bp, cp, rs, cs, alpha) = (
            p(0).into_int_value(),
            p(1).into_pointer_value(),
            p(2).into_pointer_value(),
            p(3).into_pointer_value(),
            p(4).into_int_value(),
            p(5).into_int_value(),
            p(6).into_float_value(),
        );
        let entry = self.ctx.append_basic_block(f, "entry");
        let lp = self.ctx.append_basic_block(f, "k");
        let done = self.ctx.append_basic_block(f, "store");
        let b = &self.b;
        b.position_at_end(entry);
        let fma = Intrinsic::find("llvm.fma")
            .and_then(|i| i.get_declaration(self.module, &[vt.into()]))
            .ok_or_else(|| err("llvm.fma"))?;
        // Prefetch the C tile (for writing) while the k loop runs: one line per
        // 64 bytes of each column.
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let i32t = self.ctx.i32_type();
        let prefetch = self.declare("llvm.prefetch.p0i8", None, &[i8p.into(), i32t.into(), i32t.into(), i32t.into()]);
        let col_bytes = mr * elem.size_bytes();
        for j in 0..nr {
            let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "pcol")?;
            for off in (0..col_bytes).step_by(64) {
                let o = b.build_int_add(col, i64t.const_int((off / elem.size_bytes()) as u64, false), "po")?;
                let ptr = unsafe { b.build_gep(cp, &[o], "pp")? };
                let ptr = b.build_pointer_cast(ptr, i8p, "pp8")?;
                b.build_call(
                    prefetch,
                    &[
                        ptr.into(),
                        i32t.const_int(1, false).into(),
                        i32t.const_int(3, false).into(),
                        i32t.const_int(1, false).into(),
                    ],
                    "",
                )?;
            }
        }
        // The strided kernel walks one pointer per column of B (and one for A),
        // each advanced by its step: addresses without a multiply per load, in
        // as few registers as the packed kernel's.
        let strides = if strided {
            let (sa, sbk, sbn) = (p(9).into_int_value(), p(10).into_int_value(), p(11).into_int_value());
            // Columns past `ncols` read column 0 again (their sums are never
            // stored): a partial sliver is multiplied in place too, and no read
            // leaves B.
            let mut cols = Vec::new();
            for j in 0..nr {
                let jc = i64t.const_int(j as u64, false);
                let jo = b.build_int_mul(sbn, jc, "jo")?;
                let inside = b.build_int_compare(IntPredicate::SLT, jc, ncols, "jin")?;
                let jo = b.build_select(inside, jo, i64t.const_zero(), "jsel")?.into_int_value();
                cols.push(unsafe { b.build_gep(bp, &[jo], "bcol")? });
            }
            Some((sa, sbk, cols))
        } else {
            None
        };
        let has_k = b.build_int_compare(IntPredicate::SGT, kc, i64t.const_zero(), "hask")?;
        b.build_conditional_branch(has_k, lp, done)?;
        b.position_at_end(lp);
        let pk = b.build_phi(i64t, "p")?;
        pk.add_incoming(&[(&i64t.const_zero(), entry)]);
        let mut accs = Vec::new();
        for _ in 0..nv * nr {
            let phi = b.build_phi(vt, "acc")?;
            phi.add_incoming(&[(&vt.const_zero(), entry)]);
            accs.push(phi);
        }
        let pkv = pk.as_basic_value().into_int_value();
        // Where this step's A column and B row start: offsets into the packed
        // panels, or the strided kernel's walking pointers.
        let mut walkers = Vec::new();
        let (a_at, b_at): (_, Vec<_>) = match &strides {
            None => {
                let abase = b.build_int_mul(pkv, i64t.const_int(mr as u64, false), "ab")?;
                let bbase = b.build_int_mul(pkv, i64t.const_int(nr as u64, false), "bb")?;
                let a_at = unsafe { b.build_in_bounds_gep(ap, &[abase], "ap")? };
                let mut b_at = Vec::new();
                for j in 0..nr {
                    let off = b.build_int_add(bbase, i64t.const_int(j as u64, false), "bo")?;
                    b_at.push(unsafe { b.build_in_bounds_gep(bp, &[off], "bp")? });
                }
                (a_at, b_at)
            }
            Some((_, _, cols)) => {
                let aphi = b.build_phi(tp, "aw")?;
                aphi.add_incoming(&[(&ap, entry)]);
                let mut b_at = Vec::new();
                for col in cols {
                    let phi = b.build_phi(tp, "bw")?;
                    phi.add_incoming(&[(col, entry)]);
                    b_at.push(phi.as_basic_value().into_pointer_value());
                    walkers.push(phi);
                }
                walkers.insert(0, aphi);
                (aphi.as_basic_value().into_pointer_value(), b_at)
            }
        };
        let mut avs = Vec::new();
        for v in 0..nv {
            let off = i64t.const_int((v * lanes) as u64, false);
            let ptr = unsafe { b.build_in_bounds_gep(a_at, &[off], "ap")? };
            let ptr = b.build_pointer_cast(ptr, vp, "apv")?;
            let ld = b.build_load(ptr, "a")?;
            if let Some(i) = ld.as_instruction_value() {
                let _ = i.set_alignment(elem.size_bytes() as u32);
            }
            avs.push(ld.into_vector_value());
        }
        let undef = vt.get_undef();
        let mask = self.ctx.i32_type().vec_type(lanes as u32).const_zero();
        let mut next = Vec::new();
        for ptr in &b_at {
            let s = b.build_load(*ptr, "b")?.into_float_value();
            let ins = b.build_insert_element(undef, s, self.ctx.i32_type().const_zero(), "bi")?;
            let splat = b.build_shuffle_vector(ins, undef, mask, "bs")?;
            for av in &avs {
                let acc = accs[next.len()].as_basic_value();
                let r = b.build_call(fma, &[(*av).into(), splat.into(), acc.into()], "fma")?;
                next.push(r.try_as_basic_value().left().expect("vec"));
            }
        }
        if let Some((sa, sbk, _)) = &strides {
            for (x, phi) in walkers.iter().enumerate() {
                let step = if x == 0 { *sa } else { *sbk };
                let cur = phi.as_basic_value().into_pointer_value();
                let nxt = unsafe { b.build_gep(cur, &[step], "wn")? };
                let blk = b.get_insert_block().expect("block");
                phi.add_incoming(&[(&nxt, blk)]);
            }
        }
        let pnext = b.build_int_add(pkv, i64t.const_int(1, false), "pn")?;
        let lp_end = b.get_insert_block().expect("block");
        pk.add_incoming(&[(&pnext, lp_end)]);
        for (phi, v) in accs.iter().zip(&next) {
            phi.add_incoming(&[(v, lp_end)]);
        }
        let cont = b.build_int_compare(IntPredicate::SLT, pnext, kc, "more")?;
        b.build_conditional_branch(cont, lp, done)?;

        // Store: C += alpha * acc.
        b.position_at_end(done);
        let mut fin = Vec::new();
        for (k, phi) in accs.iter().enumerate() {
            let ph = b.build_phi(vt, "accf")?;
            ph.add_incoming(&[(&vt.const_zero(), entry), (&next[k], lp_end)]);
            fin.push(ph.as_basic_value().into_vector_value());
            let _ = phi;
        }
        let ins = b.build_insert_element(undef, alpha, self.ctx.i32_type().const_zero(), "al")?;
        let alpha_v = b.build_shuffle_vector(ins, undef, mask, "alv")?;
        let unit_rs = b.build_int_compare(IntPredicate::EQ, rs, i64t.const_int(1, false), "rs1")?;
        let vec_bb = self.ctx.append_basic_block(f, "store.vec");
        let sc_bb = self.ctx.append_basic_block(f, "store.scalar");
        let ret_bb = self.ctx.append_basic_block(f, "ret");
        let check_bb = self.ctx.append_basic_block(f, "store.check");
        let mask_bb = self.ctx.append_basic_block(f, "store.masked");
        b.build_conditional_branch(unit_rs, check_bb, sc_bb)?;
        b.position_at_end(check_bb);
        let full_m = b.build_int_compare(IntPredicate::EQ, mrows, i64t.const_int(mr as u64, false), "fullm")?;
        let full_n = b.build_int_compare(IntPredicate::EQ, ncols, i64t.const_int(nr as u64, false), "fulln")?;
        let full = b.build_and(full_m, full_n, "full")?;
        b.build_conditional_branch(full, vec_bb, mask_bb)?;
        // A partial tile (rows < MR or columns < NR, unit row stride): masked
        // loads and stores touch only the tile's elements.
        b.position_at_end(mask_bb);
        {
            let mload = Intrinsic::find("llvm.masked.load")
                .and_then(|i| i.get_declaration(self.module, &[vt.into(), vp.into()]))
                .ok_or_else(|| err("llvm.masked.load"))?;
            let mstore = Intrinsic::find("llvm.masked.store")
                .and_then(|i| i.get_declaration(self.module, &[vt.into(), vp.into()]))
                .ok_or_else(|| err("llvm.masked.store"))?;
            let iv = i64t.vec_type(lanes as u32);
            let iota = inkwell::types::VectorType::const_vector(
                &(0..lanes).map(|l| i64t.const_int(l as u64, false)).collect::<Vec<_>>(),
            );
            let iundef = iv.get_undef();
            let align = i32t.const_int(elem.size_bytes() as u64, false);
            for j in 0..nr {
                let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "col")?;
                let jok = b.build_int_compare(IntPredicate::SLT, i64t.const_int(j as u64, false), ncols, "jok")?;
                for v in 0..nv {
                    let left = b.build_int_sub(mrows, i64t.const_int((v * lanes) as u64, false), "left")?;
                    let lins = b.build_insert_element(iundef, left, i32t.const_zero(), "li")?;
                    let lsplat = b.build_shuffle_vector(lins, iundef, mask, "ls")?;
                    let lanes_ok = b.build_int_compare(IntPredicate::SLT, iota, lsplat, "lok")?;
                    let jins = b.build_insert_element(
                        self.ctx.bool_type().vec_type(lanes as u32).get_undef(),
                        jok,
                        i32t.const_zero(),
                        "ji",
                    )?;
                    let jsplat = b.build_shuffle_vector(
                        jins,
                        self.ctx.bool_type().vec_type(lanes as u32).get_undef(),
                        mask,
                        "js",
                    )?;
                    let m = b.build_and(lanes_ok, jsplat, "m")?;
                    let off = b.build_int_add(col, i64t.const_int((v * lanes) as u64, false), "co")?;
                    let ptr = unsafe { b.build_gep(cp, &[off], "cp")? };
                    let ptr = b.build_pointer_cast(ptr, vp, "cpv")?;
                    let old = b
                        .build_call(mload, &[ptr.into(), align.into(), m.into(), vt.const_zero().into()], "c")?
                        .try_as_basic_value()
                        .left()
                        .expect("vec");
                    let r = b
                        .build_call(fma, &[fin[j * nv + v].into(), alpha_v.into(), old.into()], "cn")?
                        .try_as_basic_value()
                        .left()
                        .expect("vec");
                    b.build_call(mstore, &[r.into(), ptr.into(), align.into(), m.into()], "")?;
                }
            }
            b.build_unconditional_branch(ret_bb)?;
        }
        b.position_at_end(vec_bb);
        for j in 0..nr {
            let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "col")?;
            for v in 0..nv {
                let off = b.build_int_add(col, i64t.const_int((v * lanes) as u64, false), "co")?;
                let ptr = unsafe { b.build_gep(cp, &[off], "cp")? };
                let ptr = b.build_pointer_cast(ptr, vp, "cpv")?;
                let old = b.build_load(ptr, "c")?;
                if let Some(i) = old.as_instruction_value() {
                    let _ = i.set_alignment(elem.size_bytes() as u32);
                }
                let r = b.build_call(fma, &[fin[j * nv + v].into(), alpha_v.into(), old.into()], "cn")?;
                let stv = b.build_store(ptr, r.try_as_basic_value().left().expect("vec"))?;
                let _ = stv.set_alignment(elem.size_bytes() as u32);
            }
        }
        b.build_unconditional_branch(ret_bb)?;
        b.position_at_end(sc_bb);
        for j in 0..nr {
            let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "col")?;
            for v in 0..nv {
                let scaled = b.build_float_mul(fin[j * nv + v], alpha_v, "sc")?;
                for l in 0..lanes {
                    let i = (v * lanes + l) as u64;
                    let roff = b.build_int_mul(rs, i64t.const_int(i, false), "ro")?;
                    let off = b.build_int_add(col, roff, "o")?;
                    let ptr = unsafe { b.build_gep(cp, &[off], "cp")? };
                    let x = b
                        .build_extract_element(scaled, self.ctx.i32_type().const_int(l as u64, false), "x")?
                        .into_float_value();
                    let old = b.build_load(ptr, "c")?.into_float_value();
                    b.build_store(ptr, b.build_float_add(old, x, "cn")?)?;
                }
            }
        }
        b.build_unconditional_branch(ret_bb)?;
        b.position_at_end(ret_bb);
        b.build_return(None)?;
        if let Some(bb) = saved {
            self.b.position_at_end(bb);
        }
        Ok(Uk { f, mr, nr })
    }
}

/// The tensor an overwriting GETT starts its target from (`beta·D`, `D` laid
/// out as the target): see [`Gen::gett_init_term`].
pub(super) struct GettInit {
    tensor: TensorId,
    indices: Vec<IndexId>,
    beta: f64,
}

pub(super) struct GettPlan {
    pub(super) dims: Vec<GettDim>,
    pub(super) swap: bool,
}

/// One row of the runtime's GETT table (`tcc_runtime::kernels::GettDim`): the
/// group (0 batch, 1 m, 2 n, 3 k), the extent and the strides in A, B and C.
pub(super) struct GettDim {
    pub(super) kind: i64,
    pub(super) size: Poly,
    pub(super) sa: Poly,
    pub(super) sb: Poly,
    pub(super) sc: Poly,
}

/// The register tile `(nv, NR)` (`MR = nv·lanes` rows, `NR` columns) for a GETT
/// whose row group has `m` rows, the innermost of extent `m_in` (and the same
/// for columns, `n`, `n_in`), among the tiles whose accumulators, `nv` vectors
/// of A and a broadcast fit `regs` vector registers (at most `nr_max` columns,
/// an even number for the pair-wise transposing pack).
///
/// Each tile is scored by the share of its multiplications that are useful
/// (edge slivers padded to a whole tile waste the rest) and by how many of its
/// slivers cross the innermost dimension's boundary: such a sliver is not an
/// arithmetic progression, so its panel is packed through offset tables and
/// its C tile goes through a buffer and is scattered (measured about 15 %
/// slower). A short stride-1 extent (24 in CC contractions) thus gets a tile
/// that divides it (`MR = 24`), and 100 columns a 10-wide tile. The default
/// tile wins ties.
pub(super) fn tile_shape(lanes: usize, regs: usize, nr_max: usize, m: (u64, u64), n: (u64, u64)) -> (usize, usize) {
    let score_dim = |(total, inner): (u64, u64), r: u64| -> f64 {
        let fill = total as f64 / total.div_ceil(r).max(1) as f64 / r as f64;
        let broken = if inner % r == 0 || total <= inner {
            0.0
        } else {
            // Boundaries of the inner dimension per sliver, at most one each.
            (r as f64 / inner as f64).min(1.0)
        };
        fill * (1.0 - 0.15 * broken)
    };
    let mut best = (2, nr_max);
    let mut best_score = f64::NEG_INFINITY;
    for nv in [2usize, 3] {
        let mut nr = nr_max - nr_max % 2;
        while nr >= 4 {
            if nv * nr + nv + 2 <= regs {
                // Fewer accumulators: a little more load and loop work per flop.
                let own = 1.0 - 0.003 * (24usize.saturating_sub(nv * nr)) as f64;
                let s = score_dim(m, (nv * lanes) as u64) * score_dim(n, nr as u64) * own;
                if s > best_score + 1e-9 {
                    (best, best_score) = ((nv, nr), s);
                }
            }
            nr -= 2;
        }
    }
    best
}

/// Cache blocks `(kc, mc, nc)`: kc·nr of B in L1, mc·kc of A in L2 (mc = 192
/// measured best for f64 on a 2 MB-L2 core), kc·nc of B in L3.
pub(super) fn cache_blocks(elem: ElemType) -> (i64, i64, i64) {
    match elem {
        ElemType::F64 | ElemType::C128 => (256, 192, 4096),
        ElemType::F32 | ElemType::C64 | ElemType::BF16 | ElemType::F16 => (512, 384, 4096),
    }
}

#[cfg(test)]
mod tests {
    use super::tile_shape;

    #[test]
    fn tiles_divide_short_inner_extents_and_waste_little_on_edges() {
        // AVX-512 f64: 8 lanes, 32 registers, default 16 x 12.
        let t = |m: (u64, u64), n: (u64, u64)| tile_shape(8, 32, 12, m, n);
        assert_eq!(t((4096, 4096), (4096, 4096)), (2, 12), "large extents keep the default");
        assert_eq!(t((2304, 24), (2304, 24)), (3, 8), "a stride-1 extent of 24 in both groups");
        assert_eq!(t((1444, 1444), (100, 100)), (2, 10), "100 columns: 10 wide, none padded");
        assert_eq!(t((64, 64), (96, 8)), (2, 8), "inner column extent 8");
        assert_eq!(t((4096, 4096), (96, 8)), (3, 8), "24 rows pad 4096 by 8 only, 24 accumulators");
        // Every tile fits the registers; AVX2 has 16 of them.
        for m in [1u64, 7, 24, 100, 1444] {
            for n in [1u64, 6, 10, 100, 1444] {
                let (nv, nr) = t((m, m), (n, n));
                assert!(nv * nr + nv + 2 <= 32 && nr % 2 == 0 && nr >= 4, "{m} {n}: {nv} x {nr}");
                let (nv, nr) = tile_shape(4, 16, 6, (m, m), (n, n));
                assert!(nv * nr + nv + 2 <= 16 && nr <= 6, "{m} {n}: {nv} x {nr} on AVX2");
            }
        }
    }
}
