//! Inference plans (`tcc plan-model --inference`), DeepSpeed-Inference style
//! (Aminabadi et al. 2022): the devices are split into replicas, each over
//! `p` pipeline stages of `t` tensor-parallel ranks, and with a mixture of
//! experts `e` replicas share one copy of the experts (DeepSpeed-MoE
//! inference: an all-to-all per layer each way); a replica serves its share of
//! the batch (the model's batch dim: concurrent sequences) with prompts of the
//! seq dim's length and generates `--generate` tokens per sequence. Stages
//! hold their layers' weights and KV cache and pass the hidden state on; the
//! replica's sequences run as micro-batches in flight through them.
//!
//! Prefill runs the block's forward on the whole prompt (compute-bound); each
//! decode step runs it on one new token per sequence, reading every weight and
//! the whole KV cache from device memory (memory-bound at small batches): a step
//! costs max(flops at the rate, bytes at `hbm=`) plus the tensor group's
//! all-reduces. The KV cache per token and sequence is read from the model (the
//! tensors attention reads at the key's position: 2·kv_heads·head_dim elements
//! per layer with grouped-query attention). SwiftKV (Qiao et al. 2024,
//! SingleInputKV) is a model transform of the prefill: the last fraction of the
//! layers compute only their KV cache (from one earlier layer's output), not the
//! rest of the block.

use super::analysis::{ModelInfo, TensorInfo, BATCH_NAMES, SEQ_NAMES};
use super::report::{fmt_bytes, fmt_count};
use super::{param_local, ModelOptions, FP16, NCCL_BYTES_PER_COMM};
use crate::error::CommandError;
use crate::plan::network::fmt_time;
use serde::Serialize;

/// What a serving run looks like: tokens generated per sequence and SwiftKV's
/// share of layers whose prefill computes only the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Serving {
    pub generate: usize,
    pub swiftkv: f64,
}

/// The model per token and sequence, whole block (one repetition), before any split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerToken {
    /// Forward flops of the statements linear in the sequence, per token.
    pub linear_flops: f64,
    /// Forward flops of the attention statements per (query, key) pair.
    pub pair_flops: f64,
    /// SwiftKV: forward flops per token that produce the KV cache.
    pub kv_flops: f64,
    /// KV-cache elements per token (2·kv_heads·head_dim for K and V).
    pub kv_elements: f64,
}

/// Samples and sequence positions of a tensor: the sizes of its batch and seq
/// dims. A tensor of capacity slots without a seq dim (an MoE layer's
/// dispatched tokens `D[b,x,c,m]`, C = k·cf·S/E per sequence) holds its
/// sequence's tokens in them: per token it is divided by the prompt too.
fn positions(t: &TensorInfo, info: &ModelInfo) -> f64 {
    let p: f64 = t
        .dims
        .iter()
        .filter(|d| BATCH_NAMES.contains(&d.as_str()) || SEQ_NAMES.contains(&d.as_str()))
        .map(|d| info.dim(d).unwrap_or(1) as f64)
        .product();
    if t.has("capacity") && !t.has_any(&SEQ_NAMES) {
        p * batch_and_prompt(info).1 as f64
    } else {
        p
    }
}

/// The model's batch (concurrent sequences) and prompt length: the batch and seq dims.
pub fn batch_and_prompt(info: &ModelInfo) -> (usize, usize) {
    (info.dim_any(&BATCH_NAMES).map_or(1, |x| x.1), info.dim_any(&SEQ_NAMES).map_or(1, |x| x.1))
}

pub fn per_token(info: &ModelInfo) -> PerToken {
    let (b, p) = batch_and_prompt(info);
    let (b, p) = (b as f64, p as f64);
    let att: f64 = info.layers.iter().map(|l| l.attention_flops).sum();
    PerToken {
        linear_flops: (info.flops() - att) / (b * p),
        pair_flops: att / (b * p * p),
        kv_flops: info.kv_flops / (b * p),
        kv_elements: info.layers.iter().flat_map(|l| &l.kv).map(|t| t.elements / positions(t, info)).sum(),
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct InferenceMemory {
    /// fp16/bf16 weights of this rank's tensor share.
    pub weights: f64,
    /// The KV cache of the replica's sequences at the full context (prompt +
    /// generated), this rank's share.
    pub kv_cache: f64,
    /// The prefill's working set: one block's tensors for the replica's prompts
    /// (the attention scores not stored, as flash-style kernels do; all the
    /// replica's prompts even when a pipeline takes them in micro-batches, an
    /// upper bound that keeps the largest batch exact), and with `--vocab` each
    /// sequence's last logits.
    pub activations: f64,
    /// NCCL's buffers for the tensor group.
    pub workspace: f64,
    pub total: f64,
}

/// One inference plan.
#[derive(Debug, Clone, Serialize)]
pub struct InferencePlan {
    pub tensor: usize,
    pub tensor_dims: Vec<String>,
    /// Pipeline stages per replica ([`Shape::pipeline`]) and the layers of the fullest.
    pub pipeline: usize,
    pub stage_layers: usize,
    /// Micro-batches in flight through the pipeline (1 without one).
    pub micro_batches: usize,
    /// Expert-parallel degree: replicas sharing one copy of the experts.
    pub expert: usize,
    pub replicas: usize,
    /// Sequences one replica serves at once.
    pub batch_per_replica: usize,
    pub memory: InferenceMemory,
    pub fits: bool,
    /// KV-cache bytes per token and sequence, whole model, on one rank.
    pub kv_bytes_per_token: f64,
    /// Prefill: flops per rank, and its time (time to first token).
    pub prefill_flops: f64,
    pub prefill_time: f64,
    /// Of it, the tensor group's all-reduces.
    pub prefill_comm: f64,
    /// Decode steps (generate − 1; the prefill yields the first token), their
    /// total time and the mean per token.
    pub decode_steps: usize,
    pub decode_time: f64,
    pub time_per_token: f64,
    /// Of the decode time, the collectives (all-reduces, expert all-to-alls,
    /// stage sends) on a token's path through the stages, and the steps bound
    /// by memory.
    pub decode_comm: f64,
    /// Of those, the expert all-to-alls and the sends between stages.
    pub decode_alltoall: f64,
    pub decode_p2p: f64,
    pub memory_bound_steps: usize,
    /// Weights and KV cache read by the fullest stage in the last decode step,
    /// bytes per rank.
    pub last_step_bytes: f64,
    /// Prefill + decode: one request's latency.
    pub latency: f64,
    /// Generated tokens per second over all devices.
    pub throughput: f64,
    /// The most sequences per replica that fit in memory, and the throughput then.
    pub max_batch_per_replica: Option<usize>,
    pub max_batch_throughput: Option<f64>,
}

/// How a serving job splits its devices: `replicas` copies of the dense model,
/// each over `pipeline` stages of `tensor` ranks; `expert` replicas share one
/// copy of the experts (DeepSpeed-MoE inference), so devices = replicas ×
/// pipeline × tensor. Ranks are ordered tensor-innermost, then the expert
/// group, then the stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub tensor: usize,
    pub pipeline: usize,
    pub expert: usize,
    pub replicas: usize,
}

fn config(info: &ModelInfo, tensor: usize, replicas: usize) -> super::Config {
    super::Config { data: replicas, tensor, tensor_dims: super::tp_dims(info), ..Default::default() }
}

fn shape_config(info: &ModelInfo, sh: &Shape) -> super::Config {
    super::Config { expert: sh.expert, ..config(info, sh.tensor, sh.replicas) }
}

/// Layers of each of `p` stages: the first L mod p take one more.
fn stage_layer_counts(layers: usize, p: usize) -> Vec<usize> {
    (0..p).map(|k| layers / p + usize::from(k < layers % p)).collect()
}

/// The share of a tensor one rank of the tensor group holds.
fn tp_share(t: &TensorInfo, c: &super::Config) -> f64 {
    if c.tensor_dims.iter().any(|d| t.has(d)) {
        1.0 / c.tensor as f64
    } else {
        1.0
    }
}

/// One all-reduce of `elements` fp16 values over a group of `t` consecutive
/// ranks: NCCL's ring or tree, whichever is cheaper ([`super::collective`]).
fn allreduce(t: usize, elements: f64, o: &ModelOptions) -> f64 {
    if t <= 1 || elements <= 0.0 {
        return 0.0;
    }
    let beta = if t <= o.gpus_per_node.max(1) { 1.0 / o.intra_bw } else { o.network.beta };
    super::collective::cost(super::Coll::AllReduce, &o.link(t, t, beta), elements * FP16).0
}

/// Evaluates tensor degree `t`, `replicas` replicas, `b` sequences per replica
/// (no pipeline, no expert parallelism).
pub fn evaluate(info: &ModelInfo, t: usize, replicas: usize, b: usize, s: &Serving, o: &ModelOptions) -> InferencePlan {
    evaluate_shape(info, &Shape { tensor: t, pipeline: 1, expert: 1, replicas }, b, s, o)
}

/// Micro-batches a replica's `b` sequences are split into through `p` stages:
/// the most, up to p, that divide b (p keep every stage busy).
pub fn in_flight(b: usize, p: usize) -> usize {
    (1..=p.min(b).max(1)).rev().find(|m| b.is_multiple_of(*m)).unwrap_or(1)
}

/// Evaluates one shape serving `b` sequences per replica.
///
/// A stage's pass is max(flops at the rate, its weights and KV cache at
/// `hbm=`) plus its collectives. With p stages and m micro-batches in flight,
/// a micro-batch's token takes the sum of the stages plus p − 1 sends, and a
/// stage cannot start a micro-batch's next token before its last one is
/// done, so a decode step (every sequence one token further) is
/// max(Σ stages + (p − 1) sends, m × the fullest stage); the prefill of all
/// m micro-batches ends (m − 1) fullest stages after the first's.
pub fn evaluate_shape(info: &ModelInfo, sh: &Shape, b: usize, s: &Serving, o: &ModelOptions) -> InferencePlan {
    let (t, pp, replicas) = (sh.tensor, sh.pipeline.max(1), sh.replicas);
    let c = shape_config(info, sh);
    let layers_total = o.layers.max(1);
    let counts = stage_layer_counts(layers_total, pp);
    let ls_max = counts.iter().copied().max().unwrap_or(1);
    let (_, prompt) = batch_and_prompt(info);
    let pt = per_token(info);
    let m = in_flight(b, pp);
    let bm = (b / m) as f64;
    let (bf, pf, g) = (b as f64, prompt as f64, s.generate as f64);
    // `--vocab`: the embedding (first stage) and the output layer (last
    // stage), vocab-parallel, whose logits are computed for the last position
    // of each sequence only.
    let (vocab, hidden) = (o.vocab.unwrap_or(0) as f64, super::vocab::hidden(info).unwrap_or(0) as f64);
    let head_flops = 2.0 * hidden * vocab / t as f64;
    let table = FP16 * vocab * hidden / t as f64;
    let layer_weights = FP16 * info.params.iter().map(|p| param_local(p, &c)).sum::<f64>();
    // A stage's weights: its layers, and the embedding on the first, the
    // output layer on the last.
    let stage_weights = |k: usize| {
        layer_weights * counts[k] as f64 + if k == 0 { table } else { 0.0 } + if k + 1 == pp { table } else { 0.0 }
    };
    let weights = (0..pp).map(stage_weights).fold(0.0, f64::max);
    let kv_layer = FP16
        * info
            .layers
            .iter()
            .flat_map(|l| &l.kv)
            .map(|k| k.elements / positions(k, info) * tp_share(k, &c))
            .sum::<f64>();
    let kv_tok = kv_layer * ls_max as f64;
    // One block's tensors per token on this rank, without the attention core.
    let act_tok: f64 = info
        .layers
        .iter()
        .flat_map(|l| &l.activations)
        .filter(|a| !super::recompute::is_core(a))
        .map(|a| a.elements / positions(a, info) * tp_share(a, &c))
        .sum();
    // Elements per token of each of the tensor group's partial sums, per block:
    // one all-reduce each.
    let ar_tok: Vec<f64> = info
        .layers
        .iter()
        .flat_map(|l| &l.summed)
        .filter(|(summed, _)| c.tensor_dims.iter().any(|d| summed.contains(d)))
        .map(|(_, r)| r.elements / positions(r, info) * tp_share(r, &c))
        .collect();
    let all_reduces = |tokens: f64| ar_tok.iter().map(|&e| allreduce(t, tokens * e, o)).sum::<f64>();
    // Expert parallelism: the tensors entering and leaving the experts
    // (dispatch, combine) go by all-to-all over the expert group, per layer.
    let gpn = o.gpus_per_node.max(1);
    let beta_for = |span: usize| if span <= gpn { 1.0 / o.intra_bw } else { o.network.beta };
    let a2a_tok: Vec<f64> = if sh.expert > 1 {
        info.layers
            .iter()
            .flat_map(|l| &l.moe_alltoall)
            .map(|x| x.elements / positions(x, info) * tp_share(x, &c))
            .collect()
    } else {
        Vec::new()
    };
    let a2a_span = sh.expert * t;
    let a2a_beta = beta_for(a2a_span) * if a2a_span > gpn { o.network.alltoall_congestion() } else { 1.0 };
    let alltoalls = |tokens: f64| {
        a2a_tok
            .iter()
            .map(|&e| {
                super::collective::cost(
                    super::Coll::AllToAll,
                    &o.link(sh.expert, a2a_span, a2a_beta),
                    tokens * e * FP16,
                )
                .0
            })
            .sum::<f64>()
    };
    // A stage sends the block's outputs (the next layer's input) to the next.
    let out_tok: f64 = info.outputs.iter().map(|x| x.elements / positions(x, info)).sum();
    let hop_span = 2 * sh.expert * t;
    let hop = |tokens: f64| {
        if pp <= 1 {
            return 0.0;
        }
        let l = o.link(2, hop_span, beta_for(hop_span));
        super::collective::cost(super::Coll::SendRecv, &l, tokens * out_tok * FP16).0
    };
    // The vocab-parallel embedding's output is a partial sum too, once per pass.
    let embedding = |tokens: f64| if vocab > 0.0 { allreduce(t, tokens * hidden, o) } else { 0.0 };
    let mut mem = InferenceMemory {
        weights,
        kv_cache: bf * (pf + g) * kv_tok,
        activations: FP16 * bf * pf * act_tok + super::vocab::LOGIT_BYTES * bf * vocab / t as f64,
        workspace: if t > 1 || sh.expert > 1 || pp > 1 { NCCL_BYTES_PER_COMM } else { 0.0 },
        total: 0.0,
    };
    mem.total = mem.weights + mem.kv_cache + mem.activations + mem.workspace;
    let gamma = o.network.gamma;
    let hbm = o.network.hbm;
    let tf = t as f64;
    // SwiftKV: the last ⌊F·L⌋ layers compute only their KV cache in the
    // prefill, no collective; stage k holds layers [first_k, first_k + n_k).
    let skipped_total = (s.swiftkv * layers_total as f64).floor() as usize;
    let skip_from = layers_total - skipped_total;
    let firsts: Vec<usize> = counts
        .iter()
        .scan(0, |acc, &n| {
            let f = *acc;
            *acc += n;
            Some(f)
        })
        .collect();
    // One stage's prefill of one micro-batch: (time, flops, collectives).
    let prefill_stage = |k: usize| {
        let (first, n) = (firsts[k], counts[k]);
        let skipped = (first + n).saturating_sub(skip_from.max(first)) as f64;
        let full = n as f64 - skipped;
        let last = k + 1 == pp;
        let flops = (full * bm * (pf * pt.linear_flops + pf * pf * pt.pair_flops) + skipped * bm * pf * pt.kv_flops)
            / tf
            + if last { bm * head_flops } else { 0.0 };
        let comm = full * (all_reduces(bm * pf) + alltoalls(bm * pf)) + if k == 0 { embedding(bm * pf) } else { 0.0 };
        ((flops * gamma).max(stage_weights(k) / hbm) + comm, flops, comm)
    };
    let stages: Vec<(f64, f64, f64)> = (0..pp).map(prefill_stage).collect();
    let sum_t: f64 = stages.iter().map(|x| x.0).sum();
    let max_t = stages.iter().map(|x| x.0).fold(0.0, f64::max);
    let hops_prefill = (pp - 1) as f64 * hop(bm * pf);
    let prefill_time = sum_t + hops_prefill + (m - 1) as f64 * max_t;
    let prefill_flops = stages.iter().map(|x| x.1).fold(0.0, f64::max) * m as f64;
    let prefill_comm = stages.iter().map(|x| x.2).sum::<f64>() + hops_prefill;
    // Decode: the step that produces token j + 1 attends to prompt + j positions.
    let steps = s.generate.saturating_sub(1);
    let (mut decode_time, mut decode_comm, mut bound, mut last_bytes) = (0.0, 0.0, 0, 0.0);
    let (mut decode_a2a, mut decode_p2p) = (0.0, 0.0);
    let hop_decode = (pp - 1) as f64 * hop(bm);
    let k_max = counts.iter().position(|&n| n == ls_max).unwrap_or(0);
    for j in 1..=steps {
        let ctx = pf + j as f64;
        let (mut sum, mut max, mut comm, mut a2a) = (0.0, 0.0f64, 0.0, 0.0);
        for (k, &layers_k) in counts.iter().enumerate() {
            let n = layers_k as f64;
            let flops =
                n * bm * (pt.linear_flops + ctx * pt.pair_flops) / tf + if k + 1 == pp { bm * head_flops } else { 0.0 };
            let bytes = stage_weights(k) + bm * ctx * kv_layer * n;
            let x = n * alltoalls(bm);
            let cm = n * all_reduces(bm) + x + if k == 0 { embedding(bm) } else { 0.0 };
            let time = (flops * gamma).max(bytes / hbm) + cm;
            if k == k_max {
                if bytes / hbm >= flops * gamma {
                    bound += 1;
                }
                last_bytes = bytes;
            }
            sum += time;
            max = max.max(time);
            comm += cm;
            a2a += x;
        }
        decode_time += (sum + hop_decode).max(m as f64 * max);
        decode_comm += comm + hop_decode;
        decode_a2a += a2a;
        decode_p2p += hop_decode;
    }
    let latency = prefill_time + decode_time;
    let fits = o.mem_per_device.is_none_or(|mm| mem.total <= mm as f64);
    InferencePlan {
        tensor: t,
        tensor_dims: c.tensor_dims.clone(),
        pipeline: pp,
        stage_layers: ls_max,
        micro_batches: m,
        expert: sh.expert,
        replicas,
        batch_per_replica: b,
        fits,
        kv_bytes_per_token: kv_tok,
        prefill_flops,
        prefill_time,
        prefill_comm,
        decode_steps: steps,
        decode_time,
        time_per_token: if steps > 0 { decode_time / steps as f64 } else { 0.0 },
        decode_comm,
        decode_alltoall: decode_a2a,
        decode_p2p,
        memory_bound_steps: bound,
        last_step_bytes: last_bytes,
        latency,
        throughput: if latency > 0.0 { replicas as f64 * bf * g / latency } else { 0.0 },
        max_batch_per_replica: o.mem_per_device.map(|mm| {
            let per_seq = (pf + g) * kv_tok + FP16 * pf * act_tok + super::vocab::LOGIT_BYTES * vocab / t as f64;
            let free = mm as f64 - mem.weights - mem.workspace;
            if free <= 0.0 || per_seq <= 0.0 {
                0
            } else {
                (free / per_seq).floor() as usize
            }
        }),
        max_batch_throughput: None,
        memory: mem,
    }
}

/// Why tensor degree `t` with `replicas` replicas cannot serve this model, if not.
pub fn invalid(info: &ModelInfo, t: usize, replicas: usize) -> Option<String> {
    invalid_shape(info, &Shape { tensor: t, pipeline: 1, expert: 1, replicas }, 1)
}

/// Why a shape cannot serve this model with `layers` layers, if it cannot.
pub fn invalid_shape(info: &ModelInfo, sh: &Shape, layers: usize) -> Option<String> {
    if sh.pipeline > layers.max(1) {
        return Some(format!("pipeline: {} stages for {} layers", sh.pipeline, layers.max(1)));
    }
    if sh.expert > 1 && info.psi_expert() == 0.0 {
        return Some("expert: the model has no expert parameters".into());
    }
    // The replicas are the data-parallel degree: say so.
    super::invalid(info, &shape_config(info, sh)).map(|e| match e.strip_prefix("data:") {
        Some(rest) => format!("replicas:{rest}"),
        None => match e.strip_prefix("expert:") {
            Some(rest) => format!("expert:{}", rest.replace("data × sequence", "replicas")),
            None => e,
        },
    })
}

/// Every shape whose tensor × pipeline degree divides the devices (the rest
/// are replicas, grouped for expert parallelism by every degree dividing
/// them and the experts), honouring the `tensor`, `pipeline`, `expert` and
/// `data` (replicas) hints; plans that fit first, then by latency.
pub fn search(
    info: &ModelInfo,
    hints: &crate::sema::hir::ParallelHints,
    s: &Serving,
    o: &ModelOptions,
) -> Vec<InferencePlan> {
    let (batch, _) = batch_and_prompt(info);
    let mut out = Vec::new();
    let divisors = |n: usize| (1..=n).filter(move |d| n.is_multiple_of(*d));
    for t in divisors(o.devices) {
        for pp in divisors(o.devices / t) {
            let r = o.devices / t / pp;
            for e in divisors(r) {
                let sh = Shape { tensor: t, pipeline: pp, expert: e, replicas: r };
                if hints.tensor.is_some_and(|(x, _)| x != t)
                    || hints.data.is_some_and(|x| x != r)
                    || hints.pipeline.is_some_and(|x| x != pp)
                    || hints.expert.is_some_and(|x| x != e)
                {
                    continue;
                }
                // Every replica serves at least one sequence.
                if invalid_shape(info, &sh, o.layers).is_some() || !batch.is_multiple_of(r) {
                    continue;
                }
                let mut p = evaluate_shape(info, &sh, batch / r, s, o);
                p.max_batch_throughput =
                    p.max_batch_per_replica.filter(|&m| m > 0).map(|m| evaluate_shape(info, &sh, m, s, o).throughput);
                out.push(p);
            }
        }
    }
    out.sort_by(|a, b| {
        b.fits.cmp(&a.fits).then(a.latency.total_cmp(&b.latency)).then(a.memory.total.total_cmp(&b.memory.total))
    });
    out
}

/// The hints an inference plan has no use for (it has no optimizer or
/// sequence split): E0819 names them rather than ignoring them.
pub fn unused_hints(hints: &crate::sema::hir::ParallelHints) -> Vec<&'static str> {
    let mut v = Vec::new();
    if hints.zero.is_some() {
        v.push("zero");
    }
    if hints.sequence.is_some() {
        v.push("sequence");
    }
    v
}

/// The inference plans of `info` (dims already overridden), best first, or why
/// there are none.
pub fn plan(
    info: &ModelInfo,
    hints: &crate::sema::hir::ParallelHints,
    s: &Serving,
    o: &ModelOptions,
) -> Result<Vec<InferencePlan>, CommandError> {
    let unused = unused_hints(hints);
    if !unused.is_empty() {
        return Err(CommandError::new(
            "E0819",
            format!(
                "model `{}`: the `parallel` hint{} {} cannot apply to an inference plan (tensor, pipeline, expert parallelism and replicas only)",
                info.name,
                if unused.len() > 1 { "s" } else { "" },
                unused.join(", ")
            ),
            Some("remove them, or plan training (without --inference)".into()),
        ));
    }
    if info.dim_any(&SEQ_NAMES).is_none() {
        return Err(CommandError::new(
            "E0818",
            format!("model `{}` has no `seq` dim: an inference plan needs the prompt length", info.name),
            Some("name the sequence dim `seq` (its size is the prompt length; --dim seq=N)".into()),
        ));
    }
    let plans = search(info, hints, s, o);
    if plans.is_empty() {
        let t = hints.tensor.map_or(1, |x| x.0);
        let pp = hints.pipeline.unwrap_or(1);
        let e = hints.expert.unwrap_or(1);
        let why = if !o.devices.is_multiple_of(t * pp) {
            format!("tensor {t} × pipeline {pp} does not divide {} devices", o.devices)
        } else {
            let sh = Shape { tensor: t, pipeline: pp, expert: e, replicas: o.devices / (t * pp) };
            invalid_shape(info, &sh, o.layers)
                .unwrap_or_else(|| "no tensor, pipeline and expert degrees and replica count fit the hints".into())
        };
        return Err(CommandError::new(
            "E0812",
            format!("no valid inference plan of model `{}` on {} devices: {why}", info.name, o.devices),
            Some("change --devices, the `parallel` hints, or the dims (--dim NAME=SIZE)".into()),
        ));
    }
    Ok(plans)
}

/// One model's inference plans as JSON (an element of `models`).
pub fn json(info: &ModelInfo, s: &Serving, o: &ModelOptions, plans: &[InferencePlan]) -> serde_json::Value {
    let (batch, prompt) = batch_and_prompt(info);
    serde_json::json!({
        "model": info.name,
        "mode": "inference",
        "dims": info.dims.iter().map(|(n, s)| serde_json::json!({"name": n, "size": s})).collect::<Vec<_>>(),
        "devices": o.devices,
        "layers": o.layers,
        "batch": batch,
        "prompt": prompt,
        "serving": s,
        "per_token": per_token(info),
        "mem_per_device": o.mem_per_device,
        "network": o.network,
        "valid_plans": plans.len(),
        "units": {
            "memory": "bytes", "kv_bytes_per_token": "bytes per token and sequence (all layers, one rank)",
            "prefill_flops": "floating-point operations per rank", "time": "seconds",
            "throughput": "generated tokens per second over all devices", "last_step_bytes": "bytes per rank",
        },
        "plans": plans.iter().take(o.top.max(1)).collect::<Vec<_>>(),
    })
}

/// The ranking table, then the best plan in detail.
pub fn text(info: &ModelInfo, s: &Serving, o: &ModelOptions, plans: &[InferencePlan]) -> String {
    let (batch, prompt) = batch_and_prompt(info);
    let dims: Vec<String> = info.dims.iter().map(|(n, s)| format!("{n}={s}")).collect();
    let pt = per_token(info);
    let psi = info.psi_dense() + info.psi_expert();
    let mut out = format!("model {} (inference): {}\n", info.name, dims.join(" "));
    let tables = o.vocab.map_or(0.0, |v| 2.0 * v as f64 * super::vocab::hidden(info).unwrap_or(0) as f64);
    out.push_str(&format!(
        "  parameters Ψ = {} ({} per block × {} layers{}), weights in 16 bits\n",
        fmt_count(psi * o.layers as f64 + tables),
        fmt_count(psi),
        o.layers,
        if tables > 0.0 { format!(" + {} of embedding and output layer", fmt_count(tables)) } else { String::new() }
    ));
    out.push_str(&format!(
        "  serving {batch} sequences (the batch dim) of {prompt} prompt tokens (the seq dim), generating {} tokens each{}\n",
        s.generate,
        if s.swiftkv > 0.0 {
            format!(
                "; SwiftKV: the prefill of the last {} of {} layers computes only their KV cache",
                (s.swiftkv * o.layers as f64).floor(),
                o.layers
            )
        } else {
            String::new()
        }
    ));
    let kv_tok = FP16 * o.layers as f64 * pt.kv_elements;
    out.push_str(&format!(
        "  KV cache {kv_tok:.0} B ({:.2} KiB) per token and sequence: {} layers × {} elements × 2 B ({})\n",
        kv_tok / 1024.0,
        o.layers,
        pt.kv_elements,
        {
            let names: Vec<&str> = info.layers.iter().flat_map(|l| &l.kv).map(|t| t.name.as_str()).collect();
            if names.is_empty() {
                "no attention".to_string()
            } else {
                names.join(", ")
            }
        }
    ));
    out.push_str(&format!(
        "  {} devices, {} per node (intra-node {}/s, {}); memory per device {}\n  network {}\n  device memory bandwidth {}/s{}\n",
        o.devices,
        o.gpus_per_node,
        fmt_bytes(o.intra_bw),
        super::collective::describe(o),
        o.mem_per_device.map_or("unlimited".to_string(), |m| fmt_bytes(m as f64)),
        o.network.describe(),
        fmt_bytes(o.network.hbm),
        if o.network.model_keys.iter().any(|k| k == "hbm") { "" } else { " (default; hbm= in --network)" }
    ));
    let fit = plans.iter().filter(|p| p.fits).count();
    out.push_str(&format!("  {} valid plans, {} fit in memory; top {}:\n", plans.len(), fit, o.top.min(plans.len())));
    out.push_str(&format!(
        "  {:>3}  {:>6} {:>4} {:>6} {:>8} {:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>9}  {:>12}\n",
        "#",
        "tensor",
        "pipe",
        "expert",
        "replicas",
        "batch",
        "memory",
        "KV cache",
        "prefill",
        "per token",
        "latency",
        "tokens/s",
        "max batch",
        "tokens/s max"
    ));
    for (k, p) in plans.iter().take(o.top.max(1)).enumerate() {
        out.push_str(&format!(
            "  {:>3}  {:>6} {:>4} {:>6} {:>8} {:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10.1}  {:>9}  {:>12}{}\n",
            k + 1,
            p.tensor,
            p.pipeline,
            p.expert,
            p.replicas,
            p.batch_per_replica,
            fmt_bytes(p.memory.total),
            fmt_bytes(p.memory.kv_cache),
            fmt_time(p.prefill_time),
            fmt_time(p.time_per_token),
            fmt_time(p.latency),
            p.throughput,
            p.max_batch_per_replica.map_or("-".into(), |m| m.to_string()),
            p.max_batch_throughput.map_or("-".into(), |x| format!("{x:.1}")),
            if p.fits { "" } else { "  (does not fit)" }
        ));
    }
    let p = &plans[0];
    let m = &p.memory;
    out.push_str(&format!(
        "best: tensor {}{}{}{}, {} replica{} of {} sequence{}\n",
        p.tensor,
        if p.tensor > 1 { format!(" on {}", p.tensor_dims.join("+")) } else { String::new() },
        if p.pipeline > 1 { format!(", pipeline {}", p.pipeline) } else { String::new() },
        if p.expert > 1 { format!(", expert {}", p.expert) } else { String::new() },
        p.replicas,
        if p.replicas == 1 { "" } else { "s" },
        p.batch_per_replica,
        if p.batch_per_replica == 1 { "" } else { "s" }
    ));
    if p.pipeline > 1 {
        out.push_str(&format!(
            "  pipeline {} stages of up to {} layers (KV cache and weights split with them), {} micro-batch{} of {} sequence{} in flight; a token passes every stage and {} sends ({} in decode)\n",
            p.pipeline,
            p.stage_layers,
            p.micro_batches,
            if p.micro_batches == 1 { "" } else { "es" },
            p.batch_per_replica / p.micro_batches,
            if p.batch_per_replica / p.micro_batches == 1 { "" } else { "s" },
            p.pipeline - 1,
            fmt_time(p.decode_p2p)
        ));
    }
    if p.expert > 1 {
        out.push_str(&format!(
            "  expert parallelism: {} replicas share each copy of the experts (1/{} of them per device); dispatch and combine by all-to-all, {} in decode\n",
            p.expert,
            p.expert,
            fmt_time(p.decode_alltoall)
        ));
    }
    out.push_str(&format!(
        "  memory per device {} = weights {} + KV cache {} + prefill activations {}{}\n",
        fmt_bytes(m.total),
        fmt_bytes(m.weights),
        fmt_bytes(m.kv_cache),
        fmt_bytes(m.activations),
        if m.workspace > 0.0 { format!(" + NCCL buffers {}", fmt_bytes(m.workspace)) } else { String::new() }
    ));
    out.push_str(&format!(
        "  prefill (time to first token) {}: {} flop per device{}\n",
        fmt_time(p.prefill_time),
        fmt_count(p.prefill_flops),
        if p.prefill_comm > 0.0 { format!(", collectives {}", fmt_time(p.prefill_comm)) } else { String::new() }
    ));
    out.push_str(&format!(
        "  decode {} steps {} ({} per token{}): {} of {} steps memory-bound; the last reads {} (weights and KV cache) per device\n",
        p.decode_steps,
        fmt_time(p.decode_time),
        fmt_time(p.time_per_token),
        if p.decode_comm > 0.0 { format!(", collectives {}", fmt_time(p.decode_comm)) } else { String::new() },
        p.memory_bound_steps,
        p.decode_steps,
        fmt_bytes(p.last_step_bytes)
    ));
    out.push_str(&format!(
        "  latency per request {}; throughput {:.1} generated tokens/s over {} devices\n",
        fmt_time(p.latency),
        p.throughput,
        o.devices
    ));
    out
}
