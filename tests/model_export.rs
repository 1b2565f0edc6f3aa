//! `tcc plan-model --emit deepspeed|megatron|torch` and the JSON rank map: what is
//! written is self-consistent and agrees with the plan it came from.

use assert_cmd::Command;

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

fn out(args: &[&str]) -> String {
    let o = tcc().arg("plan-model").args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

const GPT: [&str; 4] = ["examples/gpt_block.tc", "--devices", "16", "--layers=8"];

#[test]
fn deepspeed_config_batch_sizes_multiply_out() {
    let text = out(&[&GPT[..], &["--emit", "deepspeed"]].concat());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let code = &v["tcc_model_code"];
    let model_par = code["tensor_parallel_size"].as_u64().unwrap()
        * code["sequence_parallel_size"].as_u64().unwrap()
        * code["pipeline_stages"].as_u64().unwrap();
    let dp = 16 / model_par;
    // DeepSpeed's rule: train_batch_size = micro batch per GPU × accumulation × data ranks.
    assert_eq!(
        v["train_batch_size"].as_u64().unwrap(),
        v["train_micro_batch_size_per_gpu"].as_u64().unwrap() * v["gradient_accumulation_steps"].as_u64().unwrap() * dp,
        "{text}"
    );
    assert!(v["zero_optimization"]["stage"].as_u64().unwrap() <= 3);
}

#[test]
fn megatron_arguments_fit_the_devices_and_the_batch() {
    let text = out(&[&GPT[..], &["--emit", "megatron"]].concat());
    let arg = |name: &str| -> Option<u64> {
        let words: Vec<&str> = text.split_whitespace().collect();
        words.iter().position(|w| *w == name).map(|i| words[i + 1].parse().unwrap())
    };
    let (tp, pp) = (arg("--tensor-model-parallel-size").unwrap(), arg("--pipeline-model-parallel-size").unwrap());
    let cp = arg("--context-parallel-size").unwrap_or(1);
    assert_eq!(16 % (tp * pp * cp), 0, "{text}");
    let dp = 16 / (tp * pp * cp);
    let (mbs, gbs) = (arg("--micro-batch-size").unwrap(), arg("--global-batch-size").unwrap());
    assert_eq!(gbs % (mbs * dp), 0, "{text}");
    assert_eq!(arg("--num-layers"), Some(8));
    assert!(text.contains("TCC_MEGATRON_ARGS=(") && text.trim_end().ends_with(')'), "{text}");
}

#[test]
fn torch_mesh_and_json_rank_map_cover_every_device_once() {
    let text = out(&[&GPT[..], &["--emit", "torch"]].concat());
    let line = text.lines().find(|l| l.starts_with("mesh = init_device_mesh")).unwrap();
    let shape: u64 = line
        .split('(')
        .nth(2)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .filter_map(|x| x.trim().parse::<u64>().ok())
        .product();
    assert_eq!(shape, 16, "{line}");
    let json: serde_json::Value = serde_json::from_str(&out(&[&GPT[..], &["--json"]].concat())).unwrap();
    let m = &json["models"][0];
    assert_eq!(m["units"]["memory"], "bytes");
    let map = &m["best_plan_ranks"];
    let sizes: Vec<u64> = map["sizes"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let ranks = map["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 16);
    let mut seen = std::collections::HashSet::new();
    for (r, c) in ranks.iter().enumerate() {
        let c: Vec<u64> = c.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert!(c.iter().zip(&sizes).all(|(x, s)| x < s), "{c:?} {sizes:?}");
        // r = ((pp*DP + dp)*SP + sp)*TP + tp
        let back = ((c[0] * sizes[1] + c[1]) * sizes[2] + c[2]) * sizes[3] + c[3];
        assert_eq!(back, r as u64);
        assert!(seen.insert(c));
    }
}

#[test]
fn what_a_target_cannot_run_is_refused() {
    // No DeepSpeed-runnable plan of GPT-3 175B fits 60 GB on 64 devices in this search
    // (at 80 GB one does since NCCL buffers count: the interleaved plan that was its
    // layout's best no longer fits, and 1F1B, which DeepSpeed runs, takes its place).
    let o = tcc()
        .args(["plan-model", "examples/gpt_block.tc", "--devices", "64", "--dim", "batch=512", "--dim", "seq=2048"])
        .args(["--dim", "hidden=12288", "--dim", "heads=96", "--dim", "hdim=128", "--dim", "ffn=49152"])
        .args(["--layers", "96", "--mem-per-device", "60GB", "--emit", "deepspeed"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("E0817"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tcc().arg("plan-model").args(GPT).args(["--emit", "bogus"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("E0811"));
    let o = tcc().arg("plan-model").args(GPT).args(["--emit", "torch", "--json"]).output().unwrap();
    assert!(!o.status.success());
    // --emit writes one plan: --top would be accepted and ignored, so it is refused.
    let o = tcc().arg("plan-model").args(GPT).args(["--emit", "torch", "--top", "3"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--top"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn sizes_bandwidths_and_compute_rates_need_their_units() {
    let run = |extra: &[&str]| tcc().arg("plan-model").args(GPT).args(extra).output().unwrap();
    for (extra, code) in [
        (&["--mem-per-device", "80"][..], "E0700"),
        (&["--intra-bw", "300"][..], "E0801"),
        (&["--network", "fat-tree:bw=400Gbps"][..], "E0801"),
    ] {
        let o = run(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && (err.contains(code) || err.contains("no unit")), "{extra:?}: {err}");
    }
    assert!(run(&["--mem-per-device", "80GB", "--network", "fat-tree:bw=400Gbps,flops=300TF/s"]).status.success());
}

/// `--recompute full-flash` (full recomputation of layers running flash attention)
/// is written as each target can say it: Megatron's full recomputation with
/// `--use-flash-attn`, torch's checkpoint wrapper with SDPA named, DeepSpeed's
/// checkpointing with `flash_attention` under `tcc_model_code` (its config does
/// not choose the kernel); plain `full` claims no flash attention. A model
/// without attention scores has nothing for flash attention to drop: E0823.
#[test]
fn full_flash_recomputation_is_exported_as_each_target_can_say_it() {
    let flash = ["--recompute", "full-flash"];
    let meg = out(&[&GPT[..], &flash[..], &["--emit", "megatron"]].concat());
    assert!(meg.contains("--recompute-granularity full") && meg.contains("--use-flash-attn"), "{meg}");
    let meg_full = out(&[&GPT[..], &["--recompute", "full", "--emit", "megatron"]].concat());
    assert!(meg_full.contains("--recompute-granularity full") && !meg_full.contains("flash"), "{meg_full}");
    let torch = out(&[&GPT[..], &flash[..], &["--emit", "torch"]].concat());
    assert!(torch.contains("checkpoint_wrapper") && torch.contains("scaled_dot_product_attention"), "{torch}");
    let ds: serde_json::Value =
        serde_json::from_str(&out(&[&GPT[..], &flash[..], &["--emit", "deepspeed"]].concat())).unwrap();
    assert_eq!(ds["tcc_model_code"]["activation_checkpointing"], "full-flash");
    assert_eq!(ds["tcc_model_code"]["flash_attention"], true);
    assert!(ds["activation_checkpointing"].is_object());
    let ds_full: serde_json::Value =
        serde_json::from_str(&out(&[&GPT[..], &["--recompute", "full", "--emit", "deepspeed"]].concat())).unwrap();
    assert_eq!(ds_full["tcc_model_code"]["flash_attention"], false);
    let o = tcc()
        .args(["plan-model", "examples/moe_block.tc", "--devices", "4", "--recompute", "full-flash"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("E0823") && err.contains("--recompute full"), "{err}");
}
