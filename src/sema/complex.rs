//! Where complex values (`c64`, `c128`) may go. Complex programs are lowered to
//! pairs of real tensors ([`crate::tir::complex`]), which is exact for sums of
//! products and `conj`; everything else is refused here, before any pass runs:
//!
//! * E0320: a complex value in an element-wise function other than `conj`, or in
//!   `max`/`min`/`where`/`softmax` (no ordering, and `exp`/`log` of complex are
//!   not implemented);
//! * E0321: a complex value assigned to a real tensor (the imaginary part would be
//!   dropped silently);
//! * E0322: `symmetric`/`antisymmetric`/block rules on a complex tensor (a complex
//!   tensor is more often Hermitian than symmetric; neither is implemented);
//! * E0323: a complex tensor in a `model` or a `distribute` statement.

use super::hir::{Expr, Factor, Func, Hir};
use crate::diag::Diagnostic;

/// Whether `e`'s value is complex (some tensor it reads is, outside a refused call).
pub fn expr_is_complex(hir: &Hir, e: &Expr) -> bool {
    e.terms.iter().any(|t| t.factors.iter().any(|f| factor_is_complex(hir, f)))
}

/// Whether a factor's value is complex.
pub fn factor_is_complex(hir: &Hir, f: &Factor) -> bool {
    match f {
        Factor::Tensor(r) => hir.tensors[r.tensor].elem.is_complex(),
        Factor::Affine(a) => hir.tensors[a.tensor].elem.is_complex(),
        Factor::Sum { arg, .. } | Factor::Call { func: Func::Conj, arg, .. } => expr_is_complex(hir, arg),
        Factor::Call { .. } | Factor::Reduce { .. } | Factor::Select { .. } => false,
    }
}

/// Whether any tensor of the program is complex.
pub fn has_complex(hir: &Hir) -> bool {
    hir.tensors.iter().any(|t| t.elem.is_complex())
}

/// The diagnostics for every misuse of a complex value in `hir`.
pub fn check(hir: &Hir) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if !has_complex(hir) {
        return out;
    }
    for t in hir.tensors.iter().filter(|t| t.elem.is_complex()) {
        if !t.symmetry.is_empty() || !t.pair_symmetry.is_empty() || !t.blocks.is_empty() {
            out.push(
                Diagnostic::error(
                    "E0322",
                    format!("complex tensor `{}` cannot have a symmetry or block rule", t.name),
                    t.span.clone(),
                    "declared complex with a symmetry or block rule here",
                )
                .with_hint(
                    "declare it without `symmetric`/`antisymmetric`/`spin`/`irrep`/`tiles`, or as two real tensors",
                ),
            );
        }
        if t.model.is_some() {
            out.push(
                Diagnostic::error(
                    "E0323",
                    format!("complex tensor `{}` in a model: models are real", t.name),
                    t.span.clone(),
                    "complex here",
                )
                .with_hint("use `f32` or `f64` in models"),
            );
        }
    }
    for d in &hir.distributions {
        let t = &hir.tensors[d.tensor];
        if t.elem.is_complex() {
            out.push(
                Diagnostic::error(
                    "E0323",
                    format!("complex tensor `{}` cannot be distributed over a grid", t.name),
                    d.span.clone(),
                    "distributed here",
                )
                .with_hint("remove the `distribute` statement; distributed runs refuse complex programs"),
            );
        }
    }
    for u in &hir.units {
        for s in &u.stmts {
            walk(hir, &s.rhs, &mut out);
            let lhs = &hir.tensors[s.lhs.tensor];
            if !lhs.elem.is_complex() && expr_is_complex(hir, &s.rhs) {
                out.push(
                    Diagnostic::error(
                        "E0321",
                        format!("a complex value is assigned to `{}`, a real tensor ({})", lhs.name, lhs.elem.name()),
                        s.span.clone(),
                        "the right-hand side is complex",
                    )
                    .with_hint(format!(
                        "declare `{}` as `c128` (or `c64`); the real part alone is not taken implicitly",
                        lhs.name
                    )),
                );
            }
        }
    }
    out
}

fn walk(hir: &Hir, e: &Expr, out: &mut Vec<Diagnostic>) {
    for t in &e.terms {
        for f in &t.factors {
            match f {
                Factor::Tensor(_) | Factor::Affine(_) => {}
                Factor::Sum { arg, .. } | Factor::Call { func: Func::Conj, arg, .. } => walk(hir, arg, out),
                Factor::Call { func, arg, span, .. } => {
                    walk(hir, arg, out);
                    if expr_is_complex(hir, arg) {
                        out.push(refused(func.name(), span));
                    }
                }
                Factor::Reduce { op, arg, span, .. } => {
                    walk(hir, arg, out);
                    if expr_is_complex(hir, arg) {
                        out.push(refused(op.name(), span));
                    }
                }
                Factor::Select { args, span, .. } => {
                    for a in args {
                        let e = a.as_expr();
                        walk(hir, &e, out);
                    }
                    if args.iter().any(|a| factor_is_complex(hir, a)) {
                        out.push(refused("where", span));
                    }
                }
            }
        }
    }
}

fn refused(name: &str, span: &crate::span::Span) -> Diagnostic {
    Diagnostic::error(
        "E0320",
        format!("`{name}` of a complex value is not supported"),
        span.clone(),
        "the argument is complex",
    )
    .with_hint("only sums, products and `conj(…)` take complex values; apply it to a real tensor")
}
