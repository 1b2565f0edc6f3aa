//! `tcc build` of a program with complex tensors: the library's functions take
//! interleaved complex arrays (C `double _Complex*` / `float _Complex*`, Fortran
//! `complex(c_double_complex)` / `complex(c_float_complex)`), while the compiled
//! code is that of the program lowered to real pairs ([`crate::tir::complex`]).
//!
//! A small C wrapper per function, compiled with the library, splits each complex
//! input into its two part arrays, calls the lowered function (same size arguments
//! and lengths, every complex argument as two real ones) and joins the outputs
//! back: one extra pass over every complex argument and twice its size in
//! temporary memory. It writes nothing unless the lowered function succeeded; its
//! own allocation failure is `TCC_ERR_NOMEM`. The lowered functions are built
//! under the library name `LIB_parts` and are not exported.

use super::cabi::{c_params, last_error_symbol, size_param, symbol, version_symbol};
use super::llvm::UnitCode;
use crate::sema::hir::{ElemType, Hir, TensorId};
use crate::tir::complex::ComplexMap;
use std::fmt::Write as _;

/// The library name the lowered program is compiled under.
pub fn parts_lib(lib: &str) -> String {
    format!("{lib}_parts")
}

/// The units' codes as the library's callers see them: arguments of the source
/// program (complex tensors once each), from the lowered program's codes.
pub fn outer_codes(hir: &Hir, inner: &[UnitCode]) -> Vec<UnitCode> {
    inner
        .iter()
        .map(|c| {
            let (args, n_inputs) = super::cabi::abi_args(hir, c.unit);
            UnitCode { args, n_inputs, ..c.clone() }
        })
        .collect()
}

fn part_c_type(e: ElemType) -> &'static str {
    match e.real_part() {
        ElemType::F32 => "float",
        _ => "double",
    }
}

/// The C source of the wrappers (and of `last_error`/`version`, forwarded).
pub fn wrapper_source(
    hir: &Hir,
    low: &Hir,
    map: &ComplexMap,
    lib: &str,
    inner: &[UnitCode],
    outer: &[UnitCode],
) -> String {
    let plib = parts_lib(lib);
    let mut s = String::new();
    let _ = writeln!(s, "#include <stddef.h>\n#include <stdlib.h>\n");
    let _ = writeln!(s, "static __thread const char* wrap_error;\n");
    let _ = writeln!(s, "extern const char* {}(void);", last_error_symbol(&plib));
    let _ = writeln!(s, "extern const char* {}(void);", version_symbol(&plib));
    let _ = writeln!(
        s,
        "const char* {}(void) {{ return wrap_error ? wrap_error : {}(); }}",
        last_error_symbol(lib),
        last_error_symbol(&plib)
    );
    let _ = writeln!(s, "const char* {}(void) {{ return {}(); }}\n", version_symbol(lib), version_symbol(&plib));
    for (ic, oc) in inner.iter().zip(outer) {
        let onames = c_params(hir, &oc.args, &oc.sizes);
        let sizes: Vec<String> = oc.sizes.iter().map(|&r| size_param(hir, r, false)).collect();
        // The inner function's prototype.
        let mut proto: Vec<String> = sizes.iter().map(|p| format!("size_t {p}")).collect();
        for (k, &t) in ic.args.iter().enumerate() {
            let c = if k < ic.n_inputs { "const " } else { "" };
            proto.push(format!("{c}{}* a{k}", part_c_type(low.tensors[t].elem)));
            proto.push(format!("size_t a{k}_len"));
        }
        let _ = writeln!(s, "extern int {}({});", symbol(&plib, &ic.name), proto.join(", "));
        // The outer function.
        let mut params: Vec<String> = sizes.iter().map(|p| format!("size_t {p}")).collect();
        for (k, (&t, (p, l))) in oc.args.iter().zip(&onames).enumerate() {
            let c = if k < oc.n_inputs { "const " } else { "" };
            let ty = super::cabi::c_type(hir.tensors[t].elem);
            params.push(format!("{c}{ty}* {p}"));
            params.push(format!("size_t {l}"));
        }
        let _ = writeln!(s, "int {}({}) {{", symbol(lib, &oc.name), params.join(", "));
        let _ = writeln!(s, "    int tcc_w_rc = 4; /* TCC_ERR_NOMEM */\n    wrap_error = NULL;");
        // Part buffers of every complex argument.
        let cx: Vec<(usize, TensorId)> =
            oc.args.iter().copied().enumerate().filter(|(_, t)| hir.tensors[*t].elem.is_complex()).collect();
        for &(k, t) in &cx {
            let pt = part_c_type(hir.tensors[t].elem);
            let _ = writeln!(s, "    {pt} *tcc_w_re{k} = NULL, *tcc_w_im{k} = NULL;");
        }
        for &(k, t) in &cx {
            let (p, l) = &onames[k];
            let pt = part_c_type(hir.tensors[t].elem);
            let _ = writeln!(s, "    if ({p} != NULL && {l} > 0) {{");
            let _ = writeln!(s, "        tcc_w_re{k} = ({pt}*)malloc({l} * sizeof({pt}));");
            let _ = writeln!(s, "        tcc_w_im{k} = ({pt}*)malloc({l} * sizeof({pt}));");
            let _ = writeln!(s, "        if (tcc_w_re{k} == NULL || tcc_w_im{k} == NULL) {{");
            let _ = writeln!(s, "            wrap_error = \"cannot allocate the parts of complex argument `{p}`\";");
            let _ = writeln!(s, "            goto tcc_w_done;\n        }}");
            if k < oc.n_inputs {
                let _ = writeln!(s, "        for (size_t tcc_w_k = 0; tcc_w_k < {l}; tcc_w_k++) {{");
                let _ = writeln!(s, "            tcc_w_re{k}[tcc_w_k] = __real__ {p}[tcc_w_k];");
                let _ = writeln!(s, "            tcc_w_im{k}[tcc_w_k] = __imag__ {p}[tcc_w_k];\n        }}");
            }
            let _ = writeln!(s, "    }}");
        }
        // The inner call: each inner argument from its source tensor's part.
        let mut call: Vec<String> = sizes.clone();
        for &t in &ic.args {
            let (src, is_im) = match map.im.iter().find(|(_, &im)| im == t) {
                Some((&src, _)) => (src, true),
                None => (t, false),
            };
            let k = oc.args.iter().position(|&a| a == src).expect("every part's tensor is an argument");
            let (p, l) = &onames[k];
            if hir.tensors[src].elem.is_complex() {
                call.push(format!("{p} ? tcc_w_{}{k} : NULL", if is_im { "im" } else { "re" }));
            } else {
                call.push(p.clone());
            }
            call.push(l.clone());
        }
        let _ = writeln!(s, "    tcc_w_rc = {}({});", symbol(&plib, &ic.name), call.join(", "));
        let _ = writeln!(s, "    if (tcc_w_rc == 0) {{");
        for &(k, _) in cx.iter().filter(|(k, _)| *k >= oc.n_inputs) {
            let (p, l) = &onames[k];
            let _ = writeln!(s, "        for (size_t tcc_w_k = 0; tcc_w_k < {l}; tcc_w_k++) {{");
            let _ = writeln!(s, "            __real__ {p}[tcc_w_k] = tcc_w_re{k}[tcc_w_k];");
            let _ = writeln!(s, "            __imag__ {p}[tcc_w_k] = tcc_w_im{k}[tcc_w_k];\n        }}");
        }
        let _ = writeln!(s, "    }}");
        let _ = writeln!(s, "tcc_w_done:");
        for &(k, _) in &cx {
            let _ = writeln!(s, "    free(tcc_w_re{k});\n    free(tcc_w_im{k});");
        }
        let _ = writeln!(s, "    return tcc_w_rc;\n}}\n");
    }
    s
}
