//! DeepSpeed-TED's duplicate-token dropping (Singh et al., ICS '23): with tensor
//! parallelism t the expert all-to-alls carry 1/t of the tokens every tensor
//! rank holds, and an all-gather over the tensor group restores them. Checked
//! against the α-β prices written out by hand, in the search, the CLI and the
//! exports.

mod common;

use assert_cmd::Command;
use tcc::plan::model::{analysis, evaluate, search, tp_dims, Config, ModelOptions, ModelPlan, StepComm};
use tcc::plan::Network;
use tcc::sema::hir::{ModelId, ParallelHints};

fn info(src: &str) -> analysis::ModelInfo {
    let (hir, d) = tcc::compile(src, "t");
    let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
    analysis::analyze(&hir, ModelId::new(0))
}

/// DeepSpeed-MoE's expert block with an ffn of 4 × hidden ([`common::moe_model`]).
fn moe(hidden: usize, experts: usize, groups: usize, tokens: usize, capacity: usize) -> String {
    common::moe_model(hidden, 4 * hidden, experts, groups, tokens, capacity)
}

fn opts(devices: usize) -> ModelOptions {
    ModelOptions::new(devices, Network::parse("fat-tree:bw=25GB/s,lat=5us,flops=150TF/s").unwrap())
}

fn of<'a>(p: &'a ModelPlan, group: &str, phase: &str) -> Vec<&'a StepComm> {
    p.comm.iter().filter(|x| x.group == group && x.phase == phase).collect()
}

#[test]
fn dropping_halves_the_expert_all_to_alls_and_adds_a_tensor_all_gather() {
    // 32 ranks: data 16 × tensor 2, 16 experts over 16 expert ranks; per rank one
    // group of 16 experts × 256 slots × 2048 = 8 388 608 elements in D and in E.
    let m = info(&moe(2048, 16, 16, 4096, 256));
    let o = opts(32);
    let base = Config { data: 16, tensor: 2, tensor_dims: tp_dims(&m), expert: 16, ..Default::default() };
    let dtd = Config { ted_dtd: true, ..base.clone() };
    assert_eq!(tcc::plan::model::invalid(&m, &dtd), None);
    let (plain, dropped) = (evaluate(&m, &base, &o), evaluate(&m, &dtd, &o));
    let n = 16.0 * 256.0 * 2048.0;
    for phase in ["forward", "backward"] {
        let (a, b) = (of(&plain, "expert", phase), of(&dropped, "expert", phase));
        assert_eq!((a.len(), b.len()), (2, 2), "{phase}: dispatch and combine");
        for (a, b) in a.iter().zip(&b) {
            // All-to-all over 16 ranks: (q − 1)/q of the buffer; fp16.
            assert_eq!(a.bytes_per_rank, 15.0 / 16.0 * 2.0 * n, "{}", a.what);
            assert_eq!(b.bytes_per_rank, 15.0 / 16.0 * 2.0 * n / 2.0, "{}", b.what);
            assert!(a.cross_node && b.cross_node, "the expert group spans 4 nodes");
        }
        // The all-gathers: n elements over the 2 tensor ranks of one node, one per tensor.
        let g: Vec<&StepComm> = of(&dropped, "tensor", phase).into_iter().filter(|x| x.what.contains("TED")).collect();
        assert_eq!(g.len(), 2, "{phase}");
        for x in g {
            assert_eq!((x.elements, x.bytes_per_rank, x.cross_node), (n, 0.5 * 2.0 * n, false), "{}", x.what);
        }
        assert!(of(&plain, "tensor", phase).iter().all(|x| !x.what.contains("TED")));
    }
    // By hand (NCCL-style α-β): the all-to-all over 4 nodes costs 4 µs + 15 × 5 µs
    // + its bytes at 25 GB/s; the all-gather inside a node 4 µs + 1 × 0.5 µs + its
    // bytes at 300 GB/s. Four of each per step (D and E, forward and backward).
    let a2a = |bytes: f64| 4e-6 + 15.0 * 5e-6 + bytes / 25e9;
    let gather = 4e-6 + 0.5e-6 + n / 300e9;
    let saved = 4.0 * (a2a(15.0 / 16.0 * 2.0 * n) - a2a(15.0 / 16.0 * n)) - 4.0 * gather;
    let got = plain.time_comm - dropped.time_comm;
    println!("TED dropping saves {:.1} µs per step (by hand {:.1} µs)", got * 1e6, saved * 1e6);
    assert!((got - saved).abs() < 1e-9 * plain.time_comm.max(1.0), "{got} vs {saved}");
    assert!(saved > 0.0);
    // Memory is unchanged: after the gather each tensor rank holds the tensor whole.
    assert_eq!(plain.memory.total, dropped.memory.total);
    // Full recomputation gathers again in its repeated forward.
    let full = |c: &Config| {
        let mut c = c.clone();
        c.pipe.recompute = tcc::plan::model::pipeline::Recompute::Full;
        evaluate(&m, &c, &o)
    };
    let again = of(&full(&dtd), "tensor", "recompute").iter().filter(|x| x.what.contains("TED")).count();
    assert_eq!(again, 2);
}

#[test]
fn the_search_drops_duplicates_where_the_all_to_all_leaves_the_node() {
    let m = info(&moe(2048, 16, 16, 4096, 256));
    let hints = ParallelHints { tensor: Some((2, None)), expert: Some(16), ..Default::default() };
    let plans = search(&m, &hints, &opts(32));
    let best = &plans[0];
    assert!(best.config.ted_dtd, "{}", best.config.describe());
    assert!(best.config.describe().contains("ted-dtd"));
    let without = evaluate(&m, &Config { ted_dtd: false, ..best.config.clone() }, &opts(32));
    assert!(best.time < without.time, "{} vs {}", best.time, without.time);
    // Without tensor parallelism nothing is duplicated: no plan drops.
    let hints = ParallelHints { tensor: Some((1, None)), ..Default::default() };
    assert!(search(&m, &hints, &opts(32)).iter().all(|p| !p.config.ted_dtd));
}

#[test]
fn dropping_is_refused_where_it_cannot_apply() {
    let m = info(&moe(64, 8, 8, 16, 4));
    let ok = Config { data: 8, tensor: 2, tensor_dims: tp_dims(&m), expert: 8, ted_dtd: true, ..Default::default() };
    assert_eq!(tcc::plan::model::invalid(&m, &ok), None);
    let why = |c: Config| tcc::plan::model::invalid(&m, &c).unwrap_or_default();
    assert!(why(Config { tensor: 1, ..ok.clone() }).contains("needs tensor and expert parallelism"));
    assert!(why(Config { expert: 1, ..ok.clone() }).contains("needs tensor and expert parallelism"));
    // 4 capacity slots do not split 8 ways (tensor 8 divides ffn = 256).
    assert!(
        why(Config { data: 2, tensor: 8, expert: 2, ..ok.clone() }).contains("tensor 8 does not divide capacity = 4")
    );
    // Tensor parallelism on the hidden dim splits D and E: nothing is duplicated.
    assert!(why(Config { tensor_dims: vec!["hidden".into()], ..ok.clone() }).contains("no expert all-to-all tensor"));
    // A dense model has no expert all-to-all.
    let dense = info(
        "model d { dims b = 4, ffn = 8; index i : b; index f : ffn; input tensor X[i] : f32; \
         param tensor W[f] : f32; output tensor Y[i,f] : f32; layer l { Y[i,f] = X[i] * W[f]; } }",
    );
    let c = Config { data: 2, tensor: 2, tensor_dims: tp_dims(&dense), expert: 2, ted_dtd: true, ..Default::default() };
    assert!(tcc::plan::model::invalid(&dense, &c).is_some());
}

fn write_hinted(dir: &std::path::Path) -> std::path::PathBuf {
    let src = moe(2048, 16, 16, 4096, 256);
    let body = src.trim_end().strip_suffix('}').unwrap();
    let path = dir.join("moe_ted.tc");
    std::fs::write(&path, format!("{body}\n  parallel {{ tensor = 2; expert = 16; zero = 1; }}\n}}\n")).unwrap();
    path
}

#[test]
fn cli_table_json_and_exports_show_the_dropping() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_hinted(dir.path());
    let run = |extra: &[&str]| {
        let o = Command::cargo_bin("tcc")
            .unwrap()
            .arg("plan-model")
            .arg(&path)
            .args(["--devices", "32", "--network", "fat-tree:bw=25GB/s,lat=5us,flops=150TF/s"])
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (ok, text, err) = run(&[]);
    assert!(ok, "{err}");
    assert!(text.contains("16+dtd"), "{text}");
    assert!(text.contains("ted-dtd") && text.contains("TED gather of dropped D"), "{text}");
    let (ok, json, err) = run(&["--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["models"][0]["plans"][0]["config"]["ted_dtd"], true);
    let (ok, ds, err) = run(&["--emit", "deepspeed"]);
    assert!(ok, "{err}");
    assert!(ds.contains("\"moe_drop_duplicate_tokens\": true"), "{ds}");
    // Megatron-LM cannot express it: the plan is passed over with the reason.
    let (ok, mg, err) = run(&["--emit", "megatron"]);
    let all = format!("{mg}{err}");
    assert!(all.contains("duplicate-token dropping is DeepSpeed's"), "ok={ok}: {all}");
}
