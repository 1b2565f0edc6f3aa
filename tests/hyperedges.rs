//! Summed hyperedges (issue 22): an index summed over three or more factors (a
//! diagonal gate on a bond, a CP or tensor-hypercontraction factor, the diagonal of
//! a matrix times vectors) is summed once over the product of all its factors, as
//! `numpy.einsum` does. Checked element by element against loops written here, for
//! the reference interpreter, the optimizer's binary steps, the JIT in every fusion
//! mode (GETT forced on), the GPU plan emulated on the host and the tiled executor;
//! and a network beyond the exact search through `tcc run --check`.

mod common;

use std::collections::HashMap;
use std::process::Command;
use tcc::codegen::llvm::{jit_run, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;
use tcc::sema::hir::{Hir, TensorId};
use tcc::tensor::Dense;

const N: usize = 5;
const M: usize = 4;

const SRC: &str = "range N = 5;
range M = 4;
index i, j, k, l : N;
index p : M;
input tensor A[i,j] : f64;
input tensor B[j,k] : f64;
input tensor D[j] : f64;
input tensor E[j,k] : f64;
input tensor F[k,l] : f64;
input tensor P[p,i] : f64;
input tensor Q[p,j] : f64;
input tensor S[p,k] : f64;
input tensor X[i,j,k] : f64;
output tensor Z : f64;
output tensor C[i,l] : f64;
output tensor W : f64;
output tensor V : f64;
output tensor T[l] : f64;
output tensor G[i,l] : f64;
output tensor H[i] : f64;
Z = A[i,j] * B[j,k] * D[j];
C[i,l] = A[i,j] * B[j,k] * D[j] * E[j,k] * F[k,l];
W = P[p,i] * Q[p,j] * S[p,k] * X[i,j,k];
V = D[j] * D[j] * D[j] + 0.5 * D[j] * Q[p,j] * Q[p,j];
T[l] = A[i,i] * B[i,k] * D[i] * F[k,l];
G[i,l] = A[i,j] * D[j] * (B[j,l] * E[j,l] + F[j,l]);
H[i] = A[i,j] * D[j] * exp((B[j,k] * E[j,k] * D[j]));
";

/// The first four statements: products of plain tensors without diagonals.
fn products_only() -> String {
    let keep = |l: &&str| !["T", "G", "H"].iter().any(|t| l.contains(&format!("tensor {t}[")) || l.starts_with(t));
    SRC.lines().filter(keep).collect::<Vec<_>>().join("\n") + "\n"
}

fn tensor(hir: &Hir, name: &str) -> TensorId {
    hir.tensors.position(|t| t.name == name).unwrap()
}

/// Every output by loops over every index of its term.
fn expected(hir: &Hir, x: &HashMap<TensorId, Dense>) -> HashMap<&'static str, Vec<f64>> {
    let g = |name: &str| x[&tensor(hir, name)].data.clone();
    let (a, b, d, e, f) = (g("A"), g("B"), g("D"), g("E"), g("F"));
    let (p, q, s, xx) = (g("P"), g("Q"), g("S"), g("X"));
    let m2 = |t: &[f64], r: usize, c: usize| t[r * N + c];
    let mut out: HashMap<&'static str, Vec<f64>> = HashMap::new();
    let mut z = 0.0;
    let mut c = vec![0.0; N * N];
    let mut w = 0.0;
    let mut v = 0.0;
    let mut t = vec![0.0; N];
    let mut gg = vec![0.0; N * N];
    let mut h = vec![0.0; N];
    for j in 0..N {
        v += d[j] * d[j] * d[j];
        for pp in 0..M {
            v += 0.5 * d[j] * q[pp * N + j] * q[pp * N + j];
        }
        for i in 0..N {
            let inner: f64 = (0..N).map(|k| m2(&b, j, k) * m2(&e, j, k) * d[j]).sum();
            h[i] += m2(&a, i, j) * d[j] * inner.exp();
            for k in 0..N {
                z += m2(&a, i, j) * m2(&b, j, k) * d[j];
                for l in 0..N {
                    c[i * N + l] += m2(&a, i, j) * m2(&b, j, k) * d[j] * m2(&e, j, k) * m2(&f, k, l);
                }
                for pp in 0..M {
                    w += p[pp * N + i] * q[pp * N + j] * s[pp * N + k] * xx[(i * N + j) * N + k];
                }
            }
            for l in 0..N {
                gg[i * N + l] += m2(&a, i, j) * d[j] * (m2(&b, j, l) * m2(&e, j, l) + m2(&f, j, l));
            }
        }
    }
    for (l, tl) in t.iter_mut().enumerate() {
        for (i, di) in d.iter().enumerate() {
            for k in 0..N {
                *tl += m2(&a, i, i) * m2(&b, i, k) * di * m2(&f, k, l);
            }
        }
    }
    out.insert("Z", vec![z]);
    out.insert("C", c);
    out.insert("W", vec![w]);
    out.insert("V", vec![v]);
    out.insert("T", t);
    out.insert("G", gg);
    out.insert("H", h);
    out
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    common::assert_close_scaled(what, got, want, 1e-12, 1.0);
}

fn compile(src: &str) -> Hir {
    let (hir, diags) = tcc::compile(src, "hyper");
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    hir.unwrap()
}

#[test]
fn hyperedges_equal_loops_in_the_interpreter_and_the_optimized_program() {
    let hir = compile(SRC);
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 3).unwrap();
    let want = expected(&hir, &inputs);
    let interp = run_unit(&hir, u, &inputs).unwrap();
    for (name, w) in &want {
        assert_close(&format!("interpreter {name}"), &interp[&tensor(&hir, name)].data, w);
    }
    // The optimizer's binary steps, run by the interpreter: every statement is
    // reordered into steps of two factors (no hyperedge survives into a step).
    let (opt, report) = tcc::tir::rewrite::optimize(&hir);
    let got = run_unit(&opt, u, &inputs).unwrap();
    for (name, w) in &want {
        assert_close(&format!("optimized {name}"), &got[&tensor(&opt, name)].data, w);
    }
    assert!(report.stmts.iter().filter(|s| !s.temporaries.is_empty()).count() >= 5, "{report:#?}");
    for s in &opt.units[u].stmts {
        for t in &s.rhs.terms {
            assert!(t.factors.len() <= 2, "a step of {} factors", t.factors.len());
        }
    }
}

#[test]
fn hyperedges_equal_loops_in_the_jit() {
    let hir = compile(SRC);
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 5).unwrap();
    let want = expected(&hir, &inputs);
    for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
        let opts = Options { fuse, gemm_min: Some(1.0), ..Options::default() };
        let got = jit_run(&hir, u, &inputs, &opts, 1).unwrap().outputs;
        for (name, w) in &want {
            assert_close(&format!("JIT {fuse:?} {name}"), &got[&tensor(&hir, name)].data, w);
        }
    }
}

/// The GPU back end's plan (cuBLAS steps and tiled kernels), emulated on the host.
#[test]
fn hyperedges_equal_loops_in_the_gpu_plan_emulated() {
    use tcc::codegen::nvptx::{emulate, plan, GemmKind, GpuOptions};
    let hir = compile(SRC);
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 9).unwrap();
    let want = expected(&hir, &inputs);
    for gemm in [None, Some(GemmKind::Cublas), Some(GemmKind::Tiled)] {
        let p = plan(&hir, &[u], &GpuOptions { gemm, ..GpuOptions::default() }).unwrap();
        let got = emulate(&p, 0, &inputs).unwrap();
        for (name, w) in &want {
            assert_close(&format!("GPU {gemm:?} {name}"), &got[&tensor(&hir, name)].data, w);
        }
    }
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tcc-hyperedges-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tcc(args: &[&str], file: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcc")).args(args).arg(file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn hyperedges_run_tiled_and_on_ranks() {
    let d = tmp("tiled");
    let file = d.join("products.tc");
    std::fs::write(&file, products_only()).unwrap();
    for args in [&["run", "--tiled", "--check"][..], &["run", "--tiled", "--tile", "2", "--check"]] {
        let (ok, text) = tcc(args, &file);
        assert!(ok && text.contains("matches the interpreter"), "{args:?}: {text}");
    }
    // Ranks print the interpreter's report: the same sums as one process.
    let (ok, one) = tcc(&["run", "--interp"], &file);
    assert!(ok, "{one}");
    let runs = [
        &["run", "--ranks", "2"][..],
        &["run", "--ranks", "3", "--no-opt"],
        &["run", "--plan", "--ranks", "2"],
        &["run", "--plan", "--ranks", "2", "--no-opt"],
        &["run", "--tiled", "--ranks", "2"],
    ];
    for args in runs {
        let (ok, text) = tcc(args, &file);
        assert!(ok, "{args:?}: {text}");
        for name in ["Z", "C", "W", "V"] {
            let line = |t: &str| t.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).map(String::from);
            let (a, b) = (line(&one).unwrap(), line(&text).unwrap_or_default());
            let sum = |l: &str| l.split("sum = ").nth(1).and_then(|s| s.split_whitespace().next()).map(String::from);
            assert_eq!(sum(&a), sum(&b), "{args:?} {name}: {a} vs {b}");
        }
    }
    // The whole program — a diagonal (`A[i,i]`), a parenthesised sum and `exp`
    // of one — runs tiled too, on one process and on ranks.
    let file = d.join("diagonal.tc");
    std::fs::write(&file, SRC).unwrap();
    for args in [&["run", "--tiled", "--check"][..], &["run", "--tiled", "--tile", "2", "--check"]] {
        let (ok, text) = tcc(args, &file);
        assert!(ok && text.contains("matches the interpreter"), "{args:?}: {text}");
    }
    let (ok, one) = tcc(&["run", "--interp"], &file);
    assert!(ok, "{one}");
    let (ok, text) = tcc(&["run", "--tiled", "--tile", "2", "--ranks", "3"], &file);
    assert!(ok, "{text}");
    for name in ["T", "G", "H"] {
        let line = |t: &str| t.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).map(String::from);
        let norm = |l: &str| -> f64 {
            l.split("norm2 = ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
        };
        let (a, b) = (norm(&line(&one).unwrap()), norm(&line(&text).unwrap()));
        assert!((a - b).abs() <= 1e-12 * a, "{name}: {a} vs {b}");
    }
    std::fs::remove_dir_all(&d).ok();
}

/// A ring of 18 matrices with a diagonal gate on every third bond (24 factors,
/// beyond the exact search): the hyper-optimizer orders it, the check runs the
/// interpreter over the binary steps, and the ring's value is the trace of the
/// product, computed here.
#[test]
fn hyperedge_ring_beyond_the_exact_search() {
    let n = 18;
    let mut src = String::from("range D = 3;\n");
    src += &format!("index {} : D;\n", (0..n).map(|k| format!("i{k}")).collect::<Vec<_>>().join(", "));
    let mut factors = Vec::new();
    for k in 0..n {
        src += &format!("input tensor M{k}[i{k},i{}] : f64;\n", (k + 1) % n);
        factors.push(format!("M{k}[i{k},i{}]", (k + 1) % n));
        if k % 3 == 0 {
            src += &format!("input tensor G{k}[i{k}] : f64;\n");
            factors.push(format!("G{k}[i{k}]"));
        }
    }
    src += &format!("output tensor Z : f64;\nZ = {};\n", factors.join(" * "));
    let hir = compile(&src);
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 1).unwrap();
    // Tr(∏ diag(G_k)·M_k) by 3×3 matrix products.
    let mut prod = vec![0.0; 9];
    for r in 0..3 {
        prod[r * 3 + r] = 1.0;
    }
    for k in 0..n {
        let m = &inputs[&tensor(&hir, &format!("M{k}"))].data;
        let g: Vec<f64> = if k % 3 == 0 { inputs[&tensor(&hir, &format!("G{k}"))].data.clone() } else { vec![1.0; 3] };
        let mut next = vec![0.0; 9];
        for r in 0..3 {
            for c in 0..3 {
                next[r * 3 + c] = (0..3).map(|x| prod[r * 3 + x] * g[x] * m[x * 3 + c]).sum();
            }
        }
        prod = next;
    }
    let trace = prod[0] + prod[4] + prod[8];
    let opts = tcc::tir::opmin::Options { max_trials: Some(64), ..Default::default() };
    let (opt, report) = tcc::tir::rewrite::optimize_with(&hir, &opts);
    assert_eq!(report.stmts[0].method, vec![tcc::tir::opmin::Method::Hyper], "{report:#?}");
    let got = run_unit(&opt, u, &inputs).unwrap()[&tensor(&opt, "Z")].data[0];
    assert!((got - trace).abs() <= 1e-12 * trace.abs().max(1.0), "{got} vs {trace}");
    // A ring costs 2·27 flops per matrix product at best; the gates are absorbed
    // for 9 or 18 flops each: no step may build anything wider than a matrix.
    assert!(report.stmts[0].flops_after <= (n as f64) * 54.0 + 6.0 * 18.0, "{report:#?}");
    let d = tmp("ring");
    let file = d.join("ring.tc");
    std::fs::write(&file, &src).unwrap();
    let (ok, text) = tcc(&["run", "--check", "--search-time", "0.2"], &file);
    assert!(ok && text.contains("matches the interpreter"), "{text}");
    let (ok, text) = tcc(&["opt", "--search-time", "0.2"], &file);
    assert!(ok && text.contains("order [hyper]"), "{text}");
    std::fs::remove_dir_all(&d).ok();
}
