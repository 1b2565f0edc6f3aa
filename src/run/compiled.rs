//! `tcc run` without `--interp` on the CPU: JIT-compiled code (the LLVM back end,
//! [`crate::codegen::llvm`]) run and reported like the interpreter.

use super::compare::check_against_interpreter;
use super::{fail, run_report, RunOptions};
use crate::error::CommandError;
use crate::sema::hir::Hir;
use std::io::Write;

/// Settings of a compiled `tcc run`.
#[derive(Debug, Clone, Default)]
pub struct CompiledRun {
    pub codegen: crate::codegen::llvm::Options,
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

/// The `tcc run` error of a failed JIT compilation or run: E0754 out of memory,
/// E0712 otherwise.
pub(super) fn jit_error(e: crate::codegen::llvm::CodegenError) -> CommandError {
    if e.is_out_of_memory() {
        super::out_of_memory(e.0)
    } else {
        fail("E0712", e.0, None)
    }
}

/// `flops / seconds`, 0 for a run too short to time.
pub(super) fn per_second(flops: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        flops / seconds
    } else {
        0.0
    }
}

/// `tcc run` without `--interp`: JIT-compiles each unit, runs it and reports like
/// the interpreter, plus a timing line (and a check line with `--check`).
pub fn run_compiled(hir: &Hir, opts: &RunOptions, c: &CompiledRun, out: &mut dyn Write) -> Result<(), CommandError> {
    run_report(hir, opts, out, &mut |u, inputs| {
        let r = crate::codegen::llvm::jit_run(hir, u, inputs, &c.codegen, c.repeat.max(1)).map_err(jit_error)?;
        let gflops = per_second(r.flops, r.run_s) / 1e9;
        let mut extra = vec![format!(
            "time = {}  ({:.2} GFLOP/s, {} threads; compile {})",
            seconds(r.run_s),
            gflops,
            tcc_runtime::kernels::num_threads(),
            seconds(r.compile_s)
        )];
        extra.extend(r.slicing.iter().map(|s| format!("sliced: {s}")));
        if c.check {
            extra.push(check_against_interpreter(hir, u, &r.outputs, inputs)?);
        }
        Ok((r.outputs, extra))
    })
}
