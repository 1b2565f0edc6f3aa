//! What the model planner reads from a checked `model` block: parameter counts,
//! forward flops, activations, and the tensors that cross the boundaries of each
//! parallelism (tensor-parallel partial sums, Ulysses all-to-alls, expert
//! dispatch/combine).
//!
//! Dimension roles come from the `dims` names (see `book/src/models.md`):
//! `batch`/`tokens`/`groups`/`samples` are split by data parallelism, `seq`/
//! `sequence` by sequence parallelism, `heads` and `ffn` by tensor parallelism (unless
//! `tensor = N on DIM` names one), `experts`/`expert` by expert parallelism.

use crate::sema::hir::{Expr, Factor, Hir, IndexId, ModelId, RangeId, Role, Stmt, TensorId};
use serde::Serialize;

pub const BATCH_NAMES: [&str; 4] = ["batch", "tokens", "groups", "samples"];
pub const SEQ_NAMES: [&str; 3] = ["seq", "sequence", "seqlen"];
pub const TP_DEFAULT: [&str; 2] = ["heads", "ffn"];
pub const EXPERT_NAMES: [&str; 2] = ["experts", "expert"];

/// A tensor as the planner sees it: name, dimension names, elements.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<String>,
    pub elements: f64,
    /// Parameters: split over the expert ranks ([`is_expert_param`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub expert: bool,
}

impl TensorInfo {
    pub fn has_any(&self, names: &[&str]) -> bool {
        self.dims.iter().any(|d| names.contains(&d.as_str()))
    }
    pub fn has(&self, name: &str) -> bool {
        self.dims.iter().any(|d| d == name)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LayerInfo {
    pub name: String,
    /// Forward flops of the layer (2 per multiply-add of every term, as written).
    pub flops: f64,
    /// Forward flops of the statements writing attention-core tensors (two indices
    /// over one sequence dim): what selective recomputation runs again.
    pub core_flops: f64,
    /// Tensors the layer writes (activations kept for the backward pass).
    pub activations: Vec<TensorInfo>,
    /// Statements with two indices over the sequence (attention scores).
    pub attention: bool,
    /// Statements reading a parameter with an experts dimension.
    pub moe: bool,
    /// Ulysses: tensors with sequence and heads dimensions entering the attention
    /// statements (Q, K, V) and leaving them (O).
    pub ulysses: Vec<TensorInfo>,
    /// Ring attention: tensors read by attention statements with a summed sequence
    /// index (K, V).
    pub ring: Vec<TensorInfo>,
    /// Expert parallelism: tensors with an experts dimension entering the expert
    /// statements (dispatch) and leaving them (combine).
    pub moe_alltoall: Vec<TensorInfo>,
    /// Per statement: indices summed at the top level of some term (for the
    /// tensor-parallel partial sums) and the statement's result.
    pub summed: Vec<(Vec<String>, TensorInfo)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub dims: Vec<(String, usize)>,
    pub params: Vec<TensorInfo>,
    pub layers: Vec<LayerInfo>,
    /// The `tensor = N on DIM` dimension, if given.
    pub tensor_on: Option<String>,
    /// The model's `output` tensors: the next repetition's input, so what a pipeline
    /// stage sends on and what full recomputation keeps per layer.
    pub outputs: Vec<TensorInfo>,
}

impl ModelInfo {
    pub fn dim(&self, name: &str) -> Option<usize> {
        self.dims.iter().find(|(n, _)| n == name).map(|&(_, s)| s)
    }
    /// The first dim with one of these names.
    pub fn dim_any(&self, names: &[&str]) -> Option<(String, usize)> {
        self.dims.iter().find(|(n, _)| names.contains(&n.as_str())).cloned()
    }
    /// Dense parameters (no experts dimension), per block.
    pub fn psi_dense(&self) -> f64 {
        self.params.iter().filter(|p| !p.expert).map(|p| p.elements).sum()
    }
    /// Expert parameters, per block.
    pub fn psi_expert(&self) -> f64 {
        self.params.iter().filter(|p| p.expert).map(|p| p.elements).sum()
    }
    pub fn flops(&self) -> f64 {
        self.layers.iter().map(|l| l.flops).sum()
    }
}

/// Applies `--dim NAME=SIZE` overrides to a model's dims (a copy of the HIR).
pub fn with_dims(hir: &Hir, model: ModelId, overrides: &[(String, usize)]) -> Result<Hir, String> {
    let mut h = hir.clone();
    for (name, size) in overrides {
        let r = h.models[model].dims.iter().copied().find(|&r| h.ranges[r].name == *name);
        match r {
            Some(r) if *size >= 1 => h.ranges[r].size = *size,
            Some(_) => return Err(format!("--dim {name}={size}: a dimension must be ≥ 1")),
            None => {
                let names: Vec<&str> = h.models[model].dims.iter().map(|&r| h.ranges[r].name.as_str()).collect();
                return Err(format!(
                    "model `{}` has no dim `{name}` (it has: {})",
                    h.models[model].name,
                    names.join(", ")
                ));
            }
        }
    }
    Ok(h)
}

fn tinfo(hir: &Hir, t: TensorId) -> TensorInfo {
    let tt = &hir.tensors[t];
    TensorInfo {
        name: tt.name.clone(),
        dims: tt.dims.iter().map(|&r| hir.ranges[r].name.clone()).collect(),
        elements: tt.dims.iter().map(|&r| hir.ranges[r].size as f64).product(),
        expert: false,
    }
}

fn has_experts_dim(hir: &Hir, t: TensorId) -> bool {
    hir.tensors[t].dims.iter().any(|&r| EXPERT_NAMES.contains(&hir.ranges[r].name.as_str()))
}

fn range_of(hir: &Hir, i: IndexId) -> RangeId {
    hir.indices[i].range
}

/// Flops of an expression evaluated over `result` indices: each term costs
/// 2·∏(extents of every index at its level) per factor beyond the first (1·∏ for a
/// single factor), plus the flops of its calls and parenthesised sums.
fn expr_flops(hir: &Hir, e: &Expr, result: &[IndexId]) -> f64 {
    let mut total = 0.0;
    for term in &e.terms {
        let mut idx: Vec<IndexId> = result.to_vec();
        for f in &term.factors {
            for &i in f.indices() {
                if !idx.contains(&i) {
                    idx.push(i);
                }
            }
            if let Factor::Call { arg, free, .. } | Factor::Sum { arg, free, .. } | Factor::Reduce { arg, free, .. } = f
            {
                total += expr_flops(hir, arg, free);
            }
        }
        let points: f64 = idx.iter().map(|&i| hir.index_size(i) as f64).product();
        total += points * (2.0 * (term.factors.len().max(1) - 1) as f64).max(1.0);
    }
    total
}

fn all_indices(e: &Expr, out: &mut Vec<IndexId>) {
    for term in &e.terms {
        for f in &term.factors {
            match f {
                Factor::Tensor(r) => out.extend(&r.indices),
                Factor::Affine(a) => out.extend(&a.free),
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => {
                    all_indices(arg, out)
                }
                Factor::Select { args, .. } => args.iter().for_each(|a| all_indices(&a.as_expr(), out)),
            }
        }
    }
}

/// A statement with two distinct indices over one sequence range: attention scores.
pub fn is_attention(hir: &Hir, s: &Stmt) -> bool {
    let mut idx = s.lhs.indices.clone();
    all_indices(&s.rhs, &mut idx);
    idx.sort();
    idx.dedup();
    let seq: Vec<RangeId> =
        idx.iter().map(|&i| range_of(hir, i)).filter(|&r| SEQ_NAMES.contains(&hir.ranges[r].name.as_str())).collect();
    (0..seq.len()).any(|a| (a + 1..seq.len()).any(|b| seq[a] == seq[b]))
}

/// An expert statement: it multiplies a parameter with an experts dimension by an
/// activation that has one too (tokens dispatched to experts meet their weights).
/// A router (gating) weight `[hidden, experts]` meets only token activations: its
/// statement and the weight are dense — replicated, not split over expert ranks.
pub fn is_expert(hir: &Hir, s: &Stmt) -> bool {
    let (mut param, mut activation) = (false, false);
    crate::sema::hir::collect_reads(&s.rhs, &mut |t| {
        if has_experts_dim(hir, t) {
            if hir.tensors[t].role == Role::Param {
                param = true;
            } else {
                activation = true;
            }
        }
    });
    param && activation
}

/// A parameter split over the expert ranks: one an expert statement reads.
pub fn is_expert_param(hir: &Hir, stmts: &[Stmt], t: TensorId) -> bool {
    has_experts_dim(hir, t) && stmts.iter().any(|s| is_expert(hir, s) && reads(s).contains(&t))
}

fn reads(s: &Stmt) -> Vec<TensorId> {
    let mut v = Vec::new();
    crate::sema::hir::collect_reads(&s.rhs, &mut |t| v.push(t));
    v
}

/// Tensors read at the top level of a term with an index that is summed there.
fn read_with_summed(hir: &Hir, s: &Stmt, range_names: &[&str]) -> Vec<TensorId> {
    let mut out = Vec::new();
    for term in &s.rhs.terms {
        for f in &term.factors {
            if let Factor::Tensor(r) = f {
                if r.indices.iter().any(|i| {
                    !s.lhs.indices.contains(i) && range_names.contains(&hir.ranges[range_of(hir, *i)].name.as_str())
                }) {
                    out.push(r.tensor);
                }
            }
        }
    }
    out
}

/// Boundary tensors: those written by a statement outside `inside` (or inputs) and
/// read inside, and those written inside and read outside (or outputs), filtered.
fn boundary(hir: &Hir, stmts: &[Stmt], inside: &[bool], keep: impl Fn(&TensorInfo) -> bool) -> Vec<TensorInfo> {
    let mut out: Vec<TensorId> = Vec::new();
    let written_in = |t: TensorId| stmts.iter().zip(inside).any(|(s, &i)| i && s.lhs.tensor == t);
    for (s, &ins) in stmts.iter().zip(inside) {
        for t in reads(s) {
            let role = hir.tensors[t].role;
            if role == Role::Param {
                continue;
            }
            let crosses = if ins { !written_in(t) } else { written_in(t) };
            if crosses && !out.contains(&t) {
                out.push(t);
            }
        }
        if ins && hir.tensors[s.lhs.tensor].role == Role::Output && !out.contains(&s.lhs.tensor) {
            out.push(s.lhs.tensor);
        }
    }
    out.into_iter().map(|t| tinfo(hir, t)).filter(|t| keep(t)).collect()
}

/// Reads a model (with its dims already overridden) for the planner.
pub fn analyze(hir: &Hir, model: ModelId) -> ModelInfo {
    let m = &hir.models[model];
    let unit = &hir.units[m.unit];
    let dims: Vec<(String, usize)> = m.dims.iter().map(|&r| (hir.ranges[r].name.clone(), hir.ranges[r].size)).collect();
    let mut params: Vec<TensorInfo> = Vec::new();
    let mut seen = Vec::new();
    for s in &unit.stmts {
        for t in reads(s) {
            if hir.tensors[t].role == Role::Param && !seen.contains(&t) {
                seen.push(t);
                params.push(tinfo(hir, t));
            }
        }
    }
    // Declared parameters that no statement reads still count.
    for (t, tt) in hir.tensors.iter_enumerated() {
        if tt.role == Role::Param && tt.model == Some(model) && !seen.contains(&t) {
            seen.push(t);
            params.push(tinfo(hir, t));
        }
    }
    for (p, &t) in params.iter_mut().zip(&seen) {
        // Unread: by its dims alone.
        let read = unit.stmts.iter().any(|s| reads(s).contains(&t));
        p.expert = if read { is_expert_param(hir, &unit.stmts, t) } else { has_experts_dim(hir, t) };
    }
    let all: &[Stmt] = &unit.stmts;
    let att: Vec<bool> = all.iter().map(|s| is_attention(hir, s)).collect();
    let exp: Vec<bool> = all.iter().map(|s| is_expert(hir, s)).collect();
    let ulysses_all = boundary(hir, all, &att, |t| t.has_any(&SEQ_NAMES) && t.has("heads"));
    let moe_all = boundary(hir, all, &exp, |t| t.has_any(&EXPERT_NAMES));
    let mut layers = Vec::new();
    for l in &m.layers {
        let stmts = &all[l.stmts.clone()];
        let mut acts: Vec<TensorInfo> = Vec::new();
        for s in stmts {
            let ti = tinfo(hir, s.lhs.tensor);
            if !acts.contains(&ti) {
                acts.push(ti);
            }
        }
        let in_layer = |t: &TensorInfo| {
            acts.iter().any(|a| a.name == t.name)
                || stmts.iter().any(|s| reads(s).iter().any(|&r| hir.tensors[r].name == t.name))
        };
        let attention = att[l.stmts.clone()].iter().any(|&a| a);
        let moe = exp[l.stmts.clone()].iter().any(|&a| a);
        let mut ring = Vec::new();
        for (k, s) in stmts.iter().enumerate() {
            if !att[l.stmts.start + k] {
                continue;
            }
            for t in read_with_summed(hir, s, &SEQ_NAMES) {
                let written_att = all.iter().zip(&att).any(|(s2, &a)| a && s2.lhs.tensor == t);
                let ti = tinfo(hir, t);
                if !written_att && !ring.contains(&ti) {
                    ring.push(ti);
                }
            }
        }
        let summed = stmts
            .iter()
            .map(|s| {
                let mut names = Vec::new();
                for term in &s.rhs.terms {
                    for f in &term.factors {
                        for &i in f.indices() {
                            let n = hir.ranges[range_of(hir, i)].name.clone();
                            if !s.lhs.indices.contains(&i) && !names.contains(&n) {
                                names.push(n);
                            }
                        }
                    }
                }
                (names, tinfo(hir, s.lhs.tensor))
            })
            .collect();
        layers.push(LayerInfo {
            name: l.name.clone(),
            flops: stmts.iter().map(|s| expr_flops(hir, &s.rhs, &s.lhs.indices)).sum(),
            core_flops: stmts
                .iter()
                .filter(|s| super::recompute::is_core(&tinfo(hir, s.lhs.tensor)))
                .map(|s| expr_flops(hir, &s.rhs, &s.lhs.indices))
                .sum(),
            activations: acts.clone(),
            attention,
            moe,
            ulysses: if attention { ulysses_all.iter().filter(|t| in_layer(t)).cloned().collect() } else { Vec::new() },
            ring,
            moe_alltoall: if moe { moe_all.iter().filter(|t| in_layer(t)).cloned().collect() } else { Vec::new() },
            summed,
        });
    }
    let tensor_on = m.parallel.tensor.and_then(|(_, r)| r).map(|r| hir.ranges[r].name.clone());
    let mut outputs: Vec<TensorInfo> = Vec::new();
    for s in &unit.stmts {
        let t = s.lhs.tensor;
        if hir.tensors[t].role == Role::Output && !outputs.iter().any(|o| o.name == hir.tensors[t].name) {
            outputs.push(tinfo(hir, t));
        }
    }
    ModelInfo { name: m.name.clone(), dims, params, layers, tensor_on, outputs }
}
