//! Complex (`c64`, `c128`) and 16-bit (`bf16`, `f16`) tensors in tiled runs, on
//! one process and on ranks (issues 17 and 21): random complex programs against
//! the complex interpreter, `.npy` inputs read per rank one component at a time,
//! outputs written back box by box in the source type, and the interface errors.

mod common;

use assert_cmd::Command;
use common::{which, Rng};
use std::path::{Path, PathBuf};

fn path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

fn run_ok(file: &Path, args: &[&str]) -> String {
    let out = tcc().arg("run").arg(file).args(args).assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

/// Every number of every output row, in order (norm2, then sum and checksum as
/// one or two numbers each).
fn row_numbers(report: &str) -> Vec<f64> {
    report
        .lines()
        .filter(|l| l.contains("norm2 = "))
        .flat_map(|l| {
            let rest = &l[l.find("norm2 = ").unwrap()..];
            rest.split([' ', '(', ')', ',', '=']).filter_map(|w| w.parse::<f64>().ok()).collect::<Vec<_>>()
        })
        .collect()
}

/// `got` equals `want` number by number, to `tol` of the largest magnitude of
/// the row (sums of complex parts cancel, so a relative test per number fails on
/// values near zero).
fn assert_rows_close(want: &str, got: &str, tol: f64, what: &str) {
    let (w, g) = (row_numbers(want), row_numbers(got));
    assert_eq!(w.len(), g.len(), "{what}:\n{want}\n{got}");
    let scale = w.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
    for (a, b) in w.iter().zip(&g) {
        assert!((a - b).abs() <= tol * scale, "{what}: {a} vs {b}\n{want}\n{got}");
    }
}

/// A random choice among `from`.
fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

/// A random program of the shapes tiled runs take: contractions of complex and
/// real tensors with `conj`, an element-wise product, a broadcast sum, a function
/// of a real tensor, `+=`, a temporary and a scalar.
fn random_program(rng: &mut Rng) -> String {
    let ty = |rng: &mut Rng| if rng.below(3) == 0 { "c64" } else { "c128" };
    let (ta, tb, tw, tc) = (ty(rng), ty(rng), ty(rng), ty(rng));
    let mut s = format!(
        "range O = {}; range V = {};\nindex i, j : O; index a, b, c : V;\n\
         input tensor A[a,i] : {ta}; input tensor B[b,c,i,j] : {tb}; input tensor W[a,b] : {tw};\n\
         input tensor F[a,b] : f64; input tensor e[i] : f64;\n\
         tensor X[a,c,i,j] : c128;\noutput tensor Z[a,c,i,j] : {tc}; output tensor S : c128;\n",
        2 + rng.below(4),
        3 + rng.below(5)
    );
    let first = [
        "W[a,b] * B[b,c,i,j]",
        "conj(W[a,b]) * B[b,c,i,j]",
        "F[a,b] * conj(B[b,c,i,j])",
        "2 * W[a,b] * B[b,c,i,j] - F[a,b] * B[b,c,i,j]",
    ];
    s += &format!("X[a,c,i,j] = {};\n", pick(rng, &first));
    let second = [
        "X[a,c,i,j] + A[a,i] * conj(A[c,j])",
        "X[a,c,i,j] * exp(F[a,c])",
        "0.5 * X[a,c,i,j] * (e[i] + e[j])",
        "conj(X[a,c,i,j]) - W[a,c] * A[c,i] * A[a,j]",
    ];
    s += &format!("Z[a,c,i,j] = {};\n", pick(rng, &second));
    if rng.below(2) == 0 {
        s += &format!("Z[a,c,i,j] += {};\n", pick(rng, &["W[a,b] * X[b,c,i,j]", "conj(A[a,i]) * A[c,j]"]));
    }
    s += &format!("S = {};\n", pick(rng, &["conj(Z[a,c,i,j]) * X[a,c,i,j]", "Z[a,c,i,j] * B[a,c,i,j]"]));
    s
}

#[test]
fn random_complex_programs_run_tiled_and_on_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(17);
    for case in 0..10 {
        let src = random_program(&mut rng);
        let file = dir.path().join(format!("p{case}.tc"));
        std::fs::write(&file, &src).unwrap();
        let c64 = src.contains("c64");
        let tol = if c64 { 1e-4 } else { 1e-10 };
        let tile = ["1", "2", "3", "40"][rng.below(4) as usize];
        let text = run_ok(&file, &["--tiled", "--tile", tile, "--check", "--seed", "3"]);
        assert!(text.contains("check: matches the complex interpreter"), "case {case}:\n{src}\n{text}");
        let want = run_ok(&file, &["--interp", "--seed", "3"]);
        let ranks = ["2", "3"][rng.below(2) as usize];
        let got = run_ok(&file, &["--tiled", "--tile", tile, "--ranks", ranks, "--seed", "3"]);
        assert_rows_close(&want, &got, tol, &format!("case {case}, tile {tile}, {ranks} ranks\n{src}"));
        assert!(got.contains("sum = ("), "complex rows print (re, im): {got}");
    }
}

/// The files a distributed run reads and writes: complex inputs in either memory
/// order, each part read by its owner's box reads; outputs written as complex
/// files whose parts two passes of every rank fill in.
#[test]
fn complex_files_cross_distributed_runs_intact() {
    let dir = tempfile::tempdir().unwrap();
    let file = path("examples/complex_mps.tc");
    let reference = dir.path().join("ref");
    let interp =
        run_ok(&file, &["--interp", "--save-inputs", "--seed", "9", "--output-dir", reference.to_str().unwrap()]);
    let inputs: Vec<String> = ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "B4"]
        .iter()
        .flat_map(|n| ["--input".to_string(), format!("{n}={}", reference.join(format!("{n}.npy")).display())])
        .collect();
    let mut runs: Vec<Vec<&str>> = vec![vec!["--ranks", "3", "--tile", "1"], vec!["--ranks", "2"]];
    let mpi = cfg!(feature = "mpi") && which("mpirun");
    if mpi {
        runs.push(vec!["--backend", "mpi", "--tile", "2"]);
    }
    for (k, how) in runs.iter().enumerate() {
        let out = dir.path().join(format!("out{k}"));
        let mut args: Vec<String> = vec!["run".into(), file.display().to_string(), "--tiled".into()];
        args.extend(how.iter().map(|s| s.to_string()));
        args.extend(inputs.iter().cloned());
        args.extend(["--output-dir".into(), out.display().to_string()]);
        let output = if how[0] == "--backend" {
            std::process::Command::new("timeout")
                .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"])
                .arg(assert_cmd::cargo::cargo_bin("tcc"))
                .args(&args)
                .env("TCC_NUM_THREADS", "1")
                .output()
                .unwrap()
        } else {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("tcc")).args(&args).output().unwrap()
        };
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(output.status.success(), "{how:?}: {}\n{text}", String::from_utf8_lossy(&output.stderr));
        assert_rows_close(&interp, &text, 1e-12, &format!("{how:?}"));
        for name in ["Psi", "Norm", "Overlap"] {
            let (want, we) = tcc::npy::read_file(&reference.join(format!("{name}.npy"))).unwrap();
            let (got, ge) = tcc::npy::read_file(&out.join(format!("{name}.npy"))).unwrap();
            assert_eq!((we, &want.shape), (ge, &got.shape), "{how:?} {name}");
            let scale = want.data.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
            for (a, b) in want.data.iter().zip(&got.data) {
                assert!((a - b).abs() <= 1e-12 * scale, "{how:?} {name}: {a} vs {b}");
            }
        }
    }
}

/// 16-bit tensors run tiled and on ranks in f32 with 16-bit inputs and outputs,
/// as the JIT does: the same bf16/f16 output files (to one rounding of the
/// stored type, summation orders differ) read back in their own dtypes.
#[test]
fn sixteen_bit_tensors_run_tiled_and_on_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let src = "range M = 20; range N = 13; range K = 17;\nindex i : M; index j : N; index k : K;\n\
               input tensor A[i,k] : bf16; input tensor B[k,j] : f16;\n\
               output tensor C[i,j] : bf16; output tensor D[i,j] : f16;\n\
               C[i,j] = A[i,k] * B[k,j];\nD[i,j] = tanh(C[i,j]) * 0.5;\n";
    let file = dir.path().join("h.tc");
    std::fs::write(&file, src).unwrap();
    let reference = dir.path().join("ref");
    run_ok(&file, &["--interp", "--save-inputs", "--seed", "4", "--output-dir", reference.to_str().unwrap()]);
    let text = run_ok(&file, &["--tiled", "--tile", "5", "--check", "--seed", "4"]);
    assert!(text.contains("check: matches the interpreter"), "{text}");
    let inputs = |n: &str| format!("{n}={}", reference.join(format!("{n}.npy")).display());
    for ranks in ["1", "3"] {
        let out = dir.path().join(format!("out{ranks}"));
        run_ok(
            &file,
            &[
                "--tiled",
                "--tile",
                "5",
                "--ranks",
                ranks,
                "--input",
                &inputs("A"),
                "--input",
                &inputs("B"),
                "--output-dir",
                out.to_str().unwrap(),
            ],
        );
        for (name, tol) in [("C", 2e-2), ("D", 3e-3)] {
            let (want, we) = tcc::npy::read_file(&reference.join(format!("{name}.npy"))).unwrap();
            let (got, ge) = tcc::npy::read_file(&out.join(format!("{name}.npy"))).unwrap();
            assert_eq!((we, &want.shape), (ge, &got.shape), "{ranks} ranks, {name}");
            let scale = want.data.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
            for (a, b) in want.data.iter().zip(&got.data) {
                assert!((a - b).abs() <= tol * scale, "{ranks} ranks, {name}: {a} vs {b}");
            }
        }
    }
    // A file of the other 16-bit type is refused by the rank reading it.
    let bad = tcc()
        .arg("run")
        .arg(&file)
        .args(["--tiled", "--ranks", "2", "--input", &format!("A={}", reference.join("B.npy").display())])
        .assert()
        .code(1);
    let err = String::from_utf8_lossy(&bad.get_output().stderr).to_string();
    assert!(err.contains("E0328") && err.contains("bf16"), "{err}");
}

#[test]
fn complex_misuse_in_distributed_runs_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = path("examples/complex_mps.tc");
    let reference = dir.path().join("ref");
    run_ok(&file, &["--interp", "--save-inputs", "--output-dir", reference.to_str().unwrap()]);
    // A real array for a complex tensor: the rank reading it refuses.
    let real = dir.path().join("real.npy");
    let (a1, _) = tcc::npy::read_file(&reference.join("A1.npy")).unwrap();
    let re = tcc::tensor::Dense {
        shape: a1.shape[..a1.shape.len() - 1].to_vec(),
        data: a1.data.chunks(2).map(|p| p[0]).collect(),
    };
    tcc::npy::write_file(&real, &re, tcc::sema::hir::ElemType::F64).unwrap();
    for (args, code, text) in [
        (vec!["--tiled", "--ranks", "2", "--input", &format!("A1={}", real.display())], "E0325", "complex"),
        (vec!["--ranks", "2"], "E0324", "--tiled"),
        (vec!["--plan", "--ranks", "2"], "E0324", "--tiled"),
    ] {
        let out = tcc().arg("run").arg(&file).args(&args).assert().code(1);
        let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(err.contains(code) && err.contains(text), "{args:?}: {err}");
    }
}

/// `tcc build --mpi` libraries of complex and 16-bit programs, called from C
/// under mpirun on 2, 3 and 4 ranks (`tests/tiled/mpi_types_test.c`): a complex
/// tensor is two real tensors `X_re`, `X_im` of the library (the header lists
/// them; `X` itself is no tensor of it) and the outputs are the complex product's
/// loops; a bf16 input's tiles hold bf16 values after the run and the bf16
/// output is one rounding from the sum. A real program with broadcast sums, a
/// constant inside functions, `where` and a `max` reduction
/// (`tests/tiled/mpi_constructs.tc`) is checked the same way, and one with blocks
/// of a union range and a stable softmax of logits up to 800
/// (`tests/tiled/mpi_unions.tc`).
#[test]
fn mpi_libraries_of_complex_and_16_bit_programs_from_c() {
    if !cfg!(feature = "mpi") || !which("mpirun") || !which("mpicc") {
        eprintln!("skipped: no MPI");
        return;
    }
    let dist_dir = assert_cmd::cargo::cargo_bin("tcc").parent().unwrap().to_path_buf();
    for (source, define, parts) in [
        ("tests/tiled/mpi_complex.tc", "-DCOMPLEX", &["input A_re[7, 5]", "input A_im[7, 5]", "output C_im[7, 7]"][..]),
        ("tests/tiled/mpi_bf16.tc", "-DREAL16", &["input X[7, 5]", "output Y[7, 7]"]),
        ("tests/tiled/mpi_constructs.tc", "-DCONSTRUCTS", &["input u[7]", "output R[7, 7]", "output M[7]"]),
        ("tests/tiled/mpi_unions.tc", "-DUNIONS", &["input H[7, 7]", "output F[7, 7]", "output S[7, 5]"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        tcc().args(["build", "--mpi"]).arg(path(source)).arg("-o").arg(dir.path().join("libmm.so")).assert().success();
        let header = std::fs::read_to_string(dir.path().join("mm.h")).unwrap();
        for p in parts {
            assert!(header.contains(p), "{source}: `{p}` not in\n{header}");
        }
        let cc = std::process::Command::new("mpicc")
            .arg(define)
            .arg(path("tests/tiled/mpi_types_test.c"))
            .arg(format!("-I{}", dir.path().display()))
            .arg(format!("-L{}", dir.path().display()))
            .arg("-lmm")
            .arg(format!("-L{}", dist_dir.display()))
            .arg("-ltcc_dist")
            .arg(format!("-Wl,-rpath,{}:{}", dir.path().display(), dist_dir.display()))
            .args(["-lm", "-o"])
            .arg(dir.path().join("t"))
            .output()
            .unwrap();
        assert!(cc.status.success(), "mpicc: {}", String::from_utf8_lossy(&cc.stderr));
        for np in ["2", "3", "4"] {
            let run = std::process::Command::new("timeout")
                .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np])
                .arg(dir.path().join("t"))
                .env("TCC_NUM_THREADS", "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&run.stdout);
            assert!(
                run.status.success() && text.contains("ok"),
                "{source}, {np} ranks: {text}\n{}",
                String::from_utf8_lossy(&run.stderr)
            );
        }
    }
}
