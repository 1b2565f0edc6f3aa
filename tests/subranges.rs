//! Sub-ranges and unions of ranges (issue 21, deliverable 3): `range P = O + V;`
//! makes an index over `O` or `V` name a slice of a dimension over `P`. Checked
//! element by element against loops written here, for the reference interpreter
//! and the JIT in every fusion mode (GETT forced on and off, threads), in f64 and
//! f32, and the GPU plan emulated on the host; the example runs under `tcc run
//! --check`; tiled and distributed runs and plans refuse clearly.

mod common;

use common::assert_close;

use std::collections::HashMap;
use std::process::Command;
use tcc::codegen::llvm::{jit_run, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;
use tcc::sema::hir::{Hir, TensorId};
use tcc::tensor::Dense;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fock_blocks.tc");
const O: usize = 3;
const V: usize = 4;
const P: usize = O + V;

fn tensor(hir: &Hir, name: &str) -> TensorId {
    hir.tensors.position(|t| t.name == name).unwrap()
}

/// The example's outputs by loops (occupied p < O, virtual p = O + a).
fn expected(hir: &Hir, x: &HashMap<TensorId, Dense>) -> HashMap<&'static str, Vec<f64>> {
    let (h, t) = (&x[&tensor(hir, "H")].data, &x[&tensor(hir, "T")].data);
    let mut f = h.clone();
    for i in 0..O {
        for j in 0..O {
            f[i * P + j] += (0..O).map(|k| h[i * P + k] * h[k * P + j]).sum::<f64>();
        }
    }
    for a in 0..V {
        for i in 0..O {
            f[(O + a) * P + i] = 2.0 * t[a * O + i];
        }
    }
    let fv = |a: usize, b: usize| f[(O + a) * P + O + b];
    let mut r = vec![0.0; V * O];
    for a in 0..V {
        for i in 0..O {
            let x: f64 = (0..V).map(|b| fv(a, b) * t[b * O + i]).sum::<f64>()
                - (0..O).map(|j| t[a * O + j] * f[j * P + i]).sum::<f64>();
            r[a * O + i] = x + f[(O + a) * P + i] * f[i * P + i];
        }
    }
    let mut d = vec![0.0; P];
    for i in 0..O {
        d[i] = f[i * P + i];
    }
    for a in 0..V {
        d[O + a] = fv(a, a) - 1.0;
    }
    let w: f64 = (0..P).flat_map(|p| (0..P).map(move |q| (p, q))).map(|(p, q)| f[p * P + q] * f[q * P + p]).sum();
    HashMap::from([("F", f), ("R", r), ("D", d), ("W", vec![w])])
}

fn compiled(src: &str) -> Hir {
    common::compiled(src, "fock_blocks")
}

#[test]
fn blocks_of_a_union_equal_loops_in_the_interpreter_and_the_jit() {
    let hir = compiled(&std::fs::read_to_string(EXAMPLE).unwrap());
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 4).unwrap();
    let want = expected(&hir, &inputs);
    let interp = run_unit(&hir, u, &inputs).unwrap();
    for (name, w) in &want {
        assert_close(&format!("interpreter {name}"), &interp[&tensor(&hir, name)].data, w, 1e-12);
    }
    for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
        for (gemm_min, parallel_min) in [(Some(1.0), None), (None, Some(1.0)), (Some(f64::INFINITY), None)] {
            let opts = Options { fuse, gemm_min, parallel_min, ..Options::default() };
            let got = jit_run(&hir, u, &inputs, &opts, 2).unwrap().outputs;
            for (name, w) in &want {
                let what = format!("JIT {fuse:?} gemm {gemm_min:?} par {parallel_min:?} {name}");
                assert_close(&what, &got[&tensor(&hir, name)].data, w, 1e-12);
            }
        }
    }
}

#[test]
fn blocks_of_a_union_in_f32() {
    let hir = compiled(&std::fs::read_to_string(EXAMPLE).unwrap().replace(": f64", ": f32"));
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 9).unwrap();
    let want = expected(&hir, &inputs);
    let got = jit_run(&hir, u, &inputs, &Options::default(), 1).unwrap().outputs;
    for (name, w) in &want {
        assert_close(&format!("JIT f32 {name}"), &got[&tensor(&hir, name)].data, w, 1e-5);
    }
}

/// A union of unions: `ALL = AB + C` with `AB = A + B`; a part at depth two
/// starts after the parts before it at every level.
#[test]
fn nested_unions_offset_by_every_part_before() {
    let src = "range A = 2; range B = 3; range C = 4; range AB = A + B; range ALL = AB + C;
index a : A; index b : B; index c : C; index x, y : ALL; index s : AB;
input tensor X[x,y]; output tensor Y[s,c]; output tensor Z[x];
Y[s,c] = X[s,c];
Y[b,c] += X[a,b] * X[a,c];
Z[c] = X[c,c];
Z[s] = X[s,c];
";
    let hir = compiled(src);
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 5).unwrap();
    let x = &inputs[&tensor(&hir, "X")].data;
    let n = 9;
    let mut y = vec![0.0; 5 * 4];
    for s in 0..5 {
        for c in 0..4 {
            y[s * 4 + c] = x[s * n + 5 + c];
        }
    }
    for b in 0..3 {
        for c in 0..4 {
            y[(2 + b) * 4 + c] += (0..2).map(|a| x[a * n + 2 + b] * x[a * n + 5 + c]).sum::<f64>();
        }
    }
    let mut z = vec![0.0; n];
    for c in 0..4 {
        z[5 + c] = x[(5 + c) * n + 5 + c];
    }
    for s in 0..5 {
        z[s] = (0..4).map(|c| x[s * n + 5 + c]).sum();
    }
    let interp = run_unit(&hir, u, &inputs).unwrap();
    let got = jit_run(&hir, u, &inputs, &Options { gemm_min: Some(1.0), ..Options::default() }, 2).unwrap().outputs;
    for (what, res) in [("interpreter", &interp), ("JIT", &got)] {
        assert_close(&format!("{what} Y"), &res[&tensor(&hir, "Y")].data, &y, 1e-12);
        assert_close(&format!("{what} Z"), &res[&tensor(&hir, "Z")].data, &z, 1e-12);
    }
}

/// The GPU back end's plan (slices as argument offsets), emulated on the host, with
/// every GEMM kind the cost model may choose forced in turn.
#[test]
fn blocks_of_a_union_equal_loops_in_the_gpu_plan_emulated() {
    use tcc::codegen::nvptx::{emulate, plan, GemmKind, GpuOptions};
    let hir = compiled(&std::fs::read_to_string(EXAMPLE).unwrap());
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, 8).unwrap();
    let want = expected(&hir, &inputs);
    for gemm in [None, Some(GemmKind::Tiled), Some(GemmKind::Cublas), Some(GemmKind::Naive)] {
        let p = plan(&hir, &[u], &GpuOptions { gemm, ..GpuOptions::default() }).unwrap();
        let got = emulate(&p, 0, &inputs).unwrap();
        for (name, w) in &want {
            assert_close(&format!("GPU {gemm:?} {name}"), &got[&tensor(&hir, name)].data, w, 1e-12);
        }
    }
}

#[test]
fn example_runs_checked_and_other_back_ends_refuse_clearly() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let out = Command::new(tcc).args(["run", EXAMPLE, "--check"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("matches the interpreter"), "{text}");
    // Tiled runs read and write blocks through the union's tiling: checked on one
    // process, the same norms on ranks (each exchange).
    let norms = |text: &str| -> Vec<String> {
        text.lines().filter(|l| l.contains("norm2 = ")).map(|l| l.split("sum = ").next().unwrap().to_string()).collect()
    };
    let run = |args: &[&str]| {
        let out = Command::new(tcc).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {text}");
        text
    };
    let one = run(&["run", EXAMPLE, "--tiled", "--tile", "2", "--check"]);
    assert!(one.contains("matches the interpreter"), "{one}");
    for exchange in ["collective", "one-sided"] {
        let ranks = run(&["run", EXAMPLE, "--tiled", "--tile", "2", "--ranks", "3", "--exchange", exchange]);
        assert_eq!(norms(&one), norms(&ranks), "{exchange}");
    }
    // The planned distributed run and plan do not take slices.
    for args in [&["run", EXAMPLE, "--ranks", "2"][..], &["plan", EXAMPLE, "--procs", "4"]] {
        let out = Command::new(tcc).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && text.contains("E0764"), "{args:?}: {text}");
    }
    let dir = std::env::temp_dir().join(format!("tcc-subranges-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(tcc).args(["build", EXAMPLE, "--mpi", "-o"]).arg(dir.join("k")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A symmetric tensor written by blocks: its canonical tiles need not be in
    // the block, so tiled runs and --mpi libraries refuse it.
    let sym = dir.join("sym.tc");
    let source = std::fs::read_to_string(EXAMPLE)
        .unwrap()
        .replace("output tensor F[p,q] : f64;", "output tensor F[p,q] : f64 symmetric(p q);");
    std::fs::write(&sym, source).unwrap();
    for args in [&["run", "--tiled"][..], &["build", "--mpi", "-o"]] {
        let mut cmd = Command::new(tcc);
        cmd.args(&args[..1]).arg(&sym).args(&args[1..]);
        if args[0] == "build" {
            cmd.arg(dir.join("s"));
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && text.contains("E0764") && text.contains("symmetry"), "{args:?}: {text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
