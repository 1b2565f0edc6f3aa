//! Distributed execution of a checked program over the runtime's ranks.
//!
//! The plan is deliberately simple (the planner will supply better ones):
//!
//! 1. the unit is optimized (`tcc::tir::optimize`, unless `--no-opt`), so most
//!    statements are binary contractions;
//! 2. statements are grouped into *levels*: a statement joins the current level when
//!    it neither reads nor writes a tensor written in the level (so the statements
//!    of a level are independent and run concurrently);
//! 3. each statement's output is cut along its largest left-hand-side index into
//!    tiles (about `4 · ranks` per statement; a scalar output is one tile); the tiles
//!    of all statements of a level form one task set, whose tasks ranks claim
//!    statically (blocks) or dynamically (the shared NXTVAL counter);
//! 4. a task computes its tile with the reference interpreter on the statement
//!    restricted to the tile (the split index replaced by one over the tile's range,
//!    the operands sliced), which sums in exactly the interpreter's order — so a tile
//!    has the same bits as the interpreter's result;
//! 5. at the end of a level every rank all-gathers the tiles (every tensor is
//!    replicated, inputs included), and `=` / `+=` is applied as the interpreter does.
//!
//! Words and messages are counted by the communicator.

use crate::error::CommandError;
use crate::interp;
use crate::run::interp_error;
use crate::sema::hir::{Expr, Factor, Hir, Index, IndexId, Range, Role, Stmt, TensorId, TensorRef, UnitId};
use crate::tensor::Dense;
use std::collections::HashMap;
use tcc_runtime::comm::Communicator;
use tcc_runtime::task::{run_tasks, Schedule, TaskSet, TileSpace};

/// How to run.
#[derive(Debug, Clone, Copy)]
pub struct ExecOptions {
    pub schedule: Schedule,
    /// Tiles per rank per statement (granularity of dynamic scheduling).
    pub tiles_per_rank: usize,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions { schedule: Schedule::Dynamic, tiles_per_rank: 4 }
    }
}

/// What one rank did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskStats {
    pub tasks: u64,
    pub counter_ops: u64,
    pub levels: u64,
}

/// The split of a statement: the left-hand-side index cut into tiles (or none).
fn split_index(hir: &Hir, s: &Stmt) -> Option<IndexId> {
    let mut best: Option<IndexId> = None;
    for &i in &s.lhs.indices {
        if best.is_none_or(|b| hir.index_size(i) > hir.index_size(b)) {
            best = Some(i);
        }
    }
    best
}

fn reads(e: &Expr, out: &mut Vec<TensorId>) {
    crate::sema::hir::collect_reads(e, &mut |t| out.push(t));
}

/// Groups consecutive statements into levels of independent statements.
pub fn levels(stmts: &[Stmt]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut written: Vec<TensorId> = Vec::new();
    for (k, s) in stmts.iter().enumerate() {
        let mut r = Vec::new();
        reads(&s.rhs, &mut r);
        let dependent = written.contains(&s.lhs.tensor) || r.iter().any(|t| written.contains(t));
        if dependent {
            out.push(start..k);
            start = k;
            written.clear();
        }
        written.push(s.lhs.tensor);
    }
    if start < stmts.len() {
        out.push(start..stmts.len());
    }
    out
}

/// Replaces index `from` by `to` everywhere in an expression.
fn rename_expr(e: &mut Expr, from: IndexId, to: IndexId) {
    for t in &mut e.terms {
        for f in &mut t.factors {
            match f {
                Factor::Tensor(r) => r.indices.iter_mut().filter(|i| **i == from).for_each(|i| *i = to),
                Factor::Affine(a) => {
                    a.free.iter_mut().filter(|i| **i == from).for_each(|i| *i = to);
                    for s in &mut a.subs {
                        s.terms.iter_mut().filter(|t| t.1 == from).for_each(|t| t.1 = to);
                    }
                }
                Factor::Call { arg, free, .. } | Factor::Sum { arg, free, .. } | Factor::Reduce { arg, free, .. } => {
                    free.iter_mut().filter(|i| **i == from).for_each(|i| *i = to);
                    rename_expr(arg, from, to);
                }
                Factor::Select { args, free, .. } => {
                    free.iter_mut().filter(|i| **i == from).for_each(|i| *i = to);
                    for a in args {
                        a.with_expr_mut(|e| rename_expr(e, from, to));
                    }
                }
            }
        }
    }
}

/// The tensors referenced with index `x`, with the positions where it appears.
fn refs_with(e: &Expr, x: IndexId, out: &mut Vec<TensorRef>) {
    for t in &e.terms {
        for f in &t.factors {
            match f {
                Factor::Tensor(r) if r.indices.contains(&x) => out.push(r.clone()),
                // Distributed runs refuse affine subscripts (E0765).
                Factor::Tensor(_) | Factor::Affine(_) => {}
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => {
                    refs_with(arg, x, out)
                }
                Factor::Select { args, .. } => args.iter().for_each(|a| refs_with(&a.as_expr(), x, out)),
            }
        }
    }
}

/// `d` restricted to `range` along each dimension in `dims`.
fn slice(d: &Dense, dims: &[usize], range: &std::ops::Range<usize>) -> Dense {
    let mut shape = d.shape.clone();
    for &k in dims {
        shape[k] = range.len();
    }
    let mut data = Vec::with_capacity(shape.iter().product());
    let mut src = vec![0usize; shape.len()];
    crate::tensor::for_each_index(&shape, |idx| {
        src.copy_from_slice(idx);
        for &k in dims {
            src[k] += range.start;
        }
        data.push(d.get(&src));
    });
    Dense::from_vec(shape, data)
}

/// The right-hand side of `s` over its left-hand side's indices, restricted to
/// `range` of index `x` (the whole of it when `x` is `None`), row-major.
pub fn eval_tile(
    hir: &Hir,
    s: &Stmt,
    x: Option<IndexId>,
    range: std::ops::Range<usize>,
    values: &mut HashMap<TensorId, Dense>,
) -> Result<Vec<f64>, CommandError> {
    let mut h = hir.clone();
    let mut st = s.clone();
    st.accumulate = false;
    let mut added: Vec<TensorId> = Vec::new();
    if let Some(x) = x {
        let span = hir.indices[x].span.clone();
        let xr = h.ranges.push(Range {
            name: format!("{}@tile", hir.ranges[hir.indices[x].range].name),
            size: range.len(),
            span: span.clone(),
            model: None,
            size_kind: crate::sema::hir::SizeKind::Fixed,
            tiling: Default::default(),
            parts: Vec::new(),
        });
        let xt = h.indices.push(Index { name: format!("{}@tile", hir.indices[x].name), range: xr, span, model: None });
        // Each tensor read with x becomes a sliced copy under a new id.
        let mut rs = Vec::new();
        refs_with(&st.rhs, x, &mut rs);
        let mut map: HashMap<(TensorId, Vec<usize>), TensorId> = HashMap::new();
        for r in &rs {
            let dims: Vec<usize> = (0..r.indices.len()).filter(|&k| r.indices[k] == x).collect();
            if map.contains_key(&(r.tensor, dims.clone())) {
                continue;
            }
            let mut t = hir.tensors[r.tensor].clone();
            for &k in &dims {
                t.dims[k] = xr;
            }
            t.symmetry.clear();
            t.role = Role::Temporary;
            let id = h.tensors.push(t);
            let v = slice(values.get(&r.tensor).expect("every tensor read has a value"), &dims, &range);
            values.insert(id, v);
            added.push(id);
            map.insert((r.tensor, dims), id);
        }
        retarget(&mut st.rhs, x, &map);
        rename_expr(&mut st.rhs, x, xt);
        st.lhs.indices.iter_mut().filter(|i| **i == x).for_each(|i| *i = xt);
    }
    // A fresh target, so that the statement's own target (if read) keeps its value.
    let mut t = hir.tensors[s.lhs.tensor].clone();
    t.dims = st.lhs.indices.iter().map(|&i| h.indices[i].range).collect();
    t.symmetry.clear();
    t.role = Role::Temporary;
    let target = h.tensors.push(t);
    st.lhs.tensor = target;
    let r = interp::exec_stmt(&h, &st, values, "a tile").map_err(interp_error);
    let v = values.remove(&target);
    for id in added {
        values.remove(&id);
    }
    r?;
    Ok(v.expect("exec_stmt writes its target").data)
}

fn retarget(e: &mut Expr, x: IndexId, map: &HashMap<(TensorId, Vec<usize>), TensorId>) {
    for t in &mut e.terms {
        for f in &mut t.factors {
            match f {
                Factor::Tensor(r) => {
                    let dims: Vec<usize> = (0..r.indices.len()).filter(|&k| r.indices[k] == x).collect();
                    if let Some(&id) = map.get(&(r.tensor, dims)) {
                        r.tensor = id;
                    }
                }
                Factor::Affine(_) => {}
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => {
                    retarget(arg, x, map)
                }
                Factor::Select { args, .. } => {
                    for a in args {
                        a.with_expr_mut(|e| retarget(e, x, map));
                    }
                }
            }
        }
    }
}

/// Runs unit `u` of `hir` (already optimized or not, as the caller chose) on this
/// rank of `comm`; every rank returns every output.
pub fn run_unit(
    hir: &Hir,
    u: UnitId,
    inputs: &HashMap<TensorId, Dense>,
    comm: &dyn Communicator,
    opts: &ExecOptions,
    stats: &mut TaskStats,
) -> Result<HashMap<TensorId, Dense>, CommandError> {
    let (p, me) = (comm.size(), comm.rank());
    let unit = &hir.units[u];
    let mut values: HashMap<TensorId, Dense> = inputs.clone();
    for lvl in levels(&unit.stmts) {
        stats.levels += 1;
        maybe_inject_failure(me);
        let stmts = &unit.stmts[lvl];
        let splits: Vec<Option<IndexId>> = stmts.iter().map(|s| split_index(hir, s)).collect();
        let spaces: Vec<TileSpace> = splits
            .iter()
            .map(|x| match x {
                Some(x) => {
                    let n = hir.index_size(*x);
                    let tiles = (opts.tiles_per_rank.max(1) * p).min(n.max(1));
                    TileSpace::new(vec![n], vec![n.div_ceil(tiles).max(1)])
                }
                None => TileSpace::new(vec![], vec![]),
            })
            .collect();
        let set = TaskSet::new(spaces);
        // Tiles computed here: (task, values).
        let mut mine: Vec<f64> = Vec::new();
        let mut failure: Option<CommandError> = None;
        {
            let counter = comm.counter();
            stats.tasks += run_tasks(set.len(), me, p, opts.schedule, counter.as_ref(), 1, |t| {
                if failure.is_some() {
                    return;
                }
                let (s, k) = set.locate(t);
                let range = set.spaces()[s].tile(k).first().cloned().unwrap_or(0..1);
                match eval_tile(hir, &stmts[s], splits[s], range, &mut values) {
                    Ok(v) => {
                        mine.push(t as f64);
                        mine.extend(v);
                    }
                    Err(e) => failure = Some(e),
                }
            }) as u64;
            stats.counter_ops += counter.ops();
        }
        if let Some(e) = failure {
            // Other ranks wait for this rank's tiles: fail the whole run, never hang.
            panic!("{e}");
        }
        // Every rank gets every tile.
        let mut counts = vec![0.0; p];
        comm.allgather(&[mine.len() as f64], &mut counts);
        let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
        let mut all = vec![0.0; counts.iter().sum()];
        comm.allgatherv(&mine, &counts, &mut all);
        let mut rhs: Vec<Dense> = Vec::new();
        for s in stmts {
            let shape: Vec<usize> = s.lhs.indices.iter().map(|&i| hir.index_size(i)).collect();
            rhs.push(Dense::zeros("a right-hand side", shape).map_err(|e| interp_error(e.into()))?);
        }
        let mut k = 0;
        while k < all.len() {
            let t = all[k] as usize;
            k += 1;
            let (s, tile) = set.locate(t);
            let dense = &mut rhs[s];
            let strides = dense.strides();
            match splits[s] {
                None => {
                    let n = dense.data.len();
                    dense.data.copy_from_slice(&all[k..k + n]);
                    k += n;
                }
                Some(x) => {
                    let pos = stmts[s].lhs.indices.iter().position(|&i| i == x).expect("split index is on the left");
                    let range = set.spaces()[s].tile(tile)[0].clone();
                    let mut shape = dense.shape.clone();
                    shape[pos] = range.len();
                    let mut j = 0;
                    crate::tensor::for_each_index(&shape, |idx| {
                        let off: usize = idx
                            .iter()
                            .enumerate()
                            .map(|(d, &i)| (if d == pos { i + range.start } else { i }) * strides[d])
                            .sum();
                        dense.data[off] = all[k + j];
                        j += 1;
                    });
                    k += j;
                }
            }
        }
        for (s, r) in stmts.iter().zip(rhs) {
            let target = s.lhs.tensor;
            let tname = &hir.tensors[target].name;
            // `=` / `+=` exactly as the interpreter applies them.
            let dst = match values.entry(target) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(
                    Dense::zeros(&format!("tensor `{tname}`"), hir.shape(target))
                        .map_err(|e| interp_error(e.into()))?,
                ),
            };
            if s.accumulate {
                for (d, x) in dst.data.iter_mut().zip(&r.data) {
                    *d += x;
                }
            } else {
                // The right-hand side is over the lhs indices, which are the target's
                // dimensions in order.
                *dst = r;
            }
        }
    }
    Ok(hir
        .unit_outputs(u)
        .into_iter()
        .filter(|&t| hir.tensors[t].role == Role::Output)
        .map(|t| (t, values.remove(&t).expect("an output of the unit was written")))
        .collect())
}

/// Test hook: `TCC_INJECT_FAILURE=RANK:panic` or `RANK:exit` makes that rank fail at
/// the start of its first level (to test that the others do not hang).
pub(crate) fn maybe_inject_failure(rank: usize) {
    let Ok(spec) = std::env::var("TCC_INJECT_FAILURE") else { return };
    let Some((r, mode)) = spec.split_once(':') else { return };
    if r.parse::<usize>().ok() != Some(rank) {
        return;
    }
    match mode {
        "exit" => {
            eprintln!("rank {rank}: exiting (TCC_INJECT_FAILURE)");
            std::process::exit(3)
        }
        _ => panic!("rank {rank}: injected failure (TCC_INJECT_FAILURE)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcc_runtime::comm::threads;
    use tcc_runtime::comm::Backend;

    fn check_file(src: &str, ranks: usize, schedule: Schedule, optimize: bool) {
        let (hir, diags) = crate::compile(src, "t");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
        let exec_hir = if optimize { crate::tir::optimize(&hir).0 } else { hir.clone() };
        for u in hir.units.ids() {
            let inputs = interp::random_inputs(&hir, u, 3).unwrap();
            let want = interp::run_unit(&hir, u, &inputs).unwrap();
            let got = threads::run(ranks, |rank| {
                let c = rank.comm(Backend::Threads);
                let mut st = TaskStats::default();
                run_unit(&exec_hir, u, &inputs, c.as_ref(), &ExecOptions { schedule, tiles_per_rank: 3 }, &mut st)
                    .unwrap()
            })
            .unwrap();
            for g in &got {
                assert_eq!(g.len(), want.len());
                for (t, w) in &want {
                    let v = &g[t];
                    assert_eq!(v.shape, w.shape);
                    if optimize {
                        let d = crate::run::compare::rel_diff(&v.data, &w.data);
                        assert!(d.rel <= 1e-10, "{} vs {}", v.data[d.at], w.data[d.at]);
                    } else {
                        assert_eq!(v.data, w.data, "bitwise equal to the interpreter");
                    }
                }
            }
        }
    }

    const PROGRAMS: &str = r#"
range N = 7; range M = 5;
index i, j, k : N; index a, b : M;
input tensor A[i,a] : f64; input tensor B[a,j] : f64; input tensor S[i,j] : f64 symmetric(i j);
output tensor C[i,j] : f64; output tensor D[i,j] : f64; output tensor e : f64; output tensor v[i] : f64;
C[i,j] = A[i,a] * B[a,j];
D[i,j] = S[j,i] + 2 * A[i,a] * B[a,j];
D[i,j] += D[j,i] * 0.5;
e = C[i,j] * S[i,j];
v[i] = exp(A[i,a] * B[a,i]) + S[i,i];
"#;

    #[test]
    fn distributed_equals_interpreter_bitwise_without_opt() {
        for ranks in [1, 2, 3, 4] {
            for s in [Schedule::Static, Schedule::Dynamic] {
                check_file(PROGRAMS, ranks, s, false);
            }
        }
    }

    #[test]
    fn distributed_optimized_matches_interpreter() {
        check_file(PROGRAMS, 3, Schedule::Dynamic, true);
        let four = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ccsd_terms.tc")).unwrap();
        check_file(&four, 4, Schedule::Dynamic, true);
    }

    #[test]
    fn levels_group_independent_statements() {
        let (hir, _) = crate::compile(PROGRAMS, "t");
        let hir = hir.unwrap();
        let l = levels(&hir.units[UnitId::new(0)].stmts);
        // C and D are independent; D += reads D; e reads C; v is independent of e.
        assert_eq!(l, vec![0..2, 2..5]);
    }
}
