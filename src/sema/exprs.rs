//! Expressions: signs and numbers folded into coefficients, the `free` indices of
//! function arguments and parenthesised sums, and the summation rules of a term
//! (every result index present; a summed index may appear in any number of factors,
//! a hyperedge summed once over their product).
//!
//! Recursion follows the parse tree only (whose nesting the parser bounds).

use super::hir::{self, IndexId};
use super::scope::closest;
use super::Ctx;
use crate::diag::Diagnostic;
use crate::syntax::{ast, Span};

/// One occurrence of an index, with where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Occ {
    pub idx: IndexId,
    pub span: Span,
}

/// A factor of a term before the `free` indices of sub-expressions are known.
enum Part<'a> {
    Tensor(hir::TensorRef, Vec<Occ>),
    /// A call (`Some(func)`, `None` for an unknown function name), or a parenthesis.
    Sub {
        func: Option<Option<hir::Func>>,
        arg: &'a ast::Expr,
        span: Span,
        all: Vec<Occ>,
    },
}

impl Part<'_> {
    fn mentions(&self, i: IndexId) -> bool {
        match self {
            Part::Tensor(_, o) | Part::Sub { all: o, .. } => o.iter().any(|o| o.idx == i),
        }
    }
}

impl Ctx {
    /// An expression whose every term is a tensor over `result` (the left-hand
    /// side's indices when `top`, else a sub-expression's `free` indices).
    pub(crate) fn expr(&mut self, e: &ast::Expr, result: &[Occ], top: bool) -> hir::Expr {
        let terms = e.terms.iter().map(|t| self.term(t, result, top)).collect();
        hir::Expr { terms, span: e.span.clone() }
    }

    fn term(&mut self, t: &ast::Term, result: &[Occ], top: bool) -> hir::Term {
        let errors_before = self.error_count();
        let mut coef = if t.sign == ast::Sign::Minus { -1.0 } else { 1.0 };
        let mut parts = Vec::new();
        for (op, f) in &t.factors {
            if *op == ast::MulOp::Div && !matches!(f, ast::Factor::Number(_)) {
                let what = if matches!(f, ast::Factor::Tensor(_)) { "a tensor" } else { "an expression" };
                self.error(
                    Diagnostic::error(
                        "E0306",
                        format!("cannot divide by {what}"),
                        f.span(),
                        "only a number may follow `/`",
                    )
                    .with_hint("to divide element-wise, multiply by the reciprocal: `* recip(...)`"),
                );
            }
            match f {
                ast::Factor::Number(n) => match n.text.parse::<f64>() {
                    Ok(v) if v.is_finite() => {
                        if *op == ast::MulOp::Mul {
                            coef *= v;
                        } else if v == 0.0 {
                            self.error(
                                Diagnostic::error("E0307", "division by zero", n.span.clone(), "this is zero")
                                    .with_hint("remove the division, or divide by a non-zero number"),
                            );
                        } else {
                            coef /= v;
                        }
                    }
                    _ => self.error(
                        Diagnostic::error(
                            "E0308",
                            format!("number `{}` is out of range", n.text),
                            n.span.clone(),
                            "not a finite f64",
                        )
                        .with_hint("numbers must be finite 64-bit floats (at most about 1.8e308)"),
                    ),
                },
                ast::Factor::Tensor(r) => {
                    let (r, occs) = self.read(r);
                    parts.push(Part::Tensor(r, occs));
                }
                ast::Factor::Call { func, arg, span } => {
                    let func = Some(self.func(func));
                    let all = self.collect(arg);
                    parts.push(Part::Sub { func, arg, span: span.clone(), all });
                }
                ast::Factor::Paren { expr, span } => {
                    let all = self.collect(expr);
                    parts.push(Part::Sub { func: None, arg: expr, span: span.clone(), all });
                }
            }
        }

        // After a wrong reference (rank, unknown name) the index count of this
        // term means nothing: its summation rules are not checked, to avoid cascades.
        let counted = !self.quiet_sums && self.error_count() == errors_before;

        // A sub-expression keeps the indices it shares with the result or with
        // another factor; the rest are summed inside it.
        let mut factors = Vec::with_capacity(parts.len());
        let mut occs: Vec<Occ> = Vec::new();
        for (k, part) in parts.iter().enumerate() {
            match part {
                Part::Tensor(r, o) => {
                    factors.push(hir::Factor::Tensor(r.clone()));
                    occs.extend(o.iter().cloned());
                }
                Part::Sub { func, arg, span, all } => {
                    let mut free: Vec<Occ> = Vec::new();
                    for o in all {
                        let shared = result.iter().any(|r| r.idx == o.idx)
                            || parts.iter().enumerate().any(|(j, p)| j != k && p.mentions(o.idx));
                        if shared && !free.iter().any(|f| f.idx == o.idx) {
                            free.push(o.clone());
                        }
                    }
                    // A lone reduction directly in a call's argument is warned about
                    // (W0303); one in parentheses (`exp((…))`) is deliberate.
                    let saved = self.inside_call.take();
                    if let Some(Some(f)) = func {
                        let paren =
                            matches!(&arg.terms[..], [t] if matches!(&t.factors[..], [(_, ast::Factor::Paren { .. })]));
                        if !paren {
                            self.inside_call = Some((f.name().to_string(), span.clone()));
                        }
                    }
                    let inner = Box::new(self.expr(arg, &free, false));
                    self.inside_call = saved;
                    let ids = free.iter().map(|o| o.idx).collect();
                    factors.push(match func {
                        Some(Some(f)) => hir::Factor::Call { func: *f, arg: inner, free: ids, span: span.clone() },
                        _ => hir::Factor::Sum { arg: inner, free: ids, span: span.clone() },
                    });
                    occs.extend(free);
                }
            }
        }
        if counted {
            self.summation_rules(t, result, &occs, top);
        }
        hir::Term { coef, factors, span: t.span.clone() }
    }

    /// A result index a term lacks is broadcast when the term sums nothing (its value
    /// is the same for every value of it: `D[a,i] = eo[i] - ev[a]`, `A[i,j] + 1`) and
    /// an error when it sums (a typo, nearly always). A summed index may appear any
    /// number of times (three or more: a hyperedge, as `numpy.einsum` sums it); once in
    /// a product is probably a typo, once inside a function's argument probably a
    /// surprise.
    fn summation_rules(&mut self, t: &ast::Term, result: &[Occ], occs: &[Occ], top: bool) {
        let missing: Vec<&Occ> =
            result.iter().filter(|r| self.index_ok(r.idx) && !occs.iter().any(|o| o.idx == r.idx)).collect();
        // A term that sums and lacks a result index is almost always a typo
        // (`A[i,k] * B[k,l]` for `B[k,j]`); one that sums nothing is broadcast.
        let sums = occs.iter().any(|o| self.index_ok(o.idx) && !result.iter().any(|r| r.idx == o.idx));
        if !missing.is_empty() && sums {
            let list = self.name_list(missing.iter().map(|r| r.idx));
            let one = missing.len() == 1;
            let mut d = if top {
                let message = if one {
                    format!("output index {list} appears in no factor of this term")
                } else {
                    format!("output indices {list} appear in no factor of this term")
                };
                Diagnostic::error("E0303", message, t.span.clone(), format!("this term has no {list}")).with_hint(format!(
                    "a term that sums over indices must keep every left-hand side index; use {list} in this term, or remove {} from the left-hand side; to add a contraction broadcast over {list}, compute it into a temporary first and add that",
                    if one { "it" } else { "them" }
                ))
            } else {
                let message = if one {
                    format!("index {list} is missing from this term of a sub-expression")
                } else {
                    format!("indices {list} are missing from this term of a sub-expression")
                };
                Diagnostic::error("E0304", message, t.span.clone(), format!("this term has no {list}")).with_hint(format!(
                    "a term of a parenthesised sum or function argument that sums over indices must use the indices the sub-expression shares with the rest of the statement; use {list} in this term, or compute the contraction into a temporary first"
                ))
            };
            for r in &missing {
                let name = &self.hir.indices[r.idx].name;
                d = d.with_label(
                    r.span.clone(),
                    if top {
                        format!("`{name}` is on the left-hand side")
                    } else {
                        format!("`{name}` is shared with the rest of the statement")
                    },
                );
            }
            self.error(d);
        }

        // Summed indices by number of occurrences.
        let mut summed: Vec<(IndexId, Vec<&Occ>)> = Vec::new();
        for o in occs {
            if result.iter().any(|r| r.idx == o.idx) || !self.index_ok(o.idx) {
                continue;
            }
            match summed.iter_mut().find(|(i, _)| *i == o.idx) {
                Some((_, v)) => v.push(o),
                None => summed.push((o.idx, vec![o])),
            }
        }
        let keep = if top { "the left-hand side" } else { "the left-hand side (or outside this sub-expression)" };
        // A lone summed index in a product of several factors is usually a typo; in a
        // single-factor term (`N[i] = A[i,j]`) it is a deliberate reduction.
        let products = t.factors.iter().filter(|(_, f)| !matches!(f, ast::Factor::Number(_))).count();
        for (i, all) in &summed {
            if all.len() == 1 && products == 1 {
                if let Some((func, call)) = self.inside_call.clone() {
                    let name = &self.hir.indices[*i].name;
                    self.diags.push(
                        Diagnostic::warning(
                            "W0303",
                            format!("`{name}` is summed inside `{func}(…)`, before `{func}` is applied"),
                            all[0].span.clone(),
                            format!("summed over `{name}` inside the call"),
                        )
                        .with_label(call, format!("`{func}` applies to the sum"))
                        .with_hint(format!(
                            "to apply `{func}` to each element and then sum, write the call into a temporary over `{name}` first; to keep the sum inside, write the argument in parentheses: `{func}((…))`"
                        )),
                    );
                }
            }
            if all.len() == 1 && products >= 2 {
                let name = &self.hir.indices[*i].name;
                self.diags.push(
                    Diagnostic::warning(
                        "W0301",
                        format!("`{name}` appears once and is summed over"),
                        all[0].span.clone(),
                        format!("summed over `{name}`"),
                    )
                    .with_hint(format!(
                        "an index that is not on {keep} is summed; if `{name}` should be kept, add it there"
                    )),
                );
            }
        }
    }

    /// "`i`, `j`"
    fn name_list(&self, ids: impl Iterator<Item = IndexId>) -> String {
        ids.map(|i| format!("`{}`", self.hir.indices[i].name)).collect::<Vec<_>>().join(", ")
    }

    /// Every index written anywhere in `e`, in order of first appearance.
    fn collect(&mut self, e: &ast::Expr) -> Vec<Occ> {
        let mut out: Vec<Occ> = Vec::new();
        for t in &e.terms {
            for (_, f) in &t.factors {
                let found = match f {
                    ast::Factor::Number(_) => Vec::new(),
                    ast::Factor::Tensor(r) => r
                        .indices
                        .iter()
                        .flatten()
                        .map(|id| Occ { idx: self.resolve_index(id), span: id.span.clone() })
                        .collect(),
                    ast::Factor::Call { arg, .. } => self.collect(arg),
                    ast::Factor::Paren { expr, .. } => self.collect(expr),
                };
                for o in found {
                    if !out.iter().any(|x| x.idx == o.idx) {
                        out.push(o);
                    }
                }
            }
        }
        out
    }

    /// The function a name denotes (`None` after reporting an unknown name).
    fn func(&mut self, id: &ast::Ident) -> Option<hir::Func> {
        if let Some(f) = hir::Func::from_name(&id.name) {
            return Some(f);
        }
        let names: Vec<&str> = hir::Func::ALL.iter().map(|f| f.name()).collect();
        // Common names of compositions the language writes out.
        let composed = match id.name.as_str() {
            "rsqrt" => Some("recip(sqrt(…))"),
            "inv" | "reciprocal" => Some("recip(…)"),
            "square" => Some("a product of the factor with itself"),
            _ => None,
        };
        let hint = match (composed, closest(&id.name, names.iter().copied())) {
            (Some(c), _) => format!(
                "write `{}` as {c}; a number may be added inside a call (`sqrt(x[i] + 1e-5)`); the functions are {}",
                id.name,
                names.join(", ")
            ),
            (None, Some(s)) => format!("did you mean `{s}`?"),
            (None, None) => format!("the functions are {}", names.join(", ")),
        };
        self.error(
            Diagnostic::error("E0107", format!("unknown function `{}`", id.name), id.span.clone(), "not a function")
                .with_hint(hint),
        );
        None
    }
}
