#!/usr/bin/env python3
"""Issue 18, deliverable 3: tcc's GETT against OpenBLAS dgemm of the same
m x n x k, numpy.einsum(optimize=True) and opt_einsum.contract, alternated in
one process, several rounds (the 2-core machine is shared and noisy, so only
ratios measured in the same round are compared).

Per round and case: dgemm (numpy.dot on contiguous m x k and k x n matrices of
the contraction's group sizes), tcc (the `tcc build` library through ctypes),
numpy.einsum, opt_einsum.contract: each the best of --inner calls. Reported per
case: the median and the worst over rounds of tcc's rate / dgemm's rate and of
tcc's time / the better peer's time, with the load average before the rounds.

    cargo build --release --bin tcc
    python3 bench/cpu/gemm_ratio.py build --dir /tmp/gr
    python3 bench/cpu/gemm_ratio.py run --dir /tmp/gr --threads 2 --rounds 5
"""

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench import tc_source  # noqa: E402

# (name, spec, sizes, kind): "gemm" = GEMM-like (goal: >= 95% of dgemm, never
# slower than numpy.einsum); "short" = a short stride-1 extent (goal: within
# 1.2x of the better of einsum and opt_einsum).
O, V = 24, 96
CASES = [
    ("GEMM 1444x1444x100", "ik,kj->ij", dict(i=1444, j=1444, k=100), "gemm"),
    ("GEMM 100x1444x1444", "ik,kj->ij", dict(i=100, j=1444, k=1444), "gemm"),
    ("GEMM 1444x100x1444", "ik,kj->ij", dict(i=1444, j=100, k=1444), "gemm"),
    ("CCD ladder abef,efij->abij", "abef,efij->abij", dict(a=V, b=V, e=V, f=V, i=O, j=O), "gemm"),
    ("CCD hole ladder abkl,klij->abij", "abkl,klij->abij", dict(a=V, b=V, k=O, l=O, i=O, j=O), "gemm"),
    ("CCD ring akcj,cbik->abij", "akcj,cbik->abij", dict(a=V, b=V, c=V, i=O, j=O, k=O), "gemm"),
    ("W_mbej mbej,aeim->abij", "mbej,aeim->abij", dict(a=V, b=V, e=V, i=O, j=O, m=O), "gemm"),
    ("TN aibj,bjck->acik", "aibj,bjck->acik", dict(a=50, b=50, c=50, i=50, j=50, k=50), "gemm"),
    ("CCSD ladder abcd,cdij->abij", "abcd,cdij->abij", dict(a=80, b=80, c=80, d=80, i=30, j=30), "gemm"),
    # The MPS step's two large GETTs (examples/programs/mps_step.tc, D = 256).
    ("MPS L.Psi lwx,xuvy->lwuvy", "lwx,xuvy->lwuvy", dict(l=256, w=5, x=256, u=2, v=2, y=256), "gemm"),
    ("MPS last lqtsy,rqy->lstr", "lqtsy,rqy->lstr", dict(l=256, q=5, t=2, s=2, y=256, r=256), "gemm"),
    ("sd_t_d1_1 (n=16)", "", 0, "short"),
    ("sd_t_d1_2 (n=16)", "", 1, "short"),
    ("sd_t_d2_1 (n=16)", "", 9, "short"),
    ("sd_t_d2_5 (n=16)", "", 13, "short"),
    ("Fock ki,abkj->abij (o=24)", "ki,abkj->abij", dict(a=V, b=V, i=O, j=O, k=O), "short"),
    ("ring o=24 stride-1 j kbcj,acik->abij", "kbcj,acik->abij", dict(a=V, b=V, c=V, i=O, j=O, k=O), "short"),
]


def triples(k):
    """Case `k` of bench/gpu/cc_suite.py (a triples kernel) with every extent 16."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "gpu"))
    import cc_suite
    name, _, spec, sizes = cc_suite.suite()[k]
    return spec, {c: 16 for c in sizes}


def cases():
    out = []
    for name, spec, sizes, kind in CASES:
        if isinstance(sizes, int):
            spec, sizes = triples(sizes)
        out.append((name, spec, sizes, kind))
    return out


def groups(spec, sizes):
    ins, o = spec.split("->")
    a, b = ins.split(",")
    prod = lambda cs: int(__import__("math").prod(sizes[c] for c in cs))  # noqa: E731
    m = prod([c for c in a if c in o and c not in b])
    n = prod([c for c in b if c in o and c not in a])
    k = prod([c for c in a if c in b and c not in o])
    batch = prod([c for c in a if c in b and c in o])
    return m, n, k, batch


def load_case(folder, c, rng):
    """Random operands of manifest case `c`, its output array, and two calls:
    dgemm of the case's m x k by k x n (numpy.dot on contiguous matrices of the
    group sizes) and the tcc library's function, writing into the output."""
    import numpy as np

    spec, sizes = c["spec"], c["sizes"]
    ins, out = spec.split("->")
    ops = [rng.standard_normal([sizes[ch] for ch in s]) for s in ins.split(",")]
    res = np.empty([sizes[ch] for ch in out])
    m, n, k, batch = groups(spec, sizes)
    ga, gb = rng.standard_normal((batch * m, k)), rng.standard_normal((k, n))
    f = getattr(ctypes.CDLL(os.path.join(folder, c["lib"])), c["func"])
    f.restype = ctypes.c_int
    cargs = []
    for arr in ops + [res]:
        cargs += [ctypes.c_void_p(arr.ctypes.data), ctypes.c_size_t(arr.size)]
    return ops, res, lambda: np.dot(ga, gb), lambda: f(*cargs)


def build(args):
    os.makedirs(args.dir, exist_ok=True)
    man = []
    for x, (name, spec, sizes, kind) in enumerate(cases()):
        if args.only and not any(p in name for p in args.only.split(",")):
            continue
        src = os.path.join(args.dir, f"g{x}.tc")
        open(src, "w").write(tc_source(spec, sizes, "f64"))
        lib = os.path.join(args.dir, f"libg{x}.so")
        cpu = ["--target-cpu", args.target_cpu] if args.target_cpu else []
        subprocess.run([args.tcc, "build", src, "-o", lib] + cpu, check=True, capture_output=True)
        man.append(dict(name=name, spec=spec, sizes=sizes, kind=kind, lib=f"libg{x}.so", func=f"tcc_g{x}_main"))
        print("built", name, file=sys.stderr)
    json.dump(man, open(os.path.join(args.dir, "manifest.json"), "w"), indent=1)


def run(args):
    os.environ["TCC_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import opt_einsum
    from threadpoolctl import threadpool_limits

    man = json.load(open(os.path.join(args.dir, "manifest.json")))
    rng = np.random.default_rng(7)

    def best(f, inner):
        # Wall time, and the process's CPU time (all threads): the second does not
        # count time other processes took the cores, so it shows the kernels'
        # efficiency on a loaded machine (a thread waiting asleep is not counted).
        t, c = float("inf"), float("inf")
        for _ in range(inner):
            s, sc = time.perf_counter(), time.process_time()
            f()
            t, c = min(t, time.perf_counter() - s), min(c, time.process_time() - sc)
        return t, c

    rows = []
    with threadpool_limits(args.threads):
        for c in man:
            if args.only and not any(p in c["name"] for p in args.only.split(",")):
                continue
            spec = c["spec"]
            ops, res, dgemm, tcc = load_case(args.dir, c, rng)
            m, n, k, batch = groups(spec, c["sizes"])
            flops = 2.0 * m * n * k * batch
            calls = {
                "dgemm": dgemm,
                "tcc": tcc,
                "einsum": lambda: np.einsum(spec, *ops, optimize=True),
                "oe": lambda: opt_einsum.contract(spec, *ops),
            }
            for g in calls.values():
                g()
            ref = np.einsum(spec, *ops, optimize=True)
            err = float(np.max(np.abs(res - ref)) / max(np.max(np.abs(ref)), 1e-300))
            load = " / ".join(open("/proc/loadavg").read().split()[:2])
            rounds = []
            for _ in range(args.rounds):
                r = {}
                for key, g in calls.items():
                    # OpenBLAS's threads spin for a while after a call.
                    time.sleep(0.2)
                    r[key], r[key + "_cpu"] = best(g, args.inner)
                rounds.append(r)
            load += " → " + open("/proc/loadavg").read().split()[0]
            vs_dgemm = [r["dgemm"] / r["tcc"] for r in rounds]
            vs_einsum = [r["tcc"] / r["einsum"] for r in rounds]
            vs_best = [r["tcc"] / min(r["einsum"], r["oe"]) for r in rounds]
            cpu_vs_dgemm = [r["dgemm_cpu"] / r["tcc_cpu"] for r in rounds]
            row = dict(name=c["name"], spec=spec, kind=c["kind"], mnk=(m, n, k, batch), load=load, err=err,
                       gf_tcc=flops / min(r["tcc"] for r in rounds) / 1e9,
                       gf_dgemm=flops / min(r["dgemm"] for r in rounds) / 1e9,
                       vs_dgemm=vs_dgemm, vs_einsum=vs_einsum, vs_best=vs_best, cpu_vs_dgemm=cpu_vs_dgemm)
            rows.append(row)
            print(f"{c['name']:40s} load {load} tcc {row['gf_tcc']:6.1f} dgemm {row['gf_dgemm']:6.1f} GF/s | "
                  f"tcc/dgemm rate {' '.join(f'{x:.2f}' for x in vs_dgemm)} | t/einsum "
                  f"{' '.join(f'{x:.2f}' for x in vs_einsum)} | t/best {' '.join(f'{x:.2f}' for x in vs_best)} "
                  f"| cpu-time rate/dgemm {' '.join(f'{x:.2f}' for x in cpu_vs_dgemm)} "
                  f"| err {err:.1e}", file=sys.stderr, flush=True)
    lines = [
        f"Threads {args.threads}; {args.rounds} rounds, best of {args.inner} calls each per round; "
        f"numpy {np.__version__}, opt_einsum {opt_einsum.__version__}.",
        "",
        "| case | spec | m×n×k (batch) | load | tcc GF/s | dgemm GF/s | tcc rate / dgemm, median (worst) | "
        "tcc time / einsum, median (worst) | tcc time / best peer, median (worst) | "
        "CPU-time rate / dgemm, median (worst) | rel. err |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        m, n, k, b = r["mnk"]
        lines.append(
            f"| {r['name']} | `{r['spec']}` | {m}×{n}×{k}" + (f" ({b})" if b > 1 else "") + f" | {r['load']} | "
            f"{r['gf_tcc']:.1f} | {r['gf_dgemm']:.1f} | {statistics.median(r['vs_dgemm']):.2f} ({min(r['vs_dgemm']):.2f}) | "
            f"{statistics.median(r['vs_einsum']):.2f} ({max(r['vs_einsum']):.2f}) | "
            f"{statistics.median(r['vs_best']):.2f} ({max(r['vs_best']):.2f}) | "
            f"{statistics.median(r['cpu_vs_dgemm']):.2f} ({min(r['cpu_vs_dgemm']):.2f}) | {r['err']:.0e} |")
    print("\n".join(lines))
    if any(r["err"] > 1e-9 for r in rows):
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--dir", required=True)
    b.add_argument("--tcc", default="target/release/tcc")
    b.add_argument("--only", default=None)
    b.add_argument("--target-cpu", default=None,
                   help="LLVM CPU of the machine that will run the libraries (tcc build --target-cpu; default: this one)")
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--inner", type=int, default=3)
    r.add_argument("--only", default=None)
    args = ap.parse_args()
    build(args) if args.cmd == "build" else run(args)


if __name__ == "__main__":
    main()
