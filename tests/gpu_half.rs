//! 16-bit element types (`bf16`, `f16`) on the GPU back end, without a GPU:
//! plans emulated on the host against the interpreter (the oracle) within the
//! per-type tolerance of `tcc run --check` (`TOL_BF16` 2e-2, `TOL_F16` 3e-3 of
//! the largest magnitude), the storage of interface tensors in 16 bits, the
//! 16-bit loads, stores and conversions in the PTX, and the commands that take
//! such programs now. On a GPU: `bench/gpu/half_device_run.sh`.

mod common;

use common::{half_program, root, tcc_in as tcc, Rng};
use std::collections::HashMap;
use tcc::codegen::nvptx::{
    choices, emit_ptx, emulate, plan, Elem, Epilogue, GemmKind, GpuOptions, GpuPlan, Step, TileCfg,
};
use tcc::interp::{round_to, run_unit};
use tcc::run::compare::{compare_outputs, tolerance, TOL_BF16, TOL_F16};
use tcc::sema::hir::{ElemType, Hir, TensorId, UnitId};
use tcc::tensor::Dense;

fn compile(src: &str) -> Hir {
    let (hir, diags) = tcc::compile(src, "t");
    hir.unwrap_or_else(|| panic!("{diags:?}\n{src}"))
}

/// Random inputs, each value one of its type's (as `tcc run` makes them).
fn inputs(hir: &Hir, u: UnitId, rng: &mut Rng) -> HashMap<TensorId, Dense> {
    common::inputs_with(hir, u, |e| round_to(e, rng.unit()))
}

/// The plan emulated against the interpreter: the worst relative difference
/// (an error beyond the tolerance), and every 16-bit output holding values of
/// its type.
fn check(hir: &Hir, opts: &GpuOptions, rng: &mut Rng) -> Result<f64, String> {
    check_on(hir, opts, &inputs(hir, UnitId::new(0), rng))
}

/// [`check`] on the inputs `ins`.
fn check_on(hir: &Hir, opts: &GpuOptions, ins: &HashMap<TensorId, Dense>) -> Result<f64, String> {
    let u = UnitId::new(0);
    let p = plan(hir, &[u], opts).map_err(|e| e.0)?;
    let ins = ins.clone();
    let want = run_unit(hir, u, &ins).map_err(|e| e.to_string())?;
    let got = emulate(&p, 0, &ins).map_err(|e| e.0)?;
    for (t, v) in &got {
        let e = hir.tensors[*t].elem;
        if e.is_half() && !v.data.iter().all(|&x| round_to(e, x) == x || x.is_nan()) {
            return Err(format!("output `{}` holds values that are not {}", hir.tensors[*t].name, e.name()));
        }
    }
    compare_outputs(hir, u, &got, &want)
}

const TINY: TileCfg = TileCfg { bm: 16, bn: 8, bk: 4, tm: 2, tn: 2, mma: false, stages: 2 };

fn options() -> Vec<GpuOptions> {
    vec![
        GpuOptions::default(),
        GpuOptions { gemm: Some(GemmKind::Cublas), target_threads: Some(1 << 12), ..Default::default() },
        GpuOptions { mem_limit: Some(0), gemm: Some(GemmKind::Cublas), ..Default::default() },
        GpuOptions { gemm: Some(GemmKind::Tiled), tile: Some(TINY), ..Default::default() },
        // The C tile through shared memory, stored (rounded) one element at a time.
        GpuOptions {
            gemm: Some(GemmKind::Tiled),
            tile: Some(TINY),
            epilogue: Some(Epilogue::Staged),
            ..Default::default()
        },
        GpuOptions { gemm: Some(GemmKind::Naive), target_threads: Some(1 << 6), ..Default::default() },
    ]
}

/// Random 16-bit programs under every planning option, emulated, against the
/// interpreter within the per-type tolerance.
#[test]
fn random_half_programs_emulated_against_the_interpreter() {
    let mut rng = Rng(1916);
    let (mut bf16_out, mut f16_out) = (0, 0);
    for case in 0..24 {
        let src = half_program(&mut rng);
        let hir = compile(&src);
        let tol = tolerance(&hir, UnitId::new(0));
        assert!(tol == TOL_BF16 || tol == TOL_F16, "{tol}");
        for o in options() {
            match check(&hir, &o, &mut rng) {
                Ok(r) => assert!(r <= tol),
                Err(m) => panic!("case {case} {o:?}: {m}\n{src}"),
            }
        }
        let c = hir.tensors[hir.tensor_by_name("C").unwrap()].elem;
        bf16_out += (c == ElemType::BF16) as usize;
        f16_out += (c == ElemType::F16) as usize;
    }
    assert!(bf16_out >= 3 && f16_out >= 3, "{bf16_out} bf16 and {f16_out} f16 outputs");
}

/// The 16-bit examples, every option.
#[test]
fn half_examples_emulated_against_the_interpreter() {
    let mut rng = Rng(19);
    for name in ["bf16_mlp.tc", "rmsnorm_f16.tc"] {
        let hir = compile(&std::fs::read_to_string(root().join("examples").join(name)).unwrap());
        for o in options() {
            check(&hir, &o, &mut rng).unwrap_or_else(|e| panic!("{name} {o:?}: {e}"));
        }
    }
}

fn gemm_src(elem: &str, out: &str) -> String {
    format!(
        "range I = 45; range J = 37; range K = 70; range B = 3; index i : I; index j : J; index k : K; index b : B;\n\
         input tensor Q[b,i,k] : {elem}; input tensor P[b,j,k] : {elem};\n\
         output tensor S[b,i,j] : {out};\n\
         S[b,i,j] = 0.125 * Q[b,i,k] * P[b,j,k];\n"
    )
}

fn gemms(steps: &[Step], out: &mut Vec<tcc::codegen::nvptx::GemmCall>) {
    for s in steps {
        match s {
            Step::Gemm(g) => out.push(g.clone()),
            Step::Loop { body, .. } => gemms(body, out),
            Step::Choice(c) => gemms(c.steps(), out),
            _ => {}
        }
    }
}

/// An attention-shaped product `S[b,i,j] = Q[b,i,k]·P[b,j,k]` in bf16 and f16:
/// one cuBLAS call on 16-bit A and B writing the 16-bit output directly (no
/// working buffer, no conversion kernel), inputs and output stored in 16 bits,
/// and the emulated result within the tolerance (a 16-bit output also from
/// tiled and naive kernels).
#[test]
fn gemm_shaped_half_products_use_16_bit_cublas() {
    let mut rng = Rng(7);
    for (elem, e) in [("bf16", Elem::Bf16), ("f16", Elem::F16)] {
        let hir = compile(&gemm_src(elem, elem));
        for o in options() {
            check(&hir, &o, &mut rng).unwrap_or_else(|m| panic!("{elem} {o:?}: {m}"));
        }
        let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
        let up = &p.units[0];
        assert_eq!(choices(&up.steps)[0].alts[choices(&up.steps)[0].chosen].kind, GemmKind::Cublas);
        let mut g = Vec::new();
        gemms(&up.steps, &mut g);
        assert_eq!(g.len(), 1, "{:?}", up.steps);
        assert_eq!(g[0].half, Some(e));
        assert_eq!(g[0].beta, 0.0);
        for b in [g[0].a.buf, g[0].b.buf, g[0].c.buf] {
            assert_eq!(up.buffers[b].elem, e, "{:?}", up.buffers);
        }
        assert_eq!(up.buffers.len(), 3, "no working buffer: {:?}", up.buffers);
        // A 16-bit product into an f32 output: C in f32, A and B still 16-bit.
        let hir = compile(&gemm_src(elem, "f32"));
        check(&hir, &GpuOptions::default(), &mut rng).unwrap();
        let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
        let mut g = Vec::new();
        gemms(&p.units[0].steps, &mut g);
        assert_eq!((g.len(), g[0].half), (1, Some(e)));
        assert_eq!(p.units[0].buffers[g[0].c.buf].elem, Elem::F32);
    }
}

/// An output that a step accumulates into (`+=`, or a sum split across threads
/// with atomics) is computed in an f32 working buffer and rounded once into
/// its 16-bit buffer at the end, as the CPU rounds it once.
#[test]
fn accumulated_half_outputs_round_once_at_the_end() {
    let src = "range N = 8; range K = 300; index i : N; index k : K;\n\
               input tensor A[i,k] : bf16; input tensor B[k] : bf16; input tensor D[i] : bf16;\n\
               output tensor C[i] : bf16;\n\
               C[i] = A[i,k] * B[k];\nC[i] += D[i];\n";
    let hir = compile(src);
    let mut rng = Rng(3);
    for o in options() {
        check(&hir, &o, &mut rng).unwrap_or_else(|m| panic!("{o:?}: {m}"));
    }
    let p: GpuPlan = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
    let up = &p.units[0];
    let c = up.buf_of(hir.tensor_by_name("C").unwrap()).unwrap();
    assert_eq!(up.buffers[c].elem, Elem::Bf16);
    let work = up.buffers.iter().position(|b| b.name == "_f32_C").expect("a working buffer");
    assert_eq!(up.buffers[work].elem, Elem::F32);
    // The last step rounds the working buffer into C.
    match up.steps.last() {
        Some(Step::Launch { kernel, args }) => {
            assert_eq!((args[0].buf, args[1].buf), (c, work));
            assert_eq!(p.kernels[*kernel].out, Some(Elem::Bf16));
        }
        s => panic!("{s:?}"),
    }
}

/// The PTX of 16-bit programs: 16-bit loads and stores, bf16 widened by a
/// shift, f16 by `cvt.f32.f16`, results rounded by `cvt.rn.bf16.f32` /
/// `cvt.rn.f16.f32`; pointers stay `.u64` parameters.
#[test]
fn ptx_loads_and_stores_16_bits() {
    for (elem, cvt_in, cvt_out) in [("bf16", "shl.b32", "cvt.rn.bf16.f32"), ("f16", "cvt.f32.f16", "cvt.rn.f16.f32")] {
        let src = format!(
            "range N = 33; range K = 20; index i : N; index k : K;\n\
             input tensor A[i,k] : {elem}; input tensor B[k] : {elem};\n\
             output tensor C[i] : {elem};\nC[i] = exp(A[i,k]) * B[k];\n"
        );
        let hir = compile(&src);
        let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
        let ptx = emit_ptx(&p).unwrap();
        assert!(
            ["ld.global.nc.u16", "ld.global.u16", "ld.global.nc.b16"].iter().any(|l| ptx.contains(l)),
            "{elem}:\n{ptx}"
        );
        assert!(ptx.contains("st.global.u16") || ptx.contains("st.global.b16"), "{elem}:\n{ptx}");
        assert!(ptx.contains(cvt_in), "{elem}: {cvt_in}\n{ptx}");
        assert!(ptx.contains(cvt_out), "{elem}: {cvt_out}\n{ptx}");
        assert!(!ptx.contains("ld.global.f32") && !ptx.contains("st.global.f32"), "{elem}:\n{ptx}");
        for k in &p.kernels {
            let head = format!(".visible .entry {}(", k.name);
            let at = ptx.find(&head).unwrap();
            let params = &ptx[at..at + ptx[at..].find(')').unwrap()];
            assert_eq!(params.matches(".param .u64").count(), 1 + k.ops.len(), "{params}");
        }
    }
}

/// The commands take 16-bit programs: `tcc opt --emit=ptx`, `tcc build
/// --target cuda` (the header's 16-bit arguments are `uint16_t*` bit
/// patterns, as the CPU library's); `tcc run --target cuda` reaches the device
/// (E0730 here, no GPU) instead of refusing.
#[test]
fn gpu_commands_take_half_programs() {
    let dir = tempfile::tempdir().unwrap();
    let ex = root().join("examples/rmsnorm_f16.tc");
    let out = tcc(&["opt", ex.to_str().unwrap(), "--emit=ptx"], dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("cvt.rn.f16.f32"), "{text}");
    let out = tcc(&["build", ex.to_str().unwrap(), "--target", "cuda", "-o", "r.ptx"], dir.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let h = std::fs::read_to_string(dir.path().join("r.h")).unwrap();
    assert!(h.contains("const uint16_t* X, size_t X_len") && h.contains("uint16_t* Y, size_t Y_len"), "{h}");
    assert!(h.contains("#include <stdint.h>"), "{h}");
    let plan: GpuPlan =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.plan.json")).unwrap()).unwrap();
    assert!(plan.units[0].buffers.iter().any(|b| b.elem == Elem::F16), "{:?}", plan.units[0].buffers);
    let out = tcc(&["run", ex.to_str().unwrap(), "--target", "cuda", "--check"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("E0327") && (err.contains("E0730") || err.contains("GPU")), "{err}");
}

/// Where the rounding is the only inexact step, the GPU's 16-bit results equal
/// the interpreter's bit for bit: small integers as inputs, so that products and
/// sums are exact in f32 and only the one rounding of each result to bf16
/// (8 significant bits) or f16 (11) differs from the exact value. Truncating
/// instead of rounding to nearest even, or rounding twice, shows here although
/// it stays within the tolerance.
#[test]
fn half_results_round_exactly_as_the_interpreter() {
    let mut rng = Rng(5);
    for elem in ["bf16", "f16"] {
        for src in [
            format!(
                "range I = 19; range J = 23; range K = 13; index i : I; index j : J; index k : K;\n\
                 input tensor A[i,k] : {elem}; input tensor B[k,j] : {elem}; output tensor C[i,j] : {elem};\n\
                 C[i,j] = A[i,k] * B[k,j];\n"
            ),
            format!(
                "range I = 19; range J = 23; index i : I; index j : J;\n\
                 input tensor A[i,j] : {elem}; input tensor B[i,j] : {elem}; input tensor E[j] : {elem};\n\
                 output tensor C[i,j] : {elem};\nC[i,j] = 7 * A[i,j] * B[i,j] + E[j];\n"
            ),
        ] {
            let hir = compile(&src);
            let u = UnitId::new(0);
            let ins = common::inputs_with(&hir, u, |_| rng.below(81) as f64 - 40.0);
            let want = run_unit(&hir, u, &ins).unwrap();
            let c = hir.tensor_by_name("C").unwrap();
            let mut rounded = 0;
            for o in options() {
                let p = plan(&hir, &[u], &o).unwrap();
                let got = emulate(&p, 0, &ins).unwrap();
                for (k, (g, w)) in got[&c].data.iter().zip(&want[&c].data).enumerate() {
                    assert_eq!(g, w, "{elem} {o:?} element {k}\n{src}");
                }
                // Some results were rounded (not all exact in 16 bits).
                let exact_to = if elem == "bf16" { 256.0 } else { 2048.0 };
                rounded = want[&c].data.iter().filter(|&&x| x.abs() > exact_to).count();
            }
            assert!(rounded > 10, "{elem}: {rounded}");
        }
    }
}

/// A declared bf16 intermediate written by one storing step (`H` of an MLP
/// chain) is stored in 16 bits, rounded per statement as the interpreter
/// rounds it: both products are 16-bit cuBLAS calls (tensor cores), and with
/// small integers as inputs the result equals the interpreter's bit for bit
/// (the CPU, which keeps `H` in f32, would not). One that is added to stays f32.
#[test]
fn declared_half_intermediates_are_stored_in_16_bits() {
    let src = "range T = 21; range D = 13; range F = 17; index t : T; index d, e : D; index f : F;\n\
               input tensor X[t,d] : bf16; input tensor W1[d,f] : bf16; input tensor W2[f,e] : bf16;\n\
               tensor H[t,f] : bf16;\noutput tensor Y[t,e] : bf16;\n\
               H[t,f] = X[t,d] * W1[d,f];\nY[t,e] = H[t,f] * W2[f,e];\n";
    let hir = compile(src);
    let u = UnitId::new(0);
    let p = plan(&hir, &[u], &GpuOptions { gemm: Some(GemmKind::Cublas), ..Default::default() }).unwrap();
    let up = &p.units[0];
    let h = up.buf_of(hir.tensor_by_name("H").unwrap()).unwrap();
    assert_eq!(up.buffers[h].elem, Elem::Bf16, "{:?}", up.buffers);
    let mut g = Vec::new();
    gemms(&up.steps, &mut g);
    assert_eq!(g.len(), 2);
    assert!(g.iter().all(|g| g.half == Some(Elem::Bf16)), "{g:?}");
    let mut rng = Rng(11);
    let ins = common::inputs_with(&hir, u, |_| rng.below(41) as f64 - 20.0);
    let want = run_unit(&hir, u, &ins).unwrap();
    let y = hir.tensor_by_name("Y").unwrap();
    let mut half_h = 0;
    for o in options() {
        let p = plan(&hir, &[u], &o).unwrap();
        let got = emulate(&p, 0, &ins).unwrap();
        let hb = p.units[0].buf_of(hir.tensor_by_name("H").unwrap()).unwrap();
        if p.units[0].buffers[hb].elem == Elem::Bf16 {
            assert_eq!(got[&y].data, want[&y].data, "{o:?}");
            half_h += 1;
        } else {
            // Fused into host loops (H cleared slice by slice): f32, as on the CPU.
            compare_outputs(&hir, u, &got, &want).unwrap();
        }
    }
    assert!(half_h >= 3, "{half_h}");
    // Added to (`+=`): f32, as on the CPU.
    let src = src.replace("Y[t,e] = H", "H[t,f] += X[t,d] * W1[d,f];\nY[t,e] = H");
    let hir = compile(&src);
    let p = plan(&hir, &[u], &GpuOptions::default()).unwrap();
    let up = &p.units[0];
    let h = up.buf_of(hir.tensor_by_name("H").unwrap()).unwrap();
    assert_eq!(up.buffers[h].elem, Elem::F32, "{:?}", up.buffers);
    check(&hir, &GpuOptions::default(), &mut rng).unwrap();
}

/// Every element-wise function in a 16-bit program: `exp`, `log`, `tanh`,
/// `sigmoid`, `silu`, `gelu`, `recip`, `sqrt`, `abs`, `relu` of bf16/f16
/// operands (one-thread kernels; in the contraction, applied while loading),
/// and of f32 temporaries (`3 * G`) summed in an f32 working buffer (`B`).
fn half_functions_src(elem: &str) -> String {
    format!(
        "range T = 37; range F = 29; range K = 11; index t : T; index f : F; index k : K;\n\
         input tensor G[t,f] : {elem}; input tensor U[t,f] : {elem}; input tensor P[t,f] : {elem};\n\
         input tensor W[f,k] : {elem};\n\
         output tensor H[t,f] : {elem}; output tensor E[t,f] : {elem}; output tensor S[t,f] : {elem};\n\
         output tensor L[t,f] : {elem}; output tensor R[t,f] : {elem}; output tensor Q[t,f] : {elem};\n\
         output tensor C[t,k] : {elem}; output tensor B[t,f] : {elem};\n\
         H[t,f] = silu(G[t,f]) * U[t,f];\n\
         E[t,f] = exp(G[t,f]) * tanh(U[t,f]);\n\
         S[t,f] = gelu(G[t,f]) * sigmoid(U[t,f]);\n\
         L[t,f] = log(P[t,f]);\n\
         R[t,f] = recip(P[t,f]);\n\
         Q[t,f] = sqrt(P[t,f]) * relu(G[t,f]) * abs(U[t,f]);\n\
         C[t,k] = silu(G[t,f]) * W[f,k];\n\
         B[t,f] = tanh(3 * G[t,f]) + sigmoid(3 * U[t,f]);\n"
    )
}

/// Inputs of [`half_functions_src`]: `scale · [-1, 1)` in the type, `P` positive.
fn half_function_inputs(hir: &Hir, scale: f64, rng: &mut Rng) -> HashMap<TensorId, Dense> {
    let mut ins = common::inputs_with(hir, UnitId::new(0), |e| round_to(e, scale * rng.unit()));
    for x in &mut ins.get_mut(&hir.tensor_by_name("P").unwrap()).unwrap().data {
        *x = x.abs().max(1.0 / 64.0);
    }
    ins
}

/// The functions of a 16-bit program run in f32 (approximate `ex2`/`lg2`, no
/// f64 instruction in any kernel), those of f32 programs still through the f64
/// series.
#[test]
fn half_kernels_compute_functions_in_f32() {
    for elem in ["bf16", "f16", "f32"] {
        let hir = compile(&half_functions_src(elem));
        for o in [GpuOptions::default(), GpuOptions { gemm: Some(GemmKind::Tiled), ..Default::default() }] {
            let p = plan(&hir, &[UnitId::new(0)], &o).unwrap();
            let ptx = emit_ptx(&p).unwrap();
            if elem == "f32" {
                assert!(ptx.contains("fma.rn.f64") && ptx.contains("cvt.f64.f32"), "{elem} {o:?}:\n{ptx}");
                assert!(!ptx.contains("ex2.approx") && !ptx.contains("lg2.approx"), "{elem} {o:?}:\n{ptx}");
            } else {
                assert!(ptx.contains("ex2.approx.ftz.f32") && ptx.contains("lg2.approx.ftz.f32"), "{elem}:\n{ptx}");
                let f64_lines: Vec<&str> = ptx.lines().filter(|l| l.contains(".f64")).collect();
                assert!(f64_lines.is_empty(), "{elem} {o:?}: {f64_lines:?}");
            }
        }
    }
}

/// Each function of bf16 and f16 operands, emulated under every option, within
/// the type's tolerance of the interpreter: on `[-4, 4]` (`log`, `recip`,
/// `sqrt` of `(0, 4]`), and on `[-120, 120]`, where `exp` over- and underflows
/// inside `tanh`, `sigmoid`, `silu` and `gelu`.
#[test]
fn half_functions_emulated_against_the_interpreter() {
    let mut rng = Rng(23);
    for elem in ["bf16", "f16"] {
        let hir = compile(&half_functions_src(elem));
        let tol = tolerance(&hir, UnitId::new(0));
        for o in options() {
            let ins = half_function_inputs(&hir, 4.0, &mut rng);
            let r = check_on(&hir, &o, &ins).unwrap_or_else(|m| panic!("{elem} {o:?}: {m}"));
            assert!(r <= tol, "{elem} {o:?}: {r}");
        }
        let src = format!(
            "range N = 301; index i : N;\n\
             input tensor X[i] : {elem};\n\
             output tensor T[i] : {elem}; output tensor S[i] : {elem}; output tensor H[i] : {elem};\n\
             output tensor G[i] : {elem};\n\
             T[i] = tanh(X[i]);\nS[i] = sigmoid(X[i]);\nH[i] = silu(X[i]);\nG[i] = gelu(X[i]);\n"
        );
        let hir = compile(&src);
        let ins = common::inputs_with(&hir, UnitId::new(0), |e| round_to(e, 120.0 * rng.unit()));
        for o in options() {
            check_on(&hir, &o, &ins).unwrap_or_else(|m| panic!("{elem} {o:?}: {m}"));
        }
    }
}
