//! Fusion legality and memory, checked by running nests against the interpreter.

use super::exec::execute;
use super::fusion::{lower_unit, unfused, FuseMode, FusionOptions};
use super::{LoopNest, Node};
use crate::interp::{random_inputs, run_unit};
use crate::sema::hir::{Hir, UnitId};

fn compile(src: &str) -> Hir {
    let (hir, diags) = crate::compile(src, "t");
    hir.unwrap_or_else(|| panic!("{diags:?}"))
}

/// Runs the unit through the nest and through the interpreter; asserts equality.
fn assert_same(hir: &Hir, nest: &LoopNest) {
    let inputs = random_inputs(hir, nest.unit, 7).unwrap();
    let want = run_unit(hir, nest.unit, &inputs).unwrap();
    let got = execute(hir, nest, &inputs).unwrap();
    assert_eq!(want.len(), got.len());
    for (t, w) in &want {
        let g = &got[t];
        assert_eq!(w.shape, g.shape);
        let d = crate::run::compare::rel_diff(&g.data, &w.data);
        assert!(
            d.rel <= 1e-12,
            "{} differs: {} vs {}\n{}",
            hir.tensors[*t].name,
            w.data[d.at],
            g.data[d.at],
            nest.dump(hir)
        );
    }
}

/// `--fuse max`: the least memory, what these tests examine.
fn most_fused() -> FusionOptions {
    FusionOptions { mode: FuseMode::Max, ..FusionOptions::default() }
}

fn loop_depth(nodes: &[Node]) -> usize {
    nodes.iter().map(|n| if let Node::Loop { body, .. } = n { 1 + loop_depth(body) } else { 0 }).max().unwrap_or(0)
}

const FOUR_INDEX: &str = "
range N = 5;
index p, q, r, s, a, b, c, d : N;
input tensor A[p,q,r,s] : f64 symmetric(p q)(r s);
input tensor C[a,p] : f64;
output tensor B[a,b,c,d] : f64;
tensor T1[a,q,r,s];
tensor T2[a,b,r,s];
tensor T3[a,b,c,s];
T1[a,q,r,s] = C[a,p] * A[p,q,r,s];
T2[a,b,r,s] = C[b,q] * T1[a,q,r,s];
T3[a,b,c,s] = C[c,r] * T2[a,b,r,s];
B[a,b,c,d] = C[d,s] * T3[a,b,c,s];
";

#[test]
fn four_index_transform_needs_only_small_intermediates() {
    let hir = compile(FOUR_INDEX);
    let nest = lower_unit(&hir, UnitId::new(0), most_fused());
    let n = 5usize;
    // Unfused: three N^4 temporaries live around each statement (two at a time).
    assert_eq!(nest.unfused_peak_bytes, 8 * 2 * n.pow(4) as u64);
    // Fused: every temporary is at most N^3.
    for b in nest.buffers.values() {
        if hir.tensors[b.tensor].role == crate::sema::hir::Role::Temporary {
            assert!(b.elements <= n.pow(3), "{}", nest.dump(&hir));
        }
    }
    assert!(nest.peak_bytes <= 8 * (n.pow(3) + n.pow(2)) as u64, "{}", nest.dump(&hir));
    assert!(loop_depth(&nest.body) >= 3, "{}", nest.dump(&hir));
    assert_same(&hir, &nest);
}

#[test]
fn unfused_nest_matches_interpreter() {
    let hir = compile(FOUR_INDEX);
    assert_same(&hir, &unfused(&hir, UnitId::new(0), &Default::default()));
}

#[test]
fn summed_loop_shared_with_producer_accumulates_correctly() {
    // k is summed in the consumer; sharing it with the producer makes T a vector per
    // k, and R must be zeroed before the k loop, not inside it.
    let hir = compile(
        "range N = 4; index i, j, k : N;
         input tensor A[i,k]; input tensor B[k,j]; output tensor R[i,j]; tensor T[i,k];
         T[i,k] = 2 * A[i,k];
         R[i,j] = T[i,k] * B[k,j];",
    );
    let nest = lower_unit(&hir, UnitId::new(0), most_fused());
    assert!(nest.peak_bytes < 8 * 16, "{}", nest.dump(&hir));
    assert_same(&hir, &nest);
}

#[test]
fn reading_a_temporary_twice_keeps_it_whole_where_needed() {
    let hir = compile(
        "range N = 3; range M = 4; index i, j : N; index k : M;
         input tensor A[i,k]; output tensor R[i,j]; output tensor S[j]; tensor T[i,k];
         T[i,k] = A[i,k] * A[i,k];
         R[i,j] = T[i,k] * T[j,k];
         S[j] = 0.5 * T[j,k];",
    );
    let nest = lower_unit(&hir, UnitId::new(0), most_fused());
    assert_same(&hir, &nest);
}

#[test]
fn statements_with_calls_and_self_reads_run_whole() {
    let hir = compile(
        "range N = 4; index i, j, k : N;
         input tensor A[i,k]; input tensor B[k,j]; output tensor R[i,j]; tensor T[i,j];
         T[i,j] = A[i,k] * B[k,j];
         R[i,j] = exp(T[i,j]) + T[j,i];
         R[i,j] += R[j,i] * 0.5;",
    );
    let nest = lower_unit(&hir, UnitId::new(0), most_fused());
    assert_same(&hir, &nest);
}

#[test]
fn accumulating_outputs_across_statements() {
    let hir = compile(
        "range N = 3; index i, j, k, l : N;
         input tensor A[i,j,k]; input tensor B[k,l]; output tensor R[i,l]; tensor T[i,j,l];
         T[i,j,l] = A[i,j,k] * B[k,l];
         R[i,l] = T[i,j,l];
         R[i,l] += 3 * T[i,i,l];
         T[i,j,l] = A[i,j,l] * 2;
         R[i,l] += T[i,j,l];",
    );
    let nest = lower_unit(&hir, UnitId::new(0), most_fused());
    assert_same(&hir, &nest);
}

#[test]
fn dump_shows_loops_and_buffer_sizes() {
    let hir = compile(FOUR_INDEX);
    let text = lower_unit(&hir, UnitId::new(0), most_fused()).dump(&hir);
    assert!(text.contains("for a in 0..5 {"), "{text}");
    for t in ["T1", "T2", "T3"] {
        assert!(text.contains(&format!("buffer {t}: f64[")), "{text}");
    }
    assert!(text.contains("buffer A: f64[5, 5, 5, 5] = 625 elements (5000 bytes)"), "{text}");
    assert!(text.contains("peak temporary memory"), "{text}");
}

#[test]
fn a_generous_memory_limit_keeps_contractions_whole() {
    let hir = compile(FOUR_INDEX);
    let roomy =
        lower_unit(&hir, UnitId::new(0), FusionOptions { mem_limit: Some(1 << 30), ..FusionOptions::default() });
    assert_eq!(loop_depth(&roomy.body), 0, "{}", roomy.dump(&hir));
    assert_same(&hir, &roomy);
    // A limit between the fused and unfused peaks forces just enough fusion.
    let n = 5u64;
    let tight =
        lower_unit(&hir, UnitId::new(0), FusionOptions { mem_limit: Some(8 * n.pow(4)), ..FusionOptions::default() });
    assert!(tight.peak_bytes <= 8 * n.pow(4), "{}", tight.dump(&hir));
    assert!(loop_depth(&tight.body) >= 1);
    assert_same(&hir, &tight);
    // An impossible limit still gives the smallest nest.
    let tiny = lower_unit(&hir, UnitId::new(0), FusionOptions { mem_limit: Some(1), ..FusionOptions::default() });
    let best = lower_unit(&hir, UnitId::new(0), most_fused());
    assert_eq!(tiny.peak_bytes, best.peak_bytes);
}

/// The spin-orbital CCD residual's shape (12 statements, examples/programs/ccd.tc):
/// `auto` keeps every GEMM-shaped step a GETT (a 20,000-visit search that visits
/// the most fused nests first never reached the unfused one), while `max` and a
/// tight limit fuse and say which GEMMs became loops.
#[test]
fn auto_keeps_gemm_shaped_steps_whole_unless_a_limit_forces_fusion() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/programs/ccd.tc")).unwrap();
    let hir = compile(&src);
    let prepared = crate::pipeline::prepare(&hir, &crate::pipeline::PipelineOptions::default());
    let u = UnitId::new(0);
    assert!(prepared.units[u].stmts.len() >= 12);
    let auto = lower_unit(&prepared, u, FusionOptions { mem_limit: Some(2 << 30), ..FusionOptions::default() });
    assert!(auto.gemms_made_loops().is_empty(), "{}", auto.dump(&prepared));
    assert!(auto.time_s <= auto.unfused_time_s);
    let most = lower_unit(&prepared, u, most_fused());
    assert!(most.peak_bytes < auto.peak_bytes);
    assert!(!most.gemms_made_loops().is_empty());
    assert!(most.time_s > 2.0 * auto.time_s, "{} vs {}", most.time_s, auto.time_s);
    assert!(most.dump(&prepared).contains("loops (unfused: gett"), "{}", most.dump(&prepared));
    // A limit below the unfused peak: the fastest nest that fits, not the smallest.
    let limit = auto.peak_bytes - 1;
    let tight = lower_unit(&prepared, u, FusionOptions { mem_limit: Some(limit), ..FusionOptions::default() });
    assert!(tight.peak_bytes <= limit);
    assert!(tight.time_s < most.time_s, "{} vs {}", tight.time_s, most.time_s);
    let none = lower_unit(&prepared, u, FusionOptions { mode: FuseMode::None, ..FusionOptions::default() });
    assert_eq!(loop_depth(&none.body), 0);
    // The same program at o = 3, v = 5 through each mode, against the interpreter.
    let small = compile(&src.replace("range O = 10;", "range O = 3;").replace("range V = 38;", "range V = 5;"));
    let small = crate::pipeline::prepare(&small, &crate::pipeline::PipelineOptions::default());
    for mode in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
        for mem_limit in [None, Some(2000)] {
            assert_same(&small, &lower_unit(&small, u, FusionOptions { mode, mem_limit, ..FusionOptions::default() }));
        }
    }
}

/// A unit far longer than one search window (issue 23: 10,000 statements): 60
/// copies of the four-index transform, one segment of 240 statements searched in
/// windows whose borders fall between copies, so every copy is fused as when alone.
#[test]
fn a_long_unit_is_searched_in_windows_that_keep_each_chain_whole() {
    let copies = 60;
    let mut src = String::from(
        "range N = 5;\nindex p, q, r, s, a, b, c, d : N;\n\
         input tensor A[p,q,r,s] : f64 symmetric(p q)(r s);\ninput tensor C[a,p] : f64;\n",
    );
    for k in 0..copies {
        src += &format!(
            "output tensor B{k}[a,b,c,d];\ntensor T1_{k}[a,q,r,s];\ntensor T2_{k}[a,b,r,s];\ntensor T3_{k}[a,b,c,s];\n"
        );
    }
    for k in 0..copies {
        src += &format!(
            "T1_{k}[a,q,r,s] = C[a,p] * A[p,q,r,s];\nT2_{k}[a,b,r,s] = C[b,q] * T1_{k}[a,q,r,s];\n\
             T3_{k}[a,b,c,s] = C[c,r] * T2_{k}[a,b,r,s];\nB{k}[a,b,c,d] = {} * C[d,s] * T3_{k}[a,b,c,s];\n",
            k + 1
        );
    }
    let hir = compile(&src);
    let nest = lower_unit(&hir, UnitId::new(0), most_fused());
    let n = 5usize;
    for b in nest.buffers.values() {
        if hir.tensors[b.tensor].role == crate::sema::hir::Role::Temporary {
            assert!(b.elements <= n.pow(3), "{}", hir.tensors[b.tensor].name);
        }
    }
    assert!(nest.peak_bytes <= 8 * (n.pow(3) + n.pow(2)) as u64);
    assert_same(&hir, &nest);
}
