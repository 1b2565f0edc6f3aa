//! Plans checked against reality: executing a plan on the runtime (`tcc run --plan`)
//! gives the interpreter's numbers, and the words each rank sends and receives in
//! every operation equal the plan's prediction (`CommOp::rank_words`) exactly.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use tcc::exec::planned::{execute_plan, plan_for, OpRecord, PlanRunOptions};
use tcc::sema::hir::{Hir, TensorId, UnitId};
use tcc::tensor::Dense;
use tcc_runtime::comm::Backend;

/// Cheap communication, slow flops: the planner spreads even small problems.
const CHEAP_NET: &str = "fat-tree:bw=1000GB/s,lat=1ns,flops=1MF/s";

const MATMUL: &str = "range M = 48; range K = 40; range N = 36;
index i : M; index k : K; index j : N;
input tensor A[i,k] : f64; input tensor B[k,j] : f64; output tensor C[i,j] : f64;
C[i,j] = A[i,k] * B[k,j];";

const TALL_SKINNY: &str = "range M = 2000; range K = 6; range N = 5;
index i : M; index k : K; index j : N;
input tensor A[i,k] : f64; input tensor B[k,j] : f64; output tensor C[i,j] : f64;
C[i,j] = A[i,k] * B[k,j];";

const INNER: &str = "range M = 7; range K = 900; range N = 6;
index i : M; index k : K; index j : N;
input tensor A[i,k] : f64; input tensor B[k,j] : f64; output tensor C[i,j] : f64;
C[i,j] = A[i,k] * B[k,j];";

const BATCHED: &str = "range Bt = 6; range M = 10; range K = 12; range N = 8;
index b : Bt; index i : M; index k : K; index j : N;
input tensor A[b,i,k] : f64; input tensor B[b,k,j] : f64; output tensor C[b,i,j] : f64;
C[b,i,j] = A[b,i,k] * B[b,k,j];";

const CCSD: &str = "range O = 4; range V = 6;
index i, j, k, l : O; index a, b, c, d : V;
input tensor T2[a,b,i,j] : f64 antisymmetric(a b)(i j);
input tensor W[k,l,i,j] : f64;
input tensor F[a,c] : f64;
input tensor G[k,l,c,d] : f64 antisymmetric(k l)(c d);
output tensor R[a,b,i,j] : f64;
output tensor E : f64;
R[a,b,i,j] = 0.5 * T2[a,b,k,l] * W[k,l,i,j];
R[a,b,i,j] += F[a,c] * T2[c,b,i,j] - F[b,c] * T2[c,a,i,j];
E = 0.25 * G[k,l,c,d] * T2[c,d,k,l];";

const FOUR_INDEX: &str = "range N = 6;
index p, q, r, s, a, b, c, d : N;
input tensor A[p,q,r,s] : f64 symmetric(p q)(r s);
input tensor C[a,p] : f64;
output tensor B[a,b,c,d] : f64 symmetric(a b)(c d);
B[a,b,c,d] = C[a,p] * C[b,q] * C[c,r] * C[d,s] * A[p,q,r,s];";

fn compile(src: &str) -> Hir {
    let (hir, diags) = tcc::compile(src, "t");
    hir.unwrap_or_else(|| panic!("{src}\n{diags:?}"))
}

/// Executes every unit of `src` on `p` threads ranks under the plan for `net` (and
/// the memory limit), checks the outputs against the interpreter and every op's
/// words against the prediction; returns the op kinds seen and the largest panel
/// count.
fn check(src: &str, p: usize, net: &str, mem: Option<u64>) -> (BTreeSet<&'static str>, usize) {
    let hir = compile(src);
    let opt = tcc::pipeline::optimize(&hir, &Default::default()).0;
    let popts = PlanRunOptions { ranks: p, network: net.into(), mem_per_rank: mem, stats: false };
    let mut kinds = BTreeSet::new();
    let mut panels = 1;
    for u in hir.units.ids() {
        let inputs = tcc::interp::random_inputs(&hir, u, 7).unwrap();
        let want = tcc::interp::run_unit(&hir, u, &inputs).unwrap();
        let plan = plan_for(&opt, u, p, &popts).unwrap_or_else(|e| panic!("{}", e.message));
        panels = panels.max(plan.steps.iter().map(|s| s.panels).max().unwrap_or(1));
        let by_opt: HashMap<TensorId, Dense> = inputs
            .iter()
            .map(|(t, v)| (opt.tensors.position(|x| x.name == hir.tensors[*t].name).unwrap(), v.clone()))
            .collect();
        let runs = tcc_runtime::comm::threads::run(p, |rank| {
            let comm = rank.comm(Backend::Threads);
            execute_plan(&opt, u, &plan, &by_opt, comm.as_ref()).unwrap_or_else(|e| panic!("{}", e.message))
        })
        .unwrap_or_else(|f| panic!("{f}"));
        let what = format!("unit {} on {p} ranks ({net})", hir.units[u].name);
        // Numbers: rank 0's outputs are the interpreter's.
        for (t, w) in &want {
            let name = &hir.tensors[*t].name;
            let ot = opt.tensors.position(|x| x.name == *name).unwrap();
            let got = &runs[0].outputs[&ot];
            assert_eq!(got.shape, w.shape, "{what}: {name}");
            let d = tcc::run::compare::rel_diff(&got.data, &w.data);
            assert!(d.rel <= 1e-12, "{what}: {name}[{}] = {}, interpreter {}", d.at, got.data[d.at], w.data[d.at]);
        }
        // Words: every op on every rank, exactly.
        let n = runs[0].ops.len();
        for (r, run) in runs.iter().enumerate() {
            assert_eq!(run.ops.len(), n, "{what}: ranks ran different op lists");
            for o in &run.ops {
                assert!(o.matches(), "{what}: rank {r} {o:?}");
            }
            let sent: u64 = run.ops.iter().map(|o| o.sent).sum();
            let recv: u64 = run.ops.iter().map(|o| o.recv).sum();
            let pred = plan.rank_words(r);
            assert_eq!((sent, recv), (pred.sent, pred.recv), "{what}: rank {r} totals");
            assert_eq!(run.ops.iter().map(OpRecord::moved).sum::<u64>(), pred.moved, "{what}: rank {r} charged words");
        }
        // Every planned op ran (unplanned redistributions move nothing).
        let planned: usize = plan.steps.iter().map(|s| s.ops.len()).sum();
        assert_eq!(runs[0].ops.iter().filter(|o| o.op.is_some()).count(), planned, "{what}");
        let total_sent: u64 = runs.iter().flat_map(|r| &r.ops).map(|o| o.sent).sum();
        let total_recv: u64 = runs.iter().flat_map(|r| &r.ops).map(|o| o.recv).sum();
        assert_eq!(total_sent, total_recv, "{what}: words are conserved");
        kinds.extend(runs[0].ops.iter().map(|o| o.kind));
    }
    (kinds, panels)
}

const PS: [usize; 6] = [1, 2, 3, 4, 6, 8];

#[test]
fn matmul_shapes_match_the_interpreter_and_the_prediction() {
    let mut kinds = BTreeSet::new();
    for src in [MATMUL, TALL_SKINNY, INNER] {
        for p in PS {
            kinds.extend(check(src, p, CHEAP_NET, None).0);
        }
    }
    // The default network keeps these small problems on few ranks (idle grid dims).
    check(MATMUL, 4, "fat-tree", None);
    assert!(kinds.contains("all-gather") && kinds.contains("reduce-scatter"), "{kinds:?}");
}

#[test]
fn chemistry_and_batched_programs_match() {
    let mut kinds = BTreeSet::new();
    for src in [CCSD, FOUR_INDEX, BATCHED] {
        for p in PS {
            kinds.extend(check(src, p, CHEAP_NET, None).0);
        }
    }
    for k in ["all-gather", "reduce-scatter", "reduce", "all-to-all"] {
        assert!(kinds.contains(k), "no {k} in {kinds:?}");
    }
}

/// A `distribute` hint that replicates A over g1: moving it to its stationary layout
/// needs no words (every rank holds its block), so the plan lists no all-to-all, and
/// the executor's conversion moves nothing.
const HINTED: &str = "range M = 48; range K = 40; range N = 36;
index i : M; index k : K; index j : N;
input tensor A[i,k] : f64; input tensor B[k,j] : f64; output tensor C[i,j] : f64;
grid G[2, 2];
distribute A[i,k] over G as [i:0];
C[i,j] = A[i,k] * B[k,j];";

#[test]
fn replicated_inputs_are_not_charged_for_copies_they_hold() {
    let hir = compile(HINTED);
    let opt = tcc::pipeline::optimize(&hir, &Default::default()).0;
    let popts = PlanRunOptions { ranks: 4, network: CHEAP_NET.into(), mem_per_rank: None, stats: false };
    let plan = plan_for(&opt, UnitId::new(0), 4, &popts).unwrap();
    assert!(
        plan.initial.iter().any(|(n, l)| opt.tensors[*n].name == "A" && l.replication() == 2),
        "{:?}",
        plan.initial
    );
    for op in plan.steps.iter().flat_map(|s| &s.ops) {
        assert!(op.kind != tcc::plan::OpKind::AllToAll || op.recv_total > 0, "{op:?}");
    }
    for p in [2, 4] {
        check(HINTED, p, CHEAP_NET, None);
    }
}

#[test]
fn panelled_gathers_match() {
    // A memory limit forces the gathers into panels.
    let mut most = 1;
    for p in [2, 4, 8] {
        let (_, panels) = check(MATMUL, p, CHEAP_NET, Some(24 * 1024));
        most = most.max(panels);
    }
    assert!(most > 1, "no plan used panels");
}

// ---------------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------------

fn tcc_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tcc")
}

fn write(dir: &Path, name: &str, src: &str) -> PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, src).unwrap();
    f
}

/// The numbers of two reports agree within `rtol` (text around them equal).
fn same_report(a: &str, b: &str, rtol: f64) {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    assert_eq!(la.len(), lb.len(), "{a}\n---\n{b}");
    for (x, y) in la.iter().zip(&lb) {
        for (u, v) in x.split_whitespace().zip(y.split_whitespace()) {
            match (u.parse::<f64>(), v.parse::<f64>()) {
                (Ok(p), Ok(q)) if u.contains('e') => {
                    assert!((p - q).abs() <= rtol * p.abs().max(q.abs()) || (p - q).abs() <= 1e-12, "`{x}` vs `{y}`")
                }
                _ => assert_eq!(u, v, "`{x}` vs `{y}`"),
            }
        }
    }
}

fn stdout(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn report_part(text: &str) -> String {
    text.lines().take_while(|l| !l.starts_with("stats:")).map(|l| format!("{l}\n")).collect()
}

#[test]
fn run_plan_stats_print_measured_and_predicted_words() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "ccsd.tc", CCSD);
    let want = stdout(Command::new(tcc_bin()).args(["run", "--interp"]).arg(&f));
    let text = stdout(
        Command::new(tcc_bin()).args(["run", "--ranks", "4", "--plan", "--network", CHEAP_NET, "--stats"]).arg(&f),
    );
    same_report(&report_part(&text), &want, 1e-12);
    assert!(text.contains("stats: 4 ranks, back end threads, executing the plan"), "{text}");
    assert!(text.contains("plan check: measured words equal the prediction exactly"), "{text}");
    for r in 0..4 {
        let line = text.lines().find(|l| l.starts_with(&format!("  rank {r}  "))).unwrap_or_else(|| panic!("{text}"));
        let num = |key: &str| -> u64 {
            let k = line.find(&format!("{key} = ")).unwrap();
            line[k + key.len() + 3..].split_whitespace().next().unwrap().parse().unwrap()
        };
        assert_eq!(num("words_sent"), num("predicted_sent"), "{line}");
        assert_eq!(num("words_received"), num("predicted_received"), "{line}");
    }
    // The memory limit reaches the planner; a limit nothing fits is the planner's error.
    let out = Command::new(tcc_bin())
        .args(["run", "--ranks", "2", "--plan", "--mem-per-rank", "64B"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("E0803"), "{}", String::from_utf8_lossy(&out.stderr));
    // Calls are not distributed by the plan: a clear error, not a wrong answer.
    let attention = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/attention.tc");
    let out = Command::new(tcc_bin()).args(["run", "--ranks", "2", "--plan"]).arg(&attention).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[E0723]"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    #[test]
    fn mpi_ranks_execute_the_plan_exactly() {
        let dir = tempfile::tempdir().unwrap();
        for (name, src) in [("ccsd.tc", CCSD), ("four_index.tc", FOUR_INDEX), ("mm.tc", MATMUL)] {
            let f = write(dir.path(), name, src);
            let want = stdout(Command::new(tcc_bin()).args(["run", "--interp"]).arg(&f));
            for np in [2, 4] {
                let text = stdout(
                    Command::new("mpirun")
                        .args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string(), tcc_bin()])
                        .args(["run", "--backend", "mpi", "--plan", "--network", CHEAP_NET, "--stats"])
                        .arg(&f)
                        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),
                );
                same_report(&report_part(&text), &want, 1e-12);
                assert!(text.contains(&format!("stats: {np} ranks, back end mpi-p2p, executing the plan")), "{text}");
                assert!(
                    text.contains("plan check: measured words equal the prediction exactly"),
                    "{name} on {np}: {text}"
                );
            }
        }
    }
}
