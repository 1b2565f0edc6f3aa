//! Affine subscripts `I[n,c,y+r,x+s]`, `2*x+r`, `x-1` (issue 21, deliverable 4):
//! convolutions and sliding windows checked element by element against loops
//! written here, for the reference interpreter, the JIT in every fusion mode (f64
//! and f32, random sizes, run-time sizes) and the GPU plan emulated on the host;
//! the bounds are errors at compile time or at run time, and the paths that do not
//! support them refuse with an error.

mod common;

use common::assert_close;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use tcc::codegen::llvm::{jit_run, jit_run_sized, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;
use tcc::sema::hir::{Hir, TensorId};
use tcc::tensor::Dense;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/conv2d.tc");

fn tensor(hir: &Hir, name: &str) -> TensorId {
    hir.tensors.position(|t| t.name == name).unwrap()
}

/// A small deterministic generator for the sizes (no dependency on `rand`).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, lo: usize, hi: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) as usize % (hi - lo + 1)
    }
}

/// A strided convolution `O[n,k,y,x] = Σ I[n,c,st·y+r,st·x+s] F[k,c,r,s]` with the
/// input exactly as large as the windows need.
/// `dims` is `[N, C, K, Y, X, R, S]`.
fn conv_src(dims: [usize; 7], st: usize, elem: &str) -> String {
    let [n, c, k, y, x, r, s] = dims;
    let (h, w) = (st * (y - 1) + r, st * (x - 1) + s);
    let sub = |i: &str, j: &str| if st == 1 { format!("{i}+{j}") } else { format!("{st}*{i}+{j}") };
    format!(
        "range N = {n}; range C = {c}; range K = {k}; range Y = {y}; range X = {x}; range R = {r}; range S = {s};
range H = {h}; range W = {w};
index n : N; index c : C; index k : K; index y : Y; index x : X; index r : R; index s : S; index h : H; index w : W;
input tensor I[n,c,h,w] : {elem}; input tensor F[k,c,r,s] : {elem}; output tensor O[n,k,y,x] : {elem};
O[n,k,y,x] = I[n,c,{},{}] * F[k,c,r,s];
",
        sub("y", "r"),
        sub("x", "s")
    )
}

/// The convolution by loops.
fn conv_loops(i: &Dense, f: &Dense, y: usize, x: usize, st: usize) -> Vec<f64> {
    let [n, c, h, w] = i.shape[..] else { panic!() };
    let [k, _, r, s] = f.shape[..] else { panic!() };
    let mut o = vec![0.0; n * k * y * x];
    for (a, b, p, q) in
        (0..n).flat_map(|a| (0..k).flat_map(move |b| (0..y).flat_map(move |p| (0..x).map(move |q| (a, b, p, q)))))
    {
        let mut acc = 0.0;
        for cc in 0..c {
            for rr in 0..r {
                for ss in 0..s {
                    acc += i.data[((a * c + cc) * h + st * p + rr) * w + st * q + ss]
                        * f.data[((b * c + cc) * r + rr) * s + ss];
                }
            }
        }
        o[((a * k + b) * y + p) * x + q] = acc;
    }
    o
}

#[test]
fn conv2d_strides_1_and_2_equal_loops_in_the_interpreter_and_the_jit_at_random_sizes() {
    let mut rng = Lcg(21);
    for case in 0..4 {
        let st = 1 + case % 2;
        let (n, c, k) = (rng.below(1, 3), rng.below(1, 4), rng.below(1, 5));
        let (y, x, r, s) = (rng.below(1, 6), rng.below(1, 6), rng.below(1, 4), rng.below(1, 4));
        let hir = common::compiled(&conv_src([n, c, k, y, x, r, s], st, "f64"), "conv");
        let u = hir.units.ids().next().unwrap();
        let inputs = random_inputs(&hir, u, case as u64 + 1).unwrap();
        let want = conv_loops(&inputs[&tensor(&hir, "I")], &inputs[&tensor(&hir, "F")], y, x, st);
        let o = tensor(&hir, "O");
        let what = format!("N={n} C={c} K={k} Y={y} X={x} R={r} S={s} stride {st}");
        assert_close(&format!("interpreter {what}"), &run_unit(&hir, u, &inputs).unwrap()[&o].data, &want, 1e-12);
        for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
            for (gemm_min, parallel_min) in [(None, None), (Some(1.0), Some(1.0))] {
                let opts = Options { fuse, gemm_min, parallel_min, ..Options::default() };
                let got = jit_run(&hir, u, &inputs, &opts, 1).unwrap().outputs;
                assert_close(&format!("JIT {fuse:?} {gemm_min:?} {what}"), &got[&o].data, &want, 1e-12);
            }
        }
    }
}

/// In f32 the gather and the contraction run in f32: within f32 rounding.
#[test]
fn conv2d_in_f32() {
    let hir = common::compiled(&conv_src([2, 3, 4, 5, 4, 3, 2], 2, "f32"), "conv");
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 5).unwrap();
    let want = conv_loops(&inputs[&tensor(&hir, "I")], &inputs[&tensor(&hir, "F")], 5, 4, 2);
    for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
        let opts = Options { fuse, gemm_min: Some(1.0), ..Options::default() };
        let got = jit_run(&hir, u, &inputs, &opts, 1).unwrap().outputs;
        assert_close(&format!("JIT f32 {fuse:?}"), &got[&tensor(&hir, "O")].data, &want, 1e-5);
    }
}

/// A sliding-window sum, a window with a stride and an offset, and a window
/// under a function and a `max`: several affine reads in one program.
const WINDOWS: &str = "range T = 7; range R = 3; range L = 20;
index t : T; index r : R; index l : L;
input tensor I[l]; output tensor S1[t]; output tensor S2[t]; output tensor S3[t]; output tensor M[t];
S1[t] = I[t+r];
S2[t] = 2 * I[2*(t+1)+r] - I[t+r];
S3[t] = exp(I[t+3]) * I[t+0];
M[t] = max(I[t+r]);
";

fn windows_loops(i: &[f64]) -> HashMap<&'static str, Vec<f64>> {
    let (t, r) = (7, 3);
    let w = |f: &dyn Fn(usize, usize) -> usize| -> Vec<f64> {
        (0..t).map(|a| (0..r).map(|b| i[f(a, b)]).sum::<f64>()).collect()
    };
    let s1 = w(&|a, b| a + b);
    let s2: Vec<f64> = w(&|a, b| 2 * (a + 1) + b).iter().zip(&s1).map(|(x, y)| 2.0 * x - y).collect();
    let s3 = (0..t).map(|a| i[a + 3].exp() * i[a]).collect();
    let m = (0..t).map(|a| (0..r).map(|b| i[a + b]).fold(f64::NEG_INFINITY, f64::max)).collect();
    HashMap::from([("S1", s1), ("S2", s2), ("S3", s3), ("M", m)])
}

#[test]
fn sliding_windows_equal_loops_in_every_fusion_mode_and_the_gpu_plan() {
    use tcc::codegen::nvptx::{emulate, plan, GpuOptions};
    let hir = common::compiled(WINDOWS, "windows");
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 3).unwrap();
    let want = windows_loops(&inputs[&tensor(&hir, "I")].data);
    let interp = run_unit(&hir, u, &inputs).unwrap();
    for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
        let got = jit_run(&hir, u, &inputs, &Options { fuse, ..Options::default() }, 1).unwrap().outputs;
        for (name, w) in &want {
            assert_close(&format!("interpreter {name}"), &interp[&tensor(&hir, name)].data, w, 1e-12);
            assert_close(&format!("JIT {fuse:?} {name}"), &got[&tensor(&hir, name)].data, w, 1e-12);
        }
    }
    let p = plan(&hir, &[u], &GpuOptions::default()).unwrap();
    let got = emulate(&p, 0, &inputs).unwrap();
    for (name, w) in &want {
        assert_close(&format!("GPU {name}"), &got[&tensor(&hir, name)].data, w, 1e-12);
    }
}

#[test]
fn conv2d_in_the_gpu_plan_emulated() {
    use tcc::codegen::nvptx::{emulate, plan, GemmKind, GpuOptions};
    let hir = common::compiled(&conv_src([2, 3, 4, 4, 5, 3, 2], 2, "f64"), "conv");
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 6).unwrap();
    let want = conv_loops(&inputs[&tensor(&hir, "I")], &inputs[&tensor(&hir, "F")], 4, 5, 2);
    for opts in [GpuOptions::default(), GpuOptions { gemm: Some(GemmKind::Tiled), ..GpuOptions::default() }] {
        let got = emulate(&plan(&hir, &[u], &opts).unwrap(), 0, &inputs).unwrap();
        assert_close(&format!("GPU {:?}", opts.gemm), &got[&tensor(&hir, "O")].data, &want, 1e-12);
    }
}

/// `x-1` over a dimension whose range is a union `B + X` (`|B| = 1`): `x` counts
/// from 1 there, so `I[x-1]` is the element before `I[x]`; the difference of
/// neighbours equals loops in the interpreter, the JIT and the GPU plan.
#[test]
fn shift_by_minus_one_over_a_padded_range() {
    use tcc::codegen::nvptx::{emulate, plan, GpuOptions};
    let src = "range B = 1; range X = 9; range H = B + X; index x : X; index h : H;
input tensor I[h]; output tensor D[x];
D[x] = I[x] - I[x-1];
";
    let hir = common::compiled(src, "shift");
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 4).unwrap();
    let i = &inputs[&tensor(&hir, "I")].data;
    let want: Vec<f64> = (0..9).map(|x| i[x + 1] - i[x]).collect();
    let d = tensor(&hir, "D");
    assert_close("interpreter", &run_unit(&hir, u, &inputs).unwrap()[&d].data, &want, 1e-12);
    for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
        let got = jit_run(&hir, u, &inputs, &Options { fuse, ..Options::default() }, 1).unwrap().outputs;
        assert_close(&format!("JIT {fuse:?}"), &got[&d].data, &want, 1e-12);
    }
    let got = emulate(&plan(&hir, &[u], &GpuOptions::default()).unwrap(), 0, &inputs).unwrap();
    assert_close("GPU", &got[&d].data, &want, 1e-12);
}

fn errors(src: &str) -> Vec<(&'static str, String)> {
    let (_, diags) = tcc::compile(src, "t");
    diags.into_iter().filter(|d| d.is_error()).map(|d| (d.code, d.message)).collect()
}

#[test]
fn bounds_and_forms_are_checked_at_compile_time() {
    let decl = "range X = 8; range R = 3; range H = 10; index x : X; index r : R; index h : H;
input tensor I[h]; output tensor O[x];\n";
    let code = |stmt: &str| errors(&format!("{decl}{stmt}")).first().map(|e| e.0).unwrap_or("ok");
    assert_eq!(code("O[x] = I[x+r];"), "ok"); // 7 + 2 = 9 < 10
    assert_eq!(code("O[x] = I[(x+r)];"), "ok");
    assert_eq!(code("O[x] = I[x+2];"), "ok");
    assert_eq!(code("O[x] = I[x+r+1];"), "E0314"); // reaches 10
    assert_eq!(code("O[x] = I[2*x+r];"), "E0314"); // reaches 16
    assert_eq!(code("O[x] = I[x-1];"), "E0314"); // reaches -1
    assert_eq!(code("O[x] = I[x*r];"), "E0313");
    assert_eq!(code("O[x] = I[x-r+2];"), "E0313"); // negative coefficient
    assert_eq!(code("O[x] = I[x+r-r];"), "E0313"); // r cancels
    assert_eq!(code("O[x] = I[x+99999999999999999999];"), "E0313");
    assert_eq!(code("O[x] = I[x+r,r];"), "E0202");
    assert_eq!(code("O[x] = I[x+q];"), "E0105");
    let msg = errors(&format!("{decl}O[x] = I[x+r+1];")).remove(0).1;
    assert!(msg.contains("x+r+1") && msg.contains("reaches 10"), "{msg}");
}

/// With run-time sizes the bound is checked when the sizes are known: by
/// `bind_sizes` (every command) and by the JIT and library entry.
#[test]
fn run_time_sizes_are_checked_when_given() {
    let src = "range X; range R = 3; range H; index x : X; index r : R; index h : H;
input tensor I[h]; output tensor O[x];
O[x] = I[x+r];
";
    let hir = common::compiled(src, "win");
    let sizes = |x: usize, h: usize| BTreeMap::from([("X".to_string(), x), ("H".to_string(), h)]);
    assert!(tcc::sema::sizes::bind_sizes(&hir, &sizes(5, 7)).is_ok());
    let e = tcc::sema::sizes::bind_sizes(&hir, &sizes(5, 6)).unwrap_err();
    assert_eq!(e.code, "E0749", "{}", e.message);
    // The JIT with run-time sizes as arguments.
    let u = hir.units.ids().next().unwrap();
    let (rx, rh) = (hir.ranges.position(|r| r.name == "X").unwrap(), hir.ranges.position(|r| r.name == "H").unwrap());
    let i = Dense { shape: vec![6], data: (0..6).map(|v| v as f64).collect() };
    let inputs = HashMap::from([(tensor(&hir, "I"), i.clone())]);
    let ok = jit_run_sized(&hir, u, &BTreeMap::from([(rx, 4), (rh, 6)]), &inputs, &Options::default(), 1).unwrap();
    assert_eq!(ok.outputs[&tensor(&hir, "O")].data, vec![3.0, 6.0, 9.0, 12.0]);
    let bad = jit_run_sized(&hir, u, &BTreeMap::from([(rx, 5), (rh, 6)]), &inputs, &Options::default(), 1);
    assert!(bad.is_err_and(|e| e.to_string().contains("x+r")));
}

fn tcc(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcc")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn example_runs_checked_builds_for_the_gpu_and_unsupported_paths_refuse() {
    let (ok, text) = tcc(&["run", EXAMPLE, "--check"]);
    assert!(ok && text.contains("matches the interpreter"), "{text}");
    for fuse in ["auto", "none", "max"] {
        let (ok, text) = tcc(&["run", EXAMPLE, "--check", "--fuse", fuse]);
        assert!(ok && text.contains("matches the interpreter"), "{fuse}: {text}");
    }
    let dir = std::env::temp_dir().join(format!("tcc-affine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = dir.join("k");
    let (ok, text) = tcc(&["build", EXAMPLE, "--target", "cuda", "-o", k.to_str().unwrap()]);
    assert!(ok, "{text}");
    for args in [vec!["run", EXAMPLE, "--ranks", "2"], vec!["plan", EXAMPLE, "--procs", "4"]] {
        let (ok, text) = tcc(&args);
        assert!(!ok && text.contains("E0765") && !text.contains("panicked"), "{args:?}: {text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Sums and products in subscripts are flat, so a subscript of 100 000 terms is
/// checked and formatted without deep recursion (a test thread's stack is 2 MiB).
#[test]
fn long_subscripts_neither_overflow_the_stack_nor_the_constants() {
    let decl = "range X = 4; range H = 5; index x : X; index h : H; input tensor I[h]; output tensor O[x];\n";
    let sum = format!("{decl}O[x] = I[x{}];\n", "+0".repeat(100_000));
    assert!(errors(&sum).is_empty());
    assert!(tcc::fmt::format_source(&sum).is_ok());
    let product = format!("{decl}O[x] = I[{}x];\n", "2*".repeat(100_000));
    assert_eq!(errors(&product).first().map(|e| e.0), Some("E0313"));
    let nested = format!("{decl}O[x] = I[{}x{}];\n", "(".repeat(10_000), ")".repeat(10_000));
    assert!(errors(&nested).iter().any(|e| e.0 == "E0004"), "{:?}", errors(&nested).first());
}

/// A library built with run-time sizes checks the affine bounds at its entry:
/// `TCC_ERR_SIZE` (5) and a message naming the subscript, never a read past `I`.
#[test]
fn library_with_run_time_sizes_checks_the_bounds_at_its_entry() {
    let dir = std::env::temp_dir().join(format!("tcc-affine-lib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("win.tc");
    std::fs::write(
        &src,
        "range X; range R = 3; range H; index x : X; index r : R; index h : H;\n\
         input tensor I[h]; output tensor O[x];\nO[x] = I[x+r];\n",
    )
    .unwrap();
    let so = dir.join("libwin.so");
    let (ok, text) = tcc(&["build", src.to_str().unwrap(), "-o", so.to_str().unwrap()]);
    assert!(ok, "{text}");
    let driver = dir.join("main.c");
    std::fs::write(
        &driver,
        r#"#include <stdio.h>
#include "win.h"
int main(void) {
  double I[7] = {1, 2, 3, 4, 5, 6, 7}, O[5];
  int ok = tcc_win_main(5, 7, I, 7, O, 5);
  int bad = tcc_win_main(5, 6, I, 6, O, 5);
  printf("%d %g %g %d %s\n", ok, O[0], O[4], bad, tcc_win_last_error());
  return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("main");
    let out = Command::new("gcc")
        .arg(&driver)
        .arg("-I")
        .arg(&dir)
        .arg(&so)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("0 6 18 5 ") && text.contains("x+r"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}
