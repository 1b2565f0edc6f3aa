//! Prints HIR statements back in source syntax (for IR dumps and reports).

use super::hir::{Expr, Factor, Hir, Stmt, TensorRef};

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
                Factor::Call { func, arg, .. } => format!("{}({})", func.name(), expr(hir, arg)),
                Factor::Sum { arg, .. } => format!("({})", expr(hir, arg)),
            });
        }
        s.push_str(&parts.join(" * "));
    }
    s
}

pub fn stmt(hir: &Hir, st: &Stmt) -> String {
    format!("{} {} {};", tensor_ref(hir, &st.lhs), if st.accumulate { "+=" } else { "=" }, expr(hir, &st.rhs))
}
