#!/usr/bin/env python3
"""A/B of two (or more) builds of one gemm_ratio.py case against dgemm of the
same m x n x k, alternated in one process, same inputs:

    CPU=1 python3 bench/cpu/ab_compare.py THREADS DIR_A,DIR_B CASE_INDEX ROUNDS

DIR_* are `gemm_ratio.py build` directories (made by different tcc builds);
CASE_INDEX the case's position in gemm_ratio.CASES. Prints per round the rates
(GFLOP/s; with CPU=1 GFLOP per CPU-second of the process, all threads) and
each build's ratio to dgemm.
"""
# A/B: old lib vs new lib vs dgemm of the same m,n,k, alternated, at T threads.
import ctypes, json, os, sys, time, math
T = sys.argv[1]; os.environ["TCC_NUM_THREADS"] = T
import numpy as np
from threadpoolctl import threadpool_limits
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); from gemm_ratio import groups
dirs = sys.argv[2].split(","); idx = int(sys.argv[3]); rounds = int(sys.argv[4])
rng = np.random.default_rng(0)
fs = []
for d in dirs:
    man = json.load(open(os.path.join(d, "manifest.json")))
    c = [m for m in man if m["lib"] == f"libg{idx}.so"][0]
    lib = ctypes.CDLL(os.path.join(d, c["lib"])); fs.append(getattr(lib, c["func"]))
sizes = c["sizes"]; ins, out = c["spec"].split("->")
ops = [rng.standard_normal([sizes[ch] for ch in s]) for s in ins.split(",")]
res = np.empty([sizes[ch] for ch in out])
cargs = []
for arr in ops + [res]:
    cargs += [ctypes.c_void_p(arr.ctypes.data), ctypes.c_size_t(arr.size)]
m, n, k, b = groups(c["spec"], sizes)
ga = rng.standard_normal((b * m, k)); gb = rng.standard_normal((k, n))
fl = 2.0 * m * n * k * b
def best(f, r=3):
    t = 1e9
    for _ in range(r):
        s = time.process_time() if CPU else time.perf_counter(); f(); t = min(t, (time.process_time() if CPU else time.perf_counter()) - s)
    return t
CPU = os.environ.get("CPU") == "1"
with threadpool_limits(int(T)):
    calls = [("dgemm", lambda: np.dot(ga, gb))] + [(d, (lambda f: lambda: f(*cargs))(f)) for d, f in zip(dirs, fs)]
    for _, g in calls: g()
    print(c["name"], "load", open("/proc/loadavg").read().split()[0])
    for r in range(rounds):
        ts = {}
        for name, g in calls:
            time.sleep(0.2); ts[name] = best(g)
        print("  ".join(f"{k}: {fl/v/1e9:6.1f}" for k, v in ts.items()), " | ratios/dgemm", " ".join(f"{ts['dgemm']/ts[d]:.3f}" for d in dirs))
