//! Building a tree step by step: every operand made so far, and how many live
//! operands hold each index, so that a step knows which indices it may sum
//! without walking the leaves (the generators contract thousands of pairs per trial).

use super::super::bits::Bits;
use super::super::opmin::{Ctx, Sym};

/// One operand: an input or the result of a step.
#[derive(Clone)]
pub(super) struct Op<const W: usize> {
    pub set: Bits<W>,
    pub groups: Vec<Sym<W>>,
    /// Distinct elements.
    pub size: f64,
    /// Flops of the step that made it (0 for an input).
    pub flops: f64,
}

pub(super) struct Arena<const W: usize> {
    pub ops: Vec<Op<W>>,
    /// Live operands holding each index.
    pub count: Vec<u32>,
    /// The steps so far, as SSA pairs.
    pub pairs: Vec<(usize, usize)>,
}

impl<const W: usize> Arena<W> {
    /// Every input live, no step yet.
    pub fn new(ctx: &Ctx<W>) -> Arena<W> {
        let mut count = vec![0u32; ctx.m];
        let ops = (0..ctx.n)
            .map(|k| {
                for i in ctx.leaf_idx[k].ids() {
                    count[i] += 1;
                }
                Op {
                    set: ctx.leaf_idx[k],
                    groups: ctx.leaf_sym[k].clone(),
                    size: ctx.prod(ctx.leaf_idx[k]),
                    flops: 0.0,
                }
            })
            .collect();
        Arena { ops, count, pairs: Vec::new() }
    }

    /// The indices the result of contracting live operands `a` and `b` keeps: those
    /// of the output or held by another live operand.
    pub fn kept(&self, ctx: &Ctx<W>, a: usize, b: usize) -> Bits<W> {
        let (sa, sb) = (self.ops[a].set, self.ops[b].set);
        let mut kept = Bits::empty();
        for i in (sa | sb).ids() {
            let inside = sa.contains(i) as u32 + sb.contains(i) as u32;
            if ctx.out.contains(i) || self.count[i] > inside {
                kept |= Bits::bit(i);
            }
        }
        kept
    }

    /// Contracts live operands `a` and `b`; the new operand's id.
    pub fn contract(&mut self, ctx: &Ctx<W>, a: usize, b: usize) -> usize {
        let kept = self.kept(ctx, a, b);
        let (oa, ob) = (&self.ops[a], &self.ops[b]);
        let c = ctx.combine(oa.set, &oa.groups, ob.set, &ob.groups, kept);
        for i in oa.set.ids().chain(ob.set.ids()) {
            self.count[i] -= 1;
        }
        for i in kept.ids() {
            self.count[i] += 1;
        }
        self.pairs.push((a, b));
        self.ops.push(Op { set: kept, groups: c.groups, size: c.size, flops: c.flops });
        self.ops.len() - 1
    }
}
