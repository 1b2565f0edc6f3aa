//! 16-bit storage types (`bf16`, `f16`): random programs compiled by the JIT
//! against the interpreter (the oracle, within the per-type tolerance of
//! `tcc run --check`), the interpreter's rounding, conversions and `.npy` files
//! against numpy (`np.float16`, `ml_dtypes.bfloat16`), and the interface errors.

mod common;

use common::{gcc_available, half_program, python, python_with, root, run_c_driver, tcc_in as tcc, Rng};
use std::collections::HashMap;
use tcc::interp::{round_to, run_unit};
use tcc::run::compare::{check_outputs, TOL_BF16};
use tcc::sema::hir::{ElemType, Hir, TensorId, UnitId};
use tcc::tensor::Dense;

fn random_inputs(hir: &Hir, u: UnitId, rng: &mut Rng) -> HashMap<TensorId, Dense> {
    common::inputs_with(hir, u, |e| round_to(e, rng.unit()))
}

/// JIT against the interpreter on random programs: within the stated tolerance
/// (as `tcc run --check` judges), every 16-bit output exactly a value of its type
/// (rounded once as it leaves), and the interpreter's 16-bit results too.
#[test]
fn random_half_programs_jit_against_the_interpreter() {
    let mut rng = Rng(2116);
    let (mut bf16_out, mut f16_out) = (0, 0);
    for case in 0..32 {
        let src = half_program(&mut rng);
        let (hir, diags) = tcc::compile(&src, "p");
        let hir = hir.unwrap_or_else(|| panic!("case {case}: {diags:?}\n{src}"));
        let u = UnitId::new(0);
        let inputs = random_inputs(&hir, u, &mut rng);
        let want = run_unit(&hir, u, &inputs).expect("interpreter");
        let got = tcc::codegen::llvm::jit_run(&hir, u, &inputs, &Default::default(), 1).expect("jit").outputs;
        let c = hir.tensor_by_name("C").unwrap();
        let elem = hir.tensors[c].elem;
        for (what, v) in [("jit", &got[&c]), ("interpreter", &want[&c])] {
            if elem.is_half() {
                assert!(
                    v.data.iter().all(|&x| round_to(elem, x) == x),
                    "case {case}: {what} output not {}",
                    elem.name()
                );
            }
        }
        let tol = tcc::run::compare::tolerance(&hir, u);
        assert!(tol <= TOL_BF16);
        match check_outputs(&hir, u, &got, &want, &inputs) {
            Ok(r) => assert!(r <= tol, "case {case}: {r:e}"),
            Err(m) => panic!("case {case}: {m}\n{src}"),
        }
        bf16_out += (elem == ElemType::BF16) as usize;
        f16_out += (elem == ElemType::F16) as usize;
    }
    assert!(bf16_out >= 4 && f16_out >= 4, "{bf16_out} bf16 and {f16_out} f16 outputs");
}

/// The interpreter is the oracle: a statement's result is rounded once when
/// stored (1 + 2^-9 is not a bf16: it rounds to 1, ties to even), a 16-bit
/// intermediate holds the rounded value, and the f16 result of the same sums
/// keeps what f16 can.
#[test]
fn interpreter_rounds_each_stored_result_once() {
    let src = "range N = 2; index i : N;\n\
               input tensor A[i] : bf16; input tensor B[i] : bf16; input tensor F[i] : f16;\n\
               tensor T[i] : bf16; output tensor C[i] : bf16; output tensor G[i] : f16;\n\
               output tensor D[i] : f32;\n\
               T[i] = A[i] + B[i];\nC[i] = T[i] + B[i];\nD[i] = T[i] * 1;\nG[i] = F[i] + F[i] * F[i];\n";
    let (hir, diags) = tcc::compile(src, "p");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let u = UnitId::new(0);
    let id = |n: &str| hir.tensor_by_name(n).unwrap();
    let e = 2f64.powi(-9);
    let inputs: HashMap<TensorId, Dense> = [
        (id("A"), Dense::from_vec(vec![2], vec![1.0, 256.0])),
        (id("B"), Dense::from_vec(vec![2], vec![e, 1.0])),
        (id("F"), Dense::from_vec(vec![2], vec![1.0, 0.5])),
    ]
    .into_iter()
    .collect();
    let out = run_unit(&hir, u, &inputs).unwrap();
    // T = (1 + 2^-9, 257) → (1, 256); C = T + B → (1 + 2^-9 → 1, 257 → 256).
    assert_eq!(out[&id("D")].data, vec![1.0, 256.0]);
    assert_eq!(out[&id("C")].data, vec![1.0, 256.0]);
    assert_eq!(out[&id("G")].data, vec![2.0, 0.75]);
    // The JIT keeps T in f32 (the documented difference), so C[0] differs by one
    // bf16 ulp at most from the oracle: here T = 1 + 2^-9, C = 1 + 2^-8 → 1 + 2^-7
    // or 1 (ties to even) — both within TOL_BF16.
    let got = tcc::codegen::llvm::jit_run(&hir, u, &inputs, &Default::default(), 1).unwrap().outputs;
    for (t, w) in &out {
        let g = &got[t];
        for (a, b) in g.data.iter().zip(&w.data) {
            assert!((a - b).abs() <= TOL_BF16 * b.abs().max(1.0), "{}: {a} vs {b}", hir.tensors[*t].name);
        }
    }
}

/// `tcc::half`'s conversions against numpy's float16 and ml_dtypes' bfloat16 on
/// values that exercise ties, subnormals, overflow, infinities and NaN; the
/// `.npy` reader on the `<f2` and `<u2` files numpy writes.
#[test]
fn conversions_agree_with_numpy_and_ml_dtypes() {
    if !python_with("numpy, ml_dtypes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    python(
        "import numpy as np, ml_dtypes\n\
         r=np.random.default_rng(5)\n\
         x=np.concatenate([r.standard_normal(4000)*10.0**r.integers(-9,7,4000),\n\
           r.integers(0,2**32,4000,dtype=np.uint64).astype(np.uint32).view(np.float32),\n\
           np.array([0.0,-0.0,np.inf,-np.inf,65504,65520,65519.99,2.0**-24,2.0**-25,3*2.0**-26,1+2.0**-11,1+3*2.0**-11,1+2.0**-8,1+3*2.0**-8,3.4e38])]).astype(np.float32)\n\
         x=x[~np.isnan(x)]\n\
         np.save('x.npy', x)\n\
         np.save('h.npy', x.astype(np.float16))\n\
         np.save('b.npy', x.astype(ml_dtypes.bfloat16).view(np.uint16))\n",
        dir.path(),
    );
    let (x, ex) = tcc::npy::read_file(&dir.path().join("x.npy")).unwrap();
    let (h, eh) = tcc::npy::read_file(&dir.path().join("h.npy")).unwrap();
    let (b, eb) = tcc::npy::read_file(&dir.path().join("b.npy")).unwrap();
    assert_eq!((ex, eh, eb), (ElemType::F32, ElemType::F16, ElemType::BF16));
    assert!(x.data.len() > 7900, "{}", x.data.len());
    for ((&x, &h), &b) in x.data.iter().zip(&h.data).zip(&b.data) {
        let xf = x as f32;
        let mine_h = tcc::half::f16_to_f32(tcc::half::f32_to_f16(xf));
        let mine_b = tcc::half::bf16_to_f32(tcc::half::f32_to_bf16(xf));
        assert_eq!(mine_h.to_bits(), (h as f32).to_bits(), "f16 of {xf:e}");
        assert_eq!(mine_b.to_bits(), (b as f32).to_bits(), "bf16 of {xf:e}");
        assert_eq!(round_to(ElemType::F16, x), h);
        assert_eq!(round_to(ElemType::BF16, x), b);
    }
    // Written back, the files hold the same bits numpy wrote.
    for (name, v, e) in [("h.npy", &h, ElemType::F16), ("b.npy", &b, ElemType::BF16)] {
        let ours = tcc::npy::write_bytes(v, e).unwrap();
        let theirs = std::fs::read(dir.path().join(name)).unwrap();
        let tail = |f: &[u8]| f[f.len() - 2 * v.data.len()..].to_vec();
        assert_eq!(tail(&ours), tail(&theirs), "{name}");
    }
}

const MLP: &str = "range B = 8; range D = 48; range H = 40; index b : B; index d : D; index h : H;\n\
                   input tensor X[b,d] : bf16; input tensor W[d,h] : bf16; input tensor G[h] : f16;\n\
                   output tensor Y[b,h] : bf16; output tensor Z[b,h] : f16;\n\
                   Y[b,h] = X[b,d] * W[d,h];\nZ[b,h] = Y[b,h] * G[h];\n";

/// `tcc run` of a bf16/f16 program against numpy with ml_dtypes: the saved
/// inputs and outputs have the documented dtypes (`<u2` bf16 bits, `<f2`), and
/// the outputs are the f32 products rounded once (Y exactly up to accumulation
/// order; Z within half a bf16 ulp of Y and an f16 ulp of numpy's Z from the
/// stored Y, and one f16 ulp of the f32 Y times G rounded: compiled code reads
/// the f32 Y it computed, the documented difference from the interpreter).
#[test]
fn run_outputs_agree_with_numpy() {
    if !python_with("numpy, ml_dtypes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.tc"), MLP).unwrap();
    let out = tcc(&["run", "m.tc", "--check", "--output-dir", "out", "--save-inputs"], dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("check: matches the interpreter"), "{text}");
    python(
        "import numpy as np, ml_dtypes\n\
         bf=lambda f: np.load(f).view(ml_dtypes.bfloat16)\n\
         raw=[np.load('out/'+n+'.npy') for n in 'XWYGZ']\n\
         assert [a.dtype.str for a in raw]==['<u2','<u2','<u2','<f2','<f2'], [a.dtype.str for a in raw]\n\
         X=bf('out/X.npy').astype(np.float32); W=bf('out/W.npy').astype(np.float32)\n\
         G=np.load('out/G.npy').astype(np.float32)\n\
         Y=bf('out/Y.npy').astype(np.float32); Z=np.load('out/Z.npy').astype(np.float32)\n\
         want=(X@W).astype(ml_dtypes.bfloat16).astype(np.float32)\n\
         ulp=np.abs(want)*2.0**-7+1e-30\n\
         assert (np.abs(Y-want)<=ulp).all(), np.abs(Y-want).max()\n\
         assert (Y==want).mean()>0.9, (Y==want).mean()\n\
         wz=(Y*G).astype(np.float16).astype(np.float32)\n\
         assert (np.abs(Z-wz)<=np.abs(Y*G)*(2.0**-8+2.0**-10)*1.01+2.0**-24).all(), np.abs(Z-wz).max()\n\
         wj=((X@W)*G).astype(np.float16).astype(np.float32)\n\
         assert (np.abs(Z-wj)<=np.abs(wj)*2.0**-10*1.01+2.0**-24).all() and (Z==wj).mean()>0.9, (Z==wj).mean()\n",
        dir.path(),
    );
    // The saved inputs read back through --input give the same report.
    let again =
        tcc(&["run", "m.tc", "--input", "X=out/X.npy", "--input", "W=out/W.npy", "--input", "G=out/G.npy"], dir.path());
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(String::from_utf8_lossy(&again.stdout).lines().nth(1), text.lines().nth(1));
}

/// Misuse at the interface: arrays of another dtype for a 16-bit tensor (or a
/// 16-bit array for another type) are E0328, never converted or reinterpreted;
/// modes without a 16-bit path (distributed runs without `--tiled`) refuse the
/// program with E0327.
#[test]
fn half_interface_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.tc"), MLP).unwrap();
    std::fs::write(
        dir.path().join("f.tc"),
        "range N = 4; index i : N; input tensor P[i] : f32; output tensor Q[i] : f32; Q[i] = 2 * P[i];\n",
    )
    .unwrap();
    let out = tcc(&["run", "m.tc", "--output-dir", "out", "--save-inputs"], dir.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let x = tcc::npy::read_file(&dir.path().join("out/X.npy")).unwrap().0;
    tcc::npy::write_file(&dir.path().join("x32.npy"), &x, ElemType::F32).unwrap();
    let g = tcc::npy::read_file(&dir.path().join("out/G.npy")).unwrap().0;
    tcc::npy::write_file(&dir.path().join("g16.npy"), &Dense::from_vec(vec![4], g.data[..4].to_vec()), ElemType::F16)
        .unwrap();
    for (file, arg) in [("m.tc", "X=x32.npy"), ("m.tc", "X=out/G.npy"), ("m.tc", "G=out/W.npy"), ("f.tc", "P=g16.npy")]
    {
        let out = tcc(&["run", file, "--input", arg], dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{arg}: {err}");
        assert!(err.contains("E0328"), "{arg}: {err}");
    }
    // (The GPU commands take 16-bit programs: tests/gpu_half.rs.)
    for args in [&["run", "m.tc", "--ranks", "2"][..], &["run", "m.tc", "--ranks", "2", "--plan"]] {
        let out = tcc(args, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("E0327"), "{args:?}: {err}");
    }
}

/// The example checks against the interpreter through `tcc run --check`.
#[test]
fn bf16_mlp_example_checks() {
    let out = tcc(&["run", "examples/bf16_mlp.tc", "--check"], root());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("check: matches the interpreter") && text.contains("bf16["), "{text}");
}

/// `tcc build` of a bf16/f16 program: the C header takes `uint16_t*` bit
/// patterns; a C caller's outputs are those of the interpreter within the
/// tolerance (and the JIT's, bit for bit in nearly every element: the same
/// widened code); a wrong length is `TCC_ERR_LENGTH`.
#[test]
fn library_from_c_with_16_bit_arguments() {
    if !gcc_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("m.tc"), MLP).unwrap();
    let out = tcc(&["build", "m.tc", "-o", "libhm.so"], d);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let h = std::fs::read_to_string(d.join("hm.h")).unwrap();
    assert!(h.contains("const uint16_t* X") && h.contains("uint16_t* Z") && h.contains("#include <stdint.h>"), "{h}");
    let f90 = std::fs::read_to_string(d.join("hm.f90")).unwrap();
    assert!(f90.contains("integer(c_int16_t)"), "{f90}");
    let (hir, _) = tcc::compile(MLP, "main");
    let hir = hir.unwrap();
    let u = UnitId::new(0);
    let mut rng = Rng(99);
    let inputs = random_inputs(&hir, u, &mut rng);
    let bits = |name: &str| -> String {
        let t = hir.tensor_by_name(name).unwrap();
        let e = hir.tensors[t].elem;
        inputs[&t]
            .data
            .iter()
            .map(|&x| {
                let b = if e == ElemType::BF16 {
                    tcc::half::f32_to_bf16(x as f32)
                } else {
                    tcc::half::f32_to_f16(x as f32)
                };
                b.to_string()
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let c = format!(
        "#include <stdio.h>\n#include \"hm.h\"\n\
         static const uint16_t X[384] = {{{}}};\nstatic const uint16_t W[1920] = {{{}}};\n\
         static const uint16_t G[40] = {{{}}};\nstatic uint16_t Y[320], Z[320];\n\
         int main(void) {{\n\
           if (tcc_hm_main(X, 384, W, 1920, G, 40, Y, 320, Z, 320) != TCC_OK) {{ puts(tcc_hm_last_error()); return 1; }}\n\
           for (int k = 0; k < 320; k++) printf(\"%u %u\\n\", Y[k], Z[k]);\n\
           if (tcc_hm_main(X, 383, W, 1920, G, 40, Y, 320, Z, 320) != TCC_ERR_LENGTH) return 3;\n\
           return 0;\n}}\n",
        bits("X"),
        bits("W"),
        bits("G")
    );
    let run = run_c_driver(d, "hm", &c);
    let (mut y, mut z) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&run.stdout).lines() {
        let mut w = line.split(' ').map(|v| v.parse::<u16>().unwrap());
        y.push(tcc::half::bf16_to_f32(w.next().unwrap()) as f64);
        z.push(tcc::half::f16_to_f32(w.next().unwrap()) as f64);
    }
    let (ty, tz) = (hir.tensor_by_name("Y").unwrap(), hir.tensor_by_name("Z").unwrap());
    let got: HashMap<TensorId, Dense> =
        [(ty, Dense::from_vec(vec![8, 40], y)), (tz, Dense::from_vec(vec![8, 40], z))].into_iter().collect();
    let want = run_unit(&hir, u, &inputs).unwrap();
    check_outputs(&hir, u, &got, &want, &inputs).unwrap();
    let jit = tcc::codegen::llvm::jit_run(&hir, u, &inputs, &Default::default(), 1).unwrap().outputs;
    for t in [ty, tz] {
        let same = got[&t].data.iter().zip(&jit[&t].data).filter(|(a, b)| a == b).count();
        assert!(same * 20 >= 19 * 320, "{} of 320 elements equal the JIT's", same);
    }
}
