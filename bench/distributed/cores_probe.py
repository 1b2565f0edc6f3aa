"""How many cores does the host really have for compute-bound work?

Runs N copies of a one-thread dgemm (numpy's OpenBLAS, 1024^3, OPENBLAS_NUM_THREADS=1)
at once for a fixed time, for N = 1, 2, 4, ..., and prints each copy's GFLOP/s
against one copy alone. Where the per-copy rate falls to about 0.5-0.7 past some N,
the vCPUs beyond N share physical cores (hyperthreads) or a power budget: the ceiling
of any strong-scaling efficiency measured against one process alone.

    python3 bench/distributed/cores_probe.py [--seconds 2] [--counts 1,2,4,8,12,16]
"""
import argparse
import multiprocessing as mp
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def worker(start, seconds, n, q):
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n))
    b = a.copy()
    a @ b  # warm
    while time.time() < start:
        time.sleep(0.001)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        calls += 1
    q.put(2.0 * n**3 * calls / (time.perf_counter() - t0) / 1e9)


def measure(count, seconds, n):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start = time.time() + 1.5
    ps = [ctx.Process(target=worker, args=(start, seconds, n, q)) for _ in range(count)]
    for p in ps:
        p.start()
    rates = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return rates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--counts", default="1,2,4,6,8,10,12,14,16")
    ap.add_argument("--n", type=int, default=1024)
    args = ap.parse_args()
    alone = None
    print(f"one-thread dgemm {args.n}^3, {args.seconds} s per count, {os.cpu_count()} CPUs visible")
    print("copies  GFLOP/s per copy (mean, min)  total  per copy / alone")
    for c in [int(x) for x in args.counts.split(",")]:
        r = measure(c, args.seconds, args.n)
        mean = sum(r) / len(r)
        alone = alone or mean
        print(f"{c:6d}  {mean:8.2f} {min(r):8.2f}  {sum(r):8.1f}  {mean / alone:6.2f}", flush=True)


if __name__ == "__main__":
    main()
