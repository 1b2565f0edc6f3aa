//! The contraction graph of a term: one node per factor (its indices, their sizes,
//! its symmetry), one edge per pair of factors that share indices (labelled with
//! them). An index in three or more factors (a batch index on the left-hand side)
//! is a hyperedge, drawn as the edges between every pair of its factors. Calls and
//! parenthesised sums are opaque nodes over their `free` indices; their arguments
//! get graphs of their own.

use std::fmt;

use petgraph::graph::{NodeIndex, UnGraph};

use crate::sema::hir::{Expr, Factor, Hir, IndexId, SymKind, Term, UnitId};

use super::opmin::{Problem, SymSet};

#[derive(Debug, Clone)]
pub struct FactorNode {
    /// `T2[a,b,k,l]`, `relu(..)[t,f]`, `(..)[k,j]`.
    pub label: String,
    pub indices: Vec<IndexId>,
    pub sizes: Vec<usize>,
    /// Symmetry groups as index ids, e.g. `symmetric(p q)`.
    pub sym: Vec<(SymKind, Vec<IndexId>)>,
    pub opaque: bool,
}

#[derive(Debug, Clone)]
pub struct TermGraph {
    pub coef: f64,
    /// The term's result indices (the left-hand side, or a sub-expression's `free`).
    pub output: Vec<IndexId>,
    pub graph: UnGraph<FactorNode, Vec<IndexId>>,
    /// For each opaque factor (node position), the graphs of its argument's terms.
    pub inner: Vec<(usize, Vec<TermGraph>)>,
}

#[derive(Debug, Clone)]
pub struct StmtGraph {
    pub lhs: String,
    pub accumulate: bool,
    pub terms: Vec<TermGraph>,
}

#[derive(Debug, Clone)]
pub struct UnitGraph {
    pub name: String,
    pub stmts: Vec<StmtGraph>,
}

/// The TIR of a whole program; `Display` is `tcc opt --emit=tir`.
#[derive(Debug, Clone)]
pub struct Tir {
    pub units: Vec<UnitGraph>,
    index_names: Vec<String>,
}

/// Lowers every statement of every unit.
pub fn lower(hir: &Hir) -> Tir {
    let units = hir.units.ids().map(|u| lower_unit(hir, u)).collect();
    Tir { units, index_names: hir.indices.iter().map(|i| i.name.clone()).collect() }
}

fn lower_unit(hir: &Hir, u: UnitId) -> UnitGraph {
    let unit = &hir.units[u];
    let stmts = unit
        .stmts
        .iter()
        .map(|s| StmtGraph {
            lhs: ref_text(hir, &hir.tensors[s.lhs.tensor].name, &s.lhs.indices),
            accumulate: s.accumulate,
            terms: s.rhs.terms.iter().map(|t| term_graph(hir, t, &s.lhs.indices)).collect(),
        })
        .collect();
    UnitGraph { name: unit.name.clone(), stmts }
}

pub(crate) fn ref_text(hir: &Hir, name: &str, idx: &[IndexId]) -> String {
    if idx.is_empty() {
        return name.to_string();
    }
    let names: Vec<&str> = idx.iter().map(|&i| hir.indices[i].name.as_str()).collect();
    format!("{name}[{}]", names.join(","))
}

/// The symmetry groups of a factor as index-id sets (groups over a repeated index
/// are dropped).
pub(crate) fn factor_sym(hir: &Hir, f: &Factor) -> Vec<(SymKind, Vec<IndexId>)> {
    let Factor::Tensor(r) = f else { return Vec::new() };
    let mut out = Vec::new();
    for g in &hir.tensors[r.tensor].symmetry {
        let mut ids: Vec<IndexId> = g.positions.iter().filter_map(|&p| r.indices.get(p).copied()).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        // A group index that also sits at a position outside the group breaks it.
        let outside = r.indices.iter().enumerate().any(|(p, i)| !g.positions.contains(&p) && ids.contains(i));
        // Slices of a union over different parts (`F[o,v]`) are not exchanged.
        let one_range = ids.windows(2).all(|w| hir.indices[w[0]].range == hir.indices[w[1]].range);
        if ids.len() == n && n >= 2 && n == g.positions.len() && !outside && one_range {
            out.push((g.kind, ids));
        }
    }
    out
}

pub(crate) fn factor_label(hir: &Hir, f: &Factor) -> String {
    match f {
        Factor::Tensor(r) => ref_text(hir, &hir.tensors[r.tensor].name, &r.indices),
        Factor::Affine(a) => ref_text(hir, &format!("{}[..]", hir.tensors[a.tensor].name), &a.free),
        Factor::Call { func, free, .. } => ref_text(hir, &format!("{}(..)", func.name()), free),
        Factor::Sum { free, .. } => ref_text(hir, "(..)", free),
        Factor::Reduce { op, free, .. } => ref_text(hir, &format!("{}(..)", op.name()), free),
        Factor::Select { free, .. } => ref_text(hir, "where(..)", free),
    }
}

/// The graph of one term whose result has indices `output`.
pub fn term_graph(hir: &Hir, t: &Term, output: &[IndexId]) -> TermGraph {
    let mut graph = UnGraph::new_undirected();
    let mut inner = Vec::new();
    let mut nodes: Vec<NodeIndex> = Vec::new();
    for (k, f) in t.factors.iter().enumerate() {
        let indices = f.indices().to_vec();
        let sizes = indices.iter().map(|&i| hir.index_size(i)).collect();
        let opaque = !matches!(f, Factor::Tensor(_));
        nodes.push(graph.add_node(FactorNode {
            label: factor_label(hir, f),
            indices,
            sizes,
            sym: factor_sym(hir, f),
            opaque,
        }));
        if let Factor::Call { arg, free, .. } | Factor::Sum { arg, free, .. } = f {
            inner.push((k, arg.terms.iter().map(|t| term_graph(hir, t, free)).collect()));
        }
    }
    for x in 0..nodes.len() {
        for y in x + 1..nodes.len() {
            let (ix, iy) = (t.factors[x].indices(), t.factors[y].indices());
            let mut shared: Vec<IndexId> = ix.iter().copied().filter(|i| iy.contains(i)).collect();
            shared.dedup();
            let mut seen = Vec::new();
            shared.retain(|i| {
                if seen.contains(i) {
                    false
                } else {
                    seen.push(*i);
                    true
                }
            });
            if !shared.is_empty() {
                graph.add_edge(nodes[x], nodes[y], shared);
            }
        }
    }
    TermGraph { coef: t.coef, output: output.to_vec(), graph, inner }
}

impl TermGraph {
    /// The path-search problem of this term (opaque factors as tensors over their
    /// `free` indices) and the map from the problem's local index ids to index ids.
    pub fn problem(&self) -> (Problem, Vec<IndexId>) {
        let mut local: Vec<IndexId> = Vec::new();
        let mut sizes = Vec::new();
        let mut id = |i: IndexId, size: usize, local: &mut Vec<IndexId>| -> usize {
            if let Some(p) = local.iter().position(|&x| x == i) {
                p
            } else {
                local.push(i);
                sizes.push(size);
                local.len() - 1
            }
        };
        let mut inputs = Vec::new();
        let mut sym = Vec::new();
        for n in self.graph.node_indices() {
            let f = &self.graph[n];
            inputs.push(f.indices.iter().zip(&f.sizes).map(|(&i, &s)| id(i, s, &mut local)).collect::<Vec<_>>());
            sym.push(
                f.sym
                    .iter()
                    .map(|(kind, ids)| {
                        let mut ids: Vec<usize> =
                            ids.iter().map(|&i| local.iter().position(|&x| x == i).unwrap()).collect();
                        ids.sort_unstable();
                        SymSet { kind: *kind, ids }
                    })
                    .collect(),
            );
        }
        // Output indices appear in every term, hence already have ids.
        let output =
            self.output.iter().map(|&i| local.iter().position(|&x| x == i).unwrap_or(usize::MAX)).collect::<Vec<_>>();
        let output = output.into_iter().filter(|&x| x != usize::MAX).collect();
        (Problem { inputs, output, sizes, sym }, local)
    }

    /// Number of connected components of the factor graph.
    pub fn components(&self) -> usize {
        petgraph::algo::connected_components(&self.graph)
    }
}

fn write_term(f: &mut fmt::Formatter<'_>, t: &TermGraph, names: &[String], pad: &str) -> fmt::Result {
    let name = |i: &IndexId| names.get(i.index()).cloned().unwrap_or_else(|| format!("#{}", i.index()));
    let list = |v: &[IndexId]| v.iter().map(name).collect::<Vec<_>>().join(",");
    writeln!(
        f,
        "{pad}term coef {} -> [{}]: {} factors, {} component(s)",
        t.coef,
        list(&t.output),
        t.graph.node_count(),
        t.components()
    )?;
    for n in t.graph.node_indices() {
        let node = &t.graph[n];
        let dims: Vec<String> = node.indices.iter().zip(&node.sizes).map(|(i, s)| format!("{}:{s}", name(i))).collect();
        write!(f, "{pad}  n{} {} ({})", n.index(), node.label, dims.join(" "))?;
        for (kind, ids) in &node.sym {
            let k = if *kind == SymKind::Symmetric { "symmetric" } else { "antisymmetric" };
            write!(f, " {k}({})", ids.iter().map(name).collect::<Vec<_>>().join(" "))?;
        }
        writeln!(f)?;
    }
    for e in t.graph.edge_indices() {
        let (a, b) = t.graph.edge_endpoints(e).unwrap();
        writeln!(f, "{pad}  n{} -- n{} [{}]", a.index(), b.index(), list(&t.graph[e]))?;
    }
    for (k, terms) in &t.inner {
        writeln!(f, "{pad}  inside n{k}:")?;
        for it in terms {
            write_term(f, it, names, &format!("{pad}    "))?;
        }
    }
    Ok(())
}

impl fmt::Display for Tir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for u in &self.units {
            writeln!(f, "unit {}", u.name)?;
            for (k, s) in u.stmts.iter().enumerate() {
                writeln!(
                    f,
                    "  stmt {k}: {} {} {} term(s)",
                    s.lhs,
                    if s.accumulate { "+=" } else { "=" },
                    s.terms.len()
                )?;
                for t in &s.terms {
                    write_term(f, t, &self.index_names, "    ")?;
                }
            }
        }
        Ok(())
    }
}

/// Lowers one expression's terms (used by the rewrite for sub-expressions).
pub fn expr_graphs(hir: &Hir, e: &Expr, output: &[IndexId]) -> Vec<TermGraph> {
    e.terms.iter().map(|t| term_graph(hir, t, output)).collect()
}
