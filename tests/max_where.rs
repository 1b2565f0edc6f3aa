//! `max`/`min` reductions, comparisons in `where`, element-wise `max(a, b)` and the
//! stable `softmax` (issue 21, deliverable 5): checked element by element against
//! loops written here, for the reference interpreter and the JIT in every fusion
//! mode and the GPU plan emulated on the host; the example runs under `tcc run --check`.

mod common;

use common::assert_close;

use std::collections::HashMap;
use std::process::Command;
use tcc::codegen::llvm::{jit_run, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;
use tcc::sema::hir::{Hir, TensorId};
use tcc::tensor::Dense;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/masked_softmax.tc");
const H: usize = 2;
const S: usize = 6;
const E: usize = 4;

fn tensor(hir: &Hir, name: &str) -> TensorId {
    hir.tensors.position(|t| t.name == name).unwrap()
}

/// The example's outputs by loops over every element.
fn expected(hir: &Hir, x: &HashMap<TensorId, Dense>) -> HashMap<&'static str, Vec<f64>> {
    let (q, k, v, mask) = (
        &x[&tensor(hir, "Q")].data,
        &x[&tensor(hir, "K")].data,
        &x[&tensor(hir, "V")].data,
        &x[&tensor(hir, "Mask")].data,
    );
    let mut out: HashMap<&'static str, Vec<f64>> = HashMap::new();
    let (mut o, mut m, mut n) = (vec![0.0; H * S * E], vec![0.0; H * S], vec![0.0; H * S]);
    let (mut r, mut c) = (vec![0.0; H * S * S], vec![0.0; H * S * S]);
    for h in 0..H {
        for s in 0..S {
            let score = |t: usize| 0.5 * (0..E).map(|e| q[(h * S + s) * E + e] * k[(h * S + t) * E + e]).sum::<f64>();
            let l: Vec<f64> = (0..S).map(|t| if mask[s * S + t] > 0.0 { score(t) } else { -1e9 }).collect();
            let lmax = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = l.iter().map(|x| (x - lmax).exp()).sum();
            for f in 0..E {
                o[(h * S + s) * E + f] = (0..S).map(|t| (l[t] - lmax).exp() / z * v[(h * S + t) * E + f]).sum();
            }
            m[h * S + s] = (0..S).map(score).fold(f64::NEG_INFINITY, f64::max);
            n[h * S + s] = (0..S).map(|t| score(t) - mask[s * S + t]).fold(f64::INFINITY, f64::min);
            for t in 0..S {
                let x = score(t);
                r[(h * S + s) * S + t] = if x > 0.0 { x } else { 0.01 * x };
                c[(h * S + s) * S + t] = x.max(0.0) + mask[s * S + t].min(0.5);
            }
        }
    }
    out.insert("O", o);
    out.insert("M", m);
    out.insert("N", n);
    out.insert("R", r);
    out.insert("C", c);
    out
}

fn compiled(src: &str) -> Hir {
    common::compiled(src, "masked_softmax")
}

#[test]
fn max_where_softmax_equal_loops_in_the_interpreter_and_the_jit() {
    let src = std::fs::read_to_string(EXAMPLE).unwrap();
    let hir = compiled(&src);
    let u = hir.units.ids().next().unwrap();
    for seed in [1, 7] {
        let inputs = random_inputs(&hir, u, seed).unwrap();
        let want = expected(&hir, &inputs);
        let interp = run_unit(&hir, u, &inputs).unwrap();
        for (name, w) in &want {
            assert_close(&format!("interpreter {name}"), &interp[&tensor(&hir, name)].data, w, 1e-12);
        }
        for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
            for parallel_min in [None, Some(1.0)] {
                let opts = Options { fuse, gemm_min: Some(1.0), parallel_min, ..Options::default() };
                let got = jit_run(&hir, u, &inputs, &opts, 2).unwrap().outputs;
                for (name, w) in &want {
                    assert_close(
                        &format!("JIT {fuse:?} {parallel_min:?} {name}"),
                        &got[&tensor(&hir, name)].data,
                        w,
                        1e-12,
                    );
                }
            }
        }
    }
}

/// In f32 the arguments are compared and reduced in f32: within f32 rounding.
#[test]
fn max_where_softmax_in_f32() {
    let src = std::fs::read_to_string(EXAMPLE).unwrap().replace(": f64", ": f32");
    let hir = compiled(&src);
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 3).unwrap();
    let want = expected(&hir, &inputs);
    let got = jit_run(&hir, u, &inputs, &Options::default(), 1).unwrap().outputs;
    for (name, w) in &want {
        assert_close(&format!("JIT f32 {name}"), &got[&tensor(&hir, name)].data, w, 1e-5);
    }
}

/// A softmax of large logits: the max-subtracted form stays finite where the
/// naive `exp(L) / Σ exp(L)` overflows to NaN.
#[test]
fn softmax_is_stable_for_large_logits() {
    let src = "range B = 2; range V = 5; index b : B; index v : V;
input tensor L[b,v] : f64; output tensor P[b,v] : f64; output tensor Naive[b,v] : f64;
P[b,v] = softmax(1000 * L[b,v], v);
Naive[b,v] = exp(1000 * L[b,v]) * recip((exp(1000 * L[b,v])));
";
    let hir = compiled(src);
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 2).unwrap();
    let l = &inputs[&tensor(&hir, "L")].data;
    let mut want = vec![0.0; 10];
    for b in 0..2 {
        let row = &l[b * 5..b * 5 + 5];
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|x| (1000.0 * (x - mx)).exp()).sum();
        for v in 0..5 {
            want[b * 5 + v] = (1000.0 * (row[v] - mx)).exp() / z;
        }
    }
    let interp = run_unit(&hir, u, &inputs).unwrap();
    let got = jit_run(&hir, u, &inputs, &Options::default(), 2).unwrap().outputs;
    for (what, res) in [("interpreter", &interp), ("JIT", &got)] {
        assert_close(&format!("{what} P"), &res[&tensor(&hir, "P")].data, &want, 1e-12);
        assert!(res[&tensor(&hir, "Naive")].data.iter().any(|x| x.is_nan()), "{what}: the naive form overflows");
    }
}

/// The GPU back end's plan (one thread per element; `max`/`min` reduce in the
/// thread), emulated on the host by compiling its kernels for the CPU.
#[test]
fn max_where_softmax_equal_loops_in_the_gpu_plan_emulated() {
    use tcc::codegen::nvptx::{emulate, plan, GemmKind, GpuOptions};
    let hir = compiled(&std::fs::read_to_string(EXAMPLE).unwrap());
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 6).unwrap();
    let want = expected(&hir, &inputs);
    for opts in [GpuOptions::default(), GpuOptions { gemm: Some(GemmKind::Tiled), ..GpuOptions::default() }] {
        let p = plan(&hir, &[u], &opts).unwrap();
        let got = emulate(&p, 0, &inputs).unwrap();
        for (name, w) in &want {
            assert_close(&format!("GPU {name} {:?}", opts.gemm), &got[&tensor(&hir, name)].data, w, 1e-12);
        }
    }
}

#[test]
fn example_runs_checked_and_builds_for_the_gpu() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let out = Command::new(tcc).args(["run", EXAMPLE, "--check"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("matches the interpreter"), "{text}");
    // Ranks computing tiles of the outputs with the interpreter's evaluator report
    // the interpreter's numbers.
    let report = |args: &[&str]| -> String {
        let out = Command::new(tcc).args(["run", EXAMPLE]).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.contains("time =")).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(report(&["--interp"]), report(&["--ranks", "2"]));
    let dir = std::env::temp_dir().join(format!("tcc-maxwhere-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(tcc).args(["build", EXAMPLE, "--target", "cuda", "-o"]).arg(dir.join("k")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    // The PTX reduces with max/min and selects with a predicate.
    let ptx = std::fs::read_to_string(dir.join("k")).unwrap();
    assert!(ptx.contains("max.f64") && ptx.contains("min.f64") && ptx.contains("selp.f64"), "{ptx}");
    std::fs::remove_dir_all(&dir).ok();
}
