//! DeepSpeed-TED's duplicate-token dropping (Singh et al. 2023, "A Hybrid
//! Tensor-Expert-Data Parallelism Approach to Optimize Mixture-of-Experts
//! Training", ICS '23, arXiv:2303.06318: "duplicate token dropping", DTD).
//!
//! With tensor parallelism t and expert parallelism, the tensors entering and
//! leaving the experts (dispatch, combine) carry no tensor-parallel dim: every
//! rank of a tensor group holds the same copy, and the expert all-to-all sends
//! it t times. Duplicate-token dropping keeps 1/t of the capacity slots on each
//! tensor rank before every all-to-all (DeepSpeed's `drop_tokens` along the
//! capacity dim, `deepspeed/moe/mappings.py`) and all-gathers them within the
//! tensor group after it (`gather_tokens`); the backward pass does the same on
//! the gradients (`drop_tokens`' backward is `gather_tokens` and vice versa).
//! Per expert all-to-all of n elements per rank: the all-to-all carries n/t,
//! and an all-gather of n over the t tensor ranks (inside a node) is added, in
//! the forward and in the backward pass. Memory is unchanged: after the gather
//! every tensor rank holds the whole tensor again.

use super::analysis::{ModelInfo, TensorInfo};
use super::Config;

/// The dim the dropping splits: the capacity slots of the dispatch buffer.
pub const CAPACITY: &str = "capacity";

/// An expert all-to-all tensor every tensor rank holds whole (no tensor-parallel
/// dim splits it): the one that duplicate-token dropping thins.
pub fn duplicated(t: &TensorInfo, c: &Config) -> bool {
    c.tensor > 1 && !c.tensor_dims.iter().any(|d| t.has(d))
}

/// Why duplicate-token dropping cannot apply to `c`, if it cannot.
pub fn invalid(info: &ModelInfo, c: &Config) -> Option<String> {
    if c.tensor < 2 || c.expert < 2 {
        return Some("TED's duplicate-token dropping needs tensor and expert parallelism".into());
    }
    let a2a = || info.layers.iter().filter(|l| l.moe).flat_map(|l| &l.moe_alltoall);
    if !a2a().any(|t| duplicated(t, c)) {
        return Some(
            "TED's duplicate-token dropping: no expert all-to-all tensor is duplicated over the tensor group".into(),
        );
    }
    match info.dim(CAPACITY) {
        None => Some("TED's duplicate-token dropping splits a `capacity` dim; the model has none".into()),
        Some(n) if n % c.tensor != 0 => {
            Some(format!("TED's duplicate-token dropping: tensor {} does not divide capacity = {n}", c.tensor))
        }
        Some(_) => None,
    }
}
