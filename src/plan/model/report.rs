//! Text and JSON renderings of model plans.

use super::analysis::ModelInfo;
use super::{ModelOptions, ModelPlan};
use crate::plan::network::fmt_time;

/// `1.23 GB`-style (decimal units, as the papers use).
pub fn fmt_bytes(b: f64) -> String {
    let b = b + 0.0; // no "-0 B" (an empty sum is -0.0)
    for (s, u) in [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")] {
        if b >= s {
            return format!("{:.2} {u}", b / s);
        }
    }
    format!("{b:.0} B")
}

pub fn fmt_count(x: f64) -> String {
    let x = x + 0.0; // no "-0"
    for (s, u) in [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")] {
        if x >= s {
            return format!("{:.2} {u}", x / s);
        }
    }
    format!("{x:.0}")
}

fn header(info: &ModelInfo, o: &ModelOptions, plans: &[ModelPlan]) -> String {
    let p = &plans[0];
    let dims: Vec<String> = info.dims.iter().map(|(n, s)| format!("{n}={s}")).collect();
    let mut s = format!("model {}: {}\n", info.name, dims.join(" "));
    s.push_str(&format!(
        "  parameters Ψ = {} ({} dense + {} expert; {} per block × {} layers); forward {} flop per block\n",
        fmt_count(p.psi_dense + p.psi_expert),
        fmt_count(p.psi_dense),
        fmt_count(p.psi_expert),
        fmt_count(info.psi_dense() + info.psi_expert()),
        o.layers,
        fmt_count(info.flops())
    ));
    s.push_str(&format!(
        "  {} devices, {} per node (intra-node {}/s, {}); memory per device {}\n  network {}\n",
        o.devices,
        o.gpus_per_node,
        fmt_bytes(o.intra_bw),
        super::collective::describe(o),
        o.mem_per_device.map_or("unlimited".to_string(), |m| fmt_bytes(m as f64)),
        o.network.describe()
    ));
    if let Some(b) = o.micro_batch_size {
        let samples = if b == 1 { "sample" } else { "samples" };
        s.push_str(&format!("  micro-batch fixed at {b} {samples} per data rank (--micro-batch)\n"));
    }
    s
}

/// The ranking table, then the best plan in detail.
pub fn plans_text(info: &ModelInfo, o: &ModelOptions, plans: &[ModelPlan]) -> String {
    let mut s = header(info, o, plans);
    let fit = plans.iter().filter(|p| p.fits).count();
    s.push_str(&format!("  {} valid plans, {} fit in memory; top {}:\n", plans.len(), fit, o.top.min(plans.len())));
    s.push_str(&format!(
        "  {:>3}  {:>4} {:>6} {:>9} {:>6} {:>5} {:>7} {:>4} {:>9} {:>5} {:>9} {:>6}  {:>10}  {:>10}  {:>10}  {:>10}\n",
        "#",
        "data",
        "tensor",
        "sequence",
        "expert",
        "zero",
        "zero++",
        "pipe",
        "schedule",
        "micro",
        "recompute",
        "bubble",
        "memory",
        "comm/step",
        "cross-node",
        "time/step"
    ));
    for (k, p) in plans.iter().take(o.top.max(1)).enumerate() {
        let c = &p.config;
        let seq = if c.sequence > 1 {
            format!("{}{}", if c.seq_style == super::SeqStyle::Ulysses { "uly" } else { "ring" }, c.sequence)
        } else {
            "1".into()
        };
        let pp = &c.pipe;
        let sched = match (pp.stages, pp.schedule) {
            (1, _) => "-".to_string(),
            (_, super::Schedule::Interleaved) => format!("inter×{}", pp.virtual_stages),
            (_, x) => x.name().to_string(),
        };
        s.push_str(&format!(
            "  {:>3}  {:>4} {:>6} {:>9} {:>6} {:>5} {:>7} {:>4} {:>9} {:>5} {:>9} {:>5.1}%  {:>10}  {:>10}  {:>10}  {:>10}{}\n",
            k + 1,
            c.data,
            c.tensor,
            seq,
            // `+dtd`: TED's duplicate-token dropping.
            format!("{}{}", c.expert, if c.ted_dtd { "+dtd" } else { "" }),
            // `+off`: the optimizer states offloaded to the host (ZeRO-Offload).
            // `+1b`: compressed (1-bit) gradient communication.
            // `+cpu` / `+nvme`: ZeRO-Infinity's tier.
            format!(
                "{}{}{}{}",
                c.zero,
                if c.offload { "+off" } else { "" },
                if p.compress.is_some() { "+1b" } else { "" },
                c.infinity.map_or(String::new(), |t| format!("+{}", t.name()))
            ),
            c.zeropp.name(),
            pp.stages,
            sched,
            pp.micro_batches,
            pp.recompute.name(),
            100.0 * p.bubble,
            fmt_bytes(p.memory.total),
            fmt_bytes(p.bytes_per_step),
            fmt_bytes(p.cross_node_bytes),
            fmt_time(p.time),
            if p.fits { "" } else { "  (does not fit)" }
        ));
    }
    s.push_str(&plan_detail(&plans[0]));
    s
}

/// One plan: memory breakdown and every collective of a step.
pub fn plan_detail(p: &ModelPlan) -> String {
    let m = &p.memory;
    let mut s = format!("best: {}\n", p.config.describe());
    s.push_str(&format!(
        "  memory per device {} = weights {} + gradients {} + optimizer {}{} + activations {}{}{}{}{}{}{}\n",
        fmt_bytes(m.total),
        fmt_bytes(m.params),
        fmt_bytes(m.grads),
        fmt_bytes(m.optimizer),
        if m.secondary > 0.0 { format!(" + hpZ secondary {}", fmt_bytes(m.secondary)) } else { String::new() },
        fmt_bytes(m.activations),
        if m.backward > 0.0 { format!(" + backward gradients {}", fmt_bytes(m.backward)) } else { String::new() },
        if m.gather > 0.0 { format!(" + ZeRO-3 gathered weights {}", fmt_bytes(m.gather)) } else { String::new() },
        if m.workspace > 0.0 { format!(" + NCCL buffers {}", fmt_bytes(m.workspace)) } else { String::new() },
        if m.compression > 0.0 {
            format!(" + 1-bit error buffers {}", fmt_bytes(m.compression))
        } else {
            String::new()
        },
        if m.logits > 0.0 { format!(" + logits {}", fmt_bytes(m.logits)) } else { String::new() },
        if m.buckets > 0.0 { format!(" + gradient buckets {}", fmt_bytes(m.buckets)) } else { String::new() }
    ));
    if let Some(ob) = p.compress {
        s.push_str(&format!(
            "  gradient compression: {}, {:.0}% of steps at full volume (warm-up), then the momentum's signs, \
             1 bit per element (1/16 of fp16){}; the step's collectives are averaged over both\n",
            ob.kind.name(),
            100.0 * ob.warmup,
            if ob.sync_every > 1.0 { format!(", every {} steps", ob.sync_every) } else { String::new() }
        ));
    }
    if let Some(tier) = p.config.infinity {
        s.push_str(&format!(
            "  ZeRO-Infinity: this rank's partition (fp16 weights and gradients, optimizer states) in the {} tier: {}{}; \
             host link {}/s, host Adam {} parameters/s{}\n",
            if tier == super::infinity::Tier::Cpu { "host" } else { "NVMe" },
            fmt_bytes(m.host + m.nvme),
            p.host_mem.map_or(String::new(), |h| format!(" (host memory per device {})", fmt_bytes(h))),
            fmt_bytes(p.offload_rates.0),
            fmt_count(p.offload_rates.1),
            p.nvme.map_or(String::new(), |b| format!(", NVMe {}/s", fmt_bytes(b)))
        ));
    } else if m.host > 0.0 {
        s.push_str(&format!(
            "  host memory per device {} (the optimizer states of its partition, offloaded); host link {}/s, \
             host Adam {} parameters/s (pcie=, cpu-adam= in --network)\n",
            fmt_bytes(m.host),
            fmt_bytes(p.offload_rates.0),
            fmt_count(p.offload_rates.1)
        ));
    }
    let pp = &p.config.pipe;
    if pp.stages > 1 || pp.micro_batches > 1 || pp.recompute != super::Recompute::None {
        let (hi, lo, _) = p.stage_layers;
        s.push_str(&format!(
            "  pipeline {} stage{} of {} layers{} ({}), {} micro-batch{} of {} per data rank, in flight on stage 1: {}; \
             recompute {}; bubble {:.1}%\n",
            pp.stages,
            if pp.stages == 1 { "" } else { "s" },
            hi,
            if hi != lo { format!(" (the last {} of {lo})", pp.stages - p.stage_layers.2) } else { String::new() },
            match (pp.stages, pp.schedule) {
                (1, _) => "gradient accumulation".to_string(),
                (_, super::Schedule::Interleaved) => format!("interleaved 1F1B, {} chunks per device", pp.virtual_stages),
                (_, super::Schedule::OneFOneB) => "1F1B".to_string(),
                (_, super::Schedule::GPipe) => "GPipe".to_string(),
            },
            pp.micro_batches,
            if pp.micro_batches == 1 { "" } else { "es" },
            p.micro_batch_size,
            super::pipeline::in_flight(pp.schedule, pp.stages, pp.micro_batches, pp.virtual_stages),
            pp.recompute.name(),
            100.0 * p.bubble
        ));
    }
    s.push_str(&format!(
        "  step: compute {} ({} flop per device) + communication {}{}{}{}{} = {}\n",
        fmt_time(p.time_compute),
        fmt_count(p.flops_per_rank),
        fmt_time(p.time_comm),
        if p.time_bubble > 0.0 { format!(" + bubble {}", fmt_time(p.time_bubble)) } else { String::new() },
        if p.time_quant > 0.0 {
            format!(" + ZeRO++ quantization {} (at hbm={}/s)", fmt_time(p.time_quant), fmt_bytes(p.hbm))
        } else {
            String::new()
        },
        if p.time_offload > 0.0 {
            format!(
                " + offload {} ({}, not overlapped)",
                fmt_time(p.time_offload),
                if p.config.infinity.is_some() {
                    "weights fetched per pass, gradients down, host Adam"
                } else {
                    "host link and host Adam"
                }
            )
        } else {
            String::new()
        },
        if p.time_compress > 0.0 {
            format!(" + 1-bit compression {} (at hbm={}/s)", fmt_time(p.time_compress), fmt_bytes(p.hbm))
        } else {
            String::new()
        },
        fmt_time(p.time)
    ));
    // Utilization: the model's flops (recomputation not counted) over the step.
    let achieved = if p.time > 0.0 { p.model_flops_per_rank / p.time } else { 0.0 };
    s.push_str(&match p.peak {
        Some(peak) => format!(
            "  model flops per device {} flop/s over the step = MFU {:.1}% of peak {} flop/s\n",
            fmt_count(achieved),
            100.0 * achieved / peak,
            fmt_count(peak)
        ),
        None => format!(
            "  model flops per device {} flop/s over the step ({:.1}% of the {} flop/s given; give peak=…,mfu=… for MFU)\n",
            fmt_count(achieved),
            100.0 * achieved / p.rate,
            fmt_count(p.rate)
        ),
    });
    if p.comm.is_empty() {
        s.push_str("  no communication\n");
    }
    for c in &p.comm {
        s.push_str(&format!(
            "  {:<9} {:<14} {:<12} ×{:<4} {:<40} {:>10} elems × {} B  sends {:>10}/rank each{}{}\n",
            c.phase,
            c.kind.name(),
            format!("{}({})", c.group, c.group_size),
            c.count,
            c.what,
            fmt_count(c.elements),
            c.bytes_per_elem,
            fmt_bytes(c.bytes_per_rank),
            if c.cross_node { "  cross-node" } else { "" },
            if c.algorithm == super::collective::Algo::Tree { "  (tree)" } else { "" }
        ));
    }
    s
}

pub fn plans_json(info: &ModelInfo, o: &ModelOptions, plans: &[ModelPlan]) -> serde_json::Value {
    serde_json::json!({
        "model": info.name,
        "dims": info.dims.iter().map(|(n, s)| serde_json::json!({"name": n, "size": s})).collect::<Vec<_>>(),
        "devices": o.devices,
        "gpus_per_node": o.gpus_per_node,
        "layers": o.layers,
        "mem_per_device": o.mem_per_device,
        "micro_batch_fixed": o.micro_batch_size,
        "network": o.network,
        "valid_plans": plans.len(),
        "units": {
            "memory": "bytes", "mem_per_device": "bytes", "bytes_per_step": "bytes", "cross_node_bytes": "bytes",
            "time": "seconds", "flops_per_rank": "floating-point operations per step",
            "bubble": "fraction of the step",
        },
        "plans": plans.iter().take(o.top.max(1)).collect::<Vec<_>>(),
        "best_plan_ranks": plans.first().map(|p| serde_json::json!({
            "order": super::export::mesh(p).map(|(n, _)| n),
            "sizes": super::export::mesh(p).map(|(_, s)| s),
            "note": "rank r has coordinates ranks[r] = [pp, dp, sp, tp]; r = ((pp*DP + dp)*SP + sp)*TP + tp",
            "ranks": super::export::rank_map(p),
        })),
    })
}
