//! Code generation: preparing the program ([`lower`]), the CPU back end through
//! LLVM ([`llvm`]) and the C header / Fortran module of generated libraries
//! ([`cabi`]).

pub mod cabi;
pub mod cuda;
pub mod cuda_build;
pub mod cuda_shim;
pub mod llvm;
pub mod lower;
pub mod nvptx;

use crate::interp::{self, Dense};
use crate::run::{fail, interp_error, run_report, RunError, RunOptions};
use crate::sema::hir::{ElemType, Hir, TensorId, UnitId};
use std::collections::HashMap;
use std::io::Write;

/// Largest relative difference (to the largest magnitude of the reference)
/// accepted between compiled code and the interpreter: `f64` outputs, `f32` outputs.
pub const TOL_F64: f64 = 1e-10;
pub const TOL_F32: f64 = 1e-4;

/// Compares compiled outputs with the interpreter's: for each output, the largest
/// `|got - want|` over the largest `|want|`. Returns the worst ratio, or a message
/// naming the first output beyond its tolerance ([`TOL_F64`], or [`TOL_F32`] when
/// the unit stores anything in `f32`: the interpreter keeps every value in `f64`).
pub fn compare_outputs(
    hir: &Hir,
    unit: UnitId,
    got: &HashMap<TensorId, Dense>,
    want: &HashMap<TensorId, Dense>,
) -> Result<f64, String> {
    let any_f32 = hir.units[unit].stmts.iter().any(|s| hir.tensors[s.lhs.tensor].elem == ElemType::F32);
    let mut worst = 0.0f64;
    let mut ids: Vec<&TensorId> = want.keys().collect();
    ids.sort();
    for t in ids {
        let w = &want[t];
        let name = &hir.tensors[*t].name;
        let g = got.get(t).ok_or_else(|| format!("output `{name}` was not produced"))?;
        if g.data.len() != w.data.len() {
            return Err(format!("output `{name}` has {} elements, expected {}", g.data.len(), w.data.len()));
        }
        let scale = w.data.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
        let mut diff = 0.0f64;
        for (a, b) in g.data.iter().zip(&w.data) {
            let d = (a - b).abs();
            // NaN in either counts as a difference unless both are NaN.
            // (Equal infinities, e.g. an `exp` that overflows in both, agree.)
            let d = if a == b || (a.is_nan() && b.is_nan()) {
                0.0
            } else if d.is_nan() {
                f64::INFINITY
            } else {
                d
            };
            diff = diff.max(d);
        }
        let rel = diff / scale;
        let tol = if any_f32 { TOL_F32 } else { TOL_F64 };
        if rel > tol {
            return Err(format!(
                "output `{name}` differs from the interpreter: max |difference| / max |value| = {rel:.3e} > {tol:.0e}"
            ));
        }
        worst = worst.max(rel);
    }
    Ok(worst)
}

/// Settings of a compiled `tcc run`.
#[derive(Debug, Clone, Default)]
pub struct CompiledRun {
    pub codegen: llvm::Options,
    /// Also run the interpreter and compare (`--check`).
    pub check: bool,
    /// Runs timed; the best is reported (≥ 1).
    pub repeat: usize,
}

fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// `tcc run` without `--interp`: JIT-compiles each unit, runs it and reports like
/// the interpreter, plus a timing line (and a check line with `--check`).
pub fn run_compiled(hir: &Hir, opts: &RunOptions, c: &CompiledRun, out: &mut dyn Write) -> Result<(), RunError> {
    run_report(hir, opts, out, &mut |u, inputs| {
        let r = llvm::jit_run(hir, u, inputs, &c.codegen, c.repeat.max(1)).map_err(|e| fail("E0712", e.0, None))?;
        let gflops = if r.run_s > 0.0 { r.flops / r.run_s / 1e9 } else { 0.0 };
        let mut extra = vec![format!(
            "time = {}  ({:.2} GFLOP/s, {} threads; compile {})",
            seconds(r.run_s),
            gflops,
            tcc_runtime::kernels::num_threads(),
            seconds(r.compile_s)
        )];
        if c.check {
            let want = interp::run_unit(hir, u, inputs).map_err(interp_error)?;
            match compare_outputs(hir, u, &r.outputs, &want) {
                Ok(rel) => extra.push(format!("check: matches the interpreter (max relative difference {rel:.2e})")),
                Err(msg) => return Err(fail("E0713", format!("check failed: {msg}"), None)),
            }
        }
        Ok((r.outputs, extra))
    })
}
#[cfg(test)]
mod tests;
