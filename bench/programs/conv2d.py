#!/usr/bin/env python3
"""One convolution layer (issue 21, deliverable 4): `tcc run --repeat R` of a
conv2d written with affine subscripts, `O[n,k,y,x] = I[n,c,y+r,x+s] * F[k,c,r,s]`,
against numpy's direct convolution: `sliding_window_view` + `einsum(optimize=True)`
and `sliding_window_view` + `tensordot`, best of R each, at the same thread count
(TCC_NUM_THREADS for tcc, OPENBLAS_NUM_THREADS / OMP_NUM_THREADS for numpy, set
before numpy is imported). tcc's time is the compiled program's (the gather of the
windows, im2col, and the GEMM), not its compile time; numpy's includes the copy
tensordot / einsum make of the strided window view.

Reproduce (from the repository root, after `cargo build`):
    python3 bench/programs/conv2d.py --threads 2 --repeat 5
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--tcc", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "debug", "tcc"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=5)
ap.add_argument("--sizes", default="8,64,64,34,3", help="N,C,K,H(=W),R(=S)")
args = ap.parse_args()

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)
import numpy as np  # noqa: E402
from numpy.lib.stride_tricks import sliding_window_view  # noqa: E402

N, C, K, H, R = (int(v) for v in args.sizes.split(","))
Y = H - R + 1
SRC = f"""range N = {N}; range C = {C}; range K = {K}; range Y = {Y}; range X = {Y}; range R = {R}; range S = {R};
range H = {H}; range W = {H};
index n : N; index c : C; index k : K; index y : Y; index x : X; index r : R; index s : S; index h : H; index w : W;
input tensor I[n,c,h,w]; input tensor F[k,c,r,s]; output tensor O[n,k,y,x];
O[n,k,y,x] = I[n,c,y+r,x+s] * F[k,c,r,s];
"""
flops = 2.0 * N * K * Y * Y * C * R * R

with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "conv2d.tc")
    with open(src, "w") as f:
        f.write(SRC)
    rng = np.random.default_rng(0)
    I = rng.standard_normal((N, C, H, H))
    F = rng.standard_normal((K, C, R, R))
    np.save(os.path.join(d, "I.npy"), I)
    np.save(os.path.join(d, "F.npy"), F)
    env = dict(os.environ, TCC_NUM_THREADS=str(args.threads))
    cmd = [args.tcc, "run", src, "--repeat", str(args.repeat), "--check",
           "--input", f"I={d}/I.npy", "--input", f"F={d}/F.npy", "--output-dir", d]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stdout + out.stderr)
    m = re.search(r"time = ([\d.]+) (ms|µs|s)", out.stdout)
    t_tcc = float(m.group(1)) * {"ms": 1e-3, "µs": 1e-6, "s": 1.0}[m.group(2)]
    O_tcc = np.load(os.path.join(d, "O.npy"))

    def best(fn):
        t = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            v = fn()
            t = min(t, time.perf_counter() - t0)
        return t, v

    def einsum():
        return np.einsum("ncyxrs,kcrs->nkyx", sliding_window_view(I, (R, R), axis=(2, 3)), F, optimize=True)

    def tensordot():
        win = sliding_window_view(I, (R, R), axis=(2, 3))  # n,c,y,x,r,s
        return np.tensordot(win, F, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)

    t_ein, O_ein = best(einsum)
    t_td, O_td = best(tensordot)
    err = max(np.abs(O_tcc - O_ein).max(), np.abs(O_td - O_ein).max()) / np.abs(O_ein).max()
    t_np = min(t_ein, t_td)
    print(f"conv2d N={N} C={C} K={K} H=W={H} R=S={R} (Y=X={Y}), {args.threads} threads, best of {args.repeat}")
    print(f"  tcc run:                       {t_tcc * 1e3:8.2f} ms  {flops / t_tcc / 1e9:6.1f} GFLOP/s")
    print(f"  numpy sliding_window + einsum:    {t_ein * 1e3:8.2f} ms  {flops / t_ein / 1e9:6.1f} GFLOP/s")
    print(f"  numpy sliding_window + tensordot: {t_td * 1e3:8.2f} ms  {flops / t_td / 1e9:6.1f} GFLOP/s")
    print(f"  tcc / best numpy = {t_tcc / t_np:.2f}   (max rel. difference {err:.1e})")
