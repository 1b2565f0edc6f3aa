//! The CPU back end against the reference interpreter: the examples, GEMM-shaped
//! contractions through the GETT kernel, and random programs (proptest); the
//! GPU back end's plans and kernels, emulated on the host, on random programs.

use super::llvm::Options;
use crate::interp::{random_inputs, run_unit};
use crate::run::compare::compare_outputs;
use crate::sema::hir::{CmpOp, ElemType, Expr, Extremum, Factor, Func, Hir, IndexId, RangeId, Role, TensorId, UnitId};
use crate::tir::testutil::Builder;
use proptest::prelude::*;

fn check_unit(hir: &Hir, u: UnitId, seed: u64, opts: &Options) -> Result<(), String> {
    check_unit_sized(hir, u, &[], seed, opts)
}

/// Unit `u` of `hir` compiled with `runtime` ranges as size arguments (the sizes in
/// `hir` are the assumptions) and run at `sizes`, against the interpreter on the
/// program with those sizes.
fn check_unit_sized(hir: &Hir, u: UnitId, sizes: &[(RangeId, usize)], seed: u64, opts: &Options) -> Result<(), String> {
    // Temporaries the code need not zero come filled with NaN (see tcc_rt_alloc_temp).
    tcc_runtime::alloc::set_poison(true);
    let mut actual = hir.clone();
    for &(r, n) in sizes {
        actual.ranges[r].size = n;
    }
    let inputs = random_inputs(&actual, u, seed).map_err(|e| e.to_string())?;
    let want = run_unit(&actual, u, &inputs).map_err(|e| e.to_string())?;
    let map: std::collections::BTreeMap<RangeId, usize> = sizes.iter().copied().collect();
    let got = super::llvm::jit_run_sized(hir, u, &map, &inputs, opts, 1).map_err(|e| e.0)?;
    crate::run::compare::check_outputs(&actual, u, &got.outputs, &want, &inputs).map(|_| ())
}

/// Every example program, checked.
fn examples() -> Vec<(std::path::PathBuf, Hir)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "tc") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        let (hir, diags) = crate::compile(&src, "ex");
        let hir = hir.unwrap_or_else(|| panic!("{}: {diags:?}", path.display()));
        // Complex examples as their lowering (the real interpreter is the oracle here;
        // the lowering itself is checked against the complex one in tests/complex.rs).
        out.push((path.clone(), crate::tir::complex::lower(&hir).0));
    }
    assert!(out.len() >= 7);
    out
}

#[test]
fn every_example_compiles_and_matches_the_interpreter() {
    for (path, hir) in examples() {
        for u in hir.units.ids() {
            for opts in
                [Options::default(), Options { gemm_min: Some(1.0), parallel_min: Some(1.0), ..Options::default() }]
            {
                check_unit(&hir, u, 3, &opts).unwrap_or_else(|e| panic!("{} unit {}: {e}", path.display(), u.index()));
            }
        }
    }
}

#[test]
fn examples_with_runtime_sizes_match_the_interpreter_at_other_sizes() {
    for (path, hir) in examples() {
        for u in hir.units.ids() {
            // Every range a runtime size, at 1, a prime, and the assumed size + 2.
            for pick in [|_: usize| 1, |r: usize| [7, 5, 3, 2][r % 4], |_: usize| 0] {
                let mut sizes: Vec<(RangeId, usize)> = hir
                    .ranges
                    .ids()
                    .filter(|&r| hir.ranges[r].model.is_none())
                    .map(|r| (r, if pick(r.index()) == 0 { hir.ranges[r].size + 2 } else { pick(r.index()) }))
                    .collect();
                // A union is as large as its parts (declared before it).
                for k in 0..sizes.len() {
                    let parts = &hir.ranges[sizes[k].0].parts;
                    if !parts.is_empty() {
                        sizes[k].1 = parts.iter().map(|p| sizes.iter().find(|s| s.0 == *p).map_or(0, |s| s.1)).sum();
                    }
                }
                // An input read at affine subscripts (`I[y+r]`) grows to what they reach.
                let mut actual = hir.clone();
                for _ in 0..sizes.len() {
                    sizes.iter().for_each(|&(r, n)| actual.ranges[r].size = n);
                    let Some((a, k, _, hi)) = actual.affine_out_of_bounds() else { break };
                    let dim = hir.tensors[a.tensor].dims[k];
                    sizes.iter_mut().filter(|s| s.0 == dim).for_each(|s| s.1 = hi as usize + 1);
                }
                let opts = Options { gemm_min: Some(1.0), parallel_min: Some(1.0), ..Options::default() };
                check_unit_sized(&hir, u, &sizes, 5, &opts)
                    .unwrap_or_else(|e| panic!("{} unit {u:?} sizes {sizes:?}: {e}", path.display()));
            }
        }
    }
}

fn einsum(spec: &str, sizes: &[(char, usize)], elem: ElemType) -> Hir {
    let mut h = Builder::einsum(spec, sizes);
    for t in &mut h.tensors {
        t.elem = elem;
    }
    h
}

#[test]
fn gemm_shaped_contractions_use_the_kernel_and_match() {
    let cases: &[(&str, &[(char, usize)])] = &[
        ("ik,kj->ij", &[('i', 67), ('j', 45), ('k', 33)]),
        ("ki,jk->ji", &[('i', 40), ('j', 29), ('k', 50)]),
        ("abk,kc->acb", &[('a', 9), ('b', 7), ('c', 31), ('k', 24)]),
        ("bik,bkj->bij", &[('b', 3), ('i', 35), ('j', 21), ('k', 40)]),
        ("pqrs,ap->aqrs", &[('p', 13), ('q', 11), ('r', 5), ('s', 7), ('a', 17)]),
        ("abij,ijcd->abcd", &[('a', 6), ('b', 9), ('i', 5), ('j', 8), ('c', 7), ('d', 10)]),
        ("ii,ij->j", &[('i', 40), ('j', 50)]),
    ];
    for (spec, sizes) in cases {
        for elem in [ElemType::F64, ElemType::F32] {
            let hir = einsum(spec, sizes, elem);
            for opts in [Options::default(), Options { gemm_min: Some(1.0), ..Options::default() }] {
                check_unit(&hir, UnitId::new(0), 1, &opts).unwrap_or_else(|e| panic!("{spec} {elem:?}: {e}"));
            }
        }
    }
}

#[test]
fn sums_into_few_elements_and_collapsed_loops_match() {
    // Scalar results (split across threads as a parallel sum), GEMV-like sums whose
    // loops collapse (`r,s` walk `pqrs` and `rs` as one), and mixed cases.
    let cases: &[(&str, &[(char, usize)])] = &[
        ("ijk,ijk->", &[('i', 13), ('j', 11), ('k', 17)]),
        ("ijk->", &[('i', 7), ('j', 1), ('k', 300)]),
        ("pqrs,rs->pq", &[('p', 5), ('q', 6), ('r', 7), ('s', 9)]),
        ("prqs,rs->pq", &[('p', 5), ('q', 6), ('r', 7), ('s', 9)]),
        ("ij,ij->i", &[('i', 3), ('j', 500)]),
        ("abc,abc->ab", &[('a', 4), ('b', 5), ('c', 6)]),
    ];
    for (spec, sizes) in cases {
        for elem in [ElemType::F64, ElemType::F32] {
            let hir = einsum(spec, sizes, elem);
            for opts in [Options::default(), Options { parallel_min: Some(1.0), ..Options::default() }] {
                check_unit(&hir, UnitId::new(0), 5, &opts).unwrap_or_else(|e| panic!("{spec} {elem:?}: {e}"));
            }
        }
    }
    let hir = einsum("ijk,ijk->", &[('i', 13), ('j', 11), ('k', 17)], ElemType::F64);
    let ir =
        super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &Options { parallel_min: Some(1.0), ..Options::default() })
            .unwrap();
    assert!(ir.contains("tcc_rt_parallel_sum"), "a scalar sum should be split across threads:\n{ir}");
}

#[test]
fn emitted_ir_holds_the_vector_micro_kernel() {
    // 96 rows and columns: whole 16 x 12 tiles (the default one).
    let hir = einsum("ik,kj->ij", &[('i', 96), ('j', 96), ('k', 64)], ElemType::F64);
    let ir = super::llvm::emit_llvm(
        &hir,
        &[UnitId::new(0)],
        &Options { target_cpu: Some("skylake-avx512".into()), ..Options::default() },
    )
    .unwrap();
    assert!(ir.contains("tcc_uk_f64_16x12"), "{ir}");
    assert!(ir.contains("<8 x double>"), "{ir}");
    assert!(ir.contains("tcc_rt_gett_f64"), "{ir}");
    let ir = super::llvm::emit_llvm(
        &hir,
        &[UnitId::new(0)],
        &Options { target_cpu: Some("x86-64".into()), ..Options::default() },
    )
    .unwrap();
    assert!(ir.contains("tcc_uk_f64_4x4"), "{ir}");
}

/// The register tile follows the contraction's extents (`gett::tile_shape`): a
/// stride-1 extent of 24 gets `MR = 24`, 100 columns a 10-wide tile, a short
/// inner column extent 8 an 8-wide one. Each shape is checked against the
/// interpreter, at the assumed sizes and at others (edge tiles, slivers that
/// cross the inner dimension), with and without the output overwritten.
#[test]
fn gett_tiles_shaped_to_the_extents_match_the_interpreter() {
    type Case<'a> = (&'a str, &'a [(char, usize)], &'a str);
    let cases: &[Case] = &[
        // m = (a, j): j = 24 stride-1 in C and A.
        ("akcj,cbik->abij", &[('a', 3), ('b', 5), ('c', 7), ('i', 24), ('j', 24), ('k', 3)], "tcc_uk_f64_24x8"),
        // C[i, j], j = 100 contiguous is the row group; 30 columns: 10 wide.
        ("ik,kj->ij", &[('i', 30), ('j', 100), ('k', 37)], "tcc_uk_f64_16x10"),
        // Columns (b, i) with i = 8 innermost (a, stride-1 in C, is the row group).
        ("ak,bik->bia", &[('a', 64), ('b', 12), ('i', 8), ('k', 40)], "tcc_uk_f64_16x8"),
        // The default tile.
        ("ik,kj->ij", &[('i', 48), ('j', 64), ('k', 20)], "tcc_uk_f64_16x12"),
    ];
    let avx512 = Options { target_cpu: Some("skylake-avx512".into()), gemm_min: Some(1.0), ..Options::default() };
    for (spec, sizes, kernel) in cases {
        let hir = einsum(spec, sizes, ElemType::F64);
        let ir = super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &avx512).unwrap();
        assert!(
            ir.contains(kernel),
            "{spec}: expected {kernel}:\n{}",
            ir.lines().filter(|l| l.contains("tcc_uk")).collect::<Vec<_>>().join("\n")
        );
        for opts in [Options::default(), Options { gemm_min: Some(1.0), ..Options::default() }] {
            check_unit(&hir, UnitId::new(0), 3, &opts).unwrap_or_else(|e| panic!("{spec}: {e}"));
            // Other sizes than the tile was chosen for.
            let other: Vec<(RangeId, usize)> =
                hir.ranges.ids().enumerate().map(|(x, r)| (r, [1usize, 7, 25, 13, 31, 9][x % 6])).collect();
            check_unit_sized(&hir, UnitId::new(0), &other, 4, &opts)
                .unwrap_or_else(|e| panic!("{spec} {other:?}: {e}"));
        }
    }
}

/// GETTs whose rows (C's contiguous group) are few — two `mc` blocks of 192 —
/// and whose columns are many: on two threads the runtime splits their columns
/// (`kernels::split_columns`, each task packing its own B slivers); the MPS
/// step's last contraction (`lqtsy,rqy->lstr`, shrunk: `m = r`, `n = l,s,t`,
/// `k = q,y`, no group one progression in B), a plain GEMM and one of edge sizes.
/// Against the interpreter, on the process's threads (two where the machine has
/// them; a machine with more runs the same rule's other cases).
#[test]
fn gett_with_few_rows_and_many_columns_matches_the_interpreter() {
    let cases: &[(&str, &[(char, usize)])] = &[
        ("lqtsy,rqy->lstr", &[('l', 30), ('q', 5), ('r', 200), ('s', 2), ('t', 2), ('y', 20)]),
        ("ik,kj->ij", &[('i', 120), ('j', 200), ('k', 90)]),
        ("ki,jk->ij", &[('i', 101), ('j', 197), ('k', 93)]),
    ];
    for (spec, sizes) in cases {
        let hir = einsum(spec, sizes, ElemType::F64);
        let ir = super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &Options::default()).unwrap();
        assert!(ir.contains("tcc_rt_gett_f64"), "{spec}: expected a GETT call");
        check_unit(&hir, UnitId::new(0), 5, &Options::default()).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

/// A random program: 1–3 statements over 3–5 indices of sizes 1–6 (or 5–13 in
/// "gemm" programs), outputs and temporaries, `=`/`+=`, 1–2 terms of 0–3
/// factors with diagonals, calls, parenthesised sums, self-reads, f32 or mixed
/// element types.
fn random_program(seed: u64) -> Hir {
    let mut rnd = crate::tir::testutil::picker(seed, 0xABCD_EF01);
    let gemm = rnd(3) == 0;
    let nl = 3 + rnd(3);
    let letters: Vec<char> = "abcde".chars().take(nl).collect();
    let sizes: Vec<(char, usize)> = letters.iter().map(|&c| (c, if gemm { 5 + rnd(9) } else { 1 + rnd(6) })).collect();
    let mut b = Builder::new(&sizes);
    let elems = match rnd(6) {
        0 => [ElemType::F32, ElemType::F32],
        1 => [ElemType::F32, ElemType::F64],
        _ => [ElemType::F64, ElemType::F64],
    };
    let rnd_elem = |r: usize| elems[r % 2];
    let pick_idx = |rnd: &mut dyn FnMut(usize) -> usize, max: usize| -> String {
        let n = rnd(max + 1);
        (0..n).map(|_| letters[rnd(nl)]).collect()
    };
    // (tensor, its index letters as declared) of everything readable so far
    let mut readable: Vec<(TensorId, String)> = Vec::new();
    let mut next_input = 0;
    let mut next_sum = 0;
    let nstmts = 1 + rnd(3);
    for s in 0..nstmts {
        // distinct lhs letters
        let mut lhs = String::new();
        for &c in &letters {
            if rnd(2) == 0 && lhs.len() < 3 {
                lhs.push(c);
            }
        }
        let role = if s + 1 < nstmts && rnd(2) == 0 { Role::Temporary } else { Role::Output };
        let e = rnd_elem(rnd(2));
        let target = match readable.iter().find(|(t, d)| *d == lhs && b.hir.tensors[*t].role == role && rnd(2) == 0) {
            Some((t, _)) => *t,
            None => {
                let t = b.tensor(&format!("{}{s}", if role == Role::Output { "O" } else { "X" }), role, &lhs, &[]);
                b.hir.tensors[t].elem = e;
                t
            }
        };
        let mut factor = |b: &mut Builder,
                          rnd: &mut dyn FnMut(usize) -> usize,
                          readable: &Vec<(TensorId, String)>|
         -> (Factor, String) {
            if !readable.is_empty() && rnd(3) == 0 {
                let (t, d) = &readable[rnd(readable.len())];
                // same ranges: reuse the declared letters, maybe permuted by a swap
                let mut idx: Vec<char> = d.chars().collect();
                if idx.len() >= 2
                    && rnd(2) == 0
                    && sizes.iter().find(|x| x.0 == idx[0]).unwrap().1
                        == sizes.iter().find(|x| x.0 == idx[1]).unwrap().1
                {
                    idx.swap(0, 1);
                }
                let s: String = idx.into_iter().collect();
                return (b.r(*t, &s), s);
            }
            let s = pick_idx(rnd, 3);
            let t = b.tensor(&format!("A{next_input}"), Role::Input, &s, &[]);
            next_input += 1;
            b.hir.tensors[t].elem = elems[rnd(2)];
            (b.r(t, &s), s)
        };
        let nterms = 1 + rnd(2);
        let mut terms = Vec::new();
        let mut seen: Vec<(String, f64)> = Vec::new();
        for _ in 0..nterms {
            let nf = rnd(4);
            let mut fs: Vec<(Factor, String)> = (0..nf).map(|_| factor(&mut b, &mut rnd, &readable)).collect();
            // a call or a sum around the first one or two factors
            if nf >= 1 && rnd(3) == 0 {
                let take = if nf >= 2 && rnd(2) == 0 { 2 } else { 1 };
                let inner: Vec<(Factor, String)> = fs.drain(..take).collect();
                let inner_letters: String = inner.iter().map(|x| x.1.clone()).collect();
                let outside: String = fs.iter().map(|x| x.1.clone()).collect::<String>() + &lhs;
                let mut free: Vec<IndexId> = Vec::new();
                let mut free_s = String::new();
                for c in inner_letters.chars() {
                    let i = b.idx(&c.to_string())[0];
                    if outside.contains(c) && !free.contains(&i) {
                        free.push(i);
                        free_s.push(c);
                    }
                }
                let mut iterms =
                    vec![b.term(if rnd(2) == 0 { 1.0 } else { -0.5 }, inner.into_iter().map(|x| x.0).collect())];
                let arg_is_sum = rnd(2) == 0;
                if arg_is_sum && !free_s.is_empty() {
                    let (f2, _) = {
                        next_sum += 1;
                        let t = b.tensor(&format!("S{next_sum}"), Role::Input, &free_s, &[]);
                        (b.r(t, &free_s), free_s.clone())
                    };
                    iterms.push(b.term(0.75, vec![f2]));
                }
                let arg = Box::new(Expr { terms: iterms, span: 0..0 });
                let kind = rnd(6);
                let f = if kind == 0 {
                    // `max`/`min`: the argument's unshared indices reduced.
                    let op = if rnd(2) == 0 { Extremum::Max } else { Extremum::Min };
                    Factor::Reduce { op, arg, free, span: 0..0 }
                } else if kind == 1 {
                    // `where` of inputs over the shared indices (compared as given:
                    // no rounding of a computed value decides a branch).
                    let cmps = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];
                    let cmp = cmps[rnd(cmps.len())];
                    let args = (0..4)
                        .map(|_| {
                            next_sum += 1;
                            let t = b.tensor(&format!("S{next_sum}"), Role::Input, &free_s, &[]);
                            b.r(t, &free_s)
                        })
                        .collect();
                    Factor::Select { cmp, args, free, span: 0..0 }
                } else if rnd(2) == 0 {
                    Factor::Sum { arg, free, span: 0..0 }
                } else {
                    let funcs = [Func::Tanh, Func::Relu, Func::Exp, Func::Abs, Func::Sigmoid, Func::Gelu, Func::Silu];
                    Factor::Call { func: funcs[rnd(funcs.len())], arg, free, span: 0..0 }
                };
                fs.insert(0, (f, free_s));
            }
            // sometimes read the target itself (the old value)
            if readable.iter().any(|(t, _)| *t == target) && rnd(4) == 0 {
                fs.push((b.r(target, &lhs), lhs.clone()));
            }
            let mut coef = (rnd(7) as f64 - 3.0) * 0.5 + 0.25;
            // Two equal products with opposite coefficients cancel to rounding
            // noise, which no relative check of a unit with calls can judge.
            let key = format!("{:?}", fs.iter().map(|x| &x.0).collect::<Vec<_>>());
            if seen.iter().any(|(k, c)| *k == key && *c == -coef) {
                coef = -coef;
            }
            seen.push((key, coef));
            terms.push(b.term(coef, fs.into_iter().map(|x| x.0).collect()));
        }
        b.stmt(target, &lhs, rnd(3) == 0, terms);
        if !readable.iter().any(|(t, _)| *t == target) {
            readable.push((target, lhs.clone()));
        }
    }
    // Temporaries must be written before read: only those written so far were
    // readable. Outputs never written are impossible by construction.
    b.hir
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_programs_jit_equal_the_interpreter(seed in any::<u64>()) {
        let hir = random_program(seed);
        let mut opts = match seed % 3 {
            0 => Options::default(),
            1 => Options { gemm_min: Some(1.0), ..Options::default() },
            _ => Options { gemm_min: Some(1.0), parallel_min: Some(1.0), ..Options::default() },
        };
        // Every fusion mode, and `auto` under a limit that forces some fusion.
        use crate::lir::fusion::FuseMode;
        match (seed >> 40) % 4 {
            0 => {}
            1 => opts.fuse = FuseMode::None,
            2 => opts.fuse = FuseMode::Max,
            _ => opts.mem_limit = Some(64),
        }
        // Every other program with a random subset of its ranges as size arguments,
        // run at sizes other than the assumed ones (1, primes, larger).
        let choices = [1usize, 2, 3, 5, 7, 11, 13];
        let sizes: Vec<(RangeId, usize)> = hir
            .ranges
            .ids()
            .filter(|r| seed >> 63 == 1 && (seed >> (r.index() + 8)) & 3 != 0)
            .map(|r| (r, choices[((seed >> (2 * r.index() + 20)) % 7) as usize]))
            .collect();
        if let Err(e) = check_unit_sized(&hir, UnitId::new(0), &sizes, seed, &opts) {
            let stmts: Vec<String> = hir.units[UnitId::new(0)].stmts.iter().map(|s| crate::sema::display::stmt(&hir, s)).collect();
            panic!("seed {seed} sizes {sizes:?}: {e}\n{}", stmts.join("\n"));
        }
    }
}

/// A GPU plan of unit 0 emulated on the host against the interpreter.
fn check_gpu(hir: &Hir, seed: u64, opts: &super::nvptx::GpuOptions) -> Result<(), String> {
    let inputs = random_inputs(hir, UnitId::new(0), seed).map_err(|e| e.to_string())?;
    let want = run_unit(hir, UnitId::new(0), &inputs).map_err(|e| e.to_string())?;
    let p = super::nvptx::plan(hir, &[UnitId::new(0)], opts).map_err(|e| e.0)?;
    let got = super::nvptx::emulate(&p, 0, &inputs).map_err(|e| e.0)?;
    compare_outputs(hir, UnitId::new(0), &got, &want).map(|_| ())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, failure_persistence: None, ..ProptestConfig::default() })]
    /// Every binary contraction of a random program through a tiled kernel
    /// (tiny tiles: several blocks, partial tiles, many reduction steps), or
    /// the cost model's choice.
    #[test]
    fn random_programs_gpu_tiled_equal_the_interpreter(seed in any::<u64>()) {
        use super::nvptx::{GemmKind, GpuOptions, TileCfg};
        let hir = random_program(seed);
        // The register double buffer, or a ring of 3 or 5 buffers (more
        // buffers than steps in some programs).
        let stages = [2, 3, 5][(seed / 5 % 3) as usize];
        let tiny = TileCfg { bm: 8, bn: 16, bk: 2, tm: 2, tn: 4, mma: false, stages };
        // Tensor cores (f64): 2 × 2 warps of 8 × 16, and 2 × 1 warps of 8 × 16
        // (block-relative warp origins, fragments, partial tiles).
        let mma = [
            TileCfg { bm: 16, bn: 32, bk: 8, tm: 8, tn: 16, mma: true, stages },
            TileCfg { bm: 16, bn: 16, bk: 4, tm: 8, tn: 16, mma: true, stages },
        ];
        // Two programs in three store their C tiles through shared memory, in
        // passes or the whole tile at once.
        let epilogue = [None, Some(super::nvptx::Epilogue::Staged), Some(super::nvptx::Epilogue::Whole)][(seed / 7 % 3) as usize];
        let opts = match seed % 7 {
            0 => GpuOptions { gemm: Some(GemmKind::Tiled), tile: Some(tiny), ..GpuOptions::default() },
            1 => GpuOptions { gemm: Some(GemmKind::Tiled), mem_limit: Some(0), ..GpuOptions::default() },
            2 | 3 => GpuOptions { gemm: Some(GemmKind::Tiled), tile: Some(mma[(seed % 7 - 2) as usize]), ..GpuOptions::default() },
            // Staged: three of four accumulator rows in the first pass, one in the second.
            4 => GpuOptions { gemm: Some(GemmKind::Tiled), tile: Some(TWO_PASSES), ..GpuOptions::default() },
            5 => GpuOptions { gemm: Some(GemmKind::Tiled), ..GpuOptions::default() },
            _ => GpuOptions::default(),
        };
        let opts = GpuOptions { epilogue, ..opts };
        if let Err(e) = check_gpu(&hir, seed, &opts) {
            let stmts: Vec<String> = hir.units[UnitId::new(0)].stmts.iter().map(|s| crate::sema::display::stmt(&hir, s)).collect();
            panic!("seed {seed} {opts:?}: {e}\n{}", stmts.join("\n"));
        }
    }
}

/// A tile whose staged epilogue takes two unequal passes (f64: 3 + 1 accumulator rows).
const TWO_PASSES: super::nvptx::TileCfg =
    super::nvptx::TileCfg { bm: 16, bn: 8, bk: 4, tm: 4, tn: 2, mma: false, stages: 2 };

/// The staging geometry the property test above relies on: the tiny tiles
/// stage one accumulator row per pass, `TWO_PASSES` three then one.
#[test]
fn staged_epilogue_passes() {
    use super::nvptx::{Elem, TileCfg};
    let tiny = TileCfg { bm: 8, bn: 16, bk: 2, tm: 2, tn: 4, mma: false, stages: 2 };
    assert_eq!(tiny.stage(Elem::F64).per_pass, 1);
    let s = TWO_PASSES.stage(Elem::F64);
    assert!(TWO_PASSES.valid(Elem::F64));
    assert_eq!((s.per_pass, s.rows, s.ld), (3, 4, 16));
    // The whole tile in one pass, in a shared array grown to hold it.
    let w = TWO_PASSES.stage_for(Elem::F64, super::nvptx::Epilogue::Whole);
    assert_eq!((w.per_pass, w.elems), (4, 4 * 4 * 16));
    assert!(w.elems > s.elems);
}

/// The random programs above do hold `max`/`min` and `where`.
#[test]
fn random_programs_have_max_and_where() {
    let (mut reduce, mut select) = (0, 0);
    for seed in 0..200u64 {
        let hir = random_program(seed);
        for s in &hir.units[UnitId::new(0)].stmts {
            for f in s.rhs.terms.iter().flat_map(|t| &t.factors) {
                reduce += usize::from(matches!(f, Factor::Reduce { .. }));
                select += usize::from(matches!(f, Factor::Select { .. }));
            }
        }
    }
    assert!(reduce >= 5 && select >= 5, "{reduce} reductions, {select} selections in 200 programs");
}

/// The random programs above do reach tiled kernels (planning only).
#[test]
fn random_programs_have_tiled_contractions() {
    use super::nvptx::{GemmKind, GpuOptions};
    let opts = GpuOptions { gemm: Some(GemmKind::Tiled), ..GpuOptions::default() };
    let tiled: usize = (0..100u64)
        .map(|seed| {
            super::nvptx::plan(&random_program(seed), &[UnitId::new(0)], &opts)
                .unwrap()
                .kernels
                .iter()
                .filter(|k| k.tiled.is_some())
                .count()
        })
        .sum();
    assert!(tiled >= 30, "{tiled} tiled kernels in 100 random programs");
}

/// ... and f64 tensor-core tiles when one is forced (the property test above
/// forces two), which f32 contractions refuse.
#[test]
fn random_programs_have_tensor_core_contractions() {
    use super::nvptx::{GemmKind, GpuOptions, TileCfg};
    let tile = TileCfg { bm: 16, bn: 32, bk: 8, tm: 8, tn: 16, mma: true, stages: 2 };
    let opts = GpuOptions { gemm: Some(GemmKind::Tiled), tile: Some(tile), ..GpuOptions::default() };
    let mma: usize = (0..100u64)
        .map(|seed| {
            let hir = random_program(seed);
            let p = super::nvptx::plan(&hir, &[UnitId::new(0)], &opts).unwrap();
            for k in p.kernels.iter().filter(|k| k.tiled.is_some()) {
                assert_eq!(k.elem, super::nvptx::Elem::F64, "seed {seed}: a tensor-core tile for {:?}", k.elem);
            }
            p.kernels.iter().filter(|k| k.tiled.as_ref().is_some_and(|t| t.cfg.mma)).count()
        })
        .sum();
    assert!(mma >= 30, "{mma} tensor-core kernels in 100 random programs");
}

/// The most fused nests (`--fuse max`): temporaries sliced by shared
/// loops, including ones first written by `+=`, which must restart from zero for
/// every slice (22 of these 400 programs were wrong before that was fixed).
#[test]
fn random_programs_fully_fused_equal_the_interpreter() {
    let mut bad = Vec::new();
    for seed in 0..400u64 {
        let hir = random_program(seed);
        let opts = Options { fuse: crate::lir::fusion::FuseMode::Max, ..Options::default() };
        if let Err(e) = check_unit(&hir, UnitId::new(0), seed, &opts) {
            bad.push((seed, e));
        }
    }
    assert!(bad.is_empty(), "{} of 400 wrong, e.g. {:?}", bad.len(), &bad[..bad.len().min(3)]);
}

/// A random binary contraction whose output is a random permutation of its
/// free indices (and whose operands are permuted too): the shape of the CCSD(T)
/// triples and AO→MO steps, where C is no matrix over its m and n groups.
fn permuted_contraction(seed: u64) -> String {
    let mut r = seed;
    let mut next = |n: u64| {
        r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (r >> 33) % n
    };
    let letters: Vec<char> = "abcdefg".chars().collect();
    let nv = 3 + next(5) as usize;
    let vars = &letters[..nv];
    // Each variable: 0 batch (A, B, C), 1 m (A, C), 2 n (B, C), 3 k (A, B).
    let mut role: Vec<u64> = vars.iter().map(|_| next(4)).collect();
    role[0] = 1;
    role[1] = 2;
    let mut shuffle = |mut v: Vec<char>| {
        for i in (1..v.len()).rev() {
            v.swap(i, next(i as u64 + 1) as usize);
        }
        v
    };
    let pick = |ok: &dyn Fn(u64) -> bool| -> Vec<char> {
        vars.iter().zip(&role).filter(|(_, &g)| ok(g)).map(|(&c, _)| c).collect()
    };
    let a = shuffle(pick(&|g| g != 2));
    let b = shuffle(pick(&|g| g != 1));
    let c = shuffle(pick(&|g| g != 3));
    let sizes: Vec<u64> = vars.iter().map(|_| 1 + next(4)).collect();
    let mut src = String::new();
    for (v, n) in vars.iter().zip(&sizes) {
        src += &format!("range R{v} = {n}; index {v} : R{v};\n");
    }
    let j = |x: &[char]| x.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    let acc = if next(3) == 0 { "+=" } else { "=" };
    src += &format!(
        "input tensor A[{}] : f64;\ninput tensor B[{}] : f64;\noutput tensor C[{}] : f64;\nC[{}] {acc} -0.5 * A[{}] * B[{}];\n",
        j(&a),
        j(&b),
        j(&c),
        j(&c),
        j(&a),
        j(&b)
    );
    src
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]
    /// Permuted binary contractions through cuBLAS (emulated) with C written in
    /// place (batch promotion, host loops, operand copies, beta 0 when C was not
    /// cleared), through a scratch matrix, and as the cost model chooses.
    #[test]
    fn permuted_contractions_through_cublas_equal_the_interpreter(seed in any::<u64>()) {
        use super::nvptx::{GemmKind, GpuOptions};
        let src = permuted_contraction(seed);
        let (hir, diags) = crate::compile(&src, "perm");
        let hir = hir.unwrap_or_else(|| panic!("{src}\n{diags:?}"));
        for in_place in [Some(true), Some(false), None] {
            let opts = GpuOptions { gemm: Some(GemmKind::Cublas), in_place, ..GpuOptions::default() };
            if let Err(e) = check_gpu(&hir, seed, &opts) {
                panic!("seed {seed} in_place {in_place:?}: {e}\n{src}");
            }
        }
    }
}

/// The permuted contractions above do reach the in-place form with host loops
/// and with operand copies (planning only).
#[test]
fn permuted_contractions_reach_in_place_cublas() {
    use super::nvptx::{GemmKind, GpuOptions, Step};
    let opts = GpuOptions { gemm: Some(GemmKind::Cublas), in_place: Some(true), ..GpuOptions::default() };
    fn walk(s: &[Step], loops: &mut usize, beta0: &mut usize) {
        for x in s {
            match x {
                Step::Loop { body, .. } => {
                    *loops += 1;
                    walk(body, loops, beta0)
                }
                Step::Choice(c) => walk(c.steps(), loops, beta0),
                Step::Gemm(g) => *beta0 += usize::from(g.beta == 0.0),
                _ => {}
            }
        }
    }
    let (mut loops, mut beta0) = (0, 0);
    for seed in 0..200u64 {
        let (hir, _) = crate::compile(&permuted_contraction(seed), "perm");
        let p = super::nvptx::plan(&hir.unwrap(), &[UnitId::new(0)], &opts).unwrap();
        walk(&p.units[0].steps, &mut loops, &mut beta0);
    }
    assert!(loops >= 10 && beta0 >= 50, "{loops} host loops, {beta0} GEMMs with beta 0 in 200 programs");
}

/// The inline, vectorizable `exp` of the CPU back end against libm's: within 2 ulp
/// for normal results, exact at the special values (0, 1, ∞, NaN, overflow to ∞,
/// underflow to 0), and in f32 the correctly widened-then-rounded value.
#[test]
fn inline_exp_matches_libm() {
    let mut xs: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        709.78,
        709.79,
        710.0,
        1e300,
        -745.0,
        -745.2,
        -746.0,
        -1e300,
        -708.5,
        -720.0,
        -740.0,
        1e-300,
        std::f64::consts::LN_2 / 2.0,
        -std::f64::consts::LN_2 / 2.0,
    ];
    let mut s = 0x9e3779b97f4a7c15u64;
    for _ in 0..4000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let u = (s >> 11) as f64 / (1u64 << 53) as f64;
        xs.push(-750.0 + 1465.0 * u);
        xs.push(-20.0 + 40.0 * u);
    }
    let n = xs.len();
    let ulps = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
    for elem in ["f64", "f32"] {
        let src = format!(
            "range N = {n};\nindex i : N;\ninput tensor X[i] : {elem};\noutput tensor Y[i] : {elem};\nY[i] = exp(X[i]);\n"
        );
        let (hir, diags) = crate::compile(&src, "e");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
        let u = hir.units.ids().next().unwrap();
        let x = hir.tensors.ids().find(|&t| hir.tensors[t].name == "X").unwrap();
        let y = hir.tensors.ids().find(|&t| hir.tensors[t].name == "Y").unwrap();
        let inputs = std::collections::HashMap::from([(x, crate::tensor::Dense::from_vec(vec![n], xs.clone()))]);
        let got = super::llvm::jit_run(&hir, u, &inputs, &Options::default(), 1).unwrap().outputs[&y].data.clone();
        for (k, &v) in xs.iter().enumerate() {
            let g = got[k];
            if elem == "f64" {
                let w = v.exp();
                let ok = if w.is_nan() {
                    g.is_nan()
                } else if w == 0.0 || w.is_infinite() || w == 1.0 {
                    g == w
                } else if w < f64::MIN_POSITIVE {
                    (g - w).abs() <= 2.0 * f64::from_bits(1) // subnormal: absolute ulps
                } else {
                    ulps(g, w) <= 2
                };
                assert!(ok, "f64 exp({v:e}) = {g:e}, libm {w:e}");
            } else {
                let v32 = v as f32;
                let w = (v32 as f64).exp() as f32;
                let g32 = g as f32;
                let ok = if w.is_nan() {
                    g32.is_nan()
                } else {
                    g32 == w || (g32.to_bits() as i64 - w.to_bits() as i64).abs() <= 1
                };
                assert!(ok, "f32 exp({v32:e}) = {g32:e}, want {w:e}");
            }
        }
    }
}

/// A random program of several statements, some independent of each other (the
/// intermediates of a residual), some reading earlier ones, with `+=` chains and
/// permutation sums into the outputs: what task sets ([`crate::lir::tasks`]) run
/// concurrently.
fn independent_statements(seed: u64) -> String {
    let mut rnd = crate::tir::testutil::picker(seed, 0x1234_5678);
    let n = 2 + rnd(9);
    let mut s = format!("range N = {n};\nindex i, j, k, l : N;\n");
    for a in 0..4 {
        s += &format!("input tensor A{a}[i,j] : f64;\n");
    }
    let temps = 2 + rnd(4);
    for t in 0..temps {
        s += &format!("tensor T{t}[i,j] : f64;\n");
    }
    s += "output tensor O[i,j] : f64;\noutput tensor P[i,j] : f64;\n";
    let operand = |rnd: &mut dyn FnMut(usize) -> usize, t: usize, ij: &str| -> String {
        // An input, or (sometimes) an earlier temporary: a dependence.
        if t > 0 && rnd(3) == 0 {
            format!("T{}[{ij}]", rnd(t))
        } else {
            format!("A{}[{ij}]", rnd(4))
        }
    };
    for t in 0..temps {
        let x = operand(&mut rnd, t, "i,k");
        let yi = if rnd(2) == 0 { "k,j" } else { "j,k" };
        let y = operand(&mut rnd, t, yi);
        let zi = if rnd(2) == 0 { "i,j" } else { "j,i" };
        let z = operand(&mut rnd, t, zi);
        let c = rnd(4) as f64 * 0.5 + 0.25;
        let op = if rnd(2) == 0 { "+" } else { "-" };
        s += &format!("T{t}[i,j] = {z} {op} {c} * {x} * {y};\n");
    }
    s += &format!("O[i,j] = A{}[i,j];\n", rnd(4));
    for t in 0..temps {
        match rnd(3) {
            0 => s += &format!("O[i,j] += T{t}[i,j] - T{t}[j,i];\n"),
            1 => s += &format!("O[i,j] += 0.5 * T{t}[i,k] * A{}[k,j];\n", rnd(4)),
            _ => s += &format!("P[i,j] += T{t}[j,i] - 2.0 * T{t}[i,j];\n"),
        }
    }
    s += "P[i,j] += O[i,k] * A0[k,j];\n";
    s
}

/// Programs with independent statements: their task sets run concurrently (two
/// threads at least) and every output matches the interpreter, for every fusion
/// mode and with small contractions on the GETT kernel.
#[test]
fn independent_statements_run_as_task_sets_and_match() {
    let mut sets = 0;
    for seed in 0..60u64 {
        let src = independent_statements(seed);
        let (hir, diags) = crate::compile(&src, "t");
        let hir = hir.unwrap_or_else(|| panic!("{src}\n{diags:?}"));
        let mut opts = Options { gemm_min: Some(1.0), ..Options::default() };
        use crate::lir::fusion::FuseMode;
        opts.fuse = [FuseMode::Auto, FuseMode::None, FuseMode::Max][(seed % 3) as usize];
        if seed % 2 == 1 {
            opts.parallel_min = Some(1.0);
        }
        let popts = crate::pipeline::PipelineOptions {
            fusion: crate::lir::fusion::FusionOptions { mode: opts.fuse, ..Default::default() },
            ..Default::default()
        };
        let prepared = crate::pipeline::prepare(&hir, &popts);
        let nests = crate::pipeline::fuse(&prepared, &[UnitId::new(0)], &popts);
        let ts = crate::lir::tasks::task_sets(&prepared, &nests[0], &Default::default());
        sets += ts.iter().filter(|t| t.steps.len() >= 2).count();
        // Every top-level node in exactly one step.
        let mut covered: Vec<usize> = ts.iter().flat_map(|t| t.steps.iter().flat_map(|s| s.nodes.clone())).collect();
        covered.sort();
        assert_eq!(covered, (0..nests[0].body.len()).collect::<Vec<_>>(), "{src}");
        if let Err(e) = check_unit(&hir, UnitId::new(0), seed, &opts) {
            panic!("seed {seed}: {e}\n{src}");
        }
    }
    assert!(sets >= 40, "only {sets} task sets of two or more steps in 60 programs");
}

/// `W = V + T·U`: the GETT term overwrites the fresh output (no zeroing pass),
/// whatever the order the terms were written in: starting from `±V` where `V` is
/// laid out as `W` (no pass adding it), else adding it after.
#[test]
fn a_gett_term_after_others_overwrites_the_output_first() {
    // (right-hand side, the GETT's start: `V`'s coefficient, or none)
    let cases = [
        ("V[a,b] + 0.25 * T[a,k] * U[k,b]", Some("double 1.0")),
        ("0.25 * T[a,k] * U[k,b] - V[a,b]", Some("double -1.0")),
        ("V[b,a] + 0.25 * T[a,k] * U[k,b]", None),
    ];
    for (rhs, start) in cases {
        let src = format!(
            "range N = 48; index a, b, k : N;\ninput tensor V[a,b] : f64; input tensor T[a,k] : f64;\n\
             input tensor U[k,b] : f64; output tensor W[a,b] : f64;\nW[a,b] = {rhs};\n"
        );
        let (hir, diags) = crate::compile(&src, "t");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
        let ir = super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &Options::default()).unwrap();
        match start {
            Some(beta) => {
                let call = ir
                    .lines()
                    .find(|l| l.contains("call void @tcc_rt_gett_init_f64("))
                    .unwrap_or_else(|| panic!("{ir}"));
                assert!(call.contains(&format!("{beta}00000e+00)")), "{rhs}: not started from {beta}·V: {call}");
                assert!(!ir.contains("@tcc_rt_gett_f64("), "{rhs}: a second GETT: {ir}");
            }
            None => {
                let call =
                    ir.lines().find(|l| l.contains("call void @tcc_rt_gett_f64(")).unwrap_or_else(|| panic!("{ir}"));
                assert!(
                    call.contains("i64 1) #") || call.trim_end().ends_with("i64 1)"),
                    "the GETT does not overwrite: {call}"
                );
                assert!(!ir.contains("@tcc_rt_gett_init_f64("), "{rhs}: started from a permuted V: {ir}");
            }
        }
        assert!(!ir.contains("llvm.memset"), "a zeroing pass is left: {ir}");
        check_unit(&hir, UnitId::new(0), 7, &Options::default()).unwrap();
    }
}

/// `src` compiles with no zeroing pass (`llvm.memset`) and its values match the
/// interpreter in the auto and most-fused modes.
fn assert_stores_without_zeroing(src: &str) {
    let (hir, diags) = crate::compile(src, "t");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let ir = super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &Options::default()).unwrap();
    assert!(!ir.contains("llvm.memset"), "a zeroing pass is left: {ir}");
    for fuse in [crate::lir::fusion::FuseMode::Auto, crate::lir::fusion::FuseMode::Max] {
        check_unit(&hir, UnitId::new(0), 3, &Options { fuse, ..Options::default() }).unwrap();
    }
}

/// `R = V` and `R = X - Xᵀ` (no GETT): one nest that stores into the fresh target,
/// no zeroing pass; inside fused loops (`--fuse max`) too.
#[test]
fn element_wise_statements_store_without_a_zeroing_pass() {
    for rhs in ["V[a,b]", "V[a,b] - 0.5 * V[b,a] + W[a,b]"] {
        let src = format!(
            "range N = 48; index a, b, k : N;\ninput tensor V[a,b] : f64; input tensor W[a,b] : f64;\n\
             output tensor R[a,b] : f64; output tensor S[a,b] : f64;\nR[a,b] = {rhs};\nS[a,b] = R[a,k] * W[k,b];\n"
        );
        assert_stores_without_zeroing(&src);
    }
}

/// An element-wise `=` with a call (`P = exp(S)`, never fused) stores its target
/// in one pass too, and its temporary target need not start zeroed: with
/// poisoned temporaries (`set_poison`, in `check_unit`) the values still match.
#[test]
fn element_wise_calls_store_without_a_zeroing_pass() {
    for (rhs, temp) in [("exp(0.1 * S[a,b])", true), ("recip(S[a,b]) + 2 * sqrt(V[b,a] * V[b,a])", false)] {
        let decl = if temp { "tensor P[a,b] : f64;" } else { "output tensor P[a,b] : f64;" };
        let src = format!(
            "range N = 48; index a, b, k : N;\ninput tensor V[a,b] : f64; input tensor W[a,b] : f64;\n\
             tensor S[a,b] : f64; {decl} output tensor R[a,b] : f64;\n\
             S[a,b] = V[a,k] * W[k,b] + 3;\nP[a,b] = {rhs};\nR[a,b] = P[a,k] * W[k,b];\n"
        );
        assert_stores_without_zeroing(&src);
    }
}

/// `S = c·Q·K` then `P = f(S)` (the attention block's scores and `exp`): the map
/// runs as the GETT's epilogue (`tcc_rt_gett_epi_*`, see `llvm::epilogue`) when
/// `S` is a temporary only the two touch, and each program matches the
/// interpreter whether or not it does (temporaries not zeroed come as NaN, so
/// a map left out or an element missed shows).
#[test]
fn maps_of_a_gett_result_run_as_its_epilogue() {
    let decls = "range B = 3; range S = 40; range E = 24; index b : B; index s, t : S; index e : E;\n\
                 input tensor Q[b,s,e] : T; input tensor K[b,t,e] : T;\n";
    // (declarations and statements, element type, whether the epilogue is used)
    let cases: &[(&str, &str, bool)] = &[
        (
            "tensor Sc[b,s,t] : T; output tensor P[b,s,t] : T; output tensor Z[b,s] : T;\n\
             Sc[b,s,t] = 0.125 * Q[b,s,e] * K[b,t,e]; P[b,s,t] = exp(Sc[b,s,t]); Z[b,s] = P[b,s,t];",
            "f64",
            true,
        ),
        (
            "tensor Sc[b,s,t] : T; output tensor P[b,s,t] : T;\n\
             Sc[b,s,t] = Q[b,s,e] * K[b,t,e]; P[b,s,t] = -2.5 * sigmoid(Sc[b,s,t]);",
            "f32",
            true,
        ),
        // A scaled copy (no function), into a temporary read afterwards.
        (
            "tensor Sc[b,s,t] : T; tensor P[b,s,t] : T; output tensor Z[b,s] : T;\n\
             Sc[b,s,t] = Q[b,s,e] * K[b,t,e]; P[b,s,t] = 3 * Sc[b,s,t]; Z[b,s] = P[b,s,t] * P[b,s,t];",
            "f64",
            true,
        ),
        // `S` is read again: it must be stored.
        (
            "tensor Sc[b,s,t] : T; output tensor P[b,s,t] : T; output tensor Z[b,s] : T;\n\
             Sc[b,s,t] = Q[b,s,e] * K[b,t,e]; P[b,s,t] = exp(Sc[b,s,t]); Z[b,s] = Sc[b,s,t];",
            "f64",
            false,
        ),
        // `S` is an output.
        (
            "output tensor Sc[b,s,t] : T; output tensor P[b,s,t] : T;\n\
             Sc[b,s,t] = Q[b,s,e] * K[b,t,e]; P[b,s,t] = exp(Sc[b,s,t]);",
            "f64",
            false,
        ),
        // The map transposes.
        (
            "tensor Sc[b,s,t] : T; output tensor P[b,t,s] : T;\n\
             Sc[b,s,t] = Q[b,s,e] * K[b,t,e]; P[b,t,s] = exp(Sc[b,s,t]);",
            "f64",
            false,
        ),
        // `P` is read before the map (its value then is the earlier one).
        (
            "tensor Sc[b,s,t] : T; output tensor P[b,s,t] : T; output tensor Z[b,s] : T;\n\
             P[b,s,t] = Q[b,s,e] * K[b,t,e]; Sc[b,s,t] = Q[b,s,e] * K[b,t,e];\n\
             Z[b,s] = P[b,s,t]; P[b,s,t] = exp(Sc[b,s,t]);",
            "f64",
            false,
        ),
        // The map adds to its target.
        (
            "tensor Sc[b,s,t] : T; output tensor P[b,s,t] : T;\n\
             Sc[b,s,t] = Q[b,s,e] * K[b,t,e]; P[b,s,t] = Q[b,s,e] * K[b,t,e]; P[b,s,t] += exp(Sc[b,s,t]);",
            "f64",
            false,
        ),
    ];
    let opts = Options { gemm_min: Some(1.0), ..Options::default() };
    for (body, elem, fused) in cases {
        let src = format!("{decls}{body}\n").replace(": T", &format!(": {elem}"));
        let (hir, diags) = crate::compile(&src, "t");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}\n{src}"));
        let ir = super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &opts).unwrap();
        assert_eq!(ir.contains("@tcc_rt_gett_epi_f"), *fused, "{src}");
        for seed in [1, 2] {
            check_unit(&hir, UnitId::new(0), seed, &opts).unwrap_or_else(|e| panic!("{src}: {e}"));
            // Sizes other than those assumed: every thread path of the runtime.
            let other: Vec<(RangeId, usize)> =
                hir.ranges.ids().enumerate().map(|(x, r)| (r, [5usize, 131, 9][x % 3])).collect();
            check_unit_sized(&hir, UnitId::new(0), &other, seed, &opts)
                .unwrap_or_else(|e| panic!("{src} {other:?}: {e}"));
        }
    }
}

/// Shuffles `v` in place (Fisher–Yates on `rnd`).
fn shuffle(v: &mut [char], rnd: &mut dyn FnMut(usize) -> usize) {
    for i in (1..v.len()).rev() {
        v.swap(i, rnd(i + 1));
    }
}

/// One random GETT's indices for the random-program tests: six indices `a`–`f`
/// with sizes 1–14 and roles (batch: in A, B and C; rows: A and C; columns: B and
/// C; summed: A and B; at least one row and one column), each operand's indices
/// in a random storage order. Returns the range and index declarations and the
/// index lists of A, B and C, joined with commas.
fn random_gett_indices(rnd: &mut dyn FnMut(usize) -> usize) -> (String, String, String, String) {
    let letters = ['a', 'b', 'c', 'd', 'e', 'f'];
    let sizes: Vec<usize> = (0..6).map(|_| 1 + rnd(14)).collect();
    let roles: Vec<usize> = (0..6).map(|x| if x < 3 { 1 + x % 2 } else { rnd(4) }).collect();
    let pick =
        |want: &[usize]| -> Vec<char> { (0..6).filter(|&x| want.contains(&roles[x])).map(|x| letters[x]).collect() };
    let (mut a, mut b, mut c) = (pick(&[0, 1, 3]), pick(&[0, 2, 3]), pick(&[0, 1, 2]));
    for v in [&mut a, &mut b, &mut c] {
        shuffle(v, rnd);
    }
    let ranges: String =
        letters.iter().zip(&sizes).map(|(l, n)| format!("range R{l} = {n}; index {l} : R{l};\n")).collect();
    let join = |v: &[char]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    (ranges, join(&a), join(&b), join(&c))
}

/// A random GETT term beside copy terms: `W = c·A·B ± c'·D (± E)`, over random
/// index roles and storage orders, `D` laid out as `W` or permuted, its term
/// before or after the product's, sometimes a second copy `E`; f32 or f64.
/// Sometimes `W` is a temporary summed into an output after.
fn random_init_program(seed: u64) -> (String, bool) {
    let mut rnd = crate::tir::testutil::picker(seed, 0x5EED_1417);
    let (ranges, a, b, w) = random_gett_indices(&mut rnd);
    let same = rnd(3) != 0;
    let mut d: Vec<char> = w.chars().filter(|&c| c != ',').collect();
    if !same {
        shuffle(&mut d, &mut rnd);
    }
    let d = d.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    let ty = if rnd(3) == 0 { "f32" } else { "f64" };
    let mut src = ranges;
    src += &format!(
        "input tensor A[{a}] : {ty}; input tensor B[{b}] : {ty};\ninput tensor D[{d}] : {ty}; input tensor E[{w}] : {ty};\n"
    );
    let temp = rnd(3) == 0;
    src += &format!("{} tensor W[{w}] : {ty};\n", if temp { "" } else { "output" });
    let product = format!("{} * A[{a}] * B[{b}]", [1.0, 0.5][rnd(2)]);
    let copy = format!("{} * D[{d}]", [1.0, 2.0][rnd(2)]);
    let mut terms = if rnd(2) == 0 { vec![product, copy] } else { vec![copy, product] };
    if rnd(3) == 0 {
        terms.insert(rnd(3), format!("3 * E[{w}]"));
    }
    let signs: Vec<&str> = (0..terms.len()).map(|x| if x > 0 && rnd(2) == 0 { " - " } else { " + " }).collect();
    let rhs: String = terms
        .iter()
        .zip(&signs)
        .enumerate()
        .map(|(x, (t, s))| if x == 0 { t.clone() } else { format!("{s}{t}") })
        .collect();
    src += &format!("W[{w}] = {rhs};\n");
    if temp {
        src += &format!("output tensor Z : f64;\nZ = W[{w}];\n");
    }
    (src, same)
}

/// [`random_init_program`]s match the interpreter (outputs that are never
/// written come as NaN, so a tile left unwritten or started from zero shows),
/// at the declared sizes and at others; those whose `D` is laid out as `W`
/// start the GETT's output from it (`tcc_rt_gett_init_*`), the others do not.
#[test]
fn random_gett_terms_started_from_a_copy_equal_the_interpreter() {
    let mut from_copy = 0;
    for seed in 0..48u64 {
        let (src, same) = random_init_program(seed);
        let (hir, diags) = crate::compile(&src, "t");
        let hir = hir.unwrap_or_else(|| panic!("{src}\n{diags:?}"));
        let opts = Options {
            gemm_min: Some(1.0),
            parallel_min: if seed % 2 == 0 { Some(1.0) } else { None },
            fuse: crate::lir::fusion::FuseMode::None,
            ..Options::default()
        };
        let ir = super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &opts).unwrap();
        let init = ir.contains("@tcc_rt_gett_init_f");
        // A permuted `D` can still be laid out as `W` (the same order, or
        // indices of extent 1); a `D` in `W`'s order always is.
        if same {
            assert!(init, "seed {seed}: no GETT started from D\n{src}");
        }
        from_copy += usize::from(init);
        check_unit(&hir, UnitId::new(0), seed, &opts).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        let other: Vec<(RangeId, usize)> = hir
            .ranges
            .ids()
            .enumerate()
            .map(|(x, r)| (r, [3usize, 17, 1, 9, 30, 6][(x + seed as usize) % 6]))
            .collect();
        check_unit_sized(&hir, UnitId::new(0), &other, seed, &opts)
            .unwrap_or_else(|e| panic!("seed {seed} {other:?}: {e}\n{src}"));
    }
    assert!(from_copy >= 24, "only {from_copy} of 48 programs started a GETT from a copy");
}

/// A random GETT into a temporary and a map of it: `S = c·A·B` over random index
/// roles (batch, rows, columns, sums) and storage orders, `P = c'·f(S)` with a
/// random function (or none), sometimes read by a sum after; f32 or f64.
fn random_epilogue_program(seed: u64) -> String {
    let mut rnd = crate::tir::testutil::picker(seed, 0x5EED_E710);
    let (ranges, a, b, s) = random_gett_indices(&mut rnd);
    let ty = if rnd(3) == 0 { "f32" } else { "f64" };
    let f = ["exp", "sigmoid", "relu", "abs", "silu", ""][rnd(6)];
    let mut src = ranges;
    src += &format!("input tensor A[{a}] : {ty}; input tensor B[{b}] : {ty};\ntensor S[{s}] : {ty};\n");
    let consumer = rnd(2) == 0;
    src += &format!("{} tensor P[{s}] : {ty};\n", if consumer { "" } else { "output" });
    let map = if f.is_empty() { format!("S[{s}]") } else { format!("{f}(S[{s}])") };
    src += &format!("S[{s}] = {} * A[{a}] * B[{b}];\nP[{s}] = {} * {map};\n", [1.0, 0.25][rnd(2)], [1.0, -1.5][rnd(2)]);
    if consumer {
        src += "output tensor Z : f64;\nZ = P[";
        src += &s;
        src += "];\n";
    }
    src
}

/// [`random_epilogue_program`]s match the interpreter, at the declared sizes
/// (on one or every thread) and as size arguments run at others; most run the
/// map as the GETT's epilogue (the optimizer folds some plain copies away).
#[test]
fn random_gett_maps_as_epilogues_equal_the_interpreter() {
    let mut fused = 0;
    for seed in 0..40u64 {
        let src = random_epilogue_program(seed);
        let (hir, diags) = crate::compile(&src, "t");
        let hir = hir.unwrap_or_else(|| panic!("{src}\n{diags:?}"));
        let opts = Options {
            gemm_min: Some(1.0),
            parallel_min: if seed % 2 == 0 { Some(1.0) } else { None },
            fuse: crate::lir::fusion::FuseMode::None,
            ..Options::default()
        };
        let ir = super::llvm::emit_llvm(&hir, &[UnitId::new(0)], &opts).unwrap();
        fused += usize::from(ir.contains("@tcc_rt_gett_epi_f"));
        check_unit(&hir, UnitId::new(0), seed, &opts).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        let other: Vec<(RangeId, usize)> = hir
            .ranges
            .ids()
            .enumerate()
            .map(|(x, r)| (r, [3usize, 17, 1, 9, 30, 6][(x + seed as usize) % 6]))
            .collect();
        check_unit_sized(&hir, UnitId::new(0), &other, seed, &opts)
            .unwrap_or_else(|e| panic!("seed {seed} {other:?}: {e}\n{src}"));
    }
    assert!(fused >= 30, "only {fused} of 40 programs ran the map as an epilogue");
}
