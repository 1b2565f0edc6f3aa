//! The whole programs of `examples/programs/` (bench/programs/ times them against
//! numpy): each, with its ranges shrunk so the interpreter is quick, JIT-compiled
//! under every fusion mode and a memory limit that forces fusion, computes what the
//! reference interpreter computes.

use tcc::codegen::llvm::{jit_run, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;

/// `src` JIT-compiled with each of `variants` (on `threads` threads) computes what
/// the interpreter computes on random inputs (`seed`), to 1e-12 relative.
fn assert_jit_matches_interpreter(src: &str, seed: u64, threads: usize, variants: impl IntoIterator<Item = Options>) {
    // Temporaries the code need not zero come filled with NaN: any read of one
    // before it is written shows as a difference.
    tcc_runtime::alloc::set_poison(true);
    let (hir, diags) = tcc::compile(src, "main");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let u = hir.units.ids().next().unwrap();
    let inputs = random_inputs(&hir, u, seed).unwrap();
    let want = run_unit(&hir, u, &inputs).unwrap();
    for opts in variants {
        let got = jit_run(&hir, u, &inputs, &opts, threads).unwrap().outputs;
        for (t, w) in &want {
            let d = tcc::run::compare::rel_diff(&got[t].data, &w.data);
            assert!(
                d.rel <= 1e-12,
                "{:?} {:?} {:?}: {} differs: {} vs {}",
                opts.fuse,
                opts.gemm_min,
                opts.mem_limit,
                hir.tensors[*t].name,
                got[t].data[d.at],
                w.data[d.at]
            );
        }
    }
}

/// `range X = N;` becomes `range X = min(N, k)` with k = 3, 4, 5, … per range, so
/// that distinct ranges keep distinct sizes.
fn shrink(src: &str) -> String {
    let mut k = 3;
    src.lines()
        .map(|line| {
            let t = line.trim_start();
            if let Some(rest) = t.strip_prefix("range ") {
                if let Some((name, size)) = rest.split_once('=') {
                    let size: usize = size.trim().trim_end_matches(';').trim().parse().unwrap();
                    k += 1;
                    return format!("range {} = {};", name.trim(), size.min(k - 1));
                }
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn whole_programs_match_the_interpreter_in_every_fusion_mode() {
    tcc_runtime::alloc::set_poison(true);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/programs");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "tc") {
            continue;
        }
        let src = shrink(&std::fs::read_to_string(&path).unwrap());
        let (hir, diags) = tcc::compile(&src, "main");
        let hir = hir.unwrap_or_else(|| panic!("{}: {diags:?}", path.display()));
        for u in hir.units.ids() {
            let inputs = random_inputs(&hir, u, 5).unwrap();
            // Attention's exp stays finite on these small random inputs.
            let want = run_unit(&hir, u, &inputs).unwrap();
            for (fuse, mem_limit) in
                [(FuseMode::Auto, None), (FuseMode::None, None), (FuseMode::Max, None), (FuseMode::Auto, Some(256))]
            {
                let opts = Options { fuse, mem_limit, gemm_min: Some(1.0), ..Options::default() };
                // Two calls: the second gets the temporaries the first gave back.
                let got = jit_run(&hir, u, &inputs, &opts, 2).unwrap().outputs;
                assert_eq!(got.len(), want.len());
                for (t, w) in &want {
                    let d = tcc::run::compare::rel_diff(&got[t].data, &w.data);
                    assert!(
                        d.rel <= 1e-10,
                        "{} {fuse:?} {mem_limit:?}: {} differs: {} vs {}",
                        path.display(),
                        hir.tensors[*t].name,
                        got[t].data[d.at],
                        w.data[d.at]
                    );
                }
            }
            n += 1;
        }
    }
    assert!(n >= 6, "only {n} programs checked");
}

#[test]
fn shrinking_keeps_ranges_distinct_and_small() {
    let s = shrink("range O = 10;\nrange V = 38;\nrange P = 2;\nindex i : O;");
    assert_eq!(s, "range O = 3;\nrange V = 4;\nrange P = 2;\nindex i : O;");
}

/// Sums of permutations (`Z[a,b,i,j] - Z[b,a,i,j] - …`) are computed in one pass over
/// the target; with coefficients, functions, an accumulating `+=` and a term that
/// reads the target itself (which must not join the pass) they still compute what the
/// interpreter computes.
#[test]
fn permutation_sums_in_one_pass_match_the_interpreter() {
    let src = "range O = 3; range V = 5;
        index i, j : O; index a, b : V;
        input tensor X[a,b,i,j] : f64; input tensor Y[a,b,i,j] : f32;
        output tensor Z[a,b,i,j] : f64; output tensor W[a,b,i,j] : f64;
        Z[a,b,i,j] = X[a,b,i,j] - X[b,a,i,j] - 0.5 * X[a,b,j,i] + X[b,a,j,i] * Y[a,b,i,j];
        W[a,b,i,j] = exp(Y[a,b,j,i]) + 2 * X[b,a,i,j];
        W[a,b,i,j] += Y[b,a,j,i] - X[a,b,i,j];
        Z[a,b,i,j] += Z[b,a,i,j] + Y[a,b,i,j];";
    assert_jit_matches_interpreter(
        src,
        7,
        2,
        [FuseMode::Auto, FuseMode::None].map(|fuse| Options { fuse, ..Options::default() }),
    );
}

/// Many short products into one output (`C[i,k] = A0[i,j]*B[j,k] + A1[i,j]*B[j,k] +
/// …`, split into `+=` statements of 32 terms by the pipeline) share one loop nest
/// per statement, mixed with element-wise and broadcast terms: the same values as
/// the interpreter, with GETT calls allowed or not. (As one nest per term, 300 such
/// terms took LLVM 44 s to compile; shared, 0.5 s.)
#[test]
fn many_short_products_into_one_output_match_the_interpreter() {
    let mut src = String::from(
        "range N = 4; range M = 3; index i, j : N; index k : M;
         input tensor B[j,k] : f64; input tensor E[i,k] : f32; input tensor v[k] : f64;
         output tensor C[i,k] : f64;\n",
    );
    for t in 0..5 {
        src += &format!("input tensor A{t}[i,j] : f64;\n");
    }
    let terms: Vec<String> = (0..40)
        .map(|t| match t % 4 {
            3 => format!("{}.5 * E[i,k]", t % 3),
            2 => "v[k]".to_string(),
            _ => format!("A{}[i,j] * B[j,k]", t % 5),
        })
        .collect();
    src += &format!("C[i,k] = {};\n", terms.join(" - "));
    assert_jit_matches_interpreter(
        &src,
        3,
        1,
        [(FuseMode::Auto, None), (FuseMode::None, Some(1.0)), (FuseMode::Max, None)].map(|(fuse, gemm_min)| Options {
            fuse,
            gemm_min,
            ..Options::default()
        }),
    );
}

/// A unit of more than 64 terms is compiled one top-level statement (or fused
/// loop) per LLVM function (issue 23: one function of 3000 terms took LLVM 30 s):
/// temporaries, fused loops and GETT calls across those functions give the
/// interpreter's values in every fusion mode.
#[test]
fn a_large_unit_in_one_function_per_statement_matches_the_interpreter() {
    let mut src = String::from(
        "range N = 4; range M = 3; index i, j : N; index k, m : M;
         input tensor B[j,k] : f64; input tensor G[k,m] : f64; input tensor v[k] : f64;
         output tensor C[i,k] : f64; output tensor D[i,m] : f64; tensor T[i,k];\n",
    );
    for t in 0..5 {
        src += &format!("input tensor A{t}[i,j] : f64;\n");
    }
    let terms: Vec<String> =
        (0..80).map(|t| if t % 3 == 2 { "v[k]".to_string() } else { format!("A{}[i,j] * B[j,k]", t % 5) }).collect();
    src += &format!("C[i,k] = {};\n", terms.join(" + "));
    src += "T[i,k] = A1[i,j] * B[j,k];\nD[i,m] = T[i,k] * G[k,m] + 2 * A2[i,j] * B[j,k] * G[k,m];\nD[i,m] += C[i,k] * G[k,m];\n";
    assert_jit_matches_interpreter(
        &src,
        3,
        2,
        [
            (FuseMode::Auto, None, None),
            (FuseMode::None, Some(1.0), None),
            (FuseMode::Max, None, None),
            (FuseMode::Auto, Some(1.0), Some(64)),
        ]
        .map(|(fuse, gemm_min, mem_limit)| Options { fuse, gemm_min, mem_limit, ..Options::default() }),
    );
}

/// Temporaries of 4 MiB and more come from the runtime's huge-page allocator
/// (`tcc_rt_alloc_temp`, kept between calls), smaller ones from `calloc`/`malloc`:
/// the same values as the interpreter when a large temporary is accumulated into
/// (`+=` reads its zeros, also from a block an earlier call left dirty) and when a
/// GETT overwrites it (a block given NaN bytes), repeated calls included.
#[test]
fn large_temporaries_from_the_huge_page_allocator_match_the_interpreter() {
    let src = "range I = 1024; range K = 640; range J = 8;
        index i : I; index k : K; index j : J;
        input tensor A[i,j] : f64; input tensor B[j,k] : f64; input tensor v[k] : f64;
        output tensor C[i] : f64;
        tensor T[i,k] : f64; tensor U[i,k] : f64;
        T[i,k] = A[i,j] * B[j,k];
        U[i,k] += exp(0.1 * T[i,k]);
        U[i,k] += T[i,k];
        C[i] = U[i,k] * v[k];";
    assert_jit_matches_interpreter(
        src,
        11,
        3,
        [FuseMode::Auto, FuseMode::None, FuseMode::Max].map(|fuse| Options { fuse, ..Options::default() }),
    );
}

/// With no objective given, the CPU pipeline keeps the order for `combined` where
/// the time model prices it at least 5 % faster: in the MPS step, `M1·M2` first
/// and one pass over the 10 MB intermediate instead of two (the flop-optimal
/// order applies `M1` and `M2` one at a time). An explicit objective is kept.
#[test]
fn the_time_model_picks_the_order_that_writes_less() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/programs/mps_step.tc");
    let (hir, diags) = tcc::compile(&std::fs::read_to_string(path).unwrap(), "main");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let units: Vec<_> = hir.units.ids().collect();
    let opts = tcc::pipeline::PipelineOptions::with_mem_limit(Some(2 << 30));
    let (p, by_time) = tcc::pipeline::prepare_fused(&hir, &units, &opts);
    let mut flops = opts.clone();
    flops.order.by_time = false;
    let (q, by_flops) = tcc::pipeline::prepare_fused(&hir, &units, &flops);
    let (t, f) = (by_time[0].time_s, by_flops[0].time_s);
    assert!(t < 0.95 * f, "model {t} s against {f} s");
    let (lt, lf) = (by_time[0].dump(&p), by_flops[0].dump(&q));
    let mpo = |l: &str| l.lines().any(|x| x.contains("M1[") && x.contains("M2[") && x.contains("+="));
    assert!(mpo(&lt), "M1·M2 first:\n{lt}");
    assert!(!mpo(&lf), "the flop-optimal order:\n{lf}");
    // Both orders compile to what the interpreter computes (small ranges).
    let src = shrink(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/programs/mps_step.tc"),
        )
        .unwrap(),
    );
    for by_time in [true, false] {
        let mut o = Options { gemm_min: Some(1.0), ..Options::default() };
        o.order.by_time = by_time;
        o.order.objective =
            if by_time { tcc::tir::opmin::Objective::Flops } else { tcc::tir::opmin::Objective::Combined };
        assert_jit_matches_interpreter(&src, 7, 1, [o]);
    }
}
