//! The embedding and the output layer (`--vocab V`): a `model` block is one
//! repeated layer, so the token embedding (V × h) and the output projection to
//! the vocabulary (h × V, untied, as in Llama) are outside it. Megatron splits
//! both over the tensor group along the vocabulary (vocab-parallel). They add
//! parameters (to the ZeRO partitions, the gradient synchronization and the
//! optimizer), the output layer's flops, the embedding's all-reduce over the
//! tensor group, and the logits: per token V/t values kept in 16 bits and again
//! in fp32 for the softmax cross-entropy (6 B per logit).
//!
//! With a pipeline the embedding lives on the first stage and the output layer
//! on the last; the planner charges the embedding to the fullest (first) stage
//! and, as an upper bound, the output layer's flops and logits too.

use super::analysis::{ModelInfo, BATCH_NAMES, SEQ_NAMES};
use super::Config;

/// Bytes per logit kept: fp16 (the layer's output) and fp32 (the loss's softmax).
pub const LOGIT_BYTES: f64 = 2.0 + 4.0;

/// What the vocabulary adds to one rank of the fullest stage.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Vocab {
    /// Parameters of this rank (embedding; with one stage the output layer too).
    pub params: f64,
    /// Output-layer flops per step (forward and backward: 3 × 2·T·h·V/t).
    pub flops: f64,
    /// Logits one micro-batch keeps on this rank, bytes.
    pub logits: f64,
    /// Embedding output elements per micro-batch (all-reduced over the tensor group).
    pub embedding_out: f64,
}

/// The model's hidden size: the `hidden` dim.
pub fn hidden(info: &ModelInfo) -> Option<usize> {
    info.dim("hidden")
}

/// Tokens one rank processes per step: its share of batch × sequence.
fn tokens(info: &ModelInfo, c: &Config) -> f64 {
    let b = info.dim_any(&BATCH_NAMES).map_or(1, |x| x.1) as f64;
    let s = info.dim_any(&SEQ_NAMES).map_or(1, |x| x.1) as f64;
    b / c.data as f64 * s / c.sequence as f64
}

pub fn costs(info: &ModelInfo, c: &Config, vocab: usize) -> Vocab {
    let h = hidden(info).unwrap_or(0) as f64;
    let v = vocab as f64;
    let t = c.tensor as f64;
    let m = c.pipe.micro_batches.max(1) as f64;
    let tok = tokens(info, c);
    let tables = if c.pipe.stages > 1 { 1.0 } else { 2.0 };
    Vocab {
        params: tables * v * h / t,
        flops: 3.0 * 2.0 * tok * h * v / t,
        logits: LOGIT_BYTES * tok / m * v / t,
        embedding_out: tok / m * h,
    }
}
