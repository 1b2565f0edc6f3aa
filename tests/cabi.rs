//! Every example built into a shared library with `tcc build` and called from C
//! (gcc) and from Fortran (gfortran, through the generated module): the results
//! equal the interpreter's, and wrong arguments are refused with an error code and
//! a message.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use tcc::interp::{random_inputs, run_unit};
use tcc::run::compare::compare_outputs;
use tcc::sema::hir::{ElemType, Hir, TensorId, UnitId};
use tcc::tensor::Dense;

fn write_raw(path: &Path, d: &Dense, elem: ElemType) {
    let mut bytes = Vec::new();
    for &x in &d.data {
        match elem {
            ElemType::F64 => bytes.extend_from_slice(&x.to_le_bytes()),
            ElemType::F32 => bytes.extend_from_slice(&(x as f32).to_le_bytes()),
        }
    }
    std::fs::write(path, bytes).unwrap();
}

fn read_raw(path: &Path, shape: Vec<usize>, elem: ElemType) -> Dense {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let data: Vec<f64> = match elem {
        ElemType::F64 => bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
        ElemType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
    };
    Dense::from_vec(shape, data)
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ctype(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 => "double",
        ElemType::F32 => "float",
    }
}

/// A C driver for unit `u`: reads `in_K.bin`, calls, writes `c_out_K.bin`, then
/// checks the error paths.
fn c_driver(hir: &Hir, lib: &str, u: UnitId) -> String {
    let name = &hir.units[u].name;
    let ins = hir.unit_inputs(u);
    let outs = hir.unit_outputs(u);
    let args: Vec<TensorId> = ins.iter().chain(outs.iter()).copied().collect();
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
        format!("tcc_{name}({})", a.join(", "))
    };
    let _ = writeln!(s, "  int rc = {};", call(None));
    s.push_str("  if (rc != TCC_OK) { fprintf(stderr, \"rc %d: %s\\n\", rc, tcc_last_error()); return 1; }\n");
    s.push_str("  if (tcc_last_error() != NULL) { fprintf(stderr, \"error set after success\\n\"); return 2; }\n");
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
            "  rc = {}; if (rc != TCC_ERR_LENGTH || !tcc_last_error() || !strstr(tcc_last_error(), \"`{tname}`\")) {{ fprintf(stderr, \"length check of {tname}: %d\\n\", rc); return 3; }}",
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
                "  if (n0 >= n{o}) {{ rc = tcc_{name}({}); if (rc != TCC_ERR_OVERLAP) {{ fprintf(stderr, \"overlap: %d\\n\", rc); return 5; }} }}",
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
        ElemType::F64 => "c_double",
        ElemType::F32 => "c_float",
    }
}

/// A Fortran driver: reads `in_K.bin`, calls through the module, writes `f_out_K.bin`.
fn fortran_driver(hir: &Hir, module: &str, u: UnitId) -> String {
    let name = &hir.units[u].name;
    let ins = hir.unit_inputs(u);
    let outs = hir.unit_outputs(u);
    let args: Vec<TensorId> = ins.iter().chain(outs.iter()).copied().collect();
    let mut s = format!("program drv\n  use {module}\n  use, intrinsic :: iso_c_binding\n  implicit none\n  integer(c_int) :: rc\n  integer :: u\n");
    for (k, &t) in args.iter().enumerate() {
        let _ = writeln!(s, "  real({}), allocatable :: v{k}(:)", fkind(hir.tensors[t].elem));
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
                format!("v{k}, {n}_c_size_t")
            })
            .collect();
        format!("tcc_{name}( &\n      {})", a.join(", &\n      "))
    };
    let _ = writeln!(s, "  rc = {}", call(None));
    s.push_str("  if (rc /= tcc_ok) then\n    print *, tcc_error_message()\n    stop 1\n  end if\n");
    for k in ins.len()..args.len() {
        let _ = writeln!(
            s,
            "  open(newunit=u, file='f_out_{k}.bin', access='stream', form='unformatted', status='replace')"
        );
        let _ = writeln!(s, "  write(u) v{k}\n  close(u)");
    }
    if !args.is_empty() {
        let _ = writeln!(s, "  rc = {}", call(Some(0)));
        s.push_str("  if (rc /= tcc_err_length) stop 2\n  if (len(tcc_error_message()) == 0) stop 3\n");
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
        let lib = format!("ex_{stem}");
        let dir = tmp.path().join(&stem);
        std::fs::create_dir_all(&dir).unwrap();
        let so = dir.join(format!("lib{lib}.so"));
        run(
            Command::new(env!("CARGO_BIN_EXE_tcc")).arg("build").arg(path).arg("-o").arg(&so),
            &format!("tcc build {stem}"),
        );
        assert!(dir.join(format!("{lib}.h")).exists() && dir.join(format!("{lib}.f90")).exists());
        // The module once, for every driver.
        run(
            Command::new("gfortran").current_dir(&dir).args(["-c", &format!("{lib}.f90")]),
            &format!("gfortran {lib}.f90"),
        );
        let src = std::fs::read_to_string(path).unwrap();
        let (hir, _) = tcc::compile(&src, &stem);
        let hir = hir.unwrap();
        for ui in 0..hir.units.len() {
            let u = UnitId::new(ui);
            let inputs = random_inputs(&hir, u, 11).unwrap();
            let want = run_unit(&hir, u, &inputs).unwrap();
            let ins = hir.unit_inputs(u);
            let outs = hir.unit_outputs(u);
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
