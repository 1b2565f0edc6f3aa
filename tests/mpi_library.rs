//! `tcc build --mpi`: a library called from a C and from a Fortran MPI program
//! under `mpirun -np 2/3/4` (each rank fills and reads only the tiles it owns),
//! what the command refuses, and a job whose rank dies inside a library call.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

#[test]
fn mpi_libraries_refuse_what_does_not_apply() {
    let dir = tempfile_dir("refuse");
    let lib = dir.join("libmm.so");
    let out = tcc()
        .args(["build", "--mpi", "--target-cpu", "znver3"])
        .arg(path("tests/tiled/mpi_mm.tc"))
        .arg("-o")
        .arg(&lib)
        .assert()
        .code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("E0717"));
    let out = tcc()
        .args(["build", "--mpi", "--program", "nope"])
        .arg(path("tests/tiled/mpi_mm.tc"))
        .arg("-o")
        .arg(&lib)
        .assert()
        .code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("E0702"));
    // Tiles are planned at open, at the sizes given there: assumed sizes would
    // change nothing.
    let out = tcc()
        .args(["build", "--mpi", "--assume", "N=10"])
        .arg(path("tests/tiled/mpi_mm_sized.tc"))
        .arg("-o")
        .arg(&lib)
        .assert()
        .code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("E0717") && err.contains("--assume"), "{err}");
}

fn tempfile_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tcc-mpi-lib-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds the test library into a fresh directory; returns it and the directory
/// of libtcc_dist.so.
#[cfg(feature = "mpi")]
fn build_mm(tag: &str) -> (PathBuf, PathBuf) {
    build_mm_from(tag, "tests/tiled/mpi_mm.tc", &[])
}

/// [`build_mm`] from `source` with more `tcc build` arguments.
#[cfg(feature = "mpi")]
fn build_mm_from(tag: &str, source: &str, more: &[&str]) -> (PathBuf, PathBuf) {
    let dir = tempfile_dir(tag);
    let lib = dir.join("libmm.so");
    let out = tcc().args(["build", "--mpi"]).args(more).arg(path(source)).arg("-o").arg(&lib).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dist_dir = assert_cmd::cargo::cargo_bin("tcc").parent().unwrap().to_path_buf();
    (dir, dist_dir)
}

/// Compiles with `compiler args`, then runs the program under mpirun on 2, 3 and
/// 4 ranks: each must print "ok".
#[cfg(feature = "mpi")]
fn compile_and_run(compiler: &str, args: &[String], exe: &Path, dir: &Path) {
    let cc = std::process::Command::new(compiler).args(args).current_dir(dir).output().unwrap();
    assert!(cc.status.success(), "{compiler}: {}", String::from_utf8_lossy(&cc.stderr));
    // Each way of moving tiles (TCC_EXCHANGE), MPI windows included.
    for (np, exchange) in [("2", "one-sided"), ("3", "collective"), ("4", "one-sided"), ("4", "auto")] {
        let run = std::process::Command::new("timeout")
            .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np])
            .arg(exe)
            .current_dir(dir)
            .env("TCC_NUM_THREADS", "1")
            .env("TCC_EXCHANGE", exchange)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&run.stdout).to_string();
        assert!(
            run.status.success() && text.contains("ok"),
            "{compiler}, {np} ranks, {exchange}: {text}\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    // A value that is no exchange: the library refuses to open, it does not guess.
    let run = std::process::Command::new("timeout")
        .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(exe)
        .current_dir(dir)
        .env("TCC_EXCHANGE", "sometimes")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(!run.status.success() && text.contains("TCC_EXCHANGE=sometimes"), "{compiler}: {text}");
}

#[cfg(feature = "mpi")]
fn link_args(dir: &Path, dist_dir: &Path) -> Vec<String> {
    vec![
        format!("-L{}", dir.display()),
        "-lmm".into(),
        format!("-L{}", dist_dir.display()),
        "-ltcc_dist".into(),
        format!("-Wl,-rpath,{}:{}", dir.display(), dist_dir.display()),
    ]
}

#[cfg(feature = "mpi")]
#[test]
fn a_c_mpi_program_runs_a_tcc_library_on_2_3_and_4_ranks() {
    let (dir, dist_dir) = build_mm("c");
    let header = std::fs::read_to_string(dir.join("mm.h")).unwrap();
    assert!(header.contains("tcc_dist *tcc_mm_main_open(MPI_Comm comm);"), "{header}");
    // What runs: flops on tiles (the symmetric E computes only its canonical
    // tiles, fewer than the dense order) and what each tensor stores.
    assert!(header.contains("executes ") && header.contains("output E[10, 10]: 10 stored tiles"), "{header}");
    assert!(dir.join("tcc_dist.h").exists());
    let exe = dir.join("mm_test");
    let mut args = vec![path("tests/tiled/mpi_mm_test.c").display().to_string(), format!("-I{}", dir.display())];
    args.extend(link_args(&dir, &dist_dir));
    args.extend(["-lm".to_string(), "-o".into(), exe.display().to_string()]);
    compile_and_run("mpicc", &args, &exe, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "mpi")]
#[test]
fn a_fortran_mpi_program_runs_a_tcc_library_on_2_3_and_4_ranks() {
    let (dir, dist_dir) = build_mm("fortran");
    let exe = dir.join("mm_test_f");
    let mut args: Vec<String> = ["-cpp", "tcc_dist.f90", "mm.f90"].iter().map(|s| s.to_string()).collect();
    args.push(path("tests/tiled/mpi_mm_test.f90").display().to_string());
    args.extend(link_args(&dir, &dist_dir));
    args.extend(["-o".to_string(), exe.display().to_string()]);
    compile_and_run("mpif90", &args, &exe, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Libraries with run-time sizes (`range N tile 3;`): the open functions take
/// the sizes first (C `size_t size_N`, Fortran `integer(c_size_t), value ::
/// size_n`), the tiles are planned at those sizes, and sizes refused on one rank
/// or differing between ranks fail the open on every rank instead of leaving
/// ranks waiting (checked inside the C program). `--size M=7` at build fixes M.
#[cfg(feature = "mpi")]
#[test]
fn libraries_with_run_time_sizes_take_them_at_open_from_c_and_fortran() {
    let (dir, dist_dir) = build_mm_from("sized-c", "tests/tiled/mpi_mm_sized.tc", &[]);
    let header = std::fs::read_to_string(dir.join("mm.h")).unwrap();
    assert!(header.contains("tcc_dist *tcc_mm_main_open(size_t size_N, size_t size_M, MPI_Comm comm);"), "{header}");
    assert!(header.contains("input A[N, M]") && header.contains("at the assumed sizes"), "{header}");
    run_c_test(&dir, &dist_dir, "-DTCC_SIZED", "mm_sized");

    let exe_f = dir.join("mm_sized_f");
    let mut args: Vec<String> =
        ["-cpp", "-DTCC_SIZED", "tcc_dist.f90", "mm.f90"].iter().map(|s| s.to_string()).collect();
    args.push(path("tests/tiled/mpi_mm_test.f90").display().to_string());
    args.extend(link_args(&dir, &dist_dir));
    args.extend(["-o".to_string(), exe_f.display().to_string()]);
    compile_and_run("mpif90", &args, &exe_f, &dir);
    let _ = std::fs::remove_dir_all(&dir);

    let (dir, dist_dir) = build_mm_from("sized-n", "tests/tiled/mpi_mm_sized.tc", &["--size", "M=7"]);
    let header = std::fs::read_to_string(dir.join("mm.h")).unwrap();
    assert!(header.contains("tcc_dist *tcc_mm_main_open(size_t size_N, MPI_Comm comm);"), "{header}");
    run_c_test(&dir, &dist_dir, "-DTCC_SIZED_N_ONLY", "mm_sized_n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A strided window read at affine subscripts (`I[2*t+r]`) in an `--mpi`
/// library: the C program under mpirun 2/3/4 gets the loops' values on every
/// rank's own tiles. With run-time sizes (bounds not provable when built) it is
/// refused.
#[cfg(feature = "mpi")]
#[test]
fn an_mpi_library_reads_affine_subscripts() {
    let (dir, dist_dir) = build_mm_from("window", "tests/tiled/mpi_window.tc", &[]);
    let exe = dir.join("window_test");
    let mut args = vec![path("tests/tiled/mpi_window_test.c").display().to_string(), format!("-I{}", dir.display())];
    args.extend(link_args(&dir, &dist_dir));
    args.extend(["-lm".to_string(), "-o".into(), exe.display().to_string()]);
    compile_and_run("mpicc", &args, &exe, &dir);
    let sized = dir.join("sized.tc");
    let src = std::fs::read_to_string(path("tests/tiled/mpi_window.tc")).unwrap().replace("range T = 9;", "range T;");
    std::fs::write(&sized, src.replace("range L = 19; // 2·(T − 1) + R", "range L;")).unwrap();
    let out = tcc().args(["build", "--mpi"]).arg(&sized).arg("-o").arg(dir.join("libsized.so")).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("E0765") && err.contains("--size"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Compiles tests/tiled/mpi_mm_test.c with `define` against the library in
/// `dir` and runs it as [`compile_and_run`] does.
#[cfg(feature = "mpi")]
fn run_c_test(dir: &Path, dist_dir: &Path, define: &str, exe: &str) {
    let exe = dir.join(exe);
    let mut args = vec![
        define.to_string(),
        path("tests/tiled/mpi_mm_test.c").display().to_string(),
        format!("-I{}", dir.display()),
    ];
    args.extend(link_args(dir, dist_dir));
    args.extend(["-lm".to_string(), "-o".into(), exe.display().to_string()]);
    compile_and_run("mpicc", &args, &exe, dir);
}

/// Issue 17: a rank that dies while the others are inside `tcc_dist_run` (waiting
/// for it in an exchange) ends the whole job within seconds with a non-zero
/// status, under mpirun, instead of leaving the others waiting.
#[cfg(feature = "mpi")]
#[test]
fn a_rank_dying_during_a_library_run_ends_the_job() {
    let (dir, dist_dir) = build_mm("dies");
    let exe = dir.join("mm_dies");
    let mut args = vec![path("tests/tiled/mpi_mm_dies.c").display().to_string(), format!("-I{}", dir.display())];
    args.extend(link_args(&dir, &dist_dir));
    args.extend(["-o".to_string(), exe.display().to_string()]);
    let cc = std::process::Command::new("mpicc").args(&args).current_dir(&dir).output().unwrap();
    assert!(cc.status.success(), "mpicc: {}", String::from_utf8_lossy(&cc.stderr));
    for np in ["2", "3"] {
        let t0 = std::time::Instant::now();
        let run = std::process::Command::new("timeout")
            .args(["60", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np])
            .arg(&exe)
            .env("TCC_NUM_THREADS", "1")
            .output()
            .unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let (out, err) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
        let code = run.status.code();
        assert!(code != Some(0) && code != Some(124), "{np} ranks: status {code:?}\n{out}\n{err}");
        assert!(secs < 30.0, "{np} ranks: the job took {secs:.1} s to end\n{out}\n{err}");
        assert!(err.contains("dying before the run"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
