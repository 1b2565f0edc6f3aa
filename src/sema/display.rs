//! Prints HIR statements and declarations back in source syntax (for IR dumps and
//! reports).

use super::hir::{BlockRule, Expr, Factor, Hir, RangeId, Role, Stmt, SubspaceKind, SymKind, TensorId, TensorRef, Term};

pub fn tensor_ref(hir: &Hir, r: &TensorRef) -> String {
    let name = &hir.tensors[r.tensor].name;
    if r.indices.is_empty() {
        return name.clone();
    }
    let idx: Vec<&str> = r.indices.iter().map(|&i| hir.indices[i].name.as_str()).collect();
    format!("{name}[{}]", idx.join(","))
}

fn coef(c: f64) -> String {
    format!("{c:?}")
}

pub fn expr(hir: &Hir, e: &Expr) -> String {
    let mut s = String::new();
    for (k, term) in e.terms.iter().enumerate() {
        let mut c = term.coef;
        if k > 0 {
            s.push_str(if c < 0.0 { " - " } else { " + " });
            c = c.abs();
        } else if c < 0.0 && !term.factors.is_empty() && c == -1.0 {
            s.push('-');
            c = 1.0;
        }
        let mut parts: Vec<String> = Vec::new();
        if c != 1.0 || term.factors.is_empty() {
            parts.push(coef(c));
        }
        for f in &term.factors {
            parts.push(match f {
                Factor::Tensor(r) => tensor_ref(hir, r),
                Factor::Affine(a) => {
                    let subs: Vec<String> = a.subs.iter().map(|s| s.display(hir)).collect();
                    format!("{}[{}]", hir.tensors[a.tensor].name, subs.join(","))
                }
                Factor::Call { func, arg, .. } => format!("{}({})", func.name(), expr(hir, arg)),
                Factor::Sum { arg, .. } => format!("({})", expr(hir, arg)),
                Factor::Reduce { op, arg, .. } => format!("{}({})", op.name(), expr(hir, arg)),
                Factor::Select { .. } => factor(hir, f),
            });
        }
        s.push_str(&parts.join(" * "));
    }
    s
}

/// One factor as source text.
fn factor(hir: &Hir, f: &Factor) -> String {
    let one = |f: &Factor| {
        expr(hir, &Expr { terms: vec![Term { coef: 1.0, factors: vec![f.clone()], span: 0..0 }], span: 0..0 })
    };
    match f {
        Factor::Select { cmp, args, .. } => {
            let a: Vec<String> = args
                .iter()
                .map(|a| match a {
                    Factor::Sum { arg, .. } => expr(hir, arg),
                    _ => one(a),
                })
                .collect();
            format!("where({} {} {}, {}, {})", a[0], cmp.symbol(), a[1], a[2], a[3])
        }
        _ => one(f),
    }
}

pub fn stmt(hir: &Hir, st: &Stmt) -> String {
    format!("{} {} {};", tensor_ref(hir, &st.lhs), if st.accumulate { "+=" } else { "=" }, expr(hir, &st.rhs))
}

/// `range V = 200 tile 40 spin(100, 100);` (a run-time range: `range O tile 16;`).
pub fn range_decl(hir: &Hir, r: RangeId) -> String {
    let range = &hir.ranges[r];
    let mut s = format!("range {}", range.name);
    if !range.parts.is_empty() {
        let parts: Vec<&str> = range.parts.iter().map(|&p| hir.ranges[p].name.as_str()).collect();
        return format!("{s} = {};", parts.join(" + "));
    }
    if !range.is_runtime() {
        s.push_str(&format!(" = {}", range.size));
    }
    if let Some(t) = range.tiling.tile {
        s.push_str(&format!(" tile {t}"));
    }
    if let Some(sub) = &range.tiling.subspaces {
        let kw = match sub.kind {
            SubspaceKind::Spin => "spin",
            SubspaceKind::Irrep => "irreps",
        };
        let sizes: Vec<String> = sub.sizes.iter().map(|n| n.to_string()).collect();
        s.push_str(&format!(" {kw}({})", sizes.join(", ")));
    }
    s.push(';');
    s
}

/// A tensor's declaration with `names` for its dimensions (the HIR keeps only their
/// ranges): `input tensor G[p,q,r,s] : f64 symmetric(p q)(r s)((p q)(r s)) irrep(p q r s);`.
pub fn tensor_decl(hir: &Hir, t: TensorId, names: &[&str]) -> String {
    let tensor = &hir.tensors[t];
    let role = match tensor.role {
        Role::Input => "input",
        Role::Output => "output",
        Role::Temporary => "temporary",
        Role::Param => "param",
    };
    let mut s = format!("{role} tensor {}", tensor.name);
    if !tensor.dims.is_empty() {
        s.push_str(&format!("[{}]", names.join(",")));
    }
    s.push_str(&format!(" : {}", tensor.elem.name()));
    s.push_str(&tensor_attrs(hir, t, names));
    s.push(';');
    s
}

/// The symmetry and block rules of a tensor as written after its element type,
/// each preceded by a space (empty for a dense tensor without symmetry).
pub fn tensor_attrs(hir: &Hir, t: TensorId, names: &[&str]) -> String {
    let tensor = &hir.tensors[t];
    let group = |ps: &[usize]| format!("({})", ps.iter().map(|&p| names[p]).collect::<Vec<_>>().join(" "));
    let kw = |k: SymKind| match k {
        SymKind::Symmetric => "symmetric",
        SymKind::Antisymmetric => "antisymmetric",
    };
    let mut s = String::new();
    for kind in [SymKind::Symmetric, SymKind::Antisymmetric] {
        let mut groups: String =
            tensor.symmetry.iter().filter(|g| g.kind == kind).map(|g| group(&g.positions)).collect();
        for g in tensor.pair_symmetry.iter().filter(|g| g.kind == kind) {
            groups.push_str(&format!("({})", g.members.iter().map(|m| group(m)).collect::<String>()));
        }
        if !groups.is_empty() {
            s.push_str(&format!(" {}{groups}", kw(kind)));
        }
    }
    for rule in &tensor.blocks {
        s.push(' ');
        s.push_str(&match rule {
            BlockRule::Spin { upper, lower } => {
                let side = |ps: &[usize]| ps.iter().map(|&p| names[p]).collect::<Vec<_>>().join(" ");
                format!("spin({} | {})", side(upper), side(lower))
            }
            BlockRule::Irrep { positions } => format!("irrep{}", group(positions)),
            BlockRule::Tiles(tiles) => {
                let list: Vec<String> = tiles
                    .iter()
                    .map(|c| format!("[{}]", c.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")))
                    .collect();
                format!("tiles[{}]", list.join(", "))
            }
        });
    }
    s
}
