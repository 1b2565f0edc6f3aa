#!/usr/bin/env python3
"""A bf16 (and f16) GEMM through tcc against numpy at the same number of threads
(TCC_NUM_THREADS for tcc, threadpoolctl for numpy's OpenBLAS), on the same values.

tcc side: `tcc run` of `C[i,j] = A[i,k] * B[k,j]` with bf16 (or f16) tensors,
inputs given as `.npy` files (`<u2` bf16 bits, `<f2`), `--repeat R`: the reported
time is the best compiled-kernel time. tcc compiles 16-bit tensors as f32 ones
(book: "16-bit storage types"), so this is its f32 GETT on widened copies; the
widening of the inputs and the rounding of C happen outside the timed call and are
not counted there. The "tcc library" column counts them: the `tcc build` library's
function (`uint16_t*` arguments, a C wrapper widening A and B and rounding C around
the same f32 code), called through ctypes.
numpy side, on the same values: `A32 @ B32` (OpenBLAS sgemm on f32 copies made
beforehand: the like-for-like kernel), the whole mixed-precision step
`(A.astype(f32) @ B.astype(f32)).astype(bf16)` (conversions included), and
numpy's native `A @ B` on `ml_dtypes.bfloat16` / `float16` arrays (no BLAS: an
element-wise loop; only at the smallest size). GFLOP/s count 2 n^3.

Reproduce (from the repository root; the debug binary's runtime kernels are
built with opt-level 3 and the JIT compiles at -O3, so the kernel time is that
of a release build):
    cargo build && python3 -m pip install ml_dtypes threadpoolctl
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/cpu/half_gemm.py --tcc target/debug/tcc --threads 2
"""

import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np


sys.path.insert(0, os.path.dirname(__file__))
from bench import best_time  # noqa: E402


def best(f, repeat):
    """The best wall time of `repeat` calls (bench.py's timing loop)."""
    return best_time(f, repeat)[0]


def tcc_time(text):
    m = re.search(r"time = ([0-9.]+) (s|ms|µs)", text)
    assert m, text
    return float(m.group(1)) * {"s": 1.0, "ms": 1e-3, "µs": 1e-6}[m.group(2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcc", default="target/debug/tcc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="256,1024,2048")
    args = ap.parse_args()
    # The libraries are built from a temporary directory: the path must not be relative.
    args.tcc = os.path.abspath(args.tcc)
    os.environ["TCC_NUM_THREADS"] = str(args.threads)
    from threadpoolctl import threadpool_limits

    rows = []
    with tempfile.TemporaryDirectory() as d, threadpool_limits(args.threads):
        for ty, dt, descr in [("bf16", ml_dtypes.bfloat16, np.uint16), ("f16", np.float16, np.float16)]:
            for n in [int(s) for s in args.sizes.split(",")]:
                src = os.path.join(d, f"g{ty}{n}.tc")
                with open(src, "w") as f:
                    f.write(
                        f"range N = {n}; index i, j, k : N;\n"
                        f"input tensor A[i,k] : {ty}; input tensor B[k,j] : {ty};\n"
                        f"output tensor C[i,j] : {ty};\nC[i,j] = A[i,k] * B[k,j];\n"
                    )
                rng = np.random.default_rng(0)
                A = rng.uniform(-1, 1, (n, n)).astype(np.float32).astype(dt)
                B = rng.uniform(-1, 1, (n, n)).astype(np.float32).astype(dt)
                np.save(os.path.join(d, "A.npy"), A.view(descr))
                np.save(os.path.join(d, "B.npy"), B.view(descr))
                out = subprocess.run(
                    [args.tcc, "run", src, "--input", "A=A.npy", "--input", "B=B.npy",
                     "--repeat", str(args.repeat), "--output-dir", "out"],
                    check=True, capture_output=True, text=True, cwd=d,
                )
                t_tcc = tcc_time(out.stdout)
                lib = os.path.join(d, f"libg{ty}{n}.so")
                subprocess.run([args.tcc, "build", src, "-o", lib], check=True, capture_output=True)
                fn = getattr(ctypes.CDLL(lib), f"tcc_g{ty}{n}_main")
                fn.restype = ctypes.c_int
                Ab, Bb = np.ascontiguousarray(A.view(np.uint16)), np.ascontiguousarray(B.view(np.uint16))
                Cb = np.empty((n, n), dtype=np.uint16)
                cargs = []
                for arr in (Ab, Bb, Cb):
                    cargs += [ctypes.c_void_p(arr.ctypes.data), ctypes.c_size_t(arr.size)]

                def run_lib():
                    assert fn(*cargs) == 0

                t_lib = best(run_lib, args.repeat)
                C = np.load(os.path.join(d, "out", "C.npy")).view(dt).astype(np.float32)
                A32, B32 = A.astype(np.float32), B.astype(np.float32)
                want = (A32 @ B32).astype(dt).astype(np.float32)
                err = np.abs(C - want).max() / np.abs(want).max()
                assert (Cb == np.load(os.path.join(d, "out", "C.npy")).view(np.uint16)).mean() > 0.99
                t_sgemm = best(lambda: A32 @ B32, args.repeat)
                t_step = best(lambda: (A.astype(np.float32) @ B.astype(np.float32)).astype(dt), args.repeat)
                t_native = best(lambda: A @ B, 1) if n <= 256 else float("nan")
                rows.append((ty, n, t_tcc, t_lib, t_sgemm, t_step, t_native, 2.0 * n**3, err))
    print(f"threads {args.threads}, best of {args.repeat}")
    print("| type | n | tcc kernel (ms) | tcc library (ms) | sgemm on f32 copies (ms) | convert+sgemm+round (ms) "
          "| numpy native 16-bit (ms) | kernel / sgemm | library / convert+sgemm+round | tcc kernel GFLOP/s "
          "| sgemm GFLOP/s | max rel. diff. |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for ty, n, a, lb, s, st, nat, fl, e in rows:
        print(f"| {ty} | {n} | {a*1e3:.1f} | {lb*1e3:.1f} | {s*1e3:.1f} | {st*1e3:.1f} | {nat*1e3:.1f} | {a/s:.2f} "
              f"| {lb/st:.2f} | {fl/a/1e9:.1f} | {fl/s/1e9:.1f} | {e:.1e} |")


if __name__ == "__main__":
    main()
