//! The closed forms of the papers the model planner follows. The planner's own
//! figures (memory per rank, bytes per collective) are built from these, and the
//! tests in `tests/model_plan.rs` check them against the papers' stated numbers.

/// Adam's optimizer state in mixed precision: fp32 master weights, momentum and
/// variance: K = 12 bytes per parameter (ZeRO §3.1).
pub const K_ADAM: f64 = 12.0;

/// Bytes per rank of (fp16 parameters, fp16 gradients, optimizer state) for `psi`
/// parameters under ZeRO stage `stage` over `nd` data-parallel ranks (ZeRO §5,
/// Figure 1): stage 0 (2 + 2 + K)Ψ; stage 1 (P_os) 4Ψ + KΨ/N_d; stage 2 (P_os+g)
/// 2Ψ + (2 + K)Ψ/N_d; stage 3 (P_os+g+p) (2 + 2 + K)Ψ/N_d.
pub fn zero_state_split(psi: f64, nd: f64, stage: u8) -> (f64, f64, f64) {
    let (p, g, os) = (2.0 * psi, 2.0 * psi, K_ADAM * psi);
    match stage {
        0 => (p, g, os),
        1 => (p, g, os / nd),
        2 => (p, g / nd, os / nd),
        _ => (p / nd, g / nd, os / nd),
    }
}

/// Total model-state bytes per rank (ZeRO Figure 1).
pub fn zero_memory(psi: f64, nd: f64, stage: u8) -> f64 {
    let (p, g, os) = zero_state_split(psi, nd, stage);
    p + g + os
}

/// Communication volume per rank per step in parameters, as ZeRO §7 counts it
/// (large N_d): data parallelism and stages 1–2 move 2Ψ (reduce-scatter +
/// all-gather, or one all-reduce); stage 3 moves 3Ψ (all-gather in the forward and
/// in the backward pass, reduce-scatter of the gradients).
pub fn zero_comm_volume(psi: f64, stage: u8) -> f64 {
    if stage >= 3 {
        3.0 * psi
    } else {
        2.0 * psi
    }
}

/// Cross-node volume of ZeRO-3 with ZeRO++ options, in units of the model size M
/// (fp16): forward weight all-gather (M; qwZ int8: M/2), backward weight all-gather
/// (the same; hpZ: within the node, 0 across), gradient reduce-scatter (M; qgZ int4:
/// M/4). ZeRO++ §3–4: 3M → 0.75M with all three.
pub fn zeropp_cross_node_volume(m: f64, qwz: bool, hpz: bool, qgz: bool) -> f64 {
    let w = if qwz { 0.5 * m } else { m };
    let fwd = w;
    let bwd = if hpz { 0.0 } else { w };
    let grad = if qgz { 0.25 * m } else { m };
    fwd + bwd + grad
}

/// DeepSpeed-Ulysses §3.2: per-device volume of the four all-to-alls (Q, K, V, O)
/// of attention over a sequence of N tokens, hidden size h, P devices: 4Nh/P
/// (leading term; exactly 4Nh(P−1)/P² elements sent per device).
pub fn ulysses_volume(n: f64, h: f64, p: f64) -> f64 {
    4.0 * n * h / p
}

/// Megatron-LM sequence parallelism's per-device volume for the same attention:
/// all-gather and reduce-scatter of N·h in forward, twice: 4Nh, whatever P.
pub fn megatron_sp_volume(n: f64, h: f64) -> f64 {
    4.0 * n * h
}

/// Expert capacity (tokens per expert per group): ⌈k · capacity_factor · T / E⌉
/// (GShard / Switch / DeepSpeed-MoE).
pub fn expert_capacity(tokens: f64, experts: f64, top_k: f64, capacity_factor: f64) -> f64 {
    (top_k * capacity_factor * tokens / experts).ceil()
}

/// Elements one device sends in the dispatch all-to-all of an MoE layer with
/// expert parallelism E over its T local tokens: the (E, C, h) dispatch buffer less
/// its own experts' share: E·C·h·(E_p − 1)/E_p with C from [`expert_capacity`].
/// The combine all-to-all sends the same again.
pub fn moe_alltoall_elements(tokens: f64, experts: f64, top_k: f64, capacity_factor: f64, hidden: f64, ep: f64) -> f64 {
    experts * expert_capacity(tokens, experts, top_k, capacity_factor) * hidden * (ep - 1.0) / ep
}
