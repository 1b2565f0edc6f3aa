//! GETT epilogues: an element-wise `=` statement on the result of a GETT
//! (`S = 0.125·Q·K; P = exp(S)`), applied by the runtime to each block of the
//! GETT's output as soon as its sum is complete, while it is in cache
//! (`tcc_rt_gett_epi_f64/f32`), the GETT writing straight into `P`. Separately,
//! the map is one more pass over `S` and `P` after the GETT (the attention
//! block's `exp` over 25 MB each: 2.8 ms of its 48 at two threads).
//!
//! Only where nothing can tell the difference: `S` is a temporary that only
//! these two statements touch, both whole (not sliced by loops or ranges), at
//! the top level of the nest; `P = c·f(S[same indices])` is the map's only term;
//! and no step before the map's touches `P`, so doing the map early cannot race
//! with a step of the same task set or change what an earlier step reads.

use super::*;
use crate::codegen::lower::term_operands;
use std::collections::BTreeSet;

/// Pairs `(gett, map)` of statements of the unit whose map may run as the
/// GETT's epilogue (see the module documentation); the GETT statement's own
/// conditions at code generation (a GETT that overwrites) are checked there.
pub(super) fn epilogue_pairs(hir: &Hir, nest: &LoopNest) -> Vec<(usize, usize)> {
    let unit = nest.unit;
    let stmts = &hir.units[unit].stmts;
    let body = &nest.body;
    let touched: Vec<BTreeSet<TensorId>> = body
        .iter()
        .map(|n| {
            let mut s = BTreeSet::new();
            node_tensors(hir, unit, std::slice::from_ref(n), &mut s);
            s
        })
        .collect();
    let whole = |t: TensorId| nest.buffers.get(&t).is_some_and(|b| b.fixed.is_empty());
    let mut out = Vec::new();
    for (g, n) in body.iter().enumerate() {
        let Node::Compute { stmt: i } = *n else { continue };
        // The GETT's zeroing right before it (what lets it overwrite).
        if g == 0 || !matches!(body[g - 1], Node::Zero { stmt, .. } if stmt == i) {
            continue;
        }
        let si = &stmts[i];
        let s = si.lhs.tensor;
        if si.accumulate
            || si.rhs.terms.len() != 1
            || hir.tensors[s].role != Role::Temporary
            || hir.stmt_has_slice(si)
            || crate::tir::materialize::special_stmt(si).is_some()
            || !whole(s)
        {
            continue;
        }
        // The map: the first top-level statement after the GETT that reads `S`.
        let Some(h) = (g + 1..body.len()).find(|&x| touched[x].contains(&s)) else { continue };
        let Node::Compute { stmt: j } = body[h] else { continue };
        let sj = &stmts[j];
        let p = sj.lhs.tensor;
        let Ok(ops) = term_operands(&sj.rhs.terms[0]) else { continue };
        let distinct = sj.lhs.indices.iter().enumerate().all(|(k, x)| !sj.lhs.indices[..k].contains(x));
        let map_ok = !sj.accumulate
            && sj.rhs.terms.len() == 1
            && ops.len() == 1
            && ops[0].tensor == s
            && ops[0].indices == si.lhs.indices
            && sj.lhs.indices == si.lhs.indices
            && distinct
            && p != s
            && hir.tensors[p].elem == hir.tensors[s].elem
            && !hir.stmt_has_slice(sj)
            && crate::tir::materialize::special_stmt(sj).is_none()
            && whole(p);
        // `S` touched by these two steps only; `P` by no step before the map's
        // (its own zeroing aside).
        let s_alone = touched.iter().enumerate().all(|(x, t)| {
            !t.contains(&s) || x == g || x == h || matches!(body[x], Node::Zero { stmt, .. } if stmt == i)
        });
        let p_untouched = (0..h).all(|x| {
            !touched[x].contains(&p) || matches!(body[x], Node::Zero { stmt, .. } if stmt == j)
        });
        if map_ok && s_alone && p_untouched {
            out.push((i, j));
        }
    }
    out
}

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
        // attention block's `Sc`, `P` pair: 5.4–5.8 ms against 6.2–6.6 at two
        // threads, and 5.7–6.9 ms as two passes).
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
