//! Optimizer tests: every rewrite checked against the reference interpreter, and
//! every optimized unit also lowered to fused loop nests and executed.

use super::*;
use crate::sema::hir::{Func, Role, UnitId};
use crate::tir::testutil::{assert_close, random_inputs, run_unit, Builder};
use proptest::prelude::*;

/// Optimizes, then checks the outputs against the unoptimized program.
fn check(hir: &Hir, seed: u64) -> Result<(Hir, OptReport), String> {
    let (opt, rep) = optimize(hir);
    for u in hir.units.ids() {
        let inputs = random_inputs(hir, u, seed);
        let a = run_unit(hir, u, &inputs)?;
        let b = run_unit(&opt, u, &inputs)?;
        assert_close(&a, &b, 1e-10)?;
        // The optimized unit through loop fusion and memory minimization as well.
        let nest = crate::lir::fusion::lower_unit(&opt, u, crate::lir::fusion::FusionOptions::default());
        let c = crate::lir::exec::execute(&opt, &nest, &inputs).map_err(|e| e.to_string())?;
        assert_close(&a, &c, 1e-10).map_err(|e| format!("{e}\n{}", nest.dump(&opt)))?;
        if nest.peak_bytes > nest.unfused_peak_bytes {
            return Err(format!("fusion grew memory\n{}", nest.dump(&opt)));
        }
    }
    for s in &rep.stmts {
        if s.flops_after > s.flops_before * (1.0 + 1e-12) {
            return Err(format!("flops grew: {s:?}"));
        }
    }
    Ok((opt, rep))
}

fn four_index(sym: bool) -> Hir {
    let n = 5;
    let sizes: Vec<(char, usize)> = "abcdpqrs".chars().map(|c| (c, n)).collect();
    let mut b = Builder::new(&sizes);
    let groups: &[&[usize]] = if sym { &[&[0, 1], &[2, 3]] } else { &[] };
    let a = b.tensor("A", Role::Input, "pqrs", groups);
    let c = b.tensor("C", Role::Input, "ap", &[]);
    let out = b.tensor("B", Role::Output, "abcd", &[]);
    let t = b.term(1.0, vec![b.r(c, "ap"), b.r(c, "bq"), b.r(c, "cr"), b.r(c, "ds"), b.r(a, "pqrs")]);
    b.stmt(out, "abcd", false, vec![t]);
    b.hir
}

#[test]
fn four_index_transform() {
    let (opt, rep) = check(&four_index(false), 1).unwrap();
    assert_eq!(opt.units[UnitId::new(0)].stmts.len(), 4);
    let n5 = 5f64.powi(5);
    assert_eq!(rep.stmts[0].flops_after, 4.0 * 2.0 * n5);
    // One nest of 5 factors: 4 multiplications and an addition per point.
    assert_eq!(rep.stmts[0].flops_before, 5.0 * 5f64.powi(8));
    assert!(rep.stmts[0].peak_elems_after <= 2.0 * 5f64.powi(4));
    let text = report_text(&rep);
    assert!(text.contains("order [exact]"), "{text}");
    let json = serde_json::to_string(&rep).unwrap();
    assert!(json.contains("\"flops_after\""));
}

#[test]
fn four_index_transform_symmetric() {
    let (opt, rep) = check(&four_index(true), 2).unwrap();
    let plain = 4.0 * 2.0 * 5f64.powi(5);
    assert!(rep.stmts[0].flops_after < plain, "{}", report_text(&rep));
    // The first intermediate keeps A's untouched pair.
    assert!(opt.tensors.iter().any(|t| t.name.starts_with("_t") && !t.symmetry.is_empty()));
}

#[test]
fn common_subexpression_reused() {
    let mut b = Builder::new(&[('i', 2), ('k', 5), ('l', 2), ('j', 5), ('m', 4)]);
    let a = b.tensor("A", Role::Input, "ik", &[]);
    let bb = b.tensor("B", Role::Input, "kl", &[]);
    let c = b.tensor("C", Role::Input, "lj", &[]);
    let d = b.tensor("D", Role::Input, "lm", &[]);
    let r1 = b.tensor("R1", Role::Output, "ij", &[]);
    let r2 = b.tensor("R2", Role::Output, "im", &[]);
    let t1 = b.term(1.0, vec![b.r(a, "ik"), b.r(bb, "kl"), b.r(c, "lj")]);
    b.stmt(r1, "ij", false, vec![t1]);
    // same product with the summed index renamed (j plays k's role)
    let t2 = b.term(2.0, vec![b.r(bb, "jl"), b.r(a, "ij"), b.r(d, "lm")]);
    b.stmt(r2, "im", true, vec![t2]);
    let (opt, rep) = check(&b.hir, 3).unwrap();
    assert_eq!(rep.stmts[1].reused.len(), 1, "{}", report_text(&rep));
    assert_eq!(opt.units[UnitId::new(0)].stmts.len(), 3);
}

#[test]
fn matrix_chain_through_hir() {
    let sizes = [('a', 30), ('b', 35), ('c', 15), ('d', 5), ('e', 10), ('f', 20), ('g', 25)];
    let hir = Builder::einsum("ab,bc,cd,de,ef,fg->ag", &sizes);
    let (opt, rep) = optimize(&hir);
    assert_eq!(rep.stmts[0].flops_after, 2.0 * 15125.0);
    assert_eq!(opt.units[UnitId::new(0)].stmts.len(), 5);
    assert!(crate::tir::lower(&opt).to_string().contains("stmt 4"));
}

#[test]
fn factorization_applied() {
    let mut b = Builder::new(&[('i', 6), ('k', 6), ('j', 6)]);
    let a = b.tensor("A", Role::Input, "ik", &[]);
    let x = b.tensor("B", Role::Input, "kj", &[]);
    let y = b.tensor("C", Role::Input, "kj", &[]);
    let r = b.tensor("R", Role::Output, "ij", &[]);
    let t1 = b.term(1.0, vec![b.r(a, "ik"), b.r(x, "kj")]);
    let t2 = b.term(-0.5, vec![b.r(y, "kj"), b.r(a, "ik")]);
    b.stmt(r, "ij", false, vec![t1, t2]);
    let (_, rep) = check(&b.hir, 4).unwrap();
    assert_eq!(rep.stmts[0].factorized.len(), 1);
    // B - 0.5 C: 2 × 36 (one pass per term), then A*S: 2 × 216.
    assert_eq!(rep.stmts[0].flops_after, 2.0 * 216.0 + 72.0);
}

#[test]
fn calls_and_sums_are_hoisted() {
    let mut b = Builder::new(&[('t', 3), ('m', 4), ('f', 5), ('n', 2), ('k', 3)]);
    let x = b.tensor("X", Role::Input, "tm", &[]);
    let w1 = b.tensor("W1", Role::Input, "mf", &[]);
    let w2 = b.tensor("W2", Role::Input, "fn", &[]);
    let w3 = b.tensor("W3", Role::Input, "fn", &[]);
    let g = b.tensor("G", Role::Input, "nk", &[]);
    let y = b.tensor("Y", Role::Output, "tk", &[]);
    let inner = b.term(1.0, vec![b.r(x, "tm"), b.r(w1, "mf")]);
    let call = Factor::Call {
        func: Func::Tanh,
        arg: Box::new(Expr { terms: vec![inner], span: 0..0 }),
        free: b.idx("tf"),
        span: 0..0,
    };
    let sum = Factor::Sum {
        arg: Box::new(Expr {
            terms: vec![b.term(1.0, vec![b.r(w2, "fn")]), b.term(2.0, vec![b.r(w3, "fn")])],
            span: 0..0,
        }),
        free: b.idx("fn"),
        span: 0..0,
    };
    let t = b.term(0.5, vec![call, sum, b.r(g, "nk")]);
    b.stmt(y, "tk", false, vec![t]);
    let (opt, _) = check(&b.hir, 5).unwrap();
    assert!(opt.units[UnitId::new(0)].stmts.len() >= 3);
}

/// A random program: 1–2 statements of 1–3 terms of 2–7 factors; half the terms
/// hold summed hyperedges (an index in three or more factors).
fn random_program(seed: u64) -> Hir {
    let mut rnd = crate::tir::testutil::picker(seed, 0x1234567);
    let nl = 2 + rnd(6);
    let letters: Vec<char> = "abcdefg".chars().take(nl).collect();
    let mut sizes: Vec<(char, usize)>;
    loop {
        sizes = letters.iter().map(|&c| (c, 1 + rnd(5))).collect();
        if sizes.iter().map(|s| s.1).product::<usize>() <= 3000 {
            break;
        }
    }
    let size_of = |c: char| sizes.iter().find(|s| s.0 == c).unwrap().1;
    let mut b = Builder::new(&sizes);
    let mut tensors: Vec<(TensorId, String)> = Vec::new();
    let nstmts = 1 + rnd(2);
    for s in 0..nstmts {
        let outl: String = letters.iter().filter(|_| rnd(3) == 0).collect();
        let o = b.tensor(&format!("O{s}"), Role::Output, &outl, &[]);
        let nterms = 1 + rnd(3);
        let mut terms = Vec::new();
        for _ in 0..nterms {
            let nf = 2 + rnd(6);
            let mut idx: Vec<String> = (0..nf).map(|_| (0..rnd(5)).map(|_| letters[rnd(nl)]).collect()).collect();
            // every output index appears in the term
            for c in outl.chars() {
                if !idx.iter().any(|s| s.contains(c)) {
                    let f = rnd(nf);
                    idx[f].push(c);
                }
            }
            // summed indices at most twice per product in half the terms; in the
            // others any number of times (hyperedges)
            let cap = if rnd(2) == 0 { 2 } else { usize::MAX };
            for c in letters.iter().copied().filter(|c| !outl.contains(*c)) {
                let mut seen = 0;
                for s in idx.iter_mut() {
                    let mut kept = String::new();
                    for x in s.chars() {
                        if x == c {
                            seen += 1;
                            if seen > cap {
                                continue;
                            }
                        }
                        kept.push(x);
                    }
                    *s = kept;
                }
            }
            let mut factors = Vec::new();
            for s in &idx {
                // reuse an existing tensor of the same shape sometimes (CSE)
                let shape: Vec<usize> = s.chars().map(size_of).collect();
                let reuse = tensors.iter().find(|(_, d)| d.chars().map(size_of).collect::<Vec<_>>() == shape).cloned();
                let t = match reuse {
                    Some((t, _)) if rnd(2) == 0 => t,
                    _ => {
                        // symmetric in its first two dims when they have one size
                        let chars: Vec<char> = s.chars().collect();
                        let sym: &[&[usize]] =
                            if chars.len() >= 2 && size_of(chars[0]) == size_of(chars[1]) && rnd(3) == 0 {
                                &[&[0, 1]]
                            } else {
                                &[]
                            };
                        let t = b.tensor(&format!("T{}", tensors.len()), Role::Input, s, sym);
                        tensors.push((t, s.clone()));
                        t
                    }
                };
                factors.push(b.r(t, s));
            }
            // occasionally wrap two factors of equal index lists into a sum
            if rnd(6) == 0 && factors.len() >= 3 {
                let s = idx[0].clone();
                let t = b.tensor(&format!("T{}", tensors.len()), Role::Input, &s, &[]);
                tensors.push((t, s.clone()));
                let first = factors.remove(0);
                let mut free: Vec<IndexId> = Vec::new();
                for i in b.idx(&s) {
                    let elsewhere = idx[1..].iter().any(|x| b.idx(x).contains(&i)) || b.idx(&outl).contains(&i);
                    if elsewhere && !free.contains(&i) {
                        free.push(i);
                    }
                }
                let arg = Expr { terms: vec![b.term(1.0, vec![first]), b.term(-1.5, vec![b.r(t, &s)])], span: 0..0 };
                factors.insert(0, Factor::Sum { arg: Box::new(arg), free, span: 0..0 });
            }
            terms.push(b.term((rnd(7) as f64 - 3.0) * 0.5 + 0.25, factors));
        }
        b.stmt(o, &outl, rnd(2) == 0, terms);
    }
    b.hir
}

#[test]
#[ignore]
fn random_program_stats() {
    let (mut temps, mut reused, mut fact, mut stmts) = (0, 0, 0, 0);
    for seed in 0..500u64 {
        let (_, rep) = check(&random_program(seed), seed).unwrap();
        for s in &rep.stmts {
            stmts += 1;
            temps += s.temporaries.len();
            reused += s.reused.len();
            fact += s.factorized.len();
        }
    }
    eprintln!("stmts {stmts} temps {temps} reused {reused} factorized {fact}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn optimized_equals_original(seed in any::<u64>()) {
        let hir = random_program(seed);
        if let Err(e) = check(&hir, seed) {
            let (opt, rep) = optimize(&hir);
            panic!("seed {seed}: {e}\n{}\n{:#?}\n{:#?}", report_text(&rep), hir.units[UnitId::new(0)].stmts, opt.units[UnitId::new(0)].stmts);
        }
    }
}
