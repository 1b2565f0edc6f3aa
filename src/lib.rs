//! tcc: a compiler for tensor contractions and parallel plans.
//!
//! The pipeline (see `DESIGN.md` in the shared design notes): source → [`syntax`]
//! (AST) → [`sema`] (checked HIR) → [`interp`] (the reference interpreter, the
//! oracle every later pass is tested against).

pub mod codegen;
pub mod diag;
pub mod exec;
pub mod fmt;
pub mod ids;
pub mod interp;
pub mod lir;
pub mod lsp;
pub mod npy;
pub mod plan;
pub mod run;
pub mod sema;
pub mod syntax;
pub mod tir;

use diag::Diagnostic;

/// The front end in one call: parse, then (if the syntax is sound) check.
/// Returns the HIR only when there is no error; diagnostics (warnings included)
/// are sorted by position.
pub fn compile(src: &str, file_stem: &str) -> (Option<sema::hir::Hir>, Vec<Diagnostic>) {
    let parsed = syntax::parse(src);
    if diag::has_errors(&parsed.diagnostics) {
        return (None, parsed.diagnostics);
    }
    let (hir, mut diags) = sema::analyze(&parsed.file, file_stem);
    diags.sort_by_key(|d| (d.primary.span.start, d.primary.span.end));
    if diag::has_errors(&diags) {
        (None, diags)
    } else {
        (Some(hir), diags)
    }
}
