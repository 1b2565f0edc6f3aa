//! Executes a [`LoopNest`] with sliced buffers — the check that fusion and memory
//! minimization preserve the reference interpreter's values.
//!
//! Fused statements (tensor factors only) run here, reading each buffer through its
//! stored dimensions; statements that the fusion leaves alone (function calls,
//! parenthesised sums, reading their own target) have no enclosing loop and full
//! buffers, and are run by the reference interpreter's statement evaluator.

use super::fusion::fusible;
use super::{Buffer, LoopNest, Node};
use crate::interp::{exec_stmt, InterpError};
use crate::sema::hir::{Factor, Hir, IdVec, IndexId, Role, Stmt, TensorId};
use crate::tensor::Dense;

use std::collections::HashMap;

struct Machine<'a> {
    hir: &'a Hir,
    nest: &'a LoopNest,
    stmts: &'a [Stmt],
    buffers: HashMap<TensorId, Dense>,
    /// The value of each index bound by an enclosing loop.
    bound: IdVec<IndexId, Option<usize>>,
}

/// Runs the nest on the given inputs and returns every output the unit writes.
pub fn execute(
    hir: &Hir,
    nest: &LoopNest,
    inputs: &HashMap<TensorId, Dense>,
) -> Result<HashMap<TensorId, Dense>, InterpError> {
    let mut buffers = HashMap::new();
    for (&t, b) in &nest.buffers {
        let v = match inputs.get(&t) {
            Some(v) if hir.tensors[t].role.is_read_only() => v.clone(),
            _ if hir.tensors[t].role.is_read_only() => {
                return Err(InterpError::MissingInput { name: hir.tensors[t].name.clone() })
            }
            _ => Dense::zeros(&format!("buffer `{}`", hir.tensors[t].name), stored_shape(hir, b))?,
        };
        buffers.insert(t, v);
    }
    let mut m = Machine {
        hir,
        nest,
        stmts: &hir.units[nest.unit].stmts,
        buffers,
        bound: IdVec::from_elem(None, hir.indices.len()),
    };
    m.run(&nest.body)?;
    let outputs = hir.unit_outputs(nest.unit);
    Ok(m.buffers.into_iter().filter(|(t, _)| outputs.contains(t) && hir.tensors[*t].role == Role::Output).collect())
}

fn stored_shape(hir: &Hir, b: &Buffer) -> Vec<usize> {
    let shape = hir.shape(b.tensor);
    b.stored.iter().map(|&p| shape[p]).collect()
}

impl Machine<'_> {
    fn run(&mut self, nodes: &[Node]) -> Result<(), InterpError> {
        for n in nodes {
            match n {
                Node::Loop { index, extent, body } => {
                    for v in 0..*extent {
                        self.bound[*index] = Some(v);
                        self.run(body)?;
                    }
                    self.bound[*index] = None;
                }
                Node::Zero { tensor, stmt } => self.zero(*tensor, *stmt),
                Node::Compute { stmt } => self.compute(*stmt)?,
            }
        }
        Ok(())
    }

    /// Zeroes the elements of `t`'s buffer that statement `stmt` writes under the
    /// loops bound now: positions whose index is bound are pinned, the rest cleared.
    fn zero(&mut self, t: TensorId, stmt: usize) {
        let b = &self.nest.buffers[&t];
        let idx = self.stmts[stmt].lhs.indices.clone();
        let strides = b.position_strides(self.hir);
        let shape = self.hir.shape(t);
        let data = &mut self.buffers.get_mut(&t).expect("every buffer is allocated").data;
        // Stored positions bound by a loop are pinned; the rest are cleared in full.
        let mut free: Vec<(usize, usize)> = Vec::new();
        let mut base = 0usize;
        for &p in &b.stored {
            match idx.get(p).and_then(|&i| self.bound[i]) {
                Some(v) => base += v * strides[p],
                None => free.push((shape[p], strides[p])),
            }
        }
        let sizes: Vec<usize> = free.iter().map(|f| f.0).collect();
        let steps = vec![free.iter().map(|f| f.1).collect::<Vec<usize>>()];
        let mut counter = vec![0usize; free.len()];
        let mut off = [base];
        loop {
            data[off[0]] = 0.0;
            if !advance(&mut counter, &sizes, &mut off, &steps) {
                return;
            }
        }
    }

    fn compute(&mut self, k: usize) -> Result<(), InterpError> {
        let st = &self.stmts[k];
        if !fusible(self.hir, st) {
            // Never fused: full buffers, no enclosing loop, no `Zero` before it.
            return exec_stmt(self.hir, st, &mut self.buffers, &format!("statement {}", k + 1));
        }
        let hir = self.hir;
        for term in &st.rhs.terms {
            // Loop variables: every index of the term and the target not bound.
            let mut vars: Vec<IndexId> = Vec::new();
            let refs: Vec<(TensorId, &[IndexId])> = std::iter::once((st.lhs.tensor, st.lhs.indices.as_slice()))
                .chain(term.factors.iter().map(|f| match f {
                    Factor::Tensor(r) => (r.tensor, r.indices.as_slice()),
                    _ => unreachable!("fused statements hold tensor factors only"),
                }))
                .collect();
            for (_, idx) in &refs {
                for &i in *idx {
                    if self.bound[i].is_none() && !vars.contains(&i) {
                        vars.push(i);
                    }
                }
            }
            let sizes: Vec<usize> = vars.iter().map(|&i| hir.index_size(i)).collect();
            if sizes.contains(&0) {
                continue;
            }
            // Base offset (bound indices) and per-variable step of each reference.
            let mut bases = Vec::with_capacity(refs.len());
            let mut steps = Vec::with_capacity(refs.len());
            for (t, idx) in &refs {
                let ps = self.nest.buffers[t].position_strides(hir);
                let mut base = 0usize;
                for (p, &i) in idx.iter().enumerate() {
                    if let Some(v) = self.bound[i] {
                        base += v * ps[p];
                    }
                }
                bases.push(base);
                steps.push(
                    vars.iter()
                        .map(|v| idx.iter().zip(&ps).filter(|(i, _)| *i == v).map(|(_, s)| s).sum())
                        .collect::<Vec<usize>>(),
                );
            }
            let mut counter = vec![0usize; vars.len()];
            let mut offs = bases;
            loop {
                let mut p = term.coef;
                for (j, (t, _)) in refs.iter().enumerate().skip(1) {
                    p *= self.buffers[t].data[offs[j]];
                }
                self.buffers.get_mut(&st.lhs.tensor).expect("target allocated").data[offs[0]] += p;
                if !advance(&mut counter, &sizes, &mut offs, &steps) {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// Moves an odometer one step (last variable fastest), keeping each offset in step:
/// `steps[k][v]` is how far offset `k` moves when variable `v` moves by one.
/// Returns false once every combination has been visited.
fn advance(counter: &mut [usize], sizes: &[usize], offs: &mut [usize], steps: &[Vec<usize>]) -> bool {
    for v in (0..counter.len()).rev() {
        counter[v] += 1;
        if counter[v] < sizes[v] {
            for (o, s) in offs.iter_mut().zip(steps) {
                *o += s[v];
            }
            return true;
        }
        for (o, s) in offs.iter_mut().zip(steps) {
            *o -= s[v] * (sizes[v] - 1);
        }
        counter[v] = 0;
    }
    false
}
