//! Every example built into a shared library with `tcc build` and called from C
//! (gcc) and from Fortran (gfortran, through the generated module): the results
//! equal the interpreter's, and wrong arguments are refused with an error code and
//! a message. ABI v2: two libraries with a program of the same name in one process
//! (C and Fortran), declaration-order arguments, `--name`.
//! Libraries with run-time sizes (`range O;`): one build called at five size sets.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use tcc::codegen::cabi::abi_args;
use tcc::interp::{random_inputs, run_unit};
use tcc::run::compare::compare_outputs;
use tcc::sema::hir::{ElemType, Hir, UnitId};
use tcc::tensor::Dense;

fn write_raw(path: &Path, d: &Dense, elem: ElemType) {
    let mut bytes = Vec::new();
    for &x in &d.data {
        match elem {
            ElemType::F64 | ElemType::C128 => bytes.extend_from_slice(&x.to_le_bytes()),
            ElemType::F32 | ElemType::C64 => bytes.extend_from_slice(&(x as f32).to_le_bytes()),
            // 16-bit tensors cross as bit patterns.
            ElemType::BF16 => bytes.extend_from_slice(&tcc::half::f32_to_bf16(x as f32).to_le_bytes()),
            ElemType::F16 => bytes.extend_from_slice(&tcc::half::f32_to_f16(x as f32).to_le_bytes()),
        }
    }
    std::fs::write(path, bytes).unwrap();
}

fn read_raw(path: &Path, shape: Vec<usize>, elem: ElemType) -> Dense {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let data: Vec<f64> = match elem {
        ElemType::F64 | ElemType::C128 => {
            bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
        }
        ElemType::F32 | ElemType::C64 => {
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect()
        }
        ElemType::BF16 => {
            bytes.chunks_exact(2).map(|c| tcc::half::bf16_to_f32(u16::from_le_bytes([c[0], c[1]])) as f64).collect()
        }
        ElemType::F16 => {
            bytes.chunks_exact(2).map(|c| tcc::half::f16_to_f32(u16::from_le_bytes([c[0], c[1]])) as f64).collect()
        }
    };
    Dense::from_vec(shape, data)
}

/// Runs a command that must succeed; its standard output.
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

/// gfortran's strictest usual flags: the generated modules compile without warnings.
const F_STRICT: [&str; 4] = ["-Wall", "-Wextra", "-Werror", "-std=f2018"];

fn ctype(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 => "double",
        ElemType::F32 => "float",
        ElemType::C128 => "double _Complex",
        ElemType::C64 => "float _Complex",
        ElemType::BF16 | ElemType::F16 => "uint16_t",
    }
}

/// A C driver for unit `u`: reads `in_K.bin`, calls, writes `c_out_K.bin`, then
/// checks the error paths.
fn c_driver(hir: &Hir, lib: &str, u: UnitId) -> String {
    let name = &hir.units[u].name;
    let (args, n_in) = abi_args(hir, u);
    let ins = &args[..n_in];
    let mut s = format!("#include \"{lib}.h\"\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n");
    s.push_str(
        "static void* load(const char* p, size_t n) { void* b = malloc(n ? n : 1); FILE* f = fopen(p, \"rb\"); if (!f || fread(b, 1, n, f) != n) { fprintf(stderr, \"cannot read %s\\n\", p); exit(9); } fclose(f); return b; }\n\
static void save(const char* p, const void* b, size_t n) { FILE* f = fopen(p, \"wb\"); fwrite(b, 1, n, f); fclose(f); }\n\
int main(void) {\n",
    );
    for (k, &t) in args.iter().enumerate() {
        let e = hir.tensors[t].elem;
        let n = hir.num_elements(t).unwrap();
        let sz = n * e.size_bytes();
        if k < ins.len() {
            let _ = writeln!(s, "  {}* v{k} = load(\"in_{k}.bin\", {sz}); size_t n{k} = {n};", ctype(e));
        } else {
            let _ = writeln!(s, "  {}* v{k} = calloc({n} ? {n} : 1, {}); size_t n{k} = {n};", ctype(e), e.size_bytes());
        }
    }
    let call = |over: Option<(usize, &str)>| -> String {
        let a: Vec<String> = (0..args.len())
            .map(|k| match over {
                Some((j, "len")) if j == k => format!("v{k}, n{k} + 1"),
                Some((j, "null")) if j == k => format!("NULL, n{k}"),
                _ => format!("v{k}, n{k}"),
            })
            .collect();
        format!("tcc_{lib}_{name}({})", a.join(", "))
    };
    let _ = writeln!(s, "  int rc = {};", call(None));
    let _ = writeln!(
        s,
        "  if (rc != TCC_OK) {{ fprintf(stderr, \"rc %d: %s\\n\", rc, tcc_{lib}_last_error()); return 1; }}"
    );
    let _ = writeln!(
        s,
        "  if (tcc_{lib}_last_error() != NULL) {{ fprintf(stderr, \"error set after success\\n\"); return 2; }}"
    );
    for (k, &t) in args.iter().enumerate().skip(ins.len()) {
        let sz = hir.num_elements(t).unwrap() * hir.tensors[t].elem.size_bytes();
        let _ = writeln!(s, "  save(\"c_out_{k}.bin\", v{k}, {sz});");
    }
    // Error paths: a wrong length on every argument, a null pointer where there are
    // elements; outputs must be untouched.
    for (k, &t) in args.iter().enumerate() {
        let tname = &hir.tensors[t].name;
        let _ = writeln!(
            s,
            "  rc = {}; if (rc != TCC_ERR_LENGTH || !tcc_{lib}_last_error() || !strstr(tcc_{lib}_last_error(), \"`{tname}`\")) {{ fprintf(stderr, \"length check of {tname}: %d\\n\", rc); return 3; }}",
            call(Some((k, "len")))
        );
        if hir.num_elements(t).unwrap() > 0 {
            let _ = writeln!(
                s,
                "  rc = {}; if (rc != TCC_ERR_NULL) {{ fprintf(stderr, \"null check of {tname}: %d\\n\", rc); return 4; }}",
                call(Some((k, "null")))
            );
        }
    }
    if args.len() > ins.len()
        && !ins.is_empty()
        && hir.num_elements(args[0]).unwrap() > 0
        && hir.num_elements(args[ins.len()]).unwrap() > 0
    {
        // An output that overlaps an input (same element type only).
        if hir.tensors[args[0]].elem == hir.tensors[args[ins.len()]].elem {
            let o = ins.len();
            let a: Vec<String> =
                (0..args.len()).map(|k| if k == o { format!("v0, n{k}") } else { format!("v{k}, n{k}") }).collect();
            let _ = writeln!(
                s,
                "  if (n0 >= n{o}) {{ rc = tcc_{lib}_{name}({}); if (rc != TCC_ERR_OVERLAP) {{ fprintf(stderr, \"overlap: %d\\n\", rc); return 5; }} }}",
                a.join(", ").replacen(&format!("v0, n{o}"), &format!("({}*)v0, n{o}", ctype(hir.tensors[args[o]].elem)), 1)
            );
        }
    }
    for (k, &t) in args.iter().enumerate().skip(ins.len()) {
        let sz = hir.num_elements(t).unwrap() * hir.tensors[t].elem.size_bytes();
        let _ = writeln!(
            s,
            "  {{ void* again = load(\"c_out_{k}.bin\", {sz}); if (memcmp(again, v{k}, {sz}) != 0) {{ fprintf(stderr, \"output {k} written on error\\n\"); return 6; }} }}"
        );
    }
    s.push_str("  puts(\"ok\");\n  return 0;\n}\n");
    s
}

fn fkind(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 | ElemType::C128 => "c_double",
        ElemType::F32 | ElemType::C64 => "c_float",
        ElemType::BF16 | ElemType::F16 => "c_int16_t",
    }
}

/// A Fortran driver: reads `in_K.bin`, calls through the module, writes `f_out_K.bin`.
fn fortran_driver(hir: &Hir, lib: &str, u: UnitId) -> String {
    let module = lib;
    let name = &hir.units[u].name;
    let (args, n_in) = abi_args(hir, u);
    let ins = &args[..n_in];
    let mut s = format!("program drv\n  use {module}\n  use, intrinsic :: iso_c_binding\n  implicit none\n  integer(c_int) :: rc\n  integer :: u\n");
    for (k, &t) in args.iter().enumerate() {
        let e = hir.tensors[t].elem;
        let word = if e.is_half() { "integer" } else { "real" };
        let _ = writeln!(s, "  {word}({}), allocatable :: v{k}(:)", fkind(e));
    }
    for (k, &t) in args.iter().enumerate() {
        let n = hir.num_elements(t).unwrap();
        let _ = writeln!(s, "  allocate(v{k}({n}))");
        if k < ins.len() {
            let _ =
                writeln!(s, "  open(newunit=u, file='in_{k}.bin', access='stream', form='unformatted', status='old')");
            let _ = writeln!(s, "  read(u) v{k}\n  close(u)");
        } else {
            let _ = writeln!(s, "  v{k} = 0");
        }
    }
    let call = |bad: Option<usize>| -> String {
        let a: Vec<String> = args
            .iter()
            .enumerate()
            .map(|(k, &t)| {
                let n = hir.num_elements(t).unwrap() + usize::from(bad == Some(k));
                // A scalar tensor is a scalar dummy: pass an element.
                let v = if hir.tensors[t].dims.is_empty() { format!("v{k}(1)") } else { format!("v{k}") };
                format!("{v}, {n}_c_size_t")
            })
            .collect();
        format!("tcc_{lib}_{name}( &\n      {})", a.join(", &\n      "))
    };
    let _ = writeln!(s, "  rc = {}", call(None));
    let _ = writeln!(s, "  if (rc /= tcc_{lib}_ok) then\n    print *, tcc_{lib}_error_message()\n    stop 1\n  end if");
    for k in ins.len()..args.len() {
        let _ = writeln!(
            s,
            "  open(newunit=u, file='f_out_{k}.bin', access='stream', form='unformatted', status='replace')"
        );
        let _ = writeln!(s, "  write(u) v{k}\n  close(u)");
    }
    if !args.is_empty() {
        let _ = writeln!(s, "  rc = {}", call(Some(0)));
        let _ =
            writeln!(s, "  if (rc /= tcc_{lib}_err_length) stop 2\n  if (len(tcc_{lib}_error_message()) == 0) stop 3");
    }
    s.push_str("  print '(a)', 'ok'\nend program drv\n");
    s
}

#[test]
fn every_example_as_a_library_from_c_and_fortran() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let mut examples: Vec<_> = std::fs::read_dir(root.join("examples")).unwrap().map(|e| e.unwrap().path()).collect();
    examples.sort();
    let mut units = 0;
    for path in examples.iter().filter(|p| p.extension().is_some_and(|x| x == "tc")) {
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        // Complex examples have their C and Fortran tests in tests/complex.rs
        // (interleaved arguments, checked against the complex interpreter).
        let text = std::fs::read_to_string(path).unwrap();
        if text.contains(": c128") || text.contains(": c64") {
            continue;
        }
        let lib = format!("ex_{stem}");
        let dir = tmp.path().join(&stem);
        std::fs::create_dir_all(&dir).unwrap();
        let so = dir.join(format!("lib{lib}.so"));
        run(
            Command::new(env!("CARGO_BIN_EXE_tcc")).arg("build").arg(path).arg("-o").arg(&so),
            &format!("tcc build {stem}"),
        );
        assert!(dir.join(format!("{lib}.h")).exists() && dir.join(format!("{lib}.f90")).exists());
        // The module once, for every driver; it compiles without warnings.
        run(
            Command::new("gfortran").current_dir(&dir).args(F_STRICT).args(["-c", &format!("{lib}.f90")]),
            &format!("gfortran {lib}.f90"),
        );
        let src = std::fs::read_to_string(path).unwrap();
        let (hir, _) = tcc::compile(&src, "main");
        let hir = hir.unwrap();
        for ui in 0..hir.units.len() {
            let u = UnitId::new(ui);
            let inputs = random_inputs(&hir, u, 11).unwrap();
            let want = run_unit(&hir, u, &inputs).unwrap();
            let (args, n_in) = abi_args(&hir, u);
            let (ins, outs) = args.split_at(n_in);
            let udir = dir.join(format!("u{ui}"));
            std::fs::create_dir_all(&udir).unwrap();
            for (k, &t) in ins.iter().enumerate() {
                write_raw(&udir.join(format!("in_{k}.bin")), &inputs[&t], hir.tensors[t].elem);
            }
            let rpath = format!("-Wl,-rpath,{}", dir.display());
            std::fs::write(udir.join("drv.c"), c_driver(&hir, &lib, u)).unwrap();
            run(
                Command::new("gcc")
                    .current_dir(&udir)
                    .args(["-O1", "-Wall", "-Werror", "-o", "drv_c", "drv.c", "-I"])
                    .arg(&dir)
                    .arg("-L")
                    .arg(&dir)
                    .arg(format!("-l{lib}"))
                    .arg(&rpath),
                &format!("gcc driver for {stem}/{ui}"),
            );
            run(Command::new(udir.join("drv_c")).current_dir(&udir), &format!("C driver {stem}/{ui}"));
            std::fs::write(udir.join("drv.f90"), fortran_driver(&hir, &lib, u)).unwrap();
            run(
                Command::new("gfortran")
                    .current_dir(&udir)
                    .args(["-o", "drv_f", "drv.f90", "-I"])
                    .arg(&dir)
                    .arg(dir.join(format!("{lib}.o")))
                    .arg("-L")
                    .arg(&dir)
                    .arg(format!("-l{lib}"))
                    .arg(&rpath),
                &format!("gfortran driver for {stem}/{ui}"),
            );
            run(Command::new(udir.join("drv_f")).current_dir(&udir), &format!("Fortran driver {stem}/{ui}"));
            for lang in ["c", "f"] {
                let mut got = HashMap::new();
                for (k, &t) in outs.iter().enumerate() {
                    let d = read_raw(
                        &udir.join(format!("{lang}_out_{}.bin", ins.len() + k)),
                        hir.shape(t),
                        hir.tensors[t].elem,
                    );
                    got.insert(t, d);
                }
                compare_outputs(&hir, u, &got, &want).unwrap_or_else(|e| panic!("{stem}/{ui} from {lang}: {e}"));
            }
            units += 1;
        }
    }
    assert!(units >= 8, "{units}");
}

/// `tcc build FILE -o OUT ARGS...`: the exit status and stderr.
fn tcc_build(dir: &Path, file: &str, out: &str, extra: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tcc"))
        .current_dir(dir)
        .args(["build", file, "-o", out])
        .args(extra)
        .output()
        .unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The defined dynamic symbols of a shared library (`nm -D --defined-only`).
fn exported(so: &Path) -> Vec<String> {
    let o = Command::new("nm").arg("-D").arg("--defined-only").arg(so).output().unwrap();
    assert!(o.status.success(), "nm {}", so.display());
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    v.sort();
    v
}

const ENERGY_DECLS: &str = "range O = 2;\nrange V = 3;\nindex i, j : O;\nindex a, b : V;\n\
input tensor T2[i,j,a,b] : f64;\ninput tensor Voovv[i,j,a,b] : f64;\noutput tensor E : f64;\n";

/// Program `energy` with body `body`, the inputs declared T2 then Voovv.
fn energy_source(body: &str) -> String {
    format!("{ENERGY_DECLS}program energy {{\n  E = {body};\n}}\n")
}

/// The fixed inputs: T2[n] = 0.1 (n+1), Voovv[n] = (n mod 5) - 1.5, n the row-major
/// (= column-major of the reversed Fortran array) position.
fn energy_inputs() -> (Vec<f64>, Vec<f64>) {
    ((0..36).map(|n| 0.1 * (n + 1) as f64).collect(), (0..36).map(|n| (n % 5) as f64 - 1.5).collect())
}

/// Two libraries, `ea` and `eb`, each with a `program energy` (different bodies,
/// first use Voovv then T2) in `tmp`: returns the expected energies.
fn two_energy_libraries(tmp: &Path) -> (f64, f64) {
    std::fs::write(tmp.join("ea.tc"), energy_source("0.5 * Voovv[i,j,a,b] * T2[i,j,a,b]")).unwrap();
    std::fs::write(tmp.join("eb.tc"), energy_source("Voovv[i,j,a,b] * T2[i,j,a,b] + T2[i,j,a,b] * T2[i,j,a,b]"))
        .unwrap();
    for (file, lib) in [("ea.tc", "libea.so"), ("eb.tc", "libeb.so")] {
        let (ok, err) = tcc_build(tmp, file, lib, &[]);
        assert!(ok, "tcc build {file}: {err}");
    }
    for lib in ["ea", "eb"] {
        assert_eq!(
            exported(&tmp.join(format!("lib{lib}.so"))),
            vec![format!("tcc_{lib}_energy"), format!("tcc_{lib}_last_error"), format!("tcc_{lib}_version")],
            "only the library's own symbols are exported"
        );
    }
    // Independently of tcc: plain sums over the flat arrays.
    let (t2, v) = energy_inputs();
    let ea = 0.5 * t2.iter().zip(&v).map(|(t, v)| t * v).sum::<f64>();
    let eb = t2.iter().zip(&v).map(|(t, v)| t * v + t * t).sum::<f64>();
    (ea, eb)
}

#[test]
fn two_libraries_with_the_same_program_from_c() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (ea, eb) = two_energy_libraries(dir);
    let h = std::fs::read_to_string(dir.join("ea.h")).unwrap();
    assert!(h.contains("#define TCC_EA_ABI_VERSION 2"), "{h}");
    assert!(
        h.contains("int tcc_ea_energy(const double* T2, size_t T2_len, const double* Voovv, size_t Voovv_len, double* E, size_t E_len);"),
        "declaration order, not order of use:\n{h}"
    );
    let c = format!(
        r#"#include "ea.h"
#include "eb.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
int main(void) {{
  double t2[36], v[36], e1 = 0, e2 = 0;
  for (int n = 0; n < 36; n++) {{ t2[n] = 0.1 * (n + 1); v[n] = (n % 5) - 1.5; }}
  if (tcc_ea_energy(t2, 36, v, 36, &e1, 1) != TCC_OK) {{ fprintf(stderr, "a: %s\n", tcc_ea_last_error()); return 1; }}
  if (tcc_eb_energy(t2, 36, v, 36, &e2, 1) != TCC_OK) {{ fprintf(stderr, "b: %s\n", tcc_eb_last_error()); return 2; }}
  if (fabs(e1 - ({ea:.17e})) > 1e-12 * fabs({ea:.17e}) + 1e-12) {{ fprintf(stderr, "a: %.17g\n", e1); return 3; }}
  if (fabs(e2 - ({eb:.17e})) > 1e-12 * fabs({eb:.17e}) + 1e-12) {{ fprintf(stderr, "b: %.17g\n", e2); return 4; }}
  /* An error in one library is that library's. */
  int rc = tcc_ea_energy(t2, 35, v, 36, &e1, 1);
  if (rc != TCC_ERR_LENGTH) return 5;
  if (!tcc_ea_last_error() || !strstr(tcc_ea_last_error(), "tcc_ea_energy") || !strstr(tcc_ea_last_error(), "`T2`")) return 6;
  if (tcc_eb_last_error() != NULL) {{ fprintf(stderr, "b sees: %s\n", tcc_eb_last_error()); return 7; }}
  rc = tcc_eb_energy(t2, 36, v, 37, &e2, 1);
  if (rc != TCC_ERR_LENGTH || !tcc_eb_last_error() || !strstr(tcc_eb_last_error(), "`Voovv`")) return 8;
  if (tcc_eb_energy(t2, 36, v, 36, &e2, 1) != TCC_OK || tcc_eb_last_error() != NULL) return 9;
  if (!tcc_ea_last_error()) return 10;
  if (TCC_EA_ABI_VERSION != 2 || !strstr(tcc_ea_version(), " abi 2") || strncmp(tcc_eb_version(), "tcc ", 4)) return 11;
  puts("ok");
  return 0;
}}
"#
    );
    std::fs::write(dir.join("main.c"), c).unwrap();
    run(
        Command::new("gcc")
            .current_dir(dir)
            .args(["-Wall", "-Wextra", "-Werror", "-o", "main_c", "main.c", "-I.", "-L.", "-lea", "-leb", "-lm"])
            .arg(format!("-Wl,-rpath,{}", dir.display())),
        "gcc main.c",
    );
    run(Command::new(dir.join("main_c")).current_dir(dir), "C program with two libraries");
}

#[test]
fn two_libraries_with_the_same_program_from_fortran() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (ea, eb) = two_energy_libraries(dir);
    // Both modules in one scope, without `only:`; keyword arguments in any order.
    let f = format!(
        r#"program two
  use ea
  use eb
  use, intrinsic :: iso_c_binding, only: c_double, c_int, c_size_t
  implicit none
  real(c_double) :: t2(3, 3, 2, 2), v(3, 3, 2, 2), e1, e2
  integer(c_int) :: rc
  integer :: n
  t2 = reshape([(0.1_c_double * n, n = 1, 36)], shape(t2))
  v = reshape([(real(mod(n - 1, 5), c_double) - 1.5_c_double, n = 1, 36)], shape(v))
  rc = tcc_ea_energy(voovv=v, voovv_len=36_c_size_t, t2=t2, t2_len=36_c_size_t, e=e1, e_len=1_c_size_t)
  if (rc /= tcc_ea_ok) stop 1
  rc = tcc_eb_energy(t2=t2, t2_len=36_c_size_t, voovv=v, voovv_len=36_c_size_t, e=e2, e_len=1_c_size_t)
  if (rc /= tcc_eb_ok) stop 2
  if (abs(e1 - ({ea:.17e}_c_double)) > 1.0e-12_c_double * (abs(e1) + 1)) stop 3
  if (abs(e2 - ({eb:.17e}_c_double)) > 1.0e-12_c_double * (abs(e2) + 1)) stop 4
  rc = tcc_ea_energy(t2=t2, t2_len=35_c_size_t, voovv=v, voovv_len=36_c_size_t, e=e1, e_len=1_c_size_t)
  if (rc /= tcc_ea_err_length) stop 5
  if (index(tcc_ea_error_message(), 'tcc_ea_energy') == 0) stop 6
  if (len(tcc_eb_error_message()) /= 0) stop 7
  if (index(tcc_eb_version_string(), ' abi 2') == 0 .or. tcc_ea_abi_version /= 2) stop 8
  print '(a)', 'ok'
end program two
"#
    );
    std::fs::write(dir.join("two.f90"), f).unwrap();
    for m in ["ea.f90", "eb.f90", "two.f90"] {
        run(Command::new("gfortran").current_dir(dir).args(F_STRICT).args(["-c", m]), &format!("gfortran {m}"));
    }
    run(
        Command::new("gfortran")
            .current_dir(dir)
            .args(["-o", "two", "two.o", "ea.o", "eb.o", "-L.", "-lea", "-leb"])
            .arg(format!("-Wl,-rpath,{}", dir.display())),
        "gfortran link",
    );
    run(Command::new(dir.join("two")).current_dir(dir), "Fortran program with two libraries");
}

#[test]
fn commuting_a_product_keeps_the_header_and_module() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (k, body) in ["0.5 * T2[i,j,a,b] * Voovv[i,j,a,b]", "0.5 * Voovv[i,j,a,b] * T2[i,j,a,b]"].iter().enumerate() {
        let dir = tmp.path().join(format!("v{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("e.tc"), energy_source(body)).unwrap();
        let (ok, err) = tcc_build(&dir, "e.tc", "libe.so", &[]);
        assert!(ok, "{err}");
        let h = std::fs::read(dir.join("e.h")).unwrap();
        let f = std::fs::read(dir.join("e.f90")).unwrap();
        files.push((h, f));
    }
    assert!(files[0].0 == files[1].0, "the headers differ");
    assert!(files[0].1 == files[1].1, "the Fortran modules differ");
    let h = String::from_utf8(files[0].0.clone()).unwrap();
    assert!(h.contains("tcc_e_energy(const double* T2, size_t T2_len, const double* Voovv"), "{h}");
}

#[test]
fn library_names() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("e.tc"), energy_source("0.5 * T2[i,j,a,b] * Voovv[i,j,a,b]")).unwrap();
    // --name wins over the output's file name.
    let (ok, err) = tcc_build(dir, "e.tc", "libfoo.so", &["--name", "bar"]);
    assert!(ok, "{err}");
    assert!(dir.join("bar.h").exists() && dir.join("bar.f90").exists());
    assert_eq!(exported(&dir.join("libfoo.so")), vec!["tcc_bar_energy", "tcc_bar_last_error", "tcc_bar_version"]);
    let h = std::fs::read_to_string(dir.join("bar.h")).unwrap();
    assert!(h.contains("#define TCC_BAR_ABI_VERSION 2") && h.contains("int tcc_bar_energy("), "{h}");
    // Not an identifier: a clear error, nothing written.
    for (out, extra) in
        [("libx.so", vec!["--name", "9lives"]), ("libx.so", vec!["--name", "a-b"]), ("lib-x.so", vec![])]
    {
        let (ok, err) = tcc_build(dir, "e.tc", out, &extra);
        assert!(!ok, "{out} {extra:?} was accepted");
        assert!(err.contains("invalid library name") && err.contains("--name"), "{err}");
    }
    assert!(!dir.join("libx.so").exists() && !dir.join("lib-x.so").exists());
    // A program whose symbol would clash with the library's own.
    std::fs::write(dir.join("v.tc"), energy_source("1.0 * T2[i,j,a,b] * Voovv[i,j,a,b]").replace("energy", "version"))
        .unwrap();
    let (ok, err) = tcc_build(dir, "v.tc", "libv.so", &[]);
    assert!(!ok && err.contains("tcc_v_version"), "{err}");
}

// ---- run-time sizes ----

/// A CCD-like doubles residual with a ladder term, a ring term and an energy:
/// ranges O and V are run-time sizes.
const SIZED_SRC: &str = "range O; range V;
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

const SIZED_DRIVER: &str = r#"
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

fn write_f64s(path: &Path, data: &[f64]) {
    std::fs::write(path, data.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

fn read_f64s(path: &Path) -> Vec<f64> {
    std::fs::read(path).unwrap().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn a_runtime_sized_library_equals_the_interpreter_at_five_size_sets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("ccd.tc"), SIZED_SRC).unwrap();
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
    std::fs::write(dir.join("driver.c"), SIZED_DRIVER).unwrap();
    run(
        Command::new("cc")
            .args(["-O1", "-o", "driver", "driver.c", "-L."])
            .arg("-lccd")
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .current_dir(dir),
        "cc driver.c",
    );

    let (hir, diags) = tcc::compile(SIZED_SRC, "main");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let u = UnitId::new(0);
    for (o, v) in [(1, 1), (2, 7), (3, 13), (5, 4), (11, 17)] {
        let sizes = std::collections::BTreeMap::from([("O".to_string(), o), ("V".to_string(), v)]);
        let bound = tcc::sema::sizes::bind_sizes(&hir, &sizes).unwrap();
        let inputs = random_inputs(&bound, u, (o * 100 + v) as u64).unwrap();
        for (&t, d) in &inputs {
            write_f64s(&dir.join(format!("{}.bin", bound.tensors[t].name)), &d.data);
        }
        let out = run(Command::new(dir.join("driver")).args([o.to_string(), v.to_string()]).current_dir(dir), "driver");
        assert_eq!(out.trim(), "ok", "O={o} V={v}");
        let want = run_unit(&bound, u, &inputs).unwrap();
        let mut got = std::collections::HashMap::new();
        for &t in want.keys() {
            let name = &bound.tensors[t].name;
            got.insert(t, tcc::tensor::Dense::from_vec(bound.shape(t), read_f64s(&dir.join(format!("{name}.bin")))));
        }
        compare_outputs(&bound, u, &got, &want).unwrap_or_else(|e| panic!("O={o} V={v}: {e}"));
    }
}

#[test]
fn the_fortran_module_of_a_runtime_sized_library_takes_sizes_by_keyword() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("ccd.tc"), SIZED_SRC).unwrap();
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
