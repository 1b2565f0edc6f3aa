//! Sharded execution of model layers: Ulysses attention and an expert-parallel MoE
//! layer on in-process ranks (and MPI with the `mpi` feature) equal the interpreter,
//! and the words each rank sends equal the schedule's prediction and the plan's.

use tcc::exec::model::{self as exec, Style};
use tcc::plan::model::{analysis, evaluate, Config, ModelOptions};
use tcc::sema::hir::ModelId;
use tcc_runtime::comm::{threads, Backend};

fn load(name: &str) -> tcc::sema::hir::Hir {
    let src = std::fs::read_to_string(format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    tcc::compile(&src, "x").0.unwrap()
}

fn check(name: &str, style: Style, p: usize) -> u64 {
    let hir = load(name);
    let steps = exec::schedule(&hir, ModelId::new(0), style).unwrap();
    let unit = hir.models[ModelId::new(0)].unit;
    let inputs = tcc::interp::random_inputs(&hir, unit, 7).unwrap();
    let want = tcc::interp::run_unit(&hir, unit, &inputs).unwrap();
    let runs = threads::run(p, |rank| {
        let c = rank.comm(Backend::Threads);
        exec::run_sharded(&hir, ModelId::new(0), &steps, &inputs, c.as_ref()).unwrap()
    })
    .unwrap();
    for (r, run) in runs.iter().enumerate() {
        let rel = exec::max_rel_diff(&run.outputs, &want);
        assert!(rel <= 1e-12, "{name} rank {r}: {rel}");
        assert_eq!(run.words_sent, exec::predicted_words(&hir, &steps, p, r), "{name} rank {r} of {p}");
    }
    println!("{name} on {p} ranks: {} words sent per rank (predicted equal)", runs[0].words_sent);
    runs[0].words_sent
}

/// Forward all-to-all elements per rank the model plan predicts for `group`.
fn plan_words(name: &str, c: &Config) -> f64 {
    let hir = load(name);
    let m = analysis::analyze(&hir, ModelId::new(0));
    let o = ModelOptions::new(c.devices(), tcc::plan::Network::fat_tree());
    let plan = evaluate(&m, c, &o);
    plan.comm
        .iter()
        .filter(|x| x.phase == "forward" && x.kind == tcc::plan::model::Coll::AllToAll)
        .map(|x| x.bytes_per_rank / x.bytes_per_elem)
        .sum()
}

#[test]
fn ulysses_attention_equals_the_interpreter_and_the_plan() {
    for p in [2, 4] {
        let measured = check("long_seq.tc", Style::Ulysses, p);
        let c = Config { sequence: p, ..Default::default() };
        assert_eq!(measured as f64, plan_words("long_seq.tc", &c), "P = {p}");
    }
    check("gpt_block.tc", Style::Ulysses, 2);
}

/// Grouped-query attention (heads written `kvheads × group`): Ulysses splits the
/// key/value heads inside attention, each rank keeping whole query groups; the
/// result equals the interpreter's and the words equal the plan's all-to-alls.
#[test]
fn ulysses_with_grouped_query_attention_equals_the_interpreter_and_the_plan() {
    // kvheads = 2 in the shipped example: P = 2 splits them evenly.
    let measured = check("llama_block.tc", Style::Ulysses, 2);
    // Q (b·s·k·g·e = 2·8·2·2·2 = 128), K and V (2·8·2·2 = 64 each) and C (128)
    // change split, each rank sending (P − 1)/P² of each: 384/4 = 96 words.
    assert_eq!(measured, 96);
    let c = Config { sequence: 2, ..Default::default() };
    assert_eq!(measured as f64, plan_words("llama_block.tc", &c));
    // More ranks than key/value heads: some ranks hold no head, still equal.
    check("llama_block.tc", Style::Ulysses, 4);
}

#[test]
fn expert_parallel_moe_equals_the_interpreter_and_the_plan() {
    for p in [2, 4] {
        let measured = check("moe_block.tc", Style::Expert, p);
        let c = Config { data: p, expert: p, ..Default::default() };
        assert_eq!(measured as f64, plan_words("moe_block.tc", &c), "P = {p}");
    }
}

#[test]
fn cli_plans_and_executes() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let ex = |n: &str| format!("{}/examples/{n}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(tcc)
        .args(["plan-model", &ex("moe_block.tc"), "--devices", "4", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["models"][0]["plans"][0]["config"]["expert"], 4);
    let out = std::process::Command::new(tcc)
        .args(["plan-model", &ex("long_seq.tc"), "--execute", "ulysses", "--ranks", "4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("rank 3: all-to-all words sent 48 (predicted 48)"), "{text}");
    let out =
        std::process::Command::new(tcc).args(["plan-model", &ex("matmul.tc"), "--devices", "4"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[cfg(feature = "mpi")]
#[test]
fn mpi_ranks_execute_ulysses_and_experts() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    for (file, style) in [("long_seq.tc", "ulysses"), ("moe_block.tc", "expert")] {
        for np in ["2", "4"] {
            let out = std::process::Command::new("mpirun")
                .args(["--allow-run-as-root", "--oversubscribe", "-np", np, tcc, "plan-model"])
                .arg(format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR")))
                .args(["--execute", style, "--backend", "mpi"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{file} on {np}: {text}{}", String::from_utf8_lossy(&out.stderr));
            assert!(text.contains(&format!("on {np} ranks")) && !text.contains("MISMATCH"), "{text}");
        }
    }
}

#[test]
fn a_router_weight_is_dense_and_expert_execution_keeps_it_whole() {
    let path = format!("{}/tests/models/moe_router.tc", env!("CARGO_MANIFEST_DIR"));
    let hir = tcc::compile(&std::fs::read_to_string(path).unwrap(), "x").0.unwrap();
    let m = analysis::analyze(&hir, ModelId::new(0));
    // Wr[hidden=8, experts=4] is dense; W1, W2 [experts=4, 8, 16] are the experts'.
    assert_eq!(m.psi_dense(), 32.0);
    assert_eq!(m.psi_expert(), 2.0 * 4.0 * 8.0 * 16.0);
    let wr = m.params.iter().find(|p| p.name == "Wr").unwrap();
    assert!(!wr.expert && m.params.iter().filter(|p| p.name != "Wr").all(|p| p.expert));
    // The sharded run (router outside the expert statements) equals the interpreter.
    let steps = exec::schedule(&hir, ModelId::new(0), Style::Expert).unwrap();
    let unit = hir.models[ModelId::new(0)].unit;
    let inputs = tcc::interp::random_inputs(&hir, unit, 7).unwrap();
    let want = tcc::interp::run_unit(&hir, unit, &inputs).unwrap();
    for p in [2, 4] {
        let runs = threads::run(p, |rank| {
            let c = rank.comm(Backend::Threads);
            exec::run_sharded(&hir, ModelId::new(0), &steps, &inputs, c.as_ref()).unwrap()
        })
        .unwrap();
        for (r, run) in runs.iter().enumerate() {
            assert!(exec::max_rel_diff(&run.outputs, &want) <= 1e-12, "rank {r} of {p}");
            assert_eq!(run.words_sent, exec::predicted_words(&hir, &steps, p, r), "rank {r} of {p}");
        }
    }
}

/// Layers `--execute` cannot run are refused with a reason and a hint about
/// splitting, not one about a disagreeing run; a file without a model is E0810.
#[test]
fn execute_refusals_name_the_reason() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let ex = |n: &str| format!("{}/examples/{n}", env!("CARGO_MANIFEST_DIR"));
    let run = |file: &str| {
        std::process::Command::new(tcc).args(["plan-model", &ex(file), "--execute", "ulysses"]).output().unwrap()
    };
    let out = run("moe_block.tc");
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("E0814") && e.contains("needs a `seq` dim") && e.contains("cannot be split"), "{e}");
    let out = run("matmul.tc");
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("E0810") && e.contains("no `model` block"), "{e}");
}

/// Planning options that a sharded run does not use are refused with `--execute`
/// rather than ignored.
#[test]
fn planning_options_are_refused_with_execute() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let ex = format!("{}/examples/gpt_block.tc", env!("CARGO_MANIFEST_DIR"));
    for extra in [
        &["--micro-batches", "2"][..],
        &["--micro-batch", "2"],
        &["--recompute", "full"],
        &["--zeropp", "all"],
        &["--vocab", "32000"],
        &["--compress", "1bit-adam"],
    ] {
        let out = std::process::Command::new(tcc)
            .args(["plan-model", &ex, "--execute", "tensor"])
            .args(extra)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {e}");
        assert!(e.contains("cannot be used with") && e.contains(extra[0]), "{extra:?}: {e}");
    }
}
