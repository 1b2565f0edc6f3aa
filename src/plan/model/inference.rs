//! Inference plans (`tcc plan-model --inference`), DeepSpeed-Inference style
//! (Aminabadi et al. 2022): the devices are split into replicas of `t`
//! tensor-parallel ranks each; a replica serves its share of the batch (the
//! model's batch dim: concurrent sequences) with prompts of the seq dim's length
//! and generates `--generate` tokens per sequence.
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

/// Samples and sequence positions of a tensor: the sizes of its batch and seq dims.
fn positions(t: &TensorInfo, info: &ModelInfo) -> f64 {
    t.dims
        .iter()
        .filter(|d| BATCH_NAMES.contains(&d.as_str()) || SEQ_NAMES.contains(&d.as_str()))
        .map(|d| info.dim(d).unwrap_or(1) as f64)
        .product()
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
    /// (the attention scores not stored, as flash-style kernels do), and with
    /// `--vocab` each sequence's last logits.
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
    /// Of the decode time, the all-reduces, and the steps bound by memory.
    pub decode_comm: f64,
    pub memory_bound_steps: usize,
    /// Weights and KV cache read by the last decode step, bytes per rank.
    pub last_step_bytes: f64,
    /// Prefill + decode: one request's latency.
    pub latency: f64,
    /// Generated tokens per second over all devices.
    pub throughput: f64,
    /// The most sequences per replica that fit in memory, and the throughput then.
    pub max_batch_per_replica: Option<usize>,
    pub max_batch_throughput: Option<f64>,
}

fn config(info: &ModelInfo, tensor: usize, replicas: usize) -> super::Config {
    super::Config { data: replicas, tensor, tensor_dims: super::tp_dims(info), ..Default::default() }
}

/// The share of a tensor one rank of the tensor group holds.
fn tp_share(t: &TensorInfo, c: &super::Config) -> f64 {
    if c.tensor_dims.iter().any(|d| t.has(d)) {
        1.0 / c.tensor as f64
    } else {
        1.0
    }
}

/// One all-reduce of `elements` fp16 values over the tensor group: a ring,
/// 2(t−1) messages and 2(t−1)/t of the buffer sent per rank.
fn allreduce(t: usize, elements: f64, o: &ModelOptions) -> f64 {
    if t <= 1 || elements <= 0.0 {
        return 0.0;
    }
    let beta = if t <= o.gpus_per_node.max(1) { 1.0 / o.intra_bw } else { o.network.beta };
    let q = (t - 1) as f64;
    2.0 * q * o.network.alpha + beta * 2.0 * q / t as f64 * elements * FP16
}

/// Evaluates tensor degree `t`, `replicas` replicas, `b` sequences per replica.
pub fn evaluate(info: &ModelInfo, t: usize, replicas: usize, b: usize, s: &Serving, o: &ModelOptions) -> InferencePlan {
    let c = config(info, t, replicas);
    let layers = o.layers.max(1) as f64;
    let (_, prompt) = batch_and_prompt(info);
    let pt = per_token(info);
    let (bf, pf, g) = (b as f64, prompt as f64, s.generate as f64);
    // `--vocab`: the embedding and the output layer (vocab-parallel), whose
    // logits are computed for the last position of each sequence only.
    let (vocab, hidden) = (o.vocab.unwrap_or(0) as f64, super::vocab::hidden(info).unwrap_or(0) as f64);
    let head_flops = 2.0 * hidden * vocab / t as f64;
    let weights = FP16 * layers * info.params.iter().map(|p| param_local(p, &c)).sum::<f64>()
        + FP16 * 2.0 * vocab * hidden / t as f64;
    let kv_tok = FP16
        * layers
        * info
            .layers
            .iter()
            .flat_map(|l| &l.kv)
            .map(|k| k.elements / positions(k, info) * tp_share(k, &c))
            .sum::<f64>();
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
    // The vocab-parallel embedding's output is a partial sum too, once per pass.
    let embedding = |tokens: f64| if vocab > 0.0 { allreduce(t, tokens * hidden, o) } else { 0.0 };
    let mut mem = InferenceMemory {
        weights,
        kv_cache: bf * (pf + g) * kv_tok,
        activations: FP16 * bf * pf * act_tok + super::vocab::LOGIT_BYTES * bf * vocab / t as f64,
        workspace: if t > 1 { NCCL_BYTES_PER_COMM } else { 0.0 },
        total: 0.0,
    };
    mem.total = mem.weights + mem.kv_cache + mem.activations + mem.workspace;
    let gamma = o.network.gamma;
    let hbm = o.network.hbm;
    let tf = t as f64;
    // Prefill; SwiftKV's layers compute only their KV cache, no all-reduce.
    let skipped = (s.swiftkv * layers).floor();
    let full = layers - skipped;
    let prefill_flops =
        (full * bf * (pf * pt.linear_flops + pf * pf * pt.pair_flops) + skipped * bf * pf * pt.kv_flops) / tf
            + bf * head_flops;
    let prefill_comm = full * all_reduces(bf * pf) + embedding(bf * pf);
    let prefill_time = (prefill_flops * gamma).max(weights / hbm) + prefill_comm;
    // Decode: the step that produces token j + 1 attends to prompt + j positions.
    let steps = s.generate.saturating_sub(1);
    let (mut decode_time, mut decode_comm, mut bound, mut last_bytes) = (0.0, 0.0, 0, 0.0);
    let step_comm = layers * all_reduces(bf) + embedding(bf);
    for j in 1..=steps {
        let ctx = pf + j as f64;
        let flops = layers * bf * (pt.linear_flops + ctx * pt.pair_flops) / tf + bf * head_flops;
        let bytes = weights + bf * ctx * kv_tok;
        if bytes / hbm >= flops * gamma {
            bound += 1;
        }
        decode_time += (flops * gamma).max(bytes / hbm) + step_comm;
        decode_comm += step_comm;
        last_bytes = bytes;
    }
    let latency = prefill_time + decode_time;
    let fits = o.mem_per_device.is_none_or(|m| mem.total <= m as f64);
    InferencePlan {
        tensor: t,
        tensor_dims: c.tensor_dims.clone(),
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
        memory_bound_steps: bound,
        last_step_bytes: last_bytes,
        latency,
        throughput: if latency > 0.0 { replicas as f64 * bf * g / latency } else { 0.0 },
        max_batch_per_replica: o.mem_per_device.map(|m| {
            let per_seq = (pf + g) * kv_tok + FP16 * pf * act_tok + super::vocab::LOGIT_BYTES * vocab / t as f64;
            let free = m as f64 - mem.weights - mem.workspace;
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
    // The replicas are the data-parallel degree: say so.
    super::invalid(info, &config(info, t, replicas)).map(|e| match e.strip_prefix("data:") {
        Some(rest) => format!("replicas:{rest}"),
        None => e,
    })
}

/// Every tensor degree dividing the devices (the rest are replicas), honouring the
/// `tensor` and `data` (replicas) hints; plans that fit first, then by latency.
pub fn search(
    info: &ModelInfo,
    hints: &crate::sema::hir::ParallelHints,
    s: &Serving,
    o: &ModelOptions,
) -> Vec<InferencePlan> {
    let (batch, _) = batch_and_prompt(info);
    let mut out = Vec::new();
    for t in (1..=o.devices).filter(|t| o.devices.is_multiple_of(*t)) {
        let r = o.devices / t;
        if hints.tensor.is_some_and(|(x, _)| x != t) || hints.data.is_some_and(|x| x != r) {
            continue;
        }
        // Every replica serves at least one sequence.
        if invalid(info, t, r).is_some() || !batch.is_multiple_of(r) {
            continue;
        }
        let mut p = evaluate(info, t, r, batch / r, s, o);
        p.max_batch_throughput =
            p.max_batch_per_replica.filter(|&m| m > 0).map(|m| evaluate(info, t, r, m, s, o).throughput);
        out.push(p);
    }
    out.sort_by(|a, b| {
        b.fits.cmp(&a.fits).then(a.latency.total_cmp(&b.latency)).then(a.memory.total.total_cmp(&b.memory.total))
    });
    out
}

/// The hints an inference plan has no use for (it has no optimizer, pipeline,
/// sequence or expert split): E0819 names them rather than ignoring them.
pub fn unused_hints(hints: &crate::sema::hir::ParallelHints) -> Vec<&'static str> {
    let mut v = Vec::new();
    if hints.zero.is_some() {
        v.push("zero");
    }
    if hints.pipeline.is_some() {
        v.push("pipeline");
    }
    if hints.sequence.is_some() {
        v.push("sequence");
    }
    if hints.expert.is_some() {
        v.push("expert");
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
                "model `{}`: the `parallel` hint{} {} cannot apply to an inference plan (tensor parallelism and replicas only)",
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
        let t = hints.tensor.map_or(o.devices, |x| x.0);
        let why = if !o.devices.is_multiple_of(t) {
            format!("tensor {t} does not divide {} devices", o.devices)
        } else {
            invalid(info, t, o.devices / t).unwrap_or_else(|| "no tensor degree and replica count fit the hints".into())
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
        "  {} devices, {} per node (intra-node {}/s); memory per device {}\n  network {}\n  device memory bandwidth {}/s{}\n",
        o.devices,
        o.gpus_per_node,
        fmt_bytes(o.intra_bw),
        o.mem_per_device.map_or("unlimited".to_string(), |m| fmt_bytes(m as f64)),
        o.network.describe(),
        fmt_bytes(o.network.hbm),
        if o.network.model_keys.iter().any(|k| k == "hbm") { "" } else { " (default; hbm= in --network)" }
    ));
    let fit = plans.iter().filter(|p| p.fits).count();
    out.push_str(&format!("  {} valid plans, {} fit in memory; top {}:\n", plans.len(), fit, o.top.min(plans.len())));
    out.push_str(&format!(
        "  {:>3}  {:>6} {:>8} {:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>9}  {:>12}\n",
        "#",
        "tensor",
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
            "  {:>3}  {:>6} {:>8} {:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10.1}  {:>9}  {:>12}{}\n",
            k + 1,
            p.tensor,
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
        "best: tensor {}{}, {} replica{} of {} sequence{}\n",
        p.tensor,
        if p.tensor > 1 { format!(" on {}", p.tensor_dims.join("+")) } else { String::new() },
        p.replicas,
        if p.replicas == 1 { "" } else { "s" },
        p.batch_per_replica,
        if p.batch_per_replica == 1 { "" } else { "s" }
    ));
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
        if p.prefill_comm > 0.0 { format!(", all-reduces {}", fmt_time(p.prefill_comm)) } else { String::new() }
    ));
    out.push_str(&format!(
        "  decode {} steps {} ({} per token{}): {} of {} steps memory-bound; the last reads {} (weights and KV cache) per device\n",
        p.decode_steps,
        fmt_time(p.decode_time),
        fmt_time(p.time_per_token),
        if p.decode_comm > 0.0 { format!(", all-reduces {}", fmt_time(p.decode_comm)) } else { String::new() },
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
