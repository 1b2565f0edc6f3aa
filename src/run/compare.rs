//! The one comparison of outputs with a reference (the interpreter, or another
//! run): per output, the largest `|got - want|` over the largest `|want|`.

use crate::sema::hir::{ElemType, Hir, TensorId, UnitId};
use crate::tensor::Dense;
use std::collections::HashMap;

/// Largest relative difference (to the largest magnitude of the reference)
/// accepted between compiled code and the interpreter: `f64` outputs, `f32` outputs.
pub const TOL_F64: f64 = 1e-10;
pub const TOL_F32: f64 = 1e-4;

/// The difference of one tensor to its reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RelDiff {
    /// `max |got - want| / max |want|` (the scale is at least `f64::MIN_POSITIVE`).
    pub rel: f64,
    /// The (first) element where the difference is largest.
    pub at: usize,
}

/// The relative difference of `got` to `want`, element by element (extra elements
/// of the longer one are not looked at). NaN in either counts as an infinite
/// difference unless both are NaN; equal infinities (e.g. an `exp` that overflows
/// in both) agree.
pub fn rel_diff(got: &[f64], want: &[f64]) -> RelDiff {
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
    let mut diff = 0.0f64;
    let mut at = 0;
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        let d = (a - b).abs();
        let d = if a == b || (a.is_nan() && b.is_nan()) {
            0.0
        } else if d.is_nan() {
            f64::INFINITY
        } else {
            d
        };
        if d > diff {
            diff = d;
            at = k;
        }
    }
    RelDiff { rel: diff / scale, at }
}

/// Compares every output of `want` (in id order) with `got`: the worst relative
/// difference, or a message naming the first output that is missing, has another
/// number of elements, or differs by more than `tol` (`name` names outputs).
pub fn compare(
    got: &HashMap<TensorId, Dense>,
    want: &HashMap<TensorId, Dense>,
    tol: f64,
    name: impl Fn(TensorId) -> String,
) -> Result<f64, String> {
    let mut worst = 0.0f64;
    let mut ids: Vec<&TensorId> = want.keys().collect();
    ids.sort();
    for t in ids {
        let w = &want[t];
        let name = name(*t);
        let g = got.get(t).ok_or_else(|| format!("output `{name}` was not produced"))?;
        if g.data.len() != w.data.len() {
            return Err(format!("output `{name}` has {} elements, expected {}", g.data.len(), w.data.len()));
        }
        let rel = rel_diff(&g.data, &w.data).rel;
        if rel > tol {
            return Err(format!(
                "output `{name}` differs from the interpreter: max |difference| / max |value| = {rel:.3e} > {tol:.0e}"
            ));
        }
        worst = worst.max(rel);
    }
    Ok(worst)
}

/// The tolerance of compiled code against the interpreter for `unit`: [`TOL_F64`],
/// or [`TOL_F32`] when the unit stores anything in `f32` (the interpreter keeps
/// every value in `f64`).
pub fn tolerance(hir: &Hir, unit: UnitId) -> f64 {
    let any_f32 = hir.units[unit].stmts.iter().any(|s| hir.tensors[s.lhs.tensor].elem == ElemType::F32);
    if any_f32 {
        TOL_F32
    } else {
        TOL_F64
    }
}

/// Compares compiled outputs with the interpreter's ([`compare`] within
/// [`tolerance`]): the worst ratio, or a message naming the first output beyond it.
pub fn compare_outputs(
    hir: &Hir,
    unit: UnitId,
    got: &HashMap<TensorId, Dense>,
    want: &HashMap<TensorId, Dense>,
) -> Result<f64, String> {
    compare(got, want, tolerance(hir, unit), |t| hir.tensors[t].name.clone())
}
