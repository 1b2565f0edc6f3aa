//! Helpers shared by the integration tests that compare compiled results with
//! loops written in the test (each test file is its own crate: `mod common;`).
#![allow(dead_code)]

use tcc::sema::hir::Hir;

/// Every element of `got` within `tol` of `want`, relative to the largest
/// magnitude of `want` (at least `floor`, so an all-zero result is judged in
/// absolute terms); the lengths must agree.
pub fn assert_close_scaled(what: &str, got: &[f64], want: &[f64], tol: f64, floor: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(floor, |m, w| m.max(w.abs()));
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * scale, "{what}: element {e}: {g} vs {w}");
    }
}

/// [`assert_close_scaled`] relative to the largest magnitude alone.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_close_scaled(what, got, want, tol, 1e-300);
}

/// The program `src` (named `name`), which must compile without errors.
pub fn compiled(src: &str, name: &str) -> Hir {
    let (hir, diags) = tcc::compile(src, name);
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    hir
}
