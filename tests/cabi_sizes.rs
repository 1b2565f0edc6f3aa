//! Libraries with run-time sizes (`range O;`): one `tcc build`, called from C with
//! five different size sets (1, primes, larger than the assumption), equals the
//! interpreter at each; bad sizes (zero, overflowing products) and lengths that do
//! not match the sizes are refused with TCC_ERR_SIZE / TCC_ERR_LENGTH and nothing
//! is written. The Fortran module compiles under gfortran's strict flags and its
//! size arguments are usable by keyword.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use tcc::interp::{random_inputs, run_unit};
use tcc::run::compare::compare_outputs;
use tcc::sema::hir::UnitId;

/// A CCD-like doubles residual with a ladder term, a ring term and an energy:
/// ranges O and V are run-time sizes.
const SRC: &str = "range O; range V;
index i, j, k, l : O; index a, b, c, d : V;
input tensor T2[a,b,i,j];
input tensor W[k,l,c,d];
input tensor F[a,c];
output tensor R[a,b,i,j];
output tensor E;
tensor X[k,l,i,j];
X[k,l,i,j] = W[k,l,c,d] * T2[c,d,i,j];
R[a,b,i,j] = 0.25 * T2[a,b,k,l] * X[k,l,i,j] + F[a,c] * T2[c,b,i,j];
E = 0.25 * W[i,j,a,b] * T2[a,b,i,j];
";

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const DRIVER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ccd.h"
static double* load(const char* p, size_t n) {
  double* b = malloc((n ? n : 1) * sizeof(double)); FILE* f = fopen(p, "rb");
  if (!f || fread(b, sizeof(double), n, f) != n) { fprintf(stderr, "cannot read %s\n", p); exit(3); }
  fclose(f); return b;
}
static void save(const char* p, const double* b, size_t n) {
  FILE* f = fopen(p, "wb"); fwrite(b, sizeof(double), n, f); fclose(f);
}
int main(int argc, char** argv) {
  size_t o = strtoul(argv[1], 0, 10), v = strtoul(argv[2], 0, 10);
  size_t nt = v * v * o * o, nw = o * o * v * v, nf = v * v;
  double* t2 = load("T2.bin", nt); double* w = load("W.bin", nw); double* f = load("F.bin", nf);
  double* r = calloc(nt, sizeof(double)); double e = 0;
  int rc = tcc_ccd_main(o, v, t2, nt, w, nw, f, nf, r, nt, &e, 1);
  if (rc != TCC_OK) { fprintf(stderr, "rc %d: %s\n", rc, tcc_ccd_last_error()); return 1; }
  save("R.bin", r, nt); save("E.bin", &e, 1);
  /* Errors: nothing written, the right code, a message naming the problem. */
  double sentinel = 12345.0; e = sentinel;
  rc = tcc_ccd_main(0, v, t2, nt, w, nw, f, nf, r, nt, &e, 1);
  if (rc != TCC_ERR_SIZE || e != sentinel || !strstr(tcc_ccd_last_error(), "size_O")) { printf("zero size: rc %d\n", rc); return 2; }
  rc = tcc_ccd_main(o + 1, v, t2, nt, w, nw, f, nf, r, nt, &e, 1);
  if (rc != TCC_ERR_LENGTH || e != sentinel) { printf("sizes vs lengths: rc %d\n", rc); return 2; }
  rc = tcc_ccd_main((size_t)1 << 40, (size_t)1 << 40, t2, nt, w, nw, f, nf, r, nt, &e, 1);
  if (rc != TCC_ERR_SIZE || e != sentinel) { printf("overflow: rc %d\n", rc); return 2; }
  printf("ok\n");
  return 0;
}
"#;

fn write_raw(path: &Path, data: &[f64]) {
    std::fs::write(path, data.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

fn read_raw(path: &Path) -> Vec<f64> {
    std::fs::read(path).unwrap().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn a_runtime_sized_library_equals_the_interpreter_at_five_size_sets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("ccd.tc"), SRC).unwrap();
    let so = dir.join("libccd.so");
    run(
        Command::new(env!("CARGO_BIN_EXE_tcc"))
            .args(["build", "ccd.tc", "-o"])
            .arg(&so)
            .args(["--assume", "O=8,V=24"])
            .current_dir(dir),
        "tcc build",
    );
    let header = std::fs::read_to_string(dir.join("ccd.h")).unwrap();
    assert!(
        header.contains("int tcc_ccd_main(size_t size_O, size_t size_V, const double* T2, size_t T2_len"),
        "{header}"
    );
    assert!(
        header.contains("T2: double [V=size_V][V=size_V][O=size_O][O=size_O], size_V*size_V*size_O*size_O elements"),
        "{header}"
    );
    std::fs::write(dir.join("driver.c"), DRIVER).unwrap();
    run(
        Command::new("cc")
            .args(["-O1", "-o", "driver", "driver.c", "-L."])
            .arg("-lccd")
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .current_dir(dir),
        "cc driver.c",
    );

    let (hir, diags) = tcc::compile(SRC, "main");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let u = UnitId::new(0);
    for (o, v) in [(1, 1), (2, 7), (3, 13), (5, 4), (11, 17)] {
        let sizes = BTreeMap::from([("O".to_string(), o), ("V".to_string(), v)]);
        let bound = tcc::sema::sizes::bind_sizes(&hir, &sizes).unwrap();
        let inputs = random_inputs(&bound, u, (o * 100 + v) as u64).unwrap();
        for (&t, d) in &inputs {
            write_raw(&dir.join(format!("{}.bin", bound.tensors[t].name)), &d.data);
        }
        let out = run(Command::new(dir.join("driver")).args([o.to_string(), v.to_string()]).current_dir(dir), "driver");
        assert_eq!(out.trim(), "ok", "O={o} V={v}");
        let want = run_unit(&bound, u, &inputs).unwrap();
        let mut got = std::collections::HashMap::new();
        for &t in want.keys() {
            let name = &bound.tensors[t].name;
            got.insert(t, tcc::tensor::Dense::from_vec(bound.shape(t), read_raw(&dir.join(format!("{name}.bin")))));
        }
        compare_outputs(&bound, u, &got, &want).unwrap_or_else(|e| panic!("O={o} V={v}: {e}"));
    }
}

#[test]
fn the_fortran_module_of_a_runtime_sized_library_takes_sizes_by_keyword() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("ccd.tc"), SRC).unwrap();
    run(
        Command::new(env!("CARGO_BIN_EXE_tcc")).args(["build", "ccd.tc", "-o", "libccd.so"]).current_dir(dir),
        "tcc build",
    );
    let module = std::fs::read_to_string(dir.join("ccd.f90")).unwrap();
    assert!(module.contains("integer(c_size_t), value :: size_o"), "{module}");
    let prog = "program p
  use, intrinsic :: iso_c_binding
  use ccd
  implicit none
  integer, parameter :: o = 2, v = 3
  real(c_double) :: t2(o, o, v, v), w(v, v, o, o), f(v, v), r(o, o, v, v), e
  integer(c_int) :: rc
  t2 = 0.5d0; w = 0.25d0; f = 1.0d0; r = 0.0d0; e = 0.0d0
  rc = tcc_ccd_main(size_v=int(v, c_size_t), size_o=int(o, c_size_t), t2=t2, t2_len=size(t2, kind=c_size_t), &
      w=w, w_len=size(w, kind=c_size_t), f=f, f_len=size(f, kind=c_size_t), r=r, r_len=size(r, kind=c_size_t), &
      e=e, e_len=1_c_size_t)
  if (rc /= tcc_ccd_ok) error stop 1
  ! E = 0.25 * sum over i,j,a,b of 0.25 * 0.5 = 0.25 * 0.125 * o*o*v*v
  if (abs(e - 0.25d0 * 0.125d0 * o * o * v * v) > 1d-12) error stop 2
  rc = tcc_ccd_main(0_c_size_t, int(v, c_size_t), t2, size(t2, kind=c_size_t), w, size(w, kind=c_size_t), &
      f, size(f, kind=c_size_t), r, size(r, kind=c_size_t), e, 1_c_size_t)
  if (rc /= tcc_ccd_err_size) error stop 3
  print '(a)', 'ok'
end program p
";
    std::fs::write(dir.join("p.f90"), prog).unwrap();
    run(
        Command::new("gfortran")
            .args(["-Wall", "-Wextra", "-Werror", "-std=f2018", "-o", "p", "ccd.f90", "p.f90", "-L."])
            .arg("-lccd")
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .current_dir(dir),
        "gfortran",
    );
    let out = run(&mut Command::new(dir.join("p")), "fortran program");
    assert_eq!(out.trim(), "ok");
}
