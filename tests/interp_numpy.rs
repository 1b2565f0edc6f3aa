//! The reference interpreter against numpy: `tests/einsum_check.py` runs
//! `tcc run --interp` on every example and recomputes each output with
//! `numpy.einsum` and each printed checksum from the `.npy` files.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `python3` with numpy is available. Without it the check is skipped with
/// a message — except under CI (`CI` set), where that is a failure.
fn numpy_available() -> bool {
    let ok = Command::new("python3").args(["-c", "import numpy"]).output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("python3 with numpy is required under CI (`python3 -c 'import numpy'` failed)");
        }
        eprintln!("skipping the numpy comparison: `python3 -c 'import numpy'` failed (pip install numpy)");
    }
    ok
}

#[test]
fn examples_agree_with_numpy_einsum() {
    if !numpy_available() {
        return;
    }
    let out = Command::new("python3")
        .arg(root().join("tests/einsum_check.py"))
        .env("TCC", env!("CARGO_BIN_EXE_tcc"))
        .current_dir(root())
        .output()
        .expect("run python3");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "tests/einsum_check.py failed:\n{text}");
}

/// Every example the script checks exists and parses (sema not needed).
#[test]
fn examples_parse() {
    let script = std::fs::read_to_string(root().join("tests/einsum_check.py")).unwrap();
    let table = &script[script.find("TABLE = {").expect("TABLE in the script")..];
    let mut n = 0;
    for line in table.lines().take_while(|l| *l != "}") {
        let Some(name) = line.strip_prefix("    \"").and_then(|l| l.split_once("\": {")).map(|(n, _)| n) else {
            continue;
        };
        let path = root().join("examples").join(format!("{name}.tc"));
        let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let parsed = tcc::syntax::parse(&src);
        assert!(parsed.diagnostics.is_empty(), "{}: {:?}", path.display(), parsed.diagnostics);
        n += 1;
    }
    assert_eq!(n, 7, "examples named in the script's TABLE");
}
