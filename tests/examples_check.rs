//! Every example under `tcc run --check`: the JIT (or, for complex programs, the
//! JIT on the lowering to real parts) against the reference interpreter, as a user
//! would check it. Issue 21 asks that each language construct have an example that
//! `tcc run --check` verifies; this is where that is enforced for all of them.

mod common;

use common::examples;
use std::path::Path;
use std::process::Command;

/// The number of programs (units) `tcc run` reports for `report`: one
/// `program NAME (N statements)` or `model NAME (N statements)` line each.
fn programs_in(report: &str) -> usize {
    report.lines().filter(|l| l.starts_with("program ") || l.starts_with("model ")).count()
}

#[test]
fn every_example_matches_the_interpreter_under_run_check() {
    let files = examples();
    assert!(files.len() >= 20, "expected the examples of issue 21 too, found {files:?}");
    for ex in &files {
        let out = Command::new(env!("CARGO_BIN_EXE_tcc"))
            .args(["run", "--check", "--seed", "5"])
            .arg(ex)
            .env("TCC_NUM_THREADS", "2")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: exit {:?}\n{text}{err}", ex.display(), out.status.code());
        // One verdict per program, each a match (a complex program's against the
        // complex interpreter), never a silent pass.
        let verdicts: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("check: ")).collect();
        let units = programs_in(&text);
        assert!(units >= 1, "{}: no program reported\n{text}", ex.display());
        assert_eq!(verdicts.len(), units, "{}: {units} programs, verdicts {verdicts:?}\n{text}", ex.display());
        for v in verdicts {
            assert!(v.contains("check: matches the"), "{}: {v}", ex.display());
        }
    }
}

/// The examples of issue 21 exist and each uses its construct, so that deleting
/// or rewriting one cannot silently drop a construct from the test above.
#[test]
fn each_construct_of_issue_21_has_an_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("examples/{f}: {e}"));
    let constructs: [(&str, &str, &[&str]); 9] = [
        ("c128 and conj", "complex_mps.tc", &[": c128", "conj("]),
        ("c64", "density_c64.tc", &[": c64", "conj("]),
        ("bf16", "bf16_mlp.tc", &[": bf16"]),
        ("f16", "rmsnorm_f16.tc", &[": f16"]),
        ("broadcast sums and constants in functions", "denominator.tc", &["eo[i] + eo[j] - ev[a] - ev[b]", "+ 1e-3)"]),
        ("sub-ranges and unions", "fock_blocks.tc", &["range P = O + V;"]),
        ("affine subscripts", "conv2d.tc", &["y+r"]),
        ("max, min, where", "masked_softmax.tc", &["max(", "min(", "where("]),
        ("softmax", "masked_softmax.tc", &["softmax("]),
    ];
    for (what, file, needles) in constructs {
        let src = read(file);
        for n in needles {
            assert!(src.contains(n), "examples/{file} ({what}) no longer contains `{n}`");
        }
    }
}
