//! The symbol index: every declaration in a file and every name occurrence
//! resolved to the declaration it stands for — what go-to-definition,
//! find-references, hover, completion and semantic tokens read.
//!
//! It is built from the AST alone (so it works on files with errors) and follows
//! the scoping rules of `sema` (see `sema/scope.rs`):
//! - two scopes: the file, and each `model` block (which also sees the file's names,
//!   looking in the model first);
//! - four namespaces per scope: *spaces* (ranges, model `dims` and indices together),
//!   *tensors*, *grids* and *units* (programs and models);
//! - declarations are visible everywhere in their scope regardless of order; the
//!   first of two declarations of one name stays in force;
//! - inside a model, a tensor assigned without a declaration is an implicit
//!   temporary declared by its first assignment (in layer and statement order).
//!
//! It does not report errors: unresolved names are kept as occurrences without a
//! symbol, and `sema` says what is wrong with them.

use crate::syntax::{ast, Span};
use std::collections::HashMap;

pub type SymId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ns {
    Space,
    Tensor,
    Grid,
    Unit,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SymKind {
    /// `range N = 64;` or a model's `dims` entry; the size as written (`None` for
    /// `range N;`, a size given at run time).
    Range {
        size: Option<ast::IntLit>,
        dim: bool,
        /// `range P = O + V;`: the parts' names (a union has no size literal).
        parts: Vec<String>,
    },
    /// `index p : N;` — the range name as written.
    Index {
        range: ast::Ident,
    },
    Tensor(TensorSym),
    Grid {
        dims: Vec<ast::IntLit>,
    },
    Program,
    Model,
    /// A model's `layer` (not a name other code can refer to).
    Layer,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TensorSym {
    pub role: Option<ast::RoleKind>,
    pub elem: Option<ast::ElemKind>,
    /// `None` for a scalar.
    pub dims: Option<Vec<ast::Ident>>,
    /// The symmetry clauses as written, e.g. `symmetric(p q)(r s)`.
    pub symmetry: Vec<String>,
    /// A model temporary created by its first assignment.
    pub implicit: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Symbol {
    pub name: String,
    pub kind: SymKind,
    /// The name in its declaration.
    pub name_span: Span,
    /// The whole declaration (or statement, for an implicit temporary).
    pub decl_span: Span,
    /// The model whose scope holds it (index into `Index::models`), if any.
    pub model: Option<usize>,
}

impl Symbol {
    pub fn ns(&self) -> Option<Ns> {
        match self.kind {
            SymKind::Range { .. } | SymKind::Index { .. } => Some(Ns::Space),
            SymKind::Tensor(_) => Some(Ns::Tensor),
            SymKind::Grid { .. } => Some(Ns::Grid),
            SymKind::Program | SymKind::Model => Some(Ns::Unit),
            SymKind::Layer => None,
        }
    }

    pub fn kind_word(&self) -> &'static str {
        match &self.kind {
            SymKind::Range { dim: true, .. } => "dim",
            SymKind::Range { .. } => "range",
            SymKind::Index { .. } => "index",
            SymKind::Tensor(_) => "tensor",
            SymKind::Grid { .. } => "grid",
            SymKind::Program => "program",
            SymKind::Model => "model",
            SymKind::Layer => "layer",
        }
    }
}

/// What a name occurrence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OccKind {
    /// A name in some namespace: resolved (`Some`) or not.
    Name(Ns),
    /// An element-wise function name (`relu`, `exp`, ...), known or not.
    Func,
    /// A `parallel` entry key (`data`, `tensor`, ...) or a bare value (`ring`).
    Key,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence {
    pub span: Span,
    pub name: String,
    pub kind: OccKind,
    pub sym: Option<SymId>,
    pub is_decl: bool,
}

/// A statement and the unit it belongs to (for the optimizer's report).
#[derive(Debug, Clone, PartialEq)]
pub struct StmtInfo {
    pub span: Span,
    pub lhs_name_span: Span,
    pub op_span: Span,
    /// The unit's name: the file stem for top-level statements, else the program or model.
    pub unit: String,
    /// Position in the unit (as `sema` numbers them).
    pub pos: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelScope {
    pub name: String,
    pub span: Span,
}

#[derive(Debug, Default, Clone)]
pub struct Index {
    pub symbols: Vec<Symbol>,
    /// Sorted by span start.
    pub occurrences: Vec<Occurrence>,
    pub stmts: Vec<StmtInfo>,
    pub models: Vec<ModelScope>,
    /// Name tables: `tables[0]` is the file, `tables[m + 1]` model `m`.
    tables: Vec<HashMap<(Ns, String), SymId>>,
}

impl Index {
    pub fn build(file: &ast::File, stem: &str) -> Index {
        let mut b = Index { tables: vec![HashMap::new()], ..Index::default() };
        b.file(file, stem);
        b.occurrences.sort_by_key(|o| (o.span.start, o.span.end));
        b
    }

    /// Looks a name up from a scope (a model first, then the file).
    pub fn resolve(&self, ns: Ns, name: &str, model: Option<usize>) -> Option<SymId> {
        let key = (ns, name.to_string());
        model
            .and_then(|m| self.tables.get(m + 1))
            .and_then(|t| t.get(&key))
            .or_else(|| self.tables[0].get(&key))
            .copied()
    }

    /// Every symbol visible from a scope, local ones first (shadowed ones left out).
    pub fn visible(&self, model: Option<usize>) -> Vec<SymId> {
        let mut out: Vec<SymId> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let local = model.and_then(|m| self.tables.get(m + 1));
        for table in local.into_iter().chain(std::iter::once(&self.tables[0])) {
            let mut ids: Vec<(&(Ns, String), &SymId)> = table.iter().collect();
            ids.sort_by_key(|(k, _)| (*k).clone());
            for (k, &id) in ids {
                if seen.insert(k.clone()) {
                    out.push(id);
                }
            }
        }
        out
    }

    /// The model whose block contains `offset`, if any.
    pub fn model_at(&self, offset: usize) -> Option<usize> {
        self.models.iter().position(|m| m.span.start < offset && offset < m.span.end)
    }

    /// The occurrence under the cursor: one containing `offset`, or else one that
    /// ends exactly there (the cursor just after a name).
    pub fn occurrence_at(&self, offset: usize) -> Option<&Occurrence> {
        self.occurrences
            .iter()
            .find(|o| o.span.start <= offset && offset < o.span.end)
            .or_else(|| self.occurrences.iter().find(|o| o.span.end == offset && o.span.start < offset))
    }

    /// Every occurrence of a symbol (its declaration included), in source order.
    pub fn references(&self, sym: SymId) -> impl Iterator<Item = &Occurrence> {
        self.occurrences.iter().filter(move |o| o.sym == Some(sym))
    }

    pub fn stmt_at(&self, offset: usize) -> Option<&StmtInfo> {
        self.stmts.iter().find(|s| s.span.start <= offset && offset < s.span.end)
    }

    /// Applies `f` to every offset (to map spans of a repaired text back to the
    /// original one).
    pub fn remap(&mut self, f: &dyn Fn(usize) -> usize) {
        let m = |s: &mut Span| *s = f(s.start)..f(s.end).max(f(s.start));
        for s in &mut self.symbols {
            m(&mut s.name_span);
            m(&mut s.decl_span);
        }
        for o in &mut self.occurrences {
            m(&mut o.span);
        }
        for st in &mut self.stmts {
            m(&mut st.span);
            m(&mut st.lhs_name_span);
            m(&mut st.op_span);
        }
        for md in &mut self.models {
            m(&mut md.span);
        }
    }

    // ---- building ----

    fn scope(model: Option<usize>) -> usize {
        model.map_or(0, |m| m + 1)
    }

    fn declare(&mut self, id: &ast::Ident, kind: SymKind, decl_span: Span, model: Option<usize>) -> SymId {
        let sym = self.symbols.len();
        self.symbols.push(Symbol { name: id.name.clone(), kind, name_span: id.span.clone(), decl_span, model });
        let ns = self.symbols[sym].ns();
        if let Some(ns) = ns {
            self.tables[Self::scope(model)].entry((ns, id.name.clone())).or_insert(sym);
        }
        self.occurrences.push(Occurrence {
            span: id.span.clone(),
            name: id.name.clone(),
            kind: ns.map_or(OccKind::Key, OccKind::Name),
            sym: Some(sym),
            is_decl: true,
        });
        sym
    }

    fn refer(&mut self, ns: Ns, id: &ast::Ident, model: Option<usize>) {
        let sym = self.resolve(ns, &id.name, model);
        self.occurrences.push(Occurrence {
            span: id.span.clone(),
            name: id.name.clone(),
            kind: OccKind::Name(ns),
            sym,
            is_decl: false,
        });
    }

    fn other(&mut self, kind: OccKind, id: &ast::Ident) {
        self.occurrences.push(Occurrence {
            span: id.span.clone(),
            name: id.name.clone(),
            kind,
            sym: None,
            is_decl: false,
        });
    }

    fn tensor_decl(&mut self, d: &ast::TensorDecl, model: Option<usize>) {
        let symmetry = d
            .symmetry
            .iter()
            .map(|s| {
                let kw = match s.kind {
                    ast::SymKind::Symmetric => "symmetric",
                    ast::SymKind::Antisymmetric => "antisymmetric",
                };
                let groups: String = s
                    .groups
                    .iter()
                    .map(|g| {
                        let names = |g: &ast::SymGroup| {
                            format!("({})", g.indices.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(" "))
                        };
                        if g.is_pair() {
                            format!("({})", g.members.iter().map(names).collect::<String>())
                        } else {
                            names(g)
                        }
                    })
                    .collect();
                format!("{kw}{groups}")
            })
            .collect();
        let t = TensorSym {
            role: d.role.as_ref().map(|r| r.kind),
            elem: d.elem.as_ref().map(|e| e.kind),
            dims: d.dims.clone(),
            symmetry,
            implicit: false,
        };
        self.declare(&d.name, SymKind::Tensor(t), d.span.clone(), model);
    }

    fn tensor_decl_refs(&mut self, d: &ast::TensorDecl, model: Option<usize>) {
        for i in d.dims.iter().flatten() {
            self.refer(Ns::Space, i, model);
        }
        for s in &d.symmetry {
            for g in &s.groups {
                for i in &g.indices {
                    self.refer(Ns::Space, i, model);
                }
            }
        }
        for b in &d.blocks {
            if let ast::BlockBody::Names { upper, lower } = &b.body {
                for i in upper.iter().chain(lower.iter().flatten()) {
                    self.refer(Ns::Space, i, model);
                }
            }
        }
    }

    fn tensor_ref(&mut self, r: &ast::TensorRef, model: Option<usize>) {
        self.refer(Ns::Tensor, &r.name, model);
        for i in r.indices.iter().flatten() {
            self.refer(Ns::Space, i, model);
        }
    }

    /// The index names in a subscript `y+r` (hover and go-to-definition on them).
    fn sub_expr(&mut self, e: &ast::SubExpr, model: Option<usize>) {
        match e {
            ast::SubExpr::Name(n) => self.refer(Ns::Space, n, model),
            ast::SubExpr::Int(_) => {}
            ast::SubExpr::Sum { terms, .. } => terms.iter().for_each(|(_, t)| self.sub_expr(t, model)),
            ast::SubExpr::Product { factors, .. } => factors.iter().for_each(|f| self.sub_expr(f, model)),
            ast::SubExpr::Paren { arg, .. } => self.sub_expr(arg, model),
        }
    }

    fn expr(&mut self, e: &ast::Expr, model: Option<usize>) {
        for t in &e.terms {
            for (_, f) in &t.factors {
                match f {
                    ast::Factor::Number(_) => {}
                    ast::Factor::Tensor(r) => self.tensor_ref(r, model),
                    ast::Factor::Affine(a) => {
                        self.refer(Ns::Tensor, &a.name, model);
                        for s in &a.subs {
                            self.sub_expr(s, model);
                        }
                    }
                    ast::Factor::Call { func, arg, .. } => {
                        self.other(OccKind::Func, func);
                        self.expr(arg, model);
                    }
                    ast::Factor::Paren { expr, .. } => self.expr(expr, model),
                    ast::Factor::Apply { func, args, .. } => {
                        self.other(OccKind::Func, func);
                        for a in args {
                            self.expr(&a.expr, model);
                            if let Some((_, rhs)) = &a.cmp {
                                self.expr(rhs, model);
                            }
                        }
                    }
                }
            }
        }
    }

    fn stmt(&mut self, s: &ast::Stmt, model: Option<usize>, unit: &str, pos: usize) {
        self.tensor_ref(&s.lhs, model);
        self.expr(&s.rhs, model);
        self.stmts.push(StmtInfo {
            span: s.span.clone(),
            lhs_name_span: s.lhs.name.span.clone(),
            op_span: s.op_span.clone(),
            unit: unit.to_string(),
            pos,
        });
    }

    fn file(&mut self, file: &ast::File, stem: &str) {
        // Declarations of the file's scope first (their order does not matter).
        for it in &file.items {
            match it {
                ast::Item::Range(d) => {
                    self.declare(
                        &d.name,
                        SymKind::Range {
                            size: d.size.clone(),
                            dim: false,
                            parts: d.parts.iter().map(|p| p.name.clone()).collect(),
                        },
                        d.span.clone(),
                        None,
                    );
                }
                ast::Item::Index(d) => {
                    for n in &d.names {
                        self.declare(n, SymKind::Index { range: d.range.clone() }, d.span.clone(), None);
                    }
                }
                ast::Item::Tensor(d) => self.tensor_decl(d, None),
                ast::Item::Grid(d) => {
                    self.declare(&d.name, SymKind::Grid { dims: d.dims.clone() }, d.span.clone(), None);
                }
                ast::Item::Program(p) => {
                    self.declare(&p.name, SymKind::Program, p.span.clone(), None);
                }
                ast::Item::Model(m) => {
                    self.declare(&m.name, SymKind::Model, m.span.clone(), None);
                }
                ast::Item::Stmt(_) | ast::Item::Distribute(_) | ast::Item::Error(_) => {}
            }
        }
        // Each model's own names.
        let models: Vec<&ast::ModelBlock> =
            file.items.iter().filter_map(|i| if let ast::Item::Model(m) = i { Some(m) } else { None }).collect();
        for (k, m) in models.iter().enumerate() {
            self.models.push(ModelScope { name: m.name.name.clone(), span: m.span.clone() });
            self.tables.push(HashMap::new());
            self.model_decls(m, k);
        }
        // Then every reference.
        let mut top_pos = 0;
        for it in &file.items {
            match it {
                ast::Item::Index(d) => self.refer(Ns::Space, &d.range, None),
                ast::Item::Range(d) => d.parts.iter().for_each(|p| self.refer(Ns::Space, p, None)),
                ast::Item::Tensor(d) => self.tensor_decl_refs(d, None),
                ast::Item::Stmt(s) => {
                    self.stmt(s, None, stem, top_pos);
                    top_pos += 1;
                }
                ast::Item::Distribute(d) => {
                    self.tensor_ref(&d.tensor, None);
                    self.refer(Ns::Grid, &d.grid, None);
                    for (i, _) in &d.mapping {
                        self.refer(Ns::Space, i, None);
                    }
                }
                ast::Item::Program(p) => {
                    let mut pos = 0;
                    for it in &p.items {
                        self.nested_item(it, None, &p.name.name, &mut pos);
                    }
                }
                _ => {}
            }
        }
        for (k, m) in models.iter().enumerate() {
            self.model_refs(m, k);
        }
    }

    /// An item inside a `program` or `layer` block (statements; anything else the
    /// grammar may accept there is indexed as at the top level).
    fn nested_item(&mut self, it: &ast::Item, model: Option<usize>, unit: &str, pos: &mut usize) {
        match it {
            ast::Item::Stmt(s) => {
                self.stmt(s, model, unit, *pos);
                *pos += 1;
            }
            ast::Item::Tensor(d) => self.tensor_decl_refs(d, model),
            ast::Item::Index(d) => self.refer(Ns::Space, &d.range, model),
            _ => {}
        }
    }

    fn model_decls(&mut self, m: &ast::ModelBlock, k: usize) {
        let model = Some(k);
        for it in &m.items {
            match it {
                ast::ModelItem::Dims(d) => {
                    for (id, size) in &d.dims {
                        self.declare(
                            id,
                            SymKind::Range { size: Some(size.clone()), dim: true, parts: Vec::new() },
                            d.span.clone(),
                            model,
                        );
                    }
                }
                ast::ModelItem::Index(d) => {
                    for n in &d.names {
                        self.declare(n, SymKind::Index { range: d.range.clone() }, d.span.clone(), model);
                    }
                }
                ast::ModelItem::Tensor(d) => self.tensor_decl(d, model),
                ast::ModelItem::Layer(l) => {
                    self.declare(&l.name, SymKind::Layer, l.span.clone(), model);
                }
                ast::ModelItem::Parallel(_) | ast::ModelItem::Error(_) => {}
            }
        }
        // Implicit temporaries: the first assignment of an undeclared name.
        for it in &m.items {
            if let ast::ModelItem::Layer(l) = it {
                for s in l.items.iter().filter_map(|i| if let ast::Item::Stmt(s) = i { Some(s) } else { None }) {
                    if self.resolve(Ns::Tensor, &s.lhs.name.name, model).is_none() {
                        let t = TensorSym {
                            role: None,
                            elem: None,
                            dims: s.lhs.indices.clone(),
                            symmetry: Vec::new(),
                            implicit: true,
                        };
                        // Declared by the statement: the occurrence is added with the statement.
                        let sym = self.declare(&s.lhs.name, SymKind::Tensor(t), s.span.clone(), model);
                        self.occurrences.pop();
                        let _ = sym;
                    }
                }
            }
        }
    }

    fn model_refs(&mut self, m: &ast::ModelBlock, k: usize) {
        let model = Some(k);
        let mut pos = 0;
        for it in &m.items {
            match it {
                ast::ModelItem::Index(d) => self.refer(Ns::Space, &d.range, model),
                ast::ModelItem::Tensor(d) => self.tensor_decl_refs(d, model),
                ast::ModelItem::Layer(l) => {
                    for it in &l.items {
                        self.nested_item(it, model, &m.name.name, &mut pos);
                    }
                }
                ast::ModelItem::Parallel(p) => {
                    for e in &p.entries {
                        self.other(OccKind::Key, &e.key);
                        match &e.value {
                            ast::ParallelValue::Call { func, .. } => self.other(OccKind::Key, func),
                            ast::ParallelValue::Name(n) => self.other(OccKind::Key, n),
                            ast::ParallelValue::Int(_) => {}
                        }
                        if let Some(on) = &e.on {
                            self.refer(Ns::Space, on, model);
                        }
                    }
                }
                ast::ModelItem::Dims(_) | ast::ModelItem::Error(_) => {}
            }
        }
        // An implicit temporary's first assignment is its declaration.
        for o in self.occurrences.iter_mut() {
            if let Some(s) = o.sym {
                let sym = &self.symbols[s];
                if sym.model == model
                    && o.span == sym.name_span
                    && matches!(&sym.kind, SymKind::Tensor(t) if t.implicit)
                {
                    o.is_decl = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(src: &str) -> Index {
        let p = crate::syntax::parse(src);
        Index::build(&p.file, "t")
    }

    fn def_of(ix: &Index, src: &str, nth_occurrence_of: (&str, usize)) -> Option<Span> {
        let (name, n) = nth_occurrence_of;
        let off = src.match_indices(name).nth(n).unwrap().0;
        let o = ix.occurrence_at(off)?;
        o.sym.map(|s| ix.symbols[s].name_span.clone())
    }

    #[test]
    fn resolves_top_level_names_regardless_of_order() {
        let src = "C[i] = A[i,j] * 2;\ninput tensor A[i,j];\noutput tensor C[i];\nindex i, j : N;\nrange N = 4;\n";
        let ix = index(src);
        let decl_a = src.find("A[i,j];").unwrap();
        assert_eq!(def_of(&ix, src, ("A", 0)), Some(decl_a..decl_a + 1));
        let decl_n = src.rfind("N").unwrap();
        assert_eq!(def_of(&ix, src, ("N", 0)), Some(decl_n..decl_n + 1));
        let a = ix.occurrence_at(decl_a).unwrap().sym.unwrap();
        assert_eq!(ix.references(a).count(), 2);
    }

    #[test]
    fn models_see_the_file_and_shadow_it() {
        let src = "range N = 2; index i : N; tensor X[i];\n\
                   model m { dims N = 3; index j : N; input tensor X[j];\n\
                   layer l { Y[j] = X[j] * 2; Z[j] = Y[j]; } parallel { data = 2; tensor = 2 on N; } }";
        let ix = index(src);
        // `N` in `index j : N` is the model's dim (second N), not the file's range.
        let dim_n = src.match_indices("N").nth(2).unwrap().0;
        assert_eq!(def_of(&ix, src, ("N", 3)), Some(dim_n..dim_n + 1));
        // `on N` too
        assert_eq!(def_of(&ix, src, ("N", 4)), Some(dim_n..dim_n + 1));
        // Y is implicit, declared by its first assignment
        let y = src.find("Y[j] =").unwrap();
        let o = ix.occurrence_at(y).unwrap();
        assert!(o.is_decl);
        assert_eq!(def_of(&ix, src, ("Y", 1)), Some(y..y + 1));
        // X inside the model is the model's own X
        let x_local = src.match_indices("X").nth(1).unwrap().0;
        assert_eq!(def_of(&ix, src, ("X", 2)), Some(x_local..x_local + 1));
        assert_eq!(ix.stmts.len(), 2);
        assert_eq!(ix.stmts[1].unit, "m");
        assert_eq!(ix.stmts[1].pos, 1);
    }

    #[test]
    fn unknown_names_are_unresolved() {
        let src = "range N = 2; index i : N; output tensor R[i]; R[i] = Q[i];";
        let ix = index(src);
        let q = src.find("Q").unwrap();
        let o = ix.occurrence_at(q).unwrap();
        assert_eq!(o.sym, None);
    }
}
