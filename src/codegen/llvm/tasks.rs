//! Task sets ([`crate::lir::tasks`]) as one `tcc_rt_task_set` call: the steps of a
//! set become the cases of one outlined function `void (i8* ctx, i64 lo, i64 hi)`
//! that runs steps `lo..hi`, and the runtime decides at run time, knowing its
//! thread count, which steps overlap (the model's estimate of each step travels
//! in a constant array).

use super::*;
use crate::lir::tasks::TaskSet;

impl<'ctx> Gen<'_, 'ctx> {
    /// The steps of `set` (two or more, independent) through `tcc_rt_task_set`.
    pub(super) fn task_set(&mut self, nest: &LoopNest, set: &TaskSet, unit: UnitId) -> Result<(), CodegenError> {
        let i64t = self.ctx.i64_type();
        let f64t = self.ctx.f64_type();
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let caller = self.current_fn();
        let (caps, arr) = self.capture(&[], "tsctx")?;
        let name = self.name(&format!("{}.tasks", caller.get_name().to_string_lossy()));
        let fty = self.ctx.void_type().fn_type(&[i8p.into(), i64t.into(), i64t.into()], false);
        let f = self.module.add_function(&name, fty, Some(Linkage::Internal));
        self.set_target_attrs(f);
        // The estimates, as a private constant.
        let costs: Vec<_> = set.steps.iter().map(|s| f64t.const_float(s.time_s)).collect();
        let carr = f64t.const_array(&costs);
        let g = self.module.add_global(carr.get_type(), None, &format!("{name}.costs"));
        g.set_linkage(Linkage::Private);
        g.set_constant(true);
        g.set_initializer(&carr);
        let costs_p =
            self.b.build_pointer_cast(g.as_pointer_value(), f64t.ptr_type(AddressSpace::default()), "costs")?;
        let fp = self.b.build_pointer_cast(f.as_global_value().as_pointer_value(), i8p, "fp")?;
        let first = unsafe { self.b.build_in_bounds_gep(arr, &[self.i64c(0), self.i64c(0)], "slot")? };
        let ctxp = self.b.build_pointer_cast(first, i8p, "ctxp")?;
        let f64p = f64t.ptr_type(AddressSpace::default());
        let rt = self.declare("tcc_rt_task_set", None, &[i64t.into(), i8p.into(), i8p.into(), f64p.into()]);
        let n = self.i64c(set.steps.len() as u64);
        self.b.build_call(rt, &[n.into(), fp.into(), ctxp.into(), costs_p.into()], "")?;

        // The task function: steps lo..hi, each one case of a switch.
        let (saved, _) = self.enter_outlined(f, &caps, 0)?;
        let lo = f.get_nth_param(1).expect("lo").into_int_value();
        let hi = f.get_nth_param(2).expect("hi").into_int_value();
        let count = self.b.build_int_sub(hi, lo, "ntasks")?;
        let r = self.build_loop(count, &mut |gen, k| {
            let t = gen.b.build_int_add(lo, k, "task")?;
            let done = gen.ctx.append_basic_block(f, "task.done");
            let cases: Vec<_> =
                (0..set.steps.len()).map(|s| gen.ctx.append_basic_block(f, &format!("task{s}"))).collect();
            let table: Vec<_> = cases.iter().enumerate().map(|(s, &bb)| (gen.i64c(s as u64), bb)).collect();
            gen.b.build_switch(t, done, &table)?;
            for (step, &bb) in set.steps.iter().zip(&cases) {
                gen.b.position_at_end(bb);
                gen.step(&nest.body[step.nodes.clone()], unit)?;
                gen.b.build_unconditional_branch(done)?;
            }
            gen.b.position_at_end(done);
            Ok(())
        });
        if r.is_ok() {
            self.b.build_return(None)?;
        }
        self.leave_outlined(saved);
        r
    }
}
