//! `tcc build` of a program with 16-bit tensors (`bf16`, `f16`): the library's
//! functions take their bit patterns (C `uint16_t*`, Fortran
//! `integer(c_int16_t)`: bf16 bits for `bf16`, IEEE half bits for `f16`), while
//! the compiled code is that of the program widened to f32 ([`crate::tir::half`]).
//!
//! A small C wrapper per function, compiled with the library, widens each 16-bit
//! input into an f32 buffer (exact), calls the widened function (same size
//! arguments and lengths) and rounds each 16-bit output back once (to nearest,
//! ties to even, as [`crate::half`] does): one extra pass over every 16-bit
//! argument and twice its size in temporary memory. It writes nothing unless the
//! widened function succeeded; its own allocation failure is `TCC_ERR_NOMEM`,
//! and it checks overlaps involving 16-bit arguments itself (`TCC_ERR_OVERLAP`).
//! The widened functions are built under the library name `LIB_f32` and are not
//! exported.

use super::cabi::{c_params, last_error_symbol, size_param, symbol, version_symbol};
use super::llvm::UnitCode;
use crate::sema::hir::{ElemType, Hir};
use std::fmt::Write as _;

/// The library name the widened program is compiled under.
pub fn f32_lib(lib: &str) -> String {
    format!("{lib}_f32")
}

/// The conversions, in C, bit for bit those of [`crate::half`].
const CONVERSIONS: &str = r#"
static float tcc_w_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f;
}
static uint16_t tcc_w_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float tcc_w_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) { float v = (float)m * 5.9604644775390625e-8f; return sign ? -v : v; }
    u = e == 0x1f ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
    float f; memcpy(&f, &u, 4); return f;
}
static uint16_t tcc_w_f32_to_f16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    int32_t exp = (int32_t)((u >> 23) & 0xffu), e;
    uint32_t man = u & 0x7fffffu, r, rem;
    if (exp == 0xff) return sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0u);
    e = exp - 127 + 15;
    if (e >= 0x1f) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        uint32_t m = man | 0x800000u, shift = (uint32_t)(14 - e), half = 1u << (shift - 1);
        rem = m & ((1u << shift) - 1u); r = m >> shift;
        if (rem > half || (rem == half && (r & 1u))) r++;
        return sign | (uint16_t)r;
    }
    r = ((uint32_t)e << 10) | (man >> 13); rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return sign | (uint16_t)r;
}
"#;

fn names(e: ElemType) -> (&'static str, &'static str) {
    if e == ElemType::BF16 {
        ("tcc_w_bf16_to_f32", "tcc_w_f32_to_bf16")
    } else {
        ("tcc_w_f16_to_f32", "tcc_w_f32_to_f16")
    }
}

/// The C source of the wrappers (and of `last_error`/`version`, forwarded).
/// `codes` are the widened program's (the same arguments: widening keeps ids).
pub fn wrapper_source(hir: &Hir, low: &Hir, lib: &str, codes: &[UnitCode]) -> String {
    let flib = f32_lib(lib);
    let mut s = String::new();
    let _ = writeln!(s, "#include <stddef.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>");
    let _ = writeln!(s, "{CONVERSIONS}");
    let _ = writeln!(s, "static __thread const char* wrap_error;\n");
    let _ = writeln!(s, "extern const char* {}(void);", last_error_symbol(&flib));
    let _ = writeln!(s, "extern const char* {}(void);", version_symbol(&flib));
    let _ = writeln!(
        s,
        "const char* {}(void) {{ return wrap_error ? wrap_error : {}(); }}",
        last_error_symbol(lib),
        last_error_symbol(&flib)
    );
    let _ = writeln!(s, "const char* {}(void) {{ return {}(); }}\n", version_symbol(lib), version_symbol(&flib));
    for c in codes {
        let onames = c_params(hir, &c.args, &c.sizes);
        let sizes: Vec<String> = c.sizes.iter().map(|&r| size_param(hir, r, false)).collect();
        let mut proto: Vec<String> = sizes.iter().map(|p| format!("size_t {p}")).collect();
        let mut params: Vec<String> = proto.clone();
        for (k, (&t, (p, l))) in c.args.iter().zip(&onames).enumerate() {
            let cst = if k < c.n_inputs { "const " } else { "" };
            proto.push(format!("{cst}{}* a{k}", super::cabi::c_type(low.tensors[t].elem)));
            proto.push(format!("size_t a{k}_len"));
            params.push(format!("{cst}{}* {p}", super::cabi::c_type(hir.tensors[t].elem)));
            params.push(format!("size_t {l}"));
        }
        let _ = writeln!(s, "extern int {}({});", symbol(&flib, &c.name), proto.join(", "));
        let _ = writeln!(s, "int {}({}) {{", symbol(lib, &c.name), params.join(", "));
        let _ = writeln!(s, "    int tcc_w_rc = 4; /* TCC_ERR_NOMEM */\n    wrap_error = NULL;");
        let half: Vec<usize> = (0..c.args.len()).filter(|&k| hir.tensors[c.args[k]].elem.is_half()).collect();
        // The f32 function sees copies of 16-bit arguments, so an output that
        // overlaps another argument where either is 16-bit is caught here, before
        // anything is written (TCC_ERR_OVERLAP).
        for o in c.n_inputs..c.args.len() {
            for m in (0..c.args.len()).filter(|&m| m != o && (half.contains(&o) || half.contains(&m))) {
                let ((po, lo), (pm, lm)) = (&onames[o], &onames[m]);
                let (so, sm) = (hir.tensors[c.args[o]].elem.size_bytes(), hir.tensors[c.args[m]].elem.size_bytes());
                let _ = writeln!(
                    s,
                    "    if ({po} && {pm} && {lo} > 0 && {lm} > 0 && (const char*){po} < (const char*){pm} + {lm} * {sm}                      && (const char*){pm} < (const char*){po} + {lo} * {so}) {{"
                );
                let _ = writeln!(
                    s,
                    "        wrap_error = \"{}: output `{po}` overlaps argument `{pm}`\";\n        return 3; /* TCC_ERR_OVERLAP */\n    }}",
                    symbol(lib, &c.name)
                );
            }
        }
        for &k in &half {
            let _ = writeln!(s, "    float *tcc_w_f{k} = NULL;");
        }
        for &k in &half {
            let (p, l) = &onames[k];
            let (widen, _) = names(hir.tensors[c.args[k]].elem);
            let _ = writeln!(s, "    if ({p} != NULL && {l} > 0) {{");
            let _ = writeln!(s, "        tcc_w_f{k} = (float*)malloc({l} * sizeof(float));");
            let _ = writeln!(s, "        if (tcc_w_f{k} == NULL) {{");
            let _ = writeln!(s, "            wrap_error = \"cannot allocate the f32 copy of 16-bit argument `{p}`\";");
            let _ = writeln!(s, "            goto tcc_w_done;\n        }}");
            if k < c.n_inputs {
                let _ = writeln!(s, "        for (size_t tcc_w_k = 0; tcc_w_k < {l}; tcc_w_k++)");
                let _ = writeln!(s, "            tcc_w_f{k}[tcc_w_k] = {widen}({p}[tcc_w_k]);");
            }
            let _ = writeln!(s, "    }}");
        }
        let mut call: Vec<String> = sizes.clone();
        for (k, (p, l)) in onames.iter().enumerate() {
            call.push(if half.contains(&k) { format!("{p} ? tcc_w_f{k} : NULL") } else { p.clone() });
            call.push(l.clone());
        }
        let _ = writeln!(s, "    tcc_w_rc = {}({});", symbol(&flib, &c.name), call.join(", "));
        let _ = writeln!(s, "    if (tcc_w_rc == 0) {{");
        for &k in half.iter().filter(|&&k| k >= c.n_inputs) {
            let (p, l) = &onames[k];
            let (_, round) = names(hir.tensors[c.args[k]].elem);
            let _ = writeln!(s, "        for (size_t tcc_w_k = 0; tcc_w_k < {l}; tcc_w_k++)");
            let _ = writeln!(s, "            {p}[tcc_w_k] = {round}(tcc_w_f{k}[tcc_w_k]);");
        }
        let _ = writeln!(s, "    }}");
        let _ = writeln!(s, "tcc_w_done:");
        for &k in &half {
            let _ = writeln!(s, "    free(tcc_w_f{k});");
        }
        let _ = writeln!(s, "    return tcc_w_rc;\n}}\n");
    }
    s
}
