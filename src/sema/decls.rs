//! Declarations: ranges (and model dims), indices, tensors and their symmetry.
//! A declaration with an error is still entered, so that its uses are checked
//! against what it says rather than reported as unknown.

use super::hir::{self, RangeId};
use super::scope::{Ns, Sym};
use super::{Ctx, TensorInfo};
use crate::diag::Diagnostic;
use crate::syntax::ast;

/// The value of an integer literal, which is kept as text by the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntVal {
    Ok(usize),
    Negative,
    TooLarge,
}

pub(crate) fn int_value(l: &ast::IntLit) -> IntVal {
    match l.text.parse::<usize>() {
        Ok(0) => IntVal::Ok(0),
        Ok(_) if l.negative => IntVal::Negative,
        Ok(v) => IntVal::Ok(v),
        Err(_) if l.negative => IntVal::Negative,
        Err(_) => IntVal::TooLarge,
    }
}

/// The literal as written, sign included.
pub(crate) fn int_text(l: &ast::IntLit) -> String {
    format!("{}{}", if l.negative { "-" } else { "" }, l.text)
}

/// E0103: an integer literal that does not fit in a machine word.
pub(crate) fn too_large(l: &ast::IntLit, what: &str) -> Diagnostic {
    Diagnostic::error("E0103", format!("{what} is too large"), l.span.clone(), "does not fit in 64 bits")
        .with_hint(format!("the largest size tcc can represent is {}", usize::MAX))
}

impl Ctx {
    /// `range N = 64;`, `range N;` (size given at run time, `size` is `None`) or a
    /// model's `dims N = 64`.
    pub(crate) fn range_decl(&mut self, name: &ast::Ident, size: Option<&ast::IntLit>) -> RangeId {
        let what = if self.model.is_some() { "dim" } else { "range" };
        let (n, size_kind) = match size {
            None => (super::sizes::DEFAULT_ASSUMED_SIZE, hir::SizeKind::Runtime(hir::Assumed::Default)),
            Some(size) => (self.range_size(name, size, what), hir::SizeKind::Fixed),
        };
        let r = self.hir.ranges.next_id();
        self.hir.ranges.push(hir::Range {
            name: name.name.clone(),
            size: n,
            span: name.span.clone(),
            model: self.model,
            size_kind,
            tiling: hir::Tiling::default(),
            parts: Vec::new(),
        });
        self.declare(Ns::Space, name, Sym::Range(r), what);
        r
    }

    /// `range P = O + V;` declared with size 1 until [`Self::union_decl`].
    pub(crate) fn union_placeholder(&mut self, name: &ast::Ident) -> RangeId {
        let one = ast::IntLit { negative: false, text: "1".into(), span: name.span.clone() };
        let r = self.range_decl(name, Some(&one));
        self.union_names.push(r);
        r
    }

    /// The parts and size of a union of ranges: each part a known fixed-size
    /// range (a union written before it, or a plain range), no range twice.
    pub(crate) fn union_decl(&mut self, r: RangeId, d: &ast::RangeDecl) {
        let mut parts: Vec<RangeId> = Vec::new();
        let mut ok = true;
        for p in &d.parts {
            let q = self.resolve_range(p);
            if !self.range_ok(q) {
                ok = false;
                continue;
            }
            let bad = if q == r {
                Some(("a range cannot be a part of itself".to_string(), "this is the union itself"))
            } else if self.hir.ranges[q].is_runtime() {
                Some((
                    format!("`{}` has a size given at run time; a union's parts need fixed sizes", p.name),
                    "a run-time range",
                ))
            } else if self.pending_union(q) {
                Some((format!("the union `{}` is declared after this one", p.name), "declared later"))
            } else {
                None
            };
            if let Some((message, label)) = bad {
                self.error(
                    Diagnostic::error("E0112", message, p.span.clone(), label)
                        .with_hint("a union is made of plain ranges of fixed size (`range O = 4;`) or of unions declared before it: `range P = O + V;`"),
                );
                ok = false;
                continue;
            }
            // No value may belong to two parts: a range (or a part of it) twice.
            if let Some(&dup) =
                parts.iter().find(|&&x| self.hir.offset_in(q, x).is_some() || self.hir.offset_in(x, q).is_some())
            {
                self.error(
                    Diagnostic::error(
                        "E0113",
                        format!("`{}` overlaps `{}` in the union `{}`", p.name, self.range_name(dup), d.name.name),
                        p.span.clone(),
                        "overlaps an earlier part",
                    )
                    .with_hint("the parts of a union are disjoint: each range (or a part of one) at most once"),
                );
                ok = false;
                continue;
            }
            parts.push(q);
        }
        if !ok {
            return;
        }
        let size = parts.iter().try_fold(0usize, |acc, &q| acc.checked_add(self.hir.ranges[q].size));
        match size {
            Some(n) => {
                self.hir.ranges[r].size = n;
                self.hir.ranges[r].parts = parts;
            }
            None => self.error(
                Diagnostic::error(
                    "E0103",
                    format!("the size of range `{}` is too large", d.name.name),
                    d.span.clone(),
                    "does not fit in 64 bits",
                )
                .with_hint(format!("the largest size tcc can represent is {}", usize::MAX)),
            ),
        }
    }

    /// A union whose parts are not filled in yet (declared later in the file).
    fn pending_union(&self, q: RangeId) -> bool {
        self.hir.ranges[q].parts.is_empty() && self.union_names.contains(&q)
    }

    /// The value of a range's (or dim's) size literal; 1 after reporting an error.
    fn range_size(&mut self, name: &ast::Ident, size: &ast::IntLit, what: &str) -> usize {
        match int_value(size) {
            IntVal::Ok(n) if n >= 1 => n,
            IntVal::Ok(_) | IntVal::Negative => {
                self.error(
                    Diagnostic::error(
                        "E0102",
                        format!("{what} `{}` must have a size ≥ 1", name.name),
                        size.span.clone(),
                        format!("size {}", int_text(size)),
                    )
                    .with_hint(format!("a {what} is a set of N ≥ 1 index values, as in `{} = 64`", name.name)),
                );
                1
            }
            IntVal::TooLarge => {
                self.error(too_large(size, &format!("the size of {what} `{}`", name.name)));
                1
            }
        }
    }

    /// `index i, j : O;`
    pub(crate) fn index_decl(&mut self, d: &ast::IndexDecl) {
        let range = self.resolve_range(&d.range);
        let bad = !self.range_ok(range);
        for name in &d.names {
            let i = self.push_index(&name.name, range, name.span.clone(), bad);
            self.declare(Ns::Space, name, Sym::Index(i), "index");
        }
    }

    /// The range a name denotes, or the poison range after reporting why not.
    pub(crate) fn resolve_range(&mut self, id: &ast::Ident) -> RangeId {
        match self.lookup(Ns::Space, &id.name).map(|e| e.sym) {
            Some(Sym::Range(r)) => r,
            Some(Sym::Index(i)) => {
                let r = self.hir.indices[i].range;
                let d = Diagnostic::error(
                    "E0108",
                    format!("`{}` is an index, not a range", id.name),
                    id.span.clone(),
                    "expected a range",
                )
                .with_hint(format!(
                    "`{}` ranges over `{}`; write the range's name here",
                    id.name,
                    self.range_name(r)
                ));
                self.error(d);
                self.poison_range()
            }
            _ => {
                let hint = match self.suggest(Ns::Space, &id.name, |s| matches!(s, Sym::Range(_))) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("declare it first, as in `range {} = 10;`", id.name),
                };
                self.error(
                    Diagnostic::error(
                        "E0104",
                        format!("unknown range `{}`", id.name),
                        id.span.clone(),
                        "no range of this name",
                    )
                    .with_hint(hint),
                );
                self.poison_range()
            }
        }
    }

    /// E0105 with the most useful hint available.
    pub(crate) fn unknown_index_error(&mut self, id: &ast::Ident) {
        let hint = match self.suggest(Ns::Space, &id.name, |s| matches!(s, Sym::Index(_))) {
            Some(s) => format!("did you mean `{s}`?"),
            None if self.lookup(Ns::Tensor, &id.name).is_some() => {
                format!("`{}` is a tensor; indices are declared with `index {} : RANGE;`", id.name, id.name)
            }
            None => format!("declare it, as in `index {} : RANGE;`", id.name),
        };
        self.error(
            Diagnostic::error("E0105", format!("unknown index `{}`", id.name), id.span.clone(), "not declared")
                .with_hint(hint),
        );
    }

    /// `input tensor T[a,b] : f64 antisymmetric(a b);`
    pub(crate) fn tensor_decl(&mut self, d: &ast::TensorDecl) {
        let role = match d.role.as_ref().map(|r| r.kind) {
            None | Some(ast::RoleKind::Temporary) => hir::Role::Temporary,
            Some(ast::RoleKind::Input) => hir::Role::Input,
            Some(ast::RoleKind::Output) => hir::Role::Output,
            Some(ast::RoleKind::Param) => {
                if self.model.is_none() {
                    let span = d.role.as_ref().map_or(d.name.span.clone(), |r| r.span.clone());
                    self.error(
                        Diagnostic::error(
                            "E0109",
                            "`param` is only allowed inside a `model`",
                            span,
                            "outside any model",
                        )
                        .with_hint("outside a model, declare weights as `input tensor`"),
                    );
                }
                hir::Role::Param
            }
        };
        let elem = match d.elem.as_ref().map(|e| e.kind) {
            Some(ast::ElemKind::F32) => hir::ElemType::F32,
            None | Some(ast::ElemKind::F64) => hir::ElemType::F64,
            Some(ast::ElemKind::C64) => hir::ElemType::C64,
            Some(ast::ElemKind::C128) => hir::ElemType::C128,
            Some(ast::ElemKind::BF16) => hir::ElemType::BF16,
            Some(ast::ElemKind::F16) => hir::ElemType::F16,
        };
        let names: &[ast::Ident] = d.dims.as_deref().unwrap_or(&[]);
        let mut dims = Vec::with_capacity(names.len());
        for (k, id) in names.iter().enumerate() {
            let i = self.resolve_index(id);
            dims.push(self.hir.indices[i].range);
            if let Some(first) = names[..k].iter().find(|p| p.name == id.name) {
                self.error(
                    Diagnostic::error(
                        "E0201",
                        format!("index `{}` names two dimensions of `{}`", id.name, d.name.name),
                        id.span.clone(),
                        "used again here",
                    )
                    .with_label(first.span.clone(), "first used here")
                    .with_hint("each dimension needs its own index; declare another index over the same range"),
                );
            }
        }
        self.check_element_count(&d.name, &dims);
        let symmetry = self.symmetry(d, &dims);
        let pair_symmetry = self.pair_symmetry(d, &dims);
        let info = TensorInfo {
            name_span: d.name.span.clone(),
            dim_names: names.iter().map(|n| n.name.clone()).collect(),
            dim_spans: names.iter().map(|n| n.span.clone()).collect(),
            ..TensorInfo::default()
        };
        let mut tensor = hir::Tensor {
            name: d.name.name.clone(),
            role,
            elem,
            dims,
            symmetry,
            pair_symmetry,
            blocks: Vec::new(),
            span: d.span.clone(),
            model: self.model,
        };
        let group = self.check_symmetry_group(d, &tensor);
        if group.is_none() && !tensor.pair_symmetry.is_empty() {
            // Reported (E0416/E0417): left out so that nothing builds the group.
            tensor.pair_symmetry.clear();
        }
        tensor.blocks = self.block_rules(d, &tensor, group);
        let t = self.push_tensor(tensor, info);
        if !self.declare(Ns::Tensor, &d.name, Sym::Tensor(t), "tensor") {
            // Unreachable by name: no warning about its uses.
            self.tensors[t].bad = true;
        }
    }

    /// E0110: a tensor whose element count overflows a machine word.
    pub(crate) fn check_element_count(&mut self, name: &ast::Ident, dims: &[RangeId]) {
        if !dims.iter().all(|&r| self.range_ok(r)) {
            return;
        }
        // A run-time range counts as 1 here: its size is checked when it is bound
        // (`sizes::bind_sizes`), not against an assumption.
        let count = dims.iter().try_fold(1usize, |acc, &r| {
            let range = &self.hir.ranges[r];
            acc.checked_mul(if range.is_runtime() { 1 } else { range.size })
        });
        if count.is_none() {
            self.error(
                Diagnostic::error(
                    "E0110",
                    format!("tensor `{}` has too many elements", name.name),
                    name.span.clone(),
                    "the product of its dimensions overflows 64 bits",
                )
                .with_hint("use smaller ranges, or split the tensor into blocks"),
            );
        }
    }

    /// Symmetry groups, by position; a group with any error is left out.
    fn symmetry(&mut self, d: &ast::TensorDecl, dims: &[RangeId]) -> Vec<hir::SymGroup> {
        let names: &[ast::Ident] = d.dims.as_deref().unwrap_or(&[]);
        let mut first_use: Vec<Option<crate::syntax::Span>> = vec![None; names.len()];
        let mut out = Vec::new();
        if names.is_empty() {
            if let Some(spec) = d.symmetry.first() {
                self.error(
                    Diagnostic::error(
                        "E0401",
                        format!("scalar `{}` cannot have symmetry", d.name.name),
                        spec.span.clone(),
                        "a scalar has no dimensions",
                    )
                    .with_hint(
                        "symmetry exchanges dimensions of a tensor; remove it, or declare the tensor with indices",
                    ),
                );
            }
            return out;
        }
        for spec in &d.symmetry {
            let kind = match spec.kind {
                ast::SymKind::Symmetric => hir::SymKind::Symmetric,
                ast::SymKind::Antisymmetric => hir::SymKind::Antisymmetric,
            };
            // Pair groups `((p q)(r s))` may overlap these: `storage::pair_symmetry`.
            for g in spec.groups.iter().filter(|g| !g.is_pair()) {
                let mut ok = true;
                let mut positions = Vec::new();
                for id in &g.indices {
                    let Some(p) = names.iter().position(|n| n.name == id.name) else {
                        let list: Vec<&str> = names.iter().map(|n| n.name.as_str()).collect();
                        let hint = format!("a group names dimensions of `{}[{}]`", d.name.name, list.join(","));
                        self.error(
                            Diagnostic::error(
                                "E0401",
                                format!("`{}` is not a dimension of `{}`", id.name, d.name.name),
                                id.span.clone(),
                                "not among its indices",
                            )
                            .with_hint(hint),
                        );
                        ok = false;
                        continue;
                    };
                    if let Some(first) = &first_use[p] {
                        self.error(
                            Diagnostic::error(
                                "E0404",
                                format!("index `{}` is in more than one symmetry group", id.name),
                                id.span.clone(),
                                "named again here",
                            )
                            .with_label(first.clone(), "first named here")
                            .with_hint(
                                "a dimension belongs to at most one group; merge the groups, as in `symmetric(p q r)`",
                            ),
                        );
                        ok = false;
                        continue;
                    }
                    first_use[p] = Some(id.span.clone());
                    positions.push(p);
                }
                if g.indices.len() < 2 {
                    self.error(
                        Diagnostic::error(
                            "E0403",
                            "a symmetry group needs at least two indices",
                            g.span.clone(),
                            "only one index",
                        )
                        .with_hint("list the dimensions that can be exchanged, as in `symmetric(p q)`"),
                    );
                    ok = false;
                }
                let ranges: Vec<RangeId> = positions.iter().map(|&p| dims[p]).filter(|&r| self.range_ok(r)).collect();
                if let Some(&r0) = ranges.first() {
                    if let Some(&r1) = ranges.iter().find(|&&r| r != r0) {
                        let msg = format!("ranges `{}` and `{}`", self.range_name(r0), self.range_name(r1));
                        self.error(
                            Diagnostic::error(
                                "E0402",
                                "the indices of a symmetry group have different ranges",
                                g.span.clone(),
                                msg,
                            )
                            .with_hint("only dimensions of the same range can be exchanged; split the group"),
                        );
                        ok = false;
                    }
                }
                if ok {
                    out.push(hir::SymGroup { kind, positions });
                }
            }
        }
        out
    }
}
