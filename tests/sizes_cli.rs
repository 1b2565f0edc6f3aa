//! Run-time ranges (`range O;`) through the command line: `tcc run --size`, sizes
//! read off `--input` arrays, conflicts and missing sizes, `--assume` and the line
//! that reports assumed sizes, `tcc build` refusing unbound ranges; and the same
//! values from the interpreter, the JIT and distributed runs for several sizes.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

/// Contractions, a symmetric input, an element-wise function and a reduction over
/// two run-time ranges and a fixed one.
const PROGRAM: &str = "range O;
range V;
range X = 3;
index i, j, k : O;
index a, b : V;
index x : X;
input tensor A[i,a];
input tensor B[a,j];
input tensor S[i,j] symmetric(i j);
input tensor F[a,x];
output tensor C[i,j];
output tensor G[a,b];
output tensor E;
C[i,j] = A[i,a] * B[a,j] + 0.5 * S[i,k] * S[k,j];
G[a,b] = F[a,x] * F[b,x] + exp(0.1 * A[i,a] * A[i,b]);
E = C[i,j] * S[i,j];
";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A C-order little-endian f64 `.npy` file with values 0, 1, 2, ...
fn npy(dir: &Path, name: &str, shape: &[usize]) -> PathBuf {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if shape.len() == 1 { format!("{},", dims[0]) } else { dims.join(", ") };
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({tuple}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for k in 0..shape.iter().product::<usize>() {
        bytes.extend((k as f64 * 0.01).to_le_bytes());
    }
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn stdout(cmd: &mut Command) -> String {
    let out = cmd.assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

#[test]
fn size_binds_and_repeated_or_comma_separated_are_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.tc", PROGRAM);
    let a = stdout(tcc().args(["run", "--interp", "--size", "O=4,V=6"]).arg(&f));
    let b = stdout(tcc().args(["run", "--interp", "--size", "O=4", "--size", "V=6"]).arg(&f));
    assert_eq!(a, b);
    assert!(a.contains("C  f64[4, 4]") && a.contains("G  f64[6, 6]"), "{a}");
    // A fixed range may be named with its own size.
    let c = stdout(tcc().args(["run", "--interp", "--size", "O=4,V=6,X=3"]).arg(&f));
    assert_eq!(a, c);
}

#[test]
fn size_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.tc", PROGRAM);
    let err = |args: &[&str], code: &str, text: &str| {
        tcc()
            .args(["run", "--interp"])
            .args(args)
            .arg(&f)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(format!("error[{code}]")))
            .stderr(predicate::str::contains(text));
    };
    err(&["--size", "O=4"], "E0745", "no size for the run-time range `V`");
    err(&["--size", "O=4"], "E0745", "--size V=...");
    err(&[], "E0745", "the run-time ranges `O`, `V`");
    err(&["--size", "O=4,V=6,Q=2"], "E0740", "there is no range named `Q`");
    err(&["--size", "O=4,V=6,X=5"], "E0741", "range `X` is declared with size 3");
    err(&["--size", "O=0,V=6"], "E0742", "a range has at least one value");
    err(&["--size", "O=4,V=6", "--size", "O=5"], "E0744", "range `O` is given two sizes");
    err(&["--size", "O=four"], "E0746", "is not of the form NAME=SIZE");
    err(&["--size", "O=4294967296,V=4294967296"], "E0743", "tensor `A` is too large");
    // The JIT and distributed runs check sizes the same way.
    for extra in [&["--check"][..], &["--ranks", "2"][..]] {
        tcc()
            .args(["run", "--size", "O=4"])
            .args(extra)
            .arg(&f)
            .assert()
            .code(1)
            .stderr(predicate::str::contains("error[E0745]"));
    }
}

#[test]
fn sizes_from_input_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.tc", PROGRAM);
    let a = npy(dir.path(), "a.npy", &[5, 7]);
    let input = format!("A={}", a.display());
    let by_input = stdout(tcc().args(["run", "--interp", "--input", &input]).arg(&f));
    assert!(by_input.contains("C  f64[5, 5]") && by_input.contains("G  f64[7, 7]"), "{by_input}");
    // Agreeing with --size is fine and gives the same values.
    let both = stdout(tcc().args(["run", "--interp", "--size", "O=5", "--input", &input]).arg(&f));
    assert_eq!(by_input, both);
    // The JIT reads the same sizes.
    tcc().args(["run", "--check", "--input", &input]).arg(&f).assert().success();
}

#[test]
fn size_conflicts_name_both_sources() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.tc", PROGRAM);
    let a = npy(dir.path(), "a.npy", &[5, 7]);
    let b_bad = npy(dir.path(), "b_bad.npy", &[6, 5]);
    let s = npy(dir.path(), "s.npy", &[5, 4]);
    let flat = npy(dir.path(), "flat.npy", &[35]);
    let run = |args: Vec<String>| tcc().args(["run", "--interp"]).args(args).arg(&f).assert();
    // --size against an input.
    run(vec!["--size".into(), "O=4".into(), "--input".into(), format!("A={}", a.display())]).code(1).stderr(
        predicate::str::contains(
            "error[E0744]: range `O` is given two sizes: 4 by `--size O=4` and 5 by dimension 0 of `--input A=",
        ),
    );
    // Two inputs.
    run(vec!["--input".into(), format!("A={}", a.display()), "--input".into(), format!("B={}", b_bad.display())])
        .code(1)
        .stderr(predicate::str::contains("range `V` is given two sizes: 7 by dimension 1 of `--input A="))
        .stderr(predicate::str::contains("and 6 by dimension 0 of `--input B="));
    // Two dimensions of one input.
    run(vec!["--size".into(), "V=2".into(), "--input".into(), format!("S={}", s.display())])
        .code(1)
        .stderr(predicate::str::contains("5 by dimension 0 of `--input S="))
        .stderr(predicate::str::contains("4 by dimension 1 of `--input S="));
    // An array of the wrong rank.
    run(vec!["--input".into(), format!("A={}", flat.display())])
        .code(1)
        .stderr(predicate::str::contains("error[E0748]: `--input A="))
        .stderr(predicate::str::contains("`A` has 2 dimensions but the array has shape [35]"));
    // Consistent inputs together.
    let b_ok = npy(dir.path(), "b_ok.npy", &[7, 5]);
    run(vec!["--input".into(), format!("A={}", a.display()), "--input".into(), format!("B={}", b_ok.display())])
        .success();
}

#[test]
fn assume_and_the_assumed_sizes_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.tc", PROGRAM);
    let text = stdout(tcc().arg("opt").arg(&f));
    assert!(text.starts_with("sizes assumed for run-time ranges: O = 32 (default), V = 32 (default)\n"), "{text}");
    let text = stdout(tcc().args(["opt", "--assume", "V=400"]).arg(&f));
    assert!(text.starts_with("sizes assumed for run-time ranges: O = 32 (default), V = 400 (--assume)\n"), "{text}");
    // Costs follow the assumption.
    let flops = |args: &[&str]| -> String {
        let out = stdout(tcc().args(["opt", "--json"]).args(args).arg(&f));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["flops_before"].to_string()
    };
    assert_ne!(flops(&["--assume", "O=10,V=20"]), flops(&["--assume", "O=10,V=40"]));
    assert_eq!(flops(&["--assume", "O=10,V=20"]), flops(&["--size", "O=10,V=20"]));
    // With --json the line goes to stderr; with every size bound there is none.
    tcc()
        .args(["opt", "--json"])
        .arg(&f)
        .assert()
        .success()
        .stderr(predicate::str::contains("sizes assumed for run-time ranges"));
    let text = stdout(tcc().args(["opt", "--size", "O=4,V=6"]).arg(&f));
    assert!(!text.contains("assumed"), "{text}");
    // tcc plan.
    let text = stdout(tcc().args(["plan", "--procs", "4", "--assume", "O=64"]).arg(&f));
    assert!(text.starts_with("sizes assumed for run-time ranges: O = 64 (--assume), V = 32 (default)\n"), "{text}");
    tcc()
        .args(["plan", "--procs", "4", "--assume", "X=4"])
        .arg(&f)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("error[E0741]"));
    // tcc check accepts run-time ranges.
    tcc().arg("check").arg(&f).assert().success();
}

#[test]
fn build_refuses_unbound_runtime_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.tc", PROGRAM);
    let lib = dir.path().join("libp.so");
    for extra in [&[][..], &["--assume", "O=4,V=6"][..], &["--size", "O=4"][..]] {
        tcc()
            .args(["build", "-o"])
            .arg(&lib)
            .args(extra)
            .arg(&f)
            .assert()
            .code(1)
            .stderr(predicate::str::contains("error[E0747]"))
            .stderr(predicate::str::contains("pass --size to build a library for fixed sizes"));
    }
    assert!(!lib.exists());
    tcc().args(["build", "--size", "O=4,V=6", "-o"]).arg(&lib).arg(&f).assert().success();
    assert!(lib.exists());
}

/// The interpreter, the JIT (`--check` compares them), and distributed runs agree
/// for several sizes, including 1 and primes.
#[test]
fn interpreter_jit_and_ranks_agree_over_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.tc", PROGRAM);
    for (o, v) in [(1, 1), (1, 7), (7, 13), (13, 2), (4, 64)] {
        let sizes = format!("O={o},V={v}");
        let interp = stdout(tcc().args(["run", "--interp", "--seed", "3", "--size", &sizes]).arg(&f));
        assert!(interp.contains(&format!("C  f64[{o}, {o}]")), "{interp}");
        let jit = stdout(tcc().args(["run", "--check", "--seed", "3", "--size", &sizes]).arg(&f));
        assert!(jit.contains("check: matches the interpreter"), "{sizes}: {jit}");
        let ranks = stdout(tcc().args(["run", "--ranks", "3", "--no-opt", "--seed", "3", "--size", &sizes]).arg(&f));
        assert_eq!(ranks, interp, "{sizes}");
    }
}

/// The library functions: `bind_all_sizes`, then the JIT (also through the GETT
/// kernel on small odd shapes) against the interpreter.
#[test]
fn library_bind_then_jit_matches_interp() {
    use std::collections::BTreeMap;
    use tcc::codegen::llvm::{jit_run, Options};
    let (hir, diags) = tcc::compile(PROGRAM, "p");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    assert_eq!(hir.runtime_ranges().len(), 2);
    for (o, v) in [(1, 13), (7, 7), (13, 1), (3, 5)] {
        let sizes: BTreeMap<String, usize> = [("O".to_string(), o), ("V".to_string(), v)].into();
        let bound = tcc::sema::sizes::bind_all_sizes(&hir, &sizes).unwrap();
        assert!(bound.runtime_ranges().is_empty());
        let u = bound.unit_by_name("p").unwrap();
        let inputs = tcc::interp::random_inputs(&bound, u, 11).unwrap();
        let want = tcc::interp::run_unit(&bound, u, &inputs).unwrap();
        assert_eq!(want[&bound.tensor_by_name("C").unwrap()].shape, vec![o, o]);
        assert_eq!(want[&bound.tensor_by_name("G").unwrap()].shape, vec![v, v]);
        for opts in [Options::default(), Options { gemm_min: Some(1.0), parallel_min: Some(1.0), ..Options::default() }]
        {
            let got = jit_run(&bound, u, &inputs, &opts, 1).unwrap_or_else(|e| panic!("O={o} V={v}: {}", e.0));
            tcc::run::compare::compare_outputs(&bound, u, &got.outputs, &want)
                .unwrap_or_else(|e| panic!("O={o} V={v}: {e}"));
        }
    }
}

/// `tcc run --ranks N --plan` (the planner's plan, executed) after binding.
#[test]
fn planned_runs_after_binding() {
    let dir = tempfile::tempdir().unwrap();
    let src = "range O;\nrange V = 5;\nindex i, j : O;\nindex a : V;\ninput tensor A[i,a];\n\
        input tensor B[a,j];\noutput tensor C[i,j];\nC[i,j] = A[i,a] * B[a,j];\n";
    let f = write(dir.path(), "m.tc", src);
    for o in [1, 7, 13] {
        let size = format!("O={o}");
        let interp = stdout(tcc().args(["run", "--interp", "--size", &size]).arg(&f));
        let planned = stdout(tcc().args(["run", "--ranks", "3", "--plan", "--size", &size]).arg(&f));
        let row = |s: &str| s.lines().nth(1).map(|l| l.split("norm2").next().unwrap().to_string());
        assert_eq!(row(&interp), row(&planned), "{planned}");
        assert!(planned.contains(&format!("C  f64[{o}, {o}]")), "{planned}");
    }
}
