//! GETT epilogues ([`crate::lir::epilogue`] says which): the map `P = c·f(S)`
//! as a generated function the runtime applies to each block of the GETT's
//! output as soon as its sum is complete, while it is in cache
//! (`tcc_rt_gett_epi_f64/f32`), the GETT writing straight into `P`. Separately,
//! the map is one more pass over `S` and `P` after the GETT (the attention
//! block's `exp` over 25 MB each: 2.8 ms of its 48 at two threads).

use super::*;

impl<'ctx> Gen<'_, 'ctx> {
    /// `void epi(T* p, i64 n, i64 stride)`: `p[i·stride] = coef·f(p[i·stride])`
    /// for `i < n` (the runtime's `Epilogue`), a unit-stride loop marked for
    /// vectorization and a strided one.
    pub(super) fn epilogue_fn(
        &mut self,
        elem: ElemType,
        func: Option<Func>,
        coef: f64,
    ) -> Result<FunctionValue<'ctx>, CodegenError> {
        let ft = self.ft(elem);
        let i64t = self.ctx.i64_type();
        let tp = ft.ptr_type(AddressSpace::default());
        let name = self.name("tcc_epi");
        let f = self.module.add_function(
            &name,
            self.ctx.void_type().fn_type(&[tp.into(), i64t.into(), i64t.into()], false),
            Some(Linkage::Internal),
        );
        self.set_target_attrs(f);
        // The map is arithmetic on data in cache (`exp` is ~30 operations an
        // element): the widest vectors, where LLVM would stop at 256 bits (the
        // attention block's `Sc`, `P` pair, debug `tcc run`, loaded machine:
        // 5.4–5.8 ms against 6.2–6.6 at 256 bits, 6.6–6.9 as two passes).
        if self.bits >= 512 {
            f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("prefer-vector-width", "512"));
        }
        let saved_block = self.b.get_insert_block();
        let saved_fn = self.func.replace(f);
        let entry = self.ctx.append_basic_block(f, "entry");
        let unit = self.ctx.append_basic_block(f, "unit");
        let strided = self.ctx.append_basic_block(f, "strided");
        let done = self.ctx.append_basic_block(f, "done");
        self.b.position_at_end(entry);
        let p = f.get_nth_param(0).expect("p").into_pointer_value();
        let n = f.get_nth_param(1).expect("n").into_int_value();
        let stride = f.get_nth_param(2).expect("stride").into_int_value();
        let any = self.b.build_int_compare(IntPredicate::SGT, n, self.i64c(0), "any")?;
        let is_unit = self.b.build_int_compare(IntPredicate::EQ, stride, self.i64c(1), "unit")?;
        let go = self.ctx.append_basic_block(f, "go");
        self.b.build_conditional_branch(any, go, done)?;
        self.b.position_at_end(go);
        self.b.build_conditional_branch(is_unit, unit, strided)?;
        for (block, step) in [(unit, None), (strided, Some(stride))] {
            self.b.position_at_end(block);
            self.build_loop_hinted(n, step.is_none(), &mut |g, i| {
                let off = match step {
                    None => i,
                    Some(s) => g.b.build_int_mul(i, s, "off")?,
                };
                let q = unsafe { g.b.build_in_bounds_gep(p, &[off], "q")? };
                let x = g.b.build_load(q, "x")?.into_float_value();
                let mut y = match func {
                    Some(fu) => g.apply(fu, x, ft)?,
                    None => x,
                };
                if coef != 1.0 {
                    y = g.b.build_float_mul(ft.const_float(coef), y, "y")?;
                }
                g.b.build_store(q, y)?;
                Ok(())
            })?;
            self.b.build_unconditional_branch(done)?;
        }
        self.b.position_at_end(done);
        self.b.build_return(None)?;
        self.func = saved_fn;
        if let Some(bb) = saved_block {
            self.b.position_at_end(bb);
        }
        Ok(f)
    }
}
