//! `tcc run --interp`: fills or loads inputs, runs every unit with the reference
//! interpreter, prints a summary of each output and optionally writes `.npy` files.

use crate::sema::hir::Hir;
use std::io::Write;
use std::path::PathBuf;

/// What `tcc run` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Seed of the random fill of inputs not given with `--input`.
    pub seed: u64,
    /// `--input NAME=file.npy`
    pub inputs: Vec<(String, PathBuf)>,
    /// `--output-dir DIR`: write each output as `DIR/NAME.npy`.
    pub output_dir: Option<PathBuf>,
    /// `--save-inputs`: also write the inputs used into the output directory.
    pub save_inputs: bool,
    /// `--program NAME`: run only this unit.
    pub program: Option<String>,
}

/// A user-facing failure of `tcc run` (bad input file, wrong shape, ...): exit code 1.
#[derive(Debug, thiserror::Error)]
#[error("error[{code}]: {message}")]
pub struct RunError {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

/// Runs the units of a checked file with the reference interpreter and writes the
/// report to `out`.
pub fn run_interp(hir: &Hir, opts: &RunOptions, out: &mut dyn Write) -> Result<(), RunError> {
    let _ = (hir, opts, out);
    Err(RunError { code: "E9999", message: "the interpreter is not implemented yet".into(), hint: None })
}
