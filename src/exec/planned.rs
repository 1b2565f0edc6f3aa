//! Executing a distributed plan on the runtime: `tcc run FILE --ranks N --plan` (in-process
//! ranks) and `mpirun -np N tcc run FILE --backend mpi --plan`.
//!
//! The executor follows a [`Plan`] literally (see "Executing a plan" in
//! `book/src/planner.md`):
//!
//! * every input starts in the layout `plan.initial` gives it: each rank cuts its own
//!   block out of the (replicated) input it was handed, so nothing is scattered and
//!   nothing is counted for it;
//! * per step, the [`CommOp`]s run in order with the algorithms [`CommOp::rank_words`]
//!   counts, all the runtime's: all-to-all directly from each element's canonical copy
//!   (one [`tcc_runtime::dist::exchange`]), all-gathers and reduce-scatters as rings
//!   over the fibre (ranks ordered row-major by their coordinates along the op's grid
//!   dimensions; [`algo::allgatherv`], [`algo::reduce_scatter_ring`] over a
//!   [`Group`]), reduces directly to coordinate 0 ([`algo::reduce_direct`]);
//!   all-gathers with `panels > 1` are delivered panel by panel over the step's
//!   largest contracted index, each panel contracted as it arrives;
//! * the local contraction is a loop over the rank's block of the iteration space;
//! * at the end every output is gathered to rank 0 (counted apart from the plan).
//!
//! Every op's words are measured with the communicator's counters (sent and received,
//! per rank) and recorded next to the prediction, so `--stats` and the tests compare
//! them op by op. Only point-to-point messages are used (no sub-communicators): a
//! fibre's [`Group`] sends the communicator's messages on the op's tag, a ring step
//! ordered even/odd along the ring so that blocking sends (MPI) cannot deadlock, and
//! the all-to-all-v is the pairwise exchange of the `threads` and `mpi-p2p` back ends
//! (empty messages included: they carry no words).

use crate::error::CommandError;
use crate::plan::layout::{coords_of, sub_interval, Layout};
use crate::plan::{
    CommOp, Network, OpKind, OperandPlan, Phase, Plan, PlanNames, PlanOptions, PlanStep, PlanTensor, RankWords,
};
use crate::run::{check_options, run_report, RunOptions};
use crate::sema::hir::{Factor, Hir, IndexId, Role, TensorId, UnitId};
use crate::tensor::Dense;
use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use tcc_runtime::comm::algo::{self, Group, Transport};
use tcc_runtime::comm::{displs, Backend, Communicator, ReduceOp};
use tcc_runtime::dist::{exchange, intersect, pack, unpack, volume, Box_};

/// How `tcc run --plan` plans and reports.
#[derive(Debug, Clone)]
pub struct PlanRunOptions {
    /// In-process ranks (threads world); ignored for MPI.
    pub ranks: usize,
    /// `--network` (as `tcc plan` reads it).
    pub network: String,
    /// `--mem-per-rank` in bytes.
    pub mem_per_rank: Option<u64>,
    pub stats: bool,
}

impl Default for PlanRunOptions {
    fn default() -> Self {
        PlanRunOptions { ranks: 1, network: "fat-tree".into(), mem_per_rank: None, stats: false }
    }
}

/// One executed operation: the prediction and what this rank's counters saw.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// Step (0-based) and op (0-based within the step; `None`: a redistribution the
    /// plan did not list because it moves no words — checked to move none).
    pub step: usize,
    pub op: Option<usize>,
    pub kind: &'static str,
    pub tensor: String,
    pub predicted: RankWords,
    pub sent: u64,
    pub recv: u64,
}

impl OpRecord {
    pub fn matches(&self) -> bool {
        self.sent == self.predicted.sent && self.recv == self.predicted.recv
    }
    /// Measured words charged as the planner charges them.
    pub fn moved(&self) -> u64 {
        match self.kind {
            "reduce-scatter" | "reduce" => self.sent,
            _ => self.recv,
        }
    }
}

/// What one rank's execution of a unit's plan produced.
#[derive(Debug, Clone)]
pub struct PlanRun {
    pub plan: Plan,
    /// Every output of the unit: the values on rank 0, zeros elsewhere.
    pub outputs: HashMap<TensorId, Dense>,
    pub ops: Vec<OpRecord>,
    /// Words this rank sent / received gathering the outputs to rank 0 (not part of
    /// the plan).
    pub gather_sent: u64,
    pub gather_recv: u64,
}

fn fail(code: &'static str, message: String, hint: Option<&str>) -> CommandError {
    CommandError { code, message, hint: hint.map(String::from) }
}

/// Plans unit `u` of the optimized program on `p` ranks.
pub fn plan_for(opt: &Hir, u: UnitId, p: usize, popts: &PlanRunOptions) -> Result<Plan, CommandError> {
    let net = Network::parse(&popts.network)
        .and_then(Network::for_programs)
        .map_err(|m| fail("E0801", m, Some("examples: --network torus:2x2x2, --network fat-tree")))?;
    let mut o = PlanOptions::new(p, net);
    o.mem_per_rank = popts.mem_per_rank;
    crate::plan::plan_unit(opt, u, &o)
}

/// What the executor cannot run: calls, parenthesised sums and constant terms (the
/// planner does not move the data they read).
pub fn check_supported(opt: &Hir, u: UnitId) -> Result<(), CommandError> {
    let hint = Some("run it without --plan (replicate-and-tile execution) or with --interp");
    for (k, st) in opt.units[u].stmts.iter().enumerate() {
        for term in &st.rhs.terms {
            if term.factors.is_empty() {
                return Err(fail(
                    "E0723",
                    format!(
                        "statement {} of `{}` has a constant term: not supported by --plan",
                        k + 1,
                        opt.units[u].name
                    ),
                    hint,
                ));
            }
            for f in &term.factors {
                match f {
                    Factor::Tensor(r) => {
                        let mut seen = Vec::new();
                        if r.indices.iter().any(|i| {
                            let dup = seen.contains(i);
                            seen.push(*i);
                            dup
                        }) {
                            return Err(fail("E0723", format!("statement {} of `{}` reads a diagonal (a repeated index): not supported by --plan", k + 1, opt.units[u].name), hint));
                        }
                    }
                    _ => {
                        return Err(fail(
                            "E0723",
                            format!("statement {} of `{}` has a call or parenthesised sum, which the plan does not distribute: not supported by --plan", k + 1, opt.units[u].name),
                            hint,
                        ))
                    }
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Blocks: a box of the index space (the runtime's `Box_`) and its values, row-major;
// boxes, their intersections and sub-boxes come from `tcc_runtime::dist`.
// ---------------------------------------------------------------------------------

/// An interval per index of a step's iteration space.
type Iv = Vec<(usize, usize)>;

#[derive(Debug, Clone)]
struct Blk {
    bx: Box_,
    data: Vec<f64>,
}

/// The block a layout gives a rank (None on an idle rank), as a runtime box.
fn block_of(l: &Layout, shape: &[usize], rank: usize) -> Option<Box_> {
    l.block(shape, rank).map(|iv| iv.into_iter().map(|(s, e)| s..e).collect())
}

impl Blk {
    fn zeros(bx: Box_) -> Blk {
        let n = volume(&bx);
        Blk { bx, data: vec![0.0; n] }
    }
    fn strides(&self) -> Vec<usize> {
        let mut s = vec![1; self.bx.len()];
        for d in (0..self.bx.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * self.bx[d + 1].len();
        }
        s
    }
    fn extract(&self, sub: &[Range<usize>]) -> Vec<f64> {
        pack(&self.data, &self.bx, sub)
    }
    fn place(&mut self, sub: &[Range<usize>], data: &[f64], add: bool) {
        unpack(&mut self.data, &self.bx, sub, data, add)
    }
}

// ---------------------------------------------------------------------------------
// Communication: the algorithms `CommOp::rank_words` counts, from the runtime
// (`tcc_runtime::comm::algo` over a fibre's `Group`, `tcc_runtime::dist::exchange`).
// ---------------------------------------------------------------------------------

fn rank_of(grid: &[usize], c: &[usize]) -> usize {
    c.iter().zip(grid).fold(0, |r, (&x, &n)| r * n + x)
}

/// The ranks of `rank`'s fibre along `along`, row-major by their coordinates along it.
fn fibre(grid: &[usize], along: &[usize], rank: usize) -> Vec<usize> {
    let c = coords_of(grid, rank);
    let q: usize = along.iter().map(|&g| grid[g]).product();
    (0..q)
        .map(|k| {
            let mut cc = c.clone();
            let mut r = k;
            for &g in along.iter().rev() {
                cc[g] = r % grid[g];
                r /= grid[g];
            }
            rank_of(grid, &cc)
        })
        .collect()
}

/// A panel restriction: tensor dimensions (of the operand) limited to an interval.
type Restrict = Vec<(usize, (usize, usize))>;

fn restricted(mut b: Box_, r: &Restrict) -> Box_ {
    for &(d, (lo, hi)) in r {
        let s = b[d].start.max(lo);
        b[d] = s..b[d].end.min(hi).max(s);
    }
    b
}

/// Ring all-gather of `own` (this rank's block in `op.from`) along `op.along`,
/// limited to the panel `r`: returns the block of `op.to` (restricted).
fn all_gather(comm: &dyn Communicator, op: &CommOp, own: Option<&Blk>, r: &Restrict, tag: u32) -> Option<Blk> {
    let coarse = block_of(&op.to, &op.shape, comm.rank())?;
    let own = own.expect("a rank holding the gathered block holds its stationary block");
    let group = Group::new(comm, fibre(&op.to.grid, &op.along, comm.rank()), tag);
    let blocks: Vec<Box_> = (0..group.size())
        .map(|i| restricted(block_of(&op.from, &op.shape, group.member(i)).expect("fibre ranks hold blocks"), r))
        .collect();
    let counts: Vec<usize> = blocks.iter().map(|b| volume(b)).collect();
    let mut all = vec![0.0; counts.iter().sum()];
    algo::allgatherv(&group, &own.extract(&blocks[group.rank()]), &counts, &mut all);
    let mut out = Blk::zeros(restricted(coarse, r));
    for ((b, d), n) in blocks.iter().zip(displs(&counts)).zip(counts) {
        out.place(b, &all[d..d + n], false);
    }
    Some(out)
}

/// Ring reduce-scatter of the partial block along `op.along`: each rank keeps its
/// block of `op.to`, summed over the fibre.
fn reduce_scatter(comm: &dyn Communicator, op: &CommOp, partial: Option<Blk>, tag: u32) -> Option<Blk> {
    let acc = partial?;
    let group = Group::new(comm, fibre(&op.from.grid, &op.along, comm.rank()), tag);
    let chunks: Vec<Box_> = (0..group.size())
        .map(|i| block_of(&op.to, &op.shape, group.member(i)).expect("fibre ranks hold blocks"))
        .collect();
    let counts: Vec<usize> = chunks.iter().map(|b| volume(b)).collect();
    let send: Vec<f64> = chunks.iter().flat_map(|c| acc.extract(c)).collect();
    let mut mine = Blk::zeros(chunks[group.rank()].clone());
    algo::reduce_scatter_ring(&group, &send, &counts, &mut mine.data, ReduceOp::Sum);
    Some(mine)
}

/// Direct reduce of the partial block to coordinate 0 of the fibre.
fn reduce(comm: &dyn Communicator, op: &CommOp, partial: Option<Blk>, tag: u32) -> Option<Blk> {
    let mut acc = partial?;
    let group = Group::new(comm, fibre(&op.from.grid, &op.along, comm.rank()), tag);
    let root = group.rank() == 0;
    let mut sum = if root { vec![0.0; acc.data.len()] } else { Vec::new() };
    algo::reduce_direct(&group, &acc.data, &mut sum, ReduceOp::Sum, 0);
    acc.data = sum;
    (root && op.to.block(&op.shape, comm.rank()).is_some()).then_some(acc)
}

/// All-to-all from `from` to `to`: every element a rank needs and does not hold comes
/// from its canonical copy (coordinate 0 along `from`'s replicated grid dimensions);
/// ranks holding a copy use their own. One all-to-all-v of the communicator (pairwise
/// exchange on the point-to-point back ends).
fn all_to_all(comm: &dyn Communicator, from: &Layout, to: &Layout, shape: &[usize], own: Option<&Blk>) -> Option<Blk> {
    let (p, me) = (comm.size(), comm.rank());
    let rep = from.replicated_dims();
    let canon = |r: usize| {
        let mut c = coords_of(&from.grid, r);
        for &g in &rep {
            c[g] = 0;
        }
        rank_of(&from.grid, &c)
    };
    let held: Vec<Option<Box_>> = (0..p).map(|r| block_of(from, shape, r)).collect();
    let is_canon = |r: usize| canon(r) == r && held[r].is_some();
    let need = block_of(to, shape, me);
    let out: Vec<Vec<f64>> = (0..p)
        .map(|q| match (is_canon(me) && canon(q) != me).then(|| block_of(to, shape, q)).flatten() {
            Some(n) => intersect(&n, held[me].as_ref().unwrap())
                .map_or_else(Vec::new, |b| own.expect("a canonical holder has its block").extract(&b)),
            None => Vec::new(),
        })
        .collect();
    let pieces: Vec<Option<Box_>> = (0..p)
        .map(|q| match &need {
            Some(n) if is_canon(q) && q != canon(me) => intersect(n, held[q].as_ref().unwrap()),
            _ => None,
        })
        .collect();
    let counts = pieces.iter().map(|b| b.as_ref().map_or(0, |b| volume(b))).collect();
    let got = exchange(comm, out, Some(counts));
    let mut out = need.map(Blk::zeros)?;
    if let Some(ib) = own.and_then(|o| intersect(&o.bx, &out.bx)) {
        out.place(&ib, &own.unwrap().extract(&ib), false);
    }
    for (b, x) in pieces.iter().zip(&got) {
        if let Some(b) = b {
            out.place(b, x, false);
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------------
// The local contraction
// ---------------------------------------------------------------------------------

/// The step's distinct indices (C's, A's, B's) with their extents.
fn step_indices(step: &PlanStep) -> Vec<(IndexId, usize)> {
    let mut v: Vec<(IndexId, usize)> = Vec::new();
    for o in std::iter::once(&step.c).chain(std::iter::once(&step.a)).chain(step.b.as_ref()) {
        for (&x, &n) in o.indices.iter().zip(&o.shape) {
            if !v.iter().any(|&(y, _)| y == x) {
                v.push((x, n));
            }
        }
    }
    v
}

/// This rank's interval of each of the step's indices (None on an idle rank).
fn iteration_block(step: &PlanStep, vars: &[(IndexId, usize)], rank: usize) -> Option<Iv> {
    let c = coords_of(&step.grid, rank);
    let mut iv: Iv = vars.iter().map(|&(_, n)| (0, n)).collect();
    for (g, m) in step.mapping.iter().enumerate() {
        match m.index {
            None if c[g] != 0 => return None,
            None => {}
            Some(x) => {
                let k = vars.iter().position(|&(y, _)| y == x).expect("mapped index of the step");
                iv[k] = sub_interval(0, vars[k].1, step.grid[g], c[g]);
            }
        }
    }
    Some(iv)
}

/// The contracted index the planner cuts panels over: the one with the largest
/// per-rank extent (the last of equals, in the step's index order).
fn panel_index(step: &PlanStep, vars: &[(IndexId, usize)]) -> Option<usize> {
    let inb = |x: &IndexId| step.b.as_ref().is_some_and(|b| b.indices.contains(x));
    let local = |k: usize| {
        step.mapping
            .iter()
            .zip(&step.grid)
            .find(|(m, _)| m.index == Some(vars[k].0))
            .map(|(_, &p)| vars[k].1.div_ceil(p))
            .unwrap_or(vars[k].1)
    };
    (0..vars.len())
        .filter(|&k| step.a.indices.contains(&vars[k].0) && inb(&vars[k].0) && !step.c.indices.contains(&vars[k].0))
        .max_by_key(|&k| local(k))
}

/// `c[block] += coef · Σ a·b` over the iteration box `it` (`vars` order).
fn contract(
    vars: &[(IndexId, usize)],
    it: &[(usize, usize)],
    coef: f64,
    ops: &[(&[IndexId], &Blk)],
    c: (&[IndexId], &mut Blk),
) {
    if crate::plan::layout::volume(it) == 0 {
        return;
    }
    let n = vars.len();
    // Per operand: base offset at the box corner and the stride of each variable.
    let layout = |idx: &[IndexId], b: &Blk| -> (usize, Vec<usize>) {
        let st = b.strides();
        let mut base = 0;
        let mut vs = vec![0; n];
        for (d, x) in idx.iter().enumerate() {
            let k = vars.iter().position(|(y, _)| y == x).unwrap();
            debug_assert!(
                it[k].0 >= b.bx[d].start && it[k].1 <= b.bx[d].end,
                "{x:?}: {:?} not in {:?}",
                it[k],
                b.bx[d]
            );
            base += (it[k].0 - b.bx[d].start) * st[d];
            vs[k] += st[d];
        }
        (base, vs)
    };
    let ol: Vec<(usize, Vec<usize>)> = ops.iter().map(|(i, b)| layout(i, b)).collect();
    let (c_idx, cb) = c;
    let (cbase, cst) = layout(c_idx, cb);
    let sizes: Vec<usize> = it.iter().map(|&(s, e)| e - s).collect();
    let mut cnt = vec![0usize; n];
    let mut offs: Vec<usize> = ol.iter().map(|o| o.0).collect();
    let mut coff = cbase;
    loop {
        let mut p = coef;
        for (k, (_, b)) in ops.iter().enumerate() {
            p *= b.data[offs[k]];
        }
        cb.data[coff] += p;
        let mut v = n;
        loop {
            if v == 0 {
                return;
            }
            v -= 1;
            cnt[v] += 1;
            if cnt[v] < sizes[v] {
                for (o, l) in offs.iter_mut().zip(&ol) {
                    *o += l.1[v];
                }
                coff += cst[v];
                break;
            }
            let back = sizes[v] - 1;
            for (o, l) in offs.iter_mut().zip(&ol) {
                *o -= back * l.1[v];
            }
            coff -= back * cst[v];
            cnt[v] = 0;
        }
    }
}

// ---------------------------------------------------------------------------------
// The executor
// ---------------------------------------------------------------------------------

struct Exec<'a> {
    comm: &'a dyn Communicator,
    names: &'a PlanNames,
    tag: u32,
    ops: Vec<OpRecord>,
}

/// What this rank holds of a live tensor: its layout and its block (None where the
/// layout gives this rank nothing).
#[derive(Clone)]
struct Held {
    layout: Layout,
    block: Option<Blk>,
}

impl Exec<'_> {
    fn next_tag(&mut self) -> u32 {
        self.tag = self.tag % 100_000 + 1;
        self.tag
    }
    /// Runs `f`, recording its words against `predicted`.
    fn counted<T>(
        &mut self,
        step: usize,
        op: Option<usize>,
        kind: &'static str,
        tensor: &str,
        predicted: RankWords,
        f: impl FnOnce(&dyn Communicator, u32) -> T,
    ) -> T {
        let tag = self.next_tag();
        let before = self.comm.stats();
        let out = f(self.comm, tag);
        let after = self.comm.stats();
        if let Some(last) = self.ops.iter_mut().rev().find(|l| op.is_some() && l.step == step && l.op == op) {
            // A panelled all-gather: the panels add up to one op.
            last.sent += after.words_sent - before.words_sent;
            last.recv += after.words_received - before.words_received;
        } else {
            self.ops.push(OpRecord {
                step,
                op,
                kind,
                tensor: tensor.to_string(),
                predicted,
                sent: after.words_sent - before.words_sent,
                recv: after.words_received - before.words_received,
            });
        }
        out
    }
}

/// Every live tensor of the run, by what the plan calls it.
type Live = HashMap<PlanTensor, Held>;

/// Executes `plan` (of unit `u` of the optimized program `opt`) on this rank of
/// `comm`, whose size must be `plan.procs`. `inputs` holds every input of the unit
/// whole (by the tensor ids of `opt`; each rank keeps only its initial block).
pub fn execute_plan(
    opt: &Hir,
    u: UnitId,
    plan: &Plan,
    inputs: &HashMap<TensorId, Dense>,
    comm: &dyn Communicator,
) -> Result<PlanRun, CommandError> {
    check_supported(opt, u)?;
    let (p, me) = (comm.size(), comm.rank());
    if p != plan.procs {
        return Err(fail("E0724", format!("the plan is for {} ranks, this run has {p}", plan.procs), None));
    }
    let mut cur = initial_blocks(opt, plan, inputs, me)?;
    // `TCC_INJECT_FAILURE` applies to plan runs too (it was ignored here).
    crate::exec::distributed::maybe_inject_failure(me);
    let mut ex = Exec { comm, names: &plan.names, tag: 0, ops: Vec::new() };
    for (si, step) in plan.steps.iter().enumerate() {
        let stmt = &opt.units[u].stmts[step.stmt];
        let coef =
            if step.c.tensor == PlanTensor::Tensor(stmt.lhs.tensor) { stmt.rhs.terms[step.term].coef } else { 1.0 };
        let versions = ex.redistribute_before(si, step, &mut cur)?;
        let stationary = ex.stationary_blocks(si, step, &versions, &mut cur)?;
        let partial = ex.gather_and_contract(si, step, coef, &stationary);
        let result = ex.reduce(si, step, partial);
        ex.store_result(si, step, result, &mut cur);
    }
    let before = comm.stats();
    let outputs = gather_outputs(opt, u, &cur, &ex)?;
    let after = comm.stats();
    Ok(PlanRun {
        plan: plan.clone(),
        outputs,
        ops: ex.ops,
        gather_sent: after.words_sent - before.words_sent,
        gather_recv: after.words_received - before.words_received,
    })
}

/// Every input in its initial layout: this rank's block cut out of the whole value.
fn initial_blocks(opt: &Hir, plan: &Plan, inputs: &HashMap<TensorId, Dense>, me: usize) -> Result<Live, CommandError> {
    let mut cur = Live::new();
    for (t, l) in &plan.initial {
        let name = &opt.tensors[*t].name;
        let v = inputs.get(t).ok_or_else(|| fail("E0724", format!("no value for input `{name}`"), None))?;
        let full: Box_ = v.shape.iter().map(|&n| 0..n).collect();
        let block = block_of(l, &v.shape, me).map(|bx| Blk { data: pack(&v.data, &full, &bx), bx });
        cur.insert(PlanTensor::Tensor(*t), Held { layout: l.clone(), block });
    }
    Ok(cur)
}

impl Exec<'_> {
    /// The step's all-to-alls before it, in order. Returns every version made (A and
    /// B may be one tensor wanted in two layouts).
    fn redistribute_before(
        &mut self,
        si: usize,
        step: &PlanStep,
        cur: &mut Live,
    ) -> Result<Vec<(PlanTensor, Held)>, CommandError> {
        let me = self.comm.rank();
        let mut versions = Vec::new();
        for (oi, op) in
            step.ops.iter().enumerate().filter(|(_, o)| o.kind == OpKind::AllToAll && o.phase == Phase::Before)
        {
            let name = self.names.op_tensor(op);
            let held = cur
                .get(&op.tensor)
                .ok_or_else(|| fail("E0724", format!("step {}: `{name}` has no value yet", si + 1), None))?;
            if held.layout != op.from {
                return Err(fail("E0724", format!("step {}: `{name}` is not where the plan says", si + 1), None));
            }
            let b = held.block.clone();
            let nb = self.counted(si, Some(oi), "all-to-all", &name, op.rank_words(me), |c, _| {
                all_to_all(c, &op.from, &op.to, &op.shape, b.as_ref())
            });
            let held = Held { layout: op.to.clone(), block: nb };
            versions.push((op.tensor, held.clone()));
            cur.insert(op.tensor, held);
        }
        Ok(versions)
    }

    /// Each operand's block in its stationary layout (moved, without a word, when
    /// the layouts differ but the plan lists no op).
    fn stationary_blocks(
        &mut self,
        si: usize,
        step: &PlanStep,
        versions: &[(PlanTensor, Held)],
        cur: &mut Live,
    ) -> Result<Vec<Option<Blk>>, CommandError> {
        let mut stat = Vec::new();
        for o in std::iter::once(&step.a).chain(step.b.as_ref()) {
            let k = o.tensor;
            let found = versions.iter().rev().find(|(n, h)| *n == k && h.layout == o.stationary);
            let b = match found {
                Some((_, h)) => h.block.clone(),
                None => {
                    let name = self.names.tensor(k);
                    let Held { layout: l, block: b } = cur
                        .get(&k)
                        .ok_or_else(|| fail("E0724", format!("step {}: `{name}` has no value yet", si + 1), None))?
                        .clone();
                    if l == o.stationary {
                        b
                    } else {
                        // Layouts that differ without moving a word: the plan lists no op.
                        let z = RankWords::default();
                        self.counted(si, None, "all-to-all", &name, z, |c, _| {
                            all_to_all(c, &l, &o.stationary, &o.shape, b.as_ref())
                        })
                    }
                }
            };
            cur.insert(k, Held { layout: o.stationary.clone(), block: b.clone() });
            stat.push(b);
        }
        Ok(stat)
    }

    /// The all-gathers (panel by panel over the step's largest contracted index) and
    /// the local contraction of each panel: this rank's partial block of C.
    fn gather_and_contract(&mut self, si: usize, step: &PlanStep, coef: f64, stat: &[Option<Blk>]) -> Option<Blk> {
        let me = self.comm.rank();
        let operands: Vec<&OperandPlan> = std::iter::once(&step.a).chain(step.b.as_ref()).collect();
        let vars = step_indices(step);
        let it = iteration_block(step, &vars, me);
        let mut partial = block_of(&step.c.stationary, &step.c.shape, me).map(Blk::zeros);
        let gathers: Vec<(usize, &CommOp)> =
            step.ops.iter().enumerate().filter(|(_, o)| o.kind == OpKind::AllGather).collect();
        let panels = step.panels.max(1);
        let pidx = if panels > 1 { panel_index(step, &vars) } else { None };
        let npanels = if pidx.is_some() { panels } else { 1 };
        for k in 0..npanels {
            // This panel of the iteration block.
            let mut pit = it.clone();
            if let (Some(x), Some(b)) = (pidx, pit.as_mut()) {
                b[x] = sub_interval(b[x].0, b[x].1, panels, k);
            }
            let mut gathered: Vec<Option<Blk>> = Vec::new();
            for (n, o) in operands.iter().enumerate() {
                let g = gathers
                    .iter()
                    .find(|(_, op)| o.tensor == op.tensor && op.from == o.stationary && op.to == o.gathered)
                    .filter(|_| o.stationary != o.gathered);
                match g {
                    Some(&(oi, op)) => {
                        let r: Restrict = match (pidx, pit.as_ref()) {
                            (Some(x), Some(b)) => o
                                .indices
                                .iter()
                                .enumerate()
                                .filter(|(_, y)| **y == vars[x].0)
                                .map(|(d, _)| (d, b[x]))
                                .collect(),
                            _ => Vec::new(),
                        };
                        let own = stat[n].clone();
                        let name = self.names.op_tensor(op);
                        gathered.push(self.counted(si, Some(oi), "all-gather", &name, op.rank_words(me), |c, tag| {
                            all_gather(c, op, own.as_ref(), &r, tag)
                        }));
                    }
                    None => gathered.push(stat[n].clone()),
                }
            }
            if let (Some(pit), Some(cb)) = (pit.as_ref(), partial.as_mut()) {
                let a = gathered[0].as_ref().expect("a working rank holds A");
                let mut ins: Vec<(&[IndexId], &Blk)> = vec![(step.a.indices.as_slice(), a)];
                if let Some(b) = &step.b {
                    ins.push((b.indices.as_slice(), gathered[1].as_ref().expect("a working rank holds B")));
                }
                contract(&vars, pit, coef, &ins, (step.c.indices.as_slice(), cb));
            }
        }
        partial
    }

    /// The reductions after the step: C in its final layout.
    fn reduce(&mut self, si: usize, step: &PlanStep, partial: Option<Blk>) -> Held {
        let me = self.comm.rank();
        let mut result = partial;
        let mut layout = step.c.stationary.clone();
        for (oi, op) in
            step.ops.iter().enumerate().filter(|(_, o)| o.phase == Phase::After && o.kind != OpKind::AllToAll)
        {
            let part = result.take();
            let name = self.names.op_tensor(op);
            result = match op.kind {
                OpKind::ReduceScatter => {
                    self.counted(si, Some(oi), "reduce-scatter", &name, op.rank_words(me), |c, tag| {
                        reduce_scatter(c, op, part, tag)
                    })
                }
                _ => self.counted(si, Some(oi), "reduce", &name, op.rank_words(me), |c, tag| reduce(c, op, part, tag)),
            };
            layout = op.to.clone();
        }
        debug_assert_eq!(layout, step.c.gathered);
        Held { layout, block: result }
    }

    /// Stores the step's result: as C's value, or (`+=`) added into C's existing
    /// value in its layout, after the plan's all-to-all.
    fn store_result(&mut self, si: usize, step: &PlanStep, result: Held, cur: &mut Live) {
        let me = self.comm.rank();
        let ckey = step.c.tensor;
        let existing = if step.accumulate { cur.remove(&ckey) } else { None };
        let Some(Held { layout: l, block: mut b }) = existing else {
            cur.insert(ckey, result);
            return;
        };
        let Held { layout, block: result } = result;
        let moved =
            match step.ops.iter().enumerate().find(|(_, o)| o.kind == OpKind::AllToAll && o.phase == Phase::After) {
                Some((oi, op)) => {
                    let name = self.names.op_tensor(op);
                    self.counted(si, Some(oi), "all-to-all", &name, op.rank_words(me), |c, _| {
                        all_to_all(c, &op.from, &op.to, &op.shape, result.as_ref())
                    })
                }
                None if l == layout => result,
                None => {
                    let name = self.names.tensor(ckey);
                    self.counted(si, None, "all-to-all", &name, RankWords::default(), |c, _| {
                        all_to_all(c, &layout, &l, &step.c.shape, result.as_ref())
                    })
                }
            };
        if let (Some(b), Some(m)) = (b.as_mut(), moved) {
            b.place(&m.bx, &m.data, true);
        }
        cur.insert(ckey, Held { layout: l, block: b });
    }
}

/// Gathers every output to rank 0 (not part of the plan): whole on rank 0, zeros
/// elsewhere. Each canonical block goes to rank 0 in one all-to-all-v.
fn gather_outputs(opt: &Hir, u: UnitId, cur: &Live, ex: &Exec) -> Result<HashMap<TensorId, Dense>, CommandError> {
    let (p, me, comm) = (ex.comm.size(), ex.comm.rank(), ex.comm);
    let mut outputs = HashMap::new();
    for t in opt.unit_outputs(u).into_iter().filter(|&t| opt.tensors[t].role == Role::Output) {
        let name = &opt.tensors[t].name;
        let shape = opt.shape(t);
        let Held { layout: l, block: b } = cur
            .get(&PlanTensor::Tensor(t))
            .ok_or_else(|| fail("E0724", format!("output `{name}` was not computed by the plan"), None))?;
        let rep = l.replicated_dims();
        let canonical = |r: usize| rep.iter().all(|&g| coords_of(&l.grid, r)[g] == 0);
        let blocks: Vec<Option<Box_>> = (0..p).map(|r| block_of(l, &shape, r).filter(|_| canonical(r))).collect();
        let mut out = vec![Vec::new(); p];
        if me != 0 && blocks[me].is_some() {
            out[0] = b.as_ref().expect("a rank with a block holds it").data.clone();
        }
        let counts =
            blocks.iter().enumerate().map(|(r, x)| x.as_ref().filter(|_| me == 0 && r != 0).map_or(0, |x| volume(x)));
        let got = exchange(comm, out, Some(counts.collect()));
        let mut full = Blk::zeros(shape.iter().map(|&n| 0..n).collect());
        if me == 0 {
            for (r, x) in blocks.iter().enumerate() {
                if let Some(x) = x {
                    let data = if r == 0 { &b.as_ref().expect("rank 0 holds its block").data } else { &got[r] };
                    full.place(x, data, false);
                }
            }
        }
        outputs.insert(t, Dense::from_vec(shape, full.data));
    }
    Ok(outputs)
}

// ---------------------------------------------------------------------------------
// `tcc run --plan`
// ---------------------------------------------------------------------------------

/// Runs the report on this rank: plans each unit, executes it, and (with `--stats`)
/// appends the measured-versus-predicted table. Returns rank 0's text.
fn rank_body(
    hir: &Hir,
    opt: &Hir,
    ropts: &RunOptions,
    popts: &PlanRunOptions,
    comm: &dyn Communicator,
    backend: &str,
) -> (Vec<u8>, Result<(), CommandError>) {
    let me = comm.rank();
    let mut ropts = ropts.clone();
    if me != 0 {
        ropts.output_dir = None;
        ropts.save_inputs = false;
    }
    let mut runs: Vec<PlanRun> = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let r = {
        let mut exec = |u: UnitId, inputs: &HashMap<TensorId, Dense>| {
            let plan = plan_for(opt, u, comm.size(), popts)?;
            let by_name: HashMap<TensorId, Dense> = inputs
                .iter()
                .filter_map(|(t, v)| opt.tensors.position(|x| x.name == hir.tensors[*t].name).map(|k| (k, v.clone())))
                .collect();
            let run = execute_plan(opt, u, &plan, &by_name, comm)?;
            let outs = run
                .outputs
                .iter()
                .filter_map(|(t, v)| hir.tensors.position(|x| x.name == opt.tensors[*t].name).map(|k| (k, v.clone())))
                .collect();
            runs.push(run);
            Ok((outs, Vec::new()))
        };
        run_report(hir, &ropts, &mut buf, &mut exec)
    };
    if r.is_err() {
        return (buf, r);
    }
    if popts.stats {
        let text = stats_text(&runs, comm, backend);
        if me == 0 {
            buf.extend_from_slice(text.as_bytes());
        }
    }
    (if me == 0 { buf } else { Vec::new() }, Ok(()))
}

/// The `--stats` block (collective: every rank calls it; rank 0's text is printed).
pub fn stats_text(runs: &[PlanRun], comm: &dyn Communicator, backend: &str) -> String {
    let p = comm.size();
    let ops: Vec<&OpRecord> = runs.iter().flat_map(|r| &r.ops).collect();
    // Per op: predicted sent, recv, measured sent, recv; then the gather words.
    let mut row: Vec<f64> =
        ops.iter().flat_map(|o| [o.predicted.sent, o.predicted.recv, o.sent, o.recv]).map(|x| x as f64).collect();
    row.push(runs.iter().map(|r| r.gather_sent).sum::<u64>() as f64);
    row.push(runs.iter().map(|r| r.gather_recv).sum::<u64>() as f64);
    let w = row.len();
    let mut all = vec![0.0; w * p];
    comm.allgather(&row, &mut all);
    let at = |r: usize, k: usize| all[r * w + k] as u64;
    let mut s = format!(
        "stats: {p} ranks, back end {backend}, executing the plan (words are elements; inputs start in their planned layouts, outputs are gathered to rank 0 after the plan and counted apart)\n"
    );
    for run in runs {
        let grids: Vec<String> = run
            .plan
            .steps
            .iter()
            .map(|st| st.grid.iter().map(|g| g.to_string()).collect::<Vec<_>>().join("x"))
            .map(|g| if g.is_empty() { "1".into() } else { g })
            .collect();
        s.push_str(&format!(
            "  plan of `{}`: {} steps on grids {}\n",
            run.plan.unit,
            run.plan.steps.len(),
            grids.join(", ")
        ));
    }
    let mut tot = [0u64; 6];
    for r in 0..p {
        let mut v = [0u64; 4];
        for k in 0..ops.len() {
            for (j, x) in v.iter_mut().enumerate() {
                *x += at(r, 4 * k + j);
            }
        }
        let (gs, gr) = (at(r, 4 * ops.len()), at(r, 4 * ops.len() + 1));
        s.push_str(&format!(
            "  rank {r}  words_sent = {}  predicted_sent = {}  words_received = {}  predicted_received = {}  gather_sent = {gs}  gather_received = {gr}\n",
            v[2], v[0], v[3], v[1]
        ));
        for (t, x) in tot.iter_mut().zip([v[2], v[0], v[3], v[1], gs, gr]) {
            *t += x;
        }
    }
    s.push_str(&format!(
        "  total   words_sent = {}  predicted_sent = {}  words_received = {}  predicted_received = {}  gather_sent = {}  gather_received = {}\n",
        tot[0], tot[1], tot[2], tot[3], tot[4], tot[5]
    ));
    let mut bad = Vec::new();
    for (k, o) in ops.iter().enumerate() {
        for r in 0..p {
            let (ps, pr, ms, mr) = (at(r, 4 * k), at(r, 4 * k + 1), at(r, 4 * k + 2), at(r, 4 * k + 3));
            if (ps, pr) != (ms, mr) {
                bad.push(format!(
                    "step {} {} {} on rank {r}: predicted sent {ps} received {pr}, measured sent {ms} received {mr}",
                    o.step + 1,
                    o.kind,
                    o.tensor
                ));
            }
        }
    }
    if bad.is_empty() {
        s.push_str(&format!("  plan check: measured words equal the prediction exactly (sent and received, every rank, all {} operations)\n", ops.len()));
    } else {
        s.push_str(&format!("  plan check: MISMATCH in {} (operation, rank) pairs\n", bad.len()));
        for b in bad.iter().take(10) {
            s.push_str(&format!("    {b}\n"));
        }
    }
    s
}

/// Errors every rank would meet alike (unsupported constructs, no plan fits),
/// found before any rank starts.
fn precheck(opt: &Hir, ropts: &RunOptions, p: usize, popts: &PlanRunOptions) -> Result<(), CommandError> {
    for u in opt.units.ids() {
        if ropts.program.as_deref().is_some_and(|n| n != opt.units[u].name) {
            continue;
        }
        check_supported(opt, u)?;
        plan_for(opt, u, p, popts)?;
    }
    Ok(())
}

/// `tcc run FILE --ranks N --plan`: in-process ranks, `threads` back end (point to
/// point, counted exactly).
pub fn run_threads(
    hir: &Hir,
    ropts: &RunOptions,
    popts: &PlanRunOptions,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    if popts.ranks == 0 {
        return Err(fail("E0720", "--ranks must be at least 1".into(), None));
    }
    run_ranks(hir, ropts, popts, out, false)
}

/// `mpirun -np N tcc run FILE --backend mpi --plan`: this process is one rank
/// (`mpi-p2p` back end: MPI send/recv, counted exactly).
#[cfg(feature = "mpi")]
pub fn run_mpi(hir: &Hir, ropts: &RunOptions, popts: &PlanRunOptions, out: &mut dyn Write) -> Result<(), CommandError> {
    run_ranks(hir, ropts, popts, out, true)
}

/// Runs the plan on the ranks of [`crate::exec::launch::launch`]; rank 0 writes the
/// report.
fn run_ranks(
    hir: &Hir,
    ropts: &RunOptions,
    popts: &PlanRunOptions,
    out: &mut dyn Write,
    mpi: bool,
) -> Result<(), CommandError> {
    let (backend, name) = if mpi { (Backend::MpiP2p, "mpi-p2p") } else { (Backend::Threads, "threads") };
    let opt = crate::pipeline::optimize(hir, &Default::default()).0;
    let report = crate::exec::launch::launch(
        popts.ranks,
        mpi,
        |make| make(backend),
        |p| check_options(hir, ropts).and_then(|_| precheck(&opt, ropts, p, popts)),
        crate::exec::launch::OnError::Abort(&|e| format!("{}: {}", e.code, e.message)),
        |comm| {
            let (buf, r) = rank_body(hir, &opt, ropts, popts, comm, name);
            r.map(|()| buf)
        },
    )?;
    if let Some(buf) = report {
        out.write_all(&buf).map_err(|e| fail("E0711", format!("cannot write the report: {e}"), None))?;
        let _ = out.flush();
    }
    Ok(())
}

/// Without the `mpi` feature: a clear error.
#[cfg(not(feature = "mpi"))]
pub fn run_mpi(
    _hir: &Hir,
    _ropts: &RunOptions,
    _popts: &PlanRunOptions,
    _out: &mut dyn Write,
) -> Result<(), CommandError> {
    Err(CommandError {
        code: "E0721",
        message: "this tcc was built without MPI support".into(),
        hint: Some("rebuild with `cargo build --features mpi` (needs an MPI library and libclang)".into()),
    })
}
