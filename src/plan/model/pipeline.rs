//! Pipeline parallelism over the repeated block (`--layers`), micro-batching and
//! gradient accumulation: the closed forms the planner uses (GPipe, Huang et al.
//! 2019; 1F1B, PipeDream-Flush / Megatron-LM, Narayanan et al. 2021; interleaved
//! 1F1B with virtual stages, the same paper §2.2).
//!
//! Ranks are laid out pipeline-outermost: rank = stage·(N/pp) + (the data ×
//! sequence × tensor rank), so every other group stays inside one stage and a
//! stage's neighbour is N/pp ranks away.

use super::analysis::{ModelInfo, BATCH_NAMES};
use super::Config;
use serde::Serialize;

/// The order in which a stage runs its micro-batches' forward and backward passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Schedule {
    /// All forwards, then all backwards: every micro-batch's activations in flight.
    #[serde(rename = "gpipe")]
    GPipe,
    /// One forward, one backward: at most `pp` micro-batches in flight (on the first
    /// stage). With one stage this is plain gradient accumulation.
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// 1F1B over `virtual_stages` chunks of layers per device: the bubble shrinks
    /// by v, point-to-point sends grow by v.
    #[serde(rename = "interleaved-1f1b")]
    Interleaved,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::GPipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
            Schedule::Interleaved => "interleaved",
        }
    }
}

/// What the backward pass recomputes instead of keeping (Korthikanti et al. 2022).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    None,
    /// The attention core (the tensors quadratic in the sequence) is recomputed.
    Selective,
    /// Only each layer's input is kept; the whole forward runs again.
    Full,
    /// Full recomputation of a layer whose attention is a flash-style kernel
    /// (`torch.utils.checkpoint` around a layer calling SDPA): the recomputed
    /// layer never materialises the attention core, and the kernel's backward
    /// recomputes it once more.
    #[serde(rename = "full-flash")]
    FullFlash,
}

impl Recompute {
    pub fn name(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
            Recompute::FullFlash => "full-flash",
        }
    }
    /// Whether only each layer's input is kept (the whole forward runs again).
    pub fn is_full(self) -> bool {
        matches!(self, Recompute::Full | Recompute::FullFlash)
    }
    pub fn parse(s: &str) -> Result<Recompute, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Recompute::None),
            "selective" => Ok(Recompute::Selective),
            "full" => Ok(Recompute::Full),
            "full-flash" => Ok(Recompute::FullFlash),
            _ => Err(format!("unknown recomputation `{s}` (none, selective, full, full-flash)")),
        }
    }
}

/// Pipeline, micro-batching and recomputation choices of one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pipe {
    /// Pipeline stages (pp); 1: no pipeline.
    pub stages: usize,
    pub schedule: Schedule,
    /// Model chunks per device (interleaved 1F1B); 1 otherwise.
    pub virtual_stages: usize,
    /// Micro-batches per step (m): gradient accumulation steps.
    pub micro_batches: usize,
    pub recompute: Recompute,
}

impl Default for Pipe {
    fn default() -> Pipe {
        Pipe {
            stages: 1,
            schedule: Schedule::OneFOneB,
            virtual_stages: 1,
            micro_batches: 1,
            recompute: Recompute::None,
        }
    }
}

/// The fraction of a step a stage idles: (p − 1)/(m + p − 1); interleaved with v
/// chunks (p − 1)/(v·m + p − 1) (Narayanan et al. 2021, §2.2).
pub fn bubble_fraction(p: usize, m: usize, v: usize) -> f64 {
    let (p, m, v) = (p as f64, m as f64, v.max(1) as f64);
    (p - 1.0) / (v * m + p - 1.0)
}

/// How much longer the pipelined step is than its ideal (busy) part: 1/(1 − bubble).
pub fn stretch(p: usize, m: usize, v: usize) -> f64 {
    1.0 / (1.0 - bubble_fraction(p, m, v))
}

/// Micro-batches whose activations the first stage (the fullest) holds at once:
/// GPipe m; 1F1B min(p, m); interleaved min(p, m)·(1 + (p − 1)/(p·v)) (Korthikanti
/// et al. 2022, §4.2.3).
pub fn in_flight(s: Schedule, p: usize, m: usize, v: usize) -> f64 {
    let pm = p.min(m) as f64;
    match s {
        Schedule::GPipe => m as f64,
        Schedule::OneFOneB => pm,
        Schedule::Interleaved => pm * (1.0 + (p as f64 - 1.0) / (p as f64 * v.max(1) as f64)),
    }
}

/// Layers on the fullest and the emptiest stage: balanced, the first `layers % p`
/// stages take one more.
pub fn stage_layers(layers: usize, p: usize) -> (usize, usize) {
    (layers.div_ceil(p), layers / p)
}

/// The batch one data-parallel rank processes per step (the batch dim over data),
/// 1 when the model has no batch dim.
pub fn local_batch(info: &ModelInfo, data: usize) -> usize {
    info.dim_any(&BATCH_NAMES).map_or(1, |(_, n)| n / data.max(1))
}

/// Why the pipeline part of `c` is not valid for `layers` repetitions, if it is not.
pub fn invalid(info: &ModelInfo, c: &Config, layers: usize) -> Option<String> {
    let p = &c.pipe;
    if p.stages > layers {
        return Some(format!(
            "pipeline: {} stages need at least {} layers (--layers {layers}); give --layers",
            p.stages, p.stages
        ));
    }
    if p.stages > 1 && c.zero >= 2 {
        return Some(format!(
            "pipeline: ZeRO stage {} partitions the gradients{} that every micro-batch of a stage needs; \
             pipelines run with ZeRO 0 or 1 (as DeepSpeed and Megatron-LM do)",
            c.zero,
            if c.zero == 3 { " and weights" } else { "" }
        ));
    }
    let lb = local_batch(info, c.data);
    if p.micro_batches == 0 || !lb.is_multiple_of(p.micro_batches) {
        return Some(match info.dim_any(&BATCH_NAMES) {
            Some((b, _)) => {
                format!("micro-batches: {} does not divide the {lb} samples of `{b}` per data rank", p.micro_batches)
            }
            None => "micro-batches need a batch dim (batch, tokens, groups or samples)".into(),
        });
    }
    if p.schedule == Schedule::Interleaved {
        let v = p.virtual_stages;
        if p.stages < 2 || v < 2 {
            return Some("interleaved 1F1B needs at least 2 stages and 2 virtual stages".into());
        }
        if !layers.is_multiple_of(p.stages * v) {
            return Some(format!("interleaved: {} stages × {v} chunks do not divide {layers} layers", p.stages));
        }
        if !p.micro_batches.is_multiple_of(p.stages) {
            return Some(format!("interleaved: {} stages do not divide {} micro-batches", p.stages, p.micro_batches));
        }
    }
    None
}
