//! UI tests: every `tests/ui/*.tc` holds mistakes a user would make; the rendered
//! diagnostics are snapshotted (`tests/snapshots/`). Every `tests/ui/ok/*.tc` must
//! produce no error (its warnings, if any, are snapshotted too).
//!
//! Regenerate with `INSTA_UPDATE=always cargo test --test ui`, then read the diff.

use std::path::{Path, PathBuf};
use tcc::diag::{render, Diagnostic};

fn tc_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tc"))
        .collect();
    files.sort();
    files
}

fn check_shape(name: &str, src: &str, diags: &[Diagnostic]) {
    for d in diags {
        assert!(d.code.starts_with('E') || d.code.starts_with('W'), "{name}: code {}", d.code);
        assert!(!d.primary.message.is_empty(), "{name}: empty label in {d:?}");
        assert!(!d.message.is_empty(), "{name}: empty message in {d:?}");
        for l in std::iter::once(&d.primary).chain(&d.secondary) {
            assert!(
                l.span.start <= l.span.end && l.span.end <= src.len(),
                "{name}: span {:?} outside the file",
                l.span
            );
            assert!(!l.message.is_empty(), "{name}: empty label in {d:?}");
        }
        assert!(d.hint.as_deref().is_some_and(|h| !h.is_empty()), "{name}: no hint in {d:?}");
    }
}

fn compile(path: &Path) -> (String, String, Option<tcc::sema::hir::Hir>, Vec<Diagnostic>) {
    let src = std::fs::read_to_string(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let (hir, diags) = tcc::compile(&src, &stem);
    (name, src, hir, diags)
}

#[test]
fn bad_programs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let files = tc_files(&dir);
    assert!(files.len() >= 30, "only {} ui files", files.len());
    for path in files {
        let (name, src, hir, diags) = compile(&path);
        assert!(diags.iter().any(Diagnostic::is_error), "{name}: no error");
        assert!(hir.is_none(), "{name}: a HIR despite errors");
        check_shape(&name, &src, &diags);
        insta::assert_snapshot!(name.clone(), render(&diags, &name, &src, false));
    }
}

#[test]
fn good_programs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/ok");
    let files = tc_files(&dir);
    assert!(!files.is_empty());
    for path in files {
        let (name, src, hir, diags) = compile(&path);
        assert!(!diags.iter().any(Diagnostic::is_error), "{name}:\n{}", render(&diags, &name, &src, false));
        assert!(hir.is_some(), "{name}: no HIR");
        check_shape(&name, &src, &diags);
        insta::assert_snapshot!(format!("ok_{name}"), render(&diags, &name, &src, false));
    }
}
