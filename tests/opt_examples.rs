//! Every example, optimized (contraction order, CSE, factorization) and lowered to
//! fused loop nests, computes what the reference interpreter computes on the
//! original program.

use std::collections::HashMap;
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::exec::execute;
use tcc::pipeline::PipelineOptions;
use tcc::tensor::Dense;

fn assert_close(
    what: &str,
    want: &HashMap<tcc::sema::hir::TensorId, Dense>,
    got: &HashMap<tcc::sema::hir::TensorId, Dense>,
) {
    assert_eq!(want.len(), got.len(), "{what}: outputs differ");
    for (t, w) in want {
        let g = &got[t];
        let d = tcc::run::compare::rel_diff(&g.data, &w.data);
        assert!(d.rel <= 1e-10, "{what}: output {}: {} vs {}", t.index(), w.data[d.at], g.data[d.at]);
    }
}

#[test]
fn optimized_and_fused_examples_match_the_interpreter() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "tc") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let popts = PipelineOptions { validate: true, ..PipelineOptions::default() };
        let (hir, diags) = tcc::pipeline::check(&src, &stem, &popts);
        let hir = hir.unwrap_or_else(|| panic!("{}: {diags:?}", path.display()));
        // A complex example as its lowering to real pairs (checked against the
        // complex interpreter in tests/complex.rs).
        let hir = tcc::tir::complex::lower(&hir).0;
        // A 16-bit example as the f32 program the back ends compile (checked
        // against the rounding interpreter in tests/half.rs).
        let hir = tcc::tir::half::widen(&hir);
        let (opt, _) = tcc::pipeline::optimize(&hir, &popts);
        for u in hir.units.ids() {
            let inputs = random_inputs(&hir, u, 11).unwrap();
            let want = run_unit(&hir, u, &inputs).unwrap();
            let what = format!("{} unit {}", path.display(), hir.units[u].name);
            assert_close(&format!("{what} (optimized)"), &want, &run_unit(&opt, u, &inputs).unwrap());
            for limit in [None, Some(0), Some(1 << 40)] {
                let nest = tcc::pipeline::fuse(&opt, &[u], &PipelineOptions::with_mem_limit(limit)).remove(0);
                assert!(nest.peak_bytes <= nest.unfused_peak_bytes, "{what}");
                assert_close(
                    &format!("{what} (fused, limit {limit:?})"),
                    &want,
                    &execute(&opt, &nest, &inputs).unwrap(),
                );
            }
            n += 1;
        }
    }
    assert!(n >= 7, "only {n} units checked");
}
