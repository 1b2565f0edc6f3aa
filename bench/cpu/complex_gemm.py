#!/usr/bin/env python3
"""A complex GEMM through tcc's lowering to real pairs against numpy.einsum on
complex128, at the same number of threads (TCC_NUM_THREADS for tcc, threadpoolctl
for numpy's OpenBLAS), on the very same arrays.

tcc side: `tcc build` of `C[i,j] = A[i,k] * B[k,j]` with `c128` tensors; the
library's C function (interleaved `double _Complex*` arguments) is called
through ctypes, so its time includes the split of A and B into real and
imaginary arrays and the join of C (one pass each), plus 4 real GEMMs.
numpy side: `numpy.einsum('ik,kj->ij', A, B, optimize=True)`, and `numpy.dot(A, B)`
(OpenBLAS zgemm directly) for reference. GFLOP/s count 8 n^3 real flops.

Reproduce (from the repository root):
    cargo build --release --workspace
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/cpu/complex_gemm.py --threads 2
"""

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np


sys.path.insert(0, os.path.dirname(__file__))
from bench import best_time  # noqa: E402


def best(f, repeat):
    """The best wall time of `repeat` calls (bench.py's timing loop)."""
    return best_time(f, repeat)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcc", default="target/release/tcc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="1000,2000")
    args = ap.parse_args()
    os.environ["TCC_NUM_THREADS"] = str(args.threads)
    from threadpoolctl import threadpool_limits

    rows = []
    with tempfile.TemporaryDirectory() as d, threadpool_limits(args.threads):
        for n in [int(s) for s in args.sizes.split(",")]:
            src = os.path.join(d, f"z{n}.tc")
            with open(src, "w") as f:
                f.write(
                    f"range N = {n}; index i, j, k : N;\n"
                    "input tensor A[i,k] : c128; input tensor B[k,j] : c128;\n"
                    "output tensor C[i,j] : c128;\nC[i,j] = A[i,k] * B[k,j];\n"
                )
            lib = os.path.join(d, f"libz{n}.so")
            subprocess.run([args.tcc, "build", src, "-o", lib], check=True, capture_output=True)
            fn = getattr(ctypes.CDLL(lib), f"tcc_z{n}_main")
            fn.restype = ctypes.c_int
            rng = np.random.default_rng(0)
            A = rng.uniform(-1, 1, (n, n)) + 1j * rng.uniform(-1, 1, (n, n))
            B = rng.uniform(-1, 1, (n, n)) + 1j * rng.uniform(-1, 1, (n, n))
            C = np.empty((n, n), dtype=np.complex128)
            cargs = []
            for arr in (A, B, C):
                cargs += [ctypes.c_void_p(arr.ctypes.data), ctypes.c_size_t(arr.size)]

            def run_tcc():
                rc = fn(*cargs)
                assert rc == 0, rc

            want = np.einsum("ik,kj->ij", A, B, optimize=True)
            t_np = best(lambda: np.einsum("ik,kj->ij", A, B, optimize=True), args.repeat)
            t_dot = best(lambda: np.dot(A, B), args.repeat)
            t_tcc = best(run_tcc, args.repeat)
            err = np.abs(C - want).max() / np.abs(want).max()
            flops = 8.0 * n**3  # complex GEMM: 4 real multiply-adds per complex one
            rows.append((n, t_np, t_dot, t_tcc, flops, err))
    print(f"threads {args.threads}, best of {args.repeat}")
    print(
        "| n | numpy einsum c128 (ms) | numpy.dot zgemm (ms) | tcc lowered (ms) | tcc / einsum | tcc / zgemm "
        "| einsum GFLOP/s | zgemm GFLOP/s | tcc GFLOP/s | max rel. error |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, a, z, b, fl, e in rows:
        print(
            f"| {n} | {a*1e3:.1f} | {z*1e3:.1f} | {b*1e3:.1f} | {b/a:.2f} | {b/z:.2f} "
            f"| {fl/a/1e9:.1f} | {fl/z/1e9:.1f} | {fl/b/1e9:.1f} | {e:.1e} |"
        )


if __name__ == "__main__":
    main()
