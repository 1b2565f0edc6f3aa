//! Compiles `tests/capi.c` with the system C compiler against the static library
//! and `include/tcc_runtime.h`, and runs it.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_uses_the_runtime() {
    c_program_runs()
}

/// With the `mpi` feature the static library holds the MPI back end, whose
/// objects the linker may pull in with the C API's: link MPI too.
fn mpi_link_flags() -> Vec<String> {
    if !cfg!(feature = "mpi") {
        return Vec::new();
    }
    let shown = Command::new("mpicc").arg("--showme:link").output().ok().filter(|o| o.status.success());
    match shown {
        Some(o) => String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect(),
        None => vec!["-lmpi".to_string()],
    }
}

fn c_program_runs() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // target/<profile>/deps/capi-… → target/<profile>
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let lib = profile_dir.join("libtcc_runtime.a");
    if !lib.exists() {
        // `cargo test` alone may not have produced the static library yet.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let st =
            Command::new(cargo).args(["build", "-p", "tcc-runtime", "--lib"]).current_dir(&manifest).status().unwrap();
        assert!(st.success(), "cargo build -p tcc-runtime failed");
    }
    assert!(lib.exists(), "{} is missing (cargo builds it with the library)", lib.display());
    let dir = tempfile_dir();
    let bin = dir.join("capi");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-O1", "-o"])
        .arg(&bin)
        .arg(manifest.join("tests/capi.c"))
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(&lib)
        .args(mpi_link_flags())
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .expect("a C compiler (cc) is installed");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&bin).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "C program failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(stdout.trim(), "ok");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tcc-capi-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
