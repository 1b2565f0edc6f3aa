//! Affine subscripts: `I[n,c,y+r,x+s]`, `X[2*t+r]`, `X[t-1]`. Each subscript is
//! reduced to `Σ a·i + c` with integer constants (E0313 when it is not affine),
//! and shown to stay within its dimension for every value of its indices (E0314);
//! with run-time sizes the bound is checked when the sizes are known
//! (`sizes::bind_sizes`, E0749).

use super::exprs::Occ;
use super::hir::{self, IndexId};
use super::Ctx;
use crate::diag::Diagnostic;
use crate::syntax::{ast, Span};

/// Largest coefficient or constant magnitude in a subscript: far beyond any real
/// stride or offset, small enough that no bound computation overflows.
const MAX_CONSTANT: i64 = 1 << 40;

/// `Σ a·i + c` while a subscript is being reduced.
struct Lin {
    terms: Vec<(i64, IndexId, Span)>,
    constant: i64,
}

impl Lin {
    fn constant(c: i64) -> Lin {
        Lin { terms: Vec::new(), constant: c }
    }
    fn add(mut self, other: Lin, sign: i64) -> Option<Lin> {
        self.constant = self.constant.checked_add(other.constant.checked_mul(sign)?)?;
        for (a, i, s) in other.terms {
            let a = a.checked_mul(sign)?;
            match self.terms.iter_mut().find(|t| t.1 == i) {
                Some(t) => t.0 = t.0.checked_add(a)?,
                None => self.terms.push((a, i, s)),
            }
        }
        Some(self)
    }
    fn scale(mut self, k: i64) -> Option<Lin> {
        self.constant = self.constant.checked_mul(k)?;
        for t in &mut self.terms {
            t.0 = t.0.checked_mul(k)?;
        }
        Some(self)
    }
}

/// Why a subscript is not affine.
enum NotAffine {
    /// `i*j`: a product of two indices.
    Product(Span),
    /// A literal or coefficient beyond [`MAX_CONSTANT`].
    TooLarge(Span),
}

impl Ctx {
    /// A tensor read at subscripts that are not all plain names. Returns the factor
    /// and its indices (each once, as written first), or `None` after an error.
    pub(crate) fn affine_read(&mut self, a: &ast::AffineRef) -> (Option<hir::AffineRef>, Vec<Occ>) {
        let t = self.read_tensor(&a.name, &a.span);
        if self.model.is_some() {
            self.error(
                Diagnostic::error(
                    "E0313",
                    "affine subscripts are not supported inside a `model`",
                    a.span.clone(),
                    "a subscript that is not a plain index",
                )
                .with_hint("write the convolution or window as a program outside the model (`tcc run` computes it)"),
            );
            return (None, Vec::new());
        }
        let mut occs: Vec<Occ> = Vec::new();
        let mut subs = Vec::new();
        let mut ok = true;
        for e in &a.subs {
            match self.linear(e) {
                Ok(lin) => {
                    for (_, i, s) in &lin.terms {
                        if !occs.iter().any(|o| o.idx == *i) {
                            occs.push(Occ { idx: *i, span: s.clone() });
                        }
                    }
                    subs.push((lin, e));
                }
                Err(why) => {
                    ok = false;
                    self.not_affine(e, why);
                }
            }
        }
        if !ok || !self.tensor_ok(t) {
            return (None, occs);
        }
        let rank = self.hir.tensors[t].dims.len();
        if subs.len() != rank {
            let names = a.subs.iter().map(|s| ast::Ident { name: String::new(), span: s.span() }).collect();
            self.rank_error(&ast::TensorRef { name: a.name.clone(), indices: Some(names), span: a.span.clone() }, t);
            return (None, occs);
        }
        let mut out = Vec::new();
        for (k, (lin, e)) in subs.into_iter().enumerate() {
            let want = self.hir.tensors[t].dims[k];
            if !lin.terms.iter().all(|(_, i, _)| self.index_ok(*i)) || !self.range_ok(want) {
                return (None, occs);
            }
            // A plain name keeps the rule of plain references: over the dimension's
            // range, or over a part of it (a slice at the part's offset).
            if let ast::SubExpr::Name(_) = e {
                let (_, i, span) = &lin.terms[0];
                let have = self.hir.indices[*i].range;
                match self.hir.offset_in(have, want) {
                    Some(off) => {
                        out.push(hir::Subscript { terms: vec![(1, *i)], constant: off as i64, span: span.clone() })
                    }
                    None => {
                        if self.range_ok(have) {
                            self.range_error(t, k, &Occ { idx: *i, span: span.clone() });
                        }
                        return (None, occs);
                    }
                }
                continue;
            }
            if let Some((a, i, s)) = lin.terms.iter().find(|(a, _, _)| *a <= 0) {
                let name = self.hir.indices[*i].name.clone();
                let d = if *a == 0 {
                    Diagnostic::error(
                        "E0313",
                        format!("`{name}` cancels out of this subscript"),
                        e.span(),
                        format!("`{name}` has coefficient 0 here"),
                    )
                    .with_hint("write the subscript without it")
                } else {
                    Diagnostic::error(
                        "E0313",
                        format!("`{name}` has a negative coefficient ({a}) in this subscript"),
                        s.clone(),
                        format!("coefficient {a}"),
                    )
                    .with_hint(format!(
                        "every index must have a positive coefficient (`y+r`, `2*x+r`, `x-1`); to read backwards, index with a reversed copy of the data or a flipped index (`{name}` runs forward over its range)"
                    ))
                };
                let d = if *a == 0 {
                    d.with_label(s.clone(), format!("`{name}` written here"))
                } else {
                    d.with_label(e.span(), "in this subscript")
                };
                self.error(d);
                return (None, occs);
            }
            // An index over a part of the dimension's range (`range H = B + X;`,
            // `x : X`) counts from where its part starts, as in a slice: `I[x-1]`
            // with `|B| = 1` reads `I[x]` of the whole.
            let offset: i64 = lin
                .terms
                .iter()
                .map(|(a, i, _)| a * self.hir.offset_in(self.hir.indices[*i].range, want).unwrap_or(0) as i64)
                .sum();
            let sub = hir::Subscript {
                terms: lin.terms.iter().map(|(a, i, _)| (*a, *i)).collect(),
                constant: lin.constant + offset,
                span: e.span(),
            };
            let runtime = self.hir.ranges[want].is_runtime()
                || sub.terms.iter().any(|&(_, i)| self.hir.ranges[self.hir.indices[i].range].is_runtime());
            // With run-time sizes only the least value (the constant: every
            // coefficient is positive) is known now; the rest is checked when the
            // sizes are (`sizes::bind_sizes`, the library's entry).
            if !runtime || sub.constant < 0 {
                self.check_bounds(t, k, &sub);
            }
            out.push(sub);
        }
        let free = occs.iter().map(|o| o.idx).collect();
        (Some(hir::AffineRef { tensor: t, subs: out, free, span: a.span.clone() }), occs)
    }

    /// E0314 when `sub`, dimension `k` of tensor `t`, can leave the dimension.
    fn check_bounds(&mut self, t: hir::TensorId, k: usize, sub: &hir::Subscript) {
        let tensor = &self.hir.tensors[t];
        let extent = self.hir.ranges[tensor.dims[k]].size as i64;
        let Some((lo, hi)) = sub.bounds(&self.hir) else { return };
        if lo >= 0 && hi < extent {
            return;
        }
        let dim_range = self.hir.ranges[tensor.dims[k]].name.clone();
        let parts: Vec<String> = sub
            .terms
            .iter()
            .map(|&(_, i)| {
                let idx = &self.hir.indices[i];
                format!("`{}` : {} in 0..{}", idx.name, self.hir.ranges[idx.range].name, self.hir.index_size(i))
            })
            .collect();
        let first = sub.terms.first().map(|&(_, i)| self.hir.indices[i].clone());
        let (message, hint) = if let (true, Some(idx)) = (lo < 0, &first) {
            let (x, xr) = (&idx.name, &self.hir.ranges[idx.range].name);
            (
                format!("subscript `{}` reaches {lo}, below the first element of dimension {} of `{}`", sub.display(&self.hir), k + 1, tensor.name),
                format!(
                    "subscripts must stay ≥ 0: shift the other way (`{x}+1`, the result one element later), or declare the dimension over a union whose first part pads it (`range B = 1; range {dim_range} = B + {xr};`: `{x}` then counts from 1 there and `{x}-1` from 0)"
                ),
            )
        } else if lo < 0 {
            (
                format!("subscript `{}` reaches {lo}, below the first element of dimension {} of `{}`", sub.display(&self.hir), k + 1, tensor.name),
                "subscripts must stay ≥ 0: shift the other way (read `x` and write at `x+1`), or declare the dimension over a union whose first part pads it (`range B = 1; range H = B + X;`: an index `x : X` then counts from 1 and `x-1` from 0)"
                    .to_string(),
            )
        } else {
            (
                format!(
                    "subscript `{}` reaches {hi}, but dimension {} of `{}` ranges over `{dim_range}` ({extent} values, 0..{})",
                    sub.display(&self.hir),
                    k + 1,
                    tensor.name,
                    extent - 1
                ),
                format!(
                    "the subscript's largest value must be below {extent}: make `{dim_range}` at least {} or the ranges of its indices smaller",
                    hi + 1
                ),
            )
        };
        let info = &self.tensors[t];
        let mut d = Diagnostic::error(
            "E0314",
            message,
            sub.span.clone(),
            format!("ranges over {lo}..={hi} ({})", parts.join(", ")),
        )
        .with_hint(hint);
        if let Some(s) = info.dim_spans.get(k) {
            d = d.with_label(s.clone(), format!("this dimension has {extent} values"));
        }
        self.error(d);
    }

    /// `e` as `Σ a·i + c`.
    fn linear(&mut self, e: &ast::SubExpr) -> Result<Lin, NotAffine> {
        let too_large = || NotAffine::TooLarge(e.span());
        match e {
            ast::SubExpr::Name(n) => {
                let i = self.resolve_index(n);
                Ok(Lin { terms: vec![(1, i, n.span.clone())], constant: 0 })
            }
            ast::SubExpr::Int(lit) => match lit.text.parse::<i64>() {
                Ok(v) if v <= MAX_CONSTANT => Ok(Lin::constant(v)),
                _ => Err(too_large()),
            },
            ast::SubExpr::Paren { arg, .. } => self.linear(arg),
            ast::SubExpr::Sum { terms, .. } => {
                let mut acc = Lin::constant(0);
                for (minus, t) in terms {
                    let x = self.linear(t)?;
                    let sum = acc.add(x, if *minus { -1 } else { 1 }).ok_or_else(too_large)?;
                    acc = bounded(sum).ok_or_else(too_large)?;
                }
                Ok(acc)
            }
            ast::SubExpr::Product { factors, .. } => {
                let mut acc = Lin::constant(1);
                for f in factors {
                    let b = self.linear(f)?;
                    let r = match (acc.terms.is_empty(), b.terms.is_empty()) {
                        (true, _) => b.scale(acc.constant),
                        (_, true) => acc.scale(b.constant),
                        _ => return Err(NotAffine::Product(e.span())),
                    };
                    acc = bounded(r.ok_or_else(too_large)?).ok_or_else(too_large)?;
                }
                Ok(acc)
            }
        }
    }

    /// E0313 for a subscript that is not affine.
    fn not_affine(&mut self, e: &ast::SubExpr, why: NotAffine) {
        let d = match why {
            NotAffine::Product(span) => {
                let d = Diagnostic::error(
                    "E0313",
                    "a subscript must be affine: a product of two indices is not",
                    span.clone(),
                    "a product of indices",
                );
                if span == e.span() { d } else { d.with_label(e.span(), "in this subscript") }
            }
            .with_hint("subscripts are sums of indices times integer constants plus a constant, as in `y+r`, `2*x+r`, `x-1`; compute a product of indices into a tensor first"),
            NotAffine::TooLarge(span) => Diagnostic::error(
                "E0313",
                "a constant in this subscript is too large",
                span,
                format!("beyond ±{MAX_CONSTANT}"),
            )
            .with_hint("subscript constants and coefficients are integers of magnitude at most 2^40"),
        };
        self.error(d);
    }
}

/// `l` if its coefficients and constant stay within [`MAX_CONSTANT`].
fn bounded(l: Lin) -> Option<Lin> {
    let ok = l.constant.abs() <= MAX_CONSTANT && l.terms.iter().all(|t| t.0.abs() <= MAX_CONSTANT);
    ok.then_some(l)
}
