//! The `tcc` command as a user runs it: every example checks, formats to itself and
//! runs; bad input gets exit code 1 with a diagnostic, never a panic (exit 2).

mod common;

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

fn examples() -> Vec<PathBuf> {
    let v = common::examples();
    assert!(v.len() >= 7, "expected at least 7 examples, found {v:?}");
    v
}

fn write(dir: &Path, name: &str, src: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, src).unwrap();
    p
}

#[test]
fn every_example_checks_without_diagnostics() {
    for ex in examples() {
        tcc().arg("check").arg(&ex).assert().success().stderr(predicate::str::contains(": ok ("));
    }
}

#[test]
fn every_example_is_formatted() {
    for ex in examples() {
        tcc().args(["fmt", "--check"]).arg(&ex).assert().success();
    }
}

#[test]
fn every_example_runs_and_reports_each_output() {
    for ex in examples() {
        let src = std::fs::read_to_string(&ex).unwrap();
        let out = tcc().args(["run", "--interp"]).arg(&ex).assert().success().get_output().stdout.clone();
        let out = String::from_utf8(out).unwrap();
        // Every declared output appears in the report with a norm and a checksum.
        for line in src.lines() {
            let line = line.trim_start();
            if let Some(rest) = line.strip_prefix("output tensor ") {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                assert!(out.contains(&name), "{}: output {name} missing in\n{out}", ex.display());
            }
        }
        assert!(out.contains("norm2"), "{}: {out}", ex.display());
        assert!(out.contains("checksum"), "{}: {out}", ex.display());
    }
}

#[test]
fn runs_are_deterministic_per_seed() {
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/matmul.tc");
    let run = |seed: &str| tcc().args(["run", "--interp", "--seed", seed]).arg(&ex).output().unwrap().stdout;
    assert_eq!(run("5"), run("5"));
    assert_ne!(run("5"), run("6"));
}

#[test]
fn check_reports_all_errors_with_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "bad.tc",
        "range N = 4;\nindex i, j : N;\ninput tensor A[i,j] : f64;\noutput tensor B[i,j] : f64;\nB[i,j] = A[i,k];\nA[i,j] = B[i,j];\n",
    );
    let out = tcc().args(["check", "--color", "never"]).arg(&f).assert().code(1).get_output().stderr.clone();
    let err = String::from_utf8(out).unwrap();
    assert!(err.matches("Error").count() >= 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn json_diagnostics_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "bad.tc", "range N = 0;\nindex i : M;\n");
    let out = tcc().args(["check", "--error-format=json"]).arg(&f).assert().code(1).get_output().stderr.clone();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "{text}");
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["code"].as_str().unwrap().starts_with('E'), "{l}");
        assert_eq!(v["severity"], "error");
        assert!(v["primary"]["span"]["start_pos"]["line"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn usage_errors_and_missing_files_exit_1() {
    tcc().arg("frobnicate").assert().code(1);
    tcc().args(["check", "/nonexistent/file.tc"]).assert().code(1).stderr(predicate::str::contains("cannot read"));
    tcc().args(["run", "--interp", "--check", "examples/matmul.tc"]).assert().code(1);
    tcc().args(["build", "examples/matmul.tc"]).assert().code(1).stderr(predicate::str::contains("--output"));
    tcc().args(["run", "--interp", "--input", "nonsense", "examples/matmul.tc"]).assert().code(1);
    tcc().arg("--help").assert().success().stdout(predicate::str::contains("check"));
}

#[test]
fn run_rejects_an_input_of_the_wrong_shape() {
    let dir = tempfile::tempdir().unwrap();
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/matmul.tc");
    // Save the inputs of a run, then feed one of them back under another input's name
    // (a different shape), and an unknown name.
    tcc().args(["run", "--interp", "--save-inputs", "--output-dir"]).arg(dir.path()).arg(&ex).assert().success();
    let npys: Vec<PathBuf> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(npys.len() >= 3, "{npys:?}");
    let a = dir.path().join("A.npy");
    tcc()
        .args(["run", "--interp", "--input"])
        .arg(format!("B={}", a.display()))
        .arg(&ex)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("shape"));
    tcc()
        .args(["run", "--interp", "--input"])
        .arg(format!("Nope={}", a.display()))
        .arg(&ex)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("Nope"));
    // Feeding the saved inputs back reproduces the run exactly.
    let plain = tcc().args(["run", "--interp"]).arg(&ex).output().unwrap().stdout;
    let fed = tcc()
        .args(["run", "--interp", "--seed", "99", "--input"])
        .arg(format!("A={}", a.display()))
        .arg("--input")
        .arg(format!("B={}", dir.path().join("B.npy").display()))
        .arg(&ex)
        .output()
        .unwrap()
        .stdout;
    assert_eq!(String::from_utf8(plain).unwrap(), String::from_utf8(fed).unwrap());
}

#[test]
fn opt_reports_orders_flops_and_fused_memory() {
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/four_index.tc");
    let out = tcc().arg("opt").arg(&ex).assert().success().get_output().stdout.clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("order [exact]"), "{text}");
    assert!(text.contains("flops"), "{text}");
    assert!(text.contains("fused loop nests need"), "{text}");

    let out = tcc().args(["opt", "--json"]).arg(&ex).assert().success().get_output().stdout.clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let before = v["flops_before"].as_f64().unwrap();
    let after = v["flops_after"].as_f64().unwrap();
    // Four-index transform: N^8 naive vs four N^5 steps.
    assert!(after * 50.0 < before, "{before} -> {after}");
    // `auto` keeps the small steps whole; `max` fuses for memory.
    let nest = &v["loop_nests"][0];
    assert_eq!(nest["fuse"], "auto");
    assert!(nest["model_seconds"].as_f64().unwrap() <= nest["unfused_model_seconds"].as_f64().unwrap());
    let out = tcc().args(["opt", "--json", "--fuse", "max"]).arg(&ex).assert().success().get_output().stdout.clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let nest = &v["loop_nests"][0];
    assert!(nest["peak_bytes"].as_u64().unwrap() < nest["unfused_peak_bytes"].as_u64().unwrap());

    let lir =
        tcc().args(["opt", "--emit", "lir", "--fuse", "max"]).arg(&ex).assert().success().get_output().stdout.clone();
    let lir = String::from_utf8(lir).unwrap();
    assert!(lir.contains("for ") && lir.contains("bytes"), "{lir}");
    for emit in ["hir", "tir", "opt"] {
        tcc().args(["opt", "--emit", emit]).arg(&ex).assert().success().stdout(predicate::str::is_empty().not());
    }
}

#[test]
fn opt_memory_limit_is_honoured_and_reported() {
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/four_index.tc");
    let out = tcc().args(["opt", "--mem-limit", "1GiB"]).arg(&ex).assert().success().get_output().stdout.clone();
    assert!(String::from_utf8(out).unwrap().contains("fits in 1.0 GiB"));
    // A limit nothing fits is an error, not a report that exits 0.
    tcc().args(["opt", "--mem-limit", "8"]).arg(&ex).assert().code(1).stderr(predicate::str::contains("E0725"));
    tcc()
        .args(["run", "--fuse", "none", "--mem-limit", "8"])
        .arg(&ex)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("E0725").and(predicate::str::contains("--fuse none")));
    // Unfused temporaries over the limit: the product is sliced until they fit.
    tcc()
        .args(["run", "--check", "--fuse", "none", "--mem-limit", "100"])
        .arg(&ex)
        .assert()
        .success()
        .stdout(predicate::str::contains("sliced: B over").and(predicate::str::contains("matches the interpreter")));
    // Within a limit that forces fusion, the compiled run still checks out.
    tcc()
        .args(["run", "--check", "--mem-limit", "3KB"])
        .arg(&ex)
        .assert()
        .success()
        .stdout(predicate::str::contains("matches the interpreter"));
    // The options only apply to compiled CPU code; a bad rates file is refused.
    tcc()
        .args(["run", "--interp", "--fuse", "max"])
        .arg(&ex)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("E0727"));
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "cpu.toml", "gett_flops = 0.0\n");
    tcc().args(["run", "--cpu-rates"]).arg(&bad).arg(&ex).assert().code(1).stderr(predicate::str::contains("E0726"));
    tcc().args(["opt", "--mem-limit", "lots"]).arg(&ex).assert().code(1).stderr(predicate::str::contains("not a size"));
}

#[test]
fn the_readme_language_summary_checks_and_runs() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find("## The language in 30 lines").expect("README section");
    let block = &readme[start..];
    let open = block.find("```\n").unwrap() + 4;
    let close = open + block[open..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "readme.tc", &block[open..close]);
    tcc().args(["check", "--color", "never"]).arg(&f).assert().success().stderr(predicate::str::contains("ok ("));
    tcc().args(["run", "--interp"]).arg(&f).assert().success().stdout(predicate::str::contains("model mlp"));
}

#[test]
fn compiled_run_reports_time_and_checks_against_the_interpreter() {
    let out = tcc()
        .args(["run", "--check", "--seed", "3", "examples/matmul.tc"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("program matmul (1 statement)\n  C  f64[5, 4]  norm2 = "), "{text}");
    assert!(text.contains("GFLOP/s"), "{text}");
    assert!(text.contains("check: matches the interpreter"), "{text}");
    // The same numbers as the interpreter (to the printed digits, for this tiny case).
    let interp = tcc().args(["run", "--interp", "--seed", "3", "examples/matmul.tc"]).output().unwrap().stdout;
    let interp = String::from_utf8(interp).unwrap();
    assert_eq!(text.lines().nth(1), interp.lines().nth(1));
}

#[test]
fn emit_llvm_prints_the_module() {
    let out = tcc().args(["opt", "--emit=llvm", "examples/matmul.tc"]).assert().success().get_output().stdout.clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("define") && text.contains("tcc_matmul__body"), "{text}");
    // An unknown (or 32-bit-only) CPU is a user error, not an LLVM abort.
    for cpu in ["no-such-cpu-at-all", "i386"] {
        tcc()
            .args(["opt", "--emit=llvm", "--target-cpu", cpu, "examples/matmul.tc"])
            .assert()
            .code(1)
            .stderr(predicate::str::contains("--target-cpu"));
        tcc().args(["run", "--target-cpu", cpu, "examples/matmul.tc"]).assert().code(1);
    }
    tcc().args(["opt", "--emit=llvm", "--target-cpu", "haswell", "examples/matmul.tc"]).assert().success();
}

/// `tcc opt F --emit=lir | head -1`: a reader that goes away ends tcc quietly (by
/// SIGPIPE, as other tools end), not with an internal-error banner.
#[test]
fn a_closed_stdout_is_not_an_internal_error() {
    use std::io::Read;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from("range N = 4; index i, j : N; input tensor A[i,j];\n");
    for k in 0..3000 {
        src.push_str(&format!("output tensor C{k}[i,j]; C{k}[i,j] = {k} * A[i,j];\n"));
    }
    let f = write(dir.path(), "big.tc", &src);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tcc"))
        .args(["opt", "--emit", "lir"])
        .arg(&f)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("internal compiler error"), "{stderr}");
    assert!(!out.status.success());
}
