//! Model-parallel plans for `model` blocks (`tcc plan-model`): data parallelism with
//! ZeRO stages 0–3 and ZeRO++ options, Megatron tensor parallelism, sequence
//! parallelism (DeepSpeed-Ulysses all-to-all, or ring attention), expert
//! parallelism, and their combinations; a search over them for a device count and
//! memory, ranked by predicted step time. See `book/src/models.md`.
//!
//! Ranks are laid out tensor-innermost: rank = ((data·S + seq)·T + tensor), so a
//! tensor group is `T` consecutive ranks, a sequence group strides by `T`, and the
//! ZeRO (data × sequence) group strides by `T` over all devices. Expert groups are
//! carved out of the data × sequence group (`E` divides `D·S`), as in DeepSpeed-MoE
//! and TED. A group lies within a node when its span (stride × size) is at most
//! `gpus_per_node`; its collectives then run at the intra-node bandwidth.

pub mod analysis;
pub mod collective;
pub mod compress;
pub mod export;
pub mod formulas;
pub mod inference;
pub mod infinity;
pub mod pipeline;
pub mod recompute;
pub mod report;
pub mod ted;
pub mod vocab;

use crate::error::CommandError;
use crate::plan::Network;
use crate::sema::hir::ModelId;
use analysis::{ModelInfo, TensorInfo, BATCH_NAMES, EXPERT_NAMES, HEAD_NAMES, SEQ_NAMES, TP_DEFAULT};
use pipeline::{Pipe, Recompute, Schedule};
use serde::Serialize;

/// Bytes of an fp16 element (weights, gradients and activations in mixed precision).
pub const FP16: f64 = 2.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SeqStyle {
    Ulysses,
    Ring,
}

/// ZeRO++ options (on top of ZeRO stage 3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ZeroPP {
    /// Quantized weight all-gather (fp16 → int8: half the bytes).
    pub qwz: bool,
    /// Hierarchical partitioning: a secondary copy of the weights partitioned within
    /// a node, so the backward all-gather stays in the node.
    pub hpz: bool,
    /// Quantized gradient reduce-scatter (fp16 → int4: a quarter of the bytes).
    pub qgz: bool,
}

impl ZeroPP {
    pub fn any(&self) -> bool {
        self.qwz || self.hpz || self.qgz
    }
    pub fn all() -> ZeroPP {
        ZeroPP { qwz: true, hpz: true, qgz: true }
    }
    pub fn name(&self) -> String {
        let v: Vec<&str> =
            [(self.qwz, "qwZ"), (self.hpz, "hpZ"), (self.qgz, "qgZ")].iter().filter(|x| x.0).map(|x| x.1).collect();
        if v.is_empty() {
            "-".into()
        } else {
            v.join("+")
        }
    }
    /// `qwz,hpz,qgz` (any subset) or `all`.
    pub fn parse(s: &str) -> Result<ZeroPP, String> {
        let mut z = ZeroPP::default();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.to_ascii_lowercase().as_str() {
                "qwz" => z.qwz = true,
                "hpz" => z.hpz = true,
                "qgz" => z.qgz = true,
                "all" => z = ZeroPP::all(),
                "none" => {}
                other => return Err(format!("unknown ZeRO++ option `{other}` (qwz, hpz, qgz, all)")),
            }
        }
        Ok(z)
    }
}

/// One parallel configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub data: usize,
    pub tensor: usize,
    /// The dims tensor parallelism splits.
    pub tensor_dims: Vec<String>,
    pub sequence: usize,
    pub seq_style: SeqStyle,
    pub expert: usize,
    pub zero: u8,
    pub zeropp: ZeroPP,
    /// Megatron sequence parallelism (Korthikanti et al. 2022): with tensor
    /// parallelism, the activations outside the tensor-parallel regions (norms,
    /// residuals, dropout: those no tensor-parallel dim splits) are split along
    /// the sequence over the tensor group too; its all-reduces become a
    /// reduce-scatter and an all-gather of the same volume.
    pub megatron_sp: bool,
    /// DeepSpeed-TED's duplicate-token dropping ([`ted`]): the expert all-to-alls
    /// carry 1/t of the tokens the tensor group duplicates, an all-gather over
    /// the tensor group restores them.
    pub ted_dtd: bool,
    /// ZeRO-Offload (Ren et al. 2021): the optimizer states (fp32 master weights,
    /// momentum, variance) of this rank's partition live in host memory and the
    /// host runs the Adam step; every step the gradients go down and the updated
    /// fp16 weights come back over the device's host link.
    pub offload: bool,
    /// ZeRO-Infinity (stage 3): weights, gradients and optimizer states of this
    /// rank's partition in host memory or on NVMe ([`infinity`]).
    pub infinity: Option<infinity::Tier>,
    /// Pipeline stages and schedule, micro-batches, recomputation.
    pub pipe: Pipe,
}

/// One device, nothing split: what a configuration starts from before its
/// degrees are set (`Config { tensor: 4, ..Default::default() }`).
impl Default for Config {
    fn default() -> Config {
        Config {
            data: 1,
            tensor: 1,
            tensor_dims: Vec::new(),
            sequence: 1,
            seq_style: SeqStyle::Ulysses,
            expert: 1,
            zero: 0,
            zeropp: ZeroPP::default(),
            megatron_sp: false,
            ted_dtd: false,
            offload: false,
            infinity: None,
            pipe: Pipe::default(),
        }
    }
}

impl Config {
    pub fn devices(&self) -> usize {
        self.data * self.tensor * self.sequence * self.pipe.stages
    }
    pub fn describe(&self) -> String {
        let mut v = vec![format!("data {}", self.data)];
        if self.tensor > 1 {
            v.push(format!("tensor {} on {}", self.tensor, self.tensor_dims.join("+")));
        }
        if self.megatron_sp {
            v.push("megatron-sp".into());
        }
        if self.sequence > 1 {
            v.push(format!(
                "sequence {}({})",
                if self.seq_style == SeqStyle::Ulysses { "ulysses" } else { "ring" },
                self.sequence
            ));
        }
        if self.expert > 1 {
            v.push(format!("expert {}", self.expert));
        }
        if self.ted_dtd {
            v.push("ted-dtd".into());
        }
        v.push(format!("zero {}", self.zero));
        if self.zeropp.any() {
            v.push(format!("zero++ {}", self.zeropp.name()));
        }
        if self.offload {
            v.push("optimizer offload".into());
        }
        if let Some(t) = self.infinity {
            v.push(format!("zero-infinity {}", t.name()));
        }
        let p = &self.pipe;
        if p.stages > 1 {
            v.push(format!(
                "pipeline {} ({}{})",
                p.stages,
                p.schedule.name(),
                if p.schedule == Schedule::Interleaved {
                    format!(", {} chunks", p.virtual_stages)
                } else {
                    String::new()
                }
            ));
        }
        if p.micro_batches > 1 {
            v.push(format!("{} micro-batches", p.micro_batches));
        }
        if p.recompute != Recompute::None {
            v.push(format!("recompute {}", p.recompute.name()));
        }
        v.join(", ")
    }
}

/// Options of `tcc plan-model`.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    pub devices: usize,
    pub mem_per_device: Option<u64>,
    pub network: Network,
    pub gpus_per_node: usize,
    /// Intra-node bandwidth, bytes/s.
    pub intra_bw: f64,
    /// Latency of one step of a collective inside a node, s (`--intra-lat`);
    /// across nodes the network's α.
    pub intra_lat: f64,
    /// Launch latency of one collective, s (`--coll-lat`).
    pub coll_lat: f64,
    /// How many times the block repeats (transformer layers).
    pub layers: usize,
    pub top: usize,
    /// Forced ZeRO++ options (with zero = 3); `None`: the search tries none and all.
    pub zeropp: Option<ZeroPP>,
    /// Forced micro-batch count; `None`: every divisor of the local batch is tried.
    pub micro_batches: Option<usize>,
    /// Forced samples per micro-batch (`--micro-batch`): only the count that
    /// splits the local batch into micro-batches of this size is tried.
    pub micro_batch_size: Option<usize>,
    /// Forced recomputation; `None`: none, selective and full are tried.
    pub recompute: Option<Recompute>,
    /// Compressed gradient communication (1-bit Adam, 1-bit LAMB, 0/1 Adam): plans
    /// run without ZeRO.
    pub compress: Option<compress::OneBit>,
    /// The vocabulary size (`--vocab`): embedding, output layer and logits ([`vocab`]).
    pub vocab: Option<usize>,
}

impl ModelOptions {
    /// The link of a group of `q` ranks spanning `span` consecutive ranks, at
    /// `beta` seconds per byte.
    pub fn link(&self, q: usize, span: usize, beta: f64) -> collective::Link {
        let gpn = self.gpus_per_node.max(1);
        collective::Link {
            q,
            nodes: span.div_ceil(gpn).clamp(1, q.max(1)),
            beta,
            base: self.coll_lat,
            intra: self.intra_lat,
            inter: self.network.alpha,
        }
    }

    pub fn new(devices: usize, network: Network) -> ModelOptions {
        ModelOptions {
            devices,
            mem_per_device: None,
            network,
            gpus_per_node: 8,
            intra_bw: 300e9,
            intra_lat: collective::INTRA_LAT,
            coll_lat: collective::COLL_LAT,
            layers: 1,
            top: 5,
            zeropp: None,
            micro_batches: None,
            micro_batch_size: None,
            recompute: None,
            compress: None,
            vocab: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    /// Ring attention: blocks passed to the next rank, `group − 1` times.
    RingPass,
    /// Pipeline: a stage sends its boundary activations (forward) or their
    /// gradients (backward) to the neighbouring stage.
    SendRecv,
}

impl Coll {
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all-reduce",
            Coll::AllGather => "all-gather",
            Coll::ReduceScatter => "reduce-scatter",
            Coll::AllToAll => "all-to-all",
            Coll::RingPass => "ring pass",
            Coll::SendRecv => "send/recv",
        }
    }
}

/// One collective of a training step (repeated `count` times).
#[derive(Debug, Clone, Serialize)]
pub struct StepComm {
    pub what: String,
    /// `data`, `zero`, `tensor`, `sequence`, `expert`, `expert-data`, `node`.
    pub group: String,
    pub group_size: usize,
    pub kind: Coll,
    /// Forward, backward, or step (optimizer / gradient sync).
    pub phase: String,
    /// Elements of the collective's buffer per rank (input of an all-to-all or
    /// all-reduce, output of an all-gather, input of a reduce-scatter).
    pub elements: f64,
    pub bytes_per_elem: f64,
    pub count: f64,
    /// Bytes one rank sends per occurrence (exact ring / pairwise volumes).
    pub bytes_per_rank: f64,
    pub cross_node: bool,
    /// Ring or tree (all-reduce: the cheaper), direct (all-to-all, sends).
    pub algorithm: collective::Algo,
    /// Seconds for all `count` occurrences.
    pub time: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Memory {
    pub params: f64,
    pub grads: f64,
    pub optimizer: f64,
    /// hpZ's secondary weight partition.
    pub secondary: f64,
    pub activations: f64,
    /// Of `activations`: the one layer's tensors full recomputation rebuilds
    /// during the backward pass (without the attention core under full-flash;
    /// 0 otherwise). The rest is what the stage keeps
    /// from its forward passes until their backward passes.
    pub recompute_working: f64,
    /// The backward pass's working set above `activations` (one micro-batch,
    /// fp16, [`recompute::backward_elements`]): at an activation, the gradient
    /// flowing into it and the one it produces (three tensors for a softmax),
    /// less the activations made after it, already freed. Measured on an H100
    /// (bench/models/results.md): the fwd+bwd peaks of a Llama-style layer
    /// within 4%, with and without the s² scores kept.
    pub backward: f64,
    /// ZeRO-3's gathered weights: the layer in use and the one prefetched, whole
    /// (fp16, this rank's tensor/expert share), at most DeepSpeed's
    /// `stage3_max_live_parameters` ([`ZERO3_MAX_LIVE`]).
    pub gather: f64,
    /// NCCL's buffers: [`NCCL_BYTES_PER_COMM`] per communicator the plan uses.
    pub workspace: f64,
    /// 1-bit optimizers' error-compensation buffers ([`compress::error_buffer_bytes`]).
    pub compression: f64,
    /// The logits of the micro-batches in flight on the output layer ([`vocab`]).
    pub logits: f64,
    /// Gradient communication buffers: DDP's bucket without ZeRO; ZeRO's reduce
    /// bucket (and with ZeRO 1–2 its all-gather bucket), fp16, at most
    /// [`ZERO_BUCKET`] elements each and never more than the stage's weights.
    pub buckets: f64,
    /// Device memory: everything above.
    pub total: f64,
    /// Host memory per device (ZeRO-Offload's optimizer states, ZeRO-Infinity's
    /// CPU tier; not in `total`).
    pub host: f64,
    /// NVMe per device (ZeRO-Infinity's NVMe tier).
    pub nvme: f64,
}

/// DeepSpeed's default `reduce_bucket_size` and `allgather_bucket_size`
/// (elements): the gradient buffer ZeRO reduces from, and the buffer it
/// all-gathers updated weights into (ZeRO 1–2).
pub const ZERO_BUCKET: f64 = 5e8;
/// PyTorch DDP's gradient bucket (`bucket_cap_mb` 25), bytes: without ZeRO.
pub const DDP_BUCKET_BYTES: f64 = 25e6;

/// DeepSpeed's default `stage3_max_live_parameters`: gathered parameters a rank
/// keeps at most.
pub const ZERO3_MAX_LIVE: f64 = 1e9;
/// NCCL's buffers per communicator: `NCCL_BUFFSIZE` (4 MiB) for each of two ring
/// peers on each of 16 channels.
pub const NCCL_BYTES_PER_COMM: f64 = 4.0 * 1048576.0 * 2.0 * 16.0;

#[derive(Debug, Clone, Serialize)]
pub struct ModelPlan {
    pub config: Config,
    /// Parameters of the whole model (all layers): dense and expert.
    pub psi_dense: f64,
    pub psi_expert: f64,
    pub memory: Memory,
    pub comm: Vec<StepComm>,
    /// Bytes a rank sends per step, and those that cross nodes.
    pub bytes_per_step: f64,
    pub cross_node_bytes: f64,
    pub flops_per_rank: f64,
    /// The model's flops per rank and step without recomputation (what MFU
    /// counts; `flops_per_rank` includes recomputed forwards).
    pub model_flops_per_rank: f64,
    /// The compute rate per device the step was priced at, and the peak it is a
    /// fraction of when the network gave one (`peak=`).
    pub rate: f64,
    pub peak: Option<f64>,
    pub time_compute: f64,
    pub time_comm: f64,
    pub time: f64,
    pub fits: bool,
    /// Layers on the fullest and the emptiest pipeline stage, and how many stages
    /// are fullest (balanced stages: the first `layers % pp` take one more).
    pub stage_layers: (usize, usize, usize),
    /// Samples of the batch dim per micro-batch per data rank.
    pub micro_batch_size: usize,
    /// The pipeline bubble's share of the step, and its seconds.
    pub bubble: f64,
    pub time_bubble: f64,
    /// ZeRO-Offload's part of the step: gradients down, weights up, host Adam.
    pub time_offload: f64,
    /// The host link's bytes/s and the host's Adam updates/s it assumed.
    pub offload_rates: (f64, f64),
    /// The NVMe bandwidth and host memory per device the network gave.
    pub nvme: Option<f64>,
    pub host_mem: Option<f64>,
    /// ZeRO++'s quantization kernels (qwZ, qgZ): device memory traffic at `hbm=`.
    pub time_quant: f64,
    /// The device memory bandwidth `time_quant` assumed.
    pub hbm: f64,
    /// The compressed optimizer of this plan, and its kernels' time per step
    /// (averaged over warm-up and compressed steps).
    pub compress: Option<compress::OneBit>,
    pub time_compress: f64,
}

/// The dims tensor parallelism splits: `on DIM`, else `heads` and `ffn` where present.
pub fn tp_dims(info: &ModelInfo) -> Vec<String> {
    match &info.tensor_on {
        Some(d) => vec![d.clone()],
        None => TP_DEFAULT.iter().filter(|n| info.dim(n).is_some()).map(|s| s.to_string()).collect(),
    }
}

/// Elements of a tensor one rank holds under `c`.
/// Elements of activation `t` one rank keeps: [`local_elements`], and with
/// Megatron sequence parallelism a tensor no tensor-parallel dim splits is split
/// along its sequence dim over the tensor group.
pub fn activation_elements(t: &TensorInfo, c: &Config) -> f64 {
    let e = local_elements(t, c);
    if c.megatron_sp && t.has_any(&SEQ_NAMES) && !c.tensor_dims.iter().any(|d| t.has(d)) {
        e / c.tensor as f64
    } else {
        e
    }
}

pub fn local_elements(t: &TensorInfo, c: &Config) -> f64 {
    let mut div = 1.0;
    if t.has_any(&BATCH_NAMES) {
        div *= c.data as f64;
    }
    if t.has_any(&SEQ_NAMES) || t.has_any(&HEAD_NAMES) {
        div *= c.sequence as f64;
    }
    if c.tensor_dims.iter().any(|d| t.has(d)) {
        div *= c.tensor as f64;
    }
    t.elements / div
}

/// Elements of parameter `p` one rank holds before ZeRO (tensor and expert splits).
pub fn param_local(p: &TensorInfo, c: &Config) -> f64 {
    let mut x = p.elements;
    if c.tensor_dims.iter().any(|d| p.has(d)) {
        x /= c.tensor as f64;
    }
    if p.expert {
        x /= c.expert as f64;
    }
    x
}

/// Why a configuration is not valid for this model, if it is not.
/// The dim (one of `names`) a `degree`-way split of `what` parallelism divides, or
/// why not (`missing` when the model has no such dim).
fn split_dim(info: &ModelInfo, names: &[&str], degree: usize, what: &str, missing: &str) -> Result<(), String> {
    let Some((d, n)) = info.dim_any(names) else {
        return Err(missing.into());
    };
    if n % degree != 0 {
        return Err(format!("{what}: {degree} does not divide {d} = {n}"));
    }
    Ok(())
}

pub fn invalid(info: &ModelInfo, c: &Config) -> Option<String> {
    let divides = |n: usize, name: &str| -> Option<String> {
        match info.dim(name) {
            Some(sz) if sz % n != 0 => Some(format!("{n} does not divide {name} = {sz}")),
            _ => None,
        }
    };
    if c.tensor > 1 {
        if c.tensor_dims.is_empty() {
            return Some("no dim for tensor parallelism (heads, ffn, or `on DIM`)".into());
        }
        for d in &c.tensor_dims {
            if let Some(e) = divides(c.tensor, d) {
                return Some(format!("tensor: {e}"));
            }
        }
    }
    if c.sequence > 1 {
        if let Err(e) = split_dim(info, &SEQ_NAMES, c.sequence, "sequence", "sequence parallelism needs a `seq` dim") {
            return Some(e);
        }
        if c.seq_style == SeqStyle::Ulysses {
            // With grouped-query attention the key/value heads are what splits.
            if let Some((name, h)) = info.dim_any(&HEAD_NAMES) {
                if h % (c.sequence * if c.tensor_dims.contains(&name) { c.tensor } else { 1 }) != 0 {
                    return Some(format!("ulysses: {name} = {h} are not divisible among sequence × tensor ranks"));
                }
            }
        }
    }
    if c.expert > 1 {
        if let Err(e) = split_dim(info, &EXPERT_NAMES, c.expert, "expert", "expert parallelism needs an `experts` dim")
        {
            return Some(e);
        }
        if !(c.data * c.sequence).is_multiple_of(c.expert) {
            return Some(format!("expert: {} does not divide data × sequence = {}", c.expert, c.data * c.sequence));
        }
    }
    if let Some((b, n)) = info.dim_any(&BATCH_NAMES) {
        if n % c.data != 0 {
            return Some(format!("data: {} does not divide {b} = {n}", c.data));
        }
    }
    if c.zeropp.any() && c.zero != 3 {
        return Some("ZeRO++ options apply to ZeRO stage 3".into());
    }
    if c.offload && c.zero == 0 {
        return Some("optimizer offload partitions the optimizer states: it needs ZeRO stage 1 or more".into());
    }
    if c.infinity.is_some() && (c.zero != 3 || c.offload) {
        return Some("ZeRO-Infinity offloads the partitions of ZeRO stage 3 (weights included)".into());
    }
    if c.ted_dtd {
        if let Some(e) = ted::invalid(info, c) {
            return Some(e);
        }
    }
    if c.megatron_sp {
        if c.tensor < 2 {
            return Some("Megatron sequence parallelism needs tensor parallelism".into());
        }
        let split = c.tensor * c.sequence;
        if let Err(e) =
            split_dim(info, &SEQ_NAMES, split, "megatron-sp", "Megatron sequence parallelism needs a `seq` dim")
        {
            return Some(e);
        }
    }
    None
}

/// Why hpZ cannot help configuration `c`, if it cannot: its secondary weight
/// partition spans the data ranks inside a node, and with tensor parallelism
/// filling the node there is one, so the "partition" would be a whole copy of
/// the rank's weights (ZeRO++ §3.2 pairs hpZ with data ranks on one node).
pub fn hpz_useless(c: &Config, o: &ModelOptions) -> Option<String> {
    let gpn = o.gpus_per_node.max(1);
    (c.zeropp.hpz && gpn / c.tensor.max(1) < 2).then(|| {
        format!(
            "hpZ: tensor parallelism {} on {gpn} GPUs per node leaves one data rank per node, so its secondary partition would be a full copy of the weights",
            c.tensor
        )
    })
}

/// Predicts memory, communication and time of one configuration.
pub fn evaluate(info: &ModelInfo, c: &Config, o: &ModelOptions) -> ModelPlan {
    let gpn = o.gpus_per_node.max(1);
    let t = c.tensor;
    let s = c.sequence;
    let n = c.devices();
    let pp = c.pipe.stages.max(1);
    let m = c.pipe.micro_batches.max(1) as f64;
    let v = if c.pipe.schedule == Schedule::Interleaved { c.pipe.virtual_stages.max(1) } else { 1 };
    // The fullest stage bounds memory and time: its layers, its ranks (N/pp).
    let (ls_max, ls_min) = pipeline::stage_layers(o.layers.max(1), pp);
    let layers = ls_max as f64;
    let n_stage = n / pp;
    let zgroup = c.data * s;
    let egroup_dp = (zgroup / c.expert.max(1)).max(1);
    let intra = |span: usize| span <= gpn;
    let mut comm: Vec<StepComm> = Vec::new();
    let mut add = |what: String,
                   group: &str,
                   q: usize,
                   span: usize,
                   kind: Coll,
                   phase: &str,
                   elements: f64,
                   bpe: f64,
                   count: f64| {
        if q <= 1 || elements <= 0.0 || count <= 0.0 {
            return;
        }
        let cross = !intra(span);
        let beta = if cross {
            o.network.beta * if kind == Coll::AllToAll { o.network.alltoall_congestion() } else { 1.0 }
        } else {
            1.0 / o.intra_bw
        };
        let (one, bytes_per_rank, algorithm) = collective::cost(kind, &o.link(q, span, beta), elements * bpe);
        let time = count * one;
        comm.push(StepComm {
            what,
            group: group.into(),
            group_size: q,
            kind,
            phase: phase.into(),
            elements,
            bytes_per_elem: bpe,
            count,
            bytes_per_rank,
            cross_node: cross,
            algorithm,
            time,
        });
    };
    // Parameters per rank (before ZeRO), dense and expert, whole model.
    let voc = o.vocab.map(|v| vocab::costs(info, c, v)).unwrap_or_default();
    let psi_d: f64 =
        info.params.iter().filter(|p| !p.expert).map(|p| param_local(p, c)).sum::<f64>() * layers + voc.params;
    let psi_e: f64 = info.params.iter().filter(|p| p.expert).map(|p| param_local(p, c)).sum::<f64>() * layers;
    // Data parallelism / ZeRO over the data × sequence group (stride T: span N).
    let zq = c.zeropp;
    let onebit = o.compress.filter(|_| c.zero == 0);
    let node_members = (gpn / t).clamp(1, zgroup);
    for (psi, q, gname, what) in [(psi_d, zgroup, "zero", "dense"), (psi_e, egroup_dp, "expert-data", "expert")] {
        if psi <= 0.0 {
            continue;
        }
        match c.zero {
            0 => match onebit {
                None => add(format!("{what} gradients"), gname, q, n_stage, Coll::AllReduce, "step", psi, FP16, 1.0),
                // Per step on average: the warm-up's share at full volume, the rest
                // as 1-bit momentum.
                Some(ob) => {
                    let w = ob.warmup;
                    add(
                        format!("{what} gradients (warm-up)"),
                        gname,
                        q,
                        n_stage,
                        Coll::AllReduce,
                        "step",
                        psi,
                        FP16,
                        w,
                    );
                    let bpe = compress::BYTES_PER_ELEMENT;
                    let what = format!("{what} momentum (1-bit)");
                    add(what, gname, q, n_stage, Coll::AllReduce, "step", psi, bpe, ob.compressed_share());
                }
            },
            1 => {
                add(format!("{what} gradients"), gname, q, n_stage, Coll::ReduceScatter, "step", psi, FP16, 1.0);
                add(format!("{what} updated weights"), gname, q, n_stage, Coll::AllGather, "step", psi, FP16, 1.0);
            }
            2 => {
                // Partitioned gradients are reduced after every micro-batch.
                add(format!("{what} gradients"), gname, q, n_stage, Coll::ReduceScatter, "backward", psi, FP16, m);
                add(format!("{what} updated weights"), gname, q, n_stage, Coll::AllGather, "step", psi, FP16, 1.0);
            }
            _ => {
                // Weights are gathered and gradients reduced for every micro-batch.
                let wbytes = if zq.qwz { 1.0 } else { FP16 };
                add(
                    format!("{what} weights{}", if zq.qwz { " (int8)" } else { "" }),
                    gname,
                    q,
                    n_stage,
                    Coll::AllGather,
                    "forward",
                    psi,
                    wbytes,
                    m,
                );
                if zq.hpz && what == "dense" {
                    add(
                        format!("{what} weights (secondary partition)"),
                        "node",
                        node_members,
                        node_members * t,
                        Coll::AllGather,
                        "backward",
                        psi,
                        FP16,
                        m,
                    );
                } else {
                    add(
                        format!("{what} weights{}", if zq.qwz { " (int8)" } else { "" }),
                        gname,
                        q,
                        n_stage,
                        Coll::AllGather,
                        "backward",
                        psi,
                        wbytes,
                        m,
                    );
                }
                let gbytes = if zq.qgz { 0.5 } else { FP16 };
                add(
                    format!("{what} gradients{}", if zq.qgz { " (int4)" } else { "" }),
                    gname,
                    q,
                    n_stage,
                    Coll::ReduceScatter,
                    "backward",
                    psi,
                    gbytes,
                    m,
                );
            }
        }
    }
    // ZeRO++'s compression is not free: its kernels read and write what they
    // compress. qwZ, per int8 all-gather of weights: quantize this rank's shard
    // (2 B read, 1 B written per element), dequantize the gathered weights (1 B
    // read, 2 B written); qgZ, per int4 gradient reduction, in its two stages
    // (within the node, then across, on 1/node of the data): quantize (2 + 0.5 B)
    // and dequantize-and-reduce (0.5 + 2 B) per element.
    let mut quant_bytes = 0.0;
    if c.zero == 3 {
        for (psi, q) in [(psi_d, zgroup), (psi_e, egroup_dp)] {
            if psi <= 0.0 || q <= 1 {
                continue;
            }
            if zq.qwz {
                let gathers = if zq.hpz { 1.0 } else { 2.0 };
                quant_bytes += gathers * m * (3.0 * psi / q as f64 + 3.0 * psi);
            }
            if zq.qgz {
                quant_bytes += m * 5.0 * (psi + psi / node_members as f64);
            }
        }
    }
    let time_quant = quant_bytes / o.network.hbm;
    // Per layer and micro-batch: tensor, sequence and expert collectives (forward and
    // backward), on the fullest stage.
    for l in &info.layers {
        if t > 1 {
            for (summed, res) in &l.summed {
                if c.tensor_dims.iter().any(|d| summed.contains(d)) {
                    let e = local_elements(res, c) / m;
                    add(
                        format!("{}: partial {}", l.name, res.name),
                        "tensor",
                        t,
                        t,
                        Coll::AllReduce,
                        "forward",
                        e,
                        FP16,
                        layers * m,
                    );
                    add(
                        format!("{}: gradient into the split", l.name),
                        "tensor",
                        t,
                        t,
                        Coll::AllReduce,
                        "backward",
                        e,
                        FP16,
                        layers * m,
                    );
                }
            }
        }
        if s > 1 && l.attention {
            match c.seq_style {
                SeqStyle::Ulysses => {
                    for ti in &l.ulysses {
                        let e = local_elements(ti, c) / m;
                        add(
                            format!("{}: {}", l.name, ti.name),
                            "sequence",
                            s,
                            s * t,
                            Coll::AllToAll,
                            "forward",
                            e,
                            FP16,
                            layers * m,
                        );
                        add(
                            format!("{}: grad {}", l.name, ti.name),
                            "sequence",
                            s,
                            s * t,
                            Coll::AllToAll,
                            "backward",
                            e,
                            FP16,
                            layers * m,
                        );
                    }
                }
                SeqStyle::Ring => {
                    for ti in &l.ring {
                        let e = local_elements(ti, c) / m;
                        add(
                            format!("{}: {} blocks", l.name, ti.name),
                            "sequence",
                            s,
                            s * t,
                            Coll::RingPass,
                            "forward",
                            e,
                            FP16,
                            layers * m,
                        );
                        add(
                            format!("{}: {} and grad blocks", l.name, ti.name),
                            "sequence",
                            s,
                            s * t,
                            Coll::RingPass,
                            "backward",
                            2.0 * e,
                            FP16,
                            layers * m,
                        );
                    }
                }
            }
        }
        if c.expert > 1 && l.moe {
            for ti in &l.moe_alltoall {
                let e = local_elements(ti, c) / m;
                // TED: each tensor rank sends 1/t of a duplicated tensor and the
                // tensor group all-gathers it after the all-to-all.
                let dtd = c.ted_dtd && ted::duplicated(ti, c);
                let sent = if dtd { e / t as f64 } else { e };
                for (phase, what) in [("forward", ""), ("backward", "grad ")] {
                    add(
                        format!("{}: {what}{}", l.name, ti.name),
                        "expert",
                        c.expert,
                        c.expert * t,
                        Coll::AllToAll,
                        phase,
                        sent,
                        FP16,
                        layers * m,
                    );
                    if dtd {
                        add(
                            format!("{}: TED gather of dropped {what}{}", l.name, ti.name),
                            "tensor",
                            t,
                            t,
                            Coll::AllGather,
                            phase,
                            e,
                            FP16,
                            layers * m,
                        );
                    }
                }
            }
        }
    }
    // A vocab-parallel embedding's output is a partial sum over the tensor group.
    if voc.embedding_out > 0.0 {
        add("embedding: partial output".into(), "tensor", t, t, Coll::AllReduce, "forward", voc.embedding_out, FP16, m);
    }
    // Pipeline: each micro-batch's boundary activations go to the next stage, their
    // gradients come back (v times with v chunks per device). The slowest link sets
    // the pace: cross-node once the pipeline spans more than a node.
    if pp > 1 {
        for ti in &info.outputs {
            let e = local_elements(ti, c) / m;
            let k = m * v as f64;
            add(format!("stage boundary {}", ti.name), "pipeline", pp, n, Coll::SendRecv, "forward", e, FP16, k);
            add(format!("stage boundary grad {}", ti.name), "pipeline", pp, n, Coll::SendRecv, "backward", e, FP16, k);
        }
    }
    // Full recomputation runs each layer's forward collectives again.
    if c.pipe.recompute.is_full() {
        let again: Vec<StepComm> = comm
            .iter()
            .filter(|x| x.phase == "forward" && matches!(x.group.as_str(), "tensor" | "sequence" | "expert"))
            .map(|x| StepComm { phase: "recompute".into(), ..x.clone() })
            .collect();
        comm.extend(again);
    }
    // Memory.
    let mut mem = Memory::default();
    for (psi, q) in [(psi_d, zgroup), (psi_e, egroup_dp)] {
        let (p, g, os) = formulas::zero_state_split(psi, q as f64, c.zero);
        mem.params += p;
        mem.grads += g;
        mem.optimizer += os;
    }
    if c.zero == 3 && zq.hpz {
        mem.secondary = FP16 * psi_d / node_members as f64;
    }
    // Activations on the fullest (first) stage: its layers × the micro-batches in
    // flight × what one micro-batch keeps per layer, plus the one layer full
    // recomputation rebuilds at a time.
    if c.zero == 3 {
        mem.gather = FP16 * (2.0 * (psi_d + psi_e) / layers.max(1.0)).min(ZERO3_MAX_LIVE);
    }
    let mut time_compress = 0.0;
    if let Some(ob) = onebit {
        for (psi, q) in [(psi_d, zgroup), (psi_e, egroup_dp)] {
            if psi > 0.0 && q > 1 {
                mem.compression += compress::error_buffer_bytes(psi, q as f64);
                time_compress += ob.compressed_share() * compress::kernel_bytes(psi, q as f64) / o.network.hbm;
            }
        }
    }
    if zgroup > 1 || egroup_dp > 1 {
        let w = psi_d + psi_e;
        mem.buckets = match c.zero {
            0 => DDP_BUCKET_BYTES.min(FP16 * w),
            3 => FP16 * w.min(ZERO_BUCKET),
            _ => 2.0 * FP16 * w.min(ZERO_BUCKET),
        };
    }
    let comms = [zgroup, c.tensor, c.sequence, c.expert, pp].iter().filter(|&&q| q > 1).count();
    mem.workspace = NCCL_BYTES_PER_COMM * comms as f64;
    let (kept, working) = recompute::kept_elements(info, c, c.pipe.recompute);
    let flight = pipeline::in_flight(c.pipe.schedule, pp, m as usize, v);
    mem.activations = FP16 * (layers * flight * kept + working) / m;
    mem.recompute_working = FP16 * working / m;
    mem.backward = FP16 * recompute::backward_elements(info, c, c.pipe.recompute) / m;
    // The output layer keeps one micro-batch's logits (GPipe: all in flight).
    mem.logits = voc.logits * if c.pipe.schedule == Schedule::GPipe && pp > 1 { m } else { 1.0 };
    // ZeRO-Offload: this rank's optimizer partition moves to the host; each step
    // its fp16 gradients go down and its updated fp16 weights come back, and the
    // host runs Adam over it (not overlapped with the device's work: a bound).
    let mut time_offload = 0.0;
    if c.offload {
        mem.host = mem.optimizer;
        mem.optimizer = 0.0;
        let part = psi_d / zgroup.max(1) as f64 + psi_e / egroup_dp.max(1) as f64;
        time_offload = 2.0 * FP16 * part / o.network.pcie + part / o.network.cpu_adam;
    }
    // ZeRO-Infinity: the rank's partition of weights, gradients and optimizer
    // states leaves the device for the tier.
    if let Some(tier) = c.infinity {
        let part = psi_d / zgroup.max(1) as f64 + psi_e / egroup_dp.max(1) as f64;
        let held = mem.params + mem.grads + mem.optimizer;
        (mem.params, mem.grads, mem.optimizer) = (0.0, 0.0, 0.0);
        match tier {
            infinity::Tier::Cpu => mem.host = held,
            infinity::Tier::Nvme => mem.nvme = held,
        }
        time_offload = infinity::step_time(tier, part, m, &o.network);
    }
    mem.total = mem.params
        + mem.grads
        + mem.optimizer
        + mem.secondary
        + mem.activations
        + mem.backward
        + mem.gather
        + mem.workspace
        + mem.compression
        + mem.logits
        + mem.buckets;
    // Time: forward + backward (2× forward) + recomputed forward flops of the stage's
    // layers, spread over its ranks. The per-micro-batch work (compute, per-layer
    // collectives, stage sends) is stretched by the bubble; the optimizer step's
    // collectives are not.
    let flops = 3.0 * info.flops() + recompute::extra_flops(info, c.pipe.recompute);
    let flops_per_rank = flops * layers / n_stage as f64 + voc.flops;
    let time_compute = flops_per_rank * o.network.gamma;
    let in_pipe = |x: &&StepComm| matches!(x.group.as_str(), "tensor" | "sequence" | "expert" | "pipeline");
    let comm_pipe: f64 = comm.iter().filter(in_pipe).map(|x| x.time).sum();
    let time_comm: f64 = comm.iter().map(|x| x.time).sum();
    let busy = time_compute + comm_pipe;
    let time_bubble = busy * (pipeline::stretch(pp, m as usize, v) - 1.0);
    let bytes_per_step: f64 = comm.iter().map(|x| x.bytes_per_rank * x.count).sum();
    let cross_node_bytes: f64 = comm.iter().filter(|x| x.cross_node).map(|x| x.bytes_per_rank * x.count).sum();
    let fits =
        o.mem_per_device.is_none_or(|m| mem.total <= m as f64) && o.network.host_mem.is_none_or(|h| mem.host <= h);
    ModelPlan {
        config: c.clone(),
        psi_dense: info.psi_dense() * o.layers.max(1) as f64
            + o.vocab.map_or(0.0, |v| 2.0 * v as f64 * vocab::hidden(info).unwrap_or(0) as f64),
        psi_expert: info.psi_expert() * o.layers.max(1) as f64,
        memory: mem,
        comm,
        bytes_per_step,
        cross_node_bytes,
        flops_per_rank,
        model_flops_per_rank: 3.0 * info.flops() * layers / n_stage as f64 + voc.flops,
        rate: 1.0 / o.network.gamma,
        peak: o.network.peak,
        time_compute,
        time_comm,
        time: time_compute + time_comm + time_bubble + time_offload + time_quant + time_compress,
        fits,
        stage_layers: (ls_max, ls_min, if ls_max == ls_min { pp } else { o.layers.max(1) % pp }),
        micro_batch_size: pipeline::local_batch(info, c.data) / c.pipe.micro_batches.max(1),
        bubble: pipeline::bubble_fraction(pp, m as usize, v),
        time_bubble,
        time_offload,
        offload_rates: (o.network.pcie, o.network.cpu_adam),
        nvme: o.network.nvme,
        host_mem: o.network.host_mem,
        time_quant,
        hbm: o.network.hbm,
        compress: onebit,
        time_compress,
    }
}

fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// The pipeline choices to try for `stages` stages: micro-batch counts dividing the
/// local batch, the schedules (one stage: gradient accumulation), recomputation.
fn pipe_choices(info: &ModelInfo, stages: usize, data: usize, o: &ModelOptions) -> Vec<Pipe> {
    let local = pipeline::local_batch(info, data);
    let ms = divisors(local);
    let mut scheds = vec![(Schedule::OneFOneB, 1)];
    if stages > 1 {
        scheds.push((Schedule::GPipe, 1));
        for v in [2, 4] {
            if o.layers.is_multiple_of(stages * v) {
                scheds.push((Schedule::Interleaved, v));
            }
        }
    }
    let recs: Vec<Recompute> = match o.recompute {
        Some(r) => vec![r],
        None if recompute::has_core(info) => {
            vec![Recompute::None, Recompute::Selective, Recompute::Full, Recompute::FullFlash]
        }
        None => vec![Recompute::None, Recompute::Full],
    };
    let mut out = Vec::new();
    for &m in &ms {
        if o.micro_batches.is_some_and(|x| x != m) || o.micro_batch_size.is_some_and(|b| b * m != local) {
            continue;
        }
        for &(schedule, virtual_stages) in &scheds {
            for &recompute in &recs {
                out.push(Pipe { stages, schedule, virtual_stages, micro_batches: m, recompute });
            }
        }
    }
    out
}

/// Every valid configuration (respecting the hints), evaluated, fastest first;
/// those that do not fit in memory come last.
pub fn search(info: &ModelInfo, hints: &crate::sema::hir::ParallelHints, o: &ModelOptions) -> Vec<ModelPlan> {
    let n = o.devices;
    let tdims = tp_dims(info);
    let mut out = Vec::new();
    let styles: Vec<SeqStyle> = match hints.sequence {
        Some((crate::sema::hir::SequenceStyle::Ulysses, _)) => vec![SeqStyle::Ulysses],
        Some((crate::sema::hir::SequenceStyle::Ring, _)) => vec![SeqStyle::Ring],
        None => vec![SeqStyle::Ulysses, SeqStyle::Ring],
    };
    let zeros: Vec<u8> = match hints.zero {
        Some(z) => vec![z],
        // DeepSpeed runs the 1-bit optimizers without ZeRO.
        None if o.compress.is_some() => vec![0],
        None => vec![0, 1, 2, 3],
    };
    for stages in divisors(n) {
        if hints.pipeline.is_some_and(|x| x != stages) || stages > o.layers.max(1) {
            continue;
        }
        let ns = n / stages;
        for t in divisors(ns) {
            if hints.tensor.is_some_and(|(d, _)| d != t) {
                continue;
            }
            for s in divisors(ns / t) {
                if hints.sequence.is_some_and(|(_, d)| d != s) {
                    continue;
                }
                let d = ns / t / s;
                if hints.data.is_some_and(|x| x != d) {
                    continue;
                }
                let pipes = pipe_choices(info, stages, d, o);
                // Megatron SP only with tensor parallelism; it never costs more.
                let sps: &[bool] = if t > 1 { &[false, true] } else { &[false] };
                let moe = info.layers.iter().any(|l| l.moe);
                for e in divisors(d * s) {
                    if hints.expert.is_some_and(|x| x != e) {
                        continue;
                    }
                    // TED's duplicate-token dropping: with and without, where it applies.
                    let dtds: &[bool] = if t > 1 && e > 1 && moe { &[false, true] } else { &[false] };
                    for &style in if s > 1 { &styles[..] } else { &styles[..1] } {
                        for &z in &zeros {
                            // hpZ only where a node has several data ranks.
                            let hpz = o.gpus_per_node.max(1) / t >= 2;
                            let zpps: Vec<ZeroPP> = match (z, o.zeropp) {
                                (3, Some(p)) if p.hpz && !hpz => vec![],
                                (3, Some(p)) => vec![p],
                                (3, None) => vec![ZeroPP::default(), ZeroPP { hpz, ..ZeroPP::all() }],
                                _ => vec![ZeroPP::default()],
                            };
                            for zpp in zpps {
                                // Per layout, only its best micro-batching, schedule and
                                // recomputation is kept: the table stays a ranking of
                                // layouts, and memory stays bounded.
                                let mut best: Option<ModelPlan> = None;
                                // Host offload: none, the optimizer (ZeRO-Offload), or with
                                // ZeRO 3 everything (ZeRO-Infinity: host, NVMe if nvme= is given).
                                let mut offloads: Vec<(bool, Option<infinity::Tier>)> = vec![(false, None)];
                                if z >= 1 {
                                    offloads.push((true, None));
                                }
                                if z == 3 {
                                    offloads.push((false, Some(infinity::Tier::Cpu)));
                                    if o.network.nvme.is_some() {
                                        offloads.push((false, Some(infinity::Tier::Nvme)));
                                    }
                                }
                                let offloads = &offloads;
                                let choices = pipes
                                    .iter()
                                    .flat_map(|p| sps.iter().map(move |&sp| (p, sp)))
                                    .flat_map(|(p, sp)| offloads.iter().map(move |&off| (p, sp, off)))
                                    .flat_map(|(p, sp, off)| dtds.iter().map(move |&dtd| (p, sp, off, dtd)));
                                for (&pipe, sp, (offload, inf), ted_dtd) in choices {
                                    let c = Config {
                                        data: d,
                                        tensor: t,
                                        tensor_dims: tdims.clone(),
                                        sequence: s,
                                        seq_style: style,
                                        expert: e,
                                        zero: z,
                                        zeropp: zpp,
                                        megatron_sp: sp,
                                        ted_dtd,
                                        offload,
                                        infinity: inf,
                                        pipe,
                                    };
                                    if invalid(info, &c).is_none() && pipeline::invalid(info, &c, o.layers).is_none() {
                                        let p = evaluate(info, &c, o);
                                        if best.as_ref().is_none_or(|b| better(&p, b)) {
                                            best = Some(p);
                                        }
                                    }
                                }
                                out.extend(best);
                            }
                        }
                    }
                }
            }
        }
    }
    out.sort_by(rank);
    out
}

/// The ranking: plans that fit first, then by step time, then by memory.
fn rank(a: &ModelPlan, b: &ModelPlan) -> std::cmp::Ordering {
    b.fits.cmp(&a.fits).then(a.time.total_cmp(&b.time)).then(a.memory.total.total_cmp(&b.memory.total))
}

fn better(a: &ModelPlan, b: &ModelPlan) -> bool {
    rank(a, b) == std::cmp::Ordering::Less
}

/// The configuration the hints describe (unset degrees 1, zero 0), used to explain
/// why no plan is valid.
pub fn from_hints(info: &ModelInfo, hints: &crate::sema::hir::ParallelHints, o: &ModelOptions) -> Config {
    Config {
        data: hints.data.unwrap_or(1),
        tensor: hints.tensor.map_or(1, |x| x.0),
        tensor_dims: tp_dims(info),
        sequence: hints.sequence.map_or(1, |x| x.1),
        seq_style: match hints.sequence {
            Some((crate::sema::hir::SequenceStyle::Ring, _)) => SeqStyle::Ring,
            _ => SeqStyle::Ulysses,
        },
        expert: hints.expert.unwrap_or(1),
        zero: hints.zero.unwrap_or(0),
        zeropp: if hints.zero == Some(3) { o.zeropp.unwrap_or_default() } else { ZeroPP::default() },
        megatron_sp: false,
        ted_dtd: false,
        offload: false,
        infinity: None,
        pipe: Pipe {
            stages: hints.pipeline.unwrap_or(1),
            micro_batches: o.micro_batches.unwrap_or(1),
            recompute: o.recompute.unwrap_or(Recompute::None),
            ..Pipe::default()
        },
    }
}

/// `tcc plan-model`: analyzes the model (with `--dim` overrides), searches, renders.
pub fn plan_model_command(
    hir: &crate::sema::hir::Hir,
    model: Option<&str>,
    dims: &[(String, usize)],
    o: &ModelOptions,
    json: bool,
) -> Result<String, CommandError> {
    plan_model_output(hir, model, dims, o, if json { Output::Json } else { Output::Text })
}

/// What `tcc plan-model` prints: the ranked plans as text or JSON, or the best
/// plan exported (`--emit`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Output {
    Text,
    Json,
    Export(export::Emit),
    /// Inference plans (`--inference`), as JSON when the flag is set.
    Inference(inference::Serving, bool),
}

pub fn plan_model_output(
    hir: &crate::sema::hir::Hir,
    model: Option<&str>,
    dims: &[(String, usize)],
    o: &ModelOptions,
    output: Output,
) -> Result<String, CommandError> {
    let json = matches!(output, Output::Json | Output::Inference(_, true));
    let err = |code, message: String, hint: Option<String>| CommandError { code, message, hint };
    if hir.models.is_empty() {
        return Err(err(
            "E0810",
            "this file has no `model` block".into(),
            Some("`tcc plan` plans programs; `tcc plan-model` plans models".into()),
        ));
    }
    if o.devices == 0 || o.devices > crate::plan::MAX_PROCS {
        return Err(err("E0802", format!("--devices must be between 1 and {}", crate::plan::MAX_PROCS), None));
    }
    let ids: Vec<ModelId> = match model {
        None => hir.models.ids().collect(),
        Some(name) => match hir.models.position(|m| m.name == name) {
            Some(i) => vec![i],
            None => {
                let names: Vec<&str> = hir.models.iter().map(|m| m.name.as_str()).collect();
                return Err(err(
                    "E0702",
                    format!("no model named `{name}`"),
                    Some(format!("this file has: {}", names.join(", "))),
                ));
            }
        },
    };
    if matches!(output, Output::Export(_)) && ids.len() > 1 {
        let names: Vec<&str> = hir.models.iter().map(|m| m.name.as_str()).collect();
        return Err(err(
            "E0817",
            "--emit writes one model's plan: this file has several".into(),
            Some(format!("name it with --model ({})", names.join(", "))),
        ));
    }
    let mut texts = Vec::new();
    let mut jsons = Vec::new();
    for id in ids {
        let h = analysis::with_dims(hir, id, dims).map_err(|m| err("E0811", m, None))?;
        let info = analysis::analyze(&h, id);
        let hints = &h.models[id].parallel;
        if o.vocab.is_some() && vocab::hidden(&info).is_none() {
            return Err(err(
                "E0822",
                format!("--vocab needs the model's hidden size: model `{}` has no `hidden` dim", info.name),
                Some("name the model dim of the embedding width `hidden`".into()),
            ));
        }
        if let Output::Inference(serving, _) = output {
            let plans = inference::plan(&info, hints, &serving, o)?;
            if json {
                jsons.push(inference::json(&info, &serving, o, &plans));
            } else {
                texts.push(inference::text(&info, &serving, o, &plans));
            }
            continue;
        }
        if let (Some(ob), Some(z)) = (o.compress, hints.zero.filter(|&z| z > 0)) {
            return Err(err(
                "E0821",
                format!("model `{}` asks for ZeRO {z}, and {} runs without ZeRO", info.name, ob.kind.name()),
                Some(
                    "DeepSpeed: \"1bit-Adam is not compatible with ZeRO\"; remove the `zero` hint or --compress".into(),
                ),
            ));
        }
        if o.recompute == Some(Recompute::FullFlash) && !recompute::has_core(&info) {
            return Err(err(
                "E0823",
                format!(
                    "--recompute full-flash: model `{}` has no attention scores (no tensor with two indices over one sequence dim) for flash attention to drop",
                    info.name
                ),
                Some("use --recompute full".into()),
            ));
        }
        if let Some(b) = o.micro_batch_size {
            micro_batch_fits(&info, b)?;
        }
        let plans = search(&info, hints, o);
        if plans.is_empty() && o.micro_batch_size.is_some() {
            let free = ModelOptions { micro_batch_size: None, ..o.clone() };
            let locals: std::collections::BTreeSet<usize> =
                search(&info, hints, &free).iter().map(|p| pipeline::local_batch(&info, p.config.data)).collect();
            if !locals.is_empty() {
                let b = o.micro_batch_size.unwrap_or(1);
                let list: Vec<String> = locals.iter().map(|x| x.to_string()).collect();
                return Err(err(
                    "E0824",
                    format!(
                        "--micro-batch {b} divides the per-replica batch of no valid plan of model `{}` on {} devices (their per-replica batches: {})",
                        info.name,
                        o.devices,
                        list.join(", ")
                    ),
                    Some("give a micro-batch size dividing one of them, or change --devices or the batch (--dim)".into()),
                ));
            }
        }
        if plans.is_empty() {
            let c = from_hints(&info, hints, o);
            let stages = c.pipe.stages;
            let why = (!o.devices.is_multiple_of(stages))
                .then(|| format!("pipeline: {stages} stages do not divide {} devices", o.devices))
                .or_else(|| invalid(&info, &c))
                .or_else(|| hpz_useless(&c, o))
                .or_else(|| pipeline::invalid(&info, &c, o.layers))
                .unwrap_or_else(|| format!("the hints need {} devices", c.devices()));
            return Err(err(
                "E0812",
                format!("no valid parallel plan of model `{}` on {} devices: {why}", info.name, o.devices),
                Some("change --devices, the `parallel` hints, or the dims (--dim NAME=SIZE)".into()),
            ));
        }
        if let Output::Export(format) = output {
            return export::emit(&info, o, &plans, format);
        }
        if json {
            jsons.push(report::plans_json(&info, o, &plans));
        } else {
            texts.push(report::plans_text(&info, o, &plans));
        }
    }
    Ok(if json {
        serde_json::to_string_pretty(&serde_json::json!({ "models": jsons })).unwrap_or_default() + "\n"
    } else {
        texts.join("\n")
    })
}

/// E0824: `--micro-batch N` for a model without a batch dim, or an N that does
/// not divide its batch (no data-parallel degree could then make it divide the
/// per-replica batch).
fn micro_batch_fits(info: &ModelInfo, b: usize) -> Result<(), CommandError> {
    let fail = |m: String, h: &str| Err(CommandError::new("E0824", m, Some(h.into())));
    match info.dim_any(&BATCH_NAMES) {
        None => fail(
            format!("--micro-batch {b}: model `{}` has no batch dim (batch, tokens, groups or samples)", info.name),
            "name the dim of the samples `batch`",
        ),
        Some((d, n)) if !n.is_multiple_of(b) => fail(
            format!("--micro-batch {b} does not divide the batch: `{d}` = {n} per step"),
            "give a micro-batch size dividing the per-replica batch (the batch over the data-parallel degree)",
        ),
        Some(_) => Ok(()),
    }
}

/// A collective latency option: a time with its unit (`0.5us`), not a bare number.
fn latency(option: &str, v: &str) -> Result<f64, CommandError> {
    let has_unit =
        v.trim().trim_end_matches(|c: char| c.is_alphabetic() || c == 'µ' || c == 'μ').len() < v.trim().len();
    if !has_unit {
        return Err(CommandError::new(
            "E0801",
            format!("{option} `{v}` has no unit"),
            Some("give the unit: 0.5us, 500ns, 0.004ms".into()),
        ));
    }
    crate::plan::network::parse_time(v).map_err(|m| CommandError::new("E0801", format!("{option}: {m}"), None))
}

/// Everything `tcc plan-model` takes on the command line.
#[derive(Debug, Clone, Default)]
pub struct CliArgs {
    pub model: Option<String>,
    pub devices: Option<usize>,
    pub mem_per_device: Option<u64>,
    pub network: String,
    pub gpus_per_node: usize,
    pub intra_bw: String,
    /// `--intra-lat` and `--coll-lat`: collective latencies, units required.
    pub intra_lat: String,
    pub coll_lat: String,
    pub layers: usize,
    pub dims: Vec<String>,
    pub top: usize,
    pub zeropp: Option<String>,
    /// Force the micro-batch count (gradient accumulation steps).
    pub micro_batches: Option<usize>,
    /// Force the samples per micro-batch (`--micro-batch`).
    pub micro_batch: Option<usize>,
    /// Force the recomputation: none, selective, full or full-flash.
    pub recompute: Option<String>,
    pub json: bool,
    /// The vocabulary size (`--vocab`).
    pub vocab: Option<usize>,
    /// Compressed gradient communication (`--compress`) and its warm-up share.
    pub compress: Option<String>,
    pub warmup: Option<f64>,
    /// 0/1 Adam's mean steps between synchronizations (`--local-steps`).
    pub local_steps: Option<usize>,
    /// Plan serving instead of training (`--inference`).
    pub inference: bool,
    /// Tokens generated per sequence (`--generate`, inference).
    pub generate: Option<usize>,
    /// SwiftKV's share of layers whose prefill computes only the KV cache.
    pub swiftkv: Option<f64>,
    /// `deepspeed`, `megatron` or `torch`: write the best plan in that form.
    pub emit: Option<String>,
    /// `ulysses` or `expert`: run the model's layer sharded instead of planning.
    pub execute: Option<String>,
    pub ranks: Option<usize>,
    pub mpi: bool,
    pub seed: u64,
}

/// E0815: `--layers 0`, `--gpus-per-node 0`, `--devices 0` or `--top 0` — counts
/// that must be at least 1 (they were silently taken as 1 before).
pub fn check_counts(a: &CliArgs) -> Result<(), CommandError> {
    let counts = [
        ("--layers", Some(a.layers)),
        ("--gpus-per-node", Some(a.gpus_per_node)),
        ("--devices", a.devices),
        ("--top", Some(a.top)),
        ("--micro-batches", a.micro_batches),
        ("--micro-batch", a.micro_batch),
        ("--generate", a.generate),
        ("--vocab", a.vocab),
    ];
    for (name, v) in counts {
        if v == Some(0) {
            return Err(CommandError::new("E0815", format!("{name} must be at least 1"), None));
        }
    }
    Ok(())
}

/// The `--dim NAME=SIZE` overrides: E0811 for one that is not `NAME=SIZE`, E0816 for
/// a name given twice (the last one used to win silently).
pub fn parse_dims(specs: &[String]) -> Result<Vec<(String, usize)>, CommandError> {
    let mut dims: Vec<(String, usize)> = Vec::new();
    for d in specs {
        match d.split_once('=').map(|(n, v)| (n.trim(), v.trim().parse::<usize>())) {
            Some((n, Ok(v))) if !n.is_empty() => {
                if let Some((_, prev)) = dims.iter().find(|(m, _)| m == n) {
                    return Err(CommandError::new(
                        "E0816",
                        format!("--dim {n} is given twice ({n}={prev} and {n}={v})"),
                        Some("give each model dim once".into()),
                    ));
                }
                dims.push((n.to_string(), v))
            }
            _ => {
                return Err(CommandError::new(
                    "E0811",
                    format!("`--dim {d}` is not NAME=SIZE"),
                    Some("for example --dim seq=4096".into()),
                ))
            }
        }
    }
    Ok(dims)
}

/// `--compress KIND [--warmup F]`: E0811 for an unknown kind or a share outside [0, 1].
fn onebit(a: &CliArgs) -> Result<Option<compress::OneBit>, CommandError> {
    let Some(k) = &a.compress else { return Ok(None) };
    let kind = compress::Kind::parse(k).map_err(|m| CommandError::new("E0811", m, None))?;
    let warmup = a.warmup.unwrap_or(compress::DEFAULT_WARMUP);
    if !(0.0..=1.0).contains(&warmup) {
        return Err(CommandError::new(
            "E0811",
            format!("--warmup {warmup}: the share of steps at full volume must be between 0 and 1"),
            Some("for example --warmup 0.15".into()),
        ));
    }
    let sync_every = match (a.local_steps, kind) {
        (None, _) => 1,
        (Some(h), compress::Kind::ZeroOneAdam) if h >= 1 => h,
        (Some(h), compress::Kind::ZeroOneAdam) => {
            return Err(CommandError::new("E0815", format!("--local-steps {h}: must be at least 1"), None))
        }
        (Some(_), k) => {
            return Err(CommandError::new(
                "E0811",
                format!("--local-steps: {} synchronizes every step; local steps are 0/1 Adam's", k.name()),
                Some("--compress 01-adam --local-steps H".into()),
            ))
        }
    };
    Ok(Some(compress::OneBit { kind, warmup, sync_every: sync_every as f64 }))
}

/// What `--inference` serves: `--generate` (default [`DEFAULT_GENERATE`]) and
/// `--swiftkv`; E0820 for the network keys only training plans use.
fn serving(a: &CliArgs, o: &ModelOptions) -> Result<inference::Serving, CommandError> {
    let training: Vec<&str> = o.network.model_keys.iter().map(String::as_str).filter(|k| *k != "hbm").collect();
    if !training.is_empty() {
        return Err(CommandError::new(
            "E0820",
            format!(
                "--network {} {}: {} only training (optimizer offload); an inference plan has no use for {}",
                if training.len() > 1 { "keys" } else { "key" },
                training.join(", "),
                if training.len() > 1 { "they price" } else { "it prices" },
                if training.len() > 1 { "them" } else { "it" }
            ),
            Some("remove them with --inference".into()),
        ));
    }
    let swiftkv = a.swiftkv.unwrap_or(0.0);
    if !(0.0..1.0).contains(&swiftkv) {
        return Err(CommandError::new(
            "E0811",
            format!("--swiftkv {swiftkv}: the share of layers must be at least 0 and less than 1"),
            Some("for example --swiftkv 0.5 (SwiftKV's Llama-3.1 models skip half the layers in the prefill)".into()),
        ));
    }
    if swiftkv > 0.0 && (swiftkv * o.layers as f64).floor() < 1.0 {
        return Err(CommandError::new(
            "E0811",
            format!("--swiftkv {swiftkv} of {} layers skips no layer", o.layers),
            Some("give --layers (the model's depth) or a larger share".into()),
        ));
    }
    let generate = a.generate.unwrap_or(DEFAULT_GENERATE);
    if generate > MAX_GENERATE {
        return Err(CommandError::new(
            "E0811",
            format!("--generate {generate}: at most {MAX_GENERATE} tokens per sequence"),
            None,
        ));
    }
    Ok(inference::Serving { generate, swiftkv })
}

/// Tokens generated per sequence when `--generate` is not given.
pub const DEFAULT_GENERATE: usize = 256;
/// The most tokens `--generate` takes (each decode step is priced on its own).
pub const MAX_GENERATE: usize = 1_000_000;

/// `tcc plan-model` (without `--execute`: the executor, `exec::model::cli`, runs that),
/// whole: the text to print, or an error.
pub fn cli(hir: &crate::sema::hir::Hir, a: &CliArgs) -> Result<String, CommandError> {
    let err = |code, message: String, hint: Option<&str>| CommandError { code, message, hint: hint.map(String::from) };
    let network = Network::parse(&a.network)
        .map_err(|m| err("E0801", m, Some("for example --network fat-tree:bw=25GB/s,lat=5us,flops=150TF/s")))?;
    // Step times are flops at this rate: a network without one would silently be
    // priced at the program planner's CPU-like default.
    let spec = if a.network.ends_with(".toml") {
        std::fs::read_to_string(&a.network).unwrap_or_default()
    } else {
        a.network.clone()
    };
    if !spec.contains("flops") && !spec.contains("gamma") && !spec.contains("peak") {
        return Err(err(
            "E0801",
            format!("--network `{}` gives no compute rate per device", a.network),
            Some("add the achieved rate, flops=… (e.g. flops=150TF/s), or the peak and the utilization, peak=…,mfu=… (e.g. peak=989TF/s,mfu=0.4 for an H100/H200 in bf16)"),
        ));
    }
    let Some(devices) = a.devices else {
        return Err(err("E0802", "--devices N is required to plan".into(), Some("for example --devices 64")));
    };
    check_counts(a)?;
    let mut o = ModelOptions::new(devices, network);
    o.mem_per_device = a.mem_per_device;
    o.gpus_per_node = a.gpus_per_node.max(1);
    o.intra_bw = crate::plan::network::parse_bandwidth(&a.intra_bw).map_err(|m| err("E0801", m, None))?;
    o.intra_lat = latency("--intra-lat", &a.intra_lat)?;
    o.coll_lat = latency("--coll-lat", &a.coll_lat)?;
    o.layers = a.layers.max(1);
    o.top = a.top.max(1);
    o.zeropp = match &a.zeropp {
        Some(s) => Some(ZeroPP::parse(s).map_err(|m| err("E0811", m, None))?),
        None => None,
    };
    o.micro_batches = a.micro_batches;
    o.micro_batch_size = a.micro_batch;
    o.recompute = match &a.recompute {
        Some(s) => {
            Some(Recompute::parse(s).map_err(|m| err("E0811", m, Some("--recompute none|selective|full|full-flash")))?)
        }
        None => None,
    };
    o.compress = onebit(a)?;
    o.vocab = a.vocab;
    let dims = parse_dims(&a.dims)?;
    let output = match &a.emit {
        Some(f) => Output::Export(export::Emit::parse(f).map_err(|m| err("E0811", m, None))?),
        None if a.inference => Output::Inference(serving(a, &o)?, a.json),
        None if a.json => Output::Json,
        None => Output::Text,
    };
    plan_model_output(hir, a.model.as_deref(), &dims, &o, output)
}
