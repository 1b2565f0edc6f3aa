//! The planner: distributed schedules for the optimized program under an explicit
//! α-β-γ cost model (see `book/src/planner.md`).
//!
//! Every step of the optimized program (one term of a statement, at most two
//! factors: `C = A·B`, or `C = A`) runs on its own processor grid — a factorization
//! of P into at most four dimensions, each assigned to one index of the step (or
//! idle). The iteration space is cut into blocks by those assignments and each rank
//! computes one block. Operands live in a *stationary* layout: split over the grid
//! dimensions of their own indices, and additionally over every other grid
//! dimension (so that each element lives on exactly one rank). Before computing,
//! each operand is **all-gathered** along the grid dimensions of the indices it
//! lacks; afterwards the partial result is **reduce-scattered** along the grid
//! dimensions of the indices it lacks (summed indices). Between steps, a tensor
//! whose layout differs from what the next step wants is moved by an **all-to-all**.
//! This is the SUMMA / 2.5D / 3D family (Rajbhandari et al. SC'14, CTF) with
//! explicit, exact per-rank word counts: see [`CommOp::rank_words`].
//!
//! An executor follows a [`Plan`] step by step: run the [`CommOp`]s of a step in
//! order (all with `phase: before` first, then the local contraction on the block
//! given by the step's grid, then the ops with `phase: after`); each op says which
//! tensor, on which grid dimensions, from which [`Layout`] to which.

pub mod bounds;
pub mod layout;
pub mod model;
pub mod network;
pub mod report;
mod search;
pub mod sliced;
#[cfg(test)]
mod tests;

use crate::error::CommandError;
use crate::sema::hir::{Hir, IdVec, IndexId, TensorId};
use serde::Serialize;

pub use bounds::{lower_bound, Bound, BoundIndex};
pub use layout::Layout;
pub use network::Network;
pub use search::{plan_unit, plan_units};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Search grids and mappings for the least predicted time.
    Search,
    /// The baseline: a 1D grid of P ranks splitting the result's first index, all
    /// inputs block-distributed on their first dimension, operands all-gathered.
    Naive,
}

#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub procs: usize,
    pub network: Network,
    /// Bytes of memory per rank (None: unlimited).
    pub mem_per_rank: Option<u64>,
    pub strategy: Strategy,
    /// How many of the cheapest mappings of a step (by step time) are re-ranked with
    /// their exact redistribution cost.
    pub shortlist: usize,
}

impl PlanOptions {
    pub fn new(procs: usize, network: Network) -> PlanOptions {
        PlanOptions { procs, network, mem_per_rank: None, strategy: Strategy::Search, shortlist: 24 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// Personalized exchange between two layouts (possibly on different grids).
    AllToAll,
    /// Every rank of a fibre along `along` receives the blocks of the others.
    AllGather,
    /// Partial sums along `along` are added up, each rank keeping its sub-block.
    ReduceScatter,
    /// Partial sums along `along` are added up on coordinate 0 (a scalar result).
    Reduce,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::AllToAll => "all-to-all",
            OpKind::AllGather => "all-gather",
            OpKind::ReduceScatter => "reduce-scatter",
            OpKind::Reduce => "reduce",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Before the local contraction.
    Before,
    /// After it.
    After,
}

/// Words one rank sends and receives in one operation, and the words it is charged
/// with ("moved": received for all-to-all and all-gather, sent for reductions —
/// the data it touches but did not own, which is what the lower bounds count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RankWords {
    pub sent: u64,
    pub recv: u64,
    pub moved: u64,
}

/// One communication operation of a step.
#[derive(Debug, Clone, Serialize)]
pub struct CommOp {
    pub kind: OpKind,
    pub phase: Phase,
    /// The tensor moved (its partial sums for a reduction; for an all-to-all after
    /// the step, the step's new value of it, accumulated into the existing one).
    #[serde(skip)]
    pub tensor: PlanTensor,
    pub shape: Vec<usize>,
    /// Grid dimensions the collective runs along (all of them for an all-to-all).
    pub along: Vec<usize>,
    pub from: Layout,
    pub to: Layout,
    /// An all-gather may be delivered in panels (SUMMA-style) to bound its buffer.
    pub panels: usize,
    pub elem_bytes: usize,
    /// Maxima over ranks.
    pub recv_max: u64,
    pub sent_max: u64,
    pub moved_max: u64,
    /// Sum over ranks of words received.
    pub recv_total: u64,
    /// Message rounds of a rank: ⌈log2 q⌉ per panel for collectives along `q`
    /// ranks (recursive doubling / halving), P−1 for an all-to-all (direct).
    pub msgs_max: u64,
    /// Predicted seconds: α·msgs + β·bytes·congestion (of the busiest rank).
    pub time: f64,
}

impl CommOp {
    /// An op moving `tensor` (of `shape`, `elem_bytes` per element) between the
    /// layouts `(from, to)` along grid dimensions `along`, in one panel; its counts
    /// and time are zero until the caller fills them in.
    pub fn moving(
        kind: OpKind,
        phase: Phase,
        tensor: PlanTensor,
        shape: Vec<usize>,
        along: Vec<usize>,
        (from, to): (Layout, Layout),
        elem_bytes: usize,
    ) -> CommOp {
        CommOp {
            kind,
            phase,
            tensor,
            shape,
            along,
            from,
            to,
            panels: 1,
            elem_bytes,
            recv_max: 0,
            sent_max: 0,
            moved_max: 0,
            recv_total: 0,
            msgs_max: 0,
            time: 0.0,
        }
    }

    /// The rank `delta` positions further along this op's fibre (cyclically).
    pub fn fibre_neighbour(&self, rank: usize, delta: usize) -> usize {
        let grid = &self.to.grid;
        let mut c = layout::coords_of(grid, rank);
        let q: usize = self.along.iter().map(|&g| grid[g]).product();
        if q <= 1 {
            return rank;
        }
        let mut pos = 0;
        for &g in &self.along {
            pos = pos * grid[g] + c[g];
        }
        let mut np = (pos + delta) % q;
        for &g in self.along.iter().rev() {
            c[g] = np % grid[g];
            np /= grid[g];
        }
        c.iter().zip(grid).fold(0, |r, (&x, &n)| r * n + x)
    }

    /// Exact words of one rank. Collectives along `along` run as rings over the
    /// fibre (ranks ordered row-major by their coordinates along `along`): in an
    /// all-gather a rank receives every block of its fibre but its own and forwards
    /// all but its successor's; in a reduce-scatter it sends every chunk of its
    /// partial block but the one it keeps and receives all but its predecessor's.
    /// A reduce (scalar result) sends each partial to coordinate 0 directly. An
    /// all-to-all sends each element from its canonical copy (coordinate 0 along the
    /// source's replicated grid dimensions) to every rank that needs it and does not
    /// hold a copy (`src/exec/planned.rs` executes exactly this).
    pub fn rank_words(&self, rank: usize) -> RankWords {
        let q: u64 = self.along.iter().map(|&g| self.to.grid[g] as u64).product();
        let s = &self.shape;
        match self.kind {
            OpKind::AllGather => {
                let own = self.from.block_size(s, rank);
                let all = self.to.block_size(s, rank);
                let next = self.from.block_size(s, self.fibre_neighbour(rank, 1));
                RankWords { sent: all - next, recv: all - own, moved: all - own }
            }
            OpKind::ReduceScatter => {
                let part = self.from.block_size(s, rank);
                let keep = self.to.block_size(s, rank);
                let prev = self.to.block_size(s, self.fibre_neighbour(rank, q as usize - 1));
                RankWords { sent: part - keep, recv: part - prev, moved: part - keep }
            }
            OpKind::Reduce => {
                let part = self.from.block_size(s, rank);
                let c = self.from.coords(rank);
                let root = self.along.iter().all(|&g| c[g] == 0);
                if root {
                    RankWords { sent: 0, recv: part * (q - 1), moved: 0 }
                } else {
                    RankWords { sent: part, recv: 0, moved: part }
                }
            }
            OpKind::AllToAll => {
                let need = self.to.block(s, rank);
                let own = self.from.block(s, rank);
                let inter = match (&need, &own) {
                    (Some(n), Some(o)) => layout::overlap(n, o),
                    _ => 0,
                };
                let recv = need.as_ref().map(|n| layout::volume(n)).unwrap_or(0) - inter;
                let fc = self.from.coords(rank);
                let rep = self.from.replicated_dims();
                let canonical = rep.iter().all(|&g| fc[g] == 0);
                let sent = match (&own, canonical) {
                    (Some(o), true) => {
                        // Every rank needing an element receives it from the canonical
                        // copy, except the holders of a copy (this rank's replicas along
                        // the replicated dimensions), which use their own.
                        let q: usize = rep.iter().map(|&g| self.from.grid[g]).product();
                        let mut kept = 0;
                        for k in 0..q {
                            let mut c = fc.clone();
                            let mut x = k;
                            for &g in rep.iter().rev() {
                                c[g] = x % self.from.grid[g];
                                x /= self.from.grid[g];
                            }
                            let r = c.iter().zip(&self.from.grid).fold(0, |r, (&x, &n)| r * n + x);
                            if let Some(n) = self.to.block(s, r) {
                                kept += layout::overlap(&n, o);
                            }
                        }
                        layout::volume(o) * self.to.replication() as u64 - kept
                    }
                    _ => 0,
                };
                RankWords { sent, recv, moved: recv }
            }
        }
    }
}

/// A tensor a plan computes or moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PlanTensor {
    /// A tensor of the optimized program.
    Tensor(TensorId),
    /// The intermediate `_p{n}` of a term of more than two factors (planned as a
    /// left-to-right chain of steps).
    Chain(u32),
    /// A call or parenthesised sum: not stored, computed where needed (its label is
    /// `PlanNames::opaque[n]`).
    Opaque(u32),
}

impl PlanTensor {
    /// The stored tensor, `None` for an opaque operand.
    pub fn stored(self) -> Option<PlanTensor> {
        match self {
            PlanTensor::Opaque(_) => None,
            t => Some(t),
        }
    }
}

/// The names a plan's reports use: the optimized program's tensors and indices, and
/// the labels of opaque operands.
#[derive(Debug, Clone, Default)]
pub struct PlanNames {
    pub tensors: IdVec<TensorId, String>,
    pub indices: IdVec<IndexId, String>,
    pub opaque: Vec<String>,
}

impl PlanNames {
    pub fn new(opt: &Hir) -> PlanNames {
        PlanNames {
            tensors: opt.tensors.iter().map(|t| t.name.clone()).collect(),
            indices: opt.indices.iter().map(|i| i.name.clone()).collect(),
            opaque: Vec::new(),
        }
    }

    /// `A`, `_p0`, or an opaque operand's label.
    pub fn tensor(&self, t: PlanTensor) -> String {
        match t {
            PlanTensor::Tensor(t) => self.tensors[t].clone(),
            PlanTensor::Chain(n) => format!("_p{n}"),
            PlanTensor::Opaque(n) => self.opaque[n as usize].clone(),
        }
    }

    pub fn index_name(&self, i: IndexId) -> &str {
        &self.indices[i]
    }

    pub fn indices(&self, idx: &[IndexId]) -> Vec<String> {
        idx.iter().map(|&i| self.indices[i].clone()).collect()
    }

    /// An operand as written in a step: `A[i,k]` (`A` for a scalar), or the label of
    /// an opaque operand.
    pub fn operand(&self, o: &OperandPlan) -> String {
        self.tensor_ref(o.tensor, &o.indices)
    }

    /// `t` with indices `idx`: `A[i,k]`, `A` for a scalar or an opaque operand.
    pub fn tensor_ref(&self, t: PlanTensor, idx: &[IndexId]) -> String {
        match t {
            PlanTensor::Opaque(_) => self.tensor(t),
            _ if idx.is_empty() => self.tensor(t),
            _ => format!("{}[{}]", self.tensor(t), self.indices(idx).join(",")),
        }
    }

    /// What an op moves: `A`, `partial C` (a reduction's partial sums), `new C` (a
    /// step's result on its way into the existing value of C).
    pub fn op_tensor(&self, op: &CommOp) -> String {
        let name = self.tensor(op.tensor);
        match (op.kind, op.phase) {
            (OpKind::Reduce | OpKind::ReduceScatter, _) => format!("partial {name}"),
            (OpKind::AllToAll, Phase::After) => format!("new {name}"),
            _ => name,
        }
    }

    /// A step as text: `C[i,j] += A[i,k] * B[k,j]`.
    pub fn step_text(&self, s: &PlanStep) -> String {
        let rhs = match &s.b {
            Some(b) => format!("{} * {}", self.operand(&s.a), self.operand(b)),
            None => self.operand(&s.a),
        };
        format!("{} {} {}", self.operand(&s.c), if s.accumulate { "+=" } else { "=" }, rhs)
    }
}

/// How a step uses a grid dimension (by where the index it splits occurs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DimClass {
    /// In A, B and C.
    Batch,
    /// In A and C.
    FreeLeft,
    /// In B and C.
    FreeRight,
    /// In A and B, summed.
    Contracted,
    /// In A only, summed.
    SummedLeft,
    /// In B only, summed.
    SummedRight,
    /// In C only.
    Free,
    /// No index: only coordinate 0 works.
    Idle,
}

impl DimClass {
    pub fn name(self) -> &'static str {
        match self {
            DimClass::Batch => "batch",
            DimClass::FreeLeft => "free-left",
            DimClass::FreeRight => "free-right",
            DimClass::Contracted => "contracted",
            DimClass::SummedLeft => "summed-left",
            DimClass::SummedRight => "summed-right",
            DimClass::Free => "free",
            DimClass::Idle => "idle",
        }
    }
}

/// How a grid dimension is used by a step.
#[derive(Debug, Clone)]
pub struct GridDim {
    pub size: usize,
    /// The index it splits, or None when idle (only coordinate 0 works).
    pub index: Option<IndexId>,
    pub class: DimClass,
}

#[derive(Debug, Clone)]
pub struct OperandPlan {
    pub tensor: PlanTensor,
    pub indices: Vec<IndexId>,
    pub shape: Vec<usize>,
    /// Where it must be before the step's gathers.
    pub stationary: Layout,
    /// What each rank holds when computing (after gathers).
    pub gathered: Layout,
}

impl OperandPlan {
    /// A call or parenthesised sum: computed where needed, not moved.
    pub fn opaque(&self) -> bool {
        matches!(self.tensor, PlanTensor::Opaque(_))
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StepCost {
    /// Flops of the whole step (2·∏ extents when it sums, else 1·∏).
    pub flops_total: f64,
    /// Flops of the busiest rank.
    pub flops_max: f64,
    /// Max over ranks of words moved by this step's gathers and reductions.
    pub step_words_max: u64,
    /// The same including redistributions (all-to-all).
    pub words_max: u64,
    pub sent_max: u64,
    pub recv_max: u64,
    pub msgs_max: u64,
    /// Peak memory of a rank in words and bytes (this step's working set plus every
    /// other live tensor's block).
    pub mem_words: u64,
    pub mem_bytes: u64,
    pub time_compute: f64,
    pub time_comm: f64,
    pub time: f64,
}

/// Serialized by `report::plans_json` (which adds the operands, mapping and ops by name).
#[derive(Debug, Clone, Serialize)]
pub struct PlanStep {
    /// Statement (in the optimized unit) and term of this step.
    pub stmt: usize,
    pub term: usize,
    pub accumulate: bool,
    /// The grid (its product is P) and the use of each of its dimensions.
    pub grid: Vec<usize>,
    #[serde(skip)]
    pub mapping: Vec<GridDim>,
    /// Ranks doing work (P divided by idle dimensions).
    pub active_ranks: usize,
    pub panels: usize,
    #[serde(skip)]
    pub a: OperandPlan,
    #[serde(skip)]
    pub b: Option<OperandPlan>,
    /// The result: `stationary` is the partial layout it is computed in, `gathered`
    /// the layout after the reductions (where it lives afterwards, unless
    /// accumulated into an existing layout by a final all-to-all).
    #[serde(skip)]
    pub c: OperandPlan,
    #[serde(skip)]
    pub ops: Vec<CommOp>,
    pub cost: StepCost,
    pub bound: Bound,
    /// step_words_max / bound (None when the bound is 0).
    pub ratio: Option<f64>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub flops: f64,
    /// Max over ranks of the words a rank moves over the whole unit.
    pub words_max: u64,
    /// The same for the steps' own collectives (no redistribution).
    pub step_words_max: u64,
    pub msgs_max: u64,
    pub mem_peak_bytes: u64,
    pub time: f64,
    pub bound_words: f64,
    /// Σ steps' words (no redistribution) / Σ bounds.
    pub ratio: Option<f64>,
}

/// Serialized by `report::plans_json` (which adds the inputs and steps by name).
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub unit: String,
    pub procs: usize,
    pub network: Network,
    pub mem_per_rank: Option<u64>,
    pub strategy: Strategy,
    /// Where each input starts (`distribute` hints, or the layout its first step wants).
    #[serde(skip)]
    pub initial: Vec<(TensorId, Layout)>,
    #[serde(skip)]
    pub steps: Vec<PlanStep>,
    pub totals: Totals,
    pub notes: Vec<String>,
    /// For reports.
    #[serde(skip)]
    pub names: PlanNames,
}

impl Plan {
    /// Where input `t` starts, if the plan reads it.
    pub fn initial_layout(&self, t: TensorId) -> Option<&Layout> {
        self.initial.iter().find(|(x, _)| *x == t).map(|(_, l)| l)
    }

    /// Exact words one rank sends and receives over the whole plan.
    pub fn rank_words(&self, rank: usize) -> RankWords {
        let mut t = RankWords::default();
        for op in self.steps.iter().flat_map(|s| &s.ops) {
            let w = op.rank_words(rank);
            t.sent += w.sent;
            t.recv += w.recv;
            t.moved += w.moved;
        }
        t
    }
}

/// What `tcc plan` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Dot,
}

/// Largest number of ranks planned (counts are checked rank by rank).
pub const MAX_PROCS: usize = 1 << 20;

/// The network of `--network` and a check of `--procs`, for `tcc plan` and
/// its forecast of sliced runs: E0801 a network that does not parse, E0802
/// rank counts out of range.
pub(crate) fn network_and_procs(network: &str, procs: &[usize]) -> Result<Network, CommandError> {
    let net = Network::parse(network).and_then(Network::for_programs).map_err(|m| CommandError {
        code: "E0801",
        message: m,
        hint: Some("examples: --network torus:8x8x16, --network fat-tree:bw=25GB/s,lat=2us, --network net.toml".into()),
    })?;
    if procs.is_empty() || procs.iter().any(|&p| p == 0 || p > MAX_PROCS) {
        return Err(CommandError {
            code: "E0802",
            message: format!("--procs must be between 1 and {MAX_PROCS}"),
            hint: Some("for example --procs 64 or --procs 4,64,1024".into()),
        });
    }
    Ok(net)
}

/// `tcc plan`: optimizes `hir`, plans the selected units for every P in `procs`,
/// and renders the result.
pub fn plan_command(
    hir: &crate::sema::hir::Hir,
    program: Option<&str>,
    procs: &[usize],
    network: &str,
    mem_per_rank: Option<u64>,
    strategy: Strategy,
    format: Format,
) -> Result<String, CommandError> {
    let net = network_and_procs(network, procs)?;
    let units = hir.select_units(program)?;
    let (opt, _) = crate::pipeline::optimize(hir, &Default::default());
    let mut plans = Vec::new();
    let mut failures: Vec<(usize, CommandError)> = Vec::new();
    for &p in procs {
        let mut opts = PlanOptions::new(p, net.clone());
        opts.mem_per_rank = mem_per_rank;
        opts.strategy = strategy;
        match plan_units(&opt, &units, &opts) {
            Ok(v) => plans.extend(v),
            // In a sweep, a P that does not fit is a row of the answer, not an error.
            Err(e) if procs.len() > 1 && e.code == "E0803" => failures.push((p, e)),
            Err(e) => return Err(e),
        }
    }
    if plans.is_empty() {
        if let Some((_, e)) = failures.first() {
            return Err(e.clone());
        }
    }
    Ok(match format {
        Format::Json => {
            let mut v = report::plans_json(&plans);
            v["infeasible"] = serde_json::json!(failures
                .iter()
                .map(|(p, e)| serde_json::json!({"procs": p, "message": e.message}))
                .collect::<Vec<_>>());
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
        }
        Format::Dot => plans.iter().map(report::plan_dot).collect(),
        Format::Text => {
            let mut s: String = plans.iter().map(report::plan_text).collect::<Vec<_>>().join("\n");
            if procs.len() > 1 {
                s.push('\n');
                s.push_str(&report::sweep_text(&plans));
                for (p, e) in &failures {
                    s.push_str(&format!("  P = {p}: does not fit: {}\n", e.message));
                }
            }
            s
        }
    })
}
