//! The one comparison of outputs with a reference (the interpreter, or another
//! run): per output, the largest `|got - want|` over the largest `|want|`.

use crate::sema::hir::{ElemType, Hir, TensorId, UnitId};
use crate::tensor::Dense;
use std::collections::HashMap;

/// Largest relative difference (to the largest magnitude of the reference)
/// accepted between compiled code and the interpreter: `f64` outputs, `f32` outputs.
pub const TOL_F64: f64 = 1e-10;
pub const TOL_F32: f64 = 1e-4;
/// A bf16 result may differ by about two of its ulps (2^-7 relative each) at the
/// largest magnitude: compiled code keeps f32 between statements and accumulates
/// in f32 in another order, so a value near a rounding boundary rounds either way.
pub const TOL_BF16: f64 = 2e-2;
/// The same for f16 (ulp 2^-10 relative).
pub const TOL_F16: f64 = 3e-3;
/// f32 products on TF32 tensor cores (`--tf32`): inputs rounded to 10 mantissa
/// bits (2^-11 relative each), products accumulated in f32.
pub const TOL_TF32: f64 = 5e-3;

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
/// in both) agree, and an infinity against anything else is an infinite
/// difference. The scale is the largest *finite* magnitude of `want`, so that an
/// infinity in one element does not excuse a difference in another.
pub fn rel_diff(got: &[f64], want: &[f64]) -> RelDiff {
    let scale = finite_scale(want);
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

/// The largest finite magnitude of `x`, at least `f64::MIN_POSITIVE`.
fn finite_scale(x: &[f64]) -> f64 {
    x.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE)
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
/// every value in `f64`), or [`TOL_BF16`]/[`TOL_F16`] when the program has a
/// tensor of that 16-bit type.
pub fn tolerance(hir: &Hir, unit: UnitId) -> f64 {
    let stored = |e: ElemType| hir.units[unit].stmts.iter().any(|s| hir.tensors[s.lhs.tensor].elem == e);
    let read = |e: ElemType| hir.tensors.iter().any(|t| t.elem == e);
    if stored(ElemType::BF16) || read(ElemType::BF16) {
        TOL_BF16
    } else if stored(ElemType::F16) || read(ElemType::F16) {
        TOL_F16
    } else if stored(ElemType::F32) {
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
    compare_outputs_within(hir, unit, got, want, 0.0)
}

/// [`compare_outputs`] allowing at least `min_tol` (TF32 products: [`TOL_TF32`]).
pub fn compare_outputs_within(
    hir: &Hir,
    unit: UnitId,
    got: &HashMap<TensorId, Dense>,
    want: &HashMap<TensorId, Dense>,
    min_tol: f64,
) -> Result<f64, String> {
    // The interpreter computes in f64; an `f32` output is what it stores, rounded to
    // f32 (a value beyond f32's range is an infinity there, as in compiled code).
    let rounded: HashMap<TensorId, Dense> = want
        .iter()
        .map(|(&t, w)| match hir.tensors[t].elem {
            ElemType::F32 | ElemType::C64 => {
                (t, Dense { shape: w.shape.clone(), data: w.data.iter().map(|&x| x as f32 as f64).collect() })
            }
            ElemType::F64 | ElemType::C128 | ElemType::BF16 | ElemType::F16 => (t, w.clone()),
        })
        .collect();
    compare(got, &rounded, tolerance(hir, unit).max(min_tol), |t| hir.tensors[t].name.clone())
}

/// [`compare_outputs`], forgiving cancellation: an output that fails the relative
/// check still matches when every difference is within the tolerance of the
/// magnitude of the terms that make up its elements — the same unit run by the
/// interpreter on |inputs| with |coefficients|. Sums that cancel (an antisymmetric
/// pair summed over, `A - A` in another order) leave rounding noise far above
/// their tiny exact value in both results. Units with functions (`exp`, ...), whose
/// terms |x| does not bound, keep the plain check. Returns the worst ratio.
pub fn check_outputs(
    hir: &Hir,
    unit: UnitId,
    got: &HashMap<TensorId, Dense>,
    want: &HashMap<TensorId, Dense>,
    inputs: &HashMap<TensorId, Dense>,
) -> Result<f64, String> {
    check_outputs_within(hir, unit, got, want, inputs, 0.0)
}

/// [`check_outputs`] allowing at least `min_tol`.
fn check_outputs_within(
    hir: &Hir,
    unit: UnitId,
    got: &HashMap<TensorId, Dense>,
    want: &HashMap<TensorId, Dense>,
    inputs: &HashMap<TensorId, Dense>,
    min_tol: f64,
) -> Result<f64, String> {
    let plain = compare_outputs_within(hir, unit, got, want, min_tol);
    let Err(msg) = plain else { return plain };
    let mut abs = hir.clone();
    for st in abs.units[unit].stmts.iter_mut() {
        abs_coefs(&mut st.rhs);
    }
    let abs_inputs: HashMap<TensorId, Dense> = inputs
        .iter()
        .map(|(&t, d)| (t, Dense { shape: d.shape.clone(), data: d.data.iter().map(|x| x.abs()).collect() }))
        .collect();
    let Ok(mag) = crate::interp::run_unit(&abs, unit, &abs_inputs) else { return Err(msg) };
    let tol = tolerance(hir, unit).max(min_tol);
    let mut worst = 0.0f64;
    for (t, w) in want {
        let (Some(g), Some(m)) = (got.get(t), mag.get(t)) else { return Err(msg) };
        let scale = finite_scale(&m.data);
        // NaN against anything but NaN is an infinite difference (as in `rel_diff`).
        let diff = g
            .data
            .iter()
            .zip(&w.data)
            .map(|(a, b)| match (a == b || (a.is_nan() && b.is_nan()), (a - b).abs()) {
                (true, _) => 0.0,
                (false, d) if d.is_nan() => f64::INFINITY,
                (false, d) => d,
            })
            .fold(0.0, f64::max);
        if diff > tol * scale {
            return Err(format!("{msg} (and beyond the magnitude of its terms, {scale:.3e})"));
        }
        worst = worst.max(diff / scale);
    }
    Ok(worst)
}

/// `e` on magnitudes: coefficients made positive and every function's value
/// taken as `abs(f(…))` (its argument on magnitudes too), so that the result
/// bounds the scale of every term the sums cancel. `max`/`min` of values is
/// bounded by the maximum of their magnitudes, and `where(a cmp b, x, y)` by
/// `max(|x|, |y|)`, whichever branch the values take.
fn abs_coefs(e: &mut crate::sema::hir::Expr) {
    use crate::sema::hir::{CmpOp, Expr, Extremum, Factor, Func, Term};
    for t in &mut e.terms {
        t.coef = t.coef.abs();
        for f in &mut t.factors {
            match f {
                Factor::Sum { arg, .. } => abs_coefs(arg),
                Factor::Reduce { op, arg, .. } => {
                    abs_coefs(arg);
                    *op = Extremum::Max;
                }
                Factor::Select { cmp, args, .. } => {
                    for a in args.iter_mut() {
                        let mut wrapped =
                            Expr { terms: vec![Term { coef: 1.0, factors: vec![a.clone()], span: 0..0 }], span: 0..0 };
                        abs_coefs(&mut wrapped);
                        *a = wrapped.terms.remove(0).factors.remove(0);
                    }
                    let (x, y) = (args[2].clone(), args[3].clone());
                    *args = vec![x.clone(), y.clone(), x, y];
                    *cmp = CmpOp::Ge;
                }
                Factor::Call { arg, free, span, .. } => {
                    abs_coefs(arg);
                    let (free, span) = (free.clone(), span.clone());
                    let hole = Factor::Sum {
                        arg: Box::new(Expr { terms: Vec::new(), span: 0..0 }),
                        free: Vec::new(),
                        span: 0..0,
                    };
                    let inner = std::mem::replace(f, hole);
                    let arg = Expr {
                        terms: vec![Term { coef: 1.0, factors: vec![inner], span: span.clone() }],
                        span: span.clone(),
                    };
                    *f = Factor::Call { func: Func::Abs, arg: Box::new(arg), free, span };
                }
                _ => {}
            }
        }
    }
}

/// The `--check` of a run: the interpreter's outputs for `inputs`, compared with
/// `got` ([`check_outputs`]); the report line, or the E0713 failure. A term beyond the
/// interpreter's loop limit as written (a large network, ordered only by the
/// optimizer) is checked against the interpreter running the optimizer's binary
/// steps one by one — each still plain loops — so any network that runs is checked.
pub fn check_against_interpreter(
    hir: &Hir,
    unit: UnitId,
    got: &HashMap<TensorId, Dense>,
    inputs: &HashMap<TensorId, Dense>,
) -> Result<String, crate::error::CommandError> {
    check_against_interpreter_within(hir, unit, got, inputs, 0.0)
}

/// [`check_against_interpreter`] allowing at least `min_tol` (TF32 products).
pub fn check_against_interpreter_within(
    hir: &Hir,
    unit: UnitId,
    got: &HashMap<TensorId, Dense>,
    inputs: &HashMap<TensorId, Dense>,
    min_tol: f64,
) -> Result<String, crate::error::CommandError> {
    use crate::interp::{run_unit, InterpError};
    let (reference, want, how) = match run_unit(hir, unit, inputs) {
        Ok(want) => (None, want, ""),
        Err(InterpError::LoopTooLarge { .. }) => {
            let optimized = crate::tir::rewrite::optimize(hir).0;
            let want = run_unit(&optimized, unit, inputs).map_err(super::interp_error)?;
            (Some(optimized), want, " run step by step in the optimized contraction order")
        }
        Err(e) => return Err(super::interp_error(e)),
    };
    match check_outputs_within(reference.as_ref().unwrap_or(hir), unit, got, &want, inputs, min_tol) {
        Ok(rel) => Ok(format!("check: matches the interpreter{how} (max relative difference {rel:.2e})")),
        Err(msg) => Err(super::fail("E0713", format!("check failed: {msg}"), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sema::hir::Role;
    use crate::tir::testutil::Builder;

    /// The interpreter's f64 value of an `f32` output beyond f32's range is an
    /// infinity once stored: compiled code's `inf` agrees with it, a finite value
    /// does not.
    #[test]
    fn f32_outputs_are_compared_as_stored() {
        let (hir, _) = crate::compile(
            "range N = 2; index i : N; input tensor X[i] : f32; output tensor Y[i] : f32; Y[i] = exp(X[i]);",
            "t",
        );
        let hir = hir.unwrap();
        let u = UnitId::new(0);
        let y = hir.tensors.position(|t| t.name == "Y").unwrap();
        let dense = |data: Vec<f64>| HashMap::from([(y, Dense { shape: vec![2], data })]);
        let want = dense(vec![2.7e43, 1.0]);
        assert!(compare_outputs(&hir, u, &dense(vec![f64::INFINITY, 1.0]), &want).is_ok());
        assert!(compare_outputs(&hir, u, &dense(vec![3.0e38, 1.0]), &want).is_err());
    }

    #[test]
    fn cancellation_is_judged_against_the_magnitude_of_the_terms() {
        // Y[i] = A[i,j]: the row [1, -1] sums to exactly 0.
        let mut b = Builder::new(&[('i', 1), ('j', 2)]);
        let a = b.tensor("A", Role::Input, "ij", &[]);
        let y = b.tensor("Y", Role::Output, "i", &[]);
        let term = b.term(1.0, vec![b.r(a, "ij")]);
        b.stmt(y, "i", false, vec![term]);
        let u = UnitId::new(0);
        let inputs = HashMap::from([(a, Dense { shape: vec![1, 2], data: vec![1.0, -1.0] })]);
        let want = crate::interp::run_unit(&b.hir, u, &inputs).unwrap();
        let out = |v: f64| HashMap::from([(y, Dense { shape: vec![1], data: vec![v] })]);
        // Infinities: equal ones agree, one against a number does not, and an
        // infinity elsewhere does not hide a difference.
        assert_eq!(rel_diff(&[f64::INFINITY, 1.0], &[f64::INFINITY, 1.0]).rel, 0.0);
        assert_eq!(rel_diff(&[1e300, 1.0], &[f64::INFINITY, 1.0]).rel, f64::INFINITY);
        assert!(rel_diff(&[f64::INFINITY, 2.0], &[f64::INFINITY, 1.0]).rel >= 0.5);
        assert_eq!(rel_diff(&[f64::NEG_INFINITY], &[f64::INFINITY]).rel, f64::INFINITY);
        // Rounding noise where the exact value is 0: a false alarm of the plain check.
        assert!(compare_outputs(&b.hir, u, &out(1e-16), &want).is_err());
        assert!(check_outputs(&b.hir, u, &out(1e-16), &want, &inputs).is_ok());
        // A real error is still one.
        assert!(check_outputs(&b.hir, u, &out(0.5), &want, &inputs).is_err());
        assert!(check_outputs(&b.hir, u, &out(f64::NAN), &want, &inputs).is_err());
    }
}
