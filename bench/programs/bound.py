#!/usr/bin/env python3
"""How fast can the attention block be at all? A lower bound on any implementation's
time, measured in the same process as numpy's block.

The block (examples/programs/attention_block.tc, GPT-2 small: batch 4 x 256 tokens,
12 heads of 64, width 768) is 5.64 GFLOP of matrix products: four 1024x768x768
projections (Q, K, V, output) and two batches of 48 head products (scores
256x256x64, P.V 256x64x256), plus exp, a row sum and a scaling over 3.1 M
elements. Whatever a compiler does, it must do the products (no algebra removes
them: the weights are inputs), so the block takes at least

  - `bound (OpenBLAS shapes)`: the sum of OpenBLAS dgemm's own times on exactly
    those products (contiguous operands, no transposes, no element-wise work), and
  - `bound (peak)`: 5.64 GFLOP at the best dgemm rate this process measures on a
    large square product (2048^3), i.e. every product at BLAS's peak.

numpy's block is timed the same way bench.py times it (one numpy.einsum per
term, optimize=True). The largest speed-up any implementation can have over
numpy is numpy's time over the bound; issue 18 asks for 1.5x.

    python3 bench/programs/bound.py --threads 2
"""

import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--pause", type=float, default=0.3)
args = ap.parse_args()
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def best(f, n):
    b = float("inf")
    for _ in range(n):
        time.sleep(args.pause)
        t = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t)
    return b


def es(spec, *ops):
    return np.einsum(spec, *ops, optimize=True)


B, S, H, E, M = 4, 256, 12, 64, 768
rng = np.random.default_rng(0)
X = 0.05 * rng.standard_normal((B, S, M))
Wq, Wk, Wv = (0.05 * rng.standard_normal((M, H, E)) for _ in range(3))
Wo = 0.05 * rng.standard_normal((H, E, M))


def block():
    Q = es("bsm,mhe->bhse", X, Wq)
    K = es("btm,mhe->bhte", X, Wk)
    V = es("btm,mhf->bhtf", X, Wv)
    P = np.exp(0.125 * es("bhse,bhte->bhst", Q, K))
    Z = P.sum(axis=3)
    O = es("bhst,bhtf->bhsf", P, V) / Z[..., None]
    return es("bhsf,hfn->bsn", O, Wo)


# The products alone, on contiguous operands of their exact shapes.
proj_a, proj_b = rng.standard_normal((B * S, M)), rng.standard_normal((M, H * E))
q, kt = rng.standard_normal((B * H, S, E)), rng.standard_normal((B * H, E, S))
p, v = rng.standard_normal((B * H, S, S)), rng.standard_normal((B * H, S, E))
sq = rng.standard_normal((2048, 2048))
flops = {"projection": 2.0 * B * S * M * H * E, "scores": 2.0 * B * H * S * S * E, "pv": 2.0 * B * H * S * S * E}
total = 4 * flops["projection"] + flops["scores"] + flops["pv"]

with threadpool_limits(args.threads):
    t_block = best(block, args.reps)
    t_proj = best(lambda: proj_a @ proj_b, args.reps)
    t_scores = best(lambda: np.matmul(q, kt), args.reps)
    t_pv = best(lambda: np.matmul(p, v), args.reps)
    t_sq = best(lambda: sq @ sq, args.reps)
    t_exp = best(lambda: np.exp(p), args.reps)

rate_sq = 2.0 * 2048**3 / t_sq
bound_shapes = 4 * t_proj + t_scores + t_pv
bound_peak = total / rate_sq
print(f"{args.threads} threads, best of {args.reps} (each call after {args.pause} s idle)\n")
print("| quantity | time | GFLOP/s |")
print("|---|---|---|")
print(f"| numpy's block (bench.py's implementation) | {t_block*1e3:.1f} ms | {total/t_block/1e9:.1f} |")
print(f"| dgemm 1024x768x768 (one projection) | {t_proj*1e3:.2f} ms | {flops['projection']/t_proj/1e9:.1f} |")
print(f"| matmul 48 x 256x64 . 64x256 (scores) | {t_scores*1e3:.2f} ms | {flops['scores']/t_scores/1e9:.1f} |")
print(f"| matmul 48 x 256x256 . 256x64 (P.V) | {t_pv*1e3:.2f} ms | {flops['pv']/t_pv/1e9:.1f} |")
print(f"| dgemm 2048^3 (the peak used below) | {t_sq*1e3:.1f} ms | {rate_sq/1e9:.1f} |")
print(f"| numpy exp over 3.1 M elements (not in the bounds) | {t_exp*1e3:.2f} ms | |")
print(f"| bound (OpenBLAS shapes): 4 projections + scores + P.V | {bound_shapes*1e3:.1f} ms | {total/bound_shapes/1e9:.1f} |")
print(f"| bound (peak): {total/1e9:.2f} GFLOP at the 2048^3 rate | {bound_peak*1e3:.1f} ms | {rate_sq/1e9:.1f} |")
print()
print(f"largest speed-up over numpy any implementation can have: {t_block/bound_shapes:.2f}x at OpenBLAS's rates on "
      f"the block's shapes, {t_block/bound_peak:.2f}x with every product at the 2048^3 rate (goal 1.5x)")
