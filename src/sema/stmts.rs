//! Units and statements: left-hand sides, tensor references (rank and ranges),
//! read-only tensors, reads of unwritten temporaries, and implicit model temporaries.

use super::exprs::Occ;
use super::hir::{self, IndexId, TensorId};
use super::scope::{Ns, Sym};
use super::{Ctx, TensorInfo, UnitState};
use crate::diag::Diagnostic;
use crate::syntax::{ast, Span};

impl Ctx {
    /// Checks a sequence of statements as one unit and adds it to the HIR.
    pub(crate) fn unit(&mut self, name: &str, kind: hir::UnitKind, stmts: &[&ast::Stmt], span: Span) -> hir::UnitId {
        self.unit = UnitState::default();
        let stmts = stmts.iter().map(|s| self.stmt(s)).collect();
        self.hir.units.push(hir::Unit { name: name.to_string(), kind, stmts, span, sliced: Vec::new() })
    }

    /// One statement of the current unit.
    pub(crate) fn stmt(&mut self, s: &ast::Stmt) -> hir::Stmt {
        let errors_before = self.error_count();
        let t = match self.lookup(Ns::Tensor, &s.lhs.name.name).map(|e| e.sym) {
            Some(Sym::Tensor(t)) => t,
            _ => match self.known_unknown(Ns::Tensor, &s.lhs.name.name) {
                Some(Sym::Tensor(t)) => t,
                _ if self.model.is_some() => self.implicit_temporary(&s.lhs),
                _ => self.unknown_tensor(&s.lhs.name, Some(&s.lhs)),
            },
        };
        let (lhs, occs) = self.tensor_ref(&s.lhs, t);

        let mut result: Vec<Occ> = Vec::new();
        for o in &occs {
            match result.iter().find(|r| r.idx == o.idx) {
                Some(first) if self.index_ok(o.idx) => {
                    let name = &self.hir.indices[o.idx].name;
                    let d = Diagnostic::error(
                        "E0204",
                        format!("index `{name}` appears twice on the left-hand side"),
                        o.span.clone(),
                        "repeated here",
                    )
                    .with_label(first.span.clone(), "first here")
                    .with_hint("left-hand side indices must be distinct; to use a diagonal, write it on the right: `d[i] = A[i,i];`");
                    self.error(d);
                }
                Some(_) => {}
                None => result.push(o.clone()),
            }
        }

        if self.tensor_ok(t) && self.hir.tensors[t].role.is_read_only() {
            let ten = &self.hir.tensors[t];
            let role = if ten.role == hir::Role::Param { "parameter" } else { "input" };
            let d = Diagnostic::error(
                "E0301",
                format!("cannot assign to {role} `{}`", ten.name),
                s.lhs.span.clone(),
                format!("`{}` is read-only", ten.name),
            )
            .with_label(
                self.tensors[t].name_span.clone(),
                format!("declared as {} here", if role == "input" { "an input" } else { "a parameter" }),
            )
            .with_hint(format!("{role}s are read-only; store the result in an `output tensor` or a temporary"));
            self.error(d);
        }

        self.quiet_sums = self.error_count() > errors_before;
        let rhs = self.expr(&s.rhs, &result, true);
        self.quiet_sums = false;
        let clean = self.error_count() == errors_before;

        let accumulate = s.op == ast::AssignOp::AddAssign;
        if self.tensor_ok(t) {
            if let Some(prev) = self.unit.unread_write(t).clone() {
                // `=` into a slice (`F[o,v]` of `F[p,q]`) keeps the rest of the tensor.
                if !accumulate && clean && !self.hir.is_slice(&lhs) {
                    let name = self.hir.tensors[t].name.clone();
                    self.diags.push(
                        Diagnostic::warning(
                            "W0302",
                            format!("`{name}` is overwritten before its value is used"),
                            s.op_span.clone(),
                            "`=` replaces the whole tensor",
                        )
                        .with_label(prev, "the value written here is lost")
                        .with_hint("use `+=` to add to it, or remove the earlier statement"),
                    );
                }
            }
            *self.unit.unread_write(t) = Some(s.lhs.span.clone());
            *self.unit.written(t) = true;
            self.tensors[t].written = true;
        }
        hir::Stmt { lhs, accumulate, rhs, span: s.span.clone() }
    }

    /// A tensor first assigned in a model layer: its shape is the left-hand side's.
    fn implicit_temporary(&mut self, lhs: &ast::TensorRef) -> TensorId {
        let idents: &[ast::Ident] = lhs.indices.as_deref().unwrap_or(&[]);
        let mut dims = Vec::with_capacity(idents.len());
        for id in idents {
            let i = self.resolve_index(id);
            dims.push(self.hir.indices[i].range);
        }
        self.check_element_count(&lhs.name, &dims);
        let t = self.push_tensor(
            hir::Tensor {
                name: lhs.name.name.clone(),
                role: hir::Role::Temporary,
                elem: hir::ElemType::F32,
                dims,
                symmetry: Vec::new(),
                pair_symmetry: Vec::new(),
                blocks: Vec::new(),
                span: lhs.span.clone(),
                model: self.model,
            },
            TensorInfo {
                name_span: lhs.name.span.clone(),
                dim_names: idents.iter().map(|i| i.name.clone()).collect(),
                dim_spans: idents.iter().map(|i| i.span.clone()).collect(),
                implicit: true,
                ..TensorInfo::default()
            },
        );
        self.declare(Ns::Tensor, &lhs.name, Sym::Tensor(t), "tensor");
        t
    }

    /// E0106 and a placeholder tensor, so that the name is reported only once here.
    pub(crate) fn unknown_tensor(&mut self, id: &ast::Ident, lhs: Option<&ast::TensorRef>) -> TensorId {
        let hint = match self.suggest(Ns::Tensor, &id.name, |_| true) {
            Some(s) => format!("did you mean `{s}`?"),
            None => {
                let dims = lhs
                    .and_then(|l| l.indices.as_ref())
                    .map(|v| format!("[{}]", v.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(",")));
                match (lhs, self.lookup(Ns::Space, &id.name)) {
                    (_, Some(_)) => format!(
                        "`{}` is an index or range; a factor must be a tensor, such as `A[{}]`",
                        id.name, id.name
                    ),
                    (Some(_), None) => {
                        format!("declare it, as in `output tensor {}{} : f64;`", id.name, dims.unwrap_or_default())
                    }
                    (None, None) => format!("declare it, as in `input tensor {}[...] : f64;`", id.name),
                }
            }
        };
        self.error(
            Diagnostic::error("E0106", format!("unknown tensor `{}`", id.name), id.span.clone(), "not declared")
                .with_hint(hint),
        );
        let t = self.push_tensor(
            hir::Tensor {
                name: id.name.clone(),
                role: hir::Role::Temporary,
                elem: hir::ElemType::F64,
                dims: Vec::new(),
                symmetry: Vec::new(),
                pair_symmetry: Vec::new(),
                blocks: Vec::new(),
                span: id.span.clone(),
                model: self.model,
            },
            TensorInfo { name_span: id.span.clone(), bad: true, ..TensorInfo::default() },
        );
        self.mark_unknown(Ns::Tensor, &id.name, Sym::Tensor(t));
        t
    }

    /// The tensor a name on the right-hand side denotes (reported once if unknown).
    fn lookup_read(&mut self, id: &ast::Ident) -> TensorId {
        match self.lookup(Ns::Tensor, &id.name).map(|e| e.sym) {
            Some(Sym::Tensor(t)) => t,
            _ => match self.known_unknown(Ns::Tensor, &id.name) {
                Some(Sym::Tensor(t)) => t,
                _ => self.unknown_tensor(id, None),
            },
        }
    }

    /// A tensor read on a right-hand side: checks the reference and that a
    /// temporary was written earlier in this unit.
    pub(crate) fn read(&mut self, r: &ast::TensorRef) -> (hir::TensorRef, Vec<Occ>) {
        let t = self.read_tensor(&r.name, &r.span);
        self.tensor_ref(r, t)
    }

    /// The tensor `name` read at `span`: looked up, marked read, and checked to be
    /// written before when it is a temporary (E0302).
    pub(crate) fn read_tensor(&mut self, name: &ast::Ident, span: &Span) -> TensorId {
        let r = ast::TensorRef { name: name.clone(), indices: None, span: span.clone() };
        let t = self.lookup_read(&r.name);
        if self.tensor_ok(t) {
            self.tensors[t].read = true;
            *self.unit.unread_write(t) = None;
            if self.hir.tensors[t].role == hir::Role::Temporary && !*self.unit.written(t) && !*self.unit.reported(t) {
                *self.unit.reported(t) = true;
                let name = self.hir.tensors[t].name.clone();
                self.error(
                    Diagnostic::error(
                        "E0302",
                        format!("temporary `{name}` is read before it is written"),
                        r.span.clone(),
                        "read here",
                    )
                    .with_label(
                        self.tensors[t].name_span.clone(),
                        if self.tensors[t].implicit { "created by this assignment" } else { "declared here" },
                    )
                    .with_hint(format!(
                        "assign `{name}` in an earlier statement of this program (temporaries start empty in each program), or declare it as an `input`"
                    )),
                );
            }
        }
        t
    }

    /// Resolves a reference's indices and checks them against the tensor's rank
    /// and the range of each dimension.
    pub(crate) fn tensor_ref(&mut self, r: &ast::TensorRef, t: TensorId) -> (hir::TensorRef, Vec<Occ>) {
        let idents: &[ast::Ident] = r.indices.as_deref().unwrap_or(&[]);
        let occs: Vec<Occ> =
            idents.iter().map(|id| Occ { idx: self.resolve_index(id), span: id.span.clone() }).collect();
        if self.tensor_ok(t) {
            let rank = self.hir.tensors[t].dims.len();
            if occs.len() != rank {
                self.rank_error(r, t);
            } else {
                for (k, o) in occs.iter().enumerate() {
                    let (want, have) = (self.hir.tensors[t].dims[k], self.hir.indices[o.idx].range);
                    // An index over a part of a union names a slice of it.
                    let slice = self.hir.offset_in(have, want).is_some();
                    if !slice && self.range_ok(want) && self.range_ok(have) {
                        self.range_error(t, k, o);
                    }
                }
            }
        }
        let refr = hir::TensorRef { tensor: t, indices: occs.iter().map(|o| o.idx).collect(), span: r.span.clone() };
        (refr, occs)
    }

    /// E0202: a reference with the wrong number of indices.
    pub(crate) fn rank_error(&mut self, r: &ast::TensorRef, t: TensorId) {
        let (ten, info) = (&self.hir.tensors[t], &self.tensors[t]);
        let rank = ten.dims.len();
        let n = r.indices.as_ref().map_or(0, |v| v.len());
        let (message, label) = if rank == 0 {
            (format!("`{}` is a scalar but is written with indices", ten.name), format!("{} here", indices(n)))
        } else if r.indices.is_none() {
            (
                format!("`{}` has {} but is written without indices", ten.name, dimensions(rank)),
                "no indices".to_string(),
            )
        } else {
            (
                format!("`{}` has {} but is written with {}", ten.name, dimensions(rank), indices(n)),
                format!("{} here", indices(n)),
            )
        };
        let hint = if rank == 0 {
            format!("write it as `{}` (a scalar takes no indices)", ten.name)
        } else {
            format!("write one index per dimension, as in `{}[{}]`", ten.name, info.dim_names.join(","))
        };
        let declared = match (rank, info.implicit) {
            (0, _) => "declared as a scalar here".to_string(),
            (_, true) => format!("created with {} here", dimensions(rank)),
            (_, false) => format!("declared with {} here", dimensions(rank)),
        };
        let d = Diagnostic::error("E0202", message, r.span.clone(), label)
            .with_label(info.name_span.clone(), declared)
            .with_hint(hint);
        self.error(d);
    }

    /// E0203: an index whose range differs from the dimension's.
    pub(crate) fn range_error(&mut self, t: TensorId, k: usize, o: &Occ) {
        let (ten, info) = (&self.hir.tensors[t], &self.tensors[t]);
        let idx = &self.hir.indices[o.idx];
        let want = self.range_name(ten.dims[k]).to_string();
        let have = self.range_name(idx.range).to_string();
        let example = info.dim_names.get(k).cloned().unwrap_or_default();
        let mut d = Diagnostic::error(
            "E0203",
            format!(
                "index `{}` ranges over `{have}`, but dimension {} of `{}` ranges over `{want}`",
                idx.name,
                k + 1,
                ten.name
            ),
            o.span.clone(),
            format!("`{}` : {have}", idx.name),
        )
        .with_hint(format!("use an index over `{want}` here, such as `{example}`"));
        if let Some(s) = info.dim_spans.get(k) {
            d = d.with_label(s.clone(), format!("this dimension ranges over `{want}`"));
        }
        self.error(d);
    }

    /// The index a name denotes; an unknown name (or a range written where an index
    /// belongs) is reported once per scope and becomes a placeholder index.
    pub(crate) fn resolve_index(&mut self, id: &ast::Ident) -> IndexId {
        match self.lookup(Ns::Space, &id.name).map(|e| e.sym) {
            Some(Sym::Index(i)) => return i,
            _ => {
                if let Some(Sym::Index(i)) = self.known_unknown(Ns::Space, &id.name) {
                    return i;
                }
            }
        }
        if let Some(Sym::Range(r)) = self.lookup(Ns::Space, &id.name).map(|e| e.sym) {
            let example = self
                .hir
                .indices
                .iter_enumerated()
                .find(|(i, x)| x.range == r && self.index_ok(*i))
                .map(|(_, x)| format!("use an index over `{}` here, such as `{}`", id.name, x.name))
                .unwrap_or_else(|| {
                    format!(
                        "declare an index over it (`index {} : {};`) and write that here",
                        id.name.to_lowercase(),
                        id.name
                    )
                });
            self.error(
                Diagnostic::error(
                    "E0108",
                    format!("`{}` is a range, not an index", id.name),
                    id.span.clone(),
                    "expected an index",
                )
                .with_hint(example),
            );
        } else {
            self.unknown_index_error(id);
        }
        let range = self.poison_range();
        let i = self.push_index(&id.name, range, id.span.clone(), true);
        self.mark_unknown(Ns::Space, &id.name, Sym::Index(i));
        i
    }
}

/// "1 index", "3 indices".
fn indices(n: usize) -> String {
    format!("{n} {}", if n == 1 { "index" } else { "indices" })
}

/// "1 dimension", "3 dimensions".
fn dimensions(n: usize) -> String {
    format!("{n} dimension{}", if n == 1 { "" } else { "s" })
}
