//! What tiled execution would store and execute, before anything runs: the
//! numbers `tcc opt` reports (the same plan `tcc run --tiled` executes, so the
//! flops it prints are the flops the tasks perform).

use super::exec::{Program, TiledOptions};
use crate::pipeline::PipelineOptions;
use crate::sema::hir::{Hir, UnitId};

/// The tiled cost of one unit: stored and dense elements, executed and dense flops.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TiledCost {
    pub unit: String,
    pub stored_elements: f64,
    pub dense_elements: f64,
    pub flops: f64,
    pub dense_flops: f64,
    /// Per tensor: name, stored elements, dense elements.
    pub tensors: Vec<(String, f64, f64)>,
}

/// The tiled cost of every unit of `units` (default tiles), or why there is none.
pub fn costs(hir: &Hir, units: &[UnitId]) -> Vec<Result<TiledCost, String>> {
    let prepared = crate::pipeline::prepare(hir, &PipelineOptions::default());
    units
        .iter()
        .map(|&u| {
            let p = Program::plan(&prepared, u, &TiledOptions::default()).map_err(|e| e.message)?;
            let storage = p.storage();
            Ok(TiledCost {
                unit: hir.units[u].name.clone(),
                stored_elements: storage.iter().map(|s| s.1).sum(),
                dense_elements: storage.iter().map(|s| s.2).sum(),
                flops: p.planned_flops(),
                dense_flops: p.dense_flops,
                tensors: storage,
            })
        })
        .collect()
}

/// Report lines: one per unit whose tensors have symmetry or block rules.
pub fn report(hir: &Hir, units: &[UnitId]) -> String {
    let mut s = String::new();
    let structured = |u: UnitId| {
        let mut any = false;
        let mut check = |t: crate::ids::TensorId| {
            let t = &hir.tensors[t];
            any |= !t.symmetry.is_empty() || !t.pair_symmetry.is_empty() || !t.blocks.is_empty();
        };
        for st in &hir.units[u].stmts {
            check(st.lhs.tensor);
            crate::sema::hir::collect_reads(&st.rhs, &mut check);
        }
        any
    };
    let chosen: Vec<UnitId> = units.iter().copied().filter(|&u| structured(u)).collect();
    for (u, c) in chosen.iter().zip(costs(hir, &chosen)) {
        match c {
            Ok(c) => s.push_str(&format!(
                "{}: tiled (`tcc run --tiled`) stores {:.3e} of {:.3e} elements ({:.1}%) and executes {:.3e} flops (dense order: {:.3e})\n",
                c.unit,
                c.stored_elements,
                c.dense_elements,
                100.0 * c.stored_elements / c.dense_elements.max(1.0),
                c.flops,
                c.dense_flops
            )),
            Err(why) => s.push_str(&format!("{}: no tiled execution: {why}\n", hir.units[*u].name)),
        }
    }
    s
}

/// The JSON form of [`costs`] (`tcc opt --json`).
pub fn json(hir: &Hir, units: &[UnitId]) -> serde_json::Value {
    let v: Vec<serde_json::Value> = costs(hir, units)
        .into_iter()
        .map(|c| match c {
            Ok(c) => serde_json::to_value(c).unwrap_or_default(),
            Err(e) => serde_json::json!({ "error": e }),
        })
        .collect();
    serde_json::Value::Array(v)
}
