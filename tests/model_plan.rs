//! Model-parallel plans (`tcc plan-model`) against the papers' formulas and numbers:
//! ZeRO (Rajbhandari et al., SC'20), ZeRO++ (Wang et al., 2023), DeepSpeed-Ulysses
//! (Jacobs et al., 2023) and DeepSpeed-MoE (Rajbhandari et al., ICML'22). Each model
//! is written as a `model` block and counted from its HIR.

mod common;

use common::moe_model as moe;
use tcc::plan::model::{analysis, evaluate, formulas, Config, ModelOptions, ModelPlan, ZeroPP};
use tcc::plan::Network;
use tcc::sema::hir::ModelId;

fn info(src: &str) -> analysis::ModelInfo {
    let (hir, d) = tcc::compile(src, "t");
    let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
    analysis::analyze(&hir, ModelId::new(0))
}

fn cfg(data: usize, zero: u8) -> Config {
    Config { data, zero, ..Default::default() }
}

fn opts(devices: usize) -> ModelOptions {
    ModelOptions::new(devices, Network::parse("fat-tree:bw=25GB/s,lat=5us,flops=150TF/s").unwrap())
}

/// Ψ = 75000 × 100000 = 7.5 B parameters, one scalar activation.
const PSI_7_5B: &str = "model zero { dims a = 75000, b = 100000; index i : a; index j : b; \
    param tensor W[i,j] : f32; output tensor y : f32; layer l { y = W[i,j]; } }";

fn states(p: &ModelPlan) -> f64 {
    p.memory.params + p.memory.grads + p.memory.optimizer
}

#[test]
fn zero_figure_1_memory_per_device() {
    // ZeRO, Figure 1: Ψ = 7.5B, N_d = 64, K = 12: baseline 120 GB, P_os 31.4 GB,
    // P_os+g 16.6 GB, P_os+g+p 1.9 GB per device.
    let m = info(PSI_7_5B);
    assert_eq!(m.psi_dense(), 7.5e9);
    let o = opts(64);
    let paper = [120.0, 31.4, 16.6, 1.9];
    for (stage, want) in paper.iter().enumerate() {
        let p = evaluate(&m, &cfg(64, stage as u8), &o);
        let gb = states(&p) / 1e9;
        println!("ZeRO stage {stage}: paper {want} GB, ours {gb:.4} GB");
        assert!((gb - want).abs() < 0.05, "stage {stage}: {gb} GB vs {want} GB");
        assert_eq!(states(&p), formulas::zero_memory(7.5e9, 64.0, stage as u8));
    }
}

#[test]
fn zero_communication_volume_stage_3_is_one_and_a_half_times() {
    // ZeRO §7: stages 1 and 2 move 2Ψ per step like data parallelism; stage 3 moves 3Ψ.
    let m = info(PSI_7_5B);
    let o = opts(64);
    let f = 63.0 / 64.0; // ring collectives: each rank sends (N−1)/N of the buffer
    let vol: Vec<f64> = (0..4).map(|z| evaluate(&m, &cfg(64, z), &o).bytes_per_step / 2.0 / f).collect();
    println!("ZeRO volume per rank (parameters): {vol:?}");
    for (z, v) in vol.iter().enumerate().take(3) {
        assert!((v - formulas::zero_comm_volume(7.5e9, z as u8)).abs() < 1.0, "stage {z}");
        assert!((v - 2.0 * 7.5e9).abs() < 1.0);
    }
    assert!((vol[3] - 3.0 * 7.5e9).abs() < 1.0);
    assert!((vol[3] / vol[0] - 1.5).abs() < 1e-12);
}

#[test]
fn zeropp_cuts_cross_node_volume_from_3m_to_0_75m() {
    // ZeRO++ §1/§4: qwZ halves the weight all-gather, hpZ keeps the backward
    // all-gather in the node, qgZ sends int4 gradients: cross-node 3M → 0.75M (4×).
    assert_eq!(formulas::zeropp_cross_node_volume(1.0, false, false, false), 3.0);
    assert_eq!(formulas::zeropp_cross_node_volume(1.0, true, true, true), 0.75);
    assert_eq!(formulas::zeropp_cross_node_volume(1.0, true, false, false), 2.0);
    let m = info(PSI_7_5B);
    let o = opts(64); // 8 nodes of 8
    let base = evaluate(&m, &cfg(64, 3), &o);
    let mut c = cfg(64, 3);
    c.zeropp = ZeroPP::all();
    let pp = evaluate(&m, &c, &o);
    let unit = 63.0 / 64.0 * 7.5e9 * 2.0; // M in fp16 bytes, as each rank sends it
    println!(
        "cross-node per rank: ZeRO-3 {:.3} M, ZeRO++ {:.3} M",
        base.cross_node_bytes / unit,
        pp.cross_node_bytes / unit
    );
    assert!((base.cross_node_bytes / unit - 3.0).abs() < 1e-9);
    assert!((pp.cross_node_bytes / unit - 0.75).abs() < 1e-9);
    assert!((base.cross_node_bytes / pp.cross_node_bytes - 4.0).abs() < 1e-9);
    // hpZ's price: a secondary fp16 copy partitioned over the 8 ranks of a node.
    assert_eq!(pp.memory.secondary, 2.0 * 7.5e9 / 8.0);
}

fn attention(n: usize, heads: usize, hdim: usize) -> String {
    format!(
        "model a {{ dims batch = 1, seq = {n}, hidden = {h}, heads = {heads}, hdim = {hdim};
  index b : batch; index s, t : seq; index m, k : hidden; index h : heads; index e, d : hdim;
  input tensor X[b,s,m] : f32;
  param tensor Wq[m,h,e] : f32; param tensor Wk[m,h,e] : f32; param tensor Wv[m,h,d] : f32; param tensor Wo[h,d,k] : f32;
  output tensor Y[b,s,k] : f32;
  layer attention {{
    Q[b,s,h,e] = X[b,s,m] * Wq[m,h,e]; K[b,t,h,e] = X[b,t,m] * Wk[m,h,e]; V[b,t,h,d] = X[b,t,m] * Wv[m,h,d];
    S[b,h,s,t] = Q[b,s,h,e] * K[b,t,h,e]; P[b,h,s,t] = exp(S[b,h,s,t]); Z[b,h,s] = P[b,h,s,t];
    O[b,s,h,d] = recip(Z[b,h,s]) * P[b,h,s,t] * V[b,t,h,d]; Y[b,s,k] = O[b,s,h,d] * Wo[h,d,k];
  }} }}",
        h = heads * hdim
    )
}

fn ulysses_forward_elements(p: &ModelPlan) -> f64 {
    p.comm
        .iter()
        .filter(|c| c.group == "sequence" && c.phase == "forward")
        .map(|c| c.bytes_per_rank / c.bytes_per_elem * c.count)
        .sum()
}

#[test]
fn ulysses_volume_is_4nh_over_p_and_constant_when_n_and_p_grow_together() {
    // DeepSpeed-Ulysses §3.2: the all-to-alls of Q, K, V and O move 4Nh/P per device,
    // against Megatron-SP's 4Nh; with N/P fixed the volume per device is constant.
    let h = 32 * 128; // hidden 4096 as 32 heads of 128 (the paper's GPT sizes)
    let mut lead = Vec::new();
    for (n, p) in [(65536usize, 8usize), (131072, 16), (262144, 32)] {
        let m = info(&attention(n, 32, 128));
        let mut c = cfg(1, 0);
        c.sequence = p;
        let plan = evaluate(&m, &c, &opts(p));
        let got = ulysses_forward_elements(&plan);
        let exact = 4.0 * n as f64 * h as f64 * (p as f64 - 1.0) / (p * p) as f64;
        let paper = formulas::ulysses_volume(n as f64, h as f64, p as f64);
        println!(
            "Ulysses N = {n}, P = {p}: paper 4Nh/P = {paper:.4e}, ours {got:.4e} (× P/(P−1) = {:.4e})",
            got * p as f64 / (p as f64 - 1.0)
        );
        assert!((got - exact).abs() < 1e-6 * exact);
        assert!((got * p as f64 / (p as f64 - 1.0) - paper).abs() < 1e-6 * paper);
        assert!((formulas::megatron_sp_volume(n as f64, h as f64) / paper - p as f64).abs() < 1e-12);
        lead.push(got * p as f64 / (p as f64 - 1.0));
    }
    assert!(lead.windows(2).all(|w| (w[0] - w[1]).abs() < 1e-6 * w[0]), "constant per device: {lead:?}");
}

#[test]
fn deepspeed_moe_parameter_counts() {
    // DeepSpeed-MoE, Table 1: "350M+MoE-128" has 13B parameters, "1.3B+MoE-128" 52B:
    // 24 layers, an MoE layer every other layer (12), 128 experts, ffn = 4·hidden.
    for (base, hidden, paper) in [(0.35e9, 1024usize, 13e9), (1.3e9, 2048, 52e9)] {
        let m = info(&moe(hidden, 4 * hidden, 128, 1, 4, 1));
        let total = base + 12.0 * m.psi_expert();
        println!("DeepSpeed-MoE hidden {hidden}: paper {:.1} B, ours {:.2} B", paper / 1e9, total / 1e9);
        assert!((total / paper - 1.0).abs() < 0.03, "{total} vs {paper}");
    }
}

#[test]
fn moe_alltoall_volume_is_tokens_times_capacity_factor_times_hidden() {
    // Expert parallelism: dispatch and combine each send E·C·h·(E_p−1)/E_p elements
    // per device, C = ⌈k·cf·T/E⌉ (GShard/DeepSpeed-MoE). 1.3B+MoE-128 sizes: hidden
    // 2048, 128 experts, 64-way expert parallel, 4096 tokens per device, cf = 1.25, k = 1.
    let (h, e, ep, t, cf) = (2048usize, 128usize, 64usize, 4096usize, 1.25);
    let cap = formulas::expert_capacity(t as f64, e as f64, 1.0, cf) as usize;
    assert_eq!(cap, 40);
    let m = info(&moe(h, 4 * h, e, ep, t, cap));
    let mut c = cfg(ep, 0);
    c.expert = ep;
    let plan = evaluate(&m, &c, &opts(ep));
    let fwd: Vec<f64> = plan
        .comm
        .iter()
        .filter(|x| x.group == "expert" && x.phase == "forward")
        .map(|x| x.bytes_per_rank / x.bytes_per_elem)
        .collect();
    let want = formulas::moe_alltoall_elements(t as f64, e as f64, 1.0, cf, h as f64, ep as f64);
    println!("MoE all-to-all per device: formula {want:.4e} elements, ours {fwd:?} (dispatch, combine)");
    assert_eq!(fwd.len(), 2);
    for x in fwd {
        assert!((x - want).abs() < 1e-6 * want);
    }
    // The expert weights are split 64 ways; every rank keeps 2 of the 128 experts.
    assert_eq!(plan.memory.params, 2.0 * 2.0 * (2 * h * 4 * h) as f64);
}

#[test]
fn search_ranks_plans_and_respects_memory() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_block.tc")).unwrap();
    let (hir, _) = tcc::compile(&src, "gpt");
    let hir = hir.unwrap();
    let dims: Vec<(String, usize)> =
        [("batch", 8), ("seq", 4096), ("hidden", 4096), ("heads", 32), ("hdim", 128), ("ffn", 16384)]
            .iter()
            .map(|(n, s)| (n.to_string(), *s))
            .collect();
    let h = analysis::with_dims(&hir, ModelId::new(0), &dims).unwrap();
    let m = analysis::analyze(&h, ModelId::new(0));
    let mut o = opts(64);
    o.layers = 32;
    o.mem_per_device = Some(80_000_000_000);
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    assert!(plans.len() > 20, "{}", plans.len());
    assert!(plans[0].fits);
    assert!(plans.windows(2).all(|w| !w[0].fits || !w[1].fits || w[0].time <= w[1].time));
    assert!(plans.iter().all(|p| p.config.devices() == 64));
}

// ---- Pipeline parallelism, micro-batching, recomputation (issue 20) ----

use tcc::plan::model::pipeline::{self, Pipe, Recompute, Schedule};

/// gpt_block without hints (every degree searched), as a string.
fn gpt_free() -> String {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_block.tc")).unwrap();
    let start = src.find("  parallel {").unwrap();
    let end = start + src[start..].find("}\n").unwrap() + 2;
    format!("{}{}", &src[..start], &src[end..])
}

fn at_scale(src: &str, dims: &[(&str, usize)]) -> (tcc::sema::hir::Hir, analysis::ModelInfo) {
    let (hir, d) = tcc::compile(src, "gpt");
    let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
    let dims: Vec<(String, usize)> = dims.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    let h = analysis::with_dims(&hir, ModelId::new(0), &dims).unwrap();
    let m = analysis::analyze(&h, ModelId::new(0));
    (h, m)
}

/// GPT-3 175B (Brown et al. 2020): 96 layers, h = 12288, 96 heads, s = 2048, global
/// batch 1536.
const GPT3: [(&str, usize); 6] =
    [("batch", 1536), ("seq", 2048), ("hidden", 12288), ("heads", 96), ("hdim", 128), ("ffn", 49152)];

fn pipe(stages: usize, schedule: Schedule, v: usize, m: usize, r: Recompute) -> Pipe {
    Pipe { stages, schedule, virtual_stages: v, micro_batches: m, recompute: r }
}

#[test]
fn bubble_is_p_minus_1_over_m_plus_p_minus_1() {
    // Narayanan et al. 2021 §2.2: bubble time / ideal = (p−1)/m, i.e. (p−1)/(m+p−1)
    // of the step; interleaving with v chunks divides the bubble time by v.
    assert_eq!(pipeline::bubble_fraction(1, 8, 1), 0.0);
    assert_eq!(pipeline::bubble_fraction(8, 64, 1), 7.0 / 71.0);
    assert_eq!(pipeline::bubble_fraction(8, 64, 2), 7.0 / 135.0);
    assert_eq!(pipeline::bubble_fraction(4, 4, 1), 3.0 / 7.0);
    // In flight on the first stage: GPipe m, 1F1B min(p, m), interleaved ×(1 + (p−1)/(pv)).
    assert_eq!(pipeline::in_flight(Schedule::GPipe, 8, 64, 1), 64.0);
    assert_eq!(pipeline::in_flight(Schedule::OneFOneB, 8, 64, 1), 8.0);
    assert_eq!(pipeline::in_flight(Schedule::OneFOneB, 8, 4, 1), 4.0);
    assert_eq!(pipeline::in_flight(Schedule::Interleaved, 8, 64, 2), 8.0 * (1.0 + 7.0 / 16.0));
    assert_eq!(pipeline::stage_layers(96, 8), (12, 12));
    assert_eq!(pipeline::stage_layers(10, 4), (3, 2));
    // In a plan: the bubble stretches the busy part (compute and per-layer collectives).
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = opts(64);
    o.layers = 96;
    let mut c = cfg(1, 1);
    c.tensor = 8;
    c.tensor_dims = vec!["heads".into(), "ffn".into()];
    c.pipe = pipe(8, Schedule::OneFOneB, 1, 64, Recompute::None);
    let mut c1536 = c.clone();
    c1536.pipe.micro_batches = 1536;
    let p = evaluate(&m, &c, &o);
    assert_eq!(p.bubble, 7.0 / 71.0);
    let busy: f64 = p.time_compute
        + p.comm.iter().filter(|x| x.group == "tensor" || x.group == "pipeline").map(|x| x.time).sum::<f64>();
    assert!((p.time_bubble - busy * 7.0 / 64.0).abs() < 1e-9 * p.time);
    assert!(evaluate(&m, &c1536, &o).bubble < p.bubble);
    // Each micro-batch crosses each stage boundary once forward and once backward.
    let sends: Vec<_> = p.comm.iter().filter(|x| x.group == "pipeline").collect();
    assert_eq!(sends.len(), 2);
    assert!(sends.iter().all(|x| x.count == 64.0 && x.elements == 1536.0 / 64.0 * 2048.0 * 12288.0));
}

#[test]
fn memory_drops_with_pipeline_stages_micro_batches_and_recomputation() {
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = opts(64);
    o.layers = 96;
    let mem = |stages: usize, sched: Schedule, mb: usize, r: Recompute| {
        let mut c = cfg(64 / stages / 8, 1);
        c.tensor = 8;
        c.tensor_dims = vec!["heads".into(), "ffn".into()];
        c.pipe = pipe(stages, sched, 1, mb, r);
        evaluate(&m, &c, &o).memory
    };
    let one = mem(1, Schedule::OneFOneB, 1, Recompute::None);
    let p8 = mem(8, Schedule::OneFOneB, 1, Recompute::None);
    // Model states: a stage holds 1/8 of the layers (ZeRO-1 over data 8 vs 1).
    assert!(p8.params < one.params / 7.9 && p8.params > one.params / 8.1);
    // Kept memory drops; the backward working set does not (one micro-batch of
    // 1536 sequences on data 1 against 192 on data 8: 8 times larger).
    assert!(p8.total - p8.backward < one.total - one.backward);
    assert!((p8.backward / one.backward - 8.0).abs() < 1e-9);
    // Micro-batches: 1F1B keeps p of m micro-batches, GPipe all m.
    let f1 = mem(8, Schedule::OneFOneB, 192, Recompute::None);
    let gp = mem(8, Schedule::GPipe, 192, Recompute::None);
    assert!((f1.activations * 192.0 / 8.0 - gp.activations).abs() < 1e-6 * gp.activations);
    assert!(f1.activations < p8.activations / 20.0);
    // Recomputation: none > selective > full.
    let sel = mem(8, Schedule::OneFOneB, 192, Recompute::Selective);
    let full = mem(8, Schedule::OneFOneB, 192, Recompute::Full);
    assert!(sel.activations < f1.activations && full.activations < sel.activations, "{f1:?} {sel:?} {full:?}");
    // Selective drops exactly the attention core kept: P, quadratic in seq (the
    // scores S are never kept: exp's backward reads its value P).
    let core = 1536.0 * 96.0 * 2048.0 * 2048.0 / 8.0 * 2.0 / 192.0 * 12.0 * 8.0;
    assert!((f1.activations - sel.activations - core).abs() < 1e-6 * core, "{}", f1.activations - sel.activations);
}

/// Full recomputation keeps each layer's input (the block's output Y, b·s·h) and
/// rebuilds one layer's activations in the backward: `recompute_working` is that
/// layer's share of `activations` (what bench/models/compare_layer.py compares
/// with the memory a checkpointed PyTorch layer holds after its forward).
#[test]
fn full_recomputation_keeps_the_layer_input_and_rebuilds_one_layer() {
    let (_, m) = at_scale(
        &gpt_free(),
        &[("batch", 2), ("seq", 512), ("hidden", 1024), ("heads", 8), ("hdim", 128), ("ffn", 4096)],
    );
    let mut o = opts(1);
    o.layers = 4;
    let mem = |r: Recompute| {
        let mut c = cfg(1, 0);
        c.pipe = pipe(1, Schedule::OneFOneB, 1, 1, r);
        evaluate(&m, &c, &o).memory
    };
    let (none, full) = (mem(Recompute::None), mem(Recompute::Full));
    assert_eq!(none.recompute_working, 0.0);
    assert_eq!(mem(Recompute::Selective).recompute_working, 0.0);
    // One layer of `none` (4 layers kept) is the working set.
    assert!((full.recompute_working - none.activations / 4.0).abs() < 1e-6 * none.activations);
    // Kept: 4 layers' inputs, 2 × 512 × 1024 fp16 values each.
    let kept = full.activations - full.recompute_working;
    assert_eq!(kept, 4.0 * 2.0 * 512.0 * 1024.0 * 2.0);
}

/// Full recomputation of layers that run flash attention (`torch.utils.checkpoint`
/// around a layer calling SDPA): the same kept inputs, a rebuilt working set
/// without the s² scores and probabilities (b·heads·s² each for S and P of
/// gpt_block: P kept, S not), and one more pass over the core's flops (the
/// kernel's backward rebuilds the scores) on top of full's extra forward.
#[test]
fn full_flash_rebuilds_a_layer_without_the_attention_scores() {
    let (b, s, heads) = (2.0, 512.0, 8.0);
    let (_, m) = at_scale(
        &gpt_free(),
        &[("batch", 2), ("seq", 512), ("hidden", 1024), ("heads", 8), ("hdim", 128), ("ffn", 4096)],
    );
    let mut o = opts(1);
    o.layers = 4;
    let plan = |r: Recompute| {
        let mut c = cfg(1, 0);
        c.pipe = pipe(1, Schedule::OneFOneB, 1, 1, r);
        evaluate(&m, &c, &o)
    };
    let (full, flash, sel) = (plan(Recompute::Full), plan(Recompute::FullFlash), plan(Recompute::Selective));
    let kept = |p: &ModelPlan| p.memory.activations - p.memory.recompute_working;
    assert_eq!(kept(&flash), kept(&full));
    // The kept probabilities P, fp16: what flash attention does not rebuild.
    let p_bytes = 2.0 * b * heads * s * s;
    assert_eq!(full.memory.recompute_working - flash.memory.recompute_working, p_bytes);
    // Per layer, selective keeps what full-flash rebuilds.
    assert!((flash.memory.recompute_working - sel.memory.activations / 4.0).abs() < 1e-6 * p_bytes);
    // Flops: 3 × forward + forward again + the core (scores and exp: 2·b·heads·s²·hdim + b·heads·s²).
    let core = 2.0 * b * heads * s * s * 128.0 + b * heads * s * s;
    assert_eq!(m.layers.iter().map(|l| l.core_flops).sum::<f64>(), core);
    assert!((flash.flops_per_rank - full.flops_per_rank - 4.0 * core).abs() < 1e-6 * core);
    assert!(flash.memory.total < full.memory.total);
    // Searched: without --recompute the four choices are tried.
    o.recompute = Some(Recompute::FullFlash);
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    assert!(!plans.is_empty() && plans.iter().all(|p| p.config.pipe.recompute == Recompute::FullFlash));
}

/// What the backward pass reads, counted by hand for examples/llama_block.tc: the
/// scores S (read only by exp, whose backward uses its value P), the row sums Z
/// (read only by recip) and the RMS sums R1, R2 (read only by sqrt) are not kept;
/// the values of recip(Z), recip(sqrt(R)) and sqrt(R), silu's argument and value
/// are (PyTorch's autograd saves the same).
#[test]
fn activations_are_what_the_backward_pass_reads() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llama_block.tc")).unwrap();
    let (b, s, h, kv, g, d, f) = (2.0, 64.0, 32.0, 2.0, 2.0, 8.0, 48.0);
    let dims = [("batch", 2), ("seq", 64), ("hidden", 32), ("kvheads", 2), ("group", 2), ("hdim", 8), ("ffn", 48)];
    let (_, m) = at_scale(&src, &dims);
    let names: Vec<&str> = m.layers.iter().flat_map(|l| &l.activations).map(|a| a.name.as_str()).collect();
    for gone in ["S", "Z", "R1", "R2"] {
        assert!(!names.contains(&gone), "{gone} kept: {names:?}");
    }
    for kept in ["N1", "Q", "K", "V", "P", "O", "C", "A", "N2", "U", "H", "Y"] {
        assert!(names.contains(&kept), "{kept} not kept: {names:?}");
    }
    let t = b * s;
    let heads = kv * g;
    let written = t * h * 7.0 + 2.0 * t * kv * d + b * heads * s * s + 2.0 * t * f;
    // recip(sqrt(R)) and sqrt(R) per norm, recip(Z) per head, silu's argument and value.
    let hidden = 2.0 * 2.0 * t + heads * t + 2.0 * t * f;
    let got: f64 = m.layers.iter().flat_map(|l| &l.activations).map(|a| a.elements).sum();
    assert_eq!(got, written + hidden);
    // P is a softmax numerator (Z sums it); the MLP's exp-free tensors are not.
    assert_eq!(m.layers[0].softmax, ["P"]);
    assert!(m.layers[1].softmax.is_empty());
    // Mixtral's gate L = exp(N2·Wr) is an exp that nothing sums: not a softmax.
    let mix = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mixtral_block.tc")).unwrap();
    let (_, mx) = at_scale(&mix, &[]);
    assert_eq!(mx.layers[0].softmax, ["P"]);
    assert!(mx.layers[1].softmax.is_empty() && mx.layers[1].activations.iter().any(|a| a.name == "L"));
    // The backward pass's working set above the activations (fp16), walking the
    // block backwards. Without recomputation its peak is the softmax at P: ∂P,
    // ∂P ⊙ P and ∂S (3 × b·heads·s²), less what the backward has freed by then,
    // everything made after P but the output Y: recip(Z) (heads·t), O, C, A, N2
    // (4·t·h), the MLP norm's two values (2t), U, silu's argument and value, H
    // (4·t·f). With selective recomputation (flash attention) P is not kept, and
    // the peak is at H: ∂H and ∂(its inputs), 2·t·f, nothing freed after it but Y.
    let o = opts(1);
    let mem = |r: Recompute| {
        let mut c = cfg(1, 0);
        c.pipe = pipe(1, Schedule::OneFOneB, 1, 1, r);
        evaluate(&m, &c, &o).memory
    };
    let (none, sel) = (mem(Recompute::None), mem(Recompute::Selective));
    let freed_after_p = heads * t + 4.0 * t * h + 2.0 * t + 4.0 * t * f;
    assert_eq!(none.backward, 2.0 * (3.0 * b * heads * s * s - freed_after_p));
    assert_eq!(sel.backward, 2.0 * 2.0 * t * f);
    // Full recomputation rebuilds the same layer: the same peak above it; with
    // flash attention in the rebuilt layer (full-flash) the selective one.
    let (full, flash) = (mem(Recompute::Full), mem(Recompute::FullFlash));
    assert_eq!(full.backward, none.backward);
    assert_eq!(flash.backward, sel.backward);
    let parts = none.params + none.grads + none.optimizer + none.activations + none.backward + none.buckets;
    assert!((none.total - parts).abs() < 1e-6 * none.total, "{none:?}");
}

#[test]
fn gpt3_175b_fits_on_64_gpus_only_with_pipeline_or_recomputation() {
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = opts(64);
    o.layers = 96;
    o.mem_per_device = Some(80_000_000_000);
    // Before issue 20: no pipeline, no micro-batching, no recomputation.
    let none = tcc::sema::hir::ParallelHints { pipeline: Some(1), ..Default::default() };
    let mut before = o.clone();
    before.micro_batches = Some(1);
    before.recompute = Some(Recompute::None);
    let old = tcc::plan::model::search(&m, &none, &before);
    assert!(!old.is_empty() && old.iter().all(|p| !p.fits), "{}", old.iter().filter(|p| p.fits).count());
    // Now: the best plan fits, with a pipeline and/or recomputation.
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    let best = &plans[0];
    println!("{}", tcc::plan::model::report::plan_detail(best));
    assert!(best.fits);
    assert!(best.config.pipe.stages > 1 || best.config.pipe.recompute != Recompute::None);
    assert!(best.memory.total <= 80e9);
    assert_eq!(best.config.devices(), 64);
}

#[test]
fn pipeline_hint_is_honored_or_rejected() {
    let src = {
        let s = gpt_free();
        let k = s.rfind('}').unwrap();
        format!("{}  parallel {{ pipeline = 8; }}\n}}\n", &s[..k])
    };
    let (h, m) = at_scale(&src, &GPT3);
    let hints = &h.models[ModelId::new(0)].parallel;
    assert_eq!(hints.pipeline, Some(8));
    let mut o = opts(64);
    o.layers = 96;
    let plans = tcc::plan::model::search(&m, hints, &o);
    assert!(!plans.is_empty());
    assert!(plans.iter().all(|p| p.config.pipe.stages == 8));
    // Too few layers for 8 stages: an error that names the pipeline.
    o.layers = 4;
    let e = tcc::plan::model::plan_model_command(&h, None, &[], &o, false).unwrap_err();
    assert_eq!(e.code, "E0812");
    assert!(e.message.contains("pipeline: 8 stages need at least 8 layers"), "{}", e.message);
    // A degree that does not divide the devices says so.
    let (h5, _) = at_scale(&src.replace("pipeline = 8;", "pipeline = 5;"), &GPT3);
    o.layers = 96;
    let e = tcc::plan::model::plan_model_command(&h5, None, &[], &o, false).unwrap_err();
    assert!(e.message.contains("pipeline: 5 stages do not divide 64 devices"), "{}", e.message);
    // A pipeline with ZeRO-3 is rejected, not ignored.
    let z3 = src.replace("pipeline = 8;", "pipeline = 8; zero = 3;");
    let (h3, _) = at_scale(&z3, &GPT3);
    o.layers = 96;
    let e = tcc::plan::model::plan_model_command(&h3, None, &[], &o, false).unwrap_err();
    assert!(e.message.contains("ZeRO stage 3"), "{}", e.message);
}

#[test]
fn cli_text_and_json_show_the_pipeline() {
    let ex = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_block.tc");
    let mut args: Vec<String> = ["plan-model", ex, "--devices", "64", "--mem-per-device", "80GB", "--layers", "96"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for (n, s) in GPT3 {
        args.extend(["--dim".to_string(), format!("{n}={s}")]);
    }
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcc")).args(&args).args(extra).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["--top", "1"]);
    assert!(text.contains("pipe  schedule micro recompute bubble"), "{text}");
    assert!(text.contains("in flight on stage 1"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&run(&["--top", "1", "--json"])).unwrap();
    let p = &json["models"][0]["plans"][0];
    assert!(p["fits"].as_bool().unwrap());
    assert!(p["config"]["pipe"]["stages"].as_u64().unwrap() > 1, "{p}");
    for k in ["schedule", "micro_batches", "recompute", "virtual_stages"] {
        assert!(!p["config"]["pipe"][k].is_null(), "{k}");
    }
    assert!(p["bubble"].as_f64().unwrap() > 0.0);
    // Forcing full recomputation and 1536 micro-batches is honoured.
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--top", "1", "--json", "--recompute", "full", "--micro-batches", "768"])).unwrap();
    let pipe = &json["models"][0]["plans"][0]["config"]["pipe"];
    assert_eq!(pipe["recompute"], "full");
    assert_eq!(pipe["micro_batches"], 768);
}

#[test]
fn hpz_is_not_offered_where_tensor_parallelism_fills_the_node() {
    // With TP 8 on 8-GPU nodes a node has one data rank: hpZ's secondary
    // partition would be a whole copy of the weights (it was, silently).
    let (h, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = opts(64);
    o.layers = 96;
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    let zero3 = |p: &&ModelPlan| p.config.zero == 3;
    assert!(plans.iter().filter(zero3).any(|p| p.config.tensor < 8 && p.config.zeropp.hpz));
    assert!(plans.iter().filter(zero3).any(|p| p.config.tensor == 8 && p.config.zeropp.qwz));
    for p in plans.iter().filter(|p| p.config.tensor == 8) {
        assert!(!p.config.zeropp.hpz, "{}", tcc::plan::model::report::plan_detail(p));
    }
    // Asked for explicitly with TP 8: an error that says why.
    let src = {
        let s = gpt_free();
        let k = s.rfind('}').unwrap();
        format!("{}  parallel {{ tensor = 8; zero = 3; }}\n}}\n", &s[..k])
    };
    let (h8, m8) = at_scale(&src, &GPT3);
    o.zeropp = Some(ZeroPP::parse("hpz").unwrap());
    assert!(tcc::plan::model::search(&m8, &h8.models[ModelId::new(0)].parallel, &o).is_empty());
    let e = tcc::plan::model::plan_model_command(&h8, None, &[], &o, false).unwrap_err();
    assert_eq!(e.code, "E0812");
    assert!(e.message.contains("hpZ: tensor parallelism 8 on 8 GPUs per node"), "{}", e.message);
    // With 16-GPU nodes the same plan keeps hpZ.
    o.gpus_per_node = 16;
    let plans = tcc::plan::model::search(&m8, &h8.models[ModelId::new(0)].parallel, &o);
    assert!(!plans.is_empty() && plans.iter().all(|p| p.config.zeropp.hpz));
    drop(h);
}

#[test]
fn the_step_reports_its_model_flops_utilization() {
    // MFU counts the model's flops (not recomputed forwards) over the whole step,
    // against the peak the network names.
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = ModelOptions::new(1024, Network::parse("fat-tree:bw=25GB/s,lat=5us,peak=989TF/s,mfu=0.5").unwrap());
    o.layers = 96;
    o.mem_per_device = Some(80_000_000_000);
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    let best = &plans[0];
    assert_eq!(best.peak, Some(989e12));
    let mfu = best.model_flops_per_rank / best.time / 989e12;
    assert!(mfu > 0.0 && mfu <= 0.5 + 1e-9, "{mfu}");
    assert!(best.model_flops_per_rank <= best.flops_per_rank);
    let text = tcc::plan::model::report::plan_detail(best);
    assert!(text.contains(&format!("MFU {:.1}% of peak", 100.0 * mfu)), "{text}");
}

#[test]
fn zero3_gather_buffers_and_nccl_buffers_are_in_the_memory_fit() {
    // ZeRO-3 gathers a layer's weights whole before use and prefetches the next:
    // two layers of this rank's tensor share in fp16 (at most 1e9 parameters), and
    // every communicator the plan uses holds NCCL's buffers.
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = opts(64);
    o.layers = 96;
    let mut c = cfg(8, 3);
    c.tensor = 8;
    c.tensor_dims = tcc::plan::model::tp_dims(&m);
    let p = evaluate(&m, &c, &o);
    let per_layer = m.psi_dense() / 8.0;
    assert!((p.memory.gather - 2.0 * (2.0 * per_layer).min(1e9)).abs() < 1e-6 * p.memory.gather, "{}", p.memory.gather);
    assert_eq!(p.memory.workspace, 2.0 * tcc::plan::model::NCCL_BYTES_PER_COMM);
    let m_ = &p.memory;
    let sum = m_.params
        + m_.grads
        + m_.optimizer
        + m_.secondary
        + m_.activations
        + m_.backward
        + m_.gather
        + m_.workspace
        + m_.buckets
        + m_.logits
        + m_.compression;
    assert!((m_.total - sum).abs() < 1e-6 * sum);
    // ZeRO-3 reduces gradients from one bucket of DeepSpeed's 5e8 fp16 elements
    // (this rank's 21.8 B weights are more).
    assert_eq!(m_.buckets, 2.0 * 5e8);
    // Stage 1 gathers nothing, and has an all-gather bucket besides the reduce one.
    let mut c1 = c.clone();
    c1.zero = 1;
    let p1 = evaluate(&m, &c1, &o);
    assert_eq!(p1.memory.gather, 0.0);
    assert_eq!(p1.memory.buckets, 2.0 * 2.0 * 5e8);
    // Without ZeRO: PyTorch DDP's 25 MB bucket.
    c1.zero = 0;
    assert_eq!(evaluate(&m, &c1, &o).memory.buckets, 25e6);
    // One data rank: nothing to reduce, no bucket.
    let mut solo = cfg(1, 1);
    solo.tensor = 8;
    solo.tensor_dims = c.tensor_dims.clone();
    assert_eq!(evaluate(&m, &solo, &opts(8)).memory.buckets, 0.0);
    assert!(tcc::plan::model::report::plan_detail(&p).contains("ZeRO-3 gathered weights"));
}

// ---- Megatron sequence parallelism (issue 20) ----

/// With tensor parallelism t, Megatron SP splits the activations no
/// tensor-parallel dim splits (norms, residuals: the sbh·10 of Korthikanti et
/// al.'s sbh(10 + 24/t + 5as/ht)) along the sequence over the tensor group,
/// leaving the tensor-parallel ones as they were; the search takes it whenever
/// tensor parallelism is used, and Megatron's arguments say so.
#[test]
fn megatron_sp_splits_the_activations_outside_tensor_parallel_regions() {
    use tcc::plan::model::{activation_elements, invalid, recompute, tp_dims};
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let t = 8;
    let mut c = cfg(1, 1);
    c.tensor = t;
    c.tensor_dims = tp_dims(&m);
    let mut sp = c.clone();
    sp.megatron_sp = true;
    assert_eq!(invalid(&m, &sp), None);
    let acts: Vec<_> = m.layers.iter().flat_map(|l| &l.activations).collect();
    let (mut outside, mut inside) = (0.0, 0.0);
    for a in &acts {
        let (off, on) = (activation_elements(a, &c), activation_elements(a, &sp));
        if c.tensor_dims.iter().any(|d| a.dims.contains(d)) {
            assert_eq!(off, on, "a tensor-parallel activation keeps its size");
            inside += on;
        } else if a.dims.iter().any(|d| d == "seq") {
            assert!((off / on - t as f64).abs() < 1e-12, "split t ways along the sequence");
            outside += off;
        }
    }
    assert!(outside > 0.0 && inside > 0.0, "gpt_block has activations of both kinds");
    let (kept_off, _) = recompute::kept_elements(&m, &c, Recompute::None);
    let (kept_on, _) = recompute::kept_elements(&m, &sp, Recompute::None);
    assert!((kept_off - kept_on - outside * (1.0 - 1.0 / t as f64)).abs() < 1e-9 * kept_off);
    // Not without tensor parallelism, nor when the sequence does not split.
    let mut lone = cfg(1, 1);
    lone.megatron_sp = true;
    assert!(invalid(&m, &lone).unwrap().contains("needs tensor parallelism"));
    let (_, odd) =
        at_scale(&gpt_free(), &[("batch", 8), ("seq", 12), ("hidden", 64), ("heads", 8), ("hdim", 8), ("ffn", 256)]);
    let mut sp_odd = sp.clone();
    sp_odd.tensor_dims = tp_dims(&odd);
    assert!(invalid(&odd, &sp_odd).unwrap().contains("megatron-sp"));
    // The search takes it with tensor parallelism (it never costs more), and says so.
    let o = opts(64);
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    let tp: Vec<&ModelPlan> = plans.iter().filter(|p| p.config.tensor > 1).collect();
    assert!(!tp.is_empty() && tp.iter().all(|p| p.config.megatron_sp), "every tensor-parallel plan uses SP");
    assert!(plans.iter().filter(|p| p.config.tensor == 1).all(|p| !p.config.megatron_sp));
    assert!(tp[0].config.describe().contains("megatron-sp"));
}

// ---- ZeRO-Offload (issue 20) ----

/// A 70B-parameter model on 8 devices of 80 GB fits only with the optimizer
/// states on the host: its plan moves them there (host memory reported, not in
/// the device total), pays the host link and host Adam per step, and the
/// exports say so; without ZeRO it is refused, and a plan that fits without
/// offload keeps its optimizer on the device.
#[test]
fn optimizer_offload_makes_a_70b_model_fit_8_devices_and_costs_its_transfers() {
    use tcc::plan::model::invalid;
    let dims = [("batch", 8), ("seq", 2048), ("hidden", 8192), ("heads", 64), ("hdim", 128), ("ffn", 28672)];
    let (_, m) = at_scale(&gpt_free(), &dims);
    let mut o = opts(8);
    o.layers = 80;
    o.mem_per_device = Some(80_000_000_000);
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    assert!(plans[0].fits, "{}", plans[0].config.describe());
    let fitting: Vec<&ModelPlan> = plans.iter().filter(|p| p.fits).collect();
    assert!(
        fitting.iter().all(|p| p.config.offload || p.config.infinity.is_some()),
        "every plan that fits offloads (70B × 16 B > 8 × 80 GB)"
    );
    // The best plan that offloads the optimizer alone (ZeRO-Offload).
    let best = *fitting.iter().find(|p| p.config.offload).unwrap();
    let mut on_device = best.config.clone();
    on_device.offload = false;
    let kept = evaluate(&m, &on_device, &o);
    assert!(!kept.fits);
    // The optimizer bytes move to the host, exactly; the device total drops by them.
    assert_eq!(best.memory.optimizer, 0.0);
    assert!((best.memory.host - kept.memory.optimizer).abs() < 1e-6 * kept.memory.optimizer);
    assert!((kept.memory.total - best.memory.total - kept.memory.optimizer).abs() < 1e-6 * kept.memory.total);
    // Per step: fp16 gradients down and weights up over PCIe, Adam on the host.
    let part = kept.memory.optimizer / tcc::plan::model::formulas::K_ADAM;
    let want = 4.0 * part / o.network.pcie + part / o.network.cpu_adam;
    assert!((best.time_offload - want).abs() < 1e-9 * want, "{} vs {want}", best.time_offload);
    assert!((best.time - kept.time - want).abs() < 1e-9 * best.time);
    let ds = tcc::plan::model::export::emit(&m, &o, &plans, tcc::plan::model::export::Emit::DeepSpeed).unwrap();
    assert!(ds.contains("\"offload_optimizer\""), "{ds}");
    // Offload needs a partitioned optimizer (ZeRO ≥ 1).
    let mut z0 = best.config.clone();
    z0.zero = 0;
    z0.zeropp = ZeroPP::default();
    assert!(invalid(&m, &z0).unwrap().contains("ZeRO stage 1"));
    // Where the layout fits on the device, offloading only adds time: the search
    // keeps the optimizer there (GPT-3 at data 2, tensor 4, ZeRO 1 on 64 × 80 GB).
    let (_, g) = at_scale(&gpt_free(), &GPT3);
    let mut o64 = opts(64);
    o64.layers = 96;
    o64.mem_per_device = Some(80_000_000_000);
    let hints =
        tcc::sema::hir::ParallelHints { data: Some(2), tensor: Some((4, None)), zero: Some(1), ..Default::default() };
    let best64 = &tcc::plan::model::search(&g, &hints, &o64)[0];
    assert!(best64.fits && !best64.config.offload, "{}", best64.config.describe());
}

// ---- ZeRO++ quantization is not free (issue 20) ----

/// qwZ and qgZ cost their kernels' memory traffic at `hbm=`: per micro-batch,
/// each int8 weight gather quantizes the shard and dequantizes the whole
/// (3 B + 3 B per element), each int4 gradient reduction quantizes and
/// dequantizes in two stages (5 B per element, the second stage on 1/node of
/// the data); the step grows by exactly that, and a faster memory makes it cheaper.
#[test]
fn zeropp_quantization_costs_memory_traffic() {
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = opts(64);
    o.layers = 96;
    let mut c = cfg(16, 3);
    c.tensor = 4;
    c.tensor_dims = tcc::plan::model::tp_dims(&m);
    c.pipe.micro_batches = 4;
    let plain = evaluate(&m, &c, &o);
    assert_eq!(plain.time_quant, 0.0);
    c.zeropp = ZeroPP { qwz: true, hpz: false, qgz: true };
    let q = evaluate(&m, &c, &o);
    let psi: f64 = plain.memory.params / 2.0 * 16.0; // fp16 weights of the partition × ZeRO group
    let node = 8 / 4; // data ranks per node (8 GPUs, tensor 4)
    let mb = 4.0;
    let want_bytes = 2.0 * mb * (3.0 * psi / 16.0 + 3.0 * psi) + mb * 5.0 * (psi + psi / node as f64);
    let want = want_bytes / o.network.hbm;
    assert!((q.time_quant - want).abs() < 1e-9 * want, "{} vs {want}", q.time_quant);
    let comm_only = q.time - q.time_quant;
    assert!(comm_only < plain.time, "compression still saves communication");
    let mut fast = o.clone();
    fast.network = tcc::plan::Network::parse("fat-tree:bw=25GB/s,lat=5us,flops=150TF/s,hbm=5TB/s").unwrap();
    let qf = evaluate(&m, &c, &fast);
    assert!((qf.time_quant * 5e12 - want_bytes).abs() < 1e-6 * want_bytes);
}

// ---- 1-bit Adam / 1-bit LAMB / 0/1 Adam (issue 20) ----

/// After the warm-up, DeepSpeed's compressed all-reduce sends the momentum's
/// signs in two phases (all-to-all of chunks, all-gather of the re-compressed
/// chunks): 2·(q−1)/q · n/8 bytes per rank, 1/16 of the fp16 all-reduce (1/32 of
/// fp32; Tang et al. 2021, runtime/comm/nccl.py `compressed_allreduce`). With
/// 15% of the steps at full volume the average is 0.15·2 + 0.85/8 = 0.406 B per
/// element: 4.9× less than fp16 ("up to 5× less communication volume", the
/// DeepSpeed 1-bit Adam tutorial). The error buffers (fp32: the worker's whole
/// buffer, the server's chunk) are in the memory fit.
#[test]
fn one_bit_adam_sends_one_sixteenth_after_warm_up() {
    use tcc::plan::model::compress::{self, Kind, OneBit};
    let (_, m) = at_scale(&gpt_free(), &GPT3);
    let mut o = opts(64);
    o.layers = 96;
    let mut c = cfg(16, 0);
    c.tensor = 4;
    c.tensor_dims = tcc::plan::model::tp_dims(&m);
    let plain = evaluate(&m, &c, &o);
    let grads = |p: &ModelPlan| -> f64 {
        p.comm.iter().filter(|x| x.phase == "step").map(|x| x.bytes_per_rank * x.count).sum()
    };
    o.compress = Some(OneBit { kind: Kind::OneBitAdam, warmup: 0.15, sync_every: 1.0 });
    let ob = evaluate(&m, &c, &o);
    let psi = plain.memory.params / 2.0;
    let onebit = ob.comm.iter().find(|x| x.what.contains("1-bit")).unwrap();
    assert_eq!(onebit.bytes_per_rank, 2.0 * 15.0 / 16.0 * psi / 8.0);
    assert_eq!(onebit.bytes_per_rank, compress::compressed_allreduce_bytes(psi, 16.0));
    let full = plain.comm.iter().find(|x| x.phase == "step").unwrap().bytes_per_rank;
    assert!((full / onebit.bytes_per_rank - 16.0).abs() < 1e-9, "1/16 of fp16");
    assert!((full * 2.0 / onebit.bytes_per_rank - 32.0).abs() < 1e-9, "1/32 of fp32");
    let cut = grads(&plain) / grads(&ob);
    assert!((cut - 2.0 / (0.15 * 2.0 + 0.85 / 8.0)).abs() < 1e-9 && cut > 4.9, "{cut}");
    assert_eq!(ob.memory.compression, 4.0 * psi + 4.0 * psi / 16.0);
    assert!((ob.memory.total - plain.memory.total - ob.memory.compression).abs() < 1e-6 * ob.memory.total);
    assert!(ob.time < plain.time && ob.time_compress > 0.0);
    // No warm-up: the whole step compressed.
    o.compress = Some(OneBit { kind: Kind::OneBitLamb, warmup: 0.0, sync_every: 1.0 });
    let all = evaluate(&m, &c, &o);
    assert!((grads(&plain) / grads(&all) - 16.0).abs() < 1e-9);
    // 0/1 Adam synchronizing every 4 steps after the warm-up moves a quarter of
    // 1-bit Adam's compressed volume.
    let mut o01 = o.clone();
    o01.compress = Some(OneBit { kind: Kind::ZeroOneAdam, warmup: 0.0, sync_every: 4.0 });
    let zo = evaluate(&m, &c, &o01);
    assert!((grads(&plain) / grads(&zo) - 64.0).abs() < 1e-9);
    // ZeRO plans are not compressed (DeepSpeed runs 1-bit optimizers without
    // ZeRO), so the search offers ZeRO 0 only.
    let mut z1 = c.clone();
    z1.zero = 1;
    assert!(evaluate(&m, &z1, &o).compress.is_none());
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    assert!(!plans.is_empty() && plans.iter().all(|p| p.config.zero == 0 && p.compress.is_some()));
    let ds = tcc::plan::model::export::emit(&m, &o, &plans, tcc::plan::model::export::Emit::DeepSpeed).unwrap();
    assert!(ds.contains("\"OneBitLamb\"") && ds.contains("freeze_step"), "{ds}");
    let mg = tcc::plan::model::export::emit(&m, &o, &plans, tcc::plan::model::export::Emit::Megatron);
    assert!(mg.unwrap_err().code == "E0817");
}

#[test]
fn compress_cli_errors() {
    let ex = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_block.tc");
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcc"))
            .args(["plan-model", ex, "--devices", "8"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    // gpt_block's hints ask for ZeRO 1.
    let (ok, e, _) = run(&["--compress", "1bit-adam"]);
    assert!(!ok && e.contains("E0821"), "{e}");
    let (ok, e, _) = run(&["--compress", "2bit-adam"]);
    assert!(!ok && e.contains("E0811"), "{e}");
    let (ok, e, _) = run(&["--compress", "1bit-adam", "--warmup", "1.5"]);
    assert!(!ok && e.contains("E0811"), "{e}");
    let (ok, e, _) = run(&["--compress", "1bit-adam", "--local-steps", "4"]);
    assert!(!ok && e.contains("E0811") && e.contains("0/1 Adam"), "{e}");
    let (ok, e, _) = run(&["--compress", "01-adam", "--local-steps", "0"]);
    assert!(!ok && e.contains("E0815"), "{e}");
    let (ok, e, _) = run(&["--warmup", "0.2"]);
    assert!(!ok && e.contains("--compress"), "{e}");
    let (ok, e, _) = run(&["--compress", "1bit-adam", "--zeropp", "all"]);
    assert!(!ok && e.contains("cannot be used with"), "{e}");
}

/// Grouped-query attention (`examples/llama_block.tc`, heads written kvheads ×
/// group): tensor parallelism splits the key/value heads, Ulysses exchanges the
/// attention tensors by all-to-all like any heads, and both degrees together
/// must divide the key/value heads (8 for Llama-3).
#[test]
fn gqa_models_split_and_exchange_the_kv_heads() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llama_block.tc")).unwrap();
    let dims =
        [("batch", 8), ("seq", 4096), ("hidden", 4096), ("kvheads", 8), ("group", 4), ("hdim", 128), ("ffn", 14336)];
    let (_, m) = at_scale(&src, &dims);
    assert_eq!(tcc::plan::model::tp_dims(&m), ["kvheads", "ffn"]);
    let att = &m.layers[0];
    let names: Vec<&str> = att.ulysses.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"Q") && names.contains(&"K") && names.contains(&"V"), "{names:?}");
    let mut c = cfg(1, 0);
    c.tensor_dims = tcc::plan::model::tp_dims(&m);
    c.sequence = 8;
    assert_eq!(tcc::plan::model::invalid(&m, &c), None);
    let p = evaluate(&m, &c, &opts(8));
    assert!(p.comm.iter().filter(|x| x.kind == tcc::plan::model::Coll::AllToAll).count() >= 8);
    c.sequence = 4;
    c.tensor = 4;
    assert!(tcc::plan::model::invalid(&m, &c).unwrap().contains("kvheads = 8"));
}

// ---- ZeRO-Infinity (issue 20) ----

/// ZeRO-Infinity's headline (Rajbhandari et al. 2021): a trillion-parameter model
/// trains on one DGX-2 node (16 GPUs of 32 GB, 1.5 TB of host memory: 90 GB per
/// GPU) only with NVMe: 16 B × 1.01 T / 16 = 1.01 TB per GPU fits neither the
/// device nor the host. The device keeps the gathered layers and activations;
/// the tier holds the rank's whole partition; each step moves it as the module
/// doc says (fp16 weights per pass, gradients down, host Adam, NVMe read and
/// write of the optimizer states).
#[test]
fn zero_infinity_trains_a_trillion_parameters_on_one_dgx2_node_from_nvme() {
    use tcc::plan::model::infinity::{self, Tier};
    let dims = [("batch", 16), ("seq", 1024), ("hidden", 25600), ("heads", 160), ("hdim", 160), ("ffn", 102400)];
    let (_, m) = at_scale(&gpt_free(), &dims);
    let net = "fat-tree:bw=12.5GB/s,lat=5us,flops=60TF/s,pcie=12GB/s,host-mem=90GB";
    let mut o = ModelOptions::new(16, Network::parse(net).unwrap());
    o.layers = 128;
    o.mem_per_device = Some(32_000_000_000);
    o.recompute = Some(Recompute::Full);
    let psi = m.psi_dense() * 128.0;
    assert!(psi > 1.0e12 && psi < 1.01e12, "{psi}");
    // Without an NVMe tier nothing fits (the host tier needs 1.01 TB per GPU).
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    assert!(plans.iter().all(|p| !p.fits), "{}", plans[0].config.describe());
    // With it, the best plan fits and keeps its partition on NVMe.
    o.network = Network::parse(&format!("{net},nvme=1.6GB/s")).unwrap();
    let plans = tcc::plan::model::search(&m, &Default::default(), &o);
    let best = &plans[0];
    assert!(best.fits && best.config.infinity == Some(Tier::Nvme), "{}", best.config.describe());
    let nd = (best.config.data * best.config.sequence) as f64;
    let t = best.config.tensor as f64;
    let part = psi / t / nd; // this rank's share (every weight is split by tensor parallelism here)
    assert!(
        (best.memory.nvme - 16.0 * part).abs() < 1e-3 * best.memory.nvme,
        "{} vs {}",
        best.memory.nvme,
        16.0 * part
    );
    assert_eq!((best.memory.params, best.memory.grads, best.memory.optimizer, best.memory.host), (0.0, 0.0, 0.0, 0.0));
    // The step's offload time, by hand.
    let mb = best.config.pipe.micro_batches as f64;
    let p_exact = best.memory.nvme / 16.0;
    let want = 2.0 * mb * 2.0 * p_exact / 1.6e9 + mb * 2.0 * p_exact / 12e9 + p_exact / 1e9 + 26.0 * p_exact / 1.6e9;
    assert!((best.time_offload - want).abs() < 1e-9 * want, "{} vs {want}", best.time_offload);
    assert_eq!(best.time_offload, infinity::step_time(Tier::Nvme, p_exact, mb, &o.network));
    // The host tier holds the same bytes, beyond the 90 GB of host memory per GPU.
    let mut cpu = best.config.clone();
    cpu.infinity = Some(Tier::Cpu);
    let on_host = evaluate(&m, &cpu, &o);
    assert!(!on_host.fits && on_host.memory.host == best.memory.nvme && on_host.memory.total == best.memory.total);
    assert!(on_host.time_offload < best.time_offload, "the host link is faster than NVMe");
    let ds = tcc::plan::model::export::emit(&m, &o, &plans, tcc::plan::model::export::Emit::DeepSpeed).unwrap();
    assert!(ds.contains("\"offload_param\"") && ds.contains("\"nvme\""), "{ds}");
    // ZeRO-Infinity needs ZeRO 3.
    let mut z1 = best.config.clone();
    z1.zero = 1;
    z1.zeropp = ZeroPP::default();
    assert!(tcc::plan::model::invalid(&m, &z1).unwrap().contains("ZeRO-Infinity"));
}

#[test]
fn tier_keys_need_units_and_only_plan_model_takes_them() {
    for bad in ["nvme=3", "host-mem=90", "host-mem=90XB"] {
        let e = Network::parse(&format!("fat-tree:bw=25GB/s,flops=100TF/s,{bad}")).unwrap_err();
        assert!(e.contains("unit") || e.contains("bandwidth"), "{bad}: {e}");
    }
    let n = Network::parse("fat-tree:bw=25GB/s,flops=100TF/s,nvme=3GB/s,host-mem=1.5TB").unwrap();
    assert_eq!((n.nvme, n.host_mem), (Some(3e9), Some(1.5e12)));
    assert!(n.for_programs().is_err());
}

// ---- Embedding, output layer and logits (issue 20) ----

/// `--vocab V` adds the untied embedding and output layer (2·V·h parameters,
/// vocab-parallel over the tensor group: Llama-3-8B's 128256 × 4096 tables are
/// 1.05 B parameters), the output layer's 3 × 2·T·h·V/t flops, the embedding's
/// all-reduce, and one micro-batch's logits in fp16 and fp32 (6 B each: 8192
/// tokens × 128256 / t).
#[test]
fn vocabulary_tables_flops_and_logits_are_in_the_plan() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llama_block.tc")).unwrap();
    let dims =
        [("batch", 4), ("seq", 8192), ("hidden", 4096), ("kvheads", 8), ("group", 4), ("hdim", 128), ("ffn", 14336)];
    let (_, m) = at_scale(&src, &dims);
    let mut o = opts(8);
    o.layers = 32;
    let mut c = cfg(2, 0);
    c.tensor = 4;
    c.tensor_dims = tcc::plan::model::tp_dims(&m);
    c.pipe.micro_batches = 2;
    let without = evaluate(&m, &c, &o);
    o.vocab = Some(128256);
    let with = evaluate(&m, &c, &o);
    let (v, h, t) = (128256.0, 4096.0, 4.0);
    assert_eq!(with.psi_dense - without.psi_dense, 2.0 * v * h);
    assert!((2.0 * v * h - 1.05e9).abs() < 0.01e9);
    assert!((with.memory.params - without.memory.params - 2.0 * 2.0 * v * h / t).abs() < 1.0);
    // Tokens per rank: 4 sequences over 2 data ranks × 8192; per micro-batch half.
    let tok = 2.0 * 8192.0;
    assert!((with.flops_per_rank - without.flops_per_rank - 6.0 * tok * h * v / t).abs() < 1e-6 * with.flops_per_rank);
    assert_eq!(with.memory.logits, 6.0 * tok / 2.0 * v / t);
    assert!(
        (with.memory.total
            - without.memory.total
            - with.memory.logits
            - (with.memory.params - without.memory.params) * 8.0)
            .abs()
            < 1e-6 * with.memory.total
    );
    let emb = with.comm.iter().find(|x| x.what.contains("embedding")).unwrap();
    assert_eq!((emb.elements, emb.count), (tok / 2.0 * h, 2.0));
    // With a pipeline the first stage holds the embedding alone.
    c.pipe = pipe(2, Schedule::OneFOneB, 1, 2, Recompute::None);
    c.data = 1;
    let piped = evaluate(&m, &c, &o);
    let mut o0 = o.clone();
    o0.vocab = None;
    let piped0 = evaluate(&m, &c, &o0);
    assert!((piped.memory.params - piped0.memory.params - 2.0 * v * h / t).abs() < 1.0);
}

#[test]
fn vocab_needs_a_hidden_dim_and_a_count() {
    let dir = std::env::temp_dir().join(format!("tcc_vocab_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("mlp.tc");
    std::fs::write(
        &f,
        "model mlp { dims batch = 2, width = 4, ffn = 8; index b : batch; index m : width; index f : ffn;\n\
         input tensor X[b,m] : f32; param tensor W[m,f] : f32; output tensor Y[b,f] : f32;\n\
         layer l { Y[b,f] = X[b,m] * W[m,f]; } }\n",
    )
    .unwrap();
    let run = |file: &str, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcc"))
            .args(["plan-model", file, "--devices", "2"])
            .args(extra)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (ok, e) = run(f.to_str().unwrap(), &["--vocab", "1000"]);
    assert!(!ok && e.contains("E0822"), "{e}");
    let ex = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llama_block.tc");
    let (ok, e) = run(ex, &["--vocab", "0"]);
    assert!(!ok && e.contains("E0815"), "{e}");
    let (ok, e) = run(ex, &["--vocab", "1000", "--inference"]);
    assert!(ok, "{e}");
    let (ok, e) = run(ex, &["--vocab", "1000"]);
    assert!(ok, "{e}");
}

/// `--micro-batch N` fixes the samples per micro-batch: every plan splits its
/// per-replica batch (batch / data) into micro-batches of N, the header says so,
/// and an N that divides no per-replica batch is a clear error (E0824), as is 0.
#[test]
fn micro_batch_fixes_the_samples_per_micro_batch() {
    let ex = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llama_block.tc");
    let gpt = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_block.tc");
    let net = "fat-tree:bw=25GB/s,lat=5us,peak=989TF/s,mfu=0.5";
    let tcc = |file: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tcc"))
            .args(["plan-model", file, "--devices", "8", "--network", net])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = tcc(ex, &["--dim", "batch=16", "--layers", "4", "--micro-batch", "2", "--top", "100", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plans = json["models"][0]["plans"].as_array().unwrap();
    assert!(plans.len() > 1);
    assert_eq!(json["models"][0]["micro_batch_fixed"], 2);
    for p in plans {
        let data = p["config"]["data"].as_u64().unwrap();
        let m = p["config"]["pipe"]["micro_batches"].as_u64().unwrap();
        assert_eq!(p["micro_batch_size"], 2, "{p}");
        assert_eq!(m * 2 * data, 16, "{p}");
    }
    let out = tcc(ex, &["--dim", "batch=16", "--micro-batch", "2", "--top", "1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("micro-batch fixed at 2 samples per data rank"));
    // 5 divides no share of a batch of 12.
    let out = tcc(ex, &["--dim", "batch=12", "--micro-batch", "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("E0824") && err.contains("does not divide the batch: `batch` = 12"), "{err}");
    // gpt_block's hints (data 2, tensor 4) leave 1 of its batch of 2 per replica.
    let out = tcc(gpt, &["--micro-batch", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("E0824") && err.contains("their per-replica batches: 1"), "{err}");
    let out = tcc(ex, &["--micro-batch", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("E0815"));
    assert_eq!(out.status.code(), Some(1));
}
