//! Semantic analysis: AST → [`hir::Hir`], with every error found as a diagnostic.
//!
//! The pass is one context ([`Ctx`]) extended by one module per concern:
//! [`scope`] (name tables, suggestions), [`decls`] (ranges, indices, tensors,
//! symmetry), `storage` (tilings, pair symmetry, block rules), [`stmts`] (units,
//! statements, tensor references), [`exprs`]
//! (terms, coefficients, summation rules), [`parallel`] (grids, distributions) and
//! [`models`] (model blocks, parallel hints).
//!
//! Declarations are entered before any statement is checked, so their order in the
//! file does not matter; statements are checked in order (a temporary must be
//! written before it is read). Every error is reported, none stops the pass: a
//! declaration that fails is still entered (with a placeholder where needed), and
//! an unknown name is reported once per scope and then stands for a placeholder
//! that no later check complains about.

pub mod display;
pub mod hir;
pub mod sizes;

mod affine;
pub mod complex;
mod decls;
mod exprs;
pub mod half;
mod models;
mod parallel;
mod scope;
mod stmts;
mod storage;

use crate::diag::Diagnostic;
use crate::syntax::{ast, Span};
use hir::{IdVec, IndexId, ModelId, RangeId, TensorId};
use scope::{Entry, Names, Ns, Sym};

/// Checks a parsed file. The returned HIR is complete and valid only when no
/// diagnostic is an error; warnings may accompany a valid HIR.
/// `file_stem` names the unit formed by the file's top-level statements.
pub fn analyze(file: &ast::File, file_stem: &str) -> (hir::Hir, Vec<Diagnostic>) {
    let mut cx = Ctx::default();
    cx.file(file, file_stem);
    cx.unused_warnings();
    let complex = complex::check(&cx.hir);
    cx.diags.extend(complex);
    cx.diags.extend(half::check(&cx.hir));
    (cx.hir, cx.diags)
}

/// What the checker knows about a tensor beyond its HIR entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct TensorInfo {
    /// The declared name (or, for an implicit temporary, the left-hand side name).
    pub name_span: Span,
    /// The index names of the declaration, for hints like "write it as `A[p,q]`".
    pub dim_names: Vec<String>,
    pub dim_spans: Vec<Span>,
    /// A placeholder for an unknown name: no check looks at it.
    pub bad: bool,
    pub implicit: bool,
    pub read: bool,
    pub written: bool,
}

/// Per-unit state for the order-dependent checks.
#[derive(Debug, Default)]
pub(crate) struct UnitState {
    /// Tensors written by an earlier statement of this unit.
    pub written: Vec<bool>,
    /// Temporaries already reported as read before written.
    pub reported: Vec<bool>,
    /// Tensors whose last write has not been read yet, with that write's span.
    pub unread_write: Vec<Option<Span>>,
}

impl UnitState {
    fn flag(v: &mut Vec<bool>, t: TensorId) -> &mut bool {
        if v.len() <= t.index() {
            v.resize(t.index() + 1, false);
        }
        &mut v[t.index()]
    }
    pub fn written(&mut self, t: TensorId) -> &mut bool {
        Self::flag(&mut self.written, t)
    }
    pub fn reported(&mut self, t: TensorId) -> &mut bool {
        Self::flag(&mut self.reported, t)
    }
    pub fn unread_write(&mut self, t: TensorId) -> &mut Option<Span> {
        if self.unread_write.len() <= t.index() {
            self.unread_write.resize(t.index() + 1, None);
        }
        &mut self.unread_write[t.index()]
    }
}

/// The most "did you mean" searches in one file (see [`Ctx::suggestions`]).
pub(crate) const MAX_SUGGESTIONS: usize = 1000;
/// The most names those searches compare in one file, all searches together
/// (1000 searches among 16000 names took 6 s; see [`Ctx::suggestions`]).
pub(crate) const MAX_SUGGESTION_NAMES: usize = 2_000_000;

#[derive(Debug, Default)]
pub(crate) struct Ctx {
    pub hir: hir::Hir,
    pub diags: Vec<Diagnostic>,
    /// The file's names.
    pub top: Names,
    /// The names local to the model being checked, if any.
    pub local: Option<Names>,
    /// The model being checked, if any.
    pub model: Option<ModelId>,
    pub tensors: IdVec<TensorId, TensorInfo>,
    /// Parallel to `hir.indices`: placeholders for unknown names.
    pub bad_index: IdVec<IndexId, bool>,
    /// The range standing for "unknown": dimensions with it are never checked.
    pub poison: Option<RangeId>,
    /// "Did you mean" searches made so far, and the names they compared: each
    /// scans every visible name of its namespace, so a file of thousands of
    /// unknown names stops suggesting after [`MAX_SUGGESTIONS`] searches or
    /// [`MAX_SUGGESTION_NAMES`] names (checking it stays linear).
    pub suggestions: std::cell::Cell<usize>,
    pub suggestion_names: std::cell::Cell<usize>,
    /// How many of `diags` [`Ctx::error_count`] has counted, and the errors among them.
    pub errors_seen: std::cell::Cell<(usize, usize)>,
    pub unit: UnitState,
    /// Set while checking the right-hand side of a statement whose left-hand side
    /// had an error: its summation rules would only repeat that error.
    pub quiet_sums: bool,
    /// While checking a function's argument (not wrapped in parentheses): the
    /// function's name and the call's span, for W0303.
    pub inside_call: Option<(String, Span)>,
    /// Ranges declared as unions (`range P = O + V;`).
    pub union_names: Vec<RangeId>,
}

impl Ctx {
    pub fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// The errors among `diags`, counted incrementally: diagnostics are only
    /// appended while checking, and a scan of all of them per statement made
    /// checking quadratic in the number of errors (70,000 errors: 17 s).
    pub fn error_count(&self) -> usize {
        let (mut seen, mut errors) = self.errors_seen.get();
        if seen > self.diags.len() {
            (seen, errors) = (0, 0);
        }
        errors += self.diags[seen..].iter().filter(|d| d.is_error()).count();
        self.errors_seen.set((self.diags.len(), errors));
        errors
    }

    fn scope_mut(&mut self) -> &mut Names {
        match &mut self.local {
            Some(l) => l,
            None => &mut self.top,
        }
    }

    /// Looks a name up in the current model (if any), then in the file.
    pub fn lookup(&self, ns: Ns, name: &str) -> Option<Entry> {
        self.local.as_ref().and_then(|l| l.get(ns, name)).or_else(|| self.top.get(ns, name)).cloned()
    }

    /// The placeholder for a name already reported unknown in this scope.
    pub fn known_unknown(&self, ns: Ns, name: &str) -> Option<Sym> {
        match &self.local {
            Some(l) => l.unknown(ns, name),
            None => self.top.unknown(ns, name),
        }
    }

    pub fn mark_unknown(&mut self, ns: Ns, name: &str, placeholder: Sym) {
        self.scope_mut().mark_unknown(ns, name, placeholder);
    }

    /// Enters a name in the current scope; a name already visible is an error
    /// (E0101) and the first declaration stays in force.
    pub fn declare(&mut self, ns: Ns, id: &ast::Ident, sym: Sym, what: &str) -> bool {
        if let Some(prev) = self.lookup(ns, &id.name) {
            let in_top = self.local.is_some() && self.local.as_ref().and_then(|l| l.get(ns, &id.name)).is_none();
            let mut d = if in_top {
                Diagnostic::error(
                    "E0101",
                    format!("{what} `{}` is already declared outside this model", id.name),
                    id.span.clone(),
                    "declared again here",
                )
                .with_hint("a model sees the file's names and cannot redeclare them; rename this one")
            } else {
                Diagnostic::error(
                    "E0101",
                    format!("{what} `{}` is declared twice", id.name),
                    id.span.clone(),
                    "declared again here",
                )
                .with_hint("rename one of them, or remove the second declaration")
            };
            match prev.span {
                Some(s) => d = d.with_label(s, "first declared here"),
                None => {
                    d.message = format!("{what} `{}` has the name of the file's own program", id.name);
                    d.hint = Some(format!(
                        "the statements at the top level of this file form a program named `{}`; rename this {what}",
                        id.name
                    ));
                }
            }
            self.error(d);
            if !in_top {
                return false;
            }
            // A model-local redeclaration is what the model's statements mean:
            // let it shadow, so that they are not checked against the outer one.
        }
        self.scope_mut().insert(ns, &id.name, Entry { sym, span: Some(id.span.clone()) });
        true
    }

    /// A close visible name of the given namespace satisfying `keep`.
    pub fn suggest(&self, ns: Ns, name: &str, keep: impl Fn(Sym) -> bool) -> Option<String> {
        if self.suggestions.get() >= MAX_SUGGESTIONS || self.suggestion_names.get() >= MAX_SUGGESTION_NAMES {
            return None;
        }
        self.suggestions.set(self.suggestions.get() + 1);
        let mut names: Vec<&str> = Vec::new();
        for scope in self.local.iter().chain(std::iter::once(&self.top)) {
            names.extend(scope.names(ns).filter(|(_, e)| keep(e.sym)).map(|(n, _)| n));
        }
        self.suggestion_names.set(self.suggestion_names.get() + names.len());
        scope::closest(name, names).map(str::to_string)
    }

    /// The range that stands for "unknown" (created on first need).
    pub fn poison_range(&mut self) -> RangeId {
        if let Some(r) = self.poison {
            return r;
        }
        let r = self.hir.ranges.push(hir::Range {
            name: "<unknown>".into(),
            size: 1,
            span: 0..0,
            model: None,
            size_kind: hir::SizeKind::Fixed,
            tiling: Default::default(),
            parts: Vec::new(),
        });
        self.poison = Some(r);
        r
    }

    pub fn range_ok(&self, r: RangeId) -> bool {
        self.poison != Some(r)
    }

    pub fn index_ok(&self, i: IndexId) -> bool {
        !self.bad_index.get(i).copied().unwrap_or(true)
    }

    pub fn tensor_ok(&self, t: TensorId) -> bool {
        self.tensors.get(t).is_some_and(|i| !i.bad)
    }

    pub fn push_index(&mut self, name: &str, range: RangeId, span: Span, bad: bool) -> IndexId {
        let i = self.hir.indices.push(hir::Index { name: name.to_string(), range, span, model: self.model });
        self.bad_index.push(bad);
        i
    }

    pub fn push_tensor(&mut self, t: hir::Tensor, info: TensorInfo) -> TensorId {
        let id = self.hir.tensors.push(t);
        self.tensors.push(info);
        id
    }

    pub fn range_name(&self, r: RangeId) -> &str {
        &self.hir.ranges[r].name
    }

    /// The whole file: declarations first (in a fixed order of kinds, so that use
    /// before declaration is fine), then units, then models.
    fn file(&mut self, file: &ast::File, stem: &str) {
        let items = &file.items;
        let mut unions = Vec::new();
        for it in items {
            if let ast::Item::Range(d) = it {
                if d.parts.is_empty() {
                    let r = self.range_decl(&d.name, d.size.as_ref());
                    self.range_tiling(r, d);
                } else {
                    unions.push((self.union_placeholder(&d.name), d));
                }
            }
        }
        // Unions once every name is known, in the order written.
        for (r, d) in unions {
            self.union_decl(r, d);
        }
        for it in items {
            if let ast::Item::Index(d) = it {
                self.index_decl(d);
            }
        }
        for it in items {
            if let ast::Item::Tensor(d) = it {
                self.tensor_decl(d);
            }
        }
        for it in items {
            if let ast::Item::Grid(d) = it {
                self.grid_decl(d);
            }
        }
        for it in items {
            if let ast::Item::Distribute(d) = it {
                self.distribute(d);
            }
        }

        let top: Vec<&ast::Stmt> =
            items.iter().filter_map(|i| if let ast::Item::Stmt(s) = i { Some(s) } else { None }).collect();
        if !top.is_empty() {
            self.top.insert(Ns::Unit, stem, Entry { sym: Sym::Unit, span: None });
        }
        for it in items {
            match it {
                ast::Item::Program(p) => {
                    self.declare(Ns::Unit, &p.name, Sym::Unit, "program");
                }
                ast::Item::Model(m) => {
                    self.declare(Ns::Unit, &m.name, Sym::Unit, "model");
                }
                _ => {}
            }
        }

        if let (Some(first), Some(last)) = (top.first(), top.last()) {
            let span = first.span.start..last.span.end;
            self.unit(stem, hir::UnitKind::Program, &top, span);
        }
        for it in items {
            if let ast::Item::Program(p) = it {
                let stmts: Vec<&ast::Stmt> =
                    p.items.iter().filter_map(|i| if let ast::Item::Stmt(s) = i { Some(s) } else { None }).collect();
                self.unit(&p.name.name, hir::UnitKind::Program, &stmts, p.span.clone());
            }
        }
        for it in items {
            if let ast::Item::Model(m) = it {
                self.model_block(m);
            }
        }
    }

    /// W0101/W0102: declared inputs nobody reads, outputs nobody writes.
    fn unused_warnings(&mut self) {
        for t in self.hir.tensors.ids() {
            let (info, ten) = (&self.tensors[t], &self.hir.tensors[t]);
            if info.bad || info.implicit {
                continue;
            }
            let d = match ten.role {
                hir::Role::Input | hir::Role::Param if !info.read => Diagnostic::warning(
                    "W0101",
                    format!(
                        "{} `{}` is never read",
                        if ten.role == hir::Role::Param { "parameter" } else { "input" },
                        ten.name
                    ),
                    info.name_span.clone(),
                    "declared here",
                )
                .with_hint("use it in a statement, or remove the declaration"),
                hir::Role::Output if !info.written => Diagnostic::warning(
                    "W0102",
                    format!("output `{}` is never written", ten.name),
                    info.name_span.clone(),
                    "declared here",
                )
                .with_hint(format!("assign it in a statement (`{} = ...;`), or remove the declaration", ten.name)),
                _ => continue,
            };
            self.diags.push(d);
        }
    }
}

#[cfg(test)]
mod tests;
