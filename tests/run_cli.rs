//! `tcc run --interp` through the command line: the report, output files and
//! errors. These need semantic analysis to turn the examples into HIR.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

const ROW: &str =
    r"norm2 = -?[0-9]\.[0-9]{11}e-?[0-9]+  sum = -?[0-9]\.[0-9]{11}e-?[0-9]+  checksum = -?[0-9]\.[0-9]{11}e-?[0-9]+";

#[test]
fn report_format() {
    let out = tcc().args(["run", "--interp", "--seed", "3"]).arg(example("matmul.tc")).assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let re = format!("^program matmul \\(1 statement\\)\n  C  f64\\[5, 4\\]  {ROW}\n$");
    assert!(predicate::str::is_match(re).unwrap().eval(&text), "{text}");
}

#[test]
fn same_seed_same_report_other_seed_other_report() {
    let run = |seed: &str| {
        let o = tcc().args(["run", "--interp", "--seed", seed]).arg(example("ccsd_terms.tc")).assert().success();
        String::from_utf8(o.get_output().stdout.clone()).unwrap()
    };
    assert_eq!(run("1"), run("1"));
    assert_ne!(run("1"), run("2"));
}

#[test]
fn program_selection_and_unknown_program() {
    tcc()
        .args(["run", "--interp", "--program", "energy"])
        .arg(example("ccsd_terms.tc"))
        .assert()
        .success()
        .stdout(predicate::str::starts_with("program energy (1 statement)\n  E  f64[]  norm2 = "));
    tcc()
        .args(["run", "--interp", "--program", "nope"])
        .arg(example("ccsd_terms.tc"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("error[E0702]: there is no program or model named `nope`"))
        .stderr(predicate::str::contains("energy"));
}

#[test]
fn inputs_round_trip_through_files() {
    let dir = tempfile::tempdir().unwrap();
    let first = tcc()
        .args(["run", "--interp", "--seed", "5", "--save-inputs", "--output-dir"])
        .arg(dir.path().join("a"))
        .arg(example("matmul.tc"))
        .assert()
        .success();
    assert!(dir.path().join("a/A.npy").exists() && dir.path().join("a/C.npy").exists());
    // Feeding the saved inputs back gives the same report, whatever the seed.
    let again = tcc()
        .args(["run", "--interp", "--seed", "99", "--input"])
        .arg(format!("A={}", dir.path().join("a/A.npy").display()))
        .arg("--input")
        .arg(format!("B={}", dir.path().join("a/B.npy").display()))
        .arg(example("matmul.tc"))
        .assert()
        .success();
    assert_eq!(first.get_output().stdout, again.get_output().stdout);
}

#[test]
fn input_errors() {
    let dir = tempfile::tempdir().unwrap();
    tcc()
        .args(["run", "--interp", "--save-inputs", "--output-dir"])
        .arg(dir.path())
        .arg(example("chain4.tc"))
        .assert()
        .success();
    let a = dir.path().join("A.npy"); // shape [4, 6]
    let err = |spec: String, code: &str, text: &str| {
        tcc()
            .args(["run", "--interp", "--input", &spec])
            .arg(example("matmul.tc"))
            .assert()
            .code(1)
            .stderr(predicate::str::contains(format!("error[{code}]")))
            .stderr(predicate::str::contains(text.to_string()));
    };
    err(format!("A={}", a.display()), "E0707", "`A` has shape [5, 7] but the file holds an array of shape [4, 6]");
    err(format!("Q={}", a.display()), "E0703", "there is no tensor named `Q`");
    err(format!("C={}", a.display()), "E0704", "`C` is an output, not an input");
    err(format!("A={}", dir.path().join("missing.npy").display()), "E0706", "cannot read");
    err("A".to_string(), "E0701", "is not of the form NAME=FILE");
}

/// A ring of 150 matrices (150 indices in one term, beyond the 128 the order search
/// once held): `tcc opt` orders it (no "not reordered", a ratio in a few digits),
/// and `tcc run --check` checks it against the interpreter run step by step in the
/// optimized order, since the term as written is far beyond the interpreter's limit.
#[test]
fn a_network_of_150_indices_is_ordered_and_checked() {
    let n = 150;
    let mut src = String::from("range D = 2;\nindex ");
    src += &(0..n).map(|k| format!("i{k}")).collect::<Vec<_>>().join(", ");
    src += " : D;\n";
    for k in 0..n {
        src += &format!("input tensor T{k}[i{k},i{}] : f64;\n", (k + 1) % n);
    }
    src += "output tensor Z : f64;\nZ = ";
    src += &(0..n).map(|k| format!("T{k}[i{k},i{}]", (k + 1) % n)).collect::<Vec<_>>().join(" * ");
    src += ";\n";
    let dir = std::env::temp_dir().join(format!("tcc-ring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ring.tc");
    std::fs::write(&file, src).unwrap();
    let out = tcc().arg("opt").arg(&file).assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    // Beyond the exact search: the hyper-optimizer (which starts from greedy).
    assert!(!text.contains("not reordered") && text.contains("order [hyper]"), "{text}");
    assert!(text.contains("flops  2.1409e47 -> 2376 (9.010e43x)"), "{text}");
    let out = tcc().arg("run").arg(&file).arg("--check").assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("check: matches the interpreter run step by step in the optimized contraction order"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
