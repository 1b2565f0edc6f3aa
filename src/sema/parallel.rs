//! Processor grids and distribution hints.

use super::decls::{int_text, int_value, too_large, IntVal};
use super::hir;
use super::scope::{Ns, Sym};
use super::Ctx;
use crate::diag::Diagnostic;
use crate::syntax::{ast, Span};

impl Ctx {
    /// `grid G[4, 4, 2];`
    pub(crate) fn grid_decl(&mut self, g: &ast::GridDecl) {
        if g.dims.is_empty() {
            self.error(
                Diagnostic::error(
                    "E0502",
                    format!("grid `{}` has no dimensions", g.name.name),
                    g.span.clone(),
                    "empty grid",
                )
                .with_hint(format!(
                    "give the number of processes along each dimension, as in `grid {}[4, 2];`",
                    g.name.name
                )),
            );
        }
        let mut dims = Vec::with_capacity(g.dims.len());
        for l in &g.dims {
            dims.push(match int_value(l) {
                IntVal::Ok(n) if n >= 1 => n,
                IntVal::Ok(_) | IntVal::Negative => {
                    self.error(
                        Diagnostic::error(
                            "E0501",
                            "grid dimensions must be ≥ 1",
                            l.span.clone(),
                            format!("{} processes", int_text(l)),
                        )
                        .with_hint("each dimension counts processes; use 1 for a dimension that is not split"),
                    );
                    1
                }
                IntVal::TooLarge => {
                    self.error(too_large(l, "this grid dimension"));
                    1
                }
            });
        }
        if dims.iter().try_fold(1usize, |a, &n| a.checked_mul(n)).is_none() {
            self.error(
                Diagnostic::error(
                    "E0507",
                    format!("grid `{}` has too many processes", g.name.name),
                    g.span.clone(),
                    "the product overflows 64 bits",
                )
                .with_hint("use a grid of realistic size"),
            );
            dims.iter_mut().for_each(|d| *d = 1);
        }
        let id = self.hir.grids.next_id();
        self.hir.grids.push(hir::Grid { name: g.name.name.clone(), dims, span: g.span.clone() });
        self.declare(Ns::Grid, &g.name, Sym::Grid(id), "grid");
    }

    /// `distribute T2[a,b,i,j] over G as [a:0, b:1];`
    pub(crate) fn distribute(&mut self, d: &ast::DistributeDecl) {
        let t = match self.lookup(Ns::Tensor, &d.tensor.name.name).map(|e| e.sym) {
            Some(Sym::Tensor(t)) => t,
            _ => match self.known_unknown(Ns::Tensor, &d.tensor.name.name) {
                Some(Sym::Tensor(t)) => t,
                _ => self.unknown_tensor(&d.tensor.name, None),
            },
        };
        self.tensor_ref(&d.tensor, t);
        let names: &[ast::Ident] = d.tensor.indices.as_deref().unwrap_or(&[]);
        for (k, id) in names.iter().enumerate() {
            if let Some(first) = names[..k].iter().find(|p| p.name == id.name) {
                self.error(
                    Diagnostic::error(
                        "E0204",
                        format!("index `{}` names two dimensions of the distributed tensor", id.name),
                        id.span.clone(),
                        "repeated here",
                    )
                    .with_label(first.span.clone(), "first here")
                    .with_hint("name each dimension with its own index, so the mapping can refer to it"),
                );
            }
        }
        let grid = match self.lookup(Ns::Grid, &d.grid.name).map(|e| e.sym) {
            Some(Sym::Grid(g)) => Some(g),
            _ => {
                let hint = match self.suggest(Ns::Grid, &d.grid.name, |_| true) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("declare it, as in `grid {}[4, 4];`", d.grid.name),
                };
                self.error(
                    Diagnostic::error(
                        "E0111",
                        format!("unknown grid `{}`", d.grid.name),
                        d.grid.span.clone(),
                        "not declared",
                    )
                    .with_hint(hint),
                );
                None
            }
        };
        let rank = grid.map(|g| self.hir.grids[g].dims.len());
        let mut mapping = Vec::new();
        let mut used: Vec<(usize, usize, Span, Span)> = Vec::new();
        for (id, lit) in &d.mapping {
            let pos = names.iter().position(|n| n.name == id.name);
            if pos.is_none() {
                let list: Vec<&str> = names.iter().map(|n| n.name.as_str()).collect();
                self.error(
                    Diagnostic::error(
                        "E0503",
                        format!("`{}` is not an index of `{}` here", id.name, d.tensor.name.name),
                        id.span.clone(),
                        "not in the tensor's index list",
                    )
                    .with_hint(if list.is_empty() {
                        "a scalar has no dimensions to distribute; write `as []`".to_string()
                    } else {
                        format!("map one of the indices written after the tensor: {}", list.join(", "))
                    }),
                );
            }
            let dim = match (int_value(lit), rank) {
                (IntVal::Ok(v), Some(r)) if v < r => Some(v),
                (_, Some(r)) => {
                    let g = &self.hir.grids[grid.unwrap_or(hir::GridId::new(0))].name;
                    self.error(
                        Diagnostic::error(
                            "E0504",
                            format!("grid `{g}` has no dimension {}", int_text(lit)),
                            lit.span.clone(),
                            "no such grid dimension",
                        )
                        .with_hint(format!(
                            "`{g}` has {r} dimension{}, numbered 0 to {}",
                            if r == 1 { "" } else { "s" },
                            r.saturating_sub(1)
                        )),
                    );
                    None
                }
                _ => None,
            };
            if let (Some(p), Some(g)) = (pos, dim) {
                if let Some(prev) = used.iter().find(|u| u.0 == p) {
                    self.error(
                        Diagnostic::error(
                            "E0505",
                            format!("index `{}` is mapped twice", id.name),
                            id.span.clone(),
                            "mapped again here",
                        )
                        .with_label(prev.2.clone(), "first mapped here")
                        .with_hint("a tensor dimension is split over at most one grid dimension"),
                    );
                } else if let Some(prev) = used.iter().find(|u| u.1 == g) {
                    self.error(
                        Diagnostic::error(
                            "E0505",
                            format!("grid dimension {g} is used twice"),
                            lit.span.clone(),
                            "used again here",
                        )
                        .with_label(prev.3.clone(), "first used here")
                        .with_hint(
                            "each grid dimension splits at most one tensor dimension; choose another grid dimension",
                        ),
                    );
                } else {
                    used.push((p, g, id.span.clone(), lit.span.clone()));
                    mapping.push((p, g));
                }
            }
        }
        let Some(grid) = grid else { return };
        if !self.tensor_ok(t) {
            return;
        }
        if let Some(prev) = self.hir.distributions.iter().find(|x| x.tensor == t && x.grid == grid) {
            let prev = prev.span.clone();
            self.error(
                Diagnostic::error(
                    "E0506",
                    format!("`{}` is distributed over `{}` twice", d.tensor.name.name, d.grid.name),
                    d.span.clone(),
                    "second distribution",
                )
                .with_label(prev, "first distribution")
                .with_hint("give one distribution per tensor and grid; merge the mappings"),
            );
            return;
        }
        self.hir.distributions.push(hir::Distribution { tensor: t, grid, mapping, span: d.span.clone() });
    }
}
