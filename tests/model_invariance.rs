//! Issue 20: a model's plan does not depend on how its layers are split into
//! statements. Every function call, parenthesised sum and non-trivial function
//! argument of every statement of the shipped model layers is moved into a
//! statement of its own (a new tensor over the value's indices), one site at a
//! time; the split model computes the same outputs (the interpreter says so) and
//! must have the same parameters, flops, activations, backward working set, KV
//! cache and the same collectives in every plan. Constants (masks) are never
//! communicated, and a router's weight is not an expert parameter.

use std::collections::HashMap;
use tcc::plan::model::analysis::{self, ModelInfo};
use tcc::plan::model::{evaluate, tp_dims, Config, ModelOptions, ModelPlan, SeqStyle};
use tcc::plan::Network;
use tcc::sema::hir::{Expr, Factor, Hir, ModelId, Role, Stmt, TensorId, TensorRef, Term};

const MODELS: [&str; 4] =
    ["examples/gpt_block.tc", "examples/moe_block.tc", "examples/llama_block.tc", "tests/models/moe_router.tc"];

fn load(path: &str) -> Hir {
    let src = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let (hir, d) = tcc::compile(&src, "m");
    hir.unwrap_or_else(|| panic!("{path}: {d:?}"))
}

/// A site to move out of statement `stmt`: the `k`-th call, sum or non-trivial
/// call argument met in a depth-first walk of its right-hand side.
fn sites(e: &Expr, whole: bool) -> usize {
    let mut n = 0;
    for t in &e.terms {
        for f in &t.factors {
            if let Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } = f {
                // The factor itself (unless it is the whole right-hand side: that
                // would only add a copy).
                if !(whole && e.terms.len() == 1 && t.factors.len() == 1) {
                    n += 1;
                }
                if matches!(f, Factor::Call { .. } | Factor::Reduce { .. }) && !plain(arg) {
                    n += 1;
                }
                n += sites(arg, false);
            }
        }
    }
    n
}

fn plain(e: &Expr) -> bool {
    matches!(&e.terms[..], [t] if matches!(&t.factors[..], [Factor::Tensor(_)]))
}

/// Replaces site `k` (same walk as [`sites`]) with a read of `new`; returns the
/// expression that computes the new tensor and its indices.
fn take(e: &mut Expr, whole: bool, k: &mut usize, new: TensorId) -> Option<(Expr, Vec<tcc::sema::hir::IndexId>)> {
    let single = e.terms.len() == 1 && e.terms[0].factors.len() == 1;
    let span = e.span.clone();
    for t in &mut e.terms {
        for f in &mut t.factors {
            let (free, is_call) = match f {
                Factor::Call { free, .. } | Factor::Reduce { free, .. } => (free.clone(), true),
                Factor::Sum { free, .. } => (free.clone(), false),
                _ => continue,
            };
            if !(whole && single) {
                if *k == 0 {
                    let r = Factor::Tensor(TensorRef { tensor: new, indices: free.clone(), span: span.clone() });
                    let old = std::mem::replace(f, r);
                    let expr = Expr { terms: vec![Term { coef: 1.0, factors: vec![old], span: span.clone() }], span };
                    return Some((expr, free));
                }
                *k -= 1;
            }
            let (Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. }) = f else {
                unreachable!()
            };
            if is_call && !plain(arg) {
                if *k == 0 {
                    let r = Factor::Tensor(TensorRef { tensor: new, indices: free.clone(), span: span.clone() });
                    let read = Expr { terms: vec![Term { coef: 1.0, factors: vec![r], span: span.clone() }], span };
                    let old = std::mem::replace(arg.as_mut(), read);
                    return Some((old, free));
                }
                *k -= 1;
            }
            if let Some(x) = take(arg, false, k, new) {
                return Some(x);
            }
        }
    }
    None
}

/// The model with site `site` of statement `stmt` moved into a statement before it.
fn split(hir: &Hir, stmt: usize, site: usize) -> Hir {
    let mut h = hir.clone();
    let mid = ModelId::new(0);
    let unit = h.models[mid].unit;
    let lhs = h.units[unit].stmts[stmt].lhs.tensor;
    let mut t = h.tensors[lhs].clone();
    t.name = format!("_split{stmt}_{site}");
    t.role = Role::Temporary;
    let new = h.tensors.push(t);
    let mut s = h.units[unit].stmts[stmt].clone();
    let (expr, free) = take(&mut s.rhs, true, &mut site.clone(), new).expect("site");
    h.tensors[new].dims = free.iter().map(|&i| h.indices[i].range).collect();
    let first = Stmt {
        lhs: TensorRef { tensor: new, indices: free, span: s.span.clone() },
        accumulate: false,
        rhs: expr,
        span: s.span.clone(),
    };
    h.units[unit].stmts[stmt] = s;
    h.units[unit].stmts.insert(stmt, first);
    for l in &mut h.models[mid].layers {
        if l.stmts.start > stmt {
            l.stmts.start += 1;
        }
        if l.stmts.end > stmt {
            l.stmts.end += 1;
        }
    }
    h
}

fn outputs(h: &Hir) -> HashMap<String, Vec<f64>> {
    let u = h.models[ModelId::new(0)].unit;
    let inputs = tcc::interp::random_inputs(h, u, 7).unwrap();
    let out = tcc::interp::run_unit(h, u, &inputs).unwrap();
    out.into_iter().map(|(t, d)| (h.tensors[t].name.clone(), d.data)).collect()
}

fn cfgs(m: &ModelInfo) -> Vec<Config> {
    let base = Config { tensor_dims: tp_dims(m), zero: 1, ..Default::default() };
    let mut v = Vec::new();
    for (d, t, s, style, e) in [
        (2, 2, 1, SeqStyle::Ulysses, 1),
        (1, 2, 2, SeqStyle::Ulysses, 1),
        (1, 1, 2, SeqStyle::Ring, 1),
        (4, 1, 1, SeqStyle::Ulysses, 4),
        (2, 2, 1, SeqStyle::Ulysses, 2),
    ] {
        let c = Config { data: d, tensor: t, sequence: s, seq_style: style, expert: e, ..base.clone() };
        if tcc::plan::model::invalid(m, &c).is_none() {
            v.push(c);
        }
    }
    v
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// What a plan communicates: (phase, kind, group, bytes per step), sorted.
fn comm(p: &ModelPlan) -> Vec<(String, String, String, u64)> {
    let mut v: Vec<_> = p
        .comm
        .iter()
        .map(|c| (c.phase.clone(), c.kind.name().to_string(), c.group.clone(), (c.bytes_per_rank * c.count) as u64))
        .collect();
    v.sort();
    v
}

fn acts(m: &ModelInfo) -> f64 {
    m.layers.iter().flat_map(|l| &l.activations).map(|a| a.elements).sum()
}

#[test]
fn splitting_a_statement_changes_no_plan() {
    let mut checked = 0;
    for path in MODELS {
        let hir = load(path);
        let id = ModelId::new(0);
        let want = analysis::analyze(&hir, id);
        let want_out = outputs(&hir);
        let o = ModelOptions::new(4, Network::parse("fat-tree:bw=25GB/s,lat=5us,flops=150TF/s").unwrap());
        let unit = hir.models[id].unit;
        for stmt in 0..hir.units[unit].stmts.len() {
            for site in 0..sites(&hir.units[unit].stmts[stmt].rhs, true) {
                let h = split(&hir, stmt, site);
                let what = format!("{path}: statement {} site {site}", stmt + 1);
                // The split is an equivalent program.
                let got_out = outputs(&h);
                for (name, w) in &want_out {
                    let g = &got_out[name];
                    assert!(w.iter().zip(g).all(|(a, b)| close(*a, *b)), "{what}: output {name} differs");
                }
                let got = analysis::analyze(&h, id);
                assert_eq!(got.psi_dense(), want.psi_dense(), "{what}");
                assert_eq!(got.psi_expert(), want.psi_expert(), "{what}");
                assert!(close(got.flops(), want.flops()), "{what}: flops {} vs {}", got.flops(), want.flops());
                assert!(close(acts(&got), acts(&want)), "{what}: activations {} vs {}", acts(&got), acts(&want));
                let kv = |m: &ModelInfo| -> f64 { m.layers.iter().flat_map(|l| &l.kv).map(|t| t.elements).sum() };
                assert_eq!(kv(&got), kv(&want), "{what}: KV cache");
                for c in cfgs(&want) {
                    let (a, b) = (evaluate(&want, &c, &o), evaluate(&got, &c, &o));
                    assert_eq!(comm(&a), comm(&b), "{what}: {}", c.describe());
                    assert!(close(a.memory.activations, b.memory.activations), "{what}: {}", c.describe());
                    assert!(close(a.memory.backward, b.memory.backward), "{what}: backward {}", c.describe());
                    assert!(close(a.time, b.time), "{what}: {}", c.describe());
                }
                checked += 1;
            }
        }
    }
    println!("{checked} splittings checked");
    assert!(checked >= 12, "only {checked} splittings checked");
}

/// A constant mask over both sequence positions is sliced locally by every rank:
/// neither ring attention nor Ulysses sends it, and it is no KV cache.
#[test]
fn a_constant_mask_is_never_communicated() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_block.tc")).unwrap();
    let start = src.find("  parallel {").unwrap();
    let end = start + src[start..].find("}\n").unwrap() + 2;
    let src = format!("{}{}", &src[..start], &src[end..])
        .replace(
            "  output tensor Y[b,s,m] : f32;",
            "  output tensor Y[b,s,m] : f32;\n  input tensor Mask[h,s,t] : f32;",
        )
        .replace("P[b,h,s,t] = exp(S[b,h,s,t]);", "P[b,h,s,t] = Mask[h,s,t] * exp(S[b,h,s,t]);");
    let (hir, d) = tcc::compile(&src, "masked");
    let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
    let m = analysis::analyze(&hir, ModelId::new(0));
    let names = |v: &[analysis::TensorInfo]| v.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    let att = &m.layers[0];
    assert_eq!(names(&att.ring), ["K", "V"], "ring attention passes K and V blocks");
    assert_eq!(names(&att.kv), ["K", "V"]);
    assert!(!names(&att.ulysses).contains(&"Mask".to_string()), "{:?}", names(&att.ulysses));
    let o = ModelOptions::new(4, Network::parse("fat-tree:bw=25GB/s,lat=5us,flops=150TF/s").unwrap());
    for style in [SeqStyle::Ring, SeqStyle::Ulysses] {
        let c = Config { tensor_dims: tp_dims(&m), sequence: 4, seq_style: style, ..Default::default() };
        let p = evaluate(&m, &c, &o);
        assert!(p.comm.iter().all(|x| !x.what.contains("Mask")), "{style:?}");
        assert!(!p.comm.is_empty());
    }
}

/// A router (gating) weight has an experts dim but meets only token activations:
/// dense, replicated, not split over the expert ranks.
#[test]
fn the_router_weight_is_not_an_expert_parameter() {
    let hir = load("tests/models/moe_router.tc");
    let m = analysis::analyze(&hir, ModelId::new(0));
    let wr = m.params.iter().find(|p| p.name == "Wr").unwrap();
    assert!(!wr.expert);
    assert!(m.params.iter().filter(|p| p.name.starts_with('W') && p.name != "Wr").all(|p| p.expert));
}
