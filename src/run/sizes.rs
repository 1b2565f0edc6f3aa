//! Sizes of run-time ranges for `tcc run`: from `--size`, and for ranges not given
//! there, from the shapes of the `--input` arrays (`sema::sizes` does the checking).

use crate::error::CommandError;
use crate::npy;
use crate::sema::hir::Hir;
use crate::sema::sizes::{self, SuppliedShape};
use std::path::PathBuf;

/// The program with every run-time range fixed: sizes from `--size` (`size_specs`,
/// `NAME=SIZE` entries, commas allowed) and from the shapes of the arrays of
/// `inputs` (`--input NAME=FILE`). Conflicts are E0744, a range left without a size
/// E0745, an unreadable `.npy` header E0706; see `sema::sizes`.
pub fn bind_for_run(hir: &Hir, size_specs: &[String], inputs: &[(String, PathBuf)]) -> Result<Hir, CommandError> {
    let given = sizes::parse_sizes("--size", size_specs)?;
    if hir.runtime_ranges().is_empty() {
        return sizes::bind_all_sizes(hir, &given);
    }
    let mut supplied = Vec::new();
    for (name, path) in inputs {
        // Only arrays that can give a size are read here; the rest are checked when
        // the inputs are loaded.
        let gives_size = hir
            .tensors
            .iter()
            .any(|t| t.name == *name && t.role.is_read_only() && t.dims.iter().any(|&r| hir.ranges[r].is_runtime()));
        if !gives_size {
            continue;
        }
        let shape = npy::read_shape(path).map_err(|e| CommandError { code: "E0706", message: e.0, hint: None })?;
        supplied.push(SuppliedShape {
            tensor: name.clone(),
            shape,
            origin: format!("`--input {name}={}`", path.display()),
        });
    }
    let all = sizes::infer_sizes(hir, "--size", &given, &supplied)?;
    sizes::bind_all_sizes(hir, &all)
}
