//! `tcc build --mpi`: a library that an MPI program calls to run a program on
//! tiles distributed over its ranks. The library holds the program's source and
//! one open function per program, `tcc_LIB_PROG_open(MPI_Comm)` (and
//! `tcc_LIB_PROG_open_f(int)` taking a Fortran handle); everything after opening
//! goes through `libtcc_dist` (`capi/include/tcc_dist.h`, written next to the
//! library), which plans the tiles, JIT-compiles the tile kernel for the host,
//! exchanges tiles over the communicator and runs the tasks
//! ([`crate::tiled::session`]). It is compiled with `mpicc` (`$MPICC`) and
//! linked against `libtcc_dist.so` (`$TCC_DIST_LIB`, else next to `tcc`).

use super::cabi::{library_name, symbol};
use crate::error::CommandError;
use crate::run::fail;
use crate::sema::hir::{Hir, Role, UnitId};
use crate::tiled::exec::{Program, TiledOptions};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `tcc_dist.h` and the Fortran module `tcc_dist.f90`, copied next to every MPI
/// library.
pub const TCC_DIST_H: &str = include_str!("../../capi/include/tcc_dist.h");
pub const TCC_DIST_F90: &str = include_str!("../../capi/include/tcc_dist.f90");

/// Fortran's limit on names.
const FORTRAN_MAX_NAME: usize = 63;

/// Finds `libtcc_dist.so`: `$TCC_DIST_LIB`, else the newest next to the running
/// `tcc` (its directory, its parent, and their `deps/`).
pub fn find_dist_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TCC_DIST_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for anc in exe.ancestors().skip(1).take(2) {
        for d in [anc.to_path_buf(), anc.join("deps")] {
            let p = d.join("libtcc_dist.so");
            if let Ok(m) = std::fs::metadata(&p) {
                let t = m.modified().unwrap_or(std::time::UNIX_EPOCH);
                if best.as_ref().is_none_or(|(bt, _)| t > *bt) {
                    best = Some((t, p));
                }
            }
        }
    }
    best.map(|(_, p)| p)
}

/// The C string literal of `s` (octal escapes for everything but plain ASCII).
fn c_literal(s: &str) -> String {
    let mut out = String::from("\"");
    for (i, b) in s.bytes().enumerate() {
        if i > 0 && i % 100 == 0 {
            out.push_str("\"\n    \"");
        }
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e if b != b'?' => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}

/// The run-time sizes an open function passes to `tcc_dist_open_sized`: the
/// unit's ranges that are run-time in the source, each either an argument
/// (`size_O`, still run-time in the build's program) or the size `--size`
/// bound at build time.
struct OpenSizes {
    /// (range name, `None` for an argument or the bound size), in declaration order.
    names: Vec<(String, Option<usize>)>,
    /// The names that are arguments.
    args: Vec<String>,
}

impl OpenSizes {
    fn of(raw: &Hir, built: &Hir, u: UnitId) -> OpenSizes {
        let names: Vec<(String, Option<usize>)> = raw
            .unit_runtime_ranges(u)
            .into_iter()
            .map(|r| {
                let b = &built.ranges[r];
                (b.name.clone(), if b.is_runtime() { None } else { Some(b.size) })
            })
            .collect();
        let args = names.iter().filter(|(_, s)| s.is_none()).map(|(n, _)| n.clone()).collect();
        OpenSizes { names, args }
    }

    /// The C declarations of `names` and `sizes` in an open function's body.
    fn c_arrays(&self) -> String {
        if self.names.is_empty() {
            return "    const char *const *names = 0;\n    const int64_t *sizes = 0;\n".into();
        }
        let names: Vec<String> = self.names.iter().map(|(n, _)| c_literal(n)).collect();
        // A size_t above INT64_MAX becomes negative: refused as below 1.
        let sizes: Vec<String> =
            self.names.iter().map(|(n, s)| s.map_or_else(|| format!("(int64_t)size_{n}"), |v| v.to_string())).collect();
        format!(
            "    static const char *const names[] = {{{}}};\n    const int64_t sizes[] = {{{}}};\n",
            names.join(", "),
            sizes.join(", ")
        )
    }

    /// "at the assumed sizes O = 32, …" for the header's flops.
    fn assumed_note(&self, hir: &Hir) -> String {
        let parts: Vec<String> = self
            .args
            .iter()
            .filter_map(|a| hir.ranges.iter().find(|r| &r.name == a).map(|r| format!("{a} = {}", r.size)))
            .collect();
        format!("at the assumed sizes {}", parts.join(", "))
    }
}

/// Writes the library, `LIB.h` and `tcc_dist.h` next to it; returns the report.
pub fn build_mpi_library(
    hir: &Hir,
    source: &str,
    program: Option<&str>,
    name: Option<&str>,
    output: &Path,
) -> Result<String, CommandError> {
    let units = hir.select_units(program)?;
    if units.is_empty() {
        return Err(fail("E0717", "the source has no programs: an MPI library would have no functions", None));
    }
    // The library compiles `source` again when opened: ranges that are run-time
    // there take a size argument of the open function, or the size `--size`
    // bound here (`hir`), written into the library.
    let (raw, _) = crate::compile(source, "main");
    let raw = raw.ok_or_else(|| fail("E0717", "the source does not compile as it did", None))?;
    let lib = library_name(output, name)?;
    // Plan every program now, so that what tiled execution refuses is a build
    // error, not an error of the caller's first run.
    let prepared = crate::pipeline::prepare(hir, &crate::pipeline::PipelineOptions::default());
    let dist = find_dist_lib().ok_or_else(|| {
        fail(
            "E0718",
            "cannot find libtcc_dist.so, which MPI libraries link",
            Some("build it with `cargo build -p tcc-dist --features mpi` or set TCC_DIST_LIB to its path".into()),
        )
    })?;
    let dist_dir = dist.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let out_name = output.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let link = format!(
        "mpicc prog.c -I{dir} -L{dir} -l:{out_name} -L{d} -ltcc_dist -Wl,-rpath,{dir}:{d}",
        dir = output.parent().map(|p| p.display().to_string()).filter(|s| !s.is_empty()).unwrap_or_else(|| ".".into()),
        d = dist_dir.display()
    );
    let mut header = String::new();
    let _ = writeln!(header, "/* {lib}.h: written by `tcc build --mpi`. Distributed tiled programs; see tcc_dist.h.");
    let _ = writeln!(header, " * Link: {link} */");
    let guard = format!("TCC_{}_H", lib.to_uppercase());
    let _ = writeln!(
        header,
        "#ifndef {guard}\n#define {guard}\n#include <stddef.h>\n#include <mpi.h>\n#include \"tcc_dist.h\""
    );
    let _ = writeln!(header, "#ifdef __cplusplus\nextern \"C\" {{\n#endif");
    let mut fortran = String::new();
    let _ = writeln!(fortran, "! {lib}.f90: written by `tcc build --mpi`; see tcc_dist.f90 for the rest of the API.");
    let _ = writeln!(fortran, "module {lib}\n  use iso_c_binding\n  use tcc_dist\n  implicit none\n  interface");
    let mut csrc = String::new();
    let _ = writeln!(
        csrc,
        "#include <mpi.h>\n#include \"tcc_dist.h\"\nstatic const char source[] =\n    {};",
        c_literal(source)
    );
    let mut exported = Vec::new();
    for &u in &units {
        let p = Program::plan(&prepared, u, &TiledOptions::default())?;
        let unit = &hir.units[u].name;
        let sym = symbol(&lib, unit);
        let sizes = OpenSizes::of(&raw, hir, u);
        let _ = writeln!(
            header,
            "\n/* program `{unit}` (collective; NULL on error, see tcc_dist_last_error):\n \
             *   executes {:.4e} flops on tiles (dense order: {:.4e}), summed over all ranks{}",
            p.planned_flops(),
            p.dense_flops,
            if sizes.args.is_empty() { String::new() } else { format!(", {}", sizes.assumed_note(hir)) }
        );
        for t in prepared.unit_inputs(u).into_iter().chain(prepared.unit_outputs(u)) {
            let tensor = &prepared.tensors[t];
            let l = &p.layouts[&t];
            let role = if tensor.role == Role::Output { "output" } else { "input" };
            if sizes.args.is_empty() {
                let ext: Vec<String> = l.dims.iter().map(|d| d.start(d.count()).to_string()).collect();
                let (tiles, len) = (l.tiles().len(), l.len());
                let _ = writeln!(
                    header,
                    " *   {role} {}[{}]: {tiles} stored tiles of {len} elements in all",
                    tensor.name,
                    ext.join(", ")
                );
            } else {
                let ext: Vec<String> = tensor
                    .dims
                    .iter()
                    .map(|&r| {
                        if hir.ranges[r].is_runtime() {
                            hir.ranges[r].name.clone()
                        } else {
                            hir.ranges[r].size.to_string()
                        }
                    })
                    .collect();
                let _ = writeln!(header, " *   {role} {}[{}]", tensor.name, ext.join(", "));
            }
        }
        if !sizes.args.is_empty() {
            let _ = writeln!(
                header,
                " *   The tiles and the tile plan follow the sizes given to open (every rank the same;\n \
                 *   ranks that disagree all fail); ask tcc_dist_local_tiles and tcc_dist_tile for them."
            );
        }
        let c_sizes: String = sizes.args.iter().map(|a| format!("size_t size_{a}, ")).collect();
        let _ = writeln!(
            header,
            " */\ntcc_dist *{sym}_open({c_sizes}MPI_Comm comm);\ntcc_dist *{sym}_open_f({c_sizes}int comm_f);"
        );
        for (suffix, comm_param, comm_f) in
            [("", "MPI_Comm comm", "(int)MPI_Comm_c2f(comm)"), ("_f", "int comm_f", "comm_f")]
        {
            let _ = writeln!(
                csrc,
                "tcc_dist *{sym}_open{suffix}({c_sizes}{comm_param}) {{\n{}    return tcc_dist_open_sized(source, {}, {comm_f}, {}, names, sizes);\n}}",
                sizes.c_arrays(),
                c_literal(unit),
                sizes.names.len()
            );
        }
        let fname = format!("{sym}_open_f");
        if fname.len() > FORTRAN_MAX_NAME {
            return Err(fail(
                "E0717",
                format!("`{fname}` is longer than a Fortran name may be ({FORTRAN_MAX_NAME} characters)"),
                Some("choose a shorter library name with --name".into()),
            ));
        }
        let f_sizes: Vec<String> = sizes.args.iter().map(|a| format!("size_{}", a.to_lowercase())).collect();
        let f_args: String = f_sizes.iter().map(|a| format!("{a}, ")).collect();
        let f_decl = if f_sizes.is_empty() {
            String::new()
        } else {
            format!("      integer(c_size_t), value :: {}\n", f_sizes.join(", "))
        };
        let _ = writeln!(
            fortran,
            "    ! program `{unit}`: open on a communicator (Fortran handle){}; c_null_ptr on error\n    \
             function {fname}({f_args}comm) bind(C, name=\"{fname}\")\n      import :: c_ptr, c_int, c_size_t\n{f_decl}      \
             integer(c_int), value :: comm\n      type(c_ptr) :: {fname}\n    end function",
            if f_sizes.is_empty() { String::new() } else { " with the run-time sizes first".to_string() }
        );
        exported.push(format!("{sym}_open"));
        exported.push(fname);
    }
    let _ = writeln!(header, "\n#ifdef __cplusplus\n}}\n#endif\n#endif");
    let dir =
        output.parent().map(Path::to_path_buf).filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| ".".into());
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).map_err(|e| fail("E0709", format!("cannot write `{}`: {e}", path.display()), None))
    };
    let _ = writeln!(fortran, "  end interface\nend module {lib}");
    write(dir.join("tcc_dist.h"), TCC_DIST_H)?;
    write(dir.join("tcc_dist.f90"), TCC_DIST_F90)?;
    write(dir.join(format!("{lib}.f90")), &fortran)?;
    write(dir.join(format!("{lib}.h")), &header)?;
    let tmp = std::env::temp_dir().join(format!("tcc-build-mpi-{}-{lib}", std::process::id()));
    std::fs::create_dir_all(&tmp)
        .map_err(|e| fail("E0714", format!("cannot create `{}`: {e}", tmp.display()), None))?;
    let c_file = tmp.join(format!("{lib}.c"));
    write(c_file.clone(), &csrc)?;
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let out = std::process::Command::new(&mpicc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(output)
        .arg(&c_file)
        .arg(format!("-I{}", dir.display()))
        .arg(format!("-L{}", dist_dir.display()))
        .arg("-ltcc_dist")
        .arg(format!("-Wl,-rpath,{}", dist_dir.display()))
        .output()
        .map_err(|e| {
            fail(
                "E0719",
                format!("cannot run the MPI compiler `{mpicc}`: {e}"),
                Some("install MPI (e.g. `apt-get install libopenmpi-dev openmpi-bin`) or set MPICC".into()),
            )
        })?;
    let _ = std::fs::remove_dir_all(&tmp);
    if !out.status.success() {
        return Err(fail(
            "E0714",
            format!("building `{}` failed:\n{}", output.display(), String::from_utf8_lossy(&out.stderr)),
            None,
        ));
    }
    Ok(format!(
        "wrote {}, {}, {}, {}, {} ({}); link a program with: {link}\n",
        output.display(),
        dir.join(format!("{lib}.h")).display(),
        dir.join(format!("{lib}.f90")).display(),
        dir.join("tcc_dist.h").display(),
        dir.join("tcc_dist.f90").display(),
        exported.join(", "),
    ))
}
