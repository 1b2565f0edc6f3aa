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
    /// `I[n,c,y+r,x+s]`.
    Affine(hir::AffineRef, Vec<Occ>),
    /// A call (`Some(func)`, `None` for an unknown function name), or a parenthesis.
    Sub {
        func: Option<Option<hir::Func>>,
        arg: &'a ast::Expr,
        span: Span,
        all: Vec<Occ>,
    },
    /// `max(e)`, `min(e)`, `where(a > b, x, y)`, `max(a, b)`, `softmax(e, v)`:
    /// `args` as [`Special`] says.
    Special {
        kind: Special,
        args: Vec<&'a ast::Expr>,
        span: Span,
        all: Vec<Occ>,
    },
}

/// What a [`Part::Special`] computes.
#[derive(Clone, Copy)]
enum Special {
    /// `max(e)` / `min(e)`: one argument, its unshared indices reduced.
    Reduce(hir::Extremum),
    /// `where(a cmp b, x, y)`: arguments `[a, b, x, y]`.
    Select(hir::CmpOp),
    /// `softmax(e, v)`: one argument, normalized over `v`.
    Softmax(IndexId),
}

impl Part<'_> {
    fn mentions(&self, i: IndexId) -> bool {
        match self {
            Part::Tensor(_, o) | Part::Affine(_, o) | Part::Sub { all: o, .. } | Part::Special { all: o, .. } => {
                o.iter().any(|o| o.idx == i)
            }
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
                ast::Factor::Affine(a) => {
                    if let (Some(r), occs) = self.affine_read(a) {
                        parts.push(Part::Affine(r, occs));
                    }
                }
                ast::Factor::Call { func, arg, span } if matches!(func.name.as_str(), "max" | "min") => {
                    let op = if func.name == "max" { hir::Extremum::Max } else { hir::Extremum::Min };
                    let all = self.collect(arg);
                    parts.push(Part::Special { kind: Special::Reduce(op), args: vec![arg], span: span.clone(), all });
                }
                ast::Factor::Call { func, arg, span } if matches!(func.name.as_str(), "where" | "softmax") => {
                    self.arity_error(func, 1, span);
                    self.check_only(arg);
                }
                ast::Factor::Call { func, arg, span } => {
                    let func = Some(self.func(func));
                    let all = self.collect(arg);
                    parts.push(Part::Sub { func, arg, span: span.clone(), all });
                }
                ast::Factor::Apply { func, args, span } => {
                    if let Some((kind, args)) = self.special(func, args, span) {
                        let mut all: Vec<Occ> = Vec::new();
                        for a in &args {
                            for o in self.collect(a) {
                                if !all.iter().any(|x| x.idx == o.idx) {
                                    all.push(o);
                                }
                            }
                        }
                        parts.push(Part::Special { kind, args, span: span.clone(), all });
                    }
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
                Part::Affine(r, o) => {
                    factors.push(hir::Factor::Affine(r.clone()));
                    occs.extend(o.iter().cloned());
                }
                Part::Sub { func, arg, span, all } => {
                    let free = kept_indices(all, result, &parts, k);
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
                Part::Special { kind, args, span, all } => {
                    let free = kept_indices(all, result, &parts, k);
                    factors.extend(self.special_factors(*kind, args, span, all, &free));
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
                    ast::Factor::Affine(a) => {
                        let mut names = Vec::new();
                        a.subs.iter().for_each(|s| sub_names(s, &mut names));
                        names.into_iter().map(|id| Occ { idx: self.resolve_index(id), span: id.span.clone() }).collect()
                    }
                    ast::Factor::Call { arg, .. } => self.collect(arg),
                    ast::Factor::Paren { expr, .. } => self.collect(expr),
                    ast::Factor::Apply { func, args, .. } => {
                        let mut v = Vec::new();
                        // `softmax`'s second argument names an index, not a tensor.
                        let n = if func.name == "softmax" { 1 } else { args.len() };
                        for a in args.iter().take(n) {
                            v.extend(self.collect(&a.expr));
                            if let Some((_, rhs)) = &a.cmp {
                                v.extend(self.collect(rhs));
                            }
                        }
                        v
                    }
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

    /// E0309: `func` called with the wrong number of arguments.
    fn arity_error(&mut self, func: &ast::Ident, given: usize, span: &Span) {
        let (want, example) = match func.name.as_str() {
            "where" => ("3 arguments", "`where(X[i] > 0, X[i], 0)`"),
            "softmax" => ("2 arguments, an expression and the index it normalizes over", "`softmax(L[b,v], v)`"),
            "max" | "min" => (
                "1 argument (a reduction) or 2 (element-wise)",
                "`max(L[b,v])` reduces over `v` when `v` is not on the left-hand side; `max(A[i], 0)`",
            ),
            _ => ("1 argument", "`exp(A[i,j])`"),
        };
        self.error(
            Diagnostic::error(
                "E0309",
                format!("`{}` takes {want}, not {given}", func.name),
                span.clone(),
                format!("{given} argument{}", if given == 1 { "" } else { "s" }),
            )
            .with_hint(format!("for example {example}")),
        );
    }

    /// E0310: a comparison where a value belongs.
    fn comparison_error(&mut self, arg: &ast::Arg) {
        self.error(
            Diagnostic::error("E0310", "a comparison is not a value", arg.span.clone(), "a comparison")
                .with_hint("comparisons are the first argument of `where`: `where(X[i] > 0, 1, 0)` is 1 where `X[i] > 0` and 0 elsewhere"),
        );
    }

    /// Checks the names in `e` (a misused call's argument), reporting no summation
    /// rules: its unknown tensors and indices are still errors, its reads count.
    fn check_only(&mut self, e: &ast::Expr) {
        let all = self.collect(e);
        let quiet = std::mem::replace(&mut self.quiet_sums, true);
        self.expr(e, &all, false);
        self.quiet_sums = quiet;
    }

    /// The meaning of a call of several arguments or of a comparison (`None`
    /// after reporting an error): its kind and argument expressions.
    fn special<'a>(
        &mut self,
        func: &ast::Ident,
        args: &'a [ast::Arg],
        span: &Span,
    ) -> Option<(Special, Vec<&'a ast::Expr>)> {
        let found = self.special_kind(func, args, span);
        if found.is_none() {
            for a in args {
                if !(func.name == "softmax" && std::ptr::eq(a, &args[args.len() - 1]) && args.len() == 2) {
                    self.check_only(&a.expr);
                }
                if let Some((_, rhs)) = &a.cmp {
                    self.check_only(rhs);
                }
            }
        }
        found
    }

    fn special_kind<'a>(
        &mut self,
        func: &ast::Ident,
        args: &'a [ast::Arg],
        span: &Span,
    ) -> Option<(Special, Vec<&'a ast::Expr>)> {
        let name = func.name.as_str();
        let first_cmp = name == "where";
        let mut ok = true;
        for (k, a) in args.iter().enumerate() {
            if a.cmp.is_some() && !(first_cmp && k == 0) {
                self.comparison_error(a);
                ok = false;
            }
        }
        match name {
            "where" if args.len() == 3 => {
                let Some((cmp, rhs)) = &args[0].cmp else {
                    self.error(
                        Diagnostic::error(
                            "E0310",
                            "the first argument of `where` must be a comparison",
                            args[0].span.clone(),
                            "not a comparison",
                        )
                        .with_hint(
                            "compare two values with `<`, `<=`, `>`, `>=`, `==` or `!=`: `where(X[i] > 0, X[i], 0)`",
                        ),
                    );
                    return None;
                };
                ok.then(|| (Special::Select(*cmp), vec![&args[0].expr, rhs, &args[1].expr, &args[2].expr]))
            }
            "max" | "min" if args.len() == 2 => {
                // max(a, b) is where(a >= b, a, b).
                let cmp = if name == "max" { hir::CmpOp::Ge } else { hir::CmpOp::Le };
                let (a, b) = (&args[0].expr, &args[1].expr);
                ok.then(|| (Special::Select(cmp), vec![a, b, a, b]))
            }
            "softmax" if args.len() == 2 => {
                let v = &args[1].expr;
                let index = match &v.terms[..] {
                    [t] if t.sign == ast::Sign::Plus && t.factors.len() == 1 => match &t.factors[0] {
                        (ast::MulOp::Mul, ast::Factor::Tensor(r)) if r.indices.is_none() => Some(&r.name),
                        _ => None,
                    },
                    _ => None,
                };
                let Some(id) = index else {
                    self.error(
                        Diagnostic::error(
                            "E0311",
                            "the second argument of `softmax` must be an index",
                            v.span.clone(),
                            "not an index name",
                        )
                        .with_hint("name the index the softmax normalizes over: `P[b,v] = softmax(L[b,v], v)`"),
                    );
                    return None;
                };
                let i = self.resolve_index(id);
                ok.then(|| (Special::Softmax(i), vec![&args[0].expr]))
            }
            "where" | "max" | "min" | "softmax" => {
                self.arity_error(func, args.len(), span);
                None
            }
            _ => {
                if self.func(func).is_some() && ok {
                    self.arity_error(func, args.len(), span);
                }
                None
            }
        }
    }

    /// The factors of a [`Part::Special`] over `free` (of `all`, its indices).
    fn special_factors(
        &mut self,
        kind: Special,
        args: &[&ast::Expr],
        span: &Span,
        all: &[Occ],
        free: &[Occ],
    ) -> Vec<hir::Factor> {
        let ids: Vec<IndexId> = free.iter().map(|o| o.idx).collect();
        let saved = self.inside_call.take();
        let out = match kind {
            Special::Reduce(op) => {
                // Nothing is summed inside: every index of the argument is kept, and
                // those not shared are reduced.
                let arg = Box::new(self.expr(args[0], all, false));
                vec![hir::Factor::Reduce { op, arg, free: ids, span: span.clone() }]
            }
            Special::Select(cmp) => {
                let args = args
                    .iter()
                    .map(|a| {
                        let mine = self.collect(a);
                        let sub: Vec<Occ> =
                            free.iter().filter(|o| mine.iter().any(|m| m.idx == o.idx)).cloned().collect();
                        let inner = Box::new(self.expr(a, &sub, false));
                        hir::Factor::Sum { arg: inner, free: sub.iter().map(|o| o.idx).collect(), span: a.span.clone() }
                    })
                    .collect();
                vec![hir::Factor::Select { cmp, args, free: ids, span: span.clone() }]
            }
            Special::Softmax(v) => {
                if !ids.contains(&v) {
                    if self.index_ok(v) {
                        let name = self.hir.indices[v].name.clone();
                        self.error(
                            Diagnostic::error(
                                "E0312",
                                format!("`softmax` normalizes over `{name}`, which its result does not keep"),
                                span.clone(),
                                format!("`{name}` is not on the left-hand side or elsewhere in the term"),
                            )
                            .with_hint(format!(
                                "the softmax is a tensor over `{name}` too: write `{name}` on the left-hand side, as in `P[b,{name}] = softmax(L[b,{name}], {name})`"
                            )),
                        );
                    }
                    return {
                        self.inside_call = saved;
                        Vec::new()
                    };
                }
                self.inside_call = Some(("softmax".to_string(), span.clone()));
                let e = self.expr(args[0], free, false);
                softmax_factors(e, &ids, v, span)
            }
        };
        self.inside_call = saved;
        out
    }

    /// The function a name denotes (`None` after reporting an unknown name).
    fn func(&mut self, id: &ast::Ident) -> Option<hir::Func> {
        if let Some(f) = hir::Func::from_name(&id.name) {
            return Some(f);
        }
        let names: Vec<&str> =
            hir::Func::ALL.iter().map(|f| f.name()).chain(hir::SPECIAL_FUNCS.iter().map(|s| s.0)).collect();
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

/// `softmax(e, v)` over `free` as the numerically stable form
/// `exp(e - max_v(e)) * recip(Σ_v exp(e - max_v(e)))`: the maximum over `v`
/// subtracted first, so that no `exp` overflows (the value is unchanged).
fn softmax_factors(e: hir::Expr, free: &[IndexId], v: IndexId, span: &Span) -> Vec<hir::Factor> {
    let rest: Vec<IndexId> = free.iter().copied().filter(|&i| i != v).collect();
    let one = |f: hir::Factor| hir::Term { coef: 1.0, factors: vec![f], span: span.clone() };
    // The maximum of `e`'s value over `free`: a sum inside `e` stays a sum (in
    // parentheses) unless `e` sums nothing.
    let sums = hir::expr_indices(&e, free).iter().any(|i| !free.contains(i));
    let value = if sums {
        let sum = hir::Factor::Sum { arg: Box::new(e.clone()), free: free.to_vec(), span: span.clone() };
        hir::Expr { terms: vec![one(sum)], span: span.clone() }
    } else {
        e.clone()
    };
    let max =
        hir::Factor::Reduce { op: hir::Extremum::Max, arg: Box::new(value), free: rest.clone(), span: span.clone() };
    let mut shifted = e;
    shifted.terms.push(hir::Term { coef: -1.0, factors: vec![max], span: span.clone() });
    let num =
        hir::Factor::Call { func: hir::Func::Exp, arg: Box::new(shifted), free: free.to_vec(), span: span.clone() };
    // recip of the sum over `v` inside it.
    let recip = hir::Factor::Call {
        func: hir::Func::Recip,
        arg: Box::new(hir::Expr { terms: vec![one(num.clone())], span: span.clone() }),
        free: rest,
        span: span.clone(),
    };
    vec![num, recip]
}

/// The indices of part `k`'s occurrences `all` that it keeps (each once, in order
/// of first occurrence): those the result or another part of the term mentions.
/// The rest are summed inside the part.
fn kept_indices(all: &[Occ], result: &[Occ], parts: &[Part], k: usize) -> Vec<Occ> {
    let mut free: Vec<Occ> = Vec::new();
    for o in all {
        let shared =
            result.iter().any(|r| r.idx == o.idx) || parts.iter().enumerate().any(|(j, p)| j != k && p.mentions(o.idx));
        if shared && !free.iter().any(|f| f.idx == o.idx) {
            free.push(o.clone());
        }
    }
    free
}

/// The index names written in a subscript, in order.
fn sub_names<'e>(e: &'e ast::SubExpr, out: &mut Vec<&'e ast::Ident>) {
    match e {
        ast::SubExpr::Name(n) => out.push(n),
        ast::SubExpr::Int(_) => {}
        ast::SubExpr::Sum { terms, .. } => terms.iter().for_each(|(_, t)| sub_names(t, out)),
        ast::SubExpr::Product { factors, .. } => factors.iter().for_each(|f| sub_names(f, out)),
        ast::SubExpr::Paren { arg, .. } => sub_names(arg, out),
    }
}
