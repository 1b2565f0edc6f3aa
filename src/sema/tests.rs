//! The HIR produced for good programs, value by value.

use super::hir::*;
use crate::diag::{has_errors, Diagnostic};
use crate::syntax::parse;

fn analyze(src: &str) -> (Hir, Vec<Diagnostic>) {
    let p = parse(src);
    assert!(p.diagnostics.is_empty(), "syntax: {:?}", p.diagnostics);
    super::analyze(&p.file, "t")
}

fn ok(src: &str) -> Hir {
    let (hir, diags) = analyze(src);
    assert!(!has_errors(&diags), "{diags:#?}");
    hir
}

fn codes(src: &str) -> Vec<&'static str> {
    let (_, mut diags) = analyze(src);
    diags.sort_by_key(|d| d.primary.span.start);
    diags.iter().filter(|d| d.is_error()).map(|d| d.code).collect()
}

const MATS: &str = "range N = 3; range M = 5; index i, j, k : N; index m : M;
    input tensor A[i,j]; input tensor B[i,j]; input tensor C[i,j]; output tensor R[i,j];
    input tensor D[i,m];\n";

fn idx(h: &Hir, name: &str) -> IndexId {
    h.indices.position(|i| i.name == name).unwrap()
}

#[test]
fn declarations_resolve() {
    let h = ok("range O = 2; range V = 3; index i, j : O; index a, b : V;
        input tensor T[a,b,i,j] : f32 antisymmetric(a b)(i j); output tensor E;
        E = T[a,b,i,j] * T[a,b,i,j];");
    assert_eq!(h.ranges.iter().map(|r| (r.name.as_str(), r.size)).collect::<Vec<_>>(), [("O", 2), ("V", 3)]);
    assert_eq!(h.indices[idx(&h, "b")].range, RangeId::new(1));
    let t = &h.tensors[TensorId::new(0)];
    assert_eq!(
        (t.role, t.elem, t.dims.iter().map(|r| r.index()).collect::<Vec<_>>()),
        (Role::Input, ElemType::F32, vec![1, 1, 0, 0])
    );
    assert_eq!(
        t.symmetry,
        vec![
            SymGroup { kind: SymKind::Antisymmetric, positions: vec![0, 1] },
            SymGroup { kind: SymKind::Antisymmetric, positions: vec![2, 3] }
        ]
    );
    let e = &h.tensors[TensorId::new(1)];
    assert_eq!((e.role, e.elem, e.dims.len()), (Role::Output, ElemType::F64, 0));
    assert_eq!(h.shape(TensorId::new(0)), vec![3, 3, 2, 2]);
}

#[test]
fn signs_numbers_and_divisions_fold_into_coef() {
    let h = ok(&format!("{MATS} output tensor E; E = -0.5 * A[i,j] * 2 / 4 - B[i,j] / 2 + 3 * 1e-1;"));
    let terms = &h.units[UnitId::new(0)].stmts[0].rhs.terms;
    assert_eq!(terms.len(), 3);
    assert_eq!(terms[0].coef, -0.25);
    assert_eq!(terms[0].factors.len(), 1);
    assert_eq!(terms[1].coef, -0.5);
    assert!((terms[2].coef - 0.3).abs() < 1e-15);
    assert!(terms[2].factors.is_empty());
}

#[test]
fn terms_lacking_result_indices_are_broadcast() {
    ok("output tensor E; E = 2 + 3;");
    ok(&format!("{MATS} R[i,j] = A[i,j] + 1;"));
    ok(&format!("{MATS} R[i,j] = A[i,k] * B[k,j] - 2 * A[i,i] + sqrt(A[i,j] * A[i,j] + 1e-5);"));
    // A term that sums and lacks a result index is a typo, not a broadcast.
    assert_eq!(codes(&format!("{MATS} R[i,j] = A[i,k] * D[k,m];")), ["E0303"]);
    assert_eq!(codes(&format!("{MATS} R[i,j] = A[i,j] + A[i,k] * B[k,i];")), ["E0303"]);
    assert_eq!(codes(&format!("{MATS} R[i,j] = exp(A[i,j] + A[i,k] * C[k,i]);")), ["E0304"]);
}

#[test]
fn a_lone_sum_inside_a_function_is_warned_about() {
    let warnings = |src: &str| -> Vec<&'static str> {
        let (_, diags) = analyze(&format!("{MATS} {src}"));
        assert!(!has_errors(&diags), "{diags:#?}");
        diags.iter().map(|d| d.code).filter(|c| *c != "W0101").collect()
    };
    // `k` alone in the argument: summed before `exp` applies.
    assert_eq!(warnings("R[i,j] = exp(A[i,k]) * B[j,j];"), ["W0303"]);
    // A contraction inside the call, a parenthesised argument, or a lone sum in
    // parentheses outside any call are what the user meant.
    assert!(warnings("R[i,j] = exp(A[i,k] * B[k,j]);").is_empty());
    assert!(warnings("R[i,j] = exp((A[i,k])) * B[j,j];").is_empty());
    assert!(warnings("R[i,j] = (A[i,k]) * B[j,j];").is_empty());
}

#[test]
fn call_keeps_the_indices_shared_with_the_statement() {
    let h = ok("range T = 2; range H = 3; range F = 4; index t : T; index m, n : H; index f : F;
        input tensor X[t,m]; input tensor W1[m,f]; input tensor W2[f,n]; output tensor Y[t,n];
        Y[t,n] = relu(X[t,m] * W1[m,f]) * W2[f,n];");
    let term = &h.units[UnitId::new(0)].stmts[0].rhs.terms[0];
    let Factor::Call { func, arg, free, .. } = &term.factors[0] else { panic!("{term:?}") };
    assert_eq!(*func, Func::Relu);
    assert_eq!(*free, vec![idx(&h, "t"), idx(&h, "f")]);
    assert_eq!(arg.terms[0].factors.len(), 2);
    assert_eq!(term.factors[1].indices(), &[idx(&h, "f"), idx(&h, "n")]);
}

#[test]
fn paren_and_nested_free_indices() {
    let h = ok(&format!("{MATS} R[i,j] = A[i,k] * (B[k,j] + C[k,j]) + exp(A[i,k] * sqrt(B[k,j]));"));
    let terms = &h.units[UnitId::new(0)].stmts[0].rhs.terms;
    let Factor::Sum { arg, free, .. } = &terms[0].factors[1] else { panic!() };
    assert_eq!(*free, vec![idx(&h, "k"), idx(&h, "j")]);
    assert_eq!(arg.terms.len(), 2);
    // exp's argument is over i and j (the result); k is summed inside it, and
    // sqrt's argument shares k (with A) and j (with exp's result).
    let Factor::Call { func: Func::Exp, arg, free, .. } = &terms[1].factors[0] else { panic!() };
    assert_eq!(*free, vec![idx(&h, "i"), idx(&h, "j")]);
    let Factor::Call { func: Func::Sqrt, free, .. } = &arg.terms[0].factors[1] else { panic!() };
    assert_eq!(*free, vec![idx(&h, "k"), idx(&h, "j")]);
}

#[test]
fn calls_share_indices_with_each_other() {
    let h = ok("range N = 2; index i, k : N; input tensor A[i,k]; input tensor B[i,k]; output tensor R[i];
        R[i] = exp(A[i,k]) * log(B[i,k]);");
    let f = &h.units[UnitId::new(0)].stmts[0].rhs.terms[0].factors;
    assert_eq!(f[0].indices(), &[idx(&h, "i"), idx(&h, "k")]);
    assert_eq!(f[1].indices(), &[idx(&h, "i"), idx(&h, "k")]);
}

#[test]
fn scalars_with_or_without_brackets() {
    let h = ok("range N = 2; index i : N; input tensor S; input tensor A[i]; output tensor E;
        E[] = S * A[i] * S[] * A[i];");
    let s = &h.units[UnitId::new(0)].stmts[0];
    assert!(s.lhs.indices.is_empty());
    assert_eq!(s.rhs.terms[0].factors.len(), 4);
}

#[test]
fn units_in_order_with_the_file_stem_first() {
    let h = ok(&format!(
        "{MATS} program p {{ R[i,j] = A[i,j]; }} R[i,j] = B[i,j];
        model m {{ dims d = 2; index e : d; layer l {{ Z[e] = 1 * Q[e]; }} input tensor Q[e]; }}
        R[i,j] += C[i,j] * 2 + D[i,m] * D[j,m];"
    ));
    let names: Vec<_> = h.units.iter().map(|u| (u.name.as_str(), u.kind, u.stmts.len())).collect();
    assert_eq!(
        names,
        [("t", UnitKind::Program, 2), ("p", UnitKind::Program, 1), ("m", UnitKind::Model(ModelId::new(0)), 1)]
    );
    assert!(h.units[UnitId::new(0)].stmts[1].accumulate);
    assert_eq!(h.models[ModelId::new(0)].unit, UnitId::new(2));
    // no top-level statements: no unit named after the file
    let h = ok(&format!("{MATS} program p {{ R[i,j] = A[i,j] + B[i,j] + C[i,j] + D[i,m] * D[j,m]; }}"));
    assert_eq!(h.units.len(), 1);
    assert_eq!(h.units[UnitId::new(0)].name, "p");
}

#[test]
fn model_dims_layers_and_implicit_temporaries() {
    let src = "range B = 2; index u : B;
        model mlp {
          dims tokens = 8, hidden = 16, ffn = 32;
          index t : tokens; index m, n : hidden; index f : ffn;
          input tensor X[u,t,m] : f32; param tensor W1[m,f]; param tensor W2[f,n];
          output tensor Y[u,t,n] : f32;
          layer up { H[u,t,f] = relu(X[u,t,m] * W1[m,f]); }
          layer down { Y[u,t,n] = H[u,t,f] * W2[f,n]; Y[u,t,n] += X[u,t,n]; }
          parallel { data = 2; tensor = 4 on ffn; sequence = ulysses(2); expert = 1; pipeline = 3; zero = 2; }
        }";
    let h = ok(src);
    let m = &h.models[ModelId::new(0)];
    assert_eq!(m.name, "mlp");
    assert_eq!(
        m.dims
            .iter()
            .map(|&r| (h.ranges[r].name.as_str(), h.ranges[r].size, h.ranges[r].model.map(|m| m.index())))
            .collect::<Vec<_>>(),
        [("tokens", 8, Some(0)), ("hidden", 16, Some(0)), ("ffn", 32, Some(0))]
    );
    assert_eq!(
        m.layers.iter().map(|l| (l.name.as_str(), l.stmts.clone())).collect::<Vec<_>>(),
        [("up", 0..1), ("down", 1..3)]
    );
    let ht = h.tensor_by_name("H").unwrap();
    let t = &h.tensors[ht];
    assert_eq!((t.role, t.elem, t.model), (Role::Temporary, ElemType::F32, Some(ModelId::new(0))));
    assert_eq!(t.dims, vec![RangeId::new(0), m.dims[0], m.dims[2]]);
    assert_eq!(&src[t.span.clone()], "H[u,t,f]");
    assert_eq!(h.tensors[h.tensor_by_name("W1").unwrap()].role, Role::Param);
    let ffn = m.dims[2];
    assert_eq!(
        m.parallel,
        ParallelHints {
            data: Some(2),
            tensor: Some((4, Some(ffn))),
            sequence: Some((SequenceStyle::Ulysses, 2)),
            expert: Some(1),
            pipeline: Some(3),
            zero: Some(2),
            span: m.parallel.span.clone(),
        }
    );
    assert!(m.parallel.span.is_some());
    assert_eq!(h.unit_inputs(m.unit).len(), 3);
}

#[test]
fn model_names_are_local() {
    let h = ok("model a { dims d = 2; index e : d; input tensor X[e]; layer l { T[e] = X[e]; } }
                model b { dims d = 3; index e : d; input tensor X[e]; layer l { T[e] = 2 * X[e]; } }");
    assert_eq!(h.ranges.len(), 2);
    assert_eq!(
        h.tensors.iter().filter(|t| t.name == "T").map(|t| t.model).collect::<Vec<_>>(),
        [Some(ModelId::new(0)), Some(ModelId::new(1))]
    );
    assert_eq!(codes("model a { dims d = 2; index e : d; } index f : d;"), ["E0104"]);
}

#[test]
fn grids_and_distributions() {
    let h = ok("range N = 8; index p, q, r, s : N; input tensor A[p,q]; output tensor B[p,q];
        B[p,q] = A[p,q]; grid G[4, 2]; grid H[8];
        distribute A[r,s] over G as [s:0, r:1]; distribute B[p,q] over H as [q:0];");
    assert_eq!(h.grids[GridId::new(0)].dims, vec![4, 2]);
    assert_eq!(h.grids[GridId::new(0)].procs(), 8);
    assert_eq!(
        h.distributions[0],
        Distribution {
            tensor: TensorId::new(0),
            grid: GridId::new(0),
            mapping: vec![(1, 0), (0, 1)],
            span: h.distributions[0].span.clone()
        }
    );
    assert_eq!(h.distributions[1].mapping, vec![(1, 0)]);
}

#[test]
fn batch_indices_may_repeat_and_diagonals_are_allowed() {
    let h = ok(&format!("{MATS} R[i,j] = A[i,j] * B[i,j] * C[i,j] + A[i,j] * B[k,k];"));
    assert_eq!(h.units[UnitId::new(0)].stmts[0].rhs.terms[1].factors[1].indices(), &[idx(&h, "k"), idx(&h, "k")]);
}

#[test]
fn every_error_is_reported_without_cascades() {
    // unknown index used twice: reported once; unknown tensor used twice: once;
    // a tensor whose declaration failed is still known.
    let c = codes(
        "range N = 0; index i : N; input tensor A[i,zz]; output tensor R[i];
        R[i] = A[i,zz] * Q[i] + Q[i] * A[i,i];",
    );
    assert_eq!(c, ["E0102", "E0105", "E0106"]);
}

#[test]
fn warnings_do_not_block() {
    let (h, d) = analyze(&format!("{MATS} R[i,j] = A[i,k] * B[j,j]; R[i,j] = C[i,j];"));
    assert!(!has_errors(&d));
    let mut c: Vec<_> = d.iter().map(|d| d.code).collect();
    c.sort();
    assert_eq!(c, ["W0101", "W0301", "W0302"]);
    assert_eq!(h.units[UnitId::new(0)].stmts.len(), 2);
}

#[test]
fn recovered_items_are_skipped() {
    let p = parse("range N = 2; index i : N; tensor A[i] = ; input tensor B[i]; output tensor C[i]; C[i] = B[i];");
    assert!(!p.diagnostics.is_empty());
    let (_, d) = super::analyze(&p.file, "t");
    assert!(!has_errors(&d), "{d:?}");
}

#[test]
fn deep_nesting_does_not_overflow() {
    let depth = crate::syntax::MAX_NESTING - 2;
    let src = format!(
        "range N = 2; index i : N; input tensor A[i]; output tensor R[i]; R[i] = {}A[i]{};",
        "exp(".repeat(depth),
        ")".repeat(depth)
    );
    let h = ok(&src);
    assert_eq!(h.units[UnitId::new(0)].stmts.len(), 1);
}

/// Random statements built from a small vocabulary of valid and invalid pieces:
/// whatever parses must be analysed without a panic.
#[test]
fn random_programs_never_panic() {
    let pieces = [
        "range N = 3;", "range M = 0;", "range N = 99999999999999999999999;", "index i, j : N;", "index k : M;",
        "index q : Z;", "input tensor A[i,j] : f32 symmetric(i j);", "output tensor B[i];", "tensor T[i,k];",
        "param tensor P[j];", "output tensor E;", "tensor X[N];", "B[i] = A[i,j] * T[j,k];", "E = A[i,i] / 0;",
        "B[i] += exp(A[i,j] * (B[j] + 2)) / 2;", "T[i,i] = relu(A[i,j]);", "A[i] = B;", "Q[z] = B[i];",
        "grid G[2, 0];", "grid G[];", "distribute A[i,j] over G as [i:0, j:5];", "distribute B[k] over H as [k:0];",
        "program p { B[i] = A[i,j]; E = B[i] * B[i] * B[i]; }", "program p { }",
        "model m { dims d = 2, e = 0; index x : d; index i : d; param tensor W[x]; layer l { H[x] = W[x]; H[x] = H[x] * H[k]; } parallel { data = 0; tensor = 2 on q; sequence = ring(0); zero = 9; expert = 3; foo = 1; } }",
        "model m { layer l { Y = 1; } layer l { Z[i] = Y; } }", "E = 1e999 * exp(E) + unknown(E);",
    ];
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..400 {
        let mut src = String::new();
        for _ in 0..8 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            src.push_str(pieces[(seed % pieces.len() as u64) as usize]);
            src.push('\n');
        }
        let p = parse(&src);
        let (_, diags) = super::analyze(&p.file, "t");
        for d in &diags {
            assert!(d.primary.span.end <= src.len(), "{src}\n{d:?}");
        }
    }
}

#[test]
fn tilings_pair_symmetry_and_block_rules() {
    let h = ok("range O = 4 spin(2, 2); range V = 6 tile 2 spin(3, 3); range P = 6 irreps(1, 2, 0, 3);
        range N tile 16; range W = 10 tile 5;
        index i, j : O; index a, b : V; index p, q, r, s : P; index n : N; index w, x : W;
        input tensor G[p,q,r,s] : f64 symmetric(p q)(r s)((p q)(r s)) irrep(p q r s);
        input tensor T[a,b,i,j] antisymmetric(a b)(i j) spin(a b | i j);
        input tensor U[a,i,b,j] antisymmetric((a i), (b j));
        input tensor S[w,x] symmetric(w x) tiles[[0,1], [1,0]];
        input tensor Z[n];
        output tensor E;
        E = G[p,q,r,s] * G[p,q,r,s] + T[a,b,i,j] * U[a,i,b,j] + S[w,x] * S[w,x] + Z[n] * Z[n];");
    let r = |n: &str| &h.ranges[h.ranges.position(|r| r.name == n).unwrap()].tiling;
    assert_eq!(
        *r("O"),
        Tiling { tile: None, subspaces: Some(Subspaces { kind: SubspaceKind::Spin, sizes: vec![2, 2] }) }
    );
    assert_eq!(r("V").tile, Some(2));
    assert_eq!(r("P").subspaces, Some(Subspaces { kind: SubspaceKind::Irrep, sizes: vec![1, 2, 0, 3] }));
    assert_eq!(*r("N"), Tiling { tile: Some(16), subspaces: None });
    let t = |n: &str| &h.tensors[h.tensor_by_name(n).unwrap()];
    assert_eq!(t("G").symmetry.len(), 2);
    assert_eq!(
        t("G").pair_symmetry,
        vec![PairGroup { kind: SymKind::Symmetric, members: vec![vec![0, 1], vec![2, 3]] }]
    );
    assert_eq!(t("G").blocks, vec![BlockRule::Irrep { positions: vec![0, 1, 2, 3] }]);
    assert_eq!(t("T").blocks, vec![BlockRule::Spin { upper: vec![0, 1], lower: vec![2, 3] }]);
    assert_eq!(
        t("U").pair_symmetry,
        vec![PairGroup { kind: SymKind::Antisymmetric, members: vec![vec![0, 1], vec![2, 3]] }]
    );
    assert_eq!(t("S").blocks, vec![BlockRule::Tiles(vec![vec![0, 1], vec![1, 0]])]);
}

#[test]
fn attribute_words_stay_usable_as_names() {
    ok("range tile = 3; range spin = 2 tile 1; index irrep, tiles : tile; index irreps : spin;
        input tensor spin_[irrep, tiles]; output tensor R[irrep]; R[irrep] = spin_[irrep, tiles];");
}

#[test]
fn tiled_storage_errors() {
    let base = "range O = 4 spin(2, 2); range V = 6 tile 2; range P = 4 irreps(1, 1, 1, 1);
        index i, j : O; index a, b : V; index p, q, r, s : P;\n";
    let cases: &[(&str, &[&str])] = &[
        ("range X = 5 tile 0;", &["E0406"]),
        ("range X = 5 spin(2, 2);", &["E0407"]),
        ("range X = 5 spin(1, 2, 2);", &["E0408"]),
        ("range X = 5 irreps(1,1,1,1,1,0,0,0,0);", &["E0408"]),
        ("range X spin(2, 2);", &["E0409"]),
        ("range X = 5 tiel 2;", &["E0405"]),
        ("range X = 5 tile 2 tile 3;", &["E0405"]),
        ("range X = 5 tile(2);", &["E0405"]),
        ("input tensor T[a,b,i,j] symmetric((a b)(i));", &["E0410"]),
        ("input tensor T[a,b,i,j] symmetric((a b));", &["E0410"]),
        ("input tensor T[a,b,i,j] symmetric((a b)(b i));", &["E0411"]),
        ("input tensor T[a,i,b,j] symmetric((a i)(j b));", &["E0412"]),
        ("input tensor T[a,b,i,j] antisymmetric(a b) symmetric((a)(b));", &["E0416"]),
        ("input tensor T[a,b,i,j] spin(a b | i j);", &["E0413"]),
        ("input tensor T[p,q,i,j] irrep(p q i j);", &["E0413"]),
        ("input tensor T[i,j] spin(i | i);", &["E0414"]),
        ("input tensor T[p,q] irrep(p q p);", &["E0414"]),
        ("input tensor T[i,j] spin(i j);", &["E0405"]),
        ("input tensor T[i,j] sping(i | j);", &["E0405"]),
        ("input tensor T[a,b] tiles[[0,1], [1]];", &["E0415"]),
        ("input tensor T[a,b] tiles[[0,-1]];", &["E0415"]),
        ("input tensor T[a,b] symmetric(a b) tiles[[0,1]];", &["E0418"]),
        ("input tensor T[i,j,p,q] antisymmetric(i j) spin(i p | j q);", &["E0413"]),
        ("input tensor T[i,j,k] antisymmetric(i j) spin(i | k);", &["E0105"]),
        ("index k : O; input tensor T[i,j,k] antisymmetric(i j) spin(i | k);", &["E0418"]),
        ("input tensor T[p,q] irrep(x);", &["E0401"]),
        ("input tensor T spin(i | j);", &["E0401"]),
    ];
    for (decl, want) in cases {
        let src = format!("{base}{decl}");
        let got: Vec<&str> = codes(&src).into_iter().filter(|c| !c.starts_with('W')).collect();
        assert_eq!(&got, want, "{decl}");
    }
}

#[test]
fn declarations_print_back_as_source() {
    let src =
        "range O = 4 spin(2, 2);\nrange V = 6 tile 2 spin(3, 3);\nrange P = 6 irreps(1, 2, 0, 3);\nrange N tile 16;\n\
        index i, j : O; index a, b : V; index p, q, r, s : P; index n : N;\n\
        input tensor G[p,q,r,s] : f64 symmetric(p q)(r s)((p q)(r s)) irrep(p q r s);\n\
        input tensor T[a,b,i,j] : f32 antisymmetric(a b)(i j) spin(a b | i j);\n\
        input tensor U[a,i,b,j] : f64 antisymmetric((a i)(b j)) tiles[[0,0,1,1], [1,1,0,0]];\n\
        output tensor Z[n] : f64;\ninput tensor Y[n] : f64;\nZ[n] = G[p,q,r,s] * T[a,b,i,j] * U[a,i,b,j] * Y[n];\n";
    let h = ok(src);
    let ranges: Vec<String> = h.ranges.ids().map(|r| super::display::range_decl(&h, r)).collect();
    assert_eq!(
        ranges,
        [
            "range O = 4 spin(2, 2);",
            "range V = 6 tile 2 spin(3, 3);",
            "range P = 6 irreps(1, 2, 0, 3);",
            "range N tile 16;"
        ]
    );
    let names: [&[&str]; 5] = [&["p", "q", "r", "s"], &["a", "b", "i", "j"], &["a", "i", "b", "j"], &["n"], &["n"]];
    let decls: Vec<String> = h.tensors.ids().zip(names).map(|(t, n)| super::display::tensor_decl(&h, t, n)).collect();
    for d in &decls {
        assert!(src.contains(d.as_str()), "{d}");
    }
    // Printed back, the declarations check to the same HIR.
    let again = format!(
        "{}\nindex i, j : O; index a, b : V; index p, q, r, s : P; index n : N;\n{}\nZ[n] = G[p,q,r,s] * T[a,b,i,j] * U[a,i,b,j] * Y[n];",
        ranges.join("\n"),
        decls.join("\n")
    );
    let h2 = ok(&again);
    assert_eq!(
        h2.ranges.iter().map(|r| &r.tiling).collect::<Vec<_>>(),
        h.ranges.iter().map(|r| &r.tiling).collect::<Vec<_>>()
    );
    for (a, b) in h.tensors.iter().zip(h2.tensors.iter()) {
        assert_eq!((&a.symmetry, &a.pair_symmetry, &a.blocks), (&b.symmetry, &b.pair_symmetry, &b.blocks));
    }
}

/// The complete programs of the book's section on tiled storage check.
#[test]
fn tiled_storage_book_examples_check() {
    let book = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/book/src/language.md")).unwrap();
    let section = book.split("## Tiled storage").nth(1).unwrap().split("\n## ").next().unwrap();
    let examples = section.split("### Examples").nth(1).unwrap();
    let blocks: Vec<&str> = examples.split("```").skip(1).step_by(2).collect();
    assert_eq!(blocks.len(), 3);
    for b in blocks {
        ok(b);
    }
}

/// The program of the book's paragraph on affine subscripts checks.
#[test]
fn affine_subscripts_book_example_checks() {
    let book = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/book/src/language.md")).unwrap();
    let section = book.split("**Affine subscripts").nth(1).unwrap();
    let block = section.split("```").nth(1).unwrap();
    ok(block);
}

/// "Did you mean" searches stop after comparing MAX_SUGGESTION_NAMES names in a
/// file (issue 23: 1000 searches among 16,000 names took 6 s); the errors are all
/// still reported.
#[test]
fn did_you_mean_stops_after_its_name_budget() {
    let declared = 4000;
    let mut src = String::from("range N = 2; index i : N;\n");
    for k in 0..declared {
        src += &format!("output tensor Tk{k}[i];\n");
    }
    for k in 0..1000 {
        src += &format!("Tk{k}[i] = Uk{k}[i];\n");
    }
    let (_, diags) = analyze(&src);
    assert_eq!(diags.iter().filter(|d| d.code == "E0106").count(), 1000);
    let hinted = diags.iter().filter(|d| d.hint.as_deref().is_some_and(|h| h.starts_with("did you mean"))).count();
    assert_eq!(hinted, super::MAX_SUGGESTION_NAMES / declared);
}
