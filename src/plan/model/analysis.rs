//! What the model planner reads from a checked `model` block: parameter counts,
//! forward flops, activations, and the tensors that cross the boundaries of each
//! parallelism (tensor-parallel partial sums, Ulysses all-to-alls, expert
//! dispatch/combine).
//!
//! Dimension roles come from the `dims` names (see `book/src/models.md`):
//! `batch`/`tokens`/`groups`/`samples` are split by data parallelism, `seq`/
//! `sequence` by sequence parallelism, `heads` and `ffn` by tensor parallelism (unless
//! `tensor = N on DIM` names one), `experts`/`expert` by expert parallelism.

use crate::sema::hir::{Expr, Factor, Func, Hir, IndexId, ModelId, RangeId, Role, Stmt, TensorId};
use serde::Serialize;

pub const BATCH_NAMES: [&str; 4] = ["batch", "tokens", "groups", "samples"];
pub const SEQ_NAMES: [&str; 3] = ["seq", "sequence", "seqlen"];
/// Grouped-query attention writes the heads as `kvheads × group`: tensor
/// parallelism splits the key/value heads (each rank keeps whole groups).
pub const TP_DEFAULT: [&str; 4] = ["heads", "kvheads", "kv_heads", "ffn"];
pub const EXPERT_NAMES: [&str; 2] = ["experts", "expert"];
/// Attention heads: all heads, or the key/value heads of grouped-query attention.
pub const HEAD_NAMES: [&str; 3] = ["heads", "kvheads", "kv_heads"];

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
    /// Forward flops of the attention statements (two indices over one sequence
    /// dim): quadratic in the sequence, so decoding one token costs them per
    /// position of the context.
    pub attention_flops: f64,
    /// The KV cache: tensors the attention statements read with the key's
    /// sequence index (K, V), not the query's (Q) nor both (a mask).
    pub kv: Vec<TensorInfo>,
    /// Tensors the layer writes and the values inside its statements the
    /// backward pass needs ([`hidden_values`], named `OWNER~k`): its activations,
    /// in the order the forward pass makes them (a statement's inner values
    /// before its result), which is the reverse of the order the backward frees them.
    pub activations: Vec<TensorInfo>,
    /// Activations that are softmax numerators ([`is_softmax`]): their backward
    /// holds three tensors of their size at once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub softmax: Vec<String>,
    /// Statements with two indices over the sequence (attention scores).
    pub attention: bool,
    /// Statements reading a parameter with an experts dimension.
    pub moe: bool,
    /// Ulysses: tensors with sequence and heads dimensions entering the attention
    /// statements (Q, K, V) and leaving them (O).
    pub ulysses: Vec<TensorInfo>,
    /// Ring attention: the key/value blocks passed around the ring (the
    /// [`LayerInfo::kv`] tensors; a constant mask is sliced locally).
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
    /// Forward flops per block of the statements that produce the KV cache from
    /// the block's input (SwiftKV's prefill runs only these in the layers it skips).
    pub kv_flops: f64,
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
                // A function of one plain tensor reads it: no flops before the call.
                if !(matches!(f, Factor::Call { .. } | Factor::Reduce { .. }) && is_plain(arg)) {
                    total += expr_flops(hir, arg, free);
                }
            }
            // The function itself, once per element of its value.
            if let Factor::Call { free, .. } | Factor::Reduce { free, .. } = f {
                total += free.iter().map(|&i| hir.index_size(i) as f64).product::<f64>();
            }
        }
        let points: f64 = idx.iter().map(|&i| hir.index_size(i) as f64).product();
        // A term that is one function call (or parenthesised sum) costs what is
        // counted above, as it does when it is a statement of its own.
        let lone_call = matches!(&term.factors[..], [Factor::Call { .. } | Factor::Reduce { .. } | Factor::Sum { .. }]);
        if !lone_call {
            total += points * (2.0 * (term.factors.len().max(1) - 1) as f64).max(1.0);
        }
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

/// One tensor, read as it is (the argument of `exp(S)`).
fn is_plain(e: &Expr) -> bool {
    matches!(&e.terms[..], [t] if matches!(&t.factors[..], [Factor::Tensor(_)]))
}

/// Functions whose derivative is a function of their value (exp: y, recip: −y²,
/// sqrt: 1/2y, tanh: 1 − y², sigmoid: y(1 − y)): the backward pass keeps their
/// value, not their argument, as PyTorch's autograd does (it saves the result of
/// `exp`, `softmax`, `reciprocal`, `sqrt`, `tanh`, `sigmoid`). So the attention
/// scores S of `P = exp(S)` are not kept (Korthikanti et al. 2022 count the
/// softmax output, 2as²b of their 5as²b, not the scores).
fn value_derivative(f: Func) -> bool {
    matches!(f, Func::Exp | Func::Recip | Func::Sqrt | Func::Tanh | Func::Sigmoid)
}

/// The values a statement computes on the way to its result that the backward
/// pass needs: the input of a function of more than one plain tensor
/// (`gelu(A·W1)`: A·W1) unless the function's derivative needs only its value
/// ([`value_derivative`]), the value of such a function, and the value of a
/// function or parenthesised sum that is multiplied further (`gelu(…)·W2`).
/// Written as statements of their own they would be tensors the layer writes
/// (kept or not by [`needed`]); counting them here keeps the activations the
/// same however a layer is split into statements. `whole`: `e` is the
/// statement's right-hand side (a lone call there is the result itself).
fn hidden_values(hir: &Hir, e: &Expr, whole: bool, owner: &str, out: &mut Vec<TensorInfo>) {
    let value = |free: &[IndexId], out: &mut Vec<TensorInfo>| {
        let dims = free.iter().map(|&i| hir.ranges[range_of(hir, i)].name.clone()).collect();
        let elements = free.iter().map(|&i| hir.index_size(i) as f64).product();
        let name = format!("{owner}~{}", out.len());
        out.push(TensorInfo { name, dims, elements, expert: false });
    };
    let lone = whole && e.terms.len() == 1;
    for term in &e.terms {
        for f in &term.factors {
            match f {
                Factor::Call { arg, free, func, .. } => {
                    let by_value = value_derivative(*func);
                    if !is_plain(arg) && !by_value {
                        value(free, out);
                    }
                    if term.factors.len() > 1 || (by_value && !lone) {
                        value(free, out);
                    }
                    hidden_values(hir, arg, false, owner, out);
                }
                Factor::Reduce { arg, free, .. } => {
                    if !is_plain(arg) {
                        value(free, out);
                    }
                    if term.factors.len() > 1 {
                        value(free, out);
                    }
                    hidden_values(hir, arg, false, owner, out);
                }
                Factor::Sum { arg, free, .. } => {
                    if term.factors.len() > 1 {
                        value(free, out);
                    }
                    hidden_values(hir, arg, false, owner, out);
                }
                Factor::Tensor(_) | Factor::Affine(_) | Factor::Select { .. } => {}
            }
        }
    }
}

/// Whether the backward pass needs the values of tensor `t`, written by statement
/// `writer`: not when every statement reading it reads it as the whole argument
/// of a [`value_derivative`] function (whose value is kept instead) and its own
/// statement is not such a function (`T = sqrt(R)` keeps T for sqrt's backward).
fn needed(hir: &Hir, stmts: &[Stmt], writer: &Stmt, t: TensorId) -> bool {
    fn only_by_value(e: &Expr, t: TensorId) -> bool {
        e.terms.iter().flat_map(|term| &term.factors).all(|f| match f {
            Factor::Tensor(r) => r.tensor != t,
            Factor::Call { func, arg, .. } if value_derivative(*func) && is_plain(arg) => true,
            Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => only_by_value(arg, t),
            Factor::Affine(_) => true,
            Factor::Select { args, .. } => args.iter().all(|a| only_by_value(&a.as_expr(), t)),
        })
    }
    let own_value = matches!(&writer.rhs.terms[..], [term] if matches!(&term.factors[..],
        [Factor::Call { func, .. }] if value_derivative(*func)));
    hir.tensors[t].role == Role::Output || own_value || !stmts.iter().all(|s| only_by_value(&s.rhs, t))
}

/// Whether `writer` writes a softmax numerator: `P = exp(S)` whose value another
/// statement sums over an index (`Z = P[…, t]`, the normaliser). Its backward,
/// ∂S = P ⊙ (∂P − Σ_t ∂P ⊙ P), holds ∂P, the product ∂P ⊙ P for the row sums and
/// ∂S beside the kept P: PyTorch's CUDA softmax backward allocates all three
/// (`softmax_backward_cuda_out`: `tmp = grad * output`, then the kernel's output),
/// measured on an H100 (bench/models/results.md).
fn is_softmax(stmts: &[Stmt], writer: &Stmt) -> bool {
    let t = writer.lhs.tensor;
    let exp = matches!(&writer.rhs.terms[..], [term] if matches!(&term.factors[..],
        [Factor::Call { func: Func::Exp, .. }]));
    exp && stmts.iter().any(|s| {
        matches!(&s.rhs.terms[..], [term] if matches!(&term.factors[..],
            [Factor::Tensor(r)] if r.tensor == t && r.indices.iter().any(|i| !s.lhs.indices.contains(i))))
    })
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

/// A region of statements (`seed`) grown by the statements that continue it: one
/// whose result keeps a dim of `keep` and whose every activation (not a
/// parameter, not a constant) comes from the region, as `F = relu(F0)` after the
/// expert statement `F0 = D·W1`, or `T = recip(Z)` after attention's `Z`. So
/// splitting a statement of the region in two moves nothing new across its
/// boundary; a statement that leaves the split dim (the combine, `O·Wo`) stays
/// outside.
fn grow_region(hir: &Hir, stmts: &[Stmt], mut inside: Vec<bool>, keep: &[&str]) -> Vec<bool> {
    for k in 0..stmts.len() {
        let lhs = &hir.tensors[stmts[k].lhs.tensor];
        if inside[k] || !lhs.dims.iter().any(|&r| keep.contains(&hir.ranges[r].name.as_str())) {
            continue;
        }
        let acts: Vec<TensorId> = reads(&stmts[k])
            .into_iter()
            .filter(|&t| hir.tensors[t].role != Role::Param && !is_constant(hir, t))
            .collect();
        let from_region = |t: TensorId| stmts[..k].iter().zip(&inside).any(|(s, &i)| i && s.lhs.tensor == t);
        if !acts.is_empty() && acts.iter().all(|&t| from_region(t)) {
            inside[k] = true;
        }
    }
    inside
}

/// The statements on the expert side: the expert statements ([`is_expert`]) and
/// those continuing them ([`grow_region`], keeping the experts dim).
pub fn expert_region(hir: &Hir, stmts: &[Stmt]) -> Vec<bool> {
    grow_region(hir, stmts, stmts.iter().map(|s| is_expert(hir, s)).collect(), &EXPERT_NAMES)
}

/// The statements of attention: those with two indices over one sequence
/// ([`is_attention`]) and those continuing them ([`grow_region`], keeping a
/// heads dim): what Ulysses runs head-split and ring attention runs per block.
pub fn attention_region(hir: &Hir, stmts: &[Stmt]) -> Vec<bool> {
    grow_region(hir, stmts, stmts.iter().map(|s| is_attention(hir, s)).collect(), &HEAD_NAMES)
}

/// A parameter split over the expert ranks: one an expert statement reads.
pub fn is_expert_param(hir: &Hir, stmts: &[Stmt], t: TensorId) -> bool {
    has_experts_dim(hir, t) && stmts.iter().any(|s| is_expert(hir, s) && reads(s).contains(&t))
}

/// A constant: an input without a batch dim (a mask, a position table) is the
/// same on every rank, so each slices it locally and never communicates it.
pub fn is_constant(hir: &Hir, t: TensorId) -> bool {
    hir.tensors[t].role == Role::Input
        && !hir.tensors[t].dims.iter().any(|&r| BATCH_NAMES.contains(&hir.ranges[r].name.as_str()))
}

fn reads(s: &Stmt) -> Vec<TensorId> {
    let mut v = Vec::new();
    crate::sema::hir::collect_reads(&s.rhs, &mut |t| v.push(t));
    v
}

/// Boundary tensors: those written by a statement outside `inside` (or inputs) and
/// read inside, and those written inside and read outside (or outputs), filtered.
fn boundary(hir: &Hir, stmts: &[Stmt], inside: &[bool], keep: impl Fn(&TensorInfo) -> bool) -> Vec<TensorInfo> {
    let mut out: Vec<TensorId> = Vec::new();
    let written_in = |t: TensorId| stmts.iter().zip(inside).any(|(s, &i)| i && s.lhs.tensor == t);
    for (s, &ins) in stmts.iter().zip(inside) {
        for t in reads(s) {
            if hir.tensors[t].role == Role::Param || is_constant(hir, t) {
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

/// The KV cache of the attention statements `att`: the key's sequence indices are
/// those of the attention statements that no tensor leaving them carries (the
/// query's index survives into O; the key's is summed away); a tensor read there
/// with a key index and no query index, not written by an attention statement
/// and not a parameter, is cached for every past position (K, V; a mask over
/// both indices is not).
fn kv_tensors(hir: &Hir, stmts: &[Stmt], att: &[bool]) -> Vec<TensorId> {
    let is_seq = |i: &IndexId| SEQ_NAMES.contains(&hir.ranges[range_of(hir, *i)].name.as_str());
    let written_att = |t: TensorId| stmts.iter().zip(att).any(|(s, &a)| a && s.lhs.tensor == t);
    let read_outside = |t: TensorId| {
        hir.tensors[t].role == Role::Output || stmts.iter().zip(att).any(|(s, &a)| !a && reads(s).contains(&t))
    };
    let mut query: Vec<IndexId> = Vec::new();
    let mut all: Vec<IndexId> = Vec::new();
    for (s, _) in stmts.iter().zip(att).filter(|x| *x.1) {
        all.extend(s.lhs.indices.iter().filter(|i| is_seq(i)));
        all_indices(&s.rhs, &mut all);
        if read_outside(s.lhs.tensor) {
            query.extend(s.lhs.indices.iter().filter(|i| is_seq(i)));
        }
    }
    all.retain(|i| is_seq(i) && !query.contains(i));
    let mut out = Vec::new();
    for (s, _) in stmts.iter().zip(att).filter(|x| *x.1) {
        for term in &s.rhs.terms {
            for f in &term.factors {
                if let Factor::Tensor(r) = f {
                    let t = r.tensor;
                    let key = r.indices.iter().any(|i| all.contains(i));
                    let q = r.indices.iter().any(|i| query.contains(i));
                    let data = hir.tensors[t].role != Role::Param && !is_constant(hir, t);
                    if key && !q && data && !written_att(t) && !out.contains(&t) {
                        out.push(t);
                    }
                }
            }
        }
    }
    out
}

/// The statements of `stmts` that the tensors `want` depend on, back to the
/// inputs (a backward slice).
fn slice_of(stmts: &[Stmt], want: &[TensorId]) -> Vec<usize> {
    let mut need: Vec<TensorId> = want.to_vec();
    let mut out = Vec::new();
    for (k, s) in stmts.iter().enumerate().rev() {
        if need.contains(&s.lhs.tensor) {
            out.push(k);
            need.extend(reads(s));
        }
    }
    out
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
    let att = attention_region(hir, all);
    let strict: Vec<bool> = all.iter().map(|s| is_attention(hir, s)).collect();
    let exp = expert_region(hir, all);
    let ulysses_all = boundary(hir, all, &att, |t| t.has_any(&SEQ_NAMES) && t.has_any(&HEAD_NAMES));
    let moe_all = boundary(hir, all, &exp, |t| t.has_any(&EXPERT_NAMES));
    let kv_all = kv_tensors(hir, all, &att);
    let mut layers = Vec::new();
    for l in &m.layers {
        let stmts = &all[l.stmts.clone()];
        let mut acts: Vec<TensorInfo> = Vec::new();
        let mut hidden: Vec<TensorInfo> = Vec::new();
        // Forward order: each statement's inner values, then its result.
        let mut ordered: Vec<TensorInfo> = Vec::new();
        let mut softmax: Vec<String> = Vec::new();
        for s in stmts {
            let ti = tinfo(hir, s.lhs.tensor);
            let before = hidden.len();
            hidden_values(hir, &s.rhs, true, &ti.name, &mut hidden);
            ordered.extend(hidden[before..].iter().cloned());
            if !acts.contains(&ti) && needed(hir, all, s, s.lhs.tensor) {
                if is_softmax(all, s) {
                    softmax.push(ti.name.clone());
                }
                acts.push(ti.clone());
                ordered.push(ti);
            }
        }
        let in_layer = |t: &TensorInfo| {
            acts.iter().any(|a| a.name == t.name)
                || stmts.iter().any(|s| reads(s).iter().any(|&r| hir.tensors[r].name == t.name))
        };
        let attention = att[l.stmts.clone()].iter().any(|&a| a);
        let moe = exp[l.stmts.clone()].iter().any(|&a| a);
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
        let flops_of = |s: &Stmt| expr_flops(hir, &s.rhs, &s.lhs.indices);
        let kv: Vec<TensorId> = kv_all
            .iter()
            .copied()
            .filter(|&t| stmts.iter().zip(&att[l.stmts.clone()]).any(|(s, &a)| a && reads(s).contains(&t)))
            .collect();
        layers.push(LayerInfo {
            name: l.name.clone(),
            flops: stmts.iter().map(flops_of).sum(),
            attention_flops: stmts.iter().zip(&strict[l.stmts.clone()]).filter(|x| *x.1).map(|x| flops_of(x.0)).sum(),
            kv: kv.iter().map(|&t| tinfo(hir, t)).collect(),
            core_flops: stmts
                .iter()
                .filter(|s| super::recompute::is_core(&tinfo(hir, s.lhs.tensor)))
                .map(|s| expr_flops(hir, &s.rhs, &s.lhs.indices))
                .sum(),
            activations: ordered,
            softmax,
            attention,
            moe,
            ulysses: if attention { ulysses_all.iter().filter(|t| in_layer(t)).cloned().collect() } else { Vec::new() },
            // Ring attention passes the key/value blocks: the KV cache's tensors.
            ring: kv.iter().map(|&t| tinfo(hir, t)).collect(),
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
    let kv_flops = slice_of(all, &kv_all).into_iter().map(|k| expr_flops(hir, &all[k].rhs, &all[k].lhs.indices)).sum();
    ModelInfo { name: m.name.clone(), dims, params, layers, tensor_on, outputs, kv_flops }
}
