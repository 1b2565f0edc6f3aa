//! Broadcast sums (issue 21): a term that lacks some of the left-hand side's indices
//! is the same for every value of them — the orbital-energy denominator
//! `D[a,b,i,j] = eo[i] + eo[j] - ev[a] - ev[b]`, a constant added to a tensor, a
//! constant inside a function. Checked element by element against loops written
//! here, for the reference interpreter, the JIT in every fusion mode (GETT forced
//! on) and the tiled executor.

mod common;

use std::collections::HashMap;
use std::process::Command;
use tcc::codegen::llvm::{jit_run, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;
use tcc::sema::hir::{Hir, TensorId};
use tcc::tensor::Dense;

const SRC: &str = "range O = 3;
range V = 4;
index i, j, k : O;
index a, b : V;
input tensor eo[i] : f64;
input tensor ev[a] : f64;
input tensor T[a,b,i,j] : f64;
input tensor F[i,k] : f64;
output tensor D[a,b,i,j] : f64;
output tensor R[a,b,i,j] : f64;
output tensor S[a,b,i,j] : f64;
output tensor G[a,b,i,j] : f64;
tensor X[i,j] : f64;
D[a,b,i,j] = eo[i] + eo[j] - ev[a] - ev[b];
R[a,b,i,j] = T[a,b,i,j] * recip(D[a,b,i,j]) + 1;
S[a,b,i,j] = sqrt(T[a,b,i,j] * T[a,b,i,j] + 1e-5) + 2 * eo[i] * ev[b];
X[i,j] = F[i,k] * F[k,j];
G[a,b,i,j] = F[i,k] * T[a,b,k,j] - 0.5 * X[i,j];
G[a,b,i,j] += exp(ev[a] - eo[j]) - 3 + F[i,k] * (T[a,b,k,j] + eo[k]);
";

fn tensor(hir: &Hir, name: &str) -> TensorId {
    hir.tensors.position(|t| t.name == name).unwrap()
}

/// The four outputs by loops over every element.
fn expected(hir: &Hir, x: &HashMap<TensorId, Dense>) -> HashMap<&'static str, Vec<f64>> {
    let (eo, ev, t, f) = (
        &x[&tensor(hir, "eo")].data,
        &x[&tensor(hir, "ev")].data,
        &x[&tensor(hir, "T")].data,
        &x[&tensor(hir, "F")].data,
    );
    let (o, v) = (3, 4);
    let at = |a: usize, b: usize, i: usize, j: usize| ((a * v + b) * o + i) * o + j;
    let mut out: HashMap<&'static str, Vec<f64>> =
        ["D", "R", "S", "G"].into_iter().map(|n| (n, vec![0.0; v * v * o * o])).collect();
    for a in 0..v {
        for b in 0..v {
            for i in 0..o {
                for j in 0..o {
                    let e = at(a, b, i, j);
                    let d = eo[i] + eo[j] - ev[a] - ev[b];
                    out.get_mut("D").unwrap()[e] = d;
                    out.get_mut("R").unwrap()[e] = t[e] / d + 1.0;
                    out.get_mut("S").unwrap()[e] = (t[e] * t[e] + 1e-5).sqrt() + 2.0 * eo[i] * ev[b];
                    let mut g = 0.0;
                    for k in 0..o {
                        let x: f64 = (0..o).map(|l| f[i * o + l] * f[l * o + j]).sum();
                        g += f[i * o + k] * t[at(a, b, k, j)] - 0.5 * x / o as f64;
                        g += f[i * o + k] * (t[at(a, b, k, j)] + eo[k]);
                    }
                    out.get_mut("G").unwrap()[e] = g + (ev[a] - eo[j]).exp() - 3.0;
                }
            }
        }
    }
    out
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    common::assert_close(what, got, want, 1e-12);
}

#[test]
fn broadcast_terms_equal_loops_in_the_interpreter_and_the_jit() {
    let (hir, diags) = tcc::compile(SRC, "bcast");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    assert!(diags.iter().all(|d| !d.is_error()));
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 11).unwrap();
    let want = expected(&hir, &inputs);
    let interp = run_unit(&hir, u, &inputs).unwrap();
    for (name, w) in &want {
        assert_close(&format!("interpreter {name}"), &interp[&tensor(&hir, name)].data, w);
    }
    for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
        let opts = Options { fuse, gemm_min: Some(1.0), ..Options::default() };
        let got = jit_run(&hir, u, &inputs, &opts, 2).unwrap().outputs;
        for (name, w) in &want {
            assert_close(&format!("JIT {fuse:?} {name}"), &got[&tensor(&hir, name)].data, w);
        }
    }
}

/// The GPU back end's plan (tiled kernels and the cost model's choice), emulated on
/// the host by compiling its kernels for the CPU, computes the same values.
#[test]
fn broadcast_terms_equal_loops_in_the_gpu_plan_emulated() {
    use tcc::codegen::nvptx::{emulate, plan, GemmKind, GpuOptions};
    let (hir, _) = tcc::compile(SRC, "bcast");
    let hir = hir.unwrap();
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 5).unwrap();
    let want = expected(&hir, &inputs);
    for opts in [GpuOptions::default(), GpuOptions { gemm: Some(GemmKind::Tiled), ..GpuOptions::default() }] {
        let p = plan(&hir, &[u], &opts).unwrap();
        let got = emulate(&p, 0, &inputs).unwrap();
        for (name, w) in &want {
            assert_close(&format!("GPU {name} {:?}", opts.gemm), &got[&tensor(&hir, name)].data, w);
        }
    }
}

#[test]
fn broadcast_terms_run_tiled_and_say_so_where_unsupported() {
    let dir = std::env::temp_dir().join(format!("tcc-bcast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The tiled executor computes products of tensors: the denominator and a
    // broadcast product, with and without ranks, match the interpreter.
    let file = dir.join("denominator.tc");
    let src = SRC.lines().take(13).collect::<Vec<_>>().join("\n")
        + "\nD[a,b,i,j] = eo[i] + eo[j] - ev[a] - ev[b];\nS[a,b,i,j] = T[a,b,i,j] - 3 * eo[i] * ev[b];\n";
    let src = src
        .replace("output tensor R[a,b,i,j] : f64;\n", "")
        .replace("output tensor G[a,b,i,j] : f64;\ntensor X[i,j] : f64;", "");
    std::fs::write(&file, &src).unwrap();
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let out = Command::new(tcc).arg("run").arg(&file).args(["--tiled", "--check"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("matches the interpreter"), "{text}");
    // A constant term is not a product the planner distributes: a clear refusal.
    let file = dir.join("constant.tc");
    std::fs::write(&file, SRC).unwrap();
    let out = Command::new(tcc).arg("run").arg(&file).args(["--plan", "--ranks", "2"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("E0723"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}
