//! tcc: a compiler for tensor contractions and parallel plans.
//!
//! The pipeline, owned by `pipeline.rs`: source → [`syntax`] (AST) → [`sema`]
//! (checked HIR) → [`tir`] (contraction graphs; operation minimization, common
//! sub-expressions, factorization: HIR → HIR) → [`lir`] (loop nests, fusion, memory
//! minimization) → [`codegen`] (LLVM for CPUs, NVPTX for GPUs, C header and Fortran
//! module), linked against the `tcc-runtime` crate. Beside it, [`plan`] turns the
//! optimized HIR into distributed plans (and `plan::model` models into parallel
//! training plans), which [`exec`] runs on the runtime's ranks.
//!
//! [`interp`], the reference interpreter, is the oracle every pass is tested against.
//! [`compile`] is the front end in one call. See `ARCHITECTURE.md` at the repository
//! root for the code map and the invariants.

pub mod codegen;
pub mod diag;
pub mod error;
pub mod exec;
pub mod fmt;
pub mod half;
pub mod ids;
pub mod interp;
pub mod interp_complex;
pub mod lir;
pub mod lsp;
pub mod npy;
pub mod pipeline;
pub mod plan;
pub mod run;
pub mod sema;
pub mod span;
pub mod symmetry;
pub mod syntax;
pub mod tensor;
pub mod tiled;
pub mod tir;
pub mod valid;

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
