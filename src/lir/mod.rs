//! LIR: explicit loop nests over the statements of a unit, with one buffer per
//! tensor. Fusion (see [`fusion`]) shares outer loops between producer and consumer
//! statements so that a temporary only needs the slice the current iteration uses —
//! the FuseT / memory-minimization transformation.
//!
//! Semantics of a nest: a `Loop` binds an index to each of its values in turn; a
//! `Compute` runs one statement of the unit over all its indices *not* bound by
//! enclosing loops, always accumulating; a `Zero` clears the part of a buffer selected
//! by the enclosing loops (it realises `=` as "zero, then accumulate"). A buffer
//! stores a tensor's dimensions minus those fixed by the loops around all its users.

pub mod cost;
pub mod epilogue;
pub mod exec;
pub mod fusion;
pub mod slice;
pub mod tasks;
#[cfg(test)]
mod tests;

use crate::sema::hir::{Hir, IndexId, TensorId, UnitId};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Node {
    Loop {
        index: IndexId,
        extent: usize,
        body: Vec<Node>,
    },
    /// Clears what statement `stmt` (an `=`) is about to write, as selected by the loops.
    Zero {
        tensor: TensorId,
        stmt: usize,
    },
    Compute {
        stmt: usize,
    },
}

/// The storage of one tensor inside a nest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Buffer {
    pub tensor: TensorId,
    /// Positions of the tensor's dimensions that are stored; the others are fixed by
    /// an enclosing loop over `fixed[k].1` at position `fixed[k].0`.
    pub stored: Vec<usize>,
    pub fixed: Vec<(usize, IndexId)>,
    pub elements: usize,
}

impl Buffer {
    /// For each dimension of the tensor: its element stride in this buffer
    /// (row-major over the stored dimensions; 0 for a dimension fixed by a loop).
    pub fn position_strides(&self, hir: &Hir) -> Vec<usize> {
        let shape = hir.shape(self.tensor);
        let mut strides = vec![0usize; shape.len()];
        let mut s = 1usize;
        for &p in self.stored.iter().rev() {
            strides[p] = s;
            s *= shape[p];
        }
        strides
    }
}

/// A unit lowered to loop nests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopNest {
    pub unit: UnitId,
    pub body: Vec<Node>,
    pub buffers: BTreeMap<TensorId, Buffer>,
    /// Peak bytes of temporaries live at once, as fused and without fusion.
    pub peak_bytes: u64,
    pub unfused_peak_bytes: u64,
    /// Seconds by the CPU time model ([`cost`]), as fused and without fusion.
    pub time_s: f64,
    pub unfused_time_s: f64,
    /// Per statement, per term: the kernel the back end runs it on, as fused and
    /// without fusion (a GETT that fusion turned into loops is reported).
    pub kernels: Vec<Vec<cost::Kernel>>,
    pub unfused_kernels: Vec<Vec<cost::Kernel>>,
}

impl LoopNest {
    /// The textual form printed by `tcc opt --emit=lir`.
    pub fn dump(&self, hir: &Hir) -> String {
        let unit = &hir.units[self.unit];
        let mut s = String::new();
        let _ = writeln!(s, "lir {} {{", unit.name);
        for b in self.buffers.values() {
            let t = &hir.tensors[b.tensor];
            let shape = hir.shape(b.tensor);
            let dims: Vec<String> = b.stored.iter().map(|&p| shape[p].to_string()).collect();
            let fixed: Vec<String> = b.fixed.iter().map(|(p, i)| format!("{}@{}", hir.indices[*i].name, p)).collect();
            let _ = write!(
                s,
                "  buffer {}: {}[{}] = {} elements ({} bytes)",
                t.name,
                t.elem.name(),
                dims.join(", "),
                b.elements,
                b.elements.saturating_mul(t.elem.size_bytes())
            );
            if !fixed.is_empty() {
                let _ = write!(s, "  // sliced by {}", fixed.join(", "));
            }
            s.push('\n');
        }
        let epilogues = epilogue::gett_pairs(hir, self);
        dump_nodes(self, hir, &self.body, 1, &epilogues, &mut s);
        s.push_str(&tasks::dump(hir, self, &tasks::task_sets(hir, self, &cost::CpuRates::default())));
        let _ = writeln!(
            s,
            "  // peak temporary memory: {} bytes (unfused: {} bytes)",
            self.peak_bytes, self.unfused_peak_bytes
        );
        let _ = writeln!(s, "  // model time: {} (unfused: {})", seconds(self.time_s), seconds(self.unfused_time_s));
        s.push_str("}\n");
        s
    }

    /// GEMM-shaped terms fusion turned into loops: (statement, term, unfused kernel).
    pub fn gemms_made_loops(&self) -> Vec<(usize, usize, cost::Kernel)> {
        let mut out = Vec::new();
        for (i, (now, was)) in self.kernels.iter().zip(&self.unfused_kernels).enumerate() {
            for (k, (a, b)) in now.iter().zip(was).enumerate() {
                if matches!(a, cost::Kernel::Loops { .. }) && matches!(b, cost::Kernel::Gett { .. }) {
                    out.push((i, k, *b));
                }
            }
        }
        out
    }

    /// How statement `stmt` runs: each term's kernel (`; ` between terms), and for a
    /// GEMM-shaped term that fusion turned into loops, its unfused kernel.
    pub fn kernel_note(&self, stmt: usize) -> String {
        let (Some(now), Some(was)) = (self.kernels.get(stmt), self.unfused_kernels.get(stmt)) else {
            return String::new();
        };
        let parts: Vec<String> = now
            .iter()
            .zip(was)
            .map(|(a, b)| match (a, b) {
                (cost::Kernel::Loops { .. }, cost::Kernel::Gett { .. }) => format!("loops (unfused: {b})"),
                _ => a.to_string(),
            })
            .collect();
        parts.join("; ")
    }
}

fn dump_nodes(nest: &LoopNest, hir: &Hir, nodes: &[Node], depth: usize, epilogues: &[(usize, usize)], s: &mut String) {
    let unit = nest.unit;
    let pad = "  ".repeat(depth);
    for n in nodes {
        match n {
            Node::Loop { index, extent, body } => {
                let _ = writeln!(s, "{pad}for {} in 0..{} {{", hir.indices[*index].name, extent);
                dump_nodes(nest, hir, body, depth + 1, epilogues, s);
                let _ = writeln!(s, "{pad}}}");
            }
            Node::Zero { tensor, .. } => {
                let _ = writeln!(s, "{pad}zero {}", hir.tensors[*tensor].name);
            }
            Node::Compute { stmt } => {
                let st = &hir.units[unit].stmts[*stmt];
                let units = &hir.units[unit].stmts;
                let note = match epilogues.iter().find(|p| p.0 == *stmt || p.1 == *stmt) {
                    Some(&(i, j)) if i == *stmt => {
                        format!(
                            "{}, epilogue {} (stored into it)",
                            nest.kernel_note(i),
                            hir.tensors[units[j].lhs.tensor].name
                        )
                    }
                    Some(&(i, _)) => format!("epilogue of {}'s gett", hir.tensors[units[i].lhs.tensor].name),
                    None => nest.kernel_note(*stmt),
                };
                let _ = writeln!(
                    s,
                    "{pad}{} += {}  // {}",
                    crate::sema::display::tensor_ref(hir, &st.lhs),
                    crate::sema::display::expr(hir, &st.rhs),
                    note
                );
            }
        }
    }
}

/// Seconds for dumps and reports, in the unit that keeps 3 significant digits.
pub fn seconds(t: f64) -> String {
    if !t.is_finite() {
        "unknown".to_string()
    } else if t >= 1.0 {
        format!("{t:.3} s")
    } else if t >= 1e-3 {
        format!("{:.3} ms", t * 1e3)
    } else {
        format!("{:.3} us", t * 1e6)
    }
}
