//! `model` blocks: local dims, indices and tensors, layers (one unit per model),
//! and the `parallel { ... }` hints.

use super::decls::{int_text, int_value, too_large, IntVal};
use super::hir::{self, RangeId};
use super::scope::{closest, Names, Ns, Sym};
use super::Ctx;
use crate::diag::Diagnostic;
use crate::syntax::{ast, Span};

const KEYS: [&str; 6] = ["data", "tensor", "sequence", "expert", "pipeline", "zero"];

impl Ctx {
    pub(crate) fn model_block(&mut self, m: &ast::ModelBlock) {
        let id = self.hir.models.next_id();
        self.model = Some(id);
        self.local = Some(Names::default());

        let mut dims = Vec::new();
        for it in &m.items {
            if let ast::ModelItem::Dims(d) = it {
                for (name, size) in &d.dims {
                    dims.push(self.range_decl(name, Some(size)));
                }
            }
        }
        for it in &m.items {
            if let ast::ModelItem::Index(d) = it {
                self.index_decl(d);
            }
        }
        for it in &m.items {
            if let ast::ModelItem::Tensor(d) = it {
                self.tensor_decl(d);
            }
        }

        // All layers form one unit; each layer is a range of its statements.
        let mut layers: Vec<hir::Layer> = Vec::new();
        let mut layer_names: Vec<Span> = Vec::new();
        let mut stmts = Vec::new();
        self.unit = Default::default();
        for it in &m.items {
            let ast::ModelItem::Layer(l) = it else { continue };
            if let Some(k) = layers.iter().position(|x| x.name == l.name.name) {
                self.error(
                    Diagnostic::error(
                        "E0101",
                        format!("layer `{}` is declared twice", l.name.name),
                        l.name.span.clone(),
                        "declared again here",
                    )
                    .with_label(layer_names[k].clone(), "first declared here")
                    .with_hint("give each layer of a model its own name"),
                );
            }
            let start = stmts.len();
            for item in &l.items {
                if let ast::Item::Stmt(s) = item {
                    stmts.push(self.stmt(s));
                }
            }
            layers.push(hir::Layer { name: l.name.name.clone(), stmts: start..stmts.len(), span: l.span.clone() });
            layer_names.push(l.name.span.clone());
        }
        let unit = self.hir.units.next_id();
        self.hir.units.push(hir::Unit {
            name: m.name.name.clone(),
            kind: hir::UnitKind::Model(id),
            stmts,
            span: m.span.clone(),
            sliced: Vec::new(),
        });

        let mut parallel = hir::ParallelHints::default();
        let mut seen: Vec<(String, Span)> = Vec::new();
        for it in &m.items {
            if let ast::ModelItem::Parallel(p) = it {
                parallel.span.get_or_insert(p.span.clone());
                for e in &p.entries {
                    self.parallel_entry(e, &dims, &mut parallel, &mut seen);
                }
            }
        }
        self.expert_divides(&dims, &parallel, &seen);

        self.hir.models.push(hir::Model {
            name: m.name.name.clone(),
            dims,
            layers,
            parallel,
            unit,
            span: m.span.clone(),
        });
        self.model = None;
        self.local = None;
    }

    fn parallel_entry(
        &mut self,
        e: &ast::ParallelEntry,
        dims: &[RangeId],
        hints: &mut hir::ParallelHints,
        seen: &mut Vec<(String, Span)>,
    ) {
        let key = e.key.name.as_str();
        if !KEYS.contains(&key) {
            let hint = match closest(key, KEYS) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("the strategies are {}", KEYS.join(", ")),
            };
            self.error(
                Diagnostic::error(
                    "E0601",
                    format!("unknown parallel strategy `{key}`"),
                    e.key.span.clone(),
                    "not a strategy",
                )
                .with_hint(hint),
            );
            return;
        }
        if let Some((_, prev)) = seen.iter().find(|(k, _)| k == key) {
            self.error(
                Diagnostic::error("E0608", format!("`{key}` is given twice"), e.key.span.clone(), "given again here")
                    .with_label(prev.clone(), "first given here")
                    .with_hint("give each strategy once per model"),
            );
            return;
        }
        seen.push((key.to_string(), e.key.span.clone()));
        if let (Some(on), false) = (&e.on, key == "tensor") {
            self.error(
                Diagnostic::error(
                    "E0607",
                    format!("`on` does not apply to `{key}`"),
                    on.span.clone(),
                    "only `tensor` takes `on DIM`",
                )
                .with_hint("remove `on ...`; only tensor parallelism splits a chosen model dimension"),
            );
        }
        match key {
            "sequence" => hints.sequence = self.sequence(&e.value),
            "zero" => hints.zero = self.zero_stage(&e.value),
            _ => {
                let n = self.degree(key, &e.value);
                match key {
                    "data" => hints.data = n,
                    "expert" => hints.expert = n,
                    "pipeline" => hints.pipeline = n,
                    _ => {
                        let on = e.on.as_ref().and_then(|d| self.model_dim(d, dims));
                        hints.tensor = n.map(|n| (n, on));
                    }
                }
            }
        }
    }

    /// A degree of parallelism: an integer ≥ 1.
    fn degree(&mut self, key: &str, v: &ast::ParallelValue) -> Option<usize> {
        let ast::ParallelValue::Int(l) = v else {
            self.error(
                Diagnostic::error(
                    "E0605",
                    format!("`{key}` takes a number of processes"),
                    v.span(),
                    "expected an integer",
                )
                .with_hint(format!("write `{key} = 4;`")),
            );
            return None;
        };
        self.positive(l, key)
    }

    fn positive(&mut self, l: &ast::IntLit, key: &str) -> Option<usize> {
        match int_value(l) {
            IntVal::Ok(n) if n >= 1 => Some(n),
            IntVal::TooLarge => {
                self.error(too_large(l, &format!("the degree of `{key}`")));
                None
            }
            _ => {
                self.error(
                    Diagnostic::error(
                        "E0602",
                        format!("the degree of `{key}` must be ≥ 1"),
                        l.span.clone(),
                        format!("{} processes", int_text(l)),
                    )
                    .with_hint("use 1 (or leave the entry out) for no parallelism of this kind"),
                );
                None
            }
        }
    }

    fn zero_stage(&mut self, v: &ast::ParallelValue) -> Option<u8> {
        match v {
            ast::ParallelValue::Int(l) => match int_value(l) {
                IntVal::Ok(n) if n <= 3 => Some(n as u8),
                _ => {
                    self.error(
                        Diagnostic::error(
                            "E0603",
                            format!("there is no ZeRO stage {}", int_text(l)),
                            l.span.clone(),
                            "expected 0, 1, 2 or 3",
                        )
                        .with_hint("ZeRO stages: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters"),
                    );
                    None
                }
            },
            _ => {
                self.error(
                    Diagnostic::error("E0603", "`zero` takes a stage number", v.span(), "expected 0, 1, 2 or 3")
                        .with_hint("write `zero = 1;` (stages 0 to 3)"),
                );
                None
            }
        }
    }

    /// `ulysses(N)` or `ring(N)`; a plain number is refused, to keep the style explicit.
    fn sequence(&mut self, v: &ast::ParallelValue) -> Option<(hir::SequenceStyle, usize)> {
        let hint = "write `sequence = ulysses(4);` (all-to-all over heads) or `sequence = ring(4);` (ring attention)";
        match v {
            ast::ParallelValue::Call { func, arg, .. } => {
                let style = match func.name.as_str() {
                    "ulysses" => hir::SequenceStyle::Ulysses,
                    "ring" => hir::SequenceStyle::Ring,
                    other => {
                        let h = match closest(other, ["ulysses", "ring"]) {
                            Some(s) => format!("did you mean `{s}`?"),
                            None => hint.to_string(),
                        };
                        self.error(
                            Diagnostic::error(
                                "E0604",
                                format!("unknown sequence-parallel style `{other}`"),
                                func.span.clone(),
                                "expected `ulysses` or `ring`",
                            )
                            .with_hint(h),
                        );
                        return None;
                    }
                };
                self.positive(arg, "sequence").map(|n| (style, n))
            }
            ast::ParallelValue::Int(_) => {
                self.error(
                    Diagnostic::error("E0604", "`sequence` needs a style", v.span(), "a degree without a style")
                        .with_hint(hint),
                );
                None
            }
            ast::ParallelValue::Name(n) => {
                self.error(
                    Diagnostic::error(
                        "E0604",
                        format!("`{}` needs a degree", n.name),
                        v.span(),
                        "expected `ulysses(N)` or `ring(N)`",
                    )
                    .with_hint(hint),
                );
                None
            }
        }
    }

    /// The dim named by `tensor = N on DIM`: one of this model's `dims`.
    fn model_dim(&mut self, id: &ast::Ident, dims: &[RangeId]) -> Option<RangeId> {
        if let Some(&r) = dims.iter().find(|&&r| self.hir.ranges[r].name == id.name) {
            return Some(r);
        }
        let names: Vec<&str> = dims.iter().map(|&r| self.hir.ranges[r].name.as_str()).collect();
        let hint = match self.lookup(Ns::Space, &id.name).map(|e| e.sym) {
            Some(Sym::Index(i)) => {
                format!(
                    "`{}` is an index over `{}`; name the dim: `on {}`",
                    id.name,
                    self.range_name(self.hir.indices[i].range),
                    self.range_name(self.hir.indices[i].range)
                )
            }
            _ => match closest(&id.name, names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None if names.is_empty() => "declare the model's dims, as in `dims hidden = 4096;`".to_string(),
                None => format!("this model's dims are {}", names.join(", ")),
            },
        };
        self.error(
            Diagnostic::error(
                "E0606",
                format!("`{}` is not a dim of this model", id.name),
                id.span.clone(),
                "expected one of the model's dims",
            )
            .with_hint(hint),
        );
        None
    }

    /// `expert = N` must divide the model's `experts` (or `expert`) dim.
    fn expert_divides(&mut self, dims: &[RangeId], hints: &hir::ParallelHints, seen: &[(String, Span)]) {
        let Some(n) = hints.expert else { return };
        let Some(&r) = dims.iter().find(|&&r| matches!(self.hir.ranges[r].name.as_str(), "experts" | "expert")) else {
            return;
        };
        let size = self.hir.ranges[r].size;
        if size.is_multiple_of(n) {
            return;
        }
        let span = seen.iter().find(|(k, _)| k == "expert").map(|(_, s)| s.clone()).unwrap_or_default();
        let range = &self.hir.ranges[r];
        let d = Diagnostic::error(
            "E0609",
            format!("expert degree {n} does not divide the {size} experts"),
            span,
            format!("{n} groups of experts"),
        )
        .with_label(range.span.clone(), format!("`{}` = {size}", range.name))
        .with_hint(format!("use a divisor of {size}, so that every process holds the same number of experts"));
        self.error(d);
    }
}
