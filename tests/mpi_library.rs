//! `tcc build --mpi`: a library called from a C MPI program under
//! `mpirun -np 2/3/4` (each rank fills and reads only the tiles it owns), and
//! what the command refuses.

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
}

fn tempfile_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tcc-mpi-lib-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[cfg(feature = "mpi")]
#[test]
fn a_c_mpi_program_runs_a_tcc_library_on_2_3_and_4_ranks() {
    let dir = tempfile_dir("c");
    let lib = dir.join("libmm.so");
    let out = tcc().args(["build", "--mpi"]).arg(path("tests/tiled/mpi_mm.tc")).arg("-o").arg(&lib).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header = std::fs::read_to_string(dir.join("mm.h")).unwrap();
    assert!(header.contains("tcc_dist *tcc_mm_main_open(MPI_Comm comm);"), "{header}");
    assert!(dir.join("tcc_dist.h").exists());
    let exe = dir.join("mm_test");
    let dist_dir = assert_cmd::cargo::cargo_bin("tcc").parent().unwrap().to_path_buf();
    let cc = std::process::Command::new("mpicc")
        .arg(path("tests/tiled/mpi_mm_test.c"))
        .arg(format!("-I{}", dir.display()))
        .arg(format!("-L{}", dir.display()))
        .arg("-lmm")
        .arg(format!("-L{}", dist_dir.display()))
        .arg("-ltcc_dist")
        .arg(format!("-Wl,-rpath,{}:{}", dir.display(), dist_dir.display()))
        .arg("-lm")
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    for np in ["2", "3", "4"] {
        let run = std::process::Command::new("timeout")
            .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np])
            .arg(&exe)
            .env("TCC_NUM_THREADS", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&run.stdout).to_string();
        assert!(
            run.status.success() && text.contains("ok"),
            "{np} ranks: {text}\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
