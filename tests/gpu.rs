//! The GPU back end on machines without a GPU: PTX structure and a snapshot,
//! launch plans (kernels and cuBLAS steps) emulated on the CPU against the
//! interpreter, and `--target cuda` failing cleanly. Execution on a GPU runs where
//! one exists (`bench/gpu/device_run.sh`); here it prints `skipped: no GPU`.

use std::path::PathBuf;
use tcc::codegen::nvptx::{choices, emit_ptx, emulate, plan, streams, Epilogue, GemmKind, GpuOptions, Step, TileCfg};
use tcc::interp::{random_inputs, run_unit};
use tcc::run::compare::compare_outputs;
use tcc::sema::hir::{Hir, UnitId};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

fn compile(src: &str) -> Hir {
    let (hir, diags) = tcc::compile(src, "t");
    hir.unwrap_or_else(|| panic!("{diags:?}"))
}

fn check(hir: &Hir, u: UnitId, opts: &GpuOptions) -> Result<(), String> {
    let p = plan(hir, &[u], opts).map_err(|e| e.0)?;
    let inputs = random_inputs(hir, u, 7).map_err(|e| e.to_string())?;
    let want = run_unit(hir, u, &inputs).map_err(|e| e.to_string())?;
    let got = emulate(&p, 0, &inputs).map_err(|e| e.0)?;
    compare_outputs(hir, u, &got, &want).map(|_| ())
}

const CUBLAS: Option<GemmKind> = Some(GemmKind::Cublas);
const TILED: Option<GemmKind> = Some(GemmKind::Tiled);
/// A tile far smaller than the real ones: small test sizes then span several
/// blocks, partial tiles and many reduction steps.
const TINY: TileCfg = TileCfg { bm: 16, bn: 8, bk: 4, tm: 2, tn: 2, mma: false, stages: 2 };
/// The smallest f64 tensor-core tile: 2 × 2 warps of one 8 × 8 piece each.
const TINY_MMA: TileCfg = TileCfg { bm: 16, bn: 16, bk: 8, tm: 8, tn: 8, mma: true, stages: 2 };
const STAGED: Option<Epilogue> = Some(Epilogue::Staged);
/// A tile whose staged epilogue takes two passes through the stage (f64: three
/// accumulator rows, then one).
const TWO_PASSES: TileCfg = TileCfg { bm: 16, bn: 8, bk: 4, tm: 4, tn: 2, mma: false, stages: 2 };

fn all_options() -> Vec<GpuOptions> {
    vec![
        GpuOptions::default(),
        // cuBLAS for every binary contraction, reductions split across threads.
        GpuOptions { gemm: CUBLAS, target_threads: Some(1 << 12), ..Default::default() },
        // the most fused nests: host loops around kernels.
        GpuOptions { mem_limit: Some(0), gemm: CUBLAS, ..Default::default() },
        // tiled kernels for every binary contraction, the real tile shapes.
        GpuOptions { gemm: TILED, ..Default::default() },
        // tiled kernels with tiny tiles.
        GpuOptions { gemm: TILED, tile: Some(TINY), ..Default::default() },
        // tiled kernels inside host loops.
        GpuOptions { mem_limit: Some(0), gemm: TILED, tile: Some(TINY), ..Default::default() },
        // the C tile staged through shared memory: tiny tiles, f64 tensor-core
        // tiles, and inside host loops.
        GpuOptions { gemm: TILED, tile: Some(TINY), epilogue: STAGED, ..Default::default() },
        GpuOptions { gemm: TILED, tile: Some(TINY_MMA), epilogue: STAGED, ..Default::default() },
        GpuOptions { mem_limit: Some(0), gemm: TILED, tile: Some(TINY), epilogue: STAGED, ..Default::default() },
    ]
}

/// The kinds that run for the binary contractions of a plan's first unit.
fn chosen_kinds(p: &tcc::codegen::nvptx::GpuPlan) -> Vec<GemmKind> {
    choices(&p.units[0].steps).iter().map(|c| c.alts[c.chosen].kind).collect()
}

#[test]
fn examples_plans_match_the_interpreter_when_emulated() {
    let mut n = 0;
    for e in std::fs::read_dir(example("")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "tc") {
            continue;
        }
        let hir = compile(&std::fs::read_to_string(&path).unwrap());
        // The GPU runs refuse complex programs (E0324; tests/complex.rs);
        // 16-bit ones are checked in tests/gpu_half.rs.
        if hir.tensors.iter().any(|t| t.elem.is_complex() || t.elem.is_half()) {
            continue;
        }
        for u in hir.units.ids() {
            for o in all_options() {
                check(&hir, u, &o).unwrap_or_else(|e| panic!("{} unit {} {o:?}: {e}", path.display(), u.index()));
            }
            n += 1;
        }
    }
    assert!(n >= 7);
}

fn einsum_src(spec: &str, sizes: &[(char, usize)], elem: &str) -> String {
    let (ins, out) = spec.split_once("->").unwrap();
    let mut s = String::new();
    for (c, n) in sizes {
        s += &format!("range R{c} = {n}; index {c} : R{c};\n");
    }
    let br = |x: &str| {
        if x.is_empty() {
            String::new()
        } else {
            format!("[{}]", x.chars().map(String::from).collect::<Vec<_>>().join(","))
        }
    };
    let ops: Vec<&str> = ins.split(',').collect();
    for (k, o) in ops.iter().enumerate() {
        s += &format!("input tensor X{k}{} : {elem};\n", br(o));
    }
    s += &format!("output tensor Out{} : {elem};\n", br(out));
    let rhs: Vec<String> = ops.iter().enumerate().map(|(k, o)| format!("X{k}{}", br(o))).collect();
    s += &format!("Out{} = {};\n", br(out), rhs.join(" * "));
    s
}

#[test]
fn gemm_shaped_contractions_plan_to_cublas_and_match() {
    let cases: &[(&str, &[(char, usize)])] = &[
        ("ik,kj->ij", &[('i', 37), ('j', 45), ('k', 33)]),
        ("ki,jk->ji", &[('i', 40), ('j', 29), ('k', 50)]),
        ("ki,jk->ij", &[('i', 40), ('j', 29), ('k', 50)]),
        ("abk,kc->acb", &[('a', 9), ('b', 7), ('c', 31), ('k', 24)]),
        ("bik,bkj->bij", &[('b', 3), ('i', 35), ('j', 21), ('k', 40)]),
        ("bhqd,bhkd->bhqk", &[('b', 2), ('h', 3), ('q', 9), ('k', 11), ('d', 8)]),
        ("aibj,bjck->acik", &[('a', 5), ('b', 4), ('c', 6), ('i', 3), ('j', 7), ('k', 2)]),
        ("pqrs,ap->aqrs", &[('p', 13), ('q', 11), ('r', 5), ('s', 7), ('a', 17)]),
        ("ijk,ijk->", &[('i', 30), ('j', 20), ('k', 40)]),
        ("pqrs,rs->pq", &[('p', 12), ('q', 11), ('r', 10), ('s', 9)]),
    ];
    for (spec, sizes) in cases {
        for elem in ["f64", "f32"] {
            let hir = compile(&einsum_src(spec, sizes, elem));
            for o in all_options() {
                check(&hir, UnitId::new(0), &o).unwrap_or_else(|e| panic!("{spec} {elem} {o:?}: {e}"));
            }
        }
        let hir = compile(&einsum_src(spec, sizes, "f64"));
        let p = plan(&hir, &[UnitId::new(0)], &GpuOptions { gemm: CUBLAS, ..Default::default() }).unwrap();
        let c = choices(&p.units[0].steps);
        assert_eq!(c.len(), 1, "{spec}: {:?}", p.units[0].steps);
        assert!(c[0].steps().iter().any(|s| matches!(s, Step::Gemm(_))), "{spec}: {:?}", p.units[0].steps);
        let p = plan(&hir, &[UnitId::new(0)], &GpuOptions { gemm: TILED, ..Default::default() }).unwrap();
        assert_eq!(chosen_kinds(&p), vec![GemmKind::Tiled], "{spec}");
        assert!(p.kernels.iter().any(|k| k.tiled.is_some()), "{spec}");
    }
}

#[test]
fn functions_match_the_interpreter() {
    let src = "range N = 37; index i, j : N;\n\
        input tensor A[i,j] : f64; input tensor B[i] : f32;\n\
        output tensor E[i,j] : f64; output tensor L[i,j] : f64; output tensor T[i,j] : f64; output tensor G[i,j] : f64; output tensor F[i] : f32;\n\
        E[i,j] = exp(A[i,j]) + exp(20.0 * A[i,j]) + exp(-700.0 * A[i,j]);\n\
        L[i,j] = log(abs(A[i,j])) + sqrt(abs(A[i,j])) + recip(A[i,j]);\n\
        T[i,j] = tanh(A[i,j]) + tanh(30.0 * A[i,j]) + sigmoid(A[i,j]);\n\
        G[i,j] = gelu(A[i,j]) + silu(A[i,j]) + relu(A[i,j]);\n\
        F[i] = exp(B[i]) + tanh(B[i]);\n";
    let hir = compile(src);
    check(&hir, UnitId::new(0), &GpuOptions::default()).unwrap();
}

#[test]
fn ptx_is_structurally_valid() {
    let hir = compile(&std::fs::read_to_string(example("attention.tc")).unwrap());
    let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
    let ptx = emit_ptx(&p).unwrap();
    assert!(ptx.contains(".version 7.5"), "{ptx}");
    assert!(ptx.contains(".target sm_86"), "{ptx}");
    assert!(ptx.contains(".address_size 64"), "{ptx}");
    assert!(!ptx.contains("undef"), "{ptx}");
    assert!(!ptx.contains('\0'));
    for k in &p.kernels {
        let head = format!(".visible .entry {}(", k.name);
        let at = ptx.find(&head).unwrap_or_else(|| panic!("no entry {}:\n{ptx}", k.name));
        let params = &ptx[at..at + ptx[at..].find(')').unwrap()];
        assert_eq!(params.matches(".param .u64").count(), 1 + k.ops.len(), "{params}");
    }
    assert_eq!(ptx.matches(".entry").count(), p.kernels.len());
    // Braces balance, and no call to a libm function that PTX lacks.
    assert_eq!(ptx.matches('{').count(), ptx.matches('}').count());
    assert!(!ptx.contains("call.uni") || !ptx.contains("exp,"), "{ptx}");
    for bad in [".extern .func exp", ".extern .func tanh", ".extern .func log"] {
        assert!(!ptx.contains(bad), "{bad}:\n{ptx}");
    }
}

#[test]
fn ptx_snapshot_of_matmul() {
    let hir = compile(&std::fs::read_to_string(example("matmul.tc")).unwrap());
    let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
    insta::assert_snapshot!("gpu_matmul_ptx", emit_ptx(&p).unwrap());
}

#[test]
fn gpu_execution_or_visible_skip() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let out = std::process::Command::new(tcc)
        .args(["run", "--target", "cuda", "--check"])
        .arg(example("matmul.tc"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(1) && stderr.contains("no CUDA device found") {
        // Straight to the terminal (the harness captures print!): a visible skip.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no GPU (tcc run --target cuda: {})",
            stderr.lines().next().unwrap_or("")
        );
        return;
    }
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("check: matches the interpreter"));
}

#[test]
fn no_device_is_a_user_error() {
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let out = std::process::Command::new(tcc)
        .args(["run", "--target", "cuda"])
        .arg(example("matmul.tc"))
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no CUDA device found"));
    // --streams applies to GPU runs only, with at least one stream.
    for args in [&["--streams", "2"][..], &["--streams", "0", "--target", "cuda"]] {
        let out = std::process::Command::new(tcc).arg("run").arg(example("matmul.tc")).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("E0716"), "{args:?}");
    }
}

#[test]
fn build_writes_ptx_and_plan() {
    let dir = tempfile::tempdir().unwrap();
    let ptx = dir.path().join("four.ptx");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcc"))
        .args(["build", "--target", "cuda", "-o"])
        .arg(&ptx)
        .arg(example("four_index.tc"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(text.contains(".entry"));
    let plan: tcc::codegen::nvptx::GpuPlan =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("four.plan.json")).unwrap()).unwrap();
    assert!(!plan.units.is_empty());
}

/// The random programs the device run checks (bench/gpu/random), emulated here.
#[test]
fn random_programs_plans_match_the_interpreter_when_emulated() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/gpu/random");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tc"))
        .collect();
    files.sort();
    assert!(files.len() >= 100);
    for (k, path) in files.iter().enumerate() {
        let hir = compile(&std::fs::read_to_string(path).unwrap());
        let all = all_options();
        // One of the option sets, and always tiled kernels (tiny tiles: several blocks).
        for opts in [&all[k % all.len()], &all[4]] {
            for u in hir.units.ids() {
                check(&hir, u, opts).unwrap_or_else(|e| panic!("{} {opts:?}: {e}", path.display()));
            }
        }
    }
}

/// Tiled kernels on GEMM shapes: odd sizes and partial tiles, batches,
/// transposed and multi-index groups (strides that merge and ones that do not),
/// f32, mixed element types and functions of an operand; every tile shape.
#[test]
fn tiled_kernels_match_the_interpreter() {
    let cases: &[(&str, &[(char, usize)])] = &[
        ("ik,kj->ij", &[('i', 37), ('j', 45), ('k', 33)]),
        ("ik,kj->ij", &[('i', 130), ('j', 129), ('k', 17)]),
        ("ki,jk->ji", &[('i', 40), ('j', 29), ('k', 50)]),
        ("ik,jk->ij", &[('i', 3), ('j', 70), ('k', 9)]),
        ("bik,bkj->bij", &[('b', 3), ('i', 35), ('j', 21), ('k', 40)]),
        ("bhqd,bhkd->bhqk", &[('b', 2), ('h', 3), ('q', 9), ('k', 11), ('d', 8)]),
        ("aibj,bjck->acik", &[('a', 5), ('b', 4), ('c', 6), ('i', 3), ('j', 7), ('k', 2)]),
        ("pqrs,ap->aqrs", &[('p', 13), ('q', 11), ('r', 5), ('s', 7), ('a', 17)]),
        ("abk,kc->acb", &[('a', 9), ('b', 7), ('c', 31), ('k', 24)]),
        ("ijk,ijk->", &[('i', 3), ('j', 2), ('k', 4)]),
        ("ik,k->i", &[('i', 19), ('k', 23)]),
        ("i,j->ij", &[('i', 19), ('j', 23)]),
    ];
    let mut tiles = vec![TINY, TINY_MMA];
    tiles.extend(TileCfg::CANDIDATES);
    for (spec, sizes) in cases {
        for (elem, epilogue) in [("f64", None), ("f32", None), ("f64", STAGED), ("f32", STAGED)] {
            let hir = compile(&einsum_src(spec, sizes, elem));
            for tile in tiles.iter().copied() {
                let o = GpuOptions { gemm: TILED, tile: Some(tile), epilogue, ..Default::default() };
                let kinds = chosen_kinds(&plan(&hir, &[UnitId::new(0)], &o).unwrap());
                if tile.mma && elem == "f32" {
                    // Tensor-core tiles are f64 only: another kind runs.
                    assert_ne!(kinds, vec![GemmKind::Tiled], "{spec} f32 {tile:?}");
                    continue;
                }
                assert_eq!(kinds, vec![GemmKind::Tiled], "{spec}");
                check(&hir, UnitId::new(0), &o).unwrap_or_else(|e| panic!("{spec} {elem} {tile:?}: {e}"));
            }
        }
    }
    // Mixed element types, a function of an operand, a coefficient, `+=`.
    let src = "range I = 23; range J = 19; range K = 21; index i : I; index j : J; index k : K;\n\
        input tensor A[i,k] : f32; input tensor B[j,k] : f64; output tensor C[i,j] : f64;\n\
        C[i,j] = 0.5 * tanh(A[i,k]) * B[j,k];\nC[i,j] += -2.0 * A[i,k] * exp(B[j,k]);\n";
    let hir = compile(src);
    for (tile, epilogue) in tiles.iter().flat_map(|&t| [(t, None), (t, STAGED)]) {
        let o = GpuOptions { gemm: TILED, tile: Some(tile), epilogue, ..Default::default() };
        assert_eq!(chosen_kinds(&plan(&hir, &[UnitId::new(0)], &o).unwrap()), vec![GemmKind::Tiled; 2]);
        check(&hir, UnitId::new(0), &o).unwrap_or_else(|e| panic!("{tile:?} {epilogue:?}: {e}"));
    }
}

/// The cost model: cuBLAS for a large square product, a generated kernel where
/// cuBLAS would first copy an operand of a small product, the naive kernel for
/// a tiny one; every alternative predicted, the reasons printed.
#[test]
fn cost_model_picks_and_explains() {
    let kinds = |spec: &str, sizes: &[(char, usize)]| {
        let p = plan(&compile(&einsum_src(spec, sizes, "f64")), &[UnitId::new(0)], &GpuOptions::default()).unwrap();
        let c = choices(&p.units[0].steps);
        assert_eq!(c.len(), 1);
        assert!(c[0].alts.iter().all(|a| a.predicted_s > 0.0 && a.predicted_s.is_finite()), "{:?}", c[0].alts);
        assert!(tcc::codegen::nvptx::describe(&p).contains(" → "), "{}", tcc::codegen::nvptx::describe(&p));
        (c[0].alts[c[0].chosen].kind, c[0].alts.iter().map(|a| a.kind).collect::<Vec<_>>())
    };
    let (k, all) = kinds("ik,kj->ij", &[('i', 4000), ('j', 4000), ('k', 4000)]);
    assert_eq!(k, GemmKind::Cublas);
    assert_eq!(all, GemmKind::ALL.to_vec());
    let (k, _) = kinds("ik,kj->ij", &[('i', 3), ('j', 2), ('k', 4)]);
    assert_eq!(k, GemmKind::Naive);
    // C[a,c,i,k] = A[a,i,b,j]·B[b,j,c,k] with a short reduction: cuBLAS needs the
    // large C through a scratch buffer, the tiled kernel writes it in place.
    let (k, _) = kinds("aibj,bjck->acik", &[('a', 64), ('b', 4), ('c', 64), ('i', 64), ('j', 4), ('k', 64)]);
    assert_eq!(k, GemmKind::Tiled);
}

/// The tile shape and store epilogue the cost model takes for a tiled kernel:
/// on a CCSD(T) triples contraction (sd_t_d1_3 at n = 24: m = n = 24³, k = 24)
/// an f64 plan takes the 64×64×4 tensor-core tile with its C tile staged (the
/// fastest of ten staged shapes on the H200, 0.87× the time of 64×64×8, which
/// was 1.44–1.48× faster than the FMA tile on an H100) on a ring of 4 operand
/// buffers (0.82–0.96× the double buffer's time at n = 24, H200); told to store
/// directly, or in f32 (no f64 tensor cores), it keeps an FMA tile, stored
/// directly; `TCC_GPU_STAGES=2` (`GpuOptions::stages`) gives the double buffer back.
#[test]
fn triples_take_staged_tensor_core_tiles_by_default() {
    let chosen_with = |elem: &str, epilogue: Option<Epilogue>, stages: Option<u64>| {
        let n = 24;
        let sizes: Vec<(char, usize)> = "abcijkl".chars().map(|c| (c, n)).collect();
        let hir = compile(&einsum_src("ijal,lbck->abcijk", &sizes, elem));
        let o = GpuOptions { gemm: TILED, epilogue, stages, ..Default::default() };
        let p = plan(&hir, &[UnitId::new(0)], &o).unwrap();
        let ts: Vec<_> = p.kernels.iter().filter_map(|k| k.tiled.clone()).collect();
        assert_eq!(ts.len(), 1, "{elem}");
        (ts[0].cfg, ts[0].epilogue)
    };
    let chosen = |elem: &str, epilogue: Option<Epilogue>| chosen_with(elem, epilogue, None);
    let tile = TileCfg { bm: 64, bn: 64, bk: 4, tm: 32, tn: 32, mma: true, stages: 4 };
    assert_eq!(chosen("f64", None), (tile, Epilogue::Staged));
    assert_eq!(chosen_with("f64", None, Some(2)), (TileCfg { stages: 2, ..tile }, Epilogue::Staged));
    let (cfg, epi) = chosen("f64", Some(Epilogue::Direct));
    assert!(!cfg.mma && epi == Epilogue::Direct, "{cfg:?} {epi:?}");
    let (cfg, epi) = chosen("f32", None);
    assert!(!cfg.mma && epi == Epilogue::Direct, "{cfg:?} {epi:?}");
    // And what it plans computes what the interpreter does (small extents).
    let sizes = [('a', 7), ('b', 9), ('c', 6), ('i', 5), ('j', 8), ('k', 10), ('l', 7)];
    let hir = compile(&einsum_src("ijal,lbck->abcijk", &sizes, "f64"));
    check(&hir, UnitId::new(0), &GpuOptions { gemm: TILED, ..Default::default() }).unwrap();
}

/// Copies that permute (cuBLAS's operands and results laid out as matrices) go
/// through a shared-memory tile where the input's and the output's stride-1
/// variables differ and both are long enough: extents that are and are not
/// multiples of the 32-wide tile, mixed element types, a coefficient; the same
/// plans with `plain_copies` keep one thread per element. Both compute what the
/// interpreter does, and the tiled copy's PTX holds its barrier and shared memory.
#[test]
fn permuting_copies_go_through_a_shared_tile() {
    let cases: &[(&str, &[(char, usize)])] = &[
        // The CCSD ring term: both operands and the result permuted.
        ("akcj,cbik->abij", &[('a', 37), ('b', 9), ('c', 40), ('i', 11), ('j', 33), ('k', 8)]),
        ("akcj,cbik->abij", &[('a', 32), ('b', 8), ('c', 64), ('i', 8), ('j', 32), ('k', 8)]),
        ("mbej,aeim->abij", &[('a', 20), ('b', 12), ('e', 41), ('i', 10), ('j', 9), ('m', 12)]),
    ];
    for (spec, sizes) in cases {
        let hir = compile(&einsum_src(spec, sizes, "f64"));
        for plain in [false, true] {
            let o = GpuOptions { gemm: CUBLAS, plain_copies: plain, ..Default::default() };
            let p = plan(&hir, &[UnitId::new(0)], &o).unwrap();
            let tiled = p.kernels.iter().filter(|k| k.transpose.is_some()).count();
            assert_eq!(tiled > 0, !plain, "{spec} plain {plain}: {tiled} tiled copies");
            for k in p.kernels.iter().filter(|k| k.transpose.is_some()) {
                let ([gx, gy, gz], block) = k.launch_dims();
                assert!(gx >= 1 && gy == 1 && gz == 1 && block == 256, "{spec}: {gx} {gy} {gz} {block}");
                let ptx = emit_ptx(&p).unwrap();
                let at = ptx.find(&format!(".visible .entry {}(", k.name)).unwrap();
                let body = &ptx[at..];
                assert!(
                    body.contains("bar.sync") && body.contains("st.shared") && body.contains("ld.shared"),
                    "{body}"
                );
            }
            check(&hir, UnitId::new(0), &o).unwrap_or_else(|e| panic!("{spec} plain {plain}: {e}"));
        }
    }
    // Mixed types and a coefficient: an f32 input permuted into an f64 result.
    let src = "range A = 33; range B = 40; range C = 9; index a : A; index b : B; index c : C;\n\
        input tensor X[a,b,c] : f32; output tensor Y[c,b,a] : f64;\nY[c,b,a] = 2.5 * X[a,b,c];\n";
    let hir = compile(src);
    let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
    assert!(p.kernels.iter().any(|k| k.transpose.is_some()), "{:?}", p.kernels);
    check(&hir, UnitId::new(0), &GpuOptions::default()).unwrap();
}

/// A statement that writes its whole target, but is not a binary contraction
/// (a copy, a permutation, an element-wise product of three), stores every
/// element once: no `Memset` before it and no read of the old values (the
/// emulator starts such targets as NaN, so a kernel that added would show).
#[test]
fn whole_statements_store_without_clearing() {
    let srcs = [
        "range A = 40; range B = 33; index a : A; index b : B;\n\
         input tensor X[a,b] : f64; output tensor Y[b,a] : f64;\nY[b,a] = X[a,b];\n",
        "range A = 40; range B = 33; index a : A; index b : B;\n\
         input tensor X[a,b] : f32; output tensor Y[a,b] : f64;\nY[a,b] = 3.0 * X[a,b];\n",
        "range A = 12; range B = 7; range C = 9; index a : A; index b : B; index c : C;\n\
         input tensor X[a,b,c] : f64; input tensor Z[b] : f64; input tensor W[c,a] : f64;\n\
         output tensor Y[c,a,b] : f64;\nY[c,a,b] = X[a,b,c] * Z[b] * W[c,a];\n",
    ];
    for src in srcs {
        let hir = compile(src);
        for plain in [false, true] {
            let o = GpuOptions { plain_copies: plain, ..Default::default() };
            let p = plan(&hir, &[UnitId::new(0)], &o).unwrap();
            let steps = &p.units[0].steps;
            assert!(!steps.iter().any(|s| matches!(s, Step::Memset { .. })), "{src}: {steps:?}");
            assert!(!p.kernels.is_empty() && p.kernels.iter().all(|k| k.store), "{src}: {:?}", p.kernels);
            assert!(!p.units[0].no_clear.is_empty(), "{src}");
            check(&hir, UnitId::new(0), &o).unwrap_or_else(|e| panic!("{src} plain {plain}: {e}"));
        }
    }
}

/// Plans built for a runner keep every alternative; forcing switches them.
#[test]
fn kept_alternatives_can_be_forced() {
    let hir = compile(&einsum_src("ik,kj->ij", &[('i', 50), ('j', 40), ('k', 30)], "f64"));
    let mut p = plan(&hir, &[UnitId::new(0)], &GpuOptions { keep_alternatives: true, ..Default::default() }).unwrap();
    assert!(choices(&p.units[0].steps)[0].alts.iter().all(|a| a.kept && !a.steps.is_empty()));
    let inputs = random_inputs(&hir, UnitId::new(0), 3).unwrap();
    let want = run_unit(&hir, UnitId::new(0), &inputs).unwrap();
    for kind in GemmKind::ALL {
        assert_eq!(p.force(kind), (1, 0));
        assert_eq!(chosen_kinds(&p), vec![kind]);
        let got = emulate(&p, 0, &inputs).unwrap();
        compare_outputs(&hir, UnitId::new(0), &got, &want).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    }
    let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
    let c = choices(&p.units[0].steps)[0].clone();
    assert_eq!(c.alts.iter().filter(|a| a.kept).count(), 1);
}

#[test]
fn tiled_ptx_uses_shared_memory_and_barriers() {
    let hir = compile(&einsum_src("bik,bkj->bij", &[('b', 3), ('i', 300), ('j', 200), ('k', 100)], "f64"));
    // Plain FMAs, and f64 tensor cores (mma.sync m8n8k4, two accumulators of each 8 × 8 piece).
    for mma in [false, true] {
        let p =
            plan(&hir, &[UnitId::new(0)], &GpuOptions { gemm: TILED, mma: Some(mma), ..Default::default() }).unwrap();
        let ptx = emit_ptx(&p).unwrap();
        let k = p.kernels.iter().find(|k| k.tiled.is_some()).unwrap();
        let at = ptx.find(&format!(".visible .entry {}(", k.name)).unwrap();
        let body = &ptx[at..];
        let t = k.tiled.as_ref().unwrap();
        assert_eq!(t.cfg.mma, mma);
        assert!(body.contains(&format!(".maxntid {}, 1, 1", t.cfg.threads())), "{body}");
        assert!(ptx.contains(".shared .align 16 .b8"), "{ptx}");
        assert!(body.contains("bar.sync"), "{body}");
        assert!(body.contains("ld.shared.f64") || body.contains("ld.shared.v2.f64"), "{body}");
        if mma {
            let n = body.matches("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64").count() as u64;
            let per_step = (t.cfg.tm / 8) * (t.cfg.tn / 8) * (t.cfg.bk / 4);
            assert!(n >= per_step, "{n} mma.sync for {per_step} per step:\n{body}");
        } else {
            assert!(body.contains("fma.rn.f64"), "{body}");
        }
        assert!(body.contains("%ctaid.z"), "{body}");
        assert!(!body.contains("local"), "accumulators spilled to local memory:\n{body}");
    }
}

/// The staged epilogue stores 16 bytes at once only where every run of
/// columns is contiguous and aligned: C's innermost column stride 1 and length
/// a multiple of the width, and the slice's start too (a block of a union
/// starting at an odd element keeps scalar stores; the emulation fails any
/// vector store to an address that is not 16-byte aligned).
#[test]
fn staged_epilogue_stores_vectors_only_where_aligned() {
    let vec_of = |hir: &Hir, tile: Option<TileCfg>| {
        let o = GpuOptions { gemm: TILED, tile, epilogue: STAGED, ..Default::default() };
        check(hir, UnitId::new(0), &o).unwrap_or_else(|e| panic!("{tile:?}: {e}"));
        let p = plan(hir, &[UnitId::new(0)], &o).unwrap();
        let ts: Vec<_> = p.kernels.iter().filter_map(|k| k.tiled.clone()).collect();
        assert_eq!(ts.len(), 1);
        assert_eq!(ts[0].epilogue, Epilogue::Staged);
        ts[0].vec
    };
    for (elem, j, want) in [("f64", 46, 2), ("f64", 45, 1), ("f32", 44, 4), ("f32", 46, 1)] {
        let hir = compile(&einsum_src("ik,kj->ij", &[('i', 37), ('j', j), ('k', 33)], elem));
        for tile in [None, Some(TINY), Some(TileCfg { bm: 8, bn: 8, bk: 4, tm: 2, tn: 2, mma: false, stages: 2 })] {
            assert_eq!(vec_of(&hir, tile), want, "{elem} j={j} {tile:?}");
        }
    }
    // D[a] of D[p], P = O + V: the slice starts at element |O|.
    for (o, want) in [(3, 1), (2, 2)] {
        let src = format!(
            "range O = {o}; range V = 4; range P = O + V; range K = 9;\n\
             index a : V; index p : P; index k : K;\n\
             input tensor G[a,k] : f64; input tensor H[k] : f64; output tensor D[p] : f64;\n\
             D[a] = G[a,k] * H[k];\n"
        );
        assert_eq!(vec_of(&compile(&src), None), want, "|O| = {o}");
    }
}

/// Element-wise kernels move 16 bytes per access where every launch is
/// aligned (`Kernel::lanes`): a rank of 24 columns takes vectors in each
/// type (loads of `v4.u32` words for 16-bit types, `v2.f64`, `v4.f32`), one of
/// 29 and a slice of a union starting at an odd element keep one element per
/// thread. Every plan, under every option, equals the interpreter in the
/// emulation, which fails any vector access not aligned to its size.
#[test]
fn elementwise_kernels_move_vectors_only_where_aligned() {
    let lanes_of = |hir: &Hir| -> Vec<u64> {
        for o in all_options() {
            check(hir, UnitId::new(0), &o).unwrap_or_else(|e| panic!("{o:?}: {e}"));
        }
        let p = plan(hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
        p.kernels.iter().filter(|k| k.tiled.is_none() && k.red.is_empty()).map(|k| k.lanes).collect()
    };
    for (elem, bytes, vector) in [
        ("f64", 8, "ld.global.nc.v2.f64"),
        ("f32", 4, "ld.global.nc.v4.f32"),
        ("bf16", 2, "ld.global.nc.v4.u32"),
        ("f16", 2, "ld.global.nc.v4.u32"),
    ] {
        for (f, wide) in [(24, true), (29, false)] {
            let src = format!(
                "range T = 6; range F = {f}; index t : T; index f : F;\n\
                 input tensor G[t,f] : {elem}; input tensor U[t,f] : {elem}; input tensor S[t] : {elem};\n\
                 output tensor Y[t,f] : {elem}; output tensor Z[t,f] : {elem};\n\
                 Y[t,f] = silu(G[t,f]) * U[t,f];\n\
                 Z[t,f] = 3 * G[t,f] * S[t] + U[t,f];\n"
            );
            let hir = compile(&src);
            let lanes = lanes_of(&hir);
            assert!(!lanes.is_empty(), "{elem} F={f}");
            if wide {
                assert!(lanes.iter().all(|&l| l > 1), "{elem} F={f}: {lanes:?}");
                assert_eq!(lanes.iter().max(), Some(&(16 / bytes)), "{elem}");
                let ptx = emit_ptx(&plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap()).unwrap();
                assert!(ptx.contains(vector), "{elem}: no {vector}\n{ptx}");
            } else {
                assert!(lanes.iter().all(|&l| l == 1), "{elem} F={f}: {lanes:?}");
            }
        }
    }
    // D[a] of D[p], P = O + V: the slice starts at element |O|, so its
    // vectors are aligned only where |O| is even.
    for (o, want) in [(3, 1), (2, 2)] {
        let src = format!(
            "range O = {o}; range V = 4; range P = O + V; index a : V; index p : P;\n\
             input tensor G[a] : f64; input tensor H[a] : f64; output tensor D[p] : f64;\n\
             D[a] = G[a] * H[a];\n"
        );
        assert_eq!(lanes_of(&compile(&src)).iter().max(), Some(&want), "|O| = {o}");
    }
}

/// Every conflicting pair of steps in `steps` runs in program order under `s`:
/// on one stream, or the later one waits for a step at or after the earlier
/// one on the earlier one's stream (streams run their steps in order). A
/// `large` step conflicts with every other step (it runs alone).
fn assert_ordered(steps: &[Step], large: &[bool], s: &[streams::Scheduled], n: usize, what: &str) {
    assert_eq!(s.len(), steps.len(), "{what}");
    let access: Vec<streams::Access> = steps.iter().map(streams::Access::of).collect();
    for j in 0..steps.len() {
        assert!(s[j].stream < n, "{what}: step {j} on stream {}", s[j].stream);
        for &w in &s[j].waits {
            assert!(w < j && s[w].record && s[w].stream != s[j].stream, "{what}: step {j} waits for {w}");
        }
        for i in 0..j {
            if large[i] || large[j] || access[i].conflicts(&access[j]) {
                let ordered =
                    s[i].stream == s[j].stream || s[j].waits.iter().any(|&w| w >= i && s[w].stream == s[i].stream);
                assert!(ordered, "{what}: steps {i} and {j} conflict and may overlap: {s:?}");
            }
        }
    }
    let recorded = (0..s.len()).filter(|&i| s[i].record).count();
    let waited: std::collections::BTreeSet<usize> = s.iter().flat_map(|x| x.waits.iter().copied()).collect();
    assert_eq!(recorded, waited.len(), "{what}: events recorded that nobody waits for");
}

/// Streams for independent steps: the schedules of the examples and the random
/// programs under every option keep every conflicting pair of steps in order,
/// on 1 to 6 streams; independent statements spread over streams; one stream
/// is the plain order, without events.
#[test]
fn stream_schedules_keep_conflicting_steps_in_order() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/gpu/random");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.extend(["ccsd_terms.tc", "llama_block.tc", "programs/ccsd.tc", "programs/attention_block.tc"].map(example));
    let (mut spread, mut large_steps) = (0, 0);
    for (k, path) in files.iter().filter(|p| p.extension().is_some_and(|x| x == "tc")).enumerate() {
        let hir = compile(&std::fs::read_to_string(path).unwrap());
        let opts = &all_options()[k % all_options().len()];
        for u in hir.units.ids() {
            let p = plan(&hir, &[u], opts).unwrap();
            let steps = &p.units[0].steps;
            let large: Vec<bool> = steps.iter().map(|s| streams::is_large(&p.units[0], s, &p.kernels)).collect();
            large_steps += large.iter().filter(|&&l| l).count();
            for n in 1..=6 {
                let s = streams::schedule(&p.units[0], &p.kernels, n);
                assert_ordered(steps, &large, &s, n, &format!("{} n={n}", path.display()));
                if n == 1 {
                    assert!(s.iter().all(|x| x.stream == 0 && x.waits.is_empty() && !x.record));
                }
            }
            spread += (streams::streams_used(&streams::schedule(&p.units[0], &p.kernels, 4)) > 1) as usize;
        }
    }
    assert!(spread >= 20, "only {spread} units use more than one stream");
    assert!(large_steps >= 5, "only {large_steps} large steps: the rule that they run alone is not exercised");
    // Four independent statements, then one that reads them all: at N = 64
    // they spread over 4 streams; at N = 1536 the two products are large and
    // run alone on stream 0, between the small steps.
    for (n, small) in [(64, true), (1536, false)] {
        let hir = compile(&format!(
            "range N = {n}; index i, j, k : N;\n\
             input tensor A[i,j] : f64; input tensor B[j,k] : f64;\n\
             output tensor C[i,k] : f64; output tensor D[i,k] : f64; output tensor E[i,j] : f64;\n\
             output tensor F[j,k] : f64; output tensor G[i,k] : f64;\n\
             C[i,k] = A[i,j] * B[j,k];\nD[i,k] = A[j,i] * B[j,k];\nE[i,j] = 2 * A[i,j];\nF[j,k] = 3 * B[j,k];\n\
             G[i,k] = C[i,k] * D[i,k] + E[i,k] * F[i,k];\n"
        ));
        let p = plan(&hir, &[UnitId::new(0)], &GpuOptions::default()).unwrap();
        let (up, steps) = (&p.units[0], &p.units[0].steps);
        let large: Vec<bool> = steps.iter().map(|s| streams::is_large(up, s, &p.kernels)).collect();
        let s = streams::schedule(up, &p.kernels, 4);
        assert_ordered(steps, &large, &s, 4, &format!("four independent statements, N = {n}"));
        if small {
            assert!(s.iter().any(|x| x.waits.len() >= 2), "the last statement waits for the others: {s:?}");
            assert!(!large.contains(&true));
            assert_eq!(streams::streams_used(&s), 4, "{s:?}");
        } else {
            assert!(large.iter().filter(|&&l| l).count() >= 2 && large.contains(&false), "{large:?}");
            assert!(streams::streams_used(&s) > 1, "the small steps still spread: {s:?}");
            assert!((0..steps.len()).all(|j| !large[j] || s[j].stream == 0), "{s:?}");
        }
    }
}

/// PTX of a ring of operand buffers (`TileCfg::stages` >= 3): f64 and f32
/// operands copied by `cp.async` of their own size, a commit after every
/// step and a wait for all but `stages - 2` groups; 16-bit operands, which
/// widen to f32 on the way, and operands under a function are loaded and
/// stored as before; the double buffer makes no copies.
#[test]
fn ring_ptx_copies_what_it_can_by_cp_async() {
    let ring = |stages| TileCfg { bm: 64, bn: 64, bk: 8, tm: 8, tn: 8, mma: false, stages };
    let kernel = |src: &str, stages| {
        let hir = compile(src);
        let o = GpuOptions { gemm: TILED, tile: Some(ring(stages)), ..Default::default() };
        let p = plan(&hir, &[UnitId::new(0)], &o).unwrap();
        let ptx = emit_ptx(&p).unwrap();
        let k = p.kernels.iter().find(|k| k.tiled.is_some()).expect("a tiled kernel");
        let at = ptx.find(&format!(".visible .entry {}(", k.name)).unwrap();
        let end = ptx[at..].find("\n}").unwrap();
        ptx[at..at + end].to_string()
    };
    let sizes = [('i', 100), ('j', 70), ('k', 50)];
    for (elem, bytes) in [("f64", 8), ("f32", 4)] {
        let src = einsum_src("ik,kj->ij", &sizes, elem);
        let k = kernel(&src, 4);
        assert!(k.contains("cp.async.ca.shared.global [%rd"), "{elem}:\n{k}");
        assert!(k.contains(&format!("], {bytes}, %r")), "{elem}: copies of {bytes} bytes:\n{k}");
        assert!(k.contains("cp.async.commit_group;") && k.contains("cp.async.wait_group 2;"), "{elem}:\n{k}");
        assert!(k.contains("cp.async.wait_group 0;"), "{elem}: nothing left in flight:\n{k}");
        assert!(!kernel(&src, 2).contains("cp.async"), "{elem}: the double buffer");
    }
    let half = einsum_src("ik,kj->ij", &sizes, "bf16");
    assert!(!kernel(&half, 4).contains("cp.async.ca"), "bf16 widens on the way");
    let func = "range RI = 100; range RJ = 70; range RK = 50; index i : RI; index j : RJ; index k : RK;\n\
        input tensor A[i,k] : f64; input tensor B[k,j] : f64; output tensor C[i,j] : f64;\n\
        C[i,j] = exp(A[i,k]) * exp(B[k,j]);\n";
    assert!(!kernel(func, 4).contains("cp.async.ca"), "exp applies on the way");
}

/// PTX of the staged epilogue: more barriers than the direct one (two per
/// pass through the stage) and 16-byte global stores (`st.global.v2.f64`,
/// `st.global.v4.f32`), which the direct epilogue never makes.
#[test]
fn staged_epilogue_ptx_has_barriers_and_vector_stores() {
    for (elem, vst, mma) in
        [("f64", "st.global.v2.f64", false), ("f64", "st.global.v2.f64", true), ("f32", "st.global.v4.f32", false)]
    {
        let hir = compile(&einsum_src("bik,bkj->bij", &[('b', 3), ('i', 300), ('j', 200), ('k', 100)], elem));
        let body = |epilogue| {
            let o = GpuOptions { gemm: TILED, mma: Some(mma), epilogue, ..Default::default() };
            let p = plan(&hir, &[UnitId::new(0)], &o).unwrap();
            let ptx = emit_ptx(&p).unwrap();
            let k = p.kernels.iter().find(|k| k.tiled.is_some()).unwrap();
            assert_eq!(k.tiled.as_ref().unwrap().cfg.mma, mma);
            let at = ptx.find(&format!(".visible .entry {}(", k.name)).unwrap();
            (ptx[at..].to_string(), k.tiled.clone().unwrap())
        };
        let (direct, _) = body(Some(Epilogue::Direct));
        let (staged, t) = body(STAGED);
        let stage = t.cfg.stage(tcc::codegen::nvptx::Elem::F64);
        let passes =
            t.cfg.per_thread().div_ceil(if mma { 2 * t.cfg.tn / 8 } else { t.cfg.tn }).div_ceil(stage.per_pass);
        let bars = |b: &str| b.matches("bar.sync").count();
        assert!(
            bars(&staged) >= bars(&direct) + 2 * passes as usize - 1,
            "{elem} mma {mma}: {} vs {} barriers, {passes} passes",
            bars(&staged),
            bars(&direct)
        );
        assert!(staged.contains(vst), "{elem} mma {mma}:\n{staged}");
        assert!(!direct.contains(vst), "{elem} mma {mma}");
        assert!(staged.contains("st.shared") && staged.contains("ld.shared"));
        assert!(!staged.contains("local"), "spilled:\n{staged}");
    }
}

/// The whole-tile epilogue stages every accumulator row in one pass (one
/// barrier after the reduction's, where the staged one of a 64 × 64
/// tensor-core tile takes four passes), in a larger shared array; evict-first
/// C stores (`st.global.cs`) and a floor on resident blocks (`.minnctapersm`)
/// appear in the PTX only when asked for, and the plan records them.
#[test]
fn whole_epilogue_streaming_stores_and_min_blocks_reach_the_ptx() {
    let hir = compile(&einsum_src("bik,bkj->bij", &[('b', 3), ('i', 300), ('j', 200), ('k', 100)], "f64"));
    let tile = TileCfg { bm: 64, bn: 64, bk: 4, tm: 32, tn: 32, mma: true, stages: 4 };
    let body = |o: GpuOptions| {
        let o = GpuOptions { gemm: TILED, tile: Some(tile), ..o };
        let p = plan(&hir, &[UnitId::new(0)], &o).unwrap();
        let ptx = emit_ptx(&p).unwrap();
        let k = p.kernels.iter().find(|k| k.tiled.is_some()).unwrap();
        let at = ptx.find(&format!(".visible .entry {}(", k.name)).unwrap();
        let end = ptx[at..].find("\n}").unwrap();
        (ptx[at..at + end].to_string(), k.tiled.clone().unwrap())
    };
    let (staged, ts) = body(GpuOptions { epilogue: STAGED, ..Default::default() });
    let (whole, tw) = body(GpuOptions { epilogue: Some(Epilogue::Whole), ..Default::default() });
    assert_eq!((ts.epilogue, tw.epilogue), (Epilogue::Staged, Epilogue::Whole));
    let e = tcc::codegen::nvptx::Elem::F64;
    assert_eq!(tile.stage(e).per_pass, 1);
    assert_eq!(tile.stage_for(e, Epilogue::Whole).per_pass, 4);
    let bars = |b: &str| b.matches("bar.sync").count();
    assert_eq!(bars(&staged), bars(&whole) + 6, "three more passes, two barriers each");
    assert!(tw.cfg.shared_bytes_with(e, tw.epilogue) > ts.cfg.shared_bytes_with(e, ts.epilogue));
    assert!(!staged.contains("st.global.cs") && !staged.contains("minnctapersm"));
    assert!(!ts.stream_stores && ts.min_blocks.is_none());
    let (fast, tf) =
        body(GpuOptions { epilogue: STAGED, stream_stores: Some(true), min_blocks: Some(5), ..Default::default() });
    assert!(fast.contains("st.global.cs.v2.f64"), "{fast}");
    assert!(!fast.contains("st.global.v2.f64"), "every vector store of C evict-first");
    assert!(fast.contains(".minnctapersm 5"), "{fast}");
    assert!(tf.stream_stores && tf.min_blocks == Some(5));
    // A C whose columns cannot take vector stores keeps plain ones.
    let odd = compile(&einsum_src("ik,kj->ij", &[('i', 90), ('j', 77), ('k', 50)], "f64"));
    let o =
        GpuOptions { gemm: TILED, tile: Some(tile), epilogue: STAGED, stream_stores: Some(true), ..Default::default() };
    let p = plan(&odd, &[UnitId::new(0)], &o).unwrap();
    let t = p.kernels.iter().find_map(|k| k.tiled.clone()).unwrap();
    assert!(t.vec == 1 && !t.stream_stores);
    assert!(!emit_ptx(&p).unwrap().contains("st.global.cs"));
    // By default only a C larger than L2 (EVICT_FIRST_BYTES) is stored
    // evict-first: the 1.4 MB C above is not, a 128 MB one is, unless told
    // otherwise; a C the kernel accumulates into never is.
    let big = |stmt: &str, s: Option<bool>| {
        let src = format!(
            "range RI = 4000; range RJ = 4000; range RK = 16; index i : RI; index j : RJ; index k : RK;\n\
             input tensor A[i,k] : f64; input tensor B[k,j] : f64; input tensor D[i,j] : f64;\n\
             output tensor C[i,j] : f64;\n{stmt}\n"
        );
        let o = GpuOptions { gemm: TILED, tile: Some(tile), stream_stores: s, ..Default::default() };
        let p = plan(&compile(&src), &[UnitId::new(0)], &o).unwrap();
        let t = p.kernels.iter().find_map(|k| k.tiled.clone()).unwrap();
        assert_eq!(t.epilogue, Epilogue::Staged);
        (t.stream_stores, emit_ptx(&p).unwrap().contains("st.global.cs.v2.f64"))
    };
    assert_eq!(big("C[i,j] = A[i,k] * B[k,j];", None), (true, true));
    assert_eq!(big("C[i,j] = A[i,k] * B[k,j];", Some(false)), (false, false));
    assert!(!big("C[i,j] = D[i,j] * 2; C[i,j] += A[i,k] * B[k,j];", Some(true)).0);
}

/// The cost model against the fastest implementation measured on the H200 for
/// benchmark cases (bench/gpu/results.md, every kind forced on the same inputs).
#[test]
fn cost_model_agrees_with_h200_measurements() {
    type Case<'a> = (&'a str, &'a [(char, usize)], GemmKind);
    let cases: &[Case] = &[
        // cublas 0.309 ms, tiled 1.051, naive 5.83
        ("ik,kj->ij", &[('i', 2000), ('j', 2000), ('k', 2000)], GemmKind::Cublas),
        // cublas 0.405 ms, tiled 1.092, naive 0.969
        ("abik,kj->abij", &[('a', 150), ('b', 150), ('i', 40), ('j', 40), ('k', 40)], GemmKind::Cublas),
        // cublas 0.151 ms, tiled 0.643, naive 0.117
        ("akic,ck->ai", &[('a', 100), ('c', 100), ('i', 40), ('k', 40)], GemmKind::Naive),
        // cublas 0.093 ms, tiled 1.189, naive 0.194
        ("pqrs,rs->pq", &[('p', 80), ('q', 80), ('r', 80), ('s', 80)], GemmKind::Cublas),
        // cublas 0.355 ms, tiled 0.878, naive 0.275
        ("prqs,rs->pq", &[('p', 80), ('q', 80), ('r', 80), ('s', 80)], GemmKind::Naive),
        // cublas 0.208 ms, naive 0.662
        ("ijk,ijk->", &[('i', 300), ('j', 300), ('k', 300)], GemmKind::Cublas),
        // cublas 0.073 ms, tiled 0.207, naive 0.570
        ("bik,bkj->bij", &[('b', 64), ('i', 256), ('j', 256), ('k', 256)], GemmKind::Cublas),
        // The held-out suite (2026-12-06, bench/gpu/runs/suite-H200-2026-12-06/cc.json,
        // cuBLAS and the staged 64×64×8 tile forced in the same run):
        // sd_t_d2_2, n = 20: cublas 0.300 ms, tiled 0.201 (64×64×4: 0.166)
        (
            "jiad,bckd->abckij",
            &[('a', 20), ('b', 20), ('c', 20), ('i', 20), ('j', 20), ('k', 20), ('d', 20)],
            GemmKind::Tiled,
        ),
        // sd_t_d1_4, n = 16: cublas 0.071 ms, tiled 0.064
        (
            "ibal,lcjk->cabijk",
            &[('a', 16), ('b', 16), ('c', 16), ('i', 16), ('j', 16), ('k', 16), ('l', 16)],
            GemmKind::Tiled,
        ),
        // CCSD Fock ki,abkj->abij (o = 32, v = 128): cublas 0.238 ms, tiled 0.117
        ("ki,abkj->abij", &[('a', 128), ('b', 128), ('i', 32), ('j', 32), ('k', 32)], GemmKind::Tiled),
        // CCSD Fock ac,cbij->abij: cublas 0.122 ms, tiled 0.228
        ("ac,cbij->abij", &[('a', 128), ('b', 128), ('c', 128), ('i', 32), ('j', 32)], GemmKind::Cublas),
        // AO→MO pqrs,pa->aqrs (N = 80): cublas 0.286 ms, tiled 0.597
        ("pqrs,pa->aqrs", &[('p', 80), ('q', 80), ('r', 80), ('s', 80), ('a', 80)], GemmKind::Cublas),
        // AO→MO pqrs,rc->pqcs (N = 80): cublas 0.384 ms, tiled 0.600
        ("pqrs,rc->pqcs", &[('p', 80), ('q', 80), ('r', 80), ('s', 80), ('c', 80)], GemmKind::Cublas),
        // TN abcde,bdf->acef (n = 24): cublas 0.091 ms, tiled 0.071 then; since
        // cuBLAS's operand copies go through the shared-memory tile, cublas
        // 0.055 ms, tiled 0.081 (H200, 2026-12-06 23:45; H100 09:00: 0.075, 0.084)
        ("abcde,bdf->acef", &[('a', 24), ('b', 24), ('c', 24), ('d', 24), ('e', 24), ('f', 24)], GemmKind::Cublas),
        // TN aibj,bjck->acik (n = 40): cublas 0.172 ms, tiled 0.420
        ("aibj,bjck->acik", &[('a', 40), ('b', 40), ('c', 40), ('i', 40), ('j', 40), ('k', 40)], GemmKind::Cublas),
    ];
    for (spec, sizes, want) in cases {
        let p = plan(&compile(&einsum_src(spec, sizes, "f64")), &[UnitId::new(0)], &GpuOptions::default()).unwrap();
        assert_eq!(chosen_kinds(&p), vec![*want], "{spec}: {}", tcc::codegen::nvptx::describe(&p));
    }
}

/// Declarations of the CUDA driver API and cuBLAS that the C shim uses, as the
/// real headers declare them: the shim compiles here without CUDA installed
/// (the device run compiles and runs it against the real ones).
const STUB_CUDA_H: &str = "#include <stddef.h>\ntypedef int CUresult;\n#define CUDA_SUCCESS 0\ntypedef int CUdevice;\n\
typedef struct CUctx_st* CUcontext; typedef struct CUmod_st* CUmodule; typedef struct CUfunc_st* CUfunction;\n\
typedef struct CUstream_st* CUstream; typedef unsigned long long CUdeviceptr;\n\
CUresult cuInit(unsigned); CUresult cuDeviceGet(CUdevice*, int); CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);\n\
CUresult cuCtxSetCurrent(CUcontext); CUresult cuModuleLoadData(CUmodule*, const void*);\n\
CUresult cuModuleGetFunction(CUfunction*, CUmodule, const char*); CUresult cuGetErrorString(CUresult, const char**);\n\
CUresult cuMemAlloc(CUdeviceptr*, size_t); CUresult cuMemFree(CUdeviceptr); CUresult cuMemcpyHtoD(CUdeviceptr, const void*, size_t);\n\
CUresult cuMemcpyDtoH(void*, CUdeviceptr, size_t); CUresult cuMemsetD8(CUdeviceptr, unsigned char, size_t);\n\
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);\n\
CUresult cuCtxSynchronize(void);\n\
typedef struct CUevent_st* CUevent; typedef enum { CU_STREAM_DEFAULT = 0 } CUstream_flags;\n\
typedef enum { CU_EVENT_DISABLE_TIMING = 2 } CUevent_flags;\n\
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream); CUresult cuStreamCreate(CUstream*, unsigned);\n\
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned); CUresult cuEventCreate(CUevent*, unsigned);\n\
CUresult cuEventRecord(CUevent, CUstream); CUresult cuEventDestroy(CUevent);\n";
const STUB_CUBLAS_H: &str = "typedef struct cublasContext* cublasHandle_t;\ntypedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;\n\
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;\ncublasStatus_t cublasCreate(cublasHandle_t*);\n\
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;\n\
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t);\n\
typedef struct CUstream_st* cudaStream_t; cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t);\n\
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const double*, const double*, int, long long, const double*, int, long long, const double*, double*, int, long long, int);\n\
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float*, const float*, int, long long, const float*, int, long long, const float*, float*, int, long long, int);\n\
typedef enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;\n\
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;\ntypedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;\n\
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*, cudaDataType, int, long long, const void*, cudaDataType, int, long long, const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);\n";

/// `tcc build --target cuda` writes a C shim (NAME.c + NAME.h) that compiles
/// cleanly: every example, and products on cuBLAS, tiled and naive kernels.
#[test]
fn c_shim_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let inc = dir.path().join("inc");
    std::fs::create_dir(&inc).unwrap();
    std::fs::write(inc.join("cuda.h"), STUB_CUDA_H).unwrap();
    std::fs::write(inc.join("cublas_v2.h"), STUB_CUBLAS_H).unwrap();
    let mut files: Vec<(PathBuf, &str)> = std::fs::read_dir(example(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tc"))
        // Every example builds for CUDA: complex ones get a shim taking
        // `double _Complex*` / `float _Complex*`, 16-bit ones `uint16_t*`.
        .map(|p| (p, "auto"))
        .collect();
    let gemm = dir.path().join("g.tc");
    std::fs::write(&gemm, einsum_src("bki,bjk->bji", &[('b', 3), ('i', 40), ('j', 29), ('k', 50)], "f32")).unwrap();
    for kind in ["cublas", "tiled", "naive", "cublas --tf32"] {
        files.push((gemm.clone(), kind));
    }
    // 16-bit: cublasGemmStridedBatchedEx on bf16 A and B, uint16_t arguments.
    let half = dir.path().join("h.tc");
    std::fs::write(&half, einsum_src("bki,bjk->bji", &[('b', 3), ('i', 40), ('j', 29), ('k', 50)], "bf16")).unwrap();
    for kind in ["cublas", "tiled", "naive"] {
        files.push((half.clone(), kind));
    }
    for (k, (f, kind)) in files.iter().enumerate() {
        let ptx = dir.path().join(format!("s{k}.ptx"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcc"))
            .args(["build", "--target", "cuda", "--gpu-gemm"])
            .args(kind.split(' '))
            .arg("-o")
            .arg(&ptx)
            .arg(f)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let c = dir.path().join(format!("s{k}.c"));
        let h = std::fs::read_to_string(dir.path().join(format!("s{k}.h"))).unwrap();
        assert!(h.contains("int tcc_cuda_") && h.contains("TCC_ERR_CUDA"), "{h}");
        // Every return code has its own value (TCC_ERR_CUDA once shared 5 with TCC_ERR_SIZE).
        let codes: Vec<(&str, &str)> = h
            .lines()
            .filter(|l| l.starts_with("#define TCC_OK ") || l.starts_with("#define TCC_ERR_"))
            .filter_map(|l| {
                let mut w = l.split_whitespace().skip(1);
                Some((w.next()?, w.next()?))
            })
            .collect();
        let values: std::collections::BTreeSet<&str> = codes.iter().map(|c| c.1).collect();
        assert!(codes.len() >= 7 && values.len() == codes.len(), "{codes:?}");
        let src = std::fs::read_to_string(&c).unwrap();
        // Forced kinds only (the cost model may pick cuBLAS for an example).
        if *kind != "auto" {
            assert_eq!(
                src.contains("cublasDgemmStridedBatched")
                    || src.contains("cublasSgemmStridedBatched")
                    || src.contains("cublasGemmStridedBatchedEx"),
                kind.starts_with("cublas"),
                "{kind}"
            );
            if *f == half {
                assert!(h.contains("const uint16_t* X0, size_t X0_len"), "{h}");
                assert_eq!(src.contains("CUDA_R_16BF"), kind.starts_with("cublas"), "{kind}");
            }
            assert_eq!(src.contains("CUBLAS_TF32_TENSOR_OP_MATH"), kind.ends_with("--tf32"), "{kind}");
        }
        let cc = std::process::Command::new("cc")
            .args([
                "-std=c99",
                "-D_POSIX_C_SOURCE=200809L",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wno-unused-parameter",
                "-fsyntax-only",
                "-I",
            ])
            .arg(&inc)
            .arg(&c)
            .output()
            .unwrap();
        assert!(cc.status.success(), "{} ({kind}): {}", f.display(), String::from_utf8_lossy(&cc.stderr));
    }
}

/// The C shim's streams, end to end without a GPU: five cuBLAS products, three
/// independent and two that read earlier ones, built with `--streams 4` and
/// `--streams 1`, linked against the host mock of CUDA (`tests/gpu_mock`),
/// whose created streams run their queued work in a random order that only the
/// streams and events constrain, and called from C under 40 seeds against C
/// loops. With 4 streams the shim creates streams, waits on events, and the
/// order was open to the mock (a missing wait reads unwritten, NaN memory);
/// with 1 it runs on the null stream alone. `--streams` off the GPU or 0: E0716.
#[test]
fn c_shim_streams_keep_dependent_products_in_order_on_the_mock() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tcc = env!("CARGO_BIN_EXE_tcc");
    std::fs::write(
        d.join("s.tc"),
        "range N = 12; range K = 10; range L = 7;\nindex i, j : N; index k : K; index l : L;\n\
         input tensor A[i,k] : f64; input tensor B[k,j] : f64; input tensor P[k,l] : f64; input tensor E[j,l] : f64;\n\
         output tensor C[i,j] : f64; output tensor H[j,l] : f64; output tensor D[i,l] : f64;\n\
         output tensor F[i,l] : f64; output tensor G[i,j] : f64;\n\
         C[i,j] = A[i,k] * B[k,j];\nH[j,l] = B[k,j] * P[k,l];\nD[i,l] = C[i,j] * H[j,l];\n\
         F[i,l] = A[i,k] * P[k,l];\nG[i,j] = D[i,l] * E[j,l];\n",
    )
    .unwrap();
    let drv = r#"#include "s.h"
#include <math.h>
#include <stdio.h>
extern int tcc_mock_launches, tcc_mock_streams, tcc_mock_waits, tcc_mock_choices;
extern unsigned tcc_mock_seed;
enum { N = 12, K = 10, L = 7 };
static double A[N * K], B[K * N], P[K * L], E[N * L], C[N * N], H[N * L], D[N * L], F[N * L], G[N * N];
static double rC[N * N], rH[N * L], rD[N * L], rF[N * L], rG[N * N];
static double diff(const double* x, const double* y, int n) {
    double m = 0;
    for (int q = 0; q < n; q++) m = fmax(m, isnan(x[q]) ? INFINITY : fabs(x[q] - y[q]));
    return m;
}
int main(void) {
    for (int q = 0; q < N * K; q++) A[q] = (q % 7) * 0.25 - 0.5, B[q] = (q % 5) * 0.3 - 0.6;
    for (int q = 0; q < K * L; q++) P[q] = (q % 3) - 1.0;
    for (int q = 0; q < N * L; q++) E[q] = (q % 4) * 0.5 - 0.75;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double c = 0;
            for (int k = 0; k < K; k++) c += A[i * K + k] * B[k * N + j];
            rC[i * N + j] = c;
        }
    for (int j = 0; j < N; j++)
        for (int l = 0; l < L; l++) {
            double h = 0;
            for (int k = 0; k < K; k++) h += B[k * N + j] * P[k * L + l];
            rH[j * L + l] = h;
        }
    for (int i = 0; i < N; i++)
        for (int l = 0; l < L; l++) {
            double x = 0, f = 0;
            for (int j = 0; j < N; j++) x += rC[i * N + j] * rH[j * L + l];
            for (int k = 0; k < K; k++) f += A[i * K + k] * P[k * L + l];
            rD[i * L + l] = x, rF[i * L + l] = f;
        }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double g = 0;
            for (int l = 0; l < L; l++) g += rD[i * L + l] * E[j * L + l];
            rG[i * N + j] = g;
        }
    for (unsigned seed = 1; seed <= 40; seed++) {
        tcc_mock_seed = seed;
        int rc = tcc_cuda_main(A, N * K, B, K * N, P, K * L, E, N * L, C, N * N, H, N * L, D, N * L, F, N * L, G, N * N);
        if (rc) { printf("rc %d: %s\n", rc, tcc_cuda_last_error()); return 1; }
        double e = fmax(fmax(diff(C, rC, N * N), diff(H, rH, N * L)), fmax(diff(D, rD, N * L), diff(F, rF, N * L)));
        e = fmax(e, diff(G, rG, N * N));
        if (!(e <= 1e-12)) { printf("seed %u: error %g\n", seed, e); return 2; }
    }
    printf("streams %d waits %d choices %d launches %d\n", tcc_mock_streams, tcc_mock_waits, tcc_mock_choices,
           tcc_mock_launches);
    return tcc_mock_launches ? 3 : 0;
}
"#;
    std::fs::write(d.join("drv.c"), drv).unwrap();
    let mock = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu_mock");
    for streams in ["4", "1"] {
        let out = std::process::Command::new(tcc)
            .current_dir(d)
            .args(["build", "--target", "cuda", "--gpu-gemm", "cublas", "s.tc", "-o", "s.ptx", "--streams", streams])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.contains("0 kernel launches, 5 cuBLAS calls"), "{err}");
        let cc = std::process::Command::new("cc")
            .current_dir(d)
            .args(["-std=c99", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"])
            .args(["-o", "drv", "drv.c", "s.c", "-I."])
            .arg(format!("-I{}", mock.display()))
            .arg(mock.join("mock.c"))
            .args(["-lpthread", "-lm"])
            .output()
            .unwrap();
        assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
        let run = std::process::Command::new(d.join("drv")).current_dir(d).output().unwrap();
        let text = String::from_utf8_lossy(&run.stdout).to_string();
        assert!(run.status.success(), "--streams {streams}: exit {:?}\n{text}", run.status.code());
        let count = |what: &str| -> usize {
            let at = text.find(&format!("{what} ")).unwrap_or_else(|| panic!("{text}")) + what.len() + 1;
            text[at..].split_whitespace().next().unwrap().parse().unwrap()
        };
        if streams == "4" {
            assert!(count("streams") >= 3 && count("waits") >= 40 && count("choices") >= 40, "{text}");
        } else {
            assert_eq!((count("streams"), count("waits"), count("choices")), (0, 0, 0), "{text}");
        }
    }
    for args in [&["--streams", "0", "--target", "cuda"][..], &["--streams", "2"][..]] {
        let out = std::process::Command::new(tcc)
            .current_dir(d)
            .args(["build", "s.tc", "-o", "s.ptx"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("E0716"), "{args:?}");
    }
}

/// `--tf32`: f32 cuBLAS calls (only those) marked for TF32 tensor cores,
/// predicted faster, checked within TOL_TF32; refused where no GPU plan is made.
#[test]
fn tf32_marks_f32_cublas_calls_only() {
    use tcc::codegen::nvptx::cost::steps_time;
    fn gemms(steps: &[Step], out: &mut Vec<(bool, tcc::codegen::nvptx::Elem)>) {
        for s in steps {
            match s {
                Step::Loop { body, .. } => gemms(body, out),
                Step::Gemm(g) => out.push((g.tf32, g.elem)),
                Step::Choice(c) => gemms(c.steps(), out),
                _ => {}
            }
        }
    }
    let sizes = [('i', 500), ('j', 400), ('k', 300)];
    for elem in ["f32", "f64"] {
        let hir = compile(&einsum_src("ik,kj->ij", &sizes, elem));
        let plain = GpuOptions { gemm: CUBLAS, ..Default::default() };
        let tf32 = GpuOptions { tf32: true, ..plain.clone() };
        let (p0, p1) = (plan(&hir, &[UnitId::new(0)], &plain).unwrap(), plan(&hir, &[UnitId::new(0)], &tf32).unwrap());
        let (mut g0, mut g1) = (Vec::new(), Vec::new());
        gemms(&p0.units[0].steps, &mut g0);
        gemms(&p1.units[0].steps, &mut g1);
        assert_eq!(g0.len(), 1);
        assert!(!g0[0].0 && !p0.uses_tf32());
        assert_eq!(g1[0].0, elem == "f32", "{elem}");
        assert_eq!(p1.uses_tf32(), elem == "f32");
        let t = |p: &tcc::codegen::nvptx::GpuPlan| steps_time(&p.units[0].steps, &p.kernels, &p.units[0].buffers);
        if elem == "f32" {
            assert!(t(&p1) < 0.5 * t(&p0), "{} vs {}", t(&p1), t(&p0));
        } else {
            assert_eq!(t(&p1), t(&p0));
        }
        // The emulation computes exactly; the check's tolerance for TF32 is wider.
        check(&hir, UnitId::new(0), &tf32).unwrap();
    }
    const { assert!(tcc::run::compare::TOL_TF32 > tcc::run::compare::TOL_F32) };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.tc");
    std::fs::write(&f, einsum_src("ik,kj->ij", &sizes, "f32")).unwrap();
    for args in [vec!["build", "--tf32", "-o", "x.so"], vec!["run", "--tf32"], vec!["opt", "--tf32"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcc"))
            .args(&args)
            .arg(&f)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("E0773") && err.contains("--tf32"), "{args:?}: {err}");
    }
}

/// The 18 CCSD(T) triples contractions of NWChem's TCE (sd_t_d1_1..9,
/// sd_t_d2_1..9; the patterns of bench/gpu/cc_suite.py, Fortran declarations
/// reversed to row-major) and AO→MO steps at small, unequal extents: cuBLAS
/// writing the permuted output in place, through a scratch matrix, the cost
/// model's choice and tiled kernels, all emulated against the interpreter.
#[test]
fn triples_and_ao2mo_match_the_interpreter_every_way() {
    let outs_d1 = ["abcijk", "abcjik", "abcjki", "cabijk", "cabjik", "cabjki", "acbijk", "acbjik", "acbjki"];
    let outs_d2 = ["abcijk", "abckij", "abcikj", "bacijk", "backij", "bacikj", "bcaijk", "bcakij", "bcaikj"];
    let mut specs: Vec<String> = Vec::new();
    specs.extend(outs_d1.iter().map(|o| format!("ibal,lcjk->{o}")));
    specs.extend(outs_d2.iter().map(|o| format!("jiad,bckd->{o}")));
    specs.extend(["pqrs,pa->aqrs", "pqrs,qb->pbrs", "pqrs,rc->pqcs", "pqrs,sd->pqrd"].map(String::from));
    let sizes: &[(char, usize)] = &[
        ('a', 3),
        ('b', 4),
        ('c', 2),
        ('d', 3),
        ('i', 2),
        ('j', 3),
        ('k', 4),
        ('l', 3),
        ('p', 3),
        ('q', 4),
        ('r', 2),
        ('s', 5),
    ];
    let mut in_place = 0;
    for spec in &specs {
        let used: Vec<(char, usize)> = sizes.iter().copied().filter(|(c, _)| spec.contains(*c)).collect();
        let hir = compile(&einsum_src(spec, &used, "f64"));
        let u = UnitId::new(0);
        for o in [
            GpuOptions { gemm: CUBLAS, in_place: Some(true), ..Default::default() },
            GpuOptions { gemm: CUBLAS, in_place: Some(false), ..Default::default() },
            GpuOptions::default(),
            GpuOptions { gemm: TILED, tile: Some(TINY), ..Default::default() },
            // The staged epilogue: the cost model's tile, a tiny FMA tile, tiny
            // and real tensor-core tiles (several passes through the stage).
            GpuOptions { gemm: TILED, epilogue: STAGED, ..Default::default() },
            GpuOptions { gemm: TILED, tile: Some(TINY), epilogue: STAGED, ..Default::default() },
            GpuOptions { gemm: TILED, tile: Some(TWO_PASSES), epilogue: STAGED, ..Default::default() },
            GpuOptions { gemm: TILED, tile: Some(TINY_MMA), epilogue: STAGED, ..Default::default() },
            GpuOptions { gemm: TILED, tile: Some(TileCfg::CANDIDATES[4]), epilogue: STAGED, ..Default::default() },
        ] {
            check(&hir, u, &o).unwrap_or_else(|e| panic!("{spec} {o:?}: {e}"));
        }
        let p = plan(&hir, &[u], &GpuOptions { gemm: CUBLAS, in_place: Some(true), ..Default::default() }).unwrap();
        // In place: no scratch copy of C, the GEMM writes C itself (beta 0, no Memset).
        if p.units[0].buffers.iter().all(|b| !b.name.starts_with("_out")) {
            in_place += 1;
        }
        // The output is written whole by its one statement: runners need not clear
        // it (the emulation above starts it as NaN).
        let up = &p.units[0];
        let out = up.buf_of(*up.args.last().unwrap()).unwrap();
        assert!(up.no_clear.contains(&out), "{spec}: {:?}", up.no_clear);
    }
    assert!(in_place >= 20, "{in_place} of {} planned in place", specs.len());
}

/// `tcc build --target cuda --tiled`: the move kernels for a program that runs
/// tiled on the GPU (`max`, affine subscripts); a clear refusal (E0760, exit 1)
/// for one that does not (a move over 11 dimensions), and for `--tiled` without
/// `--target cuda` (E0716).
#[test]
fn tiled_gpu_builds_write_the_move_kernel_or_refuse_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let tcc = env!("CARGO_BIN_EXE_tcc");
    let ptx = dir.path().join("ccd.ptx");
    let out = std::process::Command::new(tcc)
        .args(["build", example("tiled/ccd_spin.tc").to_str().unwrap(), "--target", "cuda", "--tiled", "-o"])
        .arg(&ptx)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(text.contains(".entry tcc_tile_moves"));
    let src = dir.path().join("max.tc");
    std::fs::write(
        &src,
        "range N = 8;\nindex i, j : N;\ninput tensor A[i,j] : f64;\noutput tensor M[i] : f64;\nM[i] = max(A[i,j]);\n",
    )
    .unwrap();
    // `max`/`min`, `where` and affine subscripts run on the GPU's tile moves.
    for (file, ptx) in [(src.clone(), "max.ptx"), (example("conv2d.tc"), "conv.ptx")] {
        let out = std::process::Command::new(tcc)
            .args(["build", file.to_str().unwrap(), "--target", "cuda", "--tiled", "-o"])
            .arg(dir.path().join(ptx))
            .output()
            .unwrap();
        assert!(out.status.success(), "{ptx}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::read_to_string(dir.path().join(ptx)).unwrap().contains(".entry tcc_tile_moves"));
    }
    // A complex program runs as its (re, im) parts.
    let out = std::process::Command::new(tcc)
        .args(["build", example("density_c64.tc").to_str().unwrap(), "--target", "cuda", "--tiled", "-o"])
        .arg(dir.path().join("complex.ptx"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(dir.path().join("complex.ptx")).unwrap().contains(".entry tcc_tile_moves"));
    // A move over 11 dimensions is more than the move kernels take: refused
    // when built, not when run.
    let wide = dir.path().join("wide.tc");
    let idx = "a,b,c,d,e,f,g,h,i,j,k";
    std::fs::write(
        &wide,
        format!(
            "range N = 2;\nindex {idx} : N;\ninput tensor A[{idx}] : f64;\noutput tensor B[{idx}] : f64;\nB[{idx}] = 2.0 * A[{idx}];\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(tcc)
        .args(["build", wide.to_str().unwrap(), "--target", "cuda", "--tiled", "-o"])
        .arg(dir.path().join("wide.ptx"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("E0760") && err.contains("tile move over 11 dimensions"), "{err}");
    assert!(!dir.path().join("wide.ptx").exists());
    let out = std::process::Command::new(tcc)
        .args(["build", src.to_str().unwrap(), "--tiled", "-o"])
        .arg(dir.path().join("lib.so"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("E0716"), "{err}");
}
