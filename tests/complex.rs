//! Complex element types (`c64`, `c128`): random complex programs run by the JIT
//! on the lowered program (`tir::complex`) against the complex interpreter on the
//! unlowered one; `tcc run` outputs against numpy; the errors of complex misuse.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use tcc::interp_complex::{run_unit, CDense, C};
use tcc::sema::hir::{Hir, TensorId, UnitId};
use tcc::tensor::Dense;

/// A tiny deterministic generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = tcc::interp::splitmix64(self.0);
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// A random program over C[i,j]: sums of terms of 1 to 4 factors (binary and
/// ternary contractions, complex times real, outer factors), `conj` of tensors and
/// of sums, `+=` and a statement that reads its own target.
fn random_program(rng: &mut Rng) -> String {
    let ty = |rng: &mut Rng| if rng.below(3) == 0 { "c64" } else { "c128" };
    let (ta, tb, tw, tx, te, tc) = (ty(rng), ty(rng), ty(rng), ty(rng), ty(rng), ty(rng));
    let mut s = format!(
        "range N = {}; range M = {}; range K = {}; range L = {};\n\
         index i : N; index j : M; index k : K; index l : L;\n\
         input tensor A[i,k] : {ta}; input tensor B[k,j] : {tb}; input tensor W[k,l] : {tw};\n\
         input tensor X[l,j] : {tx}; input tensor E[i,j] : {te}; input tensor V[j] : c128;\n\
         input tensor R[i,j] : f64; input tensor S[k] : f64;\n\
         output tensor C[i,j] : {tc};\n",
        2 + rng.below(5),
        1 + rng.below(5),
        2 + rng.below(6),
        1 + rng.below(4)
    );
    let bases = [
        "A[i,k] * B[k,j]",
        "R[i,j]",
        "E[i,j]",
        "A[i,k] * W[k,l] * X[l,j]",
        "A[i,k] * S[k] * B[k,j]",
        "A[i,k] * W[k,l] * X[l,j] * V[j]",
        "(A[i,k] * B[k,j] + E[i,j])",
    ];
    let mut rhs = |rng: &mut Rng| {
        let n = 1 + rng.below(3);
        let mut terms = Vec::new();
        for _ in 0..n {
            let base = bases[rng.below(bases.len() as u64) as usize];
            // Conjugate one factor (or the whole base) at random.
            let text = match rng.below(3) {
                0 => format!("conj({base})"),
                1 => base.replacen("A[i,k]", "conj(A[i,k])", 1).replacen("E[i,j]", "conj(E[i,j])", 1),
                _ => base.to_string(),
            };
            let coef = ["", "2 * ", "0.5 * ", "3 * "][rng.below(4) as usize];
            let sign = if terms.is_empty() { "" } else { [" + ", " - "][rng.below(2) as usize] };
            terms.push(format!("{sign}{coef}{text}"));
        }
        terms.concat()
    };
    s += &format!("C[i,j] = {};\n", rhs(rng));
    if rng.below(2) == 0 {
        s += &format!("C[i,j] += {};\n", rhs(rng));
    }
    if rng.below(2) == 0 {
        s += "C[i,j] = C[i,j] * conj(E[i,j]) + R[i,j];\n";
    }
    s
}

fn random_inputs(hir: &Hir, u: UnitId, rng: &mut Rng) -> HashMap<TensorId, CDense> {
    let mut out = HashMap::new();
    for t in hir.unit_inputs(u) {
        let shape = hir.shape(t);
        let n: usize = shape.iter().product();
        let part = hir.tensors[t].elem.real_part();
        let r = |rng: &mut Rng| tcc::interp::round_to(part, rng.unit());
        let data = (0..n)
            .map(|_| {
                let re = r(rng);
                let im = if hir.tensors[t].elem.is_complex() { r(rng) } else { 0.0 };
                C::new(re, im)
            })
            .collect();
        out.insert(t, CDense { shape, data });
    }
    out
}

/// The lowered program's outputs joined into complex values, compiled by the JIT.
fn jit(hir: &Hir, u: UnitId, inputs: &HashMap<TensorId, CDense>) -> HashMap<TensorId, CDense> {
    let (low, map) = tcc::tir::complex::lower(hir);
    assert!(low.tensors.iter().all(|t| !t.elem.is_complex()), "the lowered program is real");
    tcc::valid::hir::validate(&low).expect("the lowered HIR is valid");
    let mut parts = HashMap::new();
    for (&t, v) in inputs {
        parts.insert(t, Dense { shape: v.shape.clone(), data: v.data.iter().map(|z| z.re).collect() });
        if let Some((_, im)) = map.parts(t) {
            parts.insert(im, Dense { shape: v.shape.clone(), data: v.data.iter().map(|z| z.im).collect() });
        }
    }
    let r = tcc::codegen::llvm::jit_run(&low, u, &parts, &Default::default(), 1).expect("jit");
    let mut out = HashMap::new();
    for t in hir.unit_outputs(u) {
        let re = &r.outputs[&t];
        let data = match map.parts(t) {
            Some((_, im)) => re.data.iter().zip(&r.outputs[&im].data).map(|(&a, &b)| C::new(a, b)).collect(),
            None => re.data.iter().map(|&a| C::new(a, 0.0)).collect(),
        };
        out.insert(t, CDense { shape: re.shape.clone(), data });
    }
    out
}

/// max |got − want| / max |want| over both parts.
fn rel(got: &CDense, want: &CDense) -> f64 {
    let scale = want.data.iter().map(|z| z.re.abs().max(z.im.abs())).fold(f64::MIN_POSITIVE, f64::max);
    let diff = got.data.iter().zip(&want.data).map(|(a, b)| (a.re - b.re).abs().max((a.im - b.im).abs())).fold(0.0, f64::max);
    diff / scale
}

#[test]
fn random_complex_programs_jit_against_the_complex_interpreter() {
    let mut rng = Rng(21);
    let mut complex_results = 0;
    for case in 0..24 {
        let src = random_program(&mut rng);
        let (hir, diags) = tcc::compile(&src, "p");
        let hir = hir.unwrap_or_else(|| panic!("case {case}: {diags:?}\n{src}"));
        let u = UnitId::new(0);
        let inputs = random_inputs(&hir, u, &mut rng);
        let want = run_unit(&hir, u, &inputs).expect("interpreter");
        let got = jit(&hir, u, &inputs);
        let c = hir.tensor_by_name("C").unwrap();
        // f32 parts anywhere: the f32 tolerance of `tcc run --check`.
        let any_c64 = hir.tensors.iter().any(|t| t.elem == tcc::sema::hir::ElemType::C64);
        let tol = if any_c64 { 1e-4 } else { 1e-10 };
        let r = rel(&got[&c], &want[&c]);
        assert!(r <= tol, "case {case}: relative difference {r:e} > {tol:e}\n{src}");
        complex_results += want[&c].data.iter().any(|z| z.im != 0.0) as usize;
    }
    assert!(complex_results >= 16, "only {complex_results} programs had a complex result");
}

/// The lowered program without the optimizer's help: the native interpreter on
/// the lowered HIR (real) equals the complex interpreter on the original.
#[test]
fn lowering_is_exact_under_the_real_interpreter() {
    let mut rng = Rng(7);
    for case in 0..24 {
        let src = random_program(&mut rng);
        let (hir, diags) = tcc::compile(&src, "p");
        let hir = hir.unwrap_or_else(|| panic!("case {case}: {diags:?}\n{src}"));
        let u = UnitId::new(0);
        let inputs = random_inputs(&hir, u, &mut rng);
        let want = run_unit(&hir, u, &inputs).unwrap();
        let (low, map) = tcc::tir::complex::lower(&hir);
        let mut parts = HashMap::new();
        for (&t, v) in &inputs {
            parts.insert(t, Dense { shape: v.shape.clone(), data: v.data.iter().map(|z| z.re).collect() });
            if let Some((_, im)) = map.parts(t) {
                parts.insert(im, Dense { shape: v.shape.clone(), data: v.data.iter().map(|z| z.im).collect() });
            }
        }
        let out = tcc::interp::run_unit(&low, u, &parts).unwrap();
        let c = hir.tensor_by_name("C").unwrap();
        let (re, im) = map.parts(c).unwrap();
        let got = CDense {
            shape: want[&c].shape.clone(),
            data: out[&re].data.iter().zip(&out[&im].data).map(|(&a, &b)| C::new(a, b)).collect(),
        };
        let r = rel(&got, &want[&c]);
        assert!(r <= 1e-12, "case {case}: {r:e}\n{src}");
    }
}

/// A product of k complex factors is cut into binary products: 4 real terms per
/// step, never 2^k.
#[test]
fn long_products_are_binarized() {
    let src = "range N = 3; index a, b, c, d, e : N;\n\
               input tensor A[a,b] : c128; input tensor B[b,c] : c128; input tensor D[c,d] : c128;\n\
               input tensor F[d,e] : c128; output tensor G[a,e] : c128;\n\
               G[a,e] = A[a,b] * B[b,c] * D[c,d] * F[d,e];\n";
    let (hir, _) = tcc::compile(src, "p");
    let (low, _) = tcc::tir::complex::lower(&hir.unwrap());
    let stmts = &low.units[UnitId::new(0)].stmts;
    // Two temporaries (re, im) per cut, then G's two parts.
    assert_eq!(stmts.len(), 6);
    assert!(stmts.iter().all(|s| s.rhs.terms.len() == 2 && s.rhs.terms.iter().all(|t| t.factors.len() == 2)));
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tcc(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tcc")).args(args).current_dir(dir).output().expect("run tcc")
}

const GEMM: &str = "range N = 6; range K = 5; index i, j : N; index k : K;\n\
                    input tensor A[i,k] : c128; input tensor B[k,j] : c64; input tensor R[i,j] : f64;\n\
                    output tensor C[i,j] : c128;\n\
                    C[i,j] = A[i,k] * conj(B[k,j]) - 0.5 * R[i,j];\n";

#[test]
fn run_outputs_agree_with_numpy() {
    let ok = Command::new("python3").args(["-c", "import numpy"]).output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "python3 with numpy is required under CI");
        eprintln!("skipping: python3 with numpy is not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("g.tc"), GEMM).unwrap();
    let out = tcc(&["run", "g.tc", "--check", "--output-dir", "out", "--save-inputs"], dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("check: matches the complex interpreter"), "{text}");
    let script = "import numpy as np\n\
                  A=np.load('out/A.npy'); B=np.load('out/B.npy'); R=np.load('out/R.npy'); C=np.load('out/C.npy')\n\
                  assert A.dtype==np.complex128 and B.dtype==np.complex64 and R.dtype==np.float64 and C.dtype==np.complex128\n\
                  W=np.einsum('ik,kj->ij', A, np.conj(B).astype(np.complex128)) - 0.5*R\n\
                  err=np.abs(C-W).max()/np.abs(W).max()\n\
                  assert err < 1e-12, err\n\
                  print('ok', err)\n";
    let py = Command::new("python3").args(["-c", script]).current_dir(dir.path()).output().unwrap();
    assert!(py.status.success(), "{}{}", String::from_utf8_lossy(&py.stdout), String::from_utf8_lossy(&py.stderr));
    // The saved inputs read back through --input give the same report.
    let again = tcc(&["run", "g.tc", "--input", "A=out/A.npy", "--input", "B=out/B.npy", "--input", "R=out/R.npy"], dir.path());
    let first = text.lines().nth(1).unwrap().to_string();
    assert_eq!(String::from_utf8_lossy(&again.stdout).lines().nth(1).unwrap(), first);
}

#[test]
fn complex_interface_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("g.tc"), GEMM).unwrap();
    let out = tcc(&["run", "g.tc", "--output-dir", "out", "--save-inputs"], dir.path());
    assert!(out.status.success());
    // A real array for a complex tensor, and a complex one for a real tensor.
    for (arg, want) in [("A=out/R.npy", "E0325"), ("R=out/A.npy", "E0325")] {
        let out = tcc(&["run", "g.tc", "--input", arg], dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "{arg}: {err}");
    }
    // Modes that do not take complex programs refuse them.
    for args in [&["run", "g.tc", "--tiled"][..], &["run", "g.tc", "--ranks", "2"], &["build", "g.tc", "-o", "libg.so"]] {
        let out = tcc(args, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(err.contains("E0324"), "{args:?}: {err}");
    }
    let _ = root();
}
