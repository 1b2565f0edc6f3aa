//! Where the 16-bit storage types (`bf16`, `f16`) may go. They run on the
//! interpreter and the CPU (JIT) in f32 arithmetic; everything that would need a
//! 16-bit path of its own is refused here, before any pass runs:
//!
//! * E0326: a 16-bit tensor in a `model` or a `distribute` statement, or in a
//!   program that also has complex tensors (complex values have 32- and 64-bit
//!   parts only).
//!
//! Commands and run modes without a 16-bit path (GPU, tiled runs and sessions,
//! distributed runs, MPI libraries) refuse such programs with E0327 themselves.

use super::hir::Hir;
use crate::diag::Diagnostic;

/// Whether any tensor of the program is stored in 16 bits.
pub fn has_half(hir: &Hir) -> bool {
    hir.tensors.iter().any(|t| t.elem.is_half())
}

/// The diagnostics for every misuse of a 16-bit tensor in `hir`.
pub fn check(hir: &Hir) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if !has_half(hir) {
        return out;
    }
    let complex = hir.tensors.iter().find(|t| t.elem.is_complex());
    for t in hir.tensors.iter().filter(|t| t.elem.is_half()) {
        if t.model.is_some() {
            out.push(
                Diagnostic::error(
                    "E0326",
                    format!("{} tensor `{}` in a model: model plans are f32/f64", t.elem.name(), t.name),
                    t.span.clone(),
                    "16-bit here",
                )
                .with_hint("use `f32` in models (a plan counts bytes per element as f32)"),
            );
        }
        if let Some(c) = complex {
            out.push(
                Diagnostic::error(
                    "E0326",
                    format!(
                        "{} tensor `{}` in a program with complex tensors (`{}` is {})",
                        t.elem.name(),
                        t.name,
                        c.name,
                        c.elem.name()
                    ),
                    t.span.clone(),
                    "16-bit here",
                )
                .with_label(c.span.clone(), "complex here")
                .with_hint("complex types have f32 or f64 parts: declare it `f32`"),
            );
        }
    }
    for d in &hir.distributions {
        let t = &hir.tensors[d.tensor];
        if t.elem.is_half() {
            out.push(
                Diagnostic::error(
                    "E0326",
                    format!("{} tensor `{}` cannot be distributed over a grid", t.elem.name(), t.name),
                    d.span.clone(),
                    "distributed here",
                )
                .with_hint("remove the `distribute` statement; distributed runs refuse 16-bit programs"),
            );
        }
    }
    out
}
