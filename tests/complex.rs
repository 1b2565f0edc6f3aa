//! Complex element types (`c64`, `c128`): random complex programs run by the JIT
//! on the lowered program (`tir::complex`) against the complex interpreter on the
//! unlowered one; `tcc run` outputs against numpy; the errors of complex misuse.

mod common;

use common::{gcc_available, python, python_with, root, run_c_driver, tcc_in as tcc, Rng};
use std::collections::HashMap;
use std::process::Command;
use tcc::interp_complex::{run_unit, CDense, C};
use tcc::sema::hir::{Hir, TensorId, UnitId};

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
    let rhs = |rng: &mut Rng| {
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
    let r = tcc::codegen::llvm::jit_run(&low, u, &map.split(inputs), &Default::default(), 1).expect("jit");
    hir.unit_outputs(u).into_iter().map(|t| (t, map.join(t, &r.outputs).expect("both parts"))).collect()
}

/// max |got − want| / max |want| over both parts.
fn rel(got: &CDense, want: &CDense) -> f64 {
    let scale = want.data.iter().map(|z| z.re.abs().max(z.im.abs())).fold(f64::MIN_POSITIVE, f64::max);
    let diff =
        got.data.iter().zip(&want.data).map(|(a, b)| (a.re - b.re).abs().max((a.im - b.im).abs())).fold(0.0, f64::max);
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
        let parts = map.split(&inputs);
        let out = tcc::interp::run_unit(&low, u, &parts).unwrap();
        let c = hir.tensor_by_name("C").unwrap();
        let got = map.join(c, &out).expect("both parts");
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

const GEMM: &str = "range N = 6; range K = 5; index i, j : N; index k : K;\n\
                    input tensor A[i,k] : c128; input tensor B[k,j] : c64; input tensor R[i,j] : f64;\n\
                    output tensor C[i,j] : c128;\n\
                    C[i,j] = A[i,k] * conj(B[k,j]) - 0.5 * R[i,j];\n";

#[test]
fn run_outputs_agree_with_numpy() {
    if !python_with("numpy") {
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
    python(script, dir.path());
    // The saved inputs read back through --input give the same report.
    let again =
        tcc(&["run", "g.tc", "--input", "A=out/A.npy", "--input", "B=out/B.npy", "--input", "R=out/R.npy"], dir.path());
    let first = text.lines().nth(1).unwrap().to_string();
    assert_eq!(String::from_utf8_lossy(&again.stdout).lines().nth(1).unwrap(), first);
    // numpy's other layouts of the same values: Fortran order, big-endian.
    let script = "import numpy as np\n\
                  A=np.load('out/A.npy'); B=np.load('out/B.npy')\n\
                  np.save('A_f.npy', np.asfortranarray(A)); np.save('B_be.npy', B.astype('>c8'))\n";
    python(script, dir.path());
    let other =
        tcc(&["run", "g.tc", "--input", "A=A_f.npy", "--input", "B=B_be.npy", "--input", "R=out/R.npy"], dir.path());
    assert!(other.status.success(), "{}", String::from_utf8_lossy(&other.stderr));
    assert_eq!(String::from_utf8_lossy(&other.stdout).lines().nth(1).unwrap(), first);
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
    // Modes that do not take complex programs refuse them (`tcc build --target
    // cuda` builds them: `build_for_cuda_of_complex_programs`).
    let out = tcc(&["run", "g.tc", "--ranks", "2"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("E0324"), "{err}");
}

/// `tcc build` of a complex program: the C header takes `double _Complex*` /
/// `float _Complex*`, the Fortran module `complex(c_double_complex)`; results from
/// C and Fortran match the complex interpreter; a wrong length is an error code.
#[test]
fn library_from_c_and_fortran_with_complex_arguments() {
    if !gcc_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("g.tc"), GEMM).unwrap();
    let out = tcc(&["build", "g.tc", "-o", "libcg.so"], d);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let h = std::fs::read_to_string(d.join("cg.h")).unwrap();
    assert!(
        h.contains("const double _Complex* A")
            && h.contains("const float _Complex* B")
            && h.contains("double _Complex* C"),
        "{h}"
    );
    let f90 = std::fs::read_to_string(d.join("cg.f90")).unwrap();
    assert!(f90.contains("complex(c_double_complex), intent(in) :: a(*)"), "{f90}");
    assert!(f90.contains("complex(c_float_complex), intent(in) :: b(*)"), "{f90}");
    // Inputs as the complex interpreter sees them.
    let (hir, _) = tcc::compile(GEMM, "main");
    let hir = hir.unwrap();
    let u = UnitId::new(0);
    let inputs = random_inputs(&hir, u, &mut Rng(5));
    let want = &run_unit(&hir, u, &inputs).unwrap()[&hir.tensor_by_name("C").unwrap()];
    let lit = |name: &str, complex: bool, float: bool| {
        let v = &inputs[&hir.tensor_by_name(name).unwrap()];
        let items: Vec<String> = v
            .data
            .iter()
            .map(|z| match (complex, float) {
                (true, true) => format!("{:e}f + {:e}f*I", z.re, z.im),
                (true, false) => format!("{:e} + {:e}*I", z.re, z.im),
                _ => format!("{:e}", z.re),
            })
            .collect();
        items.join(", ")
    };
    let want_lit: Vec<String> = want.data.iter().map(|z| format!("{:e} + {:e}*I", z.re, z.im)).collect();
    let c = format!(
        "#include <complex.h>\n#include <stdio.h>\n#include \"cg.h\"\n\
         int main(void) {{\n\
           const double _Complex A[30] = {{{}}};\n const float _Complex B[30] = {{{}}};\n const double R[36] = {{{}}};\n\
           const double _Complex W[36] = {{{}}};\n double _Complex C[36];\n\
           if (tcc_cg_main(A, 30, B, 30, R, 36, C, 36) != TCC_OK) {{ puts(tcc_cg_last_error()); return 1; }}\n\
           double err = 0, scale = 0;\n\
           for (int k = 0; k < 36; k++) {{ double e = cabs(C[k] - W[k]); if (e > err) err = e; if (cabs(W[k]) > scale) scale = cabs(W[k]); }}\n\
           if (err > 1e-6 * scale) {{ printf(\"error %g\\n\", err); return 2; }}\n\
           if (tcc_cg_main(A, 29, B, 30, R, 36, C, 36) != TCC_ERR_LENGTH) return 3;\n\
           if (tcc_cg_last_error() == NULL) return 4;\n\
           puts(\"ok\");\n return 0;\n}}\n",
        lit("A", true, false),
        lit("B", true, true),
        lit("R", false, false),
        want_lit.join(", ")
    );
    run_c_driver(d, "cg", &c);
    // Fortran: the module compiles strictly and a call gives the same C.
    let gf = Command::new("gfortran").arg("--version").output().is_ok_and(|o| o.status.success());
    if !gf {
        return;
    }
    let fm = Command::new("gfortran")
        .current_dir(d)
        .args(["-Wall", "-Wextra", "-Werror", "-std=f2018", "-c", "cg.f90"])
        .output()
        .unwrap();
    assert!(fm.status.success(), "{}", String::from_utf8_lossy(&fm.stderr));
    let module = f90.lines().find_map(|l| l.trim().strip_prefix("module ")).expect("module name").trim().to_string();
    let fortran = format!(
        "program drv\n  use iso_c_binding\n  use {module}\n  implicit none\n\
         complex(c_double_complex) :: a(5, 6), c(6, 6)\n  complex(c_float_complex) :: b(6, 5)\n  real(c_double) :: r(6, 6)\n\
         integer :: i, j\n\
         do i = 1, 5\n do j = 1, 6\n a(i, j) = cmplx(i, j, c_double_complex)\n end do\n end do\n\
         b = (1.0_c_float, -2.0_c_float)\n  r = 0.25_c_double\n\
         if (tcc_cg_main(a, 30_c_size_t, b, 30_c_size_t, r, 36_c_size_t, c, 36_c_size_t) /= 0) stop 1\n\
         ! C[i,j] = sum_k A[i,k] conj(B[k,j]) - R/2, with A[i,k] = (k+1) + (i+1) i in C order\n\
         do i = 1, 6\n do j = 1, 6\n\
           if (abs(c(j, i) - (sum(a(:, i)) * (1.0_c_double, 2.0_c_double) - 0.125_c_double)) > 1e-9_c_double) stop 2\n\
         end do\n end do\n  print '(a)', 'ok'\nend program drv\n"
    );
    std::fs::write(d.join("drv.f90"), fortran).unwrap();
    let fc = Command::new("gfortran")
        .current_dir(d)
        .args(["-o", "drvf", "drv.f90", "cg.o", "-L.", "-lcg"])
        .arg(format!("-Wl,-rpath,{}", d.display()))
        .output()
        .unwrap();
    assert!(fc.status.success(), "{}", String::from_utf8_lossy(&fc.stderr));
    let run = Command::new(d.join("drvf")).current_dir(d).output().unwrap();
    assert!(run.status.success(), "{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
}

/// `examples/complex_mps.tc` checked by `tcc run --check` and recomputed with
/// numpy.einsum from the saved inputs: the state, its norm and an overlap.
#[test]
fn complex_mps_example_agrees_with_numpy() {
    if !python_with("numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ex = root().join("examples/complex_mps.tc");
    let out = Command::new(env!("CARGO_BIN_EXE_tcc"))
        .args(["run", "--check", "--seed", "4", "--save-inputs", "--output-dir"])
        .arg(dir.path())
        .arg(&ex)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("check: matches the complex interpreter"), "{text}");
    let script = "import numpy as np\n\
                  L=lambda n: np.load(n+'.npy')\n\
                  A=[L('A%d'%k) for k in range(1,5)]; B=[L('B%d'%k) for k in range(1,5)]\n\
                  psi=np.einsum('sa,atb,buc,cv->stuv', *A)\n\
                  phi=np.einsum('sa,atb,buc,cv->stuv', *B)\n\
                  def close(x, y): assert np.abs(x-y).max() <= 1e-12*max(1, np.abs(y).max()), (x, y)\n\
                  close(L('Psi'), psi)\n\
                  close(L('Norm'), np.vdot(psi, psi))\n\
                  close(L('Overlap'), np.vdot(phi, psi))\n\
                  print('ok')\n";
    python(script, dir.path());
}

/// The GPU path of complex programs (`tcc run --target cuda` runs the lowered
/// program's plan): every plan kind, emulated on the CPU, against the complex
/// interpreter.
#[test]
fn gpu_plans_of_lowered_programs_match_the_complex_interpreter() {
    use tcc::codegen::nvptx::{emulate, plan, GemmKind, GpuOptions};
    let mut rng = Rng(33);
    let kinds = [None, Some(GemmKind::Cublas), Some(GemmKind::Tiled), Some(GemmKind::Naive)];
    for case in 0..8 {
        let src = random_program(&mut rng);
        let (hir, _) = tcc::compile(&src, "p");
        let hir = hir.unwrap();
        let u = UnitId::new(0);
        let inputs = random_inputs(&hir, u, &mut rng);
        let want = run_unit(&hir, u, &inputs).unwrap();
        let (low, map) = tcc::tir::complex::lower(&hir);
        let parts = map.split(&inputs);
        let kind = kinds[case % kinds.len()];
        let p = plan(&low, &[u], &GpuOptions { gemm: kind, ..Default::default() }).unwrap();
        let out = emulate(&p, 0, &parts).unwrap();
        let c = hir.tensor_by_name("C").unwrap();
        let got = map.join(c, &out).expect("both parts");
        let any_c64 = hir.tensors.iter().any(|t| t.elem == tcc::sema::hir::ElemType::C64);
        let tol = if any_c64 { 1e-4 } else { 1e-10 };
        let r = rel(&got, &want[&c]);
        assert!(r <= tol, "case {case} ({kind:?}): {r:e}\n{src}");
    }
}

/// Affine subscripts and slices of unions (`range P = O + V;`) on complex
/// tensors, through the JIT, against the complex interpreter.
#[test]
fn affine_reads_and_union_slices_of_complex_tensors() {
    let src = "range O = 3; range V = 4; range P = O + V; range Y = 3; range R = 3; range H = 9;\n\
               index o, o2 : O; index v : V; index p, q : P; index y : Y; index r : R; index h : H;\n\
               input tensor F[p,q] : c128; input tensor I[h] : c64; input tensor K[r] : c128;\n\
               output tensor G[p,q] : c128; output tensor S[y] : c128;\n\
               G[o,v] = F[o,o2] * conj(F[o2,v]);\n\
               G[v,o] = 2 * conj(F[o,v]);\n\
               G[o,o2] += F[o,v] * F[v,o2] * F[o2,o2];\n\
               S[y] = I[2*y+r] * conj(K[r]) + I[y+1];\n";
    let (hir, diags) = tcc::compile(src, "p");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let u = UnitId::new(0);
    let inputs = random_inputs(&hir, u, &mut Rng(9));
    let want = run_unit(&hir, u, &inputs).unwrap();
    let got = jit(&hir, u, &inputs);
    for name in ["G", "S"] {
        let t = hir.tensor_by_name(name).unwrap();
        let r = rel(&got[&t], &want[&t]);
        // S reads a c64 input: within the f32 tolerance.
        assert!(r <= 1e-6, "{name}: {r:e}");
        assert!(want[&t].data.iter().any(|z| z.im != 0.0), "{name} is complex");
    }
}

/// Compiles the C shim `NAME.c` of `tcc build --target cuda` in `dir` with `cc
/// -Werror` against the host mock of CUDA (`tests/gpu_mock`), syntax only.
fn shim_compiles(dir: &std::path::Path, name: &str) {
    let cc = Command::new("cc")
        .current_dir(dir)
        .args(["-std=c99", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"])
        .args(["-fsyntax-only", "-I"])
        .arg(root().join("tests/gpu_mock"))
        .arg(format!("{name}.c"))
        .output()
        .unwrap();
    assert!(cc.status.success(), "{name}.c: {}", String::from_utf8_lossy(&cc.stderr));
}

/// `tcc build --target cuda` of complex programs (random ones, GEMM and the
/// complex examples): the header declares `double _Complex*` / `float
/// _Complex*` arguments under the source names, the shim compiles, and the plan
/// it wrote (the lowered program's, every kind kept) emulated on the inputs'
/// parts equals the complex interpreter.
#[test]
fn build_for_cuda_of_complex_programs() {
    use tcc::codegen::nvptx::{emulate, GemmKind};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rng = Rng(71);
    let mut sources: Vec<(String, String)> = vec![("gemm".into(), GEMM.into())];
    for ex in ["density_c64", "complex_mps"] {
        sources.push((ex.into(), std::fs::read_to_string(root().join(format!("examples/{ex}.tc"))).unwrap()));
    }
    for k in 0..6 {
        sources.push((format!("r{k}"), random_program(&mut rng)));
    }
    for (name, src) in &sources {
        std::fs::write(d.join(format!("{name}.tc")), src).unwrap();
        let out = tcc(&["build", "--target", "cuda", &format!("{name}.tc"), "-o", &format!("{name}.ptx")], d);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let h = std::fs::read_to_string(d.join(format!("{name}.h"))).unwrap();
        let (hir, _) = tcc::compile(src, "main");
        let hir = hir.unwrap();
        let (args, _) = tcc::codegen::cabi::abi_args(&hir, UnitId::new(0));
        for t in args.iter().map(|&t| &hir.tensors[t]) {
            let ty = match t.elem {
                tcc::sema::hir::ElemType::C128 => "double _Complex",
                tcc::sema::hir::ElemType::C64 => "float _Complex",
                tcc::sema::hir::ElemType::F32 => "float",
                _ => "double",
            };
            let decl = format!("{ty}* {}, size_t {}_len", t.name, t.name);
            assert!(h.contains(&decl), "{name}: `{decl}` not in\n{h}");
            assert!(!h.contains(&format!("{}_re", t.name)), "{name}: the header names parts\n{h}");
        }
        shim_compiles(d, name);
        let plan = tcc::codegen::cuda_build::read_plan(&d.join(format!("{name}.plan.json"))).unwrap();
        let (low, map) = tcc::tir::complex::lower(&hir);
        for (k, up) in plan.units.iter().enumerate() {
            let u = up.unit;
            let inputs = random_inputs(&hir, u, &mut rng);
            let want = run_unit(&hir, u, &inputs).unwrap();
            let any_c64 = hir.tensors.iter().any(|t| t.elem == tcc::sema::hir::ElemType::C64);
            let tol = if any_c64 || low.tensors.iter().any(|t| t.elem == tcc::sema::hir::ElemType::F32) {
                1e-4
            } else {
                1e-10
            };
            for kind in [None, Some(GemmKind::Cublas), Some(GemmKind::Tiled)] {
                let mut p = plan.clone();
                if let Some(kind) = kind {
                    p.force(kind);
                }
                let got = emulate(&p, k, &map.split(&inputs)).unwrap();
                for t in hir.unit_outputs(u) {
                    let z = map.join(t, &got).expect("both parts");
                    let r = rel(&z, &want[&t]);
                    assert!(r <= tol, "{name} ({kind:?}) {}: {r:e}\n{src}", hir.tensors[t].name);
                }
            }
        }
    }
}

/// The complex shim run end to end without a GPU: a complex GEMM with
/// `conj`, planned on cuBLAS alone, its shim linked against the host mock of
/// the CUDA driver and cuBLAS (`tests/gpu_mock`: no PTX runs, fresh device
/// memory is NaN) and called from C with interleaved `double _Complex` /
/// `float _Complex` arrays, against C loops; a wrong length and an output
/// overlapping an input are refused under the source names.
#[test]
fn cuda_shim_of_a_complex_gemm_runs_on_the_host_mock_from_c() {
    if !gcc_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (ty, conj, tol) in [("c128", "conj", "1e-12"), ("c64", "conjf", "1e-5")] {
        let cty = if ty == "c128" { "double _Complex" } else { "float _Complex" };
        let src = format!(
            "range N = 6; range K = 5; range M = 7; index i : N; index j : M; index k : K;\n\
             input tensor A[i,k] : {ty}; input tensor B[k,j] : {ty};\n\
             output tensor C[i,j] : {ty};\n\
             C[i,j] = A[i,k] * conj(B[k,j]);\n"
        );
        std::fs::write(d.join("g.tc"), src).unwrap();
        let out = tcc(&["build", "--target", "cuda", "--gpu-gemm", "cublas", "g.tc", "-o", "g.ptx"], d);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("0 kernel launches"), "{ty}: the mock runs no kernels\n{err}");
        let drv = format!(
            r#"#include "g.h"
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
extern int tcc_mock_launches;
int main(void) {{
    {cty} A[30], B[35], C[42];
    for (int k = 0; k < 30; k++) A[k] = (k % 7) * 0.25 - 0.5 + I * ((k % 5) * 0.3 - 0.4);
    for (int k = 0; k < 35; k++) B[k] = (k % 3) - 1.0 + I * (k % 4) * 0.5;
    int rc = tcc_cuda_main(A, 30, B, 35, C, 42);
    if (rc) {{ printf("rc %d: %s\n", rc, tcc_cuda_last_error()); return 1; }}
    double err = 0, scale = 0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 7; j++) {{
            {cty} w = 0;
            for (int k = 0; k < 5; k++) w += A[i * 5 + k] * {conj}(B[k * 7 + j]);
            err = fmax(err, cabs(C[i * 7 + j] - w));
            scale = fmax(scale, cabs(w));
        }}
    printf("relative error %g, launches %d\n", err / scale, tcc_mock_launches);
    if (!(err <= {tol} * scale) || tcc_mock_launches) return 1;
    rc = tcc_cuda_main(A, 29, B, 35, C, 42);
    if (rc != TCC_ERR_LENGTH || !strstr(tcc_cuda_last_error(), "`A` must have 30")) return 2;
    rc = tcc_cuda_main(A, 30, B, 35, ({cty}*)B + 1, 42);
    if (rc != TCC_ERR_OVERLAP || !strstr(tcc_cuda_last_error(), "`C` overlaps")) return 3;
    return 0;
}}
"#
        );
        std::fs::write(d.join("drv.c"), drv).unwrap();
        let cc = Command::new("gcc")
            .current_dir(d)
            .args(["-std=c99", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"])
            .args(["-o", "drv", "drv.c", "g.c", "-I."])
            .arg(format!("-I{}", root().join("tests/gpu_mock").display()))
            .arg(root().join("tests/gpu_mock/mock.c"))
            .args(["-lpthread", "-lm"])
            .output()
            .unwrap();
        assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
        let run = Command::new(d.join("drv")).current_dir(d).output().unwrap();
        let text = String::from_utf8_lossy(&run.stdout);
        assert!(run.status.success(), "{ty}: exit {:?}\n{text}", run.status.code());
    }
}
