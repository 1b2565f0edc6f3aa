//! Inference plans (`tcc plan-model --inference`, issue 20) against hand-computed
//! formulas and public numbers: the KV cache of Llama-3-70B (GQA) and Llama-2-7B
//! (MHA), decode as weights and cache over the memory bandwidth, Megatron's two
//! all-reduces per layer, SwiftKV's halved prefill.

use tcc::plan::model::analysis::{self, ModelInfo};
use tcc::plan::model::inference::{self, per_token, Serving};
use tcc::plan::model::ModelOptions;
use tcc::plan::Network;
use tcc::sema::hir::ModelId;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llama_block.tc");

fn llama(dims: &[(&str, usize)]) -> ModelInfo {
    let src = std::fs::read_to_string(EXAMPLE).unwrap();
    let (hir, d) = tcc::compile(&src, "llama");
    let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
    let dims: Vec<(String, usize)> = dims.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    let h = analysis::with_dims(&hir, ModelId::new(0), &dims).unwrap();
    analysis::analyze(&h, ModelId::new(0))
}

/// Llama-3-70B (Meta 2024): 80 layers, hidden 8192, 64 query heads in 8 KV groups
/// of 8, head dim 128, SwiGLU ffn 28672.
const LLAMA3_70B: [(&str, usize); 7] =
    [("batch", 16), ("seq", 2048), ("hidden", 8192), ("kvheads", 8), ("group", 8), ("hdim", 128), ("ffn", 28672)];
/// Llama-2-7B (Touvron et al. 2023): 32 layers, hidden 4096, 32 heads (no GQA),
/// head dim 128, ffn 11008.
const LLAMA2_7B: [(&str, usize); 7] =
    [("batch", 1), ("seq", 4096), ("hidden", 4096), ("kvheads", 32), ("group", 1), ("hdim", 128), ("ffn", 11008)];

fn opts(devices: usize, layers: usize) -> ModelOptions {
    let mut o = ModelOptions::new(
        devices,
        Network::parse("fat-tree:bw=50GB/s,lat=5us,peak=989TF/s,mfu=0.5,hbm=4.8TB/s").unwrap(),
    );
    o.layers = layers;
    o
}

const SERVE: Serving = Serving { generate: 256, swiftkv: 0.0 };

#[test]
fn kv_cache_per_token_matches_llama_3_70b_and_llama_2_7b() {
    // Llama-3-70B: 2 (K, V) · 8 KV heads · 128 · 2 B · 80 layers = 327680 B =
    // 320 KiB per token; Llama-2-7B (MHA): 2 · 32 · 128 · 2 B · 32 = 512 KiB.
    let m = llama(&LLAMA3_70B);
    let names: Vec<&str> = m.layers.iter().flat_map(|l| &l.kv).map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["K", "V"], "the cache is K and V, not Q nor the scores");
    assert_eq!(per_token(&m).kv_elements * 2.0 * 80.0, 320.0 * 1024.0);
    let p1 = inference::evaluate(&m, 1, 1, 1, &SERVE, &opts(1, 80));
    assert_eq!(p1.kv_bytes_per_token, 327680.0);
    // Tensor parallelism splits the KV heads: 8 ranks hold one head each.
    let p8 = inference::evaluate(&m, 8, 1, 1, &SERVE, &opts(8, 80));
    assert_eq!(p8.kv_bytes_per_token, 327680.0 / 8.0);
    // The whole cache of 16 sequences at 2048 + 256 tokens.
    let p = inference::evaluate(&m, 8, 1, 16, &SERVE, &opts(8, 80));
    assert_eq!(p.memory.kv_cache, 16.0 * 2304.0 * 327680.0 / 8.0);
    let m7 = llama(&LLAMA2_7B);
    assert_eq!(per_token(&m7).kv_elements * 2.0 * 32.0, 512.0 * 1024.0);
    // Parameters per block: Wq, Wo 8192²; Wk, Wv 8192·1024; three 8192·28672
    // SwiGLU matrices; two norms: 855 654 400 (× 80 = 68.45 B; with the 2 × 128256
    // × 8192 embeddings, Meta's 70.55 B).
    assert_eq!(m.psi_dense(), 855_654_400.0);
    assert_eq!(p1.memory.weights, 2.0 * 80.0 * 855_654_400.0);
}

#[test]
fn prefill_flops_are_two_per_weight_and_token_plus_attention() {
    // Forward flops per token ≈ 2Ψ (every weight one multiply-add) plus, per
    // (query, key) pair, QKᵀ and P·V: 2 · 2 · heads · hdim (Kaplan et al. 2020,
    // Table 1, counting P·V beside the logits); the rest is element-wise (exp and
    // the softmax sum: 2 per pair and head).
    let m = llama(&LLAMA3_70B);
    let pt = per_token(&m);
    let psi = m.psi_dense();
    assert!(pt.linear_flops >= 2.0 * psi && pt.linear_flops < 1.001 * 2.0 * psi, "{}", pt.linear_flops / psi);
    let heads = 64.0 * 128.0;
    assert!(pt.pair_flops >= 4.0 * heads && pt.pair_flops < 4.0 * heads + 8.0 * 64.0, "{}", pt.pair_flops);
    let o = opts(8, 80);
    let p = inference::evaluate(&m, 1, 8, 2, &SERVE, &o);
    let want = 80.0 * 2.0 * (2048.0 * pt.linear_flops + 2048.0 * 2048.0 * pt.pair_flops);
    assert!((p.prefill_flops - want).abs() < 1e-9 * want);
    // Compute-bound: the time is the flops at the rate (no tensor group, no comm).
    assert_eq!(p.prefill_comm, 0.0);
    assert!((p.prefill_time - want * o.network.gamma).abs() < 1e-9 * p.prefill_time);
}

#[test]
fn decode_at_batch_one_reads_the_weights_and_the_cache_at_memory_bandwidth() {
    // One sequence on one device: each step is memory-bound, its time the bytes of
    // the weights and of the cache so far over hbm= (the roofline: the 136.9 GB of
    // Llama-3-70B's 80 blocks at 4.8 TB/s, 28.5 ms, plus 0.67 GB of cache: 28.7 ms).
    let m = llama(&LLAMA3_70B);
    let o = opts(1, 80);
    let s = Serving { generate: 3, swiftkv: 0.0 };
    let p = inference::evaluate(&m, 1, 1, 1, &s, &o);
    assert_eq!(p.decode_steps, 2);
    assert_eq!(p.memory_bound_steps, 2);
    let w = 2.0 * 80.0 * 855_654_400.0;
    let want = (w + 2049.0 * 327680.0) / 4.8e12 + (w + 2050.0 * 327680.0) / 4.8e12;
    assert!((p.decode_time - want).abs() < 1e-12, "{} vs {want}", p.decode_time);
    assert!((p.time_per_token - 0.0287).abs() < 0.0001, "{}", p.time_per_token);
    assert!((p.latency - p.prefill_time - p.decode_time).abs() < 1e-12);
    assert!((p.throughput - 3.0 / p.latency).abs() < 1e-9);
    // A large batch turns decode compute-bound: no memory-bound step, and a
    // step's cost spread over 4096 sequences.
    let big = inference::evaluate(&m, 1, 1, 4096, &s, &o);
    assert_eq!(big.memory_bound_steps, 0);
    // (the ridge: 28.7 ms of memory against 0.29 ms of flops per token, ~100×)
    assert!(big.decode_time / 4096.0 < p.decode_time / 90.0);
}

#[test]
fn tensor_parallel_decode_runs_two_all_reduces_per_layer() {
    // Megatron's layer: the attention output and the MLP output are partial sums
    // over the tensor group, one all-reduce each per layer and step, of batch ×
    // hidden fp16 values: NCCL's launch latency (4 µs) and a ring of 2(t−1) steps
    // of 0.5 µs inside the node, and 2(t−1)/t of the buffer (inside one node
    // NCCL's tree is a chain of as many steps and more bytes: the ring wins).
    let m = llama(&LLAMA3_70B);
    let o = opts(8, 80);
    let s = Serving { generate: 11, swiftkv: 0.0 };
    let p = inference::evaluate(&m, 8, 1, 16, &s, &o);
    let ar = 4e-6 + 14.0 * 0.5e-6 + 14.0 / 8.0 * 16.0 * 8192.0 * 2.0 / 300e9;
    let want = 10.0 * 80.0 * 2.0 * ar;
    assert!((p.decode_comm - want).abs() < 1e-12, "{} vs {want}", p.decode_comm);
    let ar_prefill = 4e-6 + 14.0 * 0.5e-6 + 14.0 / 8.0 * 16.0 * 2048.0 * 8192.0 * 2.0 / 300e9;
    assert!((p.prefill_comm - 80.0 * 2.0 * ar_prefill).abs() < 1e-9);
    // Tensor parallelism divides the weights per device by 8.
    assert_eq!(p.memory.weights, 2.0 * 80.0 * 855_654_400.0 / 8.0 + 2.0 * 80.0 * 2.0 * 8192.0 * 7.0 / 8.0);
}

#[test]
fn gqa_bounds_the_tensor_degree_by_the_kv_heads() {
    // 8 KV heads split over at most 8 ranks: on 16 devices, tensor 16 is no plan.
    let m = llama(&LLAMA3_70B);
    let plans = inference::search(&m, &Default::default(), &SERVE, &opts(16, 80));
    let degrees: Vec<usize> = plans.iter().map(|p| p.tensor).collect();
    assert!(!degrees.contains(&16) && degrees.contains(&8), "{degrees:?}");
    assert!(inference::invalid(&m, 16, 1).unwrap().contains("kvheads"));
    // Replicas split the batch: 16 sequences over 2 replicas of tensor 8.
    let p = plans.iter().find(|p| p.tensor == 8 && p.pipeline == 1).unwrap();
    assert_eq!((p.replicas, p.batch_per_replica), (2, 8));
}

#[test]
fn the_largest_batch_fits_and_one_more_does_not() {
    let m = llama(&LLAMA3_70B);
    let mut o = opts(8, 80);
    o.mem_per_device = Some(141_000_000_000);
    let plans = inference::search(&m, &Default::default(), &SERVE, &o);
    assert_eq!(plans.len(), 10, "tensor × pipeline dividing 8: 1×1, 2, 4, 8; 2×1, 2, 4; 4×1, 2; 8×1");
    for p in &plans {
        let max = p.max_batch_per_replica.unwrap();
        if max == 0 {
            continue;
        }
        let sh = inference::Shape { tensor: p.tensor, pipeline: p.pipeline, expert: p.expert, replicas: p.replicas };
        assert!(inference::evaluate_shape(&m, &sh, max, &SERVE, &o).fits, "{sh:?}");
        assert!(!inference::evaluate_shape(&m, &sh, max + 1, &SERVE, &o).fits, "{sh:?}");
    }
    // 136.9 GB of weights on one 141 GB H200 leave room for at most
    // ⌊4.1 GB / (2304 tokens × 320 KiB)⌋ = 5 sequences (fewer with the prefill's tensors).
    let t1 = plans.iter().find(|p| p.tensor == 1 && p.pipeline == 1).unwrap();
    let room = ((141e9_f64 - 2.0 * 80.0 * 855_654_400.0) / (2304.0 * 327680.0)).floor() as usize;
    assert_eq!(room, 5);
    let max1 = t1.max_batch_per_replica.unwrap();
    assert!((1..=room).contains(&max1), "{max1}");
    assert_eq!((t1.replicas, t1.batch_per_replica), (8, 2));
    assert_eq!(t1.fits, max1 >= 2);
}

#[test]
fn swiftkv_halves_the_prefill_of_llama_3_1_8b() {
    // SwiftKV (Qiao et al. 2024) on Llama-3.1-8B (32 layers, hidden 4096, 8 KV heads,
    // ffn 14336): with half the layers' prefill reduced to their KV projections the
    // prefill compute drops by "up to 50%": exactly 16 layers × (full − KV) flops.
    let dims =
        [("batch", 1), ("seq", 8192), ("hidden", 4096), ("kvheads", 8), ("group", 4), ("hdim", 128), ("ffn", 14336)];
    let m = llama(&dims);
    let o = opts(1, 32);
    let full = inference::evaluate(&m, 1, 1, 1, &SERVE, &o);
    let swift = inference::evaluate(&m, 1, 1, 1, &Serving { generate: 256, swiftkv: 0.5 }, &o);
    let pt = per_token(&m);
    // KV flops per token: the K and V projections (2 · 4096 · 2 · 8 · 128) and the norm.
    assert!(pt.kv_flops >= 2.0 * 4096.0 * 2048.0 && pt.kv_flops < 2.0 * 4096.0 * 2048.0 + 8.0 * 4096.0);
    let cut = 1.0 - swift.prefill_flops / full.prefill_flops;
    assert!(cut > 0.45 && cut < 0.5, "{cut}");
    let per_layer = full.prefill_flops / 32.0;
    let want = 16.0 * per_layer + 16.0 * 8192.0 * pt.kv_flops;
    assert!((swift.prefill_flops - want).abs() < 1e-9 * want);
    // Decode and the KV cache are unchanged.
    assert_eq!(swift.decode_time, full.decode_time);
    assert_eq!(swift.memory.kv_cache, full.memory.kv_cache);
}

fn tcc(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tcc")).args(args).output().unwrap()
}

const NET: &str = "fat-tree:bw=50GB/s,lat=5us,peak=989TF/s,mfu=0.5,hbm=4.8TB/s";

fn llama_args() -> Vec<String> {
    let mut a: Vec<String> = ["plan-model", EXAMPLE, "--inference", "--devices", "8", "--mem-per-device", "141GB"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(["--network".into(), NET.into(), "--layers".into(), "80".into()]);
    for (n, s) in LLAMA3_70B {
        a.extend(["--dim".to_string(), format!("{n}={s}")]);
    }
    a
}

#[test]
fn cli_inference_text_json_and_errors() {
    let args = llama_args();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tcc(&argv);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("KV cache 327680 B (320.00 KiB) per token and sequence"), "{text}");
    assert!(text.contains("generating 256 tokens each"), "{text}");
    assert!(text.contains("best: tensor"), "{text}");
    let mut j = argv.clone();
    j.extend(["--json", "--generate", "64", "--swiftkv", "0.5"]);
    let out = tcc(&j);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["models"][0];
    assert_eq!(m["mode"], "inference");
    assert_eq!(m["serving"]["generate"], 64);
    assert_eq!(m["serving"]["swiftkv"], 0.5);
    assert_eq!(m["plans"][0]["decode_steps"], 63);
    assert_eq!(m["units"]["time"], "seconds");
    let code = |extra: &[&str], base: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        let o = tcc(&a);
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    // Hints an inference plan cannot honour are refused, not ignored.
    let gpt = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_block.tc");
    let e = code(&[], &["plan-model", gpt, "--inference", "--devices", "8"]);
    assert!(e.contains("E0819") && e.contains("zero"), "{e}");
    // Training-only network keys are refused.
    let e = code(
        &["--network", "fat-tree:bw=50GB/s,flops=100TF/s,pcie=10GB/s"],
        &["plan-model", EXAMPLE, "--inference", "--devices", "8"],
    );
    assert!(e.contains("E0820") && e.contains("pcie"), "{e}");
    // SwiftKV's share must skip at least one layer and leave one.
    let e = code(&["--swiftkv", "1"], &argv);
    assert!(e.contains("E0811"), "{e}");
    let e = code(&["--swiftkv", "0.5", "--layers", "1"], &["plan-model", EXAMPLE, "--inference", "--devices", "8"]);
    assert!(e.contains("E0811") && e.contains("skips no layer"), "{e}");
    let e = code(&["--generate", "0"], &argv);
    assert!(e.contains("E0815"), "{e}");
    let e = code(&["--generate", "4000000000"], &argv);
    assert!(e.contains("E0811"), "{e}");
    // Training options conflict with --inference; --generate needs it.
    let e = code(&["--recompute", "full"], &argv);
    assert!(e.contains("cannot be used with"), "{e}");
    let e = code(&["--generate", "5"], &["plan-model", EXAMPLE, "--devices", "8"]);
    assert!(e.contains("--inference"), "{e}");
    // A model without a seq dim has no prompt.
    let dir = std::env::temp_dir().join(format!("tcc_inf_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("mlp.tc");
    std::fs::write(
        &f,
        "model mlp { dims batch = 2, hidden = 4, ffn = 8; index b : batch; index m : hidden; index f : ffn;\n\
         input tensor X[b,m] : f32; param tensor W[m,f] : f32; output tensor Y[b,f] : f32;\n\
         layer l { Y[b,f] = X[b,m] * W[m,f]; } }\n",
    )
    .unwrap();
    let e = code(&[], &["plan-model", f.to_str().unwrap(), "--inference", "--devices", "2"]);
    assert!(e.contains("E0818"), "{e}");
    // A `tensor` hint fixes the degree; a model without a batch dim serves one
    // sequence, so one replica.
    let src = std::fs::read_to_string(EXAMPLE).unwrap();
    let hinted = dir.join("hinted.tc");
    std::fs::write(&hinted, src.replacen("  layer attention {", "  parallel { tensor = 2; }\n  layer attention {", 1))
        .unwrap();
    let out =
        tcc(&["plan-model", hinted.to_str().unwrap(), "--inference", "--devices", "8", "--dim", "batch=8", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plans = v["models"][0]["plans"].as_array().unwrap();
    assert!(plans.iter().all(|p| p["tensor"] == 2 && p["replicas"] == 4), "{plans:?}");
    let e = code(&[], &["plan-model", hinted.to_str().unwrap(), "--inference", "--devices", "8", "--dim", "batch=2"]);
    assert!(e.contains("E0812") && e.contains("replicas: 4 does not divide batch = 2"), "{e}");
}

#[test]
fn the_vocabulary_completes_llama_3_70b() {
    // With its 128256-token embedding and output layer (2 × 128256 × 8192), the
    // 80 blocks make Llama-3-70B's 70 553 698 304 parameters (Hugging Face counts
    // 70 553 706 496: the final norm's 8192 more). Decoding computes the last
    // position's logits: 2·h·V/t flops per sequence and step, 6 B per logit kept.
    let m = llama(&LLAMA3_70B);
    let mut o = opts(8, 80);
    let plain = inference::evaluate(&m, 8, 1, 16, &SERVE, &o);
    o.vocab = Some(128256);
    let p = inference::evaluate(&m, 8, 1, 16, &SERVE, &o);
    let tables = 2.0 * 128256.0 * 8192.0;
    assert_eq!(80.0 * 855_654_400.0 + tables, 70_553_698_304.0);
    assert!((p.memory.weights - plain.memory.weights - 2.0 * tables / 8.0).abs() < 1.0);
    assert!((p.prefill_flops - plain.prefill_flops - 16.0 * 2.0 * 8192.0 * 128256.0 / 8.0).abs() < 1.0);
    assert!((p.memory.activations - plain.memory.activations - 6.0 * 16.0 * 128256.0 / 8.0).abs() < 1.0);
    assert!(p.decode_time > plain.decode_time && p.decode_comm > plain.decode_comm);
}
