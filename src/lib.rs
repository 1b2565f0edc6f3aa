//! tcc: a compiler for tensor contractions and parallel plans.
//!
//! The pipeline (see `DESIGN.md` in the shared design notes): source → [`syntax`]
//! (AST) → [`sema`] (checked HIR) → [`interp`] (the reference interpreter, the
//! oracle every later pass is tested against).

pub mod diag;
pub mod syntax;
