//! `tcc build`: a shared library with one C function per program, its C header and
//! a Fortran module (ISO_C_BINDING). The ABI (version [`ABI_VERSION`]) is documented
//! in `book/src/abi.md`.
//!
//! Every public symbol of a library `LIB` is prefixed by it: `tcc_LIB_PROGRAM` per
//! program or model, `tcc_LIB_last_error` and `tcc_LIB_version`; nothing else is
//! exported, so several tcc libraries can be loaded into one process. The arguments
//! of a function are [`abi_args`]: inputs, then outputs, each in declaration order.
//!
//! The library is the object file of [`super::llvm::write_object`] linked (with the
//! system C compiler, `$CC` or `cc`) against the runtime's static library
//! `libtcc_runtime.a`, found through `$TCC_RUNTIME_LIB` or next to the `tcc`
//! executable (Cargo's `target/<profile>/` and `deps/`).

use super::llvm::{self, UnitCode};
use crate::error::CommandError;
use crate::run::fail;
use crate::sema::hir::{ElemType, Hir, RangeId, Role, TensorId, UnitId};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The version of the generated libraries' ABI (naming, argument order, return
/// codes). `TCC_LIB_ABI_VERSION` in the header, `tcc_LIB_version()` at run time.
pub const ABI_VERSION: u32 = 2;

/// Return codes of the generated functions.
pub const CODES: [(&str, i32, &str); 6] = [
    ("TCC_OK", 0, "success"),
    ("TCC_ERR_NULL", 1, "a null pointer for an argument with elements"),
    ("TCC_ERR_LENGTH", 2, "an argument's length differs from its declared shape's element count"),
    ("TCC_ERR_OVERLAP", 3, "an output overlaps another argument"),
    ("TCC_ERR_NOMEM", 4, "temporaries could not be allocated"),
    ("TCC_ERR_SIZE", 5, "a size argument is zero, or the sizes make a tensor larger than the address space"),
];

/// The longest name Fortran accepts (F2008 and later).
const FORTRAN_MAX_NAME: usize = 63;

/// Names a library's module declares besides the programs' functions, after the
/// `tcc_LIB_` prefix. A program with one of these names (in any case) is refused.
const RESERVED: [&str; 10] = [
    "last_error",
    "version",
    "error_message",
    "version_string",
    "abi_version",
    "ok",
    "err_null",
    "err_length",
    "err_overlap",
    "err_nomem",
];

/// The arguments of unit `u`'s function, as every back end passes them: the
/// tensors it reads (inputs and model parameters) in declaration order, then the
/// outputs it writes in declaration order; and the number of inputs. Not the order
/// of first use, so that rewriting a statement (commuting a product) never changes
/// the signature. (Run-time sizes, when they come, go first, in range declaration
/// order.)
pub fn abi_args(hir: &Hir, u: UnitId) -> (Vec<TensorId>, usize) {
    let mut inputs = hir.unit_inputs(u);
    let mut outputs = hir.unit_outputs(u);
    // Tensor ids are given in declaration order.
    inputs.sort_unstable();
    outputs.sort_unstable();
    let n = inputs.len();
    inputs.extend(outputs);
    (inputs, n)
}

/// The exported function of program `unit` of library `lib`.
pub fn symbol(lib: &str, unit: &str) -> String {
    format!("tcc_{lib}_{unit}")
}

/// `tcc_LIB_last_error`.
pub fn last_error_symbol(lib: &str) -> String {
    format!("tcc_{lib}_last_error")
}

/// `tcc_LIB_version`.
pub fn version_symbol(lib: &str) -> String {
    format!("tcc_{lib}_version")
}

/// What `tcc_LIB_version()` returns: `tcc 0.1.0 abi 2`.
pub fn version_string() -> String {
    format!("tcc {} abi {ABI_VERSION}", env!("CARGO_PKG_VERSION"))
}

fn is_identifier(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic()) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks a library name: a C identifier that is also a Fortran name (starts with a
/// letter), short enough for the Fortran names derived from it.
pub fn check_lib_name(name: &str) -> Result<(), String> {
    if !is_identifier(name) {
        return Err(format!(
            "invalid library name `{name}`: it must start with a letter and contain only letters, digits and `_` \
             (it names the symbols tcc_NAME_..., the header NAME.h and the Fortran module NAME)"
        ));
    }
    let longest = "tcc__version_string".len();
    if name.len() + longest > FORTRAN_MAX_NAME {
        return Err(format!(
            "library name `{name}` is too long: at most {} characters (Fortran names have at most {FORTRAN_MAX_NAME})",
            FORTRAN_MAX_NAME - longest
        ));
    }
    Ok(())
}

/// The library's name: `name` (`--name`) if given, else the output's file name
/// without `lib` and the extensions (`libfoo.so` → `foo`); checked with
/// [`check_lib_name`].
pub fn library_name(output: &Path, name: Option<&str>) -> Result<String, CommandError> {
    let (lib, from) = match name {
        Some(n) => (n.to_string(), "--name".to_string()),
        None => {
            let file = output.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let stem = file.split('.').next().unwrap_or("");
            let stem = stem.strip_prefix("lib").filter(|s| !s.is_empty()).unwrap_or(stem);
            (stem.to_string(), format!("the output file name `{file}`"))
        }
    };
    check_lib_name(&lib).map_err(|e| {
        fail(
            "E0716",
            format!("{e}; taken from {from}"),
            Some("choose the name with `--name NAME` (e.g. `-o libmy-lib.so --name my_lib`)".into()),
        )
    })?;
    Ok(lib)
}

/// The base name of `-o` for the CUDA shim's files: `libfoo.ptx` → `foo`, made an
/// identifier.
pub fn lib_name(output: &Path) -> String {
    let stem = output.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "tcc".into());
    let stem = stem.split('.').next().unwrap_or("tcc");
    let stem = stem.strip_prefix("lib").filter(|s| !s.is_empty()).unwrap_or(stem);
    let mut id: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if id.is_empty() || !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        id = format!("t{id}");
    }
    id
}

/// Checks the names of the units to export: C identifiers, distinct from the
/// library's own names and from each other also in Fortran (case-insensitive), and
/// short enough for Fortran.
fn check_unit_names(hir: &Hir, lib: &str, units: &[UnitId]) -> Result<(), CommandError> {
    let mut seen: HashSet<String> = HashSet::new();
    for &u in units {
        let name = &hir.units[u].name;
        let sym = symbol(lib, name);
        let bad = |why: String| {
            fail(
                "E0716",
                format!("cannot export program `{name}` as `{sym}`: {why}"),
                Some("rename the program (statements outside any program form one named after the file; put them in a `program NAME { ... }` block), or build the others with --program".into()),
            )
        };
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name.is_empty() {
            return Err(bad("the name is not a C identifier".into()));
        }
        if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) {
            return Err(bad(format!("the library declares `tcc_{lib}_{}` itself", name.to_ascii_lowercase())));
        }
        if sym.len() > FORTRAN_MAX_NAME {
            return Err(bad(format!("Fortran names have at most {FORTRAN_MAX_NAME} characters")));
        }
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(bad("another program has the same name up to case (Fortran ignores case)".into()));
        }
    }
    Ok(())
}

/// Finds `libtcc_runtime.a`.
pub fn find_runtime_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TCC_RUNTIME_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for anc in exe.ancestors().skip(1).take(2) {
        dirs.push(anc.to_path_buf());
        dirs.push(anc.join("deps"));
    }
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libtcc_runtime") && name.ends_with(".a") {
                let t = e.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
                if best.as_ref().is_none_or(|(bt, _)| t > *bt) {
                    best = Some((t, e.path()));
                }
            }
        }
    }
    best.map(|(_, p)| p)
}

pub(crate) fn c_type(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 => "double",
        ElemType::F32 => "float",
        ElemType::C128 => "double _Complex",
        ElemType::C64 => "float _Complex",
        // Bit patterns (`cabi_half`).
        ElemType::BF16 | ElemType::F16 => "uint16_t",
    }
}

fn f_kind(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 => "c_double",
        ElemType::F32 => "c_float",
        ElemType::C128 => "c_double_complex",
        ElemType::C64 => "c_float_complex",
        ElemType::BF16 | ElemType::F16 => "c_int16_t",
    }
}

/// Words a C or C++ parameter name must not be.
const C_RESERVED: &[&str] = &[
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "explicit",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "nullptr",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "throw",
    "true",
    "try",
    "typedef",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
    "size_t",
    "NULL",
    "TCC_OK",
    "TCC_ERR_NULL",
    "TCC_ERR_LENGTH",
    "TCC_ERR_OVERLAP",
    "TCC_ERR_NOMEM",
];

/// Pointer and length parameter names for `bases`, unique under `fold` and distinct
/// from `reserved`: `X` and `X_len`, or `X_2` and `X_2_len` on a clash.
fn unique_pairs(bases: Vec<String>, reserved: &[String], fold: fn(&str) -> String) -> Vec<(String, String)> {
    let mut used: HashSet<String> = reserved.iter().map(|r| fold(r)).collect();
    let mut out = Vec::new();
    for base in bases {
        let mut k = 1;
        loop {
            let p = if k == 1 { base.clone() } else { format!("{base}_{k}") };
            let l = format!("{p}_len");
            if !used.contains(&fold(&p)) && !used.contains(&fold(&l)) {
                used.insert(fold(&p));
                used.insert(fold(&l));
                out.push((p, l));
                break;
            }
            k += 1;
        }
    }
    out
}

/// The name of the size argument of run-time range `r`: `size_O` (C) or `size_o`
/// (Fortran). Tensor names never start with `size_` in a way that clashes: they
/// are renamed around these.
pub fn size_param(hir: &Hir, r: RangeId, fortran: bool) -> String {
    let n = &hir.ranges[r].name;
    if fortran {
        format!("size_{}", n.to_ascii_lowercase())
    } else {
        format!("size_{n}")
    }
}

/// The C parameter names of `args`: the tensor names (`T2`, `T2_len`), renamed only
/// where they would clash (with C words or the size arguments `sizes`).
pub fn c_params(hir: &Hir, args: &[TensorId], sizes: &[RangeId]) -> Vec<(String, String)> {
    let mut reserved: Vec<String> = C_RESERVED.iter().map(|s| s.to_string()).collect();
    reserved.extend(sizes.iter().map(|&r| size_param(hir, r, false)));
    unique_pairs(args.iter().map(|&t| hir.tensors[t].name.clone()).collect(), &reserved, |s| s.to_string())
}

/// The Fortran dummy names of `args` in function `fname`: the tensor names lower-cased
/// (`t2`, `t2_len`), made valid and unique (Fortran ignores case: `T` and `t`
/// become `t` and `t_2`).
pub fn fortran_dummies(hir: &Hir, args: &[TensorId], sizes: &[RangeId], fname: &str) -> Vec<(String, String)> {
    let bases = args
        .iter()
        .map(|&t| {
            let n = hir.tensors[t].name.to_ascii_lowercase();
            let mut n: String = n.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            if !n.starts_with(|c: char| c.is_ascii_alphabetic()) {
                n = format!("x{n}");
            }
            // Room for `_len` and a `_K` suffix within Fortran's limit.
            n.truncate(FORTRAN_MAX_NAME - 8);
            n
        })
        .collect();
    let mut reserved: Vec<String> =
        [fname, "c_int", "c_size_t", "c_double", "c_float", "c_double_complex", "c_float_complex"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    reserved.extend(sizes.iter().map(|&r| size_param(hir, r, true)));
    unique_pairs(bases, &reserved, |s| s.to_ascii_lowercase())
}

/// A dimension's extent as the caller knows it: the fixed size, or the size
/// argument of a run-time range.
fn extent_doc(hir: &Hir, r: RangeId, fortran: bool) -> String {
    if hir.ranges[r].is_runtime() {
        size_param(hir, r, fortran)
    } else {
        hir.ranges[r].size.to_string()
    }
}

/// `[o=4][v=6]` and the element count, or `scalar`; a run-time range shows its size
/// argument (`[O=size_O]`) and the count is the product.
fn shape_doc(hir: &Hir, t: TensorId) -> String {
    let tensor = &hir.tensors[t];
    if tensor.dims.is_empty() {
        return "scalar (1 element)".into();
    }
    let dims: String =
        tensor.dims.iter().map(|&r| format!("[{}={}]", hir.ranges[r].name, extent_doc(hir, r, false))).collect();
    if tensor.dims.iter().any(|&r| hir.ranges[r].is_runtime()) {
        let product: Vec<String> = tensor.dims.iter().map(|&r| extent_doc(hir, r, false)).collect();
        format!("{dims}, {} elements", product.join("*"))
    } else {
        format!("{dims}, {} elements", hir.num_elements(t).unwrap_or(0))
    }
}

/// How a Fortran caller declares the array of tensor `t` named `name`: the
/// dimensions reversed.
fn fortran_decl(hir: &Hir, t: TensorId, name: &str) -> String {
    let tensor = &hir.tensors[t];
    let mut shape: Vec<String> = tensor.dims.iter().map(|&r| extent_doc(hir, r, true)).collect();
    shape.reverse();
    let dims = if shape.is_empty() { String::new() } else { format!("({})", shape.join(", ")) };
    format!("{}({}) :: {name}{dims}", f_word(tensor.elem), f_kind(tensor.elem))
}

/// `real`, `complex` or `integer` (16-bit bit patterns): the Fortran type of an
/// element type (its kind is [`f_kind`]).
fn f_word(e: ElemType) -> &'static str {
    if e.is_complex() {
        "complex"
    } else if e.is_half() {
        "integer"
    } else {
        "real"
    }
}

fn unit_kind(hir: &Hir, u: UnitId) -> &'static str {
    if matches!(hir.units[u].kind, crate::sema::hir::UnitKind::Model(_)) {
        "model"
    } else {
        "program"
    }
}

fn role_word(hir: &Hir, t: TensorId, input: bool) -> &'static str {
    match (input, hir.tensors[t].role) {
        (true, Role::Param) => "param",
        (true, _) => "in",
        (false, _) => "out",
    }
}

/// The C header for the compiled units of library `lib`.
pub fn header(hir: &Hir, lib: &str, codes: &[UnitCode], source: &str) -> String {
    let up = lib.to_ascii_uppercase();
    let guard = format!("TCC_{up}_H");
    let last = last_error_symbol(lib);
    let mut s = String::new();
    let _ = writeln!(s, "/* {lib}.h: generated by {} from `{source}`. Do not edit.", version_string());
    let _ = writeln!(s, " *");
    let _ = writeln!(s, " * Arguments: the tensors a function reads, in declaration order, then those it");
    let _ = writeln!(s, " * writes, in declaration order; each a pointer and its number of elements.");
    let _ = writeln!(s, " * Tensors are dense and row-major (C order: the last index varies fastest);");
    let _ = writeln!(s, " * symmetric ones are passed in full. A Fortran caller declares each array with");
    let _ = writeln!(s, " * the dimensions reversed (shown per argument) or passes any contiguous buffer");
    let _ = writeln!(s, " * of the right length. Outputs are overwritten and must not overlap other");
    let _ = writeln!(s, " * arguments.");
    let _ = writeln!(s, " *");
    let _ = writeln!(s, " * Every function validates its arguments first and writes nothing on error; it");
    let _ = writeln!(s, " * returns TCC_OK (0) or one of the TCC_ERR_* codes below, and {last}()");
    let _ = writeln!(s, " * then describes the problem (per thread, private to this library). Functions");
    let _ = writeln!(s, " * are safe to call from several threads. */");
    let _ = writeln!(
        s,
        "#ifndef {guard}\n#define {guard}\n\n#include <stddef.h>\n#include <stdint.h>\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n"
    );
    let _ = writeln!(s, "/* The ABI version of this header; tcc_{lib}_version() reports the library's. */");
    let _ = writeln!(s, "#define TCC_{up}_ABI_VERSION {ABI_VERSION}\n");
    let _ = writeln!(s, "/* Return codes (the same values in every tcc library). */");
    for (name, v, what) in CODES {
        let _ = writeln!(s, "#ifndef {name}\n#define {name} {v} /* {what} */\n#endif");
    }
    let _ = writeln!(s, "\n/* The message of this thread's last failed call into this library, or NULL");
    let _ = writeln!(s, " * after a success. A static string: do not free it. */");
    let _ = writeln!(s, "const char* {last}(void);\n");
    let _ =
        writeln!(s, "/* \"tcc VERSION abi {ABI_VERSION}\": the tcc that built this library and its ABI version. */");
    let _ = writeln!(s, "const char* {}(void);\n", version_symbol(lib));
    let codes_list = CODES.iter().map(|c| c.0).collect::<Vec<_>>().join(", ");
    for c in codes {
        let names = c_params(hir, &c.args, &c.sizes);
        let _ = writeln!(
            s,
            "/* {} `{}` ({} flops per call{}).",
            unit_kind(hir, c.unit),
            c.name,
            c.flops,
            if c.sizes.is_empty() { "" } else { " at the assumed sizes" }
        );
        for &r in &c.sizes {
            let _ = writeln!(
                s,
                " *   size  {}: the size of range `{}` (at least 1; given when the function is called)",
                size_param(hir, r, false),
                hir.ranges[r].name
            );
        }
        for (k, &t) in c.args.iter().enumerate() {
            let tensor = &hir.tensors[t];
            let label = if names[k].0 == tensor.name {
                tensor.name.clone()
            } else {
                format!("{} (tensor {})", names[k].0, tensor.name)
            };
            let _ = writeln!(
                s,
                " *   {:<5} {label}: {} {}",
                role_word(hir, t, k < c.n_inputs),
                c_type(tensor.elem),
                shape_doc(hir, t)
            );
            let _ = writeln!(s, " *         Fortran: {}", fortran_decl(hir, t, &names[k].0.to_ascii_lowercase()));
        }
        let _ = writeln!(s, " * Returns {codes_list}. */");
        let mut args: Vec<String> = c.sizes.iter().map(|&r| format!("size_t {}", size_param(hir, r, false))).collect();
        args.extend(c.args.iter().enumerate().map(|(k, &t)| {
            let cst = if k < c.n_inputs { "const " } else { "" };
            format!("{cst}{}* {}, size_t {}", c_type(hir.tensors[t].elem), names[k].0, names[k].1)
        }));
        let _ = writeln!(s, "int {}({});\n", symbol(lib, &c.name), args.join(", "));
    }
    let _ = writeln!(s, "#ifdef __cplusplus\n}}\n#endif\n\n#endif /* {guard} */");
    s
}

/// Names the Fortran module itself uses; a library with one of them is `LIB_mod`.
const FORTRAN_USED: [&str; 11] = [
    "iso_c_binding",
    "c_int",
    "c_size_t",
    "c_double",
    "c_float",
    "c_ptr",
    "c_char",
    "c_null_char",
    "c_associated",
    "c_f_pointer",
    "c_string",
];

/// The Fortran module's name: `lib`, or `lib_mod` when `lib` clashes with a name
/// the module uses.
pub fn fortran_module_name(hir: &Hir, lib: &str, codes: &[UnitCode]) -> String {
    let l = lib.to_ascii_lowercase();
    let clash = FORTRAN_USED.contains(&l.as_str())
        || codes.iter().any(|c| {
            fortran_dummies(hir, &c.args, &c.sizes, &symbol(lib, &c.name)).iter().any(|(p, n)| *p == l || *n == l)
        });
    if clash {
        format!("{lib}_mod")
    } else {
        lib.to_string()
    }
}

/// Writes `items` as `head item, item, ...` with continuation lines (free form).
fn continued(s: &mut String, head: &str, items: &[String], tail: &str) {
    let _ = write!(s, "{head}");
    for (i, it) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { ", &\n        " } else { "" };
        let _ = write!(s, "{it}{sep}");
    }
    let _ = writeln!(s, "{tail}");
}

/// The Fortran module for the compiled units of library `lib` (module `LIB`, or
/// `LIB_mod`; see [`fortran_module_name`]). Every public name starts with `tcc_LIB_`,
/// so the modules of two libraries can be used in one scope.
pub fn fortran_module(hir: &Hir, lib: &str, codes: &[UnitCode], source: &str) -> String {
    let module = fortran_module_name(hir, lib, codes);
    let p = format!("tcc_{lib}_");
    let last = last_error_symbol(lib);
    let ver = version_symbol(lib);
    let mut s = String::new();
    let _ = writeln!(s, "! {module}: generated by {} from `{source}`. Do not edit.", version_string());
    let _ = writeln!(s, "! A tensor T[i,j,k] of the source (row-major) is the Fortran array t(k,j,i):");
    let _ = writeln!(s, "! declare arrays with the dimensions reversed, or pass any contiguous buffer");
    let _ = writeln!(s, "! of the right length. Arguments are named after the tensors (lower-cased),");
    let _ = writeln!(s, "! so they can be passed by keyword. Each function returns {p}ok on success.");
    let _ = writeln!(s, "module {module}");
    let _ = writeln!(s, "  use, intrinsic :: iso_c_binding, only: c_int, c_size_t, c_double, c_float, c_ptr, &");
    if crate::sema::complex::has_complex(hir) {
        let _ = writeln!(s, "      c_char, c_null_char, c_associated, c_f_pointer, c_double_complex, c_float_complex");
    } else if crate::sema::half::has_half(hir) {
        let _ = writeln!(s, "      c_char, c_null_char, c_associated, c_f_pointer, c_int16_t");
    } else {
        let _ = writeln!(s, "      c_char, c_null_char, c_associated, c_f_pointer");
    }
    let _ = writeln!(s, "  implicit none");
    let _ = writeln!(s, "  private");
    let mut public: Vec<String> = vec![format!("{p}abi_version")];
    public.extend(CODES.iter().map(|c| format!("{p}{}", c.0.trim_start_matches("TCC_").to_ascii_lowercase())));
    public.extend([last.clone(), ver.clone(), format!("{p}error_message"), format!("{p}version_string")]);
    public.extend(codes.iter().map(|c| symbol(lib, &c.name)));
    for name in &public {
        let _ = writeln!(s, "  public :: {name}");
    }
    let _ = writeln!(s, "  ! The ABI version of this module.");
    let _ = writeln!(s, "  integer(c_int), parameter :: {p}abi_version = {ABI_VERSION}");
    let _ = writeln!(s, "  ! Return codes.");
    for (name, v, _) in CODES {
        let short = name.trim_start_matches("TCC_").to_ascii_lowercase();
        let _ = writeln!(s, "  integer(c_int), parameter :: {p}{short} = {v}");
    }
    let _ = writeln!(s, "  interface");
    for (f, what) in [(&last, "this thread's last error (C string) or c_null_ptr"), (&ver, "\"tcc VERSION abi N\"")] {
        let _ = writeln!(s, "    ! {what}");
        let _ = writeln!(s, "    function {f}() bind(C, name=\"{f}\")");
        let _ = writeln!(s, "      import :: c_ptr");
        let _ = writeln!(s, "      type(c_ptr) :: {f}");
        let _ = writeln!(s, "    end function {f}");
    }
    for c in codes {
        let fname = symbol(lib, &c.name);
        let names = fortran_dummies(hir, &c.args, &c.sizes, &fname);
        let _ = writeln!(s, "    ! {} `{}`", unit_kind(hir, c.unit), c.name);
        let mut dummies: Vec<String> = c.sizes.iter().map(|&r| size_param(hir, r, true)).collect();
        dummies.extend(names.iter().flat_map(|(p, l)| [p.clone(), l.clone()]));
        continued(&mut s, &format!("    function {fname}("), &dummies, ") &");
        let _ = writeln!(s, "        bind(C, name=\"{fname}\")");
        let mut kinds: Vec<&str> = vec!["c_int", "c_size_t"];
        for &t in &c.args {
            let k = f_kind(hir.tensors[t].elem);
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        let _ = writeln!(s, "      import :: {}", kinds.join(", "));
        let _ = writeln!(s, "      integer(c_int) :: {fname}");
        for &r in &c.sizes {
            let _ = writeln!(s, "      ! the size of range `{}` (at least 1)", hir.ranges[r].name);
            let _ = writeln!(s, "      integer(c_size_t), value :: {}", size_param(hir, r, true));
        }
        for (k, &t) in c.args.iter().enumerate() {
            let tensor = &hir.tensors[t];
            let input = k < c.n_inputs;
            let (d, l) = &names[k];
            let _ = writeln!(
                s,
                "      ! {} {}: {} {}",
                role_word(hir, t, input),
                tensor.name,
                tensor.elem.name(),
                shape_doc(hir, t)
            );
            let _ = writeln!(s, "      !   declare as {}", fortran_decl(hir, t, d));
            let intent = if input { "in" } else { "inout" };
            let rank = if tensor.dims.is_empty() { "" } else { "(*)" };
            let _ =
                writeln!(s, "      {}({}), intent({intent}) :: {d}{rank}", f_word(tensor.elem), f_kind(tensor.elem));
            let _ = writeln!(s, "      integer(c_size_t), value :: {l}");
        }
        let _ = writeln!(s, "    end function {fname}");
    }
    let _ = writeln!(s, "  end interface");
    let _ = writeln!(s, "contains");
    let _ = writeln!(s, "  ! This thread's last error in this library as a Fortran string ('' after a success).");
    let _ = writeln!(s, "  function {p}error_message() result(msg)");
    let _ = writeln!(s, "    character(len=:), allocatable :: msg");
    let _ = writeln!(s, "    msg = c_string({last}())");
    let _ = writeln!(s, "  end function {p}error_message");
    let _ = writeln!(s, "  ! \"tcc VERSION abi N\" as a Fortran string.");
    let _ = writeln!(s, "  function {p}version_string() result(msg)");
    let _ = writeln!(s, "    character(len=:), allocatable :: msg");
    let _ = writeln!(s, "    msg = c_string({ver}())");
    let _ = writeln!(s, "  end function {p}version_string");
    let _ = writeln!(s, "  ! A NUL-terminated C string (at most 65536 characters) as a Fortran string.");
    let _ = writeln!(s, "  function c_string(p) result(msg)");
    let _ = writeln!(s, "    type(c_ptr), intent(in) :: p");
    let _ = writeln!(s, "    character(len=:), allocatable :: msg");
    let _ = writeln!(s, "    character(kind=c_char), pointer :: chars(:)");
    let _ = writeln!(s, "    integer :: i, n");
    let _ = writeln!(s, "    if (.not. c_associated(p)) then");
    let _ = writeln!(s, "      msg = ''");
    let _ = writeln!(s, "      return");
    let _ = writeln!(s, "    end if");
    let _ = writeln!(s, "    call c_f_pointer(p, chars, [65536])");
    let _ = writeln!(s, "    n = 0");
    let _ = writeln!(s, "    do while (n < size(chars))");
    let _ = writeln!(s, "      if (chars(n + 1) == c_null_char) exit");
    let _ = writeln!(s, "      n = n + 1");
    let _ = writeln!(s, "    end do");
    let _ = writeln!(s, "    allocate(character(len=n) :: msg)");
    let _ = writeln!(s, "    do i = 1, n");
    let _ = writeln!(s, "      msg(i:i) = chars(i)");
    let _ = writeln!(s, "    end do");
    let _ = writeln!(s, "  end function c_string");
    let _ = writeln!(s, "end module {module}");
    s
}

/// `tcc build`: writes the library, `LIB.h` and `LIB.f90` next to it, where `LIB`
/// is `name` or comes from the output's file name ([`library_name`]); returns a
/// short report for stderr.
pub fn build_library(
    hir: &Hir,
    source: &str,
    program: Option<&str>,
    name: Option<&str>,
    opts: &llvm::Options,
    output: &Path,
) -> Result<String, CommandError> {
    let units = hir.select_units(program)?;
    let lib = library_name(output, name)?;
    check_unit_names(hir, &lib, &units)?;
    let dir = output
        .parent()
        .map(Path::to_path_buf)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    let tmp = std::env::temp_dir().join(format!("tcc-build-{}-{}", std::process::id(), lib));
    std::fs::create_dir_all(&tmp)
        .map_err(|e| fail("E0714", format!("cannot create `{}`: {e}", tmp.display()), None))?;
    let obj = tmp.join(format!("{lib}.o"));
    // A complex program: the lowered program's object, and C wrappers taking
    // interleaved complex arrays (`cabi_complex`).
    let complex = crate::sema::complex::has_complex(hir);
    let mut extra_objs: Vec<PathBuf> = Vec::new();
    let codes = if complex {
        let (low, map) = crate::tir::complex::lower(hir);
        let plib = super::cabi_complex::parts_lib(&lib);
        let inner = llvm::write_object(&low, &units, opts, &plib, &obj).map_err(|e| fail("E0712", e.0, None))?;
        let outer = super::cabi_complex::outer_codes(hir, &inner);
        let c = tmp.join("complex_wrappers.c");
        std::fs::write(&c, super::cabi_complex::wrapper_source(hir, &low, &map, &lib, &inner, &outer))
            .map_err(|e| fail("E0714", e.to_string(), None))?;
        extra_objs.push(c);
        outer
    } else if crate::sema::half::has_half(hir) {
        // 16-bit arguments: the widened program's object, and C wrappers taking
        // their bit patterns (`cabi_half`).
        let low = crate::tir::half::widen(hir);
        let flib = super::cabi_half::f32_lib(&lib);
        let codes = llvm::write_object(&low, &units, opts, &flib, &obj).map_err(|e| fail("E0712", e.0, None))?;
        let c = tmp.join("half_wrappers.c");
        std::fs::write(&c, super::cabi_half::wrapper_source(hir, &low, &lib, &codes))
            .map_err(|e| fail("E0714", e.to_string(), None))?;
        extra_objs.push(c);
        codes
    } else {
        llvm::write_object(hir, &units, opts, &lib, &obj).map_err(|e| fail("E0712", e.0, None))?
    };
    let rt = find_runtime_lib().ok_or_else(|| {
        fail(
            "E0715",
            "cannot find the runtime library libtcc_runtime.a",
            Some("build it with `cargo build --workspace` or set TCC_RUNTIME_LIB to its path".into()),
        )
    })?;
    // Export exactly the library's own symbols (not the runtime's).
    let mut exported = vec![last_error_symbol(&lib), version_symbol(&lib)];
    exported.extend(codes.iter().map(|c| symbol(&lib, &c.name)));
    let vs = tmp.join("exports.map");
    let script = format!("{{ global: {}; local: *; }};\n", exported.join("; "));
    std::fs::write(&vs, script).map_err(|e| fail("E0714", e.to_string(), None))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut link = std::process::Command::new(&cc);
    link.arg("-shared").arg("-o").arg(output).arg(&obj);
    if !extra_objs.is_empty() {
        // The C wrappers of complex arguments, compiled with the link.
        link.args(["-O2", "-fPIC"]).args(&extra_objs);
    }
    let out = link
        .arg(&rt)
        .arg(format!("-Wl,--version-script={}", vs.display()))
        .arg("-Wl,--gc-sections")
        .arg("-s")
        .args(["-lm", "-lpthread", "-ldl", "-lgcc_s", "-lc"])
        .output()
        .map_err(|e| {
            fail("E0714", format!("cannot run the linker `{cc}`: {e}"), Some("install a C compiler (gcc)".into()))
        })?;
    let _ = std::fs::remove_dir_all(&tmp);
    if !out.status.success() {
        return Err(fail(
            "E0714",
            format!("linking `{}` failed:\n{}", output.display(), String::from_utf8_lossy(&out.stderr)),
            None,
        ));
    }
    let h = dir.join(format!("{lib}.h"));
    let f = dir.join(format!("{lib}.f90"));
    std::fs::write(&h, header(hir, &lib, &codes, source))
        .map_err(|e| fail("E0709", format!("cannot write `{}`: {e}", h.display()), None))?;
    std::fs::write(&f, fortran_module(hir, &lib, &codes, source))
        .map_err(|e| fail("E0709", format!("cannot write `{}`: {e}", f.display()), None))?;
    Ok(format!("wrote {}, {}, {} ({})\n", output.display(), h.display(), f.display(), exported.join(", ")))
}
