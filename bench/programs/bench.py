#!/usr/bin/env python3
"""Whole programs: tcc against hand-written numpy/opt_einsum, same process, same inputs.

Each program of examples/programs/ is compiled with the tcc Python package
(`tcc.compile`, the CPU back end, `--fuse auto`) and run on the very same arrays as
a numpy implementation of the same equations written as a user would: one
`numpy.einsum(..., optimize=True)` per term or intermediate, `opt_einsum.contract`
for the one-statement networks. The two alternate (--reps rounds); a round times
each side best of --repeat calls. Reported: best against best, and the worst
paired ratio of one round. Results are checked against each other (rel. diff).

Both sides use --threads threads (TCC_NUM_THREADS for tcc, set before import;
threadpoolctl for numpy's BLAS), and each side's calls start after --pause
seconds idle, so that neither runs beside the other's still-spinning threads
(OpenBLAS's spin about 0.1 s after a call).

Reproduce (from the repository root, after the README's setup):
    python3 bench/programs/bench.py --threads 2
"""

import argparse
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--only", default=None, help="comma-separated program names")
ap.add_argument("--pause", type=float, default=0.3,
                help="seconds idle before each side's calls (OpenBLAS's spinning threads stop)")
args = ap.parse_args()
os.environ["TCC_NUM_THREADS"] = str(args.threads)

import numpy as np  # noqa: E402
import opt_einsum  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import tcc  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
es = lambda spec, *xs: np.einsum(spec, *xs, optimize=True)  # noqa: E731


def ccd(T2, Fvv, Foo, Vvvoo, Vvvvv, Voooo, Vovvo, Voovv):
    Fae = Fvv - 0.5 * es("afmn,mnef->ae", T2, Voovv)
    Fmi = Foo + 0.5 * es("efin,mnef->mi", T2, Voovv)
    Wmnij = Voooo + 0.25 * es("efij,mnef->mnij", T2, Voovv)
    Wabef = Vvvvv + 0.25 * es("abmn,mnef->abef", T2, Voovv)
    Wmbej = Vovvo - 0.5 * es("fbjn,mnef->mbej", T2, Voovv)
    R = Vvvoo.copy()
    R += es("aeij,be->abij", T2, Fae) - es("beij,ae->abij", T2, Fae)
    R += es("abjm,mi->abij", T2, Fmi) - es("abim,mj->abij", T2, Fmi)
    R += 0.5 * es("abmn,mnij->abij", T2, Wmnij)
    R += 0.5 * es("efij,abef->abij", T2, Wabef)
    X = es("aeim,mbej->abij", T2, Wmbej)
    R += X - X.transpose(1, 0, 2, 3) - X.transpose(0, 1, 3, 2) + X.transpose(1, 0, 3, 2)
    return {"R": R}


def ccsd(T1, T2, Fov, Fvv, Foo, Voooo, Vooov, Voovv, Vovov, Vovvo, Vovvv, Vvvvv, Vvvvo, Vovoo):
    t1t1 = es("ai,bj->abij", T1, T1)
    taut = T2 + 0.5 * t1t1 - 0.5 * t1t1.transpose(1, 0, 2, 3)
    tau = T2 + t1t1 - t1t1.transpose(1, 0, 2, 3)
    Fae = (Fvv - 0.5 * es("me,am->ae", Fov, T1) + es("fm,mafe->ae", T1, Vovvv)
           - 0.5 * es("afmn,mnef->ae", taut, Voovv))
    Fmi = (Foo + 0.5 * es("ei,me->mi", T1, Fov) + es("en,mnie->mi", T1, Vooov)
           + 0.5 * es("efin,mnef->mi", taut, Voovv))
    Fme = Fov + es("fn,mnef->me", T1, Voovv)
    x = es("ej,mnie->mnij", T1, Vooov)
    Wmnij = Voooo + x - x.transpose(0, 1, 3, 2) + 0.25 * es("efij,mnef->mnij", tau, Voovv)
    y = es("bm,maef->abef", T1, Vovvv)
    Wabef = Vvvvv - y + y.transpose(1, 0, 2, 3) + 0.25 * es("abmn,mnef->abef", tau, Voovv)
    Wmbej = (Vovvo + es("fj,mbef->mbej", T1, Vovvv) - es("bn,mnje->mbej", T1, Vooov)
             - 0.5 * es("fbjn,mnef->mbej", T2, Voovv) - es("fj,bn,mnef->mbej", T1, T1, Voovv))
    R1 = (Fov.T + es("ei,ae->ai", T1, Fae) - es("am,mi->ai", T1, Fmi) + es("aeim,me->ai", T2, Fme)
          - es("fn,naif->ai", T1, Vovov) - 0.5 * es("efim,maef->ai", T2, Vovvv)
          - 0.5 * es("aemn,nmie->ai", T2, Vooov))
    Gbe = Fae - 0.5 * es("bm,me->be", T1, Fme)
    Gmj = Fmi + 0.5 * es("ej,me->mj", T1, Fme)
    R2 = Voovv.transpose(2, 3, 0, 1).copy()
    p = es("aeij,be->abij", T2, Gbe)
    R2 += p - p.transpose(1, 0, 2, 3)
    h = es("abim,mj->abij", T2, Gmj)
    R2 -= h - h.transpose(0, 1, 3, 2)
    R2 += 0.5 * es("abmn,mnij->abij", tau, Wmnij) + 0.5 * es("efij,abef->abij", tau, Wabef)
    g = es("ei,abej->abij", T1, Vvvvo)
    R2 += g - g.transpose(0, 1, 3, 2)
    k = es("am,mbij->abij", T1, Vovoo)
    R2 -= k - k.transpose(1, 0, 2, 3)
    X = es("aeim,mbej->abij", T2, Wmbej) - es("ei,am,mbej->abij", T1, T1, Vovvo)
    R2 += X - X.transpose(1, 0, 2, 3) - X.transpose(0, 1, 3, 2) + X.transpose(1, 0, 3, 2)
    return {"R1": R1, "R2": R2}


def four_index_steps(A, C):
    T1 = es("ap,pqrs->aqrs", C, A)
    T2 = es("bq,aqrs->abrs", C, T1)
    T3 = es("cr,abrs->abcs", C, T2)
    return {"B": es("ds,abcs->abcd", C, T3)}


def four_index_one(A, C):
    return {"B": opt_einsum.contract("ap,bq,cr,ds,pqrs->abcd", C, C, C, C, A)}


def mps_step(L, M1, M2, R, Psi):
    H = opt_einsum.contract("lwx,wzsu,zqtv,rqy,xuvy->lstr", L, M1, M2, R, Psi)
    return {"HPsi": H, "E": np.asarray(np.vdot(Psi, H))}


def attention_block(X, Wq, Wk, Wv, Wo):
    Q = es("bsm,mhe->bhse", X, Wq)
    K = es("btm,mhe->bhte", X, Wk)
    V = es("btm,mhf->bhtf", X, Wv)
    P = np.exp(0.125 * es("bhse,bhte->bhst", Q, K))
    Z = P.sum(axis=3)
    O = es("bhst,bhtf->bhsf", P, V) / Z[..., None]
    return {"Y": es("bhsf,hfn->bsn", O, Wo)}


# name, numpy implementation, scale of the random inputs (attention: keep exp finite)
PROGRAMS = [
    ("ccd", ccd, 1.0),
    ("ccsd", ccsd, 1.0),
    ("four_index_steps", four_index_steps, 1.0),
    ("four_index_one", four_index_one, 1.0),
    ("mps_step", mps_step, 1.0),
    ("attention_block", attention_block, 0.05),
]


def best_of(f, n):
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    only = set(args.only.split(",")) if args.only else None
    rows = []
    rng = np.random.default_rng(0)
    for name, impl, scale in PROGRAMS:
        if only and name not in only:
            continue
        lib = tcc.compile(os.path.join(ROOT, "examples", "programs", name + ".tc"))
        prog = lib.main
        arrays = {a["name"]: scale * rng.standard_normal(a["shape"]) for a in prog.inputs}
        outs = [o["name"] for o in prog.outputs]
        ours, theirs, paired = [], [], []
        with threadpool_limits(args.threads):
            for _ in range(args.reps):
                # OpenBLAS's threads spin for a while after a call (its
                # THREAD_TIMEOUT, about 0.1 s): tcc called right after numpy
                # found a core taken and ran mps_step at half speed (23 against
                # 13 ms alone). Both sides start from idle threads.
                time.sleep(args.pause)
                tn, want = best_of(lambda: impl(**arrays), args.repeat)
                time.sleep(args.pause)
                tt, got = best_of(lambda: prog(**arrays), args.repeat)
                theirs.append(tn)
                ours.append(tt)
                paired.append(tn / tt)
        got = got if isinstance(got, tuple) else (got,)
        err = 0.0
        for o, g in zip(outs, got):
            w = np.asarray(want[o])
            err = max(err, float(np.abs(np.asarray(g) - w).max() / max(np.abs(w).max(), 1e-300)))
        assert err < 1e-8, f"{name}: tcc and numpy differ (rel {err:.2e})"
        rows.append((name, min(theirs), min(ours), min(theirs) / min(ours), min(paired), err, prog.flops))
        print(f"{name}: numpy {min(theirs)*1e3:.1f} ms, tcc {min(ours)*1e3:.1f} ms, "
              f"speed-up {min(theirs)/min(ours):.2f}x (worst paired {min(paired):.2f}x)", file=sys.stderr)
    # The ceiling: tcc's flops at the dgemm rate of this machine and thread
    # count (2048^3, same process) is the least time of any implementation of
    # tcc's order, so numpy's time over it is the largest speed-up possible.
    sq = np.random.default_rng(1).standard_normal((2048, 2048))
    with threadpool_limits(args.threads):
        time.sleep(args.pause)
        t_sq, _ = best_of(lambda: sq @ sq, 3)
    rate = 2.0 * 2048**3 / t_sq
    print(f"\n{args.threads} threads, {args.reps} alternations, best of {args.repeat} each; "
          f"dgemm 2048^3 {rate/1e9:.1f} GFLOP/s\n")
    print("| program | numpy | tcc | speed-up (best/best) | worst paired | tcc GFLOP/s (% of dgemm) "
          "| ceiling: numpy / (tcc flops at dgemm's rate) | rel. diff |")
    print("|---|---|---|---|---|---|---|---|")
    for name, tn, tt, r, w, e, fl in rows:
        print(f"| {name} | {tn*1e3:.1f} ms | {tt*1e3:.1f} ms | {r:.2f}x | {w:.2f}x | {fl/tt/1e9:.1f} "
              f"({100*fl/tt/rate:.0f} %) | {tn*rate/fl:.2f}x | {e:.1e} |")
    sp = [r[3] for r in rows]
    if sp:
        print(f"\nmedian speed-up {statistics.median(sp):.2f}x, worst {min(sp):.2f}x")


main()
