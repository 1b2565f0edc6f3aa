//! Activation recomputation (Korthikanti et al. 2022, "Reducing Activation
//! Recomputation in Large Transformer Models"): what a layer keeps for its backward
//! pass and what the backward pass computes again.
//!
//! The attention core is read from the model: the tensors with two indices over one
//! sequence dim (scores, probabilities: the 5as/h term of sbh(34 + 5as/h)) and the
//! statements that write them. The layer's input is the block's output (what the
//! previous repetition produced).

use super::analysis::{LayerInfo, ModelInfo, TensorInfo, SEQ_NAMES};
use super::pipeline::Recompute;
use super::{activation_elements, Config};

/// A tensor quadratic in the sequence: two of its dims are one sequence dim.
pub fn is_core(t: &TensorInfo) -> bool {
    SEQ_NAMES.iter().any(|s| t.dims.iter().filter(|d| d == s).count() >= 2)
}

/// Elements one rank keeps per repetition of the block (over its whole local batch)
/// for the backward pass, and the elements of the largest working set recomputation
/// materialises at once (one repetition's activations, under full recomputation;
/// without the attention core when the recomputed layer runs flash attention).
pub fn kept_elements(info: &ModelInfo, c: &Config, r: Recompute) -> (f64, f64) {
    let acts = || info.layers.iter().flat_map(|l: &LayerInfo| &l.activations);
    let all: f64 = acts().map(|a| activation_elements(a, c)).sum();
    let no_core = || acts().filter(|a| !is_core(a)).map(|a| activation_elements(a, c)).sum();
    let outputs = || info.outputs.iter().map(|a| activation_elements(a, c)).sum();
    match r {
        Recompute::None => (all, 0.0),
        Recompute::Selective => (no_core(), 0.0),
        Recompute::Full => (outputs(), all),
        Recompute::FullFlash => (outputs(), no_core()),
    }
}

/// Forward flops per repetition of the block that the backward pass runs again:
/// full recomputation runs the forward once more; with flash attention the
/// kernel's backward also recomputes the core (as under selective).
pub fn extra_flops(info: &ModelInfo, r: Recompute) -> f64 {
    let core: f64 = info.layers.iter().map(|l| l.core_flops).sum();
    match r {
        Recompute::None => 0.0,
        Recompute::Selective => core,
        Recompute::Full => info.flops(),
        Recompute::FullFlash => info.flops() + core,
    }
}

/// Whether `r` never stores the attention core (flash-style attention).
pub fn drops_core(r: Recompute) -> bool {
    matches!(r, Recompute::Selective | Recompute::FullFlash)
}

/// Whether selective recomputation has anything to recompute in this model.
pub fn has_core(info: &ModelInfo) -> bool {
    info.layers.iter().flat_map(|l| &l.activations).any(is_core)
}

/// Elements of the backward pass's working set above the activations (over the
/// rank's whole local batch): the block is walked backwards through the
/// activations it works on under `r` (kept, or rebuilt under full
/// recomputation; without the attention core where flash attention drops it).
/// At activation `a` the gradient flowing into it and the one it produces are
/// alive (2 × its size; a softmax numerator's backward 3 ×, [`LayerInfo::softmax`]),
/// while the activations made after `a` have been freed by their own backward
/// (not the block's outputs: the next repetition's input, or the loss's).
/// The largest such excess, at least 0.
pub fn backward_elements(info: &ModelInfo, c: &Config, r: Recompute) -> f64 {
    let is_output = |a: &TensorInfo| info.outputs.iter().any(|o| o.name == a.name);
    let acts: Vec<(f64, f64, bool)> = info
        .layers
        .iter()
        .flat_map(|l: &LayerInfo| l.activations.iter().map(move |a| (l, a)))
        .filter(|(_, a)| !drops_core(r) || !is_core(a))
        .map(|(l, a)| {
            let k = if l.softmax.contains(&a.name) { 3.0 } else { 2.0 };
            (k, activation_elements(a, c), is_output(a))
        })
        .collect();
    let mut freed = 0.0;
    let mut most: f64 = 0.0;
    for &(k, e, output) in acts.iter().rev() {
        most = most.max(k * e - freed);
        if !output {
            freed += e;
        }
    }
    most
}
