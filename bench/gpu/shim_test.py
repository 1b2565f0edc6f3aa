#!/usr/bin/env python3
"""Checks the C host shims that `tcc build --target cuda` writes (NAME.c + NAME.h
beside NAME.ptx) on a GPU machine: for each NAME.tc it runs tcc-gpu (with
--check: outputs against the interpreter) saving inputs and outputs as .npy,
writes a C main that reads the inputs, calls every tcc_cuda_* function of the
header, compares the outputs with tcc-gpu's (f64, f32, complex as interleaved
parts, bf16/f16 decoded from their uint16_t bit patterns, each at its type's
tolerance) and checks that a wrong length is
refused (TCC_ERR_LENGTH), compiles it with the shim (cc, CUDA headers, -lcuda
-lcublas) and runs it. Prints PASS/FAIL per file and a count.

    python3 bench/gpu/shim_test.py --tcc-gpu BIN [--dir D] [--no-check] NAME.tc ...
(the shim, PTX and plan of NAME.tc are D/NAME.{c,h,ptx,plan.json}; D: the
file's folder by default)
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

MAIN = r"""
#include "%(lib)s.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A .npy file's data (little-endian, C order), its element count. */
static void* npy(const char* dir, const char* name, size_t elem, size_t* n) {
    char path[4096];
    snprintf(path, sizeof path, "%%s/%%s.npy", dir, name);
    FILE* f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %%s\n", path); exit(2); }
    unsigned char h[12];
    if (fread(h, 1, 12, f) != 12 || memcmp(h, "\x93NUMPY", 6) != 0) { fprintf(stderr, "%%s: not .npy\n", path); exit(2); }
    long off = h[6] == 1 ? 10 + (h[8] | h[9] << 8) : 12 + (h[8] | h[9] << 8 | h[10] << 16 | (long)h[11] << 24);
    fseek(f, 0, SEEK_END);
    long size = ftell(f) - off;
    fseek(f, off, SEEK_SET);
    *n = (size_t)size / elem;
    void* p = malloc(size > 0 ? size : 1);
    if (size > 0 && fread(p, 1, size, f) != (size_t)size) { fprintf(stderr, "%%s: short\n", path); exit(2); }
    fclose(f);
    return p;
}

/* 16-bit floats from their bit patterns (the shims' uint16_t arguments). */
static double bf16_(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static double f16_(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

static int close_(const char* name, const double* got, const double* want, size_t n, double tol) {
    double scale = 1e-300, diff = 0;
    for (size_t i = 0; i < n; ++i) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; ++i) diff = fmax(diff, fabs(got[i] - want[i]));
    if (!(diff / scale <= tol)) { printf("output %%s: max relative difference %%g\n", name, diff / scale); return 0; }
    return 1;
}

int main(int argc, char** argv) {
    const char* dir = argv[1];
    int ok = 1;
    (void)argc;
%(calls)s
    return ok ? 0 : 1;
}
"""


# C types of the shims' arguments: how an element is read as doubles (count
# per element, expression of element i of array p) and the per-type tolerance
# relative to the largest magnitude (the interpreter check's tolerances; the
# shim runs the same PTX as tcc-gpu, so its outputs are normally identical).
TYPES = {
    "double": (1, "p[i]", 1e-10),
    "float": (1, "p[i]", 1e-4),
    "double _Complex": (2, "((const double*)p)[i]", 1e-10),
    "float _Complex": (2, "((const float*)p)[i]", 1e-4),
    "uint16_t bf16": (1, "bf16_(p[i])", 2e-2),
    "uint16_t f16": (1, "f16_(p[i])", 3e-3),
}
PARAM = re.compile(r"(const )?(double _Complex|float _Complex|double|float|uint16_t)\* (\w+)$")


def elem_types(header):
    """Each argument's element type from the header's comment (`in  X: bf16[...]`)."""
    return dict(re.findall(r"^ \*\s+(?:in|out|inout)\s+(\w+): (\w+)\[", header, re.M))


def call_code(func, params, elems):
    """C statements calling `func` with tensors loaded from .npy files."""
    code = [f"    {{ /* {func} */"]
    args = []
    outs = []
    first = None
    for p in params:
        m = PARAM.match(p.strip())
        if not m:
            continue
        const, ty, name = m.groups()
        key = f"uint16_t {elems.get(name)}" if ty == "uint16_t" else ty
        if key not in TYPES:
            raise ValueError(f"{name}: 16-bit argument of unknown type {elems.get(name)}")
        first = first or name
        code.append(f"        size_t {name}_len; {ty}* {name} = npy(dir, \"{name}\", sizeof({ty}), &{name}_len);")
        if not const:
            outs.append((name, ty, key))
            code.append(f"        {ty}* {name}_want = {name}; {name} = calloc({name}_len ? {name}_len : 1, sizeof({ty}));")
        args.append(f"{name}, {name}_len")
    code.append(f"        int rc = {func}({', '.join(args)});")
    code.append(f"        if (rc != TCC_OK) {{ printf(\"{func}: %d %s\\n\", rc, tcc_cuda_last_error()); ok = 0; }}")
    for name, ty, key in outs:
        per, read, tol = TYPES[key]
        n = f"{per} * {name}_len"
        code.append(f"        {{ double* g = malloc(({n} + 1) * sizeof(double)); double* w = malloc(({n} + 1) * sizeof(double));")
        code.append(f"          for (size_t i = 0; i < {n}; ++i) {{ const {ty}* p = {name}; g[i] = {read}; p = {name}_want; w[i] = {read}; }}")
        code.append(f"          ok &= close_(\"{name}\", g, w, {n}, {tol}); free(g); free(w); }}")
    if first:
        bad = [a.replace(f"{first}_len", f"{first}_len + 1") if a.startswith(first + ",") else a for a in args]
        code.append(f"        if ({func}({', '.join(bad)}) != TCC_ERR_LENGTH) {{ printf(\"{func}: a wrong length was not refused\\n\"); ok = 0; }}")
    code.append("    }")
    return "\n".join(code)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcc-gpu", required=True)
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--dir")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    cuda = sorted(glob.glob("/usr/local/cuda*/include/cuda.h"))
    inc = os.path.dirname(cuda[-1]) if cuda else "/usr/local/cuda/include"
    libdirs = sorted({os.path.dirname(p) for p in glob.glob("/usr/local/cuda*/lib64/libcublas.so*") + glob.glob("/usr/local/cuda*/lib64/stubs/libcuda.so")})
    passed = failed = 0
    for tc in a.files:
        d, name = a.dir or os.path.dirname(tc), os.path.basename(tc)[:-3]
        work = tempfile.mkdtemp()
        try:
            header = open(os.path.join(d, name + ".h")).read()
            protos = re.findall(r"int (tcc_cuda_\w+)\(([^)]*)\);", header)
            if len(protos) != 1:
                print(f"SKIP {tc}: {len(protos)} programs (inputs are saved per run)")
                continue
            other = [q.strip() for q in protos[0][1].split(",") if "*" in q and not PARAM.match(q.strip())]
            if other:
                print(f"SKIP {tc}: arguments this harness does not handle ({'; '.join(other)})")
                continue
            cmd = [a.tcc_gpu, tc, "--ptx-dir", d, "--output-dir", work, "--save-inputs"] + ([] if a.no_check else ["--check"])
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {tc}: tcc-gpu: {r.stdout[-300:]} {r.stderr[-300:]}")
                failed += 1
                continue
            main_c = os.path.join(work, "main.c")
            open(main_c, "w").write(MAIN % dict(lib=name, calls="\n".join(call_code(f, p.split(","), elem_types(header)) for f, p in protos)))
            exe = os.path.join(work, "main")
            cc = [a.cc, "-O1", "-std=gnu99", "-o", exe, main_c, os.path.join(d, name + ".c"), "-I", d, "-I", inc] + [f"-L{x}" for x in libdirs] + ["-lcublas", "-lcuda", "-lpthread", "-lm"]
            r = subprocess.run(cc, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {tc}: cc: {r.stderr[-800:]}")
                failed += 1
                continue
            r = subprocess.run([exe, work], capture_output=True, text=True)
            if r.returncode == 0:
                print(f"PASS {tc}")
                passed += 1
            else:
                print(f"FAIL {tc}: {r.stdout[-500:]} {r.stderr[-300:]}")
                failed += 1
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"shim_test: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
