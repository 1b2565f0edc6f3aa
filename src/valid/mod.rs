//! Validators for the IRs in the middle of the pipeline (naga's `valid` module is
//! the model): each checks the structural facts that later passes rely on without
//! re-checking, so that a pass that breaks one is caught right after it ran rather
//! than as a wrong number or a panic three passes later.
//!
//! [`crate::pipeline`] runs them after every pass in tests and debug builds
//! (`PipelineOptions::validate`). A failure is a compiler bug, never a user error:
//! the front end reports user errors as diagnostics before a validator ever runs.

pub mod hir;
pub mod lir;

use std::fmt;

/// What a validator found wrong, with the pass that produced the IR.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidationError {
    /// Which IR was checked (`hir` or `lir`) and where (a unit or statement).
    pub place: String,
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

impl std::error::Error for ValidationError {}

/// Collects the first error of a validation run.
pub(crate) fn ensure(
    cond: bool,
    place: impl FnOnce() -> String,
    message: impl FnOnce() -> String,
) -> Result<(), ValidationError> {
    if cond {
        Ok(())
    } else {
        Err(ValidationError { place: place(), message: message() })
    }
}
