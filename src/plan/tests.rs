//! Hand-computed cost counts, monotonicity, and the bound ≤ plan property.

use super::search::{build_steps, candidates, evaluate, naive_candidate, Cand, Spec};
use super::*;
use crate::sema::hir::UnitId;
use proptest::prelude::{prop, prop_assert, prop_assume, proptest, ProptestConfig};
use proptest::strategy::Strategy as PStrategy;

/// A one-statement program `C[c] = A[a] * B[b]` with the given index extents.
fn program(sizes: &[(char, usize)], a: &str, b: &str, c: &str) -> crate::sema::hir::Hir {
    let mut src = String::new();
    for (k, (ch, n)) in sizes.iter().enumerate() {
        src.push_str(&format!("range R{k} = {n}; index {ch} : R{k};\n"));
    }
    let br = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("[{}]", s.chars().map(|c| c.to_string()).collect::<Vec<_>>().join(","))
        }
    };
    src.push_str(&format!(
        "input tensor A{} : f64;\ninput tensor B{} : f64;\noutput tensor C{} : f64;\n",
        br(a),
        br(b),
        br(c)
    ));
    src.push_str(&format!("C{} = A{} * B{};\n", br(c), br(a), br(b)));
    let (hir, diags) = crate::compile(&src, "t");
    hir.unwrap_or_else(|| panic!("{src}\n{diags:?}"))
}

fn spec_of(hir: &crate::sema::hir::Hir) -> Spec {
    let (opt, _) = crate::tir::optimize(hir);
    let (mut specs, _) = build_steps(&opt, UnitId::new(0), &mut PlanNames::new(&opt));
    assert_eq!(specs.len(), 1);
    specs.remove(0)
}

fn idx(hir: &crate::sema::hir::Hir, name: &str) -> crate::sema::hir::IndexId {
    hir.indices.position(|i| i.name == name).unwrap()
}

fn cand(hir: &crate::sema::hir::Hir, grid: &[usize], names: &[&str]) -> Cand {
    Cand {
        grid: grid.to_vec(),
        assign: names.iter().map(|n| if *n == "-" { None } else { Some(idx(hir, n)) }).collect(),
    }
}

fn words(e: &search::Eval, kind: OpKind) -> u64 {
    e.ops.iter().filter(|o| o.kind == kind).map(|o| o.moved_max).sum()
}

fn fat() -> Network {
    Network::fat_tree()
}

#[test]
fn summa_2d_square() {
    // P = 16 on a 4x4 grid (i, j): A gathered along j, B along i: n²/√P·(1−1/√P) each.
    let n = 1024u64;
    let h = program(&[('i', 1024), ('j', 1024), ('k', 1024)], "ik", "kj", "ij");
    let s = spec_of(&h);
    let e = evaluate(&s, &cand(&h, &[4, 4], &["i", "j"]), &fat(), None, 0).unwrap();
    let each = n * n / 4 * 3 / 4;
    assert_eq!(e.ops.len(), 2);
    assert!(e
        .ops
        .iter()
        .all(|o| o.kind == OpKind::AllGather && o.moved_max == each && o.sent_max == each && o.msgs_max == 2));
    assert_eq!(e.flops_max, 2.0 * (n * n * n / 16) as f64);
}

#[test]
fn three_d_on_a_cube() {
    // P = q³ = 64: A, B gathered and C reduce-scattered, n²/q²·(1−1/q) words each.
    let n = 512u64;
    let h = program(&[('i', 512), ('j', 512), ('k', 512)], "ik", "kj", "ij");
    let s = spec_of(&h);
    let e = evaluate(&s, &cand(&h, &[4, 4, 4], &["i", "j", "k"]), &fat(), None, 0).unwrap();
    let each = n * n / 16 * 3 / 4;
    assert_eq!(words(&e, OpKind::AllGather), 2 * each);
    assert_eq!(words(&e, OpKind::ReduceScatter), each);
    // This is exactly the memory-independent bound 3(n³/P)^{2/3} − 3n²/P.
    let b = lower_bound(
        &[
            BoundIndex { n, a: true, b: false, c: true },
            BoundIndex { n, a: false, b: true, c: true },
            BoundIndex { n, a: true, b: true, c: false },
        ],
        true,
        64,
        None,
    );
    assert!((b.words - (3 * each) as f64).abs() < 1e-6);
}

#[test]
fn two_and_a_half_d() {
    // P = 32 = 4x4x2 (c = 2 replicas splitting k): A, B: n²/(4·2)·(3/4); C: n²/16·(1/2).
    let n = 1024u64;
    let h = program(&[('i', 1024), ('j', 1024), ('k', 1024)], "ik", "kj", "ij");
    let s = spec_of(&h);
    let e = evaluate(&s, &cand(&h, &[4, 4, 2], &["i", "j", "k"]), &fat(), None, 0).unwrap();
    assert_eq!(words(&e, OpKind::AllGather), 2 * (n * n / 8 * 3 / 4));
    assert_eq!(words(&e, OpKind::ReduceScatter), n * n / 16 / 2);
    // Memory: stationary A, B (n²/32 each), gathered A, B (n²/8 each), partial C (n²/16), final C (n²/32).
    assert_eq!(e.mem_bytes, 8 * (2 * n * n / 32 + 2 * n * n / 8 + n * n / 16 + n * n / 32));
}

#[test]
fn uneven_splits_are_exact_per_rank() {
    // 7x5x3 on a 3x2 grid: check the closed-form maxima against every rank.
    let h = program(&[('i', 7), ('j', 5), ('k', 3)], "ik", "kj", "ij");
    let s = spec_of(&h);
    let e = evaluate(&s, &cand(&h, &[3, 2], &["i", "k"]), &fat(), None, 0).unwrap();
    for op in &e.ops {
        let per: Vec<RankWords> = (0..6).map(|r| op.rank_words(r)).collect();
        assert_eq!(per.iter().map(|w| w.recv).max().unwrap(), op.recv_max, "{op:?}");
        assert_eq!(per.iter().map(|w| w.sent).max().unwrap(), op.sent_max, "{op:?}");
        // Every word sent is received.
        assert_eq!(per.iter().map(|w| w.sent).sum::<u64>(), per.iter().map(|w| w.recv).sum::<u64>(), "{op:?}");
    }
}

#[test]
fn alltoall_counts_conserve_words() {
    let from = Layout { grid: vec![4], splits: vec![vec![0], vec![]], idle: vec![] };
    let to = Layout { grid: vec![2, 2], splits: vec![vec![1], vec![0]], idle: vec![] };
    let op = CommOp::moving(
        OpKind::AllToAll,
        Phase::Before,
        PlanTensor::Tensor(TensorId::new(0)),
        vec![10, 6],
        vec![0, 1],
        (from, to),
        8,
    );
    let w: Vec<RankWords> = (0..4).map(|r| op.rank_words(r)).collect();
    assert_eq!(w.iter().map(|x| x.sent).sum::<u64>(), w.iter().map(|x| x.recv).sum::<u64>());
    // rank 0 owns rows 0..3 (all columns), needs rows 0..5, columns 0..3.
    assert_eq!(w[0].recv, 5 * 3 - 3 * 3);
}

fn plan_src(src: &str, p: usize, mem: Option<u64>) -> Result<Plan, CommandError> {
    let (hir, d) = crate::compile(src, "t");
    let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
    let (opt, _) = crate::tir::optimize(&hir);
    let mut o = PlanOptions::new(p, fat());
    o.mem_per_rank = mem;
    plan_unit(&opt, UnitId::new(0), &o)
}

const MM: &str = "range M = 2048; range K = 2048; range N = 2048; index i : M; index k : K; index j : N;
input tensor A[i,k] : f64; input tensor B[k,j] : f64; output tensor C[i,j] : f64;
C[i,j] = A[i,k] * B[k,j];";

#[test]
fn more_memory_never_costs_more() {
    for p in [16usize, 64, 256] {
        let mut last: Option<(f64, u64)> = None;
        for mib in [8u64, 16, 32, 64, 128, 256, 1024] {
            let Ok(plan) = plan_src(MM, p, Some(mib << 20)) else { continue };
            let now = (plan.totals.time, plan.totals.words_max);
            if let Some((t, w)) = last {
                assert!(now.0 <= t * (1.0 + 1e-12), "P={p} {mib} MiB: time {} > {t}", now.0);
                assert!(now.1 <= w, "P={p} {mib} MiB: words {} > {w}", now.1);
            }
            last = Some(now);
        }
        assert!(last.is_some());
    }
}

#[test]
fn memory_limit_is_respected_or_refused() {
    let plan = plan_src(MM, 64, Some(4 << 20)).unwrap();
    assert!(plan.totals.mem_peak_bytes <= 4 << 20);
    let e = plan_src(MM, 4, Some(1 << 20)).unwrap_err();
    assert_eq!(e.code, "E0803");
}

#[test]
fn four_index_transform_redistributes_between_steps() {
    let src = "range N = 96; index p, q, r, s, a, b, c, d : N;
input tensor A[p,q,r,s] : f64; input tensor C[a,p] : f64; output tensor B[a,b,c,d] : f64;
B[a,b,c,d] = C[a,p] * C[b,q] * C[c,r] * C[d,s] * A[p,q,r,s];";
    let plan = plan_src(src, 64, None).unwrap();
    assert_eq!(plan.steps.len(), 4);
    // Exact per-rank totals agree with the op-by-op counts.
    let total: u64 = (0..64).map(|r| plan.rank_words(r).moved).max().unwrap();
    assert_eq!(total, plan.totals.words_max);
    for s in &plan.steps {
        assert!(s.ratio.is_none_or(|r| r >= 1.0 - 1e-9), "{}: {:?}", plan.names.step_text(s), s.ratio);
    }
}

#[test]
fn naive_plan_is_a_1d_grid() {
    let (hir, _) = crate::compile(MM, "t");
    let (opt, _) = crate::tir::optimize(&hir.unwrap());
    let mut o = PlanOptions::new(16, fat());
    o.strategy = Strategy::Naive;
    let naive = plan_unit(&opt, UnitId::new(0), &o).unwrap();
    assert_eq!(naive.steps[0].grid, vec![16]);
    // B[k,j] starts split on k and is all-gathered in full: 2048²·15/16 words.
    assert_eq!(naive.totals.words_max, 2048 * 2048 / 16 * 15);
    let best = plan_unit(&opt, UnitId::new(0), &PlanOptions::new(16, fat())).unwrap();
    assert!(best.totals.time <= naive.totals.time);
}

#[test]
fn distribute_hints_set_the_initial_layout() {
    let src = format!("{MM}\ngrid G[4, 4];\ndistribute A[i,k] over G as [i:1, k:0];");
    let plan = plan_src(&src, 16, None).unwrap();
    let (_, l) = plan.initial.iter().find(|(n, _)| plan.names.tensors[*n] == "A").unwrap();
    assert_eq!(l.grid, vec![4, 4]);
    assert_eq!(l.splits, vec![vec![1], vec![0]]);
    let other = plan_src(&src, 64, None).unwrap();
    assert!(other.notes.iter().any(|n| n.contains("ignored")));
}

fn class_strategy() -> impl PStrategy<Value = (Vec<(u8, usize)>, usize)> {
    // Each index: a class (0 free-left, 1 free-right, 2 contracted, 3 batch,
    // 4 summed-left) and an extent.
    (
        prop::collection::vec((0u8..5, 1usize..40), 2..6),
        prop::sample::select(vec![2usize, 3, 4, 6, 8, 12, 16, 27, 32, 64]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// No mapping — chosen or not — moves fewer words than the lower bound.
    #[test]
    fn bound_never_exceeds_any_mapping((idx, p) in class_strategy()) {
        let names = "abcdefgh";
        let mut sizes = Vec::new();
        let (mut a, mut b, mut c) = (String::new(), String::new(), String::new());
        for (k, &(cls, n)) in idx.iter().enumerate() {
            let ch = names.as_bytes()[k] as char;
            sizes.push((ch, n));
            match cls {
                0 => { a.push(ch); c.push(ch); }
                1 => { b.push(ch); c.push(ch); }
                2 => { a.push(ch); b.push(ch); }
                3 => { a.push(ch); b.push(ch); c.push(ch); }
                _ => { a.push(ch); }
            }
        }
        prop_assume!(!a.is_empty() && !b.is_empty());
        let h = program(&sizes, &a, &b, &c);
        let s = spec_of(&h);
        let mut cands = candidates(&s, p);
        cands.truncate(150);
        // The naive 1D mapping may leave ranks without work (P > extent).
        cands.push(naive_candidate(&s, p));
        for cd in cands.iter() {
            let e = evaluate(&s, cd, &fat(), None, 0).unwrap();
            let mut per = vec![0u64; p];
            for op in &e.ops {
                for (r, slot) in per.iter_mut().enumerate() {
                    *slot += op.rank_words(r).moved;
                }
            }
            let w = *per.iter().max().unwrap() as f64;
            let bidx: Vec<BoundIndex> = s.indices.iter().zip(&s.ext).map(|(x, &n)| BoundIndex {
                n: n as u64, a: s.a.idx.contains(x), b: s.b.as_ref().unwrap().idx.contains(x), c: s.c.idx.contains(x) }).collect();
            let bound = lower_bound(&bidx, true, e.active, None);
            prop_assert!(w + 1e-6 >= bound.words, "{a},{b}->{c} {sizes:?} P={p} grid {:?} {:?}: words {w} < bound {}", cd.grid, cd.assign, bound.words);
        }
    }
}
