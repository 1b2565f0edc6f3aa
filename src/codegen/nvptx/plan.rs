//! Planning: LIR loop nests → host steps, kernels and cuBLAS calls (no LLVM).

use super::super::lower::unit_flops;
use super::*;
use crate::lir::fusion::fusible;
use crate::lir::{Buffer, Node};
use crate::pipeline::PipelineOptions;
use crate::sema::hir::{Hir, Role, Stmt, TensorRef};

fn position_strides(hir: &Hir, b: &Buffer) -> Vec<u64> {
    b.position_strides(hir).into_iter().map(|s| s as u64).collect()
}

pub(super) struct Planner<'a> {
    pub(super) hir: &'a Hir,
    pub(super) opts: &'a GpuOptions,
    pub(super) kernels: &'a mut Vec<Kernel>,
    pub(super) buffers: Vec<Buf>,
    pub(super) strides: HashMap<TensorId, Vec<u64>>,
    pub(super) bound: Vec<IndexId>,
    /// The target of the term being planned was not cleared: its
    /// implementation writes every element (cuBLAS with beta 0, a storing
    /// copy) or clears it first.
    pub(super) fresh: bool,
    /// Tensor buffers written whole by their first use ([`UnitPlan::no_clear`]).
    pub(super) whole_first: Vec<usize>,
    /// 16-bit outputs computed in an f32 working buffer (this one), converted
    /// into their 16-bit buffer once at the end of the unit.
    pub(super) work: HashMap<TensorId, usize>,
    /// 16-bit outputs and declared intermediates that some step would write
    /// other than by storing each element once (accumulation, clearing,
    /// atomics): planned again with a working buffer ([`Planner::work`]) for an
    /// output, as f32 for an intermediate.
    pub(super) need_work: Vec<TensorId>,
}

/// One factor of a term.
pub(super) use super::super::lower::Operand;

/// A group of variables of a GEMM as one tensor sees it: total size and the
/// stride of the merged group (`None`: not mergeable).
#[derive(Clone, Copy, Debug)]
struct Grp {
    size: u64,
    stride: Option<u64>,
}

fn merged(vars: &[IndexId], sizes: &dyn Fn(IndexId) -> u64, stride: &dyn Fn(IndexId) -> u64) -> Grp {
    let vs: Vec<IndexId> = vars.iter().copied().filter(|&v| sizes(v) > 1).collect();
    let size = vs.iter().map(|&v| sizes(v)).product::<u64>();
    if vs.is_empty() {
        return Grp { size: 1, stride: Some(0) };
    }
    for w in vs.windows(2) {
        if stride(w[0]) != stride(w[1]) * sizes(w[1]) {
            return Grp { size, stride: None };
        }
    }
    Grp { size, stride: Some(stride(*vs.last().expect("non-empty"))) }
}

/// A column-major view of a matrix with `rows × cols` groups: `(transposed, ld)`.
fn view(rows: Grp, cols: Grp) -> Option<(bool, u64)> {
    let (rs, cs) = (rows.stride?, cols.stride?);
    if rows.size == 1 || rs == 1 {
        let ld = if cols.size == 1 { rows.size.max(1) } else { cs };
        if ld >= rows.size.max(1) {
            return Some((false, ld));
        }
    }
    if cols.size == 1 || cs == 1 {
        let ld = if rows.size == 1 { cols.size.max(1) } else { rs };
        if ld >= cols.size.max(1) {
            return Some((true, ld));
        }
    }
    None
}

impl Planner<'_> {
    pub(super) fn kernel(&mut self, mut k: Kernel) -> usize {
        if k.transpose.is_none() && !self.opts.plain_copies {
            k.transpose = super::transpose::detect(&k);
        }
        if let Some(i) = self
            .kernels
            .iter()
            .position(|x| Kernel { name: String::new(), ..x.clone() } == Kernel { name: String::new(), ..k.clone() })
        {
            return i;
        }
        k.name = format!("tcc_k{}", self.kernels.len());
        self.kernels.push(k);
        self.kernels.len() - 1
    }

    pub(super) fn arg(&self, t: TensorId, idx: &[IndexId]) -> Arg {
        let st = &self.strides[&t];
        let base = idx
            .iter()
            .enumerate()
            .filter(|(p, i)| st[*p] > 0 && self.bound.contains(i))
            .map(|(p, &i)| (i, st[p]))
            .collect();
        // A slice of a union starts past the parts before its sub-range.
        let dims = &self.hir.tensors[t].dims;
        let offset = idx
            .iter()
            .enumerate()
            .map(|(p, &i)| self.hir.offset_in(self.hir.indices[i].range, dims[p]).unwrap_or(0) as u64 * st[p])
            .sum();
        Arg { buf: self.buf(t), base, offset }
    }

    pub(super) fn buf(&self, t: TensorId) -> usize {
        if let Some(&w) = self.work.get(&t) {
            return w;
        }
        self.buffers.iter().position(|b| b.tensor == Some(t)).expect("every tensor has a buffer")
    }

    /// How `t`'s buffer stores its elements (16 bits for the interface tensors
    /// of 16-bit programs, f32 for their temporaries and working buffers).
    pub(super) fn selem(&self, t: TensorId) -> Elem {
        self.buffers[self.buf(t)].elem
    }

    /// The 16-bit type `t` is stored in, if any: a kernel writing it rounds.
    pub(super) fn half_of(&self, t: TensorId) -> Option<Elem> {
        Some(self.selem(t)).filter(|e| e.is_half())
    }

    /// Notes a write of `t`: a 16-bit buffer may only be written by storing each
    /// element once (`storing`), which rounds once as the CPU does; anything else
    /// asks for a working buffer ([`Planner::need_work`]).
    pub(super) fn written(&mut self, t: TensorId, storing: bool) {
        if !storing && self.half_of(t).is_some() && !self.need_work.contains(&t) {
            self.need_work.push(t);
        }
    }

    /// Clears `t`'s whole buffer.
    fn memset(&mut self, t: TensorId) -> Step {
        self.written(t, false);
        Step::Memset { buf: self.buf(t) }
    }

    pub(super) fn stride_in(&self, t: TensorId, idx: &[IndexId], v: IndexId) -> u64 {
        idx.iter().zip(&self.strides[&t]).filter(|(i, _)| **i == v).map(|(_, s)| *s).sum()
    }

    fn nodes(&mut self, nodes: &[Node], unit: UnitId) -> Result<Vec<Step>, CodegenError> {
        let mut out = Vec::new();
        let mut cleared_by_compute = None;
        for (at, n) in nodes.iter().enumerate() {
            match n {
                Node::Loop { index, extent, body } => {
                    if *extent == 0 {
                        continue;
                    }
                    self.bound.push(*index);
                    let body = self.nodes(body, unit)?;
                    self.bound.pop();
                    out.push(Step::Loop { index: *index, extent: *extent as u64, body });
                }
                Node::Zero { tensor, stmt } => {
                    let st = &self.hir.units[unit].stmts[*stmt];
                    // Cleared right before its one statement computes it: that
                    // statement writes every element itself.
                    if *tensor == st.lhs.tensor
                        && self.writes_whole(st)
                        && matches!(nodes.get(at + 1), Some(Node::Compute { stmt: s }) if s == stmt)
                    {
                        cleared_by_compute = Some(*stmt);
                        continue;
                    }
                    let idx = st.lhs.indices.clone();
                    self.zero(*tensor, &idx, &mut out);
                }
                Node::Compute { stmt } => {
                    let st = self.hir.units[unit].stmts[*stmt].clone();
                    let by_zero = cleared_by_compute.take() == Some(*stmt);
                    if by_zero || (!fusible(self.hir, &st) && !st.accumulate && self.writes_whole(&st)) {
                        let buf = self.buf(st.lhs.tensor);
                        let first = !touches(&out, buf) && !self.whole_first.contains(&buf);
                        self.fresh = true;
                        let r = self.term(&st, 0, &mut out);
                        self.fresh = false;
                        r?;
                        if first {
                            self.whole_first.push(buf);
                        }
                        continue;
                    }
                    if !fusible(self.hir, &st) && !st.accumulate {
                        if self.hir.is_slice(&st.lhs) {
                            // `=` into a slice clears that slice only.
                            let idx = st.lhs.indices.clone();
                            self.zero_kernel(st.lhs.tensor, &idx, &mut out);
                        } else {
                            out.push(self.memset(st.lhs.tensor));
                        }
                    }
                    if let Some(sp) = crate::tir::materialize::special_stmt(&st) {
                        self.special(&st, sp, &mut out);
                        continue;
                    }
                    for k in 0..st.rhs.terms.len() {
                        self.term(&st, k, &mut out)?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whether `st` is one term with no host loops around it, into a whole tensor
    /// (no slice), with distinct indices: its implementation can write every
    /// element of the target instead of adding to a cleared one.
    fn writes_whole(&self, st: &Stmt) -> bool {
        let idx = &st.lhs.indices;
        self.bound.is_empty()
            && st.rhs.terms.len() == 1
            && crate::tir::materialize::special_stmt(st).is_none()
            && !self.hir.is_slice(&st.lhs)
            && (0..idx.len()).all(|i| !idx[..i].contains(&idx[i]))
            && self.strides[&st.lhs.tensor].iter().all(|&s| s != 0)
            && !reads(&st.rhs, st.lhs.tensor)
    }

    /// Clears the region of `t` that `t[idx]` covers under the bound loops, as
    /// [`crate::lir::exec`] does: stored positions whose index is bound are
    /// pinned, the others cleared in full.
    fn zero(&mut self, t: TensorId, idx: &[IndexId], out: &mut Vec<Step>) {
        let st = &self.strides[&t];
        let any_bound = (0..st.len()).any(|p| st[p] != 0 && idx.get(p).is_some_and(|i| self.bound.contains(i)));
        if !any_bound && !self.hir.is_slice(&TensorRef { tensor: t, indices: idx.to_vec(), span: 0..0 }) {
            out.push(self.memset(t));
            return;
        }
        self.zero_kernel(t, idx, out);
    }

    /// A kernel storing zeros over the elements of `t[idx]` the bound loops leave
    /// free (each index over its own range: a slice of a union stays a slice).
    fn zero_kernel(&mut self, t: TensorId, idx: &[IndexId], out: &mut Vec<Step>) {
        let st = self.strides[&t].clone();
        let mut par = Vec::new();
        let mut strides = Vec::new();
        for (p, &s) in st.iter().enumerate() {
            if s == 0 || idx.get(p).is_some_and(|i| self.bound.contains(i)) {
                continue;
            }
            par.push(self.hir.index_size(idx[p]) as u64);
            strides.push(s);
        }
        if par.contains(&0) {
            return;
        }
        self.written(t, false);
        let out_elem = self.half_of(t);
        let k = self.kernel(Kernel {
            name: String::new(),
            elem: Elem::of(self.hir.tensors[t].elem),
            par,
            out_strides: strides,
            red: vec![],
            split_vars: 0,
            split: 1,
            chunk: 1,
            ops: vec![],
            coef: 0.0,
            store: true,
            tiled: None,
            transpose: None,
            combine: Combine::Sum,
            out: out_elem,
            lanes: 1,
        });
        out.push(Step::Launch { kernel: k, args: vec![self.arg(t, idx)] });
    }

    /// A `max`/`min` or `where` statement: one thread per element of the target
    /// (added to it: a `Memset` came first), a `max`/`min` reducing in the thread.
    fn special(&mut self, st: &Stmt, sp: crate::tir::materialize::Special<'_>, out: &mut Vec<Step>) {
        use crate::tir::materialize::Special;
        let hir = self.hir;
        let c = st.lhs.tensor;
        let (combine, refs) = match sp {
            Special::Reduce { op, arg } => {
                (if op == crate::sema::hir::Extremum::Max { Combine::Max } else { Combine::Min }, vec![arg])
            }
            Special::Select { cmp, args } => (Combine::Select(SelectCmp::of(cmp)), args),
            Special::Gather { arg } => return self.gather(st, arg, out),
        };
        let par: Vec<IndexId> = st.lhs.indices.iter().copied().filter(|i| !self.bound.contains(i)).collect();
        let mut red: Vec<IndexId> = Vec::new();
        for r in &refs {
            for &i in &r.indices {
                if !st.lhs.indices.contains(&i) && !self.bound.contains(&i) && !red.contains(&i) {
                    red.push(i);
                }
            }
        }
        if par.iter().chain(&red).any(|&v| hir.index_size(v) == 0) {
            return;
        }
        let size = |v: IndexId| hir.index_size(v) as u64;
        self.written(c, false);
        let ops = refs
            .iter()
            .map(|r| KOperand {
                elem: self.selem(r.tensor),
                func: None,
                par_strides: par.iter().map(|&v| self.stride_in(r.tensor, &r.indices, v)).collect(),
                red_strides: red.iter().map(|&v| self.stride_in(r.tensor, &r.indices, v)).collect(),
            })
            .collect();
        let kid = self.kernel(Kernel {
            name: String::new(),
            elem: Elem::of(hir.tensors[c].elem),
            par: par.iter().map(|&v| size(v)).collect(),
            out_strides: par.iter().map(|&v| self.stride_in(c, &st.lhs.indices, v)).collect(),
            red: red.iter().map(|&v| size(v)).collect(),
            split_vars: 0,
            split: 1,
            chunk: 1,
            ops,
            coef: 1.0,
            store: false,
            tiled: None,
            transpose: None,
            combine,
            out: self.half_of(c),
            lanes: 1,
        });
        let mut args = vec![self.arg(c, &st.lhs.indices)];
        args.extend(refs.iter().map(|r| self.arg(r.tensor, &r.indices)));
        out.push(Step::Launch { kernel: kid, args });
    }

    /// `T[free] = I[n,c,y+r,x+s]`: one thread per element of the target, reading a
    /// strided view of `I` (an index's stride is the sum of its coefficient times
    /// the dimension's stride over the subscripts; the constants move the start).
    fn gather(&mut self, st: &Stmt, arg: &crate::sema::hir::AffineRef, out: &mut Vec<Step>) {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let par: Vec<IndexId> = st.lhs.indices.iter().copied().filter(|i| !self.bound.contains(i)).collect();
        if par.iter().any(|&v| hir.index_size(v) == 0) {
            return;
        }
        let src = self.strides[&arg.tensor].clone();
        let view = |v: IndexId| -> u64 {
            arg.subs
                .iter()
                .zip(&src)
                .map(|(s, &st)| s.terms.iter().filter(|t| t.1 == v).map(|t| t.0 as u64 * st).sum::<u64>())
                .sum()
        };
        // `sema` refuses negative coefficients and proves every subscript ≥ 0, so
        // the constants are ≥ 0.
        let offset = arg.subs.iter().zip(&src).map(|(s, &st)| s.constant.max(0) as u64 * st).sum();
        let base = arg.free.iter().filter(|i| self.bound.contains(i)).map(|&i| (i, view(i))).collect();
        self.written(c, false);
        let op = KOperand {
            elem: self.selem(arg.tensor),
            func: None,
            par_strides: par.iter().map(|&v| view(v)).collect(),
            red_strides: Vec::new(),
        };
        let kid = self.kernel(Kernel {
            name: String::new(),
            elem: Elem::of(hir.tensors[c].elem),
            par: par.iter().map(|&v| hir.index_size(v) as u64).collect(),
            out_strides: par.iter().map(|&v| self.stride_in(c, &st.lhs.indices, v)).collect(),
            red: Vec::new(),
            split_vars: 0,
            split: 1,
            chunk: 1,
            ops: vec![op],
            coef: 1.0,
            store: false,
            tiled: None,
            transpose: None,
            combine: Combine::Sum,
            out: self.half_of(c),
            lanes: 1,
        });
        let args = vec![self.arg(c, &st.lhs.indices), Arg { buf: self.buf(arg.tensor), base, offset }];
        out.push(Step::Launch { kernel: kid, args });
    }

    fn term(&mut self, st: &Stmt, k: usize, out: &mut Vec<Step>) -> Result<(), CodegenError> {
        let hir = self.hir;
        let term = &st.rhs.terms[k];
        let ops = crate::codegen::lower::term_operands(term).map_err(err)?;
        let vars = crate::codegen::lower::term_vars(&st.lhs.indices, &ops, |i| self.bound.contains(&i));
        if vars.iter().any(|&v| hir.index_size(v) == 0) {
            if self.fresh {
                // An empty sum: the target is zero.
                out.push(self.memset(st.lhs.tensor));
            }
            return Ok(());
        }
        // A binary contraction picks among its implementations; any other term
        // goes to the one-thread-per-output kernel. Both store a fresh target
        // themselves (no clearing pass, no read of the old value) unless they
        // split the sum.
        match self.groups(st, &ops, &vars) {
            Some(groups) => self.choose(st, term.coef, &ops, &vars, &groups, out),
            None => self.naive(st, term.coef, &ops, &vars, out),
        }
    }

    /// The index groups of a binary contraction `C += A·B`: batch (in all three),
    /// m (C and A), n (C and B), k (A and B); `None` for any other term (one index
    /// twice in a tensor, or in one tensor only, or not two factors).
    fn groups(&self, st: &Stmt, ops: &[Operand], vars: &[IndexId]) -> Option<[Vec<IndexId>; 4]> {
        let [a, b] = ops else { return None };
        let count = |idx: &[IndexId], v: IndexId| idx.iter().filter(|&&i| i == v).count();
        let mut groups: [Vec<IndexId>; 4] = Default::default();
        for &v in vars {
            let g = match (count(&st.lhs.indices, v), count(&a.indices, v), count(&b.indices, v)) {
                (1, 1, 1) => 0,
                (1, 1, 0) => 1,
                (1, 0, 1) => 2,
                (0, 1, 1) => 3,
                _ => return None,
            };
            groups[g].push(v);
        }
        Some(groups)
    }

    /// Plans `kind` for a binary contraction into a step list; `None` where it
    /// does not apply.
    fn alternative(
        &mut self,
        kind: GemmKind,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        vars: &[IndexId],
        groups: &[Vec<IndexId>; 4],
    ) -> Result<Option<Vec<Step>>, CodegenError> {
        let hir = self.hir;
        let celem = hir.tensors[st.lhs.tensor].elem;
        let mut steps = Vec::new();
        let ok = match kind {
            GemmKind::Cublas => {
                // cuBLAS: A and B of one type; 16-bit A and B (tensor cores, f32
                // compute) write C in their type or f32.
                let (ea, eb, ec) = (self.selem(ops[0].tensor), self.selem(ops[1].tensor), self.selem(st.lhs.tensor));
                if ec.is_half() && !ea.is_half() && ea == eb && ops.iter().all(|o| hir.tensors[o.tensor].elem == celem)
                {
                    // f32 products into a 16-bit output: computed in f32 first.
                    self.written(st.lhs.tensor, false);
                }
                ops.iter().all(|o| o.func.is_none() && hir.tensors[o.tensor].elem == celem)
                    && ea == eb
                    && (ec == ea || ec == Elem::F32)
                    && self.gemm(st, coef, ops, vars, groups.clone(), &mut steps)
            }
            // With a target that was not cleared the tiled kernel stores (each
            // element of C belongs to one block).
            GemmKind::Tiled => self.tiled(st, coef, ops, groups, &mut steps),
            GemmKind::Naive => {
                self.naive(st, coef, ops, vars, &mut steps)?;
                true
            }
        };
        Ok(ok.then_some(steps))
    }

    /// Every implementation of a binary contraction, with its predicted time;
    /// runs the forced one ([`GpuOptions::gemm`]) where it applies, else the cheapest.
    fn choose(
        &mut self,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        vars: &[IndexId],
        groups: &[Vec<IndexId>; 4],
        out: &mut Vec<Step>,
    ) -> Result<(), CodegenError> {
        let mut cands = Vec::new();
        for kind in GemmKind::ALL {
            // Planned once to be costed, then undone (kernels and buffers are only appended).
            let (nk, nb, nw) = (self.kernels.len(), self.buffers.len(), self.need_work.len());
            if let Some(steps) = self.alternative(kind, st, coef, ops, vars, groups)? {
                cands.push((kind, cost::steps_time(&steps, self.kernels, &self.buffers)));
            }
            self.kernels.truncate(nk);
            self.buffers.truncate(nb);
            self.need_work.truncate(nw);
        }
        let cheapest = (0..cands.len())
            .min_by(|&i, &j| cands[i].1.total_cmp(&cands[j].1))
            .ok_or_else(|| err("internal: no implementation"))?;
        let chosen = self.opts.gemm.and_then(|f| cands.iter().position(|c| c.0 == f)).unwrap_or(cheapest);
        let mut alts = Vec::new();
        for (i, &(kind, predicted_s)) in cands.iter().enumerate() {
            let kept = i == chosen || self.opts.keep_alternatives;
            let steps = if kept {
                self.alternative(kind, st, coef, ops, vars, groups)?
                    .ok_or_else(|| err("internal: an alternative vanished"))?
            } else {
                Vec::new()
            };
            alts.push(Alt { kind, predicted_s, kept, steps });
        }
        out.push(Step::Choice(Choice { what: self.describe_term(st, ops, groups), chosen, alts }));
        Ok(())
    }

    /// `C[i,j] += A[i,k]·B[k,j] (batch 1, m 20, n 30, k 40)`.
    fn describe_term(&self, st: &Stmt, ops: &[Operand], groups: &[Vec<IndexId>; 4]) -> String {
        let hir = self.hir;
        let r = |t: TensorId, idx: &[IndexId]| {
            let names: Vec<&str> = idx.iter().map(|&i| hir.indices[i].name.as_str()).collect();
            format!("{}[{}]", hir.tensors[t].name, names.join(","))
        };
        let tot = |g: &[IndexId]| g.iter().map(|&v| hir.index_size(v) as u64).product::<u64>();
        let f: Vec<String> = ops.iter().map(|o| r(o.tensor, &o.indices)).collect();
        format!(
            "{} += {} (batch {}, m {}, n {}, k {})",
            r(st.lhs.tensor, &st.lhs.indices),
            f.join("·"),
            tot(&groups[0]),
            tot(&groups[1]),
            tot(&groups[2]),
            tot(&groups[3])
        )
    }

    /// The one-thread-per-output kernel of a term (any number of factors).
    fn naive(
        &mut self,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        vars: &[IndexId],
        out: &mut Vec<Step>,
    ) -> Result<(), CodegenError> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let celem = hir.tensors[c].elem;
        // Parallel: the written indices, ordered by decreasing stride in the output
        // (the contiguous one fastest across threads); reduction: the rest, by
        // decreasing stride in the first operand.
        let mut par: Vec<IndexId> = vars.iter().copied().filter(|v| st.lhs.indices.contains(v)).collect();
        par.sort_by_key(|&v| std::cmp::Reverse(self.stride_in(c, &st.lhs.indices, v)));
        let mut red: Vec<IndexId> = vars.iter().copied().filter(|v| !st.lhs.indices.contains(v)).collect();
        if let Some(o) = ops.first() {
            red.sort_by_key(|&v| std::cmp::Reverse(self.stride_in(o.tensor, &o.indices, v)));
        }
        let size = |v: IndexId| hir.index_size(v) as u64;
        let p_total: u64 = par.iter().map(|&v| size(v)).product();
        let r_sizes: Vec<u64> = red.iter().map(|&v| size(v)).collect();
        let target = self.opts.target_threads.unwrap_or(1 << 18);
        let (mut split_vars, mut split, mut chunk) = (0usize, 1u64, 1u64);
        let r_total: u64 = r_sizes.iter().product();
        // A 16-bit target written whole is stored by one thread per element
        // (rounded once); split sums would add to it.
        let half_store = self.fresh && self.half_of(c).is_some();
        if p_total < target && r_total >= 64 && !half_store {
            let want = (target / p_total.max(1)).min(r_total / 32).max(1);
            if want > 1 {
                let mut l = 1u64;
                while split_vars < r_sizes.len() && l < want {
                    l *= r_sizes[split_vars];
                    split_vars += 1;
                }
                chunk = l.div_ceil(want.min(l));
                split = l.div_ceil(chunk);
                if split <= 1 {
                    split_vars = 0;
                    split = 1;
                    chunk = 1;
                }
            }
        }
        // A target that was not cleared: stored by the one thread of each element,
        // or cleared first when split reductions add to it.
        let store = self.fresh && split == 1;
        if self.fresh && !store {
            out.push(self.memset(c));
        }
        self.written(c, store);
        let kops: Vec<KOperand> = ops
            .iter()
            .map(|o| KOperand {
                elem: self.selem(o.tensor),
                func: o.func.map(|f| f.name().to_string()),
                par_strides: par.iter().map(|&v| self.stride_in(o.tensor, &o.indices, v)).collect(),
                red_strides: red.iter().map(|&v| self.stride_in(o.tensor, &o.indices, v)).collect(),
            })
            .collect();
        let kid = self.kernel(Kernel {
            name: String::new(),
            elem: Elem::of(celem),
            par: par.iter().map(|&v| size(v)).collect(),
            out_strides: par.iter().map(|&v| self.stride_in(c, &st.lhs.indices, v)).collect(),
            red: r_sizes,
            split_vars,
            split,
            chunk,
            ops: kops,
            coef,
            store,
            tiled: None,
            transpose: None,
            combine: Combine::Sum,
            out: self.half_of(c),
            lanes: 1,
        });
        let mut args = vec![self.arg(c, &st.lhs.indices)];
        args.extend(ops.iter().map(|o| self.arg(o.tensor, &o.indices)));
        out.push(Step::Launch { kernel: kid, args });
        Ok(())
    }

    fn scratch(&mut self, name: &str, elem: Elem, elements: u64) -> usize {
        self.buffers.push(Buf {
            name: format!("_{name}{}", self.buffers.len()),
            tensor: None,
            elem,
            elements: elements.max(1),
            input: false,
            shape: vec![],
        });
        self.buffers.len() - 1
    }

    /// The cheapest way to move variables of the m and n groups to the batch
    /// ([`Planner::promoted`]): `(predicted seconds, mask over those variables)`;
    /// `None` when no choice makes C a strided matrix. Kernels and buffers that
    /// costing appended stay for the caller to drop.
    fn promotion(&mut self, st: &Stmt, coef: f64, ops: &[Operand], groups: &[Vec<IndexId>; 4]) -> Option<(f64, u64)> {
        let hir = self.hir;
        let n_mn = groups[1].iter().chain(&groups[2]).filter(|&&v| hir.index_size(v) > 1).count();
        if n_mn > 10 {
            return None;
        }
        let mut best: Option<(f64, u64)> = None;
        for mask in 1..(1u64 << n_mn) {
            let (nk, nb) = (self.kernels.len(), self.buffers.len());
            if let Some(steps) = self.promoted(st, coef, ops, groups, mask) {
                let t = cost::steps_time(&steps, self.kernels, &self.buffers);
                if best.is_none_or(|b| t < b.0) {
                    best = Some((t, mask));
                }
            }
            self.kernels.truncate(nk);
            self.buffers.truncate(nb);
        }
        best
    }

    /// A binary contraction whose C is no matrix over its m and n groups, as
    /// cuBLAS calls writing C in place (TTGT with the output permutation folded
    /// into the call): the m and n variables of `mask` (bit i: the i-th of m then
    /// n, size-1 variables left out) join the batch; the longest run of batch
    /// variables that is one stride in C, A and B becomes cuBLAS's batch, the
    /// others host loops; an operand that is no matrix over the remaining groups
    /// is first copied to a contiguous layout. `None` when C over the remaining
    /// groups is no matrix either, or the sizes exceed cuBLAS's arguments.
    fn promoted(
        &mut self,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        groups: &[Vec<IndexId>; 4],
        mask: u64,
    ) -> Option<Vec<Step>> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let size = |v: IndexId| hir.index_size(v) as u64;
        let mn: Vec<IndexId> = groups[1].iter().chain(&groups[2]).copied().filter(|&v| size(v) > 1).collect();
        let moved = |v: &IndexId| mn.iter().position(|x| x == v).is_some_and(|p| mask >> p & 1 == 1);
        let cs: HashMap<IndexId, u64> =
            groups.iter().flatten().map(|&v| (v, self.stride_in(c, &st.lhs.indices, v))).collect();
        let m2: Vec<IndexId> = groups[1].iter().copied().filter(|v| !moved(v)).collect();
        let n2: Vec<IndexId> = groups[2].iter().copied().filter(|v| !moved(v)).collect();
        let k2 = groups[3].clone();
        let mut batch: Vec<IndexId> =
            groups[0].iter().chain(mn.iter().filter(|v| moved(v))).copied().filter(|&v| size(v) > 1).collect();
        batch.sort_by_key(|v| std::cmp::Reverse(cs[v]));
        let tot = |g: &[IndexId]| g.iter().map(|&v| size(v)).product::<u64>();
        let (m, n, k) = (tot(&m2), tot(&n2), tot(&k2));
        let lim = i32::MAX as u64;
        if m * n * k == 0 || [m, n, k].iter().any(|&x| x > lim) {
            return None;
        }
        let elem = Elem::of(hir.tensors[c].elem);
        let grp = |vs: &[IndexId], s: &HashMap<IndexId, u64>| merged(vs, &size, &|v| s[&v]);
        let (gm, gn) = (grp(&m2, &cs), grp(&n2, &cs));
        // C (n inner: cuBLAS computes C^T = B^T A^T) or m inner.
        let (n_inner, ldc) = if let Some((false, ld)) = view(gn, gm) {
            (true, ld)
        } else if let Some((false, ld)) = view(gm, gn) {
            (false, ld)
        } else {
            return None;
        };
        let mut steps = Vec::new();
        // Each operand: its argument and the stride of every variable (0: absent).
        let mut operand = |pl: &mut Planner, o: &Operand, rows: &[IndexId], cols: &[IndexId]| {
            let s: HashMap<IndexId, u64> =
                groups.iter().flatten().map(|&v| (v, pl.stride_in(o.tensor, &o.indices, v))).collect();
            if view(grp(rows, &s), grp(cols, &s)).is_some() {
                return (pl.arg(o.tensor, &o.indices), s);
            }
            // Copied as [its batch variables][rows][cols], contiguous.
            let order: Vec<IndexId> = batch.iter().filter(|v| s[v] != 0).chain(rows).chain(cols).copied().collect();
            let total: u64 = order.iter().map(|&v| size(v)).product();
            // 16-bit operands are copied as 16 bits (exact), for tensor cores.
            let oe = pl.selem(o.tensor);
            let buf = pl.scratch("perm", oe, total);
            let mut cs2: HashMap<IndexId, u64> = groups.iter().flatten().map(|&v| (v, 0)).collect();
            let mut acc = 1;
            for &v in order.iter().rev() {
                cs2.insert(v, acc);
                acc *= size(v);
            }
            let kid = pl.kernel(Kernel {
                name: String::new(),
                elem,
                par: order.iter().map(|&v| size(v)).collect(),
                out_strides: order.iter().map(|v| cs2[v]).collect(),
                red: vec![],
                split_vars: 0,
                split: 1,
                chunk: 1,
                ops: vec![KOperand {
                    elem: oe,
                    func: None,
                    par_strides: order.iter().map(|v| s[v]).collect(),
                    red_strides: vec![],
                }],
                coef: 1.0,
                store: true,
                tiled: None,
                transpose: None,
                combine: Combine::Sum,
                out: Some(oe).filter(|e| e.is_half()),
                lanes: 1,
            });
            steps.push(Step::Launch {
                kernel: kid,
                args: vec![Arg { buf, base: vec![], offset: 0 }, pl.arg(o.tensor, &o.indices)],
            });
            (Arg { buf, base: vec![], offset: 0 }, cs2)
        };
        let (a, b) = (&ops[0], &ops[1]);
        // Rows and columns as cuBLAS sees each operand (column-major).
        let (ra, ca, rb, cb) = if n_inner { (&k2, &m2, &n2, &k2) } else { (&m2, &k2, &k2, &n2) };
        let (mut arg_a, sa) = operand(self, a, ra, ca);
        let (mut arg_b, sb) = operand(self, b, rb, cb);
        let (ta, lda) = view(grp(ra, &sa), grp(ca, &sa))?;
        let (tb, ldb) = view(grp(rb, &sb), grp(cb, &sb))?;
        // cuBLAS's batch: the run of consecutive batch variables (by stride in C)
        // that is one stride in all three tensors and has the most elements; the
        // other batch variables become host loops.
        let one_stride = |run: &[IndexId]| {
            grp(run, &cs).stride.is_some() && grp(run, &sa).stride.is_some() && grp(run, &sb).stride.is_some()
        };
        let (mut lo, mut hi) = (0, 0);
        for i in 0..batch.len() {
            for j in i + 1..=batch.len() {
                if one_stride(&batch[i..j]) && tot(&batch[i..j]) > tot(&batch[lo..hi]) {
                    (lo, hi) = (i, j);
                }
            }
        }
        let run = &batch[lo..hi];
        let loops: Vec<IndexId> = batch[..lo].iter().chain(&batch[hi..]).copied().collect();
        let loops = &loops[..];
        let nb = tot(run);
        let iterations: u64 = tot(loops);
        if nb > lim || iterations > 4096 || [lda, ldb, ldc].iter().any(|&x| x > lim) {
            return None;
        }
        let bs = |s: &HashMap<IndexId, u64>| if run.is_empty() { 0 } else { grp(run, s).stride.unwrap_or(0) };
        let mut arg_c = self.arg(c, &st.lhs.indices);
        for &v in loops {
            for (arg, s) in [(&mut arg_a, &sa), (&mut arg_b, &sb), (&mut arg_c, &cs)] {
                if s[&v] != 0 {
                    arg.base.push((v, s[&v]));
                }
            }
        }
        let beta = if self.fresh { 0.0 } else { 1.0 };
        self.written(c, beta == 0.0);
        let half = Some(self.selem(a.tensor)).filter(|e| e.is_half());
        let call = gemm_call(
            (elem, self.opts.tf32, half),
            n_inner,
            [m, n, k, nb],
            [coef, beta],
            GemmSide { arg: arg_a, trans: ta, ld: lda, stride: bs(&sa) },
            GemmSide { arg: arg_b, trans: tb, ld: ldb, stride: bs(&sb) },
            (arg_c, ldc, bs(&cs)),
        );
        let mut body = vec![Step::Gemm(call)];
        for &v in loops.iter().rev() {
            body = vec![Step::Loop { index: v, extent: size(v), body }];
        }
        steps.extend(body);
        Some(steps)
    }

    /// A binary contraction as a cuBLAS call; false when sizes or leading
    /// dimensions exceed cuBLAS's 32-bit arguments.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        vars: &[IndexId],
        mut groups: [Vec<IndexId>; 4],
        out: &mut Vec<Step>,
    ) -> bool {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let (a, b) = (&ops[0], &ops[1]);
        // A variable bound on the host but still indexing a tensor is fine (base offset).
        let size = |v: IndexId| hir.index_size(v) as u64;
        let tot = |g: &[IndexId]| g.iter().map(|&v| size(v)).product::<u64>();
        let (nb, m, n, k) = (tot(&groups[0]), tot(&groups[1]), tot(&groups[2]), tot(&groups[3]));
        if m * n * k == 0 {
            return false;
        }
        let lim = i32::MAX as u64;
        if [nb, m, n, k].iter().any(|&x| x > lim) {
            return false;
        }
        // Orders within groups: the output's for batch, m, n; A's for k.
        let c_strides: HashMap<IndexId, u64> =
            vars.iter().map(|&v| (v, self.stride_in(c, &st.lhs.indices, v))).collect();
        let sc = |v: IndexId| c_strides[&v];
        for g in &mut groups[..3] {
            g.sort_by_key(|&v| std::cmp::Reverse(sc(v)));
        }
        groups[3].sort_by_key(|&v| std::cmp::Reverse(self.stride_in(a.tensor, &a.indices, v)));
        let elem = Elem::of(hir.tensors[c].elem);
        let sizef = |v: IndexId| size(v);
        // Operand i (0 = A over batch, m, k; 1 = B over batch, k, n): its groups.
        let op_groups = |pl: &Planner, o: &Operand, g: [usize; 3]| -> [Grp; 3] {
            let s = |v: IndexId| pl.stride_in(o.tensor, &o.indices, v);
            [merged(&groups[g[0]], &sizef, &s), merged(&groups[g[1]], &sizef, &s), merged(&groups[g[2]], &sizef, &s)]
        };
        let mut steps = Vec::new();
        // Copies an operand into a contiguous scratch buffer laid out as the groups.
        let canon = |pl: &mut Planner, o: &Operand, g: [usize; 3], steps: &mut Vec<Step>| -> (Arg, [Grp; 3]) {
            let order: Vec<IndexId> = g.iter().flat_map(|&gi| groups[gi].iter().copied()).collect();
            let total: u64 = order.iter().map(|&v| size(v)).product();
            let oe = pl.selem(o.tensor);
            let buf = pl.scratch("perm", oe, total);
            let mut strides = vec![0u64; order.len()];
            let mut s = 1;
            for j in (0..order.len()).rev() {
                strides[j] = s;
                s *= size(order[j]);
            }
            let kid = pl.kernel(Kernel {
                name: String::new(),
                elem,
                par: order.iter().map(|&v| size(v)).collect(),
                out_strides: strides,
                red: vec![],
                split_vars: 0,
                split: 1,
                chunk: 1,
                ops: vec![KOperand {
                    elem: oe,
                    func: None,
                    par_strides: order.iter().map(|&v| pl.stride_in(o.tensor, &o.indices, v)).collect(),
                    red_strides: vec![],
                }],
                coef: 1.0,
                store: true,
                tiled: None,
                transpose: None,
                combine: Combine::Sum,
                out: Some(oe).filter(|e| e.is_half()),
                lanes: 1,
            });
            steps.push(Step::Launch {
                kernel: kid,
                args: vec![Arg { buf, base: vec![], offset: 0 }, pl.arg(o.tensor, &o.indices)],
            });
            let t = [tot(&groups[g[0]]), tot(&groups[g[1]]), tot(&groups[g[2]])];
            (
                Arg { buf, base: vec![], offset: 0 },
                [
                    Grp { size: t[0], stride: Some(t[1] * t[2]) },
                    Grp { size: t[1], stride: Some(t[2]) },
                    Grp { size: t[2], stride: Some(1) },
                ],
            )
        };
        let (mut arg_a, mut ga) = (self.arg(a.tensor, &a.indices), op_groups(self, a, [0, 1, 3]));
        let (mut arg_b, mut gb) = (self.arg(b.tensor, &b.indices), op_groups(self, b, [0, 3, 2]));
        let (mut arg_c, mut gc) = (self.arg(c, &st.lhs.indices), {
            let s = |v: IndexId| sc(v);
            [merged(&groups[0], &sizef, &s), merged(&groups[1], &sizef, &s), merged(&groups[2], &sizef, &s)]
        });
        // Output orientation: n contiguous (C^T = B^T A^T) or m contiguous (C = A B).
        let c_ok = |g: &[Grp; 3]| -> Option<(bool, u64)> {
            g[0].stride?;
            if let Some((false, ld)) = view(g[2], g[1]) {
                return Some((true, ld));
            }
            if let Some((false, ld)) = view(g[1], g[2]) {
                return Some((false, ld));
            }
            None
        };
        let mut c_scratch = None;
        let mut beta = if self.fresh { 0.0 } else { 1.0 };
        let (n_inner, ldc) = match c_ok(&gc) {
            Some(x) => x,
            None => {
                // C is no matrix over its m and n groups. Either cuBLAS writes it in
                // place with some of m and n moved to the batch (host loops over what
                // cuBLAS's one batch stride cannot cover), or into a scratch matrix
                // that a copy then adds to C; whichever the cost model predicts faster.
                let eb = elem.bytes() as f64;
                let moved = (nb * m * n) as f64 * eb * if self.fresh { 2.0 } else { 3.0 };
                let scratch_s = cost::gemm_shape_time(elem, n, m, k, nb, 0.0) + cost::LAUNCH_S + moved / cost::HBM_BPS;
                let (nk, nbuf) = (self.kernels.len(), self.buffers.len());
                let promotion =
                    if self.opts.in_place == Some(false) { None } else { self.promotion(st, coef, ops, &groups) };
                if let Some((t, mask)) = promotion {
                    if t < scratch_s || self.opts.in_place == Some(true) {
                        self.kernels.truncate(nk);
                        self.buffers.truncate(nbuf);
                        if let Some(p) = self.promoted(st, coef, ops, &groups, mask) {
                            out.extend(p);
                            return true;
                        }
                    }
                }
                self.kernels.truncate(nk);
                self.buffers.truncate(nbuf);
                // The scratch matrix has C's stride-1 variable innermost, so the copy
                // reads and writes consecutive elements across threads.
                let inner_m = groups[1].last().is_some_and(|&v| sc(v) == 1);
                let buf = self.scratch("out", elem, nb * m * n);
                c_scratch = Some((buf, arg_c.clone(), inner_m));
                arg_c = Arg { buf, base: vec![], offset: 0 };
                beta = 0.0;
                if inner_m {
                    gc = [
                        Grp { size: nb, stride: Some(m * n) },
                        Grp { size: m, stride: Some(1) },
                        Grp { size: n, stride: Some(m) },
                    ];
                    (false, m.max(1))
                } else {
                    gc = [
                        Grp { size: nb, stride: Some(m * n) },
                        Grp { size: m, stride: Some(n) },
                        Grp { size: n, stride: Some(1) },
                    ];
                    (true, n.max(1))
                }
            }
        };
        // (Y, Z) = (B, A) over (n×k, k×m) when n is inner, else (A, B) over (m×k, k×n).
        let ok_a = |g: &[Grp; 3]| {
            g[0].stride.is_some() && if n_inner { view(g[2], g[1]).is_some() } else { view(g[1], g[2]).is_some() }
        };
        let ok_b = |g: &[Grp; 3]| {
            g[0].stride.is_some() && if n_inner { view(g[2], g[1]).is_some() } else { view(g[1], g[2]).is_some() }
        };
        if !ok_a(&ga) {
            let (x, g) = canon(self, a, [0, 1, 3], &mut steps);
            arg_a = x;
            ga = g;
        }
        if !ok_b(&gb) {
            let (x, g) = canon(self, b, [0, 3, 2], &mut steps);
            arg_b = x;
            gb = g;
        }
        let bs = |g: &Grp| if nb == 1 { 0 } else { g.stride.unwrap_or(0) };
        // With n inner, cuBLAS reads each operand as its transpose.
        let (ta, lda) = if n_inner { view(ga[2], ga[1]) } else { view(ga[1], ga[2]) }.expect("checked");
        let (tb, ldb) = if n_inner { view(gb[2], gb[1]) } else { view(gb[1], gb[2]) }.expect("checked");
        if c_scratch.is_none() {
            self.written(c, beta == 0.0);
        }
        let half = Some(self.selem(a.tensor)).filter(|e| e.is_half());
        let call = gemm_call(
            (elem, self.opts.tf32, half),
            n_inner,
            [m, n, k, nb],
            [coef, beta],
            GemmSide { arg: arg_a, trans: ta, ld: lda, stride: bs(&ga[0]) },
            GemmSide { arg: arg_b, trans: tb, ld: ldb, stride: bs(&gb[0]) },
            (arg_c, ldc, bs(&gc[0])),
        );
        if [call.lda, call.ldb, call.ldc].iter().any(|&x| x > lim) {
            return false;
        }
        steps.push(Step::Gemm(call));
        if let Some((buf, real_c, inner_m)) = c_scratch {
            // C += scratch (C = scratch when C was not cleared), scratch laid out
            // [batch][m][n], or [batch][n][m] when m holds C's stride-1 variable.
            let gs = if inner_m { [0, 2, 1] } else { [0, 1, 2] };
            let order: Vec<IndexId> = gs.iter().flat_map(|&g| groups[g].iter().copied()).collect();
            let mut strides = vec![0u64; order.len()];
            let mut s = 1;
            for j in (0..order.len()).rev() {
                strides[j] = s;
                s *= size(order[j]);
            }
            self.written(c, self.fresh);
            let kid = self.kernel(Kernel {
                name: String::new(),
                elem,
                par: order.iter().map(|&v| size(v)).collect(),
                out_strides: order.iter().map(|&v| sc(v)).collect(),
                red: vec![],
                split_vars: 0,
                split: 1,
                chunk: 1,
                ops: vec![KOperand { elem, func: None, par_strides: strides, red_strides: vec![] }],
                coef: 1.0,
                store: self.fresh,
                tiled: None,
                transpose: None,
                combine: Combine::Sum,
                out: self.half_of(c),
                lanes: 1,
            });
            steps.push(Step::Launch { kernel: kid, args: vec![real_c, Arg { buf, base: vec![], offset: 0 }] });
        }
        out.extend(steps);
        true
    }
}

/// Whether `e` reads tensor `t` (its target then has to keep its old values
/// until the statement has read them).
fn reads(e: &crate::sema::hir::Expr, t: TensorId) -> bool {
    use crate::sema::hir::Factor;
    fn factor(f: &Factor, t: TensorId) -> bool {
        match f {
            Factor::Tensor(r) => r.tensor == t,
            Factor::Affine(a) => a.tensor == t,
            Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => reads(arg, t),
            Factor::Select { args, .. } => args.iter().any(|a| factor(a, t)),
        }
    }
    e.terms.iter().flat_map(|term| &term.factors).any(|f| factor(f, t))
}

/// Plans `units` of `hir` for the GPU (no LLVM involved).
///
/// A program with 16-bit (`bf16`, `f16`) tensors is planned as its widened
/// program ([`crate::tir::half::widen`], what the CPU compiles), except that its
/// 16-bit inputs and outputs are stored in 16 bits on the device: kernels and
/// cuBLAS (tensor cores, f32 compute) read them as f32, and an output is
/// rounded once as it is stored, where the CPU rounds it. An output some step
/// would accumulate into is computed in an f32 working buffer instead and
/// rounded into its 16-bit buffer by a last kernel, as the CPU rounds it once
/// when it leaves the program. A declared 16-bit intermediate written by
/// storing steps only is stored in 16 bits too (rounded per statement, as the
/// interpreter does; the CPU keeps it f32), otherwise it stays f32; the
/// optimizer's temporaries are f32.
pub fn plan(hir: &Hir, units: &[UnitId], opts: &GpuOptions) -> Result<GpuPlan, CodegenError> {
    let popts = PipelineOptions::with_mem_limit(Some(opts.mem_limit.unwrap_or(DEFAULT_GPU_MEM_LIMIT)));
    let prepared = crate::pipeline::prepare(hir, &popts);
    let nests = crate::pipeline::fuse(&prepared, units, &popts);
    let mut kernels = Vec::new();
    let mut plans = Vec::new();
    for (&u, nest) in units.iter().zip(&nests) {
        // The CPU library's argument order (declaration order).
        let (args, n_inputs) = crate::codegen::cabi::abi_args(hir, u);
        // The storage of tensor `t`: 16 bits for a 16-bit argument of the unit and
        // for a declared 16-bit intermediate (the optimizer's temporaries come
        // after the source's tensors and are f32).
        let storage = |t: TensorId| match hir.tensors.get(t) {
            Some(x) if x.elem.is_half() && (args.contains(&t) || x.role == Role::Temporary) => Elem::storage(x.elem),
            _ => Elem::of(prepared.tensors[t].elem),
        };
        let mut buffers = Vec::new();
        let mut strides = HashMap::new();
        for (&t, b) in &nest.buffers {
            let tensor = &prepared.tensors[t];
            if tensor.role != Role::Temporary && b.stored.len() != tensor.dims.len() {
                return Err(err(format!("internal: `{}` is sliced", tensor.name)));
            }
            buffers.push(Buf {
                name: tensor.name.clone(),
                tensor: Some(t),
                elem: storage(t),
                elements: b.elements as u64,
                input: tensor.role.is_read_only(),
                shape: prepared.shape(t),
            });
            strides.insert(t, position_strides(&prepared, b));
        }
        // Planned again with a working buffer for each 16-bit output that a
        // step would not simply store (at most once per output).
        let mut work: Vec<TensorId> = Vec::new();
        let n_kernels = kernels.len();
        let (steps, mut p) = loop {
            kernels.truncate(n_kernels);
            let mut bufs = buffers.clone();
            let mut wmap = HashMap::new();
            for &t in &work {
                let j = bufs.iter().position(|b| b.tensor == Some(t)).expect("a buffer");
                bufs.push(Buf {
                    name: format!("_f32_{}", bufs[j].name),
                    tensor: None,
                    elem: Elem::F32,
                    elements: bufs[j].elements,
                    input: false,
                    shape: vec![],
                });
                wmap.insert(t, bufs.len() - 1);
            }
            let mut p = Planner {
                hir: &prepared,
                opts,
                kernels: &mut kernels,
                buffers: bufs,
                strides: strides.clone(),
                bound: Vec::new(),
                fresh: false,
                whole_first: Vec::new(),
                work: wmap,
                need_work: Vec::new(),
            };
            let mut steps = p.nodes(&nest.body, u)?;
            if p.need_work.is_empty() {
                // Each working buffer rounded into its output's 16-bit buffer.
                for &t in &work {
                    let (w, j) = (p.work[&t], p.buffers.iter().position(|b| b.tensor == Some(t)).expect("a buffer"));
                    let n = p.buffers[j].elements;
                    let kid = p.kernel(Kernel {
                        name: String::new(),
                        elem: Elem::F32,
                        par: vec![n],
                        out_strides: vec![1],
                        red: vec![],
                        split_vars: 0,
                        split: 1,
                        chunk: 1,
                        ops: vec![KOperand { elem: Elem::F32, func: None, par_strides: vec![1], red_strides: vec![] }],
                        coef: 1.0,
                        store: true,
                        tiled: None,
                        transpose: None,
                        combine: Combine::Sum,
                        out: Some(p.buffers[j].elem),
                        lanes: 1,
                    });
                    let at = |buf| Arg { buf, base: vec![], offset: 0 };
                    steps.push(Step::Launch { kernel: kid, args: vec![at(j), at(w)] });
                    p.whole_first.push(j);
                }
                let work_bufs: Vec<usize> = p.work.values().copied().collect();
                let keep = (p.buffers, p.whole_first, work_bufs);
                break (steps, keep);
            }
            for &t in &p.need_work {
                if args.contains(&t) {
                    work.push(t);
                } else {
                    // A 16-bit intermediate that would be added to stays f32, as
                    // on the CPU.
                    let j = buffers.iter().position(|b| b.tensor == Some(t)).expect("a buffer");
                    buffers[j].elem = Elem::F32;
                }
            }
        };
        // Scratch buffers (no tensor) are written whole before they are read.
        let mut no_clear = std::mem::take(&mut p.1);
        // (Working buffers of 16-bit outputs are no scratch: they may be added to.)
        no_clear.extend((0..p.0.len()).filter(|&j| p.0[j].tensor.is_none() && !p.2.contains(&j)));
        no_clear.sort_unstable();
        no_clear.dedup();
        let buffers = p.0;
        plans.push(UnitPlan {
            unit: u,
            name: prepared.units[u].name.clone(),
            args,
            n_inputs,
            buffers,
            steps,
            flops: unit_flops(&prepared, u),
            no_clear,
        });
    }
    let mut plan =
        GpuPlan { target: format!("{TRIPLE} {SM} {}", PTX_FEATURES.trim_start_matches('+')), kernels, units: plans };
    super::widen::widen(&mut plan);
    Ok(plan)
}

/// One operand of a cuBLAS GEMM: its argument, whether cuBLAS reads it
/// transposed, its leading dimension and its batch stride.
struct GemmSide {
    arg: Arg,
    trans: bool,
    ld: u64,
    stride: u64,
}

/// The cuBLAS call for C (m × n) = A (m × k) · B (k × n), `batch` times, scaled by
/// `[alpha, beta]`; C is `(argument, ldc, batch stride)`. cuBLAS is column-major:
/// when C's stride-1 variable is in n (`n_inner`) it computes
/// Cᵀ (n × m) = op(Bᵀ) (n × k) · op(Aᵀ) (k × m), the operands swapped.
fn gemm_call(
    (elem, tf32, half): (Elem, bool, Option<Elem>),
    n_inner: bool,
    [m, n, k, batch]: [u64; 4],
    [alpha, beta]: [f64; 2],
    a: GemmSide,
    b: GemmSide,
    (c, ldc, stride_c): (Arg, u64, u64),
) -> GemmCall {
    let (first, second, m, n) = if n_inner { (b, a, n, m) } else { (a, b, m, n) };
    GemmCall {
        elem,
        tf32: tf32 && elem == Elem::F32 && half.is_none(),
        half,
        transa: first.trans,
        transb: second.trans,
        m,
        n,
        k,
        batch,
        alpha,
        beta,
        a: first.arg,
        lda: first.ld,
        stride_a: first.stride,
        b: second.arg,
        ldb: second.ld,
        stride_b: second.stride,
        c,
        ldc,
        stride_c,
    }
}
