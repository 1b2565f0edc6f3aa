//! `tcc plan-model --emit deepspeed|megatron|torch`: the best plan written as
//! what a training engineer starts a job with — a DeepSpeed `ds_config` JSON,
//! Megatron-LM arguments, or a PyTorch `DeviceMesh`/FSDP2 sketch — and the rank
//! map all three share. What a target cannot express is refused (E0817) rather
//! than dropped: an emitted configuration always means the plan it came from.

use super::analysis::{ModelInfo, EXPERT_NAMES};
use super::pipeline::{Recompute, Schedule};
use super::{ModelOptions, ModelPlan, SeqStyle};
use crate::error::CommandError;

/// What `--emit` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    DeepSpeed,
    Megatron,
    Torch,
}

impl Emit {
    pub fn parse(s: &str) -> Result<Emit, String> {
        match s {
            "deepspeed" => Ok(Emit::DeepSpeed),
            "megatron" => Ok(Emit::Megatron),
            "torch" => Ok(Emit::Torch),
            _ => Err(format!("unknown --emit format `{s}`: deepspeed, megatron or torch")),
        }
    }
}

fn refuse(target: &str, why: String) -> CommandError {
    CommandError::new(
        "E0817",
        format!("the plan cannot be written for {target}: {why}"),
        Some("constrain the search (`parallel` hints, --zeropp, --recompute) or choose another --emit".into()),
    )
}

/// The mesh dims in rank order, slowest first: pipeline, data, sequence, tensor
/// (Megatron-LM's order: tensor ranks adjacent, so they share a node).
pub fn mesh(p: &ModelPlan) -> [(&'static str, usize); 4] {
    let c = &p.config;
    [("pp", c.pipe.stages), ("dp", c.data), ("sp", c.sequence), ("tp", c.tensor)]
}

/// Each rank's coordinates in [`mesh`]: rank = ((pp·DP + dp)·SP + sp)·TP + tp.
pub fn rank_map(p: &ModelPlan) -> Vec<[usize; 4]> {
    let sizes = mesh(p).map(|(_, n)| n.max(1));
    let total: usize = sizes.iter().product();
    (0..total)
        .map(|r| {
            let mut at = [0; 4];
            let mut rest = r;
            for d in (0..4).rev() {
                at[d] = rest % sizes[d];
                rest /= sizes[d];
            }
            at
        })
        .collect()
}

/// Samples per step: micro-batch size × micro-batches × data ranks.
fn global_batch(p: &ModelPlan) -> usize {
    p.micro_batch_size * p.config.pipe.micro_batches * p.config.data
}

/// The dims Megatron-LM and model code name, by the model's dim names.
fn named_dim(info: &ModelInfo, names: &[&str]) -> Option<usize> {
    info.dim_any(names).map(|(_, n)| n)
}

impl Emit {
    fn target(self) -> &'static str {
        match self {
            Emit::DeepSpeed => "DeepSpeed",
            Emit::Megatron => "Megatron-LM",
            Emit::Torch => "PyTorch",
        }
    }

    /// Why `format` cannot express plan `p`, if it cannot.
    pub fn unsupported(self, o: &ModelOptions, p: &ModelPlan) -> Option<String> {
        let c = &p.config;
        let pipe = &c.pipe;
        let piped = pipe.stages > 1;
        match self {
            Emit::DeepSpeed if pipe.schedule == Schedule::Interleaved && pipe.virtual_stages > 1 => {
                Some("its pipeline engine runs 1F1B without virtual stages (interleaved 1F1B)".into())
            }
            Emit::DeepSpeed if piped && pipe.schedule == Schedule::GPipe => {
                Some("its pipeline engine runs 1F1B, not GPipe".into())
            }
            Emit::Megatron if c.sequence > 1 && c.seq_style == SeqStyle::Ulysses => Some(
                "Ulysses sequence parallelism is DeepSpeed's (Megatron-DeepSpeed: --ds-sequence-parallel-size); \
                 Megatron-LM's context parallelism is the ring"
                    .into(),
            ),
            Emit::Megatron if piped && pipe.schedule == Schedule::GPipe => {
                Some("its pipeline schedules are 1F1B and interleaved 1F1B, not GPipe".into())
            }
            Emit::Megatron
                if pipe.schedule == Schedule::Interleaved
                    && pipe.virtual_stages > 1
                    && !o.layers.is_multiple_of(pipe.stages * pipe.virtual_stages) =>
            {
                Some(format!(
                    "{} layers do not divide into {} stages × {} virtual stages",
                    o.layers, pipe.stages, pipe.virtual_stages
                ))
            }
            Emit::Megatron | Emit::Torch if c.zeropp.any() => {
                Some(format!("ZeRO++ ({}) is DeepSpeed's", c.zeropp.name()))
            }
            Emit::Megatron if c.offload && c.zero >= 3 => {
                Some("its --optimizer-cpu-offload goes with the distributed optimizer (ZeRO 1-2), not FSDP".into())
            }
            Emit::Megatron | Emit::Torch if c.infinity.is_some() => {
                Some("ZeRO-Infinity (weights offloaded to host or NVMe) is DeepSpeed's".into())
            }
            Emit::Megatron | Emit::Torch if p.compress.is_some() => {
                Some(format!("{} is DeepSpeed's", p.compress.map_or("", |x| x.kind.name())))
            }
            Emit::Megatron | Emit::Torch if c.ted_dtd => Some(
                "TED's duplicate-token dropping is DeepSpeed's (deepspeed.moe.mappings drop_tokens/gather_tokens)"
                    .into(),
            ),
            Emit::Torch if c.offload => Some(
                "FSDP2's CPU offload moves weights and gradients too, not the optimizer states alone (ZeRO-Offload)"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// The best of `plans` (ranked) that `format` can express, written in it; the
/// first line of the output says which plan of the ranking it is.
pub fn emit(info: &ModelInfo, o: &ModelOptions, plans: &[ModelPlan], format: Emit) -> Result<String, CommandError> {
    let runnable = |p: &&ModelPlan| format.unsupported(o, p).is_none();
    let Some((rank, p)) = plans.iter().enumerate().find(|(_, p)| runnable(p) && p.fits) else {
        let why = match plans.iter().filter(runnable).min_by(|a, b| a.memory.total.total_cmp(&b.memory.total)) {
            // Plans that do not fit are ranked last: none it can run fits.
            Some(p) => format!(
                "none of the plans it can run fits in {} per device (the smallest needs {})",
                o.mem_per_device.map_or("memory".into(), |b| super::report::fmt_bytes(b as f64)),
                super::report::fmt_bytes(p.memory.total)
            ),
            None => format!(
                "no plan it can run (the best: {})",
                plans.first().and_then(|p| format.unsupported(o, p)).unwrap_or_default()
            ),
        };
        return Err(refuse(format.target(), why));
    };
    let skipped = if rank == 0 {
        String::new()
    } else {
        format!(" (plan #{} of the ranking: #1 to #{rank} cannot be written for {})", rank + 1, format.target())
    };
    match format {
        Emit::DeepSpeed => deepspeed(info, o, p, &skipped),
        Emit::Megatron => megatron(info, o, p).map(|a| {
            format!(
                "# tcc plan-model: {} on {} devices: {}{skipped}\n\
                 # source this, then: torchrun ... pretrain_gpt.py \"${{TCC_MEGATRON_ARGS[@]}}\" ...\n\
                 TCC_MEGATRON_ARGS=(\n{a})\n",
                info.name,
                o.devices,
                p.config.describe()
            )
        }),
        Emit::Torch => torch(info, o, p).map(|t| t.replacen('\n', &format!("{skipped}\n"), 1)),
    }
}

/// A `ds_config` JSON. Tensor, sequence, expert and pipeline degrees live in
/// DeepSpeed's model code, not in its config: they are listed under
/// `"tcc_model_code"` (DeepSpeed ignores keys it does not know).
fn deepspeed(info: &ModelInfo, o: &ModelOptions, p: &ModelPlan, skipped: &str) -> Result<String, CommandError> {
    let c = &p.config;
    let pipe = &c.pipe;
    let mut zero = serde_json::json!({
        "stage": c.zero,
        "overlap_comm": true,
        "contiguous_gradients": true,
        // The buffers the memory fit counts (DeepSpeed's defaults, written out).
        "reduce_bucket_size": super::ZERO_BUCKET,
        "allgather_bucket_size": super::ZERO_BUCKET,
    });
    if c.zeropp.qwz {
        zero["zero_quantized_weights"] = true.into();
    }
    if c.zeropp.hpz {
        zero["zero_hpz_partition_size"] = o.gpus_per_node.into();
    }
    if c.zeropp.qgz {
        zero["zero_quantized_gradients"] = true.into();
    }
    if c.offload {
        zero["offload_optimizer"] = serde_json::json!({ "device": "cpu", "pin_memory": true });
    }
    if let Some(tier) = c.infinity {
        let mut dev = serde_json::json!({ "device": tier.name(), "pin_memory": true });
        if tier == super::infinity::Tier::Nvme {
            dev["nvme_path"] = "/local_nvme".into();
        }
        zero["offload_param"] = dev.clone();
        zero["offload_optimizer"] = dev;
    }
    let mut cfg = serde_json::json!({
        "train_batch_size": global_batch(p),
        "train_micro_batch_size_per_gpu": p.micro_batch_size,
        "gradient_accumulation_steps": pipe.micro_batches,
        "bf16": { "enabled": true },
        "zero_optimization": zero,
    });
    if let Some(ob) = p.compress {
        // freeze_step counts steps, which the plan does not know: the share is
        // under tcc_model_code.
        cfg["optimizer"] = serde_json::json!({
            "type": ob.kind.deepspeed_type(),
            "params": { "comm_backend_name": "nccl" },
        });
    }
    if pipe.recompute != Recompute::None {
        cfg["activation_checkpointing"] = serde_json::json!({
            "partition_activations": c.tensor > 1,
            "contiguous_memory_optimization": false,
            "number_checkpoints": o.layers,
        });
    }
    cfg["tcc_model_code"] = serde_json::json!({
        "note": format!("tcc plan-model: {} on {} devices: {}{skipped}", info.name, o.devices, c.describe()),
        "pipeline_stages": pipe.stages,
        "pipeline_partition_method": "uniform",
        "tensor_parallel_size": c.tensor,
        "tensor_parallel_dims": c.tensor_dims,
        "sequence_parallel_size": c.sequence,
        "sequence_parallel_style": if c.seq_style == SeqStyle::Ulysses { "ulysses" } else { "ring" },
        "moe_ep_size": c.expert,
        // TED: the MoE layer drops the tokens duplicated over the tensor group
        // before each expert all-to-all and all-gathers them after it.
        "moe_drop_duplicate_tokens": c.ted_dtd,
        "activation_checkpointing": recompute_name(pipe.recompute),
        // The attention kernel is the model code's: the plan's memory assumes a
        // flash-style one (no s² scores kept or rebuilt) where it says so.
        "flash_attention": super::recompute::drops_core(pipe.recompute),
        "rank_order": mesh(p).map(|(n, _)| n),
    });
    if let Some(ob) = p.compress {
        let key = if ob.kind == super::compress::Kind::ZeroOneAdam { "var_freeze_step" } else { "freeze_step" };
        cfg["tcc_model_code"]["compression_warmup_share"] = ob.warmup.into();
        if ob.sync_every > 1.0 {
            cfg["tcc_model_code"]["compression_mean_local_steps"] = ob.sync_every.into();
        }
        cfg["tcc_model_code"]["compression_note"] =
            format!("set optimizer.params.{key} to {:.0}% of the training steps", 100.0 * ob.warmup).into();
    }
    Ok(serde_json::to_string_pretty(&cfg).unwrap_or_default() + "\n")
}

fn recompute_name(r: Recompute) -> &'static str {
    match r {
        Recompute::None => "none",
        Recompute::Selective => "selective",
        Recompute::Full => "full",
        Recompute::FullFlash => "full-flash",
    }
}

/// Megatron-LM arguments, one per line, as the body of a bash array (see [`emit`]).
fn megatron(info: &ModelInfo, o: &ModelOptions, p: &ModelPlan) -> Result<String, CommandError> {
    let c = &p.config;
    let pipe = &c.pipe;
    let mut a: Vec<String> = vec![
        format!("--tensor-model-parallel-size {}", c.tensor),
        format!("--pipeline-model-parallel-size {}", pipe.stages),
    ];
    if pipe.schedule == Schedule::Interleaved && pipe.virtual_stages > 1 {
        a.push(format!("--num-layers-per-virtual-pipeline-stage {}", o.layers / (pipe.stages * pipe.virtual_stages)));
    }
    if c.megatron_sp {
        a.push("--sequence-parallel".into());
    }
    if c.offload {
        a.push("--optimizer-cpu-offload".into());
    }
    if c.sequence > 1 {
        a.push(format!("--context-parallel-size {}", c.sequence));
    }
    if c.expert > 1 {
        a.push(format!("--expert-model-parallel-size {}", c.expert));
    }
    a.push(format!("--micro-batch-size {}", p.micro_batch_size));
    a.push(format!("--global-batch-size {}", global_batch(p)));
    match pipe.recompute {
        Recompute::None => {}
        Recompute::Selective => a.push("--recompute-granularity selective".into()),
        Recompute::Full => {
            a.push("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1".into())
        }
        // The recomputed layer runs flash attention: the plan's memory assumes it.
        Recompute::FullFlash => a.push(
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --use-flash-attn".into(),
        ),
    }
    match c.zero {
        0 => {}
        1 | 2 => a.push("--use-distributed-optimizer".into()),
        _ => a.push("--use-torch-fsdp2".into()),
    }
    a.push(format!("--num-layers {}", o.layers));
    for (names, arg) in [
        (&["hidden", "model", "d_model"][..], "--hidden-size"),
        (&["heads"][..], "--num-attention-heads"),
        (&["ffn"][..], "--ffn-hidden-size"),
        (&["hdim", "head_dim"][..], "--kv-channels"),
        (&EXPERT_NAMES[..], "--num-experts"),
    ] {
        if let Some(n) = named_dim(info, names) {
            a.push(format!("{arg} {n}"));
        }
    }
    if let Some(n) = named_dim(info, &super::analysis::SEQ_NAMES) {
        a.push(format!("--seq-length {n} --max-position-embeddings {n}"));
    }
    a.push("--bf16".into());
    Ok(a.iter().map(|x| format!("  {x}\n")).collect())
}

/// A PyTorch sketch: the device mesh in the plan's rank order, then what each
/// mesh dim is for (FSDP2 for ZeRO, tensor/context parallel, pipelining,
/// checkpointing).
fn torch(info: &ModelInfo, o: &ModelOptions, p: &ModelPlan) -> Result<String, CommandError> {
    let c = &p.config;
    let pipe = &c.pipe;
    let dims = mesh(p);
    let shape: Vec<String> = dims.iter().map(|(_, n)| n.to_string()).collect();
    let names: Vec<String> = dims.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    let mut s = format!(
        "# tcc plan-model: {} on {} devices: {}\n\
         # Ranks in row-major order of the mesh (pp, dp, sp, tp): tensor ranks adjacent.\n\
         import torch\n\
         from torch.distributed.device_mesh import init_device_mesh\n\n\
         mesh = init_device_mesh(\"cuda\", ({},), mesh_dim_names=({},))\n",
        info.name,
        o.devices,
        c.describe(),
        shape.join(", "),
        names.join(", ")
    );
    let reshard = match c.zero {
        0 => None,
        1 | 2 => Some("False"),
        _ => Some("True"),
    };
    if let Some(r) = reshard {
        s += &format!(
            "\n# ZeRO-{}: shard over the data ranks with FSDP2 (torch >= 2.6).\n\
             from torch.distributed.fsdp import fully_shard\n\
             def shard(block):\n    fully_shard(block, mesh=mesh[\"dp\"], reshard_after_forward={r})\n",
            c.zero
        );
    } else {
        s += "\n# No ZeRO: replicate over the data ranks (DDP).\n";
    }
    if c.tensor > 1 {
        s += &format!(
            "\n# Tensor parallel over mesh[\"tp\"] ({}) on {}: column-wise into, row-wise out of each split.\n\
             from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module\n",
            c.tensor,
            c.tensor_dims.join(" and ")
        );
    }
    if c.sequence > 1 {
        s += &format!(
            "\n# Sequence parallel over mesh[\"sp\"] ({}, {}).\n",
            c.sequence,
            if c.seq_style == SeqStyle::Ulysses {
                "Ulysses: all-to-all from sequence to heads around attention"
            } else {
                "ring attention: torch.distributed.tensor.experimental.context_parallel"
            }
        );
    }
    if c.expert > 1 {
        s += &format!("\n# Experts split {} ways across the data ranks (all-to-all dispatch).\n", c.expert);
    }
    if pipe.stages > 1 {
        let (class, extra) = match pipe.schedule {
            Schedule::GPipe => ("ScheduleGPipe", String::new()),
            Schedule::OneFOneB => ("Schedule1F1B", String::new()),
            Schedule::Interleaved => ("ScheduleInterleaved1F1B", format!(", {} stages per rank", pipe.virtual_stages)),
        };
        s += &format!(
            "\n# Pipeline over mesh[\"pp\"]: {} stages{extra}, {} micro-batches.\n\
             from torch.distributed.pipelining import {class}\n\
             N_MICROBATCHES = {}\n",
            pipe.stages, pipe.micro_batches, pipe.micro_batches
        );
    } else if pipe.micro_batches > 1 {
        s += &format!("\n# Gradient accumulation: {} micro-batches per step.\n", pipe.micro_batches);
    }
    s += &format!("MICRO_BATCH_SIZE = {}\nGLOBAL_BATCH_SIZE = {}\n", p.micro_batch_size, global_batch(p));
    match pipe.recompute {
        Recompute::None => {}
        Recompute::Selective => {
            s += "\n# Selective recomputation: checkpoint the attention core (scores, softmax).\n\
                  from torch.utils.checkpoint import checkpoint\n"
        }
        Recompute::Full => {
            s += "\n# Full recomputation: checkpoint every layer.\n\
                  from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\n"
        }
        Recompute::FullFlash => {
            s += "\n# Full recomputation: checkpoint every layer; the plan's memory assumes its attention is\n\
                  # torch.nn.functional.scaled_dot_product_attention (flash: no s² scores, also when recomputed).\n\
                  from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\n"
        }
    }
    Ok(s)
}
