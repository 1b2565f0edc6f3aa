//! Pipeline and expert parallelism in inference plans (issue 20): a Llama-3-70B
//! that does not fit one 80 GB device at tensor degree 1 is served over two
//! pipeline stages, with micro-batches in flight keeping the stages busy; a
//! Mixtral-8x7B spreads its experts over the replicas and pays two all-to-alls
//! per layer. The numbers are checked against hand computations.

use tcc::plan::model::analysis::{self, ModelInfo};
use tcc::plan::model::inference::{self, per_token, Serving, Shape};
use tcc::plan::model::ModelOptions;
use tcc::plan::Network;
use tcc::sema::hir::{ModelId, ParallelHints};

fn model(file: &str, dims: &[(&str, usize)]) -> ModelInfo {
    let src = std::fs::read_to_string(format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let (hir, d) = tcc::compile(&src, "m");
    let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
    let dims: Vec<(String, usize)> = dims.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    let h = analysis::with_dims(&hir, ModelId::new(0), &dims).unwrap();
    analysis::analyze(&h, ModelId::new(0))
}

/// Llama-3-70B: 80 layers of 855,654,400 parameters, 8 KV heads of 128.
fn llama70b(batch: usize) -> ModelInfo {
    model(
        "llama_block.tc",
        &[
            ("batch", batch),
            ("seq", 2048),
            ("hidden", 8192),
            ("kvheads", 8),
            ("group", 8),
            ("hdim", 128),
            ("ffn", 28672),
        ],
    )
}

/// H100 80 GB: 3.35 TB/s of HBM, 989 TF/s bf16 peak at MFU 0.5.
fn h100(devices: usize, layers: usize) -> ModelOptions {
    let mut o = ModelOptions::new(
        devices,
        Network::parse("fat-tree:bw=50GB/s,lat=5us,peak=989TF/s,mfu=0.5,hbm=3.35TB/s").unwrap(),
    );
    o.layers = layers;
    o.mem_per_device = Some(80_000_000_000);
    o
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-30)
}

const BLOCK: f64 = 855_654_400.0;
/// K and V of one layer per token: 2 × 8 heads × 128 × 2 B.
const KV_LAYER: f64 = 4096.0;

#[test]
fn llama_70b_on_two_gpus_at_tensor_1_is_served_by_two_pipeline_stages() {
    let m = llama70b(1);
    let o = h100(2, 80);
    let s = Serving { generate: 16, swiftkv: 0.0 };
    let hints = ParallelHints { tensor: Some((1, None)), ..Default::default() };
    let plans = inference::search(&m, &hints, &s, &o);
    // Tensor 1 on 2 devices: 2 replicas (needs 2 sequences: not valid with
    // batch 1) or 2 stages; the model (136.9 GB) fits only split in two.
    assert_eq!(plans.len(), 1);
    let p = &plans[0];
    assert!(p.fits && p.pipeline == 2 && p.stage_layers == 40 && p.micro_batches == 1);
    let w_stage = 40.0 * BLOCK * 2.0;
    assert_eq!(p.memory.weights, w_stage);
    // The KV cache splits with the layers: 40 of them per device.
    assert_eq!(p.kv_bytes_per_token, 40.0 * KV_LAYER);
    assert_eq!(p.memory.kv_cache, (2048.0 + 16.0) * 40.0 * KV_LAYER);
    // One decode step: a token passes both stages (each memory-bound: its
    // weights and cache at 3.35 TB/s) and one send of the hidden state
    // (8192 fp16 values) inside the node: 4 µs launch + 0.5 µs step + bytes.
    let hop = 4e-6 + 0.5e-6 + 8192.0 * 2.0 / 300e9;
    let want: f64 = (1..=15).map(|j| 2.0 * (w_stage + (2048.0 + j as f64) * 40.0 * KV_LAYER) / 3.35e12 + hop).sum();
    assert!(close(p.decode_time, want), "{} vs {want}", p.decode_time);
    assert!(close(p.decode_p2p, 15.0 * hop));
    assert_eq!(p.memory_bound_steps, 15);
    // About 2 × 20.4 ms per token: the sum of the stages, as one device
    // would take if it could hold the model.
    assert!((p.time_per_token - 0.0409).abs() < 0.0002, "{}", p.time_per_token);
    // Prefill: each stage's 40 layers on 2048 tokens, compute-bound, then the
    // send of 2048 hidden states.
    let pt = per_token(&m);
    let stage_flops = 40.0 * (2048.0 * pt.linear_flops + 2048.0 * 2048.0 * pt.pair_flops);
    let gamma = 1.0 / (989e12 * 0.5);
    let want_prefill = 2.0 * (stage_flops * gamma).max(w_stage / 3.35e12) + 4.5e-6 + 2048.0 * 8192.0 * 2.0 / 300e9;
    assert!(close(p.prefill_time, want_prefill), "{} vs {want_prefill}", p.prefill_time);
    // Without the pipeline the same device count does not fit.
    let flat = inference::evaluate_shape(&m, &Shape { tensor: 1, pipeline: 1, expert: 1, replicas: 1 }, 1, &s, &o);
    assert!(!flat.fits && flat.memory.weights == 2.0 * w_stage);
}

#[test]
fn micro_batches_in_flight_keep_every_stage_busy() {
    // 4 stages of 20 layers, 4 sequences: 4 micro-batches of 1 in flight. A
    // micro-batch's token passes the 4 stages and 3 sends; meanwhile the other
    // three pass through the stages it left, so a decode step (every sequence
    // one token further) takes no longer than one sequence's alone.
    let m = llama70b(4);
    let o = h100(4, 80);
    let s = Serving { generate: 2, swiftkv: 0.0 };
    let sh = Shape { tensor: 1, pipeline: 4, expert: 1, replicas: 1 };
    let p = inference::evaluate_shape(&m, &sh, 4, &s, &o);
    assert_eq!((p.micro_batches, p.stage_layers), (4, 20));
    let stage = (20.0 * BLOCK * 2.0 + 2049.0 * 20.0 * KV_LAYER) / 3.35e12;
    let hop = 4e-6 + 0.5e-6 + 8192.0 * 2.0 / 300e9;
    assert!(close(p.decode_time, 4.0 * stage + 3.0 * hop), "{} vs {}", p.decode_time, 4.0 * stage + 3.0 * hop);
    let one = inference::evaluate_shape(&llama70b(1), &sh, 1, &s, &o);
    assert_eq!(one.micro_batches, 1);
    assert!(close(one.decode_time, p.decode_time));
    // Without micro-batches (the 4 sequences as one) the stages read the same
    // weights, so memory-bound decode is as fast: what the micro-batches buy
    // is the prefill, where one batch of 4 prompts would take 4 × the sum of
    // the stages, and the micro-batches Σ + 3 × the fullest stage.
    let pt = per_token(&m);
    let gamma = 1.0 / (989e12 * 0.5);
    let stage_prefill =
        (20.0 * (2048.0 * pt.linear_flops + 2048.0 * 2048.0 * pt.pair_flops) * gamma).max(20.0 * BLOCK * 2.0 / 3.35e12);
    let want = 4.0 * stage_prefill + 3.0 * (4e-6 + 0.5e-6 + 2048.0 * 8192.0 * 2.0 / 300e9) + 3.0 * stage_prefill;
    assert!(close(p.prefill_time, want), "{} vs {want}", p.prefill_time);
    // 3 odd sequences over 2 stages: 1 micro-batch (2 does not divide 3).
    assert_eq!(inference::in_flight(3, 2), 1);
    assert_eq!(inference::in_flight(6, 4), 3);
}

/// Mixtral-8x7B (Jiang et al. 2024): 32 layers, hidden 4096, 8 KV heads of 128
/// (group 4), 8 experts of ffn 14336, top-2 with capacity 2·2048/8 = 512 per
/// sequence, vocabulary 32000.
fn mixtral(batch: usize) -> ModelInfo {
    model(
        "mixtral_block.tc",
        &[
            ("batch", batch),
            ("seq", 2048),
            ("hidden", 4096),
            ("kvheads", 8),
            ("group", 4),
            ("hdim", 128),
            ("ffn", 14336),
            ("experts", 8),
            ("capacity", 512),
        ],
    )
}

#[test]
fn mixtral_parameters_and_expert_parallel_inference() {
    let m = mixtral(8);
    // Attention 2·4096² + 2·4096·1024, norms 2·4096, router 4096·8; experts
    // 3·8·4096·14336: 46.70 B with the embedding and output layer (Mixtral's
    // published 46.7 B).
    let dense = 2.0 * 4096.0 * 4096.0 + 2.0 * 4096.0 * 1024.0 + 2.0 * 4096.0 + 4096.0 * 8.0;
    let expert = 3.0 * 8.0 * 4096.0 * 14336.0;
    assert_eq!(m.psi_dense(), dense);
    assert_eq!(m.psi_expert(), expert);
    let total = 32.0 * (dense + expert) + 2.0 * 32000.0 * 4096.0;
    assert!((total / 1e9 - 46.70).abs() < 0.005, "{total}");
    let mut o = h100(8, 32);
    o.vocab = Some(32000);
    let s = Serving { generate: 8, swiftkv: 0.0 };
    // Tensor 1, no pipeline: 8 replicas of one sequence; the experts over 1,
    // 2, 4 or 8 of them.
    let hints = ParallelHints { tensor: Some((1, None)), pipeline: Some(1), ..Default::default() };
    let plans = inference::search(&m, &hints, &s, &o);
    let by_e = |e: usize| plans.iter().find(|p| p.expert == e).unwrap();
    assert_eq!(plans.len(), 4);
    // Whole (93.4 GB of weights) it does not fit; split 8 ways it does.
    assert!(!by_e(1).fits && by_e(8).fits);
    let tables = 2.0 * 32000.0 * 4096.0 * 2.0;
    assert_eq!(by_e(8).memory.weights, 2.0 * 32.0 * (dense + expert / 8.0) + tables);
    assert_eq!(plans[0].expert, 8, "the plan that fits and is fastest");
    // Decode: per layer a dispatch and a combine of k·h = 2·4096 values per
    // token over 8 ranks in the node: 4 µs + 7 × 0.5 µs + 7/8 of the bytes.
    let a2a = 4e-6 + 7.0 * 0.5e-6 + 7.0 / 8.0 * 8192.0 * 2.0 / 300e9;
    let want = 7.0 * 32.0 * 2.0 * a2a;
    assert!(close(by_e(8).decode_alltoall, want), "{} vs {want}", by_e(8).decode_alltoall);
    assert_eq!(by_e(1).decode_alltoall, 0.0);
    // Small messages: the latency is 94% of each all-to-all.
    assert!(7.5e-6 / a2a > 0.9);
}

#[test]
fn the_cli_reports_pipeline_and_expert_plans_and_refuses_impossible_hints() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let ex = |n: &str| format!("{}/examples/{n}", env!("CARGO_MANIFEST_DIR"));
    let run = |args: &[&str]| std::process::Command::new(tcc).args(args).output().unwrap();
    let base = [
        "plan-model",
        "--inference",
        "--mem-per-device",
        "80GB",
        "--network",
        "fat-tree:bw=50GB/s,lat=5us,peak=989TF/s,mfu=0.5,hbm=3.35TB/s",
    ];
    let mut a: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    a.insert(1, ex("mixtral_block.tc"));
    for x in [
        "--devices",
        "8",
        "--dim",
        "batch=8",
        "--dim",
        "seq=2048",
        "--dim",
        "hidden=4096",
        "--dim",
        "kvheads=8",
        "--dim",
        "group=4",
        "--dim",
        "hdim=128",
        "--dim",
        "ffn=14336",
        "--dim",
        "experts=8",
        "--dim",
        "capacity=512",
        "--layers",
        "32",
        "--top",
        "30",
        "--json",
    ] {
        a.push(x.into());
    }
    let args: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    let out = run(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plans = v["models"][0]["plans"].as_array().unwrap();
    assert!(plans.iter().any(|p| p["expert"] == 8 && p["fits"] == true));
    assert!(plans.iter().any(|p| p["pipeline"] == 2));
    // Text: the expert line.
    let text_args: Vec<&str> = args.iter().copied().filter(|x| *x != "--json").collect();
    let out = run(&text_args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pipe expert"), "{text}");
    // A pipeline hint deeper than the layers has no plan: E0812 says why.
    let dir = std::env::temp_dir().join(format!("tcc_inf_pp_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = std::fs::read_to_string(ex("llama_block.tc")).unwrap();
    let f = dir.join("pp.tc");
    let end = src.rfind('}').unwrap();
    std::fs::write(&f, format!("{}  parallel {{ pipeline = 4; }}\n}}\n", &src[..end])).unwrap();
    let out = run(&["plan-model", f.to_str().unwrap(), "--inference", "--devices", "4", "--layers", "2"]);
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("E0812") && e.contains("pipeline: 4 stages for 2 layers"), "{e}");
    // Collective latencies need their units.
    let out = run(&["plan-model", &ex("llama_block.tc"), "--inference", "--devices", "2", "--intra-lat", "3"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("E0801"));
}

/// `--intra-lat` and `--coll-lat` price every collective: one decode step of
/// Llama-3-70B at tensor 8 runs 160 all-reduces (two per layer), each a launch
/// and 14 ring steps inside the node, so raising them by 6 µs and 1.5 µs adds
/// 160 × (6 + 14 × 1.5) µs = 4.32 ms to the step, whatever the bytes.
#[test]
fn the_collective_latencies_are_options_that_price_decode() {
    let m = llama70b(1);
    let mut o = h100(8, 80);
    let s = Serving { generate: 2, swiftkv: 0.0 };
    let base = inference::evaluate(&m, 8, 1, 1, &s, &o);
    o.intra_lat = 2e-6;
    o.coll_lat = 10e-6;
    let slow = inference::evaluate(&m, 8, 1, 1, &s, &o);
    let extra = 160.0 * (6e-6 + 14.0 * 1.5e-6);
    assert!(close(slow.decode_comm - base.decode_comm, extra), "{}", slow.decode_comm - base.decode_comm);
    // At batch 1 the all-reduces carry 16 KiB: latency is 74% of each.
    let one = 4e-6 + 14.0 * 0.5e-6 + 14.0 / 8.0 * 8192.0 * 2.0 / 300e9;
    assert!(close(base.decode_comm, 160.0 * one));
    assert!(11e-6 / one > 0.7);
    // The CLI takes them with units and prints them.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcc"))
        .args([
            "plan-model",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llama_block.tc"),
            "--inference",
            "--devices",
            "2",
            "--intra-lat",
            "2us",
            "--coll-lat",
            "10us",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2.000 µs per collective step, 10.000 µs per collective launch"), "{text}");
}
